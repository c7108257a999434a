"""Kernel optimization: small named actions on a kernel's ranges, a heuristic that picks them,
and (search.py) BEAM search over them.

A kernel's *axes* are its non-UPCAST ranges, globals first then reduces, each group in id order:
``Opt(OptOps.UPCAST, axis=1, arg=4)`` splits global axis 1 into an outer loop and an inner
UPCAST range of 4. UPCAST ranges end up innermost: the reduce that computes them keeps one
accumulator per upcast element (a small register array), so a matmul becomes a register-tiled
micro-kernel that the C compiler vectorizes.

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
| STAGE   | any axis     | copy each small input read along the axis, once per kernel call, into a buffer where the axis is innermost (contiguous) |
| TC      | (a choice)   | run the reduce on a matrix instruction the renderer declares (``tc.py``); ``arg`` is tc_opt |

LOCAL/GROUP/GROUPTOP/NOLOCALS need a renderer with ``has_local`` (and GROUP ``has_shared``); PADTO works
everywhere. Legality is checked when an action is applied: amounts must divide (after PADTO they do),
a workgroup (LOCAL x GROUP sizes) stays within ``renderer.local_max_threads`` and, per launch dimension,
``renderer.local_max``; the grouped reduces' partials fit in ``renderer.shared_max`` bytes (checked after
every action, since a later UPCAST grows them). A reduce nested inside another reduce's loop can't be
grouped (its barrier would sit inside a loop whose trip is per reduce step). The grouped reduce is
lowered in codegen/lowering.py (``lower_group_reduces``): partials go to a DEFINE_LOCAL, a BARRIER,
then every thread combines them and only the group's thread 0 stores. The kernel-wide NOLOCALS flag
lives in the SINK's arg (``KernelInfo``), so the AST stays the whole state of an optimized kernel.

STAGE exists for register tiles whose vector axis runs along a *strided* small input: a conv's
output channels index its weights with a stride of ``cin*kh*kw``. Staging copies the weights once
(``STAGE`` loops before the main loops, then a BARRIER) into a buffer laid out with the channel axis
innermost, so a tile can take 16 output channels as one AVX-512 vector while the image rows (20 or 24
wide, which no 16-lane vector divides) become broadcast rows. On the CPU the staged buffer is an array
shared by its threads (stack or heap, at most ``STAGE_MAX_BYTES``); on GPU-style renderers it is
shared memory, filled by every thread before a barrier.

``optimize_kernel(ast, renderer, opts)`` returns the rewritten AST and the applied opts.
"""
from __future__ import annotations
import os
from typing import Any
from dataclasses import dataclass
from enum import Enum, auto
from fusegrad.dtype import dtypes
from fusegrad.helpers import NOOPT, DEBUG, USE_TC, TC_OPT, prod, colored, getenv
from fusegrad.uop.ops import UOp, Ops, AxisType, AXIS_COLORS

class KernelOptError(Exception):
    """An optimization action that is not legal for this kernel (the message says why)."""

@dataclass(frozen=True)
class KernelInfo:
    """Kernel-wide optimization state, kept in the kernel SINK's arg."""
    dont_use_locals: bool = False

def kernel_info(ast: UOp) -> KernelInfo:
    return ast.arg if isinstance(ast.arg, KernelInfo) else KernelInfo()

class OptOps(Enum):
    UPCAST = auto(); UNROLL = auto(); LOCAL = auto(); GROUP = auto(); GROUPTOP = auto(); PADTO = auto()
    THREAD = auto(); NOLOCALS = auto(); SWAP = auto(); TC = auto(); STAGE = auto()
    def __repr__(self) -> str: return f"OptOps.{self.name}"

@dataclass(frozen=True)
class Opt:
    op: OptOps
    axis: int | None = None
    arg: int | tuple | None = None
    def __repr__(self) -> str: return f"Opt(op={self.op!r}, axis={self.axis}, arg={self.arg})"

# ---------------------------------------------------------------- looking at a kernel

def _size(r: UOp):
    return r.src[0].arg if r.src[0].op is Ops.CONST else r.src[0]

# the order of axes in ``kernel_axes`` and ``colored_shape`` (tinygrad's: global, local, group, reduce, upcast)
_AXIS_RANK = {AxisType.GLOBAL: 0, AxisType.THREAD: 0, AxisType.LOOP: 0, AxisType.LOCAL: 1, AxisType.GROUP_REDUCE: 2,
              AxisType.REDUCE: 3, AxisType.UPCAST: 4, AxisType.UNROLL: 5, AxisType.STAGE: 6}

def kernel_axes(ast: UOp) -> list[UOp]:
    """The kernel's optimizable ranges: globals (and threads), then locals, then grouped reduce
    parts, then reduces, each by id. UPCAST ranges are not axes."""
    ranges = [x for x in ast.toposort if x.op is Ops.RANGE and _AXIS_RANK[x.arg[1]] <= 3]
    return sorted(ranges, key=lambda r: (_AXIS_RANK[r.arg[1]], r.arg[0]))

def colored_shape(ast: UOp) -> str:
    """Loop sizes coloured by kind: blue global, cyan local, green grouped reduce, red reduce,
    yellow upcast (DEBUG>=3 prints it with the applied opts)."""
    ranges = sorted([x for x in ast.toposort if x.op is Ops.RANGE and x.arg[1] is not AxisType.STAGE],
                    key=lambda r: (_AXIS_RANK[r.arg[1]], r.arg[0]))
    return "_".join(colored(str(_size(r)), AXIS_COLORS[r.arg[1]]) for r in ranges)

def _next_id(ast: UOp) -> int:
    return 1 + max((x.arg[0] for x in ast.toposort if x.op is Ops.RANGE), default=-1)

# ---------------------------------------------------------------- actions

def _split(ast: UOp, rng: UOp, amount: int, inner_kind: AxisType) -> tuple[UOp, UOp, UOp]:
    """Replace ``rng`` by outer*amount + inner. Returns (ast, outer, inner)."""
    size = _size(rng)
    if not isinstance(size, int): raise KernelOptError(f"can't split symbolic range {rng.arg}")
    if amount <= 1 or size % amount != 0: raise KernelOptError(f"{amount} doesn't divide range of size {size}")
    # the outer part keeps the range's id, so it keeps its place in the loop order
    outer = UOp(Ops.RANGE, dtypes.index, (UOp.const(dtypes.index, size // amount),), rng.arg)
    inner = UOp(Ops.RANGE, dtypes.index, (UOp.const(dtypes.index, amount),), (_next_id(ast), inner_kind))
    return ast.substitute({rng: outer * amount + inner}), outer, inner

def apply_opt(ast: UOp, opt: Opt, renderer) -> UOp:
    """Apply one action or raise KernelOptError (the message says what is illegal)."""
    if opt.op is OptOps.TC:
        from fusegrad.codegen.opt.tc import apply_tensor_core
        return apply_tensor_core(ast, renderer, opt.axis, opt.arg)
    if opt.op is OptOps.NOLOCALS: return _nolocals(ast, renderer)
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
    amount = opt.arg if opt.arg else _size(rng)
    if not isinstance(amount, int): raise KernelOptError(f"{opt} needs an int amount")
    if opt.op is OptOps.UPCAST:
        if kind is AxisType.REDUCE: raise KernelOptError("UPCAST is for non-reduce axes; use UNROLL")
        if kind is AxisType.GROUP_REDUCE: raise KernelOptError("UPCAST is for non-reduce axes, not grouped reduce threads")
        if amount > 64: raise KernelOptError(f"UPCAST amount {amount} is above 64")
        if amount == _size(rng): new = ast.substitute({rng: rng.replace(arg=(rng.arg[0], AxisType.UPCAST))})
        else: new = _split(ast, rng, amount, AxisType.UPCAST)[0]
    elif opt.op is OptOps.UNROLL:
        if kind is not AxisType.REDUCE: raise KernelOptError("UNROLL is for reduce axes")
        if amount > 64: raise KernelOptError(f"UNROLL amount {amount} is above 64")
        new = _unroll(ast, rng, amount)
    elif opt.op is OptOps.SWAP:
        other = opt.arg
        if not isinstance(other, int) or not 0 <= other < len(axes) or other == opt.axis: raise KernelOptError(f"SWAP needs another axis, got {other}")
        second = axes[other]
        if _AXIS_RANK[kind] != 0 or _AXIS_RANK[second.arg[1]] != 0: raise KernelOptError("SWAP exchanges two global axes")
        # loops nest in id order: exchanging ids exchanges the loops
        return _exchange_range_ids(ast, rng.arg[0], second.arg[0])
    elif opt.op is OptOps.THREAD:
        if opt.axis != 0 or kind not in (AxisType.GLOBAL, AxisType.LOOP): raise KernelOptError("THREAD splits the outermost global axis")
        if not getattr(renderer, "has_threads", False): raise KernelOptError(f"the {renderer.device} renderer has no threads")
        return ast.substitute({rng: rng.replace(arg=(rng.arg[0], AxisType.THREAD))})
    elif opt.op is OptOps.LOCAL:
        if kind not in (AxisType.GLOBAL, AxisType.LOOP): raise KernelOptError(f"LOCAL is for global axes, axis {opt.axis} is {kind.name}")
        if amount == _size(rng): new = ast.substitute({rng: rng.replace(arg=(rng.arg[0], AxisType.LOCAL))})
        else: new = _split(ast, rng, amount, AxisType.LOCAL)[0]
    elif opt.op in (OptOps.GROUP, OptOps.GROUPTOP):
        if kind is not AxisType.REDUCE: raise KernelOptError(f"{opt.op.name} is for reduce axes, axis {opt.axis} is {kind.name}")
        new = _group(ast, rng, amount, top=opt.op is OptOps.GROUPTOP)
    elif opt.op is OptOps.PADTO:
        new = _padto(ast, rng, amount)
    elif opt.op is OptOps.STAGE:
        new = _stage(ast, rng, renderer)
    else: raise KernelOptError(f"{opt.op.name} is not supported here")
    return _check_launch(new, renderer)

def _check_launch(ast: UOp, renderer) -> UOp:
    """Raise KernelOptError when the workgroup or its shared memory is too big for the renderer."""
    if not renderer.has_local: return ast
    from fusegrad.codegen.lowering import launch_groups
    local_ranges = local_axes(ast)
    if local_ranges:
        threads = prod(_size(r) for r in local_ranges)
        if threads > renderer.local_max_threads:
            raise KernelOptError(f"a workgroup of {threads} threads exceeds the {renderer.device} renderer's maximum of "
                                 f"{renderer.local_max_threads}")
        for dim, group in enumerate(launch_groups(local_ranges)):
            size = prod(_size(r) for r in group)
            if renderer.local_max is not None and size > renderer.local_max[dim]:
                raise KernelOptError(f"local dim {dim} of size {size} exceeds the {renderer.device} renderer's limit {renderer.local_max[dim]}")
    if (need := shared_memory_bytes(ast)) > renderer.shared_max:
        raise KernelOptError(f"exceeds maximum shared memory size: needs {need}, max {renderer.shared_max}")
    return ast

def local_axes(ast: UOp) -> list[UOp]:
    """The ranges that become local (workgroup) launch indices: LOCAL ranges, then GROUP_REDUCE ranges, each by id."""
    ranges = [x for x in ast.toposort if x.op is Ops.RANGE and x.arg[1] in (AxisType.LOCAL, AxisType.GROUP_REDUCE)]
    return sorted(ranges, key=lambda r: (_AXIS_RANK[r.arg[1]], r.arg[0]))

def grouped_partial_slots(ast: UOp, red: UOp) -> list[UOp]:
    """The ranges that index the shared-memory buffer of grouped reduce ``red``: every LOCAL range,
    the reduce's own GROUP_REDUCE ranges, and the UPCAST ranges its partial sums depend on."""
    local = sorted([x for x in ast.toposort if x.op is Ops.RANGE and x.arg[1] is AxisType.LOCAL], key=lambda r: r.arg[0])
    groups = [r for r in red.src[1:] if r.arg[1] is AxisType.GROUP_REDUCE]
    upcasts = sorted([r for r in free_ranges(red.src[0]) if r.arg[1] is AxisType.UPCAST], key=lambda r: r.arg[0])
    return local + groups + upcasts

def shared_memory_bytes(ast: UOp) -> int:
    """Bytes of shared memory the staged inputs and grouped reduces of ``ast`` need (one buffer each)."""
    total = sum(x.dtype.size * x.dtype.base.itemsize for x in ast.toposort if x.op is Ops.DEFINE_LOCAL)   # staged inputs
    for red in [x for x in ast.toposort if x.op is Ops.REDUCE]:
        if any(r.arg[1] is AxisType.GROUP_REDUCE for r in red.src[1:]):
            total += prod(_size(r) for r in grouped_partial_slots(ast, red)) * red.dtype.itemsize
    return total

def _nolocals(ast: UOp, renderer) -> UOp:
    if not renderer.has_local: raise KernelOptError(f"NOLOCALS is meaningless: the {renderer.device} renderer has no locals")
    if kernel_info(ast).dont_use_locals: raise KernelOptError("NOLOCALS was already applied")
    if local_axes(ast): raise KernelOptError("can't apply NOLOCALS to a kernel that already uses locals (LOCAL/GROUP)")
    if ast.op is not Ops.SINK: raise KernelOptError("NOLOCALS needs a kernel SINK")
    return ast.replace(arg=KernelInfo(dont_use_locals=True))

def _group(ast: UOp, rng: UOp, amount: int, top: bool) -> UOp:
    """Split reduce range ``rng`` into a REDUCE part and a GROUP_REDUCE part of ``amount`` threads,
    in every REDUCE over it: REDUCE(v, rng) becomes REDUCE(v', rest, group). GROUP takes the inner
    part of the range (rng = rest*amount + group), GROUPTOP the top (rng = group*(size/amount) + rest)."""
    size = _size(rng)
    if not isinstance(size, int): raise KernelOptError(f"can't group symbolic range {rng.arg}")
    if amount <= 1 or size % amount != 0: raise KernelOptError(f"{amount} doesn't divide reduce of size {size}")
    reduces = [x for x in ast.toposort if x.op is Ops.REDUCE and rng in x.src[1:]]
    for red in reduces:
        loops = [r for r in free_ranges(red) if r.arg[1] not in (AxisType.GLOBAL, AxisType.LOCAL, AxisType.UPCAST)]
        if loops: raise KernelOptError(f"can't group a reduce nested inside another loop ({loops[0].arg[1].name} range {loops[0].arg[0]}): "
                                       "its barrier would run once per iteration of that loop")
    group = UOp(Ops.RANGE, dtypes.index, (UOp.const(dtypes.index, amount),), (_next_id(ast), AxisType.GROUP_REDUCE))
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
    # other uses of the range (as an enclosing loop of nested ranges, also inside the new reduces)
    # see the split expression
    return ast.substitute(mapping).substitute({rng: expr})

def _padto(ast: UOp, rng: UOp, amount: int) -> UOp:
    """Round range ``rng`` up to a multiple of ``amount``. Loads and stores whose address moves
    along it are gated by ``rng < size`` (a gated load reads 0), stores that happen inside it are
    gated too, and each REDUCE over it sees its identity for the extra iterations: the value is
    wrapped in ``valid.where(value, identity)`` unless the reduce is a sum whose value is zero
    whenever its gated loads are (a product of gated loads, say), where the gated loads suffice."""
    from fusegrad.codegen.lowering import identity_value
    size = _size(rng)
    if rng.arg[1] not in (AxisType.GLOBAL, AxisType.LOOP, AxisType.THREAD, AxisType.REDUCE):
        raise KernelOptError(f"PADTO pads global and reduce axes, not {rng.arg[1].name} ones")
    if not isinstance(size, int): raise KernelOptError(f"can't pad symbolic range {rng.arg}")
    if amount <= 1: raise KernelOptError(f"PADTO needs an amount of at least 2, got {amount}")
    padded = -(-size // amount) * amount
    if padded == size: raise KernelOptError(f"nothing to pad: {size} is already a multiple of {amount}")
    if size <= amount // 4: raise KernelOptError(f"pad adds more than quadruple the work ({size} -> {padded})")
    new = rng.replace(src=(UOp.const(dtypes.index, padded),) + rng.src[1:])
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

STAGE_MAX_BYTES = 1 << 20   # staged copies per kernel on the CPU (stack up to 64 KB, else heap)

def _staged_loads(ast: UOp, rng: UOp, renderer) -> list[tuple[UOp, list[UOp]]]:
    """The loads STAGE copies along ``rng``, each with its slot order: inputs (not written by the kernel)
    whose address moves along ``rng``, over constant-size ranges, while the copies fit the staging
    memory. The order is: other loop ranges by id, then ``rng``, then UPCAST ranges, so ``rng`` (or
    its upcast part) is contiguous."""
    written = {x.src[0].src[0] for x in ast.toposort if x.op is Ops.STORE and x.src[0].op is Ops.INDEX}
    room = _staging_room(ast, renderer)
    chosen: list[tuple[UOp, list[UOp]]] = []
    for load in ast.toposort:
        if load.op is not Ops.LOAD or load.src[0].op is not Ops.INDEX or load.src[0].src[0].op is not Ops.PARAM: continue
        ranges = ranges_in(load.src[0])
        if load.src[0].src[0] in written or rng not in ranges: continue
        if any(r.arg[1] is AxisType.STAGE or not isinstance(_size(r), int) for r in ranges): continue
        order = sorted([r for r in ranges if r is not rng and r.arg[1] is not AxisType.UPCAST], key=lambda r: r.arg[0]) + [rng] + \
            sorted([r for r in ranges if r is not rng and r.arg[1] is AxisType.UPCAST], key=lambda r: r.arg[0])
        size = prod(_size(r) for r in order) * load.dtype.itemsize
        if size > room: continue
        room -= size
        chosen.append((load, order))
    return chosen

def _staging_room(ast: UOp, renderer) -> int:
    """Bytes left for staged copies: ``STAGE_MAX_BYTES`` on the CPU, shared memory on GPU-style renderers."""
    limit = STAGE_MAX_BYTES if not renderer.has_local else renderer.shared_max
    return limit - sum(x.dtype.size * x.dtype.base.itemsize for x in ast.toposort if x.op is Ops.DEFINE_LOCAL)

def _stage(ast: UOp, rng: UOp, renderer) -> UOp:
    """Stage every input load whose address moves along ``rng`` and that reads few enough elements
    (``_staged_loads``).

    A staged load ``buf[f(r1..rn)]`` becomes ``stage[slot(r1..rn)]``: ``stage`` holds one element per
    combination of the load's ranges (its footprint), with ``rng`` contiguous. The copy runs once,
    before every other loop, over fresh STAGE ranges (gated loads copy their zeros too); a BARRIER
    after it orders the reads. Later actions transform the staged read like any load."""
    from fusegrad.codegen.lowering import slot_index
    staged = _staged_loads(ast, rng, renderer)
    if not staged:
        raise KernelOptError(f"STAGE: no input read along axis {rng.arg[0]} fits in {_staging_room(ast, renderer)} bytes of staging memory")
    next_id, number = _next_id(ast), sum(1 for x in ast.toposort if x.op is Ops.DEFINE_LOCAL)
    mapping: dict[UOp, UOp] = {}
    for load, order in staged:
        copies: list[UOp] = []
        for r in order:
            copies.append(UOp(Ops.RANGE, dtypes.index, (r.src[0],) + tuple(copies), (next_id, AxisType.STAGE)))
            next_id += 1
        buffer = UOp(Ops.DEFINE_LOCAL, load.dtype.ptr(prod(_size(r) for r in order), local=True), (), f"stage{number}")
        number += 1
        fill = buffer.index(slot_index(copies)).store(load.substitute(dict(zip(order, copies))))
        filled = UOp(Ops.BARRIER, dtypes.void, (buffer, UOp(Ops.END, dtypes.void, (fill,) + tuple(copies))))
        mapping[load] = buffer.index(slot_index(order)).load(filled)
    return ast.substitute(mapping)

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
    """Give the ranges numbered ``a`` the number ``b`` and the other way round, each node once.
    (A plain substitute can't: a range whose parents include the other range is rebuilt from its
    new parents first, then no longer matches its key and keeps its old number, so two loops end
    up with one loop variable.)"""
    swap = {a: b, b: a}
    rebuilt: dict[UOp, UOp] = {}
    for x in ast.toposort:
        srcs = tuple(rebuilt.get(s, s) for s in x.src)
        y = x if srcs == x.src else x.replace(src=srcs)
        if x.op is Ops.RANGE and x.arg[0] in swap: y = y.replace(arg=(swap[x.arg[0]], x.arg[1]))
        if y is not x: rebuilt[x] = y
    return rebuilt.get(ast, ast)

def _unroll(ast: UOp, rng: UOp, amount: int) -> UOp:
    """Split reduce range r into (outer, lane): each REDUCE over r becomes a REDUCE over the lane
    of a REDUCE over outer. The inner reduce keeps ``amount`` partial accumulators side by side
    (one per lane, which the C compiler vectorizes); the outer one adds them up."""
    size = _size(rng)
    if not isinstance(size, int) or size % amount != 0: raise KernelOptError(f"{amount} doesn't divide reduce of size {size}")
    outer = UOp(Ops.RANGE, dtypes.index, (UOp.const(dtypes.index, size // amount),), rng.arg)
    lane = UOp(Ops.RANGE, dtypes.index, (UOp.const(dtypes.index, amount),), (_next_id(ast), AxisType.UPCAST))
    mapping = {}
    for red in [x for x in ast.toposort if x.op is Ops.REDUCE and rng in x.src[1:]]:
        value = red.src[0].substitute({rng: outer * amount + lane})
        others = tuple(r for r in red.src[1:] if r is not rng)
        partial = UOp(Ops.REDUCE, red.dtype, (value, outer) + others, red.arg)
        mapping[red] = UOp(Ops.REDUCE, red.dtype, (partial, lane), red.arg)
    # then the range's other uses: as an enclosing loop of nested ranges, also inside the new reduces
    # (left alone, a stale copy of the range would run as a second loop with the same variable)
    return ast.substitute(mapping).substitute({rng: outer * amount + lane})

def free_ranges(node: UOp) -> set[UOp]:
    """The ranges ``node`` depends on that no REDUCE inside it has closed."""
    ctx: dict[UOp, frozenset] = {}
    for x in node.toposort:
        found = frozenset().union(*(ctx[s] for s in x.src)) if x.src else frozenset()
        if x.op is Ops.RANGE: found = found | {x}
        if x.op is Ops.REDUCE: found = found - set(x.src[1:])
        if x.op is Ops.END: found = found - {s for s in x.src if s.op is Ops.RANGE}
        ctx[x] = found
    return set(ctx[node])

# ---------------------------------------------------------------- nesting

def renest(ast: UOp) -> UOp:
    """Recompute every RANGE's enclosing loops (its extra sources) from the kernel's structure:
    globals nest in id order; output UPCAST ranges sit inside every global; a reduce's ranges sit
    inside the non-upcast ranges its value depends on."""
    # (the STAGE loops of a staged copy keep their own nesting: they run before everything else)
    ranges = [x for x in ast.toposort if x.op is Ops.RANGE and x.arg[1] is not AxisType.STAGE]
    if not ranges: return ast
    bare = {r: UOp(Ops.RANGE, r.dtype, (r.src[0],), r.arg) for r in ranges}
    ast = ast.substitute(bare)
    ranges = [x for x in ast.toposort if x.op is Ops.RANGE and x.arg[1] is not AxisType.STAGE]
    reduces = [x for x in ast.toposort if x.op is Ops.REDUCE]
    reduce_ranges = {r for red in reduces for r in red.src[1:]}
    parents: dict[UOp, list[UOp]] = {}
    outer = sorted([r for r in ranges if r not in reduce_ranges and r.arg[1] is not AxisType.UPCAST], key=lambda r: r.arg[0])
    upcast_out = sorted([r for r in ranges if r not in reduce_ranges and r.arg[1] is AxisType.UPCAST], key=lambda r: r.arg[0])
    chain = outer + upcast_out
    for i, r in enumerate(chain): parents[r] = chain[:i]
    for red in reduces:
        own = list(red.src[1:])
        enclosing = sorted([x for x in free_ranges(red.src[0]) if x not in own and x.arg[1] is not AxisType.UPCAST],
                           key=lambda r: r.arg[0])
        for i, r in enumerate(own):
            previous = parents.get(r, [])
            parents[r] = list(dict.fromkeys(previous + enclosing + own[:i]))
    # build the new ranges, parents first
    new: dict[UOp, UOp] = {}
    def build(r: UOp, visiting: tuple = ()) -> UOp:
        if r in new: return new[r]
        if r in visiting: raise KernelOptError("ranges nest in a cycle")
        srcs = tuple(build(p, visiting + (r,)) for p in parents.get(r, []) if p is not r)
        new[r] = UOp(Ops.RANGE, r.dtype, (r.src[0],) + srcs, r.arg)
        return new[r]
    for r in ranges: build(r)
    return ast.substitute(new)

# ---------------------------------------------------------------- the heuristic

def cpu_count() -> int:
    return max(1, getenv("THREADS", len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1))

def _largest_divisor(size, options: tuple[int, ...]) -> int | None:
    if not isinstance(size, int): return None
    for amount in options:
        if size % amount == 0 and size >= amount: return amount
    return None

def ranges_in(expression: UOp) -> set[UOp]:
    """The ranges an expression is computed from (a RANGE's own sources are its enclosing loops,
    not inputs, so the walk doesn't descend into them)."""
    found, stack, seen = set(), [expression], set()
    while stack:
        x = stack.pop()
        if x in seen: continue
        seen.add(x)
        if x.op is Ops.RANGE: found.add(x)
        else: stack.extend(x.src)
    return found

def _loads_depending_on(loads: list[UOp], rng: UOp) -> frozenset[UOp]:
    """The loads whose address changes along ``rng`` (the others broadcast over it)."""
    return frozenset(ld for ld in loads if rng in ranges_in(ld.src[0]))

def _tile_amount(size, preferred: tuple[int, ...], limit: int) -> int | None:
    """A preferred divisor of ``size``, else its largest divisor in 2..limit."""
    if not isinstance(size, int): return None
    if (amount := _largest_divisor(size, preferred)) is not None: return amount
    return next((d for d in range(min(limit, size), 1, -1) if size % d == 0), None)

def _column_amount(size) -> int | None:
    """How many columns a register tile takes. A vector width (32/16/8/4) that splits the axis comes
    first: a split keeps the column the innermost loop (a whole-axis upcast nests outside the split
    ones) and codegen/vectorize.py can emit it as vector code (MNIST step 720 -> 672 ms). A whole
    small window (a weight gradient's 3 or 5 kernel columns) is taken whole; a longer odd axis (10)
    is still split in two or more, to stay innermost (2x on a 10-wide conv row's input gradient)."""
    if not isinstance(size, int) or size < 2: return None
    if (width := next((w for w in (32, 16, 8, 4) if size % w == 0 and w < size), None)) is not None: return width
    if size <= 8: return size
    return _tile_amount(size, (), min(16, size // 2)) or size

def _register_tile(globals_: list[UOp], loads: list[UOp]) -> list[tuple[UOp, int]]:
    """Pick the axes of a register tile for a reduce that reads several buffers (matmul, conv and
    their gradients): (axis, amount) pairs, the innermost (vector) axis last.

    An output element costs one multiply-add per reduce step; a tile of R x C outputs needs only
    R + C loads per step when each load is broadcast along one tile axis. So:
    - the column (vector) axis is the innermost output axis that some load doesn't depend on (the
      loads that do depend on it are read contiguously);
    - a neighbour axis with the same loads (a conv's output row next to its column, or the kernel
      row next to the kernel column in a weight gradient) adds a few rows: their input windows
      overlap, so the compiler reuses loads between them;
    - the row axis is one that the column's loads don't depend on (output channels).
    Tile sizes were measured on AVX-512 (2 cores): about 16 vector registers of accumulators when the
    column is a multiple of 8 lanes, about 100-160 scalars otherwise. gcc unrolls a tile loop into registers only up to
    16 iterations, so odd column sizes stay at or below 16; 32 columns are two AVX-512 registers."""
    depends = {g: _loads_depending_on(loads, g) for g in globals_ if isinstance(_size(g), int)}
    column = next((g for g in reversed(globals_) if g in depends and depends[g] and frozenset(loads) - depends[g]), None)
    if column is None or (column_amount := _column_amount(_size(column))) is None: return []
    # about 16 vector registers of accumulators (rows x neighbour x vectors per column): 8 rows of a
    # 32-wide column, 16 of a 16- or 8-wide one (8 x 2 neighbours: 16 rows x 2 spilled, 7.1 -> 2.7 ms)
    budget = 16 // (column_amount // min(column_amount, 16)) if column_amount % 8 == 0 else 160 // column_amount
    # split upcasts nest in the order applied (rows, neighbour, column innermost; the other order of
    # rows and neighbour measured 2-4x slower); a whole-axis upcast keeps its axis position, outside
    # the split ones (measured: weight gradients, whose whole 3x3 or 5x5 window is the tile, want the
    # output channels innermost)
    tile: list[tuple[UOp, int]] = []
    neighbour = next((g for g in reversed(globals_) if g in depends and g is not column and depends[g] == depends[column]), None)
    # a whole small window (a weight gradient's 5 kernel columns) takes a whole neighbour too (5x5)
    window = column_amount == _size(column) and column_amount < 6
    if neighbour is not None and (amount := _tile_amount(_size(neighbour), (), 5 if window else 2)) is not None \
            and amount <= budget // 4:
        budget //= amount
    else: neighbour = None
    rows = [g for g in reversed(globals_) if g in depends and g is not column and not (depends[g] & depends[column])]
    row_options = (16, 8, 4) if column_amount % 8 == 0 else (8, 4)
    if rows:
        size = _size(rows[0])
        row_amount = next((a for a in row_options if a <= budget and size % a == 0), None) or _tile_amount(size, (), min(budget, 8))
        if row_amount is not None: tile.append((rows[0], row_amount))
    if neighbour is not None: tile.append((neighbour, amount))
    return tile + [(column, column_amount)]

def _stride(index: UOp, rng: UOp) -> int | None:
    """How far the address of memory access ``index`` (an INDEX) moves per step of ``rng`` (None when
    that isn't a constant)."""
    from fusegrad.uop.ops import graph_rewrite
    from fusegrad.uop.symbolic import symbolic
    offset = index.src[1]
    # (rebuilt by hand: a plain substitute would also rewrite the ranges nested inside ``rng``)
    shifted: dict[UOp, UOp] = {rng: rng + 1}
    def shift(x: UOp) -> UOp:
        if x not in shifted: shifted[x] = x if x.op is Ops.RANGE else x.replace(src=tuple(shift(s) for s in x.src))
        return shifted[x]
    step = graph_rewrite(shift(offset) - offset, symbolic)
    return step.arg if step.op is Ops.CONST else None

def _dot_product_tile(globals_: list[UOp], reduces: list[UOp], loads: list[UOp], lanes: int) -> tuple[list[tuple[UOp, int]], int] | None:
    """An output tile whose accumulators are vectors of partial sums along the reduce, when every input
    is contiguous along the innermost reduce axis and it fills vectors (a weight gradient over 32-wide
    image rows, ``a @ b.T``): each step loads one vector per tile row and per tile column and does
    rows x columns vector FMAs; the lanes are added up once at the end. Tile sizes are the usual
    tile's (``_register_tile``) cut to about 20 accumulators, which fit in registers (64-channel 32x32
    conv weight gradient: 40 -> 10 ms). 8 lanes where 16 don't divide the reduce (MNIST's 8-wide rows:
    8 -> 5.4 ms). Returns (tile, lanes), or None."""
    reduce = reduces[-1]
    along = _loads_depending_on(loads, reduce)
    width = next((w for w in (lanes, lanes // 2) if w >= 8 and isinstance(_size(reduce), int) and _size(reduce) % w == 0), None)
    if width is None or len(along) < 2 or any(_stride(ld.src[0], reduce) != 1 for ld in along): return None
    full = _register_tile(globals_, loads)
    tile = list(full)
    while tile and prod(amount for _, amount in tile) > 20:
        # shrink the entry with the most rows to its next smaller divisor (a 3x3 window stays whole)
        i = max(range(len(tile)), key=lambda j: tile[j][1])
        rng, amount = tile[i]
        smaller = next((d for d in range(amount - 1, 1, -1) if _size(rng) % d == 0 and amount % d == 0), None)
        if smaller is None: tile.pop(i)
        else: tile[i] = (rng, smaller)
    # with half-width vectors, a dropped tile axis (each of its values re-reads the inputs) costs more
    # than the dot product saves (a 1-channel conv's 5x5 weight gradient: 2.1 -> 5.6 ms)
    if not tile or (width < lanes and len(tile) < len(full)): return None
    return tile, width

def _channel_tile(globals_: list[UOp], loads: list[UOp], lanes: int) -> list[tuple[UOp, int]]:
    """A register tile whose vector axis is a channel axis of ``lanes`` elements (conv and its gradients).

    The usual tile takes its vector from the innermost axis (a conv's output row); 20 or 24 wide rows
    make 4 or 8 lane vectors, a quarter or half of AVX-512. Output channels (32, 64) fill whole vectors,
    and every load is then either along the channels (weights; staged to be contiguous, see ``STAGE``)
    or broadcast along them (the image). The image axes become the tile's positions: about 10-18 of
    them (measured on the MNIST convs, 2x5 to 3x6; more spill registers), or a whole 3x3/5x5 window in
    a weight gradient, where each position reuses the channel vector that was gathered once per step.
    Returns [] when the usual tile already fills vectors or no channel axis fits."""
    depends = {g: _loads_depending_on(loads, g) for g in globals_ if isinstance(_size(g), int)}
    column = next((g for g in reversed(globals_) if g in depends and depends[g] and frozenset(loads) - depends[g]), None)
    if column is None or (column_amount := _column_amount(_size(column))) is None: return []
    # a column that fills vectors is better, unless its loads are gated along it (a padded conv's
    # input: before masked vector loads its loop stayed scalar, 16 GFLOPS on a 64-channel 32x32 conv;
    # with them the two tiles measure within this machine's noise, and the channel tile stays)
    if column_amount % lanes == 0 and not any(len(ld.src[0].src) > 2 and column in ranges_in(ld.src[0].src[2]) for ld in depends[column]):
        return []
    channel = next((g for g in reversed(globals_) if g in depends and depends[g] and not (depends[g] & depends[column])
                    and _size(g) % lanes == 0), None)
    if channel is None: return []
    neighbour = next((g for g in reversed(globals_) if g in depends and g is not column and depends[g] == depends[column]), None)
    if column_amount == _size(column) and column_amount < 6:   # a whole small window (weight gradient)
        tile = [(column, column_amount)]
        if neighbour is not None and _size(neighbour) <= 5: tile.insert(0, (neighbour, _size(neighbour)))
    else:
        amount = next(a for a in range(min(6, _size(column)), 0, -1) if _size(column) % a == 0)
        tile = [(column, amount)] if amount > 1 else []
        if neighbour is not None and (more := next((a for a in range(18 // amount, 1, -1) if _size(neighbour) % a == 0), None)):
            tile.insert(0, (neighbour, more))
    return tile + [(channel, lanes)]

def _one_vector(size: int) -> int:
    """The vector width (4, 8 or 16 lanes) that a short axis of 3..16 elements is padded to."""
    return next(w for w in (4, 8, 16) if w >= size)

def _elementwise_vector(ast: UOp, innermost: UOp) -> tuple[int, bool] | None:
    """(lanes, padded) for an elementwise kernel's innermost axis: 16, 8 or 4 when one divides it, else a
    short axis (3..16: a 6-wide image row) padded to one vector (masked lanes), when every load is
    contiguous along it, broadcast, or irregular (a pooling window's ``x // 2``: gathered lane by lane,
    which beats gcc's scalar loop and its branching selects: MNIST's max-pool gradients 23 -> 2.3 ms
    and, padded, 2.6 -> 0.3 ms). A strided load (a transpose) keeps gcc's own scalar loop, which is
    faster for it."""
    loads = [x for x in ast.toposort if x.op is Ops.LOAD and x.src[0].op is Ops.INDEX]
    if any(_stride(ld.src[0], innermost) not in (0, 1, None) for ld in loads): return None
    if (lanes := _largest_divisor(_size(innermost), (16, 8, 4))) is not None: return lanes, False
    if isinstance(_size(innermost), int) and 2 < _size(innermost) <= 16: return _one_vector(_size(innermost)), True
    return None

def _column_sums(column: UOp, reduce: UOp, loads: list[UOp]) -> int | None:
    """Outputs per vector for a reduce down the columns of a row-major matrix (``v @ A``, ``x.sum(0)``):
    the loads move contiguously along the output axis and with a stride along the reduce, so 64 outputs
    at a time read a row's piece as four vectors, where partial sums along the reduce would walk down
    columns (4096x4096 ``v @ A`` kernel: 72 ms -> 2.4 ms; 32 outputs: 4.1 ms; numpy 1.6-3.4 ms)."""
    along = _loads_depending_on(loads, column)
    if not along or any(_stride(ld.src[0], column) != 1 for ld in along): return None
    if all(_stride(ld.src[0], reduce) in (0, 1) for ld in _loads_depending_on(loads, reduce)): return None
    return _largest_divisor(_size(column), (64, 32, 16, 8, 4))

def _pooling_row_vector(globals_: list[UOp], reduces: list[UOp], loads: list[UOp]) -> int | None:
    """Lanes for a pooling window's short output row: a small reduce (at most 4x4) over a row of 3 to 16
    outputs that no vector width divides (a 2x2 max-pool of 20-wide rows has 10) is padded to one vector
    (masked lanes), so the data-dependent max runs as vector selects, not branches (MNIST 9.7 -> 0.8 ms)."""
    row = globals_[-1] if globals_ else None
    if row is None or not _loads_depending_on(loads, row) or not all(isinstance(_size(r), int) for r in reduces + [row]): return None
    if prod(_size(r) for r in reduces) > 16 or not 2 < _size(row) <= 16 or _size(row) % 4 == 0: return None
    return _one_vector(_size(row))

def _as_opts(axes: list[UOp], choices: list[tuple[UOp, Any, OptOps]]) -> list[Opt]:
    """Turn (axis, amount, op) choices into Opts, following how axis numbers shift: a full-size
    UPCAST/UNROLL removes its axis from the list. For SWAP the 'amount' is the other axis."""
    remaining, opts = list(axes), []
    for rng, amount, op in choices:
        index = remaining.index(rng)
        if op is OptOps.SWAP:
            opts.append(Opt(op, index, remaining.index(amount)))
            continue
        if op is OptOps.STAGE:
            opts.append(Opt(op, index))
            continue
        opts.append(Opt(op, index, amount))
        if amount == _size(rng): remaining.pop(index)
    return opts

def _columns_outside(globals_: list[UOp], tile: list[tuple[UOp, int]]) -> bool:
    """Should a 2-d tile's column loop run outside its row loop? Rows outside stream the column
    operand (B of a matmul) from memory once per row tile, columns outside stream the row operand
    once per column tile: the wider tile side means fewer passes (measured at 8 x 32: 1024 matmul
    231 -> 304 GFLOPS, 2048 152 -> 221 GFLOPS)."""
    if len(globals_) != 2 or len(tile) != 2: return False
    (row, rows), (column, columns) = tile
    return [row, column] == globals_ and rows < _size(row) and columns < _size(column) and columns > rows

def _reduce_choices(ast: UOp, renderer, globals_: list[UOp], reduces: list[UOp], loads: list[UOp]) -> list[tuple[UOp, int, OptOps]]:
    """The first strategy that fits a reduce kernel, as (axis, amount, action) choices:
    a dot-product tile (inputs contiguous along the reduce), a channel-vector tile (convs), the usual
    register tile (matmul), row tiles for column reductions, or partial-sum lanes for a long reduce."""
    lanes = renderer.max_vector_bytes // 4 if renderer.vector_loops else 0
    tiled = len(globals_) >= 2 and len(loads) >= 2
    if lanes and tiled and (dot := _dot_product_tile(globals_, reduces, loads, lanes)):
        tile, width = dot
        return [(rng, amount, OptOps.UPCAST) for rng, amount in tile] + [(reduces[-1], width, OptOps.UNROLL)]
    # (a short reduce, like a 1-channel conv's 25 taps, can't pay for storing channel vectors lane by lane)
    long_reduce = all(isinstance(_size(r), int) for r in reduces) and prod(_size(r) for r in reduces) >= 64
    if lanes and tiled and long_reduce and (tile := _channel_tile(globals_, loads, lanes)):
        # channel loads that aren't contiguous get a contiguous copy if small enough (else lanes are gathered)
        channel, choices = tile[-1][0], []
        if any(_stride(ld.src[0], channel) != 1 for ld in _loads_depending_on(loads, channel)) and _staged_loads(ast, channel, renderer):
            choices.append((channel, 0, OptOps.STAGE))
        return choices + [(rng, amount, OptOps.UPCAST) for rng, amount in tile]
    if lanes and (width := _pooling_row_vector(globals_, reduces, loads)):
        return [(globals_[-1], width, OptOps.PADTO), (globals_[-1], width, OptOps.UPCAST)]
    if tiled and (tile := _register_tile(globals_, loads)):
        choices = [(rng, amount, OptOps.UPCAST) for rng, amount in tile]
        return choices + ([(tile[0][0], tile[1][0], OptOps.SWAP)] if _columns_outside(globals_, tile) else [])
    if len(globals_) == 1 and (columns := _column_sums(globals_[0], reduces[-1], loads)):
        return [(globals_[0], columns, OptOps.UPCAST)]
    # a long reduction: partial sums in lanes (C can't reorder float adds into vectors itself), on the
    # innermost reduce axis with a vector-width size (else the last one's largest small divisor)
    if all(isinstance(_size(r), int) for r in reduces) and prod(_size(r) for r in reduces) >= 64:
        lane_axis = next((r for r in reversed(reduces) if _largest_divisor(_size(r), (16, 8, 4))), reduces[-1])
        if (amount := _tile_amount(_size(lane_axis), (16, 8, 4), 16)) is not None and amount >= 4:
            return [(lane_axis, amount, OptOps.UNROLL)]
    return []

def _tensor_core_opts(ast: UOp, renderer) -> list[Opt]:
    """TC on the first choice (contiguous b rows), then a register tile of instructions: 4 column blocks
    (64 columns) by 8 rows, 32 vector accumulators (bfloat16 matmul on AVX512-BF16, 1024: 387 GFLOPS
    with 2 x 8, 417 with 4 x 8; 2048: 260 and 448), then threads. [] when no TC applies."""
    from fusegrad.codegen.opt.tc import tensor_core_choices
    choices = tensor_core_choices(ast, renderer, int(TC_OPT.value))
    if not choices: return []
    _, _, a, b, n, m, _ = choices[0]
    opts = [Opt(OptOps.TC, 0, int(TC_OPT.value))]
    try: tiled = apply_opt(ast, opts[0], renderer)
    except KernelOptError: return []
    axes = kernel_axes(tiled)
    column = next(r for r in axes if r.arg[0] == n.arg[0])
    # (TC keeps range ids) the row axis: one that only the a operand depends on, m if the instruction has rows
    a_ids, b_ids = {r.arg[0] for r in ranges_in(a)}, {r.arg[0] for r in ranges_in(b)}
    row = next((r for r in reversed(axes) if r.arg[1] is not AxisType.REDUCE and r.arg[0] in a_ids - b_ids and
                (m is None or r.arg[0] == m.arg[0])), None)
    tile = [(column, _largest_divisor(_size(column), (4, 2)), OptOps.UPCAST)]
    if row is not None: tile.append((row, _largest_divisor(_size(row), (8, 4, 2)), OptOps.UPCAST))
    opts += _as_opts(axes, [c for c in tile if c[1] is not None])
    for o in opts[1:]: tiled = apply_opt(tiled, o, renderer)
    sizes = [_size(r) for r in kernel_axes(ast)]
    work = prod(sizes) if all(isinstance(s, int) for s in sizes) else 0
    if getattr(renderer, "has_threads", False) and cpu_count() > 1 and work >= getenv("THREAD_MIN_WORK", 1 << 20):
        first = kernel_axes(tiled)[0]
        if first.arg[1] in (AxisType.GLOBAL, AxisType.LOOP) and isinstance(_size(first), int) and _size(first) >= cpu_count():
            opts.append(Opt(OptOps.THREAD, 0, cpu_count()))
    return opts

def hand_coded_optimizations(ast: UOp, renderer) -> list[Opt]:
    """Defaults without search: the renderer's tensor core where one computes the reduce (bfloat16
    matmul on the CPU; ``TC=0`` turns that off), register tiles for reduces with several outputs (matmul; conv tiles
    with a channel vector and staged weights), 64-output row tiles for reductions down matrix
    columns, partial-sum lanes for other long reductions, vector lanes for elementwise kernels, and
    threads for big enough kernels (docs/decisions.md, "Codegen on the CPU", has the measurements).

    >>> # (a @ b) on 1024x1024 gets an 8 x 32 register tile and threads:
    >>> # [Opt(UPCAST, 0, 8), Opt(UPCAST, 1, 32), Opt(THREAD, 0, 2)]
    """
    if USE_TC and getattr(renderer, "tensor_cores", None) and (tc_opts := _tensor_core_opts(ast, renderer)): return tc_opts
    axes = kernel_axes(ast)
    globals_ = [r for r in axes if r.arg[1] is not AxisType.REDUCE]
    reduces = [r for r in axes if r.arg[1] is AxisType.REDUCE]
    reduce_nodes = [x for x in ast.toposort if x.op is Ops.REDUCE]
    work = prod(_size(r) for r in axes) if all(isinstance(_size(r), int) for r in axes) else 0
    choices: list[tuple[UOp, int, OptOps]] = []
    if reduce_nodes and reduces and len(reduce_nodes) <= 4:
        loads = list(dict.fromkeys(x for x in reduce_nodes[0].src[0].toposort if x.op is Ops.LOAD))
        choices = _reduce_choices(ast, renderer, globals_, reduces, loads)
    elif not reduce_nodes and globals_ and renderer.vector_loops and work >= 1 << 16 and (vector := _elementwise_vector(ast, globals_[-1])):
        lanes, padded = vector
        choices += ([(globals_[-1], lanes, OptOps.PADTO)] if padded else []) + [(globals_[-1], lanes, OptOps.UPCAST)]
    opts = _as_opts(axes, choices)
    threads = cpu_count()
    # threads pay off only when a kernel runs well above the cost of waking them (~tens of us)
    if getattr(renderer, "has_threads", False) and threads > 1 and globals_ and work >= getenv("THREAD_MIN_WORK", 1 << 20):
        first = next((g for g in globals_ if all(g is not c[0] or c[1] != _size(g) for c in choices)), None)
        outer = _size(first) // next((c[1] for c in choices if c[0] is first and c[2] is OptOps.UPCAST), 1) if first is not None and isinstance(_size(first), int) else 0
        if first is globals_[0] and outer >= threads: opts.append(Opt(OptOps.THREAD, 0, threads))
    return opts

def optimize_kernel(ast: UOp, renderer, opts: list | None = None) -> tuple[UOp, tuple]:
    """Apply ``opts`` (or the heuristic's choice) and re-nest the loops."""
    if NOOPT and opts is None: return renest(ast), ()
    from fusegrad.helpers import BEAM
    if opts is None and BEAM >= 1:
        from fusegrad.codegen.opt.search import beam_search
        opts = beam_search(ast, renderer, int(BEAM.value))
    if opts is None:
        opts = hand_coded_optimizations(ast, renderer)
        applied = []
        for opt in opts:
            try:
                ast = apply_opt(ast, opt, renderer)
                applied.append(opt)
            except KernelOptError:
                if DEBUG >= 3: print(f"opt: skipped {opt} (not applicable)")
    else:
        applied = []
        for opt in opts:
            ast = apply_opt(ast, opt, renderer)
            applied.append(opt)
    ast = renest(ast)
    if DEBUG >= 3: print(f"opt: {colored_shape(ast)}  applied {applied}")
    return ast, tuple(applied)
