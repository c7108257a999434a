#!/usr/bin/env python3
"""GPT-2 prefill benchmark: one prompt through the whole model, fusegrad next to PyTorch.

    python bench/bench_prefill.py                             # 124M GPT-2, 1 x 128 prompt, random weights
    python bench/bench_prefill.py --prompt 32 --layers 2      # a smaller run
    python bench/bench_prefill.py --no-profile                # skip fusegrad's per-kernel breakdown

fusegrad runs the prefill the way ``fusegrad.examples.gpt2.generate`` does: ``model(tokens, 0, temp, noise)``,
unjitted (a concrete start_pos and a causal mask), then ``.item()`` on the sampled token. PyTorch runs the
same architecture (``_benchutil.torch_gpt2``, shared with bench_jit.py; eager, ``no_grad``,
``scaled_dot_product_attention``), projecting only the last position onto the vocabulary as the example does.
Both: warm calls, median of ``--reps``.

With the profile on, a second fusegrad child times every kernel of one prefill (``DEBUG=2`` timings) and
groups them by kind: attention projections, attention matmuls, softmax, layernorm, MLP matmuls, vocab
projection, other. Medians only; no assertions on timings. See bench/README.md.
"""
from __future__ import annotations
import argparse, contextlib, io, os, re, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _benchutil import ChildRunner, fmt, import_torch, median_time, print_table, ratio, run_sections, status, torch_gpt2

SECTIONS = ["prefill"]

def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--only", nargs="+", choices=SECTIONS, default=SECTIONS, help="run only these sections")
    p.add_argument("--peers", nargs="+", choices=["fusegrad", "torch"], default=["fusegrad", "torch"], help="which frameworks to run")
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--dim", type=int, default=768)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--vocab", type=int, default=50257)
    p.add_argument("--context", type=int, default=1024)
    p.add_argument("--prompt", type=int, default=128, help="prompt length (tokens), batch 1")
    p.add_argument("--reps", type=int, default=5, help="timed prefills (median printed)")
    p.add_argument("--warmup", type=int, default=2, help="untimed prefills first (the first one compiles)")
    p.add_argument("--no-profile", action="store_true", help="skip the per-kernel breakdown of fusegrad's prefill")
    p.add_argument("--threads", type=int, default=2, help="threads for fusegrad's kernels and PyTorch")
    p.add_argument("--timeout", type=float, default=1200, help="seconds per child process")
    p.add_argument("--verbose", action="store_true", help="print every child's stderr")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if min(args.layers, args.dim, args.heads, args.vocab, args.prompt, args.reps) < 1 or args.prompt > args.context or args.dim % args.heads:
        p.error("sizes must be positive, --prompt at most --context, and --dim divisible by --heads")
    return args

def _prompt(c: dict) -> list[int]:
    import numpy as np
    return [int(v) for v in np.random.default_rng(0).integers(0, c["vocab"], c["prompt"])]

# ---------------------------------------------------------------- children

def task_prefill(t: dict) -> dict:
    c = t["config"]
    if t["framework"] == "torch": return _torch_prefill(t, c)
    import numpy as np
    from fusegrad import Tensor, dtypes
    from fusegrad.examples.gpt2 import GPT2Config, random_model
    model = random_model(GPT2Config(n_layers=c["layers"], dim=c["dim"], n_heads=c["heads"], vocab_size=c["vocab"], max_context=c["context"]))
    prompt = _prompt(c)
    temperature = Tensor([0.0], dtype=dtypes.float32).realize()
    noise = Tensor(np.random.default_rng(1).random((1, c["vocab"]), dtype=np.float32)).realize()
    def prefill() -> int: return model(Tensor([prompt], dtype=dtypes.int32), 0, temperature, noise).item()
    start = time.perf_counter()
    token = prefill()
    first = time.perf_counter() - start
    result = {"ms": median_time(prefill, t["reps"], t["warmup"]), "first": first, "token": token}
    if t.get("profile"): result["profile"] = _kernel_profile(prefill)
    return result

KERNEL_LINE = re.compile(r"\*\*\* \S+\s+\d+\s+(\S+)\s+arg.*?tm\s+([\d.]+)us/")

def _kernel_profile(prefill) -> list[tuple[str, float]]:
    """(kernel name, seconds) for every kernel of one prefill, read off the DEBUG=2 lines."""
    from fusegrad import Context
    out = io.StringIO()
    with contextlib.redirect_stdout(out), Context(DEBUG=2): prefill()
    return [(re.sub(r"\x1b\[[0-9;]*m", "", m.group(1)), float(m.group(2)) * 1e-6) for m in KERNEL_LINE.finditer(out.getvalue())]

def _torch_prefill(t: dict, c: dict) -> dict:
    torch = import_torch(t["threads"])
    GPT2 = torch_gpt2(torch, c)
    torch.manual_seed(0)
    model = GPT2().eval()
    tokens = torch.tensor([_prompt(c)])
    with torch.no_grad():
        def prefill() -> int: return int(model(tokens, 0).argmax(-1).item())
        start = time.perf_counter()
        token = prefill()
        first = time.perf_counter() - start
        return {"ms": median_time(prefill, t["reps"], t["warmup"]), "first": first, "token": token}

TASKS = {"prefill": task_prefill}

# ---------------------------------------------------------------- parent

def kernel_kind(name: str, c: dict) -> str:
    """Which part of GPT-2 a kernel of the prefill belongs to, from the sizes in its name (r_128_2304_768)."""
    dim, heads, seq, vocab = c["dim"], c["heads"], c["prompt"], c["vocab"]
    sizes = [int(s) for s in re.findall(r"\d+", name)]
    if vocab in sizes: return "vocab projection (+ sampling)"
    # nn.Embedding is a one-hot sum over the vocabulary, whose axis the kernel splits (50257 = 29 x 1733)
    if any(a * b == vocab for a in sizes for b in sizes): return "token embedding (one-hot over vocab)"
    if name.startswith("r_") and sizes[:1] == [heads] and len(sizes) >= 4: return "attention matmuls (QK^T, AV)"
    if sizes[:1] == [heads] or sizes == [seq, seq]: return "softmax + causal mask"
    if name.startswith("r_") and len(sizes) >= 3 and 4 * dim in sizes[-2:]: return "MLP matmuls (+ gelu, bias, residual)"
    if name.startswith("r_") and len(sizes) >= 3: return "attention projections (qkv, out)"
    if sizes[-2:] == [seq, dim] or sizes[-1:] == [dim]: return "layernorm + residual"
    return "other (cache writes, elementwise)"

def section_prefill(args, runner: ChildRunner) -> None:
    cfg = {"layers": args.layers, "dim": args.dim, "heads": args.heads, "vocab": args.vocab, "context": args.context, "prompt": args.prompt}
    title = (f"GPT-2 prefill (batch 1 x {args.prompt} tokens; {args.layers} layers, dim {args.dim}, {args.heads} heads, "
             f"vocab {args.vocab}, random weights)")
    base = {"task": "prefill", "config": cfg, "reps": args.reps, "warmup": args.warmup}
    results, rows, errors = {}, [], []
    for framework in ["fusegrad", "torch"]:
        if framework in args.peers: results[framework] = runner.run(base, framework, cache=runner.cache_dir(f"prefill_{framework}"))
    ref = results.get("torch") if results.get("torch", {}).get("ok") else None
    for framework, r in results.items():
        if not r["ok"]:
            rows.append([framework, status(r, errors, framework), "-", "-"]); continue
        label = "fusegrad (example's unjitted prefill)" if framework == "fusegrad" else "torch (eager, no_grad, SDPA)"
        rows.append([label, fmt(r["ms"], 1e3, 1), fmt(r["first"], 1e3, 0), ratio(ref["ms"], r["ms"]) if ref else "-"])
    notes = [f"ms: median of {args.reps} warm prefills (after {args.warmup} untimed) = model call + reading the sampled token back;",
             "'speed vs torch' = torch ms / peer ms (>= 1: at least as fast as PyTorch); first ms: the first call (fusegrad compiles)"]
    print_table(title, ["peer", "ms", "first ms", "speed vs torch"], rows, notes + errors)
    if "fusegrad" in args.peers and not args.no_profile:
        prof = runner.run(dict(base, reps=1, warmup=1, profile=True), "fusegrad", cache=runner.cache_dir("prefill_fusegrad"))
        if not prof["ok"]:
            print(f"\nkernel profile: {status(prof, [], 'fusegrad')}"); return
        _print_profile(prof["profile"], cfg)

def _print_profile(kernels: list, cfg: dict) -> None:
    """Kernel time by kind, and the slowest kernel names."""
    total = sum(s for _, s in kernels) or 1e-12
    by_kind: dict[str, list] = {}
    by_name: dict[str, list] = {}
    for name, secs in kernels:
        for table, key in ((by_kind, kernel_kind(name, cfg)), (by_name, name)):
            entry = table.setdefault(key, [0.0, 0])
            entry[0] += secs; entry[1] += 1
    rows = [[kind, fmt(s, 1e3, 1), str(n), f"{100 * s / total:.0f}%"] for kind, (s, n) in sorted(by_kind.items(), key=lambda kv: -kv[1][0])]
    rows.append(["total (kernels only)", fmt(total, 1e3, 1), str(len(kernels)), "100%"])
    slow = [f"    {s * 1e3:8.2f} ms  x{n:<3d} {name}" for name, (s, n) in sorted(by_name.items(), key=lambda kv: -kv[1][0])[:8]]
    print_table("fusegrad prefill kernels by kind (one prefill, DEBUG=2 kernel timings)", ["kind", "ms", "kernels", "share"], rows,
                ["slowest kernels:"] + slow)

def main() -> None:
    sections = {name[len("section_"):]: fn for name, fn in globals().items() if name.startswith("section_")}
    run_sections("fusegrad GPT-2 prefill bench (bench/bench_prefill.py)", __file__, parse_args(), TASKS, sections)

if __name__ == "__main__":
    main()
