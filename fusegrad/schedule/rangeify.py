"""Rangeify: turn a piece of the tensor graph into a kernel AST over RANGE loops.

Every output element of a kernel has an index per dimension (a RANGE, or 0 for size-1 dims).
Walking from the output down to realized buffers, each movement op rewrites those indices:

- RESHAPE  flatten the indices with the new shape's strides, unflatten with the old shape (div/mod)
- PERMUTE  reorder the indices
- EXPAND   an expanded dimension reads index 0 of its source
- SHRINK   add the start offset
- FLIP     index i reads size-1-i
- PAD      subtract the front padding and add a validity gate; outside it the value is 0. The
           gate wraps the *value* (``valid.where(x, 0)``), so padding an op with f(0) != 0 (log,
           exp, division) is still correct, and every load under it is gated, so it never reads
           out of bounds.

A REDUCE_AXIS opens new REDUCE ranges for its reduced axes. The result is a SINK of STOREs into
PARAM buffers; the caller maps PARAM slots to real buffers.
"""
from __future__ import annotations
from dataclasses import dataclass, field
from typing import Callable
from fusegrad.dtype import dtypes, DType
from fusegrad.helpers import prod
from fusegrad.uop.ops import UOp, Ops, GroupOp, AxisType, sint_to_uop, graph_rewrite_memo

def strides_for_shape(shape: tuple) -> tuple:
    """Row-major strides: ``strides_for_shape((2, 3, 4)) == (12, 4, 1)``."""
    strides, acc = [], 1
    for s in reversed(shape):
        strides.append(acc)
        acc = acc * s
    return tuple(reversed(strides))

def flat_index(idxs: tuple[UOp, ...], shape: tuple) -> UOp:
    """The row-major offset of ``idxs`` in ``shape``."""
    total = UOp.const(dtypes.index, 0)
    for idx, stride, size in zip(idxs, strides_for_shape(shape), shape):
        if not (isinstance(size, int) and size == 1): total = total + idx * stride
    return total

def unflatten_index(flat: UOp, shape: tuple) -> tuple[UOp, ...]:
    """The per-dimension indices of row-major offset ``flat`` in ``shape``."""
    idxs = []
    for stride, size in zip(strides_for_shape(shape), shape):
        if isinstance(size, int) and size == 1: idxs.append(UOp.const(dtypes.index, 0))
        else: idxs.append((flat // stride) % size)
    return tuple(idxs)

def _is_zero(x) -> bool: return isinstance(x, int) and x == 0
def _is_one(x) -> bool: return isinstance(x, int) and x == 1
def _same_size(a, b) -> bool: return a == b if isinstance(a, int) and isinstance(b, int) else a is b

def _and(a: UOp | None, b: UOp | None) -> UOp | None:
    if a is None: return b
    if b is None: return a
    return a & b

@dataclass
class _Pending:
    """A value of ``KernelBuilder.lower`` still to build: from the values of ``sources`` (lowering keys), by ``combine``."""
    sources: tuple[tuple, ...]
    combine: Callable[[list[UOp]], UOp]

def _only(values: list[UOp]) -> UOp: return values[0]

@dataclass
class KernelBuilder:
    """Builds one kernel. ``realized`` maps tensor-graph nodes to the BUFFER that holds them."""
    realized: dict[UOp, UOp]
    slots: dict[UOp, int] = field(default_factory=dict)          # BUFFER uop -> PARAM slot
    range_count: int = 0
    memo: dict[tuple, UOp] = field(default_factory=dict)
    raw_reads: set[UOp] = field(default_factory=set)   # buffers read as they were before this schedule
    assigns_read: set[UOp] = field(default_factory=set)   # ASSIGN nodes read: buffers as one of this schedule's writes left them
    reduce_ranges: dict[tuple, tuple[UOp, ...]] = field(default_factory=dict)
    simplified: dict[UOp, UOp] = field(default_factory=dict)        # symbolic rewrites of index math so far

    def new_range(self, size, kind: AxisType) -> UOp:
        """A new loop of ``size`` trips. (Where it nests is derived from the kernel later: see
        codegen/kernel.py ``loop_nesting``.)"""
        rng = UOp(Ops.RANGE, dtypes.index, (sint_to_uop(size),), (self.range_count, kind))
        self.range_count += 1
        return rng

    def param(self, buffer: UOp) -> UOp:
        slot = self.slots.setdefault(buffer, len(self.slots))
        return UOp(Ops.PARAM, buffer.dtype.ptr(buffer.arg[2]), (), slot)

    def output_ranges(self, shape: tuple) -> tuple[UOp, ...]:
        ranges: list[UOp] = []
        for size in shape:
            if isinstance(size, int) and size == 1: ranges.append(UOp.const(dtypes.index, 0))
            else: ranges.append(self.new_range(size, AxisType.GLOBAL))
        return tuple(ranges)

    # ---------------------------------------------------------------- movement ops on indices
    def move_indices(self, node: UOp, idxs: tuple[UOp, ...], valid: UOp | None) -> tuple[tuple[UOp, ...], UOp | None, UOp | None]:
        """For a movement op, map output indices to source indices.
        Returns (source indices, new validity, the pad gate that must wrap the value or None)."""
        src_shape = node.src[0].shape
        if node.op is Ops.RESHAPE: return self.reshape_indices(idxs, node.shape, src_shape), valid, None
        if node.op is Ops.PERMUTE:
            src_idxs: list[UOp] = [None] * len(idxs)  # type: ignore[list-item]
            for out_axis, src_axis in enumerate(node.arg): src_idxs[src_axis] = idxs[out_axis]
            return tuple(src_idxs), valid, None
        if node.op is Ops.EXPAND:
            return tuple(UOp.const(dtypes.index, 0) if isinstance(s, int) and s == 1 else i for i, s in zip(idxs, src_shape)), valid, None
        if node.op is Ops.SHRINK: return tuple(i + b for i, (b, _) in zip(idxs, node.arg)), valid, None
        if node.op is Ops.FLIP: return tuple((s - 1) - i if f else i for i, s, f in zip(idxs, src_shape, node.arg)), valid, None
        if node.op is Ops.PAD:
            gate = None
            new_idxs = []
            for i, (before, after), size in zip(idxs, node.arg, src_shape):
                if _is_zero(before) and _is_zero(after):
                    new_idxs.append(i)
                    continue
                # valid where before <= i < before + size
                in_bounds = i < (before + size)
                if not _is_zero(before): in_bounds = (i < before).logical_not() & in_bounds
                gate = _and(gate, in_bounds)
                new_idxs.append(i - before)
            return tuple(new_idxs), _and(valid, gate), gate
        raise AssertionError(f"{node.op} is not a movement op")

    def reshape_indices(self, idxs: tuple[UOp, ...], shape: tuple, src_shape: tuple) -> tuple[UOp, ...]:
        """The indices into ``src_shape`` of the element at ``idxs`` in its reshape to ``shape``. Dimensions the two
        shapes share at the front or the back keep their index as it is, and size-1 dimensions are left out: only the
        dimensions in between are flattened, split again and simplified. (Simplifying every reshape's whole index
        was about half of the scheduler's time: a first MNIST step's schedule took 0.38 s, now 0.23.) The result is simplified, so the same
        element reached through different reshapes (a conv's output and its bias-added view in one multi-output
        kernel) has the same indices: one memo entry, and one reduce loop instead of two."""
        front = 0
        while front < min(len(shape), len(src_shape)) and _same_size(shape[front], src_shape[front]): front += 1
        back = 0
        while back < min(len(shape), len(src_shape)) - front and _same_size(shape[-1 - back], src_shape[-1 - back]): back += 1
        middle, src_middle = shape[front:len(shape) - back], src_shape[front:len(src_shape) - back]
        middle_idxs = idxs[front:len(idxs) - back]
        kept = [(i, size) for i, size in zip(middle_idxs, middle) if not _is_one(size)]
        if [size for _, size in kept] == [size for size in src_middle if not _is_one(size)]:   # only size-1 dims differ
            found = iter(i for i, _ in kept)
            moved = tuple(UOp.const(dtypes.index, 0) if _is_one(size) else next(found) for size in src_middle)
        else: moved = tuple(self.simplify(i) for i in unflatten_index(flat_index(middle_idxs, middle), src_middle))
        return idxs[:front] + moved + idxs[len(idxs) - back:]

    def simplify(self, index: UOp) -> UOp:
        """``index.simplify()``, sharing one memo across the kernel (indices grow from earlier ones)."""
        from fusegrad.uop.symbolic import symbolic
        result = graph_rewrite_memo(index, symbolic, memo=self.simplified)[index]
        self.simplified.setdefault(result, result)   # a fixed point: later indices built on it stop here
        return result

    # ---------------------------------------------------------------- values
    def lower(self, node: UOp, idxs: tuple[UOp, ...], valid: UOp | None) -> UOp:
        """The kernel-level value of tensor node ``node`` at indices ``idxs``.

        Iterative: a lazy chain of 100,000 ops is 100,000 frames of an explicit stack, not of the C stack. Each
        (node, indices, validity) is planned once (``_lower``), in the order a depth-first, left-to-right recursion
        would visit it, so ranges and PARAM slots are numbered as before and kernels come out the same."""
        key = (node, idxs, valid)
        memo = self.memo
        if (done := memo.get(key)) is not None: return done
        stack: list[list] = [[key, None]]   # [key, its _Pending once planned]
        while stack:
            frame = stack[-1]
            key = frame[0]
            if key in memo:
                stack.pop()
                continue
            if (pending := frame[1]) is not None:   # every source is done: combine them
                stack.pop()
                memo[key] = pending.combine([memo[k] for k in pending.sources])
                continue
            planned = self._lower(*key)
            if not isinstance(planned, _Pending):
                stack.pop()
                memo[key] = planned
                continue
            frame[1] = planned
            # (pushed last-first: the first source is lowered first, as a recursion would)
            stack.extend([k, None] for k in reversed(planned.sources) if k not in memo)
        return memo[(node, idxs, valid)]

    def load(self, buffer: UOp, shape: tuple, idxs: tuple[UOp, ...], valid: UOp | None) -> UOp:
        index = self.param(buffer).index(flat_index(idxs, shape), valid)
        return UOp(Ops.LOAD, buffer.dtype, (index,))

    def _lower(self, node: UOp, idxs: tuple[UOp, ...], valid: UOp | None) -> "UOp | _Pending":
        """One step of ``lower``: the value itself when it needs no other value (a load, a constant), else the
        (node, indices, validity) keys it is built from and how."""
        if (buffer := self.realized.get(node)) is not None and node.op is not Ops.BUFFER:
            if node.op is Ops.ASSIGN: self.assigns_read.add(node)
            return self.load(buffer, node.shape, idxs, valid)
        op = node.op
        if op is Ops.BUFFER:
            # reading the buffer node itself means its contents from before any assign in this schedule
            self.raw_reads.add(node)
            return self.load(node, node.shape, idxs, valid)
        if op is Ops.CONST:
            if isinstance(node.arg, UOp): return node.arg.cast(node.dtype)
            return UOp.const(node.dtype, node.arg)
        if op is Ops.BIND: return node.src[0].cast(node.dtype)
        if op is Ops.ARANGE: return idxs[0].cast(node.dtype)
        if op in GroupOp.Movement:
            src_idxs, src_valid, gate = self.move_indices(node, idxs, valid)
            if gate is None: return _Pending(((node.src[0], src_idxs, src_valid),), _only)
            return _Pending(((node.src[0], src_idxs, src_valid),), lambda values: gate.where(values[0], UOp.const(node.dtype, 0)))
        if op in GroupOp.Elementwise:
            # (an ALU's arg is a fact for codegen, e.g. the bound on a COS's angle: it travels into the kernel)
            return _Pending(tuple((s, idxs, valid) for s in node.src), lambda values: UOp(op, node.dtype, tuple(values), node.arg))
        if op is Ops.REDUCE_AXIS: return self.lower_reduce(node, idxs, valid)
        if op in (Ops.DETACH, Ops.CONTIGUOUS_BACKWARD, Ops.CONTIGUOUS): return _Pending(((node.src[0], idxs, valid),), _only)
        raise NotImplementedError(f"can't lower {op} into a kernel")

    def lower_reduce(self, node: UOp, idxs: tuple[UOp, ...], valid: UOp | None) -> "_Pending":
        reduce_op, axes = node.arg
        src = node.src[0]
        # reductions of the same shape at the same outer indices share their loops
        # (the validity gate is part of the key: a gated reduce may depend on other loops through it)
        range_key = (tuple(src.shape[a] for a in axes), axes, idxs, valid)
        if (ranges := self.reduce_ranges.get(range_key)) is None:
            ranges = tuple(self.new_range(src.shape[a], AxisType.REDUCE) for a in axes)
            self.reduce_ranges[range_key] = ranges
        src_idxs = list(idxs)
        for axis, rng in zip(axes, ranges): src_idxs[axis] = rng
        return _Pending(((src, tuple(src_idxs), valid),), lambda values: UOp(Ops.REDUCE, node.dtype, (values[0],) + ranges, reduce_op))

    # ---------------------------------------------------------------- stores
    def store_target(self, target: UOp, idxs: tuple[UOp, ...]) -> tuple[UOp, UOp | None, UOp]:
        """Where output indices land in the buffer under a (possibly viewed) assign target.
        Returns (flat index, gate, buffer)."""
        node, valid = target, None
        while node.op in GroupOp.Movement:
            # through a PAD, only the positions inside the unpadded region are written (the gate)
            if node.op is Ops.EXPAND: raise RuntimeError("can't assign through an EXPAND view (several outputs would share one element)")
            idxs, valid, _ = self.move_indices(node, idxs, valid)
            node = node.src[0]
        buffer = self.realized.get(node, node)
        if buffer.op is not Ops.BUFFER: raise RuntimeError(f"assign target must be a realized buffer, got {node.op}")
        return flat_index(idxs, node.shape), valid, buffer

def build_kernel(outputs: list[tuple[UOp, UOp, UOp]], realized: dict[UOp, UOp],
                 assigns_read: set[UOp] | None = None) -> tuple[UOp, list[UOp], set[UOp]]:
    """Build one kernel that computes every ``(value node, store target view, output buffer)``.
    All outputs share the shape of the first one (and so share their loops).
    Returns the AST (a SINK of STOREs), the BUFFER uops in PARAM slot order, and the buffers read
    with their contents from before this schedule (see KernelBuilder.raw_reads). ``assigns_read``, if
    given, receives the ASSIGN nodes whose results the kernel reads."""
    builder = KernelBuilder(realized)
    for _, _, out_buffer in outputs: builder.slots.setdefault(out_buffer, len(builder.slots))
    # outputs may differ only in size-1 dims: loops come from the non-1 dims, shared by all
    loop_shape = tuple(s for s in outputs[0][0].shape if not (isinstance(s, int) and s == 1))
    loop_ranges = builder.output_ranges(loop_shape)
    stores = []
    for value_node, target, out_buffer in outputs:
        shape = value_node.shape
        remaining = iter(loop_ranges)
        ranges = tuple(UOp.const(dtypes.index, 0) if isinstance(s, int) and s == 1 else next(remaining) for s in shape)
        value = builder.lower(value_node, ranges, None)
        if target is out_buffer:
            index, gate = flat_index(ranges, shape), None
        else:
            index, gate, out_buffer = builder.store_target(target, ranges)
        stores.append(builder.param(out_buffer).index(index, gate).store(value))
    ast = UOp(Ops.SINK, dtypes.void, tuple(stores))
    buffers = sorted(builder.slots, key=builder.slots.__getitem__)
    if assigns_read is not None: assigns_read.update(builder.assigns_read)
    return ast, buffers, builder.raw_reads

def reads_other_elements(ast: UOp, slot: int) -> bool:
    """Does the kernel read buffer ``slot`` anywhere other than the element it stores to? (Then
    writing it in place would race with those reads.)"""
    from fusegrad.uop.symbolic import symbolic
    from fusegrad.uop.ops import graph_rewrite
    ast = graph_rewrite(ast, symbolic)
    stores = [x for x in ast.toposort if x.op is Ops.STORE and x.src[0].src[0].op is Ops.PARAM and x.src[0].src[0].arg == slot]
    store_indices = {x.src[0].src[1] for x in stores}
    loads = [x for x in ast.toposort if x.op is Ops.LOAD and x.src[0].op is Ops.INDEX and x.src[0].src[0].op is Ops.PARAM
             and x.src[0].src[0].arg == slot]
    return any(ld.src[0].src[1] not in store_indices for ld in loads)
