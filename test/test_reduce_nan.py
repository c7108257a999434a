"""max / min / argmax / argmin with NaN, against PyTorch: NaN is the largest value for argmax and
the smallest for argmin (the index of the first NaN), and max / min propagate it."""
import math
import numpy as np
import pytest
import torch
from fusegrad import Tensor, dtypes
from helpers import assert_tensor

FLOATS = {dtypes.float16: torch.float16, dtypes.float32: torch.float32, dtypes.float64: torch.float64}

def nan_data(rng: np.random.Generator, shape: tuple, nan_fraction: float = 0.2) -> np.ndarray:
    """Random values with repeated values, infinities and NaNs sprinkled in."""
    data = rng.integers(-3, 4, size=shape).astype(np.float64)
    data[rng.random(shape) < 0.05] = np.inf
    data[rng.random(shape) < 0.05] = -np.inf
    data[rng.random(shape) < nan_fraction] = np.nan
    return data

AXES = [(None, False), (0, False), (1, False), (-1, True), (0, True)]

@pytest.mark.parametrize("dtype", list(FLOATS), ids=str)
@pytest.mark.parametrize("axis,keepdim", AXES)
def test_argmax_argmin_with_nan_match_torch(device, dtype, axis, keepdim):
    rng = np.random.default_rng(0)
    data = nan_data(rng, (7, 9))
    data[3, :] = np.nan          # an all-NaN row
    data[:, 4] = np.nan          # an all-NaN column
    data[5, 6] = np.nan
    t, ref = Tensor(data, device=device, dtype=dtype), torch.tensor(data, dtype=FLOATS[dtype])
    for name in ("argmax", "argmin"):
        got = getattr(t, name)(axis, keepdim=keepdim) if axis is not None else getattr(t, name)()
        want = getattr(torch, name)(ref, axis, keepdim=keepdim) if axis is not None else getattr(torch, name)(ref)
        assert_tensor(got, want.numpy().astype(np.int32), dtypes.int32)

def test_argmax_first_nan_and_single_nan(device):
    t = Tensor([1.0, math.nan, 3.0, math.nan], device=device)
    assert t.argmax().item() == 1 and t.argmin().item() == 1
    assert Tensor([math.nan], device=device).argmax().item() == 0
    assert Tensor([math.inf, -math.inf, math.nan], device=device).argmax().item() == 2
    assert Tensor([math.inf, -math.inf, math.nan], device=device).argmin().item() == 2
    assert Tensor([math.inf, -math.inf, 0.0], device=device).argmin().item() == 1

@pytest.mark.parametrize("dtype", list(FLOATS), ids=str)
@pytest.mark.parametrize("axis,keepdim", AXES)
def test_max_min_propagate_nan_like_torch(device, dtype, axis, keepdim):
    data = nan_data(np.random.default_rng(1), (6, 5))
    data[2, :] = np.nan
    t, ref = Tensor(data, device=device, dtype=dtype), torch.tensor(data, dtype=FLOATS[dtype])
    dims = () if axis is None else (axis,)
    for name, torch_fn in (("max", torch.amax), ("min", torch.amin)):
        got = getattr(t, name)(axis, keepdim=keepdim)
        want = torch_fn(ref, dims, keepdim=keepdim) if dims else torch_fn(ref)
        assert_tensor(got, want.numpy(), dtype)

def test_max_gradient_with_nan_matches_torch_amax(device):
    data = np.array([[1.0, np.nan, 3.0], [4.0, 5.0, 6.0], [2.0, 2.0, 1.0]])
    x = Tensor(data, device=device, requires_grad=True)
    x.max(1).sum().backward()
    ref = torch.tensor(data, requires_grad=True)
    torch.amax(ref, 1).sum().backward()
    assert_tensor(x.grad, ref.grad.numpy(), dtypes.float64)
    y = Tensor(data, device=device, requires_grad=True)
    y.min().backward()
    ref = torch.tensor(data, requires_grad=True)
    torch.amin(ref).backward()
    assert_tensor(y.grad, ref.grad.numpy(), dtypes.float64)
