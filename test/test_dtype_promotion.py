"""The whole promotion lattice, pair by pair, against tinygrad 0.14 (the reference).

``fixtures/tinygrad_promotion.json`` holds what tinygrad 0.14.0 returned for every pair of dtypes
(``least_upper_dtype`` and the dtype of ``a + b``) and for a tensor plus a Python literal; it was
produced by running tinygrad itself (scripts/tinygrad_promotion.py), so these expectations don't
come from fusegrad.
"""
import json, pathlib
import numpy as np
import pytest
from fusegrad import Tensor, dtypes
from fusegrad.dtype import DType, least_upper_dtype

FIXTURE = json.loads((pathlib.Path(__file__).parent / "fixtures" / "tinygrad_promotion.json").read_text())
NAMES: list[str] = FIXTURE["dtypes"]
PAIRS = [(a, b) for a in NAMES for b in NAMES]
LITERALS = {"1": 1, "1.5": 1.5, "True": True}

def dtype_of(name: str) -> DType: return getattr(dtypes, name)

def test_fixture_covers_every_dtype():
    assert set(NAMES) == {"bool", *(d for d in dtypes.fields() if d != "bool")}, "the fixture must cover every dtype"
    assert len(PAIRS) == 17 * 17

@pytest.mark.parametrize("a,b", PAIRS, ids=[f"{a}-{b}" for a, b in PAIRS])
def test_least_upper_dtype_matches_tinygrad(a, b):
    assert least_upper_dtype(dtype_of(a), dtype_of(b)) == dtype_of(FIXTURE["least_upper_dtype"][a][b])

@pytest.mark.parametrize("a,b", PAIRS, ids=[f"{a}-{b}" for a, b in PAIRS])
def test_tensor_add_dtype_matches_tinygrad(a, b):
    out = Tensor.empty(2, dtype=dtype_of(a)) + Tensor.empty(2, dtype=dtype_of(b))
    assert out.dtype == dtype_of(FIXTURE["tensor_add"][a][b])

@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("literal", list(LITERALS))
def test_tensor_plus_literal_matches_tinygrad(name, literal):
    # tinygrad keeps `int8 + 1.5` weak (weakfloat, stored as the default float); fusegrad makes a
    # mixed strong/literal result concrete at once, so the stored dtypes must agree
    want_left, want_right = (dtype_of(n) for n in FIXTURE["scalar_add"][name][literal])
    t, value = Tensor.empty(2, dtype=dtype_of(name)), LITERALS[literal]
    got_left, got_right = (t + value).dtype, (value + t).dtype
    assert dtypes.concrete(got_left) == dtypes.concrete(want_left)
    assert dtypes.concrete(got_right) == dtypes.concrete(want_right)
    if not dtypes.is_weak(want_left): assert got_left == want_left

def test_integers_never_promote_to_fp8():
    # the original bug: int8 + uint64 computed in fp8e4m3
    non_floats = [d for d in (dtype_of(n) for n in NAMES) if not dtypes.is_float(d)]
    for a in non_floats:
        for b in non_floats:
            assert least_upper_dtype(a, b) not in dtypes.fp8s, (a, b)

def test_lattice_laws_over_all_dtypes():
    every = [dtype_of(n) for n in NAMES]
    for a in every:
        assert least_upper_dtype(a, a) == a
        for b in every:
            lub = least_upper_dtype(a, b)
            assert lub == least_upper_dtype(b, a)
            # a weak result (int64 | uint64 -> weakfloat) meeting a strong int is made concrete, so
            # the upper-bound law holds for the dtype that gets stored
            stored = dtypes.concrete(lub)
            assert dtypes.concrete(least_upper_dtype(lub, a)) == stored and dtypes.concrete(least_upper_dtype(lub, b)) == stored

def test_int8_plus_uint64_values(device):
    # computed in the default float (float32), like tinygrad: not exact, but not 8-bit floats either
    a = np.array([1, -3, 100], np.int8)
    b = np.array([2**63 + 5, 7, 2**40], np.uint64)
    out = Tensor(a, device=device) + Tensor(b, device=device)
    assert out.dtype == dtypes.weakfloat
    got = out.numpy()
    assert got.dtype == np.float32
    want = np.array([float(int(x) + int(y)) for x, y in zip(a, b)], np.float32)
    np.testing.assert_array_equal(got, want)

def test_int64_uint64_result_joins_a_half_as_half():
    # the weak float result of int64 + uint64 adopts an explicit float type, as in tinygrad
    mixed = Tensor.empty(2, dtype=dtypes.int64) + Tensor.empty(2, dtype=dtypes.uint64)
    assert (mixed + Tensor.empty(2, dtype=dtypes.float16)).dtype == dtypes.float16
    assert least_upper_dtype(dtypes.int64, dtypes.uint64, dtypes.bfloat16) == dtypes.bfloat16

def test_least_upper_dtype_errors():
    with pytest.raises(TypeError, match="at least one"): least_upper_dtype()
    with pytest.raises(TypeError, match="promotion"): least_upper_dtype(dtypes.void, dtypes.int8)

# ---------------------------------------------------------------- literals in division, powers and comparisons

@pytest.mark.parametrize("values,dtype,divisor,reverse", [
    ([128, 255], dtypes.uint8, 256, False),     # the literal doesn't fit the tensor's dtype: it is never stored in it
    ([3, -128], dtypes.int8, 128, False),
    ([3, 250], dtypes.uint8, -3, False),
    ([-3, 7], dtypes.int8, 300, True),
    ([-7, 7], dtypes.int32, 2 ** 33, False),
    ([100.0, 3.0], dtypes.float16, 1e5, False),   # 1e5 has no half: divided in float32, rounded once
    ([6.0, 1.0], dtypes.float16, 7e4, True),
])
def test_true_division_by_a_literal_matches_numpy(values, dtype, divisor, reverse):
    import torch
    x = Tensor(values, dtype=dtype)
    got = divisor / x if reverse else x / divisor
    torch_dtypes = {dtypes.uint8: torch.uint8, dtypes.int8: torch.int8, dtypes.int32: torch.int32, dtypes.float16: torch.float16}
    reference = torch.tensor(values, dtype=torch_dtypes[dtype])
    expected = (divisor / reference if reverse else reference / divisor)
    assert got.dtype == (dtypes.float16 if dtype == dtypes.float16 else dtypes.float32)
    np.testing.assert_allclose(got.numpy().astype(np.float64), expected.numpy().astype(np.float64), rtol=1e-3 if dtype == dtypes.float16 else 1e-6)

def test_true_division_by_a_literal_tensor_of_another_kind():
    got = Tensor([128, 255], dtype=dtypes.uint8) / Tensor(-3)   # a literal's tensor (weak int) becomes float first too
    np.testing.assert_allclose(got.numpy(), [-128 / 3, -85.0], rtol=1e-6)

@pytest.mark.parametrize("dtype", [dtypes.int32, dtypes.uint8, dtypes.bool])
@pytest.mark.parametrize("exponent", [2.0, 3.0, 0.0, 0.5])
def test_int_or_bool_tensor_to_a_float_power_is_float(dtype, exponent):
    values = [True, False] if dtype == dtypes.bool else [100000, 3] if dtype == dtypes.int32 else [2, 3]
    got = Tensor(values, dtype=dtype) ** exponent
    assert got.dtype == dtypes.float32
    np.testing.assert_allclose(got.numpy(), np.array(values, dtype=np.float64) ** exponent, rtol=1e-6)

def test_bool_tensor_to_an_int_power_and_compared_with_big_ints():
    t = Tensor([True, False])
    assert (t ** 2).dtype == dtypes.int32 and (t ** 2).tolist() == [1, 0]
    assert (t < 2 ** 33).tolist() == [True, True] and (t == 2 ** 33).tolist() == [False, False]
    assert (t > -2 ** 40).tolist() == [True, True] and (t != 2 ** 33).tolist() == [True, True]
