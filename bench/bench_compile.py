#!/usr/bin/env python3
"""Compile speed: the first training step (or prefill) of a fresh process, cold (empty disk cache) and warm (a second
fresh process on the same disk cache), on the CPU device (C through the system compiler) and the LLVM device (LLVM IR
compiled in-process by llvmlite), in one run.

    python bench/bench_compile.py                        # MNIST CNN step, MLP step, GPT-2 prefill; CPU and LLVM
    python bench/bench_compile.py --devices LLVM --only mlp
    python bench/bench_compile.py --no-serial            # skip the one-kernel-at-a-time compiler timing

Workloads: "mnist" is one Adam step of fusegrad.examples.mnist's CNN (batch 128), "mlp" one Adam step of the MLP of
bench/bench_jit.py (784-512-512-256-10, batch 64), "gpt2" the first prefill of the 124M GPT-2 of
fusegrad.examples.gpt2 with random weights and a 1 x 128 prompt (as bench/bench_prefill.py runs it).

Each row is a fresh child process with its own FUSEGRAD_CACHE folder: "cold" starts it empty, "warm" runs again on
what the cold process left. Reported: the first step's wall time, the kernels it compiled (sources the compiler
saw), the kernels it generated code for, and where the time went: Python code generation (the main thread), the
compiler (wall time of its calls, in a thread pool, overlapping codegen), and the rest (graph, schedule, running).
"serial" compiles the step's kernels again one compiler call each, one after another (the compiler's own speed:
issue 17 compares gcc and LLVM with it). No assertions on timings.
"""
from __future__ import annotations
import argparse, json, os, resource, subprocess, sys, tempfile, threading, time

WORKLOADS = ["mnist", "mlp", "gpt2"]

def _workload(workload: str, batch: int):
    """(run the step once and return a float, the tensors to realize before timing) for ``workload``."""
    import numpy as np
    from fusegrad import Tensor, dtypes, nn
    from fusegrad.nn.optim import Adam
    from fusegrad.nn.state import get_parameters
    rng = np.random.default_rng(0)
    Tensor.manual_seed(0)
    if workload == "gpt2":
        from fusegrad.examples.gpt2 import GPT2Config, random_model
        model = random_model(GPT2Config())
        prompt = Tensor([[int(t) for t in rng.integers(0, 50257, 128)]], dtype=dtypes.int32)
        temperature = Tensor([0.0], dtype=dtypes.float32)
        noise = Tensor(rng.random((1, 50257), dtype=np.float32))
        return (lambda: float(model(prompt, 0, temperature, noise).item())), [prompt, temperature, noise]
    if workload == "mnist":
        from fusegrad.examples.mnist import Model
        model, x = Model(), Tensor(rng.standard_normal((batch, 1, 28, 28)).astype(np.float32))
        params = get_parameters(model)
    else:   # the MLP of bench/bench_jit.py: 784 -> 512 -> 512 -> 256 -> 10
        sizes = [784, 512, 512, 256, 10]
        layers = [nn.Linear(sizes[i], sizes[i + 1]) for i in range(len(sizes) - 1)]
        model = lambda t: t.sequential([f for layer in layers for f in (layer, Tensor.relu)][:-1])
        params = get_parameters(layers)
        x = Tensor(rng.standard_normal((64, 784)).astype(np.float32))
    y = Tensor(rng.integers(0, 10, x.shape[0]).astype(np.int32))
    optimizer = Adam(params, lr=1e-3)
    def step() -> float:
        with Tensor.train():
            optimizer.zero_grad()
            loss = model(x).sparse_categorical_crossentropy(y).backward()
            optimizer.step()
            loss.realize()
        return loss.item()
    return step, [x, y, *params]

def child(workload: str, device: str, batch: int, serial: bool) -> dict:
    """Runs in the fresh process: one first step, counting what was generated and compiled, and timing both."""
    os.environ["DEV"] = device
    from fusegrad import Tensor, Device, codegen
    from fusegrad.engine import realize
    compiler = Device[device].compiler
    compiled: list[str] = []             # sources the compiler was given (disk cache misses)
    spent = {"codegen": 0.0, "compiler": 0.0, "generated": 0}
    inside_batch = threading.local()
    # (getattr: the script also measures older checkouts, whose compilers have no compile_batch)
    original_compile, original_batch, original_get_program = compiler.compile, getattr(compiler, "compile_batch", None), codegen.get_program
    def recording_compile(src: str) -> bytes:
        if getattr(inside_batch, "on", False): return original_compile(src)   # (a batch's joined source)
        compiled.append(src)
        start = time.perf_counter()
        try: return original_compile(src)
        finally: spent["compiler"] += time.perf_counter() - start
    def recording_batch(srcs: list[str]) -> list[bytes]:
        compiled.extend(srcs)
        inside_batch.on, start = True, time.perf_counter()
        try: return original_batch(srcs)
        finally: inside_batch.on, spent["compiler"] = False, spent["compiler"] + time.perf_counter() - start
    def timed_get_program(*args, **kwargs):
        start = time.perf_counter()
        try: return original_get_program(*args, **kwargs)
        finally: spent["codegen"], spent["generated"] = spent["codegen"] + time.perf_counter() - start, spent["generated"] + 1
    step, inputs = _workload(workload, batch)
    Tensor.realize(*inputs)
    compiler.compile = recording_compile
    if original_batch is not None: compiler.compile_batch = recording_batch
    # (realize uses the disk program cache only with the real generator: this wrapper calls it, so it is told so)
    realize._genuine_get_program = codegen.get_program = timed_get_program
    compiled.clear()
    spent.update(codegen=0.0, compiler=0.0, generated=0)
    children, own = resource.getrusage(resource.RUSAGE_CHILDREN), resource.getrusage(resource.RUSAGE_SELF)
    start = time.perf_counter()
    value = step()
    first_step = time.perf_counter() - start
    # CPU seconds (less disturbed than wall time when the machine is shared): compiler processes, and this process
    children_after, own_after = resource.getrusage(resource.RUSAGE_CHILDREN), resource.getrusage(resource.RUSAGE_SELF)
    cpu = {"cc_cpu": children_after.ru_utime + children_after.ru_stime - children.ru_utime - children.ru_stime,
           "py_cpu": own_after.ru_utime + own_after.ru_stime - own.ru_utime - own.ru_stime}
    result = {"first_step": first_step, "kernels": len(compiled), "value": value, **spent, **cpu}
    if serial and compiled:   # the compiler alone: every compiled kernel again, one call each (compile() bypasses the disk cache)
        times = []
        for src in compiled:
            start = time.perf_counter()
            original_compile(src)
            times.append(time.perf_counter() - start)
        result.update(serial=sum(times), slowest=max(times))
    return result

def run_child(workload: str, device: str, batch: int, cache: str, serial: bool) -> dict:
    env = {**os.environ, "FUSEGRAD_CACHE": cache, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "2")}
    env.pop("CACHEDB", None)
    result = subprocess.run([sys.executable, __file__, "--child", json.dumps([workload, device, batch, serial])], env=env,
                            capture_output=True, text=True, timeout=900)
    if result.returncode != 0: return {"error": result.stderr.strip().splitlines()[-1] if result.stderr.strip() else "failed"}
    return json.loads(result.stdout.strip().splitlines()[-1])

def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", nargs="+", choices=WORKLOADS, default=WORKLOADS)
    p.add_argument("--devices", nargs="+", default=["CPU", "LLVM"])
    p.add_argument("--batch", type=int, default=128, help="MNIST batch (compile work doesn't depend on it)")
    p.add_argument("--no-serial", action="store_true", help="skip compiling the kernels again one call each")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(child(*json.loads(args.child))))
        return
    print(f"{'workload':8s} {'device':6s} {'cache':5s} {'first step s':>12s} {'compiled':>8s} {'generated':>9s} {'codegen s':>9s} "
          f"{'compiler s':>10s} {'rest s':>7s} {'cc cpu s':>8s} {'py cpu s':>8s} {'serial s':>8s} {'ms/kernel':>9s}  value")
    for workload in args.only:
        firsts = {}
        for device in args.devices:
            with tempfile.TemporaryDirectory() as cache:
                for phase in ("cold", "warm"):
                    r = run_child(workload, device, args.batch, cache, not args.no_serial and phase == "cold")
                    if "error" in r:
                        print(f"{workload:8s} {device:6s} {phase:5s} error: {r['error']}")
                        continue
                    firsts[(device, phase)] = r["first_step"]
                    serial = f"{r['serial']:8.2f} {1e3 * r['serial'] / max(1, r['kernels']):9.1f}" if "serial" in r else f"{'-':>8s} {'-':>9s}"
                    print(f"{workload:8s} {device:6s} {phase:5s} {r['first_step']:12.2f} {r['kernels']:8d} {r['generated']:9d} "
                          f"{r['codegen']:9.2f} {r['compiler']:10.2f} {r['first_step'] - r['codegen']:7.2f} {r['cc_cpu']:8.2f} {r['py_cpu']:8.2f} {serial}  {r['value']:.4f}", flush=True)
        if ("CPU", "cold") in firsts and ("LLVM", "cold") in firsts:
            print(f"{workload:8s} LLVM/CPU cold first step x{firsts[('LLVM', 'cold')] / firsts[('CPU', 'cold')]:.2f}")
    print("rest s = first step - codegen s: graph building, scheduling, waiting for the compiler, running; cc cpu s: CPU time of\n"
          "compiler processes (CPU device), py cpu s: of the process itself (its threads: codegen, LLVM compiles, kernels)")

if __name__ == "__main__":
    main()
