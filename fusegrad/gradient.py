"""Autograd as a graph transform: a derivative rule per primitive op, written in UOps.

``compute_gradient(root, root_grad, targets)`` walks the graph from ``root`` back to ``targets``
and returns each target's gradient as a (lazy) UOp, so gradients fuse and schedule like any other
computation.

Each rule gets the forward node ``ret`` and the incoming gradient ``grad`` (shaped like ``ret``)
and returns one gradient (or None) per source.

Realizing a tensor replaces its graph with a buffer. So that ``y.numpy(); y.sum().backward()``
still works, the graph behind such a buffer is recorded as its *origin* (``record_origins``, called
when the scheduler's results are applied to live tensors) and differentiation steps from the
buffer into it (``differentiation_order``); forward values are read from the buffers.

>>> x = Tensor([2.0, 3.0], requires_grad=True)
>>> (x * x).sum().gradient(x)[0].tolist()
[4.0, 6.0]
"""
from __future__ import annotations
import itertools, math, weakref
from typing import Callable
from fusegrad.dtype import dtypes, sum_acc_dtype
from fusegrad.helpers import argsort, prod, all_int, getenv, SPLIT_REDUCEOP
from fusegrad.uop.ops import UOp, Ops, UPat, PatternMatcher, GroupOp

# A gradient's sum over broadcast axes splits from 2**17 elements per output, not 32768: below that its operands
# fit the caches anyway, and a conv weight gradient over 32 or 64 images (32768 or 65536 products per weight)
# measured slower split (3x3 conv 32x64x32x32: 12.6 -> 12.7-14.1 ms, 64x3x32x32: 0.8 -> 0.9-1.5 ms)
GRADIENT_SPLIT_THRESHOLD = 1 << 17

def split_reduce(x: UOp, op: Ops, axes: tuple[int, ...], threshold: int | None = None) -> UOp | None:
    """``x.reduce_axis(op, axes)`` as two kernels when each output reduces >= ``threshold`` elements (default
    32768, tinygrad's SPLIT_REDUCEOP rule; gradients use ``GRADIENT_SPLIT_THRESHOLD``): one reduce axis of size n
    becomes (d, n/d), the first kernel leaves d partial results per output (a stored, CONTIGUOUS tensor) and the
    second reduces them. d is the largest of 256..8 that divides the largest reduce axis, keeps the partials at most
    2**22 elements and leaves each partial at least 4 slices of that axis. None when no split applies.

    Why: the partials give a full reduce (``x.sum()``) parallel work, and a big reduce with many outputs
    reads its operands in cache-sized chunks. A conv's weight gradient reduces over the whole batch: in one
    kernel it re-streams the 13 MB batch of output gradients from memory once per input channel; split (MNIST's
    second conv: d = 128, chunks of 4 images) each chunk stays in L2 (MNIST CNN step at batch 512: 285-292 ->
    260-275 ms; chunks of 4 to 64 images measured alike).
    The front end calls it for ``Tensor`` reduces and for the gradient's reduces alike (``_reduce_to_shape``).

    >>> x = UOp.const(dtypes.float32, 1.0, "CPU", (65536,))
    >>> split_reduce(x, Ops.ADD, (0,)).shape
    (1,)
    """
    if not SPLIT_REDUCEOP or not all_int(x.shape): return None
    out_size = prod(s for i, s in enumerate(x.shape) if i not in axes)
    if threshold is None: threshold = getenv("REDUCEOP_SPLIT_THRESHOLD", 32768)
    if out_size == 0 or prod(x.shape) // out_size < threshold: return None
    def most(axis: int) -> int: return min(256, 2 ** getenv("REDUCEOP_SPLIT_SIZE", 22) // out_size, x.shape[axis] // 4)
    for axis in sorted(axes, key=lambda a: -x.shape[a]):
        # (each partial sums at least 4 slices of the axis: partials of one or two slices, a conv weight gradient
        # over a batch of 32 or 64 split per image, wrote and re-read more than the split saved: 12.6 -> 14.1 ms)
        for d in range(most(axis), 7, -1):
            if x.shape[axis] % d == 0: return _split_reduce_at(x, op, axes, axis, d, out_size, threshold)
    # no axis has a divisor (8191 is prime: an 8191 x 8191 x.sum() ran as one serial loop, 56 ms): the longest axis
    # padded with the reduce's identity up to a multiple of d, where that adds at most an eighth of it
    axis = max(axes, key=lambda a: x.shape[a])
    d = next((d for d in range(most(axis), 7, -1) if -x.shape[axis] % d <= x.shape[axis] // 8), None)
    if d is None or isinstance(x.device, tuple): return None
    padding = -x.shape[axis] % d
    from fusegrad.codegen.lowering import identity_value
    pads = tuple((0, padding) if i == axis else (0, 0) for i in range(len(x.shape)))
    padded, identity = x.pad(pads), identity_value(op, x.dtype)
    if identity != 0:
        inside = UOp.const(dtypes.bool, True, x.device, x.shape).pad(pads)
        padded = inside.where(padded, UOp.const(x.dtype, identity, x.device, padded.shape))
    return _split_reduce_at(padded, op, axes, axis, d, out_size, threshold)

def _split_reduce_at(x: UOp, op: Ops, axes: tuple[int, ...], axis: int, d: int, out_size: int, threshold: int) -> UOp:
    """``split_reduce``'s two kernels, splitting ``axis`` into (d, n / d).

    A float sum whose partials would still each add up ``threshold`` or more terms is split again (blocked
    summation): a long chain of float adds into one accumulator loses the small terms once the running sum is
    large (2e8 float32 0.1s summed to 20,009,890; blocks of at most ``threshold`` give PyTorch's 19,999,998)."""
    split = x.reshape(x.shape[:axis] + (d, x.shape[axis] // d) + x.shape[axis + 1:])
    inner_axes = tuple(a + (a > axis) for a in axes if a != axis) + (axis + 1,)
    first = split.reduce_axis(op, inner_axes)
    if op is Ops.ADD and dtypes.is_float(x.dtype) and (again := split_reduce(split, op, inner_axes, threshold)) is not None: first = again
    partial = UOp(Ops.CONTIGUOUS, x.dtype, (first,))
    # the second kernel reduces the d partials as a (d, outputs) matrix whose outputs are one contiguous
    # axis that vectors fill: with several output dims it stores that flat result (CONTIGUOUS), else the
    # kernel would take the outputs' shape (a conv weight gradient's (128, 32, 32, 5, 5) partials took
    # 5.3 ms to add, read down 5-wide columns; flat, 0.3 ms)
    rows = partial.permute((axis,) + tuple(i for i in range(len(partial.shape)) if i != axis)).reshape((d, out_size))
    summed = rows.reduce_axis(op, (0,))
    if sum(1 for i, s in enumerate(x.shape) if i not in axes and s > 1) > 1: summed = UOp(Ops.CONTIGUOUS, x.dtype, (summed,))
    return summed.reshape(tuple(1 if i in axes else s for i, s in enumerate(x.shape)))

def _reduce_to_shape(grad: UOp, shape: tuple) -> UOp:
    """Sum ``grad`` over the axes that were broadcast (expanded) to reach its shape (in two kernels when the
    sum is big: ``split_reduce``)."""
    axes = tuple(i for i, (g, s) in enumerate(zip(grad.shape, shape)) if g != s)
    if not axes: return grad
    acc = sum_acc_dtype(grad.dtype)
    widened = grad.cast(acc)
    summed = split_reduce(widened, Ops.ADD, axes, max(GRADIENT_SPLIT_THRESHOLD, getenv("REDUCEOP_SPLIT_THRESHOLD", 32768)))
    return (summed if summed is not None else widened.reduce_axis(Ops.ADD, axes)).cast(grad.dtype)

def _max_gradient(ret: UOp, grad: UOp, src: UOp, axes: tuple[int, ...]) -> UOp:
    """Gradient of a max-reduce: shared equally by every element that equals the max."""
    is_max = src.alu(Ops.CMPEQ, ret.expand(src.shape)).cast(grad.dtype)
    # the max is one of the inputs, so count >= 1 whenever both sides round alike (a NaN max matches no
    # element: the row's gradient is NaN, as PyTorch's amax gives)
    count = is_max.reduce_axis(Ops.ADD, axes)
    return is_max * (grad / count).expand(src.shape)

def _binary_max_gradient(ret: UOp, grad: UOp, a: UOp, b: UOp) -> tuple[UOp, UOp]:
    """d max(a, b) as PyTorch's maximum: the larger side gets the gradient, on a tie each side gets half, and when
    either is NaN (the max is NaN) both get it; the smaller side gets 0 by selection (0 even where grad is inf)."""
    half = a.alu(Ops.CMPEQ, b).where(grad * 0.5, grad)
    zero = grad.const_like(0)
    return a.alu(Ops.CMPLT, b).where(zero, half), b.alu(Ops.CMPLT, a).where(zero, half)

def _pad_gradient(grad: UOp, ret: UOp) -> UOp:
    return grad.shrink(tuple((before, before + size) for (before, _), size in zip(ret.arg, ret.src[0].shape)))

def _shrink_gradient(grad: UOp, ret: UOp) -> UOp:
    return grad.pad(tuple((begin, size - end) for (begin, end), size in zip(ret.arg, ret.src[0].shape)))

def _cos(x: UOp) -> UOp:
    """cos x (one Ops.COS; see tensor.cos_uop)."""
    from fusegrad.tensor import cos_uop
    return cos_uop(x)

pm_gradient = PatternMatcher([
    (UPat(Ops.CAST, name="ret"), lambda ctx, ret: (ctx.cast(ret.src[0].dtype),)),
    (UPat(Ops.RECIPROCAL, name="ret"), lambda ctx, ret: (-ctx * ret * ret,)),
    (UPat(Ops.SIN, name="ret"), lambda ctx, ret: (_cos(ret.src[0]) * ctx,)),
    (UPat(Ops.COS, name="ret"), lambda ctx, ret: (-ret.src[0].alu(Ops.SIN) * ctx,)),
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
    # d(a/b)/db as PyTorch writes it, -g * (a/b) / b: b*b overflowed (a = b = 1e20 gave -0, not -1e-20), and the
    # quotient a/b is what tensor_rules makes stable in exp(x) / (1 + exp(x))
    (UPat(Ops.FDIV, name="ret"), lambda ctx, ret: (ctx / ret.src[1], -ctx * ret / ret.src[1])),
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
    (UPat(Ops.ASSIGN, name="ret"), lambda ctx, ret: _assign_gradient(ret, ctx)),
    (UPat(Ops.MULTI, name="ret"), lambda ctx, ret: _multi_gradient(ret, ctx)),
    # an explicit gradient: src[0] is the value, arg(ret, grad) gives the gradients of src[1:]
    (UPat(Ops.CUSTOM, name="ret"), lambda ctx, ret: (None,) + tuple(ret.arg(ret, ctx))),
])

def _assign_gradient(ret: UOp, grad: UOp) -> tuple[UOp | None, UOp]:
    """``ASSIGN(identity, value, arg=chain)`` is the buffer after writing ``value`` into the view ``chain`` of it
    (indexing.py): the value gets the gradient of that view, and the old contents get the gradient of the positions
    the write left alone (none when it wrote the whole buffer)."""
    if not ret.arg: return None, grad
    from fusegrad.indexing import apply_chain, merge_through   # (the front end's view helpers: built with Tensor ops)
    from fusegrad.tensor import Tensor
    value = ret.src[1]
    kept = merge_through(Tensor(grad), ret.arg, Tensor(UOp.const(grad.dtype, 0, grad.device, value.shape)))
    return kept.uop, apply_chain(grad, ret.arg)

def _multi_gradient(ret: UOp, grad: UOp) -> tuple[UOp, ...]:
    """Each shard of a multi-device tensor gets its part of the gradient (schedule/multi.py)."""
    from fusegrad.schedule.multi import multi_gradient
    return multi_gradient(ret, grad)

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

# ---------------------------------------------------------------- graphs behind realized buffers

# A realized BUFFER (or MULTI) uop -> the lazy graph whose value it holds (shaped like the tensor it
# replaced). Realizing a tensor swaps its graph for a buffer; this keeps the way back so gradients
# still flow. The graph is stored on the buffer uop itself (its ``__dict__``, under ``_ORIGIN``): an
# origin lives exactly as long as its buffer uop is referenced (by a tensor or by another origin), so
# dropping the tensor frees the graph. (A WeakKeyDictionary did the same, but made, looked up and
# dropped a weak reference with a callback per buffer: ~1 us of every eager op.) See docs/decisions.md (Autograd).
_ORIGIN = "_origin"

def origin_of(buffer: UOp) -> UOp | None:
    """The lazy graph a realized BUFFER uop was computed from, if it was kept for autograd."""
    return buffer.__dict__.get(_ORIGIN) if buffer.op in (Ops.BUFFER, Ops.MULTI) else None

def _is_new_buffer_view(node: UOp, new: UOp, seen: dict, shape: tuple | None = None) -> bool:
    """Does ``node`` now live in a buffer this schedule created (not an assign target, a constant or
    an existing buffer it simplified to)? Only those buffers get an origin: an existing buffer
    already has its own identity (a parameter, say), and recording one would make a cycle.
    ``seen`` holds the old-graph nodes walked so far: an existing buffer is among them, a new one not."""
    if new.op is Ops.MULTI:   # a sharded value: one new buffer per device
        return node.op is not Ops.ASSIGN and all(_is_new_buffer_view(node, shard, seen, shard.shape) for shard in new.src)
    if node.op is Ops.ASSIGN or (new.op is not Ops.BUFFER and new.op is not Ops.RESHAPE) or (base := new.base).op is not Ops.BUFFER: return False
    shape = node.shape if shape is None else shape
    if base in seen: return False
    for s in shape:
        if type(s) is not int and not isinstance(s, int): return False   # a symbolic size
    return base.arg[2] == math.prod(shape) > 0

def _views_existing_buffers(new: UOp, seen: dict) -> bool:
    """Is ``new`` only a view of buffers among ``seen`` (the old graph), per shard for MULTI?"""
    if new.op is not Ops.MULTI:   # (one view, the eager case: no generator)
        base = new.base
        return base.op is Ops.BUFFER and base in seen
    return all(p.base.op is Ops.BUFFER and p.base in seen for p in new.src)

def record_origins(becomes: dict[UOp, UOp], graphs: list[UOp], grad_leaves: set[UOp], value_leaves: set[UOp],
                   live: list[UOp]) -> list[UOp]:
    """Remember the graph behind the buffers in ``becomes`` (the scheduler's node -> buffer view
    map) whose graph depends, other than through DETACH, on one of ``grad_leaves`` (the uops of
    tensors with requires_grad=True) or of ``value_leaves`` (the uops of the other live float
    tensors, which ``gradient()`` may target whatever their requires_grad). ``graphs`` are the old
    graphs of the tensors the schedule changed, ``live`` their new ones.

    A graph that reaches a grad leaf is recorded with the same substitution the tensors got, so it
    reads the buffers of everything realized alongside it (stored intermediates included) instead
    of recomputing them (backward is then as cheap as PyTorch's, at PyTorch's memory cost).
    A graph that reaches only value leaves is recorded as it was: a later ``gradient()`` recomputes
    it, and it pins no intermediate buffers, only the buffers it reads. Differentiation continues
    through the origins of the buffers an origin reads. Only buffers that ``live`` reaches (directly
    or through other origins) are kept: the rest are scratch space for the memory planner.
    Returns the new origins: their buffers must not be planned as scratch."""
    if len(graphs) == 1 and len(becomes) == 1 and (root := graphs[0]) in becomes and root.op is not Ops.CUSTOM:
        return _record_root_origin(root, becomes[root], grad_leaves, value_leaves, live)
    reaches: dict[UOp, bool] = {}      # old node -> does a gradient from it reach a grad leaf?
    reaches_value: dict[UOp, bool] = {}   # old node -> ... or a value leaf, or a realized graph?
    replaced: dict[UOp, UOp] = {}      # old node -> the buffer view it became (what UOp.substitute(becomes) puts there)
    candidates: dict[UOp, UOp] = {}    # new BUFFER -> its origin
    # This runs on every realize, eager code included, so the walk is lean: plain loops over the (one
    # or two) sources, and the substituted graph (what the tensors got) is only built for origins that
    # need it (those reaching a grad leaf), not for every node.
    substitute = _Substitution(replaced)
    # (Ops members as locals: on Python 3.11 each Ops.X is a slow class-attribute lookup, several per node here)
    buffer_op, detach_op, custom_op = Ops.BUFFER, Ops.DETACH, Ops.CUSTOM
    for graph in graphs:
        for node in graph.toposort:
            if node in reaches: continue
            op, src = node.op, node.src
            grad_reach = op is buffer_op and _ORIGIN in node.__dict__
            value_reach = grad_reach
            if src and op is not detach_op:
                for s in src:
                    if s in grad_leaves or reaches[s]:
                        grad_reach = value_reach = True
                        break
                    if not value_reach and (s in value_leaves or reaches_value[s]): value_reach = True
            reaches[node], reaches_value[node] = grad_reach, value_reach
            # (a view of buffers the graph already had, such as a reshaped parameter, stays as it was:
            # the parameter must remain visible to backward as itself)
            if (new := becomes.get(node)) is None or _views_existing_buffers(new, reaches): continue
            replaced[node] = new
            if not (grad_reach or value_reach or op is custom_op) or not _is_new_buffer_view(node, new, reaches): continue
            if op is custom_op and (new.base in candidates or grad_reach):
                # a node with an explicit gradient becomes the buffer its value graph src[0] became: it is
                # the origin, around that value graph (not around the buffer itself, which would be a cycle),
                # or backward would differentiate the value graph. The value graph was recorded already when
                # it reaches a leaf; a detached one (x.detach()**2) was not, and is kept as it was.
                value = candidates.get(new.base)
                if value is None and (value := substitute(src[0])).base is new.base: value = src[0]
                candidates[new.base] = node.replace(src=(value,) + tuple([_without(new.base, s, substitute) for s in src[1:]]))
            elif grad_reach: candidates.setdefault(new.base, substitute.over_sources(node))
            elif value_reach and dtypes.is_float(node.dtype): candidates.setdefault(new.base, node)
    if not candidates: return []
    # the common case, every new buffer held by a live tensor itself, needs no walk to know they are all kept
    live_buffers = {u.base for u in live}
    kept = candidates if all(b in live_buffers for b in candidates) else _reachable(live, candidates)
    for buffer, origin in kept.items(): buffer.__dict__[_ORIGIN] = origin
    return list(kept.values())

def _record_root_origin(root: UOp, new: UOp, grad_leaves: set[UOp], value_leaves: set[UOp], live: list[UOp]) -> list[UOp]:
    """record_origins when the schedule changed one graph, ``root``, into ``new`` and nothing under it: an eager op.

    What the general walk decides, from one search that stops at the first leaf it meets instead of
    a reach flag per node. With only the root replaced, its substituted graph is the root itself, so
    the origin is ``root`` whether it reaches a grad leaf or only a value leaf (which counts for a
    float root only)."""
    seen = root.toposort   # (the old graph: _views_existing_buffers and _is_new_buffer_view ask "was it there?")
    if _views_existing_buffers(new, seen) or not _is_new_buffer_view(root, new, seen): return []
    if not _reaches_leaf(root, grad_leaves, value_leaves if dtypes.is_float(root.dtype) else ()): return []
    if new.base not in {u.base for u in live}:   # kept only when a live tensor reaches it (see record_origins)
        if not _reachable(live, {new.base: root}): return []
    new.base.__dict__[_ORIGIN] = root
    return [root]

def _reaches_leaf(root: UOp, grad_leaves: set[UOp], value_leaves) -> bool:
    """Does a gradient from ``root`` reach one of ``grad_leaves`` or ``value_leaves``, or a buffer with an origin,
    other than through DETACH? (record_origins' reach flags for one node, found depth first.)"""
    buffer_op, detach_op = Ops.BUFFER, Ops.DETACH   # (locals: each Ops.X is a slow class lookup on Python 3.11)
    stack, visited = [root], {root}
    while stack:
        node = stack.pop()
        op = node.op
        if op is buffer_op and _ORIGIN in node.__dict__: return True
        if op is detach_op: continue
        for s in node.src:
            if s in grad_leaves or s in value_leaves: return True
            if s not in visited:
                visited.add(s)
                stack.append(s)
    return False

def _without(buffer: UOp, node: UOp, substitute: "_Substitution") -> UOp:
    """``node`` substituted, unless that reads ``buffer`` (an explicit gradient's coefficient computed from
    the value that became this very buffer): then as it was, or the buffer's origin would contain the buffer."""
    new = substitute(node)
    return node if new is not node and buffer in new.toposort else new

class _Substitution:
    """An old graph node as ``UOp.substitute(replaced)`` rebuilds it (``replaced``: old node -> new
    one), computed on demand and memoized; ``replaced`` may grow between calls, but only with nodes
    later in the graph's order than those already asked for."""
    def __init__(self, replaced: dict[UOp, UOp]): self.replaced, self.memo = replaced, {}
    def __call__(self, node: UOp) -> UOp:
        if (new := self.replaced.get(node)) is not None: return new
        # sources before users with an explicit stack (deep graphs don't recurse); each node is rebuilt
        # once over all calls, so the work is linear in the graph however many origins ask
        stack: list[tuple[UOp, bool]] = [(node, False)]
        while stack:
            u, sources_done = stack.pop()
            if u in self.memo or u in self.replaced: continue
            if sources_done: self.memo[u] = self.sources(u)
            else:
                stack.append((u, True))
                stack.extend((s, False) for s in u.src if s not in self.memo and s not in self.replaced)
        return self.memo[node]
    def over_sources(self, node: UOp) -> UOp:
        """``node`` itself (even if it was replaced) over the substituted versions of its sources."""
        for s in node.src: self(s)
        return self.sources(node)
    def sources(self, node: UOp) -> UOp:
        """``node`` over the substituted versions of its sources (``node`` itself when none changed);
        the sources must be done already."""
        src = node.src
        if not src: return node
        srcs = tuple([new if (new := self.replaced.get(s)) is not None else self.memo[s] for s in src])
        return node if srcs == src else node.replace(src=srcs)

def _reachable(roots: list[UOp], origins: dict[UOp, UOp]) -> dict[UOp, UOp]:
    """The entries of ``origins`` (buffer -> origin) reachable from ``roots``, following sources and
    from a buffer to its origin."""
    seen: set[UOp] = set()
    found: dict[UOp, UOp] = {}
    stack = list(roots)
    while stack:
        if (node := stack.pop()) in seen: continue
        seen.add(node)
        if (origin := origins.get(node)) is not None:
            found[node] = origin
            stack.append(origin)
        stack.extend(node.src)
    return found

def differentiation_order(root: UOp) -> tuple[dict[UOp, None], dict[UOp, UOp]]:
    """The graph below ``root`` in topological order, where a realized buffer with a recorded
    origin is preceded by (and differentiates into) that origin. Returns the order and the
    buffer -> origin edges that were followed."""
    order: dict[UOp, None] = {}
    followed: dict[UOp, UOp] = {}
    # iterators over toposorts; following a buffer pushes its origin's toposort, then the buffer again
    stack = [iter(root.toposort)]
    while stack:
        for node in stack[-1]:
            if node in order: continue
            if node not in followed and (origin := origin_of(node)) is not None:
                followed[node] = origin
                stack.append(itertools.chain(origin.toposort, (node,)))
                break
            order[node] = None
        else: stack.pop()
    return order, followed

def compute_gradient(root: UOp, root_grad: UOp, targets: set[UOp]) -> dict[UOp, UOp]:
    """Gradients of ``root`` (seeded with ``root_grad``) with respect to every node in ``targets``.
    Realized buffers are differentiated through their recorded origins (``record_origins``)."""
    order, followed = differentiation_order(root)
    # only nodes that lead to a target need a gradient
    leads_to_target: dict[UOp, bool] = {}
    for node in order:
        srcs = (followed[node],) if node in followed else node.src
        leads_to_target[node] = node in targets or (node.op is not Ops.DETACH and any(leads_to_target[s] for s in srcs))
    # an origin's value is already in its buffer: rules that use a node's own value read it from there
    values = {origin: buffer.reshape(origin.shape) for buffer, origin in followed.items()}
    grads: dict[UOp, UOp] = {root: root_grad}
    def accumulate(node: UOp, g: UOp) -> None:
        grads[node] = grads[node] + g if node in grads else g
    for node in reversed(order):
        if node not in grads or not leads_to_target[node]: continue
        if (origin := followed.get(node)) is not None:
            accumulate(origin, grads[node].reshape(origin.shape))
            continue
        if not node.src or node.op in (Ops.DEVICE, Ops.BUFFER, Ops.CONST, Ops.DEFINE_VAR, Ops.BIND): continue
        src_grads = _apply_rule(node, grads[node], values.get(node))
        for src, g in zip(node.src, src_grads):
            if g is None or not leads_to_target.get(src, False): continue
            accumulate(src, g)
    return {t: grads[t] for t in targets if t in grads}

# rules whose gradient uses the node's own (output) value, not only its sources
_USES_OUTPUT = (Ops.RECIPROCAL, Ops.EXP2, Ops.SQRT, Ops.REDUCE_AXIS)

def _apply_rule(node: UOp, grad: UOp, value: UOp | None = None) -> tuple:
    """The gradients of ``node``'s sources. ``value``, if given, holds ``node``'s value (its realized
    buffer): rules that use the output read it instead of recomputing ``node``."""
    for pattern, fn, _ in pm_gradient.by_op[node.op]:
        for captures in pattern.match(node, {}):
            src_grads = fn(ctx=grad, **captures)
            # a max's gradient compares its input with the max: both must come from one computation
            # (a stored max against a recomputed input can differ in the last bit and match nothing)
            if value is None or node.op not in _USES_OUTPUT or node.arg is not None and node.arg[0] is Ops.MAX: return src_grads
            return tuple(g if g is None else g.substitute({node: value}) for g in src_grads)
    raise NotImplementedError(f"no derivative rule for {node.op}")

# ---------------------------------------------------------------- origins kept only for gradient()

# An origin recorded only because gradient() may target a live float tensor (no requires_grad=True tensor, and no
# buffer whose origin reaches one, is in its graph) is a *value origin*. It also pins the buffers it reads, which
# pin theirs through their own origins: `x = (x + 1).realize()` in a loop kept every step's buffer. So a value
# origin remembers, under _ANCHORS, the tensors it can differentiate to (weak references to each tensor and its
# uop), directly or through the value origins of the buffers it reads. When a later origin reads its buffer and
# none of those tensors is alive any more (and no live tensor holds one of their uops), no gradient() can use the
# graph: the origin is dropped, and the buffers it read are freed. Origins that reach a requires_grad=True tensor
# have no anchors and are kept while their buffer lives (what backward() needs, as in PyTorch).
_ANCHORS = "_anchors"

def anchor_value_origins(buffers: list[UOp], grad_leaves: set[UOp], value_tensors: dict[UOp, list],
                         live_uops: Callable[[], set[UOp]]) -> None:
    """Classify the origins just recorded on ``buffers``: a graph that reaches one of ``grad_leaves`` (or a buffer
    with such an origin) keeps no anchors; any other gets the anchors described above, from ``value_tensors`` (old
    graph node -> the live float tensors holding it) and the still useful anchors of the value origins it reads.
    Value origins it reads whose tensors are all gone are dropped; a new one left without anchors is dropped too.
    ``live_uops`` gives the uops of the live tensors (built only when a liveness question needs it)."""
    pending, cache = set(buffers), {}
    def live() -> set[UOp]:
        if "uops" not in cache: cache["uops"] = live_uops()
        return cache["uops"]
    for buffer in buffers:
        if buffer in pending: _anchor(buffer, pending, grad_leaves, value_tensors, live)

def _anchor(buffer: UOp, pending: set[UOp], grad_leaves: set[UOp], value_tensors: dict[UOp, list], live) -> None:
    """Set (or clear) ``buffer``'s anchors; origins in ``pending`` that it reads are classified first."""
    pending.discard(buffer)
    anchors: dict[int, tuple] = {}
    # (the origin's root is the graph of the tensor that became ``buffer``: not a target *below* it, so no anchor)
    root = buffer.__dict__[_ORIGIN]
    stack, seen = [root], set()
    detach_op, buffer_ops = Ops.DETACH, (Ops.BUFFER, Ops.MULTI)
    while stack:
        if (node := stack.pop()) in seen: continue
        seen.add(node)
        if node in grad_leaves:
            buffer.__dict__.pop(_ANCHORS, None)
            return
        if node.op is detach_op: continue
        if node is not root:
            for tensor in value_tensors.get(node, ()): anchors[id(tensor)] = (weakref.ref(tensor), weakref.ref(node))
        if node.op in buffer_ops and _ORIGIN in node.__dict__:
            if node in pending: _anchor(node, pending, grad_leaves, value_tensors, live)
            if _ORIGIN not in node.__dict__: continue   # (dropped just now: nothing left to differentiate to)
            if _ANCHORS not in node.__dict__:   # an origin that reaches a requires_grad tensor
                buffer.__dict__.pop(_ANCHORS, None)
                return
            if (alive := _live_anchors(node, live)): anchors.update((id(a), a) for a in alive)
            else: drop_origin(node)
            continue
        stack.extend(node.src)
    if anchors: buffer.__dict__[_ANCHORS] = tuple(anchors.values())
    else: drop_origin(buffer)

def _live_anchors(buffer: UOp, live) -> tuple:
    """The anchors of ``buffer``'s value origin that can still be a gradient() target: the tensor is alive, or a
    live tensor holds its uop (``t.contiguous()`` of a realized tensor is another tensor on the same uop)."""
    anchors = buffer.__dict__[_ANCHORS]
    alive = tuple(a for a in anchors if a[0]() is not None)
    if not alive: alive = tuple(a for a in anchors if (u := a[1]()) is not None and u in live())
    return alive

def drop_origin(buffer: UOp) -> None:
    """Forget ``buffer``'s origin (and anchors): it becomes a plain leaf for autograd."""
    buffer.__dict__.pop(_ORIGIN, None)
    buffer.__dict__.pop(_ANCHORS, None)
