"""Shared helpers: compare a fusegrad Tensor with a numpy expectation, random inputs per dtype,
and kernel counting."""
from __future__ import annotations
import numpy as np
from fusegrad import Tensor, dtypes, GlobalCounters
from fusegrad.dtype import DType, to_np_dtype

# dtypes numpy can hold directly (bfloat16 and fp8 travel through float32)
NP_DTYPES: tuple[DType, ...] = (dtypes.bool, dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.int32,
                                dtypes.uint32, dtypes.int64, dtypes.uint64, dtypes.float16, dtypes.float32, dtypes.float64)
INT_DTYPES = tuple(d for d in NP_DTYPES if dtypes.is_int(d))
FLOAT_DTYPES = (dtypes.float16, dtypes.float32, dtypes.float64)

def tolerance(dtype: DType) -> tuple[float, float]:
    """(rtol, atol) for comparing results of ``dtype``."""
    if dtype in (dtypes.float16,): return 1e-2, 1e-2
    if dtype == dtypes.bfloat16: return 2e-2, 2e-2
    if dtype == dtypes.float32: return 1e-5, 1e-5
    if dtype == dtypes.float64: return 1e-9, 1e-10
    return 0.0, 0.0

def np_dtype(dtype: DType):
    return to_np_dtype(dtype) if dtype.fmt is not None else np.float32

def assert_tensor(t: Tensor, expected, dtype: DType | None = None, rtol: float | None = None, atol: float | None = None,
                  shape: tuple | None = None) -> np.ndarray:
    """Check shape, dtype and values of ``t`` against ``expected`` (a numpy array or scalar).
    ``dtype`` defaults to the fusegrad dtype matching ``expected.dtype``; ints and bools must match
    exactly, floats within dtype-appropriate tolerances (NaNs must match NaNs, infs must match)."""
    expected = np.asarray(expected)
    if dtype is None:
        from fusegrad.dtype import from_np
        dtype = from_np(expected.dtype)
    assert isinstance(t, Tensor), f"expected a Tensor, got {type(t)}"
    assert t.dtype == dtype, f"dtype: got {t.dtype}, expected {dtype}"
    want_shape = expected.shape if shape is None else shape
    assert t.shape == tuple(want_shape), f"shape: got {t.shape}, expected {tuple(want_shape)}"
    got = t.numpy()
    assert got.shape == tuple(want_shape), f"numpy() shape: got {got.shape}, expected {tuple(want_shape)}"
    assert got.dtype == np_dtype(dtype), f"numpy() dtype: got {got.dtype}, expected {np_dtype(dtype)}"
    if dtypes.is_float(dtype):
        r, a = tolerance(dtype)
        rtol, atol = (r if rtol is None else rtol), (a if atol is None else atol)
        np.testing.assert_allclose(got.astype(np.float64), expected.astype(np.float64), rtol=rtol, atol=atol, equal_nan=True)
    else:
        np.testing.assert_array_equal(got, expected.astype(got.dtype))
    return got

def rand_np(rng: np.random.Generator, shape: tuple, dtype: DType, low: float | None = None, high: float | None = None) -> np.ndarray:
    """Random numpy data that is valid for ``dtype`` (ints within a small safe range unless low/high given)."""
    if dtype == dtypes.bool: return rng.random(shape) < 0.5
    if dtypes.is_int(dtype):
        lo = (0 if dtypes.is_unsigned(dtype) else -10) if low is None else int(low)
        hi = 10 if high is None else int(high)
        return rng.integers(lo, hi, size=shape).astype(np_dtype(dtype))
    lo = -2.0 if low is None else low
    hi = 2.0 if high is None else high
    return rng.uniform(lo, hi, size=shape).astype(np_dtype(dtype))

def realized(data, device: str, dtype: DType | None = None) -> Tensor:
    """A Tensor holding ``data`` in a buffer (realized), so it costs no kernel later."""
    return Tensor(data, device=device, dtype=dtype).realize()

def count_kernels(*tensors: Tensor) -> int:
    """Realize ``tensors`` together and return how many kernels ran."""
    GlobalCounters.reset()
    Tensor.realize(*tensors)
    return GlobalCounters.kernel_count
