"""dtypes: the promotion lattice, reduce result dtypes, casts and bitcasts against numpy."""
import itertools, struct
import numpy as np
import pytest
from hypothesis import given, strategies as st
from fusegrad import Tensor, dtypes
from fusegrad.dtype import least_upper_dtype, least_upper_float, sum_acc_dtype, to_np_dtype, from_np
from helpers import assert_tensor, rand_np, np_dtype, NP_DTYPES, INT_DTYPES

CORE = NP_DTYPES + (dtypes.bfloat16,)

# ============================================================================ the lattice

@pytest.mark.parametrize("a,b,want", [
  (dtypes.bool, dtypes.int8, dtypes.int8), (dtypes.bool, dtypes.uint8, dtypes.uint8), (dtypes.bool, dtypes.float32, dtypes.float32),
  (dtypes.int8, dtypes.uint8, dtypes.int16), (dtypes.int8, dtypes.int16, dtypes.int16), (dtypes.uint8, dtypes.uint16, dtypes.uint16),
  (dtypes.int16, dtypes.uint16, dtypes.int32), (dtypes.int8, dtypes.uint16, dtypes.int32), (dtypes.int32, dtypes.uint32, dtypes.int64),
  (dtypes.uint8, dtypes.int32, dtypes.int32), (dtypes.uint16, dtypes.uint32, dtypes.uint32), (dtypes.uint32, dtypes.uint64, dtypes.uint64),
  (dtypes.int16, dtypes.uint32, dtypes.int64), (dtypes.int64, dtypes.int8, dtypes.int64),
  (dtypes.int64, dtypes.float16, dtypes.float16), (dtypes.uint64, dtypes.float16, dtypes.float16),
  (dtypes.int32, dtypes.bfloat16, dtypes.bfloat16), (dtypes.int8, dtypes.float64, dtypes.float64),
  (dtypes.float16, dtypes.bfloat16, dtypes.float32), (dtypes.float16, dtypes.float32, dtypes.float32),
  (dtypes.bfloat16, dtypes.float64, dtypes.float64), (dtypes.float32, dtypes.float64, dtypes.float64),
  (dtypes.float16, dtypes.float16, dtypes.float16), (dtypes.bool, dtypes.bool, dtypes.bool),
], ids=str)
def test_least_upper_dtype(a, b, want):
    assert least_upper_dtype(a, b) == want
    assert least_upper_dtype(b, a) == want

def test_least_upper_dtype_int64_uint64_is_a_float():
    # no integer type holds both int64 and uint64: the lattice continues into the floats
    got = least_upper_dtype(dtypes.int64, dtypes.uint64)
    assert dtypes.is_float(got) and least_upper_dtype(got, dtypes.float16) == dtypes.float16

def test_least_upper_dtype_many():
    assert least_upper_dtype(dtypes.bool, dtypes.int8, dtypes.uint8) == dtypes.int16
    assert least_upper_dtype(dtypes.int8, dtypes.uint8, dtypes.float16) == dtypes.float16
    assert least_upper_dtype(dtypes.int32) == dtypes.int32

@given(st.sampled_from(CORE), st.sampled_from(CORE), st.sampled_from(CORE))
def test_least_upper_dtype_lattice_laws(a, b, c):
    lub = least_upper_dtype(a, b)
    assert lub == least_upper_dtype(b, a)                                    # commutative
    assert least_upper_dtype(a, a) == a                                       # idempotent
    # int64 | uint64 is weakfloat, which a strong int meeting it makes concrete: the laws below hold
    # for the dtype that gets stored
    stored = dtypes.concrete
    assert stored(least_upper_dtype(least_upper_dtype(a, b), c)) == stored(least_upper_dtype(a, least_upper_dtype(b, c)))  # associative
    assert stored(least_upper_dtype(lub, a)) == stored(lub) and stored(least_upper_dtype(lub, b)) == stored(lub)   # an upper bound
    if dtypes.is_float(a) or dtypes.is_float(b): assert dtypes.is_float(lub)

def test_weak_literal_dtypes():
    for d in CORE:
        assert least_upper_dtype(d, dtypes.weakint) == (d if d != dtypes.bool else dtypes.int32)
        assert least_upper_dtype(d, dtypes.weakfloat) == (d if dtypes.is_float(d) else dtypes.float32)
    assert dtypes.from_py(1) == dtypes.weakint and dtypes.from_py(1.0) == dtypes.weakfloat and dtypes.from_py(True) == dtypes.bool

def test_least_upper_float():
    for d in (dtypes.bool, dtypes.int8, dtypes.uint8, dtypes.int32, dtypes.int64, dtypes.uint64):
        assert least_upper_float(d) == dtypes.float32
    for d in (dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64):
        assert least_upper_float(d) == d

def test_default_float_changes_promotion(device):
    dtypes.default_float = dtypes.float16
    assert Tensor([1.5, 2.5], device=device).dtype == dtypes.float16
    assert (Tensor([1, 2], device=device) / 2).dtype == dtypes.float16
    assert (Tensor([1, 2], device=device) * 1.5).dtype == dtypes.float16
    assert_tensor(Tensor([1, 2], device=device) * 1.5, np.array([1.5, 3.0], np.float16), dtypes.float16)

def test_dtype_helpers():
    assert dtypes.is_float(dtypes.half) and dtypes.is_float(dtypes.bfloat16) and not dtypes.is_float(dtypes.int32)
    assert dtypes.is_int(dtypes.uint8) and not dtypes.is_int(dtypes.bool) and not dtypes.is_int(dtypes.float32)
    assert dtypes.is_unsigned(dtypes.uint64) and not dtypes.is_unsigned(dtypes.int64)
    for d in INT_DTYPES:
        info = np.iinfo(to_np_dtype(d))
        assert dtypes.min(d) == info.min and dtypes.max(d) == info.max
        assert d.itemsize == np.dtype(to_np_dtype(d)).itemsize
    assert dtypes.finfo(dtypes.half) == (5, 10) and dtypes.finfo(dtypes.bfloat16) == (8, 7) and dtypes.finfo(dtypes.float32) == (8, 23)
    assert dtypes.float == dtypes.float32 and dtypes.half == dtypes.float16 and dtypes.long == dtypes.int64 and dtypes.uchar == dtypes.uint8
    for d in NP_DTYPES: assert from_np(to_np_dtype(d)) == d
    assert dtypes.as_const(300, dtypes.uint8) == 44 and dtypes.as_const(200, dtypes.int8) == -56 and dtypes.as_const(2.7, dtypes.int32) == 2

# ============================================================================ reduce result dtypes

SUM_DTYPE = {dtypes.bool: dtypes.int32, dtypes.int8: dtypes.int32, dtypes.int16: dtypes.int32, dtypes.int32: dtypes.int32,
             dtypes.int64: dtypes.int64, dtypes.uint8: dtypes.uint32, dtypes.uint16: dtypes.uint32, dtypes.uint32: dtypes.uint32,
             dtypes.uint64: dtypes.uint64, dtypes.float16: dtypes.float16, dtypes.bfloat16: dtypes.bfloat16,
             dtypes.float32: dtypes.float32, dtypes.float64: dtypes.float64}

@pytest.mark.parametrize("dtype", CORE, ids=str)
def test_sum_and_mean_dtypes(device, dtype):
    t = Tensor([[1, 0, 1], [1, 1, 0]], device=device, dtype=dtype)
    assert t.sum().dtype == SUM_DTYPE[dtype]
    assert t.sum(axis=1).dtype == SUM_DTYPE[dtype]
    assert sum_acc_dtype(dtype) == (SUM_DTYPE[dtype] if not dtypes.is_float(dtype) else least_upper_dtype(dtype, dtypes.float32))
    mean_dtype = dtype if dtypes.is_float(dtype) else dtypes.float32
    assert t.mean().dtype == mean_dtype and t.mean(axis=0).dtype == mean_dtype
    assert t.max().dtype == dtype and t.min().dtype == dtype
    assert t.argmax().dtype == dtypes.int32 and t.argmin(axis=1).dtype == dtypes.int32
    assert t.any().dtype == dtypes.bool and t.all().dtype == dtypes.bool
    assert (t < t).dtype == dtypes.bool and (t == t).dtype == dtypes.bool
    s = t.sum(axis=1).cast(dtypes.float32).numpy()
    np.testing.assert_array_equal(s, np.array([2, 2], np.float32))
    np.testing.assert_allclose(t.mean().cast(dtypes.float32).numpy(), 4 / 6, rtol=1e-2)

def test_sum_values_in_widened_dtype(device):
    assert_tensor(Tensor([100, 100, 100], device=device, dtype=dtypes.int8).sum(), np.array(300, np.int32), dtypes.int32)
    assert_tensor(Tensor([200, 200], device=device, dtype=dtypes.uint8).sum(), np.array(400, np.uint32), dtypes.uint32)
    assert_tensor(Tensor([True] * 5, device=device).sum(), np.array(5, np.int32), dtypes.int32)
    assert_tensor(Tensor([1, 2, 4], device=device, dtype=dtypes.int16).mean(), np.array(7 / 3, np.float32), dtypes.float32)
    assert_tensor(Tensor([60000.0] * 4, device=device, dtype=dtypes.float16).mean(), np.array(60000, np.float16), dtypes.float16)

def test_int_true_division_and_literals(device):
    assert (Tensor([1, 2], device=device) / Tensor([2, 2], device=device)).dtype == dtypes.float32
    assert (Tensor([1, 2], device=device, dtype=dtypes.int8) / 2).dtype == dtypes.float32
    assert (Tensor([1.0], device=device, dtype=dtypes.float16) / 2).dtype == dtypes.float16
    assert (Tensor([1, 2], device=device) * 1.5).dtype == dtypes.float32
    assert (Tensor([1, 2], device=device, dtype=dtypes.int8) + 1).dtype == dtypes.int8
    assert (Tensor([True], device=device) + 1).dtype == dtypes.int32
    assert (Tensor([1, 2], device=device, dtype=dtypes.uint16) * Tensor([1], device=device, dtype=dtypes.int8)).dtype == dtypes.int32
    assert Tensor([1, 2], device=device).sqrt().dtype == dtypes.float32
    assert Tensor([1, 2], device=device, dtype=dtypes.float64).exp().dtype == dtypes.float64
    assert Tensor([1, 2], device=device, dtype=dtypes.int8).reciprocal().dtype == dtypes.float32

# ============================================================================ casts

def _cast_source(dtype, rng):
    """Values of ``dtype`` whose conversion to every other dtype is defined (no negative float → unsigned,
    no out-of-range float → int); int → int narrowing wraps, which numpy and C agree on."""
    if dtype == dtypes.bool: return np.array([True, False, True, True, False, False])
    if dtypes.is_float(dtype): return np.array([0.0, 0.4, 1.0, 1.9, 7.5, 100.99, 126.5, 3.0], dtype=np_dtype(dtype))
    if dtypes.is_unsigned(dtype): return np.array([0, 1, 2, 127, 128, 200, 255, 77], dtype=np_dtype(dtype))
    return np.array([0, 1, -1, 100, -100, 127, -128, 55], dtype=np_dtype(dtype))

def _expected_cast(x: np.ndarray, target) -> np.ndarray:
    if np.issubdtype(x.dtype, np.floating) and dtypes.is_int(target):
        return np.trunc(x.astype(np.float64)).astype(np.int64).astype(np_dtype(target))
    return x.astype(np_dtype(target))

@pytest.mark.parametrize("src,dst", list(itertools.product(NP_DTYPES, NP_DTYPES)), ids=str)
def test_cast(device, src, dst, rng):
    x = _cast_source(src, rng)
    if dtypes.is_float(src) and dtypes.is_int(dst): x = x[x.astype(np.float64) < float(np.iinfo(np_dtype(dst)).max)]  # must fit
    expected = _expected_cast(x, dst)
    assert_tensor(Tensor(x, device=device).cast(dst), expected, dst)
    # a cast inside a fused expression too
    assert_tensor((Tensor(x, device=device) * 1).cast(dst), expected, dst)

def test_cast_float_to_int_truncates_negatives(device):
    x = np.array([-2.7, -0.5, 0.5, 2.7, -100.9], np.float32)
    for d in (dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64):
        assert_tensor(Tensor(x, device=device).cast(d), np.trunc(x).astype(np_dtype(d)), d)
    assert_tensor(Tensor(x, device=device).int(), np.trunc(x).astype(np.int32), dtypes.int32)

def test_cast_to_bool(device):
    x = np.array([0.0, -0.0, 0.5, -3.0, np.nan, np.inf], np.float32)
    assert_tensor(Tensor(x, device=device).cast(dtypes.bool), x.astype(np.bool_), dtypes.bool)
    assert_tensor(Tensor(x, device=device).bool(), x.astype(np.bool_), dtypes.bool)
    i = np.array([0, 2, -1, 256], np.int32)
    assert_tensor(Tensor(i, device=device).cast(dtypes.bool), i.astype(np.bool_), dtypes.bool)

def test_cast_shortcuts(device):
    x = np.array([1.25, -2.5, 3.75], np.float32)
    t = Tensor(x, device=device)
    assert_tensor(t.half(), x.astype(np.float16), dtypes.float16)
    assert_tensor(t.double(), x.astype(np.float64), dtypes.float64)
    assert_tensor(t.long(), np.trunc(x).astype(np.int64), dtypes.int64)
    assert_tensor(t.short(), np.trunc(x).astype(np.int16), dtypes.int16)
    assert_tensor(t.half().float(), x.astype(np.float16).astype(np.float32), dtypes.float32)
    assert_tensor(t.cast("float16"), x.astype(np.float16), dtypes.float16)
    assert t.cast(dtypes.float32) is t

def test_cast_float_precision(device):
    x = np.array([1 / 3, 1e-8, 65519.0, 70000.0, 2.0 ** -24, 1e300], np.float64)
    with np.errstate(over="ignore"):
        assert_tensor(Tensor(x, device=device).cast(dtypes.float32), x.astype(np.float32), dtypes.float32, rtol=0, atol=0)
        assert_tensor(Tensor(x, device=device).cast(dtypes.float16), x.astype(np.float16), dtypes.float16, rtol=0, atol=0)

# ----------------------------------------------------------------------------- bfloat16

def _np_to_bf16_f32(x: np.ndarray) -> np.ndarray:
    """float32 → bfloat16 (round to nearest even) → float32, in numpy bit arithmetic."""
    bits = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
    out = rounded.astype(np.uint32).view(np.float32)
    return np.where(np.isnan(x), np.float32(np.nan), out)

def test_bfloat16_round_trip(device, rng):
    x = np.concatenate([rng.standard_normal(32).astype(np.float32) * 100,
                        np.array([0.0, -0.0, 1.0, 1.00390625, 1.01171875, 3.0e38, -1e-30, np.inf, -np.inf, np.nan, 65504.0], np.float32)])
    t = Tensor(x, device=device).cast(dtypes.bfloat16)
    assert t.dtype == dtypes.bfloat16 and t.shape == x.shape
    back = t.cast(dtypes.float32)
    assert_tensor(back, _np_to_bf16_f32(x), dtypes.float32, rtol=0, atol=0)
    # numpy() of a bfloat16 tensor comes back as float32 values
    np.testing.assert_array_equal(t.numpy(), _np_to_bf16_f32(x))

def test_bfloat16_from_list_and_ops(device):
    t = Tensor([1.5, -2.25, 3.0], device=device, dtype=dtypes.bfloat16)
    assert t.dtype == dtypes.bfloat16
    assert_tensor((t * 2).cast(dtypes.float32), np.array([3.0, -4.5, 6.0], np.float32), dtypes.float32)
    assert (t + t).dtype == dtypes.bfloat16
    assert_tensor(t.sum().cast(dtypes.float32), np.array(2.25, np.float32), dtypes.float32)
    assert_tensor(t.cast(dtypes.int32), np.array([1, -2, 3], np.int32), dtypes.int32)
    assert_tensor(t.cast(dtypes.float16), np.array([1.5, -2.25, 3.0], np.float16), dtypes.float16)
    assert_tensor(Tensor([7, -3], device=device).cast(dtypes.bfloat16).cast(dtypes.float64), np.array([7, -3], np.float64), dtypes.float64)

@pytest.mark.parametrize("dst", NP_DTYPES, ids=str)
def test_bfloat16_casts_to_all(device, dst):
    x = np.array([0.0, 1.0, 2.5, 100.0, 3.0, 0.5], np.float32)   # exact in bfloat16
    out = Tensor(x, device=device).cast(dtypes.bfloat16).cast(dst)
    assert_tensor(out, _expected_cast(x, dst), dst)

# ----------------------------------------------------------------------------- bitcast

@pytest.mark.parametrize("src,dst", [(dtypes.float32, dtypes.int32), (dtypes.float32, dtypes.uint32), (dtypes.int32, dtypes.float32),
                                     (dtypes.uint32, dtypes.float32), (dtypes.float16, dtypes.int16), (dtypes.float16, dtypes.uint16),
                                     (dtypes.uint16, dtypes.float16), (dtypes.float64, dtypes.int64), (dtypes.int64, dtypes.float64),
                                     (dtypes.uint64, dtypes.int64), (dtypes.int8, dtypes.uint8), (dtypes.uint8, dtypes.int8),
                                     (dtypes.int32, dtypes.uint32), (dtypes.int16, dtypes.uint16)], ids=str)
def test_bitcast(device, src, dst, rng):
    if dtypes.is_float(src): x = np.array([1.0, -2.5, 0.0, -0.0, 3.14159, np.inf], dtype=np_dtype(src))
    else: x = np.array([0, 1, 5, 100, dtypes.max(src), dtypes.min(src)], dtype=np_dtype(src))
    expected = x.view(np_dtype(dst))
    out = Tensor(x, device=device).bitcast(dst)
    assert out.dtype == dst and out.shape == x.shape
    np.testing.assert_array_equal(out.numpy().view(np.uint8), expected.view(np.uint8))
    # also on a computed (unrealized) value
    np.testing.assert_array_equal((Tensor(x, device=device) + 0).bitcast(dst).numpy().view(np.uint8), expected.view(np.uint8))

def test_bitcast_known_values(device):
    assert Tensor([1.0], device=device).bitcast(dtypes.uint32).item() == 0x3F800000
    assert Tensor([0x40490FDB], device=device, dtype=dtypes.uint32).bitcast(dtypes.float32).item() == struct.unpack("f", struct.pack("I", 0x40490FDB))[0]
    assert Tensor([-1], device=device, dtype=dtypes.int8).bitcast(dtypes.uint8).item() == 255

def test_dtypes_unpickle_in_another_process():
    # string hashes differ between processes: an unpickled dtype must still equal (and hash like) the live one
    import pickle, subprocess, sys
    payload = pickle.dumps([dtypes.float32, dtypes.float32.ptr(16), dtypes.float32.vec(4), dtypes.bfloat16])
    code = ("import pickle, sys; from fusegrad.dtype import dtypes; got = pickle.loads(sys.stdin.buffer.read()); "
            "want = [dtypes.float32, dtypes.float32.ptr(16), dtypes.float32.vec(4), dtypes.bfloat16]; "
            "assert got == want and [hash(g) for g in got] == [hash(w) for w in want] and got[0] in {dtypes.float32: 1}, got")
    result = subprocess.run([sys.executable, "-c", code], input=payload, capture_output=True, env={**__import__('os').environ, "PYTHONHASHSEED": "123"})
    assert result.returncode == 0, result.stderr.decode()

def test_dtypes_are_interned():
    # constructing a dtype returns the live one with the same fields, so == and hash are identity (cheap C slots)
    import copy, gc, pickle
    from fusegrad.dtype import DType, PtrDType, _INTERNED_DTYPES
    assert DType(13, 4, "float", "f") is dtypes.float32 and DType.new(11, 16, "half", "e") is dtypes.half
    assert dtypes.int32.vec(4) is DType(5, 16, "int4", None, 4, dtypes.int32)
    assert dtypes.float32.ptr(8) is dtypes.float32.ptr(8) and dtypes.float32.ptr(8, local=True) is dtypes.float32.ptr(8, True)
    assert dtypes.float32.ptr(8) != dtypes.float32.ptr(9) and dtypes.float32.ptr(8) != dtypes.float32.ptr(8, local=True)
    for dtype in (dtypes.bfloat16, dtypes.float32.ptr(16), dtypes.uint8.vec(2)):
        assert pickle.loads(pickle.dumps(dtype)) is dtype and copy.deepcopy(dtype) is dtype and copy.copy(dtype) is dtype
    # a pointer and a DType with the same leading fields, or fields that differ only in name, are different types
    assert PtrDType(13, 4, "float", "f", 1, None, dtypes.float32) is not dtypes.float32
    assert dtypes.fp8e4m3 != dtypes.fp8e4m3fnuz and len({dtypes.fp8e4m3, dtypes.fp8e4m3fnuz, dtypes.float32}) == 3
    # comparing with anything else is False both ways, as before
    assert dtypes.float32 != "float" and "float" != dtypes.float32 and not (dtypes.float32 == np.dtype("float32"))
    # the table is weak: a dtype nobody uses any more leaves it
    key = ("PtrDType", 13, 4, "float", "f", 1, None, dtypes.float32, False, 987654321)
    one_off = dtypes.float32.ptr(987654321)
    assert _INTERNED_DTYPES[key] is one_off
    del one_off
    gc.collect()
    assert key not in _INTERNED_DTYPES

def test_bfloat16_ops_round_every_result_like_torch():
    """Every bfloat16 op's result is a bfloat16 value, also inside one fused kernel and when read back (it stayed a
    float32 until stored: x + y of bfloat16s read back as 1.01001, not 1.0078125); a product summed in float32 (a
    matmul) keeps its exact float32 terms, as PyTorch's matmul does."""
    import torch
    rng = np.random.default_rng(3)
    a_np, b_np = rng.standard_normal(64).astype(np.float32), rng.uniform(0.5, 2.0, 64).astype(np.float32)
    a, b = Tensor(a_np).cast(dtypes.bfloat16), Tensor(b_np).cast(dtypes.bfloat16)
    ta, tb = torch.tensor(a_np).bfloat16(), torch.tensor(b_np).bfloat16()
    chains = [lambda x, y: x + y, lambda x, y: ((x + y) - 1) * 1000, lambda x, y: x * y, lambda x, y: x / y,
              lambda x, y: (x * y + x) / (y - 3), lambda x, y: y.sqrt() * x, lambda x, y: (x * y).exp() + 1]
    for chain in chains:
        np.testing.assert_array_equal(chain(a, b).numpy(), chain(ta, tb).float().numpy())
    m_np = rng.standard_normal((48, 48)).astype(np.float32)
    m, tm = Tensor(m_np).cast(dtypes.bfloat16), torch.tensor(m_np).bfloat16()
    np.testing.assert_allclose((m @ m).numpy(), (tm @ tm).float().numpy(), rtol=1e-2, atol=1e-2)
    assert (Tensor([1.0], dtype=dtypes.bfloat16) + Tensor([0.01], dtype=dtypes.bfloat16)).tolist() == [1.0078125]
