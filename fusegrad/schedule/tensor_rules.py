"""Rules that simplify the tensor graph before it is split into kernels.

Constants fold here so they never cost a kernel: ``Tensor.ones(4, 5, 6).sum()`` becomes the
constant 120, ``x * 1`` and ``x + 0`` vanish, and an integer ``x * 0`` becomes 0 (a float one stays: NaN and
inf times 0 are NaN, PyTorch's; tinygrad folds it to 0). Weak
literal dtypes become concrete here, and anything with zero elements becomes a constant. A quotient
``exp(x) / (1 + exp(x))`` (a sigmoid written by hand) and its gradient are regrouped into a stable form.
"""
from __future__ import annotations
import math
from fusegrad.dtype import dtypes, DType, truncate_float
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
    # the value as x's dtype holds it: a literal that took a narrow float dtype keeps the Python value (half 3.14 is
    # 3.14, not 3.140625) until a kernel rounds it, so a folded cast to float32 would skip that rounding
    if isinstance(value, float) and dtypes.is_float(x.dtype): value = truncate_float(value, x.dtype.scalar())
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

# ---------------------------------------------------------------- exp(x) / (1 + exp(x))
# A sigmoid written by hand overflows: at x = 300, exp(x) = inf and inf / inf is NaN (tinygrad's symbolic rules
# rewrite x / (1 + x) as 1 - 1 / (1 + x) and get 1). These rules compute such a quotient q = e / (1 + e) of an
# exponential e stably, and regroup its gradient (gradient.py: g / b - g * q / b per use, times e for the
# exponential's own chain rule) so that e only appears in q again: no inf / inf and no 0 * inf.

def _exponential(e: UOp) -> bool:
    """Is ``e`` an exponential (EXP2, maybe cast to another float)? Never negative, so e / (1 + e) has no pole."""
    while e.op is Ops.CAST and dtypes.is_float(e.dtype): e = e.src[0]
    return e.op is Ops.EXP2

def _one_plus(b: UOp) -> UOp | None:
    """The exponential e when ``b`` is 1 + e (either order), else None."""
    if b.op is not Ops.ADD: return None
    for one, e in (b.src, b.src[::-1]):
        if is_one(one) and one.shape == e.shape and _exponential(e): return e
    return None

def stable_exp_ratio(e: UOp, b: UOp) -> UOp | None:
    """e / (1 + e) as 1 / (1 + 1 / e) where e > 1 (1 at e = inf, not NaN), e * (1 / (1 + e)) elsewhere (exact to
    the subnormals; a product with a reciprocal, so this rule doesn't match its own result)."""
    if _one_plus(b) is not e: return None
    one = b.const_like(1)
    large = UOp(Ops.CMPLT, dtypes.bool, (one, e))
    return large.where((one + e.alu(Ops.RECIPROCAL)).alu(Ops.RECIPROCAL), e * b.alu(Ops.RECIPROCAL))

def common_denominator(p: UOp, q: UOp, b: UOp) -> UOp | None:
    """p / b + q / b = (p + q) / b, for b = 1 + e only (elsewhere it would change the rounding of ordinary sums)."""
    return (p + q) / b if _one_plus(b) is not None else None

def exp_into_ratio(p: UOp, b: UOp, e: UOp) -> UOp | None:
    """(p / b) * e = p * (e / b) for b = 1 + e: the exponential's chain rule then multiplies by the stable ratio."""
    return p * (e / b) if _one_plus(b) is e else None

tensor_simplify = PatternMatcher([
    (UPat(name="root"), concrete_dtype),
    (UPat(name="root"), fold_empty),
    (UPat(GroupOp.ALU, name="root"), fold_alu),
    (UPat(Ops.CAST, name="root", src=(UPat.var("x"),)), fold_cast),
    (UPat(Ops.REDUCE_AXIS, name="root"), fold_reduce),
    # x + 0, x * 1, x * 0 (ints and bools only: a float NaN or inf times 0 is NaN), --x
    (UPat(Ops.ADD, src=[UPat.var("x"), UPat.var("z")]), lambda x, z: x if is_zero(z) and x.shape == z.shape and x.op is not Ops.CONST else None),
    (UPat(Ops.MUL, src=[UPat.var("x"), UPat.var("o")]), lambda x, o: x if is_one(o) and x.shape == o.shape and x.dtype != dtypes.bool else None),
    (UPat(Ops.MUL, name="root", src=[UPat.var("x"), UPat.var("z")]),
     lambda root, x, z: _const_like(root, 0) if is_zero(z) and not dtypes.is_float(root.dtype) and root.shape is not None
     and not isinstance(root.device, tuple) else None),
    (UPat(Ops.NEG, src=(UPat(Ops.NEG, src=(UPat.var("x"),)),)), lambda x: x),
    # movement ops of movement ops that compose trivially
    (UPat(Ops.RESHAPE, name="root", src=(UPat(Ops.RESHAPE, src=(UPat.var("x"),)),)), lambda root, x: x.reshape(root.arg)),
    (UPat(Ops.RESHAPE, name="root", src=(UPat.var("x"),)), lambda root, x: x if root.arg == x.shape else None),
    (UPat(Ops.DETACH, src=(UPat.var("x"),)), lambda x: x),
    # a node with an explicit gradient computes its first source
    (UPat(Ops.CUSTOM, name="root"), lambda root: root.src[0]),
    (UPat(Ops.CONTIGUOUS_BACKWARD, src=(UPat.var("x"),)), lambda x: x),
    # exp(x) / (1 + exp(x)) and its gradient, stably (see stable_exp_ratio)
    (UPat(Ops.FDIV, src=(UPat.var("e"), UPat.var("b"))), stable_exp_ratio),
    (UPat(Ops.ADD, src=[UPat(Ops.FDIV, src=(UPat.var("p"), UPat.var("b"))), UPat(Ops.FDIV, src=(UPat.var("q"), UPat.var("b")))]),
     common_denominator),
    (UPat(Ops.MUL, src=[UPat(Ops.FDIV, src=(UPat.var("p"), UPat.var("b"))), UPat.var("e")]), exp_into_ratio),
])
