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
| LOCAL / GROUP / GROUPTOP / PADTO / SWAP / NOLOCALS / TC | | need local memory or tensor cores: not legal on the CPU renderer (KernelOptError) |

``optimize_kernel(ast, renderer, opts)`` returns the rewritten AST and the applied opts.
"""
from __future__ import annotations
import os
from dataclasses import dataclass
from enum import Enum, auto
from fusegrad.dtype import dtypes
from fusegrad.helpers import NOOPT, DEBUG, prod, colored, getenv
from fusegrad.uop.ops import UOp, Ops, AxisType, AXIS_COLORS

class KernelOptError(Exception):
    """An optimization action that is not legal for this kernel (the message says why)."""

class OptOps(Enum):
    UPCAST = auto(); UNROLL = auto(); LOCAL = auto(); GROUP = auto(); GROUPTOP = auto(); PADTO = auto()
    THREAD = auto(); NOLOCALS = auto(); SWAP = auto(); TC = auto()
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

def kernel_axes(ast: UOp) -> list[UOp]:
    """The kernel's optimizable ranges: globals (and threads) first, then reduces, by id."""
    ranges = [x for x in ast.toposort if x.op is Ops.RANGE]
    outer = sorted([r for r in ranges if r.arg[1] in (AxisType.GLOBAL, AxisType.THREAD, AxisType.LOOP)], key=lambda r: r.arg[0])
    reduce = sorted([r for r in ranges if r.arg[1] is AxisType.REDUCE], key=lambda r: r.arg[0])
    return outer + reduce

def colored_shape(ast: UOp) -> str:
    """Loop sizes coloured by kind (blue global, red reduce, yellow upcast, magenta unroll ...)."""
    ranges = sorted([x for x in ast.toposort if x.op is Ops.RANGE], key=lambda r: (r.arg[1] is AxisType.UPCAST, r.arg[0]))
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
    """Apply one action or raise KernelOptError."""
    axes = kernel_axes(ast)
    if opt.op in (OptOps.LOCAL, OptOps.GROUP, OptOps.GROUPTOP, OptOps.NOLOCALS, OptOps.SWAP, OptOps.TC, OptOps.PADTO):
        if opt.op is OptOps.SWAP: pass
        elif not renderer.has_local or opt.op in (OptOps.TC, OptOps.PADTO):
            raise KernelOptError(f"{opt.op.name} is not supported by the {renderer.device} renderer")
    if opt.axis is None or not 0 <= opt.axis < len(axes): raise KernelOptError(f"axis {opt.axis} is out of range ({len(axes)} axes)")
    rng = axes[opt.axis]
    amount = opt.arg if opt.arg else _size(rng)
    if not isinstance(amount, int): raise KernelOptError(f"{opt} needs an int amount")
    if opt.op is OptOps.UPCAST:
        if rng.arg[1] is AxisType.REDUCE: raise KernelOptError("UPCAST is for non-reduce axes; use UNROLL")
        if amount > 64: raise KernelOptError(f"UPCAST amount {amount} is above 64")
        if amount == _size(rng):
            return ast.substitute({rng: rng.replace(arg=(rng.arg[0], AxisType.UPCAST))})
        return _split(ast, rng, amount, AxisType.UPCAST)[0]
    if opt.op is OptOps.UNROLL:
        if rng.arg[1] is not AxisType.REDUCE: raise KernelOptError("UNROLL is for reduce axes")
        if amount > 64: raise KernelOptError(f"UNROLL amount {amount} is above 64")
        return _unroll(ast, rng, amount)
    if opt.op is OptOps.SWAP:
        other = opt.arg
        if not isinstance(other, int) or not 0 <= other < len(axes) or other == opt.axis: raise KernelOptError(f"SWAP needs another axis, got {other}")
        second = axes[other]
        if AxisType.REDUCE in (rng.arg[1], second.arg[1]): raise KernelOptError("SWAP exchanges two global axes")
        # loops nest in id order: exchanging ids exchanges the loops
        return ast.substitute({rng: rng.replace(arg=(second.arg[0], rng.arg[1])), second: second.replace(arg=(rng.arg[0], second.arg[1]))})
    if opt.op is OptOps.THREAD:
        if opt.axis != 0 or rng.arg[1] not in (AxisType.GLOBAL, AxisType.LOOP): raise KernelOptError("THREAD splits the outermost global axis")
        if not getattr(renderer, "has_threads", False): raise KernelOptError(f"the {renderer.device} renderer has no threads")
        return ast.substitute({rng: rng.replace(arg=(rng.arg[0], AxisType.THREAD))})
    raise KernelOptError(f"{opt.op.name} is not supported here")

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
    return ast.substitute(mapping)

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
    ranges = [x for x in ast.toposort if x.op is Ops.RANGE]
    if not ranges: return ast
    bare = {r: UOp(Ops.RANGE, r.dtype, (r.src[0],), r.arg) for r in ranges}
    ast = ast.substitute(bare)
    ranges = [x for x in ast.toposort if x.op is Ops.RANGE]
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

def hand_coded_optimizations(ast: UOp, renderer) -> list[Opt]:
    """Defaults without search: register tiles for reduces with several outputs (matmul, conv),
    partial-sum lanes for long reductions, and threads for big enough kernels."""
    opts: list[Opt] = []
    axes = kernel_axes(ast)
    globals_ = [r for r in axes if r.arg[1] is not AxisType.REDUCE]
    reduces = [r for r in axes if r.arg[1] is AxisType.REDUCE]
    reduce_nodes = [x for x in ast.toposort if x.op is Ops.REDUCE]
    work = prod(_size(r) for r in axes) if all(isinstance(_size(r), int) for r in axes) else 0
    # register tiles over nested reduces (a reduce inside another reduce's value) are miscompiled
    # in some cases (wrong max-pool-over-conv results): keep those kernels untiled until fixed
    nested = any(x.op is Ops.REDUCE for red in reduce_nodes for x in red.src[0].toposort if x is not red)
    if reduce_nodes and reduces and len(reduce_nodes) <= 4 and not nested:
        loads = [x for x in reduce_nodes[0].src[0].toposort if x.op is Ops.LOAD]
        # matmul-like: a reduce reading two buffers, with at least two output dims
        if len(globals_) >= 2 and len(loads) >= 2:
            # the row tile first, then the contiguous column tile, which then runs innermost
            last = len(globals_) - 1
            # 8 rows x 32 columns = 16 AVX-512 accumulators (of 32 registers)
            if (amount := _largest_divisor(_size(globals_[last - 1]), (8, 4, 3, 2))) is not None:
                opts.append(Opt(OptOps.UPCAST, last - 1, amount))
            if (amount := _largest_divisor(_size(globals_[last]), (32, 16, 8, 4))) is not None:
                opts.append(Opt(OptOps.UPCAST, last, amount))

        elif isinstance(_size(reduces[-1]), int) and _size(reduces[-1]) >= 64:
            if (amount := _largest_divisor(_size(reduces[-1]), (16, 8, 4))) is not None:
                opts.append(Opt(OptOps.UNROLL, len(axes) - 1, amount))
    threads = cpu_count()
    # threads pay off only when a kernel runs well above the cost of waking them (~tens of us)
    if getattr(renderer, "has_threads", False) and threads > 1 and globals_ and work >= getenv("THREAD_MIN_WORK", 1 << 20):
        first = _size(globals_[0])
        if isinstance(first, int) and first >= threads: opts.append(Opt(OptOps.THREAD, 0, threads))
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
                if DEBUG >= 3: print(f"skipped {opt}")
    else:
        applied = []
        for opt in opts:
            ast = apply_opt(ast, opt, renderer)
            applied.append(opt)
    ast = renest(ast)
    if DEBUG >= 3: print(f"{colored_shape(ast)}  {applied}")
    return ast, tuple(applied)
