"""Shared pieces of the language-model examples (gpt2.py, llama.py): building a randomly
initialized model and the prefill + jitted decode loop.

A model here is callable as ``model(tokens, start_pos, temperature, noise) -> Tensor`` (the next
token, sampled with the Gumbel-max trick; temperature 0 is greedy), has ``forward_jit`` for the
single-token step and ``config.max_context`` / ``config.vocab_size``.
"""
from __future__ import annotations
import argparse, time
import numpy as np
from fusegrad import Tensor, Variable, dtypes
from fusegrad.nn.state import get_state_dict

def add_generation_args(parser, prompt_help: str) -> None:
    """The command-line options every text-generation example shares (prompt, length, sampling)."""
    parser.add_argument("--prompt", default=None, help=prompt_help)
    parser.add_argument("--tokens", default=None, type=token_ids, help="prompt as comma-separated token ids, e.g. 1,2,3")
    parser.add_argument("--count", type=int, default=10, help="number of tokens to generate")
    parser.add_argument("--temperature", type=float, default=0.0, help="sampling temperature (0 = greedy)")
    parser.add_argument("--seed", type=int, default=0, help="random seed for the weights and the sampling")

def token_ids(text: str) -> list[int]:
    """``--tokens 1,2,3`` -> [1, 2, 3]; anything else is a usage error naming the bad item."""
    try: ids = [int(item) for item in text.split(",")]
    except ValueError: raise argparse.ArgumentTypeError(f"expected comma-separated integer token ids like 1,2,3, got {text!r}") from None
    if any(i < 0 for i in ids): raise argparse.ArgumentTypeError(f"token ids can't be negative, got {text!r}")
    return ids

def check_prompt(prompt: list[int], count: int, config) -> None:
    """One clear error (not a traceback) when the prompt can't run on this model: an id outside the vocabulary,
    or more tokens than the KV cache holds (``--context``)."""
    from fusegrad.examples import ExampleError
    from fusegrad.helpers import pluralize
    if (bad := [t for t in prompt if t >= config.vocab_size]):
        raise ExampleError(f"token ids {bad[:5]} are outside the vocabulary of {config.vocab_size}")
    if len(prompt) + count > config.max_context:
        raise ExampleError(f"the prompt ({pluralize('token', len(prompt))}) + --count {count} is more than the context of "
                           f"{config.max_context} tokens; raise --context or lower --count")

def random_model(model_class, config, seed: int = 0):
    """A model with the layers' default random initialization (for trying the code without a checkpoint)."""
    Tensor.manual_seed(seed)
    model = model_class(config)
    Tensor.realize(*get_state_dict(model).values())
    return model

def sample(logits: Tensor, temperature: Tensor, noise: Tensor) -> Tensor:
    """The next token (bsz,) int32 from the last position's logits: argmax(logits + T * g) with
    g = -log(-log(u)) is a sample of softmax(logits / T) (the Gumbel-max trick), and T = 0 is plain
    greedy argmax. So temperature is a tensor input and one JIT capture serves greedy and sampled
    decoding alike; ``noise`` holds the uniform u's and comes from the caller, so every replay gets
    fresh numbers."""
    gumbel = -(-noise.clip(1e-10, 1.0).log()).log()
    return (logits + temperature.reshape(1, 1) * gumbel).argmax(-1).cast(dtypes.int32).realize()

def generate(model, prompt: list[int], count: int, temperature: float = 0.0, seed: int = 0,
             timings: list[float] | None = None) -> list[int]:
    """Prefill ``prompt`` then decode ``count`` new tokens (greedy when temperature is 0).
    ``timings`` (if given) collects the seconds each decode step took."""
    if not prompt: raise ValueError("the prompt needs at least one token")
    if len(prompt) + count > model.config.max_context:
        raise ValueError(f"prompt ({len(prompt)}) + count ({count}) exceeds the context length {model.config.max_context}")
    rng = np.random.default_rng(seed)
    vocab = model.config.vocab_size
    temp = Tensor([temperature], dtype=dtypes.float32)
    def noise() -> Tensor: return Tensor(rng.random((1, vocab), dtype=np.float32))
    # prefill: the whole prompt at once, with a concrete start_pos (ordinary, unjitted kernels)
    token = model(Tensor([prompt], dtype=dtypes.int32), 0, temp, noise()).item()
    out = [token]
    # decode: one token per step; start_pos is a bound Variable so a single JIT capture serves all positions
    start_pos = Variable("start_pos", 1, model.config.max_context - 1)
    for pos in range(len(prompt), len(prompt) + count - 1):
        st = time.perf_counter()
        token = model(Tensor([[token]], dtype=dtypes.int32), start_pos.bind(pos), temp, noise()).item()
        if timings is not None: timings.append(time.perf_counter() - st)
        out.append(token)
    return out[:count]
