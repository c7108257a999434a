#!/usr/bin/env python3
"""Fusion benchmarks: does the scheduler's store-vs-recompute choice (fusegrad/schedule,
``store_is_cheaper``) make a fused graph as fast as its parts? fusegrad next to PyTorch.

    python bench/bench_fusion.py                                  # both rows (~1 min on a quiet 2-core machine)
    python bench/bench_fusion.py --only tail --sizes 256 512
    python bench/bench_fusion.py --baseline /tmp/basewt           # also an older checkout, as a third peer

1. randn_matmul: ``(Tensor.randn(N, N) @ Tensor.randn(N, N)).numpy()`` against the same matmul of
   inputs realized beforehand. Random normals (threefry + Box-Muller) broadcast into the matmul must
   be stored once, not recomputed for every column.
2. tail: ``(a @ b).relu().sum(axis=1)`` of realized N×N inputs against the plain ``a @ b``. The
   relu tail must not pull the sum's reduce into the matmul's loop nest.
3. lazy_draws: ``--draws`` lazy ``randn(128, 128) * 0.1`` (a model's initial weights), realized one after
   another, against the same draws realized together. Realizing one draw must not rewrite the pending
   ones (it used to: quadratic, 7.3 s for 100 draws).

Each row prints the fused graph's time, its reference's time and their ratio (the issue's goal is
≤ 1.5x), the kernels the fused graph ran, and PyTorch's time for the same graph ("÷ torch" = torch
time ÷ this time, >1: faster than torch). fusegrad times are wall times of realize + copy-out
(e2e) and of the compiled kernels alone. Every measurement runs in its own child process
(bench/_benchutil.py); medians; no assertions on timings.
"""
from __future__ import annotations
import argparse, os, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _benchutil import run_sections, ChildRunner, fmt, fusegrad_kernel_time, import_framework, import_torch, median_time, print_table, ratio, status

SECTIONS = ["randn_matmul", "tail", "lazy_draws"]

def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--only", nargs="+", choices=SECTIONS, default=SECTIONS, help="run only these sections")
    p.add_argument("--peers", nargs="+", choices=["fusegrad", "torch"], default=["fusegrad", "torch"], help="which frameworks to run")
    p.add_argument("--baseline", help="also run fusegrad from this checkout (PYTHONPATH=BASELINE), e.g. the session-start worktree")
    p.add_argument("--threads", type=int, default=2, help="threads per peer (OMP_NUM_THREADS, torch.set_num_threads)")
    p.add_argument("--randn-sizes", type=int, nargs="+", default=[512], help="N for the randn matmul row")
    p.add_argument("--sizes", type=int, nargs="+", default=[256], help="N for the matmul + relu + sum row")
    p.add_argument("--draws", type=int, default=100, help="lazy draws for the lazy_draws row")
    p.add_argument("--reps", type=int, default=9, help="timed repetitions (median)")
    p.add_argument("--timeout", type=float, default=600, help="seconds before a child process is abandoned")
    p.add_argument("--verbose", action="store_true", help="show the children's stderr")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if min(args.reps, args.threads, *args.randn_sizes, *args.sizes) < 1: p.error("sizes and counts must be positive")
    return args

# ================================================================ child tasks (each in a fresh process)

def _graphs(t: dict, tensor_cls, randn):
    """(fused graph builder, reference graph builder) of the task, for either framework."""
    n = t["n"]
    if t["task"] == "randn_matmul":
        a, b = randn(n, n), randn(n, n)
        return (lambda: randn(n, n) @ randn(n, n)), (lambda: a @ b)
    a, b = randn(n, n), randn(n, n)
    return (lambda: (a @ b).relu().sum(axis=1)), (lambda: a @ b)

def task_fusion(t: dict) -> dict:
    reps = t["reps"]
    if t["framework"] == "torch":
        torch = import_torch(t["threads"])
        torch.manual_seed(0)
        fused, reference = _graphs(t, None, lambda *s: torch.randn(*s))
        return {"fused": median_time(lambda: fused().numpy(), reps, warmup=2),
                "reference": median_time(lambda: reference().numpy(), reps, warmup=2)}
    _fw, Tensor, *_rest = import_framework("fusegrad")
    Tensor.manual_seed(0)
    fused, reference = _graphs(t, Tensor, lambda *s: Tensor.randn(*s).realize())
    if t["task"] == "randn_matmul": fused = lambda: Tensor.randn(t["n"], t["n"]) @ Tensor.randn(t["n"], t["n"])
    result = {"fused": median_time(lambda: fused().numpy(), reps, warmup=2),
              "reference": median_time(lambda: reference().numpy(), reps, warmup=2)}
    result["fused_kernel"], result["kernels"] = fusegrad_kernel_time(fused, reps)
    result["reference_kernel"], _ = fusegrad_kernel_time(reference, reps)
    return result

def task_lazy_draws(t: dict) -> dict:
    """Seconds to make ``draws`` lazy normals and realize them one by one, and all together (torch: make them)."""
    count, reps = t["draws"], max(1, t["reps"] // 3)
    if t["framework"] == "torch":
        torch = import_torch(t["threads"])
        make = lambda: [torch.randn(128, 128) * 0.1 for _ in range(count)]
        return {"one_by_one": median_time(make, reps), "together": median_time(make, reps)}
    _fw, Tensor, *_rest = import_framework("fusegrad")
    def one_by_one():
        for draw in [Tensor.randn(128, 128) * 0.1 for _ in range(count)]: draw.realize()
    return {"one_by_one": median_time(one_by_one, reps),
            "together": median_time(lambda: Tensor.realize(*[Tensor.randn(128, 128) * 0.1 for _ in range(count)]), reps)}

TASKS = {"randn_matmul": task_fusion, "tail": task_fusion, "lazy_draws": task_lazy_draws}

# ================================================================ parent

def _section(args, runner: ChildRunner, task: str, sizes: list[int], title: str, reference: str) -> None:
    for n in sizes:
        base = {"task": task, "n": n, "reps": args.reps}
        results = []
        if "fusegrad" in args.peers: results.append(("fusegrad", runner.run(base, "fusegrad", cache=runner.cache_dir(f"{task}{n}"))))
        if args.baseline:
            results.append(("fusegrad baseline", runner.run(base, "fusegrad", cache=runner.cache_dir(f"{task}{n}_base"),
                                                            extra_env={"PYTHONPATH": os.path.abspath(args.baseline)})))
        if "torch" in args.peers: results.append((f"torch ({args.threads} threads)", runner.run(base, "torch")))
        torch_t = next((r["fused"] for label, r in results if label.startswith("torch") and r["ok"]), None)
        rows, errors = [], []
        for label, r in results:
            if not r["ok"]:
                rows.append([label, status(r, errors, label)] + ["-"] * 6); continue
            kernel_ratio = ratio(r.get("fused_kernel"), r.get("reference_kernel"))
            rows.append([label, fmt(r["fused"], 1e3, 2), fmt(r["reference"], 1e3, 2), ratio(r["fused"], r["reference"]),
                         f"{fmt(r.get('fused_kernel'), 1e3, 2)} / {fmt(r.get('reference_kernel'), 1e3, 2)} ({kernel_ratio})"
                         if "fused_kernel" in r else "-", str(r.get("kernels", "-")), ratio(torch_t, r["fused"])])
        notes = [f"reference: {reference}; 'fused ÷ ref' is the issue's figure (goal ≤ 1.50x)",
                 "e2e ms: wall time of realize + .numpy() (graph build, cached schedule, run, copy out); kernels ms: the compiled "
                 "kernels only (GlobalCounters.time_sum_s), fused / reference", "'÷ torch' = torch's fused time ÷ this fused time"]
        print_table(title.format(n=n), ["peer", "fused e2e ms", "ref e2e ms", "fused ÷ ref", "kernels ms fused / ref", "kernels", "÷ torch"],
                    rows, notes + errors)

def section_randn_matmul(args, runner: ChildRunner) -> None:
    _section(args, runner, "randn_matmul", args.randn_sizes, "1. (randn({n},{n}) @ randn({n},{n})).numpy()",
             "the same matmul of normals realized beforehand")

def section_tail(args, runner: ChildRunner) -> None:
    _section(args, runner, "tail", args.sizes, "2. (a @ b).relu().sum(axis=1), realized {n}x{n} inputs", "the plain a @ b")

def section_lazy_draws(args, runner: ChildRunner) -> None:
    base, results = {"task": "lazy_draws", "draws": args.draws, "reps": args.reps}, []
    if "fusegrad" in args.peers: results.append(("fusegrad", runner.run(base, "fusegrad", cache=runner.cache_dir("lazy_draws"))))
    if args.baseline:
        results.append(("fusegrad baseline", runner.run(base, "fusegrad", cache=runner.cache_dir("lazy_draws_base"),
                                                        extra_env={"PYTHONPATH": os.path.abspath(args.baseline)})))
    if "torch" in args.peers: results.append((f"torch ({args.threads} threads)", runner.run(base, "torch")))
    torch_t = next((r["one_by_one"] for label, r in results if label.startswith("torch") and r["ok"]), None)
    rows, errors = [], []
    for label, r in results:
        if not r["ok"]: rows.append([label, status(r, errors, label)] + ["-"] * 3); continue
        rows.append([label, fmt(r["one_by_one"], 1e3, 1), fmt(r["together"], 1e3, 1), ratio(r["one_by_one"], r["together"]),
                     ratio(torch_t, r["one_by_one"])])
    notes = ["one by one: make the draws lazily, then .realize() each; together: Tensor.realize(*draws) (torch: both are "
             "eager draws); 'one ÷ together' should stay near 1 (no cliff)", "'÷ torch' = torch's time ÷ this one-by-one time"]
    print_table(f"3. {args.draws} lazy randn(128,128) * 0.1, realized one by one", ["peer", "one by one ms", "together ms",
                "one ÷ together", "÷ torch"], rows, notes + errors)

def main() -> None:
    sections = {name[len("section_"):]: fn for name, fn in globals().items() if name.startswith("section_")}
    run_sections("fusegrad fusion bench (bench/bench_fusion.py)", __file__, parse_args(), TASKS, sections)

if __name__ == "__main__":
    main()
