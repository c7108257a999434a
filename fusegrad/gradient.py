"""Autograd as a graph transform: a derivative rule per primitive op, written in UOps.

``compute_gradient(root, root_grad, targets)`` walks the graph from ``root`` back to ``targets``
and returns each target's gradient as a (lazy) UOp, so gradients fuse and schedule like any other
computation.

Each rule gets the forward node ``ret`` and the incoming gradient ``grad`` (shaped like ``ret``)
and returns one gradient (or None) per source.

>>> x = Tensor([2.0, 3.0], requires_grad=True)
>>> (x * x).sum().gradient(x)[0].tolist()
[4.0, 6.0]
"""
from __future__ import annotations
import math
from fusegrad.dtype import dtypes, sum_acc_dtype
from fusegrad.helpers import argsort
from fusegrad.uop.ops import UOp, Ops, UPat, PatternMatcher, GroupOp

def _reduce_to_shape(grad: UOp, shape: tuple) -> UOp:
    """Sum ``grad`` over the axes that were broadcast (expanded) to reach its shape."""
    axes = tuple(i for i, (g, s) in enumerate(zip(grad.shape, shape)) if g != s)
    if not axes: return grad
    acc = sum_acc_dtype(grad.dtype)
    return grad.cast(acc).reduce_axis(Ops.ADD, axes).cast(grad.dtype)

def _max_gradient(ret: UOp, grad: UOp, src: UOp, axes: tuple[int, ...]) -> UOp:
    """Gradient of a max-reduce: shared equally by every element that equals the max."""
    is_max = src.alu(Ops.CMPEQ, ret.expand(src.shape)).cast(grad.dtype)
    count = is_max.reduce_axis(Ops.ADD, axes)
    return is_max * (grad / count).expand(src.shape)

def _binary_max_gradient(ret: UOp, grad: UOp, a: UOp, b: UOp) -> tuple[UOp, UOp]:
    """d max(a, b): the larger side gets the gradient; on a tie each side gets half."""
    a_wins = b.alu(Ops.CMPLT, a).cast(grad.dtype)
    tie = a.alu(Ops.CMPEQ, b).cast(grad.dtype) * 0.5
    return grad * (a_wins + tie), grad * ((1.0 - a_wins) - tie)

def _pad_gradient(grad: UOp, ret: UOp) -> UOp:
    return grad.shrink(tuple((before, before + size) for (before, _), size in zip(ret.arg, ret.src[0].shape)))

def _shrink_gradient(grad: UOp, ret: UOp) -> UOp:
    return grad.pad(tuple((begin, size - end) for (begin, end), size in zip(ret.arg, ret.src[0].shape)))

pm_gradient = PatternMatcher([
    (UPat(Ops.CAST, name="ret"), lambda ctx, ret: (ctx.cast(ret.src[0].dtype),)),
    (UPat(Ops.RECIPROCAL, name="ret"), lambda ctx, ret: (-ctx * ret * ret,)),
    (UPat(Ops.SIN, name="ret"), lambda ctx, ret: (((math.pi / 2) - ret.src[0]).alu(Ops.SIN) * ctx,)),
    (UPat(Ops.LOG2, name="ret"), lambda ctx, ret: (ctx / (ret.src[0] * math.log(2)),)),
    (UPat(Ops.EXP2, name="ret"), lambda ctx, ret: (ctx * ret * math.log(2),)),
    (UPat(Ops.SQRT, name="ret"), lambda ctx, ret: (ctx / (ret * 2),)),
    (UPat(Ops.NEG, name="ret"), lambda ctx, ret: (-ctx,)),
    (UPat((Ops.TRUNC, Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ, Ops.BITCAST, Ops.IDIV, Ops.MOD, Ops.AND, Ops.OR, Ops.XOR,
           Ops.SHL, Ops.SHR, Ops.DETACH, Ops.ARANGE, Ops.THREEFRY), name="ret"), lambda ctx, ret: (None,) * len(ret.src)),
    (UPat(Ops.WHERE, name="ret"), lambda ctx, ret: (None, ret.src[0].where(ctx, ctx.const_like(0)), ret.src[0].where(ctx.const_like(0), ctx))),
    (UPat(Ops.ADD, name="ret"), lambda ctx, ret: (ctx, ctx)),
    (UPat(Ops.SUB, name="ret"), lambda ctx, ret: (ctx, -ctx)),
    (UPat(Ops.MUL, name="ret"), lambda ctx, ret: (ret.src[1] * ctx, ret.src[0] * ctx)),
    (UPat(Ops.FDIV, name="ret"), lambda ctx, ret: (ctx / ret.src[1], -ctx * ret.src[0] / (ret.src[1] * ret.src[1]))),
    (UPat(Ops.MAX, name="ret"), lambda ctx, ret: _binary_max_gradient(ret, ctx, ret.src[0], ret.src[1])),
    (UPat(Ops.REDUCE_AXIS, name="ret"), lambda ctx, ret: _reduce_axis_gradient(ret, ctx)),
    (UPat(Ops.RESHAPE, name="ret"), lambda ctx, ret: (ctx.reshape(ret.src[0].shape),)),
    (UPat(Ops.EXPAND, name="ret"), lambda ctx, ret: (_reduce_to_shape(ctx, ret.src[0].shape),)),
    (UPat(Ops.PERMUTE, name="ret"), lambda ctx, ret: (ctx.permute(tuple(argsort(ret.arg))),)),
    (UPat(Ops.PAD, name="ret"), lambda ctx, ret: (_pad_gradient(ctx, ret),)),
    (UPat(Ops.SHRINK, name="ret"), lambda ctx, ret: (_shrink_gradient(ctx, ret),)),
    (UPat(Ops.FLIP, name="ret"), lambda ctx, ret: (ctx.flip(ret.arg),)),
    (UPat(Ops.CONTIGUOUS, name="ret"), lambda ctx, ret: (ctx,)),
    (UPat(Ops.CONTIGUOUS_BACKWARD, name="ret"), lambda ctx, ret: (UOp(Ops.CONTIGUOUS, ctx.dtype, (ctx,)),)),
    (UPat(Ops.COPY, name="ret"), lambda ctx, ret: (UOp(Ops.COPY, ctx.dtype, (ctx,), ret.src[0].device),)),
    (UPat(Ops.ASSIGN, name="ret"), lambda ctx, ret: (None, ctx)),
    # an explicit gradient: src[0] is the value, arg(ret, grad) gives the gradients of src[1:]
    (UPat(Ops.CUSTOM, name="ret"), lambda ctx, ret: (None,) + tuple(ret.arg(ret, ctx))),
])

def _reduce_axis_gradient(ret: UOp, grad: UOp) -> tuple[UOp | None]:
    op, axes = ret.arg
    src = ret.src[0]
    if op is Ops.ADD: return (grad.expand(src.shape),)
    if op is Ops.MAX: return (_max_gradient(ret, grad, src, axes),)
    if op is Ops.MUL: return (_product_gradient(ret, grad, src, axes),)
    raise NotImplementedError(f"no gradient for a {op} reduce")

def _product_gradient(ret: UOp, grad: UOp, src: UOp, axes: tuple[int, ...]) -> UOp:
    """d prod(x) / d x_i is the product of the other elements. ret / x_i breaks when x_i is 0, so:
    with no zero it is ret / x_i; with exactly one zero, only that element gets the product of the
    rest; with two or more zeros every derivative is 0."""
    is_zero = src.alu(Ops.CMPEQ, src.const_like(0))
    nonzero = is_zero.where(src.const_like(1), src)
    product_of_nonzero = nonzero.reduce_axis(Ops.MUL, axes).expand(src.shape)
    zeros = is_zero.cast(dtypes.int32).reduce_axis(Ops.ADD, axes).expand(src.shape)
    no_zero = zeros.alu(Ops.CMPEQ, zeros.const_like(0))
    one_zero = zeros.alu(Ops.CMPEQ, zeros.const_like(1))
    others = no_zero.where(ret.expand(src.shape) / nonzero, (one_zero & is_zero).where(product_of_nonzero, src.const_like(0)))
    return grad.expand(src.shape) * others

def compute_gradient(root: UOp, root_grad: UOp, targets: set[UOp]) -> dict[UOp, UOp]:
    """Gradients of ``root`` (seeded with ``root_grad``) with respect to every node in ``targets``."""
    order = list(root.toposort)
    # only nodes that lead to a target need a gradient
    leads_to_target: dict[UOp, bool] = {}
    for node in order:
        leads_to_target[node] = node in targets or (node.op is not Ops.DETACH and any(leads_to_target[s] for s in node.src))
    grads: dict[UOp, UOp] = {root: root_grad}
    for node in reversed(order):
        if node not in grads or not leads_to_target[node] or not node.src: continue
        if node.op in (Ops.DEVICE, Ops.BUFFER, Ops.CONST, Ops.DEFINE_VAR, Ops.BIND): continue
        src_grads = _apply_rule(node, grads[node])
        for src, g in zip(node.src, src_grads):
            if g is None or not leads_to_target.get(src, False): continue
            grads[src] = grads[src] + g if src in grads else g
    return {t: grads[t] for t in targets if t in grads}

def _apply_rule(node: UOp, grad: UOp) -> tuple:
    for pattern, fn, _ in pm_gradient.by_op[node.op]:
        for captures in pattern.match(node, {}):
            return fn(ctx=grad, **captures)
    raise NotImplementedError(f"no derivative rule for {node.op}")
