"""Lowering passes between the kernel AST and the linear program.

Each pass is a rule set or a small function over UOps:

- ``lower_reduces``: a REDUCE becomes an accumulator register: an init store before its loops,
  an update store inside them, and a load after them (through an END that closes the loops).
- ``to_launch_dims``: on GPU-style renderers the GLOBAL ranges become SPECIAL launch indices.
- ``narrow_index_dtype``: index math runs in int32 when every bound fits, else int64.
- ``emulate_bfloat16``: bfloat16 values compute in float32; loads and stores convert the bits.
"""
from __future__ import annotations
from fusegrad.dtype import dtypes, DType
from fusegrad.helpers import prod
from fusegrad.uop.ops import UOp, Ops, GroupOp, AxisType, UPat, PatternMatcher, graph_rewrite

# ---------------------------------------------------------------- reduces become accumulators

def identity_value(op: Ops, dtype: DType):
    if op is Ops.ADD: return 0
    if op is Ops.MUL: return 1
    return dtypes.min(dtype)

def ranges_in(u: UOp) -> list[UOp]:
    return [x for x in u.toposort if x.op is Ops.RANGE]

def lower_reduces(sink: UOp) -> UOp:
    """Replace every REDUCE(value, *ranges) by an accumulator in a DEFINE_REG.

    The init is placed in the loops *enclosing* the reduce (its ranges' parents), the update
    inside the reduce ranges, and the final read after an END that closes them. When the value
    also depends on UPCAST ranges (register tiles, partial-sum lanes), the accumulator is an
    array with one slot per upcast element: init and update loop over their own copies of those
    ranges (the update's copies nest *inside* the reduce loops, so the tile stays in registers),
    and the final read uses the original ranges."""
    from fusegrad.codegen.opt import free_ranges
    reduces = [x for x in sink.toposort if x.op is Ops.REDUCE]
    if not reduces: return sink
    next_id = 1 + max(x.arg[0] for x in sink.toposort if x.op is Ops.RANGE)
    mapping: dict[UOp, UOp] = {}
    for reg_number, red in enumerate(reduces):
        value, *own = red.src
        value = value.substitute(mapping) if mapping else value
        own = list(own)
        outer = tuple(p for p in own[0].src[1:] if p not in own)
        upcasts = sorted([r for r in free_ranges(value) if r.arg[1] is AxisType.UPCAST and r not in own], key=lambda r: r.arg[0])
        def copies(parents: tuple) -> list[UOp]:
            nonlocal next_id
            made: list[UOp] = []
            for r in upcasts:
                made.append(UOp(Ops.RANGE, r.dtype, (r.src[0],) + parents + tuple(made), (next_id, AxisType.UPCAST)))
                next_id += 1
            return made
        def slot_index(ranges: list[UOp]) -> UOp:
            index, stride = UOp.const(dtypes.index, 0), 1
            for r in reversed(ranges):
                index = index + r * stride
                stride *= r.src[0].arg
            return index
        size = prod(r.src[0].arg for r in upcasts)
        acc = UOp(Ops.DEFINE_REG, red.dtype.ptr(size), (), reg_number)
        init_ranges = copies(outer)
        init = UOp(Ops.STORE, dtypes.void, (acc.index(slot_index(init_ranges)), UOp.const(red.dtype, identity_value(red.arg, red.dtype))) + outer)
        update_ranges = copies(outer + tuple(own))
        update_value = value.substitute(dict(zip(upcasts, update_ranges))) if upcasts else value
        update_slot = acc.index(slot_index(update_ranges))
        # the update waits for the whole init, so it depends on an END closing the init's loops
        init_done = UOp(Ops.END, dtypes.void, (init,) + tuple(init_ranges)) if init_ranges else init
        running = UOp(Ops.LOAD, red.dtype, (update_slot, init_done) + tuple(own))
        update = UOp(Ops.STORE, dtypes.void, (update_slot, UOp(red.arg, red.dtype, (running, update_value))) + tuple(own))
        end = UOp(Ops.END, dtypes.void, (update,) + tuple(own) + tuple(update_ranges))
        mapping[red] = UOp(Ops.LOAD, red.dtype, (acc.index(slot_index(upcasts)), end))
    return sink.substitute(mapping)

# ---------------------------------------------------------------- launch dimensions

def to_launch_dims(sink: UOp, max_dims: int = 3) -> tuple[UOp, list, list]:
    """Replace GLOBAL ranges by SPECIAL indices. More than ``max_dims`` ranges are folded into the
    first launch dimension. Returns the new sink, global size and local size (x, y, z order)."""
    globals_ = sorted([x for x in sink.toposort if x.op is Ops.RANGE and x.arg[1] is AxisType.GLOBAL], key=lambda r: r.arg[0])
    if not globals_: return sink, [1, 1, 1], [1, 1, 1]
    # innermost range is launch dim 0 (x), like tinygrad's C-style backends
    groups: list[list[UOp]] = [[r] for r in globals_[-max_dims:]]
    groups[0] = globals_[:len(globals_) - max_dims + 1] if len(globals_) > max_dims else groups[0]
    mapping: dict[UOp, UOp] = {}
    global_size = []
    for dim, group in enumerate(reversed(groups)):
        size = prod([r.src[0] if r.src[0].op is not Ops.CONST else r.src[0].arg for r in group])
        special = UOp(Ops.SPECIAL, dtypes.index, (size if isinstance(size, UOp) else UOp.const(dtypes.index, size),), f"gidx{dim}")
        global_size.append(size if not isinstance(size, UOp) or size.op is not Ops.CONST else size.arg)
        stride = 1
        for r in reversed(group):
            bound = r.src[0]
            mapping[r] = (special // stride) % bound if len(group) > 1 else special
            stride = stride * (bound.arg if bound.op is Ops.CONST else bound)
    global_size += [1] * (3 - len(global_size))
    return _replace_ranges(sink, mapping), global_size, [1, 1, 1]

def _replace_ranges(sink: UOp, mapping: dict[UOp, UOp]) -> UOp:
    """Substitute ranges; other RANGEs drop replaced ranges from their parent sources."""
    new_sink = sink.substitute(mapping)
    # rebuild the remaining ranges parents-first, keeping only parents that are still ranges
    fix: dict[UOp, UOp] = {}
    for x in new_sink.toposort:
        if x.op is not Ops.RANGE: continue
        parents = tuple(fix.get(s, s) for s in x.src[1:] if s.op is Ops.RANGE)
        rebuilt = x.replace(src=(x.src[0],) + parents)
        if rebuilt is not x: fix[x] = rebuilt
    return new_sink.substitute(fix) if fix else new_sink

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

def _float_to_bf16_bits(x: UOp) -> UOp:
    """Round a float32 to the nearest-even bfloat16 and return its 16 bits (NaN stays NaN)."""
    bits = x.bitcast(dtypes.uint32)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return (x.ne(x)).where(UOp.const(dtypes.uint32, 0x7FC0), rounded).cast(dtypes.uint16)

def _round_to_bf16(x: UOp) -> UOp:
    return _bf16_bits_to_float(_float_to_bf16_bits(x))

def emulate_bfloat16(sink: UOp) -> UOp:
    """Rewrite bfloat16 math into float32 math with explicit conversions at memory and casts."""
    if not any(x.dtype.scalar() == dtypes.bfloat16 or (x.dtype.base.scalar() == dtypes.bfloat16) for x in sink.toposort):
        return sink
    bf16, f32 = dtypes.bfloat16, dtypes.float32
    def fix_param(p: UOp) -> UOp | None:
        if p.dtype.base != bf16: return None
        return p.replace(dtype=dtypes.uint16.ptr(p.dtype.size))
    def fix_load(ld: UOp, idx: UOp) -> UOp | None:
        if ld.dtype != bf16 or idx.op is not Ops.INDEX or idx.src[0].op is not Ops.PARAM: return None
        bits_index = idx.replace(dtype=dtypes.uint16.ptr(idx.dtype.size))
        return _bf16_bits_to_float(UOp(Ops.LOAD, dtypes.uint16, (bits_index,) + ld.src[1:]))
    def fix_store(st: UOp, idx: UOp, val: UOp) -> UOp | None:
        if idx.op is not Ops.INDEX or idx.src[0].op is not Ops.PARAM or idx.dtype.base != bf16: return None
        # the new store indexes the buffer as uint16 bits, so this rule doesn't match it again
        bits_index = idx.replace(dtype=dtypes.uint16.ptr(idx.dtype.size))
        return UOp(Ops.STORE, dtypes.void, (bits_index, _float_to_bf16_bits(val)) + st.src[2:])
    def fix_cast(c: UOp, x: UOp) -> UOp | None:
        # sources are already rewritten, so a former bfloat16 source is float32 by now
        return _round_to_bf16(x.cast(f32)) if c.dtype == bf16 else None
    def fix_value(x: UOp) -> UOp | None:
        if x.dtype != bf16 or x.op in (Ops.LOAD, Ops.CAST, Ops.BITCAST): return None
        if x.op is Ops.CONST: return UOp.const(f32, x.arg)
        return x.replace(dtype=f32)
    def fix_bitcast(b: UOp, x: UOp) -> UOp | None:
        if b.dtype == bf16: return _bf16_bits_to_float(x.bitcast(dtypes.uint16))
        if x.dtype == f32 and b.dtype.itemsize == 2: return _float_to_bf16_bits(x).bitcast(b.dtype)
        return None
    rules = PatternMatcher([
        (UPat(Ops.PARAM, name="p"), fix_param),
        (UPat(Ops.LOAD, name="ld", src=(UPat.var("idx"),), allow_any_len=True), fix_load),
        (UPat(Ops.STORE, name="st", src=(UPat.var("idx"), UPat.var("val")), allow_any_len=True), fix_store),
        (UPat(Ops.CAST, name="c", src=(UPat.var("x"),)), fix_cast),
        (UPat(Ops.BITCAST, name="b", src=(UPat.var("x"),)), fix_bitcast),
        (UPat(name="x"), fix_value),
    ])
    return graph_rewrite(sink, rules)
