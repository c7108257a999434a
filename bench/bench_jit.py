#!/usr/bin/env python3
"""JIT benchmarks: TinyJit replay, eager dispatch, training-step overheads and GPT-2 decode,
fusegrad next to tinygrad and PyTorch.

    python bench/bench_jit.py                       # everything (~3-4 min on a quiet 2-core machine)
    python bench/bench_jit.py --only replay eager   # a subset: replay eager mlp gpt2
    python bench/bench_jit.py --gpt2-layers 2 --gpt2-dim 256 --gpt2-vocab 4096   # a smaller GPT-2
    python bench/bench_jit.py --help

1. replay: a jitted function of K tiny kernels (K chained ``(x+1).realize()`` on 16 floats) —
   time per call ÷ K (the cost of one captured kernel on replay), and the marginal cost per kernel.
2. eager: ``(x+1).realize()`` on 16 floats (graph build + schedule + cached kernel), PyTorch ``x+1``.
3. mlp: an MLP training step with Adam: cold (first step of a new process with an empty on-disk
   cache: schedule + codegen + compile), new process with a warm disk cache, cached (an un-jitted
   step when every kernel is compiled: what re-scheduling costs), and jitted (replay).
4. gpt2: decode ms/token of a randomly initialized 124M GPT-2 (fusegrad.examples.gpt2, jitted
   KV-cache step) vs the same architecture in PyTorch eager.

Every measurement runs in its own child process (see bench/_benchutil.py). Medians; no
assertions on timings. See bench/README.md.
"""
from __future__ import annotations
import argparse, os, re, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _benchutil import (run_sections, ChildRunner, SkipPeer, cache_entries, child_main, device_sync, fmt, import_framework, import_torch, median_time, print_header,
                        print_table, ratio, report_load_after, status, torch_gpt2)

SECTIONS = ["replay", "eager", "mlp", "gpt2"]

def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--only", nargs="+", choices=SECTIONS, default=SECTIONS, help="run only these sections")
    p.add_argument("--peers", nargs="+", choices=["fusegrad", "tinygrad", "torch"], default=["fusegrad", "tinygrad", "torch"],
                   help="which frameworks to run (fusegrad is the reference column of the ratios)")
    p.add_argument("--threads", type=int, default=2, help="threads per peer (OMP_NUM_THREADS, torch.set_num_threads)")
    p.add_argument("--reps", type=int, default=21, help="timed repetitions for the microsecond-scale benches (median)")
    p.add_argument("--kernels", type=int, default=50, help="K: kernels in the replay bench's jitted function")
    p.add_argument("--numel", type=int, default=16, help="floats per tensor in the replay and eager benches")
    p.add_argument("--mlp-sizes", type=int, nargs="+", default=[784, 512, 512, 256, 10],
                   help="MLP layer widths (input ... classes): len-1 Linear layers")
    p.add_argument("--mlp-batch", type=int, default=64)
    p.add_argument("--mlp-steps", type=int, default=10, help="timed steps for the cached and jitted MLP rows (median)")
    p.add_argument("--gpt2-layers", type=int, default=12)
    p.add_argument("--gpt2-dim", type=int, default=768)
    p.add_argument("--gpt2-heads", type=int, default=12)
    p.add_argument("--gpt2-vocab", type=int, default=50257)
    p.add_argument("--gpt2-context", type=int, default=1024)
    p.add_argument("--gpt2-prompt", type=int, default=8, help="prompt length (tokens) before decoding")
    p.add_argument("--gpt2-tokens", type=int, default=12, help="tokens to decode; the first 2 (JIT warm-up, capture) are not timed")
    p.add_argument("--gpt2-profile", type=int, default=6, help="list fusegrad's N slowest captured decode kernels (0: off)")
    p.add_argument("--timeout", type=float, default=600, help="seconds before a child process is abandoned")
    p.add_argument("--verbose", action="store_true", help="show the children's stderr")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if min(args.reps, args.kernels, args.numel, args.mlp_batch, args.mlp_steps, args.threads) < 1 or len(args.mlp_sizes) < 2 \
       or args.gpt2_tokens < 3:
        p.error("counts must be positive, --mlp-sizes needs at least 2 widths and --gpt2-tokens at least 3")
    return args

# ================================================================ child tasks (run in a fresh process each)

def task_replay(t: dict) -> dict:
    """Per-call time of a jitted function of K kernels, and of the same with 1 kernel."""
    fw, Tensor, TinyJit, GC, *_rest, Device = import_framework(t["framework"])
    import numpy as np
    sync = device_sync(Device)
    out = {}
    for k in sorted({1, t["kernels"]}):
        def chain(x, k=k):
            for _ in range(k): x = (x + 1).realize()   # each op its own kernel
            return x
        step = TinyJit(chain)
        x = Tensor(np.zeros(t["numel"], dtype=np.float32)).realize()
        for _ in range(3): y = step(x)               # warm-up, capture, first replay
        if t["framework"] == "fusegrad" and not t.get("graph", True): step.captured.graph = None
        if t["framework"] == "fusegrad": captured = len(step.captured.jit_cache)
        else: captured = len(step.captured.linear.src) if hasattr(step.captured, "linear") else len(step.captured.jit_cache)
        GC.reset()
        y = step(x); sync()
        ok = bool(np.allclose(y.numpy(), k))
        per_call = median_time(lambda: step(x), t["reps"], warmup=3, sync=sync)
        out[str(k)] = {"per_call": per_call, "captured": captured, "ok": ok, "kernel_count": GC.kernel_count}
    if t["framework"] == "fusegrad": out["graph"] = type(step.captured.graph).__name__ if step.captured.graph is not None else None
    return out

def task_eager(t: dict) -> dict:
    import numpy as np
    if t["framework"] == "torch":
        torch = import_torch(t["threads"])
        x = torch.zeros(t["numel"])
        return {"t": median_time(lambda: x + 1, t["reps"] * 10, warmup=20)}
    fw, Tensor, TinyJit, GC, *_rest, Device = import_framework(t["framework"])
    sync = device_sync(Device)
    x = Tensor(np.zeros(t["numel"], dtype=np.float32)).realize()
    (x + 1).realize()                         # compile once
    GC.reset()
    (x + 1).realize(); sync()
    kernels = GC.kernel_count
    return {"t": median_time(lambda: (x + 1).realize(), t["reps"] * 3, warmup=5, sync=sync), "kernels": kernels}

# ---------------------------------------------------------------- MLP training step

def task_mlp(t: dict) -> dict:
    """cold first step (this is a new process), then cached un-jitted steps, then jitted steps."""
    import numpy as np
    sizes, batch, steps = t["sizes"], t["batch"], t["steps"]
    rng = np.random.default_rng(0)
    xs = rng.standard_normal((batch, sizes[0]), dtype=np.float32)
    ys = rng.integers(0, sizes[-1], batch).astype(np.int32)
    if t["framework"] == "torch":
        torch = import_torch(t["threads"])
        layers = []
        for i in range(len(sizes) - 1):
            layers.append(torch.nn.Linear(sizes[i], sizes[i + 1]))
            if i < len(sizes) - 2: layers.append(torch.nn.ReLU())
        model = torch.nn.Sequential(*layers)
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        X, Y = torch.from_numpy(xs), torch.from_numpy(ys).long()
        def step():
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(X), Y)
            loss.backward()
            opt.step()
            return loss
        st = time.perf_counter(); first_loss = step().item(); cold = time.perf_counter() - st
        cached = median_time(step, steps, warmup=2)
        return {"cold": cold, "cached": cached, "first_loss": first_loss, "last_loss": step().item()}

    fw, Tensor, TinyJit, GC, nn, Adam, get_parameters, Device = import_framework(t["framework"])
    sync = device_sync(Device)
    Tensor.manual_seed(0)
    class MLP:
        def __init__(self): self.layers = [nn.Linear(sizes[i], sizes[i + 1]) for i in range(len(sizes) - 1)]
        def __call__(self, x):
            for i, layer in enumerate(self.layers):
                x = layer(x)
                if i < len(self.layers) - 1: x = x.relu()
            return x
    model = MLP()
    params = get_parameters(model)
    opt = Adam(params, lr=1e-3)
    X, Y = Tensor(xs).realize(), Tensor(ys).realize()
    Tensor.realize(*params)
    def step(x, y):
        with training(fw, Tensor):
            opt.zero_grad()
            loss = model(x).sparse_categorical_crossentropy(y).backward()
            opt.step()
            return loss.realize()
    sync()
    st = time.perf_counter(); first_loss = step(X, Y).item(); cold = time.perf_counter() - st
    GC.reset()
    step(X, Y); sync()
    kernels = GC.kernel_count
    cached = median_time(lambda: step(X, Y), steps, warmup=1, sync=sync)
    jstep = TinyJit(step)
    st = time.perf_counter(); jstep(X, Y); sync(); jit_warm = time.perf_counter() - st
    st = time.perf_counter(); jstep(X, Y); sync(); jit_capture = time.perf_counter() - st
    jitted = median_time(lambda: jstep(X, Y), steps * 3, warmup=2, sync=sync)
    if t["framework"] == "fusegrad": captured = len(jstep.captured.jit_cache)
    else: captured = len(jstep.captured.linear.src) if hasattr(jstep.captured, "linear") else len(jstep.captured.jit_cache)
    return {"cold": cold, "cached": cached, "jitted": jitted, "kernels": kernels, "captured": captured, "jit_warm": jit_warm,
            "jit_capture": jit_capture, "first_loss": first_loss, "last_loss": jstep(X, Y).item()}

# ---------------------------------------------------------------- GPT-2 decode

def task_gpt2(t: dict) -> dict:
    import numpy as np
    c = t["config"]
    prompt = [int(v) for v in np.random.default_rng(0).integers(0, c["vocab"], t["prompt"])]
    if t["framework"] == "torch": return _torch_gpt2(t, c, prompt)
    try:
        from fusegrad.examples.gpt2 import GPT2Config, random_model, generate
    except ImportError as e: raise SkipPeer(f"fusegrad.examples.gpt2 not found ({e})")
    from fusegrad import GlobalCounters
    st = time.perf_counter()
    model = random_model(GPT2Config(n_layers=c["layers"], dim=c["dim"], n_heads=c["heads"], vocab_size=c["vocab"], max_context=c["context"]))
    init = time.perf_counter() - st
    timings: list[float] = []
    st = time.perf_counter()
    tokens = generate(model, prompt, t["tokens"], timings=timings)
    total = time.perf_counter() - st
    steady = sorted(timings[2:])
    result = {"init": init, "total": total, "warmup_steps": timings[:2], "ms_token": steady[len(steady) // 2],
              "ms_token_min": steady[0], "captured": len(model.forward_jit.jit_cache), "tokens": tokens,
              "graph": type(model.forward_jit.captured.graph).__name__ if model.forward_jit.captured.graph is not None else None}
    if t.get("profile"):   # time every captured kernel on its own at the last position
        captured = model.forward_jit.captured
        var_vals = {var: len(prompt) + t["tokens"] - 2 for var in captured.variables}
        per_name: dict[str, list] = {}
        total_k = 0.0
        for item in captured.jit_cache:   # best of 3 runs each (the first may touch cold memory)
            el = min(item.run(var_vals, wait=True, do_update_stats=False) or 0.0 for _ in range(3))
            total_k += el
            name = getattr(item.prg, "display_name", type(item.prg).__name__)
            name = re.sub(r"\x1b\[[0-9;]*m", "", name)
            entry = per_name.setdefault(name, [0.0, 0, 0])
            entry[0] += el; entry[1] += 1
            entry[2] = getattr(item.prg, "mem_estimate", 0) if isinstance(getattr(item.prg, "mem_estimate", 0), int) else 0
        top = sorted(per_name.items(), key=lambda kv: -kv[1][0])[:t["profile"]]
        result["profile"] = {"sum_kernels": total_k, "top": [(n, v[0], v[1], v[2]) for n, v in top]}
    return result

def _torch_gpt2(t: dict, c: dict, prompt: list[int]) -> dict:
    torch = import_torch(t["threads"])
    GPT2 = torch_gpt2(torch, c)
    torch.manual_seed(0)
    st = time.perf_counter()
    model = GPT2().eval()
    init = time.perf_counter() - st
    timings = []
    with torch.no_grad():
        st = time.perf_counter()
        token = int(model(torch.tensor([prompt]), 0).argmax(-1).item())
        tokens = [token]
        for pos in range(len(prompt), len(prompt) + t["tokens"] - 1):
            s = time.perf_counter()
            token = int(model(torch.tensor([[token]]), pos).argmax(-1).item())
            timings.append(time.perf_counter() - s)
            tokens.append(token)
        total = time.perf_counter() - st
    steady = sorted(timings[2:])
    return {"init": init, "total": total, "ms_token": steady[len(steady) // 2], "ms_token_min": steady[0], "tokens": tokens}

def training(fw, Tensor):
    """Training mode: ``Tensor.train()`` where it exists (fusegrad, older tinygrad), else ``Context(TRAINING=1)`` (tinygrad 0.14)."""
    return Tensor.train() if hasattr(Tensor, "train") else fw.Context(TRAINING=1)

TASKS = {"replay": task_replay, "eager": task_eager, "mlp": task_mlp, "gpt2": task_gpt2}

# ================================================================ parent: run children, print tables

def section_replay(args, runner: ChildRunner) -> None:
    K = args.kernels
    rows, notes, errors = [], [], []
    base = {"task": "replay", "kernels": K, "numel": args.numel, "reps": args.reps}
    peers = []
    if "fusegrad" in args.peers:
        peers += [("fusegrad (CPUGraph: one native call)", "fusegrad", {}),
                  ("fusegrad (graph off: Python loop over ExecItems)", "fusegrad", {"graph": False})]
    if "tinygrad" in args.peers: peers.append(("tinygrad", "tinygrad", {}))
    ref = None
    for label, framework, extra in peers:
        r = runner.run(dict(base, **extra), framework)
        if not r["ok"]:
            rows.append([label, status(r, errors, label)] + ["-"] * 5)
            continue
        rk, r1 = r[str(K)], r["1"]
        per_kernel = rk["per_call"] / K
        marginal = (rk["per_call"] - r1["per_call"]) / (K - 1) if K > 1 else None
        if ref is None: ref = per_kernel
        if label.startswith("fusegrad (CPUGraph") and r.get("graph") is None: label = "fusegrad (no device graph)"
        rows.append([label, fmt(rk["per_call"], 1e6, 1), fmt(per_kernel, 1e6, 2), fmt(marginal, 1e6, 2), fmt(r1["per_call"], 1e6, 1),
                     f"{rk['captured']}" + ("" if rk["ok"] else " WRONG RESULT"), ratio(per_kernel, ref)])
    notes += [f"the jitted function runs K={K} chained (x+1).realize() on {args.numel} float32 (each op its own kernel); "
              f"median of {args.reps} replays after warm-up/capture",
              "us/kernel = per call ÷ K (target for fusegrad: <= 5 us); marginal = (t(K) - t(1)) ÷ (K-1), i.e. without the "
              "fixed per-call cost (input checks, buffer swap) that the 1-kernel column shows",
              "captured = kernels in the JIT capture (must equal K); '÷ fusegrad' = that row's us/kernel ÷ fusegrad's (>1: fusegrad faster)",
              "graph off: the capture's device graph is dropped after capture (bench only), so replay calls ExecItem.run per kernel"]
    print_table(f"1. TinyJit replay cost per captured kernel (K={K})",
                ["peer", "us / call", "us / kernel", "marginal us / kernel", "us / call, K=1", "captured", "÷ fusegrad"], rows, notes + errors)

def section_eager(args, runner: ChildRunner) -> None:
    rows, ref, errors = [], None, []
    base = {"task": "eager", "numel": args.numel, "reps": args.reps}
    for label, framework in [("fusegrad (x+1).realize()", "fusegrad"), ("tinygrad (x+1).realize()", "tinygrad"), ("torch x+1", "torch")]:
        if framework not in args.peers: continue
        r = runner.run(base, framework)
        if not r["ok"]:
            rows.append([label, status(r, errors, label), "-", "-"]); continue
        if framework == "fusegrad": ref = r["t"]
        rows.append([label, fmt(r["t"], 1e6, 1), str(r.get("kernels", "-")), ratio(r["t"], ref)])
    print_table(f"2. eager tiny op on {args.numel} float32", ["peer", "us / op", "kernels", "÷ fusegrad"], rows,
                ["fusegrad/tinygrad: build the lazy graph, schedule, find the compiled kernel in the cache, run it; "
                 "torch: a plain eager op", "'÷ fusegrad' = peer time ÷ fusegrad time (>1: fusegrad faster)"] + errors)

def section_mlp(args, runner: ChildRunner) -> None:
    sizes = args.mlp_sizes
    base = {"task": "mlp", "sizes": sizes, "batch": args.mlp_batch, "steps": args.mlp_steps}
    rows, notes, results, errors, cache_notes = [], [], {}, [], []
    for framework in ["fusegrad", "tinygrad", "torch"]:
        if framework not in args.peers: continue
        cache = runner.cache_dir(f"mlp_{framework}")
        r = runner.run(base, framework, cache=cache)            # empty on-disk cache: the cold row
        if framework != "torch": cache_notes.append(f"{framework}: {cache_entries(cache)}")
        if r["ok"] and framework != "torch":
            r2 = runner.run(base, framework, cache=cache)       # same cache dir again: a new process with a warm disk cache
            r["cold_disk"] = r2["cold"] if r2["ok"] else None
        results[framework] = r
    ms = lambda v: fmt(v, 1e3, 2)
    ref = results.get("fusegrad") if results.get("fusegrad", {}).get("ok") else None
    for framework, r in results.items():
        if not r["ok"]:
            rows.append([framework, status(r, errors, framework)] + ["-"] * 6); continue
        rows.append([framework, ms(r["cold"]), ms(r.get("cold_disk")), ms(r["cached"]), ms(r.get("jitted")),
                     f"{r['kernels']} / {r['captured']}" if "kernels" in r else "-",
                     f"{r['first_loss']:.3f} -> {r['last_loss']:.3f}"])
    if ref is not None:
        for framework, r in results.items():
            if framework == "fusegrad" or not r["ok"]: continue
            rows.append([f"{framework} ÷ fusegrad", ratio(r["cold"], ref["cold"]), ratio(r.get("cold_disk"), ref.get("cold_disk")),
                         ratio(r["cached"], ref["cached"]), ratio(r.get("jitted"), ref.get("jitted")), "", ""])
        if ref.get("jitted"):
            rows.append(["fusegrad cached ÷ jitted", "", "", "", ratio(ref["cached"], ref["jitted"]), "", ""])
    layers = " -> ".join(map(str, sizes))
    notes += [f"MLP {layers} ({len(sizes)-1} Linear layers, relu), cross-entropy, Adam; batch {args.mlp_batch}; random data",
              "cold: the first step in a new process with an empty on-disk cache (schedule + codegen + C compile + run); "
              "new proc, disk cache: the same in a second new process sharing that cache dir (codegen runs, compiles are disk hits); "
              "torch's cold is just its first step (no compilation)",
              f"cached: median of {args.mlp_steps} un-jitted steps once every kernel is compiled (graph build + schedule + run); "
              f"jitted: median of {3*args.mlp_steps} TinyJit replays",
              "kernels: per un-jitted step (GlobalCounters.kernel_count) / in the JIT capture; loss: first step -> after the timed steps",
              "'X ÷ fusegrad' rows = that peer's time ÷ fusegrad's (>1: fusegrad faster)",
              "throwaway on-disk caches after the cold process: " + "; ".join(cache_notes)]
    if ref is not None:
        notes.append(f"fusegrad JIT warm-up call {ref['jit_warm']*1e3:.1f} ms, capture call {ref['jit_capture']*1e3:.1f} ms")
    print_table("3. MLP training step (ms)", ["peer", "cold (empty cache)", "new proc, disk cache", "cached (no jit)", "jitted",
                                              "kernels step / jit", "loss"], rows, notes + errors)

def section_gpt2(args, runner: ChildRunner) -> None:
    import importlib.util
    cfg = {"layers": args.gpt2_layers, "dim": args.gpt2_dim, "heads": args.gpt2_heads, "vocab": args.gpt2_vocab, "context": args.gpt2_context}
    title = (f"4. GPT-2 decode ({cfg['layers']} layers, dim {cfg['dim']}, {cfg['heads']} heads, vocab {cfg['vocab']}, random weights), "
             f"prompt {args.gpt2_prompt} tokens, {args.gpt2_tokens} decoded")
    try: found = importlib.util.find_spec("fusegrad.examples.gpt2") is not None
    except ImportError: found = False
    if not found:
        print(f"\n== {title}\nskipped: fusegrad.examples.gpt2 not found")
        return
    base = {"task": "gpt2", "config": cfg, "prompt": args.gpt2_prompt, "tokens": args.gpt2_tokens}
    rows, results, errors = [], {}, []
    for framework in ["fusegrad", "torch"]:
        if framework not in args.peers: continue
        r = runner.run(dict(base, profile=args.gpt2_profile if framework == "fusegrad" else 0), framework,
                       cache=runner.cache_dir(f"gpt2_{framework}"))
        results[framework] = r
    ref = results.get("fusegrad") if results.get("fusegrad", {}).get("ok") else None
    for framework, r in results.items():
        if not r["ok"]:
            rows.append([framework, status(r, errors, framework)] + ["-"] * 5); continue
        warm = ", ".join(f"{x*1e3:.0f}" for x in r.get("warmup_steps", [])) or "-"
        rows.append([framework + (" (TinyJit, symbolic start_pos)" if framework == "fusegrad" else " eager, no_grad"),
                     fmt(r["ms_token"], 1e3, 1), fmt(r["ms_token_min"], 1e3, 1), ratio(r["ms_token"], ref["ms_token"]) if ref else "-",
                     str(r.get("captured", "-")), f"{r['init']:.1f}", warm])
    notes = [f"ms/token: median of the decode steps after the first two (fusegrad: JIT warm-up and capture), each step = model "
             f"call for one token + reading the sampled token back; '÷ fusegrad' = peer ms ÷ fusegrad ms (>1: fusegrad faster)",
             "init s: building the randomly initialized model; warm-up ms: fusegrad's first two decode steps (warm-up, capture)",
             "both sample greedily from random weights, so the token ids differ between frameworks; they only show the loop runs"]
    if ref and ref.get("profile"):
        prof = ref["profile"]
        notes.append(f"fusegrad: {ref['captured']} captured kernels, replayed via {ref.get('graph') or 'Python loop'}; "
                     f"sum of kernel times run one by one (best of 3 each): {prof['sum_kernels']*1e3:.1f} ms; slowest kernels:")
        for name, secs, count, mem in prof["top"]:
            gbs = f", {mem*count/secs/1e9:.1f} GB/s" if mem and secs > 0 else ""
            notes.append(f"    {secs*1e3:8.2f} ms  x{count:<3d} {name}{gbs}")
    print_table(title, ["peer", "ms / token", "best ms", "÷ fusegrad", "captured kernels", "init s", "warm-up ms"], rows, notes + errors)

def main() -> None:
    sections = {name[len("section_"):]: fn for name, fn in globals().items() if name.startswith("section_")}
    run_sections("fusegrad JIT bench (bench/bench_jit.py)", __file__, parse_args(), TASKS, sections)

if __name__ == "__main__":
    main()
