"""Lowering passes between the kernel AST and the linear program.

Each pass is a rule set or a small function over UOps:

- ``lower_reduces``: a REDUCE becomes an accumulator register: an init store before its loops,
  an update store inside them, and a load after them (through an END that closes the loops).
- ``lower_group_reduces``: a grouped reduce (GROUP/GROUPTOP) becomes per-thread partials in local
  memory, a BARRIER, and a second reduce over them.
- ``to_launch_dims``: on GPU-style renderers the GLOBAL ranges become SPECIAL group indices, the
  LOCAL and GROUP_REDUCE ranges local indices.
- ``narrow_index_dtype``: index math runs in int32 when every bound fits, else int64.
- ``emulate_bfloat16``: bfloat16 values compute in float32; loads and stores convert the bits.
- ``emulate_fp8``: fp8 values compute in float32, rounded to fp8 after each op; memory holds the codes.
- ``load_contiguous_lanes``: a vector of loads from consecutive addresses is one vector load.
- ``guard_shifts``: a shift whose amount may be negative or past the width gets numpy's result (alu.py) on every backend.
"""
from __future__ import annotations
import functools, math
from fusegrad.dtype import dtypes, DType, PtrDType
from fusegrad.helpers import prod
from fusegrad.uop.ops import UOp, Ops, GroupOp, AxisType, UPat, PatternMatcher, graph_rewrite
from fusegrad.uop.symbolic import symbolic_simple
from fusegrad.codegen.kernel import range_size, free_ranges, grouped_partial_slots, kernel_info, local_axes, loop_nesting

# ---------------------------------------------------------------- reduces become accumulators

def identity_value(op: Ops, dtype: DType):
    if op is Ops.ADD: return 0
    if op is Ops.MUL: return 1
    return dtypes.min(dtype)

def slot_index(ranges: list[UOp]) -> UOp:
    """The flat slot of a register or local array indexed by constant-size ranges (last fastest)."""
    index, stride = UOp.const(dtypes.index, 0), 1
    for r in reversed(ranges):
        index = index + r * stride
        stride *= range_size(r)
    return index

# Floating-point contraction happens here and nowhere else. Compilers are told not to fuse a multiply and an add on
# their own (gcc -ffp-contract=off, no LLVM `contract` flag, OpenCL FP_CONTRACT OFF, NVRTC --fmad=false): whether
# they would depends on the CPU (a half FMA exists only with AVX512-FP16), on how an expression was split into
# statements and on vector versus scalar code, so the same value computed in two kernels could differ in its last
# bits. The one place fusion is wanted is a sum of products (matmul, conv): its running sum is updated with a fused
# multiply-add, written into the IR as MULACC, which every renderer emits as a real fma. So the accumulation rounds
# once per term on every device, and every other op rounds as written, as numpy and PyTorch's elementwise ops do.
_FUSED_ACCUMULATOR_DTYPES = (dtypes.float32, dtypes.float64)

def fuses_into_accumulator(reduce_op: Ops, value: UOp) -> bool:
    """True when a reduce's update ``running + value`` becomes ``MULACC(a, b, running)``: a float32/float64 sum
    whose value is a product ``a * b``. (Half and bfloat16 sums keep their own rounding rules; integer sums are
    exact either way.)"""
    return reduce_op is Ops.ADD and value.op is Ops.MUL and value.dtype.scalar() in _FUSED_ACCUMULATOR_DTYPES

def lower_reduces(sink: UOp) -> UOp:
    """Replace every REDUCE(value, *ranges) by an accumulator in a DEFINE_REG.

    The init is placed in the loops *enclosing* the reduce (``loop_nesting``), the update
    inside the reduce ranges, and the final read after an END that closes them. When the value
    also depends on UPCAST ranges (register tiles, partial-sum lanes), the accumulator is an
    array with one slot per upcast element: init and update loop over their own copies of those
    ranges (the update's copies nest *inside* the reduce loops, so the tile stays in registers),
    and the final read uses the original ranges."""
    reduces = [x for x in sink.toposort if x.op is Ops.REDUCE]
    if not reduces: return sink
    next_id = 1 + max(x.arg[0] for x in sink.toposort if x.op is Ops.RANGE)
    nesting = loop_nesting(sink)
    mapping: dict[UOp, UOp] = {}
    # (register numbers after those of the panels OptOps.PACK made)
    first_register = 1 + max((x.arg for x in sink.toposort if x.op is Ops.DEFINE_REG), default=-1)
    for reg_number, red in enumerate(reduces, start=first_register):
        value, *own = red.src
        value = value.substitute(mapping) if mapping else value
        own = list(own)
        outer = tuple(sorted(nesting[own[0]] - set(own), key=lambda r: r.arg[0]))
        upcasts = sorted([r for r in free_ranges(value) if r.arg[1] is AxisType.UPCAST and r not in own], key=lambda r: r.arg[0])
        def copies() -> list[UOp]:
            # (fresh lanes: where they run follows from the END that closes them)
            nonlocal next_id
            made: list[UOp] = []
            for r in upcasts:
                made.append(UOp(Ops.RANGE, r.dtype, (r.src[0],), (next_id, AxisType.UPCAST)))
                next_id += 1
            return made
        size = prod(range_size(r) for r in upcasts)
        acc = UOp(Ops.DEFINE_REG, red.dtype.ptr(size), (), reg_number)
        init_ranges = copies()
        identity = UOp.const(red.dtype.scalar(), identity_value(red.arg, red.dtype.scalar()))
        if red.dtype.count > 1: identity = UOp(Ops.VECTORIZE, red.dtype, (identity,) * red.dtype.count)   # (a tensor core's sums)
        init = UOp(Ops.STORE, dtypes.void, (acc.index(slot_index(init_ranges)), identity) + outer)
        update_ranges = copies()
        update_value = value.substitute(dict(zip(upcasts, update_ranges))) if upcasts else value
        update_slot = acc.index(slot_index(update_ranges))
        # the update waits for the whole init, so it depends on an END closing the init's loops
        init_done = UOp(Ops.END, dtypes.void, (init,) + tuple(init_ranges)) if init_ranges else init
        running = UOp(Ops.LOAD, red.dtype, (update_slot, init_done) + tuple(own))
        if update_value.op is Ops.WMMA and red.arg is Ops.ADD:   # the instruction adds to the running sums itself
            updated = update_value.replace(src=update_value.src[:-1] + (running,))
        elif fuses_into_accumulator(red.arg, update_value): updated = UOp(Ops.MULACC, red.dtype, update_value.src + (running,))
        else: updated = UOp(red.arg, red.dtype, (running, update_value))
        update = UOp(Ops.STORE, dtypes.void, (update_slot, updated) + tuple(own))
        end = UOp(Ops.END, dtypes.void, (update,) + tuple(own) + tuple(update_ranges))
        mapping[red] = UOp(Ops.LOAD, red.dtype, (acc.index(slot_index(upcasts)), end))
    return sink.substitute(mapping)

# ---------------------------------------------------------------- grouped reduces

def lower_group_reduces(sink: UOp) -> UOp:
    """Lower every REDUCE over GROUP_REDUCE ranges (from GROUP/GROUPTOP) to a two-stage reduce.

    Each thread of the workgroup reduces its part (the REDUCE over the remaining ranges) and
    stores the partial result to a DEFINE_LOCAL at its slot (LOCAL ranges, the group ranges and
    the UPCAST ranges the partial depends on; see ``grouped_partial_slots``). A BARRIER follows;
    then every thread reduces the partials again over new REDUCE ranges as big as the group ranges
    (every thread gets the same result, so code after the reduce stays uniform), and only
    the threads with all group indices 0 store to global memory.

    The partial's upcast elements are written in a loop over fresh copies of the UPCAST ranges
    that the END closes before the BARRIER, so the barrier is outside every loop; the final
    reduce then reads them back with the original UPCAST ranges."""
    grouped = [x for x in sink.toposort if x.op is Ops.REDUCE and any(r.arg[1] is AxisType.GROUP_REDUCE for r in x.src[1:])]
    if not grouped: return sink
    all_groups = sorted({r for red in grouped for r in red.src[1:] if r.arg[1] is AxisType.GROUP_REDUCE}, key=lambda r: r.arg[0])
    next_id = 1 + max(x.arg[0] for x in sink.toposort if x.op is Ops.RANGE)
    def new_range(size: UOp, kind: AxisType) -> UOp:
        nonlocal next_id
        next_id += 1
        return UOp(Ops.RANGE, dtypes.index, (size,), (next_id - 1, kind))
    mapping: dict[UOp, UOp] = {}
    for number, red in enumerate(grouped):   # toposort order: a reduce inside another's value first
        red = red.substitute(mapping) if mapping else red
        value, ranges = red.src[0], red.src[1:]
        groups = [r for r in ranges if r.arg[1] is AxisType.GROUP_REDUCE]
        rest = tuple(r for r in ranges if r.arg[1] is not AxisType.GROUP_REDUCE)
        partial = UOp(Ops.REDUCE, red.dtype, (value,) + rest, red.arg) if rest else value
        slots = grouped_partial_slots(sink, red)
        upcasts = [r for r in slots if r.arg[1] is AxisType.UPCAST]
        buffer = UOp(Ops.DEFINE_LOCAL, red.dtype.ptr(prod(range_size(r) for r in slots), local=True), (), f"temp{number}")
        copies: list[UOp] = []
        for u in upcasts: copies.append(new_range(u.src[0], AxisType.UPCAST))
        stored = partial.substitute(dict(zip(upcasts, copies))) if copies else partial
        store = buffer.index(slot_index([dict(zip(upcasts, copies)).get(r, r) for r in slots])).store(stored)
        # the buffer is a source so that each barrier stays its own uop once linearize drops the END
        barrier = UOp(Ops.BARRIER, dtypes.void, (buffer, UOp(Ops.END, dtypes.void, (store,) + tuple(copies)) if copies else store))
        finals: list[UOp] = []
        for g in groups: finals.append(new_range(g.src[0], AxisType.REDUCE))
        read = buffer.index(slot_index([dict(zip(groups, finals)).get(r, r) for r in slots])).load(barrier)
        mapping[grouped[number]] = UOp(Ops.REDUCE, red.dtype, (read,) + tuple(finals), red.arg)
    sink = sink.substitute(mapping)
    # every thread of a group computed the same outputs: the first one stores them
    first = functools.reduce(lambda a, b: a.alu(Ops.AND, b), [g.eq(0) for g in all_groups])
    def gate(st: UOp) -> UOp:
        index = st.src[0]
        if st.op is not Ops.STORE or index.op is not Ops.INDEX: return st
        new_gate = first if len(index.src) < 3 else first.alu(Ops.AND, index.src[2])
        return st.replace(src=(index.replace(src=(index.src[0], index.src[1], new_gate)),) + st.src[1:])
    return sink.replace(src=tuple(gate(st) for st in sink.src))

# ---------------------------------------------------------------- gated addresses

def _gate_intervals(gate: UOp) -> dict[frozenset, tuple[dict, float, float]]:
    """The linear bounds a gate puts on index sums: for every ``c < e`` / ``e < c`` clause of an AND
    tree, e's terms (as {node: coefficient}) with the interval it must lie in (clauses on one sum merge)."""
    from fusegrad.uop.symbolic import linear_terms
    bounds: dict[frozenset, tuple[dict, float, float]] = {}
    stack = [gate]
    while stack:
        clause = stack.pop()
        if clause.op is Ops.AND: stack.extend(clause.src)
        if clause.op is not Ops.CMPLT: continue
        a, b = clause.src
        if b.op is Ops.CONST: expr, low, high = a, -math.inf, b.arg - 1    # e < c
        elif a.op is Ops.CONST: expr, low, high = b, a.arg + 1, math.inf   # c < e
        else: continue
        if (flat := linear_terms(expr)) is None or not flat[0]: continue
        terms, const = flat
        key = frozenset(terms.items())
        _, old_low, old_high = bounds.get(key, (terms, -math.inf, math.inf))
        bounds[key] = (terms, max(old_low, low - const), min(old_high, high - const))
    return bounds

def _bounds_under_gate(offset: UOp, gate: UOp) -> tuple[float, float] | None:
    """Bounds of ``offset`` where ``gate`` holds: every gate-bounded sum found in it (with one common
    multiplier) takes the gate's interval, the other terms their own ranges."""
    from fusegrad.uop.symbolic import linear_terms
    if (flat := linear_terms(offset)) is None: return None
    terms, low = dict(flat[0]), flat[1]
    high = low
    for sub, sub_low, sub_high in _gate_intervals(gate).values():
        ratios = {terms.get(node, 0) / k for node, k in sub.items()}
        if len(ratios) != 1 or (m := ratios.pop()) == 0 or m != int(m): continue
        # a one-sided clause (a padding only at the end: ``row < 8191``) keeps the sum's own bound on the other side
        sub_low = max(sub_low, sum(min(k * node.vmin, k * node.vmax) for node, k in sub.items()))
        sub_high = min(sub_high, sum(max(k * node.vmin, k * node.vmax) for node, k in sub.items()))
        if math.isinf(sub_low) or math.isinf(sub_high): continue
        for node, k in sub.items(): terms[node] -= int(m) * k
        low, high = low + min(m * sub_low, m * sub_high), high + max(m * sub_low, m * sub_high)
    for node, k in terms.items():
        if k: low, high = low + min(k * node.vmin, k * node.vmax), high + max(k * node.vmin, k * node.vmax)
    return low, high

def _unwrap(index: UOp, buf: UOp, offset: UOp, gate: UOp) -> UOp | None:
    if offset.op is not Ops.MOD or offset.src[1].op is not Ops.CONST: return None
    bounds = _bounds_under_gate(offset.src[0], gate)
    if bounds is None or not (0 <= bounds[0] and bounds[1] < offset.src[1].arg): return None
    return index.replace(src=(buf, offset.src[0], gate))

def unwrap_gated_indexes(sink: UOp) -> UOp:
    """``INDEX(buf, x % N, gate)`` becomes ``INDEX(buf, x, gate)`` where the gate keeps x in [0, N).

    Flattening a padded view's index leaves such a wrap: where the gate is off (the padding) x goes
    negative, so symbolic (which doesn't know the gate) can't drop it. Bounding x with the gate's
    clauses (``0 < y+ky < 33`` bounds the ``32*(y+ky)`` part of x) proves it in range; the address is
    then affine again and the vectorizer reads it with a masked vector load (a padded conv's weight
    gradient: 4x faster)."""
    rule = UPat(Ops.INDEX, name="index", src=(UPat.var("buf"), UPat.var("offset"), UPat.var("gate")))
    return graph_rewrite(sink, PatternMatcher([(rule, _unwrap)]))

def _collapse_onehot(red: UOp) -> UOp | None:
    """``sum_r where(r == i, x(r), 0)`` (a one-hot lookup: nn.Embedding, tensor indexing) -> ``where(0 <= i < N,
    x(i), 0)`` when ``i`` doesn't depend on ``r``: at most one ``r`` matches, so the reduce is one read.
    The index is clamped so the read stays in bounds where no ``r`` matches (GPT-2's token embedding,
    128 x 768 x 50257 compares: 0.6 s -> a copy)."""
    if red.arg is not Ops.ADD or len(red.src) != 2 or red.src[1].op is not Ops.RANGE or red.src[0].op is not Ops.WHERE: return None
    (cond, a, b), rng = red.src[0].src, red.src[1]
    if cond.op not in (Ops.CMPNE, Ops.CMPEQ): return None
    zero, picked = (a, b) if cond.op is Ops.CMPNE else (b, a)
    if zero.op is not Ops.CONST or zero.arg != 0 or picked.dtype != red.dtype or not isinstance(size := range_size(rng), int): return None
    def offset(x: UOp) -> UOp | None:
        """``A`` where x is ``r + A`` (A free of r; a reduce split in two compares ``r_outer * n + r``), maybe
        cast to an integer type that holds every value (never a wrapping one); 0 for plain r."""
        if x.op is Ops.CAST and x.dtype in (dtypes.int32, dtypes.int64) and isinstance(x.src[0].vmax, int) and x.src[0].vmax < 2 ** 31: x = x.src[0]
        if x is rng: return UOp.const(dtypes.index, 0)
        if x.op is Ops.ADD and rng in x.src:
            other = x.src[1] if x.src[0] is rng else x.src[0]
            if rng not in other.toposort and other.dtype == dtypes.index: return other
        return None
    lhs, rhs = cond.src
    if (base := offset(lhs)) is not None: index = rhs
    elif (base := offset(rhs)) is not None: index = lhs
    else: return None
    if rng in index.toposort or not (dtypes.is_int(index.dtype) or index.dtype == dtypes.index): return None
    # ranges nested in rng name it as a parent: substituting it there would rename them, so leave those alone
    if any(x.op is Ops.RANGE and x is not rng and rng in x.src for x in picked.toposort): return None
    at = index.cast(dtypes.index) - base
    valid = (at < size) & (at >= 0)
    return valid.where(picked.substitute({rng: at.maximum(0).minimum(size - 1)}), zero.const_like(0))

def collapse_onehot_reduces(sink: UOp) -> UOp:
    """Replace one-hot lookup reduces by a single read (``_collapse_onehot``)."""
    return graph_rewrite(sink, PatternMatcher([(UPat(Ops.REDUCE, name="red"), _collapse_onehot)]))

# ---------------------------------------------------------------- launch dimensions

def launch_groups(ranges: list[UOp], max_dims: int = 3) -> list[list[UOp]]:
    """Assign ranges (outermost first) to launch dimensions, x first: the innermost range is
    dim 0; with more than ``max_dims`` ranges the outermost ones share the last dim."""
    if not ranges: return []
    groups: list[list[UOp]] = [[r] for r in ranges[-max_dims:]]
    if len(ranges) > max_dims: groups[0] = ranges[:len(ranges) - max_dims + 1]
    return list(reversed(groups))

def _specials(groups: list[list[UOp]], prefix: str) -> tuple[dict[UOp, UOp], list]:
    """SPECIAL launch indices ``prefix0..2`` for the launch groups; a folded group is split back
    with div/mod. Returns (range -> index expression, sizes padded to 3 dims)."""
    mapping: dict[UOp, UOp] = {}
    sizes: list = []
    for dim, group in enumerate(groups):
        size = prod([range_size(r) for r in group])
        special = UOp(Ops.SPECIAL, dtypes.index, (size if isinstance(size, UOp) else UOp.const(dtypes.index, size),), f"{prefix}{dim}")
        sizes.append(size if not isinstance(size, UOp) or size.op is not Ops.CONST else size.arg)
        stride = 1
        for r in reversed(group):
            bound = r.src[0]
            mapping[r] = (special // stride) % bound if len(group) > 1 else special
            stride = stride * (bound.arg if bound.op is Ops.CONST else bound)
    return mapping, sizes + [1] * (3 - len(sizes))

def to_launch_dims(sink: UOp, max_dims: int = 3) -> tuple[UOp, list, list | None]:
    """Replace GLOBAL ranges by group indices ``gidx`` and LOCAL / GROUP_REDUCE ranges by local
    indices ``lidx`` (innermost range is dim 0, x, like tinygrad's C-style backends; more than
    ``max_dims`` ranges fold into the outermost dim). Returns the new sink, the global size (in
    workgroups) and the local size, x, y, z order. A NOLOCALS kernel uses global thread indices
    ``idx`` and has no local size (None: the runtime picks one)."""
    nolocals = kernel_info(sink).dont_use_locals
    globals_ = sorted([x for x in sink.toposort if x.op is Ops.RANGE and x.arg[1] is AxisType.GLOBAL], key=lambda r: r.arg[0])
    global_map, global_size = _specials(launch_groups(globals_, max_dims), "idx" if nolocals else "gidx")
    local_map, local_size = _specials(launch_groups(local_axes(sink), max_dims), "lidx")
    mapping = {**global_map, **local_map}
    return (sink.substitute(mapping) if mapping else sink), global_size, (None if nolocals else local_size)

# ---------------------------------------------------------------- index dtype

def narrow_index_dtype(sink: UOp) -> UOp:
    """Give index math a real integer type: int32 when every value fits, else int64."""
    index_nodes = [x for x in sink.toposort if x.dtype == dtypes.index]
    fits = all(-2**31 <= x.vmin and x.vmax < 2**31 for x in index_nodes)
    target = dtypes.int32 if fits else dtypes.int64
    def retype(x: UOp) -> UOp | None:
        if x.dtype != dtypes.index: return None
        return x.replace(dtype=target)
    return graph_rewrite(sink, PatternMatcher([(UPat(name="x"), retype)]))

# ---------------------------------------------------------------- bfloat16 emulation

def _bf16_bits_to_float(bits: UOp) -> UOp:
    return (bits.cast(dtypes.uint32) << 16).bitcast(dtypes.float32)

def _is_bf16_widened(x: UOp) -> bool:
    """Is ``x`` the float32 of 16 loaded bits (``_bf16_bits_to_float`` of a uint16 LOAD)?"""
    return x.op is Ops.BITCAST and x.src[0].op is Ops.SHL and x.src[0].src[0].op is Ops.CAST and \
        x.src[0].src[0].src[0].op is Ops.LOAD and x.src[0].src[0].src[0].dtype == dtypes.uint16 and \
        x.src[0].src[1].op is Ops.CONST and x.src[0].src[1].arg == 16

def _float_to_bf16_bits(x: UOp) -> UOp:
    """Round a float32 to the nearest-even bfloat16 and return its 16 bits (NaN stays NaN)."""
    bits = x.bitcast(dtypes.uint32)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return (x.ne(x)).where(UOp.const(dtypes.uint32, 0x7FC0), rounded).cast(dtypes.uint16)

def _round_to_bf16(x: UOp) -> UOp:
    return _bf16_bits_to_float(_float_to_bf16_bits(x))

# bfloat16 ops whose float32 result of bfloat16 operands is itself a bfloat16 value: no rounding needed
_EXACT_IN_BF16 = {Ops.MAX, Ops.NEG, Ops.WHERE, Ops.TRUNC}

def emulate_bfloat16(sink: UOp) -> UOp:
    """Rewrite bfloat16 math into float32 math with explicit conversions at memory and casts. Every bfloat16 op's
    result is rounded to bfloat16, as it would be stored (PyTorch's and tinygrad's values: ``x + y`` of two bfloat16s
    read back, or used further in the same kernel, is the bfloat16 sum). One exception: a product cast to float32
    and summed (a matmul's or a conv's terms) stays the exact float32 product, as PyTorch's matmul has it."""
    if not any(x.dtype.scalar() == dtypes.bfloat16 or (x.dtype.base.scalar() == dtypes.bfloat16) for x in sink.toposort):
        return sink
    bf16, f32 = dtypes.bfloat16, dtypes.float32
    # (buffers, staged copies and packed panels hold the 16-bit patterns; accumulators come later, in lower_reduces)
    memory = (Ops.PARAM, Ops.DEFINE_LOCAL, Ops.DEFINE_REG)
    def fix_param(p: UOp) -> UOp | None:
        if p.dtype.base != bf16: return None
        return p.replace(dtype=dtypes.uint16.ptr(p.dtype.size, local=p.dtype.local))
    def fix_load(ld: UOp, idx: UOp) -> UOp | None:
        if ld.dtype != bf16 or idx.op is not Ops.INDEX or idx.src[0].op not in memory: return None
        bits_index = idx.replace(dtype=dtypes.uint16.ptr(idx.dtype.size, local=idx.dtype.local))
        return _bf16_bits_to_float(UOp(Ops.LOAD, dtypes.uint16, (bits_index,) + ld.src[1:]))
    def fix_store(st: UOp, idx: UOp, val: UOp) -> UOp | None:
        if idx.op is not Ops.INDEX or idx.src[0].op not in memory or idx.dtype.base != bf16: return None
        # the new store indexes the buffer as uint16 bits, so this rule doesn't match it again
        bits_index = idx.replace(dtype=dtypes.uint16.ptr(idx.dtype.size, local=idx.dtype.local))
        # a copy (a packed panel's fill, a contiguous copy) stores the loaded bits as they were
        bits = val.src[0].src[0].src[0] if _is_bf16_widened(val) else _float_to_bf16_bits(val)
        return UOp(Ops.STORE, dtypes.void, (bits_index, bits) + st.src[2:])
    products: dict[UOp, UOp] = {}   # a rounded bfloat16 product -> the exact float32 product
    def fix_cast(c: UOp, x: UOp) -> UOp | None:
        # sources are already rewritten, so a former bfloat16 source is float32 by now
        return _round_to_bf16(x.cast(f32)) if c.dtype == bf16 else None
    def fix_reduce(r: UOp) -> UOp | None:
        # a sum of bfloat16 products cast to float32 (a matmul, a conv): the terms are the exact products
        term = r.src[0]
        if term.op is Ops.CAST and term.dtype == f32 and term.src[0] in products: return r.replace(src=(products[term.src[0]],) + r.src[1:])
        return None
    def fix_value(x: UOp) -> UOp | None:
        if x.dtype != bf16 or x.op in (Ops.LOAD, Ops.CAST, Ops.BITCAST): return None
        if x.op is Ops.CONST: return UOp.const(f32, x.arg)
        if x.op not in GroupOp.ALU or x.op in _EXACT_IN_BF16: return x.replace(dtype=f32)
        rounded = _round_to_bf16(x.replace(dtype=f32))
        if x.op is Ops.MUL: products[rounded] = x.replace(dtype=f32)
        return rounded
    def fix_fragment(v: UOp) -> UOp | None:
        # a tensor core fragment (OptOps.TC) holds the 16-bit patterns: a lane loaded from memory keeps
        # its bits as loaded, a computed lane (float32 by now) is rounded to bfloat16
        if v.dtype.scalar() != bf16: return None
        lanes = tuple(x.src[0].src[0].src[0] if _is_bf16_widened(x) else _float_to_bf16_bits(x) for x in v.src)
        return UOp(Ops.VECTORIZE, dtypes.uint16.vec(v.dtype.count), lanes)
    def fix_bitcast(b: UOp, x: UOp) -> UOp | None:
        if b.dtype == bf16: return _bf16_bits_to_float(x.bitcast(dtypes.uint16))
        if x.dtype == f32 and b.dtype.itemsize == 2: return _float_to_bf16_bits(x).bitcast(b.dtype)
        return None
    rules = PatternMatcher([
        (UPat(memory, name="p"), fix_param),
        (UPat(Ops.LOAD, name="ld", src=(UPat.var("idx"),), allow_any_len=True), fix_load),
        (UPat(Ops.STORE, name="st", src=(UPat.var("idx"), UPat.var("val")), allow_any_len=True), fix_store),
        (UPat(Ops.CAST, name="c", src=(UPat.var("x"),)), fix_cast),
        (UPat(Ops.BITCAST, name="b", src=(UPat.var("x"),)), fix_bitcast),
        (UPat(Ops.VECTORIZE, name="v"), fix_fragment),
        (UPat(Ops.REDUCE, name="r"), fix_reduce),
        (UPat(name="x"), fix_value),
    ])
    return graph_rewrite(sink, rules)

# ---------------------------------------------------------------- fp8 emulation

def _u32(value: int) -> UOp: return UOp.const(dtypes.uint32, value)

def _float_to_fp8_bits(x: UOp, dtype: DType) -> UOp:
    """The fp8 code (uint8) nearest to the float32 ``x``, in integer uops: dtype.py's ``float_to_fp8_bits``
    (tinygrad's rounding: ties to even, finite values saturate to the largest finite code, inf is NaN where
    the type has no infinity, fnuz has no -0)."""
    from fusegrad.dtype import FP8_FORMATS
    fmt = FP8_FORMATS[dtype]
    bits = x.bitcast(dtypes.uint32)
    sign, absolute = (bits >> 24) & 0x80, bits & 0x7FFFFFFF
    rebias, drop = (127 - fmt.bias) << 23, 23 - fmt.mantissa
    # normal fp8: drop the low mantissa bits with round-to-nearest-even (a carry moves into the exponent field)
    t = absolute - rebias
    normal = (t + ((1 << (drop - 1)) - 1) + ((t >> drop) & 1)) >> drop
    # subnormal fp8: the 24-bit significand shifted right by 151 - bias - mantissa bits - the float32 exponent
    # field, rounded to even. Clamping the field keeps the shift in [1, 25]: defined in C, 25 gives 0 for
    # anything smaller, and normal numbers (which don't use this branch) can't make it negative.
    significand = (absolute & 0x7FFFFF) | 0x800000
    lowest, highest = 126 - fmt.bias - fmt.mantissa, 150 - fmt.bias - fmt.mantissa
    exponent_field = (absolute >> 23).maximum(_u32(lowest))
    exponent_field = (_u32(highest) < exponent_field).where(_u32(highest), exponent_field)
    shift = _u32(151 - fmt.bias - fmt.mantissa) - exponent_field
    subnormal = (significand + ((_u32(1) << (shift - 1)) - 1) + ((significand >> shift) & 1)) >> shift
    code = (absolute < _u32((128 - fmt.bias) << 23)).where(subnormal, normal)
    code = (_u32(fmt.max_code) < code).where(_u32(fmt.max_code), code)      # saturate
    is_nan, is_inf = _u32(0x7F800000) < absolute, absolute.eq(_u32(0x7F800000))
    if fmt.fnuz:
        code = code.eq(_u32(0)).where(_u32(0), code | sign)
        code = (is_nan | is_inf).where(_u32(0x80), code)
    else:
        code = code | sign
        code = is_nan.where(_u32(0x7F), code)   # (NaN of either sign: the positive NaN code, as tinygrad writes it)
        code = is_inf.where(sign | 0x7C if fmt.has_inf else _u32(0x7F), code)
    return code.cast(dtypes.uint8)

def _fp8_bits_to_float(code: UOp, dtype: DType) -> UOp:
    """The float32 value of the fp8 ``code`` (a uint8), in integer uops: dtype.py's ``fp8_bits_to_float``."""
    from fusegrad.dtype import FP8_FORMATS
    fmt = FP8_FORMATS[dtype]
    c = code.cast(dtypes.uint32)
    sign, magnitude = (c & 0x80) << 24, c & 0x7F
    exponent = magnitude >> fmt.mantissa
    # normal: the exponent and mantissa fields line up with float32's after a shift, then rebias the exponent
    normal = (magnitude << (23 - fmt.mantissa)) + ((127 - fmt.bias) << 23)
    # subnormal: mantissa * 2**(1 - bias - mantissa bits), exact in float32
    subnormal = ((magnitude.cast(dtypes.float32) * UOp.const(dtypes.float32, 2.0 ** (1 - fmt.bias - fmt.mantissa)))).bitcast(dtypes.uint32)
    value = sign | exponent.eq(_u32(0)).where(subnormal, normal)
    if fmt.fnuz: value = c.eq(_u32(0x80)).where(_u32(0x7FC00000), value)
    elif fmt.has_inf:
        top = exponent.eq(_u32((1 << fmt.exponent) - 1))
        special = (magnitude & ((1 << fmt.mantissa) - 1)).eq(_u32(0)).where(_u32(0x7F800000), _u32(0x7FC00000))
        value = top.where(sign | special, value)
    else: value = magnitude.eq(_u32(0x7F)).where(_u32(0x7FC00000), value)
    return value.bitcast(dtypes.float32)

def _round_to_fp8(x: UOp, dtype: DType) -> UOp:
    return _fp8_bits_to_float(_float_to_fp8_bits(x, dtype), dtype)

def emulate_fp8(sink: UOp) -> UOp:
    """Rewrite fp8 math into float32 math with explicit conversions, so every renderer runs fp8 (none has
    native fp8 arithmetic here). Buffers and local memory hold the 8-bit codes (loads decode, stores encode);
    accumulator registers and values are float32 holding fp8 values. Every ALU result of an fp8 dtype is
    rounded to fp8 again, as tinygrad computes fp8 (one rounding per op, accumulator updates included), so
    this runs after reduces become accumulators. MAX and WHERE of fp8 values need no rounding."""
    from fusegrad.dtype import FP8_FORMATS
    if not any(x.dtype.base.scalar() in FP8_FORMATS for x in sink.toposort): return sink
    f32 = dtypes.float32
    fp8_type: dict[UOp, DType] = {}   # a rewritten (float32) value -> the fp8 type it holds (for a BITCAST of it)
    def is_fp8(dt: DType) -> bool: return dt.scalar() in FP8_FORMATS
    def holding(value: UOp, dtype: DType) -> UOp:
        fp8_type[value] = dtype
        return value
    def fix_pointer(p: UOp) -> UOp | None:
        # buffers and local memory hold codes, registers float32 values
        if not is_fp8(p.dtype.base): return None
        return p.replace(dtype=(f32 if p.op is Ops.DEFINE_REG else dtypes.uint8).ptr(p.dtype.size, local=p.dtype.local))
    def retyped_index(idx: UOp) -> UOp:
        # (INDEX keeps its fp8 pointer type until its load or store is rewritten: that says which fp8 type it is)
        return idx.replace(dtype=idx.src[0].dtype.base.ptr(idx.dtype.size, local=idx.dtype.local))
    def fix_load(ld: UOp, idx: UOp) -> UOp | None:
        if idx.op is not Ops.INDEX or not is_fp8(idx.dtype.base) or ld.dtype.count != 1: return None
        if idx.src[0].op is Ops.DEFINE_REG: return holding(ld.replace(dtype=f32, src=(retyped_index(idx),) + ld.src[1:]), ld.dtype)
        code = ld.replace(dtype=dtypes.uint8, src=(retyped_index(idx),) + ld.src[1:])
        return holding(_fp8_bits_to_float(code, ld.dtype), ld.dtype)
    def fix_store(st: UOp, idx: UOp, val: UOp) -> UOp | None:
        if idx.op is not Ops.INDEX or not is_fp8(idx.dtype.base) or val.dtype != f32: return None
        stored = val if idx.src[0].op is Ops.DEFINE_REG else _float_to_fp8_bits(val, idx.dtype.base)
        return st.replace(src=(retyped_index(idx), stored) + st.src[2:])
    def fix_cast(c: UOp, x: UOp) -> UOp | None:
        return holding(_round_to_fp8(x.cast(f32), c.dtype), c.dtype) if is_fp8(c.dtype) else None
    def fix_bitcast(b: UOp, x: UOp) -> UOp | None:
        if is_fp8(b.dtype): return holding(_fp8_bits_to_float(x.bitcast(dtypes.uint8), b.dtype), b.dtype)
        if x in fp8_type and b.dtype.itemsize == 1: return _float_to_fp8_bits(x, fp8_type[x]).bitcast(b.dtype)   # (fp8 to int8/uint8)
        return None
    def fix_value(x: UOp) -> UOp | None:
        if not is_fp8(x.dtype) or x.dtype.count != 1 or x.op in (Ops.LOAD, Ops.CAST, Ops.BITCAST): return None
        if x.op is Ops.CONST: return holding(UOp.const(f32, x.arg), x.dtype)
        widened = x.replace(dtype=f32)
        if x.op in GroupOp.ALU and x.op not in (Ops.MAX, Ops.WHERE): widened = _round_to_fp8(widened, x.dtype)
        return holding(widened, x.dtype)
    rules = PatternMatcher([
        (UPat((Ops.PARAM, Ops.DEFINE_LOCAL, Ops.DEFINE_REG), name="p"), fix_pointer),
        (UPat(Ops.LOAD, name="ld", src=(UPat.var("idx"),), allow_any_len=True), fix_load),
        (UPat(Ops.STORE, name="st", src=(UPat.var("idx"), UPat.var("val")), allow_any_len=True), fix_store),
        (UPat(Ops.CAST, name="c", src=(UPat.var("x"),)), fix_cast),
        (UPat(Ops.BITCAST, name="b", src=(UPat.var("x"),)), fix_bitcast),
        (UPat(name="x"), fix_value),
    ])
    return graph_rewrite(sink, rules)

# ---------------------------------------------------------------- contiguous lanes

def load_contiguous_lanes(sink: UOp) -> UOp:
    """``VECTORIZE`` of V ungated scalar loads at ``base + 0 .. base + V-1`` of one buffer (a tensor core's
    fragment row) becomes one vector LOAD of V contiguous elements (for renderers with vector types)."""
    from fusegrad.uop.symbolic import symbolic
    def contiguous(v: UOp) -> UOp | None:
        first = v.src[0]
        if v.dtype.count < 2 or first.op is not Ops.LOAD or first.src[0].op is not Ops.INDEX or len(first.src[0].src) != 2: return None
        buf, base = first.src[0].src
        for lane, x in enumerate(v.src):
            if x.op is not Ops.LOAD or x.src[1:] != first.src[1:] or x.src[0].op is not Ops.INDEX or x.src[0].src[0] is not buf \
                    or len(x.src[0].src) != 2: return None
            step = graph_rewrite(x.src[0].src[1] - base, symbolic)
            if step.op is not Ops.CONST or step.arg != lane: return None
        return UOp(Ops.LOAD, v.dtype, first.src)
    return graph_rewrite(sink, PatternMatcher([(UPat(Ops.VECTORIZE, name="v"), contiguous)]))

# ---------------------------------------------------------------- shifts by any amount

_UNSIGNED_OF_SIZE = {d.itemsize: d for d in dtypes.uints}

def _shift_width(shift: UOp) -> int: return 8 * shift.dtype.scalar().itemsize

def _shift_in_range(shift: UOp) -> bool:
    """Is the amount of ``shift`` known (from its bounds) to be in ``[0, width)``, where every backend agrees?"""
    amount = shift.src[1]
    return 0 <= amount.vmin and amount.vmax < _shift_width(shift)

def _guard_shift(shift: UOp) -> UOp | None:
    """``x << n`` / ``x >> n`` with the result alu.py defines for an amount outside ``[0, width)``: 0, or the sign
    fill for a signed ``>>``. The shift itself only ever sees ``n & (width - 1)``, in range, so no backend meets
    the undefined case, not even in the unselected arm of a select (LLVM's ``shl`` by the width is poison there)."""
    if _shift_in_range(shift): return None
    x, amount = shift.src
    width = _shift_width(shift)
    def const(like: UOp, value: int) -> UOp: return UOp.const(like.dtype, value)
    # a negative amount read as unsigned is at least 2**(bits - 1) >= any width: one compare tests both ends
    unsigned = amount if amount.vmin >= 0 else amount.cast(_UNSIGNED_OF_SIZE[amount.dtype.scalar().itemsize].vec(amount.dtype.count))
    in_range = unsigned < const(unsigned, width)
    masked = amount & const(amount, width - 1)   # n where n is in range; bounds [0, width), so this rule leaves the new shift alone
    if shift.op is Ops.SHR and not dtypes.is_unsigned(x.dtype.scalar()):
        return x >> in_range.where(masked, const(amount, width - 1))   # shifting by width - 1 is the sign fill
    return in_range.where(shift.replace(src=(x, masked)), const(x, 0))

# (symbolic_simple folds the guard of a constant amount to its value: x << 40 is 0, int32 x >> 40 is x >> 31)
pm_guard_shifts = PatternMatcher([(UPat((Ops.SHL, Ops.SHR), name="shift"), _guard_shift)]) + symbolic_simple

def guard_shifts(sink: UOp) -> UOp:
    """Give every shift numpy's result for any amount (``_guard_shift``). A shift whose amount's bounds are in
    ``[0, width)`` (a constant, a masked or clamped amount: random numbers' rotations, bfloat16 and fp8 bit
    manipulation, sin's argument reduction) is left as it is. Runs after ``narrow_index_dtype``, when every
    integer has its real width."""
    if all(_shift_in_range(x) for x in sink.toposort if x.op in (Ops.SHL, Ops.SHR)): return sink
    return graph_rewrite(sink, pm_guard_shifts)
