"""Accuracy of Tensor's unary float math against PyTorch, in ulps, on CPU (C code) and PYTHON.

The reference is torch's op on the float64 input, rounded once to the tested dtype (nearly the
correctly rounded result); the error is |got - ref| / spacing(ref) (ulps of the result). The grid holds
0, -0, subnormals, +-1e-10 ... +-1e30, +-inf, nan and a dense log-uniform random sample; NaN and
infinities must match exactly and odd functions keep the sign of zero.

Bounds (float32 ulps) and why:
- 1: exp2, log2 (polynomials accurate to < 1 ulp, see codegen/transcendental.py), sqrt, reciprocal
  (correctly rounded), sin (<= 1 ulp while the Cody-Waite reduction is exact: |x| < 1e5 on CPU, so the
  CPU grid stops there; PYTHON runs numpy's sin on every float).
- 2: log, log10 (log2 times a rounded constant), rsqrt (two roundings).
- 3-4: ops composed of a few rounded steps: cos (1 - 2 sin(x/2)**2 or sin(2x)/(2 sin x); on CPU up to
  5e4, where 2x stays in the reduction's range), tan (sin/cos), tanh, asin, acos, atan, erf, softsign,
  sinh and cosh (on |x| <= 1: beyond, they inherit exp's error, see below).
float16 computes in float32 (the composed ops widen explicitly) and rounds once: 1 ulp for the
primitives, 2 for the composed ops (a float16 multiply by a constant after the float32 primitive).

Left out because they fail today for reasons outside these functions (see docs/decisions.md):
exp and everything built on it for large |x| (sinh, cosh, sigmoid, softplus, silu, mish, gelu):
exp(x) = exp2(x * log2(e)) rounds the product first, a relative error of |x|*2**-24, 52 ulp at x = 70;
asinh/acosh/atanh (nan outside the domain and cancellation near 0/1 in their log formulas).
"""
import math
import numpy as np
import pytest
import torch
from fusegrad import Tensor, dtypes

SPECIAL = [0.0, -0.0, 1e-45, -1e-45, 1e-40, -1e-40, 1e-10, -1e-10, 1e-4, -1e-4, 0.5, -0.5, 1.0, -1.0, 10.0, -10.0,
           1e4, -1e4, 1e6, -1e6, 1e30, -1e30, math.inf, -math.inf, math.nan]

def grid(dtype) -> np.ndarray:
    rng = np.random.default_rng(0)
    finfo = np.finfo(dtype)
    magnitudes = np.exp(rng.uniform(np.log(float(finfo.tiny)), np.log(float(finfo.max) / 2), 4000))
    dense = np.concatenate([magnitudes, -magnitudes, rng.uniform(-12, 12, 2000)])
    with np.errstate(over="ignore"):
        return np.concatenate([np.array(SPECIAL), dense]).astype(dtype)

# name: (fusegrad op, torch op, float32 ulp bound or ("rel", bound), odd (keeps -0), domain filter)
def _limit(lo, hi): return lambda x: (np.abs(x) >= lo) & (np.abs(x) <= hi) | ~np.isfinite(x) | (x == 0)
OPS = {
    "exp2": (Tensor.exp2, torch.exp2, 1, False, None), "log2": (Tensor.log2, torch.log2, 1, False, None),
    "log": (Tensor.log, torch.log, 2, False, None),
    "log10": (Tensor.log10, torch.log10, 2, False, None), "sqrt": (Tensor.sqrt, torch.sqrt, 1, False, None),
    "rsqrt": (Tensor.rsqrt, torch.rsqrt, 2, False, None), "reciprocal": (Tensor.reciprocal, torch.reciprocal, 1, False, None),
    "sin": (Tensor.sin, torch.sin, 1, True, 1e5), "cos": (Tensor.cos, torch.cos, 3, False, 5e4),
    "tan": (Tensor.tan, torch.tan, 4, True, 5e4),
    "asin": (Tensor.asin, torch.asin, 3, True, None), "acos": (Tensor.acos, torch.acos, 3, False, None),
    "atan": (Tensor.atan, torch.atan, 3, True, None), "sinh": (Tensor.sinh, torch.sinh, 4, True, _limit(0, 1)),
    "cosh": (Tensor.cosh, torch.cosh, 4, False, _limit(0, 1)), "tanh": (Tensor.tanh, torch.tanh, 3, True, None),
    "erf": (Tensor.erf, torch.erf, 3, True, None),
    "softsign": (Tensor.softsign, torch.nn.functional.softsign, 3, False, None),
}
TORCH_DT = {np.float32: torch.float32, np.float16: torch.float16}

def compare(name: str, dtype, device: str):
    ours, theirs, bound, odd, domain = OPS[name]
    x = grid(dtype)
    if isinstance(domain, float):   # sin/cos/tan on CPU: the float32 reduction is exact for |x| < 1e5
        if device == "CPU" and dtype == np.float32: x = x[np.isnan(x) | np.isinf(x) | (np.abs(x) <= domain)]
    elif domain is not None: x = x[domain(x.astype(np.float64))]
    got = ours(Tensor(x, device=device)).numpy().astype(np.float64)
    with np.errstate(all="ignore"):
        ref = theirs(torch.tensor(x.astype(np.float64))).to(TORCH_DT[dtype]).double().numpy()
    assert np.array_equal(np.isnan(got), np.isnan(ref)), f"{name}: nan at {x[np.isnan(got) != np.isnan(ref)][:5]}"
    finite = np.isfinite(ref)
    assert np.array_equal(got[~finite & ~np.isnan(ref)], ref[~finite & ~np.isnan(ref)]), f"{name}: infinities differ"
    if odd: assert np.array_equal(np.signbit(got[x == 0]), np.signbit(x[x == 0])), f"{name}: sign of zero"
    g, r = got[finite], ref[finite]
    if isinstance(bound, tuple):
        err = np.abs(g - r) / np.maximum(np.abs(r), float(np.finfo(dtype).tiny))
        limit = bound[1] if dtype == np.float32 else 1e-3
    else:
        err = np.abs(g - r) / np.spacing(np.abs(r).astype(dtype)).astype(np.float64)
        limit = bound if dtype == np.float32 else min(bound, 2)
    worst = int(np.argmax(err))
    assert err[worst] <= limit, f"{name} {dtype.__name__} {device}: {err[worst]:.3g} > {limit} at x={x[finite][worst]!r} (got {g[worst]!r}, torch {r[worst]!r})"

@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["float32", "float16"])
@pytest.mark.parametrize("name", list(OPS))
def test_unary_accuracy(name, dtype, device):
    compare(name, dtype, device)

# ---------------------------------------------------------------- edge values that used to be wrong

@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_edge_values(device):
    def run(fn, values, dtype=np.float32): return fn(Tensor(np.array(values, dtype), device=device)).numpy()
    np.testing.assert_array_equal(run(Tensor.atan, [0.0, math.inf, -math.inf]), np.float32([0.0, math.pi / 2, -math.pi / 2]))
    np.testing.assert_array_equal(run(Tensor.asin, [0.0]), [0.0])
    for fn in (Tensor.tanh, Tensor.sinh, Tensor.asin, Tensor.atan):
        np.testing.assert_allclose(run(fn, [1e-10, -1e-10]), [1e-10, -1e-10], rtol=1e-6)
    np.testing.assert_allclose(run(Tensor.erf, [1e-10]), [2 / math.sqrt(math.pi) * 1e-10], rtol=1e-6)
    np.testing.assert_allclose(run(Tensor.softplus, [-100.0, -30.0, 100.0, 1e30]), np.float32([math.exp(-100), math.exp(-30), 100, 1e30]), rtol=5e-6)   # exp's error at -30
    np.testing.assert_allclose(run(Tensor.logsigmoid, [100.0]), np.float32([-math.exp(-100)]), rtol=1e-6)   # a subnormal
    rows = np.array([[-math.inf, -math.inf], [math.inf, 1.0], [math.inf, -math.inf], [math.nan, 1.0], [1.0, 2.0]], np.float32)
    np.testing.assert_allclose(Tensor(rows, device=device).logsumexp(1).numpy(), torch.tensor(rows).logsumexp(1).numpy(), rtol=1e-6)
    # sin/cos far out: PYTHON everywhere, CPU while the reduction is exact (sin < 1e5, cos < 5e4)
    far = [1e6, -1e6, 1e30, 3e38] if device == "PYTHON" else [4e4, -4e4, 49999.0]
    x64 = np.float32(far).astype(np.float64)
    np.testing.assert_allclose(run(Tensor.sin, far), np.sin(x64), rtol=3e-7, atol=0)
    np.testing.assert_allclose(run(Tensor.cos, far), np.cos(x64), rtol=5e-7, atol=0)

POW_VALUES = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, -2.0, 3.0, -3.0, 2.5, -2.5, math.inf, -math.inf, math.nan]

@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_pow_special_values(device):
    """Every pair of special bases and exponents against torch (IEEE 754 / C99 pow), signed zeros included."""
    base, exponent = (np.array(v, np.float32) for v in zip(*[(b, e) for b in POW_VALUES for e in POW_VALUES]))
    got = Tensor(base, device=device).pow(Tensor(exponent, device=device)).numpy()
    ref = torch.tensor(base).pow(torch.tensor(exponent)).numpy()
    np.testing.assert_allclose(got, ref, rtol=1e-6, equal_nan=True)
    assert np.array_equal(np.signbit(got[got == 0]), np.signbit(ref[ref == 0]))
    for e in (0, 2, 3, -1, -2, -3, 0.5):   # the Python-number fast paths
        got, ref = Tensor(POW_VALUES, device=device).pow(e).numpy(), torch.tensor(POW_VALUES).pow(e).numpy()
        if e == 0.5:   # C99 (and torch's tensor-exponent pow): pow(-inf, .5) = inf, pow(-0, .5) = +0; torch's scalar sqrt path differs
            ref[np.isneginf(POW_VALUES)], ref[ref == 0] = math.inf, 0.0
        np.testing.assert_allclose(got, ref, rtol=1e-6, equal_nan=True)
        assert np.array_equal(np.signbit(got[got == 0]), np.signbit(ref[ref == 0])), e
