"""Generated gradient checks: the first derivative of each op in a table against PyTorch's autograd.

Each unary op is differentiated at random points and at edge points (0, -0, +-1, domain ends, points outside the
domain, large values, +-inf, NaN), each binary op on pairs of such points, in float32, both for 1-d inputs and for
0-d inputs built from numpy scalars (``Tensor(np.array(v, np.float32))``, which used to be constants that every equal
literal in the graph shared). The gradient is of ``(f(x) * w).sum()`` with random weights, so a wrong element is not
hidden by a sum. Values match torch where both are finite (relative and absolute tolerance), and NaN / +-inf where
torch's are.
"""
import math, zlib
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from fusegrad import Tensor

inf, nan = math.inf, math.nan
EDGES = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, -2.0, 0.999, -0.999, 1.001, 30.0, -30.0, 100.0, -100.0, 1e4, -1e4,
         1e-30, -1e-30, inf, -inf, nan]

# (name, fusegrad function, torch function, points left out). The points left out are known differences from
# torch, kept out so the rest of each op stays checked:
# - NaN inputs: torch's backward masks (x > 0, x <= 0, sgn) give abs 0, elu/celu/selu/hardswish the positive side's
#   slope, hardsigmoid/clamp 0 at a NaN input; fusegrad's where-built forms give NaN or pass the gradient through
#   (sign passes it: its NaN output is x itself).
# - kinks: torch's hardtanh has gradient 0 at +-1 (fusegrad 1), leaky_relu the negative slope at +-0 (fusegrad 1).
# - torch quirks: x ** 0.5's gradient 0.5 * x ** -0.5 is torch's rsqrt, -inf at -0 and NaN at -inf (C99 pow, which
#   fusegrad follows: +inf and +0); copysign's gradient at an infinite magnitude is torch's result / self = NaN.
UNARY = [
    ("exp", Tensor.exp, torch.exp, ()), ("exp2", Tensor.exp2, torch.exp2, ()), ("log", Tensor.log, torch.log, ()),
    ("log2", Tensor.log2, torch.log2, ()), ("sqrt", Tensor.sqrt, torch.sqrt, ()), ("rsqrt", Tensor.rsqrt, torch.rsqrt, ()),
    ("sin", Tensor.sin, torch.sin, ()), ("cos", Tensor.cos, torch.cos, ()), ("tan", Tensor.tan, torch.tan, ()),
    ("asin", Tensor.asin, torch.asin, ()), ("acos", Tensor.acos, torch.acos, ()), ("atan", Tensor.atan, torch.atan, ()),
    ("sinh", Tensor.sinh, torch.sinh, ()), ("cosh", Tensor.cosh, torch.cosh, ()), ("tanh", Tensor.tanh, torch.tanh, ()),
    ("asinh", Tensor.asinh, torch.asinh, ()), ("acosh", Tensor.acosh, torch.acosh, ()), ("atanh", Tensor.atanh, torch.atanh, ()),
    ("sigmoid", Tensor.sigmoid, torch.sigmoid, ()), ("relu", Tensor.relu, torch.relu, ()), ("abs", Tensor.abs, torch.abs, (nan,)),
    ("erf", Tensor.erf, torch.erf, ()), ("softplus", Tensor.softplus, F.softplus, ()),
    ("gelu", Tensor.gelu, lambda t: F.gelu(t, approximate="tanh"), ()), ("silu", Tensor.silu, F.silu, ()),
    ("elu", Tensor.elu, F.elu, (nan,)), ("celu", Tensor.celu, F.celu, (nan,)), ("selu", Tensor.selu, F.selu, (nan,)),
    ("mish", Tensor.mish, F.mish, ()), ("softsign", Tensor.softsign, F.softsign, ()), ("logsigmoid", Tensor.logsigmoid, F.logsigmoid, ()),
    ("hardtanh", Tensor.hardtanh, F.hardtanh, (1.0, -1.0)), ("relu6", Tensor.relu6, F.relu6, ()),
    ("hardsigmoid", Tensor.hardsigmoid, F.hardsigmoid, (nan,)), ("hardswish", Tensor.hardswish, F.hardswish, (nan,)),
    ("leaky_relu", Tensor.leaky_relu, lambda t: F.leaky_relu(t, 0.01), (0.0, -0.0, nan)), ("expm1", Tensor.expm1, torch.expm1, ()),
    ("square", Tensor.square, torch.square, ()), ("reciprocal", Tensor.reciprocal, torch.reciprocal, ()),
    ("neg", Tensor.neg, torch.neg, ()), ("sign", Tensor.sign, torch.sign, (nan,)), ("trunc", Tensor.trunc, torch.trunc, ()),
    ("floor", Tensor.floor, torch.floor, ()), ("ceil", Tensor.ceil, torch.ceil, ()), ("round", Tensor.round, torch.round, ()),
    ("log10", Tensor.log10, torch.log10, ()), ("pow2.5", lambda t: t ** 2.5, lambda t: t ** 2.5, ()),
    ("pow3", lambda t: t ** 3, lambda t: t ** 3, ()), ("pow-1.5", lambda t: t ** -1.5, lambda t: t ** -1.5, ()),
    ("pow0.5", lambda t: t ** 0.5, lambda t: t ** 0.5, (-0.0, -inf)), ("rpow", lambda t: 2.0 ** t, lambda t: 2.0 ** t, ()),
    ("clamp", lambda t: t.clamp(-1.0, 1.0), lambda t: t.clamp(-1.0, 1.0), (nan,)),
    ("softmax", lambda t: t.softmax(0), lambda t: t.softmax(0), ()),
    ("log_softmax", lambda t: t.log_softmax(0), lambda t: t.log_softmax(0), ()),
]

BINARY = [
    ("add", lambda a, b: a + b, lambda a, b: a + b), ("sub", lambda a, b: a - b, lambda a, b: a - b),
    ("mul", lambda a, b: a * b, lambda a, b: a * b), ("div", lambda a, b: a / b, lambda a, b: a / b),
    ("pow", lambda a, b: a ** b, lambda a, b: a ** b), ("maximum", Tensor.maximum, torch.maximum),
    ("minimum", Tensor.minimum, torch.minimum), ("copysign", Tensor.copysign, torch.copysign),
    ("logaddexp", Tensor.logaddexp, torch.logaddexp), ("fmod", Tensor.fmod, torch.fmod),
]
# first operands left out per binary op (see UNARY)
BINARY_LEAVE_OUT = {"copysign": (inf, -inf)}

def _points(rng, extra=()) -> np.ndarray:
    return np.concatenate([rng.standard_normal(24) * 3, EDGES, extra]).astype(np.float32)

def _kept(x: np.ndarray, leave_out) -> np.ndarray:
    """The points of ``x`` that are not among ``leave_out`` (by bits: -0.0 is not 0.0; any NaN is NaN)."""
    keep = np.ones(x.shape, bool)
    for v in leave_out:
        keep &= ~np.isnan(x) if math.isnan(v) else x.view(np.uint32) != np.array(v, np.float32).view(np.uint32)
    return keep

def _assert_like_torch(got: np.ndarray, want: np.ndarray, what: str) -> None:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    bad = np.isnan(want) != np.isnan(got)
    both = np.isfinite(want) & np.isfinite(got)
    bad |= (np.isinf(want) | np.isinf(got)) & ~np.isnan(want) & ~np.isnan(got) & (got != want)
    gap = np.abs(np.where(both, got, 0) - np.where(both, want, 0))
    # (1e-4 relative: near a singularity torch's own float32 formula loses digits, asin' at -0.99996 by 1e-5)
    bad |= both & (gap > 1e-6 + 1e-4 * np.abs(np.where(both, want, 0)))
    assert not bad.any(), f"{what}: at {np.flatnonzero(bad)[:8]} got {got[bad][:8]} torch {want[bad][:8]}"

def _torch_grad(fn, *values, weight):
    ts = [torch.tensor(v, requires_grad=True) for v in values]
    (fn(*ts) * torch.tensor(weight)).sum().backward()
    return [t.grad.numpy() for t in ts]

@pytest.mark.parametrize("name,ours,theirs,leave_out", UNARY, ids=[u[0] for u in UNARY])
def test_unary_first_derivative_matches_torch(name, ours, theirs, leave_out):
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    x = _points(rng)
    x = x[_kept(x, leave_out)]
    w = rng.uniform(0.5, 1.5, x.shape).astype(np.float32)
    (want,) = _torch_grad(theirs, x, weight=w)
    t = Tensor(x)
    got = (ours(t) * Tensor(w)).sum().gradient(t)[0].numpy()
    _assert_like_torch(got, want, name)

ZERO_D = [u for u in UNARY if u[0] not in ("softmax", "log_softmax")]

@pytest.mark.parametrize("name,ours,theirs,_", ZERO_D, ids=[u[0] for u in ZERO_D])
def test_unary_first_derivative_of_0d_numpy_input(name, ours, theirs, _):
    # one point per call: a 0-d tensor from a numpy scalar array, as a user would make it
    for v in (0.5, 1.5, -0.25, 2.0):
        (want,) = _torch_grad(theirs, np.array(v, np.float32), weight=np.array(1.0, np.float32))
        x = Tensor(np.array(v, np.float32))
        got = ours(x).sum().gradient(x)[0].numpy()
        _assert_like_torch(got, want, f"{name} at {v}")

@pytest.mark.parametrize("name,ours,theirs", BINARY, ids=[b[0] for b in BINARY])
def test_binary_first_derivatives_match_torch(name, ours, theirs):
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    edges = np.array([0.0, -0.0, 1.0, -1.0, 2.0, -2.5, 0.5, 1e20, inf, -inf, nan], np.float32)
    a = np.concatenate([rng.standard_normal(16) * 3, np.repeat(edges, len(edges))]).astype(np.float32)
    b = np.concatenate([rng.standard_normal(16) * 3, np.tile(edges, len(edges))]).astype(np.float32)
    keep = _kept(a, BINARY_LEAVE_OUT.get(name, ()))
    a, b = a[keep], b[keep]
    w = rng.uniform(0.5, 1.5, a.shape).astype(np.float32)
    want_a, want_b = _torch_grad(theirs, a, b, weight=w)
    ta, tb = Tensor(a), Tensor(b)
    got_a, got_b = (ours(ta, tb) * Tensor(w)).sum().gradient(ta, tb)
    _assert_like_torch(got_a.numpy(), want_a, f"{name} d/da")
    _assert_like_torch(got_b.numpy(), want_b, f"{name} d/db")

@pytest.mark.parametrize("name,ours,theirs", BINARY, ids=[b[0] for b in BINARY])
def test_binary_first_derivatives_of_0d_numpy_inputs(name, ours, theirs):
    for u, v in ((0.5, 1.5), (2.0, -0.5), (1.5, 1.5)):
        want_a, want_b = _torch_grad(theirs, np.array(u, np.float32), np.array(v, np.float32), weight=np.array(1.0, np.float32))
        ta, tb = Tensor(np.array(u, np.float32)), Tensor(np.array(v, np.float32))
        got_a, got_b = ours(ta, tb).gradient(ta, tb)
        _assert_like_torch(got_a.numpy(), want_a, f"{name} d/da at {u, v}")
        _assert_like_torch(got_b.numpy(), want_b, f"{name} d/db at {u, v}")
