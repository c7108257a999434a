"""x ** y accuracy against float64 numpy (float32) and PyTorch (float16/bfloat16) over grids of bases and exponents.

exp2(y * log2 x) in float32 loses |y * log2 x| ulps in the product (10**30 was 55 ulp off); float32 pow now computes
in float64 and rounds once, float16 computes that float32 pow and rounds once, as torch does."""
import numpy as np
import pytest
import torch
from fusegrad import Tensor, dtypes

def _ulps(got: np.ndarray, exact: np.ndarray) -> np.ndarray:
    """|got - exact| in ulps of the float32 nearest to ``exact`` (float64)."""
    rounded = exact.astype(np.float32)
    return np.abs(got.astype(np.float64) - exact) / np.spacing(np.abs(rounded)).astype(np.float64)

def _grid():
    """Positive bases over 2**-120 .. 2**120 and exponents over [-10, 10] (non-integers mostly), every pair, plus
    random pairs whose results reach near float32's overflow and its smallest normal."""
    rng = np.random.default_rng(7)
    bases = np.concatenate([np.exp2(np.linspace(-120, 120, 97)), rng.uniform(0.5, 2.0, 20), [1.0, 2.0, 10.0, 0.1]])
    exponents = np.concatenate([np.linspace(-10, 10, 81), rng.uniform(-4, 4, 20), [3.14, -2.71, 0.5, 1 / 3]])
    b, e = np.meshgrid(bases.astype(np.float32), exponents.astype(np.float32))
    b, e = b.ravel(), e.ravel()
    # large results: choose the exponent so that |log2 result| is near 120
    far_b = np.exp2(rng.uniform(-60, 60, 2000)).astype(np.float32)
    far_e = (rng.choice([-1, 1], 2000) * rng.uniform(100, 126, 2000) / np.log2(far_b.astype(np.float64))).astype(np.float32)
    return np.concatenate([b, far_b]), np.concatenate([e, far_e])

def test_float32_pow_is_within_an_ulp_of_correctly_rounded():
    base, exponent = _grid()
    got = (Tensor(base) ** Tensor(exponent)).numpy()
    exact = np.power(base.astype(np.float64), exponent.astype(np.float64))
    normal = (np.abs(exact) >= 2.0 ** -126) & (np.abs(exact) < 3.4e38)
    assert normal.sum() > 8000
    worst = _ulps(got[normal], exact[normal]).max()
    assert worst <= 1.0, worst   # (measured 0.5: correctly rounded on this grid; exp2(y * log2 x) in float32: 55)

def test_float32_pow_negative_bases_with_integer_exponents():
    base = np.array([-3.7, -10.0, -0.5, -1.5e10, -7.0], np.float32)
    exponent = np.array([3.0, -7.0, 9.0, 3.0, 31.0], np.float32)
    got = (Tensor(base) ** Tensor(exponent)).numpy()
    exact = np.power(base.astype(np.float64), exponent.astype(np.float64))
    assert _ulps(got, exact).max() <= 1.0

def test_float32_pow_by_scalar_exponent():
    base = np.exp2(np.linspace(-40, 40, 201)).astype(np.float32)
    for y in (3.14, -2.5, 0.3, 1.7):
        got = (Tensor(base) ** y).numpy()
        exact = np.power(base.astype(np.float64), np.float64(np.float32(y)))
        assert _ulps(got, exact).max() <= 1.0, y

def test_float32_pow_special_values_unchanged():
    inf, nan = np.inf, np.nan
    base = np.array([0.0, -0.0, 0.0, -0.0, inf, -inf, -inf, 1.0, -1.0, nan, 2.0, -2.0, 0.5], np.float32)
    exponent = np.array([2.5, 3.0, -2.5, -3.0, 0.5, 3.0, -2.0, nan, inf, 0.0, -inf, 0.5, inf], np.float32)
    got = (Tensor(base) ** Tensor(exponent)).numpy()
    want = (torch.tensor(base) ** torch.tensor(exponent)).numpy()
    np.testing.assert_array_equal(got, want)

@pytest.mark.parametrize("dtype,tdtype", [(dtypes.float16, torch.float16), (dtypes.bfloat16, torch.bfloat16)])
def test_half_pow_is_torchs(dtype, tdtype):
    rng = np.random.default_rng(11)
    base = np.concatenate([rng.uniform(0, 60, 3000), np.exp2(rng.uniform(-10, 10, 1000))]).astype(np.float32)
    exponent = rng.uniform(-3, 3, 4000).astype(np.float32)
    tb, te = torch.tensor(base, dtype=tdtype), torch.tensor(exponent, dtype=tdtype)
    want = (tb ** te).float().numpy()
    got = (Tensor(tb.float().numpy()).cast(dtype) ** Tensor(te.float().numpy()).cast(dtype)).cast(dtypes.float32).numpy()
    np.testing.assert_array_equal(got, want)

def test_half_pow_by_a_python_float():
    # torch rounds the literal to half (3.140625) and computes 10 ** 3.140625 = 1382.4 in float32: 1382
    assert (Tensor([10.0], dtype=dtypes.half) ** 3.14).tolist() == [1382.0]
    assert (torch.tensor([10.0], dtype=torch.half) ** 3.14).tolist() == [1382.0]

def test_a_literal_cast_to_half_then_float_is_rounded_to_half():
    # the half constant kept the Python value 3.14; folding its cast to float32 skipped the half rounding
    assert Tensor(3.14).cast(dtypes.half).cast(dtypes.float32).item() == 3.140625
    assert (Tensor([1.0], dtype=dtypes.half) * 0 + 3.14).cast(dtypes.float32).item() == 3.140625

def test_pow_gradient_still_matches_torch():
    base, exponent = np.array([0.5, 2.0, 3.7, 10.0], np.float32), np.array([3.14, -1.5, 0.25, 2.0], np.float32)
    tb, te = Tensor(base), Tensor(exponent)
    gb, ge = (tb ** te).sum().gradient(tb, te)
    pb, pe = torch.tensor(base, requires_grad=True), torch.tensor(exponent, requires_grad=True)
    (pb ** pe).sum().backward()
    np.testing.assert_allclose(gb.numpy(), pb.grad.numpy(), rtol=1e-6)
    np.testing.assert_allclose(ge.numpy(), pe.grad.numpy(), rtol=1e-6)
