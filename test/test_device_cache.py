"""The sqlite disk cache (fusegrad/device.py diskcache_get/put): plain data only (bytes or JSON, never a pickle),
checksummed rows, and a damaged database or entry means recomputing with a warning, never a crash or code
execution. Each case runs in a fresh interpreter with its own cache directory (CACHEDB / FUSEGRAD_CACHE)."""
from __future__ import annotations
import os, pathlib, sqlite3, subprocess, sys, textwrap
import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]

def run_with_cache(cache: pathlib.Path, code: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "FUSEGRAD_CACHE": str(cache), "CACHEDB": str(cache / "cache.db"), "DEV": "CPU"}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=300, cwd=REPO, env=env)

COMPUTE = """
    from fusegrad import Tensor
    print(((Tensor([1.0, 2.0, 3.0]) * 2 + 1).sum() * Tensor([[1.0], [2.0]])).tolist())
"""
EXPECTED = "[[15.0], [30.0]]"

def test_planted_pickle_entry_never_runs(tmp_path):
    marker = tmp_path / "ran"
    result = run_with_cache(tmp_path, f"""
        import os, pickle, sqlite3, warnings
        from fusegrad.device import diskcache_get, diskcache_put, CACHE_VERSION
        class Evil:
            def __reduce__(self): return (os.system, ("touch {marker}",))
        diskcache_put("compile", "k", b"a library")
        conn = sqlite3.connect("{tmp_path / 'cache.db'}", isolation_level=None)
        conn.execute(f"UPDATE compile_{{CACHE_VERSION}} SET val=? WHERE key='k'", (pickle.dumps(Evil()),))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            print("planted:", diskcache_get("compile", "k"))
        print("warned:", any("damaged" in str(w.message) for w in caught))
    """)
    assert result.returncode == 0, result.stderr[-2000:]
    assert not marker.exists()
    assert "planted: None" in result.stdout and "warned: True" in result.stdout

def test_values_are_plain_data(tmp_path):
    result = run_with_cache(tmp_path, """
        from fusegrad.device import diskcache_get, diskcache_put
        diskcache_put("t", "bytes", b"\\x00\\x01lib")
        diskcache_put("t", "json", {"opts": [["UPCAST", 0, 4], ["TC", 0, [1, 2]]], "x": 1.5, "none": None})
        print(diskcache_get("t", "bytes"), diskcache_get("t", "json"), diskcache_get("t", "missing"))
        try: diskcache_put("t", "object", object())
        except TypeError as e: print("TypeError:", "JSON" in str(e))
    """)
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.splitlines()
    assert lines[0] == "b'\\x00\\x01lib' {'opts': [['UPCAST', 0, 4], ['TC', 0, [1, 2]]], 'x': 1.5, 'none': None} None"
    assert lines[1] == "TypeError: True"

def test_garbage_database_file_falls_back_to_recomputing(tmp_path):
    (tmp_path / "cache.db").write_bytes(os.urandom(4096))
    result = run_with_cache(tmp_path, COMPUTE)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == EXPECTED
    assert "unreadable" in result.stderr

def test_truncated_database_file_falls_back_to_recomputing(tmp_path):
    first = run_with_cache(tmp_path, COMPUTE)
    assert first.returncode == 0 and first.stdout.strip() == EXPECTED, first.stderr[-2000:]
    db = tmp_path / "cache.db"
    with sqlite3.connect(db) as conn:   # fold the write-ahead log into the file, so the file holds the entries
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    for extra in ("cache.db-wal", "cache.db-shm"): (tmp_path / extra).unlink(missing_ok=True)
    size = db.stat().st_size
    assert size > 8192
    os.truncate(db, size // 2)
    again = run_with_cache(tmp_path, COMPUTE)
    assert again.returncode == 0, again.stderr[-2000:]
    assert again.stdout.strip() == EXPECTED

def test_damaged_beam_entry_is_searched_again(tmp_path):
    # a well-formed row whose JSON isn't an action list (e.g. written by another version): BEAM searches again
    result = run_with_cache(tmp_path, """
        from fusegrad.codegen.opt.search import _opts_from_cache
        from fusegrad.codegen.opt import Opt, OptOps
        print(_opts_from_cache([["UPCAST", 0, 4], ["TC", 0, [1, 2]]]) == [Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.TC, 0, (1, 2))])
        print([_opts_from_cache(bad) for bad in (None, b"bytes", [["NOPE", 0, 1]], [["UPCAST", "x", 1]], [["UPCAST", 0]])])
    """)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.splitlines() == ["True", "[None, None, None, None, None]"]

# ---------------------------------------------------------------- damaged entries and unusable locations (issue 35)

def _warm_cache(cache: pathlib.Path) -> None:
    first = run_with_cache(cache, COMPUTE)
    assert first.returncode == 0 and first.stdout.strip() == EXPECTED, first.stderr[-2000:]

def _swap_first_two_rows(db: pathlib.Path, table_prefix: str) -> None:
    """Swap the values of two rows of a table, checksums included (each row still matches a value-only checksum)."""
    with sqlite3.connect(db) as conn:
        table = next(name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type='table'") if name.startswith(table_prefix))
        (k1, v1, c1), (k2, v2, c2) = conn.execute(f"SELECT key, val, checksum FROM {table} ORDER BY key").fetchall()[:2]
        conn.execute(f"UPDATE {table} SET val=?, checksum=? WHERE key=?", (v2, c2, k1))
        conn.execute(f"UPDATE {table} SET val=?, checksum=? WHERE key=?", (v1, c1, k2))

@pytest.mark.parametrize("table", ["program_", "compile_"])
def test_swapped_rows_are_recompiled_and_rewritten(tmp_path, table):
    # a swapped program row ran one kernel's source on another's buffers (wrong numbers or SIGSEGV); a swapped
    # compile row loaded a library without the kernel's symbol
    _warm_cache(tmp_path)
    _swap_first_two_rows(tmp_path / "cache.db", table)
    again = run_with_cache(tmp_path, COMPUTE)
    assert again.returncode == 0, again.stderr[-2000:]
    assert again.stdout.strip() == EXPECTED
    assert "damaged" in again.stderr
    third = run_with_cache(tmp_path, COMPUTE)   # the recompute rewrote both entries
    assert third.returncode == 0 and third.stdout.strip() == EXPECTED and "damaged" not in third.stderr, third.stderr[-2000:]

def test_truncated_library_file_is_rewritten(tmp_path):
    _warm_cache(tmp_path)
    libraries = sorted((tmp_path / "libs").glob("*.so"))
    assert libraries
    for library in libraries: os.truncate(library, library.stat().st_size // 3)
    again = run_with_cache(tmp_path, COMPUTE)
    assert again.returncode == 0, again.stderr[-2000:]
    assert again.stdout.strip() == EXPECTED and "doesn't match its hash" in again.stderr
    import hashlib
    for library in libraries: assert hashlib.sha256(library.read_bytes()).hexdigest() == library.stem

def test_cache_folder_that_is_a_file_runs_without_the_cache(tmp_path):
    folder = tmp_path / "cache"
    folder.write_text("not a folder")
    result = run_with_cache(folder, COMPUTE)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == EXPECTED
    assert "can't be used" in result.stderr and "Traceback" not in result.stderr

@pytest.mark.parametrize("location", ["under_a_file", "proc"])
def test_cache_location_that_cant_be_created_runs_without_the_cache(tmp_path, location):
    # XDG_CACHE_HOME names where ~/.cache would be; no FUSEGRAD_CACHE or CACHEDB. /proc refuses new folders even to root.
    if location == "under_a_file":
        (tmp_path / "file").write_text("x")
        xdg = str(tmp_path / "file" / "cache")
    else: xdg = "/proc/fusegrad-test-cache"
    env = {k: v for k, v in os.environ.items() if k not in ("FUSEGRAD_CACHE", "CACHEDB")}
    env.update(XDG_CACHE_HOME=xdg, DEV="CPU")
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(COMPUTE)], capture_output=True, text=True, timeout=300, cwd=REPO, env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == EXPECTED
    assert result.stderr.count("RuntimeWarning") == 1, result.stderr   # one warning, not one per kernel

def test_database_that_fails_when_opened_in_wal_mode_is_turned_off(tmp_path):
    # a file with a valid sqlite header and garbage after it: the first statement (the WAL pragma) fails
    _warm_cache(tmp_path)
    with sqlite3.connect(tmp_path / "cache.db") as conn: conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    for extra in ("cache.db-wal", "cache.db-shm"): (tmp_path / extra).unlink(missing_ok=True)
    db = tmp_path / "cache.db"
    data = bytearray(db.read_bytes())
    data[100:] = bytes((i * 7 + 3) % 251 for i in range(len(data) - 100))
    db.write_bytes(bytes(data))
    again = run_with_cache(tmp_path, COMPUTE)
    assert again.returncode == 0, again.stderr[-2000:]
    assert again.stdout.strip() == EXPECTED
