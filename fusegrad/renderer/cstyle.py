"""C-style renderers: one base that walks the linear program, small subclasses per language.

``CStyleLanguage.render`` turns each linear UOp into a C expression or statement through a rule
table (``rules``: op -> the method that renders it), which a dialect adapts by overriding methods. A
value used once is inlined into its user; loads and values used several times get a named variable.
Loops are ``for`` statements, gated stores are ``if`` statements, gated loads are ternaries.
"""
from __future__ import annotations
import math, struct
from collections import Counter
from dataclasses import dataclass, field
from fusegrad.dtype import DType, PtrDType, dtypes
from fusegrad.uop.ops import UOp, Ops, GroupOp, AxisType
from fusegrad.renderer import Renderer, TensorCore

class CStyleLanguage(Renderer):
    kernel_prefix = "void "
    buffer_prefix = ""
    arg_int_prefix = "const int"
    type_map: dict[DType, str] = {
        dtypes.bool: "bool", dtypes.int8: "signed char", dtypes.uint8: "unsigned char", dtypes.int16: "short",
        dtypes.uint16: "unsigned short", dtypes.int32: "int", dtypes.uint32: "unsigned int", dtypes.int64: "long long",
        dtypes.uint64: "unsigned long long", dtypes.float16: "_Float16", dtypes.float32: "float", dtypes.float64: "double",
        dtypes.void: "void"}
    header = "#include <math.h>\n#include <stdbool.h>\n"

    # ---------------------------------------------------------------- types and constants
    def render_dtype(self, dtype: DType) -> str:
        if isinstance(dtype, PtrDType): return self.render_dtype(dtype.base) + "*"
        if dtype.count > 1: return f"{self.type_map[dtype.scalar()].replace(' ', '_')}{dtype.count}"
        if dtype not in self.type_map: raise NotImplementedError(f"{type(self).__name__} can't render dtype {dtype}")
        return self.type_map[dtype]

    def render_const(self, value, dtype: DType) -> str:
        if dtype == dtypes.bool: return "1" if value else "0"
        if dtypes.is_float(dtype):
            suffix = {dtypes.float64: ""}.get(dtype, "f")
            if math.isnan(value): text = f"__builtin_nan{suffix}(\"\")"
            elif math.isinf(value): text = ("-" if value < 0 else "") + f"__builtin_inf{suffix}()"
            else: text = f"{float(value)!r}{suffix}"
            if dtype == dtypes.float16: return f"(({self.render_dtype(dtype)}){text})"
            return f"({text})" if text.startswith("-") else text
        suffix = {dtypes.int64: "ll", dtypes.uint64: "ull", dtypes.uint32: "u"}.get(dtype, "")
        if dtype == dtypes.int32 and value == -2**31: return "(-2147483647-1)"
        if dtype == dtypes.int64 and value == -2**63: return "(-9223372036854775807ll-1)"
        text = f"{value}{suffix}"
        if dtype in (dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16): text = f"(({self.render_dtype(dtype)}){value})"
        return f"({text})" if value < 0 else text

    # ---------------------------------------------------------------- ALU
    def math_function(self, name: str, dtype: DType, *args: str) -> str:
        """C's ``name`` on ``args``: the double function, the float one, or (half, bfloat16) the float one on each
        argument widened, its result narrowed."""
        if dtype == dtypes.float64: return f"{name}({', '.join(args)})"
        if dtype == dtypes.float32: return f"{name}f({', '.join(args)})"
        return f"(({self.render_dtype(dtype)}){name}f({', '.join(f'(float)({x})' for x in args)}))"

    def render_alu(self, u: UOp, s: list[str]) -> str:
        op, dtype = u.op, u.dtype
        src_dtype = u.src[0].dtype
        if dtype.count > 1: return self.render_vector_alu(u, s)
        if op is Ops.EXP2: return self.math_function("exp2", dtype, s[0])
        if op is Ops.LOG2: return self.math_function("log2", dtype, s[0])
        if op is Ops.SIN: return self.math_function("sin", dtype, s[0])
        if op is Ops.COS: return self.math_function("cos", dtype, s[0])
        if op is Ops.SQRT: return self.math_function("sqrt", dtype, s[0])
        if op is Ops.TRUNC: return self.math_function("trunc", dtype, s[0]) if dtypes.is_float(dtype) else s[0]
        if op is Ops.RECIPROCAL: return f"({self.render_const(1.0, dtype)}/{s[0]})"
        if op is Ops.NEG: return f"(!{s[0]})" if dtype == dtypes.bool else f"(-{s[0]})"
        if op is Ops.POW: return self.math_function("pow", dtype, s[0], s[1]) if dtype != dtypes.float16 else \
            f"(({self.render_dtype(dtype)})powf((float){s[0]}, (float){s[1]}))"
        infix = {Ops.ADD: "+", Ops.SUB: "-", Ops.MUL: "*", Ops.FDIV: "/", Ops.CMPLT: "<", Ops.CMPNE: "!=", Ops.CMPEQ: "==",
                 Ops.AND: "&", Ops.OR: "|", Ops.XOR: "^", Ops.SHL: "<<", Ops.SHR: ">>"}
        if op in infix: return f"({s[0]}{infix[op]}{s[1]})"
        if op in (Ops.IDIV, Ops.MOD):
            if dtypes.is_float(src_dtype): return self.math_function("fmod", dtype, s[0], s[1])
            return self.render_int_division(u, s[0], s[1])
        if op is Ops.MAX:
            if dtypes.is_float(dtype): return f"((({s[0]}>{s[1]})|({s[0]}!={s[0]}))?{s[0]}:{s[1]})"
            return f"(({s[0]}>{s[1]})?{s[0]}:{s[1]})"
        if op is Ops.WHERE: return f"({s[0]}?{s[1]}:{s[2]})"
        if op is Ops.MULACC:   # a fused multiply-add where the IR asks for one (codegen/lowering.py), never elsewhere
            if dtypes.is_float(dtype): return self.math_function("fma", dtype, s[0], s[1], s[2])
            return f"(({s[0]}*{s[1]})+{s[2]})"
        raise NotImplementedError(f"{type(self).__name__} can't render {op}")

    def render_int_division(self, u: UOp, a: str, b: str) -> str:
        """Integer ``a / b`` or ``a % b`` that can't trap. C leaves ``x / 0`` and ``MIN / -1``
        undefined and x86 raises SIGFPE for both, which would kill the process. fusegrad defines
        them as numpy does: ``x / 0 == x % 0 == 0``, ``MIN / -1 == MIN`` (two's complement wrap) and
        ``MIN % -1 == 0`` (same as exec_alu and the PYTHON device). Both cases divide by 1 instead
        (a select, so no branch), which already gives MIN for MIN / -1 and 0 for every ``% 1``; the
        quotient by zero is then masked to 0. A constant divisor other than 0 and -1 needs no guard,
        so division by constants stays plain (and vectorizes)."""
        divisor, dtype, symbol = u.src[1], u.src[0].dtype, "/" if u.op is Ops.IDIV else "%"
        if divisor.op is Ops.CONST and divisor.arg not in (0, -1): return f"({a}{symbol}{b})"
        trap = f"({b}==0)"
        if not dtypes.is_unsigned(dtype):
            trap = f"({trap}|(({b}==-1)&({a}=={self.render_const(dtypes.min(dtype), dtype)})))"
        result = f"({a}{symbol}({trap}?1:{b}))"
        return f"({result}&-({b}!=0))" if u.op is Ops.IDIV else result

    # ---------------------------------------------------------------- vectors (gcc vector extensions)
    # A vector of V 32-bit lanes is ``float8``-style typedef; bool vectors are the masks (0 / -1 per
    # lane, type int) that vector comparisons give. Loads and stores of V contiguous elements go
    # through an ``_u`` typedef with 4-byte alignment, so any element address is a valid vector address.
    def vector_typedefs(self, uops: list[UOp]) -> str:
        return self.vector_typedefs_for({d for u in uops for d in ((u.dtype.base if isinstance(u.dtype, PtrDType) else u.dtype),) if d.count > 1})

    def vector_typedefs_for(self, used: set[DType]) -> str:
        # every vector width gets its mask type too (selects bitcast through it)
        vecs = sorted(used | {dtypes.bool.vec(d.count) for d in used}, key=lambda d: (d.scalar().name, d.count))
        lines = []
        for d in vecs:
            lanes = "int" if d.scalar() == dtypes.bool else self.type_map[d.scalar()]
            size = d.count * d.scalar().itemsize if d.scalar() != dtypes.bool else d.count * 4
            name = self.render_dtype(d)
            lines.append(f"typedef {lanes} {name} __attribute__((vector_size({size})));")
            if d.scalar() != dtypes.bool:
                lines.append(f"typedef {lanes} {name}_u __attribute__((vector_size({size}), aligned({d.scalar().itemsize})));")
        return "\n".join(lines) + ("\n" if lines else "")

    def _mask_type(self, dtype: DType) -> str: return self.render_dtype(dtypes.bool.vec(dtype.count))

    def masked_access_macros(self, vectors: set[DType]) -> str:
        """``FG_LOAD_float16(p, m)`` / ``FG_STORE_float16(p, m, v)``: load or store the lanes whose mask is
        set; masked-off lanes read 0 and touch no memory (their addresses may be outside the buffer, a
        padded conv's border). AVX-512 has masked loads and stores for this (float lanes); elsewhere,
        and for integer lanes, a loop over the lanes."""
        lines = []
        for dtype in sorted(vectors, key=lambda d: (d.scalar().name, d.count)):
            vec, n = self.render_dtype(dtype), dtype.count
            loop_load = f"({{ {vec} r_ = {{0}}; for (int i_ = 0; i_ < {n}; i_++) if ((m)[i_]) r_[i_] = (p)[i_]; r_; }})"
            loop_store = f"do {{ for (int i_ = 0; i_ < {n}; i_++) if ((m)[i_]) (p)[i_] = (v)[i_]; }} while (0)"
            if dtype.scalar() == dtypes.float32 and n in (4, 8, 16):
                prefix, ints, floats = {16: ("_mm512", "__m512i", "__m512"), 8: ("_mm256", "__m256i", "__m256"), 4: ("_mm", "__m128i", "__m128")}[n]
                mask = f"{prefix}_test_epi32_mask(({ints})(m), ({ints})(m))"
                # gcc: its builtins, which the intrinsics wrap, so the kernel includes no header. immintrin.h takes
                # ~130 ms to parse, more than compiling most kernels, and once per batch of kernels that include it
                bits, width, lanes = "unsigned short" if n == 16 else "unsigned char", n * 32, f"fg_i32x{n}"
                builtin_mask = f"(({bits})__builtin_ia32_ptestmd{width}(({lanes})(m), ({lanes})(m), ({bits})-1))"
                lines += ["#if defined(__AVX512F__) && defined(__AVX512VL__) && defined(__GNUC__) && !defined(__clang__)",
                          f"typedef int {lanes} __attribute__((vector_size({n * 4})));",
                          f"#define FG_LOAD_{vec}(p, m) (({vec})__builtin_ia32_loadups{width}_mask((const float*)(p), ({vec}){{0}}, {builtin_mask}))",
                          f"#define FG_STORE_{vec}(p, m, v) __builtin_ia32_storeups{width}_mask((float*)(p), ({vec})(v), {builtin_mask})",
                          "#elif defined(__AVX512F__) && defined(__AVX512VL__)", "#include <immintrin.h>",
                          f"#define FG_LOAD_{vec}(p, m) (({vec}){prefix}_maskz_loadu_ps({mask}, (p)))",
                          f"#define FG_STORE_{vec}(p, m, v) {prefix}_mask_storeu_ps((p), {mask}, ({floats})(v))", "#else",
                          f"#define FG_LOAD_{vec}(p, m) {loop_load}", f"#define FG_STORE_{vec}(p, m, v) {loop_store}", "#endif"]
            else: lines += [f"#define FG_LOAD_{vec}(p, m) {loop_load}", f"#define FG_STORE_{vec}(p, m, v) {loop_store}"]
        return "\n".join(lines) + ("\n" if lines else "")

    def render_vector_alu(self, u: UOp, s: list[str]) -> str:
        op, dtype = u.op, u.dtype
        def select(m: str, a: str, b: str) -> str:
            if dtype.scalar() == dtypes.bool: return f"(({m}&{a})|(~{m}&{b}))"
            mt = self._mask_type(dtype)
            return f"(({self.render_dtype(dtype)})((({mt})({a})&{m})|(({mt})({b})&~{m})))"
        if op is Ops.WHERE: return select(s[0], s[1], s[2])
        if op is Ops.MAX:
            return select(f"(({s[0]}>{s[1]})|({s[0]}!={s[0]}))" if dtypes.is_float(dtype) else f"({s[0]}>{s[1]})", s[0], s[1])
        if op is Ops.NEG and dtype.scalar() == dtypes.bool: return f"(~{s[0]})"
        if op is Ops.RECIPROCAL: return f"({self.render_const(1.0, dtype.scalar())}/{s[0]})"
        if op is Ops.SQRT:   # C has no vector sqrt: a loop over the lanes, which gcc (-fno-math-errno) makes one vsqrtps
            vec, sqrt = self.render_dtype(dtype), "__builtin_sqrt" if dtype.scalar() == dtypes.float64 else "__builtin_sqrtf"
            # (doubly parenthesized: a statement expression must keep its own parentheses where callers strip a pair)
            return f"(({{ {vec} x_ = {_strip(s[0])}, r_; for (int i_ = 0; i_ < {dtype.count}; i_++) r_[i_] = {sqrt}(x_[i_]); r_; }}))"
        if op is Ops.NEG: return f"(-{s[0]})"
        if op is Ops.MULACC and dtypes.is_float(dtype): return f"(({_strip(vector_fma_loop(self.render_dtype(dtype), dtype, *s))}))"
        if op is Ops.MULACC: return f"(({s[0]}*{s[1]})+{s[2]})"
        infix = {Ops.ADD: "+", Ops.SUB: "-", Ops.MUL: "*", Ops.FDIV: "/", Ops.CMPLT: "<", Ops.CMPNE: "!=", Ops.CMPEQ: "==",
                 Ops.AND: "&", Ops.OR: "|", Ops.XOR: "^", Ops.SHL: "<<", Ops.SHR: ">>", Ops.IDIV: "/", Ops.MOD: "%"}
        if op in infix: return f"({s[0]}{infix[op]}{s[1]})"
        raise NotImplementedError(f"{type(self).__name__} can't render vector {op}")

    def render_vector_cast(self, dtype: DType, x: str, src_dtype: DType) -> str:
        if dtype.scalar() == dtypes.bool: return f"({x}!=0)"
        if src_dtype.scalar() == dtypes.bool: return f"__builtin_convertvector(-({x}), {self.render_dtype(dtype)})"
        return f"__builtin_convertvector({x}, {self.render_dtype(dtype)})"

    def render_cast(self, dtype: DType, x: str, src_dtype: DType) -> str:
        if dtype.count > 1: return self.render_vector_cast(dtype, x, src_dtype)
        if dtype == dtypes.bool and dtypes.is_float(src_dtype): return f"({x}!=0)"
        return f"(({self.render_dtype(dtype)})({x}))"

    def render_bitcast(self, dtype: DType, x: str, src_dtype: DType) -> str:
        if dtype.count > 1: return f"(({self.render_dtype(dtype)})({x}))"
        return f"((union {{ {self.render_dtype(src_dtype)} a; {self.render_dtype(dtype)} b; }}){{.a = {x}}}).b"

    # ---------------------------------------------------------------- launch indices (GPU dialects)
    def render_special(self, name: str) -> str: raise NotImplementedError(f"{type(self).__name__} has no launch indices")
    def render_kernel(self, name: str, params: list[str], body: list[str]) -> str:
        return self.header + f"{self.kernel_prefix}{name}({', '.join(params)}) {{\n" + "\n".join(body) + "\n}\n"
    def render_param(self, u: UOp, name: str) -> str:
        return f"{self.buffer_prefix}{self.render_dtype(u.dtype.base)}* restrict {name}"

    # ---------------------------------------------------------------- the walk
    # ``render`` visits the linear program once; each op renders through the rule its entry in ``rules``
    # names (a method taking the walk's state and the uop). A dialect changes how an op renders by
    # overriding that method or by mapping the op to its own; ALU ops, CAST and BITCAST share one rule.
    rules: dict[Ops, str] = {
        Ops.PARAM: "render_param_uop", Ops.DEFINE_VAR: "render_variable", Ops.CONST: "render_const_uop",
        Ops.DEFINE_REG: "render_register", Ops.DEFINE_LOCAL: "render_local_uop", Ops.SPECIAL: "render_special_uop",
        Ops.RANGE: "render_range", Ops.END: "render_end", Ops.INDEX: "render_index", Ops.VECTORIZE: "render_vectorize",
        Ops.LOAD: "render_load", Ops.STORE: "render_store", Ops.GEP: "render_gep", Ops.WMMA: "render_wmma",
        Ops.BARRIER: "render_barrier", Ops.CAST: "render_value", Ops.BITCAST: "render_value",
        **{op: "render_value" for op in GroupOp.ALU}}

    def render(self, name: str, uops: list[UOp]) -> str:
        state = RenderState(uops, count_uses(uops))
        for u in uops:
            if (rule := self.rules.get(u.op)) is None: raise NotImplementedError(f"{type(self).__name__} can't render {u.op}")
            getattr(self, rule)(state, u)
        # buffers in slot order (the runtime passes them that way), then the variables
        body = state.body + ["  " + line for line in state.cleanup]
        typedefs = self.vector_typedefs(uops)
        if typedefs: body = [typedefs.rstrip("\n")] + body
        helpers = "".join(self.tensor_core_helper(tc) for tc in sorted(state.tensor_cores, key=lambda tc: tc.name))
        return self.masked_access_macros(state.masked) + helpers + \
            self.render_kernel(name, [p for _, p in sorted(state.buffer_params)] + state.params, body)

    def render_param_uop(self, state: RenderState, u: UOp) -> None:
        state.expr[u] = f"data{u.arg}"
        state.buffer_params.append((u.arg, self.render_param(u, state.expr[u])))

    def render_variable(self, state: RenderState, u: UOp) -> None:
        # every variable travels as a 64-bit int; the kernel narrows it to its index type
        state.expr[u] = u.arg[0]
        state.params.append(f"const {self.render_dtype(dtypes.int64)} {u.arg[0]}_arg")
        state.emit(f"const {self.render_dtype(u.dtype)} {u.arg[0]} = ({self.render_dtype(u.dtype)}){u.arg[0]}_arg;")

    def render_const_uop(self, state: RenderState, u: UOp) -> None: state.expr[u] = self.render_const(u.arg, u.dtype)

    def render_register(self, state: RenderState, u: UOp) -> None:
        state.expr[u] = f"acc{u.arg}"
        state.emit(f"{self.render_dtype(u.dtype.base)} {state.expr[u]}[{u.dtype.size}];")

    def render_local_uop(self, state: RenderState, u: UOp) -> None:
        state.expr[u] = u.arg
        declaration, release = self.render_local(u.arg, u.dtype.base, u.dtype.size)
        state.emit(declaration)
        if release: state.cleanup.append(release)

    def render_special_uop(self, state: RenderState, u: UOp) -> None:
        state.expr[u] = u.arg
        state.emit(f"{self.render_dtype(u.dtype)} {u.arg} = {self.render_special(u.arg)};")

    def render_range(self, state: RenderState, u: UOp) -> None:
        var = state.expr[u] = f"ridx{u.arg[0]}"
        if u.arg[1] is AxisType.THREAD:
            registers = [state.expr[x] for x in state.uops if x.op is Ops.DEFINE_REG and x in state.expr]
            state.emit(f"#pragma omp parallel for schedule(static){' private(' + ', '.join(registers) + ')' if registers else ''}")
        state.emit(f"for ({self.render_dtype(u.dtype)} {var} = 0; {var} < {state.expr[u.src[0]]}; {var}++) {{")
        state.depth += 1

    def render_end(self, state: RenderState, u: UOp) -> None:
        state.depth -= 1
        state.emit("}")

    def render_index(self, state: RenderState, u: UOp) -> None:
        buf = state.expr[u.src[0]]
        # an element of a register array of vectors
        if u.src[0].dtype.base.count > 1 and u.dtype.base.count == 1: buf = f"(({self.render_dtype(u.dtype.base)}*){buf})"
        state.expr[u] = f"{buf}[{_strip(state.expr[u.src[1]])}]"

    def render_vectorize(self, state: RenderState, u: UOp) -> None:
        lanes = [f"-({state.expr[x]})" if x.dtype == dtypes.bool else state.expr[x] for x in u.src]
        value = f"(({self.render_dtype(u.dtype)}){{{','.join(lanes)}}})"
        if named_vector(state, u): state.declare(self, u, value, "vec")
        else: state.expr[u] = value

    def render_load(self, state: RenderState, u: UOp) -> None:
        index, expr = u.src[0], state.expr
        if u.dtype.count > 1 and index.dtype.base.count == 1:   # V contiguous elements from a scalar address
            vec = self.render_dtype(u.dtype)
            address = f"{expr[index.src[0]]}+{expr[index.src[1]]}"
            value = f"*(({vec}_u*)({address}))"
            if len(index.src) > 2 and index.src[2].dtype.count > 1:   # a lane mask: a masked load
                state.masked.add(u.dtype)
                value = f"FG_LOAD_{vec}(({address}), ({expr[index.src[2]]}))"   # (commas inside arguments stay inside)
            elif len(index.src) > 2: value = f"({expr[index.src[2]]}?{value}:({vec}){{0}})"
        else:
            value = self.render_scalar_load(index, expr)
            if len(index.src) > 2: value = f"({expr[index.src[2]]}?{value}:{self.render_const(0, u.dtype)})"
        state.declare(self, u, value, "val")

    def render_store(self, state: RenderState, u: UOp) -> None:
        index, value, expr = u.src[0], u.src[1], state.expr
        if value.dtype.count > 1 and index.dtype.base.count == 1:   # V contiguous elements to a scalar address
            vec = self.render_dtype(value.dtype)
            address = f"{expr[index.src[0]]}+{expr[index.src[1]]}"
            statement = f"*(({vec}_u*)({address})) = {_strip(expr[value])};"
            if len(index.src) > 2 and index.src[2].dtype.count > 1:
                state.masked.add(value.dtype)
                statement = f"FG_STORE_{vec}(({address}), ({expr[index.src[2]]}), ({expr[value]}));"
                return state.emit(statement)
        else: statement = self.render_scalar_store(index, expr, _strip(expr[value]))
        if len(index.src) > 2: statement = f"if ({_strip(expr[index.src[2]])}) {{ {statement} }}"
        state.emit(statement)

    def render_gep(self, state: RenderState, u: UOp) -> None: state.expr[u] = f"({state.expr[u.src[0]]})[{u.arg[0]}]"

    def render_wmma(self, state: RenderState, u: UOp) -> None:
        state.tensor_cores.add(u.arg)
        state.declare(self, u, f"fg_wmma_{u.arg.name}({', '.join(_strip(state.expr[x]) for x in u.src)})", "wmma")

    def render_barrier(self, state: RenderState, u: UOp) -> None:
        if self.barrier: state.emit(self.barrier)

    def render_value(self, state: RenderState, u: UOp) -> None:
        """ALU ops, CAST and BITCAST: an expression, inlined into its one user or named when used more often."""
        s = [state.expr[x] for x in u.src]
        if u.op is Ops.CAST: value = self.render_cast(u.dtype, s[0], u.src[0].dtype)
        elif u.op is Ops.BITCAST: value = self.render_bitcast(u.dtype, s[0], u.src[0].dtype)
        else: value = self.render_alu(u, s)
        # an expression nested deeper than MAX_INLINE_NEST gets a variable too: inlining a long chain of single-use
        # values into one expression copies the growing string at every step (quadratic), and compilers recurse on it
        nest = 1 + max([state.nest.get(x, 0) for x in u.src], default=0)
        if state.uses[u] > 1 or nest > MAX_INLINE_NEST: state.declare(self, u, _strip(value), "alu" if u.op is not Ops.CAST else "cast")
        else: state.expr[u], state.nest[u] = value, nest

    # (dialects whose element type can't be dereferenced, like OpenCL's storage-only half, override these two)
    def render_scalar_load(self, index: UOp, expr: dict[UOp, str]) -> str:
        """The expression that reads the element INDEX ``index`` points at (``expr`` holds the rendered uops)."""
        return expr[index]
    def render_scalar_store(self, index: UOp, expr: dict[UOp, str], value: str) -> str:
        """The statement that writes ``value`` to the element INDEX ``index`` points at."""
        return f"{expr[index]} = {value};"

    def tensor_core_helper(self, tc) -> str:
        """C source of ``fg_wmma_<name>(a, b_0, .., c)``, a declared tensor core's instruction."""
        raise NotImplementedError(f"{type(self).__name__} declares no tensor core {tc.name}")

    def render_local(self, name: str, dtype: DType, size: int) -> tuple[str, str | None]:
        """The declaration of a DEFINE_LOCAL array, and the statement that releases it (if any).
        GPU dialects set ``smem_prefix`` (__local, __shared__, threadgroup) for workgroup-shared memory."""
        return f"{self.smem_prefix}{self.render_dtype(dtype)} {name}[{size}];", None

    barrier = ""          # the workgroup barrier statement of a GPU dialect
    smem_prefix = ""      # the qualifier of workgroup-shared arrays

# The deepest an inlined value expression may nest before it is named (no hand-written or generated kernel of a
# normal model comes near it; a lazy chain of thousands of elementwise ops does)
MAX_INLINE_NEST = 64

def named_vector(state: "RenderState", u: UOp) -> bool:
    """Does VECTORIZE ``u`` get a variable? When used more than once, unless every lane is a constant: a constant
    vector stays a literal at each use, which the compiler folds (a variable declared outside an OpenMP loop is
    shared with its threads' function, where gcc can no longer see its value)."""
    return state.uses[u] > 1 and not all(x.op is Ops.CONST for x in u.src)

def count_uses(uops: list[UOp]) -> Counter[UOp]:
    """How many times each uop's rendered expression is repeated by its users (a value used more than once
    gets a variable)."""
    uses: Counter[UOp] = Counter()
    for u in uops:
        for i, s in enumerate(u.src):
            # operands that the rendered expression repeats count once per repetition
            if u.dtype.count > 1 and u.op in (Ops.WHERE, Ops.MAX): uses[s] += (2 if u.op is Ops.WHERE else 3) if i == 0 else 2 if u.op is Ops.MAX else 1
            elif u.op in (Ops.IDIV, Ops.MOD) and not dtypes.is_float(s.dtype): uses[s] += 2   # the trap guard repeats them
            else: uses[s] += 2 if u.op is Ops.MAX else 1
    return uses

@dataclass
class RenderState:
    """What the walk over one kernel has produced so far."""
    uops: list[UOp]
    uses: Counter[UOp]
    expr: dict[UOp, str] = field(default_factory=dict)     # each rendered uop's C expression (or variable)
    params: list[str] = field(default_factory=list)        # variables, in list order, after the buffers
    buffer_params: list[tuple[int, str]] = field(default_factory=list)
    body: list[str] = field(default_factory=list)
    depth: int = 1
    counters: Counter[str] = field(default_factory=Counter)
    masked: set[DType] = field(default_factory=set)        # vector dtypes loaded or stored under a lane mask
    cleanup: list[str] = field(default_factory=list)       # statements that end the kernel (freeing heap buffers)
    tensor_cores: set = field(default_factory=set)         # the TensorCores whose helper functions the kernel calls
    nest: dict[UOp, int] = field(default_factory=dict)     # how many inlined ALU ops deep each inlined value's expression is
    def fresh(self, prefix: str) -> str:
        self.counters[prefix] += 1
        return f"{prefix}{self.counters[prefix]-1}"
    def emit(self, line: str) -> None: self.body.append("  " * self.depth + line)
    def declare(self, renderer: CStyleLanguage, u: UOp, value: str, prefix: str) -> None:
        """Name ``value`` in a variable of ``u``'s type."""
        var = self.fresh(prefix)
        self.emit(f"{renderer.render_dtype(u.dtype)} {var} = {value};")
        self.expr[u] = var

def _strip(text: str) -> str:
    """Drop one pair of redundant outer parentheses."""
    if text.startswith("(") and text.endswith(")"):
        depth = 0
        for i, c in enumerate(text):
            depth += 1 if c == "(" else -1 if c == ")" else 0
            if depth == 0 and i != len(text) - 1: return text
        return text[1:-1]
    return text

# The CPU's tensor core: AVX512-BF16's ``vdpbf16ps`` adds, to each of 16 float32 sums, the two products of a
# pair of bfloat16 values (32 multiply-adds per instruction, twice float32's 16 per FMA). As a TensorCore:
# N = 16 columns (one vector of sums), M = 1 row, K = 2 (the pair).
BF16_TENSOR_CORE = TensorCore(dims=(16, 1, 2), dtype_in=dtypes.bfloat16, dtype_out=dtypes.float32, name="bf16_16x1x2")

# Without AVX512-BF16 (another CPU, another compiler) the helper computes the same thing with float32 vectors.
_BF16_HELPER = """typedef unsigned short fg_u16x2 __attribute__((vector_size(4)));
typedef unsigned short fg_u16x16 __attribute__((vector_size(32)));
typedef unsigned short fg_u16x32 __attribute__((vector_size(64)));
typedef unsigned int fg_u32x16 __attribute__((vector_size(64)));
typedef float fg_f32x16 __attribute__((vector_size(64)));
#if defined(__AVX512BF16__) && defined(__AVX512F__) && !defined(FG_NO_BF16_INSTRUCTIONS)
#include <immintrin.h>
static inline fg_f32x16 fg_wmma_bf16_16x1x2(fg_u16x2 a, fg_u16x16 b0, fg_u16x16 b1, fg_f32x16 c) {
  /* vdpbf16ps wants each column's pair side by side: b0[j], b1[j] */
  fg_u16x32 b = __builtin_shufflevector(b0, b1, 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23,
                                        8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
  unsigned int pair;   /* a[0] in the low half, as the instruction pairs them */
  __builtin_memcpy(&pair, &a, 4);
  return (fg_f32x16)_mm512_dpbf16_ps((__m512)c, (__m512bh)_mm512_set1_epi32((int)pair), (__m512bh)b);
}
#else
static inline fg_f32x16 fg_bf16x16_to_float(fg_u16x16 x) { return (fg_f32x16)(__builtin_convertvector(x, fg_u32x16) << 16); }
static inline float fg_bf16_to_float(unsigned short x) { unsigned int bits = (unsigned int)x << 16; float f; __builtin_memcpy(&f, &bits, 4); return f; }
static inline fg_f32x16 fg_wmma_bf16_16x1x2(fg_u16x2 a, fg_u16x16 b0, fg_u16x16 b1, fg_f32x16 c) {
  return (c + fg_bf16_to_float(a[0]) * fg_bf16x16_to_float(b0)) + fg_bf16_to_float(a[1]) * fg_bf16x16_to_float(b1);
}
#endif
"""

def shuffle_sources(u: UOp) -> tuple[UOp, UOp] | None:
    """(first, second) when ``u`` is a VECTORIZE of a power-of-two count of single lanes of at most two vectors of its
    own 32-bit type (second is first when there is one): what the C renderer writes as one ``FG_SHUFFLE``."""
    if u.op is not Ops.VECTORIZE or u.dtype.scalar() not in (dtypes.float32, dtypes.int32, dtypes.uint32): return None
    if u.dtype.count & (u.dtype.count - 1) or not all(x.op is Ops.GEP and len(x.arg) == 1 for x in u.src): return None
    sources = list(dict.fromkeys(x.src[0] for x in u.src))
    if len(sources) > 2 or any(v.dtype != u.dtype for v in sources): return None
    return sources[0], sources[-1]

# FG_SHUFFLE(a, b, int vector type, lanes...): lanes 0..n-1 are a's, n..2n-1 b's. clang (and gcc 12+) have
# __builtin_shufflevector with the lanes as constants; gcc since 4.7 has __builtin_shuffle with them as a vector.
SHUFFLE_MACRO = """#if defined(__clang__)
#define FG_SHUFFLE(a, b, lanes_type, ...) __builtin_shufflevector((a), (b), __VA_ARGS__)
#else
#define FG_SHUFFLE(a, b, lanes_type, ...) __builtin_shuffle((a), (b), (lanes_type){__VA_ARGS__})
#endif
"""

def vector_fma_loop(vec: str, dtype: DType, a: str, b: str, c: str) -> str:
    """``a * b + c`` lane by lane with one rounding (C's fma), as a gcc statement expression: C has no vector fma."""
    fma = "__builtin_fma" if dtype.scalar() == dtypes.float64 else "__builtin_fmaf"
    return f"({{ {vec} a_ = {a}, b_ = {b}, c_ = {c}, r_; for (int i_ = 0; i_ < {dtype.count}; i_++) r_[i_] = {fma}(a_[i_], b_[i_], c_[i_]); r_; }})"

# gcc's builtins for the FMA instructions (what _mm512_fmadd_ps and its kin wrap; the kernel includes no header) and
# the features each needs. The lane loop of vector_fma_loop computes the same values, but as a statement expression in
# a register tile's unrolled update it keeps gcc from holding the accumulators in registers.
_FMA_BUILTINS = {(dtypes.float32, 16): ("__AVX512F__", "__builtin_ia32_vfmaddps512_mask({}, (unsigned short)-1, 4)"),
                 (dtypes.float32, 8): ("__FMA__", "__builtin_ia32_vfmaddps256({})"),
                 (dtypes.float32, 4): ("__FMA__", "__builtin_ia32_vfmaddps({})"),
                 (dtypes.float64, 8): ("__AVX512F__", "__builtin_ia32_vfmaddpd512_mask({}, (unsigned char)-1, 4)"),
                 (dtypes.float64, 4): ("__FMA__", "__builtin_ia32_vfmaddpd256({})"),
                 (dtypes.float64, 2): ("__FMA__", "__builtin_ia32_vfmaddpd({})")}

def fma_macros(vectors: set[DType], render_dtype) -> str:
    """``FG_FMA_float16(a, b, c)``: a fused multiply-add on every lane (one rounding), the MULACC that codegen writes
    into a sum of products. One FMA instruction where gcc targets it, clang's elementwise builtin, else the lane loop
    (a libm fma per lane on CPUs without FMA: slow, but the same numbers)."""
    lines = []
    for dtype in sorted(vectors, key=lambda d: (d.scalar().name, d.count)):
        vec = render_dtype(dtype)
        fallback = f"#define FG_FMA_{vec}(a, b, c) {vector_fma_loop(vec, dtype, '(a)', '(b)', '(c)')}"
        feature_builtin = _FMA_BUILTINS.get((dtype.scalar(), dtype.count))
        if feature_builtin is None:
            lines += ["#if defined(__clang__)", f"#define FG_FMA_{vec}(a, b, c) __builtin_elementwise_fma((a), (b), (c))", "#else", fallback, "#endif"]
            continue
        feature, builtin = feature_builtin
        lines += [f"#if defined({feature}) && defined(__GNUC__) && !defined(__clang__)",
                  f"#define FG_FMA_{vec}(a, b, c) (({vec}){builtin.format('(a), (b), (c)')})", "#elif defined(__clang__)",
                  f"#define FG_FMA_{vec}(a, b, c) __builtin_elementwise_fma((a), (b), (c))", "#else", fallback, "#endif"]
    return "\n".join(lines) + ("\n" if lines else "")

def half_conversion_macros(lane_counts: set[int]) -> str:
    """``FG_HALF_TO_FLOAT_<n>(x)`` and ``FG_FLOAT_TO_HALF_<n>(x)``: convert a vector of n halves to n floats and back
    (round to nearest even, as gcc's scalar conversions). With F16C (and AVX-512 for 16 lanes) one ``vcvtph2ps`` /
    ``vcvtps2ph``; else ``__builtin_convertvector``, which gcc 12 splits into a scalar conversion per lane."""
    intrinsics = {16: ("__AVX512F__", "_mm512", "__m256i", "__m512"), 8: ("__F16C__", "_mm256", "__m128i", "__m256"),
                  4: ("__F16C__", "_mm", "__m128i", "__m128")}
    lines = []
    for n in sorted(lane_counts):
        to_float, to_half = f"FG_HALF_TO_FLOAT_{n}(x)", f"FG_FLOAT_TO_HALF_{n}(x)"
        fallback = [f"#define {to_float} __builtin_convertvector((x), float{n})", f"#define {to_half} __builtin_convertvector((x), half{n})"]
        if n not in intrinsics:
            lines += fallback
            continue
        feature, prefix, halves, floats = intrinsics[n]
        if n == 4:   # four halves are 8 bytes: the instructions read and write the low half of a 16-byte register
            widen = f"({prefix}_cvtph_ps(({halves})__builtin_shufflevector((x), (x), 0, 1, 2, 3, 0, 1, 2, 3)))"
            narrow = f"__builtin_shufflevector((half8_)({prefix}_cvtps_ph(({floats})(x), _MM_FROUND_CUR_DIRECTION)), (half8_){{0}}, 0, 1, 2, 3)"
            lines += ["typedef _Float16 half8_ __attribute__((vector_size(16)));"]
        else: widen, narrow = f"({prefix}_cvtph_ps(({halves})(x)))", f"({prefix}_cvtps_ph(({floats})(x), _MM_FROUND_CUR_DIRECTION))"
        lines += [f"#if defined({feature})", "#include <immintrin.h>", f"#define {to_float} ((float{n}){widen})",
                  f"#define {to_half} ((half{n}){narrow})", "#else", *fallback, "#endif"]
    return "\n".join(lines) + ("\n" if lines else "")

def steps_backwards(uops: list[UOp]) -> bool:
    """Does some index math (integer arithmetic an address is computed from) run backwards along a loop: a
    negation, a subtraction or a multiplication by a negative constant (``ridx*(-1)``, how a flip's index is
    written)? Integer math on values (an exp polynomial's exponent bits) doesn't count."""
    def negative(c: UOp) -> bool:
        if c.op is Ops.VECTORIZE: return any(negative(s) for s in c.src)
        return c.op is Ops.CONST and isinstance(c.arg, (int, float)) and c.arg < 0
    # the index math: everything an INDEX's offset is computed from (the list is in order: walk it backwards)
    addressing = {u.src[1] for u in uops if u.op is Ops.INDEX and len(u.src) > 1}
    for u in reversed(uops):
        if u in addressing: addressing.update(u.src)
    for u in uops:
        if u not in addressing or u.dtype.scalar() not in dtypes.ints: continue
        if u.op in (Ops.NEG, Ops.SUB) or (u.op is Ops.MUL and any(negative(s) for s in u.src)): return True
    return False

class ClangRenderer(CStyleLanguage):
    """C for the CPU device, compiled by the system C compiler. THREAD ranges become OpenMP
    parallel loops (each thread gets private accumulators). Its tensor core is ``BF16_TENSOR_CORE``."""
    device = "CPU"
    tensor_cores = [BF16_TENSOR_CORE]
    def tensor_core_helper(self, tc) -> str:
        if tc != BF16_TENSOR_CORE: return super().tensor_core_helper(tc)
        return _BF16_HELPER
    has_local = False
    native_transcendentals = False   # libm calls would stop loops from vectorizing
    vector_loops = True              # gcc/clang vector extensions (codegen/vectorize.py)
    header = "#include <math.h>\n#include <stdbool.h>\n#include <stdio.h>\n#include <stdlib.h>\n"
    def __init__(self, has_threads: bool = False): self.has_threads = has_threads
    def __reduce__(self): return self.__class__, (self.has_threads,)
    def render_vectorize(self, state: RenderState, u: UOp) -> None:
        """A vector of single lanes of at most two vectors of its own type (a transposing copy's shuffle network,
        codegen/vectorize.transposed) is one shuffle (``FG_SHUFFLE``): the compiler turns that into one permute, where
        a vector built lane by lane became an insert per lane."""
        if (sources := shuffle_sources(u)) is None: return super().render_vectorize(state, u)
        first, second = sources
        count = u.dtype.count
        lanes = ",".join(str(x.arg[0] + (count if x.src[0] is not first else 0)) for x in u.src)
        value = f"FG_SHUFFLE({state.expr[first]}, {state.expr[second]}, {self.render_dtype(dtypes.int32.vec(count))}, {lanes})"
        if named_vector(state, u): state.declare(self, u, value, "vec")
        else: state.expr[u] = value
    def render_alu(self, u: UOp, s: list[str]) -> str:
        value = super().render_alu(u, s)
        # Every float16 op yields a half value (as in torch, and on the CUDA/OpenCL/LLVM/PYTHON backends). gcc
        # computes scalar _Float16 arithmetic in float on CPUs without AVX512-FP16 and rounds only at assignments
        # and casts, so an inlined chain like (a*b)+c rounded once: a value stored by one kernel and recomputed in
        # another then differed (max's backward compared them: 0/0 = NaN). The cast rounds it here. (gcc's vector
        # _Float16 ops already round per lane op; selects and negation are exact.)
        if u.dtype == dtypes.float16 and u.op not in (Ops.WHERE, Ops.MAX, Ops.NEG) and not value.startswith("((_Float16)"):
            return f"((_Float16)({_strip(value)}))"
        return value
    # GCC 12's loop vectorizer miscompiles a sum whose loads step backwards inside the loop nest
    # (`acc += x[2*i + 1 - j]` summed x[2i] twice; x[3*i + 2 - j] too). Only kernels with both an
    # accumulator and a backwards step (a flip) turn it off for themselves: without it a 3x3 conv's
    # weight gradient ran 1.5x slower, and Adam's elementwise sqrt/div update 8x.
    # GCC 12 at -O3 -march=native also miscompiled a loop whose load is gated by a condition and has a negative
    # offset where the gate is off: the load its if-conversion made read zeros (a padded tensor's gradient came out
    # 0). Kernels with a gated load or store (scalar, or the lane loops of FG_LOAD_/FG_STORE_) turn if-conversion
    # off for themselves; the rest keep it, so their scalar loops' selects vectorize (where(a > 0, a, b * 2).clip()
    # on a 1021x1021 tensor, which no vector width divides: 7-10 ms with branches, 0.21 ms vectorized).
    # A kernel with a staged copy (OptOps.STAGE: a conv's forward or input gradient, a tile of image positions times a
    # vector of channels) turns predictive commoning off: gcc would carry the image values the tile's next kernel
    # column reuses (kx + 1) across iterations in registers, but the accumulators already fill the vector registers,
    # so the carried values spill and the FMAs' free memory broadcasts become register shuffles. MNIST's 5x5 convs,
    # tiles of 2x10 and 2x12 positions: forward 64 -> 52 ms, input gradient 3x6: 88 -> 73 ms. A weight gradient's
    # tile (the window itself, no staged copy) keeps it: there the carried values fit (3x3: 14.5 -> 10.7 ms with it).
    # (One optimize attribute holds every option: of several, gcc 12 keeps only one.)
    @staticmethod
    def gcc_optimize_attribute(options: list[str]) -> str:
        """A gcc-only ``__attribute__((optimize(...)))`` line that turns ``options`` on for one function."""
        if not options: return ""
        return "#if defined(__GNUC__) && !defined(__clang__)\n__attribute__((optimize(" + ", ".join(f'"{o}"' for o in options) + ")))\n#endif\n"
    NO_LOOP_VECTORIZE = gcc_optimize_attribute.__func__(["no-tree-loop-vectorize"])
    def render(self, name: str, uops: list[UOp]) -> str:
        src = super().render(name, uops)
        half_lanes = {u.dtype.count for u in uops if u.dtype.count > 1 and u.dtype.scalar() == dtypes.float16}
        options = ["no-tree-loop-vectorize"] if any(u.op is Ops.DEFINE_REG for u in uops) and steps_backwards(uops) else []
        if any(u.op in (Ops.LOAD, Ops.STORE) and u.src[0].op is Ops.INDEX and len(u.src[0].src) > 2 for u in uops):
            options.append("no-tree-loop-if-convert")
        if any(u.op is Ops.DEFINE_LOCAL for u in uops): options.append("no-predictive-commoning")
        attribute = self.gcc_optimize_attribute(options)
        shuffles = SHUFFLE_MACRO if any(shuffle_sources(u) is not None for u in uops) else ""
        fmas = fma_macros({u.dtype for u in uops if u.op is Ops.MULACC and u.dtype.count > 1 and dtypes.is_float(u.dtype)}, self.render_dtype)
        if not (half_lanes or attribute or shuffles or fmas): return src
        at = src.index(f"{self.kernel_prefix}{name}(")
        return src[:at] + half_conversion_macros(half_lanes) + fmas + shuffles + attribute + src[at:]

    # ---------------------------------------------------------------- float16 and narrow integer vectors
    # (codegen/vectorize.py: half lanes compute, 16- and 8-bit integer lanes are loaded, stored and converted)
    def render_dtype(self, dtype: DType) -> str:
        # "half16" rather than "_Float1616", an identifier reserved to the implementation
        if dtype.count > 1 and not isinstance(dtype, PtrDType) and dtype.scalar() == dtypes.float16: return f"half{dtype.count}"
        return super().render_dtype(dtype)

    def render_vector_alu(self, u: UOp, s: list[str]) -> str:
        """Half lanes compute in float32: each operand is widened, the op runs on float32 lanes and a half result is
        rounded back to half, lane by lane what scalar half code does (gcc 12 would split vector _Float16 math
        into scalar conversions). A float MULACC is ``FG_FMA_<vector>`` (``fma_macros``)."""
        half = dtypes.float16
        if u.op is Ops.MULACC and u.dtype.scalar() in (dtypes.float32, dtypes.float64):
            # (each argument in parentheses: a vector literal's commas would split the macro's arguments)
            return f"FG_FMA_{self.render_dtype(u.dtype)}({', '.join(f'({_strip(x)})' for x in s)})"
        if u.dtype.scalar() != half and all(x.dtype.scalar() != half for x in u.src): return super().render_vector_alu(u, s)
        lanes = u.dtype.count
        widened = [f"FG_HALF_TO_FLOAT_{lanes}({x})" if src.dtype.scalar() == half else x for x, src in zip(s, u.src)]
        if u.dtype.scalar() != half: return super().render_vector_alu(u, widened)   # a compare: float32 lane masks
        value = super().render_vector_alu(u.replace(dtype=dtypes.float32.vec(lanes)), widened)
        return f"FG_FLOAT_TO_HALF_{lanes}({value})"

    def render_vector_cast(self, dtype: DType, x: str, src_dtype: DType) -> str:
        if src_dtype.scalar() == dtypes.float16 and dtype.scalar() == dtypes.float32: return f"FG_HALF_TO_FLOAT_{dtype.count}({x})"
        if src_dtype.scalar() == dtypes.float32 and dtype.scalar() == dtypes.float16: return f"FG_FLOAT_TO_HALF_{dtype.count}({x})"
        # gcc 12 widens 8-bit lanes to 32-bit ones (and back) one lane at a time, but 8 <-> 16 and 16 <-> 32 with
        # vector instructions: go through the 16-bit integer of the 8-bit side's signedness (the same values)
        if src_dtype.scalar().itemsize in (1, 2) and dtypes.is_int(src_dtype.scalar()) and dtype.scalar() == dtypes.float32:
            # (a small integer to float: exact through int32, which converts with one instruction)
            return self.render_vector_cast(dtype, self.render_vector_cast(dtypes.int32.vec(dtype.count), x, src_dtype), dtypes.int32.vec(dtype.count))
        narrow = src_dtype.scalar() if src_dtype.scalar().itemsize == 1 else dtype.scalar()
        if narrow.itemsize == 1 and dtypes.is_int(narrow) and dtypes.is_int(src_dtype.scalar()) and dtypes.is_int(dtype.scalar()) \
                and 4 in (src_dtype.scalar().itemsize, dtype.scalar().itemsize):
            middle = self.render_dtype((dtypes.int16 if narrow == dtypes.int8 else dtypes.uint16).vec(dtype.count))
            return f"__builtin_convertvector(__builtin_convertvector({x}, {middle}), {self.render_dtype(dtype)})"
        return super().render_vector_cast(dtype, x, src_dtype)

    def vector_typedefs(self, uops: list[UOp]) -> str:
        # the float32 vectors half math widens to, the 16-bit vectors that 8-bit <-> 32-bit integer conversions pass
        # through, the lane numbers of shuffles
        extra = {dtypes.float32.vec(u.dtype.count) for u in uops if u.dtype.count > 1 and u.dtype.scalar() == dtypes.float16}
        extra |= {dtypes.int32.vec(u.dtype.count) for u in uops if shuffle_sources(u) is not None}
        for u in uops:
            if u.op is not Ops.CAST or u.dtype.count == 1: continue
            if 1 in (u.dtype.scalar().itemsize, u.src[0].dtype.scalar().itemsize):
                extra.add((dtypes.int16 if dtypes.int8 in (u.dtype.scalar(), u.src[0].dtype.scalar()) else dtypes.uint16).vec(u.dtype.count))
            if u.dtype.scalar() == dtypes.float32 and u.src[0].dtype.scalar() in (dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16):
                extra.add(dtypes.int32.vec(u.dtype.count))
        return self.vector_typedefs_for({d for u in uops for d in ((u.dtype.base if isinstance(u.dtype, PtrDType) else u.dtype),) if d.count > 1} | extra)

    STACK_LIMIT = 64 * 1024
    def render_local(self, name: str, dtype: DType, size: int) -> tuple[str, str | None]:
        """A staged copy (OptOps.STAGE) shared by the kernel's threads: on the stack when small, else on
        the heap (threads' stacks are small; malloc costs microseconds against a kernel's milliseconds)."""
        ctype = self.render_dtype(dtype)
        if size * dtype.itemsize <= self.STACK_LIMIT: return f"{ctype} {name}[{size}];", None
        # a kernel can't raise: out of memory stops the process rather than computing garbage
        return (f"{ctype}* {name} = ({ctype}*)malloc({size * dtype.itemsize}); "
                f"if (!{name}) {{ fputs(\"fusegrad: out of memory for a staged copy\\n\", stderr); abort(); }}"), f"free({name});"

