"""The reference meaning of every ALU op on Python scalars.

Constant folding uses these, and the tests compare every backend against them. Integer ops wrap
like C (``dtypes.as_const`` truncates to the dtype's width); IDIV truncates toward zero and MOD
takes the dividend's sign, as C does. Where C traps, the result is numpy's: ``MIN // -1`` wraps
to MIN, ``MIN % -1`` is 0, and division or remainder by zero is 0 (the C renderer guards both).

Shifts are defined for every amount, as numpy and PyTorch define them (C leaves an amount that is negative or
not less than the width undefined, and hardware disagrees: x86 takes it mod 32 or 64, LLVM makes it poison).
An amount outside ``[0, width)``, with width the bits of the shifted value's dtype, shifts every bit out:
SHL gives 0, SHR gives the sign fill (-1 for a negative signed value, else 0). The amount is read in its own
dtype (an int8 ``-1`` is negative, a uint8 ``255`` is past the width). Codegen's ``guard_shifts`` makes the
kernels of every backend agree.

>>> exec_alu(Ops.IDIV, dtypes.int32, (-7, 2))
-3
>>> exec_alu(Ops.SHL, dtypes.int32, (1, 32)), exec_alu(Ops.SHR, dtypes.int32, (-8, 40)), exec_alu(Ops.SHR, dtypes.int8, (-8, -1))
(0, -1, -1)
"""
from __future__ import annotations
import math
from typing import Any, Callable
from fusegrad.dtype import DType, dtypes, truncate_float
from fusegrad.uop.ops import Ops, _cdiv, _cmod

def _safe_exp2(x: float) -> float:
    try: return 2.0 ** x
    except OverflowError: return math.inf

def _safe_log2(x: float) -> float:
    if x > 0: return math.log2(x) if not math.isinf(x) else math.inf
    return -math.inf if x == 0 else math.nan

def _safe_sqrt(x: float) -> float: return math.sqrt(x) if x >= 0 else math.nan

def _safe_sin(x: float) -> float: return math.sin(x) if math.isfinite(x) else math.nan
def _safe_cos(x: float) -> float: return math.cos(x) if math.isfinite(x) else math.nan

def _reciprocal(x: float) -> float:
    if x == 0: return math.copysign(math.inf, x)
    return 1.0 / x

def _fdiv(a: float, b: float) -> float:
    if b == 0:
        if a == 0 or math.isnan(a): return math.nan
        return math.copysign(math.inf, a) * math.copysign(1.0, b)
    return a / b

def _idiv(a: int, b: int) -> int: return _cdiv(a, b) if b != 0 else 0
def _mod(a: Any, b: Any) -> Any:
    if isinstance(a, float) or isinstance(b, float): return _fmod(float(a), float(b))
    return _cmod(a, b) if b != 0 else 0

def _fmod(a: float, b: float) -> float:
    """C's fmod, exact (a float MOD is fmod on every device): NaN for an infinite a or a zero b, a for an infinite b."""
    return math.nan if math.isinf(a) or b == 0 else math.fmod(a, b)

def _trunc(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x): return x
    return type(x)(math.trunc(x))

def _max(a: Any, b: Any) -> Any:
    if isinstance(a, float) and math.isnan(a) or isinstance(b, float) and math.isnan(b): return math.nan
    return max(a, b)

# Past this many bits every value of every dtype (at most 64 bits wide) is shifted out: a Python int shifted by 64
# and then wrapped to its dtype is 0, and a value in its dtype's range shifted right by 64 is its sign fill.
_SHIFT_OUT = 64

def _shl(a: int, b: int) -> int: return a << b if 0 <= b < _SHIFT_OUT else 0
def _shr(a: int, b: int) -> int: return a >> (b if 0 <= b < _SHIFT_OUT else _SHIFT_OUT)

def _pow(a: float, b: float) -> float:
    try: return float(a) ** b if not (a < 0 and b != int(b)) else math.nan
    except (OverflowError, ZeroDivisionError): return math.inf

# Threefry-2x32's rotation amounts, alternating between blocks of four rounds
THREEFRY_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))

def threefry2x32(x0: Any, x1: Any, key0: Any, key1: Any, wrap: Callable[[Any], Any] = lambda v: v) -> tuple[Any, Any]:
    """The Threefry-2x32 block cipher, 20 rounds: the block (x0, x1) encrypted under the key (key0, key1), as two
    words. Written once for any values with + ^ << >> (uint32 UOps, whose arithmetic wraps; Python ints, with
    ``wrap`` masking to 32 bits): codegen builds Ops.THREEFRY's kernel code with it, and ``exec_alu`` folds it."""
    keys = (key0, key1, wrap(key0 ^ key1 ^ 0x1BD11BDA))
    a, b = wrap(x0 + keys[0]), wrap(x1 + keys[1])
    for block in range(5):
        for r in THREEFRY_ROTATIONS[block % 2]:
            a = wrap(a + b)
            b = wrap((wrap(b << r) | (b >> (32 - r))) ^ a)
        a = wrap(a + keys[(block + 1) % 3])
        b = wrap(wrap(b + keys[(block + 2) % 3]) + (block + 1))
    return a, b

def _threefry(x: int, key: int) -> int:
    """Ops.THREEFRY on Python ints: uint64 block and key (high word, low word) -> the uint64 of the two output words."""
    mask = 0xFFFFFFFF
    low, high = threefry2x32(x & mask, (x >> 32) & mask, key & mask, (key >> 32) & mask, lambda v: v & mask)
    return (high << 32) | low

PYTHON_ALU: dict[Ops, Callable[..., Any]] = {
    Ops.EXP2: _safe_exp2, Ops.LOG2: _safe_log2, Ops.SIN: _safe_sin, Ops.COS: _safe_cos, Ops.SQRT: _safe_sqrt, Ops.RECIPROCAL: _reciprocal,
    Ops.NEG: lambda x: (not x) if isinstance(x, bool) else -x, Ops.TRUNC: _trunc,
    Ops.ADD: lambda a, b: a + b, Ops.SUB: lambda a, b: a - b, Ops.MUL: lambda a, b: a * b,
    Ops.IDIV: _idiv, Ops.MOD: _mod, Ops.FDIV: _fdiv, Ops.MAX: _max, Ops.POW: _pow,
    Ops.CMPLT: lambda a, b: a < b, Ops.CMPNE: lambda a, b: a != b, Ops.CMPEQ: lambda a, b: a == b,
    Ops.AND: lambda a, b: a & b, Ops.OR: lambda a, b: a | b, Ops.XOR: lambda a, b: a ^ b,
    Ops.SHL: _shl, Ops.SHR: _shr,
    Ops.WHERE: lambda c, a, b: a if c else b, Ops.MULACC: lambda a, b, c: a * b + c, Ops.THREEFRY: _threefry,
}

def exec_alu(op: Ops, dtype: DType, operands: tuple[Any, ...]) -> Any:
    """Evaluate one ALU op on Python values and round/wrap the result to ``dtype``."""
    if dtype.count > 1:
        return tuple(exec_alu(op, dtype.scalar(), tuple(x[i] if isinstance(x, tuple) else x for x in operands))
                     for i in range(dtype.count))
    result = PYTHON_ALU[op](*operands)
    if dtypes.is_float(dtype) and isinstance(result, (int, float)) and not isinstance(result, bool):
        return truncate_float(float(result), dtype)
    return dtypes.as_const(result, dtype)
