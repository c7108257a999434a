"""Ops.THREEFRY in kernels: the Threefry-2x32 cipher as uint32 arithmetic every renderer knows.

The front end builds a random draw as one THREEFRY node, ``THREEFRY(x, key)`` on uint64 (each the high word
shifted over the low one, tinygrad's form), and reads the output's two words back with a cast and a shift. A
tensor graph of the cipher's ~100 uint32 ops per draw cost milliseconds of Python to build, per draw; one node
costs microseconds, and the kernel's code is built here, once per kernel compiled.

``decompose_threefry(ast)`` rewrites each THREEFRY into the 20 rounds (``uop.alu.threefry2x32``, the same function
the constant folder runs on Python ints) and removes the uint64 packing on both sides: a block packed from two
uint32 words is unpacked to those words, and a cast or a shift that reads one word of the result is that word.
So the kernel computes in uint32 lanes only, which vectorize; the uint64 forms remain only where a THREEFRY's
input or output is a real uint64 value.
"""
from __future__ import annotations
from fusegrad.dtype import dtypes
from fusegrad.uop.alu import threefry2x32
from fusegrad.uop.ops import UOp, Ops, UPat, PatternMatcher, graph_rewrite

def _unpacked(v: UOp) -> tuple[UOp, UOp] | None:
    """(low, high) if uint64 ``v`` is two uint32 words packed as ``high << 32 | low``, else None."""
    if v.op is not Ops.OR: return None
    for shifted, low in (v.src, v.src[::-1]):
        if (shifted.op is Ops.SHL and shifted.src[1].op is Ops.CONST and shifted.src[1].arg == 32 and
                shifted.src[0].op is Ops.CAST and shifted.src[0].src[0].dtype == dtypes.uint32 and
                low.op is Ops.CAST and low.src[0].dtype == dtypes.uint32):
            return low.src[0], shifted.src[0].src[0]
    return None

def _words(v: UOp) -> tuple[UOp, UOp]:
    """(low, high) uint32 words of uint64 ``v``."""
    if (words := _unpacked(v)) is not None: return words
    return v.cast(dtypes.uint32), (v >> UOp.const(dtypes.uint64, 32)).cast(dtypes.uint32)

def _cipher(x: UOp, key: UOp) -> UOp:
    (x0, x1), (key0, key1) = _words(x), _words(key)
    low, high = threefry2x32(x0, x1, key0, key1)
    return (high.cast(dtypes.uint64) << UOp.const(dtypes.uint64, 32)) | low.cast(dtypes.uint64)

def _word(packed: UOp, index: int) -> UOp | None:
    return None if (words := _unpacked(packed)) is None else words[index]

pm_threefry = PatternMatcher([
    (UPat(Ops.THREEFRY, dtype=dtypes.uint64, src=(UPat.var("x"), UPat.var("key"))), _cipher),
    # one word of a packed pair: the low word is a cast of the pair, the high word a cast of the pair shifted by 32
    (UPat(Ops.CAST, dtype=dtypes.uint32, src=(UPat(Ops.OR, dtype=dtypes.uint64, name="packed"),)), lambda packed: _word(packed, 0)),
    (UPat(Ops.CAST, dtype=dtypes.uint32, src=(UPat(Ops.SHR, src=(UPat(Ops.OR, dtype=dtypes.uint64, name="packed"), UPat.cvar("amount"))),)),
     lambda packed, amount: _word(packed, 1) if amount.arg == 32 else None),
])

def decompose_threefry(ast: UOp) -> UOp:
    """Every THREEFRY under ``ast`` as uint32 arithmetic (see the module docstring); other graphs come back unchanged."""
    if not any(u.op is Ops.THREEFRY for u in ast.toposort): return ast
    return graph_rewrite(ast, pm_threefry)
