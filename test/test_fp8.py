"""fp8 dtypes (e4m3, e5m2 and their fnuz variants) against tinygrad 0.14.

test/fixtures/tinygrad_fp8.json (scripts/tinygrad_fp8.py, run with tinygrad on DEV=PYTHON) holds, for a sweep
of float32 inputs (every fp8 value, halfway points and their float32 neighbours, overflow, infinities, NaNs,
subnormals, random bit patterns), tinygrad's fp8 codes; the float32 value of every code; the codes of a + b and
a * b for random code pairs; and the result dtypes of reductions. Kernels (CPU and PYTHON both run codegen's
fp8 emulation) and the Python conversion in dtype.py must match it bit for bit.
"""
import json, math, pathlib, struct
import numpy as np
import pytest
from fusegrad import Tensor, dtypes
from fusegrad.device import is_dtype_supported
from fusegrad.dtype import float_to_fp8_bits, fp8_bits_to_float, truncate_float

FIXTURE = json.loads((pathlib.Path(__file__).parent / "fixtures" / "tinygrad_fp8.json").read_text())
FP8_NAMES = ("fp8e4m3", "fp8e5m2", "fp8e4m3fnuz", "fp8e5m2fnuz")
DEVICES = ("CPU", "PYTHON")

def _f32(bits: int) -> float: return struct.unpack("f", struct.pack("I", bits))[0]

def _mismatches(got: list, want: list, inputs: list) -> list:
    return [(hex(i), hex(g), hex(w)) for i, g, w in zip(inputs, got, want) if g != w][:10]

def _codes(codes: list[int], name: str, device: str) -> Tensor:
    return Tensor(np.array(codes, dtype=np.uint8), device=device).bitcast(getattr(dtypes, name))

def test_tinygrad_has_these_fp8_types():
    assert set(FIXTURE["encode"]) == set(FP8_NAMES) == {n for n in FP8_NAMES if getattr(dtypes, n) in dtypes.fp8s}
    assert all(getattr(dtypes, n).itemsize == 1 and dtypes.is_float(getattr(dtypes, n)) for n in FP8_NAMES)

@pytest.mark.parametrize("name", FP8_NAMES)
def test_python_conversion_matches_tinygrad(name):
    dtype, inputs = getattr(dtypes, name), FIXTURE["float32_bits"]
    got = [float_to_fp8_bits(_f32(b), dtype) for b in inputs]
    assert _mismatches(got, FIXTURE["encode"][name], inputs) == []
    decoded = [fp8_bits_to_float(code, dtype) for code in range(256)]
    want = [_f32(b) for b in FIXTURE["decode"][name]]
    assert all((math.isnan(g) and math.isnan(w)) or struct.pack("f", g) == struct.pack("f", w) for g, w in zip(decoded, want))

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", FP8_NAMES)
def test_cast_from_float32_matches_tinygrad(device, name):
    inputs = FIXTURE["float32_bits"]
    x = Tensor(np.array(inputs, dtype=np.uint32), device=device).bitcast(dtypes.float32)
    got = x.cast(getattr(dtypes, name)).bitcast(dtypes.uint8).tolist()
    assert _mismatches(got, FIXTURE["encode"][name], inputs) == []

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", FP8_NAMES)
def test_cast_to_float32_matches_tinygrad(device, name):
    got = _codes(list(range(256)), name, device).cast(dtypes.float32).bitcast(dtypes.uint32).tolist()
    want = FIXTURE["decode"][name]
    # NaNs match as NaNs (their payload bits aren't part of the contract), everything else bit for bit
    nan = lambda b: (b & 0x7FFFFFFF) > 0x7F800000
    assert [(i, hex(g), hex(w)) for i, (g, w) in enumerate(zip(got, want)) if g != w and not (nan(g) and nan(w))] == []

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", ["add", "mul"])
@pytest.mark.parametrize("name", FP8_NAMES)
def test_arithmetic_rounds_like_tinygrad(device, op, name):
    """Each op computes in float32 and rounds its result to fp8 once."""
    pairs = FIXTURE["pairs"]
    a, b = _codes([p[0] for p in pairs], name, device), _codes([p[1] for p in pairs], name, device)
    result = a + b if op == "add" else a * b
    assert result.dtype == getattr(dtypes, name)
    got, want = result.bitcast(dtypes.uint8).tolist(), FIXTURE[op][name]
    values = [fp8_bits_to_float(c, getattr(dtypes, name)) for c in range(256)]
    same = lambda g, w: g == w or (math.isnan(values[g]) and math.isnan(values[w]))
    assert [(pairs[i], hex(g), hex(w)) for i, (g, w) in enumerate(zip(got, want)) if not same(g, w)] == []

@pytest.mark.parametrize("name", FP8_NAMES)
def test_result_dtypes_match_tinygrad(name):
    t = Tensor([1.0, 2.5, -3.25, 0.1]).cast(getattr(dtypes, name))
    results = {"sum": t.sum(), "sum_axis": t.reshape(2, 2).sum(1), "cumsum": t.cumsum(), "softmax": t.softmax(),
               "log_softmax": t.log_softmax(), "mean": t.mean(), "var": t.var(), "std": t.std(), "max": t.max(),
               "prod": t.prod(), "exp": t.exp(), "matmul": t @ t, "add_int": t + 1, "add_float": t + 1.5,
               "add_half": t + Tensor([1.0], dtype=dtypes.half), "add_bf16": t + Tensor([1.0], dtype=dtypes.bfloat16),
               "sum_float": t.sum(dtype=dtypes.float32), "cumprod": t.cumprod(0), "cummax": t.cummax(0)[0]}
    # tinygrad prints dtypes by their short names (dtypes.float, dtypes.half)
    short = {dtypes.float32: "dtypes.float", dtypes.float16: "dtypes.half"}
    assert {k: short.get(v.dtype, repr(v.dtype)) for k, v in results.items()} == FIXTURE["dtypes"][name]

@pytest.mark.parametrize("device", DEVICES)
def test_reductions_accumulate_in_float32_and_round_once(device):
    values = [1.0, 2.5, -3.25, 0.1, 448.0, 7.0]
    t = Tensor(values, device=device).cast(dtypes.fp8e4m3)
    held = [fp8_bits_to_float(float_to_fp8_bits(v, dtypes.fp8e4m3), dtypes.fp8e4m3) for v in values]
    round8 = lambda v: fp8_bits_to_float(float_to_fp8_bits(v, dtypes.fp8e4m3), dtypes.fp8e4m3)
    f32 = lambda v: truncate_float(v, dtypes.float32)
    running, cumulative = 0.0, []
    for v in held:
        running = f32(running + v)
        cumulative.append(round8(running))
    assert t.sum().item() == round8(running)
    assert t.cumsum().tolist() == cumulative
    assert t.max().item() == 448.0 and t.min().item() == -3.25
    # softmax: computed in float32, rounded once (its largest input gets e**0 / sum ~ 1)
    soft = t.softmax()
    assert soft.dtype == dtypes.fp8e4m3 and soft.tolist()[4] == 1.0 and sum(soft.tolist()) == 1.0

@pytest.mark.parametrize("device", DEVICES)
def test_accumulator_keeps_fp8_inputs_exact(device):
    # sums of many small fp8 values: a float32 accumulator is exact here, one rounding at the end
    t = Tensor.full((64,), 0.125, device=device).cast(dtypes.fp8e5m2)
    assert t.sum().item() == 8.0 and t.sum().dtype == dtypes.fp8e5m2

@pytest.mark.parametrize("device", DEVICES)
def test_casts_to_and_from_other_dtypes(device):
    t = Tensor([1.0, -2.75, 300.0, 0.0], device=device).cast(dtypes.fp8e5m2)
    assert t.tolist() == [1.0, -3.0, 320.0, 0.0]
    assert t.cast(dtypes.int32).tolist() == [1, -3, 320, 0]
    assert t.cast(dtypes.bool).tolist() == [True, True, True, False]
    assert t.cast(dtypes.float16).tolist() == [1.0, -3.0, 320.0, 0.0]
    assert t.cast(dtypes.fp8e4m3).tolist() == [1.0, -3.0, 320.0, 0.0]
    assert Tensor([3, -7, 1000], device=device).cast(dtypes.fp8e4m3).tolist() == [3.0, -7.0, 448.0]
    assert Tensor([True, False], device=device).cast(dtypes.fp8e4m3fnuz).tolist() == [1.0, 0.0]
    assert Tensor([0.1], dtype=dtypes.float64, device=device).cast(dtypes.fp8e4m3).tolist() == [0.1015625]
    # numpy and Python lists see float32 values
    assert t.numpy().dtype == np.float32

@pytest.mark.parametrize("device", DEVICES)
def test_constants_round_like_kernels(device):
    # a constant is rounded when it is made (truncate_float), the same value a kernel's cast gives
    for name in FP8_NAMES:
        dtype = getattr(dtypes, name)
        folded = Tensor.full((3,), 500.0, device=device, dtype=dtype).tolist()
        computed = (Tensor([250.0, 250.0, 250.0], device=device) * 2).cast(dtype).tolist()
        assert folded == computed == [fp8_bits_to_float(float_to_fp8_bits(500.0, dtype), dtype)] * 3

@pytest.mark.parametrize("device", DEVICES)
def test_nan_and_inf(device):
    t = Tensor([math.inf, -math.inf, math.nan], device=device)
    assert t.cast(dtypes.fp8e5m2).bitcast(dtypes.uint8).tolist()[:2] == [0x7C, 0xFC]
    assert t.cast(dtypes.fp8e4m3).bitcast(dtypes.uint8).tolist() == [0x7F, 0x7F, 0x7F]   # no infinity: NaN (unsigned, as tinygrad writes it)
    assert t.cast(dtypes.fp8e4m3fnuz).bitcast(dtypes.uint8).tolist() == [0x80] * 3        # the one NaN
    # arithmetic that overflows float32 gives NaN (e4m3) or inf (e5m2), as the cast of inf does
    big = Tensor([448.0], device=device).cast(dtypes.fp8e4m3)
    assert math.isnan((big * big).exp().item())
    assert (Tensor([57344.0], device=device).cast(dtypes.fp8e5m2).exp().item()) == math.inf

def test_fnuz_has_no_negative_zero():
    t = Tensor([-0.0, -1e-9, 1e-9]).cast(dtypes.fp8e4m3fnuz)
    assert t.bitcast(dtypes.uint8).tolist() == [0, 0, 0]
    assert Tensor([-0.0]).cast(dtypes.fp8e4m3).bitcast(dtypes.uint8).tolist() == [0x80]

def test_grad_through_fp8_cast():
    x = Tensor([1.0, 2.0, 3.0], requires_grad=True)
    (x.cast(dtypes.fp8e4m3) * 2).cast(dtypes.float32).sum().backward()
    assert x.grad.tolist() == [2.0, 2.0, 2.0]

def test_is_dtype_supported():
    for name in FP8_NAMES:
        assert all(is_dtype_supported(getattr(dtypes, name), d) for d in ("CPU", "PYTHON", "LLVM"))
        assert not is_dtype_supported(getattr(dtypes, name), "NPY")
    assert not is_dtype_supported(dtypes.index) and not is_dtype_supported(dtypes.void)
