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
from dataclasses import dataclass
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
    raise RuntimeError(f"can't reshape {old} to {tuple(new)} while it is split along axis {axis} over {n} devices: "
                       f"the reshape would move elements between shards (reshard with .shard(devices, axis) first)")

def _push_reduce(x: UOp, m: UOp) -> UOp:
    """A reduce over other axes runs shard by shard; one over the split axis reduces each shard
    and then allreduces the partial results, which leaves every device with the whole answer."""
    op, axes = x.arg
    partials = _per_shard(x, m, x.arg, m.arg)
    if m.arg is None or m.arg not in axes: return partials
    return _multi(allreduce(op, list(partials.src)), None)

def _push_assign(x: UOp, devices: tuple[str, ...]) -> UOp:
    """A whole-tensor assign writes shard by shard; a view assign (movement ops in its arg) writes
    on each shard only the part of the view that shard holds (see ``view_pieces``)."""
    target, value = x.src[0], x.src[1]
    if target.op is not Ops.MULTI: raise ValueError(f"can't assign a value on {devices} to a tensor on {target.device}")
    if x.arg: return _push_view_assign(x, target, value)
    value = reshard(value, target.arg) if value.op is Ops.MULTI else shard_physical(value, devices, target.arg)
    return _multi([x.replace(src=(t, v) + x.src[2:]) for t, v in zip(target.src, value.src)], target.arg)

# ---------------------------------------------------------------- view assigns on sharded tensors
#
# ``xs[1:3].assign(v)`` on a tensor split along axis a: each shard holds a range of a, so the view
# is, shard by shard, a view of that shard's buffer (the same movement ops, with the split axis cut
# to what the shard holds) and the matching range of the value. The split axis is followed through
# the movement ops; a shard the view doesn't reach gets no kernel.

@dataclass
class ShardPiece:
    """The part of a view that shard ``shard`` holds: ``chain`` (movement ops on the shard's buffer)
    is that part, and ``bounds`` the range of the view's split axis it covers (None: the whole view)."""
    shard: int
    chain: list
    bounds: tuple[int, int] | None

def _moved_shape(shape: tuple, op: Ops, arg) -> tuple:
    if op in (Ops.RESHAPE, Ops.EXPAND): return tuple(arg)
    if op is Ops.PERMUTE: return tuple(shape[i] for i in arg)
    if op is Ops.SHRINK: return tuple(e - b for b, e in arg)
    if op is Ops.PAD: return tuple(s + b + e for s, (b, e) in zip(shape, arg))
    return shape   # FLIP

def view_pieces(shape: tuple, axis: int | None, n: int, chain: tuple) -> tuple[int | None, list[ShardPiece]] | None:
    """Split the view ``chain`` (movement ops as (op, arg)) of a logical tensor of ``shape`` split along
    ``axis`` over ``n`` shards into per-shard views. Returns (the view's split axis, the pieces of
    the shards the view reaches); a view axis None means each piece covers the whole view (gated by a
    pad). None when the view can't be written per shard (an expand, symbolic shapes): then the
    caller rewrites the whole tensor."""
    if axis is None: return None, [ShardPiece(i, list(chain), None) for i in range(n)]
    if not all(isinstance(s, int) for s in shape): return None
    pieces = [ShardPiece(i, [], b) for i, b in enumerate(shard_bounds(shape[axis], n))]
    k = 0
    while k < len(chain):
        op, arg = chain[k]
        new_shape = _moved_shape(shape, op, arg)
        if op is Ops.EXPAND or not all(isinstance(s, int) for s in new_shape): return None
        if op is Ops.RESHAPE and k + 1 < len(chain) and (taken := _step_pieces(shape, new_shape, axis, chain[k + 1], pieces)) is not None:
            # a step slice of the split axis: the reshape to (count, step) and the shrink to one column
            pieces, shape, k = taken, _moved_shape(new_shape, *chain[k + 1]), k + 2
            continue
        if op is Ops.RESHAPE:
            if (moved := _reshape_pieces(shape, new_shape, axis, pieces)) is None: return None, _embed_pieces(shape, axis, pieces, chain[k:])
            axis = moved   # _reshape_pieces extended the chains
        elif op is Ops.SHRINK: pieces = _shrink_pieces(axis, arg, pieces)
        else:
            local_arg = arg
            if op is Ops.PERMUTE: axis = arg.index(axis)
            elif op is Ops.FLIP and arg[axis]:
                for p in pieces: p.bounds = (shape[axis] - p.bounds[1], shape[axis] - p.bounds[0])
            elif op is Ops.PAD:
                local_arg = tuple((0, 0) if i == axis else b for i, b in enumerate(arg))
                for p in pieces: p.bounds = (p.bounds[0] + arg[axis][0], p.bounds[1] + arg[axis][0])
            for p in pieces: p.chain.append((op, local_arg))
        shape, k = new_shape, k + 1
    return axis, pieces

def _shrink_pieces(axis: int, arg: tuple, pieces: list[ShardPiece]) -> list[ShardPiece]:
    """A shrink: each piece keeps its overlap with the kept range of the split axis (pieces without one are dropped)."""
    begin, end = arg[axis]
    kept = []
    for p in pieces:
        lo, hi = max(p.bounds[0], begin), min(p.bounds[1], end)
        if lo >= hi: continue
        p.chain.append((Ops.SHRINK, tuple((lo - p.bounds[0], hi - p.bounds[0]) if i == axis else b for i, b in enumerate(arg))))
        p.bounds = (lo - begin, hi - begin)
        kept.append(p)
    return kept

def _embed_pieces(shape: tuple, axis: int, pieces: list[ShardPiece], rest: tuple) -> list[ShardPiece]:
    """A movement op that mixes the split axis with others (a reshape across it): each piece pads its
    part back to the whole axis and takes the ``rest`` of the view as it is. Its kernel covers the
    whole view and stores only where the padding isn't (a gated store)."""
    for p in pieces:
        p.chain.append((Ops.PAD, tuple((p.bounds[0], shape[axis] - p.bounds[1]) if i == axis else (0, 0) for i in range(len(shape)))))
        p.chain.extend(rest)
        p.bounds = None
    return pieces

def _reshape_pieces(old: tuple, new: tuple, axis: int, pieces: list[ShardPiece]) -> int | None:
    """Follow the split axis through a reshape: it lands on the new axis b that starts the same
    block of elements (prod(new[:b]) == prod(old[:axis])), if every piece's range of the block,
    [start * inner, end * inner), is a whole range of rows of b. Appends the local reshapes."""
    before, inner = prod(old[:axis]), prod(old[axis + 1:])
    for b in range(len(new)):
        if prod(new[:b]) != before: continue
        new_inner = prod(new[b + 1:])
        if new_inner == 0 or any((p.bounds[0] * inner) % new_inner or (p.bounds[1] * inner) % new_inner for p in pieces): continue
        for p in pieces:
            start, end = p.bounds[0] * inner // new_inner, p.bounds[1] * inner // new_inner
            p.chain.append((Ops.RESHAPE, tuple(end - start if i == b else s for i, s in enumerate(new))))
            p.bounds = (start, end)
        return b
    return None

def _step_pieces(old: tuple, new: tuple, axis: int, shrink: tuple, pieces: list[ShardPiece]) -> list[ShardPiece] | None:
    """Every step-th element of the split axis: a reshape of it to (count, step) followed by a shrink
    to column j, i.e. elements j, j + step, ... Each piece keeps the rows it holds (a local pad,
    shrink, reshape and shrink of its part); pieces with none are dropped. None if the two ops are
    not that pattern, or the pieces already line up with the rows (the plain reshape rule does)."""
    op, arg = shrink
    if op is not Ops.SHRINK or len(new) != len(old) + 1 or new[:axis] != old[:axis] or new[axis + 2:] != old[axis + 1:]: return None
    count, step = new[axis], new[axis + 1]
    if count * step != old[axis] or all(p.bounds[0] % step == 0 and p.bounds[1] % step == 0 for p in pieces): return None
    j = arg[axis + 1][0]
    if arg[axis + 1] != (j, j + 1) or arg[axis] != (0, count): return None
    kept = []
    for p in pieces:
        s, e = p.bounds
        first, end = -(-(s - j) // step), -(-(e - j) // step)       # rows r with s <= r*step + j < e
        if first >= end: continue
        rows, start = end - first, first * step + j - s                # local position of the first row
        local = e - s
        grow = max(0, start + rows * step - local)
        p.chain += [(Ops.PAD, tuple((0, grow) if i == axis else (0, 0) for i in range(len(old)))),
                    (Ops.SHRINK, tuple((start, start + rows * step) if i == axis else (0, sz) for i, sz in enumerate(old))),
                    (Ops.RESHAPE, new[:axis] + (rows, step) + new[axis + 2:]),
                    (Ops.SHRINK, tuple((0, rows) if i == axis else b for i, b in enumerate(arg)))]
        p.bounds = (first, end)
        kept.append(p)
    return kept

def _value_part(value: UOp, axis: int | None, bounds: tuple[int, int] | None, device: str) -> UOp:
    """The range ``bounds`` of ``value``'s ``axis`` (None: all of it) on ``device``, copying in only
    the shards of a split value that overlap the range."""
    def cut(u: UOp, lo: int, hi: int) -> UOp:
        return u if (lo, hi) == (0, u.shape[axis]) else u.shrink(_along(u.shape, axis, (lo, hi)))
    if value.op is not Ops.MULTI: return copy_to(value if bounds is None else cut(value, *bounds), device)
    if value.arg is None:
        local = next((s for s in value.src if s.device == device), value.src[0])
        return copy_to(local if bounds is None else cut(local, *bounds), device)
    if bounds is None: return gather(value, device)
    if value.arg != axis: return gather(_multi([cut(s, *bounds) for s in value.src], value.arg), device)
    parts = []
    for s, (lo, hi) in zip(value.src, shard_bounds(value.shape[axis], len(value.src))):
        if max(lo, bounds[0]) < min(hi, bounds[1]):
            parts.append(copy_to(cut(s, max(lo, bounds[0]) - lo, min(hi, bounds[1]) - lo), device))
    return parts[0] if len(parts) == 1 else _concat(parts, axis)

def _push_view_assign(x: UOp, target: UOp, value: UOp) -> UOp:
    """A view assign on a sharded target (a view ``view_pieces`` can split: the front end checked)."""
    split = view_pieces(target.shape, target.arg, len(target.src), x.arg)
    assert split is not None, "a view assign that can't be split per shard is rewritten whole by the front end"
    view_axis, pieces = split
    shards = list(target.src)
    for p in pieces:
        shard = shards[p.shard]
        part = _value_part(value, view_axis, p.bounds, shard.device)
        shards[p.shard] = UOp(Ops.ASSIGN, x.dtype, (shard, part), tuple(p.chain) or None)
    return _multi(shards, target.arg)

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
