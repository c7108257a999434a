"""LLVM IR renderer: the linear program (docs/linear_uops.md) as one LLVM IR function.

Each uop becomes at most a few SSA instructions; constants are inlined as literals. Loops are a header
block (a phi for the counter and the trip test), the body, and a latch that increments the counter.
Accumulators (DEFINE_REG) are ``alloca``s in the entry block, which LLVM's SROA turns into registers.

Semantics follow the C renderer (renderer/cstyle.py), which follows ``exec_alu``:

- Integer division and modulo never trap: the divisor is replaced by 1 where it is 0 or where
  ``MIN / -1`` would overflow, and the quotient by 0 is masked to 0 (``render_int_division`` in C).
- Gated loads read element 0 (which every buffer has) where the gate is off and select 0, so they stay
  branch-free and vectorizable; gated stores branch around the store.
- Float math carries no fast-math flag. ``contract`` would let LLVM fuse a multiply and an add wherever it
  likes (the C renderer's gcc runs with ``-ffp-contract=off`` for the same reason): fused multiply-adds come only
  from MULACC, which the IR writes where a sum of products wants one (``codegen/lowering.py``), rendered as
  ``llvm.fma``. ``nnan``/``ninf`` would let LLVM assume away the inf/NaN results fusegrad
  defines, ``reassoc`` would fold the ``(x + 2^23) - 2^23`` rounding tricks of the transcendental
  polynomials, and ``arcp`` would change division results; none of them is set.
- bool values are ``i1`` in registers and one byte (0/1) in memory, as numpy stores them.
"""
from __future__ import annotations
import math, struct
from fusegrad.dtype import DType, PtrDType, dtypes
from fusegrad.uop.ops import UOp, Ops, GroupOp, AxisType
from fusegrad.renderer import Renderer

LLVM_TYPES: dict[DType, str] = {
    dtypes.bool: "i1", dtypes.int8: "i8", dtypes.uint8: "i8", dtypes.int16: "i16", dtypes.uint16: "i16",
    dtypes.int32: "i32", dtypes.uint32: "i32", dtypes.int64: "i64", dtypes.uint64: "i64",
    dtypes.float16: "half", dtypes.float32: "float", dtypes.float64: "double", dtypes.void: "void"}


def llvm_type(dtype: DType) -> str:
    """The LLVM type of a register value of ``dtype`` (pointers are opaque ``ptr``)."""
    if isinstance(dtype, PtrDType): return "ptr"
    if dtype.count > 1: return f"<{dtype.count} x {llvm_type(dtype.scalar())}>"
    if dtype not in LLVM_TYPES: raise NotImplementedError(f"the LLVM renderer can't render dtype {dtype}")
    return LLVM_TYPES[dtype]

def memory_type(dtype: DType) -> str:
    """The LLVM type of ``dtype`` in memory: bool is a byte there (bool vectors are lane masks, never stored)."""
    if dtype.scalar() == dtypes.bool and dtype.count > 1: raise NotImplementedError("the LLVM renderer keeps bool vectors in registers only")
    return "i8" if dtype == dtypes.bool else llvm_type(dtype)

def _type_suffix(dtype: DType) -> str:
    """The type in an overloaded intrinsic's name: f32, i32, ..."""
    return {dtypes.float16: "f16", dtypes.float32: "f32", dtypes.float64: "f64"}.get(dtype, llvm_type(dtype))

def llvm_const(value, dtype: DType) -> str:
    """A literal of ``dtype`` (a vector dtype: every lane ``value``, or the lanes of a tuple). Floats are written as the hex bits of the equal double (LLVM's exact form);
    half as ``0xH`` and its 16 bits; integers in their signed two's-complement value."""
    if dtype.count > 1:
        scalar = dtype.scalar()
        if not isinstance(value, tuple): return f"splat ({llvm_type(scalar)} {llvm_const(value, scalar)})"
        return "<" + ", ".join(f"{llvm_type(scalar)} {llvm_const(v, scalar)}" for v in value) + ">"
    if dtype == dtypes.bool: return "true" if value else "false"
    if dtypes.is_float(dtype):
        if dtype == dtypes.float16: return "0xH" + struct.pack(">e", float(value)).hex().upper()
        if dtype == dtypes.float32 and math.isfinite(value): value = struct.unpack("f", struct.pack("f", float(value)))[0]
        return "0x" + struct.pack(">d", float(value)).hex().upper()
    bits = dtype.itemsize * 8
    value = int(value) & ((1 << bits) - 1)
    return str(value - (1 << bits) if value >= 1 << (bits - 1) else value)

_INTRINSICS = {Ops.EXP2: "exp2", Ops.LOG2: "log2", Ops.SIN: "sin", Ops.COS: "cos", Ops.SQRT: "sqrt", Ops.POW: "pow"}
_INT_BINARY = {Ops.ADD: "add", Ops.SUB: "sub", Ops.MUL: "mul", Ops.AND: "and", Ops.OR: "or", Ops.XOR: "xor", Ops.SHL: "shl"}
_FLOAT_BINARY = {Ops.ADD: "fadd", Ops.SUB: "fsub", Ops.MUL: "fmul", Ops.FDIV: "fdiv"}
_BOOL_BINARY = {Ops.ADD: "or", Ops.MUL: "and", Ops.MAX: "or", Ops.AND: "and", Ops.OR: "or", Ops.XOR: "xor", Ops.SUB: "xor"}

class LLVMRenderer(Renderer):
    """LLVM IR for the CPU, compiled in-process by llvmlite (runtime/ops_llvm.py).

    Vector code as on the CPU's C: innermost UPCAST loops become vector uops (codegen/vectorize.py), rendered
    as LLVM vector types; lane-masked loads and stores are ``llvm.masked.load``/``store``. (Left to LLVM's own
    loop vectorizer instead, reductions stay scalar: without ``reassoc`` it can't reorder float sums.)
    THREAD ranges run without OpenMP: a threaded kernel takes two more arguments, ``core`` and ``cores``, runs its
    THREAD loop's ``core``-th contiguous share of iterations, and exports ``@<name>.threaded``; the runtime calls it
    once per core at the same time (runtime/ops_llvm.py). No tensor cores.
    """
    device = "LLVM"
    has_local = False
    has_shared = False
    has_threads = True
    tensor_cores = []
    vector_loops = True              # vector uops (codegen/vectorize.py) render as LLVM vector types
    native_transcendentals = False   # the polynomials vectorize; libm calls don't
    STACK_LIMIT = 64 * 1024          # staged copies larger than this live on the heap (threads' stacks are small)

    def render(self, name: str, uops: list[UOp]) -> str:
        return _FunctionWriter(self, uops).write(name)

class _FunctionWriter:
    """Walks one kernel's linear program and collects the lines of its LLVM function."""
    def __init__(self, renderer: LLVMRenderer, uops: list[UOp]):
        self.renderer, self.uops = renderer, uops
        self.value: dict[UOp, str] = {}          # uop -> its operand text (a %name or a literal)
        self.lines: list[str] = []               # the body, after the entry block's allocas
        self.allocas: list[str] = []             # entry-block stack slots (registers and small staged copies)
        self.cleanup: list[str] = []             # calls that free heap staged copies before returning
        self.declarations: set[str] = set()      # intrinsics and libc functions the kernel calls
        self.block = "entry"                     # the label of the block being written (phis need it)
        self.counter = 0
        self.metadata_nodes: list[str] = []      # module-level metadata (loop unroll hints)

    # ---------------------------------------------------------------- small helpers
    def fresh(self, prefix: str = "v") -> str:
        self.counter += 1
        return f"%{prefix}{self.counter}"
    def emit(self, line: str) -> None: self.lines.append("  " + line)
    def assign(self, text: str, prefix: str = "v") -> str:
        name = self.fresh(prefix)
        self.emit(f"{name} = {text}")
        return name
    def metadata(self, text: str) -> str:
        """A new metadata node ``!N`` holding ``text``, where ``SELF`` stands for the node itself (loop ids)."""
        name = f"!{len(self.metadata_nodes)}"
        self.metadata_nodes.append(f"{name} = " + text.replace("SELF", name))
        return name
    def start_block(self, label: str) -> None:
        self.lines.append(f"{label}:")
        self.block = label

    # ---------------------------------------------------------------- the walk
    def write(self, name: str) -> str:
        buffers, variables = [], []
        for index, u in enumerate(self.uops):
            if u.op is Ops.PARAM:
                self.value[u] = f"%data{u.arg}"
                buffers.append((u.arg, f"ptr noalias %data{u.arg}"))
            elif u.op is Ops.DEFINE_VAR:
                # every variable travels as a 64-bit int and is narrowed to its index type here
                argument = f"%var{len(variables)}"
                variables.append(f"i64 {argument}")
                self.value[u] = argument if u.dtype.itemsize == 8 else self.assign(f"trunc i64 {argument} to {llvm_type(u.dtype)}")
            else: self.render_uop(index, u)
        params = [p for _, p in sorted(buffers)] + variables
        threaded = any(u.op is Ops.RANGE and u.arg[1] is AxisType.THREAD for u in self.uops)
        if threaded: params += ["i64 %core", "i64 %cores"]   # (after the variables: the runtime appends them)
        body = ["entry:"] + ["  " + a for a in self.allocas] + self.lines + ["  " + c for c in self.cleanup] + ["  ret void"]
        declarations = "".join(d + "\n" for d in sorted(self.declarations))
        metadata = "".join(m + "\n" for m in self.metadata_nodes)
        marker = f"@{name}.threaded = constant i8 1\n" if threaded else ""   # (tells the runtime to pass core, cores)
        return f"{declarations}{marker}\ndefine void @{name}({', '.join(params)}) nounwind {{\n" + "\n".join(body) + "\n}\n" + metadata

    def render_uop(self, index: int, u: UOp) -> None:
        op = u.op
        if op is Ops.CONST: self.value[u] = llvm_const(u.arg, u.dtype)
        elif op is Ops.VECTORIZE: self.value[u] = self.vectorize(u)
        elif op is Ops.GEP: self.value[u] = self.gep(u)
        elif op is Ops.DEFINE_REG:   # an array of scalars, or of vectors (vector accumulators)
            self.value[u] = f"%acc{u.arg}_{index}"
            self.allocas.append(f"{self.value[u]} = alloca [{u.dtype.size} x {memory_type(u.dtype.base)}], align 64")
        elif op is Ops.DEFINE_LOCAL: self.define_local(index, u)
        elif op is Ops.RANGE: self.open_loop(index, u)
        elif op is Ops.END: self.close_loop(u.src[0])
        elif op is Ops.IF:
            self.emit(f"br i1 {self.value[u.src[0]]}, label %if_then{index}, label %if_end{index}")
            self.value[u] = f"if_end{index}"
            self.start_block(f"if_then{index}")
        elif op is Ops.ENDIF:
            self.emit(f"br label %{self.value[u.src[0]]}")
            self.start_block(self.value[u.src[0]])
        elif op is Ops.INDEX: pass   # addresses are computed at the LOAD / STORE that uses them
        elif op is Ops.LOAD: self.load(u)
        elif op is Ops.STORE: self.store(index, u)
        elif op is Ops.BARRIER: pass   # one thread per kernel on the CPU: nothing to wait for
        elif op is Ops.CAST and isinstance(u.dtype, PtrDType): self.value[u] = self.value[u.src[0]]
        elif op is Ops.CAST: self.value[u] = self.cast(self.value[u.src[0]], u.src[0].dtype, u.dtype)
        elif op is Ops.BITCAST:
            self.value[u] = self.assign(f"bitcast {llvm_type(u.src[0].dtype)} {self.value[u.src[0]]} to {llvm_type(u.dtype)}")
        elif op in GroupOp.ALU: self.value[u] = self.alu(u)
        else: raise NotImplementedError(f"the LLVM renderer can't render {op} (it has no launch indices or tensor cores)")

    # ---------------------------------------------------------------- vectors
    def vectorize(self, u: UOp) -> str:
        """A vector from scalars: a constant vector when every lane is constant, a splat when all lanes are one
        value, else a chain of ``insertelement``."""
        scalar, kind = llvm_type(u.dtype.scalar()), llvm_type(u.dtype)
        if all(x.op is Ops.CONST for x in u.src): return llvm_const(tuple(x.arg for x in u.src), u.dtype)
        lanes = [self.value[x] for x in u.src]
        if all(lane == lanes[0] for lane in lanes): return self.splat(lanes[0], scalar, u.dtype.count)
        vector = "poison"
        for i, lane in enumerate(lanes): vector = self.assign(f"insertelement {kind} {vector}, {scalar} {lane}, i32 {i}")
        return vector

    def splat(self, value: str, scalar: str, lanes: int) -> str:
        """``value`` (of LLVM type ``scalar``) in every lane of a vector."""
        first = self.assign(f"insertelement <1 x {scalar}> poison, {scalar} {value}, i32 0")
        return self.assign(f"shufflevector <1 x {scalar}> {first}, <1 x {scalar}> poison, <{lanes} x i32> zeroinitializer")

    def gep(self, u: UOp) -> str:
        """Lanes of a vector: one lane is ``extractelement``, several a ``shufflevector``."""
        source = llvm_type(u.src[0].dtype)
        if len(u.arg) == 1: return self.assign(f"extractelement {source} {self.value[u.src[0]]}, i32 {u.arg[0]}")
        mask = ", ".join(f"i32 {i}" for i in u.arg)
        return self.assign(f"shufflevector {source} {self.value[u.src[0]]}, {source} poison, <{len(u.arg)} x i32> <{mask}>")

    def lane_mask(self, gate: UOp, lanes: int) -> str:
        """The gate as a ``<lanes x i1>`` mask (a scalar gate is splatted)."""
        return self.value[gate] if gate.dtype.count > 1 else self.splat(self.value[gate], "i1", lanes)

    def masked_intrinsic(self, name: str, dtype: DType) -> str:
        """Declares ``llvm.masked.load``/``store`` for ``dtype`` (the signature with an alignment argument,
        which LLVM 22 still reads and upgrades) and returns its name."""
        kind, suffix = llvm_type(dtype), f"v{dtype.count}{_type_suffix(dtype.scalar())}"
        if name == "load": self.declarations.add(f"declare {kind} @llvm.masked.load.{suffix}.p0(ptr, i32, <{dtype.count} x i1>, {kind})")
        else: self.declarations.add(f"declare void @llvm.masked.store.{suffix}.p0({kind}, ptr, i32, <{dtype.count} x i1>)")
        return f"@llvm.masked.{name}.{suffix}.p0"

    # ---------------------------------------------------------------- memory
    def define_local(self, index: int, u: UOp) -> None:
        """A staged copy (OptOps.STAGE): on the stack when small, else on the heap, like the C renderer."""
        element, size = memory_type(u.dtype.base), u.dtype.size
        name = f"%local{index}"
        self.value[u] = name
        if size * u.dtype.base.itemsize <= self.renderer.STACK_LIMIT:
            self.allocas.append(f"{name} = alloca [{size} x {element}], align 64")
            return
        self.declarations |= {"declare noalias ptr @malloc(i64)", "declare void @free(ptr)", "declare void @abort() noreturn"}
        self.emit(f"{name} = call ptr @malloc(i64 {size * u.dtype.base.itemsize})")
        # a kernel can't raise: out of memory stops the process rather than computing garbage
        failed = self.assign(f"icmp eq ptr {name}, null")
        self.emit(f"br i1 {failed}, label %oom{index}, label %allocated{index}")
        self.start_block(f"oom{index}")
        self.emit("call void @abort()")
        self.emit("unreachable")
        self.start_block(f"allocated{index}")
        self.cleanup.append(f"call void @free(ptr {name})")

    def address(self, index: UOp, position: str | None = None) -> str:
        """``getelementptr`` to element ``position`` (default: the INDEX's own) of the INDEX's buffer."""
        buffer, offset = index.src[0], index.src[1]
        while buffer.op is Ops.CAST: buffer = buffer.src[0]
        element = memory_type(index.dtype.base if isinstance(index.dtype, PtrDType) else buffer.dtype.base)
        position = self.value[offset] if position is None else position
        return self.assign(f"getelementptr inbounds {element}, ptr {self.value[buffer]}, {llvm_type(offset.dtype)} {position}", "p")

    def load(self, u: UOp) -> None:
        index = u.src[0]
        if index.op is not Ops.INDEX: raise NotImplementedError(f"the LLVM renderer loads through an INDEX, not {index.op}")
        if u.dtype.count > 1 and len(index.src) > 2:   # a masked vector load: masked-off lanes read 0, touch no memory
            mask, pointer, kind = self.lane_mask(index.src[2], u.dtype.count), self.address(index), llvm_type(u.dtype)
            self.value[u] = self.assign(f"call {kind} {self.masked_intrinsic('load', u.dtype)}(ptr {pointer}, "
                                        f"i32 {u.dtype.scalar().itemsize}, <{u.dtype.count} x i1> {mask}, {kind} zeroinitializer)")
            return
        gate = self.value[index.src[2]] if len(index.src) > 2 else None
        offset_type = llvm_type(index.src[1].dtype)
        # where the gate is off, read element 0 (always in bounds) and throw it away: no branch
        position = self.assign(f"select i1 {gate}, {offset_type} {self.value[index.src[1]]}, {offset_type} 0") if gate else None
        pointer = self.address(index, position)
        # (a vector read from a scalar address may start at any element: element alignment only)
        loaded = self.assign(f"load {memory_type(u.dtype)}, ptr {pointer}, align {u.dtype.scalar().itemsize}")
        if u.dtype == dtypes.bool: loaded = self.assign(f"icmp ne i8 {loaded}, 0")
        if gate: loaded = self.assign(f"select i1 {gate}, {llvm_type(u.dtype)} {loaded}, {llvm_type(u.dtype)} {llvm_const(0, u.dtype)}")
        self.value[u] = loaded

    def store(self, index_in_list: int, u: UOp) -> None:
        index, value = u.src[0], u.src[1]
        if index.op is not Ops.INDEX: raise NotImplementedError(f"the LLVM renderer stores through an INDEX, not {index.op}")
        if value.dtype.count > 1 and len(index.src) > 2 and index.src[2].dtype.count > 1:   # lane-masked
            mask, pointer, kind = self.value[index.src[2]], self.address(index), llvm_type(value.dtype)
            self.emit(f"call void {self.masked_intrinsic('store', value.dtype)}({kind} {self.value[value]}, ptr {pointer}, "
                      f"i32 {value.dtype.scalar().itemsize}, <{value.dtype.count} x i1> {mask})")
            return
        gated = len(index.src) > 2
        if gated:
            self.emit(f"br i1 {self.value[index.src[2]]}, label %store{index_in_list}, label %stored{index_in_list}")
            self.start_block(f"store{index_in_list}")
        stored = self.value[value]
        if value.dtype == dtypes.bool: stored = self.assign(f"zext i1 {stored} to i8")
        pointer = self.address(index)
        self.emit(f"store {memory_type(value.dtype)} {stored}, ptr {pointer}, align {value.dtype.scalar().itemsize}")
        if gated:
            self.emit(f"br label %stored{index_in_list}")
            self.start_block(f"stored{index_in_list}")

    # ---------------------------------------------------------------- loops
    def open_loop(self, index: int, u: UOp) -> None:
        """``for (r = 0; r < bound; r++)``: the header tests the trip count before the first iteration
        (a symbolic bound may be 0). The phi's back edge comes from the latch that ``close_loop`` writes."""
        kind, counter, bound = llvm_type(u.dtype), f"%ridx{index}", self.value[u.src[0]]
        first = "0"
        if u.arg[1] is AxisType.THREAD: first, bound = self.thread_share(kind, bound)
        self.value[u] = counter
        self.emit(f"br label %loop{index}")
        entered_from = self.block
        self.start_block(f"loop{index}")
        self.emit(f"{counter} = phi {kind} [{first}, %{entered_from}], [{counter}_next, %latch{index}]")
        self.emit(f"{counter}_more = icmp slt {kind} {counter}, {bound}")
        self.emit(f"br i1 {counter}_more, label %body{index}, label %exit{index}")
        self.start_block(f"body{index}")

    def thread_share(self, kind: str, bound: str) -> tuple[str, str]:
        """(first, end) of this call's share of a THREAD loop of ``bound`` iterations: contiguous blocks of
        ceil(bound / cores), the last one shorter (or empty)."""
        core, cores = "%core", "%cores"
        if kind != "i64": core, cores = self.assign(f"trunc i64 %core to {kind}"), self.assign(f"trunc i64 %cores to {kind}")
        spare = self.assign(f"sub {kind} {cores}, 1")
        rounded_up = self.assign(f"add {kind} {bound}, {spare}")
        chunk = self.assign(f"sdiv {kind} {rounded_up}, {cores}")
        first = self.assign(f"mul {kind} {core}, {chunk}")
        end = self.assign(f"add {kind} {first}, {chunk}")
        inside = self.assign(f"icmp slt {kind} {end}, {bound}")
        return first, self.assign(f"select i1 {inside}, {kind} {end}, {kind} {bound}")

    def close_loop(self, loop: UOp) -> None:
        counter = self.value[loop]
        index = int(counter[len("%ridx"):])
        self.emit(f"br label %latch{index}")
        self.start_block(f"latch{index}")
        self.emit(f"{counter}_next = add nuw nsw {llvm_type(loop.dtype)} {counter}, 1")
        # UPCAST/UNROLL loops are register tiles: fully unrolled, their accumulators become registers (LLVM's
        # own threshold unrolled an 8-row matmul tile only by 2, which left the tile in memory: 30 vs 55 GFLOPS)
        unroll = ""
        if loop.arg[1] in (AxisType.UPCAST, AxisType.UNROLL):
            hint = self.metadata('!{!"llvm.loop.unroll.full"}')
            unroll = ", !llvm.loop " + self.metadata("distinct !{SELF, " + hint + "}")
        self.emit(f"br label %loop{index}{unroll}")
        self.start_block(f"exit{index}")

    # ---------------------------------------------------------------- conversions
    def cast(self, x: str, source: DType, target: DType) -> str:
        """C conversion semantics: float→int truncates, to bool means ``!= 0``, from bool gives 0/1."""
        s_type, t_type = llvm_type(source), llvm_type(target)
        if target.scalar() == dtypes.bool:
            if dtypes.is_float(source): return self.assign(f"fcmp une {s_type} {x}, {llvm_const(0, source)}")
            return self.assign(f"icmp ne {s_type} {x}, {llvm_const(0, source)}") if source.scalar() != dtypes.bool else x
        if source.scalar() == dtypes.bool:
            return self.assign(f"{'uitofp' if dtypes.is_float(target) else 'zext'} {s_type} {x} to {t_type}")
        if dtypes.is_float(source) and dtypes.is_float(target):
            if source.itemsize == target.itemsize: return x
            return self.assign(f"{'fpext' if target.itemsize > source.itemsize else 'fptrunc'} {s_type} {x} to {t_type}")
        if dtypes.is_float(source):
            # out-of-range conversions are poison in LLVM (undefined in C); freeze pins them to some value
            # instead of letting the optimizer reason from them
            converted = self.assign(f"{'fptoui' if dtypes.is_unsigned(target) else 'fptosi'} {s_type} {x} to {t_type}")
            return self.assign(f"freeze {t_type} {converted}")
        if dtypes.is_float(target): return self.assign(f"{'uitofp' if dtypes.is_unsigned(source) else 'sitofp'} {s_type} {x} to {t_type}")
        if source.itemsize == target.itemsize: return x
        if target.itemsize < source.itemsize: return self.assign(f"trunc {s_type} {x} to {t_type}")
        return self.assign(f"{'zext' if dtypes.is_unsigned(source) else 'sext'} {s_type} {x} to {t_type}")

    # ---------------------------------------------------------------- ALU
    def intrinsic(self, name: str, dtype: DType, args: list[str]) -> str:
        suffix = (f"v{dtype.count}" if dtype.count > 1 else "") + _type_suffix(dtype.scalar())
        kind = llvm_type(dtype)
        self.declarations.add(f"declare {kind} @llvm.{name}.{suffix}({', '.join([kind] * len(args))})")
        return self.assign(f"call {kind} @llvm.{name}.{suffix}({', '.join(f'{kind} {a}' for a in args)})")

    def alu(self, u: UOp) -> str:
        op, dtype = u.op, u.dtype
        operand_dtype = u.src[-1].dtype if op is Ops.WHERE else u.src[0].dtype
        s = [self.value[x] for x in u.src]
        kind = llvm_type(operand_dtype)
        is_float, unsigned = dtypes.is_float(operand_dtype), dtypes.is_unsigned(operand_dtype)
        mask = llvm_type(dtypes.bool.vec(operand_dtype.count) if operand_dtype.count > 1 else dtypes.bool)   # the type of compares
        if op is Ops.WHERE: return self.assign(f"select {llvm_type(u.src[0].dtype)} {s[0]}, {kind} {s[1]}, {kind} {s[2]}")
        if op in GroupOp.Comparison:
            if is_float: predicate = {Ops.CMPLT: "olt", Ops.CMPNE: "une", Ops.CMPEQ: "oeq"}[op]
            else: predicate = {Ops.CMPLT: "ult" if unsigned or operand_dtype == dtypes.bool else "slt", Ops.CMPNE: "ne", Ops.CMPEQ: "eq"}[op]
            return self.assign(f"{'fcmp' if is_float else 'icmp'} {predicate} {kind} {s[0]}, {s[1]}")
        if operand_dtype.scalar() == dtypes.bool:
            if op is Ops.NEG: return self.assign(f"xor {kind} {s[0]}, {llvm_const(True, operand_dtype)}")
            if op in _BOOL_BINARY: return self.assign(f"{_BOOL_BINARY[op]} {kind} {s[0]}, {s[1]}")
            raise NotImplementedError(f"the LLVM renderer can't render {op} on bool")
        if is_float: return self.float_alu(u, s, kind, mask)
        if op in _INT_BINARY: return self.assign(f"{_INT_BINARY[op]} {kind} {s[0]}, {self.shift_amount(u, s)}")
        if op is Ops.SHR: return self.assign(f"{'lshr' if unsigned else 'ashr'} {kind} {s[0]}, {self.shift_amount(u, s)}")
        if op is Ops.NEG: return self.assign(f"sub {kind} {llvm_const(0, operand_dtype)}, {s[0]}")
        if op is Ops.TRUNC: return s[0]
        if op is Ops.MAX:
            greater = self.assign(f"icmp {'ugt' if unsigned else 'sgt'} {kind} {s[0]}, {s[1]}")
            return self.assign(f"select {mask} {greater}, {kind} {s[0]}, {kind} {s[1]}")
        if op is Ops.MULACC:
            product = self.assign(f"mul {kind} {s[0]}, {s[1]}")
            return self.assign(f"add {kind} {product}, {s[2]}")
        if op in (Ops.IDIV, Ops.MOD): return self.int_division(u, s, kind, mask, unsigned)
        raise NotImplementedError(f"the LLVM renderer can't render {op} on {operand_dtype}")

    def shift_amount(self, u: UOp, s: list[str]) -> str:
        """The second operand, converted to the first's type for shifts (C allows mixed widths there)."""
        if u.op not in (Ops.SHL, Ops.SHR) or u.src[1].dtype == u.src[0].dtype: return s[1]
        return self.cast(s[1], u.src[1].dtype, u.src[0].dtype)

    def float_alu(self, u: UOp, s: list[str], kind: str, mask: str) -> str:
        op, dtype = u.op, u.dtype
        if op in _FLOAT_BINARY: return self.assign(f"{_FLOAT_BINARY[op]} {kind} {s[0]}, {s[1]}")
        if op is Ops.NEG: return self.assign(f"fneg {kind} {s[0]}")
        if op is Ops.RECIPROCAL: return self.assign(f"fdiv {kind} {llvm_const(1.0, dtype)}, {s[0]}")
        if op is Ops.TRUNC: return self.intrinsic("trunc", dtype, s[:1])
        if op in _INTRINSICS: return self.intrinsic(_INTRINSICS[op], dtype, s)
        if op is Ops.MAX:   # NaN if either is NaN, as C's (a > b) | (a != a) ? a : b
            greater = self.assign(f"fcmp ogt {kind} {s[0]}, {s[1]}")
            a_nan = self.assign(f"fcmp uno {kind} {s[0]}, {s[0]}")
            pick_a = self.assign(f"or {mask} {greater}, {a_nan}")
            return self.assign(f"select {mask} {pick_a}, {kind} {s[0]}, {kind} {s[1]}")
        if op is Ops.MULACC: return self.intrinsic("fma", dtype, s)
        if op is Ops.MOD: return self.assign(f"frem {kind} {s[0]}, {s[1]}")   # C's fmod
        if op is Ops.IDIV:
            quotient = self.assign(f"fdiv {kind} {s[0]}, {s[1]}")
            return self.intrinsic("trunc", dtype, [quotient])
        raise NotImplementedError(f"the LLVM renderer can't render {op} on {dtype}")

    def int_division(self, u: UOp, s: list[str], kind: str, mask: str, unsigned: bool) -> str:
        """``a / b`` or ``a % b`` that can't trap (see CStyleLanguage.render_int_division for the semantics)."""
        instruction = ("udiv" if unsigned else "sdiv") if u.op is Ops.IDIV else ("urem" if unsigned else "srem")
        divisor, dtype = u.src[1], u.src[0].dtype
        if divisor.op is Ops.CONST and divisor.arg not in (0, -1): return self.assign(f"{instruction} {kind} {s[0]}, {s[1]}")
        if divisor.op is Ops.VECTORIZE and all(x.op is Ops.CONST and x.arg not in (0, -1) for x in divisor.src):
            return self.assign(f"{instruction} {kind} {s[0]}, {s[1]}")
        def const(value) -> str: return llvm_const(value, dtype)
        by_zero = self.assign(f"icmp eq {kind} {s[1]}, {const(0)}")
        trap = by_zero
        if not unsigned:
            minus_one = self.assign(f"icmp eq {kind} {s[1]}, {const(-1)}")
            minimum = self.assign(f"icmp eq {kind} {s[0]}, {const(dtypes.min(dtype.scalar()))}")
            overflow = self.assign(f"and {mask} {minus_one}, {minimum}")
            trap = self.assign(f"or {mask} {by_zero}, {overflow}")
        safe_divisor = self.assign(f"select {mask} {trap}, {kind} {const(1)}, {kind} {s[1]}")
        result = self.assign(f"{instruction} {kind} {s[0]}, {safe_divisor}")
        if u.op is Ops.MOD: return result
        return self.assign(f"select {mask} {by_zero}, {kind} {const(0)}, {kind} {result}")
