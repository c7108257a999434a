"""fusegrad.helpers: Context keys (tinygrad 0.14's set), the progress bar, and fusegrad.function."""
import json, pathlib, re
import numpy as np
import pytest
from fusegrad import Tensor, Context, function
from fusegrad import helpers
from fusegrad.helpers import ContextVar, CONTEXT_KEYS_WITHOUT_EFFECT, tqdm, trange

FIXTURE = json.loads((pathlib.Path(__file__).parent / "fixtures" / "tinygrad_0_14_names.json").read_text())
DOCS = (pathlib.Path(__file__).parent.parent / "docs" / "api_fidelity.md").read_text()

@pytest.mark.parametrize("key", FIXTURE["context_keys"])
def test_context_accepts_every_tinygrad_key(key):
    before = ContextVar.registry[key].value
    with Context(**{key: before}): assert ContextVar.registry[key].value == before
    assert ContextVar.registry[key].value == before

def test_context_sets_and_restores():
    with Context(FUSE_OPTIM=1, DEBUG=0):
        assert helpers.FUSE_OPTIM.value == 1
    assert helpers.FUSE_OPTIM.value == 0

def test_unknown_context_key_names_it():
    with pytest.raises(KeyError, match="NOT_A_FLAG"): Context(NOT_A_FLAG=1)

def test_keys_without_effect_are_documented():
    assert set(CONTEXT_KEYS_WITHOUT_EFFECT) <= set(FIXTURE["context_keys"])
    undocumented = [k for k in CONTEXT_KEYS_WITHOUT_EFFECT if not re.search(rf"\|\s*`{k}`\s*\|", DOCS)]
    assert not undocumented, f"docs/api_fidelity.md lacks rows for {undocumented}"

def test_split_reduceop_key_has_an_effect():
    x = Tensor.ones(1 << 16).contiguous().realize()
    from fusegrad.helpers import GlobalCounters
    counts = []
    for split in (1, 0):
        with Context(SPLIT_REDUCEOP=split):
            GlobalCounters.reset()
            assert x.sum().item() == 1 << 16
            counts.append(GlobalCounters.kernel_count)
    assert counts[0] == 2 and counts[1] == 1   # split in two kernels, or one

def test_trange_and_tqdm(capsys):
    assert sum(trange(5, desc="steps")) == sum(range(5))
    assert "steps" in capsys.readouterr().err
    assert list(tqdm(["a", "b"], disable=True)) == ["a", "b"]
    assert capsys.readouterr().err == ""
    with tqdm(total=3, disable=True) as bar: bar.update(3)
    assert bar.n == 3
    with pytest.raises(TypeError, match="iterable"): list(tqdm())

def test_function_decorator():
    @function
    def affine(x, y): return x * 2 + y
    a, b = np.array([1.0, 2.0], np.float32), np.array([3.0, 4.0], np.float32)
    np.testing.assert_equal(affine(Tensor(a), Tensor(b)).numpy(), a * 2 + b)
    w = Tensor([1.0, 2.0]).realize()
    @function
    def implicit(x): return x * w
    with pytest.raises(RuntimeError, match="implicit"): implicit(Tensor(a))
    np.testing.assert_equal(function(allow_implicit=True)(lambda x: x * w)(Tensor(a)).numpy(), a * np.array([1.0, 2.0], np.float32))
    with pytest.raises(RuntimeError, match="Tensor"): function(lambda x: 3)(Tensor(a))
    pair = function(lambda x: (x + 1, x * 2))(Tensor(a))
    np.testing.assert_equal([t.numpy() for t in pair], [a + 1, a * 2])
