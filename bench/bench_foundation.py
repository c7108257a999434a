#!/usr/bin/env python3
"""Foundation benchmarks: fusegrad next to numpy and PyTorch, in one process, one table each.

    python bench/bench_foundation.py                 # defaults: 16M floats, runs in well under a minute
    python bench/bench_foundation.py --size 4000000 --reps 11 --only elementwise reduce
    python bench/bench_foundation.py --help

1. elementwise chains over N float32 (one fused fusegrad kernel each) — GB/s and ratios.
2. a full sum of N float32 — GB/s, ratios and the error of each result against a float64 sum.
3. realize cost of a small MLP-like graph: cold (new kernels: schedule + codegen + cc),
   disk-cache hit (codegen again, binary from the on-disk cache) and method-cache hit
   (what a training loop pays per step), split into phases.

Timings are medians of ``--reps`` repetitions after ``--warmup`` untimed ones (time.perf_counter).
Nothing here asserts on timings; the "check" columns only print whether results agree.
See bench/README.md for what every column means.
"""
from __future__ import annotations
import argparse, atexit, contextlib, gc, os, platform, random, shutil, statistics, sys, tempfile, time

# ---------------------------------------------------------------- arguments and environment (before fusegrad is imported)

def parse_args(argv=None) -> argparse.Namespace:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
  p.add_argument("--size", type=int, default=1 << 24, help="elements (float32) for the elementwise and reduce benches")
  p.add_argument("--reps", type=int, default=7, help="timed repetitions per measurement (the median is reported)")
  p.add_argument("--warmup", type=int, default=2, help="untimed repetitions before timing")
  p.add_argument("--mlp-dim", type=int, default=64, help="width of the square tensors in the compile bench")
  p.add_argument("--mlp-layers", type=int, default=3, help="matmul layers in the compile bench graph")
  p.add_argument("--compile-reps", type=int, default=3, help="cold compiles (each with new kernels) in the compile bench")
  p.add_argument("--cached-reps", type=int, default=15, help="method-cache-hit realizes in the compile bench")
  p.add_argument("--torch-threads", type=int, default=2, help="torch.set_num_threads value")
  p.add_argument("--no-torch", action="store_true", help="leave PyTorch out even if it is importable")
  p.add_argument("--only", nargs="+", choices=["elementwise", "reduce", "compile"], default=["elementwise", "reduce", "compile"],
                 help="run only these sections")
  p.add_argument("--keep-cache", action="store_true",
                 help="use fusegrad's normal on-disk cache; by default a throwaway cache dir is used so cold compiles are "
                      "real and your cache is left untouched")
  args = p.parse_args(argv)
  if args.size < 1 or args.reps < 1 or args.warmup < 0 or args.mlp_dim < 1 or args.mlp_layers < 1 or args.compile_reps < 1 \
     or args.cached_reps < 1:
    p.error("sizes and repetition counts must be positive (warmup may be 0)")
  return args

ARGS = parse_args()
if not ARGS.keep_cache:
  _tmp_cache = tempfile.mkdtemp(prefix="fusegrad_bench_cache_")
  os.environ["FUSEGRAD_CACHE"] = _tmp_cache
  os.environ["CACHEDB"] = os.path.join(_tmp_cache, "cache.db")
  atexit.register(shutil.rmtree, _tmp_cache, ignore_errors=True)

import numpy as np
import fusegrad
import fusegrad.codegen, fusegrad.engine.realize
from fusegrad import Tensor, GlobalCounters, Device
from fusegrad.engine.realize import lower_schedule_item, method_cache
from _benchutil import print_table   # shared with the other bench scripts

torch = None
TORCH_NOTE = ""
if ARGS.no_torch: TORCH_NOTE = "PyTorch left out (--no-torch)"
else:
  try:
    import torch  # type: ignore[no-redef]
    torch.set_num_threads(ARGS.torch_threads)
  except ImportError as e:
    torch, TORCH_NOTE = None, f"PyTorch not importable ({e}); its rows are skipped"

# ---------------------------------------------------------------- helpers

def median_time(fn, reps: int = ARGS.reps, warmup: int = ARGS.warmup, setup=None) -> float:
  """Median wall time of ``fn()`` in seconds. ``setup()`` runs untimed before each call; if ``fn``
  returns a float, that value is used as the time instead of the wall clock around it."""
  times = []
  for i in range(warmup + reps):
    if setup is not None: setup()
    gc.collect()
    start = time.perf_counter()
    measured = fn()
    elapsed = time.perf_counter() - start
    if i >= warmup: times.append(measured if isinstance(measured, float) else elapsed)
  return statistics.median(times)

def fmt_ms(s: float | None) -> str: return "-" if s is None else f"{s*1e3:10.3f}"

def rel_err(x, ref) -> float:
  x, ref = np.asarray(x, dtype=np.float64), np.asarray(ref, dtype=np.float64)
  return float(np.max(np.abs(x - ref) / np.maximum(np.abs(ref), 1e-30)))

def fusegrad_kernel_time(build) -> float:
  """Build a fresh lazy graph, schedule and lower it untimed, then time only the kernel run(s),
  as GlobalCounters.time_sum_s sees them (ExecItem.run(wait=True) times the compiled call)."""
  out = build()
  exec_items = [lower_schedule_item(item) for item in out.schedule()]
  for ei in exec_items:
    for b in ei.bufs: b.ensure_allocated()
  GlobalCounters.reset()
  for ei in exec_items: ei.run(wait=True)
  KERNEL_COUNT[0] = GlobalCounters.kernel_count
  return GlobalCounters.time_sum_s

KERNEL_COUNT = [0]   # kernels in the last fusegrad_kernel_time call
def kernel_label() -> str: return "fusegrad kernel only" + (f" ({KERNEL_COUNT[0]} kernels)" if KERNEL_COUNT[0] != 1 else "")

def fusegrad_e2e_time(build) -> float:
  """Wall time of building a fresh lazy graph and realizing it (schedule + method-cache lookup + run)."""
  start = time.perf_counter()
  build().realize()
  return time.perf_counter() - start

# ---------------------------------------------------------------- 1 and 2: bandwidth benches

def bandwidth_rows(nbytes: int, results: list[tuple[str, float | None, str]]) -> list[list[str]]:
  """results: (name, seconds or None, check). Ratios are throughput ratios fusegrad ÷ that row
  (>1: fusegrad is faster), for the kernel-only and end-to-end fusegrad numbers."""
  fg_kernel, fg_e2e = results[0][1], results[1][1]
  rows = []
  for name, t, check in results:
    if t is None:
      rows.append([name, "-", "-", "-", "-", check])
      continue
    rows.append([name, fmt_ms(t), f"{nbytes / t / 1e9:7.2f}", f"{t / fg_kernel:6.2f}x", f"{t / fg_e2e:6.2f}x", check])
  return rows

BW_HEADER = ["peer", "median ms", "GB/s", "fg-kernel ÷ peer", "fg-e2e ÷ peer", "check"]

def bench_elementwise(an, bn, cn, a, b, c, ta, tb, tc) -> None:
  n = an.size
  chains = [
    ("exp(relu(a*b+c))", lambda x, y, z: (x * y + z).relu().exp(), lambda x, y, z: np.exp(np.maximum(x * y + z, 0)),
     lambda x, y, z: torch.exp(torch.relu(x * y + z))),
    ("sqrt((a+b)*c)+1", lambda x, y, z: ((x + y) * z).sqrt() + 1, lambda x, y, z: np.sqrt((x + y) * z) + 1,
     lambda x, y, z: torch.sqrt((x + y) * z) + 1),
  ]
  nbytes = 4 * n * 4   # three float32 inputs read, one float32 output written
  for title, fg_fn, np_fn, torch_fn in chains:
    ref = np_fn(an, bn, cn)
    fg_out = fg_fn(a, b, c).numpy()
    t_kernel = median_time(lambda: fusegrad_kernel_time(lambda: fg_fn(a, b, c)))
    results = [(kernel_label(), t_kernel, f"err {rel_err(fg_out, ref):.1e}"),
               ("fusegrad realize (e2e)", median_time(lambda: fusegrad_e2e_time(lambda: fg_fn(a, b, c))), ""),
               ("numpy", median_time(lambda: np_fn(an, bn, cn)), "reference")]
    del fg_out
    if torch is not None:
      t_out = torch_fn(ta, tb, tc).numpy()
      results.append((f"torch ({torch.get_num_threads()} threads)", median_time(lambda: torch_fn(ta, tb, tc)), f"err {rel_err(t_out, ref):.1e}"))
      del t_out
    else: results.append(("torch", None, "skipped"))
    notes = [f"GB/s counts {nbytes/2**20:.0f} MiB per call (3 inputs read + 1 output written, {n:,} float32 each)",
             "fg-kernel / fg-e2e ÷ peer: peer time ÷ fusegrad time, i.e. fusegrad throughput relative to the peer (>1: fusegrad faster)",
             "fusegrad kernel only = GlobalCounters.time_sum_s of the compiled call(s); e2e = build lazy graph + schedule + cached lookup + run"]
    if torch is None: notes.append(TORCH_NOTE)
    print_table(f"1. elementwise {title}, {n:,} float32", BW_HEADER, bandwidth_rows(nbytes, results), notes)

def bench_reduce(an, a, ta) -> None:
  n = an.size
  ref = float(np.sum(an, dtype=np.float64))
  fg_val = a.sum().item()
  t_kernel = median_time(lambda: fusegrad_kernel_time(lambda: a.sum()))
  results = [(kernel_label(), t_kernel, f"err {rel_err(fg_val, ref):.1e}"),
             ("fusegrad realize (e2e)", median_time(lambda: fusegrad_e2e_time(lambda: a.sum())), ""),
             ("numpy", median_time(lambda: an.sum()), f"err {rel_err(an.sum(), ref):.1e}")]
  if torch is not None:
    results.append((f"torch ({torch.get_num_threads()} threads)", median_time(lambda: ta.sum()), f"err {rel_err(ta.sum().item(), ref):.1e}"))
  else: results.append(("torch", None, "skipped"))
  nbytes = 4 * n + 4
  notes = [f"GB/s counts {nbytes/2**20:.0f} MiB per call ({n:,} float32 read, one written); "
           "err = relative error of the float32 result against a float64 sum (printed, not asserted)",
           "fg-kernel / fg-e2e ÷ peer: peer time ÷ fusegrad time (>1: fusegrad faster)"]
  if torch is None: notes.append(TORCH_NOTE)
  print_table(f"2. reduce sum(a), {n:,} float32", BW_HEADER, bandwidth_rows(nbytes, results), notes)

# ---------------------------------------------------------------- 3: schedule + compile vs cached

class PhaseTimer:
  """Times the stages of ``Tensor.realize`` without changing fusegrad: for the duration of a
  ``with`` block, the functions realize goes through are replaced by timing wrappers."""
  def __init__(self) -> None:
    self.t: dict[str, float] = {}
    self.n: dict[str, int] = {}
  def add(self, key: str, dt: float) -> None:
    self.t[key] = self.t.get(key, 0.0) + dt
    self.n[key] = self.n.get(key, 0) + 1
  def wrap(self, key: str, fn):
    def wrapped(*a, **kw):
      start = time.perf_counter()
      try: return fn(*a, **kw)
      finally: self.add(key, time.perf_counter() - start)
    return wrapped
  @contextlib.contextmanager
  def patched(self, device_name: str):
    dev = Device[device_name]
    # (owner, attribute, timer key); getattr on the owner at call time is how fusegrad finds each of these:
    # get_runner imports get_program from fusegrad.codegen when called, run_schedule calls the module-level
    # lower_schedule_item, CompiledRunner calls device.compiler.compile_cached / device.runtime
    targets = [(Tensor, "schedule", "schedule"), (fusegrad.engine.realize, "lower_schedule_item", "lower"),
               (fusegrad.engine.realize.ExecItem, "run", "run"), (fusegrad.codegen, "get_program", "codegen"),
               (dev.compiler, "compile", "cc"), (dev.compiler, "compile_cached", "compile_cached"), (dev, "runtime", "load")]
    saved = []
    for owner, attr, key in targets:
      had_own = attr in vars(owner)
      saved.append((owner, attr, had_own, vars(owner).get(attr)))
      setattr(owner, attr, self.wrap(key, getattr(owner, attr)))   # a plain function: on a class it binds like the method
    try: yield self
    finally:
      for owner, attr, had_own, value in reversed(saved):
        if had_own: setattr(owner, attr, value)
        else: delattr(owner, attr)

def mlp_graph(x: Tensor, weights: list[tuple[Tensor, Tensor]], k: float) -> Tensor:
  """A small MLP-like chain; the constant ``k`` appears in every layer so a new ``k`` means new kernels."""
  h = x
  for i, (w, b) in enumerate(weights):
    h = h @ w + b * k
    h = h.relu() if i < len(weights) - 1 else h
  return h.log_softmax(-1).mean() * k

def timed_realize(x, weights, k, device: str) -> dict[str, float]:
  """Build a fresh graph and ``realize()`` it, split into phases (the real realize path, timed from outside)."""
  pt = PhaseTimer()
  t0 = time.perf_counter()
  out = mlp_graph(x, weights, k)
  t1 = time.perf_counter()
  with pt.patched(device): out.realize()
  t2 = time.perf_counter()
  out.item()                       # reads the scalar back (not counted)
  g = lambda key: pt.t.get(key, 0.0)
  lower_rest = g("lower") - g("codegen") - g("compile_cached") - g("load")
  phases = {"graph build (Tensor ops)": t1 - t0, "schedule (Tensor.schedule)": g("schedule"), "codegen (get_program)": g("codegen"),
            "cc (C compiler)": g("cc"), "disk cache lookup/store": g("compile_cached") - g("cc"), "load (dlopen)": g("load"),
            "lowering, rest (method cache etc.)": lower_rest, "run kernels (ExecItem.run)": g("run"),
            "rest of realize (memory plan etc.)": (t2 - t1) - g("schedule") - g("lower") - g("run"), "total realize": t2 - t0}
  phases["_kernels"], phases["_compiles"] = pt.n.get("run", 0), pt.n.get("cc", 0)
  return phases

def bench_compile() -> None:
  device = Device.DEFAULT
  d, layers = ARGS.mlp_dim, ARGS.mlp_layers
  rng = np.random.default_rng(0)
  x = Tensor(rng.standard_normal((d, d), dtype=np.float32)).realize()
  weights = [(Tensor(rng.standard_normal((d, d), dtype=np.float32) / np.sqrt(d)).realize(),
              Tensor(rng.standard_normal((d,), dtype=np.float32)).realize()) for _ in range(layers)]
  rand = random.Random(time.time_ns())
  cold, disk, hot = [], [], []
  for _ in range(ARGS.compile_reps):
    k = float(np.float32(1.0 + rand.random()))   # a constant no earlier kernel used: every kernel is new
    keys_before = set(method_cache)
    gc.collect()
    cold.append(timed_realize(x, weights, k, device))
    # drop this graph's kernels from the in-process cache: the next realize finds the binaries on disk
    for key in set(method_cache) - keys_before: del method_cache[key]
    gc.collect()
    disk.append(timed_realize(x, weights, k, device))
  for i in range(ARGS.cached_reps + 1):  # the graph of the last k, again: every kernel is a method-cache hit
    gc.collect()
    phases = timed_realize(x, weights, k, device)
    if i > 0: hot.append(phases)
  med = lambda runs, key: statistics.median(r[key] for r in runs)
  keys = [k_ for k_ in cold[0] if not k_.startswith("_")]
  rows = [[key, fmt_ms(med(cold, key)), fmt_ms(med(disk, key)), fmt_ms(med(hot, key))] for key in keys]
  rows.append(["kernels / cc invocations", f"{cold[0]['_kernels']} / {med(cold, '_compiles'):.0f}",
               f"{disk[0]['_kernels']} / {med(disk, '_compiles'):.0f}", f"{hot[0]['_kernels']} / {med(hot, '_compiles'):.0f}"])
  total = lambda runs: med(runs, "total realize")
  rows.append(["cold ÷ this (total)", f"{1.0:9.1f}x", f"{total(cold)/total(disk):9.1f}x", f"{total(cold)/total(hot):9.1f}x"])
  notes = [f"graph: x({d}x{d}) through {layers} layers of (h @ w + b*k).relu(), then log_softmax(-1).mean()*k; "
           "a fresh k makes every kernel's source new",
           f"cold: median of {ARGS.compile_reps} realize(s), each with a new k (schedule + codegen + cc + load); "
           "disk-cache hit: same graph after removing its kernels from method_cache (codegen runs again, the binary comes from the on-disk cache); "
           f"method-cache hit: median of {ARGS.cached_reps} realize(s) of the same graph (a new lazy graph each time, so scheduling still runs)",
           "all times ms; the graph is realized with Tensor.realize(), and its phases are timed by wrapping the fusegrad functions it calls "
           "(only inside this bench); 'rest' rows are what the named phases leave out",
           f"on-disk cache: {'your normal fusegrad cache (--keep-cache)' if ARGS.keep_cache else 'a throwaway directory for this run'}"
           + ("; DISABLE_COMPILER_CACHE is set, so the disk-cache column recompiles" if Device[device].compiler.cachekey is None else "")]
  print_table(f"3. schedule + compile, fresh vs cached ({device})", ["phase", "cold (new kernels)", "disk-cache hit", "method-cache hit"],
              rows, notes)

# ---------------------------------------------------------------- main

def kernel_threads() -> str:
  """How fusegrad's CPU kernels are threaded: OpenMP when the compiler supports it (newer fusegrad)."""
  compiler = Device[Device.DEFAULT].compiler
  if not getattr(compiler, "has_openmp", False): return "kernels single-threaded"
  try:
    import ctypes
    # the libgomp already in the process (PyTorch ships its own libgomp.so.1; loaded first, fusegrad's kernels use it)
    threads = ctypes.CDLL("libgomp.so.1").omp_get_max_threads()
  except (OSError, AttributeError): threads = "?"
  return f"OpenMP kernels, {threads} threads" + (" (torch.set_num_threads also sets these: same libgomp)" if torch is not None else "")

def main() -> None:
  start = time.perf_counter()
  n = ARGS.size
  print("fusegrad foundation bench")
  print(f"  python {platform.python_version()}, numpy {np.__version__}, "
        + (f"torch {torch.__version__} ({torch.get_num_threads()} threads)" if torch is not None else TORCH_NOTE))
  print(f"  cpus {os.cpu_count()}, {platform.machine()}, fusegrad device {Device.DEFAULT} ({Device[Device.DEFAULT].compiler.__class__.__name__}, "
        f"{kernel_threads()}), fusegrad at {os.path.dirname(fusegrad.__file__)}")
  print(f"  size {n:,} float32, median of {ARGS.reps} reps after {ARGS.warmup} warm-up")
  if hasattr(os, "getloadavg"):
    load = os.getloadavg()[0]
    print(f"  load average (1 min) at start: {load:.2f}" + (" -- other processes compete for the CPUs, expect noisy numbers"
                                                            if load > 0.5 * (os.cpu_count() or 1) else ""))
  if {"elementwise", "reduce"} & set(ARGS.only):
    rng = np.random.default_rng(1)
    an, bn, cn = (rng.random(n, dtype=np.float32) for _ in range(3))
    a, b, c = (Tensor(arr).realize() for arr in (an, bn, cn))
    ta, tb, tc = (torch.from_numpy(arr) for arr in (an, bn, cn)) if torch is not None else (None, None, None)
    if "elementwise" in ARGS.only: run_section("elementwise", bench_elementwise, an, bn, cn, a, b, c, ta, tb, tc)
    if "reduce" in ARGS.only: run_section("reduce", bench_reduce, an, a, ta)
    del a, b, c
  if "compile" in ARGS.only: run_section("compile", bench_compile)
  print(f"\ntotal bench time {time.perf_counter() - start:.1f} s" + (f"; FAILED sections: {', '.join(FAILED)}" if FAILED else ""))
  if FAILED: sys.exit(1)

FAILED: list[str] = []

def run_section(name: str, fn, *args) -> None:
  """Run one section; if fusegrad raises, print the error and go on with the next section."""
  try: fn(*args)
  except Exception as e:  # a broken op should not hide the other sections' numbers
    import traceback
    FAILED.append(name)
    print(f"\n== section {name!r} FAILED: {type(e).__name__}: {e}")
    print("".join(traceback.format_exception(e)[-3:]).rstrip())

if __name__ == "__main__":
  main()
