"""Looking at a kernel AST (a SINK of STOREs over RANGEs): the helpers that optimization (codegen/opt/)
and lowering (codegen/lowering.py) share, one definition each.

A kernel's *axes* are its non-UPCAST ranges, globals first then locals, grouped reduce parts and
reduces, each group in id order (``kernel_axes``): ``Opt(OptOps.UPCAST, axis=1, arg=4)`` names its
range by that position. A range's size (``range_size``) is an int, or a UOp when it is symbolic.

This module sits below both users: it imports only the IR (uop/), so lowering can use it without
importing the optimizer, and the optimizer's actions can use lowering.
"""
from __future__ import annotations
from dataclasses import dataclass
from fusegrad.helpers import prod, colored
from fusegrad.uop.ops import UOp, Ops, AxisType, AXIS_COLORS, graph_rewrite
from fusegrad.uop.symbolic import symbolic

@dataclass(frozen=True)
class KernelInfo:
    """Kernel-wide optimization state, kept in the kernel SINK's arg."""
    dont_use_locals: bool = False
    gather_lanes: bool = False    # (OptOps.GATHER) vector loops take non-contiguous lanes as gathers, whatever the target's policy

def kernel_info(ast: UOp) -> KernelInfo:
    return ast.arg if isinstance(ast.arg, KernelInfo) else KernelInfo()

def range_size(r: UOp):
    """The trip count of RANGE ``r``: an int, or the bound's UOp when it is symbolic."""
    return r.src[0].arg if r.src[0].op is Ops.CONST else r.src[0]

# the order of axes in ``kernel_axes`` and ``colored_shape`` (tinygrad's: global, local, group, reduce, upcast)
AXIS_RANK = {AxisType.GLOBAL: 0, AxisType.THREAD: 0, AxisType.LOOP: 0, AxisType.LOCAL: 1, AxisType.GROUP_REDUCE: 2,
              AxisType.REDUCE: 3, AxisType.WARP: 4, AxisType.UPCAST: 5, AxisType.UNROLL: 6, AxisType.STAGE: 7}

def kernel_axes(ast: UOp) -> list[UOp]:
    """The kernel's optimizable ranges: globals (and threads), then locals, then grouped reduce
    parts, then reduces, each by id. UPCAST ranges are not axes."""
    ranges = [x for x in ast.toposort if x.op is Ops.RANGE and AXIS_RANK[x.arg[1]] <= 3]
    return sorted(ranges, key=lambda r: (AXIS_RANK[r.arg[1]], r.arg[0]))

def colored_shape(ast: UOp) -> str:
    """Loop sizes coloured by kind: blue global, cyan local, green grouped reduce, red reduce,
    yellow upcast (DEBUG>=3 prints it with the applied opts)."""
    ranges = sorted([x for x in ast.toposort if x.op is Ops.RANGE and x.arg[1] is not AxisType.STAGE],
                    key=lambda r: (AXIS_RANK[r.arg[1]], r.arg[0]))
    return "_".join(colored(str(range_size(r)), AXIS_COLORS[r.arg[1]]) for r in ranges)

def next_range_id(ast: UOp) -> int:
    return 1 + max((x.arg[0] for x in ast.toposort if x.op is Ops.RANGE), default=-1)

def local_axes(ast: UOp) -> list[UOp]:
    """The ranges that become local (workgroup) launch indices: LOCAL ranges, then GROUP_REDUCE ranges, each by id,
    then a warp tensor core's WARP range (the innermost: local dim x, so a warp is 32 consecutive threads)."""
    ranges = [x for x in ast.toposort if x.op is Ops.RANGE and x.arg[1] in (AxisType.LOCAL, AxisType.GROUP_REDUCE, AxisType.WARP)]
    return sorted(ranges, key=lambda r: (AXIS_RANK[r.arg[1]], r.arg[0]))

def grouped_partial_slots(ast: UOp, red: UOp) -> list[UOp]:
    """The ranges that index the shared-memory buffer of grouped reduce ``red``: every LOCAL range,
    the reduce's own GROUP_REDUCE ranges, and the UPCAST ranges its partial sums depend on."""
    local = sorted([x for x in ast.toposort if x.op is Ops.RANGE and x.arg[1] in (AxisType.LOCAL, AxisType.WARP)], key=lambda r: r.arg[0])
    groups = [r for r in red.src[1:] if r.arg[1] is AxisType.GROUP_REDUCE]
    upcasts = sorted([r for r in free_ranges(red.src[0]) if r.arg[1] is AxisType.UPCAST], key=lambda r: r.arg[0])
    return local + groups + upcasts

def shared_memory_bytes(ast: UOp) -> int:
    """Bytes of shared memory the staged inputs and grouped reduces of ``ast`` need (one buffer each)."""
    total = sum(x.dtype.size * x.dtype.base.itemsize for x in ast.toposort if x.op is Ops.DEFINE_LOCAL)   # staged inputs
    for red in [x for x in ast.toposort if x.op is Ops.REDUCE]:
        if any(r.arg[1] is AxisType.GROUP_REDUCE for r in red.src[1:]):
            total += prod(range_size(r) for r in grouped_partial_slots(ast, red)) * red.dtype.itemsize
    return total

def open_ranges(root: UOp) -> dict[UOp, frozenset[UOp]]:
    """Every node under ``root`` mapped to the ranges it depends on that no REDUCE or END inside it has closed
    (before lowering, a REDUCE closes its ranges; after, an END does)."""
    ctx: dict[UOp, frozenset] = {}
    for x in root.toposort:
        found = frozenset().union(*(ctx[s] for s in x.src)) if x.src else frozenset()
        if x.op is Ops.RANGE: found = found | {x}
        if x.op is Ops.REDUCE: found = found - set(x.src[1:])
        if x.op is Ops.END: found = found - {s for s in x.src if s.op is Ops.RANGE}
        ctx[x] = found
    return ctx

def free_ranges(node: UOp) -> set[UOp]:
    """The ranges ``node`` depends on that no REDUCE inside it has closed."""
    return set(open_ranges(node)[node])

def loop_nesting(sink: UOp) -> dict[UOp, frozenset[UOp]]:
    """Every RANGE of ``sink`` mapped to all the loops it runs inside.

    A RANGE carries only its trip count; where it sits in the loop nest follows from the kernel's
    structure, so rewrites of ranges (split, unroll, group, swap) never have to repair it:

    - A range that a REDUCE or an END closes (a reduce's loops, an accumulator's init and update
      lanes, a staged copy's loops) runs inside the loops its closer still depends on after closing
      it (so an accumulator is initialized once per iteration of those), and inside the ranges the
      closer lists before it. A REDUCE's value lanes (UPCAST ranges) are not enclosing loops:
      lowering gives the reduce its own copies of them.
    - The ranges nothing closes (the output loops) nest in one chain: the others by id, then the
      UPCAST ones by id, innermost (register tiles).

    Works before and after lowering (REDUCE or END closers). Raises ValueError on a cycle."""
    open_ranges: dict[UOp, frozenset[UOp]] = {}
    direct: dict[UOp, set[UOp]] = {}
    closed: set[UOp] = set()
    for x in sink.toposort:
        found = frozenset().union(*(open_ranges[s] for s in x.src)) if x.src else frozenset()
        if x.op is Ops.RANGE:
            found = found | {x}
            direct.setdefault(x, set())
        if x.op in (Ops.REDUCE, Ops.END):
            closing = list(dict.fromkeys(s for s in x.src[1:] if s.op is Ops.RANGE))
            found = found - set(closing)
            body = found - {r for r in found if r.arg[1] is AxisType.UPCAST} if x.op is Ops.REDUCE else found
            for i, r in enumerate(closing): direct[r].update(body, closing[:i])
            closed.update(closing)
        open_ranges[x] = found
    chain = sorted([r for r in direct if r not in closed], key=lambda r: (r.arg[1] is AxisType.UPCAST, r.arg[0]))
    for i, r in enumerate(chain): direct[r].update(chain[:i])
    nesting: dict[UOp, frozenset[UOp]] = {}
    def ancestors(r: UOp, visiting: tuple = ()) -> frozenset[UOp]:
        if r in nesting: return nesting[r]
        if r in visiting: raise ValueError(f"loops nest in a cycle: range {r.arg[0]} runs inside itself")
        nesting[r] = frozenset(direct[r]).union(*(ancestors(p, visiting + (r,)) for p in direct[r]))
        return nesting[r]
    for r in direct: ancestors(r)
    return nesting

def ranges_in(expression: UOp) -> set[UOp]:
    """The ranges an expression is computed from (a RANGE's source is its trip count, not an
    input, so the walk doesn't descend into it)."""
    found, stack, seen = set(), [expression], set()
    while stack:
        x = stack.pop()
        if x in seen: continue
        seen.add(x)
        if x.op is Ops.RANGE: found.add(x)
        else: stack.extend(x.src)
    return found

def loads_depending_on(loads: list[UOp], rng: UOp) -> frozenset[UOp]:
    """The loads whose address changes along ``rng`` (the others broadcast over it)."""
    return frozenset(ld for ld in loads if rng in ranges_in(ld.src[0]))

def address_stride(index: UOp, rng: UOp) -> int | None:
    """How far the address of memory access ``index`` (an INDEX) moves per step of ``rng`` (None when
    that isn't a constant)."""
    offset = index.src[1]
    step = graph_rewrite(offset.substitute({rng: rng + 1}) - offset, symbolic)
    return step.arg if step.op is Ops.CONST else None
