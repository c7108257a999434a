"""Edge values against PyTorch, round 3 (issue 35): clamped activations at huge inputs, exact float remainders and
floor division, x * 0 with NaN/inf, logaddexp, expm1-based elu/celu/selu and copysign of -NaN."""
import math
import numpy as np
import pytest
import torch
from fusegrad import Tensor, dtypes

F = torch.nn.functional
INF, NAN = math.inf, math.nan

def _same(got: np.ndarray, want: np.ndarray, rtol: float = 0.0) -> None:
    """Equal values (NaN where torch has NaN, infinities equal), within ``rtol`` elsewhere."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=rtol, atol=0, equal_nan=True)

def _torch_dtype(name: str): return getattr(torch, name)

# ---------------------------------------------------------------- relu6, hardsigmoid, hardswish

HUGE = [1e4, 6e4, INF, -INF, NAN, 3.0, -2.0, 0.0, 6.0, -3.0]
HUGE_FLOAT32 = [1e8, 1e10, 1e30] + HUGE

@pytest.mark.parametrize("op", ["relu6", "hardsigmoid", "hardswish"])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_clamped_activations_at_huge_inputs(device, op, dtype):
    """relu6/hardsigmoid were relu(y) - relu(y - k): 1e8 gave 8, 1e10 0 and inf NaN; hardswish inherited it."""
    values = HUGE_FLOAT32 if dtype == "float32" else HUGE
    got = getattr(Tensor(values, dtype=getattr(dtypes, dtype), device=device), op)().numpy()
    want = getattr(F, op)(torch.tensor(values, dtype=_torch_dtype(dtype))).numpy()
    _same(got, want)

@pytest.mark.parametrize("op", ["relu6", "hardsigmoid", "hardswish"])
def test_clamped_activation_gradients_at_the_kinks(device, op):
    """torch's gradients on the bounds: 0 for relu6 at 0 and 6, hardsigmoid at +-3, hardswish 0 at -3 and 1 at 3."""
    values = [-7.0, -3.0, -1.0, 0.0, 1.0, 3.0, 6.0, 8.0]
    x = Tensor(values, requires_grad=True, device=device)
    getattr(x, op)().sum().backward()
    tx = torch.tensor(values, requires_grad=True)
    getattr(F, op)(tx).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-6)

# ---------------------------------------------------------------- remainders and floor division

REMAINDER_CASES = [(1e8, 3.0), (-1e8, 3.0), (1e10, 7.0), (-1e10, 7.0), (0.5, 1e-7), (5.5, 2.0), (-5.5, 2.0),
                   (5.5, -2.0), (0.5, INF), (-0.5, INF), (0.5, -INF), (-0.5, -INF), (0.0, INF), (-0.0, 3.0),
                   (INF, 2.0), (NAN, 2.0), (2.0, NAN), (5.5, 0.0), (1e-45, 3.0), (3.0, 1e-45), (1e38, 1e-38)]

@pytest.mark.parametrize("op", ["fmod", "remainder"])
def test_float_remainders_are_exact(device, op):
    """Exact, like C's fmod (torch's): 1e8 % 3 gave -2, fmod(1e10, 7) 256, fmod(0.5, 1e-7) a negative number,
    x % inf NaN."""
    a, b = [c[0] for c in REMAINDER_CASES], [c[1] for c in REMAINDER_CASES]
    fg = {"fmod": Tensor.fmod, "remainder": Tensor.mod}[op]
    got = fg(Tensor(a, device=device), Tensor(b, device=device)).numpy()
    want = getattr(torch, op)(torch.tensor(a), torch.tensor(b)).numpy()
    _same(got, want)
    numbers = ~np.isnan(want)
    assert list(np.signbit(got[numbers])) == list(np.signbit(want[numbers]))   # -0.0 stays -0.0

def test_remainder_with_python_operands(device):
    assert (Tensor([1e8], device=device) % 3).tolist() == [1.0]
    assert Tensor([1e10], device=device).fmod(7).tolist() == [4.0]
    assert (Tensor([-0.5], device=device) % math.inf).tolist() == [math.inf]
    assert Tensor([-0.5], device=device).fmod(math.inf).tolist() == [-0.5]
    assert (7.0 % Tensor([-3.0], device=device)).tolist() == [-2.0]

def test_remainder_of_constants_folds_exactly():
    """Constant operands fold on the host (exec_alu): the same C fmod."""
    assert (Tensor.full((2,), -5.5) % Tensor.full((2,), math.inf)).tolist() == [math.inf] * 2
    assert Tensor.full((2,), -5.5).fmod(math.inf).tolist() == [-5.5] * 2
    assert all(math.isnan(v) for v in Tensor.full((2,), 5.5).fmod(0.0).tolist())

@pytest.mark.parametrize("dtype", ["float16", "float64"])
def test_float_remainders_in_other_dtypes(device, dtype):
    a, b = [1000.0, -1000.0, 0.5, 7.0, -7.0, 3.0], [3.0, 3.0, 0.1, INF, 2.5, -0.75]
    for op, fg in (("fmod", Tensor.fmod), ("remainder", Tensor.mod)):
        got = fg(Tensor(a, dtype=getattr(dtypes, dtype), device=device), Tensor(b, dtype=getattr(dtypes, dtype), device=device))
        assert got.dtype == getattr(dtypes, dtype)
        _same(got.numpy(), getattr(torch, op)(torch.tensor(a, dtype=_torch_dtype(dtype)), torch.tensor(b, dtype=_torch_dtype(dtype))).numpy())

@pytest.mark.parametrize("op", ["fmod", "remainder"])
def test_float_remainder_gradients(device, op):
    """PyTorch's: 1 for the dividend, -(a / b rounded toward zero or down) for the divisor."""
    a, b = [5.5, -5.5, 7.0, 0.0, 1.0, -2.0], [2.0, 2.0, -3.0, 1.0, 1.0, -1.0]
    x, y = Tensor(a, requires_grad=True, device=device), Tensor(b, requires_grad=True, device=device)
    {"fmod": Tensor.fmod, "remainder": Tensor.mod}[op](x, y).sum().backward()
    tx, ty = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    getattr(torch, op)(tx, ty).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), tx.grad.numpy())
    np.testing.assert_array_equal(y.grad.numpy(), ty.grad.numpy())

FLOOR_DIVIDE_CASES = [(INF, 1.0), (-INF, 1.0), (1e-45, -3.0), (-1e-45, 3.0), (1.0, INF), (-1.0, INF), (0.0, -3.0),
                      (7.0, 0.0), (-7.0, 0.0), (0.0, 0.0), (1e38, 1e-38), (-1e38, 1e-38), (7.0, 2.0), (-7.0, 2.0),
                      (0.3, 0.1), (1e8, 3.0), (NAN, 1.0), (5.0, -INF)]

def test_float_floor_division_matches_torch(device):
    """floor(a / b) as torch computes it: inf // 1 is NaN (was inf), 1e-45 // -3 is -1 (was -0.0)."""
    a, b = [c[0] for c in FLOOR_DIVIDE_CASES], [c[1] for c in FLOOR_DIVIDE_CASES]
    got = (Tensor(a, device=device) // Tensor(b, device=device)).numpy()
    want = (torch.tensor(a) // torch.tensor(b)).numpy()
    _same(got, want)
    numbers = ~np.isnan(want)
    assert list(np.signbit(got[numbers])) == list(np.signbit(want[numbers]))   # -0.0 and -1 for tiny negatives

# ---------------------------------------------------------------- x * 0

def test_nan_and_inf_times_a_python_zero(device):
    """A float x * 0 isn't folded to 0 (it was, tinygrad's rule): NaN and inf times 0 are NaN, torch's."""
    got = (Tensor([NAN, INF, -INF, -1.0], device=device) * 0).numpy()
    _same(got, (torch.tensor([NAN, INF, -INF, -1.0]) * 0).numpy())
    assert np.signbit(got[3])
    assert (Tensor([3, -4], device=device) * 0).tolist() == [0, 0]   # ints still fold
    _same((0.0 * Tensor([NAN, 2.0], device=device)).numpy(), [NAN, 0.0])

# ---------------------------------------------------------------- logaddexp

def test_logaddexp_edge_values(device):
    a = [0.0, 0.0, 0.0, 0.0, INF, -INF, INF, -INF, NAN, 100.0, -100.0, 1e30, 3.0]
    b = [-10.0, -20.0, INF, -INF, INF, -INF, -INF, 5.0, 0.0, 100.0, -101.0, -1e30, 3.0]
    got = Tensor(a, device=device).logaddexp(Tensor(b, device=device)).numpy()
    _same(got, torch.tensor(a).logaddexp(torch.tensor(b)).numpy(), rtol=2e-7)
    assert Tensor([0.0], device=device).logaddexp(-20.0).item() == pytest.approx(2.06115369e-09, rel=1e-6)

def test_logaddexp_gradient(device):
    a, b = [5.5, -5.5, 0.0, 1.0, -30.0], [2.0, 2.0, 0.0, 1.0, 0.0]
    x, y = Tensor(a, requires_grad=True, device=device), Tensor(b, requires_grad=True, device=device)
    x.logaddexp(y).sum().backward()
    tx, ty = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    tx.logaddexp(ty).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-5)
    np.testing.assert_allclose(y.grad.numpy(), ty.grad.numpy(), rtol=1e-5)

# ---------------------------------------------------------------- expm1, elu, celu, selu

EXPM1_VALUES = [-1e-8, 1e-8, -1e-30, 1e-45, -0.0, 0.0, -1e-3, 0.3, -0.7, 1.0, -5.0, 15.0, 88.0, 89.0, -20.0, -104.0,
                INF, -INF, NAN]

def test_expm1_matches_torch(device):
    got = Tensor(EXPM1_VALUES, device=device).expm1().numpy()
    _same(got, torch.tensor(EXPM1_VALUES).expm1().numpy(), rtol=4e-7)
    assert np.signbit(got[4])   # -0.0 stays -0.0

def test_expm1_in_float16_and_its_gradient(device):
    values = [-1e-4, 1e-3, -2.0, 5.0]
    _same(Tensor(values, dtype=dtypes.float16, device=device).expm1().numpy(),
          torch.tensor(values, dtype=torch.float16).expm1().numpy())
    x = Tensor(values, requires_grad=True, device=device)
    x.expm1().sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.exp(np.array(values, np.float64)), rtol=1e-6)

@pytest.mark.parametrize("op", ["elu", "celu", "selu"])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_elu_family_near_zero_and_constants(device, op, dtype):
    """e**x - 1 lost -1e-8 (gave 0); selu's constants are torch's exact ones (tinygrad's defaults are 9 ulp off)."""
    values = [-1e-8, -1e-5, -1.0, -3.0, 1.0, 2.5, 0.0, -INF, INF, NAN] if dtype == "float32" else [-1e-5, -1e-3, -1.0, 1.0, 0.0]
    got = getattr(Tensor(values, dtype=getattr(dtypes, dtype), device=device), op)().numpy()
    want = getattr(F, op)(torch.tensor(values, dtype=_torch_dtype(dtype))).numpy()
    _same(got, want, rtol=2.5e-7 if dtype == "float32" else 0)

@pytest.mark.parametrize("op", ["elu", "celu", "selu"])
def test_elu_family_gradients_far_below_zero(device, op):
    """The gradient of the negative side is alpha * e**x (torch's), not expm1(x) + 1, which cancels."""
    values = [-15.0, -7.0, -1.0, -1e-8, 0.0, 2.0]
    kwargs = {"alpha": 0.5} if op == "celu" else {}
    x = Tensor(values, requires_grad=True, device=device)
    getattr(x, op)(**kwargs).sum().backward()
    tx = torch.tensor(values, requires_grad=True)
    getattr(F, op)(tx, **kwargs).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=2e-6)

# ---------------------------------------------------------------- copysign

def test_copysign_reads_the_sign_bit(device):
    """-NaN and -0.0 are negative (torch reads the sign bit); a positive NaN is positive."""
    signs = [-NAN, NAN, -0.0, 0.0, -INF, 2.0]
    got = Tensor([1.0] * 6, device=device).copysign(Tensor(signs, device=device)).numpy()
    want = torch.ones(6).copysign(torch.tensor(signs)).numpy()
    assert list(np.signbit(want)) == [True, False, True, False, True, False]   # (the fixture really has a -NaN)
    np.testing.assert_array_equal(got, want)
    assert Tensor([2.0], device=device).copysign(-NAN).tolist() == [-2.0]
    _same(Tensor([1.0, 2.0], dtype=dtypes.float16, device=device).copysign(Tensor([-NAN, -0.0], dtype=dtypes.float16, device=device)).numpy(),
          [-1.0, -2.0])
