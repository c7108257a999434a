"""GPT-2 example vs. a plain-PyTorch GPT-2 written here, on random weights in HF's layout.

The weights are random numpy arrays saved with fusegrad's safe_save in HF GPT-2 naming (Conv1D
(in, out) layout, the mask buffer ``h.N.attn.bias``, no lm_head); the reference reads the same
arrays directly, so a loading or transposing mistake shows up as a logits mismatch.
"""
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from fusegrad import Tensor, Variable, dtypes
from fusegrad.nn.state import safe_save
from helpers import assert_decode_paths_agree
from fusegrad.examples import gpt2

LAYERS, DIM, HEADS, VOCAB, CONTEXT = 2, 64, 4, 128, 32

def random_hf_weights(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    def randn(*shape, scale=0.2): return (rng.standard_normal(shape) * scale).astype(np.float32)
    w = {"wte.weight": randn(VOCAB, DIM, scale=0.5), "wpe.weight": randn(CONTEXT, DIM, scale=0.5),
         "ln_f.weight": 1 + randn(DIM, scale=0.1), "ln_f.bias": randn(DIM, scale=0.1)}
    for i in range(LAYERS):
        p = f"h.{i}."
        w.update({p + "ln_1.weight": 1 + randn(DIM, scale=0.1), p + "ln_1.bias": randn(DIM, scale=0.1),
                  p + "attn.c_attn.weight": randn(DIM, 3 * DIM), p + "attn.c_attn.bias": randn(3 * DIM, scale=0.1),
                  p + "attn.c_proj.weight": randn(DIM, DIM), p + "attn.c_proj.bias": randn(DIM, scale=0.1),
                  p + "ln_2.weight": 1 + randn(DIM, scale=0.1), p + "ln_2.bias": randn(DIM, scale=0.1),
                  p + "mlp.c_fc.weight": randn(DIM, 4 * DIM), p + "mlp.c_fc.bias": randn(4 * DIM, scale=0.1),
                  p + "mlp.c_proj.weight": randn(4 * DIM, DIM, scale=0.1), p + "mlp.c_proj.bias": randn(DIM, scale=0.1),
                  # HF checkpoints carry the causal mask as a buffer; the loader must skip it
                  p + "attn.bias": np.tril(np.ones((CONTEXT, CONTEXT), np.float32))[None, None]})
    return w

def torch_gpt2_logits(w: dict[str, np.ndarray], tokens: list[int]) -> np.ndarray:
    """Reference GPT-2 forward (HF semantics: Conv1D x @ W + b, gelu tanh, tied lm_head), (T, vocab)."""
    t = {k: torch.from_numpy(v).double() for k, v in w.items()}
    T = len(tokens)
    x = t["wte.weight"][torch.tensor(tokens)] + t["wpe.weight"][:T]
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    for i in range(LAYERS):
        p = f"h.{i}."
        h = F.layer_norm(x, (DIM,), t[p + "ln_1.weight"], t[p + "ln_1.bias"], 1e-5)
        q, k, v = (h @ t[p + "attn.c_attn.weight"] + t[p + "attn.c_attn.bias"]).split(DIM, dim=-1)
        q, k, v = (a.reshape(T, HEADS, DIM // HEADS).transpose(0, 1) for a in (q, k, v))
        scores = (q @ k.transpose(-1, -2)) / (DIM // HEADS) ** 0.5
        att = scores.masked_fill(~causal, float("-inf")).softmax(-1) @ v
        x = x + att.transpose(0, 1).reshape(T, DIM) @ t[p + "attn.c_proj.weight"] + t[p + "attn.c_proj.bias"]
        h = F.layer_norm(x, (DIM,), t[p + "ln_2.weight"], t[p + "ln_2.bias"], 1e-5)
        h = F.gelu(h @ t[p + "mlp.c_fc.weight"] + t[p + "mlp.c_fc.bias"], approximate="tanh")
        x = x + h @ t[p + "mlp.c_proj.weight"] + t[p + "mlp.c_proj.bias"]
    x = F.layer_norm(x, (DIM,), t["ln_f.weight"], t["ln_f.bias"], 1e-5)
    return (x @ t["wte.weight"].T).numpy()

@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    w = random_hf_weights()
    path = tmp_path_factory.mktemp("gpt2") / "model.safetensors"
    safe_save({k: Tensor(v) for k, v in w.items()}, str(path))
    model = gpt2.load_weights(str(path), n_heads=HEADS)
    return w, model

TOKENS = [5, 17, 99, 3, 64, 127, 0, 42, 8, 77]

def test_config_read_from_weights(setup):
    _, model = setup
    c = model.config
    assert (c.n_layers, c.dim, c.n_heads, c.vocab_size, c.max_context) == (LAYERS, DIM, HEADS, VOCAB, CONTEXT)
    assert model.lm_head.weight is model.wte.weight

def test_full_sequence_logits(setup):
    w, model = setup
    got = model.logits(Tensor([TOKENS], dtype=dtypes.int32), 0).numpy()[0]
    np.testing.assert_allclose(got, torch_gpt2_logits(w, TOKENS), rtol=1e-4, atol=1e-4)

def test_kv_cache_decoding_matches_full_sequence(setup):
    w, model = setup
    ref = torch_gpt2_logits(w, TOKENS)
    prefill = 4
    got = model.logits(Tensor([TOKENS[:prefill]], dtype=dtypes.int32), 0).numpy()[0]
    np.testing.assert_allclose(got, ref[:prefill], rtol=1e-4, atol=1e-4)
    v = Variable("start_pos", 1, CONTEXT - 1)
    for pos in range(prefill, len(TOKENS)):
        # alternate concrete and symbolic (bound Variable) positions: both read the same cache
        start_pos = pos if pos % 2 else v.bind(pos)
        got = model.logits(Tensor([[TOKENS[pos]]], dtype=dtypes.int32), start_pos).numpy()[0, 0]
        np.testing.assert_allclose(got, ref[pos], rtol=1e-4, atol=1e-4, err_msg=f"position {pos}")
    # a second chunk of several tokens after a cached prefix (causal mask offset by start_pos)
    got = model.logits(Tensor([TOKENS[6:9]], dtype=dtypes.int32), 6).numpy()[0]
    np.testing.assert_allclose(got, ref[6:9], rtol=1e-4, atol=1e-4)

def test_jitted_decode_matches_unjitted_and_captures_once(setup):
    w, model = setup
    assert_decode_paths_agree(model, lambda toks: int(torch_gpt2_logits(w, toks)[-1].argmax()), TOKENS[:3], 10, CONTEXT, VOCAB)

def test_temperature_sampling(setup):
    w, model = setup
    a = gpt2.generate(model, TOKENS[:2], 8, temperature=1.0, seed=1)
    b = gpt2.generate(model, TOKENS[:2], 8, temperature=1.0, seed=1)
    assert a == b and all(0 <= t < VOCAB for t in a)
    # the Gumbel-max sample with noise u equals argmax(logits/T - log(-log u)): check one step against numpy
    rng = np.random.default_rng(3)
    u = rng.random((1, VOCAB), dtype=np.float32)
    ref = torch_gpt2_logits(w, TOKENS[:4])[-1]
    for T in (0.5, 2.0):
        got = model.forward(Tensor([TOKENS[:4]], dtype=dtypes.int32), 0, Tensor([T]), Tensor(u)).item()
        assert got == int(np.argmax(ref / T - np.log(-np.log(u[0]))))
