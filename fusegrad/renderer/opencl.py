"""OpenCL C: the C-style renderer's dialect for the CL device (``runtime/ops_cl.py``).

What differs from the CPU's C:

- kernels are ``__kernel void``, buffers ``__global``, grouped-reduce partials and staged copies ``__local``
  arrays, and a workgroup barrier is ``barrier(CLK_LOCAL_MEM_FENCE)``;
- launch indices are built-ins: ``gidx<d>`` is ``get_group_id(d)``, ``lidx<d>`` ``get_local_id(d)`` and (after
  NOLOCALS) ``idx<d>`` ``get_global_id(d)``;
- OpenCL's integer names (``char``, ``uchar``, ``long``, ``ulong``...); 64-bit ints are ``long`` (``long long`` is
  reserved); bitcasts are ``as_<type>()``; math built-ins are overloaded (``exp2(x)`` for every float type);
- vectors are the built-in ``float4``-style types: ``(float4)(a, b, c, d)`` and ``.s0``..``.sf``; a bool vector (a
  compare's lanes) is an ``int4`` of -1/0, as OpenCL's vector compares give; memory is read and written with
  ``vload4``/``vstore4`` (no alignment needed), lane by lane where a mask gates the lanes;
- ``bool`` can't be stored in a buffer (its size is implementation-defined), so bool buffers hold ``uchar``;
- half: without ``cl_khr_fp16`` (PoCL on a CPU has none) ``half`` is a storage-only type. Buffers of half are
  read with ``vload_half`` and written with ``vstore_half_rte``; values compute in float and every float16
  result is rounded to the nearest half (``fg_half``), which for +, -, *, / and sqrt gives exactly IEEE half
  arithmetic (float has more than twice half's precision). With ``cl_khr_fp16`` half is native.

>>> from fusegrad.dtype import dtypes
>>> OpenCLRenderer().render_dtype(dtypes.int64), OpenCLRenderer().render_dtype(dtypes.float32.vec(4))
('long', 'float4')
"""
from __future__ import annotations
import math, struct
from fusegrad.dtype import DType, PtrDType, dtypes
from fusegrad.uop.ops import UOp, Ops, GroupOp
from fusegrad.renderer.cstyle import CStyleLanguage, _strip, named_vector

# float -> the nearest half (round to nearest even), as a float; and the 16 bits of a half-exact float.
# ``half`` can't be a variable without cl_khr_fp16, but a pointer to it can be vstore'd/vload'ed.
_HALF_HELPERS = """inline float fg_half(float x) { ushort h; vstore_half_rte(x, 0, (__private half*)&h); return vload_half(0, (__private half*)&h); }
inline ushort fg_half_bits(float x) {   /* (a NaN becomes the quiet NaN with x's sign, as C's conversion gives) */
  if (isnan(x)) return (ushort)(((as_uint(x) >> 16) & 0x8000) | 0x7E00);
  ushort h; vstore_half_rte(x, 0, (__private half*)&h); return h; }
inline float fg_half_from_bits(ushort h) { return vload_half(0, (__private half*)&h); }
"""
_HALF_FROM_DOUBLE = """inline float fg_half_from_double(double x) { ushort h; vstore_half_rte(x, 0, (__private half*)&h); return vload_half(0, (__private half*)&h); }
"""

class OpenCLRenderer(CStyleLanguage):
    """OpenCL C for ``DEV=CL``. The device's limits (workgroup size, local memory, fp16) come from the runtime."""
    device = "CL"
    kernel_prefix = "__kernel void "
    buffer_prefix = "__global "
    smem_prefix = "__local "
    barrier = "barrier(CLK_LOCAL_MEM_FENCE);"
    header = ""
    has_local = True
    has_shared = True
    gpu_heuristic = True             # codegen/opt/gpu_heuristic.py picks workgroups, grouped reduces and upcasts
    # register tiles' innermost lanes as vectors of 4 (float4 loads and stores, as GPUs like them); the rest of the
    # vectorizing is across work-items, by the OpenCL compiler. 32-bit lanes only: half may be storage-only here.
    vector_loops = True
    max_vector_bytes = 16
    vector_gathers = "never"         # lanes not contiguous in memory stay a loop: a GPU gathers per work-item anyway
    vector_dtypes = (dtypes.float32, dtypes.int32, dtypes.uint32, dtypes.bool)
    native_transcendentals = True    # exp2/log2/sin are OpenCL built-ins
    type_map = {**CStyleLanguage.type_map, dtypes.int8: "char", dtypes.uint8: "uchar", dtypes.uint16: "ushort", dtypes.uint32: "uint",
                dtypes.int64: "long", dtypes.uint64: "ulong", dtypes.float16: "half"}

    def __init__(self, local_max_threads: int = 256, local_max: tuple[int, ...] = (256, 256, 256), shared_max: int = 32768,
                 has_fp16: bool = False, has_fp64: bool = True):
        self.local_max_threads, self.local_max, self.shared_max = local_max_threads, tuple(local_max), shared_max
        self.has_fp16, self.has_fp64 = has_fp16, has_fp64
    def __reduce__(self): return self.__class__, (self.local_max_threads, self.local_max, self.shared_max, self.has_fp16, self.has_fp64)

    # ---------------------------------------------------------------- types and constants
    def _half_emulated(self, dtype: DType) -> bool: return not self.has_fp16 and dtype.scalar() == dtypes.float16

    def render_dtype(self, dtype: DType) -> str:
        if isinstance(dtype, PtrDType): return self.render_dtype(dtype.base) + "*"
        if self._half_emulated(dtype):
            if dtype.count > 1: raise NotImplementedError("OpenCL without cl_khr_fp16 has no half vectors")
            return "float"   # a half value computes in float (see the module doc)
        if dtype.count > 1 and dtype.count not in (2, 3, 4, 8, 16): raise NotImplementedError(f"OpenCL has no vectors of {dtype.count} lanes")
        if dtype.count > 1 and dtype.scalar() == dtypes.bool: return f"int{dtype.count}"   # vector compares give int lanes
        return super().render_dtype(dtype)

    def render_const(self, value, dtype: DType) -> str:
        if dtypes.is_float(dtype) and (math.isnan(value) or math.isinf(value)):
            text = "NAN" if math.isnan(value) else ("-INFINITY" if value < 0 else "INFINITY")
            return f"(({self.render_dtype(dtype)}){text})"
        if self._half_emulated(dtype): return self.render_const(struct.unpack("e", struct.pack("e", value))[0], dtypes.float32)
        if dtype == dtypes.float16: return f"((half){float(value)!r}f)"
        if dtype == dtypes.int64 and value == -2**63: return "(-9223372036854775807L-1)"
        if dtype in (dtypes.int64, dtypes.uint64):   # (C's ll suffix names the reserved long long)
            text = f"{value}{'L' if dtype == dtypes.int64 else 'UL'}"
            return f"({text})" if value < 0 else text
        return super().render_const(value, dtype)

    # ---------------------------------------------------------------- memory
    def render_param(self, u: UOp, name: str) -> str:
        base = u.dtype.base
        # a bool's size is implementation-defined in OpenCL: bool buffers are bytes (0 or 1), like everywhere else
        element = "uchar" if base == dtypes.bool else "half" if self._half_emulated(base) else self.render_dtype(base)
        return f"{self.buffer_prefix}{element}* restrict {name}"

    def _global_half(self, index: UOp) -> bool:
        return index.src[0].op is Ops.PARAM and self._half_emulated(index.src[0].dtype.base)

    def render_scalar_load(self, index: UOp, expr: dict[UOp, str]) -> str:
        if self._global_half(index): return f"vload_half({_strip(expr[index.src[1]])}, {expr[index.src[0]]})"
        if index.src[0].op is Ops.PARAM and index.src[0].dtype.base == dtypes.bool: return f"({expr[index]}!=0)"
        return super().render_scalar_load(index, expr)

    def render_scalar_store(self, index: UOp, expr: dict[UOp, str], value: str) -> str:
        if self._global_half(index): return f"vstore_half_rte({value}, {_strip(expr[index.src[1]])}, {expr[index.src[0]]});"
        if index.src[0].op is Ops.PARAM and index.src[0].dtype.base == dtypes.bool: return f"{expr[index]} = (uchar)({value});"
        return super().render_scalar_store(index, expr, value)

    def render_vectorize(self, state, u: UOp) -> None:
        lanes = [f"-({state.expr[x]})" if x.dtype == dtypes.bool else _strip(state.expr[x]) for x in u.src]
        value = f"(({self.render_dtype(u.dtype)})({','.join(lanes)}))"
        if named_vector(state, u): state.declare(self, u, value, "vec")
        else: state.expr[u] = value

    def render_gep(self, state, u: UOp) -> None: state.expr[u] = f"({state.expr[u.src[0]]}).s{u.arg[0]:x}"

    def render_load(self, state, u: UOp) -> None:
        index, expr = u.src[0], state.expr
        if not (u.dtype.count > 1 and index.dtype.base.count == 1): return super().render_load(state, u)
        # V contiguous elements from a scalar address (global or private memory)
        n, vec, buf, at = u.dtype.count, self.render_dtype(u.dtype), expr[index.src[0]], _strip(expr[index.src[1]])
        value = f"vload{n}(0, {buf}+{at})"
        if len(index.src) > 2 and index.src[2].dtype.count > 1:   # a lane mask: masked lanes read 0 and touch no memory
            mask = self._named(state, index.src[2])
            value = f"(({vec})({', '.join(f'({mask}).s{i:x}?{buf}[({at})+{i}]:0' for i in range(n))}))"
        elif len(index.src) > 2: value = f"({expr[index.src[2]]}?{value}:(({vec})(0)))"
        state.declare(self, u, value, "val")

    def _named(self, state, u: UOp) -> str:
        """``u``'s expression as a variable, so a per-lane access evaluates it once rather than once per lane."""
        if not state.expr[u].isidentifier(): state.declare(self, u, _strip(state.expr[u]), "vec")
        return state.expr[u]

    def render_store(self, state, u: UOp) -> None:
        index, value, expr = u.src[0], u.src[1], state.expr
        if not (value.dtype.count > 1 and index.dtype.base.count == 1): return super().render_store(state, u)
        n, buf, at, v = value.dtype.count, expr[index.src[0]], _strip(expr[index.src[1]]), _strip(expr[value])
        if len(index.src) > 2 and index.src[2].dtype.count > 1:   # a lane mask: only the lanes it sets are written
            v, mask = self._named(state, value), self._named(state, index.src[2])
            for i in range(n): state.emit(f"if (({mask}).s{i:x}) {{ {buf}[({at})+{i}] = ({v}).s{i:x}; }}")
            return
        statement = f"vstore{n}({v}, 0, {buf}+{at});"
        if len(index.src) > 2: statement = f"if ({_strip(expr[index.src[2]])}) {{ {statement} }}"
        state.emit(statement)

    def render_special(self, name: str) -> str:
        function = {"gidx": "get_group_id", "lidx": "get_local_id", "idx": "get_global_id"}[name[:-1]]
        return f"(int){function}({name[-1]})"

    # ---------------------------------------------------------------- ALU
    def math_function(self, name: str, dtype: DType, *args: str) -> str:
        return f"{name}({', '.join(args)})"   # OpenCL's math built-ins are overloaded for float, double (and half)

    def render_alu(self, u: UOp, s: list[str]) -> str:
        value = f"pow({s[0]}, {s[1]})" if u.op is Ops.POW and u.dtype.count == 1 else super().render_alu(u, s)
        # every float16 result is rounded to half; comparisons give bools and selects pick an existing half
        if self._half_emulated(u.dtype) and u.op not in GroupOp.Comparison | {Ops.WHERE, Ops.MAX, Ops.NEG}: return f"fg_half({_strip(value)})"
        return value

    def render_vector_alu(self, u: UOp, s: list[str]) -> str:
        # OpenCL vectors have lane-wise operators and select(); comparisons give -1/0 int lanes, as gcc's do
        op = u.op
        if op is Ops.WHERE: return f"select({s[2]}, {s[1]}, {s[0]})"
        if op is Ops.MAX: return f"max({s[0]}, {s[1]})" if not dtypes.is_float(u.dtype) else f"select({s[1]}, {s[0]}, ({s[0]}>{s[1]})|({s[0]}!={s[0]}))"
        if op in (Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.COS, Ops.SQRT): return f"{op.name.lower()}({s[0]})"
        if op is Ops.TRUNC: return f"trunc({s[0]})" if dtypes.is_float(u.dtype) else s[0]
        if op is Ops.MULACC and dtypes.is_float(u.dtype): return f"fma({s[0]}, {s[1]}, {s[2]})"
        return super().render_vector_alu(u, s)

    def render_cast(self, dtype: DType, x: str, src_dtype: DType) -> str:
        if dtype.count > 1:   # (bool lanes are -1/0 int masks: a true lane converts to 1, a lane != 0 is a true mask)
            if dtype.scalar() == dtypes.bool: return f"({x}!=0)"
            return f"convert_{self.render_dtype(dtype)}({'-' if src_dtype.scalar() == dtypes.bool else ''}({x}))"
        if self._half_emulated(dtype):
            if src_dtype == dtypes.float64: return f"fg_half_from_double({x})"
            return f"fg_half((float)({x}))"
        return super().render_cast(dtype, x, src_dtype)

    def render_bitcast(self, dtype: DType, x: str, src_dtype: DType) -> str:
        if self._half_emulated(src_dtype): return f"(({self.render_dtype(dtype)})fg_half_bits({x}))"
        if self._half_emulated(dtype): return f"fg_half_from_bits(as_ushort({x}))"
        return f"as_{self.render_dtype(dtype)}({x})"

    # ---------------------------------------------------------------- the kernel
    def render(self, name: str, uops: list[UOp]) -> str:
        src = super().render(name, uops)
        dtypes_used = {(u.dtype.base if isinstance(u.dtype, PtrDType) else u.dtype).scalar() for u in uops}
        dtypes_used |= {(s.dtype.base if isinstance(s.dtype, PtrDType) else s.dtype).scalar() for u in uops for s in u.src}
        # (OpenCL C contracts a*b+c by default: off, so fused multiply-adds come only from MULACC, as on every device)
        prefix = "#pragma OPENCL FP_CONTRACT OFF\n"
        if dtypes.float64 in dtypes_used: prefix += "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n"
        if dtypes.float16 in dtypes_used:
            if self.has_fp16: prefix += "#pragma OPENCL EXTENSION cl_khr_fp16 : enable\n"
            else: prefix += _HALF_HELPERS + (_HALF_FROM_DOUBLE if dtypes.float64 in dtypes_used else "")
        return prefix + src

    def vector_typedefs_for(self, used: set[DType]) -> str: return ""   # vectors are built-in types
