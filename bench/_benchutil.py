"""Shared plumbing for the bench scripts (bench_jit.py, bench_kernels.py, bench_fusion.py, bench_prefill.py; not a
benchmark itself).

Every measurement runs in a child process (the same script, started with ``--child JSON``), so
that

* fusegrad, tinygrad and PyTorch never share a process: no thread pools, OpenMP runtimes
  (PyTorch ships its own libgomp) or allocator state leak from one peer into another's numbers;
* "cold" really means a new process with empty in-memory caches, and the on-disk caches can be
  pointed at a throwaway directory per child (``FUSEGRAD_CACHE`` / ``CACHEDB``);
* a peer that is missing or crashes only turns its own cells into ``skipped`` / ``error``.

A child prints one line ``@@RESULT@@ {json}`` on stdout; everything else it prints is kept for
error messages.
"""
from __future__ import annotations
import gc, importlib.metadata, json, os, platform, shutil, statistics, subprocess, sys, tempfile, time, traceback
from typing import Any, Callable

RESULT_TAG = "@@RESULT@@"
LOAD_WARN = 1.5

# ---------------------------------------------------------------- timing (used inside children)

def median_time(fn: Callable[[], Any], reps: int, warmup: int = 1, sync: Callable[[], Any] | None = None) -> float:
    """Median wall time of ``fn()`` (then ``sync()``, if given) in seconds over ``reps`` calls after ``warmup`` calls."""
    times = []
    for i in range(warmup + reps):
        start = time.perf_counter()
        fn()
        if sync is not None: sync()
        elapsed = time.perf_counter() - start
        if i >= warmup: times.append(elapsed)
    return statistics.median(times)

def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start

# ---------------------------------------------------------------- child processes

class ChildRunner:
    """Starts ``script --child JSON`` with a chosen environment and returns its result dict."""
    def __init__(self, script: str, threads: int, timeout: float, verbose: bool = False):
        self.script, self.threads, self.timeout, self.verbose = script, threads, timeout, verbose
        self.tmp_root = tempfile.mkdtemp(prefix="fusegrad_bench_")

    def cleanup(self) -> None: shutil.rmtree(self.tmp_root, ignore_errors=True)

    def cache_dir(self, name: str) -> str:
        """A throwaway on-disk cache directory, reused by every child given the same name."""
        path = os.path.join(self.tmp_root, name)
        os.makedirs(path, exist_ok=True)
        return path

    def env_for(self, framework: str, cache: str | None) -> dict[str, str]:
        env = dict(os.environ)
        n = str(self.threads)
        # numpy's BLAS, fusegrad's OpenMP kernels, PyTorch's intra-op pool: all get the same thread count
        env.update(OMP_NUM_THREADS=n, OPENBLAS_NUM_THREADS=n, MKL_NUM_THREADS=n)
        if framework == "tinygrad":
            env.setdefault("DEV", "CPU")
            env.pop("CPU", None)   # tinygrad >= 0.12 rejects CPU=1 ("use DEV=CPU")
        if cache is not None:
            if framework == "fusegrad":
                env["FUSEGRAD_CACHE"] = cache
                env["CACHEDB"] = os.path.join(cache, "fusegrad_cache.db")
            elif framework == "tinygrad":
                env["CACHEDB"] = os.path.join(cache, "tinygrad_cache.db")
        return env

    def run(self, task: dict, framework: str, cache: str | None = None, extra_env: dict | None = None,
            timeout: float | None = None) -> dict:
        """Run one child. The result always has 'ok'; on failure 'error' says why."""
        env = self.env_for(framework, cache)
        if extra_env: env.update({k: str(v) for k, v in extra_env.items()})
        task = dict(task, framework=framework, threads=self.threads)
        cmd = [sys.executable, self.script, "--child", json.dumps(task)]
        start = time.perf_counter()
        try:
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout or self.timeout)
        except subprocess.TimeoutExpired:
            return {"ok": False, "error": f"timed out after {timeout or self.timeout:.0f} s"}
        wall = time.perf_counter() - start
        if self.verbose: sys.stderr.write(f"[child {task.get('task')} {framework}: rc {proc.returncode}, {wall:.1f} s]\n{proc.stderr}")
        for line in reversed(proc.stdout.splitlines()):
            if line.startswith(RESULT_TAG):
                result = json.loads(line[len(RESULT_TAG):])
                result.setdefault("ok", True)
                result["process_s"] = wall
                return result
        tail = (proc.stderr.strip() or proc.stdout.strip()).splitlines()[-4:]
        return {"ok": False, "error": f"rc {proc.returncode}: " + " | ".join(l.strip() for l in tail)}

def child_main(task_json: str, tasks: dict[str, Callable[[dict], dict]]) -> None:
    """Entry point of a child: run ``tasks[task['task']](task)`` and print its result line."""
    task = json.loads(task_json)
    try:
        result = tasks[task["task"]](task)
        result.setdefault("ok", True)
    except SkipPeer as e:
        result = {"ok": False, "skipped": True, "error": str(e)}
    except Exception as e:   # report, don't crash: the parent prints the message in the table
        tb = traceback.format_exception(e)
        result = {"ok": False, "error": f"{type(e).__name__}: {e}".strip()[:400], "traceback": "".join(tb[-3:])[-1500:]}
    gc.collect()
    sys.stdout.flush()
    print(RESULT_TAG + json.dumps(result), flush=True)

class SkipPeer(Exception):
    """Raised in a child when a peer isn't available (not installed, no compiler, ...)."""

def import_torch(threads: int):
    """PyTorch with ``threads`` intra-op threads, or SkipPeer if it isn't importable."""
    try: import torch
    except ImportError as e: raise SkipPeer(f"PyTorch not importable ({e})")
    torch.set_num_threads(threads)
    return torch

def import_framework(name: str):
    """(module, Tensor, TinyJit, GlobalCounters, nn, Adam, get_parameters, Device) of fusegrad or tinygrad."""
    try:
        if name == "fusegrad":
            import fusegrad as fw
            from fusegrad import nn
            from fusegrad.nn.optim import Adam
            from fusegrad.nn.state import get_parameters
        elif name == "tinygrad":
            import tinygrad as fw
            from tinygrad import nn
            from tinygrad.nn.optim import Adam
            from tinygrad.nn.state import get_parameters
        else: raise ValueError(name)
    except ImportError as e: raise SkipPeer(f"{name} not importable ({e})")
    if name == "tinygrad":
        if shutil.which(os.environ.get("CC", "clang")) is None:
            raise SkipPeer("tinygrad's CPU device compiles with clang, which is not installed (apt-get install clang)")
    return fw, fw.Tensor, fw.TinyJit, fw.GlobalCounters, nn, Adam, get_parameters, fw.Device

def device_sync(Device) -> Callable[[], None]:
    dev = Device[Device.DEFAULT]
    return dev.synchronize

def fusegrad_kernel_time(build: Callable[[], Any], reps: int) -> tuple[float, int]:
    """Median of the compiled kernel calls only (GlobalCounters.time_sum_s after ExecItem.run(wait=True)) over
    ``reps`` runs after one untimed run, for the graph ``build()`` returns, scheduled and lowered untimed.
    Returns (seconds, kernels)."""
    from fusegrad import GlobalCounters
    from fusegrad.engine.realize import lower_schedule_item
    items = [lower_schedule_item(si) for si in build().schedule()]
    for ei in items:
        for b in ei.bufs: b.ensure_allocated()
    times = []
    for i in range(reps + 1):
        GlobalCounters.reset()
        for ei in items: ei.run(wait=True)
        if i: times.append(GlobalCounters.time_sum_s)
    return statistics.median(times), len(items)

def torch_gpt2(torch, c: dict) -> type:
    """The GPT-2 module class, written in PyTorch, for config ``c`` (layers, dim, heads, vocab, context): pre-norm
    blocks with a KV cache, ``scaled_dot_product_attention``, tanh GELU, and a tied output projection of the last
    position only, as ``fusegrad.examples.gpt2`` does. ``GPT2()(tokens, start_pos)`` returns the logits."""
    F = torch.nn.functional
    dim, heads, head_dim, ctx = c["dim"], c["heads"], c["dim"] // c["heads"], c["context"]

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1, self.ln_2 = torch.nn.LayerNorm(dim), torch.nn.LayerNorm(dim)
            self.c_attn, self.c_proj = torch.nn.Linear(dim, 3 * dim), torch.nn.Linear(dim, dim)
            self.c_fc, self.mlp_proj = torch.nn.Linear(dim, 4 * dim), torch.nn.Linear(4 * dim, dim)
            self.register_buffer("cache", torch.zeros(2, 1, heads, ctx, head_dim), persistent=False)
        def forward(self, x, start_pos: int):
            bsz, seqlen, _ = x.shape
            q, k, v = self.c_attn(self.ln_1(x)).split(dim, dim=-1)
            q, k, v = [z.view(bsz, seqlen, heads, head_dim).transpose(1, 2) for z in (q, k, v)]
            self.cache[0, :, :, start_pos:start_pos + seqlen] = k
            self.cache[1, :, :, start_pos:start_pos + seqlen] = v
            keys, values = self.cache[0, :, :, :start_pos + seqlen], self.cache[1, :, :, :start_pos + seqlen]
            attn = F.scaled_dot_product_attention(q, keys, values, is_causal=seqlen > 1)
            h = x + self.c_proj(attn.transpose(1, 2).reshape(bsz, seqlen, dim))
            return h + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(h)), approximate="tanh"))

    class GPT2(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = torch.nn.Embedding(c["vocab"], dim), torch.nn.Embedding(ctx, dim)
            self.h = torch.nn.ModuleList(Block() for _ in range(c["layers"]))
            self.ln_f = torch.nn.LayerNorm(dim)
        def forward(self, tokens, start_pos: int):
            x = self.wte(tokens) + self.wpe.weight[start_pos:start_pos + tokens.shape[1]]
            for block in self.h: x = block(x, start_pos)
            return self.ln_f(x[:, -1]) @ self.wte.weight.T   # tied output projection, last position only

    return GPT2

def cache_entries(path: str) -> str:
    """What a throwaway cache dir holds: rows per sqlite table and shared libraries (to show that the
    cold run really filled the cache the second process reads)."""
    import sqlite3
    parts = []
    for root, _dirs, files in os.walk(path):
        for f in files:
            full = os.path.join(root, f)
            if f.endswith(".db"):
                try:
                    con = sqlite3.connect(full)
                    tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")]
                    for t in tables:
                        count = con.execute('SELECT COUNT(*) FROM "' + t.replace('"', '""') + '"').fetchone()[0]
                        parts.append(f"{t}: {count} rows")
                    con.close()
                except sqlite3.Error as e: parts.append(f"{f}: {e}")
    libs = sum(1 for _root, _dirs, files in os.walk(path) for f in files if f.endswith(".so"))
    if libs: parts.append(f"{libs} .so files")
    return ", ".join(parts) or "empty"

# ---------------------------------------------------------------- output

def package_version(name: str) -> str | None:
    try: return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError: return None

def fusegrad_revision() -> str:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        rev = subprocess.run(["git", "-C", root, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=5).stdout.strip()
        dirty = subprocess.run(["git", "-C", root, "status", "--porcelain", "--", "fusegrad"], capture_output=True, text=True, timeout=5).stdout.strip()
        return (rev or "?") + (" + uncommitted changes in fusegrad/" if dirty else "")
    except (OSError, subprocess.SubprocessError): return "?"

def print_header(title: str, threads: int, extra: list[str] = ()) -> None:
    versions = []
    for name in ("numpy", "torch", "tinygrad"):
        v = package_version(name)
        versions.append(f"{name} {v}" if v else f"{name} not installed")
    print(title)
    print(f"  python {platform.python_version()}, fusegrad git {fusegrad_revision()}, " + ", ".join(versions))
    cc = os.environ.get("CC", "cc")
    print(f"  cpus {os.cpu_count()} ({platform.machine()}), {threads} thread(s) per peer (--threads: OMP_NUM_THREADS, "
          f"torch.set_num_threads, OPENBLAS_NUM_THREADS), fusegrad CC={cc}, clang for tinygrad: "
          f"{'yes' if shutil.which(os.environ.get('CC', 'clang')) else 'NOT FOUND (tinygrad rows will be skipped)'}")
    if hasattr(os, "getloadavg"):
        load = os.getloadavg()
        warn = load[0] > LOAD_WARN
        print(f"  load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} (1/5/15 min)"
              + (f"  -- WARNING: load > {LOAD_WARN}, other processes are using the CPUs; numbers will be noisy" if warn else ""))
    for line in extra: print(f"  {line}")

def print_table(title: str, header: list[str], rows: list[list[str]], notes: list[str] = ()) -> None:
    widths = [max(len(str(r[i])) for r in [header] + rows) for i in range(len(header))]
    line = lambda r: "  ".join(str(c).ljust(w) if i == 0 else str(c).rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
    print(f"\n== {title}")
    print(line(header))
    print("  ".join("-" * w for w in widths))
    for r in rows: print(line(r))
    for n in notes: print(f"   note: {n}")
    sys.stdout.flush()

def status(result: dict, errors: list[str], label: str) -> str:
    """Short 'skipped' / 'error' cell text for a failed child; the full message goes to ``errors`` (printed as notes)."""
    kind = "skipped" if result.get("skipped") else "error"
    errors.append(f"{label} {kind}: {result.get('error', '?')}")
    return f"{kind} (see note)"

def fmt(x: float | None, scale: float = 1.0, digits: int = 2) -> str:
    return "-" if x is None else f"{x * scale:.{digits}f}"

def ratio(a: float | None, b: float | None) -> str:
    """a / b as '1.23x' ('-' if either is missing)."""
    if a is None or b is None or b == 0: return "-"
    return f"{a / b:.2f}x"

def report_load_after(start_load: float | None) -> None:
    if hasattr(os, "getloadavg"):
        load = os.getloadavg()[0]
        print(f"load average (1 min) at the end: {load:.2f}" + (f"  -- WARNING: > {LOAD_WARN}, numbers are noisy" if load > LOAD_WARN else ""))

def run_sections(title: str, script: str, args: Any, tasks: dict[str, Callable[[dict], dict]], sections: dict[str, Callable]) -> None:
    """The main() of a bench script: run ``args.only`` sections, each measurement in a child
    process of ``script``; a failing section is reported and the others still run."""
    if args.child: return child_main(args.child, tasks)
    start = time.perf_counter()
    print_header(title, args.threads, [f"sections {' '.join(args.only)}; peers {' '.join(args.peers)}; every measurement in a fresh child process"])
    runner = ChildRunner(os.path.abspath(script), args.threads, args.timeout, args.verbose)
    failed = []
    try:
        for name in args.only:
            try: sections[name](args, runner)
            except Exception as e:
                failed.append(name)
                print(f"\n== section {name!r} FAILED: {type(e).__name__}: {e}\n" + "".join(traceback.format_exception(e)[-3:]).rstrip())
    finally: runner.cleanup()
    print(f"\ntotal bench time {time.perf_counter() - start:.1f} s" + (f"; FAILED sections: {', '.join(failed)}" if failed else ""))
    report_load_after(None)
    if failed: sys.exit(1)
