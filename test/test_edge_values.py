"""Edge values (bounds, infinities, degenerate corrections) against PyTorch, which tinygrad 0.14 agrees with here."""
import math
import numpy as np
import pytest
import torch
from fusegrad import Tensor

def _grad(fn, values: list[float], device: str) -> np.ndarray:
    x = Tensor(values, requires_grad=True, device=device)
    fn(x).sum().backward()
    return x.grad.numpy()

def _torch_grad(fn, values: list[float]) -> np.ndarray:
    x = torch.tensor(values, requires_grad=True)
    fn(x).sum().backward()
    return x.grad.numpy()

def test_clip_gradient_on_the_bound_is_one(device):
    """A value on a bound passes its gradient (1, tinygrad's and torch's), not a tie's 0.5."""
    values = [-1.0, 0.0, 1.0, 2.0, -3.0]
    np.testing.assert_array_equal(_grad(lambda x: x.clip(-1, 1), values, device), _torch_grad(lambda x: x.clip(-1, 1), values))
    np.testing.assert_array_equal(_grad(lambda x: x.clip(min_=0.0), values, device), _torch_grad(lambda x: x.clip(min=0.0), values))

@pytest.mark.parametrize("exponent", [2.5, 1.5, 3.7, -0.5])
def test_pow_gradient_at_base_one(device, exponent):
    values = [1.0, 2.0, 0.5]
    np.testing.assert_allclose(_grad(lambda x: x ** exponent, values, device), _torch_grad(lambda x: x ** exponent, values), rtol=1e-5)

def test_pow_of_one_with_nan_or_inf_exponent_is_one(device):
    got = Tensor([1.0, 1.0, 1.0, -1.0], device=device).pow(Tensor([math.nan, math.inf, -math.inf, math.inf], device=device))
    np.testing.assert_array_equal(got.numpy(), torch.tensor([1.0, 1.0, 1.0, -1.0]).pow(torch.tensor([math.nan, math.inf, -math.inf, math.inf])).numpy())

@pytest.mark.parametrize("correction", [3, 4, 10])
def test_var_with_correction_at_least_n(device, correction):
    """N - correction <= 0 divides by zero: inf (nan for a constant input), like tinygrad and torch."""
    for values in ([1.0, 2.0, 3.0], [2.0, 2.0, 2.0]):
        got = Tensor(values, device=device).var(correction=correction).item()
        want = torch.tensor(values).var(correction=correction).item()
        assert (math.isnan(got) and math.isnan(want)) or got == want, (values, got, want)

def test_isclose_with_infinities(device):
    a = [math.inf, -math.inf, math.inf, 1.0, math.nan, -math.inf, 1e38]
    b = [math.inf, math.inf, 1.0, math.inf, math.nan, -math.inf, math.inf]
    want = torch.tensor(a).isclose(torch.tensor(b)).numpy()
    np.testing.assert_array_equal(Tensor(a, device=device).isclose(Tensor(b, device=device)).numpy(), want)
    want_nan = torch.tensor(a).isclose(torch.tensor(b), equal_nan=True).numpy()
    np.testing.assert_array_equal(Tensor(a, device=device).isclose(Tensor(b, device=device), equal_nan=True).numpy(), want_nan)

POW_BASES = [0.0, -0.0, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5, math.inf, -math.inf, 3.0]
POW_EXPONENTS = [0.0, 1.0, 2.0, 3.0, -1.0, -2.0, 0.5, -0.5, 2.5, 1.5, -1.5, math.inf, -math.inf, 1.0 / 3]

def _same(got: np.ndarray, want: np.ndarray) -> list:
    """Indices where got and want differ (nans equal, relative 1e-5 otherwise); only where torch's is finite."""
    finite = np.isfinite(want)
    close = np.isclose(got, want, rtol=1e-5, atol=0, equal_nan=True)
    return [i for i in range(len(want)) if finite[i] and not close[i]]

def test_pow_gradients_match_torch_at_zero_and_infinity(device):
    """Every base/exponent pair of the sweep: the value and both gradients, where torch's gradient is finite."""
    pairs = [(b, e) for b in POW_BASES for e in POW_EXPONENTS]
    bases, exponents = [p[0] for p in pairs], [p[1] for p in pairs]
    b, e = Tensor(bases, requires_grad=True, device=device), Tensor(exponents, requires_grad=True, device=device)
    value = b ** e
    value.sum().backward()
    tb, te = torch.tensor(bases, requires_grad=True), torch.tensor(exponents, requires_grad=True)
    want = tb ** te
    want.sum().backward()
    close = np.isclose(value.numpy(), want.detach().numpy(), rtol=1e-5, atol=0, equal_nan=True)   # (infinities must match)
    assert [pairs[i] for i in np.flatnonzero(~close)] == []
    assert [pairs[i] for i in _same(b.grad.numpy(), tb.grad.numpy())] == []
    assert [pairs[i] for i in _same(e.grad.numpy(), te.grad.numpy())] == []

@pytest.mark.parametrize("exponent", [0, 1, 2, 3, 0.5, -1, -2, -3, 2.5, -0.5, math.inf, -math.inf])
def test_pow_gradient_with_a_python_exponent(device, exponent):
    got = _grad(lambda x: x ** exponent, POW_BASES, device)
    want = _torch_grad(lambda x: x ** exponent, POW_BASES)
    assert [POW_BASES[i] for i in _same(got, want)] == []

@pytest.mark.parametrize("base", [0.0, 1.0, -1.0, 2.0, -2.0, 0.5, math.inf])
def test_pow_gradient_with_a_python_base(device, base):
    got = _grad(lambda x: base ** x, POW_EXPONENTS, device)
    want = _torch_grad(lambda x: base ** x, POW_EXPONENTS)
    assert [POW_EXPONENTS[i] for i in _same(got, want)] == []

def test_pow_of_an_int_tensor_with_a_float_exponent(device):
    ints = [0, 1, 2, -2, 3]
    got = Tensor(ints, device=device) ** 0.5
    assert got.dtype.name == "float"
    np.testing.assert_array_equal(got.numpy(), torch.tensor(ints).pow(0.5).numpy())
    np.testing.assert_allclose((Tensor(ints, device=device) ** 2.5).numpy(), torch.tensor(ints).pow(2.5).numpy(), rtol=1e-6)
    # the exponent's gradient with an int base (torch: result * log(base))
    e = Tensor([0.5, 2.0, 1.5, 2.0, -1.0], requires_grad=True, device=device)
    (Tensor(ints, device=device) ** e).sum().backward()
    te = torch.tensor([0.5, 2.0, 1.5, 2.0, -1.0], requires_grad=True)
    (torch.tensor(ints) ** te).sum().backward()
    assert _same(e.grad.numpy(), te.grad.numpy()) == []

NEGATIVE_PADS = [(-1, 2), (2, -1), (-2, -1), (-1, -1), (0, -3), (-3, 2), (1, -4), (-1, 2, 1, -1), (1, -4, -1, 1)]

@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular", "constant"])
@pytest.mark.parametrize("pad", NEGATIVE_PADS)
def test_negative_pads_crop_like_torch(device, mode, pad):
    """tinygrad 0.14 gives torch's results here too: reflect/replicate pad from the whole input then crop,
    circular crops first and wraps around the rest."""
    x = np.arange(2 * 3 * 5, dtype=np.float32).reshape(2, 3, 5)
    want = torch.nn.functional.pad(torch.tensor(x), pad, mode=mode).numpy()
    got = Tensor(x, device=device).pad(pad, mode=mode).numpy()
    assert got.shape == want.shape and np.array_equal(got, want)

def test_pad_cropping_everything_is_an_error():
    with pytest.raises(ValueError, match="crops more"): Tensor.ones(1, 3).pad((-2, -2), mode="reflect")

@pytest.mark.parametrize("bounds", [(-1, 1), (0, 0), (None, 1), (0.0, None)])
def test_clip_gradient_matches_torch_at_the_bounds(device, bounds):
    values = [-1.0, 0.0, 1.0, 2.0, -3.0]
    got = _grad(lambda x: x.clip(*bounds), values, device)
    np.testing.assert_array_equal(got, _torch_grad(lambda x: x.clip(*bounds), values))

def test_sign_and_abs_of_infinite_constants(device):
    """sign(+-inf) is +-1 (not nan), also for constants folded before any kernel runs."""
    assert Tensor.full((2,), math.inf, device=device).sign().tolist() == [1.0, 1.0]
    assert Tensor.full((2,), -math.inf, device=device).abs().tolist() == [math.inf, math.inf]
    # nan stays nan (numpy's; tinygrad gives 1, torch 0: docs/api_fidelity.md)
    got = Tensor([math.nan, -math.inf, 0.0, -2.0], device=device).sign().numpy()
    np.testing.assert_array_equal(got, np.sign(np.array([math.nan, -math.inf, 0.0, -2.0], np.float32)))

def test_empty_reductions(device):
    """Over a zero-size axis: sum 0, prod 1, mean nan (torch and tinygrad); max/min give the identity -inf/inf
    (tinygrad's; torch raises)."""
    empty = Tensor(np.zeros((0, 3), np.float32), device=device)
    assert empty.sum(0).tolist() == [0.0] * 3 and empty.prod(0).tolist() == [1.0] * 3
    assert all(math.isnan(v) for v in empty.mean(0).tolist())
    assert empty.max(0).tolist() == [-math.inf] * 3 and empty.min(0).tolist() == [math.inf] * 3
    assert empty.sum(1).shape == (0,) and empty.sum().item() == 0.0

def test_nan_in_max_and_sort_follows_torch(device):
    v = np.array([[1.0, math.nan, 3.0], [-1.0, 2.0, math.inf], [math.nan, math.nan, 0.0]], np.float32)
    t, tt = Tensor(v, device=device), torch.tensor(v)
    np.testing.assert_array_equal(t.max(1).numpy(), tt.amax(1).numpy())
    np.testing.assert_array_equal(t.min(1).numpy(), tt.amin(1).numpy())
    np.testing.assert_array_equal(t.sort(1)[0].numpy(), tt.sort(1)[0].numpy())
    np.testing.assert_array_equal(t.sort(1, descending=True)[0].numpy(), tt.sort(1, descending=True)[0].numpy())
    np.testing.assert_array_equal(t.argmax(1).numpy(), tt.argmax(1).numpy())
