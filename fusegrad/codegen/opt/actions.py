"""Kernel optimization actions: small named rewrites of a kernel's ranges (codegen/kernel.py defines the
*axes* they address).

UPCAST ranges end up innermost: the reduce that computes them keeps one accumulator per upcast element
(a small register array), so a matmul becomes a register-tiled micro-kernel that the C compiler vectorizes.

| action  | on           | effect |
|---------|--------------|--------|
| UPCAST  | global axis  | split off an inner range of ``arg`` that runs innermost, with its own accumulators |
| UNROLL  | reduce axis  | split off ``arg`` partial sums (lanes), added up after the loop |
| THREAD  | global axis 0| run the outermost loop on ``arg`` CPU threads |
| SWAP    | global axis  | exchange the nesting order of global axes ``axis`` and ``arg`` |
| LOCAL   | global axis  | split off an inner LOCAL range of ``arg``: threads of one workgroup (``lidx``) |
| GROUP   | reduce axis  | split off an inner GROUP_REDUCE range of ``arg``: that many threads each reduce a part, then combine |
| GROUPTOP| reduce axis  | like GROUP, but the threads take the outer (top) part of the range: thread t reduces one contiguous block |
| PADTO   | global/reduce| round the range up to a multiple of ``arg``; the extra iterations neither load, store nor contribute |
| NOLOCALS| (no axis)    | launch without workgroups (``idx`` launch indices, no local size); later LOCAL/GROUP are illegal |
| GATHER  | (no axis)    | vector loops (codegen/vectorize.py) gather/scatter non-contiguous lanes even where the renderer's ``vector_gathers`` policy wouldn't |
| STAGE   | any axis     | copy each small input read along the axis, once per kernel call, into a buffer where the axis is innermost (contiguous) |
| PACK    | outermost axis | copy each input read along that loop, once per iteration, into a thread's own panel laid out in the tile's order |
| TC      | (a choice)   | run the reduce on a matrix instruction the renderer declares (``tc.py``); ``arg`` is tc_opt |

LOCAL/GROUP/GROUPTOP/NOLOCALS need a renderer with ``has_local`` (and GROUP ``has_shared``); PADTO works
everywhere. Legality is checked when an action is applied: amounts must divide (after PADTO they do),
a workgroup (LOCAL x GROUP sizes) stays within ``renderer.local_max_threads`` and, per launch dimension,
``renderer.local_max``; the grouped reduces' partials fit in ``renderer.shared_max`` bytes (checked after
every action, since a later UPCAST grows them). A reduce nested inside another reduce's loop can't be
grouped (its barrier would sit inside a loop whose trip is per reduce step). The grouped reduce is
lowered in codegen/lowering.py (``lower_group_reduces``): partials go to a DEFINE_LOCAL, a BARRIER,
then every thread combines them and only the group's thread 0 stores. The kernel-wide NOLOCALS and GATHER flags
live in the SINK's arg (``KernelInfo``), so the AST stays the whole state of an optimized kernel. GATHER (like
STAGE, fusegrad's own) lets BEAM measure what the renderer's gather policy otherwise decides by rule.

STAGE exists for register tiles whose vector axis runs along a *strided* small input: a conv's
output channels index its weights with a stride of ``cin*kh*kw``. Staging copies the weights once
(``STAGE`` loops before the main loops, then a BARRIER) into a buffer laid out with the channel axis
innermost, so a tile can take 16 output channels as one AVX-512 vector while the image rows (20 or 24
wide, which no 16-lane vector divides) become broadcast rows. On the CPU the staged buffer is an array
shared by its threads (stack or heap, at most ``renderer.stage_max_bytes``); on GPU-style renderers it is
shared memory, filled by every thread before a barrier.

PACK is the other half of a big matmul's cache blocking (BLIS's packed B panel), for ``x @ w.T``, the form of
every Linear layer: the weight rows are contiguous along the reduce, so a register tile whose vector runs
along the output features would gather its lanes. PACK copies, at the start of each iteration of the
outermost loop (one column block: 32 output features), that block's slice of every input that depends on
the loop into a panel in the tile's own order, upcast axes innermost: ``panel[k][j] = w[n0 + j][k]``.
The tile then reads the panel contiguously, as it reads the B operand of ``x @ w``, and the copy is repaid
by every row block that reuses the panel (GPT-2's 128-row Linear: 16 row blocks). The panel belongs to
the thread running the iteration (a DEFINE_REG: an OpenMP private array, an LLVM alloca), so the
outermost loop can be THREAD; at most ``renderer.pack_max_bytes``. CPU renderers only: workgroup
renderers stage through shared memory (STAGE). After TC, an operand row is N loads N constant offsets apart
(the instruction's lanes, not a range): loads that differ only by a constant share one panel, lane innermost
(``_lane_groups``), so a bfloat16 matmul's b panel is one contiguous array its vector loads read as before.

A RANGE carries only its trip count: where it runs in the loop nest is derived from the kernel's structure
when it is needed (``loop_nesting`` in codegen/kernel.py), so an action rewrites ranges without repairing
the loops around them.
"""
from __future__ import annotations
import dataclasses
from dataclasses import dataclass
from enum import Enum, auto
from fusegrad.dtype import dtypes
from fusegrad.helpers import prod
from fusegrad.uop.ops import UOp, Ops, AxisType
from fusegrad.codegen.kernel import kernel_info, range_size, AXIS_RANK, kernel_axes, next_range_id, local_axes, \
    shared_memory_bytes, free_ranges, ranges_in
from fusegrad.codegen.lowering import identity_value, launch_groups, slot_index

class KernelOptError(Exception):
    """An optimization action that is not legal for this kernel (the message says why)."""

class OptOps(Enum):
    UPCAST = auto(); UNROLL = auto(); LOCAL = auto(); GROUP = auto(); GROUPTOP = auto(); PADTO = auto()
    THREAD = auto(); NOLOCALS = auto(); SWAP = auto(); TC = auto(); STAGE = auto(); GATHER = auto(); PACK = auto()
    def __repr__(self) -> str: return f"OptOps.{self.name}"

@dataclass(frozen=True)
class Opt:
    op: OptOps
    axis: int | None = None
    arg: int | tuple | None = None
    def __repr__(self) -> str: return f"Opt(op={self.op!r}, axis={self.axis}, arg={self.arg})"

def _split(ast: UOp, rng: UOp, amount: int, inner_kind: AxisType) -> tuple[UOp, UOp, UOp]:
    """Replace ``rng`` by outer*amount + inner. Returns (ast, outer, inner)."""
    size = range_size(rng)
    if not isinstance(size, int): raise KernelOptError(f"can't split symbolic range {rng.arg}")
    if amount <= 1 or size % amount != 0: raise KernelOptError(f"{amount} doesn't divide range of size {size}")
    # the outer part keeps the range's id, so it keeps its place in the loop order
    outer = UOp(Ops.RANGE, dtypes.index, (UOp.const(dtypes.index, size // amount),), rng.arg)
    inner = UOp(Ops.RANGE, dtypes.index, (UOp.const(dtypes.index, amount),), (next_range_id(ast), inner_kind))
    return ast.substitute({rng: outer * amount + inner}), outer, inner

def apply_opt(ast: UOp, opt: Opt, renderer) -> UOp:
    """Apply one action or raise KernelOptError (the message says what is illegal)."""
    if opt.op is OptOps.TC:
        from fusegrad.codegen.opt.tc import apply_tensor_core   # (tc.py builds on this module's actions: imported on use)
        return apply_tensor_core(ast, renderer, opt.axis, opt.arg)
    if opt.op is OptOps.NOLOCALS: return _nolocals(ast, renderer)
    if opt.op is OptOps.GATHER: return _gather(ast, renderer)
    if opt.op in (OptOps.LOCAL, OptOps.GROUP, OptOps.GROUPTOP):
        if not renderer.has_local:
            raise KernelOptError(f"{opt.op.name} needs local (workgroup) dims, which the {renderer.device} renderer doesn't have")
        if opt.op is not OptOps.LOCAL and not renderer.has_shared:
            raise KernelOptError(f"{opt.op.name} needs shared memory, which the {renderer.device} renderer doesn't have")
        if kernel_info(ast).dont_use_locals: raise KernelOptError(f"{opt.op.name} after NOLOCALS: this kernel uses no locals")
    axes = kernel_axes(ast)
    if opt.axis is None or not 0 <= opt.axis < len(axes): raise KernelOptError(f"axis {opt.axis} is out of range ({len(axes)} axes)")
    rng = axes[opt.axis]
    kind = rng.arg[1]
    amount = opt.arg if opt.arg else range_size(rng)
    if not isinstance(amount, int): raise KernelOptError(f"{opt} needs an int amount")
    if opt.op is OptOps.UPCAST:
        if kind is AxisType.REDUCE: raise KernelOptError("UPCAST is for non-reduce axes; use UNROLL")
        if kind is AxisType.GROUP_REDUCE: raise KernelOptError("UPCAST is for non-reduce axes, not grouped reduce threads")
        if amount > 64: raise KernelOptError(f"UPCAST amount {amount} is above 64")
        if amount == range_size(rng): new = ast.substitute({rng: rng.replace(arg=(rng.arg[0], AxisType.UPCAST))})
        else: new = _split(ast, rng, amount, AxisType.UPCAST)[0]
    elif opt.op is OptOps.UNROLL:
        if kind is not AxisType.REDUCE: raise KernelOptError("UNROLL is for reduce axes")
        if amount > 64: raise KernelOptError(f"UNROLL amount {amount} is above 64")
        new = _unroll(ast, rng, amount)
    elif opt.op is OptOps.SWAP:
        other = opt.arg
        if not isinstance(other, int) or not 0 <= other < len(axes) or other == opt.axis: raise KernelOptError(f"SWAP needs another axis, got {other}")
        second = axes[other]
        if AXIS_RANK[kind] != 0 or AXIS_RANK[second.arg[1]] != 0: raise KernelOptError("SWAP exchanges two global axes")
        # loops nest in id order: exchanging ids exchanges the loops
        return _exchange_range_ids(ast, rng.arg[0], second.arg[0])
    elif opt.op is OptOps.THREAD:
        if opt.axis != 0 or kind not in (AxisType.GLOBAL, AxisType.LOOP): raise KernelOptError("THREAD splits the outermost global axis")
        if not renderer.has_threads: raise KernelOptError(f"the {renderer.device} renderer has no threads")
        return ast.substitute({rng: rng.replace(arg=(rng.arg[0], AxisType.THREAD))})
    elif opt.op is OptOps.LOCAL:
        if kind not in (AxisType.GLOBAL, AxisType.LOOP): raise KernelOptError(f"LOCAL is for global axes, axis {opt.axis} is {kind.name}")
        if amount == range_size(rng): new = ast.substitute({rng: rng.replace(arg=(rng.arg[0], AxisType.LOCAL))})
        else: new = _split(ast, rng, amount, AxisType.LOCAL)[0]
    elif opt.op in (OptOps.GROUP, OptOps.GROUPTOP):
        if kind is not AxisType.REDUCE: raise KernelOptError(f"{opt.op.name} is for reduce axes, axis {opt.axis} is {kind.name}")
        new = _group(ast, rng, amount, top=opt.op is OptOps.GROUPTOP)
    elif opt.op is OptOps.PADTO:
        new = pad_range(ast, rng, amount)
    elif opt.op is OptOps.STAGE:
        new = _stage(ast, rng, renderer)
    elif opt.op is OptOps.PACK:
        if renderer.has_local: raise KernelOptError(f"PACK makes per-thread panels of CPU loops; the {renderer.device} renderer stages with STAGE")
        if opt.axis != 0 or kind not in (AxisType.GLOBAL, AxisType.LOOP, AxisType.THREAD): raise KernelOptError("PACK packs per iteration of the outermost loop (axis 0)")
        new = _pack(ast, rng, renderer)
    else: raise KernelOptError(f"{opt.op.name} is not supported here")
    return _check_launch(new, renderer)

def _check_launch(ast: UOp, renderer) -> UOp:
    """Raise KernelOptError when the workgroup or its shared memory is too big for the renderer."""
    if not renderer.has_local: return ast
    local_ranges = local_axes(ast)
    if local_ranges:
        threads = prod(range_size(r) for r in local_ranges)
        if threads > renderer.local_max_threads:
            raise KernelOptError(f"a workgroup of {threads} threads exceeds the {renderer.device} renderer's maximum of "
                                 f"{renderer.local_max_threads}")
        for dim, group in enumerate(launch_groups(local_ranges)):
            size = prod(range_size(r) for r in group)
            if renderer.local_max is not None and size > renderer.local_max[dim]:
                raise KernelOptError(f"local dim {dim} of size {size} exceeds the {renderer.device} renderer's limit {renderer.local_max[dim]}")
    if (need := shared_memory_bytes(ast)) > renderer.shared_max:
        raise KernelOptError(f"exceeds maximum shared memory size: needs {need}, max {renderer.shared_max}")
    return ast

def _nolocals(ast: UOp, renderer) -> UOp:
    if not renderer.has_local: raise KernelOptError(f"NOLOCALS is meaningless: the {renderer.device} renderer has no locals")
    if kernel_info(ast).dont_use_locals: raise KernelOptError("NOLOCALS was already applied")
    if local_axes(ast): raise KernelOptError("can't apply NOLOCALS to a kernel that already uses locals (LOCAL/GROUP)")
    if ast.op is not Ops.SINK: raise KernelOptError("NOLOCALS needs a kernel SINK")
    return ast.replace(arg=dataclasses.replace(kernel_info(ast), dont_use_locals=True))

def _gather(ast: UOp, renderer) -> UOp:
    if not renderer.vector_loops: raise KernelOptError(f"GATHER is meaningless: the {renderer.device} renderer makes no vector loops")
    if renderer.vector_gathers != "register_tiles": raise KernelOptError(f"the {renderer.device} renderer's gathers are {renderer.vector_gathers!r} already")
    if kernel_info(ast).gather_lanes: raise KernelOptError("GATHER was already applied")
    if ast.op is not Ops.SINK: raise KernelOptError("GATHER needs a kernel SINK")
    return ast.replace(arg=dataclasses.replace(kernel_info(ast), gather_lanes=True))

def _group(ast: UOp, rng: UOp, amount: int, top: bool) -> UOp:
    """Split reduce range ``rng`` into a REDUCE part and a GROUP_REDUCE part of ``amount`` threads,
    in every REDUCE over it: REDUCE(v, rng) becomes REDUCE(v', rest, group). GROUP takes the inner
    part of the range (rng = rest*amount + group), GROUPTOP the top (rng = group*(size/amount) + rest)."""
    size = range_size(rng)
    if not isinstance(size, int): raise KernelOptError(f"can't group symbolic range {rng.arg}")
    if amount <= 1 or size % amount != 0: raise KernelOptError(f"{amount} doesn't divide reduce of size {size}")
    reduces = [x for x in ast.toposort if x.op is Ops.REDUCE and rng in x.src[1:]]
    for red in reduces:
        loops = [r for r in free_ranges(red) if r.arg[1] not in (AxisType.GLOBAL, AxisType.LOCAL, AxisType.UPCAST)]
        if loops: raise KernelOptError(f"can't group a reduce nested inside another loop ({loops[0].arg[1].name} range {loops[0].arg[0]}): "
                                       "its barrier would run once per iteration of that loop")
    group = UOp(Ops.RANGE, dtypes.index, (UOp.const(dtypes.index, amount),), (next_range_id(ast), AxisType.GROUP_REDUCE))
    if amount == size: rest, expr = None, group
    else:
        rest = UOp(Ops.RANGE, dtypes.index, (UOp.const(dtypes.index, size // amount),), rng.arg)
        expr = group * (size // amount) + rest if top else rest * amount + group
    mapping: dict[UOp, UOp] = {}
    for red in reduces:   # in toposort order: a reduce inside another's value is rebuilt first
        value = red.src[0].substitute({**mapping, rng: expr})
        ranges: list[UOp] = []
        for r in red.src[1:]: ranges += ([rest] if rest is not None else []) + [group] if r is rng else [r]
        mapping[red] = UOp(Ops.REDUCE, red.dtype, (value,) + tuple(ranges), red.arg)
    # the range's other uses (outside the reduces) see the split expression
    return ast.substitute(mapping).substitute({rng: expr})

def pad_range(ast: UOp, rng: UOp, amount: int) -> UOp:
    """Round range ``rng`` up to a multiple of ``amount``. Loads and stores whose address moves
    along it are gated by ``rng < size`` (a gated load reads 0), stores that happen inside it are
    gated too, and each REDUCE over it sees its identity for the extra iterations: the value is
    wrapped in ``valid.where(value, identity)`` unless the reduce is a sum whose value is zero
    whenever its gated loads are (a product of gated loads, say), where the gated loads suffice."""
    size = range_size(rng)
    if rng.arg[1] not in (AxisType.GLOBAL, AxisType.LOOP, AxisType.THREAD, AxisType.REDUCE):
        raise KernelOptError(f"PADTO pads global and reduce axes, not {rng.arg[1].name} ones")
    if not isinstance(size, int): raise KernelOptError(f"can't pad symbolic range {rng.arg}")
    if amount <= 1: raise KernelOptError(f"PADTO needs an amount of at least 2, got {amount}")
    padded = -(-size // amount) * amount
    if padded == size: raise KernelOptError(f"nothing to pad: {size} is already a multiple of {amount}")
    if size <= amount // 4: raise KernelOptError(f"pad adds more than quadruple the work ({size} -> {padded})")
    new = rng.replace(src=(UOp.const(dtypes.index, padded),))
    valid = new < size
    ast = ast.substitute({rng: new})
    def gate(index: UOp) -> UOp:
        return index.replace(src=(index.src[0], index.src[1], valid if len(index.src) < 3 else valid.alu(Ops.AND, index.src[2])))
    gated: dict[UOp, UOp] = {}
    for x in ast.toposort:
        if x.op is Ops.INDEX and x.src[0].op in (Ops.PARAM, Ops.DEFINE_LOCAL) and new in ranges_in(x.src[1]): gated[x] = gate(x)
    for st in [x for x in ast.toposort if x.op is Ops.STORE]:
        if st.src[0] not in gated and new in free_ranges(st): gated[st.src[0]] = gate(st.src[0])
    ast = ast.substitute(gated)
    mapping: dict[UOp, UOp] = {}
    for red in [x for x in ast.toposort if x.op is Ops.REDUCE and new in x.src[1:]]:
        value = red.src[0].substitute(mapping) if mapping else red.src[0]
        if not (red.arg is Ops.ADD and _zero_when_padded(value, new)):
            value = valid.where(value, UOp.const(value.dtype, identity_value(red.arg, value.dtype)))
        mapping[red] = red.replace(src=(value,) + red.src[1:])
    return ast.substitute(mapping) if mapping else ast

def _copyable_loads(ast: UOp, rng: UOp, room: int, order_of) -> list[tuple[UOp, list[UOp]]]:
    """The input loads (buffers the kernel doesn't write) whose address moves along ``rng``, over constant-size
    ranges, each with the slot order of its copy (``order_of(ranges)``; None skips the load), taken in graph order
    while their copies fit ``room`` bytes (STAGE and PACK choose their loads this way)."""
    written = {x.src[0].src[0] for x in ast.toposort if x.op is Ops.STORE and x.src[0].op is Ops.INDEX}
    chosen: list[tuple[UOp, list[UOp]]] = []
    for load in ast.toposort:
        if load.op is not Ops.LOAD or load.src[0].op is not Ops.INDEX or load.src[0].src[0].op is not Ops.PARAM: continue
        ranges = ranges_in(load.src[0])
        if load.src[0].src[0] in written or rng not in ranges: continue
        if any(r.arg[1] is AxisType.STAGE or not isinstance(range_size(r), int) for r in ranges): continue
        if (order := order_of(ranges)) is None: continue
        size = prod(range_size(r) for r in order) * load.dtype.itemsize
        if size > room: continue
        room -= size
        chosen.append((load, order))
    return chosen

def _by_id(ranges) -> list[UOp]: return sorted(ranges, key=lambda r: r.arg[0])

def staged_loads(ast: UOp, rng: UOp, renderer) -> list[tuple[UOp, list[UOp]]]:
    """The loads STAGE copies along ``rng``, each with its slot order: inputs (not written by the kernel)
    whose address moves along ``rng``, over constant-size ranges, while the copies fit the staging
    memory. The order is: other loop ranges by id, then ``rng``, then UPCAST ranges, so ``rng`` (or
    its upcast part) is contiguous."""
    def order_of(ranges) -> list[UOp]:
        others = [r for r in ranges if r is not rng]
        return _by_id(r for r in others if r.arg[1] is not AxisType.UPCAST) + [rng] + _by_id(r for r in others if r.arg[1] is AxisType.UPCAST)
    return _copyable_loads(ast, rng, _staging_room(ast, renderer), order_of)

def _staging_room(ast: UOp, renderer) -> int:
    """Bytes left for staged copies: ``renderer.stage_max_bytes`` on the CPU, shared memory on GPU-style renderers."""
    limit = renderer.stage_max_bytes if not renderer.has_local else renderer.shared_max
    return limit - sum(x.dtype.size * x.dtype.base.itemsize for x in ast.toposort if x.op is Ops.DEFINE_LOCAL)

def _copy(buffer: UOp, load: UOp, order: list[UOp], next_id: int) -> tuple[UOp, int]:
    """``buffer[slot(order)] = load`` for every combination of ``order``'s ranges, over fresh STAGE ranges that nest
    in ``order`` (the last innermost, so the copy writes along the buffer; gated loads copy their zeros too):
    (the END that closes the copy, the next free range id)."""
    copies = [UOp(Ops.RANGE, dtypes.index, (r.src[0],), (next_id + i, AxisType.STAGE)) for i, r in enumerate(order)]
    fill = buffer.index(slot_index(copies)).store(load.substitute(dict(zip(order, copies))))
    return UOp(Ops.END, dtypes.void, (fill,) + tuple(copies)), next_id + len(order)

def _stage(ast: UOp, rng: UOp, renderer) -> UOp:
    """Stage every input load whose address moves along ``rng`` and that reads few enough elements
    (``staged_loads``).

    A staged load ``buf[f(r1..rn)]`` becomes ``stage[slot(r1..rn)]``: ``stage`` holds one element per
    combination of the load's ranges (its footprint), with ``rng`` contiguous. The copy runs once,
    before every other loop, over fresh STAGE ranges (gated loads copy their zeros too); a BARRIER
    after it orders the reads. Later actions transform the staged read like any load."""
    staged = staged_loads(ast, rng, renderer)
    if not staged:
        raise KernelOptError(f"STAGE: no input read along axis {rng.arg[0]} fits in {_staging_room(ast, renderer)} bytes of staging memory")
    next_id, number = next_range_id(ast), sum(1 for x in ast.toposort if x.op is Ops.DEFINE_LOCAL)
    mapping: dict[UOp, UOp] = {}
    for load, order in staged:
        buffer = UOp(Ops.DEFINE_LOCAL, load.dtype.ptr(prod(range_size(r) for r in order), local=True), (), f"stage{number}")
        number += 1
        copied, next_id = _copy(buffer, load, order, next_id)
        mapping[load] = buffer.index(slot_index(order)).load(UOp(Ops.BARRIER, dtypes.void, (buffer, copied)))
    return ast.substitute(mapping)

def packed_loads(ast: UOp, rng: UOp, renderer) -> list[tuple[UOp, list[UOp]]]:
    """The loads PACK copies per iteration of ``rng``, each with its panel's slot order: inputs whose address
    moves along ``rng`` and along some UPCAST range (a tile operand), over constant-size ranges, while the panels
    fit ``renderer.pack_max_bytes``. The order is the load's other ranges by id, then its UPCAST ranges by id, so
    the tile's vector lanes are contiguous."""
    def order_of(ranges) -> list[UOp] | None:
        if not any(r.arg[1] is AxisType.UPCAST for r in ranges): return None
        return _by_id(r for r in ranges if r is not rng and r.arg[1] is not AxisType.UPCAST) + _by_id(r for r in ranges if r.arg[1] is AxisType.UPCAST)
    room = renderer.pack_max_bytes - sum(x.dtype.size * x.dtype.base.itemsize for x in ast.toposort if x.op is Ops.DEFINE_REG)
    return _copyable_loads(ast, rng, room, order_of)

def _pack(ast: UOp, rng: UOp, renderer) -> UOp:
    """Pack every load ``packed_loads`` picks (see the module doc). A packed load ``buf[f(rng, r1..rn)]`` becomes
    ``panel[slot(r1..rn)]``; the panel is filled by loops over fresh STAGE ranges that depend on ``rng`` only, so
    they run at the start of each of its iterations, and the reads wait for the END that closes them. (The copy
    writes along the panel: written 32 floats apart instead, reading w along its rows, the 96 KB panel's lines
    thrash the L1 cache; a C benchmark of packing GPT-2's 3072x768 weight: 1.6-2.0 ms that way, 0.54 ms this way.)"""
    packed = packed_loads(ast, rng, renderer)
    if not packed:
        raise KernelOptError(f"PACK: no tile operand read along axis {rng.arg[0]} fits a {renderer.pack_max_bytes}-byte panel")
    next_id = next_range_id(ast)
    number = 1 + max((x.arg for x in ast.toposort if x.op is Ops.DEFINE_REG), default=-1)
    mapping: dict[UOp, UOp] = {}
    # a tensor-core kernel reads each operand row as N loads N constant offsets apart (the instruction's lanes):
    # those share one panel, lane by lane, instead of making N panels of one element per slot
    groups = _lane_groups(packed) if any(x.op is Ops.WMMA for x in ast.toposort) else [[(load, order, 0)] for load, order in packed]
    for group in groups:
        load, order, _ = group[0]
        if len(group) == 1:
            panel = UOp(Ops.DEFINE_REG, load.dtype.ptr(prod(range_size(r) for r in order)), (), number)
            copied, next_id = _copy(panel, load, order, next_id)
            mapping[load] = panel.index(slot_index(order)).load(copied)
        else:
            lanes = len(group)
            panel = UOp(Ops.DEFINE_REG, load.dtype.ptr(prod(range_size(r) for r in order) * lanes), (), number)
            copies, next_id = _copy_lanes(panel, group, next_id)
            for lane, (member, _, _) in enumerate(group): mapping[member] = panel.index(slot_index(order) * lanes + lane).load(*copies)
        number += 1
    return ast.substitute(mapping)

def _lane_groups(packed: list[tuple[UOp, list[UOp]]]) -> list[list[tuple[UOp, list[UOp], int]]]:
    """``packed`` (load, order) pairs grouped by what they read apart from a constant offset: the same buffer, the
    same ranges with the same coefficients, the same slot order, no gate. Each group is sorted by offset and holds
    (load, order, offset)."""
    from fusegrad.uop.symbolic import linear_terms
    groups: dict[tuple, list[tuple[UOp, list[UOp], int]]] = {}
    for load, order in packed:
        index = load.src[0]
        flat = linear_terms(index.src[1]) if len(index.src) == 2 and len(load.src) == 1 else None
        key = (index.src[0], frozenset(flat[0].items()), tuple(order)) if flat is not None else (load,)
        groups.setdefault(key, []).append((load, order, flat[1] if flat is not None else 0))
    return [sorted(group, key=lambda member: member[2]) for group in groups.values()]

def _copy_lanes(panel: UOp, group: list[tuple[UOp, list[UOp], int]], next_id: int) -> tuple[list[UOp], int]:
    """``panel[slot(order) * lanes + lane] = load_lane`` for the loads of a lane group: one copy loop per run of
    consecutive offsets, over fresh STAGE ranges for ``order`` and one for the run (innermost, so a run of a row's
    lanes is copied as a vector). Returns (the ENDs that close the copies, the next free range id)."""
    ends, lanes = [], len(group)
    start = 0
    while start < lanes:
        end = start + 1
        while end < lanes and group[end][2] == group[end - 1][2] + 1: end += 1
        load, order, _ = group[start]
        copies = [UOp(Ops.RANGE, dtypes.index, (r.src[0],), (next_id + i, AxisType.STAGE)) for i, r in enumerate(order)]
        run = UOp(Ops.RANGE, dtypes.index, (UOp.const(dtypes.index, end - start),), (next_id + len(order), AxisType.STAGE))
        next_id += len(order) + 1
        index = load.src[0]
        source = index.src[0].index(index.src[1].substitute(dict(zip(order, copies))) + run)
        fill = panel.index(slot_index(copies) * lanes + (run + start)).store(UOp(Ops.LOAD, load.dtype, (source,)))
        ends.append(UOp(Ops.END, dtypes.void, (fill,) + tuple(copies) + (run,)))
        start = end
    return ends, next_id

def _zero_when_padded(value: UOp, rng: UOp) -> bool:
    """Is ``value`` exactly 0 whenever the loads whose address depends on ``rng`` read 0? (Only
    through ops with f(0, 0) = 0: a constant, inf or NaN factor would make a padded step count.)"""
    zero: dict[UOp, bool] = {}
    for x in value.toposort:
        if x.op is Ops.LOAD: z = rng in ranges_in(x.src[0])
        elif x.op is Ops.CONST: z = x.arg == 0
        elif x.op in (Ops.ADD, Ops.SUB, Ops.MUL, Ops.MAX, Ops.OR, Ops.XOR, Ops.MULACC): z = all(zero[s] for s in x.src)
        elif x.op in (Ops.NEG, Ops.CAST, Ops.TRUNC, Ops.SQRT): z = zero[x.src[0]]
        elif x.op is Ops.WHERE: z = zero[x.src[1]] and zero[x.src[2]]
        else: z = False
        zero[x] = z
    return zero[value]

def _exchange_range_ids(ast: UOp, a: int, b: int) -> UOp:
    """Give the ranges numbered ``a`` the number ``b`` and the other way round (one substitution
    for both, so neither is renamed twice)."""
    swap = {a: b, b: a}
    return ast.substitute({x: x.replace(arg=(swap[x.arg[0]], x.arg[1])) for x in ast.toposort
                           if x.op is Ops.RANGE and x.arg[0] in swap})

def _unroll(ast: UOp, rng: UOp, amount: int) -> UOp:
    """Split reduce range r into (outer, lane): each REDUCE over r becomes a REDUCE over the lane
    of a REDUCE over outer. The inner reduce keeps ``amount`` partial accumulators side by side
    (one per lane, which the C compiler vectorizes); the outer one adds them up."""
    size = range_size(rng)
    if not isinstance(size, int) or size % amount != 0: raise KernelOptError(f"{amount} doesn't divide reduce of size {size}")
    outer = UOp(Ops.RANGE, dtypes.index, (UOp.const(dtypes.index, size // amount),), rng.arg)
    lane = UOp(Ops.RANGE, dtypes.index, (UOp.const(dtypes.index, amount),), (next_range_id(ast), AxisType.UPCAST))
    mapping = {}
    for red in [x for x in ast.toposort if x.op is Ops.REDUCE and rng in x.src[1:]]:
        value = red.src[0].substitute({rng: outer * amount + lane})
        # (outer takes rng's place among the reduce's ranges: the loops keep their nesting order)
        partial = UOp(Ops.REDUCE, red.dtype, (value,) + tuple(outer if r is rng else r for r in red.src[1:]), red.arg)
        mapping[red] = UOp(Ops.REDUCE, red.dtype, (partial, lane), red.arg)
    # then the range's other uses (outside the reduces)
    return ast.substitute(mapping).substitute({rng: outer * amount + lane})
