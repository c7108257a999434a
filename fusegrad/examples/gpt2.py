"""GPT-2 in fusegrad: the model, HF weight loading, and a KV-cached, jitted decode loop.

    python -m fusegrad.examples.gpt2 --weights model.safetensors --prompt "Hello, I'm a language model," --count 20
    python -m fusegrad.examples.gpt2 --weights model.safetensors --tokens 15496,11 --count 20 --temperature 0.8
    python -m fusegrad.examples.gpt2 --random --layers 2 --dim 64 --heads 4 --vocab 128 --count 16

The architecture (Radford et al. 2019) is a stack of pre-norm transformer blocks:

    x = wte[tokens] + wpe[positions]
    for each block:  x = x + attn(ln_1(x));  x = x + mlp(ln_2(x))
    logits = ln_f(x) @ wte.T                      (the output projection is tied to the token embedding)

Parameter names follow tinygrad's ``examples/gpt2.py`` and HuggingFace's ``GPT2Model``
(``wte.weight``, ``h.0.attn.c_attn.weight``, ...), so a HF ``model.safetensors`` loads directly
(see ``load_weights`` for the two differences: Conv1D layout and the tied ``lm_head``).

Generation runs in two phases:

* prefill: the whole prompt goes through the model at once (start_pos = 0, a causal mask), filling
  every layer's key/value cache, and the last position's logits pick the first new token;
* decode: one token per step. Each step only computes the new token's query/key/value, writes its
  key/value into the cache and attends over ``cache[:start_pos + 1]``. The step is wrapped in
  ``TinyJit`` and ``start_pos`` is passed as a bound ``Variable``, so the cache slice has a
  *symbolic* length: the kernels are captured once and replayed for every position.
"""
from __future__ import annotations
import argparse, json, os, time
from dataclasses import dataclass
import numpy as np
from fusegrad import examples
from fusegrad.examples import decoding
from fusegrad import Tensor, TinyJit, Variable, Device, dtypes, nn
from fusegrad.nn.state import safe_load, load_state_dict, get_state_dict
from fusegrad.uop.ops import UOp

@dataclass
class GPT2Config:
    n_layers: int = 12
    dim: int = 768
    n_heads: int = 12
    vocab_size: int = 50257
    max_context: int = 1024      # number of learned positions (wpe rows), also the KV-cache length
    norm_eps: float = 1e-5

class Attention:
    """Multi-head causal self-attention with a key/value cache.

    ``c_attn`` projects to q, k and v at once (3 * dim outputs). Keys and values of every position
    seen so far live in ``cache_kv`` (2, batch, max_context, heads, head_dim), so a decode step only
    has to compute the newest token's projections.
    """
    def __init__(self, dim: int, n_heads: int, max_context: int):
        self.c_attn = nn.Linear(dim, 3 * dim, bias=True)
        self.c_proj = nn.Linear(dim, dim, bias=True)
        self.dim, self.n_heads, self.head_dim, self.max_context = dim, n_heads, dim // n_heads, max_context

    def __call__(self, x: Tensor, start_pos: int | UOp, mask: Tensor | None) -> Tensor:
        bsz, seqlen, _ = x.shape
        xqkv = self.c_attn(x)
        xq, xk, xv = [xqkv.shrink((None, None, (i * self.dim, (i + 1) * self.dim))).reshape(bsz, seqlen, self.n_heads, self.head_dim)
                      for i in range(3)]

        # the cache is a realized buffer allocated on first use (its batch size comes from the input)
        if not hasattr(self, "cache_kv") or self.cache_kv.shape[1] != bsz:
            self.cache_kv = Tensor.zeros(2, bsz, self.max_context, self.n_heads, self.head_dim, dtype=x.dtype).contiguous().realize()
        # write this chunk's keys/values at [start_pos, start_pos + seqlen). realize() now: the reads
        # below must see the write, and inside the JIT this becomes one of the captured kernels
        self.cache_kv[:, :, start_pos:start_pos + seqlen].assign(Tensor.stack(xk, xv)).realize()
        # every key/value so far; with a bound Variable start_pos this length is symbolic
        keys, values = self.cache_kv[0, :, :start_pos + seqlen], self.cache_kv[1, :, :start_pos + seqlen]

        # (bsz, heads, seq, head_dim) for attention, then back to (bsz, seq, dim)
        xq, keys, values = xq.transpose(1, 2), keys.transpose(1, 2), values.transpose(1, 2)
        out = xq.scaled_dot_product_attention(keys, values, mask).transpose(1, 2).reshape(bsz, seqlen, self.dim)
        return self.c_proj(out)

class FeedForward:
    """dim -> 4*dim -> GELU (tanh approximation, HF's "gelu_new") -> dim."""
    def __init__(self, dim: int, hidden_dim: int):
        self.c_fc = nn.Linear(dim, hidden_dim, bias=True)
        self.c_proj = nn.Linear(hidden_dim, dim, bias=True)

    def __call__(self, x: Tensor) -> Tensor: return self.c_proj(self.c_fc(x).gelu())

class TransformerBlock:
    """Pre-norm residual block: x + attn(ln_1(x)), then + mlp(ln_2(...))."""
    def __init__(self, dim: int, n_heads: int, norm_eps: float, max_context: int):
        self.attn = Attention(dim, n_heads, max_context)
        self.mlp = FeedForward(dim, 4 * dim)
        self.ln_1 = nn.LayerNorm(dim, norm_eps)
        self.ln_2 = nn.LayerNorm(dim, norm_eps)

    def __call__(self, x: Tensor, start_pos: int | UOp, mask: Tensor | None) -> Tensor:
        h = x + self.attn(self.ln_1(x), start_pos, mask)
        return (h + self.mlp(self.ln_2(h))).contiguous()   # contiguous: one residual buffer per block, not one giant fused graph

class Transformer:
    """GPT-2. ``logits(tokens, start_pos)`` for a chunk of tokens; ``forward`` also samples the next
    token; ``__call__`` picks the jitted single-token path when it can."""
    def __init__(self, config: GPT2Config):
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.dim)
        self.wpe = nn.Embedding(config.max_context, config.dim)
        self.h = [TransformerBlock(config.dim, config.n_heads, config.norm_eps, config.max_context) for _ in range(config.n_layers)]
        self.ln_f = nn.LayerNorm(config.dim, config.norm_eps)
        self.lm_head = nn.Linear(config.dim, config.vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight   # tied: the output projection is the token embedding matrix
        # captured on its 2nd call; every later call with a (1-token input, bound start_pos) replays it
        self.forward_jit = TinyJit(self.forward)

    def logits(self, tokens: Tensor, start_pos: int | UOp) -> Tensor:
        """(bsz, seqlen) token ids at positions [start_pos, start_pos + seqlen) -> (bsz, seqlen, vocab)
        logits. Also writes these positions' keys/values into every layer's cache."""
        return self.lm_head(self.ln_f(self.hidden(tokens, start_pos)))

    def hidden(self, tokens: Tensor, start_pos: int | UOp) -> Tensor:
        """The last block's output (bsz, seqlen, dim) before ``ln_f`` and the output projection; fills the caches."""
        bsz, seqlen = tokens.shape
        # the position embeddings are just rows of wpe: slice them (symbolic when start_pos is a Variable)
        pos_emb = self.wpe.weight[start_pos:start_pos + seqlen]
        h = self.wte(tokens) + pos_emb
        # a chunk of several tokens needs a causal mask: query i (at position start_pos + i) sees keys
        # 0 .. start_pos + i. A single token sees every cached key, so it needs none.
        mask = None
        if seqlen > 1:
            if isinstance(start_pos, UOp): raise ValueError("a symbolic start_pos is only supported for single-token steps")
            mask = Tensor.ones(seqlen, start_pos + seqlen, dtype=dtypes.bool).tril(start_pos)
        for block in self.h: h = block(h, start_pos, mask)
        return h

    def forward(self, tokens: Tensor, start_pos: int | UOp, temperature: Tensor, noise: Tensor) -> Tensor:
        """The next token (bsz,) int32 after ``tokens``, sampled from softmax(logits / temperature).

        Sampling uses the Gumbel-max trick: argmax(logits + T * g) with g = -log(-log(u)) is a
        sample of softmax(logits / T), and with T = 0 it is plain greedy argmax. So temperature is a
        tensor input and one JIT capture serves greedy and sampled decoding alike. ``noise`` holds
        the uniform u's (bsz, vocab); it comes from the caller so every replay gets fresh numbers.
        """
        # sampling is inference: nothing here is differentiated, so realizes record no autograd origins
        # (Tensor.no_grad, as tinygrad's examples set it; 128-token prefill: ~30 ms of Python less)
        no_grad, Tensor.no_grad = Tensor.no_grad, True
        try:
            # only the last position's logits are sampled: project just that row. The vocab projection of
            # every prompt position (128 x 768 x 50257) was most of a 128-token prefill (0.75 of 2.3 s of kernels)
            last = self.hidden(tokens, start_pos)[:, -1, :]
            return decoding.sample(self.lm_head(self.ln_f(last)), temperature, noise)
        finally: Tensor.no_grad = no_grad

    def __call__(self, tokens: Tensor, start_pos: int | UOp, temperature: Tensor, noise: Tensor) -> Tensor:
        # the jitted path needs a fixed input shape (one token) and a Variable position (start_pos >= 1)
        step = self.forward_jit if tokens.shape[1] == 1 and isinstance(start_pos, UOp) else self.forward
        return step(tokens, start_pos, temperature, noise)

# ---------------------------------------------------------------- weights

# HF's GPT-2 uses Conv1D layers, which store weights as (in, out): transposed from nn.Linear's (out, in)
CONV1D_WEIGHTS = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")

def convert_hf_weights(weights: dict[str, Tensor], device: str | None = None) -> dict[str, Tensor]:
    """HF GPT-2 state dict -> this model's names and layouts.

    * a ``GPT2LMHeadModel`` checkpoint prefixes everything with ``transformer.``; drop it;
    * ``h.N.attn.bias`` / ``masked_bias`` are HF's precomputed causal-mask buffers, not parameters;
    * Conv1D weights are (in, out); transpose them to Linear's (out, in);
    * ``lm_head.weight`` is tied to ``wte.weight``.
    """
    device = device or Device.DEFAULT
    out: dict[str, Tensor] = {}
    for name, w in weights.items():
        name = name.removeprefix("transformer.")
        if name.endswith((".attn.bias", ".attn.masked_bias")) or name == "lm_head.weight": continue
        w = w.to(device)   # copy off the memory-mapped file first; the transpose then is an ordinary kernel
        if w.dtype != dtypes.float32: w = w.cast(dtypes.float32)
        if name.endswith(CONV1D_WEIGHTS): w = w.T.contiguous()
        out[name] = w
    out["lm_head.weight"] = out["wte.weight"]
    return out

def config_from_weights(weights: dict[str, Tensor], n_heads: int | None = None) -> GPT2Config:
    """Read the sizes off the tensor shapes. The head count isn't in the shapes: every released GPT-2
    uses head_dim 64, so default to dim // 64."""
    shapes = {k.removeprefix("transformer."): w.shape for k, w in weights.items()}
    n_layers = 1 + max(int(k.split(".")[1]) for k in shapes if k.startswith("h."))
    vocab_size, dim = shapes["wte.weight"]
    return GPT2Config(n_layers=n_layers, dim=dim, n_heads=n_heads or dim // 64, vocab_size=vocab_size,
                      max_context=shapes["wpe.weight"][0])

def load_weights(path: str, n_heads: int | None = None) -> Transformer:
    """Build a Transformer sized by the checkpoint at ``path`` (a .safetensors file) and load it."""
    weights = safe_load(path)
    if n_heads is None:   # a HF config.json next to the weights knows the head count
        config_json = os.path.join(os.path.dirname(os.path.abspath(path)), "config.json")
        if os.path.isfile(config_json):
            with open(config_json) as f: n_heads = json.load(f).get("n_head")
    model = Transformer(config_from_weights(weights, n_heads))
    load_state_dict(model, convert_hf_weights(weights), verbose=False)
    return model

def random_model(config: GPT2Config, seed: int = 0) -> "Transformer":
    """A model with the layers' default random initialization (for trying the code without a checkpoint)."""
    return decoding.random_model(Transformer, config, seed)

# ---------------------------------------------------------------- generation

generate = decoding.generate   # prefill + jitted decode loop, shared with the other examples

def _tokenizer(required: bool = False):
    """tiktoken's GPT-2 BPE if the package is installed (it's optional), else None. tiktoken downloads its BPE
    file on first use: when the tokenizer is ``required`` (a ``--prompt``), that failure is reported as it is."""
    try: import tiktoken
    except ImportError: return None
    try: return tiktoken.get_encoding("gpt2")
    except Exception as error:
        if required: raise examples.ExampleError(f"--prompt: tiktoken could not load the GPT-2 tokenizer: {error}") from error
        return None   # only used to print the generated text

def main() -> None:
    parser = examples.parser("GPT-2 text generation with fusegrad")
    parser.add_argument("--weights", help="HF GPT-2 model.safetensors")
    parser.add_argument("--random", action="store_true", help="random weights instead of a checkpoint")
    parser.add_argument("--layers", type=int, default=2, help="transformer blocks (with --random)")
    parser.add_argument("--dim", type=int, default=64, help="model width (with --random)")
    parser.add_argument("--heads", type=int, default=None,
                        help="attention heads (default: 4 with --random; config.json beside the weights, else dim // 64)")
    parser.add_argument("--vocab", type=int, default=128, help="vocabulary size (with --random)")
    parser.add_argument("--context", type=int, default=1024, help="KV-cache length (longest prompt + output)")
    decoding.add_generation_args(parser, "text prompt (needs the tiktoken package)")
    args = parser.parse_args()

    if not (args.random or args.weights): parser.error("give --weights PATH or --random")
    # the prompt first: a missing tokenizer is reported before minutes of loading or compiling
    enc = _tokenizer(required=args.prompt is not None and not args.tokens)
    if args.tokens: prompt = args.tokens
    elif args.prompt is not None:
        if enc is None: raise examples.ExampleError("--prompt needs the tiktoken package (pip install tiktoken); or pass token ids "
                                                    "with --tokens 1,2,3")
        prompt = enc.encode(args.prompt)
    else: prompt = [0]
    if args.random:
        config = GPT2Config(n_layers=args.layers, dim=args.dim, n_heads=args.heads or 4, vocab_size=args.vocab, max_context=args.context)
        decoding.check_prompt(prompt, args.count, config)
        model = random_model(config, args.seed)
    else: model = load_weights(args.weights, args.heads)
    decoding.check_prompt(prompt, args.count, model.config)

    timings: list[float] = []
    st = time.perf_counter()
    out = generate(model, prompt, args.count, args.temperature, args.seed, timings)
    total = time.perf_counter() - st
    print("tokens:", out)
    if enc is not None and model.config.vocab_size == enc.n_vocab: print("text:", repr(enc.decode(prompt + out)))
    steady = timings[2:]   # the first two decode steps compile and capture the JIT: their time isn't a decode speed
    if steady: print(f"{total:.2f} s total, decode {1e3 * sum(steady) / len(steady):.2f} ms/token (after JIT capture)")
    else: print(f"{total:.2f} s total (a decode speed needs --count 4 or more: the first steps compile and capture the JIT)")

if __name__ == "__main__":
    examples.run(main, "fusegrad.examples.gpt2")
