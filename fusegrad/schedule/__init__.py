"""The scheduler: from the UOps a user wants realized to an ordered list of kernels.

1. Simplify the tensor graph (constants fold, weak dtypes become concrete): tensor_rules.py.
2. Decide what is written to memory (``find_realize_points``; where a value would be recomputed
   many times, ``store_is_cheaper`` weighs the repeated work against the bytes of storing it).
   Everything else is recomputed inside its consumer, so elementwise work fuses into consumers and
   a reduce fuses with its elementwise inputs and epilogue.
3. Build one kernel per realize point (rangeify.py), in dependency order. Realize points of the
   same shape that don't depend on each other share one multi-output kernel.

The result is a list of ``ScheduleItem`` plus a ``becomes`` map that tells the front end which
graph nodes now live in buffers.
"""
from __future__ import annotations
from dataclasses import dataclass, field
from typing import Any
from fusegrad.dtype import dtypes
from fusegrad.helpers import prod, DEBUG, PROFILE
from fusegrad.uop.ops import UOp, Ops, GroupOp, graph_rewrite, graph_rewrite_map, graph_rewrite_memo, PatternMatcher, UPat
from fusegrad.schedule.tensor_rules import tensor_simplify, const_value
from fusegrad.schedule.rangeify import build_kernel, reads_other_elements
# the buffer registry lives beside device.py (fusegrad/buffers.py); re-exported here for older callers
from fusegrad.buffers import BUFFERS, new_buffer_uop, buffer_of  # noqa: F401

@dataclass(frozen=True)
class ScheduleItem:
    """One unit of work: a kernel AST (SINK of STOREs) or a COPY, and the buffers it uses
    (outputs first, in PARAM slot order)."""
    ast: UOp
    buffer_uops: tuple[UOp, ...]
    var_vals: tuple[tuple[UOp, int], ...] = ()
    raw_reads: frozenset = frozenset()      # buffers read with their contents from before this schedule
    assigns: tuple[UOp, ...] = ()           # buffers this item overwrites in place
    @property
    def bufs(self) -> list: return [buffer_of(b) for b in self.buffer_uops]
    @property
    def outputs(self) -> list:
        return self.bufs[:len(self.ast.src)] if self.ast.op is Ops.SINK else self.bufs[:1]
    @property
    def inputs(self) -> list:
        return self.bufs[len(self.ast.src):] if self.ast.op is Ops.SINK else self.bufs[1:]

# ---------------------------------------------------------------- realize decisions

def _is_view_of_buffer(node: UOp) -> bool:
    """A view of a buffer, or of a pending ASSIGN (the buffer after the write): reading it needs no kernel of its own."""
    return node.base.op in (Ops.BUFFER, Ops.ASSIGN)

def assign_target(node: UOp) -> UOp:
    """The view an ASSIGN writes: its first source, through the movement ops in its arg (a view assign)."""
    target = node.src[0]
    for op, arg in node.arg or (): target = UOp(op, target.dtype, (target,), arg)
    return target

def _is_alias(node: UOp) -> bool:
    """Is ``node`` only movement ops (and DETACH) over a pending ASSIGN: a view of its buffer?"""
    while node.op in GroupOp.Movement or node.op is Ops.DETACH: node = node.src[0]
    return node.op is Ops.ASSIGN

# ---------------------------------------------------------------- the store-vs-recompute cost model

# What one kernel launch costs, in the units of ``store_is_cheaper`` (about the time to move 64 KiB:
# a few microseconds of dispatch, argument setup and thread wake-up on the CPU backend)
LAUNCH_COST = 1 << 16
# ops that the backends expand into many instructions: threefry is 20 rounds of add/rotate/xor,
# exp2/log2/sin/cos/pow become polynomial approximations with range reduction
_OP_COST = {Ops.THREEFRY: 64, Ops.EXP2: 16, Ops.LOG2: 16, Ops.SIN: 16, Ops.COS: 16, Ops.POW: 16,
            Ops.SQRT: 4, Ops.RECIPROCAL: 4, Ops.FDIV: 4, Ops.IDIV: 4, Ops.MOD: 4}

def op_cost(op: Ops) -> int:
    """The work of one elementwise op on one element (a simple ALU op is 1; casts and movement are free)."""
    return _OP_COST.get(op, 1) if op in GroupOp.ALU else 0

def store_is_cheaper(work: float, recomputes: float, elements: int, itemsize: int, launch: bool = True) -> bool:
    """Should a value be written to memory once instead of recomputed by every use?

    One unit is one simple ALU op on one element, or one byte moved (on this class of machine
    both take roughly the same time in a vectorized loop).

    - work repeated  = ``work`` (ops per element, a reduce's whole loop included) x (``recomputes`` - 1) x ``elements``:
      a value read through an EXPAND is recomputed once per element of the expanded view, one
      computed inside another reduce's loop once per iteration of that loop
    - cost of storing = bytes written + bytes read back (2 x ``itemsize`` x ``elements``), plus
      ``LAUNCH_COST`` for the kernel that writes it when ``launch`` (a tiny value is cheaper to
      recompute than to launch a kernel for)

    Store when repeating the work costs more. ``store_is_cheaper(100, 512, 512*512, 4)`` (random
    normals broadcast into a 512x512 matmul) is True; ``store_is_cheaper(2, 8, 10, 4)`` (lr * grad
    broadcast over a tiny batch) is False."""
    repeated = work * max(recomputes - 1, 0) * elements
    storing = 2 * itemsize * elements + (LAUNCH_COST if launch else 0)
    return repeated > storing

def _numel(shape: tuple) -> int:
    """Elements in ``shape``; a symbolic dim counts as its maximum."""
    return int(prod(s if isinstance(s, int) else s.vmax for s in shape)) if shape is not None else 1

def _work_of(node: UOp, recomputed_sources: list[UOp], work: dict[UOp, float]) -> float:
    """Ops per element of ``node``'s value, counting the work of the sources that are recomputed
    with it; a reduce repeats its source's work once per reduced element."""
    inner = sum(work[s] for s in recomputed_sources) + op_cost(node.op)
    if node.op is Ops.REDUCE_AXIS: inner = (inner + 1) * max(_numel(tuple(node.src[0].shape[a] for a in node.arg[1])), 1)
    return min(inner, float(1 << 40))

def _expand_factor(expand: UOp) -> float:
    """How many times an EXPAND reads each element of its source."""
    return _numel(expand.shape) / max(_numel(expand.src[0].shape), 1)

def _pad_factor(chain: tuple) -> float:
    """How many positions a chain of movement ops computes per element of its source because of PADs (1.0: none)."""
    factor = 1.0
    for view in chain:
        if view.op is Ops.PAD: factor *= _numel(view.shape) / max(_numel(view.src[0].shape), 1)
    return factor

def _store_for_repeats(node: UOp, work: float, recomputes: float) -> bool:
    return store_is_cheaper(work, recomputes, _numel(node.shape), node.dtype.itemsize)

def _folded_arithmetic(node: UOp) -> bool:
    """Does ``node``'s graph compute something (an ALU op) above its buffers? (Then it is a new value
    even where simplification folds it to a view of a buffer.)"""
    stack, seen = [node], set()
    while stack:
        if (x := stack.pop()) in seen: continue
        seen.add(x)
        if x.op in GroupOp.ALU: return True
        if x.op is not Ops.ASSIGN: stack.extend(x.src)   # an assign's value is the buffer's, not this node's
    return False

# The most elementwise and reduce ops one kernel computes one after another: a deeper chain is stored part way
MAX_FUSED_DEPTH = 1000

def find_realize_points(roots: list[UOp], depth_cuts: set[UOp] | None = None) -> list[UOp]:
    """Nodes whose value is stored in a buffer, in dependency order (sources first).

    Stored: roots, CONTIGUOUS / ASSIGN / COPY, a reduce with several consumers, a value read through
    an EXPAND or computed inside another reduce's loop when ``store_is_cheaper`` says repeating it
    costs more than storing it, and values whose recomputation would repeat a reduce or grow
    exponentially (several views of one value), and a chain deeper than ``MAX_FUSED_DEPTH`` part way (those go in
    ``depth_cuts`` when given: see group_kernels)."""
    sink = UOp(Ops.SINK, dtypes.void, tuple(roots))
    order = list(sink.toposort)
    consumers: dict[UOp, list[UOp]] = {}
    for node in order:
        for s in node.src: consumers.setdefault(s, []).append(node)
    realize: set[UOp] = set()
    for root in roots:
        if not _is_view_of_buffer(root) and const_value(root) is None and root.op is not Ops.CONST: realize.add(root)
    for node in order:
        if node.op in (Ops.CONTIGUOUS, Ops.ASSIGN, Ops.COPY): realize.add(node)
        if node.op is Ops.COPY and node.src[0].base.op is not Ops.BUFFER: realize.add(node.src[0])
        # a reduce used in several places is stored once instead of recomputed per use (consumers
        # with the same loops still end up in its kernel: see group_kernels)
        if node.op is Ops.REDUCE_AXIS and len(set(consumers.get(node, []))) > 1: realize.add(node)
    boundaries = (Ops.BUFFER, Ops.CONST, Ops.DEVICE, Ops.COPY, Ops.ASSIGN, Ops.CONTIGUOUS)
    def recomputed_sources(node: UOp) -> list[UOp]:
        return [s for s in node.src if s not in realize and s.op not in boundaries]
    # a value broadcast by EXPAND is recomputed per element of the expanded view: store it when
    # that repeats more work than storing costs (random normals into a matmul). A value that
    # computes a reduce is always stored: its loop would run once per element of the view (a
    # reduce nested in the consumer's loops, which the optimizer can't tile), and the reduce's
    # output is small next to its input. One bottom-up pass; expand_factor keeps the largest
    # factor each value is read with, for the second look below.
    work: dict[UOp, float] = {}
    has_reduce: dict[UOp, bool] = {}
    expand_factor: dict[UOp, float] = {}
    for node in order:
        recomputed = recomputed_sources(node)
        work[node] = _work_of(node, recomputed, work)
        has_reduce[node] = node.op is Ops.REDUCE_AXIS or any(has_reduce[s] for s in recomputed)
        if node.op is Ops.EXPAND:
            _store_padded_windows(node, realize)
            base = node.src[0].base
            if base.op in boundaries or base in realize: continue
            # a single element broadcast (lr * 0.9, a key word) is loop-invariant: codegen computes it once, before
            # the kernel's loops, so it is not repeated per element (a kernel of its own would cost a launch)
            if _numel(base.shape) == 1 and not has_reduce[base]: continue
            expand_factor[base] = max(expand_factor.get(base, 1.0), _expand_factor(node))
            if has_reduce[base] or _store_for_repeats(base, work[base], expand_factor[base]): realize.add(base)
    stored_for_expand = {node for node in expand_factor if node in realize}
    # a second pass in dependency order: a node's sources are decided before it, so work and
    # has_reduce only count what would really be recomputed with it
    depth: dict[UOp, int] = {}
    for node in order:
        recomputed = recomputed_sources(node)
        if node.op is Ops.REDUCE_AXIS and _nests_a_reduce(node, has_reduce, realize, boundaries, work):
            recomputed = recomputed_sources(node)
        has_reduce[node] = node.op is Ops.REDUCE_AXIS or any(has_reduce[s] for s in recomputed)
        work[node] = _work_of(node, recomputed, work)
        # stored for an expand, but a source it recomputed is now stored itself (a reduce used
        # twice, a value another expand stored): recompute it again if that is cheaper now
        # (SGD's lr * grad over a small batch; BatchNorm's rsqrt(var + eps) * weight stays stored)
        if node in stored_for_expand and not has_reduce[node] and not _store_for_repeats(node, work[node], expand_factor[node]):
            realize.discard(node)
        # a kernel never nests more than MAX_FUSED_DEPTH ops: deeper, and the C compiler's recursive passes overflow
        # its stack (a lazy chain of 100,000 ops) and take superlinear time
        depth[node] = (node.op in GroupOp.Elementwise or node.op is Ops.REDUCE_AXIS) + max([depth[s] for s in recomputed], default=0)
        if depth[node] > MAX_FUSED_DEPTH and node not in realize:
            realize.add(node)
            if depth_cuts is not None: depth_cuts.add(node)
        if node.op in GroupOp.Movement or node.op in boundaries or node in realize: continue
        # a computed value read through several different views (x and x.flip(0), x and x.shrink(...))
        # would be recomputed once per view, and chains of such reads (sort networks, scans, their
        # gradients) grow exponentially: store it once instead (a value of at most two simple ops,
        # x + 1 or -x, is always recomputed)
        if not has_reduce[node] and work[node] <= 2: continue
        views, users, stack = set(), set(), [(c, ()) for c in set(consumers.get(node, []))]
        while stack and (len(views) < 2 or len(users) < 2):
            consumer, chain = stack.pop()
            if consumer.op in GroupOp.Movement:
                stack.extend((c, chain + (consumer,)) for c in set(consumers.get(consumer, [])))
            else:
                views.add(chain)
                users.add(consumer)
        # a reduce, or a value computed from one (conv + bias + relu), used by several ops would be
        # recomputed per use. Storing it once is faster, and it also makes every user see the same
        # bits: a max-pool gradient compares the input with the pooled max, and two recomputations
        # with a different summation order (register tiles, FMA contraction) need not be equal
        if (len(views) >= 2 and any(views)) or (has_reduce[node] and len(_fused_users(node, consumers, realize)) >= 2):
            realize.add(node)
        # a reduce read through a PAD would run its loop at every position of the padded grid, the padding included
        # (an input gradient pads the output gradient by the kernel size: the forward conv, recomputed there under
        # the pad's gate, took 16 s instead of 12 ms): store it first when that repeats more work than storing costs
        elif has_reduce[node] and any(_store_for_repeats(node, work[node], _pad_factor(chain)) for chain in views):
            realize.add(node)
    return [node for node in order if node in realize]

# what reading one element through a PAD's gate costs in a kernel's inner loop (the bounds compares, the select, and
# on the CPU a scalar or masked load where a plain vector load would do)
PAD_GATE_COST = 4
# padded values smaller than this stay fused: a kernel copies a small operand (a conv's weights, a stride phase of
# them), zeros included, into a staged copy once (OptOps.STAGE), so its reads pay no gate, and stored they would each
# be a kernel of their own that the consumers no longer share (a strided conv's input gradient: 1 kernel -> 4)
PAD_STORE_MIN_BYTES = 1 << 18

def _store_padded_windows(expand: UOp, realize: set[UOp]) -> None:
    """Store a padded value once (a copy with the zeros written out) when an EXPAND reads it many times: a padded
    conv's input is read once per output channel and kernel tap, and each read through the pad pays the gate
    (32x64x32x32 3x3 conv, padding 1: 31-38 ms gated, 11 ms plus a 1-2 ms copy ungated)."""
    view = expand.src[0]
    while view.op in GroupOp.Movement and view.op is not Ops.PAD: view = view.src[0]
    if view.op is not Ops.PAD or view in realize or not any(before or after for before, after in view.arg): return
    if _numel(view.shape) * view.dtype.itemsize < PAD_STORE_MIN_BYTES: return
    if store_is_cheaper(PAD_GATE_COST, _expand_factor(expand), _numel(view.shape), view.dtype.itemsize): realize.add(view)

def _nests_a_reduce(node: UOp, has_reduce: dict[UOp, bool], realize: set[UOp], boundaries: tuple, work: dict[UOp, float]) -> bool:
    """A reduce whose input computes another reduce (an elementwise tail after a matmul, summed)
    would run that reduce's loop inside its own. The optimizer tiles and vectorizes one reduce per
    loop nest, so the inner loop runs at a fraction of its speed: counted as doing its work twice,
    the input is stored when that costs more than storing it (``store_is_cheaper``), which keeps
    tiny nests (a few thousand ops) in one kernel. Returns whether it stored the input."""
    value = node.src[0]
    while value.op in GroupOp.Movement and value.op is not Ops.EXPAND: value = value.src[0]
    if value.op in boundaries or value in realize or value.op in GroupOp.Movement or not has_reduce.get(value): return False
    if not _store_for_repeats(value, work[value], 2): return False
    realize.add(value)
    return True

def _fused_users(node: UOp, consumers: dict[UOp, list[UOp]], realize: set[UOp]) -> set[UOp]:
    """Where ``node``'s value leaves elementwise code: the reduces and stored values reached through
    elementwise and movement consumers. Elementwise users (relu's compare and select) share one
    computation inside a kernel; each distinct exit recomputes ``node`` in its own loops."""
    exits, stack, seen = set(), list(set(consumers.get(node, []))), set()
    while stack:
        consumer = stack.pop()
        if consumer in seen: continue
        seen.add(consumer)
        if (consumer.op in GroupOp.Elementwise or consumer.op in GroupOp.Movement) and consumer not in realize and consumers.get(consumer):
            stack.extend(set(consumers[consumer]))
        else: exits.add(consumer)
    return exits

# ---------------------------------------------------------------- kernels

def _is_unit_reshape(x: UOp) -> bool:
    """A reshape that only adds or removes size-1 dims keeps every element's loop indices."""
    return x.op is Ops.RESHAPE and tuple(s for s in x.shape if s != 1) == tuple(s for s in x.src[0].shape if s != 1)

def _reads_elementwise(node: UOp, member: UOp, below: dict[UOp, frozenset[UOp]], needs: dict[UOp, set[UOp]]) -> bool:
    """Does every path from realize point ``node`` down to realize point ``member`` go through elementwise ops only?
    The walk stays in ``node``'s own kernel region: a path through another point ``q`` on the way joins ``q`` only
    if ``q`` is in ``member``'s group, having read ``member`` elementwise itself (see group_kernels). ``below`` and
    ``needs`` are the point graph (``_point_graph``)."""
    def reaches(s: UOp) -> bool:
        if s is member: return True
        points = (s,) if s in needs else below[s]
        return any(p is member or member in needs[p] for p in points)
    stack, seen = [node], set()
    while stack:
        x = stack.pop()
        if x in seen: continue
        seen.add(x)
        for s in x.src:
            if not reaches(s): continue
            if x.op in GroupOp.Movement and not _is_unit_reshape(x): return False
            if x.op is Ops.REDUCE_AXIS: return False
            if s not in needs: stack.append(s)   # (a point on the way read member elementwise when it joined)
    return True

def _point_graph(points: list[UOp]) -> tuple[dict[UOp, frozenset[UOp]], dict[UOp, set[UOp]]]:
    """The graph of the realize points alone: for every node, the points its value reads directly (through no other
    point, itself left out), and for every point, every point it depends on. Asking "does point b need a?"
    here costs a set lookup instead of a cached toposort per point (memory quadratic in a deep chain's length)."""
    point_set = set(points)
    below: dict[UOp, frozenset[UOp]] = {}
    for x in UOp(Ops.SINK, dtypes.void, tuple(points)).toposort:
        found = frozenset().union(*(frozenset((s,)) if s in point_set else below[s] for s in x.src)) if x.src else frozenset()
        below[x] = found
    needs: dict[UOp, set[UOp]] = {}
    for p in points:   # (dependency order: the points under p are done)
        needs[p] = set(below[p]).union(*(needs[q] for q in below[p]))
    return below, needs

def _kernel_work(points: list[UOp]) -> dict[UOp, frozenset[UOp]]:
    """For each realize point, what its kernel reads (buffers, other realize points) and reduces.
    One bottom-up pass: a node's work is its sources' work, where a realize point or buffer
    counts as itself (it is read, not recomputed)."""
    point_set = set(points)
    inner: dict[UOp, frozenset[UOp]] = {}     # work inside a node's own region
    def as_source(x: UOp) -> frozenset[UOp]:
        return frozenset((x,)) if x in point_set or x.op is Ops.BUFFER else inner[x]
    for x in UOp(Ops.SINK, dtypes.void, tuple(points)).toposort:
        found = frozenset().union(*(as_source(s) for s in x.src)) if x.src else frozenset()
        inner[x] = found | {x} if x.op is Ops.REDUCE_AXIS else found
    return {p: inner[p] for p in points}

def _reads_two_states(a: set[UOp], b: set[UOp]) -> bool:
    """Do two kernels' reads (see _kernel_work) see one buffer in different states (as it was, and
    as an assign of this schedule left it)? Then they must stay separate kernels."""
    def states(work: set[UOp]) -> dict[UOp, UOp]:
        found = {}
        for x in work:
            if x.op not in (Ops.BUFFER, Ops.ASSIGN): continue
            buffer = x
            while buffer.op is not Ops.BUFFER and buffer.src: buffer = buffer.src[0]
            found[buffer] = x
        return found
    first = states(a)
    return any(first.get(buffer, state) is not state for buffer, state in states(b).items())

def _shares_work(a: set[UOp], b: set[UOp]) -> bool:
    """Do two kernels read a common input or compute a common reduce? Only then does putting
    them in one kernel save memory traffic."""
    return not a.isdisjoint(b)

def group_kernels(points: list[UOp], depth_cuts: set[UOp] = frozenset()) -> list[list[UOp]]:
    """Group realize points into kernels. Points of the same shape and device that don't depend on
    each other become one multi-output kernel: they share loops, and a reduce they share is
    computed once. A group is emitted just before the first point that needs one of its members,
    so the order stays a valid dependency order. A point that reads one of ``depth_cuts`` (see find_realize_points)
    never joins its kernel: that would make the kernel as deep as the chain the cut split."""
    units: list[list[UOp]] = []
    open_groups: dict[tuple, list[UOp]] = {}
    work = _kernel_work(points)
    below, point_needs = _point_graph(points)
    assigning = any(p.op is Ops.ASSIGN for p in points)
    for node in points:
        needs = point_needs[node]
        simple = node.op not in (Ops.COPY, Ops.ASSIGN) and all(isinstance(s, int) for s in node.shape)
        # size-1 dims don't make loops, so (4, 1) and (4,) outputs share theirs
        key = (tuple(x for x in node.shape if x != 1), node.device)
        for group_key, group in list(open_groups.items()):
            used = [member for member in group if member in needs]
            if not used: continue
            # a node that reads members elementwise, at the same loop indices, can join their kernel
            if simple and group_key == key and not depth_cuts.intersection(used) \
                    and all(_reads_elementwise(node, member, below, point_needs) for member in used): continue
            units.append(group)
            del open_groups[group_key]
        if not simple:
            units.append([node])
            continue
        group = open_groups.get(key)
        if group is not None and (not any(member in needs or _shares_work(work[node], work[member]) for member in group)
                                  or (assigning and any(_reads_two_states(work[node], work[member]) for member in group))):
            # unrelated work gains nothing from sharing loops and would keep buffers alive longer (and one
            # kernel can't read a buffer both before and after an assign to it)
            units.append(group)
            del open_groups[key]
        open_groups.setdefault(key, []).append(node)
    units.extend(open_groups.values())
    return units

def _unbind(ast: UOp) -> tuple[UOp, tuple[tuple[UOp, int], ...]]:
    """Replace bound variables in a kernel by their DEFINE_VAR; return the values separately."""
    binds = [x for x in ast.toposort if x.op is Ops.BIND]
    if not binds: return ast, ()
    values = {b.src[0]: b.src[1].arg for b in binds}
    ast = ast.substitute({b: b.src[0] for b in binds})
    return ast, tuple(values.items())

# ---------------------------------------------------------------- the schedule cache

@dataclass
class _Template:
    """A schedule with its buffers written as references into a pool: the graph's toposort (the
    order the key was built in) followed by the buffers this schedule creates. Reference i < len(order)
    is the BUFFER at position i of the toposort; i = len(order) + k is the k-th new buffer."""
    items: list[tuple]          # (ast, buffer refs, var_vals, raw-read refs, assign refs) per item
    new_buffers: list[tuple]    # (device, size, dtype) of each new buffer
    # what ``becomes`` maps, in its order: (toposort position, buffer ref, None) for a node that is a view of a
    # buffer with the node's shape, (position, buffer ref, movement ops) for a root that is another view of one,
    # and (position, None, uop) for a root that folded to a constant
    becomes: list[tuple]

SCHEDULE_CACHE: dict[tuple, _Template] = {}
SCHEDULE_CACHE_SIZE = 256

@dataclass
class ScheduleCacheStats:
    """How often ``create_schedule`` found its graph's structure in the cache (tests and profiling read it)."""
    hits: int = 0
    misses: int = 0
schedule_cache_stats = ScheduleCacheStats()

def _structure_key(roots: list[UOp]) -> tuple[tuple, list[UOp]]:
    """A key equal for graphs that differ only in which buffers they read (and the toposort that
    the key's positions refer to). This runs on every realize, so it is one plain loop."""
    # each root's own walk is cached on it first: the sink's walk reuses it, and so does the autograd
    # bookkeeping after the schedule (gradient.record_origins walks the realized roots again)
    for root in roots: root._ancestors
    if len(roots) == 1: order = [*roots[0]._ancestors, roots[0]]   # (one root: no SINK node to build and free)
    else:
        sink = UOp(Ops.SINK, dtypes.void, tuple(roots))
        order = [*sink._ancestors, sink]
    # (C-level builders: a comprehension is a Python frame of its own on 3.11, one per node for the sources)
    position_of = dict(zip(order, range(len(order)))).__getitem__
    const_op, buffer_op = Ops.CONST, Ops.BUFFER   # (locals: each Ops.X is a slow class lookup on Python 3.11)
    key: list = []
    for u in order:
        op = u.op
        # a constant is its own key: constants are interned, so the node tells 0.0 from -0.0 and 1 from
        # True (``==`` on the values merged them, and x / -0.0 then reused the kernel of x / 0.0), and
        # the cached key keeps the node alive for the next lookup to find
        if op is const_op: key.append(u)
        elif op is buffer_op: key.append((u.dtype, u.arg[1], u.arg[2]))
        else: key.append((op, u.dtype, u.arg, tuple(map(position_of, u.src))))
    return tuple(key), order

_EMPTY: frozenset = frozenset()

def _schedule_item(ast: UOp, buffer_uops: tuple, var_vals: tuple, raw_reads: frozenset, assigns: tuple) -> ScheduleItem:
    """``ScheduleItem(...)`` for a cache hit: the frozen dataclass's generated ``__init__`` sets each field through
    ``object.__setattr__`` (~0.4 us more per item of every eager op); this fills the same fields directly."""
    item = object.__new__(ScheduleItem)
    fields = item.__dict__
    fields["ast"], fields["buffer_uops"], fields["var_vals"], fields["raw_reads"], fields["assigns"] = ast, buffer_uops, var_vals, raw_reads, assigns
    return item

def _from_template(template: _Template, order: list[UOp]) -> tuple[list[ScheduleItem], dict[UOp, UOp]]:
    pool = order + [new_buffer_uop(*spec) for spec in template.new_buffers] if template.new_buffers else order
    buffer_at = pool.__getitem__   # (map over it: no comprehension frame per item)
    items = [_schedule_item(ast, tuple(map(buffer_at, refs)), var_vals, frozenset(map(buffer_at, raw)) if raw else _EMPTY,
                            tuple(map(buffer_at, assigns)) if assigns else ())
             for ast, refs, var_vals, raw, assigns in template.items]
    becomes: dict[UOp, UOp] = {}
    for index, ref, how in template.becomes:
        node = order[index]
        if how is None: becomes[node] = pool[ref].reshape(node.shape)
        elif ref is None: becomes[node] = how   # a constant
        else:
            view = pool[ref]
            for op, arg in how: view = UOp(op, view.dtype, (view,), arg)
            becomes[node] = view
    return items, becomes

def _roots_of(order: list[UOp]) -> tuple[UOp, ...]:
    """The roots a ``_structure_key`` order was built for: it ends with the SINK over them, or with the one root."""
    return order[-1].src if order[-1].op is Ops.SINK else (order[-1],)

def _root_result(root: UOp, new: UOp | None, ref) -> tuple | None:
    from fusegrad.schedule.tensor_rules import const_value
    if new is None: return ("same",)
    if new.base.op is Ops.BUFFER and new.op in (Ops.BUFFER, Ops.RESHAPE): return ("buffer", ref(new.base))
    if new.base.op is Ops.BUFFER:   # a view of a buffer (a slice of an assigned tensor)
        chain, node = [], new
        while node.op in GroupOp.Movement: chain, node = [(node.op, node.arg)] + chain, node.src[0]
        return ("view", ref(node), tuple(chain))
    if not any(x.op is Ops.BUFFER for x in new.toposort): return ("const", new)
    return None

def _to_template(items: list[ScheduleItem], realized: dict[UOp, UOp], order: list[UOp], becomes: dict[UOp, UOp]) -> _Template | None:
    position = {u: i for i, u in enumerate(order)}
    new_buffers: dict[UOp, int] = {}
    def ref(b: UOp) -> int:   # (see _Template: a position in the toposort, or past it for a new buffer)
        if b in position: return position[b]
        return len(order) + new_buffers.setdefault(b, len(new_buffers))
    try:
        entries = [(item.ast, tuple(ref(b) for b in item.buffer_uops), item.var_vals, tuple(ref(b) for b in item.raw_reads),
                    tuple(ref(b) for b in item.assigns)) for item in items]
        # realized nodes that simplification changed aren't in the original graph: no live tensor has them
        plan: dict[int, tuple] = {position[node]: (ref(buffer), None) for node, buffer in realized.items() if node in position}
        roots = [(root, _root_result(root, becomes.get(root), ref)) for root in _roots_of(order)]
    except KeyError: return None
    if any(result is None for _, result in roots): return None
    # a root's entry follows the realized nodes' (a realized root keeps its place in the map, with the root's value)
    for root, result in roots:
        if result[0] == "buffer": plan[position[root]] = (result[1], None)
        elif result[0] == "view": plan[position[root]] = (result[1], result[2])
        elif result[0] == "const": plan[position[root]] = (None, result[1])
    specs = [None] * len(new_buffers)
    for b, k in new_buffers.items(): specs[k] = (b.arg[1], b.arg[2], b.dtype)
    return _Template(entries, specs, [(index, ref, how) for index, (ref, how) in plan.items()])

def create_schedule(roots: list[UOp]) -> tuple[list[ScheduleItem], dict[UOp, UOp]]:
    """Schedule the realization of ``roots``. Returns the items in run order and ``becomes``, a map
    from original graph nodes to their new form (a view of a buffer, or a constant).

    Graphs with the same structure (differing only in the buffers they read) reuse a cached
    schedule: this is what makes repeating the same computation on new data cheap."""
    key, order = _structure_key(roots)
    # (a cached key is never a multi-device graph: those are split before they are cached, and the key
    # holds every op and device, so the hit can skip the has_multi walk; this path is eager dispatch)
    if (template := SCHEDULE_CACHE.get(key)) is not None:
        schedule_cache_stats.hits += 1
        if not PROFILE.value: return _from_template(template, order)   # (.value: testing the ContextVar is a Python call)
        from fusegrad.viz.profile import span
        with span("schedule (cached)", "schedule", roots=len(roots)): return _from_template(template, order)
    # multi-device tensors first become one single-device graph per shard (schedule/multi.py)
    from fusegrad.schedule.multi import has_multi, schedule_multi
    if has_multi(roots): return schedule_multi(roots, create_schedule)
    schedule_cache_stats.misses += 1
    from fusegrad.viz.profile import span
    with span("schedule", "schedule", roots=len(roots)): items, becomes, realized = _create_schedule(roots)
    if (template := _to_template(items, realized, order, becomes)) is not None:
        if len(SCHEDULE_CACHE) >= SCHEDULE_CACHE_SIZE: SCHEDULE_CACHE.pop(next(iter(SCHEDULE_CACHE)))
        SCHEDULE_CACHE[key] = template
    return items, becomes

def _create_schedule(roots: list[UOp]) -> tuple[list[ScheduleItem], dict[UOp, UOp], dict[UOp, UOp]]:
    sink = UOp(Ops.SINK, dtypes.void, tuple(roots))
    simplify_memo = graph_rewrite_memo(sink, tensor_simplify)
    simplified = list(simplify_memo[sink].src)
    # a root that is (a view of) an assign's result which a later assign in this schedule writes
    # over must keep that value: it gets a copy (``b = a`` between two assigns to ``a``)
    # (a root that is only movement ops of the assign, `v = a[1:5]`, is a view: it aliases the buffer
    # and reads what the last write left, as in tinygrad). Likewise arithmetic that folds away
    # (`a * 1`, `a + 0`) is a value, not a view: it gets its own buffer, so a later write to `a`
    # doesn't change it (tinygrad copies too)
    overwritten = {assign_target(n).base for n in simplify_memo[sink].toposort if n.op is Ops.ASSIGN}
    simplified = [UOp(Ops.CONTIGUOUS, r.dtype, (r,)) if (r.base in overwritten and r.base.op is Ops.ASSIGN and not _is_alias(o))
                  or (_is_view_of_buffer(r) and _folded_arithmetic(o)) else r for o, r in zip(roots, simplified)]
    becomes: dict[UOp, UOp] = {r: s for r, s in zip(roots, simplified) if r is not s}
    depth_cuts: set[UOp] = set()
    points = find_realize_points(simplified, depth_cuts)
    realized: dict[UOp, UOp] = {}
    items: list[ScheduleItem] = []
    # write-after-read order: a kernel that reads a buffer as assign A left it runs before the
    # assign that overwrites A's result (whose target is A)
    readers_of: dict[UOp, set[int]] = {}       # ASSIGN node -> items reading its result
    overwriter: dict[UOp, list[int]] = {}      # ASSIGN node -> items of the assigns that write over it
    assign_item: dict[UOp, int] = {}           # ASSIGN node -> the item that performs it
    def add_kernel(outputs: list, assigned: tuple = ()) -> None:
        assigns_read: set[UOp] = set()
        ast, buffers, raw_reads = build_kernel(outputs, realized, assigns_read)
        ast, var_vals = _unbind(ast)
        for a in assigns_read: readers_of.setdefault(a, set()).add(len(items))
        items.append(ScheduleItem(ast, tuple(buffers), var_vals, frozenset(raw_reads), assigned))
    for unit in group_kernels(points, depth_cuts):
        if len(unit) > 1:
            outs = [new_buffer_uop(node.device, prod(node.shape), node.dtype) for node in unit]
            add_kernel([(node, out, out) for node, out in zip(unit, outs)])
            realized.update(zip(unit, outs))
            continue
        node = unit[0]
        if node.op is Ops.COPY:
            src = node.src[0]
            src_buffer = realized.get(src, src.base)
            out = new_buffer_uop(node.device, prod(node.shape), node.dtype)
            # the item keeps no tensor graph (a cached schedule must not keep buffers alive)
            items.append(ScheduleItem(UOp(Ops.COPY, node.dtype, (), node.arg), (out, src_buffer)))
            realized[node] = out
            continue
        if node.op is Ops.ASSIGN:
            target, value = assign_target(node), node.src[1]
            target_buffer = realized.get(target.base, target.base)
            ast, buffers, _ = build_kernel([(value, target, target_buffer)], realized)
            if reads_other_elements(ast, buffers.index(target_buffer)):
                # the value reads the target at other positions: compute it into a new buffer first
                temp = new_buffer_uop(node.device, prod(value.shape), value.dtype)
                add_kernel([(value, temp, temp)])
                value = temp.reshape(value.shape)
            if target.base.op is Ops.ASSIGN: overwriter.setdefault(target.base, []).append(len(items))
            assign_item[node] = len(items)
            add_kernel([(value, target, target_buffer)], (target_buffer,))
            realized[node] = target_buffer
            continue
        value = node.src[0] if node.op is Ops.CONTIGUOUS else node
        out = new_buffer_uop(node.device, prod(node.shape), node.dtype)
        add_kernel([(value, out, out)])
        realized[node] = out
    # every realized node becomes a view of its buffer
    node_map = {}
    for node, buffer in realized.items(): node_map[node] = buffer.reshape(node.shape)
    final = [r.substitute(node_map) for r in simplified] if node_map else simplified
    for original, new in zip(roots, final):
        if original is not new: becomes[original] = new
    for node, new in node_map.items(): becomes.setdefault(node, new)
    # live tensors hold nodes from *before* simplification: map those too (an assign held by a
    # tensor must become its buffer, or it would run again)
    for original, rewritten in simplify_memo.items():
        if original is not rewritten and rewritten in node_map: becomes.setdefault(original, node_map[rewritten])
    realized = {**realized, **{o: realized[r] for o, r in simplify_memo.items() if o is not r and r in realized}}
    _check_one_state_per_buffer(items, readers_of, assign_item, realized)
    war = [(reader, writer) for a, writers in overwriter.items() for writer in writers for reader in readers_of.get(a, ()) if reader != writer]
    after = [(assign_item[a], reader) for a, readers in readers_of.items() if a in assign_item for reader in readers]
    items = order_for_memory(items, {realized[r] for r in simplified if r in realized}, after, war)
    if DEBUG >= 1 and len(items) >= 10: print(f"scheduled {len(items)} kernels")
    return items, becomes, realized

def _check_one_state_per_buffer(items: list[ScheduleItem], readers_of: dict[UOp, set[int]], assign_item: dict[UOp, int],
                                realized: dict[UOp, UOp]) -> None:
    """One kernel can't read a buffer both as it was before an assign of this schedule and after it
    (``a + old`` after ``old = a.detach(); a.assign(a + 1)``): no order of the kernels gives both.
    That is a cycle (tinygrad raises too); the error names the kernel and the assign."""
    states: dict[int, dict[UOp, set[UOp]]] = {}
    for i, item in enumerate(items):
        for b in item.raw_reads: states.setdefault(i, {}).setdefault(b, set()).add(b)
    for a, readers in readers_of.items():
        for i in readers:
            if i != assign_item.get(a): states.setdefault(i, {}).setdefault(realized[a], set()).add(a)
    for i, by_buffer in states.items():
        for b, seen in by_buffer.items():
            if len(seen) < 2: continue
            later = max((a for a in seen if a in assign_item), key=assign_item.__getitem__)
            raise RuntimeError(f"these assigns and reads form a cycle: {_describe(items[i])} reads buffer {b.arg[0]} both before and "
                               f"after the {_describe(items[assign_item[later]])}; realize one of the reads before assigning")

def order_for_memory(items: list[ScheduleItem], kept: set[UOp] = frozenset(), before: list[tuple[int, int]] = (),
                     war: list[tuple[int, int]] = ()) -> list[ScheduleItem]:
    """Reorder kernels (keeping every dependency) so intermediates die early: among the kernels
    whose inputs are ready, run the one that frees the most bytes net of the new intermediates
    it allocates (``kept`` buffers outlive the schedule anyway), then the oldest.

    Dependencies: a kernel reading a buffer waits for its writer (for an assigned buffer, the
    assign whose result it reads, given in ``before``: (i, j) pairs, item i runs before item j).
    Write-after-read (tinygrad's rule): a kernel reading a buffer's contents from *before* this
    schedule runs before the kernels that assign to it (so `b + a.sum()` built before
    `a.assign(...)` sees the old `a`), and a kernel reading an assign's result runs before the
    assigns that overwrite it (``war`` pairs, reader first), unless the reader itself depends on
    that write: then it reads the buffer as the write left it. If the dependencies can't all
    hold, the reads and assigns form a cycle and that is an error that names the kernels in it."""
    assigners: dict[UOp, list[int]] = {}
    for i, item in enumerate(items):
        for b in item.assigns: assigners.setdefault(b, []).append(i)
    writer: dict[UOp, int] = {}
    readers: dict[UOp, set[int]] = {}
    deps: list[set[int]] = [set() for _ in items]
    war = list(war)
    for i, item in enumerate(items):
        n_out = len(item.ast.src) if item.ast.op is Ops.SINK else 1
        outs, ins = item.buffer_uops[:n_out], item.buffer_uops[n_out:]
        for b in ins:
            if b in item.raw_reads and b in assigners: war.extend((i, j) for j in assigners[b] if j != i)
            elif b in writer and b not in assigners: deps[i].add(writer[b])   # assigned buffers: ``before`` orders their reads
        for b in outs:
            if b in writer: deps[i].add(writer[b])
        for b in ins: readers.setdefault(b, set()).add(i)
        for b in outs: writer[b] = i
    for i, j in before: deps[j].add(i)
    for i in range(len(items)): deps[i].discard(i)
    # what each item depends on through data (as bit sets): a write it depends on is no WAR hazard
    ancestors = _ancestors(deps)
    for reader, write in war:
        if reader != write and not (ancestors[reader] >> write) & 1: deps[write].add(reader)
    remaining_reads = {b: len(r) for b, r in readers.items()}
    users: dict[int, list[int]] = {}
    for i, d in enumerate(deps):
        for j in d: users.setdefault(j, []).append(i)
    waiting = [len(d) for d in deps]
    ready = [i for i, w in enumerate(waiting) if w == 0]
    order: list[int] = []
    def freed_bytes(i: int) -> int:
        item = items[i]
        n_out = len(item.ast.src) if item.ast.op is Ops.SINK else 1
        freed = sum(b.arg[2] * b.dtype.itemsize for b in set(item.buffer_uops[n_out:]) if remaining_reads.get(b) == 1)
        allocated = sum(b.arg[2] * b.dtype.itemsize for b in item.buffer_uops[:n_out] if b not in kept and b not in item.assigns)
        return freed - allocated
    while ready:
        best = max(ready, key=lambda i: (freed_bytes(i), -i))
        ready.remove(best)
        order.append(best)
        item = items[best]
        n_out = len(item.ast.src) if item.ast.op is Ops.SINK else 1
        for b in set(item.buffer_uops[n_out:]): remaining_reads[b] -= 1
        for u in users.get(best, []):
            waiting[u] -= 1
            if waiting[u] == 0: ready.append(u)
    if len(order) != len(items):
        cycle = _find_cycle(deps, set(range(len(items))) - set(order))
        names = " -> ".join(_describe(items[i]) for i in cycle + cycle[:1])
        raise RuntimeError(f"these assigns and reads form a cycle: {names}. Each kernel must run before the next one "
                           "(it reads a buffer's contents that the next one overwrites, or needs its result); realize "
                           "some of the reads before assigning")
    return [items[i] for i in order]

def _ancestors(deps: list[set[int]]) -> list[int]:
    """For each item, the bit set of the items it depends on, directly or not. Data dependencies
    point to earlier items (kernels are built sources first), so one pass in order suffices."""
    result: list[int] = []
    for i, d in enumerate(deps):
        bits = 0
        for j in d:
            if j < i: bits |= result[j] | (1 << j)
        result.append(bits)
    return result

def _find_cycle(deps: list[set[int]], stuck: set[int]) -> list[int]:
    """A cycle among the items that could never run: follow dependencies until one repeats."""
    path, seen, node = [], {}, min(stuck)
    while node not in seen:
        seen[node] = len(path)
        path.append(node)
        node = min(d for d in deps[node] if d in stuck)
    # deps point from an item to what must run first: reverse to read in run order
    return list(reversed(path[seen[node]:]))

def _describe(item: ScheduleItem) -> str:
    """A short name for a kernel in an error message: what it writes."""
    n_out = len(item.ast.src) if item.ast.op is Ops.SINK else 1
    outs = ", ".join(f"buffer {b.arg[0]} ({b.dtype.name}[{b.arg[2]}])" for b in item.buffer_uops[:n_out])
    return f"{'assign to' if item.assigns else 'kernel writing'} {outs}"
