"""The memory planner: intermediate buffers whose lifetimes don't overlap share memory.

An intermediate is a buffer that a schedule writes and later reads but that no live tensor
refers to afterwards. Walking the schedule in order, each intermediate takes a free block of the
same size and device if one exists (a view over it, so the dtype may differ) and gives it back
after its last use. ``NO_MEMORY_PLANNER=1`` turns this off.
"""
from __future__ import annotations
from typing import Iterable, Sequence
from fusegrad.device import Buffer
from fusegrad.dtype import dtypes
from fusegrad.helpers import DEBUG, NO_MEMORY_PLANNER
from fusegrad.uop.ops import UOp

def plan_memory(buffer_lists: Sequence[Sequence[UOp]], keep: set[UOp], buffers: dict) -> tuple[int, int]:
    """Assign shared storage to intermediate BUFFER uops.

    ``buffer_lists`` are the buffers of each step in run order; ``keep`` are buffers that must stay
    separate (referenced after the run); ``buffers`` maps BUFFER uops to Buffer objects and is
    updated in place. Returns (bytes before, bytes after)."""
    if NO_MEMORY_PLANNER: return 0, 0
    first_use: dict[UOp, int] = {}
    last_use: dict[UOp, int] = {}
    for step, uops in enumerate(buffer_lists):
        for b in uops:
            existing = buffers.get(b)
            if b in keep or (existing is not None and existing.is_allocated()): continue
            first_use.setdefault(b, step)
            last_use[b] = step
    if not first_use: return 0, 0
    starts: dict[int, list[UOp]] = {}
    ends: dict[int, list[UOp]] = {}
    for b, step in first_use.items(): starts.setdefault(step, []).append(b)
    for b, step in last_use.items(): ends.setdefault(step, []).append(b)
    free_blocks: dict[tuple[str, int], list[Buffer]] = {}
    block_of: dict[UOp, Buffer] = {}
    before = after = 0
    for step in range(len(buffer_lists)):
        for b in starts.get(step, []):
            _, device, size = b.arg
            nbytes = size * b.dtype.itemsize
            before += nbytes
            # best fit: the smallest free block on this device that is big enough
            candidates = [(size_, i) for (dev, size_), blocks in free_blocks.items() if dev == device and size_ >= nbytes
                          for i in range(len(blocks))]
            if candidates:
                best_size = min(candidates)[0]
                block = free_blocks[(device, best_size)].pop()
            else:
                block = Buffer(device, nbytes, dtypes.uint8)
                after += nbytes
            block_of[b] = block
            buffers[b] = Buffer(device, size, b.dtype, base=block, offset=0)
        for b in ends.get(step, []):
            block = block_of[b]
            free_blocks.setdefault((block.device, block.nbytes), []).append(block)
    if DEBUG >= 1 and before != after:
        print(f"memory reduced from {before/1e6:.2f} MB -> {after/1e6:.2f} MB, {len(first_use)} -> "
              f"{len({id(b) for b in block_of.values()})} bufs")
    return before, after

def referenced_buffers(uops: Iterable[UOp], among: set[UOp] | None = None) -> set[UOp]:
    """Every BUFFER uop reachable from ``uops`` (only those in ``among``, when given: ``UOp.reached`` looks a
    schedule's buffers up in each graph, so realizing a small schedule doesn't walk every live graph)."""
    from fusegrad.uop.ops import Ops
    found: set[UOp] = set()
    for u in uops:
        if u.base.op is Ops.BUFFER and u.op in (Ops.BUFFER, Ops.RESHAPE): found.add(u.base)
        elif among is None: found.update(x for x in u.toposort if x.op is Ops.BUFFER)
        else: found.update(u.reached(among))
    return found if among is None else found & among
