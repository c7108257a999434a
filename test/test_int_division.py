"""Integer division and remainder at the traps of C: ``MIN / -1`` and division by zero.

x86 raises SIGFPE for both, which kills the process, so every computation runs in a subprocess:
a crash fails the test instead of ending pytest. fusegrad gives numpy's answers everywhere (the
CPU kernels, the PYTHON device and constant folding): ``MIN // -1 == MIN`` (two's complement
wrap), ``MIN % -1 == 0``, and ``x // 0 == x % 0 == 0`` (PyTorch raises for the latter; a kernel
can't raise, so it is defined as numpy defines it).
"""
import json, os, subprocess, sys
import numpy as np
import pytest
from fusegrad import dtypes
from fusegrad.dtype import to_np_dtype
from fusegrad.uop.alu import exec_alu
from fusegrad.uop.ops import Ops

SIGNED = ("int8", "int16", "int32", "int64")
UNSIGNED = ("uint8", "uint16", "uint32", "uint64")
OPS = ("floordiv", "remainder", "idiv", "fmod")

def operands(name: str) -> tuple[list[int], list[int]]:
    """Dividends and divisors that hit every trap, plus ordinary pairs of every sign."""
    dtype = getattr(dtypes, name)
    lo, hi = int(dtypes.min(dtype)), int(dtypes.max(dtype))
    if dtypes.is_unsigned(dtype): return [hi, 7, 0, 5, hi, 9], [0, 0, 0, 2, hi, 4]
    return [lo, lo, lo, 7, -7, 0, hi, -7, 7, lo + 1], [-1, 0, 1, 0, 0, 0, -1, 2, -2, -1]

def numpy_reference(op: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        if op == "floordiv": return np.floor_divide(a, b)
        if op == "remainder": return np.remainder(a, b)
        if op == "fmod": return np.fmod(a, b)
    # truncating division (C's, torch's rounding_mode="trunc"): numpy has none, so from Python ints
    bits = 8 * a.dtype.itemsize
    def trunc_div(x: int, y: int) -> int:
        if y == 0: return 0
        q = abs(x) // abs(y) * (1 if (x < 0) == (y < 0) else -1)
        return q if np.issubdtype(a.dtype, np.unsignedinteger) else (q + 2**(bits - 1)) % 2**bits - 2**(bits - 1)
    return np.array([trunc_div(int(x), int(y)) for x, y in zip(a, b)], a.dtype)

# the script each subprocess runs: every dtype and op, with tensors, a Python scalar divisor and
# constants (folded at schedule time), printed as JSON
SCRIPT = r"""
import json, sys
from fusegrad import Tensor, dtypes
cases = json.loads(sys.argv[1])
def apply(op, a, b):
    if op == "floordiv": return a // b
    if op == "remainder": return a % b
    if op == "idiv": return a.idiv(b) if isinstance(b, Tensor) else a.div(b, rounding_mode="trunc")
    return a.fmod(b)
out = {}
for name, (xs, ys) in cases.items():
    dtype = getattr(dtypes, name)
    a, b = Tensor(xs, dtype=dtype), Tensor(ys, dtype=dtype)
    for op in ("floordiv", "remainder", "idiv", "fmod"):
        out[f"{name} {op} tensor"] = apply(op, a, b).tolist()
        for y in sorted(set(ys)):
            if y in (0, -1): out[f"{name} {op} scalar {y}"] = apply(op, a, Tensor(y, dtype=dtype)).tolist()
        out[f"{name} {op} const"] = [apply(op, Tensor.full((1,), x, dtype=dtype), Tensor.full((1,), y, dtype=dtype)).item()
                                     for x, y in zip(xs, ys)]
print(json.dumps(out))
"""

@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_division_traps_give_numpy_results(device):
    cases = {name: operands(name) for name in SIGNED + UNSIGNED}
    result = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(cases)], capture_output=True, text=True,
                            env={**os.environ, "DEV": device}, timeout=600)
    assert result.returncode == 0, f"the {device} run died (return code {result.returncode}): {result.stderr[-2000:]}"
    got = json.loads(result.stdout.strip().splitlines()[-1])
    for name, (xs, ys) in cases.items():
        npdt = to_np_dtype(getattr(dtypes, name))
        a, b = np.array(xs, npdt), np.array(ys, npdt)
        for op in OPS:
            want = numpy_reference(op, a, b)
            assert got[f"{name} {op} tensor"] == want.tolist(), (name, op)
            assert got[f"{name} {op} const"] == want.tolist(), (name, op, "constant folding")
            for y in sorted(set(ys)):
                if y in (0, -1):
                    want_scalar = numpy_reference(op, a, np.full_like(a, y))
                    assert got[f"{name} {op} scalar {y}"] == want_scalar.tolist(), (name, op, y)

@pytest.mark.parametrize("name", SIGNED + UNSIGNED)
def test_exec_alu_division_semantics(name):
    # the reference semantics of IDIV / MOD (truncating, C's sign rule) at the traps
    dtype = getattr(dtypes, name)
    lo = int(dtypes.min(dtype))
    assert exec_alu(Ops.IDIV, dtype, (7, 0)) == 0 and exec_alu(Ops.MOD, dtype, (7, 0)) == 0
    if not dtypes.is_unsigned(dtype):
        assert exec_alu(Ops.IDIV, dtype, (lo, -1)) == lo
        assert exec_alu(Ops.MOD, dtype, (lo, -1)) == 0
        assert exec_alu(Ops.IDIV, dtype, (-7, 2)) == -3 and exec_alu(Ops.MOD, dtype, (-7, 2)) == -1

def test_rendered_guard_is_branch_free_select():
    # the guard is a select on the divisor, not a conditional around the division
    from fusegrad.renderer.cstyle import CStyleLanguage
    from fusegrad.uop.ops import UOp
    a = UOp(Ops.DEFINE_VAR, dtypes.int32, (), ("a", -2**31, 2**31 - 1))
    b = UOp(Ops.DEFINE_VAR, dtypes.int32, (), ("b", -2**31, 2**31 - 1))
    text = CStyleLanguage().render_int_division(UOp(Ops.IDIV, dtypes.int32, (a, b)), "a", "b")
    assert text.count("/") == 1 and "?1:b" in text and "?0:" not in text
    three = UOp.const(dtypes.int32, 3)
    assert CStyleLanguage().render_int_division(UOp(Ops.MOD, dtypes.int32, (a, three)), "a", "3") == "(a%3)"
