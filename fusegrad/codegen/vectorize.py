"""Innermost UPCAST loops of a kernel graph as vector nodes: the last graph rewrite before ``linearize``.

Runs on the lowered kernel (accumulators are registers, indices narrowed) for renderers with ``vector_loops``:
the CPU's C (gcc vector extensions), LLVM IR and the PYTHON device, which executes the same vector uops as the
specification of what they mean (docs/linear_uops.md). A loop is a RANGE and its *body*: every node that runs
inside it, i.e. depends on the range other than through an END that closes it. It qualifies when:

- it is an UPCAST range (UPCAST/UNROLL opts, and the accumulator lanes ``lower_reduces`` makes) with a constant trip
  count W that splits into at most 4 vectors of V lanes (V = 16, 8 or 4, capped by the renderer's
  ``max_vector_bytes``: the *fit to the target*), and no other loop runs inside it (``loop_nesting``);
- its results leave the loop only as stores that an END (or the kernel's SINK) collects;
- every memory access is ``base + r`` (a contiguous vector access), independent of r (a broadcast, for loads of
  buffers the loop does not write), or anything else, accessed lane by lane (a gather of V scalar loads, or a
  scatter of V scalar stores) where the target says lane-by-lane access pays (``Renderer.vector_gathers``; on the
  CPU: when the loop also works on a register tile or the index isn't affine in r, docs/decisions.md);
- a gated access (padding, PADTO) is a masked vector load (masked lanes read 0 and touch no memory) or store when
  contiguous, else a gather whose gated-off lanes read element 0 and are then zeroed (gated scatters stay scalar);
  every buffer the loop writes is read (if at all) at the same address, and every other op is an elementwise ALU
  op, CAST or BITCAST on 32-bit lanes (float32, int32, uint32, bool as 32-bit masks), or on float16 lanes (the
  renderer computes each op in float32 and rounds it to half), or a conversion of 16- and 8-bit lanes loaded or
  stored (bfloat16 and fp8 codes, images) from or to 32-bit ones.

A qualifying loop's RANGE disappears. Its body is rebuilt W/V times, chunk c computing lanes r = c*V .. c*V+V-1,
by one expansion rule per kind of node (``EXPANSIONS``): an INDEX becomes a vector address at ``base + c*V`` (or V
per-lane addresses), a LOAD a vector load (or a broadcast, or a gather), a STORE a vector store (or a scatter), any
other op the same op on ``dtype.vec(V)``. Index math is rebuilt per lane by the INDEX rule. The ENDs (or the SINK)
that collected the loop's stores collect the chunks' stores instead, and the linearizer then places the new nodes
like any other (loop-invariant gathers and broadcasts move out of enclosing loops by themselves).

Every lane does the same ops in the same order as its scalar iteration did, so no sum is reordered; results match
the scalar loop bit for bit (compilers never contract a*b+c on their own: a fused multiply-add is a MULACC in the
IR, the same in scalar and vector code). Compares give -1/0 lane masks, so a loop that uses a bool as a number (or orders bools) stays scalar.
A register array (DEFINE_REG) whose loop accesses all vectorize with the same V at slots divisible by V becomes an
array of vectors; scalar code elsewhere still reads its elements (through a scalar pointer INDEX).

Anything else keeps its loop (which gcc may still auto-vectorize). Which loops exist at all is the optimizer's
choice: UPCAST and UNROLL make them (BEAM searches their sizes), PADTO makes masked lanes.
"""
from __future__ import annotations
from typing import Any
from fusegrad.dtype import dtypes
from fusegrad.uop.ops import UOp, Ops, AxisType, GroupOp, graph_rewrite
from fusegrad.uop.symbolic import symbolic
from fusegrad.uop.alu import exec_alu
from fusegrad.codegen.kernel import loop_nesting, open_ranges

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
             Ops.SHL, Ops.SHR, Ops.WHERE, Ops.MULACC, Ops.NEG, Ops.RECIPROCAL, Ops.IDIV, Ops.MOD, Ops.CAST, Ops.BITCAST, Ops.SQRT}
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
    """One candidate loop: its range, the lanes per vector, its body (every node that runs inside the loop, in
    toposort order: exactly what the linearizer would emit between the RANGE and its END) and the analysis."""
    def __init__(self, rng: UOp, body: list[UOp], lanes: int):
        self.rng, self.body, self.lanes = rng, body, lanes
        # (every body node depends on the loop variable: a node that doesn't runs outside the loop)
        self.varying: set[UOp] = {rng, *body}
        users: dict[UOp, list[UOp]] = {}
        for u in self.body:
            for s in u.src: users.setdefault(s, []).append(u)
        # index math: varying integer ops whose only users are INDEX offsets or other index math
        self.index_math: set[UOp] = set()
        for u in reversed([self.rng] + self.body):
            if u.op in (Ops.INDEX, Ops.LOAD, Ops.STORE): continue
            us = users.get(u, [])
            if us and all((x.op is Ops.INDEX and x.src[1] is u and u not in x.src[2:] and x.src[0] is not u) or x in self.index_math for x in us):
                self.index_math.add(u)
        self.coef: dict[UOp, int] = {}
        self.reg_accesses: list[tuple[UOp, UOp]] = []   # (DEFINE_REG, INDEX) accessed as vectors
        self.strided: set[UOp] = set()                  # INDEXes accessed lane by lane
        self.irregular: set[UOp] = set()                # ... of them, those whose index isn't affine in the loop variable
        self.stores: dict[UOp, list[UOp]] = {}          # after the rewrite: each STORE of the body -> its vector stores
        self.enclosing: tuple[UOp, ...] = ()            # the loops this one ran inside (loads stay in them)

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

    def analyze(self, gathers: str = "register_tiles", target_dtypes: tuple | None = None) -> None:
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
            # (the target's vector types: of a load, of a stored value, of an op and its operands)
            if target_dtypes is not None and u.op is not Ops.INDEX:
                values = [u] if u.op is Ops.LOAD else [u.src[1]] if u.op is Ops.STORE else [u, *u.src]
                if any(x.dtype.scalar() not in target_dtypes for x in values): raise _Reject(f"the target has no vectors of {u.dtype}")
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
            if u.op in (Ops.RECIPROCAL, Ops.SQRT) and not dtypes.is_float(u.dtype): raise _Reject(f"integer {u.op.name.lower()}")
        for buf, indexes in stored.items():
            if accessed[buf] != indexes or len(indexes) != 1: raise _Reject("a written buffer read at another address")
        # where lane-by-lane access pays is the target's call (Renderer.vector_gathers). On the CPU it pays where the
        # lanes then feed a register tile (a gathered channel vector reused by every tile position) or the index
        # isn't affine (gcc can't vectorize that loop itself, and its scalar selects branch); a plain strided copy is
        # faster as gcc's scalar code
        if self.strided and gathers == "never": raise _Reject("the target takes no gathers")
        if self.strided - self.irregular and not self.reg_accesses and gathers == "register_tiles":
            raise _Reject("gather or scatter outside a register tile")

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

class _IndexMath:
    """Index math of one loop at a given lane (the loop variable replaced by a constant, folded a little)."""
    def __init__(self, loop: _Loop): self.loop = loop

    def scalar_at(self, u: UOp, offset: int, mapped: dict[UOp, UOp], memo: dict[UOp, UOp]) -> UOp:
        """Index math ``u`` with the loop variable replaced by ``offset``, simplified a little."""
        if u is self.loop.rng: return UOp.const(u.dtype, offset)
        if u not in self.loop.varying: return mapped.get(u, u)
        if u in memo: return memo[u]
        srcs = tuple(self.scalar_at(s, offset, mapped, memo) for s in u.src)
        if len(srcs) != 2:   # (a select or a cast in irregular index math: rebuilt as it is)
            memo[u] = UOp(u.op, u.dtype, srcs)
            return memo[u]
        a, b = srcs
        if a.op is Ops.CONST and b.op is Ops.CONST and u.op in _FOLD and (u.op in (Ops.ADD, Ops.SUB, Ops.MUL) or (a.arg >= 0 and b.arg > 0)):
            # (C's / and % agree with Python's // and % on non-negative operands)
            out = UOp.const(u.dtype, _FOLD[u.op](a.arg, b.arg))
        elif u.op is Ops.ADD and b.op is Ops.CONST and b.arg == 0: out = a
        elif u.op is Ops.ADD and a.op is Ops.CONST and a.arg == 0: out = b
        elif u.op is Ops.SUB and b.op is Ops.CONST and b.arg == 0: out = a
        else: out = UOp(u.op, u.dtype, (a, b))
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
            return UOp(Ops.ADD, u.dtype, (a, b))
        if u.op is Ops.MUL:
            for x, k in ((u.src[0], u.src[1]), (u.src[1], u.src[0])):
                if k.op is Ops.CONST and k.arg % v == 0:
                    return x if k.arg == v else UOp(Ops.MUL, u.dtype, (x, UOp.const(k.dtype, k.arg // v)))
        return None

def _candidate_loops(sink: UOp, max_lanes: int) -> list[_Loop]:
    """The innermost UPCAST loops of constant size that split into vectors, each with its body."""
    order = list(sink.toposort)
    nesting = loop_nesting(sink)
    enclosing = set().union(*nesting.values())   # ranges some other loop runs inside
    inside = open_ranges(sink)   # (each node's open loops, as the linearizer sees them before the nesting closure)
    loops = []
    for r in order:
        if r.op is not Ops.RANGE or r.arg[1] is not AxisType.UPCAST or r in enclosing or r.src[0].op is not Ops.CONST: continue
        if (lanes := _lanes(r.src[0].arg, max_lanes)) is None: continue
        loops.append(loop := _Loop(r, [x for x in order if x is not r and x is not sink and r in inside[x]], lanes))
        loop.enclosing = tuple(sorted(nesting[r], key=lambda e: e.arg[0]))
    # the body's results leave the loop only as the stores an END (or the kernel's SINK) collects
    users: dict[UOp, list[UOp]] = {}
    for x in order:
        for s in x.src: users.setdefault(s, []).append(x)
    def leaves_cleanly(loop: _Loop) -> bool:
        inside = loop.varying
        return all(user in inside or (user.op in (Ops.END, Ops.SINK) and (u.op is Ops.STORE or u is loop.rng))
                   for u in inside for user in users.get(u, []))
    return [loop for loop in loops if leaves_cleanly(loop)]

# ---------------------------------------------------------------- transposing copies

# lanes of a transposing copy's blocks: 8 x 8 blocks run as fast as 16 x 16 ones (GPT-2's Linear shapes: 178-196
# GFLOPS either way), and their 64 regrouped lanes per block, not 256, keep gcc's compile of a Linear layer's kernel
# near what the scalar copy cost (a cold GPT-2 prefill: 1.4 s with 8 x 8 blocks, 1.8-2.1 s with 16 x 16)
TRANSPOSE_LANES = 8

def _affine_coefficient(u: UOp, rng: UOp) -> int | None:
    """The integer c with ``u = c * rng + (terms without rng)``, or None when index math ``u`` isn't affine in ``rng``."""
    if u is rng: return 1
    if rng not in u.toposort: return 0
    if u.op in (Ops.ADD, Ops.SUB):
        a, b = (_affine_coefficient(s, rng) for s in u.src)
        return None if a is None or b is None else a + b if u.op is Ops.ADD else a - b
    if u.op is Ops.MUL:
        for x, k in (u.src, u.src[::-1]):
            if k.op is Ops.CONST and (c := _affine_coefficient(x, rng)) is not None: return c * k.arg
    return None

def _transposing_copy(end: UOp, max_lanes: int, target_dtypes: tuple | None) -> tuple[UOp, UOp, int] | None:
    """(outer range, inner range, lanes V) when ``end`` closes a PACK copy ``panel[.. + inner] = src[.. + outer + inner * s]``
    over two STAGE loops whose sizes V divides: the copy transposes, reading along the outer loop and writing along the inner."""
    if len(end.src) != 3 or end.src[0].op is not Ops.STORE: return None
    if not all(r.op is Ops.RANGE and r.arg[1] is AxisType.STAGE and r.src[0].op is Ops.CONST for r in end.src[1:]): return None
    store, outer, inner = end.src
    dst, value = store.src[0], store.src[1]
    if len(store.src) != 2 or value.op is not Ops.LOAD or len(value.src) != 1 or dst.op is not Ops.INDEX or value.src[0].op is not Ops.INDEX: return None
    src = value.src[0]
    if len(dst.src) != 2 or len(src.src) != 2 or value.dtype not in REGISTER_DTYPES: return None
    if target_dtypes is not None and value.dtype not in target_dtypes: return None
    # (a thread's own panel: a staged DEFINE_LOCAL copy is shared, and on workgroup renderers its threads split it)
    if src.src[0].op is not Ops.PARAM or dst.src[0].op is not Ops.DEFINE_REG: return None
    if _affine_coefficient(dst.src[1], inner) != 1 or _affine_coefficient(src.src[1], outer) != 1: return None
    if (dst_stride := _affine_coefficient(dst.src[1], outer)) is None or (src_stride := _affine_coefficient(src.src[1], inner)) in (None, 1):
        return None
    lanes = next((v for v in (TRANSPOSE_LANES, 4) if v <= max_lanes and outer.src[0].arg % v == 0 and inner.src[0].arg % v == 0), None)
    return None if lanes is None else (outer, inner, lanes, src_stride, dst_stride)

def _transpose_block(end: UOp, outer: UOp, inner: UOp, lanes: int, src_stride: int, dst_stride: int) -> UOp:
    """The copy closed by ``end`` in V x V blocks: V vector loads along the outer loop (one per inner lane, ``src_stride``
    apart), then V vector stores along the inner loop (``dst_stride`` apart), lane j of store i being lane i of load j."""
    store, value = end.src[0], end.src[0].src[1]
    dst, src = store.src[0], value.src[0]
    # the block loops nest the other way round (loops nest in id order): the rows of one V-row band are read to their
    # ends before the next band starts, so V streams run at a time, not (rows / V) * V (on a 768-wide weight, 32
    # streams 3 KB apart fall into 4 L1 sets and the copy lost its gain)
    blocks = [UOp(Ops.RANGE, r.dtype, (UOp.const(r.dtype, r.src[0].arg // lanes),), other.arg) for r, other in ((outer, inner), (inner, outer))]
    corner = {outer: blocks[0] * lanes, inner: blocks[1] * lanes}
    def at(index: UOp, offset: int) -> UOp:   # (the block's corner, simplified once, then constant offsets)
        base = graph_rewrite(index.src[1].substitute(corner), symbolic)
        return UOp(Ops.INDEX, index.dtype, (index.src[0], base + offset if offset else base))
    rows = [UOp(Ops.LOAD, value.dtype.vec(lanes), (at(src, j * src_stride),)) for j in range(lanes)]
    stores = [UOp(Ops.STORE, dtypes.void, (at(dst, i * dst_stride), column)) for i, column in enumerate(transposed(rows))]
    return UOp(Ops.END, dtypes.void, tuple(stores) + (blocks[1], blocks[0]))

def _two_source_shuffle(a: tuple[UOp, list], b: tuple[UOp, list], wanted: list) -> tuple[UOp, list]:
    """A vector of the lanes ``wanted`` (labels) taken from the labelled vectors ``a`` and ``b``: a VECTORIZE of GEPs
    of two vectors, which the C renderer writes as one shuffle (``FG_SHUFFLE``: one permute instruction)."""
    where = {label: (vector, lane) for vector, labels in (a, b) for lane, label in enumerate(labels)}
    lanes = tuple(UOp(Ops.GEP, a[0].dtype.scalar(), (where[label][0],), (where[label][1],)) for label in wanted)
    return UOp(Ops.VECTORIZE, a[0].dtype, lanes), wanted

def transposed(rows: list[UOp]) -> list[UOp]:
    """The columns of the V x V block whose rows are the V-lane vectors ``rows``: column i's lane j is lane i of row j.

    For V a power of two, by the perfect-shuffle network: log2 V rounds, each pairing vector k with vector k + V/2 and
    interleaving their first halves (lane by lane) into one new vector and their second halves into the next; after
    log2 V rounds vector i holds column i. That is V log2 V two-vector shuffles (8 x 8: 24), where building each column
    from V single lanes made gcc insert lane by lane (~170 instructions per 8 x 8 block, a fifth of a 128-row Linear
    layer's time). Other V (or a network whose result isn't the transpose, which would be a bug here) give the columns
    lane by lane."""
    count = len(rows)
    def by_lanes() -> list[UOp]:
        return [UOp(Ops.VECTORIZE, rows[0].dtype, tuple(UOp(Ops.GEP, rows[0].dtype.scalar(), (row,), (i,)) for row in rows))
                for i in range(count)]
    if count < 2 or count & (count - 1): return by_lanes()
    half = count // 2
    vectors = [(row, [(j, i) for i in range(count)]) for j, row in enumerate(rows)]
    for _ in range(count.bit_length() - 1):
        paired = []
        for k in range(half):
            a, b = vectors[k], vectors[k + half]
            for part in (slice(0, half), slice(half, count)):
                paired.append(_two_source_shuffle(a, b, [label for pair in zip(a[1][part], b[1][part]) for label in pair]))
        vectors = paired
    if any(labels != [(j, i) for j in range(count)] for i, (_, labels) in enumerate(vectors)): return by_lanes()
    return [vector for vector, _ in vectors]

def transpose_copies(sink: UOp, max_lanes: int, target_dtypes: tuple | None = None) -> UOp:
    """Vector code for the copies that transpose (a PACK panel of ``x @ w.T``'s weight: read along a weight row,
    written along the panel's vector of output features). Elementwise, such a copy either gathers its loads or
    scatters its stores, one scalar per lane, and a gather whose 16 rows lie 12 KB apart (a 3072-wide weight) also
    thrashes one L1 set. As V x V blocks (V vector loads, V vector stores, lanes regrouped in registers) it moves
    whole cache lines both ways: GPT-2's 128-row Linear layers went from 155-165 to 170-190 GFLOPS."""
    replaced = {}
    for end in sink.toposort:
        if end.op is Ops.END and (found := _transposing_copy(end, max_lanes, target_dtypes)) is not None:
            replaced[end] = _transpose_block(end, *found)
    return sink.substitute(replaced) if replaced else sink

def vectorize_upcasts(sink: UOp, max_vector_bytes: int = 64, gathers: str = "register_tiles", target_dtypes: tuple | None = None) -> UOp:
    """Rewrite every qualifying innermost UPCAST loop of kernel ``sink`` (after lowering, before linearize) into
    vector nodes (see module doc), after the copies that transpose (``transpose_copies``). The loop's RANGE
    disappears: the ENDs (or the SINK) that collected its stores collect the vector stores instead.
    ``max_vector_bytes``, ``gathers`` and ``target_dtypes`` (the scalar dtypes whose vectors it takes, None for
    all) are the target's (``Renderer``)."""
    max_lanes = max_vector_bytes // 4
    sink = transpose_copies(sink, max_lanes, target_dtypes)
    loops: list[_Loop] = []
    for loop in _candidate_loops(sink, max_lanes):
        try:
            loop.analyze(gathers, target_dtypes)
            # check the register slots divide by the lane count (with the index math at lane 0)
            b = _IndexMath(loop)
            for _, index in loop.reg_accesses:
                if b.divided(b.scalar_at(index.src[1], 0, {}, {}), loop.lanes) is None: raise _Reject("unaligned register slot")
            loops.append(loop)
        except _Reject:
            continue
    # a register that scalar code writes (a hot update loop that stayed scalar) stays a scalar array, and the
    # loops that also write it stay scalar: vector updates through a scalar array forced it out of registers (2-5x
    # slower on MNIST's weight-gradient kernels). A loop that only reads it (a register tile's epilogue after its
    # scalar final sum: a GELU over the tile) still becomes vector code, reading the array with vector loads.
    all_stores = [u for u in sink.toposort if u.op is Ops.STORE and u.src[0].op is Ops.INDEX and u.src[0].src[0].op is Ops.DEFINE_REG]
    def writes(loop: _Loop, reg: UOp) -> bool: return any(u.op is Ops.STORE and u.src[0].src[0] is reg for u in loop.body)
    scalar_written: set[UOp] = set()
    while loops:
        inside = {u for loop in loops for u in loop.body}
        scalar_written = {u.src[0].src[0] for u in all_stores if u not in inside}
        keep = [loop for loop in loops if not any(reg in scalar_written and writes(loop, reg) for reg, _ in loop.reg_accesses)]
        if len(keep) == len(loops): break
        loops = keep
    if not loops: return sink
    # registers accessed as vectors with one lane count become arrays of vectors
    reg_lanes: dict[UOp, set[int]] = {}
    for loop in loops:
        for reg, _ in loop.reg_accesses: reg_lanes.setdefault(reg, set()).add(loop.lanes)
    vector_regs: dict[UOp, UOp] = {}
    for reg, lanes in reg_lanes.items():
        if reg not in scalar_written and len(lanes) == 1 and reg.dtype.size % (v := next(iter(lanes))) == 0 and reg.dtype.base in REGISTER_DTYPES:
            vector_regs[reg] = UOp(Ops.DEFINE_REG, reg.dtype.base.vec(v).ptr(reg.dtype.size // v), (), reg.arg)
    loop_of = {u: loop for loop in loops for u in loop.varying}
    rewritten: set[_Loop] = set()
    mapped: dict[UOp, UOp] = dict(vector_regs)
    # one walk in toposort order: a loop is rewritten when its first collector (an END or the SINK) comes up,
    # by which time every node outside the loop that it reads has its new form in ``mapped``
    for x in sink.toposort:
        if x in mapped or x in loop_of: continue
        src = []
        for s in x.src:
            if s not in loop_of:
                src.append(mapped.get(s, s))
                continue
            loop = loop_of[s]
            if loop not in rewritten:
                _rewrite_loop(loop, mapped, vector_regs)
                rewritten.add(loop)
            if s is not loop.rng: src.extend(loop.stores[s])   # (the loop's range itself is gone)
        mapped[x] = x if tuple(src) == x.src else x.replace(src=tuple(src))
    return mapped[sink]

# ---------------------------------------------------------------- the expansion rules

class _Chunk:
    """Lanes c*V .. c*V+V-1 of a loop being rewritten: ``lane`` maps each body node to its vector for them (an INDEX
    to its vector address, or to one address per lane when it is strided). ``mapped`` holds the new form of every
    node outside the loop that the body reads."""
    def __init__(self, loop: _Loop, number: int, index_math: _IndexMath, mapped: dict[UOp, UOp], vector_regs: dict[UOp, UOp]):
        self.loop, self.first, self.b, self.mapped, self.vector_regs = loop, number * loop.lanes, index_math, mapped, vector_regs
        v, rng = loop.lanes, loop.rng
        self.lane: dict[UOp, Any] = {rng: UOp(Ops.VECTORIZE, rng.dtype.vec(v), tuple(UOp.const(rng.dtype, self.first + i) for i in range(v)))}
        self.memo: dict[UOp, UOp] = {}                                    # index math at the chunk's first lane
        self.lane_memos: list[dict[UOp, UOp]] = [{} for _ in range(v)]    # ... and at each lane
        self.gates: dict[UOp, UOp] = {}                                   # gated gathers: INDEX -> its gate
        self.broadcasts: dict[UOp, UOp] = {}

    def outside(self, s: UOp) -> UOp: return self.mapped.get(s, s)

    def operand(self, s: UOp) -> UOp:
        """``s`` as a vector: its chunk vector, or a loop-invariant value broadcast to every lane."""
        if s in self.loop.varying: return self.lane[s]
        s = self.outside(s)
        if s not in self.broadcasts: self.broadcasts[s] = UOp(Ops.VECTORIZE, s.dtype.vec(self.loop.lanes), (s,) * self.loop.lanes)
        return self.broadcasts[s]

    def load_deps(self, u: UOp) -> tuple:
        """A load's ordering sources, plus the loops the vectorized loop ran inside: the load stays in them, next to
        its use, as the scalar load was, rather than moving out as loop-invariant code. A register tile uses every
        vector register for accumulators; a load next to its FMA becomes the FMA's memory operand, while a hoisted
        one holds a register for the whole tile (MNIST's conv kernels spilled: 66 -> 83 ms)."""
        own = self.deps(u, 1)
        return own + tuple(r for r in self.loop.enclosing if r not in own)

    def deps(self, u: UOp, skip: int) -> tuple:
        """The ordering sources of a LOAD or STORE (from position ``skip``), without the loop's range."""
        return tuple(self.lane.get(s, self.outside(s)) for s in u.src[skip:] if s is not self.loop.rng)

def _expand_index(c: _Chunk, u: UOp) -> Any:
    loop, v, buf = c.loop, c.loop.lanes, u.src[0]
    if u in loop.strided:   # one scalar address per lane
        offsets = [c.b.scalar_at(u.src[1], c.first + i, c.mapped, c.lane_memos[i]) for i in range(v)]
        if len(u.src) > 2:
            # gated: a lane the gate turns off reads element 0 (its own address may be outside the buffer), and the
            # load's WHERE gives it 0
            gate = c.lane[u.src[2]] if u.src[2] in loop.varying else c.outside(u.src[2])
            c.gates[u] = gate
            conditions = [UOp(Ops.GEP, dtypes.bool, (gate,), (i,)) if gate.dtype.count > 1 else gate for i in range(v)]
            offsets = [UOp(Ops.WHERE, o.dtype, (cond, o, UOp.const(o.dtype, 0))) for cond, o in zip(conditions, offsets)]
        return [UOp(Ops.INDEX, u.dtype, (c.outside(buf), o)) for o in offsets]
    base = c.b.scalar_at(u.src[1], c.first, c.mapped, c.memo)
    if buf in c.vector_regs: return UOp(Ops.INDEX, c.vector_regs[buf].dtype, (c.vector_regs[buf], c.b.divided(base, v)))
    # a gate stays a scalar when it doesn't vary (the whole vector or nothing), else a lane mask
    gate = tuple(c.lane[g] if g in loop.varying else c.outside(g) for g in u.src[2:])
    return UOp(Ops.INDEX, u.dtype, (c.outside(buf), base) + gate)

def _expand_load(c: _Chunk, u: UOp) -> UOp:
    index, v = u.src[0], c.loop.lanes
    if index in c.loop.strided:   # a gather: scalar loads, then one vector of them
        gathered = UOp(Ops.VECTORIZE, u.dtype.vec(v), tuple(UOp(Ops.LOAD, u.dtype, (address,) + c.load_deps(u)) for address in c.lane[index]))
        if index not in c.gates: return gathered
        gate = c.gates[index] if c.gates[index].dtype.count > 1 else UOp(Ops.VECTORIZE, dtypes.bool.vec(v), (c.gates[index],) * v)
        return UOp(Ops.WHERE, u.dtype.vec(v), (gate, gathered, UOp(Ops.VECTORIZE, u.dtype.vec(v), (UOp.const(u.dtype, 0),) * v)))
    if index in c.loop.varying: return UOp(Ops.LOAD, u.dtype.vec(v), (c.lane[index],) + c.load_deps(u))
    # a broadcast load: the scalar load, then the broadcast
    return UOp(Ops.VECTORIZE, u.dtype.vec(v), (UOp(Ops.LOAD, u.dtype, (c.outside(index),) + c.load_deps(u)),) * v)

def _expand_store(c: _Chunk, u: UOp) -> list[UOp]:
    value = c.operand(u.src[1])
    if u.src[0] in c.loop.strided:   # a scatter: one scalar store per lane
        return [UOp(Ops.STORE, dtypes.void, (address, UOp(Ops.GEP, value.dtype.scalar(), (value,), (i,))) + c.deps(u, 2))
                for i, address in enumerate(c.lane[u.src[0]])]
    return [UOp(Ops.STORE, dtypes.void, (c.lane[u.src[0]], value) + c.deps(u, 2))]

def _expand_value(c: _Chunk, u: UOp) -> UOp:
    """ALU ops, CAST and BITCAST work lane-wise. An ALU op on constant lanes only (a PADTO mask: lane numbers
    compared with the row length) folds to constant lanes: left as code it would be computed once outside the
    loops, and under OpenMP such a value reaches the threads' function as a shared variable that gcc can no longer
    fold (a max-pool gradient's masked gathers, 1.0 -> 2.7 ms)."""
    operands = tuple(c.operand(s) for s in u.src)
    if u.op in GroupOp.ALU and all(x.op is Ops.VECTORIZE and all(lane.op is Ops.CONST for lane in x.src) for x in operands):
        lanes = exec_alu(u.op, u.dtype.vec(c.loop.lanes), tuple(tuple(lane.arg for lane in x.src) for x in operands))
        return UOp(Ops.VECTORIZE, u.dtype.vec(c.loop.lanes), tuple(UOp.const(u.dtype, value) for value in lanes))
    return UOp(u.op, u.dtype.vec(c.loop.lanes), operands)

# how each node of a vectorized loop's body becomes vector nodes (index math has none: INDEX rebuilds it per lane)
EXPANSIONS = {Ops.INDEX: _expand_index, Ops.LOAD: _expand_load, Ops.STORE: _expand_store}

def _rewrite_loop(loop: _Loop, mapped: dict[UOp, UOp], vector_regs: dict[UOp, UOp]) -> None:
    """Expand ``loop``'s body chunk by chunk (W/V chunks of V lanes); ``loop.stores`` gets each STORE's vector (or
    per-lane) stores, which the loop's collectors take instead."""
    index_math = _IndexMath(loop)
    loop.stores = {u: [] for u in loop.body if u.op is Ops.STORE}
    for number in range(loop.rng.src[0].arg // loop.lanes):
        chunk = _Chunk(loop, number, index_math, mapped, vector_regs)
        for u in loop.body:
            if u in loop.index_math: continue
            made = EXPANSIONS.get(u.op, _expand_value)(chunk, u)
            if u.op is Ops.STORE: loop.stores[u].extend(made)
            else: chunk.lane[u] = made
