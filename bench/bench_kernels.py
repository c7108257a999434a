#!/usr/bin/env python3
"""Kernel benchmarks: how fast fusegrad's generated CPU code is, next to PyTorch, numpy and tinygrad.

    python bench/bench_kernels.py                          # everything (~4-5 min on a quiet 2-core machine)
    python bench/bench_kernels.py --only matmul --sizes 512 1024 --beam-sizes 512
    python bench/bench_kernels.py --only mnist --mnist-batch 512 --peers fusegrad torch
    python bench/bench_kernels.py --help

1. matmul: fp32 N×N @ N×N — fusegrad's default heuristic, fusegrad with BEAM=2 (search time, and
   the time of the same realize in a new process where the search result comes from the on-disk
   cache), PyTorch, numpy, tinygrad. GFLOPS (2·N³ per product) and ratios vs PyTorch.
2. elementwise: ``exp(relu(a*b+c))`` over 16M floats (one fused fusegrad kernel) — GB/s counting
   16 bytes per element (3 reads + 1 write), vs PyTorch eager, numpy and tinygrad.
3. mnist: the tinygrad MNIST CNN (4 convs, 2 BatchNorms, Linear(576, 10)) trained with Adam on
   random 28×28 data, jitted: time per step vs the same model in PyTorch (and tinygrad), plus the
   first step (schedule + compile) with an empty on-disk cache.
4. conv: conv2d forward + input and weight gradients for common shapes (3x3 with padding, stride 2,
   a first layer with 3 channels, 128 channels, 1x1), jitted, vs PyTorch: ms and GFLOPS (3 convs'
   worth of multiply-adds).
5. bf16: bfloat16 N×N @ N×N (float32 sums, bfloat16 result) — fusegrad's default (the CPU tensor
   core: AVX512-BF16 ``vdpbf16ps`` through OptOps.TC), fusegrad with TC=0 (emulated bfloat16 in
   float32 vector code), PyTorch's bfloat16 matmul. GFLOPS and ratios vs PyTorch.
6. odd: cliffs — matmuls, sums and convs whose sizes no tile or vector divides (1023, primes like 997
   and 8191, 63/65 channels) next to their round neighbours, end to end (``.realize()`` with its Python),
   vs PyTorch and numpy.

Every measurement runs in its own child process (see bench/_benchutil.py). Medians; no
assertions on timings. See bench/README.md.
"""
from __future__ import annotations
import argparse, os, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _benchutil import (run_sections, ChildRunner, child_main, device_sync, fmt, fusegrad_kernel_time, import_framework, import_torch, median_time, print_header,
                        print_table, ratio, report_load_after, status)

SECTIONS = ["matmul", "elementwise", "mnist", "conv", "bf16", "odd"]

def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--only", nargs="+", choices=SECTIONS, default=SECTIONS, help="run only these sections")
    p.add_argument("--peers", nargs="+", choices=["fusegrad", "torch", "numpy", "tinygrad"], default=["fusegrad", "torch", "numpy", "tinygrad"],
                   help="which frameworks to run")
    p.add_argument("--threads", type=int, default=2, help="threads per peer (OMP_NUM_THREADS, torch.set_num_threads, OPENBLAS_NUM_THREADS)")
    p.add_argument("--sizes", type=int, nargs="+", default=[1024, 2048], help="matmul sizes N (N×N @ N×N)")
    p.add_argument("--layouts", nargs="+", choices=["nn", "nt"], default=["nn", "nt"],
                   help="matmul layouts: nn is a @ b, nt is a @ b.T with b stored (out, in) as a Linear layer's weight")
    p.add_argument("--beam-sizes", type=int, nargs="*", default=[512],
                   help="matmul sizes that also get a BEAM search (it compiles and times ~100 candidates a round, each "
                        "3 times: N=1024 took 352 s on a loaded 2-core machine, so it is opt-in: --beam-sizes 1024)")
    p.add_argument("--beam", type=int, default=2, help="BEAM width")
    p.add_argument("--reps", type=int, default=5, help="timed repetitions for matmul and elementwise (median)")
    p.add_argument("--size", type=int, default=1 << 24, help="elements for the elementwise bench")
    p.add_argument("--mnist-batch", type=int, default=512, help="MNIST batch size")
    p.add_argument("--mnist-steps", type=int, default=2, help="timed jitted steps (median)")
    p.add_argument("--timeout", type=float, default=600, help="seconds before a child process is abandoned")
    p.add_argument("--verbose", action="store_true", help="show the children's stderr")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if min(args.reps, args.size, args.mnist_batch, args.mnist_steps, args.threads, *args.sizes, *(args.beam_sizes or [1])) < 1:
        p.error("sizes and counts must be positive")
    return args

# ================================================================ child tasks (each in a fresh process)

def _rel_err(x, ref) -> float:
    import numpy as np
    x, ref = np.asarray(x, dtype=np.float64), np.asarray(ref, dtype=np.float64)
    return float(np.max(np.abs(x - ref)) / max(float(np.max(np.abs(ref))), 1e-30))

def _inputs(shapes, seed=0):
    import numpy as np
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s, dtype=np.float32) for s in shapes]

def task_matmul(t: dict) -> dict:
    import numpy as np
    n, reps, fw_name = t["n"], t["reps"], t["framework"]
    an, bn = _inputs([(n, n), (n, n)])
    # "nt": a @ b.T with b stored (out, in), as every Linear layer multiplies by its weight
    transposed = t.get("layout", "nn") == "nt"
    ref = None
    if t.get("check", True) and fw_name != "numpy": ref = an @ (bn.T if transposed else bn)
    if fw_name == "numpy":
        return {"t": median_time((lambda: an @ bn.T) if transposed else (lambda: an @ bn), reps, warmup=1)}
    if fw_name == "torch":
        torch = import_torch(t["threads"])
        a, b = torch.from_numpy(an), torch.from_numpy(bn)
        if transposed: b = b.T
        err = _rel_err((a @ b).numpy(), ref)
        return {"t": median_time(lambda: a @ b, reps, warmup=1), "err": err}
    fw, Tensor, TinyJit, GC, *_rest, Device = import_framework(fw_name)
    sync = device_sync(Device)
    a, b = Tensor(an).realize(), Tensor(bn).realize()
    if transposed: b = b.T   # (a view: the kernel reads the stored rows)
    if fw_name == "tinygrad":
        st = time.perf_counter(); out = (a @ b).realize(); sync(); first = time.perf_counter() - st
        err = _rel_err(out.numpy(), ref)
        return {"t": median_time(lambda: (a @ b).realize(), reps, warmup=1, sync=sync), "err": err, "first": first}
    # fusegrad: heuristic (beam 0) or BEAM=t["beam"]
    from fusegrad import Context
    import fusegrad.codegen.opt.search as search
    beam = t.get("beam", 0)
    found: dict = {"search_s": 0.0, "searches": 0}
    real_search = search.beam_search
    def timed_search(ast, renderer, width):
        st = time.perf_counter()
        opts = real_search(ast, renderer, width)
        found["search_s"] += time.perf_counter() - st
        found["searches"] += 1
        found["opts"] = repr(opts)
        return opts
    search.beam_search = timed_search
    with Context(BEAM=beam):
        st = time.perf_counter(); out = (a @ b).realize(); first = time.perf_counter() - st
        err = _rel_err(out.numpy(), ref)
        kernel, kernels = fusegrad_kernel_time(lambda: a @ b, reps)
        e2e = median_time(lambda: (a @ b).realize(), max(1, reps // 2), warmup=0)
    return {"t": kernel, "e2e": e2e, "first": first, "err": err, "kernels": kernels, **found}

def task_elementwise(t: dict) -> dict:
    import numpy as np
    n, reps, fw_name = t["size"], t["reps"], t["framework"]
    an, bn, cn = _inputs([(n,), (n,), (n,)])
    ref = np.exp(np.maximum(an * bn + cn, 0))
    if fw_name == "numpy": return {"t": median_time(lambda: np.exp(np.maximum(an * bn + cn, 0)), reps, warmup=1)}
    if fw_name == "torch":
        torch = import_torch(t["threads"])
        a, b, c = (torch.from_numpy(x) for x in (an, bn, cn))
        fn = lambda: torch.exp(torch.relu(a * b + c))
        return {"t": median_time(fn, reps, warmup=1), "err": _rel_err(fn().numpy(), ref)}
    fw, Tensor, TinyJit, GC, *_rest, Device = import_framework(fw_name)
    sync = device_sync(Device)
    a, b, c = (Tensor(x).realize() for x in (an, bn, cn))
    fn = lambda: (a * b + c).relu().exp()
    err = _rel_err(fn().realize().numpy(), ref)
    e2e = median_time(lambda: fn().realize(), reps, warmup=1, sync=sync)
    if fw_name == "tinygrad": return {"t": e2e, "err": err}
    kernel, kernels = fusegrad_kernel_time(fn, reps)
    return {"t": kernel, "e2e": e2e, "err": err, "kernels": kernels}

def task_mnist(t: dict) -> dict:
    """First jitted call (the warm-up: schedule + compile in a fresh cache), capture, then replays."""
    import numpy as np
    batch, steps, fw_name = t["batch"], t["steps"], t["framework"]
    rng = np.random.default_rng(0)
    xs = rng.standard_normal((batch, 1, 28, 28), dtype=np.float32)
    ys = rng.integers(0, 10, batch).astype(np.int32)
    if fw_name == "torch":
        torch = import_torch(t["threads"])
        nn = torch.nn
        torch.manual_seed(0)
        model = nn.Sequential(nn.Conv2d(1, 32, 5), nn.ReLU(), nn.Conv2d(32, 32, 5), nn.ReLU(), nn.BatchNorm2d(32), nn.MaxPool2d(2),
                              nn.Conv2d(32, 64, 3), nn.ReLU(), nn.Conv2d(64, 64, 3), nn.ReLU(), nn.BatchNorm2d(64), nn.MaxPool2d(2),
                              nn.Flatten(1), nn.Linear(576, 10))
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        X, Y = torch.from_numpy(xs), torch.from_numpy(ys).long()
        def step():
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(X), Y)
            loss.backward()
            opt.step()
            return loss
        st = time.perf_counter(); first_loss = step().item(); first = time.perf_counter() - st
        return {"step": median_time(step, steps, warmup=1), "first": first, "first_loss": first_loss, "last_loss": step().item()}
    fw, Tensor, TinyJit, GC, nn, Adam, get_parameters, Device = import_framework(fw_name)
    sync = device_sync(Device)
    Tensor.manual_seed(0)
    BatchNorm = getattr(nn, "BatchNorm2d", None) or nn.BatchNorm
    class Model:   # tinygrad's examples/beautiful_mnist.py model
        def __init__(self):
            self.layers = [nn.Conv2d(1, 32, 5), Tensor.relu, nn.Conv2d(32, 32, 5), Tensor.relu, BatchNorm(32), Tensor.max_pool2d,
                           nn.Conv2d(32, 64, 3), Tensor.relu, nn.Conv2d(64, 64, 3), Tensor.relu, BatchNorm(64), Tensor.max_pool2d,
                           lambda x: x.flatten(1), nn.Linear(576, 10)]
        def __call__(self, x):
            for layer in self.layers: x = layer(x)
            return x
    model = Model()
    params = get_parameters(model)
    opt = Adam(params, lr=1e-3)
    Tensor.realize(*params)
    X, Y = Tensor(xs).realize(), Tensor(ys).realize()
    training = (lambda: Tensor.train()) if hasattr(Tensor, "train") else (lambda: fw.Context(TRAINING=1))
    @TinyJit
    def step(x, y):
        with training():
            opt.zero_grad()
            loss = model(x).sparse_categorical_crossentropy(y).backward()
            opt.step()
            return loss.realize()
    sync()
    GC.reset()
    st = time.perf_counter(); first_loss = step(X, Y).item(); first = time.perf_counter() - st
    kernels = GC.kernel_count
    st = time.perf_counter(); step(X, Y); sync(); capture = time.perf_counter() - st
    per_step = median_time(lambda: step(X, Y), steps, warmup=0, sync=sync)   # the capture call above warmed up
    return {"step": per_step, "first": first, "capture": capture, "kernels": kernels, "first_loss": first_loss,
            "last_loss": step(X, Y).item()}

# (batch, cin, cout, size, kernel, stride, padding)
CONV_SHAPES = [(32, 64, 64, 32, 3, 1, 1), (32, 64, 128, 32, 3, 2, 1), (64, 3, 32, 32, 3, 1, 1), (16, 128, 128, 16, 3, 1, 1),
               (32, 32, 64, 28, 1, 1, 0)]

def task_conv(t: dict) -> dict:
    """conv2d forward, then the input and weight gradients of sum(out**2); min of ``reps`` jitted steps."""
    import numpy as np
    b, cin, cout, size, k, stride, pad = t["shape"]
    x, w = _inputs([(b, cin, size, size), (cout, cin, k, k)])
    w = w * 0.1
    def sample(arrays):   # 256 fixed elements of each result, to compare peers across processes
        return [np.asarray(a).ravel()[np.random.default_rng(1).integers(0, np.asarray(a).size, 256)].tolist() for a in arrays]
    if t["framework"] == "torch":
        torch = import_torch(t["threads"])
        tx, tw = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
        def step():
            out = torch.nn.functional.conv2d(tx, tw, stride=stride, padding=pad)
            return (out,) + torch.autograd.grad((out * out).sum(), (tx, tw))
        return {"t": median_time(step, t["reps"], warmup=1), "out": sample([o.detach().numpy() for o in step()])}
    fw, Tensor, TinyJit, *_rest, Device = import_framework(t["framework"])
    X, W = Tensor(x, requires_grad=True).realize(), Tensor(w, requires_grad=True).realize()
    @TinyJit
    def jitted():
        out = X.conv2d(W, stride=stride, padding=pad)
        dx, dw = (out * out).sum().gradient(X, W)
        return out.realize(), dx.realize(), dw.realize()
    for _ in range(3): jitted()
    elapsed = median_time(jitted, t["reps"], warmup=0, sync=device_sync(Device))
    return {"t": elapsed, "out": sample([r.numpy() for r in jitted()])}

def task_bf16(t: dict) -> dict:
    import numpy as np
    n, reps, fw_name = t["n"], t["reps"], t["framework"]
    # inputs exact in bfloat16, so every peer multiplies the same numbers; the reference sums in float64
    an, bn = [(x.view(np.uint32) & 0xFFFF0000).view(np.float32) for x in _inputs([(n, n), (n, n)])]
    ref = an.astype(np.float64) @ bn.astype(np.float64)
    if fw_name == "torch":
        torch = import_torch(t["threads"])
        a, b = torch.from_numpy(an).bfloat16(), torch.from_numpy(bn).bfloat16()
        return {"t": median_time(lambda: a @ b, reps, warmup=1), "err": _rel_err((a @ b).float().numpy(), ref)}
    from fusegrad import Tensor, Context, dtypes
    with Context(TC=t["tc"]):
        a, b = Tensor(an).cast(dtypes.bfloat16).realize(), Tensor(bn).cast(dtypes.bfloat16).realize()
        err = _rel_err((a @ b).float().numpy(), ref)
        kernel, kernels = fusegrad_kernel_time(lambda: a @ b, reps)
    return {"t": kernel, "err": err, "kernels": kernels}

# (kind, shape): a round shape first, then odd ones of about the same work
ODD_SHAPES = [("matmul", (1024, 1024, 1024)), ("matmul", (1023, 1023, 1023)), ("matmul", (999, 1001, 997)),
              ("matmul", (4, 336, 555, 784)), ("matmul", (4, 333, 555, 777)),
              ("sum", ((4096, 4096), 1)), ("sum", ((4095, 4097), 1)), ("sum", ((4096, 4096), 0)), ("sum", ((4095, 4097), 0)),
              ("sum", ((8192, 8192), None)), ("sum", ((8191, 8191), None)),
              ("conv", (32, 64, 64, 32, 3, 1)), ("conv", (32, 63, 65, 31, 3, 1)), ("conv", (4, 256, 256, 14, 1, 0)), ("conv", (4, 255, 257, 14, 1, 0))]

def _odd_label(kind: str, shape) -> str:
    if kind == "matmul": return ("x".join(map(str, shape[:-3])) + " batch of " if len(shape) > 3 else "") + "{}x{} @ {}x{}".format(shape[-3], shape[-2], shape[-2], shape[-1])
    if kind == "sum": return f"{'x'.join(map(str, shape[0]))}.sum({shape[1]})"
    b, cin, cout, size, k, pad = shape
    return f"conv {b}x{cin}x{size}x{size} -> {cout} k{k} p{pad}"

def task_odd(t: dict) -> dict:
    """Seconds per shape of ODD_SHAPES for one framework (numpy: no conv)."""
    fw_name, reps = t["framework"], t["reps"]
    times = {}
    if fw_name == "torch": torch = import_torch(t["threads"])
    else: fw, Tensor, TinyJit, GC, *_rest, Device = import_framework(fw_name) if fw_name != "numpy" else (None,) * 8
    for kind, shape in ODD_SHAPES:
        if kind == "matmul": arrays = _inputs([shape[:-3] + (shape[-3], shape[-2]), shape[:-3] + (shape[-2], shape[-1])])
        elif kind == "sum": arrays = _inputs([shape[0]])
        else:
            b, cin, cout, size, k, pad = shape
            arrays = _inputs([(b, cin, size, size), (cout, cin, k, k)])
        if fw_name == "numpy":
            if kind == "conv": continue
            run = (lambda a=arrays: a[0] @ a[1]) if kind == "matmul" else (lambda a=arrays, axis=shape[1]: a[0].sum(axis))
        elif fw_name == "torch":
            ts = [torch.from_numpy(a) for a in arrays]
            if kind == "matmul": run = lambda ts=ts: ts[0] @ ts[1]
            elif kind == "sum": run = (lambda ts=ts, axis=shape[1]: ts[0].sum(axis)) if shape[1] is not None else (lambda ts=ts: ts[0].sum())
            else: run = lambda ts=ts, pad=shape[5]: torch.nn.functional.conv2d(ts[0], ts[1], padding=pad)
        else:
            ts = [Tensor(a).realize() for a in arrays]
            if kind == "matmul": run = lambda ts=ts: (ts[0] @ ts[1]).realize()
            elif kind == "sum": run = lambda ts=ts, axis=shape[1]: ts[0].sum(axis).realize()
            else: run = lambda ts=ts, pad=shape[5]: ts[0].conv2d(ts[1], padding=pad).realize()
        times[_odd_label(kind, shape)] = median_time(run, reps, warmup=2)
    return {"times": times}

TASKS = {"matmul": task_matmul, "elementwise": task_elementwise, "mnist": task_mnist, "conv": task_conv, "bf16": task_bf16, "odd": task_odd}

# ================================================================ parent

def section_matmul(args, runner: ChildRunner) -> None:
    for n, layout in [(n, layout) for layout in args.layouts for n in args.sizes]:
        flops = 2 * n ** 3
        base = {"task": "matmul", "n": n, "reps": args.reps, "layout": layout}
        rows, errors, notes, results = [], [], [], []
        if "fusegrad" in args.peers:
            results.append(("fusegrad heuristic (kernel only)", runner.run(base, "fusegrad", cache=runner.cache_dir(f"mm{n}{layout}_heur"))))
            if n in (args.beam_sizes or []):
                cache = runner.cache_dir(f"mm{n}{layout}_beam")
                r1 = runner.run(dict(base, beam=args.beam), "fusegrad", cache=cache)
                r2 = runner.run(dict(base, beam=args.beam), "fusegrad", cache=cache) if r1["ok"] else r1
                results.append((f"fusegrad BEAM={args.beam} (kernel only)", r1))
                if r1["ok"] and r2["ok"]:
                    notes.append(f"BEAM={args.beam}: the first realize searched for {r1['search_s']:.1f} s ({r1['searches']} kernel(s)), "
                                 f"{r1['first']:.1f} s in all; in a new process sharing the cache dir the same realize took "
                                 f"{r2['first']*1e3:.0f} ms (search {r2['search_s']*1e3:.0f} ms: a disk-cache hit); opts found: {r1.get('opts')}")
                    if r2.get("opts") != r1.get("opts"): notes.append(f"WARNING: the cached run used other opts: {r2.get('opts')}")
        for name in ("torch", "numpy", "tinygrad"):
            if name in args.peers:
                label = {"torch": f"torch ({args.threads} threads)", "numpy": "numpy (OpenBLAS)", "tinygrad": "tinygrad (realize)"}[name]
                results.append((label, runner.run(base, name)))
        torch_t = next((r["t"] for label, r in results if label.startswith("torch") and r["ok"]), None)
        for label, r in results:
            if not r["ok"]:
                rows.append([label, status(r, errors, label)] + ["-"] * 5); continue
            rows.append([label, fmt(r["t"], 1e3, 1), f"{flops / r['t'] / 1e9:.1f}", ratio(torch_t, r["t"]),
                         fmt(r.get("e2e"), 1e3, 1), fmt(r.get("first"), 1e3, 0), f"{r['err']:.1e}" if "err" in r else "ref"])
        notes = [f"GFLOPS = 2·{n}³ ÷ time; '÷ torch' = torch time ÷ this time, i.e. throughput relative to PyTorch (>1: faster than torch)",
                 "fusegrad 'kernel only': median of the compiled kernel call (GlobalCounters.time_sum_s); e2e = lazy graph + schedule + "
                 "cached lookup + run; first = first realize in a new process with an empty cache (codegen + compile [+ search])",
                 "tinygrad: wall time of (a@b).realize() + synchronize (its schedule cache makes the overhead small at this size)",
                 "err = max |x - numpy| ÷ max |numpy| (float32)"] + notes
        title = f"1. matmul fp32 {n}x{n} @ {n}x{n}" if layout == "nn" else f"1. matmul fp32 {n}x{n} @ ({n}x{n}).T (a Linear layer's layout)"
        print_table(title, ["peer", "median ms", "GFLOPS", "÷ torch", "e2e ms", "first ms", "err"],
                    rows, notes + errors)

def section_elementwise(args, runner: ChildRunner) -> None:
    n, nbytes = args.size, 16 * args.size
    base = {"task": "elementwise", "size": n, "reps": args.reps}
    rows, errors, results = [], [], []
    for name in ("fusegrad", "torch", "numpy", "tinygrad"):
        if name not in args.peers: continue
        label = {"fusegrad": "fusegrad kernel only", "torch": f"torch eager ({args.threads} threads)", "numpy": "numpy",
                 "tinygrad": "tinygrad (realize)"}[name]
        results.append((label, runner.run(base, name)))
    fg = next((r for label, r in results if label.startswith("fusegrad") and r["ok"]), None)
    if fg is not None:
        results.insert(1, ("fusegrad realize (e2e)", {"ok": True, "t": fg["e2e"], "err": fg["err"]}))
    torch_t = next((r["t"] for label, r in results if label.startswith("torch") and r["ok"]), None)
    for label, r in results:
        if not r["ok"]:
            rows.append([label, status(r, errors, label)] + ["-"] * 4); continue
        rows.append([label, fmt(r["t"], 1e3, 2), f"{nbytes / r['t'] / 1e9:.2f}", ratio(torch_t, r["t"]), f"{r['err']:.1e}" if "err" in r else "ref"])
    notes = [f"GB/s counts 16 bytes per element ({nbytes/2**20:.0f} MiB per call: 3 float32 reads + 1 write)",
             "'÷ torch' = torch time ÷ this time (>1: faster than torch eager)",
             f"fusegrad: {fg['kernels']} kernel(s)" if fg else "", "err = max relative difference from numpy"]
    print_table(f"2. elementwise exp(relu(a*b+c)) over {n:,} float32", ["peer", "median ms", "GB/s", "÷ torch", "err"], rows,
                [x for x in notes if x] + errors)

def section_mnist(args, runner: ChildRunner) -> None:
    base = {"task": "mnist", "batch": args.mnist_batch, "steps": args.mnist_steps}
    rows, errors, results = [], [], []
    for name in ("fusegrad", "torch", "tinygrad"):
        if name not in args.peers: continue
        results.append((name, runner.run(base, name, cache=runner.cache_dir(f"mnist_{name}"))))
    ref = next((r for name, r in results if name == "fusegrad" and r["ok"]), None)
    for name, r in results:
        if not r["ok"]:
            rows.append([name, status(r, errors, name)] + ["-"] * 6); continue
        rows.append([name + (" (TinyJit)" if name != "torch" else " eager"), fmt(r["step"], 1e3, 1),
                     ratio(r["step"], ref["step"]) if ref else "-", f"{args.mnist_batch / r['step']:.0f}", fmt(r["first"], 1, 2),
                     str(r.get("kernels", "-")), f"{r['first_loss']:.3f} -> {r['last_loss']:.3f}"])
    notes = [f"model: Conv2d(1,32,5) relu, Conv2d(32,32,5) relu, BatchNorm, max_pool2d, Conv2d(32,64,3) relu, Conv2d(64,64,3) relu, "
             f"BatchNorm, max_pool2d, flatten, Linear(576,10); Adam lr 1e-3; batch {args.mnist_batch} of random 28x28 data",
             f"ms/step: median of {args.mnist_steps} steps (fusegrad/tinygrad: TinyJit replays); '÷ fusegrad' = peer time ÷ fusegrad time "
             "(>1: fusegrad faster)",
             "first s: the first step in a new process with an empty on-disk cache (fusegrad/tinygrad: graph + schedule + codegen + compile "
             "+ run, the JIT's warm-up call); kernels: in that step"]
    if ref: notes.append(f"fusegrad JIT capture call (2nd step) {ref['capture']:.2f} s")
    print_table("3. MNIST CNN training step (Adam), jitted", ["peer", "ms / step", "÷ fusegrad", "img/s", "first s", "kernels", "loss"],
                rows, notes + errors)

def section_conv(args, runner: ChildRunner) -> None:
    rows, errors = [], []
    for shape in CONV_SHAPES:
        b, cin, cout, size, k, stride, pad = shape
        flops = 3 * 2 * b * cout * ((size + 2 * pad - k) // stride + 1) ** 2 * cin * k * k
        label = f"{b}x{cin}x{size}x{size} -> {cout} k{k} s{stride} p{pad}"
        base = {"task": "conv", "shape": shape, "reps": args.reps}
        results = {name: runner.run(base, name) for name in ("fusegrad", "torch") if name in args.peers}
        fg, th = results.get("fusegrad"), results.get("torch")
        if fg is None or not fg["ok"]:
            rows.append([label, status(fg, errors, label) if fg else "-"] + ["-"] * 4); continue
        err = max(_rel_err(a, b_) for a, b_ in zip(fg["out"], th["out"])) if th and th["ok"] else None   # on 256 sampled elements each
        rows.append([label, fmt(fg["t"], 1e3, 1), f"{flops / fg['t'] / 1e9:.0f}", fmt(th["t"], 1e3, 1) if th and th["ok"] else "-",
                     ratio(th["t"], fg["t"]) if th and th["ok"] else "-", f"{err:.1e}" if err is not None else "-"])
    notes = ["forward + input and weight gradients of sum(out²): fusegrad under TinyJit (median of replays), "
             "torch eager; GFLOPS count 3 convolutions' multiply-adds", "'÷ fusegrad' = torch time ÷ fusegrad time (>1: fusegrad faster)",
             "err = max relative difference from torch over the output and both gradients"]
    print_table("4. conv2d forward + backward", ["shape", "fusegrad ms", "GFLOPS", "torch ms", "÷ fusegrad", "err"], rows, notes + errors)

def section_bf16(args, runner: ChildRunner) -> None:
    rows, errors = [], []
    for n in args.sizes:
        flops, base = 2 * n ** 3, {"task": "bf16", "n": n, "reps": args.reps}
        results = []
        if "fusegrad" in args.peers:
            results += [(f"fusegrad tensor core (TC=1, kernel only)", runner.run(dict(base, tc=1), "fusegrad")),
                        (f"fusegrad without (TC=0, kernel only)", runner.run(dict(base, tc=0), "fusegrad"))]
        if "torch" in args.peers: results.append((f"torch bfloat16 ({args.threads} threads)", runner.run(base, "torch")))
        torch_t = next((r["t"] for label, r in results if label.startswith("torch") and r["ok"]), None)
        for label, r in results:
            if not r["ok"]:
                rows.append([f"{n}: {label}", status(r, errors, label)] + ["-"] * 3); continue
            rows.append([f"{n}: {label}", fmt(r["t"], 1e3, 2), f"{flops / r['t'] / 1e9:.1f}", ratio(torch_t, r["t"]), f"{r['err']:.1e}"])
    notes = ["inputs are exact bfloat16 values; the result is bfloat16 (float32 sums); err = max |x - float64 ref| ÷ max |ref|",
             "'÷ torch' = torch time ÷ this time (>1: faster than torch)"]
    print_table("5. matmul bfloat16", ["N: peer", "median ms", "GFLOPS", "÷ torch", "err"], rows, notes + errors)

def section_odd(args, runner: ChildRunner) -> None:
    base = {"task": "odd", "reps": args.reps}
    results = {name: runner.run(base, name) for name in ("fusegrad", "torch", "numpy") if name in args.peers}
    errors, rows = [], []
    for kind, shape in ODD_SHAPES:
        label = _odd_label(kind, shape)
        row = [label]
        for name in ("fusegrad", "torch", "numpy"):
            r = results.get(name)
            row.append(fmt(r["times"][label], 1e3, 2) if r and r["ok"] and label in r["times"] else ("-" if r is None or r["ok"] else status(r, errors, name)))
        fg, th = results.get("fusegrad"), results.get("torch")
        row.append(ratio(th["times"][label], fg["times"][label]) if fg and th and fg["ok"] and th["ok"] else "-")
        rows.append(row)
    notes = ["end to end medians (fusegrad: build, schedule and run of a realize; inputs realized before)",
             "'÷ fusegrad' = torch time ÷ fusegrad time (>1: fusegrad faster); compare each odd row with the round one above it"]
    print_table("6. odd shapes (cliffs)", ["op", "fusegrad ms", "torch ms", "numpy ms", "÷ fusegrad"], rows, notes + errors)

def main() -> None:
    sections = {name[len("section_"):]: fn for name, fn in globals().items() if name.startswith("section_")}
    run_sections("fusegrad kernel bench (bench/bench_kernels.py)", __file__, parse_args(), TASKS, sections)

if __name__ == "__main__":
    main()
