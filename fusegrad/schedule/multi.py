"""Multi-device tensors: one logical tensor split (or copied) over several devices.

A sharded tensor is ``UOp(Ops.MULTI, dtype, shards, axis)``: ``shards`` are ordinary
single-device UOps, one per device, and ``axis`` is the logical axis they split (None: every
device holds the whole tensor). Its ``.shape`` is the logical shape and its ``.device`` the device
tuple, so tensor.py and gradient.py build ordinary graphs on top of it.

Before scheduling, ``pm_multi`` pushes MULTI up through every op until each root is a MULTI of
single-device graphs (or a plain single-device graph); the scheduler then only ever sees ordinary
graphs, and every shard gets its own kernels and buffers on its own device::

    x = MULTI(a0, a1; axis=0)
    (x + 1).sum(1)   ->  MULTI((a0 + 1).sum(1), (a1 + 1).sum(1); axis=0)       shard by shard
    x.sum(0)         ->  MULTI(p0 + copy(p1), copy(p0) + p1; axis=None)       an allreduce of the partial sums

Forms that only exist before this pass (the front end builds them):

- ``MULTI(x; axis)`` with a single source that is itself on a device tuple: x resharded along ``axis``;
- a CONST or ARANGE on ``DEVICE(tuple)``, and ``COPY(x, tuple)``: replicated on every device.

>>> from fusegrad import Tensor
>>> x = Tensor([[1, 2], [3, 4]]).shard(("CPU:1", "CPU:2"), axis=0)
>>> x.sum(0).tolist()
[4, 6]
"""
from __future__ import annotations
from typing import Callable
from fusegrad.dtype import dtypes
from fusegrad.helpers import prod, getenv, RING
from fusegrad.uop.ops import UOp, Ops, GroupOp, PatternMatcher, UPat, graph_rewrite, graph_rewrite_memo
from fusegrad.schedule.tensor_rules import const_value

# ---------------------------------------------------------------- small helpers on physical MULTIs

def devices_of(m: UOp) -> tuple[str, ...]:
    """The device of every shard of a physical MULTI, in shard order."""
    return tuple(s.device for s in m.src)

def _multi(shards: list[UOp] | tuple[UOp, ...], axis: int | None) -> UOp:
    return UOp(Ops.MULTI, shards[0].dtype, tuple(shards), axis)

def shard_bounds(size: int, n: int) -> list[tuple[int, int]]:
    """Even split of ``size`` over ``n`` shards: ``shard_bounds(6, 3) == [(0, 2), (2, 4), (4, 6)]``."""
    step = size // n
    return [(i * step, (i + 1) * step) for i in range(n)]

def _along(shape: tuple, axis: int, bound: tuple) -> tuple:
    """Shrink bounds that keep every dim whole except ``axis``."""
    return tuple(bound if i == axis else (0, s) for i, s in enumerate(shape))

def check_divisible(shape: tuple, axis: int, devices: tuple) -> None:
    """Shards are equal slices (tinygrad's rule): a size the device count doesn't divide is a RuntimeError."""
    size = shape[axis]
    if not isinstance(size, int) or size % len(devices) != 0:
        raise RuntimeError(f"can't shard shape {shape} along axis {axis} over {len(devices)} devices {devices}: "
                         f"size {size} is not divisible by {len(devices)}")

def _is_stored(x: UOp) -> bool:
    """Is ``x`` (under reshapes, which keep the memory order) something with its own buffer, so a
    COPY can read it directly?"""
    while x.op is Ops.RESHAPE: x = x.src[0]
    return x.op in (Ops.BUFFER, Ops.COPY, Ops.CONTIGUOUS)

def _stored(x: UOp) -> UOp:
    """``x`` with its own buffer (computed once), so a local use and copies to other devices
    share one kernel instead of each recomputing it."""
    if _is_stored(x) or x.device is None or const_value(x) is not None: return x
    return UOp(Ops.CONTIGUOUS, x.dtype, (x,))

def copy_to(x: UOp, device: str) -> UOp:
    """``x`` on ``device``: itself if it is already there, a new constant for a constant (no
    transfer), else a COPY of its stored form (the scheduler copies whole buffers only)."""
    if x.device == device or x.device is None: return x
    if (value := const_value(x)) is not None: return UOp.const(x.dtype, value, device, x.shape)
    shape, src = x.shape, x
    while src.op is Ops.RESHAPE: src = src.src[0]   # copy the data, reshape on arrival
    if not _is_stored(src): src = UOp(Ops.CONTIGUOUS, x.dtype, (x,))
    return UOp(Ops.COPY, x.dtype, (src,), device).reshape(shape)

def _concat(pieces: list[UOp], axis: int) -> UOp:
    """Join same-device pieces along ``axis``: each is padded into place and they are added
    (the padding is zeros, so the sum is the concatenation)."""
    total = sum(p.shape[axis] for p in pieces)
    combine = Ops.OR if pieces[0].dtype == dtypes.bool else Ops.ADD
    out, offset = None, 0
    for p in pieces:
        placed = p.pad(tuple((offset, total - offset - p.shape[axis]) if i == axis else (0, 0) for i in range(p.ndim)))
        out = placed if out is None else out.alu(combine, placed)
        offset += p.shape[axis]
    assert out is not None
    return out

def gather(m: UOp, device: str) -> UOp:
    """The whole logical tensor of the physical MULTI ``m`` on one device."""
    if m.arg is None:
        local = next((s for s in m.src if s.device == device), None)
        return local if local is not None else copy_to(m.src[0], device)
    return _concat([copy_to(s, device) for s in m.src], m.arg)

def shard_physical(x: UOp, devices: tuple[str, ...], axis: int | None) -> UOp:
    """A single-device ``x`` split along ``axis`` (None: copied whole) onto ``devices``: each
    device receives only its own piece."""
    if axis is None: return _multi([copy_to(x, d) for d in devices], None)
    check_divisible(x.shape, axis, devices)
    return _multi([copy_to(x.shrink(_along(x.shape, axis, b)), d) for d, b in zip(devices, shard_bounds(x.shape[axis], len(devices)))], axis)

def reshard(m: UOp, axis: int | None) -> UOp:
    """The physical MULTI ``m`` split along ``axis`` instead of ``m.arg``.

    replicated -> split: each device keeps its own range (a free view); split -> replicated: an
    all-gather; split along a -> split along b: an all-to-all, where device i receives from every
    shard only the part that falls in its new range."""
    if m.arg == axis: return m
    devices = devices_of(m)
    if axis is None:
        stored = _multi([_stored(s) for s in m.src], m.arg)
        return _multi([gather(stored, d) for d in devices], None)
    check_divisible(m.shape, axis, devices)
    bounds = shard_bounds(m.shape[axis], len(devices))
    if m.arg is None: return _multi([s.shrink(_along(s.shape, axis, b)) for s, b in zip(m.src, bounds)], axis)
    return _multi([_concat([copy_to(s.shrink(_along(s.shape, axis, b)), d) for s in m.src], m.arg)
                   for d, b in zip(devices, bounds)], axis)

# ---------------------------------------------------------------- allreduce

def allreduce(op: Ops, partials: list[UOp]) -> list[UOp]:
    """Every device gets ``op`` (ADD, MUL or MAX) over all the equally shaped ``partials`` (one per
    device). ``RING=2`` always uses the ring algorithm, ``RING=1`` (the default) for more than two
    devices and at least RING_ALLREDUCE_THRESHOLD elements, ``RING=0`` never."""
    partials = [_stored(p) for p in partials]
    n, size = len(partials), prod(partials[0].shape)
    use_ring = n > 1 and isinstance(size, int) and size >= n and \
        (RING.value >= 2 or (RING.value >= 1 and n > 2 and size >= getenv("RING_ALLREDUCE_THRESHOLD", 256_000)))
    return ring_allreduce(op, partials) if use_ring else naive_allreduce(op, partials)

def naive_allreduce(op: Ops, partials: list[UOp]) -> list[UOp]:
    """Each device copies in every other partial and combines them all, in the same order on
    every device (so the copies are bitwise equal)."""
    results = []
    for device in (p.device for p in partials):
        total = None
        for p in partials:
            part = copy_to(p, device)
            total = part if total is None else total.alu(op, part)
        results.append(total)
    return results

def ring_allreduce(op: Ops, partials: list[UOp]) -> list[UOp]:
    """The bandwidth-optimal ring: split the data in n chunks; in n-1 reduce-scatter steps device k
    passes one chunk to device k+1, which combines it with its own, so that device k ends up with
    the full result of chunk k+1; then n-1 all-gather steps pass the finished chunks around."""
    n, shape, devices = len(partials), partials[0].shape, [p.device for p in partials]
    size = prod(shape)
    edges = [size * c // n for c in range(n + 1)]
    chunks = [[p.reshape((size,)).shrink(((edges[c], edges[c + 1]),)) for c in range(n)] for p in partials]
    for step in range(n - 1):        # reduce-scatter (within a step no chunk is both sent and received)
        for k in range(n):
            c, nxt = (k - step) % n, (k + 1) % n
            chunks[nxt][c] = chunks[nxt][c].alu(op, copy_to(chunks[k][c], devices[nxt]))
    for step in range(n - 1):        # all-gather
        for k in range(n):
            c, nxt = (k + 1 - step) % n, (k + 1) % n
            chunks[nxt][c] = copy_to(chunks[k][c], devices[nxt])
    return [_concat(chunks[k], 0).reshape(shape) for k in range(n)]

# ---------------------------------------------------------------- pushing MULTI through ops

ELEMENTWISE = GroupOp.Elementwise | {Ops.CONTIGUOUS, Ops.CONTIGUOUS_BACKWARD, Ops.DETACH}

def _push(x: UOp) -> UOp | None:
    """The rule of ``pm_multi``: ``x`` (whose sources are already rewritten, so a multi-device
    source is a physical MULTI) rewritten to a MULTI of per-device ops, or None."""
    if x.op is Ops.SINK: return None
    if x.op is Ops.MULTI:
        return reshard(x.src[0], x.arg) if len(x.src) == 1 and x.src[0].op is Ops.MULTI else None
    if x.op is Ops.COPY: return _push_copy(x)
    multis = [s for s in x.src if s.op is Ops.MULTI]
    if not multis:
        device = next((s.arg for s in x.src if s.op is Ops.DEVICE and isinstance(s.arg, tuple)), None)
        return _replicate_leaf(x, device) if device is not None else None
    if x.op is Ops.CUSTOM: return x.src[0]   # a node with an explicit gradient computes its first source
    devices = devices_of(multis[0])
    for m in multis[1:]:
        if devices_of(m) != devices:
            raise ValueError(f"{x.op} mixes tensors sharded on different devices: {devices} and {devices_of(m)}")
    if x.op in ELEMENTWISE: return _push_elementwise(x, devices)
    if x.op in GroupOp.Movement: return _push_movement(x, x.src[0])
    if x.op is Ops.REDUCE_AXIS: return _push_reduce(x, x.src[0])
    if x.op is Ops.ASSIGN: return _push_assign(x, devices)
    raise NotImplementedError(f"{x.op} is not supported on multi-device tensors")

def _replicate_leaf(x: UOp, devices: tuple[str, ...]) -> UOp:
    """A constant (or arange) on a device tuple: the same node on every device."""
    return _multi([x.replace(src=tuple(UOp(Ops.DEVICE, arg=d) if s.op is Ops.DEVICE else s for s in x.src)) for d in devices], None)

def _push_copy(x: UOp) -> UOp | None:
    src, dest = x.src[0], x.arg
    if isinstance(dest, tuple):        # onto several devices
        if src.op is Ops.MULTI:
            if devices_of(src) == dest: return src
            if len(dest) == len(src.src): return _multi([copy_to(s, d) for s, d in zip(src.src, dest)], src.arg)
            src = gather(src, dest[0])
        return shard_physical(src, dest, None)
    return gather(src, dest) if src.op is Ops.MULTI else None

def _push_elementwise(x: UOp, devices: tuple[str, ...]) -> UOp:
    """Elementwise ops run shard by shard once every operand is split the same way: along the
    first split operand's axis (a replicated operand then just takes its range, for free)."""
    axis = next((s.arg for s in x.src if s.op is Ops.MULTI and s.arg is not None), None)
    columns = []
    for s in x.src:
        if s.op is Ops.MULTI: columns.append(reshard(s, axis).src)
        elif s.device is None: columns.append((s,) * len(devices))    # a scalar with no device fits every shard
        else: columns.append(shard_physical(s, devices, axis).src)
    return _multi([x.replace(src=tuple(col[i] for col in columns)) for i in range(len(devices))], axis)

def _per_shard(x: UOp, m: UOp, arg, axis: int | None) -> UOp:
    return _multi([UOp(x.op, x.dtype, (s,), arg) for s in m.src], axis)

def _push_movement(x: UOp, m: UOp) -> UOp:
    """Movement ops act on each shard; they track where the split axis goes. An op that needs data
    from other shards along the split axis (pad, a partial shrink, expand) first gathers it."""
    axis, op, arg, n = m.arg, x.op, x.arg, len(m.src)
    if axis is None: return _per_shard(x, m, arg, None)
    shard_size = m.src[0].shape[axis]
    if op is Ops.RESHAPE:
        new_axis = _reshape_axis(m.shape, arg, axis, n)
        return _per_shard(x, m, tuple(s // n if i == new_axis else s for i, s in enumerate(arg)), new_axis)
    if op is Ops.PERMUTE: return _per_shard(x, m, arg, arg.index(axis))
    if op is Ops.FLIP:
        if not arg[axis]: return _per_shard(x, m, arg, axis)
        # the reversed tensor's shard i is the reverse of shard n-1-i: every shard changes device
        return _multi([copy_to(m.src[n - 1 - i].flip(arg), d) for i, d in enumerate(devices_of(m))], axis)
    if op is Ops.EXPAND and arg[axis] == m.shape[axis]:
        return _per_shard(x, m, tuple(shard_size if i == axis else s for i, s in enumerate(arg)), axis)
    if op is Ops.PAD and tuple(arg[axis]) == (0, 0): return _per_shard(x, m, arg, axis)
    if op is Ops.SHRINK:
        begin, end = arg[axis]
        local = _per_shard(x, m, tuple((0, shard_size) if i == axis else b for i, b in enumerate(arg)), axis)
        return local if (begin, end) == (0, m.shape[axis]) else _select(local, begin, end)
    return _per_shard(x, reshard(m, None), arg, None)

def _select(m: UOp, begin: int, end: int) -> UOp:
    """The range [begin, end) of the split axis, on every device (replicated): each device copies
    in only the shards that overlap the range, and only their overlapping part."""
    axis = m.arg
    if not isinstance(begin, int) or not isinstance(end, int):
        raise NotImplementedError(f"a symbolic shrink along the split axis {axis} of a multi-device tensor is not supported")
    pieces = []
    for s, (lo, hi) in zip(m.src, shard_bounds(m.shape[axis], len(m.src))):
        if max(lo, begin) < min(hi, end): pieces.append(s.shrink(_along(s.shape, axis, (max(lo, begin) - lo, min(hi, end) - lo))))
    if not pieces:   # an empty range: nothing to copy
        shape = tuple(0 if i == axis else s for i, s in enumerate(m.src[0].shape))
        return _multi([UOp.const(m.dtype, 0, d, shape) for d in devices_of(m)], None)
    pieces = [_stored(p) for p in pieces]
    return _multi([_concat([copy_to(p, d) for p in pieces], axis) for d in devices_of(m)], None)

def _reshape_axis(old: tuple, new: tuple, axis: int, n: int) -> int:
    """Where the split axis goes in a reshape. Shard i holds, in every block of prod(old[axis:])
    elements, the i-th n-th part; the reshape keeps that iff some new axis b starts at the same
    block boundary (prod(new[:b]) == prod(old[:axis])) and is divisible by n."""
    before = prod(old[:axis])
    for b in range(len(new)):
        if prod(new[:b]) == before and isinstance(new[b], int) and new[b] % n == 0 and new[b] != 0: return b
    raise ValueError(f"can't reshape {old} to {tuple(new)} while it is split along axis {axis} over {n} devices: "
                     f"the reshape would move elements between shards (reshard with .shard(devices, axis) first)")

def _push_reduce(x: UOp, m: UOp) -> UOp:
    """A reduce over other axes runs shard by shard; one over the split axis reduces each shard
    and then allreduces the partial results, which leaves every device with the whole answer."""
    op, axes = x.arg
    partials = _per_shard(x, m, x.arg, m.arg)
    if m.arg is None or m.arg not in axes: return partials
    return _multi(allreduce(op, list(partials.src)), None)

def _push_assign(x: UOp, devices: tuple[str, ...]) -> UOp:
    target, value = x.src[0], x.src[1]
    if target.op is not Ops.MULTI: raise ValueError(f"can't assign a value on {devices} to a tensor on {target.device}")
    value = reshard(value, target.arg) if value.op is Ops.MULTI else shard_physical(value, devices, target.arg)
    return _multi([x.replace(src=(t, v) + x.src[2:]) for t, v in zip(target.src, value.src)], target.arg)

pm_multi = PatternMatcher([(UPat(name="x"), _push)])

# ---------------------------------------------------------------- the front end's view

def has_multi(roots: list[UOp]) -> bool:
    """Does this graph hold anything on a device tuple?"""
    return any(u.op is Ops.MULTI or (u.op in (Ops.DEVICE, Ops.COPY) and isinstance(u.arg, tuple))
               for u in UOp(Ops.SINK, dtypes.void, tuple(roots)).toposort)

def to_physical(u: UOp) -> UOp:
    """``u`` with MULTI pushed to the top: a physical MULTI for a multi-device tensor."""
    return graph_rewrite(u, pm_multi)

def multi_axis(u: UOp) -> int | None:
    """The axis a multi-device tensor is split along (None: replicated)."""
    physical = to_physical(u)
    return physical.arg if physical.op is Ops.MULTI else None

def _gather_gradient(ret: UOp, grad: UOp) -> tuple[UOp]:
    """The gradient of sharding a single-device tensor: the sharded gradient, gathered back."""
    return (UOp(Ops.COPY, grad.dtype, (grad,), ret.src[1].device),)

def _reshard_gradient(ret: UOp, grad: UOp) -> tuple[UOp]:
    """Resharding doesn't change values, so neither does its gradient."""
    return (grad,)

def shard_uop(x: UOp, devices: tuple[str, ...], axis: int | None) -> UOp:
    """The logical graph of ``x`` sharded onto ``devices`` along ``axis`` (an already resolved,
    non-negative axis or None). Sharding a tensor onto the devices and axis it already has
    returns it unchanged. The result is wrapped in an Ops.CUSTOM node so gradients flow back to
    ``x`` (a single-device ``x`` gets the gathered gradient)."""
    if not isinstance(x.device, tuple):
        return UOp(Ops.CUSTOM, x.dtype, (shard_physical(x, devices, axis), x), _gather_gradient)
    if x.device != devices: return shard_uop(UOp(Ops.COPY, x.dtype, (x,), devices[0]), devices, axis)
    if multi_axis(x) == axis: return x
    if axis is not None: check_divisible(x.shape, axis, devices)
    return UOp(Ops.CUSTOM, x.dtype, (UOp(Ops.MULTI, x.dtype, (x,), axis), x), _reshard_gradient)

def match_sharding(value: UOp, like: UOp) -> UOp:
    """``value`` split like the multi-device ``like`` (used to give gradients their parameter's sharding)."""
    if not isinstance(like.device, tuple) or not isinstance(value.device, tuple): return value
    return shard_uop(value, like.device, multi_axis(like))

# ---------------------------------------------------------------- scheduling

def schedule_multi(roots: list[UOp], schedule: Callable) -> tuple[list, dict[UOp, UOp]]:
    """Schedule a graph with multi-device tensors: push MULTI to the top, schedule every shard
    with ``schedule`` (the single-device scheduler), and map each logical node whose shards were
    all realized to the MULTI of their buffers."""
    sink = UOp(Ops.SINK, dtypes.void, tuple(roots))
    memo = graph_rewrite_memo(sink, pm_multi)
    flat = list(dict.fromkeys(s for r in memo[sink].src for s in (r.src if r.op is Ops.MULTI else (r,))))
    items, flat_becomes = schedule(flat)
    becomes = dict(flat_becomes)
    for logical, physical in memo.items():
        if logical is physical or logical.op is Ops.SINK: continue
        if physical.op is not Ops.MULTI:   # e.g. a gather onto one device
            if _is_done(done := flat_becomes.get(physical, physical)): becomes[logical] = done
            continue
        shards = tuple(flat_becomes.get(s, s) for s in physical.src)
        # a partly computed tensor keeps its logical graph (gradients still flow through it)
        if all(_is_done(s) for s in shards): becomes[logical] = _multi(shards, physical.arg)
    return items, becomes

def _is_done(u: UOp) -> bool:
    """A buffer view or a constant: nothing left to compute."""
    return (u.base.op is Ops.BUFFER and u.op in (Ops.BUFFER, Ops.RESHAPE)) or \
        (const_value(u) is not None and not any(x.op is Ops.BUFFER for x in u.toposort))

def multi_gradient(ret: UOp, grad: UOp) -> tuple[UOp, ...]:
    """The gradient rule of MULTI: shard i's gradient is the part of ``grad`` it holds, on its
    device (a reshard marker passes the gradient through)."""
    if len(ret.src) == 1 and isinstance(ret.src[0].device, tuple): return (grad,)
    bounds = shard_bounds(ret.shape[ret.arg], len(ret.src)) if ret.arg is not None else [None] * len(ret.src)
    return tuple(UOp(Ops.COPY, grad.dtype, (grad,), s.device).shrink(_along(grad.shape, ret.arg, b)) if b is not None
                 else UOp(Ops.COPY, grad.dtype, (grad,), s.device) for s, b in zip(ret.src, bounds))
