"""A LLaMA-style language model in fusegrad, with HF safetensors / GGUF loading and a KV-cached,
jitted decode loop.

    python -m fusegrad.examples.llama --weights model.safetensors --tokens 1,15043,29892 --count 20
    python -m fusegrad.examples.llama --weights ./llama-dir --tokens 1,15043 --count 20      # config.json + *.safetensors
    python -m fusegrad.examples.llama --gguf model.gguf --tokens 1,15043 --count 20 --temperature 0.7
    python -m fusegrad.examples.llama --random --layers 2 --dim 64 --heads 4 --kv-heads 2 --vocab 128 --count 16

The architecture (Touvron et al. 2023) differs from GPT-2 in four places:

* RMSNorm instead of LayerNorm (no mean subtraction, no bias);
* no learned position table: rotary embeddings (RoPE) rotate each query/key pair of features by
  an angle proportional to the position, so q·k depends on the distance between positions;
* grouped-query attention: ``n_kv_heads`` (< ``n_heads``) key/value heads, each shared by
  ``n_heads // n_kv_heads`` query heads, which shrinks the KV cache by that factor;
* a SwiGLU feed-forward, ``w2(silu(w1(x)) * w3(x))``, and no biases anywhere.

Parameter names follow tinygrad's ``examples/llama.py`` (Meta's original names):
``tok_embeddings``, ``layers.N.attention.wq``, ``layers.N.feed_forward.w1``, ``norm``, ``output``.
``convert_from_huggingface`` and ``convert_from_gguf`` map the two checkpoint formats onto them.

Rotary convention. Meta's code rotates *adjacent* feature pairs (x[2i], x[2i+1]) of each head, and so
does this model. HF's ``LlamaForCausalLM`` instead rotates the pairs (x[i], x[i + head_dim/2])
("rotate_half"); HF's conversion script permutes the rows of q_proj/k_proj so both give the same
attention. Loading HF weights undoes that permutation (``permute_hf_qk``). llama.cpp's
convert_hf_to_gguf applies the same un-permutation when writing ``blk.N.attn_q/attn_k``, so GGUF
q/k weights are already in Meta's layout and load as they are.

Generation is the same two-phase loop as ``gpt2.py``: prefill the prompt in one pass, then decode
one token per step with a ``TinyJit``-captured step whose ``start_pos`` is a bound ``Variable``
(one capture for every position).
"""
from __future__ import annotations
import argparse, errno, glob, json, os, time
from dataclasses import dataclass
import numpy as np
from fusegrad import examples
from fusegrad.examples import decoding
from fusegrad import Tensor, TinyJit, Variable, Device, dtypes, nn
from fusegrad.nn.state import safe_load, gguf_load, load_state_dict, get_state_dict
from fusegrad.uop.ops import UOp

@dataclass
class LlamaConfig:
    n_layers: int = 32
    dim: int = 4096
    n_heads: int = 32
    n_kv_heads: int = 32
    hidden_dim: int = 11008          # SwiGLU width
    vocab_size: int = 32000
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    max_context: int = 2048          # KV-cache length (and rotary table length)
    tie_embeddings: bool = False     # output projection shares tok_embeddings (small LLaMA 3.2 / Qwen-style models)

def precompute_rotary(head_dim: int, max_context: int, theta: float) -> tuple[Tensor, Tensor]:
    """cos and sin of the rotation angles, each (max_context, head_dim // 2): position p turns
    feature pair i by p * theta^(-2i / head_dim), slow for high i, fast for low i."""
    freqs = 1.0 / (theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim))
    angles = np.outer(np.arange(max_context, dtype=np.float64), freqs)
    return Tensor(np.cos(angles).astype(np.float32)).realize(), Tensor(np.sin(angles).astype(np.float32)).realize()

def apply_rotary(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate adjacent feature pairs of x (bsz, seqlen, heads, head_dim) by the angles of its positions;
    cos/sin are (seqlen, head_dim // 2). (a, b) -> (a cos - b sin, a sin + b cos)."""
    bsz, seqlen, heads, head_dim = x.shape
    pairs = x.reshape(bsz, seqlen, heads, head_dim // 2, 2)
    a, b = pairs[..., 0], pairs[..., 1]
    cos, sin = cos.reshape(1, seqlen, 1, head_dim // 2), sin.reshape(1, seqlen, 1, head_dim // 2)
    return Tensor.stack(a * cos - b * sin, a * sin + b * cos, dim=-1).reshape(bsz, seqlen, heads, head_dim)

class Attention:
    """Grouped-query causal self-attention with rotary positions and a key/value cache.
    The cache holds only the n_kv_heads key/value heads: (2, bsz, max_context, n_kv_heads, head_dim)."""
    def __init__(self, dim: int, n_heads: int, n_kv_heads: int, max_context: int):
        self.n_heads, self.n_kv_heads, self.head_dim, self.max_context = n_heads, n_kv_heads, dim // n_heads, max_context
        self.wq = nn.Linear(dim, n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(dim, n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(dim, n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(n_heads * self.head_dim, dim, bias=False)

    def __call__(self, x: Tensor, start_pos: int | UOp, cos: Tensor, sin: Tensor, mask: Tensor | None) -> Tensor:
        bsz, seqlen, _ = x.shape
        xq = self.wq(x).reshape(bsz, seqlen, self.n_heads, self.head_dim)
        xk = self.wk(x).reshape(bsz, seqlen, self.n_kv_heads, self.head_dim)
        xv = self.wv(x).reshape(bsz, seqlen, self.n_kv_heads, self.head_dim)
        # rotate queries and keys by their absolute positions; the cache stores rotated keys
        xq, xk = apply_rotary(xq, cos, sin), apply_rotary(xk, cos, sin)

        if not hasattr(self, "cache_kv") or self.cache_kv.shape[1] != bsz:
            self.cache_kv = Tensor.zeros(2, bsz, self.max_context, self.n_kv_heads, self.head_dim, dtype=x.dtype).contiguous().realize()
        # write this chunk at [start_pos, start_pos + seqlen) now (inside the JIT: a captured kernel)
        self.cache_kv[:, :, start_pos:start_pos + seqlen].assign(Tensor.stack(xk, xv)).realize()
        # all keys/values so far; symbolic length when start_pos is a bound Variable
        keys, values = self.cache_kv[0, :, :start_pos + seqlen], self.cache_kv[1, :, :start_pos + seqlen]

        # (bsz, heads, seq, head_dim); enable_gqa lets each key/value head serve its group of query heads
        xq, keys, values = xq.transpose(1, 2), keys.transpose(1, 2), values.transpose(1, 2)
        out = xq.scaled_dot_product_attention(keys, values, mask, enable_gqa=True)
        return self.wo(out.transpose(1, 2).reshape(bsz, seqlen, self.n_heads * self.head_dim))

class FeedForward:
    """SwiGLU: w2(silu(w1 x) * w3 x). w1 is the gate, w3 the "up" projection, w2 the "down"."""
    def __init__(self, dim: int, hidden_dim: int):
        self.w1 = nn.Linear(dim, hidden_dim, bias=False)
        self.w2 = nn.Linear(hidden_dim, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden_dim, bias=False)

    def __call__(self, x: Tensor) -> Tensor: return self.w2(self.w1(x).silu() * self.w3(x))

class TransformerBlock:
    """Pre-norm residual block: x + attention(attention_norm(x)), then + feed_forward(ffn_norm(...))."""
    def __init__(self, config: LlamaConfig):
        self.attention = Attention(config.dim, config.n_heads, config.n_kv_heads, config.max_context)
        self.feed_forward = FeedForward(config.dim, config.hidden_dim)
        self.attention_norm = nn.RMSNorm(config.dim, config.norm_eps)
        self.ffn_norm = nn.RMSNorm(config.dim, config.norm_eps)

    def __call__(self, x: Tensor, start_pos: int | UOp, cos: Tensor, sin: Tensor, mask: Tensor | None) -> Tensor:
        h = x + self.attention(self.attention_norm(x), start_pos, cos, sin, mask)
        return (h + self.feed_forward(self.ffn_norm(h))).contiguous()

class Transformer:
    """LLaMA. ``logits(tokens, start_pos)`` for a chunk of tokens; ``forward`` also samples the next
    token; ``__call__`` picks the jitted single-token path when it can."""
    def __init__(self, config: LlamaConfig):
        if config.n_heads % config.n_kv_heads:
            raise ValueError(f"n_heads ({config.n_heads}) must be a multiple of n_kv_heads ({config.n_kv_heads})")
        self.config = config
        self.tok_embeddings = nn.Embedding(config.vocab_size, config.dim)
        self.layers = [TransformerBlock(config) for _ in range(config.n_layers)]
        self.norm = nn.RMSNorm(config.dim, config.norm_eps)
        self.output = nn.Linear(config.dim, config.vocab_size, bias=False)
        if config.tie_embeddings: self.output.weight = self.tok_embeddings.weight
        # precomputed rotary tables: buffers, not parameters (checkpoints don't have them; see load_into)
        self.freqs_cos, self.freqs_sin = precompute_rotary(config.dim // config.n_heads, config.max_context, config.rope_theta)
        self.forward_jit = TinyJit(self.forward)

    def logits(self, tokens: Tensor, start_pos: int | UOp) -> Tensor:
        """(bsz, seqlen) token ids at positions [start_pos, start_pos + seqlen) -> (bsz, seqlen, vocab)
        logits. Also writes these positions' keys/values into every layer's cache."""
        bsz, seqlen = tokens.shape
        # the rotation angles of these positions (a symbolic slice when start_pos is a Variable)
        cos, sin = self.freqs_cos[start_pos:start_pos + seqlen], self.freqs_sin[start_pos:start_pos + seqlen]
        mask = None
        if seqlen > 1:   # query i (position start_pos + i) sees keys 0 .. start_pos + i
            if isinstance(start_pos, UOp): raise ValueError("a symbolic start_pos is only supported for single-token steps")
            mask = Tensor.ones(seqlen, start_pos + seqlen, dtype=dtypes.bool).tril(start_pos)
        h = self.tok_embeddings(tokens)
        for layer in self.layers: h = layer(h, start_pos, cos, sin, mask)
        return self.output(self.norm(h))

    def forward(self, tokens: Tensor, start_pos: int | UOp, temperature: Tensor, noise: Tensor) -> Tensor:
        """The next token (bsz,) int32: argmax(logits + T * gumbel(noise)), a sample of
        softmax(logits / T) and greedy for T = 0 (see gpt2.py's forward for why it is done this way)."""
        return decoding.sample(self.logits(tokens, start_pos)[:, -1, :], temperature, noise)

    def __call__(self, tokens: Tensor, start_pos: int | UOp, temperature: Tensor, noise: Tensor) -> Tensor:
        step = self.forward_jit if tokens.shape[1] == 1 and isinstance(start_pos, UOp) else self.forward
        return step(tokens, start_pos, temperature, noise)

# ---------------------------------------------------------------- weights

def permute_hf_qk(w: Tensor, n_heads: int) -> Tensor:
    """Undo HF's rotary permutation of a q_proj/k_proj weight (rows = heads * head_dim).
    HF's row order within a head is [pair firsts..., pair seconds...]; Meta's interleaves them:
    (heads, 2, head_dim/2, in) -> (heads, head_dim/2, 2, in)."""
    rows, cols = w.shape
    return w.reshape(n_heads, 2, rows // n_heads // 2, cols).transpose(1, 2).reshape(rows, cols)

HF_NAMES = {"model.embed_tokens.weight": "tok_embeddings.weight", "model.norm.weight": "norm.weight", "lm_head.weight": "output.weight"}
HF_LAYER_NAMES = {"input_layernorm": "attention_norm", "post_attention_layernorm": "ffn_norm",
                  "self_attn.q_proj": "attention.wq", "self_attn.k_proj": "attention.wk", "self_attn.v_proj": "attention.wv",
                  "self_attn.o_proj": "attention.wo", "mlp.gate_proj": "feed_forward.w1", "mlp.down_proj": "feed_forward.w2",
                  "mlp.up_proj": "feed_forward.w3"}
GGUF_NAMES = {"token_embd.weight": "tok_embeddings.weight", "output_norm.weight": "norm.weight", "output.weight": "output.weight"}
GGUF_LAYER_NAMES = {"attn_norm": "attention_norm", "ffn_norm": "ffn_norm", "attn_q": "attention.wq", "attn_k": "attention.wk",
                    "attn_v": "attention.wv", "attn_output": "attention.wo", "ffn_gate": "feed_forward.w1",
                    "ffn_down": "feed_forward.w2", "ffn_up": "feed_forward.w3"}

def _rename(name: str, names: dict[str, str], layer_names: dict[str, str], prefix: str) -> str | None:
    """Map a checkpoint name to ours: a top-level one via ``names``, ``{prefix}N.X.weight`` via ``layer_names``."""
    if name in names: return names[name]
    if name.startswith(prefix):
        n, rest = name[len(prefix):].split(".", 1)
        inner, _, suffix = rest.rpartition(".")
        if inner in layer_names: return f"layers.{n}.{layer_names[inner]}.{suffix}"
    return None

def _to_float(w: Tensor, device: str) -> Tensor:
    w = w.to(device)   # off the memory-mapped file before any reshaping
    return w if w.dtype == dtypes.float32 else w.cast(dtypes.float32)

def convert_from_huggingface(weights: dict[str, Tensor], config: LlamaConfig, device: str | None = None) -> dict[str, Tensor]:
    """HF ``LlamaForCausalLM`` state dict -> our names, with q/k rows un-permuted (see module doc).
    Unknown names (e.g. ``rotary_emb.inv_freq`` buffers) are dropped."""
    device = device or Device.DEFAULT
    out: dict[str, Tensor] = {}
    for name, w in weights.items():
        if (ours := _rename(name, HF_NAMES, HF_LAYER_NAMES, "model.layers.")) is None: continue
        w = _to_float(w, device)
        if ours.endswith("attention.wq.weight"): w = permute_hf_qk(w, config.n_heads).contiguous()
        if ours.endswith("attention.wk.weight"): w = permute_hf_qk(w, config.n_kv_heads).contiguous()
        out[ours] = w
    if "output.weight" not in out: out["output.weight"] = out["tok_embeddings.weight"]   # tied embeddings
    return out

def convert_from_gguf(weights: dict[str, Tensor], device: str | None = None) -> dict[str, Tensor]:
    """GGUF (llama.cpp) state dict -> our names. Quantized tensors are already dequantized by gguf_load.
    GGUF shapes are reversed ggml dims, i.e. (out, in) like PyTorch, and attn_q/attn_k rows are in
    Meta's interleaved rotary order already, so nothing is transposed or permuted."""
    device = device or Device.DEFAULT
    out = {ours: _to_float(w, device) for name, w in weights.items()
           if (ours := _rename(name, GGUF_NAMES, GGUF_LAYER_NAMES, "blk.")) is not None}
    if "output.weight" not in out: out["output.weight"] = out["tok_embeddings.weight"]
    return out

def config_from_huggingface(hf: dict, max_context: int) -> LlamaConfig:
    """LlamaConfig from a HF config.json dict; the KV cache is capped at ``max_context`` positions."""
    n_heads = hf["num_attention_heads"]
    return LlamaConfig(n_layers=hf["num_hidden_layers"], dim=hf["hidden_size"], n_heads=n_heads,
                       n_kv_heads=hf.get("num_key_value_heads") or n_heads, hidden_dim=hf["intermediate_size"],
                       vocab_size=hf["vocab_size"], norm_eps=hf.get("rms_norm_eps", 1e-6), rope_theta=hf.get("rope_theta", 10000.0),
                       max_context=min(max_context, hf.get("max_position_embeddings", max_context)),
                       tie_embeddings=hf.get("tie_word_embeddings", False))

def config_from_gguf(kv: dict, weights: dict[str, Tensor], max_context: int) -> LlamaConfig:
    """LlamaConfig from GGUF metadata (keys are prefixed by the architecture name, 'llama.')."""
    arch = kv.get("general.architecture", "llama")
    n_heads = kv[f"{arch}.attention.head_count"]
    return LlamaConfig(n_layers=kv[f"{arch}.block_count"], dim=kv[f"{arch}.embedding_length"], n_heads=n_heads,
                       n_kv_heads=kv.get(f"{arch}.attention.head_count_kv", n_heads), hidden_dim=kv[f"{arch}.feed_forward_length"],
                       vocab_size=weights["token_embd.weight"].shape[0], norm_eps=kv.get(f"{arch}.attention.layer_norm_rms_epsilon", 1e-5),
                       rope_theta=kv.get(f"{arch}.rope.freq_base", 10000.0),
                       max_context=min(max_context, kv.get(f"{arch}.context_length", max_context)),
                       tie_embeddings="output.weight" not in weights)

def load_into(model: Transformer, weights: dict[str, Tensor]) -> Transformer:
    """load_state_dict, strict about every parameter; the rotary tables are computed, not loaded."""
    load_state_dict(model, {"freqs_cos": model.freqs_cos, "freqs_sin": model.freqs_sin, **weights}, verbose=False)
    return model

def load_huggingface(path: str, max_context: int = 1024, config: LlamaConfig | None = None) -> Transformer:
    """Load a HF LLaMA checkpoint: a directory with config.json and *.safetensors shards, or one
    .safetensors file (config.json beside it, or pass ``config``)."""
    if not os.path.exists(path): raise FileNotFoundError(errno.ENOENT, "no such file or directory", path)
    folder = path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path))
    files = sorted(glob.glob(os.path.join(path, "*.safetensors"))) if os.path.isdir(path) else [path]
    if not files: raise FileNotFoundError(f"no .safetensors files in {path}")
    if config is None:
        with open(os.path.join(folder, "config.json")) as f: config = config_from_huggingface(json.load(f), max_context)
    weights: dict[str, Tensor] = {}
    for fn in files: weights.update(safe_load(fn))
    return load_into(Transformer(config), convert_from_huggingface(weights, config))

def load_gguf(path: str, max_context: int = 1024) -> Transformer:
    """Load a llama-architecture GGUF file (any type gguf_load supports, dequantized to float32)."""
    kv, weights = gguf_load(path)
    return load_into(Transformer(config_from_gguf(kv, weights, max_context)), convert_from_gguf(weights))

def random_model(config: LlamaConfig, seed: int = 0) -> "Transformer":
    """A model with the layers' default random initialization (for trying the code without a checkpoint)."""
    return decoding.random_model(Transformer, config, seed)

# ---------------------------------------------------------------- generation

generate = decoding.generate   # prefill + jitted decode loop, shared with the other examples

def _tokenizer(path: str | None, required: bool = False):
    """HF ``tokenizers`` with the tokenizer.json next to the weights, if both exist (optional: None otherwise).
    When it is ``required`` (a ``--prompt``), what is missing is reported as it is."""
    if path is None:
        if required: raise examples.ExampleError("--prompt needs a tokenizer.json beside --weights; with --gguf or --random "
                                                 "pass token ids with --tokens 1,2,3")
        return None
    tokenizer_json = os.path.join(path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path)), "tokenizer.json")
    try:
        from tokenizers import Tokenizer
        return Tokenizer.from_file(tokenizer_json)
    except Exception as error:
        if not required: return None   # only used to print the generated text
        if isinstance(error, ImportError): raise examples.ExampleError("--prompt needs the tokenizers package (pip install tokenizers)") from error
        raise examples.ExampleError(f"--prompt: could not load the tokenizer {tokenizer_json}: {error}") from error

def main() -> None:
    parser = examples.parser("LLaMA text generation with fusegrad")
    parser.add_argument("--weights", help="HF checkpoint: a .safetensors file or a directory (config.json + shards)")
    parser.add_argument("--gguf", help="a llama.cpp .gguf file")
    parser.add_argument("--random", action="store_true", help="random weights instead of a checkpoint")
    parser.add_argument("--layers", type=int, default=2, help="transformer blocks (with --random)")
    parser.add_argument("--dim", type=int, default=64, help="model width (with --random)")
    parser.add_argument("--heads", type=int, default=4, help="attention heads (with --random)")
    parser.add_argument("--kv-heads", type=int, default=2, help="key/value heads, grouped-query attention (with --random)")
    parser.add_argument("--hidden", type=int, default=None, help="feed-forward width (None: 8/3 * dim rounded to 32)")
    parser.add_argument("--vocab", type=int, default=128, help="vocabulary size (with --random)")
    parser.add_argument("--context", type=int, default=1024, help="KV-cache length")
    decoding.add_generation_args(parser, "text prompt (needs the tokenizers package and tokenizer.json)")
    args = parser.parse_args()

    if not (args.random or args.gguf or args.weights): parser.error("give --weights PATH, --gguf PATH or --random")
    # the prompt first: a missing tokenizer is reported before minutes of loading or compiling
    tok = _tokenizer(args.weights, required=args.prompt is not None and not args.tokens)
    if args.tokens: prompt = args.tokens
    elif args.prompt is not None: prompt = tok.encode(args.prompt).ids
    else: prompt = [1]   # LLaMA's <s>
    if args.random:
        hidden = args.hidden or 32 * round(8 * args.dim / 3 / 32)
        config = LlamaConfig(n_layers=args.layers, dim=args.dim, n_heads=args.heads, n_kv_heads=args.kv_heads,
                             hidden_dim=hidden, vocab_size=args.vocab, max_context=args.context)
        decoding.check_prompt(prompt, args.count, config)
        model = random_model(config, args.seed)
    elif args.gguf: model = load_gguf(args.gguf, args.context)
    else: model = load_huggingface(args.weights, args.context)
    decoding.check_prompt(prompt, args.count, model.config)

    timings: list[float] = []
    st = time.perf_counter()
    out = generate(model, prompt, args.count, args.temperature, args.seed, timings)
    total = time.perf_counter() - st
    print("tokens:", out)
    if tok is not None: print("text:", repr(tok.decode(prompt + out)))
    steady = timings[2:]   # the first two decode steps compile and capture the JIT: their time isn't a decode speed
    if steady: print(f"{total:.2f} s total, decode {1e3 * sum(steady) / len(steady):.2f} ms/token (after JIT capture)")
    else: print(f"{total:.2f} s total (a decode speed needs --count 4 or more: the first steps compile and capture the JIT)")

if __name__ == "__main__":
    examples.run(main, "fusegrad.examples.llama")
