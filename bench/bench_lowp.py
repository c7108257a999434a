#!/usr/bin/env python3
"""Low-precision kernels on the CPU: float16, bfloat16 and fp8 (e4m3) next to PyTorch and numpy, with float32
as the yardstick. Are the kernels vector code (codegen/vectorize.py, renderer/cstyle.py)?

    python bench/bench_lowp.py                                    # every section (~2 min on a quiet 2-core machine)
    python bench/bench_lowp.py --only elementwise sum --dtypes half bfloat16
    python bench/bench_lowp.py --baseline /tmp/base_wt            # also an older checkout, as another peer

Sections (N = --size elements, 4M by default):

1. elementwise: ``(a * b + c).relu().exp()`` of three N-element tensors of the dtype (one fused kernel).
2. sum: ``a.sum()`` of N elements.
3. softmax: ``x.softmax(-1)`` of a 1024x1024 tensor.
4. matmul: bfloat16 512x512 @ 512x512, fusegrad with its tensor core (TC=1, AVX512-BF16) and without (TC=0).
5. where: float32 ``where(a > 0, a, b * 2).clip(-1, 1)`` of N elements and of a 1021x1021 tensor, which no
   vector width divides (a scalar loop: its selects vectorize only with gcc's if-conversion).

fusegrad rows time the compiled kernels alone (GlobalCounters.time_sum_s); torch and numpy rows time the op
call. Each cell is the median of --reps runs in a fresh child process (bench/_benchutil.py). '÷ f32' is the
row's time over fusegrad's float32 time for the same op; '÷ torch' is torch's time over fusegrad's (>1: fusegrad
faster). A peer without the dtype (numpy has no bfloat16 or fp8; torch has no fp8 arithmetic on the CPU) reads
'skipped'. No assertions on timings.
"""
from __future__ import annotations
import argparse, os, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _benchutil import run_sections, ChildRunner, SkipPeer, fmt, fusegrad_kernel_time, import_torch, median_time, print_table, ratio, status

SECTIONS = ["elementwise", "sum", "softmax", "matmul", "where"]
DTYPES = ["float", "half", "bfloat16", "fp8e4m3"]

def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--only", nargs="+", choices=SECTIONS, default=SECTIONS, help="run only these sections")
    p.add_argument("--dtypes", nargs="+", choices=DTYPES, default=DTYPES, help="dtypes of sections 1-3 (float is the yardstick)")
    p.add_argument("--peers", nargs="+", choices=["fusegrad", "torch", "numpy"], default=["fusegrad", "torch", "numpy"], help="which frameworks to run")
    p.add_argument("--baseline", help="also run fusegrad from this checkout (PYTHONPATH=BASELINE), e.g. a worktree of an older commit")
    p.add_argument("--size", type=int, default=4 * 1024 * 1024, help="elements of sections 1, 2 and 5")
    p.add_argument("--threads", type=int, default=2, help="threads per peer (OMP_NUM_THREADS, torch.set_num_threads)")
    p.add_argument("--reps", type=int, default=7, help="timed repetitions (median)")
    p.add_argument("--timeout", type=float, default=600, help="seconds before a child process is abandoned")
    p.add_argument("--verbose", action="store_true", help="show the children's stderr")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if min(args.reps, args.threads, args.size) < 1: p.error("sizes and counts must be positive")
    return args

# ================================================================ child tasks (each in a fresh process)

def _inputs(shape: tuple, count: int) -> list:
    """``count`` float32 numpy arrays of standard normals (the same in every peer)."""
    import numpy as np
    rng = np.random.default_rng(0)
    return [rng.standard_normal(shape).astype(np.float32) for _ in range(count)]

def _shape(t: dict) -> tuple:
    return {"softmax": (1024, 1024), "matmul": (512, 512)}.get(t["task"], tuple(t.get("shape") or (t["size"],)))

def _graph(t: dict, x: list):
    """The section's op on the tensors ``x`` (fusegrad, torch or numpy arrays all have these methods or twins)."""
    task = t["task"]
    if task == "elementwise": return lambda: (x[0] * x[1] + x[2]).relu().exp()
    if task == "sum": return lambda: x[0].sum()
    if task == "softmax": return lambda: x[0].softmax(-1)
    if task == "matmul": return lambda: x[0] @ x[1]
    return lambda: (x[0] > 0).where(x[0], x[1] * 2).clip(-1, 1)

def task_fusegrad(t: dict) -> dict:
    from fusegrad import Tensor, dtypes, Context
    dtype = getattr(dtypes, t["dtype"])
    x = [Tensor(a).cast(dtype).realize() for a in _inputs(_shape(t), 3 if t["task"] == "elementwise" else 2)]
    with Context(TC=t.get("tc", 1)):
        seconds, kernels = fusegrad_kernel_time(_graph(t, x), t["reps"])
    return {"time": seconds, "kernels": kernels}

def task_torch(t: dict) -> dict:
    torch = import_torch(t["threads"])
    dtype = {"float": torch.float32, "half": torch.float16, "bfloat16": torch.bfloat16, "fp8e4m3": torch.float8_e4m3fn}[t["dtype"]]
    x = [torch.from_numpy(a).to(dtype) for a in _inputs(_shape(t), 3 if t["task"] == "elementwise" else 2)]
    # (torch's Tensor.where(condition, other) is a different op from fusegrad's condition.where(x, y))
    fn = (lambda: torch.where(x[0] > 0, x[0], x[1] * 2).clip(-1, 1)) if t["task"] == "where" else _graph(t, x)
    try: fn()
    except (RuntimeError, NotImplementedError, TypeError) as e: raise SkipPeer(f"torch {t['dtype']}: {str(e).splitlines()[0][:120]}")
    return {"time": median_time(fn, t["reps"], warmup=2)}

def task_numpy(t: dict) -> dict:
    import numpy as np
    if t["dtype"] not in ("float", "half"): raise SkipPeer(f"numpy has no {t['dtype']}")
    dtype = np.float32 if t["dtype"] == "float" else np.float16
    x = [a.astype(dtype) for a in _inputs(_shape(t), 3 if t["task"] == "elementwise" else 2)]
    def softmax(v):
        e = np.exp(v - v.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)
    fn = {"elementwise": lambda: np.exp(np.maximum(x[0] * x[1] + x[2], 0)), "sum": lambda: x[0].sum(), "softmax": lambda: softmax(x[0]),
          "matmul": lambda: x[0] @ x[1], "where": lambda: np.clip(np.where(x[0] > 0, x[0], x[1] * 2), -1, 1)}[t["task"]]
    return {"time": median_time(fn, t["reps"], warmup=2)}

def task(t: dict) -> dict:
    return {"fusegrad": task_fusegrad, "torch": task_torch, "numpy": task_numpy}[t["framework"]](t)

TASKS = {name: task for name in SECTIONS}

# ================================================================ parent

def _measure(args, runner: ChildRunner, base: dict) -> list[tuple[str, dict]]:
    """(peer label, result) of every peer for one cell."""
    results = []
    key = "_".join(str(v) for v in base.values())
    if "fusegrad" in args.peers: results.append(("fusegrad", runner.run(base, "fusegrad", cache=runner.cache_dir(key))))
    if args.baseline:
        results.append(("fusegrad baseline", runner.run(base, "fusegrad", cache=runner.cache_dir(key + "_base"),
                                                        extra_env={"PYTHONPATH": os.path.abspath(args.baseline)})))
    # (peers without tensor cores run once per dtype: in the TC=1 cell)
    if "torch" in args.peers and base.get("tc", 1) == 1: results.append((f"torch ({args.threads} threads)", runner.run(base, "torch")))
    if "numpy" in args.peers and base.get("tc", 1) == 1: results.append(("numpy", runner.run(base, "numpy")))
    return results

def _dtype_section(args, runner: ChildRunner, task_name: str, title: str) -> None:
    rows, errors = [], []
    float_time: dict[str, float] = {}   # peer -> its float32 time
    for dtype in ["float"] + [d for d in args.dtypes if d != "float"]:
        base = {"task": task_name, "dtype": dtype, "size": args.size, "reps": args.reps}
        results = _measure(args, runner, base)
        torch_t = next((r["time"] for label, r in results if label.startswith("torch") and r["ok"]), None)
        for label, r in results:
            if not r["ok"]:
                rows.append([dtype, label, status(r, errors, f"{dtype} {label}"), "-", "-", "-"]); continue
            if dtype == "float": float_time[label] = r["time"]
            rows.append([dtype, label, fmt(r["time"], 1e3, 3), str(r.get("kernels", "-")), ratio(r["time"], float_time.get(label)),
                         ratio(torch_t, r["time"]) if label.startswith("fusegrad") else "-"])
    print_table(title, ["dtype", "peer", "ms", "kernels", "÷ f32", "÷ torch"], rows,
                ["fusegrad: compiled kernels only; torch/numpy: the op call", "'÷ f32': this time ÷ the same peer's float32 time"] + errors)

def section_elementwise(args, runner: ChildRunner) -> None:
    _dtype_section(args, runner, "elementwise", f"1. (a * b + c).relu().exp(), {args.size} elements")

def section_sum(args, runner: ChildRunner) -> None:
    _dtype_section(args, runner, "sum", f"2. a.sum(), {args.size} elements")

def section_softmax(args, runner: ChildRunner) -> None:
    _dtype_section(args, runner, "softmax", "3. x.softmax(-1), 1024x1024")

def section_matmul(args, runner: ChildRunner) -> None:
    rows, errors = [], []
    cells = [("bfloat16", 1), ("bfloat16", 0), ("float", 1)]
    for dtype, tc in cells:
        base = {"task": "matmul", "dtype": dtype, "size": args.size, "reps": args.reps, "tc": tc}
        for label, r in _measure(args, runner, base):
            name = f"{label} TC={tc}" if label.startswith("fusegrad") and dtype == "bfloat16" else label
            if not r["ok"]: rows.append([dtype, name, status(r, errors, f"{dtype} {name}"), "-"]); continue
            rows.append([dtype, name, fmt(r["time"], 1e3, 3), f"{2 * 512 ** 3 / r['time'] * 1e-9:.1f}"])
    print_table("4. matmul 512x512 @ 512x512", ["dtype", "peer", "ms", "GFLOP/s"], rows,
                ["TC=1: the AVX512-BF16 tensor core (vdpbf16ps) where the CPU has it; TC=0: float32 math on widened values"] + errors)

def section_where(args, runner: ChildRunner) -> None:
    rows, errors = [], []
    for shape in ((args.size,), (1021, 1021)):
        base = {"task": "where", "dtype": "float", "size": args.size, "reps": args.reps, "shape": list(shape)}
        results = _measure(args, runner, base)
        torch_t = next((r["time"] for label, r in results if label.startswith("torch") and r["ok"]), None)
        for label, r in results:
            if not r["ok"]: rows.append(["x".join(map(str, shape)), label, status(r, errors, label), "-"]); continue
            rows.append(["x".join(map(str, shape)), label, fmt(r["time"], 1e3, 3), ratio(torch_t, r["time"]) if label.startswith("fusegrad") else "-"])
    print_table("5. float32 where(a > 0, a, b * 2).clip(-1, 1)", ["shape", "peer", "ms", "÷ torch"], rows,
                ["1021x1021: a scalar loop (no vector width divides 1021) whose selects gcc vectorizes only with if-conversion on"] + errors)

def main() -> None:
    sections = {name[len("section_"):]: fn for name, fn in globals().items() if name.startswith("section_")}
    run_sections("fusegrad low-precision bench (bench/bench_lowp.py)", __file__, parse_args(), TASKS, sections)

if __name__ == "__main__":
    main()
