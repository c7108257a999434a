"""LLaMA example vs. a plain-PyTorch LLaMA written here (HF semantics: rotate_half rotary, grouped-query
attention, SwiGLU, RMSNorm), on random weights saved in HF's safetensors layout and in a GGUF file.

The GGUF file is written by a small writer below, the way llama.cpp's convert_hf_to_gguf does it:
``blk.N.*`` names and q/k rows permuted from HF's rotate_half order to Meta's interleaved order.
"""
import json, struct
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from fusegrad import Tensor, Variable, dtypes
from fusegrad.nn.state import safe_save
from helpers import assert_decode_paths_agree
from fusegrad.examples import llama

LAYERS, DIM, HEADS, KV_HEADS, HIDDEN, VOCAB, CONTEXT = 2, 64, 4, 2, 96, 128, 32
HEAD_DIM, EPS, THETA = DIM // HEADS, 1e-5, 5000.0
HF_CONFIG = {"num_hidden_layers": LAYERS, "hidden_size": DIM, "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS,
             "intermediate_size": HIDDEN, "vocab_size": VOCAB, "rms_norm_eps": EPS, "rope_theta": THETA,
             "max_position_embeddings": 4096, "tie_word_embeddings": False}

def random_hf_weights(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    def randn(*shape, scale=0.2): return (rng.standard_normal(shape) * scale).astype(np.float32)
    w = {"model.embed_tokens.weight": randn(VOCAB, DIM, scale=1.0), "model.norm.weight": 1 + randn(DIM, scale=0.1),
         "lm_head.weight": randn(VOCAB, DIM)}
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        w.update({p + "input_layernorm.weight": 1 + randn(DIM, scale=0.1), p + "post_attention_layernorm.weight": 1 + randn(DIM, scale=0.1),
                  p + "self_attn.q_proj.weight": randn(HEADS * HEAD_DIM, DIM), p + "self_attn.k_proj.weight": randn(KV_HEADS * HEAD_DIM, DIM),
                  p + "self_attn.v_proj.weight": randn(KV_HEADS * HEAD_DIM, DIM), p + "self_attn.o_proj.weight": randn(DIM, HEADS * HEAD_DIM),
                  p + "mlp.gate_proj.weight": randn(HIDDEN, DIM), p + "mlp.up_proj.weight": randn(HIDDEN, DIM),
                  p + "mlp.down_proj.weight": randn(DIM, HIDDEN)})
    return w

def torch_llama_logits(w: dict[str, np.ndarray], tokens: list[int]) -> np.ndarray:
    """Reference forward in float64 with HF's LlamaForCausalLM semantics, (T, vocab)."""
    t = {k: torch.from_numpy(v).double() for k, v in w.items()}
    T = len(tokens)
    def rmsnorm(x, weight): return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * weight
    def rotate_half(x): return torch.cat((-x[..., HEAD_DIM // 2:], x[..., :HEAD_DIM // 2]), dim=-1)
    inv_freq = 1.0 / THETA ** (torch.arange(0, HEAD_DIM, 2, dtype=torch.float64) / HEAD_DIM)
    angles = torch.outer(torch.arange(T, dtype=torch.float64), inv_freq)
    cos, sin = torch.cat((angles, angles), -1).cos(), torch.cat((angles, angles), -1).sin()   # (T, head_dim)
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    x = t["model.embed_tokens.weight"][torch.tensor(tokens)]
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        h = rmsnorm(x, t[p + "input_layernorm.weight"])
        q = (h @ t[p + "self_attn.q_proj.weight"].T).reshape(T, HEADS, HEAD_DIM).transpose(0, 1)
        k = (h @ t[p + "self_attn.k_proj.weight"].T).reshape(T, KV_HEADS, HEAD_DIM).transpose(0, 1)
        v = (h @ t[p + "self_attn.v_proj.weight"].T).reshape(T, KV_HEADS, HEAD_DIM).transpose(0, 1)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k, v = k.repeat_interleave(HEADS // KV_HEADS, dim=0), v.repeat_interleave(HEADS // KV_HEADS, dim=0)
        scores = (q @ k.transpose(-1, -2)) / HEAD_DIM ** 0.5
        att = scores.masked_fill(~causal, float("-inf")).softmax(-1) @ v
        x = x + att.transpose(0, 1).reshape(T, DIM) @ t[p + "self_attn.o_proj.weight"].T
        h = rmsnorm(x, t[p + "post_attention_layernorm.weight"])
        x = x + (F.silu(h @ t[p + "mlp.gate_proj.weight"].T) * (h @ t[p + "mlp.up_proj.weight"].T)) @ t[p + "mlp.down_proj.weight"].T
    return (rmsnorm(x, t["model.norm.weight"]) @ t["lm_head.weight"].T).numpy()

# ---------------------------------------------------------------- a minimal GGUF (v3) writer

def hf_to_meta_rows(w: np.ndarray, n_heads: int) -> np.ndarray:
    """llama.cpp convert_hf_to_gguf's permute: HF rotate_half row order -> interleaved pairs."""
    return w.reshape(n_heads, 2, w.shape[0] // n_heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)

def write_gguf(path, kv: dict, tensors: dict[str, np.ndarray]) -> None:
    def string(s: str) -> bytes: return struct.pack("<Q", len(s.encode())) + s.encode()
    def value(v) -> bytes:
        if isinstance(v, str): return struct.pack("<I", 8) + string(v)
        if isinstance(v, float): return struct.pack("<If", 6, v)
        return struct.pack("<II", 4, v)   # uint32
    header = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kv)) + b"".join(string(k) + value(v) for k, v in kv.items())
    data, infos = b"", b""
    for name, arr in tensors.items():
        ggml_type = {np.float32: 0, np.float16: 1}[arr.dtype.type]
        data += b"\0" * (-len(data) % 32)
        infos += string(name) + struct.pack("<I", arr.ndim) + b"".join(struct.pack("<Q", d) for d in reversed(arr.shape))
        infos += struct.pack("<IQ", ggml_type, len(data))
        data += arr.tobytes()
    blob = header + infos
    with open(path, "wb") as f: f.write(blob + b"\0" * (-len(blob) % 32) + data)

def gguf_tensors(w: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    out = {"token_embd.weight": w["model.embed_tokens.weight"].astype(np.float16), "output_norm.weight": w["model.norm.weight"]}
    names = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm", "self_attn.q_proj": "attn_q",
             "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
             "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}
    for i in range(LAYERS):
        for hf, gg in names.items():
            arr = w[f"model.layers.{i}.{hf}.weight"]
            if gg == "attn_q": arr = hf_to_meta_rows(arr, HEADS)
            if gg == "attn_k": arr = hf_to_meta_rows(arr, KV_HEADS)
            out[f"blk.{i}.{gg}.weight"] = arr
    return out   # no output.weight: a tied-embedding model

@pytest.fixture(scope="module")
def weights():
    w = random_hf_weights()
    # embeddings exactly representable in float16, so the GGUF copy (stored as F16) holds the same values
    w["model.embed_tokens.weight"] = w["model.embed_tokens.weight"].astype(np.float16).astype(np.float32)
    return w

@pytest.fixture(scope="module")
def model(weights, tmp_path_factory):
    folder = tmp_path_factory.mktemp("llama")
    names = list(weights)   # two shards, like a real HF checkpoint directory
    safe_save({k: Tensor(weights[k]) for k in names[:7]}, str(folder / "model-00001-of-00002.safetensors"))
    safe_save({k: Tensor(weights[k]) for k in names[7:]}, str(folder / "model-00002-of-00002.safetensors"))
    (folder / "config.json").write_text(json.dumps(HF_CONFIG))
    return llama.load_huggingface(str(folder), max_context=CONTEXT)

TOKENS = [1, 17, 99, 3, 64, 127, 0, 42, 8, 77]

def test_config_read_from_checkpoint(model):
    c = model.config
    assert (c.n_layers, c.dim, c.n_heads, c.n_kv_heads, c.hidden_dim, c.vocab_size, c.max_context, c.rope_theta, c.norm_eps) == \
           (LAYERS, DIM, HEADS, KV_HEADS, HIDDEN, VOCAB, CONTEXT, THETA, EPS)

def test_full_sequence_logits(model, weights):
    got = model.logits(Tensor([TOKENS], dtype=dtypes.int32), 0).numpy()[0]
    np.testing.assert_allclose(got, torch_llama_logits(weights, TOKENS), rtol=1e-4, atol=1e-4)
    assert model.layers[0].attention.cache_kv.shape == (2, 1, CONTEXT, KV_HEADS, HEAD_DIM)   # the cache holds only kv heads

def test_kv_cache_decoding_matches_full_sequence(model, weights):
    ref = torch_llama_logits(weights, TOKENS)
    prefill = 4
    np.testing.assert_allclose(model.logits(Tensor([TOKENS[:prefill]], dtype=dtypes.int32), 0).numpy()[0], ref[:prefill],
                               rtol=1e-4, atol=1e-4)
    v = Variable("start_pos", 1, CONTEXT - 1)
    for pos in range(prefill, len(TOKENS)):
        start_pos = pos if pos % 2 else v.bind(pos)   # concrete and symbolic positions share the cache
        got = model.logits(Tensor([[TOKENS[pos]]], dtype=dtypes.int32), start_pos).numpy()[0, 0]
        np.testing.assert_allclose(got, ref[pos], rtol=1e-4, atol=1e-4, err_msg=f"position {pos}")
    got = model.logits(Tensor([TOKENS[5:9]], dtype=dtypes.int32), 5).numpy()[0]   # a chunk after a cached prefix
    np.testing.assert_allclose(got, ref[5:9], rtol=1e-4, atol=1e-4)

def test_jitted_decode_matches_unjitted_and_captures_once(model, weights):
    assert_decode_paths_agree(model, lambda toks: int(torch_llama_logits(weights, toks)[-1].argmax()), TOKENS[:3], 10, CONTEXT, VOCAB)
    prompt = TOKENS[:3]
    s1 = llama.generate(model, prompt, 6, temperature=0.8, seed=5)
    assert s1 == llama.generate(model, prompt, 6, temperature=0.8, seed=5) and all(0 <= t < VOCAB for t in s1)

def test_gguf(weights, tmp_path):
    path = tmp_path / "model.gguf"
    kv = {"general.architecture": "llama", "llama.block_count": LAYERS, "llama.embedding_length": DIM,
          "llama.attention.head_count": HEADS, "llama.attention.head_count_kv": KV_HEADS, "llama.feed_forward_length": HIDDEN,
          "llama.attention.layer_norm_rms_epsilon": EPS, "llama.rope.freq_base": THETA, "llama.context_length": 4096}
    write_gguf(path, kv, gguf_tensors(weights))
    m = llama.load_gguf(str(path), max_context=CONTEXT)
    assert m.config.tie_embeddings and m.output.weight is m.tok_embeddings.weight
    tied = {**weights, "lm_head.weight": weights["model.embed_tokens.weight"]}
    got = m.logits(Tensor([TOKENS], dtype=dtypes.int32), 0).numpy()[0]
    np.testing.assert_allclose(got, torch_llama_logits(tied, TOKENS), rtol=1e-4, atol=1e-4)
