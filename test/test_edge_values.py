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
