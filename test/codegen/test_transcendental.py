"""EXP2/LOG2/SIN decomposed into plain arithmetic (fusegrad/codegen/transcendental.py).

The graphs are evaluated by a small numpy interpreter in the exact dtypes (C-style integer ops,
bitcast through ``.view``) and compared in ulps with numpy's float64 (float32 results) or long
double (float64 results) math rounded to the dtype. One test runs the rewrite end to end through
the real kernel pipeline on the CPU (gcc, which may fuse a*b+c) and PYTHON devices.
"""
import math
import numpy as np
import pytest
from fusegrad.dtype import DType, dtypes
from fusegrad.uop.ops import UOp, Ops, graph_rewrite
from fusegrad.uop.symbolic import symbolic
from fusegrad.codegen.transcendental import xexp, xexp2, xlog2, xsin, pm_transcendental, decompose_transcendentals

NP = {dtypes.float16: np.float16, dtypes.float32: np.float32, dtypes.float64: np.float64, dtypes.int32: np.int32,
      dtypes.int64: np.int64, dtypes.uint32: np.uint32, dtypes.uint64: np.uint64, dtypes.bool: np.bool_}

# ---------------------------------------------------------------- a numpy interpreter for UOp graphs

def _float_to_int(x: np.ndarray, npdt) -> np.ndarray:
    # C leaves out-of-range float->int casts undefined: the graphs must never produce one
    assert np.all(np.isfinite(x)) and np.all(np.abs(x) < 2.0**31), "float -> int cast out of range"
    return np.trunc(x).astype(npdt)

from fusegrad.runtime.ops_python import fma_float32

def _overflowed(op: Ops, s: list, r: np.ndarray, dt) -> bool:
    """Did a wrapped signed integer op overflow? (the sign rules of two's complement)"""
    if op is Ops.ADD: return bool(np.any(((s[0] ^ r) & (s[1] ^ r)) < 0))
    if op is Ops.SUB: return bool(np.any(((s[0] ^ s[1]) & (s[0] ^ r)) < 0))
    if op is Ops.NEG: return bool(np.any(s[0] == np.iinfo(dt).min))
    return bool(np.any(np.abs(s[0].astype(np.float64) * s[1].astype(np.float64)) >= 0.5 * 2.0 ** (8 * np.dtype(dt).itemsize)))

def evaluate(root: UOp, inp: UOp, value: np.ndarray) -> np.ndarray:
    vals: dict[UOp, np.ndarray] = {}
    with np.errstate(all="ignore"):
        for u in root.toposort:
            dt = NP.get(u.dtype)
            if u is inp: vals[u] = value; continue
            s = [vals[x] for x in u.src]
            op = u.op
            if op is Ops.CONST: r = np.full(value.shape, u.arg, dtype=dt)
            elif op is Ops.CAST:
                r = _float_to_int(s[0], dt) if np.issubdtype(dt, np.integer) and np.issubdtype(s[0].dtype, np.floating) \
                    else s[0].astype(dt)
            elif op is Ops.BITCAST: r = s[0].view(dt)
            elif op is Ops.ADD: r = s[0] + s[1]
            elif op is Ops.SUB: r = s[0] - s[1]
            elif op is Ops.MUL: r = s[0] * s[1]
            elif op is Ops.MULACC: r = fma_float32(*s) if dt == np.float32 else s[0] * s[1] + s[2]
            elif op is Ops.FDIV: r = s[0] / s[1]
            elif op is Ops.NEG: r = -s[0]
            elif op is Ops.TRUNC: r = np.trunc(s[0])
            elif op is Ops.MAX: r = np.where(np.isnan(s[0]) | np.isnan(s[1]), np.nan, np.maximum(s[0], s[1]))
            elif op is Ops.CMPLT: r = s[0] < s[1]
            elif op is Ops.CMPNE: r = s[0] != s[1]
            elif op is Ops.CMPEQ: r = s[0] == s[1]
            elif op is Ops.WHERE: r = np.where(s[0], s[1], s[2])
            elif op is Ops.AND: r = s[0] & s[1]
            elif op is Ops.OR: r = s[0] | s[1]
            elif op is Ops.XOR: r = s[0] ^ s[1]
            elif op is Ops.SHL:
                assert np.all(s[0] >= 0) and np.all(s[1] >= 0), "left shift of a negative int (undefined in C)"
                r = s[0] << s[1]
                assert np.all(r >= 0), "signed overflow in a left shift"
            elif op is Ops.SHR:
                assert np.all(s[0] >= 0), "right shift of a negative int (implementation defined in C)"
                r = s[0] >> s[1]
            else: raise NotImplementedError(f"the test interpreter doesn't know {op}")
            if np.issubdtype(dt, np.signedinteger) and op in (Ops.ADD, Ops.SUB, Ops.MUL, Ops.NEG):
                assert not _overflowed(op, s, r, dt), "signed integer overflow (undefined in C)"
            vals[u] = np.asarray(r, dtype=dt)
    return vals[root]

def run_graph(op: Ops, x: np.ndarray, dtype: DType, simplify: bool = False) -> np.ndarray:
    """op (EXP2/LOG2/SIN) of x, decomposed and run by the interpreter (after `symbolic` if asked)."""
    inp = UOp(Ops.DEFINE_VAR, dtype, arg=("x", 0, 1))   # a placeholder the interpreter replaces by x
    out = decompose_transcendentals(UOp(op, dtype, (inp,)))
    assert not any(u.op in (Ops.EXP2, Ops.LOG2, Ops.SIN) for u in out.toposort)
    if simplify: out = graph_rewrite(out, symbolic)
    return evaluate(out, inp, x.astype(NP[dtype]))

# ---------------------------------------------------------------- ulp distance

def ulp_error(got: np.ndarray, want: np.ndarray, npdt) -> np.ndarray:
    """|got - want| in ulps of want's dtype (want already rounded to it); NaN must match NaN, infinities
    and signed zeros must match exactly. Distance counted on the integer line of the float bits."""
    got, want = got.astype(npdt), want.astype(npdt)
    assert np.array_equal(np.isnan(got), np.isnan(want)), "NaN mismatch"
    ok = ~np.isnan(want)
    g, w = got[ok], want[ok]
    assert np.array_equal(g[np.isinf(w)], w[np.isinf(w)]), "infinity mismatch"
    zero = w == 0
    assert np.array_equal(np.signbit(g[zero]), np.signbit(w[zero])) and np.all(g[zero] == 0), "zero mismatch"
    idt = {np.float16: np.int16, np.float32: np.int32, np.float64: np.int64}[npdt]
    def ordered(a):  # the float bits as integers in the order of the floats, -0.0 and 0.0 both 0
        i = a.view(idt).astype(np.int64)
        return np.where(i < 0, np.int64(np.iinfo(idt).min) - i, i)
    gi, wi = ordered(g), ordered(w)
    # a difference that would overflow int64 is huge anyway: take it in float64 then
    return np.where((gi < 0) != (wi < 0), np.abs(gi.astype(np.float64) - wi.astype(np.float64)),
                    np.abs(gi - wi).astype(np.float64))

# ---------------------------------------------------------------- references and inputs

# float64 results are checked against long double math where numpy has a wider long double
_WIDE = np.longdouble if np.finfo(np.longdouble).nmant > 52 else np.float64
_NP_FN = {Ops.EXP2: np.exp2, Ops.LOG2: np.log2, Ops.SIN: np.sin, Ops.COS: np.cos}
# the targets: float32 <= 2 ulp, float64 <= 4 ulp (measured: <= 1 for all three), float16 (computed
# in float32, rounded once) <= 1
MAX_ULP = {dtypes.float16: 1, dtypes.float32: 2, dtypes.float64: 4}

def reference(op: Ops, x: np.ndarray, npdt) -> np.ndarray:
    with np.errstate(all="ignore"):
        return _NP_FN[op](x.astype(_WIDE if npdt == np.float64 else np.float64)).astype(npdt)

def max_ulp(op: Ops, dtype: DType, x: np.ndarray, simplify: bool = False) -> float:
    npdt = NP[dtype]
    x = x.astype(npdt)
    return float(ulp_error(run_graph(op, x, dtype, simplify), reference(op, x, npdt), npdt).max())

def positive_bit_patterns(rng, dtype: DType, n: int) -> np.ndarray:
    """Random non-negative floats of every binade, subnormals included (uniform over the bit patterns)."""
    npdt = NP[dtype]
    idt = {np.float16: np.uint16, np.float32: np.uint32, np.float64: np.uint64}[npdt]
    top = {np.float16: 0x7C00, np.float32: 0x7F800000, np.float64: 0x7FF0000000000000}[npdt]
    return rng.integers(0, top, n, dtype=idt, endpoint=False).view(npdt)

SPECIALS = [0.0, -0.0, math.inf, -math.inf, math.nan, 1.0, -1.0, 0.5, 2.0, 1e-30, -1e-30, 3e38, -3e38]

def with_specials(x: np.ndarray, dtype: DType, limit: float = math.inf) -> np.ndarray:
    """x with the special values in front (the finite ones only up to |limit|)."""
    info = np.finfo(NP[dtype])
    extra = np.array(SPECIALS + [info.tiny, info.smallest_subnormal, -info.smallest_subnormal, info.max, -info.max], np.float64)
    extra = extra[~(np.isfinite(extra) & (np.abs(extra) > limit))]
    with np.errstate(over="ignore"):
        return np.concatenate([extra.astype(NP[dtype]), x.astype(NP[dtype])])

N = 100_000

# ---------------------------------------------------------------- accuracy

@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.float64, dtypes.float16])
def test_exp2_accuracy(dtype, rng):
    lo, hi = (-1080, 1030) if dtype == dtypes.float64 else (-150, 130) if dtype == dtypes.float32 else (-26, 17)
    assert max_ulp(Ops.EXP2, dtype, with_specials(rng.uniform(lo, hi, N), dtype)) <= MAX_ULP[dtype]
    assert max_ulp(Ops.EXP2, dtype, rng.uniform(-1, 1, N)) <= MAX_ULP[dtype]
    # the subnormal range and the edges of overflow / underflow, densely
    edges = (-1074, -1022, 1024) if dtype == dtypes.float64 else (-149, -126, 128) if dtype == dtypes.float32 else (-24, -14, 16)
    for e in edges: assert max_ulp(Ops.EXP2, dtype, e + rng.uniform(-2, 2, N // 10)) <= MAX_ULP[dtype]

@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.float64, dtypes.float16])
def test_log2_accuracy(dtype, rng):
    # every positive binade (subnormals to the largest float), near 1, and the specials (negatives too)
    assert max_ulp(Ops.LOG2, dtype, with_specials(positive_bit_patterns(rng, dtype, N), dtype)) <= MAX_ULP[dtype]
    assert max_ulp(Ops.LOG2, dtype, rng.uniform(0.5, 2, N)) <= MAX_ULP[dtype]
    assert max_ulp(Ops.LOG2, dtype, 1 + rng.uniform(-1e-3, 1e-3, N)) <= MAX_ULP[dtype]

@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.float64, dtypes.float16])
def test_sin_accuracy(dtype, rng):
    wide = {dtypes.float16: 6e4, dtypes.float32: 1e5, dtypes.float64: 1e9}[dtype]
    assert max_ulp(Ops.SIN, dtype, with_specials(rng.uniform(-1e4, 1e4, N), dtype, 1e4)) <= MAX_ULP[dtype]
    assert max_ulp(Ops.SIN, dtype, rng.uniform(-wide, wide, N)) <= MAX_ULP[dtype]
    assert max_ulp(Ops.SIN, dtype, rng.uniform(-4, 4, N)) <= MAX_ULP[dtype]
    assert max_ulp(Ops.SIN, dtype, np.exp2(rng.uniform(-30, 0, N // 10))) <= MAX_ULP[dtype]

def test_sin_float32_near_multiples_of_pi_over_2():
    # the floats closest to k*pi/2 for every k up to 1e5 (|x - k*pi/2| down to 4e-9): the reduction must
    # not lose the tiny remainder
    k = np.arange(1, 63663, dtype=np.float64)
    x0 = (k * (np.pi / 2)).astype(np.float32)
    x = np.concatenate([x0, np.nextafter(x0, np.float32(np.inf)), np.nextafter(x0, np.float32(-np.inf))])
    assert max_ulp(Ops.SIN, dtypes.float32, np.concatenate([x, -x])) <= MAX_ULP[dtypes.float32]

def test_sin_float32_around_the_reduction_switch(rng):
    # up to pi/4 x is used as is, above it Payne-Hanek reduces |x|: the floats on both sides of the
    # switch, and the small magnitudes Payne-Hanek handles (its window reaches down to 2**-16)
    pio4 = np.float32(np.pi / 4)
    steps = np.arange(-3000, 3000).astype(np.float32)
    x = np.concatenate([pio4 + steps * np.spacing(pio4), np.float32(np.pi / 2) + steps * np.spacing(np.float32(np.pi / 2)),
                        np.exp2(rng.uniform(-20, 2, N // 10)).astype(np.float32)])
    assert max_ulp(Ops.SIN, dtypes.float32, np.concatenate([x, -x])) <= MAX_ULP[dtypes.float32]

def test_sin_float32_has_one_range_reduction():
    """Every lane runs the whole graph (no branches), so its size is the cost: one reduction (Payne-Hanek
    from pi/4 on), not Cody-Waite for the usual range plus Payne-Hanek for huge x (320 uops, 2.3x the
    time of Cody-Waite alone)."""
    x = UOp(Ops.DEFINE_VAR, dtypes.float32, arg=("x", 0, 1))
    graph = xsin(x)
    assert sum(u.op is not Ops.CONST for u in graph.toposort) < 240

def test_bounded_float32_sin_and_cos(rng):
    """xsin(bounded=True), for callers that know |x| < 2**15 (randn's angles): Cody-Waite alone, no Payne-Hanek, as
    accurate there (sin and cos, signs and zeros included) with about half the graph (112 ops vs 215)."""
    x = np.concatenate([np.array([0.0, -0.0, 1e-30, -1e-30, math.pi / 4, -math.pi / 2]), rng.uniform(0, 2 * math.pi, N),
                        rng.uniform(-3e4, 3e4, N), np.exp2(rng.uniform(-30, 0, N // 10))]).astype(np.float32)
    inp = UOp(Ops.DEFINE_VAR, dtypes.float32, arg=("x", 0, 1))
    for quarter_turns, fn in ((0, np.sin), (1, np.cos)):
        got = evaluate(xsin(inp, quarter_turns, bounded=True), inp, x)
        assert ulp_error(got, fn(x.astype(np.float64)).astype(np.float32), np.float32).max() <= MAX_ULP[dtypes.float32]
    def size(graph: UOp) -> int: return sum(u.op is not Ops.CONST for u in graph.toposort)
    assert size(xsin(inp, 1, bounded=True)) < 0.6 * size(xsin(inp, 1))

def test_cos_op_expands_to_sins_reduction_a_quarter_turn_on(rng):
    """COS(x) is xsin(x, 1): SIN's exact reduction with the quadrant advanced by one, so the same x shares its nodes with
    SIN(x) (tan's numerator and denominator); a COS whose arg bounds |x| below 2**15 takes the cheaper reduction."""
    inp = UOp(Ops.DEFINE_VAR, dtypes.float32, arg=("x", 0, 1))
    assert decompose_transcendentals(UOp(Ops.COS, dtypes.float32, (inp,))) is xsin(inp, 1)
    assert decompose_transcendentals(UOp(Ops.COS, dtypes.float32, (inp,), 2 * math.pi)) is xsin(inp, 1, bounded=True)
    assert decompose_transcendentals(UOp(Ops.COS, dtypes.float32, (inp,), 1e6)) is xsin(inp, 1)   # (a bound too big to use)
    # float16 computes in float32 and rounds once, as SIN does
    half = UOp(Ops.DEFINE_VAR, dtypes.float16, arg=("h", 0, 1))
    assert decompose_transcendentals(UOp(Ops.COS, dtypes.float16, (half,))) is xsin(half.cast(dtypes.float32), 1).cast(dtypes.float16)
    x = rng.uniform(-1e4, 1e4, N).astype(np.float32)
    got = evaluate(decompose_transcendentals(UOp(Ops.COS, dtypes.float32, (inp,))), inp, x)
    assert ulp_error(got, np.cos(x.astype(np.float64)).astype(np.float32), np.float32).max() <= MAX_ULP[dtypes.float32]

def test_sin_float64_near_multiples_of_pi_over_2():
    # doubles next to k*pi/2 from a three-part pi/2 (exact enough to land on the nearest double)
    p1, p2 = 1.5707963267948966, 6.123233995736766e-17
    k = np.concatenate([np.arange(1, 5000), np.random.default_rng(1).integers(5000, 6 * 10**8, 5000)]).astype(np.float64)
    x0 = k * p1 + k * p2
    x = np.concatenate([x0, np.nextafter(x0, np.inf), np.nextafter(x0, -np.inf)])
    assert max_ulp(Ops.SIN, dtypes.float64, np.concatenate([x, -x])) <= MAX_ULP[dtypes.float64]

def test_sin_far_outside_the_reduction_range_stays_bounded(rng):
    for dtype, big in ((dtypes.float32, 3e38), (dtypes.float64, 1e300)):
        x = rng.uniform(-1, 1, 10_000) * np.logspace(0, np.log10(big), 10_000)
        got = run_graph(Ops.SIN, x.astype(NP[dtype]), dtype)
        assert np.all(np.isfinite(got)) and np.all(np.abs(got) <= 1)

# e**x: the front end's EXP2(x * log2 e), recognized and computed as e**x (xexp)

LOG2E = {dtypes.float32: float(np.float32(1 / math.log(2))), dtypes.float64: 1 / math.log(2)}

def exp_pattern(dtype: DType, inp: UOp, constant: float | None = None) -> UOp:
    """EXP2(inp * c), c = log2 e as the dtype holds it unless given (what Tensor.exp builds)."""
    return UOp(Ops.EXP2, dtype, (inp * UOp.const(dtype, LOG2E[dtype] if constant is None else constant),))

def run_exp(x: np.ndarray, dtype: DType, simplify: bool = False) -> np.ndarray:
    inp = UOp(Ops.DEFINE_VAR, dtype, arg=("x", 0, 1))
    out = decompose_transcendentals(exp_pattern(dtype, inp))
    assert not any(u.op is Ops.EXP2 for u in out.toposort)
    if simplify: out = graph_rewrite(out, symbolic)
    return evaluate(out, inp, x.astype(NP[dtype]))

def exp_ulp(dtype: DType, x: np.ndarray) -> float:
    npdt = NP[dtype]
    x = x.astype(npdt)
    with np.errstate(all="ignore"):
        want = np.exp(x.astype(_WIDE if npdt == np.float64 else np.float64)).astype(npdt)
    return float(ulp_error(run_exp(x, dtype), want, npdt).max())

@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.float64])
def test_exp_accuracy(dtype, rng):
    """<= 1 ulp everywhere (EXP2 of the rounded x * log2 e was 52 ulp off at x = 70 in float32)."""
    lo, hi, under, over = (-110, 90, -103.97, 88.72) if dtype == dtypes.float32 else (-760, 720, -745.13, 709.78)
    assert exp_ulp(dtype, with_specials(rng.uniform(lo, hi, N), dtype)) <= 1
    assert exp_ulp(dtype, rng.uniform(-1, 1, N)) <= 1
    assert exp_ulp(dtype, np.exp2(rng.uniform(-40, 0, N // 10)) * rng.choice([-1, 1], N // 10)) <= 1
    # subnormal results, the edge of underflow and of overflow, densely
    smallest_normal = -87.34 if dtype == dtypes.float32 else -708.4
    for edge in (under, smallest_normal, over): assert exp_ulp(dtype, edge + rng.uniform(-1, 1, N // 10)) <= 1

@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.float64])
def test_exp_special_values(dtype):
    inf, nan = math.inf, math.nan
    x = np.array([0.0, -0.0, inf, -inf, nan, 1e30, -1e30, 2000.0, -2000.0, 1.0], np.float64).astype(NP[dtype])
    got = run_exp(x, dtype)
    np.testing.assert_array_equal(got[:9], np.array([1, 1, inf, 0, nan, inf, 0, inf, 0], NP[dtype]))
    assert got[-1] == NP[dtype](math.e)

def test_exp_only_the_log2e_pattern():
    """xexp replaces EXP2(x * log2 e) only; exp_only (native renderers) rewrites nothing else."""
    f32 = dtypes.float32
    inp = UOp(Ops.DEFINE_VAR, f32, arg=("x", 0, 1))
    assert decompose_transcendentals(exp_pattern(f32, inp)) is xexp(inp)
    assert decompose_transcendentals(exp_pattern(f32, inp, 1.5)) is xexp2(inp * UOp.const(f32, 1.5))
    other = UOp(Ops.SINK, dtypes.void, (exp_pattern(f32, inp, 1.5), UOp(Ops.SIN, f32, (inp,)), UOp(Ops.LOG2, f32, (inp,))))
    assert decompose_transcendentals(other, exp_only=True) is other
    assert decompose_transcendentals(exp_pattern(f32, inp), exp_only=True) is xexp(inp)
    f4 = f32.vec(4)
    vec = exp_pattern(f4, UOp(Ops.DEFINE_VAR, f4, arg=("v", 0, 1)), LOG2E[f32])
    assert decompose_transcendentals(vec, exp_only=True) is vec

def test_exp_graph_is_basic_and_survives_symbolic(rng):
    # (MULACC: the polynomial's Horner steps, fused on every device)
    allowed = {Ops.DEFINE_VAR, Ops.CONST, Ops.ADD, Ops.NEG, Ops.MUL, Ops.MULACC, Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ, Ops.WHERE,
               Ops.AND, Ops.OR, Ops.XOR, Ops.SHL, Ops.SHR, Ops.BITCAST}
    for dtype in (dtypes.float32, dtypes.float64):
        out = xexp(UOp(Ops.DEFINE_VAR, dtype, arg=("x", 0, 1)))
        assert {u.op for u in out.toposort} <= allowed, {u.op for u in out.toposort} - allowed
        x = with_specials(rng.uniform(-800, 800, 5000), dtype)
        assert np.array_equal(run_exp(x, dtype).view(np.uint8), run_exp(x, dtype, simplify=True).view(np.uint8))

# ---------------------------------------------------------------- special values, exactly

def _exact(op: Ops, dtype: DType, pairs):
    x = np.array([a for a, _ in pairs], np.float64).astype(NP[dtype])
    got = run_graph(op, x, dtype)
    for xi, g, (_, want) in zip(x, got, pairs):
        assert (math.isnan(g) and math.isnan(want)) or (g == want and math.copysign(1, g) == math.copysign(1, want)), \
            f"{op}({xi!r}) = {g!r}, want {want!r}"

@pytest.mark.parametrize("dtype", [dtypes.float16, dtypes.float32, dtypes.float64])
def test_special_values(dtype):
    inf, nan = math.inf, math.nan
    tiny = float(np.finfo(NP[dtype]).smallest_subnormal)
    emin = {dtypes.float16: -24, dtypes.float32: -149, dtypes.float64: -1074}[dtype]
    emax = {dtypes.float16: 16, dtypes.float32: 128, dtypes.float64: 1024}[dtype]
    _exact(Ops.EXP2, dtype, [(0.0, 1.0), (-0.0, 1.0), (inf, inf), (-inf, 0.0), (nan, nan), (1.0, 2.0), (-1.0, 0.5), (10.0, 1024.0),
                             (emin, tiny), (emin - 1, 0.0), (emax, inf), (-2000.0, 0.0), (2000.0, inf), (-3.0, 0.125)])
    _exact(Ops.LOG2, dtype, [(0.0, -inf), (-0.0, -inf), (inf, inf), (-inf, nan), (nan, nan), (-1.0, nan), (-tiny, nan),
                             (1.0, 0.0), (2.0, 1.0), (0.5, -1.0), (1024.0, 10.0), (tiny, emin), (2.0 ** (emax - 1), emax - 1)])
    _exact(Ops.SIN, dtype, [(0.0, 0.0), (-0.0, -0.0), (inf, nan), (-inf, nan), (nan, nan), (tiny, tiny), (-tiny, -tiny)])

# ---------------------------------------------------------------- the graphs and the rewrite

def test_graphs_use_only_basic_ops():
    allowed = {Ops.DEFINE_VAR, Ops.CONST, Ops.ADD, Ops.NEG, Ops.MUL, Ops.MULACC, Ops.FDIV, Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ,
               Ops.WHERE, Ops.AND, Ops.OR, Ops.XOR, Ops.SHL, Ops.SHR, Ops.CAST, Ops.BITCAST}
    for dtype in (dtypes.float16, dtypes.float32, dtypes.float64):
        inp = UOp(Ops.DEFINE_VAR, dtype, arg=("x", 0, 1))
        for op in (Ops.EXP2, Ops.LOG2, Ops.SIN):
            out = decompose_transcendentals(UOp(op, dtype, (inp,)))
            assert out.dtype == dtype
            assert {u.op for u in out.toposort} <= allowed, {u.op for u in out.toposort} - allowed
            # float <-> int conversions would be undefined for big values in C: the graphs have none
            assert not any(u.op is Ops.CAST and dtypes.is_float(u.dtype) != dtypes.is_float(u.src[0].dtype) for u in out.toposort)

def test_symbolic_keeps_the_results(rng):
    # the lead may run `symbolic` after this rewrite: it must not reassociate the float tricks away
    for dtype in (dtypes.float32, dtypes.float64):
        for op, x in ((Ops.EXP2, rng.uniform(-160, 140, 5000)), (Ops.LOG2, positive_bit_patterns(rng, dtype, 5000)),
                      (Ops.SIN, rng.uniform(-1e5, 1e5, 5000))):
            x = with_specials(x, dtype)
            a, b = run_graph(op, x, dtype), run_graph(op, x, dtype, simplify=True)
            assert np.array_equal(a.view(np.uint8), b.view(np.uint8))

def test_rewrite_leaves_other_uops_alone():
    f4 = dtypes.float32.vec(4)
    vec = UOp(Ops.EXP2, f4, (UOp(Ops.DEFINE_VAR, f4, arg=("v", 0, 1)),))
    sqrt = UOp(Ops.SQRT, dtypes.float32, (UOp(Ops.DEFINE_VAR, dtypes.float32, arg=("y", 0, 1)),))
    sink = UOp(Ops.SINK, dtypes.void, (vec, sqrt))
    assert decompose_transcendentals(sink) is sink
    assert graph_rewrite(sink, pm_transcendental) is sink

def test_float16_computes_in_float32():
    inp = UOp(Ops.DEFINE_VAR, dtypes.float16, arg=("x", 0, 1))
    out = decompose_transcendentals(UOp(Ops.SIN, dtypes.float16, (inp,)))
    assert out.op is Ops.CAST and out.src[0].dtype == dtypes.float32
    assert any(u.op is Ops.CAST and u.src[0] is inp and u.dtype == dtypes.float32 for u in out.toposort)

def test_builders_match_the_rewrite():
    inp = UOp(Ops.DEFINE_VAR, dtypes.float32, arg=("x", 0, 1))
    for fn, op in ((xexp2, Ops.EXP2), (xlog2, Ops.LOG2), (xsin, Ops.SIN)):
        assert fn(inp) is decompose_transcendentals(UOp(op, dtypes.float32, (inp,)))

# ---------------------------------------------------------------- end to end, through the real pipeline

@pytest.mark.parametrize("dev", ["CPU", "PYTHON"])
def test_end_to_end(dev, monkeypatch, rng):
    """Tensor.exp2/log2/sin with the rewrite patched into get_program: simplify, linearize, render,
    compile (gcc, no contraction: -ffp-contract=off) and run."""
    import fusegrad.codegen as codegen
    from fusegrad import Tensor
    from fusegrad.engine import realize
    get_program = codegen.get_program
    monkeypatch.setattr(codegen, "get_program", lambda ast, renderer, opts=None: get_program(decompose_transcendentals(ast), renderer, opts))
    monkeypatch.setattr(realize, "method_cache", {})
    for dtype in (dtypes.float32, dtypes.float64):
        npdt = NP[dtype]
        for op, name, x in ((Ops.EXP2, "exp2", rng.uniform(-155, 135, 3000)), (Ops.LOG2, "log2", positive_bit_patterns(rng, dtype, 3000)),
                            (Ops.SIN, "sin", rng.uniform(-1e4, 1e4, 3000)), (Ops.COS, "cos", rng.uniform(-1e4, 1e4, 3000))):
            x = with_specials(x, dtype, 1e4 if op in (Ops.SIN, Ops.COS) else math.inf)
            got = getattr(Tensor(x, device=dev), name)().numpy()
            assert ulp_error(got, reference(op, x, npdt), npdt).max() <= MAX_ULP[dtype], (dev, dtype, name)

