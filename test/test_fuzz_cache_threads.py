"""Generated fuzz tests (issue 35) for two kinds of trust: the disk cache and realizing from threads.

Cache: a pristine cache (the sqlite database with its program and compile tables, and the kernel libraries in libs/)
is made once; each trial copies it, damages it at random (truncate or flip bytes of the database or of a library,
swap the values of two rows of a table, garbage write-ahead files) and runs a small computation in a fresh
interpreter on the damaged cache. Each must exit cleanly with the values numpy gives: served from the cache, or
recompiled (a damaged entry is a miss, an unreadable database turns the cache off). No SIGBUS, SIGSEGV, exception
or wrong number. The trials come from a fixed seed; FUSEGRAD_FUZZ_CACHE_TRIALS runs more of them.

Threads: random elementwise/reduce graphs over shared lazy inputs, realized from several threads at once, each
checked against numpy (fixed seed; FUSEGRAD_FUZZ_THREAD_TRIALS runs more)."""
from __future__ import annotations
import os, pathlib, random, shutil, sqlite3, subprocess, sys, textwrap, threading
import numpy as np
import pytest
from fusegrad import Tensor

REPO = pathlib.Path(__file__).resolve().parents[1]
CACHE_TRIALS = int(os.environ.get("FUSEGRAD_FUZZ_CACHE_TRIALS", "10"))
THREAD_TRIALS = int(os.environ.get("FUSEGRAD_FUZZ_THREAD_TRIALS", "6"))

# three kernels at least (an elementwise op, a reduce, a broadcast product) and a result that each one changes
PROGRAM = """
    import numpy as np
    from fusegrad import Tensor
    x = Tensor(np.arange(12, dtype=np.float32).reshape(3, 4))
    y = (x * 2 + 1).realize()
    s = y.sum(axis=1).realize()
    print(((s.reshape(3, 1) * Tensor([[1.0, -1.0]])) + y.max()).numpy().tolist())
"""

def _expected() -> list:
    y = np.arange(12, dtype=np.float32).reshape(3, 4) * 2 + 1
    return ((y.sum(axis=1).reshape(3, 1) * np.array([[1.0, -1.0]], np.float32)) + y.max()).tolist()

def _run(cache: pathlib.Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "FUSEGRAD_CACHE": str(cache), "CACHEDB": str(cache / "cache.db"), "DEV": "CPU"}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(PROGRAM)], capture_output=True, text=True, timeout=300,
                          cwd=REPO, env=env)

@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> pathlib.Path:
    cache = tmp_path_factory.mktemp("pristine")
    result = _run(cache)
    assert result.returncode == 0 and eval(result.stdout) == _expected(), result.stderr[-2000:]
    with sqlite3.connect(cache / "cache.db") as conn: conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    for extra in ("cache.db-wal", "cache.db-shm"): (cache / extra).unlink(missing_ok=True)
    assert list((cache / "libs").glob("*.so")), "the run left no kernel library to damage"
    return cache

# ---------------------------------------------------------------- ways to damage a cache

def _truncate(path: pathlib.Path, rng: random.Random) -> str:
    size = path.stat().st_size
    at = rng.randrange(0, max(1, size))
    os.truncate(path, at)
    return f"truncate {path.name} at {at}/{size}"

def _flip(path: pathlib.Path, rng: random.Random) -> str:
    data = bytearray(path.read_bytes())
    spots = [rng.randrange(len(data)) for _ in range(rng.choice((1, 4, 32)))]
    for spot in spots: data[spot] ^= 1 << rng.randrange(8)
    path.write_bytes(bytes(data))
    return f"flip {len(spots)} bits of {path.name}"

def _tables(db: pathlib.Path) -> list[str]:
    with sqlite3.connect(db) as conn:
        return [name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]

def _swap_rows(db: pathlib.Path, rng: random.Random, with_checksums: bool) -> str:
    """Swap the stored values of two rows of one table (and their checksums too, or not): what a mixed-up or
    hand-edited cache looks like."""
    table = rng.choice(_tables(db))
    conn = sqlite3.connect(db, isolation_level=None)
    rows = conn.execute(f"SELECT key, val, checksum FROM {table}").fetchall()
    (k1, v1, c1), (k2, v2, c2) = rng.sample(rows, 2)
    conn.execute(f"UPDATE {table} SET val=?{', checksum=?' if with_checksums else ''} WHERE key=?", (v2, c2, k1) if with_checksums else (v2, k1))
    conn.execute(f"UPDATE {table} SET val=?{', checksum=?' if with_checksums else ''} WHERE key=?", (v1, c1, k2) if with_checksums else (v1, k2))
    conn.close()
    return f"swap two rows of {table}{' with their checksums' if with_checksums else ''}"

def _garbage_wal(cache: pathlib.Path, rng: random.Random) -> str:
    for name, size in (("cache.db-wal", 4096 * rng.randrange(1, 8) + 32), ("cache.db-shm", 32768)):
        (cache / name).write_bytes(rng.randbytes(size))
    return "garbage write-ahead log and shared-memory files"

def damage(cache: pathlib.Path, rng: random.Random) -> str:
    db, libs = cache / "cache.db", sorted((cache / "libs").glob("*.so"))
    kind = rng.choice(["truncate db", "flip db", "swap rows", "swap rows and checksums", "truncate lib", "flip lib", "wal"])
    if kind == "truncate db": return _truncate(db, rng)
    if kind == "flip db": return _flip(db, rng)
    if kind == "swap rows": return _swap_rows(db, rng, with_checksums=False)
    if kind == "swap rows and checksums": return _swap_rows(db, rng, with_checksums=True)
    if kind == "truncate lib": return _truncate(rng.choice(libs), rng)
    if kind == "flip lib": return _flip(rng.choice(libs), rng)
    return _garbage_wal(cache, rng)

@pytest.mark.parametrize("trial", range(CACHE_TRIALS))
def test_damaged_cache_runs_from_cache_or_recompiles(pristine, tmp_path, trial):
    rng = random.Random(3500 + trial)
    cache = tmp_path / "cache"
    shutil.copytree(pristine, cache)
    what = damage(cache, rng)
    result = _run(cache)
    assert result.returncode == 0, f"{what}: exit {result.returncode}\n{result.stderr[-3000:]}"
    assert eval(result.stdout) == _expected(), f"{what}: {result.stdout}"

# ---------------------------------------------------------------- threads

UNARY = [("relu", lambda t: t.relu(), lambda a: np.maximum(a, 0)), ("neg", lambda t: -t, lambda a: -a),
         ("square", lambda t: t * t, lambda a: a * a), ("exp2", lambda t: (t * 0.1).exp2(), lambda a: np.exp2(a * np.float32(0.1)))]
BINARY = [("add", lambda a, b: a + b, lambda a, b: a + b), ("mul", lambda a, b: a * b, lambda a, b: a * b),
          ("max", lambda a, b: a.maximum(b), np.maximum)]
REDUCE = [("sum", lambda t: t.sum(axis=1), lambda a: a.sum(axis=1)), ("max", lambda t: t.max(axis=0), lambda a: a.max(axis=0)),
          ("none", lambda t: t, lambda a: a)]

def _random_graph(rng: random.Random, inputs: list[tuple[Tensor, np.ndarray]]):
    """A random expression over the shared inputs: (fusegrad tensor, numpy value, its description)."""
    t, a = inputs[rng.randrange(len(inputs))]
    text = "in"
    for _ in range(rng.randrange(1, 4)):
        if rng.random() < 0.5:
            name, f, g = rng.choice(UNARY)
            t, a, text = f(t), g(a), f"{name}({text})"
        else:
            other_t, other_a = inputs[rng.randrange(len(inputs))]
            name, f, g = rng.choice(BINARY)
            t, a, text = f(t, other_t), g(a, other_a), f"{name}({text}, in)"
    name, f, g = rng.choice(REDUCE)
    return f(t), g(a), f"{name}({text})"

@pytest.mark.parametrize("trial", range(THREAD_TRIALS))
def test_random_graphs_realized_from_threads_match_numpy(trial):
    rng = random.Random(3600 + trial)
    data = [np.random.default_rng(trial * 10 + i).standard_normal((5, 7)).astype(np.float32) for i in range(3)]
    # shared inputs, lazy (each a computed tensor), so several threads schedule them at once
    inputs = [(Tensor(d) * 1.5 - 0.25, d * np.float32(1.5) - np.float32(0.25)) for d in data]
    graphs = [_random_graph(rng, inputs) for _ in range(6)]
    graphs.append(graphs[0])   # one tensor realized by two threads
    results: list = [None] * len(graphs)
    errors: list = []
    start = threading.Barrier(len(graphs))
    def work(i: int) -> None:
        try:
            start.wait()
            results[i] = graphs[i][0].numpy()
        except BaseException as e: errors.append(e)
    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(graphs))]
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        for t in threads: t.start()
        for t in threads: t.join()
    finally: sys.setswitchinterval(before)
    assert not errors, errors[0]
    for (_, reference, text), got in zip(graphs, results):
        np.testing.assert_allclose(got, reference, rtol=1e-5, atol=1e-6, err_msg=text)
