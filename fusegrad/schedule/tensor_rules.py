"""Rules that simplify the tensor graph before it is split into kernels.

Constants fold here so they never cost a kernel: ``Tensor.ones(4, 5, 6).sum()`` becomes the
constant 120, ``x * 1`` and ``x + 0`` vanish, and ``x * 0`` becomes 0 as in tinygrad. Weak
literal dtypes become concrete here, and anything with zero elements becomes a constant.
"""
from __future__ import annotations
import math
from fusegrad.dtype import dtypes, DType
from fusegrad.helpers import prod
from fusegrad.uop.ops import UOp, UPat, Ops, GroupOp, PatternMatcher
from fusegrad.uop.alu import exec_alu

CONST_VIEW_OPS = {Ops.RESHAPE, Ops.EXPAND, Ops.PERMUTE, Ops.SHRINK, Ops.FLIP}

def const_value(node: UOp):
    """The value of a tensor that is a constant broadcast to a shape (no PAD on the way), else None."""
    while node.op in CONST_VIEW_OPS: node = node.src[0]
    if node.op is Ops.CONST and node.src and not isinstance(node.arg, UOp): return node.arg
    return None

def _const_like(node: UOp, value) -> UOp:
    return UOp.const(node.dtype, value, node.device, node.shape)

def fold_alu(root: UOp) -> UOp | None:
    """An elementwise op on constants is a constant."""
    if isinstance(root.device, tuple) or root.shape is None: return None
    values = [const_value(s) for s in root.src]
    if any(v is None for v in values): return None
    try: result = exec_alu(root.op, root.dtype, tuple(values))
    except (ZeroDivisionError, ValueError, OverflowError): return None
    return _const_like(root, result)

def fold_cast(root: UOp, x: UOp) -> UOp | None:
    if x.dtype == root.dtype: return x
    if (value := const_value(x)) is None or root.shape is None: return None
    if dtypes.is_int(root.dtype) and isinstance(value, float) and not math.isfinite(value): return None
    return _const_like(root, value)

def fold_reduce(root: UOp) -> UOp | None:
    """Reducing a constant: sum is value*count, max is value; reducing nothing is the identity."""
    src = root.src[0]
    reduce_op, axes = root.arg
    count = prod(src.shape[a] for a in axes)
    if not isinstance(count, int): return None
    if count == 0: return _const_like(root, identity_element(reduce_op, root.dtype))
    if (value := const_value(src)) is None: return None
    if reduce_op is Ops.ADD: return _const_like(root, value * count)
    if reduce_op is Ops.MAX: return _const_like(root, value)
    if reduce_op is Ops.MUL:
        try: return _const_like(root, value ** count)
        except OverflowError: return _const_like(root, math.inf)
    return None

def identity_element(op: Ops, dtype: DType):
    """0 for sum, 1 for product, the dtype's minimum for max."""
    if op is Ops.ADD: return 0
    if op is Ops.MUL: return 1
    return dtypes.min(dtype)

def fold_empty(root: UOp) -> UOp | None:
    """A tensor with zero elements is a constant 0 (it has nothing to compute)."""
    if root.op in (Ops.CONST, Ops.DEVICE, Ops.BUFFER, Ops.SINK, Ops.ASSIGN) or root.shape is None: return None
    if not any(isinstance(s, int) and s == 0 for s in root.shape): return None
    if root.op in CONST_VIEW_OPS and const_value(root) is not None: return None
    if isinstance(root.device, tuple): return None
    return _const_like(root, 0)

def concrete_dtype(root: UOp) -> UOp | None:
    """Weak literal dtypes (weakint/weakfloat) become default_int/default_float."""
    if not dtypes.is_weak(root.dtype): return None
    return root.replace(dtype=dtypes.concrete(root.dtype), arg=dtypes.as_const(root.arg, dtypes.concrete(root.dtype))
                        if root.op is Ops.CONST and not isinstance(root.arg, UOp) else root.arg)

def is_zero(x: UOp) -> bool:
    value = const_value(x)
    return value is not None and value == 0
def is_one(x: UOp) -> bool:
    value = const_value(x)
    return value is not None and value == 1

tensor_simplify = PatternMatcher([
    (UPat(name="root"), concrete_dtype),
    (UPat(name="root"), fold_empty),
    (UPat(GroupOp.ALU, name="root"), fold_alu),
    (UPat(Ops.CAST, name="root", src=(UPat.var("x"),)), fold_cast),
    (UPat(Ops.REDUCE_AXIS, name="root"), fold_reduce),
    # x + 0, x * 1, x * 0 (as tinygrad: even for floats), --x
    (UPat(Ops.ADD, src=[UPat.var("x"), UPat.var("z")]), lambda x, z: x if is_zero(z) and x.shape == z.shape and x.op is not Ops.CONST else None),
    (UPat(Ops.MUL, src=[UPat.var("x"), UPat.var("o")]), lambda x, o: x if is_one(o) and x.shape == o.shape and x.dtype != dtypes.bool else None),
    (UPat(Ops.MUL, name="root", src=[UPat.var("x"), UPat.var("z")]),
     lambda root, x, z: _const_like(root, 0) if is_zero(z) and root.shape is not None and not isinstance(root.device, tuple) else None),
    (UPat(Ops.NEG, src=(UPat(Ops.NEG, src=(UPat.var("x"),)),)), lambda x: x),
    # movement ops of movement ops that compose trivially
    (UPat(Ops.RESHAPE, name="root", src=(UPat(Ops.RESHAPE, src=(UPat.var("x"),)),)), lambda root, x: x.reshape(root.arg)),
    (UPat(Ops.RESHAPE, name="root", src=(UPat.var("x"),)), lambda root, x: x if root.arg == x.shape else None),
    (UPat(Ops.DETACH, src=(UPat.var("x"),)), lambda x: x),
    # a node with an explicit gradient computes its first source
    (UPat(Ops.CUSTOM, name="root"), lambda root: root.src[0]),
    (UPat(Ops.CONTIGUOUS_BACKWARD, src=(UPat.var("x"),)), lambda x: x),
])
