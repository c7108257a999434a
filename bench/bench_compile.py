#!/usr/bin/env python3
"""Compile speed: the cold first training step on the CPU device (C through the system compiler, one process
per kernel) next to the LLVM device (LLVM IR compiled in-process by llvmlite), in one run.

    python bench/bench_compile.py                        # MNIST CNN step and the MLP step, CPU and LLVM
    python bench/bench_compile.py --devices LLVM --only mlp

Each measurement runs in a fresh child process with an empty on-disk cache (its own FUSEGRAD_CACHE folder), so
every kernel is generated and compiled. Reported per device: the wall time of the first step (graph, schedule,
codegen, compile, run; the CPU's compiler processes overlap in a thread pool, LLVM compiles one at a time), how
many kernels it compiled, and the compiler alone: the step's kernels compiled again one after another (total, per
kernel, the slowest).
No assertions on timings.
"""
from __future__ import annotations
import argparse, json, os, subprocess, sys, tempfile, time

WORKLOADS = ["mnist", "mlp"]

def child(workload: str, device: str, batch: int) -> dict:
    """Runs in the fresh process: one cold training step, timing every compile."""
    os.environ["DEV"] = device
    import numpy as np
    from fusegrad import Tensor, Device, nn
    from fusegrad.nn.optim import Adam
    from fusegrad.nn.state import get_parameters
    compiler = Device[device].compiler
    sources: list[str] = []
    original = compiler.compile
    def recording_compile(src: str) -> bytes:
        sources.append(src)
        return original(src)
    compiler.compile = recording_compile
    rng = np.random.default_rng(0)
    Tensor.manual_seed(0)
    if workload == "mnist":
        from fusegrad.examples.mnist import Model
        model, x = Model(), Tensor(rng.standard_normal((batch, 1, 28, 28)).astype(np.float32))
    else:   # the MLP of bench/bench_jit.py: 784 -> 512 -> 512 -> 256 -> 10
        sizes = [784, 512, 512, 256, 10]
        layers = [nn.Linear(sizes[i], sizes[i + 1]) for i in range(len(sizes) - 1)]
        model = lambda t: t.sequential([f for layer in layers for f in (layer, Tensor.relu)][:-1])
        model_params = layers
        x = Tensor(rng.standard_normal((64, 784)).astype(np.float32))
    y = Tensor(rng.integers(0, 10, x.shape[0]).astype(np.int32))
    params = get_parameters(model if workload == "mnist" else model_params)
    Tensor.realize(x, y, *params)
    optimizer = Adam(params, lr=1e-3)
    sources.clear()   # the step's kernels only
    start = time.perf_counter()
    with Tensor.train():
        optimizer.zero_grad()
        loss = model(x).sparse_categorical_crossentropy(y).backward()
        optimizer.step()
        loss.realize()
    value = loss.item()
    first_step = time.perf_counter() - start
    # the compiler alone: every kernel of the step again, one after another (compile() bypasses the disk cache)
    times = []
    for src in sources:
        start = time.perf_counter()
        original(src)
        times.append(time.perf_counter() - start)
    return {"first_step": first_step, "compile": sum(times), "kernels": len(sources), "slowest": max(times), "loss": value}

def run_child(workload: str, device: str, batch: int) -> dict:
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "FUSEGRAD_CACHE": cache, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "2")}
        env.pop("CACHEDB", None)
        result = subprocess.run([sys.executable, __file__, "--child", json.dumps([workload, device, batch])], env=env,
                                capture_output=True, text=True, timeout=900)
        if result.returncode != 0: return {"error": result.stderr.strip().splitlines()[-1] if result.stderr.strip() else "failed"}
        return json.loads(result.stdout.strip().splitlines()[-1])

def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", nargs="+", choices=WORKLOADS, default=WORKLOADS)
    p.add_argument("--devices", nargs="+", default=["CPU", "LLVM"])
    p.add_argument("--batch", type=int, default=128, help="MNIST batch (compile work doesn't depend on it)")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(child(*json.loads(args.child))))
        return
    print(f"{'workload':10s} {'device':6s} {'kernels':>7s} {'first step s':>12s} {'compile s':>10s} {'ms/kernel':>10s} {'slowest ms':>10s}  loss")
    for workload in args.only:
        rows = {}
        for device in args.devices:
            r = rows[device] = run_child(workload, device, args.batch)
            if "error" in r:
                print(f"{workload:10s} {device:6s} error: {r['error']}")
                continue
            print(f"{workload:10s} {device:6s} {r['kernels']:7d} {r['first_step']:12.2f} {r['compile']:10.2f} "
                  f"{1e3 * r['compile'] / max(1, r['kernels']):10.1f} {1e3 * r['slowest']:10.1f}  {r['loss']:.4f}")
        if all("error" not in rows.get(d, {"error": 1}) for d in ("CPU", "LLVM")):
            print(f"{workload:10s} LLVM/CPU: first step x{rows['LLVM']['first_step'] / rows['CPU']['first_step']:.2f}, "
                  f"compile x{rows['LLVM']['compile'] / rows['CPU']['compile']:.2f}")

if __name__ == "__main__":
    main()
