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
from fusegrad.codegen.transcendental import xexp2, xlog2, xsin, pm_transcendental, decompose_transcendentals

NP = {dtypes.float16: np.float16, dtypes.float32: np.float32, dtypes.float64: np.float64, dtypes.int32: np.int32,
      dtypes.int64: np.int64, dtypes.uint32: np.uint32, dtypes.uint64: np.uint64, dtypes.bool: np.bool_}

# ---------------------------------------------------------------- a numpy interpreter for UOp graphs

def _int_to_float_safe(x: np.ndarray, npdt) -> np.ndarray:
    # C leaves out-of-range float->int casts undefined: the graphs must never produce one
    assert np.all(np.isfinite(x)) and np.all(np.abs(x) < 2.0**31), "float -> int cast out of range"
    return np.trunc(x).astype(npdt)

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
                r = _int_to_float_safe(s[0], dt) if np.issubdtype(dt, np.integer) and np.issubdtype(s[0].dtype, np.floating) \
                    else s[0].astype(dt)
            elif op is Ops.BITCAST: r = s[0].view(dt)
            elif op is Ops.ADD: r = s[0] + s[1]
            elif op is Ops.SUB: r = s[0] - s[1]
            elif op is Ops.MUL: r = s[0] * s[1]
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

def run_graph(fn, x: np.ndarray, dtype: DType, simplify: bool = False) -> np.ndarray:
    inp = UOp(Ops.DEFINE_VAR, dtype, arg=("x", 0, 1))   # a placeholder the interpreter replaces by x
    if fn is None: return x
    out = decompose_transcendentals(UOp(fn, dtype, (inp,)))
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
