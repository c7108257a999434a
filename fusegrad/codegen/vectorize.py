"""Vectorize innermost UPCAST loops of a linear program into straight-line vector code.

Runs after ``linearize``, only for renderers with ``vector_loops`` (the C renderer of the CPU
device). A loop ``for (r = 0; r < W; r++) { body }`` qualifies when:

- it is an UPCAST loop (UPCAST/UNROLL opts, and the accumulator loops ``lower_reduces`` makes)
  with a constant trip count W that splits into at most 4 vectors of V lanes (V = 16, 8 or 4,
  capped by ``renderer.max_vector_bytes``), and no loop nests inside it;
- every memory access is ``base + r`` (a contiguous vector access), independent of r (a
  broadcast, for loads of buffers the loop does not write), or anything else, accessed lane by
  lane (a gather of V scalar loads, or a scatter of V scalar stores) when the loop also works on a
  register tile or the index isn't affine in r (see docs/decisions.md: where gathers pay);
- a gated access (padding, PADTO) is a masked vector load (masked lanes read 0 and touch no memory)
  or store when contiguous, else a gather whose gated-off lanes read element 0 and are then zeroed
  (gated scatters stay scalar); every buffer the loop writes is read (if at all) at the same address,
  and every other op is an elementwise ALU op, CAST or BITCAST on 32-bit lanes (float32, int32,
  uint32, bool as 32-bit masks), or on float16 lanes (the renderer computes each op in float32 and
  rounds it to half), or a conversion of 16- and 8-bit lanes loaded or stored (bfloat16 and fp8
  codes, images) from or to 32-bit ones.

A qualifying loop becomes W/V chunks; chunk c computes lanes r = c*V .. c*V+V-1 with vector
dtypes (``dtypes.float32.vec(V)``): vector LOADs/STOREs from a scalar-pointer INDEX at
``base + c*V`` (V contiguous elements, no alignment assumed), VECTORIZE of one repeated scalar for
broadcasts, VECTORIZE of V scalar loads for gathers, a GEP and scalar STORE per lane for scatters,
and lane-wise ALU ops. Every lane does the same ops in the same order as its scalar
iteration did, so no sum is reordered; results match the scalar loop up to FMA contraction, which
gcc (-ffp-contract=fast) may apply differently to scalar and vector code (a few ulps). Compares
give -1/0 lane masks, so a loop that uses a bool as a number (or orders bools) stays scalar. A register array (DEFINE_REG) whose loop accesses
all vectorize with the same V at slots divisible by V becomes an array of vectors; scalar code
elsewhere still reads its elements (the renderer casts it back to a scalar pointer).

Anything else keeps its scalar loop (which gcc may still auto-vectorize).
"""
from __future__ import annotations
from typing import Any
from fusegrad.dtype import dtypes, DType
from fusegrad.uop.ops import UOp, Ops, AxisType

LANE_DTYPES = (dtypes.float32, dtypes.int32, dtypes.uint32, dtypes.bool)
REGISTER_DTYPES = (dtypes.float32, dtypes.int32, dtypes.uint32)   # registers that may become arrays of vectors
# 16- and 8-bit integer lanes (bfloat16 bits and fp8 codes, whose math codegen emulates in 32-bit lanes; images) only
# move: they are loaded, stored, widened to 32-bit integers or float32, narrowed from 32-bit integers, or bitcast
NARROW_INT_DTYPES = (dtypes.uint16, dtypes.int16, dtypes.uint8, dtypes.int8)
MEMORY_DTYPES = REGISTER_DTYPES + (dtypes.float16,) + NARROW_INT_DTYPES
# float16 lanes also compute: the renderer widens each op's operands to float32 and rounds its result to half,
# which is how scalar half code rounds (one rounding per op)
HALF_OPS = {Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV, Ops.MAX, Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ, Ops.WHERE, Ops.MULACC,
            Ops.NEG, Ops.RECIPROCAL}
VALUE_OPS = {Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV, Ops.MAX, Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ, Ops.AND, Ops.OR, Ops.XOR,
             Ops.SHL, Ops.SHR, Ops.WHERE, Ops.MULACC, Ops.NEG, Ops.RECIPROCAL, Ops.IDIV, Ops.MOD, Ops.CAST, Ops.BITCAST}
MAX_CHUNKS = 4

class _Reject(Exception): pass

# index math folded when both operands are constants
_FOLD = {Ops.ADD: lambda a, b: a + b, Ops.SUB: lambda a, b: a - b, Ops.MUL: lambda a, b: a * b,
         Ops.IDIV: lambda a, b: a // b, Ops.MOD: lambda a, b: a % b}

def _lanes(width: int, max_lanes: int) -> int | None:
    for v in (16, 8, 4):
        if v <= max_lanes and width % v == 0 and width // v <= MAX_CHUNKS: return v
    return None

class _Loop:
    """One candidate loop: its position in the list, its range, lanes, and the analysis."""
    def __init__(self, uops: list[UOp], start: int, end: int, lanes: int):
        self.start, self.end, self.lanes = start, end, lanes
        self.rng = uops[start]
        self.body = uops[start + 1:end]
        self.varying: set[UOp] = {self.rng}
        for u in self.body:
            if any(s in self.varying for s in u.src): self.varying.add(u)
        users: dict[UOp, list[UOp]] = {}
        for u in self.body:
            for s in u.src: users.setdefault(s, []).append(u)
        # index math: varying integer ops whose only users are INDEX offsets or other index math
        self.index_math: set[UOp] = set()
        for u in reversed([self.rng] + self.body):
            if u not in self.varying or u.op in (Ops.INDEX, Ops.LOAD, Ops.STORE): continue
            us = users.get(u, [])
            if us and all((x.op is Ops.INDEX and x.src[1] is u and u not in x.src[2:] and x.src[0] is not u) or x in self.index_math for x in us):
                self.index_math.add(u)
        self.coef: dict[UOp, int] = {}
        self.reg_accesses: list[tuple[UOp, UOp]] = []   # (DEFINE_REG, INDEX) accessed as vectors
        self.strided: set[UOp] = set()                  # INDEXes accessed lane by lane
        self.irregular: set[UOp] = set()                # ... of them, those whose index isn't affine in the loop variable

    def coefficient(self, u: UOp) -> int:
        if u not in self.varying: return 0
        if u is self.rng: return 1
        if u in self.coef: return self.coef[u]
        if u.op is Ops.ADD: c = self.coefficient(u.src[0]) + self.coefficient(u.src[1])
        elif u.op is Ops.SUB: c = self.coefficient(u.src[0]) - self.coefficient(u.src[1])
        elif u.op is Ops.MUL:
            a, b = u.src
            if b.op is Ops.CONST and a in self.varying: c = self.coefficient(a) * b.arg
            elif a.op is Ops.CONST and b in self.varying: c = self.coefficient(b) * a.arg
            else: raise _Reject("index product of varying values")
        else: raise _Reject(f"index op {u.op}")
        self.coef[u] = c
        return c

    def analyze(self) -> None:
        rng, varying = self.rng, self.varying
        # (the loop variable used as a value, by a gate's compare say, is the vector of lane numbers)
        if rng.dtype not in LANE_DTYPES and any(rng in u.src and u not in self.index_math and u.op not in (Ops.INDEX, Ops.LOAD, Ops.STORE)
                                                for u in self.body):
            raise _Reject(f"loop variable of dtype {rng.dtype} used as a value")
        stored: dict[UOp, set[UOp]] = {}
        accessed: dict[UOp, set[UOp]] = {}
        for u in self.body:
            if u.op in (Ops.RANGE, Ops.END, Ops.IF, Ops.ENDIF, Ops.BARRIER, Ops.DEFINE_REG, Ops.DEFINE_LOCAL, Ops.SPECIAL, Ops.DEFINE_VAR):
                raise _Reject(f"{u.op} in the body")
            if u not in varying or u in self.index_math: continue
            if u.op is Ops.INDEX:
                if u.src[0].op not in (Ops.PARAM, Ops.DEFINE_REG, Ops.DEFINE_LOCAL): raise _Reject(f"access to {u.src[0].op}")
                if len(u.src) > 2 and u.src[0].op is Ops.DEFINE_REG: raise _Reject("gated register access")
                # (a gated access is a masked vector load/store when contiguous, else a gather of clamped addresses)
                try: contiguous = self.coefficient(u.src[1]) == 1
                except _Reject:   # index math that isn't affine (x // 2, a pooling window): per-lane addresses
                    contiguous = False
                    self.irregular.add(u)
                if not contiguous:
                    # lane by lane: a gather (load) or scatter (store) of memory, never of registers
                    if u.src[0].op is Ops.DEFINE_REG: raise _Reject("non-contiguous register access")
                    self.strided.add(u)
                continue
            if u.op in (Ops.LOAD, Ops.STORE):
                index = u.src[0]
                if index.op is not Ops.INDEX: raise _Reject("load without INDEX")
                if len(index.src) > 2 and index not in varying: raise _Reject("gated access to an address that doesn't vary")
                dtype = u.dtype if u.op is Ops.LOAD else u.src[1].dtype
                if dtype not in MEMORY_DTYPES: raise _Reject(f"memory dtype {dtype}")
                if u.op is Ops.STORE and index not in varying: raise _Reject("store to an address that doesn't vary")
                if u.op is Ops.STORE and index in self.strided and len(index.src) > 2: raise _Reject("gated scatter")
                # (a gated gather zeroes its off lanes with a select under a 32-bit lane mask: narrower lanes can't take it)
                if index in self.strided and len(index.src) > 2 and dtype not in LANE_DTYPES: raise _Reject(f"gated gather of {dtype} lanes")
                if index in varying and index.src[0].op is Ops.DEFINE_REG: self.reg_accesses.append((index.src[0], index))
                accessed.setdefault(index.src[0], set()).add(index)
                if u.op is Ops.STORE: stored.setdefault(index.src[0], set()).add(index)
                continue
            if u.op not in VALUE_OPS: raise _Reject(f"op {u.op}")
            if not _lane_dtypes_supported(u): raise _Reject(f"dtype {u.dtype} from {[s.dtype for s in u.src]}")
            if u.op in (Ops.IDIV, Ops.MOD):
                if not dtypes.is_int(u.dtype) or u.src[1].op is not Ops.CONST or u.src[1].arg in (0, -1): raise _Reject("division")
            if u.op is Ops.BITCAST and dtypes.bool in (u.dtype, u.src[0].dtype): raise _Reject("bool bitcast")
            # bool lanes are masks (true = -1): only ops where that acts like C's 0/1 bool
            if any(x.dtype == dtypes.bool for x in u.src[1 if u.op is Ops.WHERE else 0:]) and \
                    u.op not in (Ops.AND, Ops.OR, Ops.XOR, Ops.CMPNE, Ops.CMPEQ, Ops.NEG, Ops.WHERE, Ops.CAST):
                raise _Reject(f"{u.op} on bools")
            if u.op is Ops.RECIPROCAL and not dtypes.is_float(u.dtype): raise _Reject("integer reciprocal")
        for buf, indexes in stored.items():
            if accessed[buf] != indexes or len(indexes) != 1: raise _Reject("a written buffer read at another address")
        # lane-by-lane access pays off where the lanes then feed a register tile (a gathered channel
        # vector reused by every tile position) or the index isn't affine (gcc can't vectorize that loop
        # itself, and its scalar selects branch); a plain strided copy is faster as gcc's scalar code
        if self.strided - self.irregular and not self.reg_accesses: raise _Reject("gather or scatter outside a register tile")

def _lane_dtypes_supported(u: UOp) -> bool:
    """Can the vector form of the value op ``u`` be rendered lane-wise with its dtypes?"""
    dts = [u.dtype] + [s.dtype for s in u.src]
    if all(d in LANE_DTYPES for d in dts): return True
    ints32 = (dtypes.int32, dtypes.uint32)
    if u.op is Ops.CAST:
        pair = (u.src[0].dtype, u.dtype)
        return pair in ((dtypes.float16, dtypes.float32), (dtypes.float32, dtypes.float16)) or \
            any(a in NARROW_INT_DTYPES and b in ints32 for a, b in (pair, pair[::-1])) or (pair[0] in NARROW_INT_DTYPES and pair[1] == dtypes.float32)
    if u.op is Ops.BITCAST: return u.dtype in MEMORY_DTYPES and u.src[0].dtype in MEMORY_DTYPES and u.dtype.itemsize == u.src[0].dtype.itemsize
    # half math: half operands (and a bool condition or a bool result)
    operands = dts[2:] if u.op is Ops.WHERE else dts[1:]
    result_ok = u.dtype == dtypes.float16 or (u.dtype == dtypes.bool and u.op in (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ))
    return u.op in HALF_OPS and result_ok and all(d == dtypes.float16 for d in operands) and \
        (u.op is not Ops.WHERE or u.src[0].dtype == dtypes.bool)

class _Builder:
    """Builds the vector uops of one loop. Every new uop but constants gets ``arg=tag`` so it is
    distinct from any uop elsewhere in the list (UOps are hash-consed)."""
    def __init__(self, loop: _Loop, tag: tuple, vector_regs: dict[UOp, UOp]):
        self.loop, self.tag, self.vector_regs = loop, tag, vector_regs
        self.out: list[UOp] = []
        self.seen: set[UOp] = set()

    def emit(self, u: UOp) -> UOp:
        # constants render without a declaration, so emitting one again (or in a closed scope) is harmless
        if u not in self.seen:
            for s in u.src:
                if s.op is Ops.CONST: self.emit(s)
            self.seen.add(u)
            self.out.append(u)
        return u

    def new(self, op: Ops, dtype: DType, src: tuple) -> UOp: return self.emit(UOp(op, dtype, src, self.tag))

    def scalar_at(self, u: UOp, offset: int, mapped: dict[UOp, UOp], memo: dict[UOp, UOp]) -> UOp:
        """Index math ``u`` with the loop variable replaced by ``offset``, simplified a little."""
        if u is self.loop.rng: return UOp.const(u.dtype, offset)
        if u not in self.loop.varying: return mapped.get(u, u)
        if u in memo: return memo[u]
        srcs = tuple(self.scalar_at(s, offset, mapped, memo) for s in u.src)
        if len(srcs) != 2:   # (a select or a cast in irregular index math: rebuilt as it is)
            memo[u] = self.new(u.op, u.dtype, srcs)
            return memo[u]
        a, b = srcs
        if a.op is Ops.CONST and b.op is Ops.CONST and u.op in _FOLD and (u.op in (Ops.ADD, Ops.SUB, Ops.MUL) or (a.arg >= 0 and b.arg > 0)):
            # (C's / and % agree with Python's // and % on non-negative operands)
            out = UOp.const(u.dtype, _FOLD[u.op](a.arg, b.arg))
        elif u.op is Ops.ADD and b.op is Ops.CONST and b.arg == 0: out = a
        elif u.op is Ops.ADD and a.op is Ops.CONST and a.arg == 0: out = b
        elif u.op is Ops.SUB and b.op is Ops.CONST and b.arg == 0: out = a
        else: out = self.new(u.op, u.dtype, (a, b))
        memo[u] = out
        return out

    def divided(self, u: UOp, v: int) -> UOp | None:
        """``u // v`` when ``u`` is provably a multiple of ``v`` (built from its structure), else None."""
        if u.op is Ops.CONST: return UOp.const(u.dtype, u.arg // v) if u.arg % v == 0 else None
        if u.op is Ops.ADD:
            a, b = self.divided(u.src[0], v), self.divided(u.src[1], v)
            if a is None or b is None: return None
            if b.op is Ops.CONST and b.arg == 0: return a
            if a.op is Ops.CONST and a.arg == 0: return b
            return self.new(Ops.ADD, u.dtype, (a, b))
        if u.op is Ops.MUL:
            for x, k in ((u.src[0], u.src[1]), (u.src[1], u.src[0])):
                if k.op is Ops.CONST and k.arg % v == 0:
                    return x if k.arg == v else self.new(Ops.MUL, u.dtype, (x, UOp.const(k.dtype, k.arg // v)))
        return None

def _find_loops(uops: list[UOp], max_lanes: int) -> list[_Loop]:
    loops, stack = [], []
    for i, u in enumerate(uops):
        if u.op is Ops.RANGE: stack.append((i, True))
        elif u.op is Ops.END:
            start, innermost = stack.pop()
            if stack: stack[-1] = (stack[-1][0], False)
            r = uops[start]
            if innermost and r.arg[1] is AxisType.UPCAST and r.src[0].op is Ops.CONST and (v := _lanes(r.src[0].arg, max_lanes)):
                loops.append(_Loop(uops, start, i, v))
    return loops

def vectorize_loops(uops: list[UOp], max_vector_bytes: int = 64) -> list[UOp]:
    """Rewrite every qualifying innermost UPCAST loop of ``uops`` into vector code (see module doc)."""
    max_lanes = max_vector_bytes // 4
    loops: list[_Loop] = []
    for loop in _find_loops(uops, max_lanes):
        try:
            loop.analyze()
            # check the register slots divide by the lane count (with a throwaway builder)
            b = _Builder(loop, ("probe",), {})
            for _, index in loop.reg_accesses:
                if b.divided(b.scalar_at(index.src[1], 0, {}, {}), loop.lanes) is None: raise _Reject("unaligned register slot")
            loops.append(loop)
        except _Reject:
            continue
    # a register that scalar code writes (a hot update loop that stayed scalar) stays a scalar array:
    # vector accesses to it in other loops would force it out of registers, so those loops stay scalar
    while loops:
        inside = {u for loop in loops for u in loop.body}
        scalar_written = {u.src[0].src[0] for u in uops if u.op is Ops.STORE and u not in inside and u.src[0].op is Ops.INDEX
                          and u.src[0].src[0].op is Ops.DEFINE_REG}
        keep = [loop for loop in loops if not any(reg in scalar_written for reg, _ in loop.reg_accesses)]
        if len(keep) == len(loops): break
        loops = keep
    if not loops: return uops
    # registers accessed as vectors with one lane count become arrays of vectors
    reg_lanes: dict[UOp, set[int]] = {}
    for loop in loops:
        for reg, _ in loop.reg_accesses: reg_lanes.setdefault(reg, set()).add(loop.lanes)
    vector_regs: dict[UOp, UOp] = {}
    for reg, lanes in reg_lanes.items():
        if len(lanes) == 1 and reg.dtype.size % (v := next(iter(lanes))) == 0 and reg.dtype.base in REGISTER_DTYPES:
            vector_regs[reg] = UOp(Ops.DEFINE_REG, reg.dtype.base.vec(v).ptr(reg.dtype.size // v), (), reg.arg)
    by_start = {loop.start: loop for loop in loops}
    mapped: dict[UOp, UOp] = dict(vector_regs)
    out: list[UOp] = []
    i = 0
    while i < len(uops):
        u = uops[i]
        if i in by_start:
            loop = by_start[i]
            out.extend(_rewrite_loop(loop, mapped, ("vec", i), vector_regs))
            i = loop.end + 1
            continue
        new = mapped.get(u) if u.op is Ops.DEFINE_REG else None
        if new is None:
            src = tuple(mapped.get(s, s) for s in u.src)
            new = u if src == u.src else u.replace(src=src)
        mapped[u] = new
        out.append(new)
        i += 1
    return out

def _rewrite_loop(loop: _Loop, mapped: dict[UOp, UOp], tag: tuple, vector_regs: dict[UOp, UOp]) -> list[UOp]:
    b = _Builder(loop, tag, vector_regs)
    v, rng = loop.lanes, loop.rng
    # ops of the body that don't vary with the loop variable run once, as scalars
    for u in loop.body:
        if u in loop.varying: continue
        new = u.replace(src=tuple(mapped.get(s, s) for s in u.src))
        mapped[u] = new
        b.emit(new)
    for chunk in range(rng.src[0].arg // v):
        lane: dict[UOp, Any] = {}      # varying op -> its vector (or address, or per-lane addresses) for this chunk
        memo: dict[UOp, UOp] = {}
        lane_memos: list[dict[UOp, UOp]] = [{} for _ in range(v)]
        gates: dict[UOp, UOp] = {}     # gated gathers: INDEX -> its gate (lane mask or scalar)
        lane[rng] = b.new(Ops.VECTORIZE, rng.dtype.vec(v), tuple(UOp.const(rng.dtype, chunk * v + i) for i in range(v)))
        broadcasts: dict[UOp, UOp] = {}
        def operand(s: UOp) -> UOp:
            if s in loop.varying: return lane[s]
            s = mapped.get(s, s)
            if s not in broadcasts: broadcasts[s] = b.new(Ops.VECTORIZE, s.dtype.vec(v), (s,) * v)
            return broadcasts[s]
        def deps(u: UOp, skip: int) -> tuple:
            return tuple(lane.get(s, mapped.get(s, s)) for s in u.src[skip:] if s is not rng)
        for u in loop.body:
            if u not in loop.varying or u in loop.index_math: continue
            if u.op is Ops.INDEX:
                buf = u.src[0]
                if u in loop.strided:   # one scalar address per lane
                    offsets = [b.scalar_at(u.src[1], chunk * v + i, mapped, lane_memos[i]) for i in range(v)]
                    if len(u.src) > 2:
                        # gated: a lane the gate turns off reads element 0 (its own address may be outside
                        # the buffer), and the load's WHERE below gives it 0
                        gate = lane[u.src[2]] if u.src[2] in loop.varying else mapped.get(u.src[2], u.src[2])
                        gates[u] = gate
                        conditions = [b.emit(UOp(Ops.GEP, dtypes.bool, (gate,), (i,))) if gate.dtype.count > 1 else gate for i in range(v)]
                        offsets = [b.new(Ops.WHERE, o.dtype, (c, o, UOp.const(o.dtype, 0))) for c, o in zip(conditions, offsets)]
                    lane[u] = [b.new(Ops.INDEX, u.dtype, (mapped.get(buf, buf), o)) for o in offsets]
                    continue
                base = b.scalar_at(u.src[1], chunk * v, mapped, memo)
                if buf in vector_regs:
                    lane[u] = b.new(Ops.INDEX, vector_regs[buf].dtype, (vector_regs[buf], b.divided(base, v)))
                else:
                    # a gate stays a scalar when it doesn't vary (the whole vector or nothing), else a lane mask
                    gate = tuple(lane[g] if g in loop.varying else mapped.get(g, g) for g in u.src[2:])
                    lane[u] = b.new(Ops.INDEX, u.dtype, (mapped.get(buf, buf), base) + gate)
            elif u.op is Ops.LOAD:
                index = u.src[0]
                if index in loop.strided:   # a gather: scalar loads, then one vector of them
                    scalars = tuple(b.new(Ops.LOAD, u.dtype, (address,) + deps(u, 1)) for address in lane[index])
                    lane[u] = b.new(Ops.VECTORIZE, u.dtype.vec(v), scalars)
                    if index in gates:
                        gate = gates[index] if gates[index].dtype.count > 1 else b.new(Ops.VECTORIZE, dtypes.bool.vec(v), (gates[index],) * v)
                        zero = b.new(Ops.VECTORIZE, u.dtype.vec(v), (UOp.const(u.dtype, 0),) * v)
                        lane[u] = b.new(Ops.WHERE, u.dtype.vec(v), (gate, lane[u], zero))
                elif index in loop.varying: lane[u] = b.new(Ops.LOAD, u.dtype.vec(v), (lane[index],) + deps(u, 1))
                else:   # a broadcast load: the scalar load, then the broadcast
                    scalar = b.new(Ops.LOAD, u.dtype, (mapped.get(index, index),) + deps(u, 1))
                    lane[u] = b.new(Ops.VECTORIZE, u.dtype.vec(v), (scalar,) * v)
            elif u.op is Ops.STORE and u.src[0] in loop.strided:   # a scatter: one scalar store per lane
                value = operand(u.src[1])
                for i, address in enumerate(lane[u.src[0]]):
                    element = b.emit(UOp(Ops.GEP, value.dtype.scalar(), (value,), (i,)))
                    b.new(Ops.STORE, dtypes.void, (address, element) + deps(u, 2))
            elif u.op is Ops.STORE:
                lane[u] = b.new(Ops.STORE, dtypes.void, (lane[u.src[0]], operand(u.src[1])) + deps(u, 2))
            else:
                lane[u] = b.new(u.op, u.dtype.vec(v), tuple(operand(s) for s in u.src))
    return b.out
