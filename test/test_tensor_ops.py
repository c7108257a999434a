"""Elementwise, reduce and movement ops against numpy, on the CPU and PYTHON devices.

Every comparison checks values, dtype and shape (``helpers.assert_tensor``)."""
import math
import numpy as np
import pytest
from hypothesis import given, strategies as st
from fusegrad import Tensor, dtypes
from fusegrad.dtype import least_upper_dtype
from helpers import assert_tensor, rand_np, np_dtype, NP_DTYPES, INT_DTYPES, FLOAT_DTYPES

# ============================================================================ unary

def _np_sigmoid(x): return 1 / (1 + np.exp(-x))
def _np_softplus(x): return np.logaddexp(0, x)
_np_erf = np.vectorize(math.erf, otypes=[np.float64])

# name -> (fusegrad fn, numpy fn on float64, (low, high) input range)
UNARY = {
  "neg": (lambda t: -t, np.negative, (-3, 3)),
  "neg_method": (lambda t: t.neg(), np.negative, (-3, 3)),
  "log": (lambda t: t.log(), np.log, (0.1, 5)),
  "log2": (lambda t: t.log2(), np.log2, (0.1, 5)),
  "log10": (lambda t: t.log10(), np.log10, (0.1, 5)),
  "exp": (lambda t: t.exp(), np.exp, (-3, 3)),
  "exp2": (lambda t: t.exp2(), np.exp2, (-3, 3)),
  "sqrt": (lambda t: t.sqrt(), np.sqrt, (0, 5)),
  "rsqrt": (lambda t: t.rsqrt(), lambda x: 1 / np.sqrt(x), (0.1, 5)),
  "sin": (lambda t: t.sin(), np.sin, (-4, 4)),
  "cos": (lambda t: t.cos(), np.cos, (-4, 4)),
  "tan": (lambda t: t.tan(), np.tan, (-1.2, 1.2)),
  "trunc": (lambda t: t.trunc(), np.trunc, (-5, 5)),
  "ceil": (lambda t: t.ceil(), np.ceil, (-5, 5)),
  "floor": (lambda t: t.floor(), np.floor, (-5, 5)),
  "round": (lambda t: t.round(), np.round, (-5, 5)),
  "square": (lambda t: t.square(), np.square, (-3, 3)),
  "sign": (lambda t: t.sign(), np.sign, (-3, 3)),
  "abs": (lambda t: t.abs(), np.abs, (-3, 3)),
  "reciprocal": (lambda t: t.reciprocal(), np.reciprocal, (0.25, 3)),
  "relu": (lambda t: t.relu(), lambda x: np.maximum(x, 0), (-3, 3)),
  "sigmoid": (lambda t: t.sigmoid(), _np_sigmoid, (-5, 5)),
  "tanh": (lambda t: t.tanh(), np.tanh, (-3, 3)),
  "sinh": (lambda t: t.sinh(), np.sinh, (-2, 2)),
  "cosh": (lambda t: t.cosh(), np.cosh, (-2, 2)),
  "asin": (lambda t: t.asin(), np.arcsin, (-0.95, 0.95)),
  "acos": (lambda t: t.acos(), np.arccos, (-0.95, 0.95)),
  "atan": (lambda t: t.atan(), np.arctan, (-3, 3)),
  "asinh": (lambda t: t.asinh(), np.arcsinh, (0, 3)),
  "acosh": (lambda t: t.acosh(), np.arccosh, (1.1, 4)),
  "atanh": (lambda t: t.atanh(), np.arctanh, (-0.8, 0.8)),
  "erf": (lambda t: t.erf(), _np_erf, (-2, 2)),
  "softplus": (lambda t: t.softplus(), _np_softplus, (-4, 4)),
  "softsign": (lambda t: t.softsign(), lambda x: x / (1 + np.abs(x)), (-3, 3)),
  "silu": (lambda t: t.silu(), lambda x: x * _np_sigmoid(x), (-3, 3)),
  "elu": (lambda t: t.elu(), lambda x: np.where(x > 0, x, np.exp(x) - 1), (-3, 3)),
  "relu6": (lambda t: t.relu6(), lambda x: np.clip(x, 0, 6), (-3, 9)),
  "hardswish": (lambda t: t.hardswish(), lambda x: x * np.clip(x + 3, 0, 6) / 6, (-5, 5)),
  "hardtanh": (lambda t: t.hardtanh(), lambda x: np.clip(x, -1, 1), (-3, 3)),
  "leaky_relu": (lambda t: t.leaky_relu(0.1), lambda x: np.where(x < 0, 0.1 * x, x), (-3, 3)),
  "logsigmoid": (lambda t: t.logsigmoid(), lambda x: -_np_softplus(-x), (-4, 4)),
  "mish": (lambda t: t.mish(), lambda x: x * np.tanh(_np_softplus(x)), (-3, 3)),
  "gelu": (lambda t: t.gelu(), lambda x: 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3))), (-3, 3)),
  "clip": (lambda t: t.clip(-0.5, 1.25), lambda x: np.clip(x, -0.5, 1.25), (-3, 3)),
  "clamp_min": (lambda t: t.clamp(min_=0.5), lambda x: np.maximum(x, 0.5), (-3, 3)),
  "clamp_max": (lambda t: t.clamp(max_=0.5), lambda x: np.minimum(x, 0.5), (-3, 3)),
}

@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("name", list(UNARY))
def test_unary_float(device, name, dtype, rng):
    fn, np_fn, (lo, hi) = UNARY[name]
    x = rand_np(rng, (3, 5), dtype, lo, hi)
    expected = np_fn(x.astype(np.float64)).astype(np_dtype(dtype))
    rtol, atol = (2e-2, 2e-2) if dtype == dtypes.float16 else (1e-5, 1e-5) if dtype == dtypes.float32 else (1e-6, 1e-6)
    assert_tensor(fn(Tensor(x, device=device)), expected, dtype, rtol=rtol, atol=atol)

@pytest.mark.parametrize("name", ["exp", "log", "sqrt", "sin", "sigmoid", "relu", "abs", "neg", "floor", "tanh"])
def test_unary_bfloat16(device, name, rng):
    fn, np_fn, (lo, hi) = UNARY[name]
    x = rand_np(rng, (8,), dtypes.float32, lo, hi)
    t = Tensor(x, device=device).cast(dtypes.bfloat16)
    x_bf = t.cast(dtypes.float32).numpy().astype(np.float64)   # the exactly representable inputs
    out = fn(t)
    assert out.dtype == dtypes.bfloat16 and out.shape == (8,)
    assert_tensor(out.cast(dtypes.float32), np_fn(x_bf).astype(np.float32), dtypes.float32, rtol=2e-2, atol=2e-2)

@pytest.mark.parametrize("x", [-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5, -3.49, 3.51, 0.0, -0.0, 4.0])
def test_round_half_to_even(device, x):
    assert_tensor(Tensor([x], device=device).round(), np.round(np.array([x], np.float32)))

@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_special_values(device, dtype):
    vals = np.array([np.inf, -np.inf, np.nan, 0.0, 1.0, -1.0], dtype=np_dtype(dtype))
    t = Tensor(vals, device=device)
    assert_tensor(t.isinf(), np.isinf(vals))
    assert_tensor(t.isnan(), np.isnan(vals))
    assert_tensor(t.isfinite(), np.isfinite(vals))
    assert_tensor(t.isinf(detect_negative=False), np.isposinf(vals))
    assert_tensor(t.isinf(detect_positive=False), np.isneginf(vals))
    with np.errstate(all="ignore"):
        assert_tensor(t.sqrt(), np.sqrt(vals), dtype)
        assert_tensor(t.log(), np.log(vals), dtype)
        assert_tensor(t.exp(), np.exp(vals), dtype)
        assert_tensor(t.reciprocal(), np.reciprocal(vals), dtype)
        assert_tensor(t.abs(), np.abs(vals), dtype)
        assert_tensor(-t, -vals, dtype)

def test_sigmoid_extremes(device):
    x = np.array([-300.0, -80.0, 0.0, 80.0, 300.0], np.float32)
    with np.errstate(over="ignore"):
        assert_tensor(Tensor(x, device=device).sigmoid(), _np_sigmoid(x.astype(np.float64)).astype(np.float32))

def test_sigmoid_divides_once_per_element():
    # both sides of x = 0 share one quotient where(x >= 0, 1, e) / (1 + e): a division is the costly op of
    # every sigmoid, gelu and silu epilogue
    from fusegrad.uop.ops import Ops
    (item,) = Tensor.rand(16).realize().sigmoid().schedule()
    assert sum(1 for u in item.ast.toposort if u.op is Ops.FDIV) == 1


def test_cos_is_one_node_and_the_gradient_of_sin_too():
    # cos is an op of its own, expanded in codegen: the front end builds one node for it (and for the cos in sin's
    # gradient), where building the range reduction as a tensor graph cost ~100 nodes per call
    from fusegrad.uop.ops import Ops
    x = Tensor([0.5, 2.0], requires_grad=True)
    assert x.cos().uop.op is Ops.COS and len(x.cos().uop.toposort) < 6
    (grad,) = x.sin().sum().gradient(x)
    assert sum(1 for u in grad.uop.toposort if u.op is Ops.COS) == 1 and len(grad.uop.toposort) < 20
    np.testing.assert_allclose(grad.numpy(), np.cos([0.5, 2.0]), rtol=1e-6)
    (grad,) = x.cos().sum().gradient(x)
    np.testing.assert_allclose(grad.numpy(), -np.sin([0.5, 2.0]), rtol=1e-6)

def test_cos_and_padding(device):
    # cos 0 = 1: a padded cos keeps its pad's zeros (a pad must not move under an op with f(0) != 0), and a cos of
    # padding is 1 there
    x = np.array([1.0, 2.0], np.float32)
    assert_tensor((Tensor(x, device=device) * 3).cos().pad((1, 2)), np.pad(np.cos(x * 3), (1, 2)))
    assert_tensor(Tensor(x, device=device).pad((1, 2)).cos(), np.cos(np.pad(x, (1, 2))))
def test_sign_abs_exact_at_zero(device):
    x = np.array([-1.0, 0.0, 1.0, -0.0], np.float32)
    assert_tensor(Tensor(x, device=device).sign(), np.sign(x))
    got = Tensor(x, device=device).abs().numpy()
    np.testing.assert_array_equal(got, np.abs(x))

def test_logical_not(device):
    x = np.array([True, False, True])
    assert_tensor(Tensor(x, device=device).logical_not(), np.logical_not(x))
    assert_tensor(Tensor([0, 3, -2], device=device).logical_not(), np.array([True, False, False]))

INT_UNARY = {  # ops that keep an int dtype
  "neg": (lambda t: -t, np.negative), "abs": (lambda t: t.abs(), np.abs), "square": (lambda t: t.square(), np.square),
  "sign": (lambda t: t.sign(), np.sign), "relu": (lambda t: t.relu(), lambda x: np.maximum(x, 0)),
  "trunc": (lambda t: t.trunc(), lambda x: x), "floor": (lambda t: t.floor(), lambda x: x),
  "ceil": (lambda t: t.ceil(), lambda x: x), "round": (lambda t: t.round(), lambda x: x),
  "clip": (lambda t: t.clip(-3, 4), lambda x: np.clip(x, -3, 4)),
}

@pytest.mark.parametrize("dtype", [dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64], ids=str)
@pytest.mark.parametrize("name", list(INT_UNARY))
def test_unary_int_keeps_dtype(device, name, dtype, rng):
    fn, np_fn = INT_UNARY[name]
    x = rand_np(rng, (2, 6), dtype, -9, 9)
    assert_tensor(fn(Tensor(x, device=device)), np_fn(x).astype(np_dtype(dtype)), dtype)

@pytest.mark.parametrize("dtype", [dtypes.uint8, dtypes.uint32], ids=str)
def test_unary_unsigned(device, dtype, rng):
    x = rand_np(rng, (7,), dtype, 0, 50)
    t = Tensor(x, device=device)
    assert_tensor(t.abs(), x, dtype)
    assert_tensor(t.sign(), np.sign(x), dtype)
    assert_tensor(t.relu(), x, dtype)
    assert_tensor(t.clip(3, 20), np.clip(x, 3, 20), dtype)

@pytest.mark.parametrize("dtype", [dtypes.bool, dtypes.int8, dtypes.uint8, dtypes.int32, dtypes.int64], ids=str)
@pytest.mark.parametrize("name", ["log", "exp", "sqrt", "sin", "sigmoid", "reciprocal", "log2", "exp2", "rsqrt", "cos"])
def test_unary_int_to_float(device, name, dtype, rng):
    """Transcendental ops on ints and bools compute in (and return) float32."""
    fn, np_fn, _ = UNARY[name]
    x = rand_np(rng, (6,), dtype, 1, 6) if dtype != dtypes.bool else np.array([True, False, True])
    if name in ("reciprocal", "rsqrt", "log", "log2") and dtype == dtypes.bool: x = np.array([True, True])
    assert_tensor(fn(Tensor(x, device=device)), np_fn(x.astype(np.float64)).astype(np.float32), dtypes.float32, rtol=1e-5, atol=1e-5)

# ============================================================================ binary

def _np_floordiv(a, b): return np.floor_divide(a, b)
def _np_truncdiv(a, b):
    if np.issubdtype(a.dtype, np.integer):
        q = np.abs(a.astype(np.int64)) // np.abs(b.astype(np.int64))
        return (q * np.sign(a.astype(np.int64)) * np.sign(b.astype(np.int64))).astype(a.dtype)
    return np.trunc(a / b)

# name -> (fusegrad fn, numpy fn, needs nonzero divisor, dtype kinds: "f" float, "i" int, "b" bool)
BINARY = {
  "add": (lambda a, b: a + b, np.add, False, "fi"),
  "add_method": (lambda a, b: a.add(b), np.add, False, "fi"),
  "sub": (lambda a, b: a - b, np.subtract, False, "fi"),
  "mul": (lambda a, b: a * b, np.multiply, False, "fi"),
  "floordiv": (lambda a, b: a // b, _np_floordiv, True, "fi"),
  "div_floor": (lambda a, b: a.div(b, rounding_mode="floor"), _np_floordiv, True, "fi"),
  "div_trunc": (lambda a, b: a.div(b, rounding_mode="trunc"), _np_truncdiv, True, "fi"),
  "mod": (lambda a, b: a % b, np.mod, True, "fi"),
  "fmod": (lambda a, b: a.fmod(b), np.fmod, True, "fi"),
  "maximum": (lambda a, b: a.maximum(b), np.maximum, False, "fib"),
  "minimum": (lambda a, b: a.minimum(b), np.minimum, False, "fib"),
  "bitwise_and": (lambda a, b: a & b, np.bitwise_and, False, "ib"),
  "bitwise_or": (lambda a, b: a | b, np.bitwise_or, False, "ib"),
  "bitwise_xor": (lambda a, b: a ^ b, np.bitwise_xor, False, "ib"),
  "bitwise_xor_method": (lambda a, b: a.bitwise_xor(b), np.bitwise_xor, False, "ib"),
}
COMPARE = {
  "lt": (lambda a, b: a < b, np.less), "gt": (lambda a, b: a > b, np.greater), "le": (lambda a, b: a <= b, np.less_equal),
  "ge": (lambda a, b: a >= b, np.greater_equal), "eq": (lambda a, b: a == b, np.equal), "ne": (lambda a, b: a != b, np.not_equal),
}

def _kind(dtype) -> str: return "b" if dtype == dtypes.bool else "f" if dtypes.is_float(dtype) else "i"

def _binary_inputs(rng, dtype, nonzero: bool, shape=(3, 4)):
    if dtype == dtypes.bool: return rng.random(shape) < 0.5, rng.random(shape) < 0.5
    if dtypes.is_float(dtype):
        a, b = rand_np(rng, shape, dtype, -4, 4), rand_np(rng, shape, dtype, 0.5, 3)
        b = np.where(rng.random(shape) < 0.5, -b, b).astype(b.dtype)
        return a, b
    lo = 0 if dtypes.is_unsigned(dtype) else -9
    a, b = rand_np(rng, shape, dtype, lo, 10), rand_np(rng, shape, dtype, lo, 10)
    if nonzero: b = np.where(b == 0, 3, b).astype(b.dtype)
    return a, b

@pytest.mark.parametrize("name,dtype", [(n, d) for n in BINARY for d in NP_DTYPES if _kind(d) in BINARY[n][3]], ids=str)
def test_binary(device, name, dtype, rng):
    fn, np_fn, nonzero, kinds = BINARY[name]
    a, b = _binary_inputs(rng, dtype, nonzero)
    with np.errstate(all="ignore"): expected = np_fn(a, b).astype(a.dtype)
    assert_tensor(fn(Tensor(a, device=device), Tensor(b, device=device)), expected, dtype)

@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("name", [n for n in BINARY if n.startswith("bitwise")])
def test_binary_rejects(device, name, dtype):
    """Bitwise ops are undefined on floats and must say so (RuntimeError, tinygrad's type)."""
    fn = BINARY[name][0]
    with pytest.raises(RuntimeError, match="int|bool"):
        fn(Tensor([1.0, 2.0], device=device, dtype=dtype), Tensor([1.0, 2.0], device=device, dtype=dtype))

@pytest.mark.parametrize("dtype", NP_DTYPES, ids=str)
@pytest.mark.parametrize("name", list(COMPARE))
def test_compare(device, name, dtype, rng):
    fn, np_fn = COMPARE[name]
    a, b = _binary_inputs(rng, dtype, False, (4, 5))
    b[0] = a[0]  # some equal pairs
    assert_tensor(fn(Tensor(a, device=device), Tensor(b, device=device)), np_fn(a, b), dtypes.bool)
    assert_tensor(fn(Tensor(a, device=device), a.flat[3].item()), np_fn(a, a.flat[3]), dtypes.bool)

@pytest.mark.parametrize("dtype", [d for d in NP_DTYPES if d != dtypes.bool], ids=str)
def test_true_div(device, dtype, rng):
    """``/`` is true division: ints give float32, floats keep their dtype."""
    a, b = _binary_inputs(rng, dtype, True)
    want = dtype if dtypes.is_float(dtype) else dtypes.float32
    expected = (a.astype(np.float64) / b.astype(np.float64)).astype(np_dtype(want))
    assert_tensor(Tensor(a, device=device) / Tensor(b, device=device), expected, want)
    assert_tensor(Tensor(a, device=device).div(Tensor(b, device=device)), expected, want)

def test_int_div_by_int_scalar(device):
    assert_tensor(Tensor([7, -7, 2], device=device) / 2, np.array([3.5, -3.5, 1.0], np.float32))
    assert_tensor(Tensor([7, -7, 2], device=device) // 2, np.array([3, -4, 1], np.int32))
    assert_tensor(Tensor([7, -7, 2], device=device) % 3, np.array([1, 2, 2], np.int32))
    assert_tensor(1 / Tensor([2, 4], device=device), np.array([0.5, 0.25], np.float32))
    assert_tensor(7 // Tensor([2, -2], device=device), np.array([3, -4], np.int32))

@pytest.mark.parametrize("dtype", [dtypes.float16, dtypes.float32, dtypes.float64], ids=str)
def test_pow_float(device, dtype, rng):
    base = rand_np(rng, (10,), dtype, 0.25, 3)
    exponent = rand_np(rng, (10,), dtype, -2, 2)
    expected = np.power(base.astype(np.float64), exponent.astype(np.float64)).astype(base.dtype)
    assert_tensor(Tensor(base, device=device) ** Tensor(exponent, device=device), expected, dtype, rtol=1e-2 if dtype == dtypes.float16 else 1e-5)
    for e in (0, 1, 2, 3, 0.5, -1, -2, 1.7, -0.3):
        assert_tensor(Tensor(base, device=device) ** e, np.power(base.astype(np.float64), e).astype(base.dtype), dtype,
                      rtol=1e-2 if dtype == dtypes.float16 else 1e-5)

def test_pow_negative_base(device):
    base = np.array([-2.0, -1.5, -0.5, 0.0, 1.5], np.float32)
    for e in (2.0, 3.0, -1.0, 0.0):
        assert_tensor(Tensor(base, device=device) ** Tensor(np.full(5, e, np.float32), device=device), np.power(base, e), rtol=1e-5)
    with np.errstate(invalid="ignore"):
        assert_tensor(Tensor(base, device=device) ** Tensor(np.full(5, 0.5, np.float32), device=device), np.power(base, 0.5))

def test_rpow(device):
    e = np.array([0.0, 1.0, 2.5, -1.0], np.float32)
    assert_tensor(2 ** Tensor(e, device=device), np.power(2.0, e).astype(np.float32))

@pytest.mark.parametrize("dtype", [dtypes.int8, dtypes.uint8, dtypes.int32, dtypes.int64, dtypes.uint32], ids=str)
def test_pow_int(device, dtype, rng):
    lo = 0 if dtypes.is_unsigned(dtype) else -3
    base = rand_np(rng, (12,), dtype, lo, 4)
    for e in (0, 1, 2, 3):
        assert_tensor(Tensor(base, device=device) ** e, np.power(base, e), dtype)

@pytest.mark.parametrize("dtype", [dtypes.uint8, dtypes.int32], ids=str)
def test_pow_int_tensor_exponent(device, dtype, rng):
    lo = 0 if dtypes.is_unsigned(dtype) else -3
    base, exponent = rand_np(rng, (12,), dtype, lo, 4), rand_np(rng, (12,), dtype, 0, 5)
    assert_tensor(Tensor(base, device=device) ** Tensor(exponent, device=device), np.power(base, exponent), dtype)

@pytest.mark.parametrize("dtype", [dtypes.uint8, dtypes.uint16, dtypes.uint32, dtypes.uint64, dtypes.int32, dtypes.int64], ids=str)
def test_shifts(device, dtype, rng):
    x = rand_np(rng, (9,), dtype, 0, 16)
    for n in range(4):
        assert_tensor(Tensor(x, device=device) << n, np.left_shift(x, np_dtype(dtype).type(n)), dtype)
        assert_tensor(Tensor(x, device=device) >> n, np.right_shift(x, np_dtype(dtype).type(n)), dtype)
        assert_tensor(Tensor(x, device=device).lshift(n), np.left_shift(x, np_dtype(dtype).type(n)), dtype)
        assert_tensor(Tensor(x, device=device).rshift(n), np.right_shift(x, np_dtype(dtype).type(n)), dtype)

def test_shift_wraps_uint8(device):
    x = np.array([1, 128, 255, 17], np.uint8)
    assert_tensor(Tensor(x, device=device) << 1, np.left_shift(x, np.uint8(1)), dtypes.uint8)
    assert_tensor(Tensor(x, device=device) << 4, np.left_shift(x, np.uint8(4)), dtypes.uint8)

@pytest.mark.parametrize("dtype", INT_DTYPES + (dtypes.bool,), ids=str)
def test_bitwise_not(device, dtype, rng):
    x = rand_np(rng, (8,), dtype)
    assert_tensor(~Tensor(x, device=device), np.invert(x), dtype)
    assert_tensor(Tensor(x, device=device).bitwise_not(), np.invert(x), dtype)

def test_unsigned_wraparound(device):
    a, b = np.array([0, 1, 5], np.uint8), np.array([1, 3, 2], np.uint8)
    assert_tensor(Tensor(a, device=device) - Tensor(b, device=device), a - b, dtypes.uint8)
    assert_tensor(Tensor(np.array([200, 100], np.uint8), device=device) + 100, np.array([44, 200], np.uint8), dtypes.uint8)

@pytest.mark.parametrize("dtype", NP_DTYPES, ids=str)
def test_where(device, dtype, rng):
    cond = rng.random((3, 4)) < 0.5
    a, b = _binary_inputs(rng, dtype, False)
    assert_tensor(Tensor(cond, device=device).where(Tensor(a, device=device), Tensor(b, device=device)), np.where(cond, a, b), dtype)

def test_where_broadcast_and_scalars(device, rng):
    cond = rng.random((3, 1)) < 0.5
    a = rand_np(rng, (1, 4), dtypes.float32)
    assert_tensor(Tensor(cond, device=device).where(Tensor(a, device=device), 0.5), np.where(cond, a, np.float32(0.5)))
    assert_tensor(Tensor(cond, device=device).where(1.5, Tensor(a, device=device)), np.where(cond, np.float32(1.5), a))
    got = Tensor(cond, device=device).where(2, 3)
    assert got.shape == (3, 1) and got.numpy().tolist() == np.where(cond, 2, 3).tolist()
    assert dtypes.is_int(got.dtype)
    # a non-bool condition is refused (tinygrad's RuntimeError); a bool one made from it works
    c = np.array([0, 2, -1, 0], np.int32)
    with pytest.raises(RuntimeError, match="bool"): Tensor(c, device=device).where(1.0, 0.0)
    out = (Tensor(c, device=device) != 0).where(1.0, 0.0)   # both branches are literals: a (weak) float
    assert dtypes.concrete(out.dtype) == dtypes.float32 and dtypes.is_float(out.dtype)
    np.testing.assert_array_equal(out.numpy(), np.where(c != 0, 1.0, 0.0).astype(np.float32))

def test_where_promotes(device):
    cond = Tensor([True, False], device=device)
    out = cond.where(Tensor([1, 2], device=device, dtype=dtypes.int8), Tensor([0.5, 1.5], device=device))
    assert_tensor(out, np.array([1.0, 1.5], np.float32))

# ----------------------------------------------------------------------------- scalars and reflected operators

@pytest.mark.parametrize("dtype", [dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.int32, dtypes.int64, dtypes.float16, dtypes.float32], ids=str)
def test_python_scalar_adopts_dtype(device, dtype, rng):
    x = rand_np(rng, (5,), dtype, 0, 9)
    t = Tensor(x, device=device)
    assert_tensor(t + 2, (x + np_dtype(dtype).type(2)).astype(x.dtype), dtype)
    assert_tensor(2 + t, (x + np_dtype(dtype).type(2)).astype(x.dtype), dtype)
    assert_tensor(t * 3, (x * np_dtype(dtype).type(3)).astype(x.dtype), dtype)
    assert_tensor(3 - t, (np_dtype(dtype).type(3) - x).astype(x.dtype) if not dtypes.is_unsigned(dtype) else
                  (np.int64(3) - x.astype(np.int64)).astype(x.dtype), dtype)
    # a float scalar turns ints into default_float and keeps float dtypes
    want = dtype if dtypes.is_float(dtype) else dtypes.float32
    assert_tensor(t * 1.5, (x.astype(np.float64) * 1.5).astype(np_dtype(want)), want)
    assert_tensor(1.5 + t, (x.astype(np.float64) + 1.5).astype(np_dtype(want)), want)

def test_bool_scalar_ops(device):
    t = Tensor([True, False, True], device=device)
    assert_tensor(t + 1, np.array([2, 1, 2], np.int32))
    assert_tensor(t * 2.5, np.array([2.5, 0, 2.5], np.float32))
    assert_tensor(t & True, np.array([True, False, True]))
    assert_tensor(t | False, np.array([True, False, True]))
    assert_tensor(t ^ True, np.array([False, True, False]))

def test_reflected_operators(device, rng):
    x = rand_np(rng, (2, 3), dtypes.float32, 0.5, 2)
    t = Tensor(x, device=device)
    assert_tensor(2.0 - t, 2.0 - x)
    assert_tensor(2.0 / t, (2.0 / x).astype(np.float32))
    assert_tensor(2.0 * t, 2.0 * x)
    assert_tensor(2.0 + t, 2.0 + x)
    assert_tensor(2.0 ** t, np.power(np.float32(2.0), x), rtol=1e-5)
    assert_tensor(5.0 % t, np.mod(np.float32(5.0), x), rtol=1e-5, atol=1e-5)
    assert_tensor(-t, -x)
    i = Tensor([1, 2, 3], device=device)
    assert_tensor(6 & i, np.array([0, 2, 2], np.int32))
    assert_tensor(6 | i, np.array([7, 6, 7], np.int32))
    assert_tensor(6 ^ i, np.array([7, 4, 5], np.int32))

def test_inplace_operators(device):
    t = Tensor([1.0, 2.0, 3.0], device=device).realize()
    t += 1
    assert_tensor(t, np.array([2.0, 3.0, 4.0], np.float32))
    t *= 2
    assert_tensor(t, np.array([4.0, 6.0, 8.0], np.float32))
    t -= Tensor([1.0, 1.0, 1.0], device=device)
    assert_tensor(t, np.array([3.0, 5.0, 7.0], np.float32))
    t /= 2
    assert_tensor(t, np.array([1.5, 2.5, 3.5], np.float32))
    i = Tensor([3, 5], device=device).realize()
    i &= 1
    assert_tensor(i, np.array([1, 1], np.int32))

def test_lerp_copysign_logaddexp(device, rng):
    a, b = rand_np(rng, (6,), dtypes.float32), rand_np(rng, (6,), dtypes.float32)
    ta, tb = Tensor(a, device=device), Tensor(b, device=device)
    assert_tensor(ta.lerp(tb, 0.25), a + (b - a) * np.float32(0.25))
    assert_tensor(ta.copysign(tb), np.copysign(a, b))
    assert_tensor(ta.logaddexp(tb), np.logaddexp(a, b), rtol=1e-5)

@pytest.mark.parametrize("shape", [(0,), (0, 3), (3, 0, 1), (1,), (1, 1), (), (1, 3, 1)], ids=str)
def test_elementwise_size_zero_and_one(device, shape, rng):
    x = rand_np(rng, shape, dtypes.float32, 0.5, 2)
    y = rand_np(rng, shape, dtypes.int32, 1, 5)
    tx, ty = Tensor(x, device=device), Tensor(y, device=device)
    assert_tensor(tx.exp(), np.exp(x), rtol=1e-6)
    assert_tensor(-tx + 1, -x + 1)
    assert_tensor(tx * ty, x * y.astype(np.float32))
    assert_tensor(ty // 2, y // 2)
    assert_tensor(tx < 1, x < 1)
    assert_tensor((tx > 1).where(tx, ty.float()), np.where(x > 1, x, y.astype(np.float32)))
    assert_tensor(tx.cast(dtypes.int8), x.astype(np.int8), dtypes.int8)
    assert_tensor(tx.reshape(-1) + 0, x.reshape(-1))

# ----------------------------------------------------------------------------- broadcasting

@st.composite
def broadcastable_shapes(draw, max_dims=4):
    shape = draw(st.lists(st.integers(0, 4), min_size=0, max_size=max_dims))
    other = []
    for s in shape[len(shape) - draw(st.integers(0, len(shape))):]:
        other.append(draw(st.sampled_from([s, 1])))
    a = [draw(st.sampled_from([s, 1])) if s != 0 else s for s in shape]
    if draw(st.booleans()): a, other = other, a
    return tuple(a), tuple(other)

@pytest.mark.parametrize("op", ["add", "mul", "sub", "maximum", "lt", "where"])
@given(shapes=broadcastable_shapes())
def test_broadcasting(device, op, shapes):
    sa, sb = shapes
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal(sa).astype(np.float32), rng.standard_normal(sb).astype(np.float32)
    ta, tb = Tensor(a, device=device), Tensor(b, device=device)
    if op == "where":
        assert_tensor((ta > 0).where(ta, tb), np.where(a > 0, a, b))
        assert_tensor((ta > 0).where(tb, 1.0), np.where(a > 0, b, np.float32(1.0)))
        return
    fn, np_fn = {"add": (Tensor.add, np.add), "mul": (Tensor.mul, np.multiply), "sub": (Tensor.sub, np.subtract),
                 "maximum": (Tensor.maximum, np.maximum), "lt": (Tensor.__lt__, np.less)}[op]
    assert_tensor(fn(ta, tb), np_fn(a, b))
    assert_tensor(fn(tb, ta), np_fn(b, a))

@pytest.mark.parametrize("da,db", [(dtypes.int8, dtypes.uint8), (dtypes.int32, dtypes.float16), (dtypes.bool, dtypes.int16),
                                   (dtypes.uint16, dtypes.int8), (dtypes.float16, dtypes.float32), (dtypes.int64, dtypes.float32),
                                   (dtypes.uint32, dtypes.int32), (dtypes.uint8, dtypes.float64)], ids=str)
def test_binary_mixed_dtypes(device, da, db, rng):
    a, b = rand_np(rng, (2, 3), da, 0, 9), rand_np(rng, (3,), db, 0, 9)
    out = least_upper_dtype(da, db)
    expected = a.astype(np_dtype(out)) + b.astype(np_dtype(out))
    assert_tensor(Tensor(a, device=device) + Tensor(b, device=device), expected, out)
    assert_tensor(Tensor(b, device=device) * Tensor(a, device=device), b.astype(np_dtype(out)) * a.astype(np_dtype(out)), out)

# ============================================================================ reductions

REDUCE = {
  "sum": (lambda t, **k: t.sum(**k), lambda x, **k: np.sum(x, **k)),
  "prod": (lambda t, **k: t.prod(**k), lambda x, **k: np.prod(x, **k)),
  "max": (lambda t, **k: t.max(**k), lambda x, **k: np.max(x, **k)),
  "min": (lambda t, **k: t.min(**k), lambda x, **k: np.min(x, **k)),
  "mean": (lambda t, **k: t.mean(**k), lambda x, **k: np.mean(x, **k)),
  "var": (lambda t, **k: t.var(**k), lambda x, **k: np.var(x, ddof=1, **k)),
  "std": (lambda t, **k: t.std(**k), lambda x, **k: np.std(x, ddof=1, **k)),
  "var0": (lambda t, **k: t.var(correction=0, **k), lambda x, **k: np.var(x, **k)),
  "std0": (lambda t, **k: t.std(correction=0, **k), lambda x, **k: np.std(x, **k)),
  "logsumexp": (lambda t, **k: t.logsumexp(**k), lambda x, **k: np.log(np.sum(np.exp(x), **k))),
  "any": (lambda t, **k: t.any(**k), lambda x, **k: np.any(x, **k)),
  "all": (lambda t, **k: t.all(**k), lambda x, **k: np.all(x, **k)),
}
AXES = [None, 0, 1, 2, -1, -2, (0, 2), (1, -1), (0, 1, 2), ()]

@pytest.mark.filterwarnings("ignore::RuntimeWarning")   # numpy warns about var over no elements (nan, like fusegrad)
@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("axis", AXES, ids=str)
@pytest.mark.parametrize("name", list(REDUCE))
def test_reduce_float(device, name, axis, keepdim, rng):
    fn, np_fn = REDUCE[name]
    x = rand_np(rng, (2, 3, 4), dtypes.float32, 0.5, 1.5) * np.where(rng.random((2, 3, 4)) < 0.3, -1, 1).astype(np.float32)
    if name in ("any", "all"): x = np.where(rng.random((2, 3, 4)) < 0.2, 0, x).astype(np.float32)
    expected = np_fn(x.astype(np.float64), axis=axis, keepdims=keepdim)
    want = dtypes.bool if name in ("any", "all") else dtypes.float32
    assert_tensor(fn(Tensor(x, device=device), axis=axis, keepdim=keepdim), np.asarray(expected).astype(np_dtype(want)), want,
                  rtol=1e-5, atol=1e-5)

@pytest.mark.parametrize("dtype", NP_DTYPES, ids=str)
@pytest.mark.parametrize("name", ["sum", "max", "min", "prod"])
def test_reduce_int_values(device, name, dtype, rng):
    fn, np_fn = REDUCE[name]
    x = rand_np(rng, (3, 4), dtype, None, 4) if name == "prod" else rand_np(rng, (3, 4), dtype)
    if name == "prod" and dtypes.is_int(dtype) and not dtypes.is_unsigned(dtype): x = rand_np(rng, (3, 4), dtype, -3, 4)
    for axis in (None, 0, -1):
        out = fn(Tensor(x, device=device), axis=axis)
        expected = np.asarray(np_fn(x.astype(np.float64) if dtypes.is_float(dtype) else x.astype(np.int64) if dtype != dtypes.uint64 else x, axis=axis))
        if name in ("max", "min"): assert out.dtype == dtype
        assert out.shape == expected.shape
        got = out.numpy()
        if dtypes.is_float(dtype): np.testing.assert_allclose(got.astype(np.float64), expected, rtol=1e-2 if dtype == dtypes.float16 else 1e-5)
        else: np.testing.assert_array_equal(got.astype(np.int64) if dtype != dtypes.uint64 else got, expected.astype(np.int64) if dtype != dtypes.uint64 else expected)

@pytest.mark.parametrize("dtype", [dtypes.bool, dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.int32], ids=str)
def test_prod_keeps_int_and_bool_dtypes(device, dtype, rng):
    # tinygrad 0.14: an int product has the input's dtype and wraps in it (as numpy's with dtype=); a bool one is all()
    x = rand_np(rng, (4, 6), dtype, -5, 9) if dtype != dtypes.bool else rng.random((4, 6)) < 0.8
    for axis in (None, 1):
        expected = np.all(x, axis=axis) if dtype == dtypes.bool else np.prod(x, axis=axis, dtype=x.dtype)
        assert_tensor(Tensor(x, device=device).prod(axis=axis), np.asarray(expected), dtype)

@pytest.mark.parametrize("dtype", NP_DTYPES, ids=str)
def test_sum_mean_dtype_and_values(device, dtype, rng):
    x = rand_np(rng, (4, 5), dtype)
    t = Tensor(x, device=device)
    sum_dtype = {dtypes.bool: dtypes.int32, dtypes.int8: dtypes.int32, dtypes.int16: dtypes.int32, dtypes.uint8: dtypes.uint32,
                 dtypes.uint16: dtypes.uint32}.get(dtype, dtype)
    expected_sum = x.astype(np.float64 if dtypes.is_float(dtype) else np.int64).sum(axis=1)
    assert_tensor(t.sum(axis=1), expected_sum.astype(np_dtype(sum_dtype)), sum_dtype)
    mean_dtype = dtype if dtypes.is_float(dtype) else dtypes.float32
    assert_tensor(t.mean(axis=0), x.astype(np.float64).mean(axis=0).astype(np_dtype(mean_dtype)), mean_dtype)

@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.int32, dtypes.int8, dtypes.uint8, dtypes.bool, dtypes.float16], ids=str)
@pytest.mark.parametrize("axis,keepdim", [(None, False), (0, False), (1, False), (-1, False), (0, True), (1, True), (-1, True)], ids=str)
def test_argmax_argmin(device, dtype, axis, keepdim, rng):
    x = rand_np(rng, (4, 5), dtype, 0, 3)  # small range: plenty of ties, argmax must pick the first
    t = Tensor(x, device=device)
    assert_tensor(t.argmax(axis=axis, keepdim=keepdim), np.argmax(x, axis=axis, keepdims=keepdim).astype(np.int32), dtypes.int32)
    assert_tensor(t.argmin(axis=axis, keepdim=keepdim), np.argmin(x, axis=axis, keepdims=keepdim).astype(np.int32), dtypes.int32)

def test_argmax_ties_and_specials(device):
    x = np.array([[1, 3, 3, 0], [-np.inf, -np.inf, -5, -5], [7, 7, 7, 7]], np.float32)
    assert_tensor(Tensor(x, device=device).argmax(1), np.argmax(x, 1).astype(np.int32))
    assert_tensor(Tensor(x, device=device).argmin(1), np.argmin(x, 1).astype(np.int32))
    assert_tensor(Tensor(x, device=device).argmax(), np.array(np.argmax(x), np.int32))

@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_softmax(device, name, axis, rng):
    x = rand_np(rng, (3, 5), dtypes.float32, -4, 4)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    sm = e / e.sum(axis=axis, keepdims=True)
    expected = sm if name == "softmax" else np.log(sm)
    assert_tensor(getattr(Tensor(x, device=device), name)(axis), expected.astype(np.float32), rtol=1e-5, atol=1e-6)

def test_softmax_large_values_stable(device):
    x = np.array([[1000.0, 1001.0, 1002.0], [-1000.0, 0.0, 1000.0]], np.float32)
    e = np.exp(x.astype(np.float64) - x.max(1, keepdims=True))
    assert_tensor(Tensor(x, device=device).softmax(), (e / e.sum(1, keepdims=True)).astype(np.float32), rtol=1e-5, atol=1e-6)
    assert_tensor(Tensor(x, device=device).logsumexp(1), (np.log(e.sum(1)) + x.max(1)).astype(np.float32), rtol=1e-5)

def test_softmax_half(device, rng):
    x = rand_np(rng, (2, 6), dtypes.float16, -3, 3)
    e = np.exp(x.astype(np.float64) - x.max(1, keepdims=True))
    out = Tensor(x, device=device).softmax()
    assert_tensor(out, (e / e.sum(1, keepdims=True)).astype(np.float16), dtypes.float16)

@pytest.mark.parametrize("shape,axis", [((0,), None), ((0, 3), 0), ((0, 3), 1), ((2, 0), 1), ((2, 0), 0), ((2, 0, 3), (0, 2))], ids=str)
def test_reduce_size_zero(device, shape, axis):
    x = np.zeros(shape, np.float32)
    t = Tensor(x, device=device)
    assert_tensor(t.sum(axis=axis), np.sum(x, axis=axis))
    assert_tensor(t.prod(axis=axis), np.prod(x, axis=axis))
    assert_tensor(t.any(axis=axis), np.any(x, axis=axis))
    assert_tensor(t.all(axis=axis), np.all(x, axis=axis))
    assert_tensor(Tensor(x.astype(np.int32), device=device).sum(axis=axis), np.sum(x, axis=axis).astype(np.int32))
    with np.errstate(all="ignore"):
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert_tensor(t.mean(axis=axis), np.mean(x, axis=axis))
    red = tuple(range(len(shape))) if axis is None else (axis,) if isinstance(axis, int) else axis
    if all(shape[a] != 0 for a in red):  # max over non-empty axes of an empty tensor is fine in numpy too
        assert_tensor(t.max(axis=axis), np.max(x, axis=axis))

@pytest.mark.parametrize("shape,axis", [((0,), 0), ((2, 0), -1), ((0, 3), 0), ((2, 0, 3), 1)], ids=str)
def test_reductions_over_an_empty_axis(device, shape, axis):
    # max/min of nothing is the identity (tinygrad 0.14; torch raises); softmax and log_softmax of an empty axis
    # are empty and logsumexp is -inf (torch), with empty gradients
    import torch
    kept = tuple(s for d, s in enumerate(shape) if d != axis % len(shape))
    for dtype, lowest, highest in ((dtypes.float32, -np.inf, np.inf), (dtypes.int32, np.iinfo(np.int32).min, np.iinfo(np.int32).max),
                                   (dtypes.bool, False, True)):
        t = Tensor(np.zeros(shape, np_dtype(dtype)), device=device)
        assert_tensor(t.max(axis), np.full(kept, lowest, np_dtype(dtype)), dtype)
        assert_tensor(t.min(axis), np.full(kept, highest, np_dtype(dtype)), dtype)
    for name in ("softmax", "log_softmax", "logsumexp"):
        x = Tensor(np.zeros(shape, np.float32), device=device, requires_grad=True)
        want = torch.zeros(shape, requires_grad=True)
        result = getattr(x, name)(axis)
        expected = getattr(torch, name)(want, axis)
        (result * 2).sum().backward()
        (expected * 2).sum().backward()
        assert_tensor(result, expected.detach().numpy(), dtypes.float32)
        assert x.grad.shape == tuple(want.grad.shape), name

def test_reduce_size_one_and_scalar(device):
    x = np.array([[2.5]], np.float32)
    t = Tensor(x, device=device)
    for name in ("sum", "prod", "max", "min", "mean", "logsumexp"):
        fn, np_fn = REDUCE[name]
        assert_tensor(fn(t, axis=0), np.asarray(np_fn(x.astype(np.float64), axis=0)).astype(np.float32), rtol=1e-6)
        assert_tensor(fn(t, axis=(0, 1), keepdim=True), np.asarray(np_fn(x.astype(np.float64), axis=(0, 1), keepdims=True)).astype(np.float32), rtol=1e-6)
    s = Tensor(np.float32(3.5), device=device)
    assert s.dtype == dtypes.float32 and s.shape == ()
    for axis in (None, 0, -1):
        assert_tensor(s.sum(axis=axis), np.array(3.5, np.float32))
        assert_tensor(s.max(axis=axis), np.array(3.5, np.float32))
        assert_tensor(s.mean(axis=axis), np.array(3.5, np.float32))
    assert_tensor(s.argmax(), np.array(0, np.int32))
    w = Tensor(3.5, device=device)   # a Python literal: weak float, concrete float32
    assert dtypes.concrete(w.sum().dtype) == dtypes.float32 and w.sum().item() == 3.5

def test_half_sum_accumulates_in_float32(device):
    # 4096 halves of 1.0: a half accumulator would get stuck at 2048
    t = Tensor.ones(4096, dtype=dtypes.float16, device=device).contiguous()
    assert_tensor(t.sum(), np.array(4096, np.float16), dtypes.float16)
    x = Tensor.full((64, 64), 600.0, dtype=dtypes.float16, device=device).contiguous()  # sum 2.4e6 overflows half, mean doesn't
    assert_tensor(x.mean(), np.array(600, np.float16), dtypes.float16)

def test_reduce_with_acc_dtype(device):
    x = np.array([100, 100, 100], np.int8)
    assert_tensor(Tensor(x, device=device).sum(dtype=dtypes.int16), np.array(300, np.int16), dtypes.int16)
    assert_tensor(Tensor(x, device=device).sum(acc_dtype=dtypes.int64), np.array(300, np.int64), dtypes.int64)

def test_var_mean_std_mean(device, rng):
    x = rand_np(rng, (3, 4), dtypes.float32)
    v, m = Tensor(x, device=device).var_mean(axis=1)
    assert_tensor(v, x.astype(np.float64).var(axis=1, ddof=1).astype(np.float32), rtol=1e-5)
    assert_tensor(m, x.astype(np.float64).mean(axis=1).astype(np.float32), rtol=1e-5)
    s, m = Tensor(x, device=device).std_mean(axis=0, correction=0)
    assert_tensor(s, x.astype(np.float64).std(axis=0).astype(np.float32), rtol=1e-5)

@given(shape=st.lists(st.integers(1, 4), min_size=1, max_size=4), data=st.data())
def test_reduce_random_axes(device, shape, data):
    axes = data.draw(st.lists(st.integers(-len(shape), len(shape) - 1), unique_by=lambda a: a % len(shape), max_size=len(shape)))
    keepdim = data.draw(st.booleans())
    x = np.random.default_rng(len(shape)).standard_normal(shape).astype(np.float32)
    t = Tensor(x, device=device)
    axis = tuple(axes)
    assert_tensor(t.sum(axis=axis, keepdim=keepdim), x.astype(np.float64).sum(axis=axis, keepdims=keepdim).astype(np.float32), rtol=1e-5, atol=1e-5)
    assert_tensor(t.max(axis=axis, keepdim=keepdim), x.max(axis=axis, keepdims=keepdim))
    assert_tensor(t.mean(axis=axis, keepdim=keepdim), x.astype(np.float64).mean(axis=axis, keepdims=keepdim).astype(np.float32), rtol=1e-5, atol=1e-6)

def test_matmul(device, rng):
    a, b = rand_np(rng, (3, 4), dtypes.float32), rand_np(rng, (4, 5), dtypes.float32)
    assert_tensor(Tensor(a, device=device) @ Tensor(b, device=device), a @ b, rtol=1e-5, atol=1e-5)
    assert_tensor(Tensor(a, device=device).dot(Tensor(b, device=device)), a @ b, rtol=1e-5, atol=1e-5)
    v = rand_np(rng, (4,), dtypes.float32)
    assert_tensor(Tensor(a, device=device) @ Tensor(v, device=device), a @ v, rtol=1e-5, atol=1e-5)
    assert_tensor(Tensor(v, device=device) @ Tensor(b, device=device), v @ b, rtol=1e-5, atol=1e-5)
    ba, bb = rand_np(rng, (2, 3, 4), dtypes.float32), rand_np(rng, (4, 2), dtypes.float32)
    assert_tensor(Tensor(ba, device=device) @ Tensor(bb, device=device), ba @ bb, rtol=1e-5, atol=1e-5)
    ia, ib = rand_np(rng, (2, 3), dtypes.int32), rand_np(rng, (3, 2), dtypes.int32)
    assert_tensor(Tensor(ia, device=device) @ Tensor(ib, device=device), ia @ ib, dtypes.int32)

# ============================================================================ movement

def test_reshape(device, rng):
    x = rand_np(rng, (2, 3, 4), dtypes.float32)
    t = Tensor(x, device=device)
    for shape in [(6, 4), (-1,), (4, -1), (2, -1, 2), (24,), (1, 24, 1), (2, 3, 4), (4, 3, 2)]:
        assert_tensor(t.reshape(shape), x.reshape(shape))
        assert_tensor(t.reshape(*shape), x.reshape(shape))
    assert_tensor(t.view(3, 8), x.reshape(3, 8))
    assert_tensor(Tensor(np.zeros((0, 3), np.float32), device=device).reshape(3, 0), np.zeros((3, 0), np.float32))
    assert_tensor(Tensor(np.zeros((0, 3), np.float32), device=device).reshape(-1, 3), np.zeros((0, 3), np.float32))
    assert_tensor(Tensor([[5.0]], device=device).reshape(()), np.array(5.0, np.float32))

def test_expand(device, rng):
    x = rand_np(rng, (3, 1), dtypes.float32)
    t = Tensor(x, device=device)
    assert_tensor(t.expand(3, 4), np.broadcast_to(x, (3, 4)))
    assert_tensor(t.expand(2, 3, 4), np.broadcast_to(x, (2, 3, 4)))
    assert_tensor(t.expand(-1, 5), np.broadcast_to(x, (3, 5)))
    assert_tensor(t.expand((2, 3, 0)), np.broadcast_to(x, (2, 3, 0)))
    assert_tensor(t.expand(3, 4) + 1, np.broadcast_to(x, (3, 4)) + 1)

@pytest.mark.parametrize("order", [(0, 1, 2), (2, 1, 0), (1, 0, 2), (0, 2, 1), (2, 0, 1), (-1, 0, 1)], ids=str)
def test_permute(device, order, rng):
    x = rand_np(rng, (2, 3, 4), dtypes.float32)
    assert_tensor(Tensor(x, device=device).permute(order), np.transpose(x, order))
    assert_tensor(Tensor(x, device=device).permute(*order), np.transpose(x, order))

def test_transpose_T(device, rng):
    x = rand_np(rng, (2, 3, 4), dtypes.int32)
    t = Tensor(x, device=device)
    assert_tensor(t.transpose(), np.swapaxes(x, 0, 1))
    assert_tensor(t.transpose(0, 2), np.swapaxes(x, 0, 2))
    assert_tensor(t.transpose(-1, -2), np.swapaxes(x, -1, -2))
    y = rand_np(rng, (3, 5), dtypes.float32)
    assert_tensor(Tensor(y, device=device).T, y.T)

@pytest.mark.parametrize("padding", [((1, 1), (2, 0)), ((0, 0), (0, 3)), ((2, 1), None), ((0, 0), (0, 0))], ids=str)
@pytest.mark.parametrize("value", [0.0, 1.5, -np.inf])
def test_pad(device, padding, value, rng):
    x = rand_np(rng, (2, 3), dtypes.float32)
    np_pad = tuple((0, 0) if p is None else p for p in padding)
    assert_tensor(Tensor(x, device=device).pad(padding, value=value), np.pad(x, np_pad, constant_values=value))

def test_pad_flat_and_negative(device, rng):
    x = rand_np(rng, (3, 4), dtypes.float32)
    t = Tensor(x, device=device)
    # torch-style flat padding: last dim first
    assert_tensor(t.pad((1, 2)), np.pad(x, ((0, 0), (1, 2))))
    assert_tensor(t.pad((1, 2, 0, 1)), np.pad(x, ((0, 1), (1, 2))))
    # negative padding crops
    assert_tensor(t.pad(((-1, 1), (0, -2))), np.pad(x[1:, :2], ((0, 1), (0, 0))))
    i = rand_np(rng, (2, 2), dtypes.int8)
    assert_tensor(Tensor(i, device=device).pad(((1, 0), (0, 1)), value=7), np.pad(i, ((1, 0), (0, 1)), constant_values=7), dtypes.int8)

@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
def test_pad_modes(device, mode, rng):
    x = rand_np(rng, (3, 4), dtypes.float32)
    np_mode = {"reflect": "reflect", "replicate": "edge", "circular": "wrap"}[mode]
    assert_tensor(Tensor(x, device=device).pad(((1, 2), (2, 1)), mode=mode), np.pad(x, ((1, 2), (2, 1)), mode=np_mode))

def test_shrink(device, rng):
    x = rand_np(rng, (4, 5), dtypes.float32)
    t = Tensor(x, device=device)
    assert_tensor(t.shrink(((1, 3), (0, 5))), x[1:3, 0:5])
    assert_tensor(t.shrink((None, (2, 4))), x[:, 2:4])
    assert_tensor(t.shrink(((2, 2), None)), x[2:2, :])
    assert_tensor(t.shrink(((0, 4), (4, 5))), x[:, 4:5])

@pytest.mark.parametrize("axis", [0, 1, -1, (0, 1), (0, 2), (-3, -1)], ids=str)
def test_flip(device, axis, rng):
    x = rand_np(rng, (2, 3, 4), dtypes.float32)
    assert_tensor(Tensor(x, device=device).flip(axis), np.flip(x, axis))

def test_flatten_unflatten(device, rng):
    x = rand_np(rng, (2, 3, 4, 1), dtypes.float32)
    t = Tensor(x, device=device)
    assert_tensor(t.flatten(), x.reshape(-1))
    assert_tensor(t.flatten(1), x.reshape(2, -1))
    assert_tensor(t.flatten(1, 2), x.reshape(2, 12, 1))
    assert_tensor(t.flatten(-2), x.reshape(2, 3, 4))
    assert_tensor(t.flatten(0, -3), x.reshape(6, 4, 1))
    assert_tensor(t.unflatten(2, (2, 2)), x.reshape(2, 3, 2, 2, 1))
    assert_tensor(Tensor(np.float32(2.0), device=device).flatten(), np.array([2.0], np.float32))

def test_squeeze_unsqueeze(device, rng):
    x = rand_np(rng, (1, 3, 1, 2), dtypes.float32)
    t = Tensor(x, device=device)
    assert_tensor(t.squeeze(), np.squeeze(x))
    assert_tensor(t.squeeze(0), np.squeeze(x, 0))
    assert_tensor(t.squeeze(-2), np.squeeze(x, -2))
    assert_tensor(t.squeeze(1), x)   # not size 1: unchanged (like torch)
    for d in (0, 1, 4, -1, -5, 2):
        assert_tensor(t.unsqueeze(d), np.expand_dims(x, d))
    assert_tensor(Tensor(np.float32(3.0), device=device).unsqueeze(0), np.array([3.0], np.float32))

def test_cat_stack(device, rng):
    a, b = rand_np(rng, (2, 3), dtypes.float32), rand_np(rng, (4, 3), dtypes.float32)
    ta, tb = Tensor(a, device=device), Tensor(b, device=device)
    assert_tensor(ta.cat(tb), np.concatenate([a, b]))
    assert_tensor(ta.cat(ta, dim=1), np.concatenate([a, a], 1))
    assert_tensor(ta.cat(ta, dim=-1), np.concatenate([a, a], -1))
    assert_tensor(Tensor.stack(ta, ta, ta), np.stack([a, a, a]))
    assert_tensor(Tensor.stack(ta, ta, dim=-1), np.stack([a, a], -1))
    empty = np.zeros((0, 3), np.float32)
    assert_tensor(ta.cat(Tensor(empty, device=device), tb), np.concatenate([a, empty, b]))

# ----------------------------------------------------------------------------- getitem

GETITEM = [
  0, -1, 2, (1, 2), (-2, -1, 0), slice(None), slice(1, 3), slice(None, None, 2), slice(None, None, -1), slice(3, 0, -2),
  slice(-2, None), slice(None, -10), slice(10, None), slice(None, None, 3), slice(-1, -5, -3),
  (slice(None), 1), (Ellipsis, 1), (Ellipsis, slice(None, None, -1)), (None, 0), (0, None, slice(1, 2)), (Ellipsis, None),
  (slice(None), None, slice(None, None, -2), 0), (1, Ellipsis), (Ellipsis,), (None, Ellipsis, None), (slice(1, 1),),
  (slice(None, None, 2), slice(None, None, 2), slice(None, None, 2)), (2, 1, 3), (-4, slice(None, None, -1), -1),
]

@pytest.mark.parametrize("index", GETITEM, ids=str)
def test_getitem_basic(device, index, rng):
    x = rand_np(rng, (4, 3, 5), dtypes.float32)
    assert_tensor(Tensor(x, device=device)[index], x[index])

@given(data=st.data())
def test_getitem_random_slices(device, data):
    shape = tuple(data.draw(st.lists(st.integers(0, 5), min_size=1, max_size=3)))
    x = np.arange(int(np.prod(shape)), dtype=np.int32).reshape(shape)
    idx = tuple(slice(data.draw(st.none() | st.integers(-7, 7)), data.draw(st.none() | st.integers(-7, 7)),
                      data.draw(st.none() | st.integers(-4, 4).filter(lambda s: s != 0))) for _ in shape)
    assert_tensor(Tensor(x, device=device)[idx], x[idx], dtypes.int32)

def test_getitem_basic_index_is_one_view():
    # ints, None and step-1 slices become one SHRINK and one RESHAPE, not a shrink per dim (a KV-cache read, every step)
    from fusegrad.uop.ops import Ops
    cache = Tensor.zeros(2, 1, 16, 3, 4).contiguous().realize()
    view = cache[0, :, :5, None]
    assert view.shape == (1, 5, 1, 3, 4)
    assert [u.op for u in view.uop.toposort if u.op in (Ops.SHRINK, Ops.RESHAPE)] == [Ops.RESHAPE, Ops.SHRINK, Ops.RESHAPE]
    np.testing.assert_array_equal(view.numpy(), np.zeros((2, 1, 16, 3, 4), np.float32)[0, :, :5, None])

def test_getitem_advanced(device, rng):
    x = rand_np(rng, (4, 5), dtypes.float32)
    t = Tensor(x, device=device)
    idx = np.array([3, 0, -1, 2], np.int32)
    assert_tensor(t[Tensor(idx, device=device)], x[idx])
    assert_tensor(t[[0, 2]], x[[0, 2]])
    assert_tensor(t[:, Tensor(idx, device=device)], x[:, idx])
    assert_tensor(t[Tensor([0, 1], device=device), Tensor([4, 3], device=device)], x[[0, 1], [4, 3]])

def test_getitem_size_zero_and_one(device):
    x = np.zeros((0, 3), np.float32)
    assert_tensor(Tensor(x, device=device)[:, 1], x[:, 1])
    assert_tensor(Tensor(x, device=device)[::-1], x[::-1])
    y = np.array([[7.0]], np.float32)
    assert_tensor(Tensor(y, device=device)[0], y[0])
    assert_tensor(Tensor(y, device=device)[0, 0], y[0, 0])
    assert_tensor(Tensor(y, device=device)[..., ::-1], y[..., ::-1])

def test_getitem_then_compute(device, rng):
    x = rand_np(rng, (6, 6), dtypes.float32)
    t = Tensor(x, device=device)
    assert_tensor(t[::2, 1::2] * 2 + t[1::2, ::2], x[::2, 1::2] * 2 + x[1::2, ::2])
    assert_tensor(t[::-1].sum(0), x[::-1].astype(np.float64).sum(0).astype(np.float32), rtol=1e-5)

def test_setitem(device):
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = Tensor(x.copy(), device=device).realize()
    t[1] = 5.0
    x[1] = 5.0
    assert_tensor(t, x)
    t[:, 2] = Tensor([1.0, 2.0, 3.0], device=device)
    x[:, 2] = [1.0, 2.0, 3.0]
    assert_tensor(t, x)
    t[0, ::2] = -1
    x[0, ::2] = -1
    assert_tensor(t, x)
    t[::-1, 3] = Tensor([7.0, 8.0, 9.0], device=device)
    x[::-1, 3] = [7.0, 8.0, 9.0]
    assert_tensor(t, x)

def test_setitem_strided_with_remainder(device):
    """A step that doesn't divide the dim (5 elements, step 2 selects 0, 2, 4)."""
    x = np.arange(10, dtype=np.int32).reshape(2, 5)
    t = Tensor(x.copy(), device=device).realize()
    t[:, ::2] = 0
    x[:, ::2] = 0
    assert_tensor(t, x)
    t[1, 3::-3] = Tensor([5, 6], device=device, dtype=dtypes.int32)
    x[1, 3::-3] = [5, 6]
    assert_tensor(t, x)

# ============================================================================ casts, data access, realize

@pytest.mark.parametrize("dtype", NP_DTYPES, ids=str)
def test_numpy_tolist_item_data(device, dtype, rng):
    x = rand_np(rng, (2, 3), dtype)
    t = Tensor(x, device=device)
    got = t.numpy()
    assert got.dtype == x.dtype and got.shape == x.shape
    np.testing.assert_array_equal(got, x)
    assert t.tolist() == x.tolist()
    assert Tensor(x[0:1, 1], device=device).item() == x[0, 1].item()
    assert t[1, 2].item() == x[1, 2].item()
    assert type(t[1, 2].item()) is type(x[1, 2].item())
    mv = t.data()
    assert isinstance(mv, memoryview) and mv.shape == x.shape and mv.nbytes == x.nbytes
    np.testing.assert_array_equal(np.asarray(mv), x)
    if dtype != dtypes.float16: assert mv.tolist() == x.tolist()   # Python's memoryview can't tolist() halves

def test_numpy_is_an_independent_copy(device):
    t = Tensor(np.arange(12, dtype=np.float32).reshape(3, 4), device=device).realize()
    for view, expected in ((t, np.arange(12).reshape(3, 4)), (t[:2], np.arange(8).reshape(2, 4)), (t[1], np.arange(4, 8))):
        got = view.numpy()
        assert got.flags.writeable and got.flags.c_contiguous and got.shape == expected.shape
        got[...] = -1   # writing the copy leaves the tensor alone
        np.testing.assert_array_equal(view.numpy(), expected)

def test_item_requires_one_element(device):
    assert Tensor([[4.5]], device=device).item() == 4.5
    with pytest.raises(RuntimeError, match=r"\(2,\)"):
        Tensor([1.0, 2.0], device=device).item()

def test_realize_contiguous_detach_clone(device, rng):
    x = rand_np(rng, (3, 4), dtypes.float32)
    t = Tensor(x, device=device)
    y = (t * 2).realize()
    assert_tensor(y, x * 2)
    assert y.realize() is y
    a, b = t + 1, t - 1
    assert Tensor.realize(a, b) is a
    assert_tensor(a, x + 1)
    assert_tensor(b, x - 1)
    assert_tensor(t.permute(1, 0).contiguous(), np.ascontiguousarray(x.T))
    assert_tensor(t.detach(), x)
    assert t.detach().requires_grad is False
    c = t.clone()
    assert_tensor(c, x)
    c += 1
    assert_tensor(c, x + 1)
    assert_tensor(t, x)   # the original is unchanged

def test_assign(device):
    t = Tensor([1.0, 2.0, 3.0], device=device).realize()
    old = t
    t.assign(Tensor([4.0, 5.0, 6.0], device=device)).realize()
    assert_tensor(t, np.array([4.0, 5.0, 6.0], np.float32))
    assert old is t
    t.assign(t * 2).realize()
    assert_tensor(t, np.array([8.0, 10.0, 12.0], np.float32))
    i = Tensor([1, 2], device=device).realize()
    i.assign([3, 4]).realize()
    assert_tensor(i, np.array([3, 4], np.int32))

def test_to_other_device(device, rng):
    other = "PYTHON" if device == "CPU" else "CPU"
    x = rand_np(rng, (2, 3), dtypes.int16)
    t = Tensor(x, device=device)
    moved = t.to(other)
    assert moved.device == other
    assert_tensor(moved, x, dtypes.int16)
    assert_tensor(moved + 1, x + 1, dtypes.int16)
    assert t.to(device) is t
    assert_tensor((t * 2).to(other), x * 2, dtypes.int16)
    assert_tensor(t.permute(1, 0).to(other), x.T, dtypes.int16)
    f = Tensor([1.0], device=device, requires_grad=True)
    assert f.to(other).requires_grad is True

def test_properties(device):
    t = Tensor.ones(2, 3, 4, device=device, dtype=dtypes.int16)
    assert t.ndim == 3 and t.numel() == 24 and t.element_size() == 2 and t.nbytes() == 48
    assert t.size() == (2, 3, 4) and t.size(-1) == 4 and t.size(0) == 2
    assert len(t) == 2
    assert not t.is_floating_point() and Tensor.ones(1, device=device).is_floating_point()
    assert t.device == device

def test_operand_fast_paths_build_the_general_graph():
    # a compare with a Python number and an op on two tensors of one dtype and shape skip the general broadcasting
    # path (a Tensor per literal, casts, reshapes): the graphs and the gradient flags must be the ones it builds
    from fusegrad.uop.ops import UOp, Ops
    x = Tensor(np.arange(6, dtype=np.float32).reshape(2, 3) - 2, requires_grad=True)
    literal = Tensor(0.0, device=x.device)
    assert (x < 0).uop is (x < literal).uop and (0 < x).uop is (literal < x).uop and (x == 0).uop is (x == literal).uop
    assert (x < 0).requires_grad is True and (x.detach() < 0).requires_grad is False
    y = Tensor(np.ones((2, 3), dtype=np.float32))
    assert (x + y).uop is UOp(Ops.ADD, dtypes.float32, (x.uop, y.uop)) and (y * x).uop is UOp(Ops.MUL, dtypes.float32, (y.uop, x.uop))
    a, b = x < 0, x == 0
    assert (a | b).uop is UOp(Ops.OR, dtypes.bool, (a.uop, b.uop))
    np.testing.assert_array_equal(x.relu().numpy(), np.maximum(x.numpy(), 0))
    with pytest.raises(RuntimeError, match="different devices"): x.detach().to("CPU") + y.to("PYTHON")   # (same dtype and shape)
