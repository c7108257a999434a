"""CUDA C: the C-style renderer's dialect for NVIDIA GPUs, compiled by NVRTC (runtime/ops_cuda.py).

A kernel is an ``extern "C" __global__`` function. Launch indices are the grid and block coordinates:
``gidxN`` is ``blockIdx``, ``lidxN`` is ``threadIdx`` and a NOLOCALS kernel's ``idxN`` is the global thread
index, dimension 0 being x. Workgroup memory is ``__shared__`` (past 48 KiB, slices of one dynamic
``extern __shared__`` array, up to the GPU's opt-in limit: ``dynamic_shared_layout``) and the barrier ``__syncthreads()``.

Kernels that use no workgroup (no ``lidx``: the default for elementwise and plain reduce kernels, whose
global size counts work items) would otherwise run one thread per block, 1/32 of each warp. They are
rendered as *flat* kernels instead: ``gidxN`` is the global thread index, out-of-range threads return at
once, and the module exports ``fg_flat_launch`` so the runtime knows it may pick the block size itself.

The source needs no CUDA headers (NVRTC's wheel ships none): ``half`` is a 16-bit struct that converts to
and from float with the ``cvt`` instruction (its arithmetic is float arithmetic, rounded at every result,
which for + - * / is the correctly rounded half result), vectors are ``fg_vec<T, N>`` structs and bit casts
go through a union. bfloat16 never reaches a renderer (codegen emulates it with uint16 bits).

>>> from fusegrad.renderer.cuda import CUDARenderer
>>> r = CUDARenderer(arch="sm_80")
>>> r.has_local, r.has_shared, r.render_special("lidx1"), r.arch
(True, True, 'threadIdx.y', 'sm_80')
"""
from __future__ import annotations
import copy, math, re
from fusegrad.dtype import DType, PtrDType, dtypes
from fusegrad.uop.ops import UOp, Ops, GroupOp
from fusegrad.renderer import TensorCore, FragmentLayout
from fusegrad.renderer.cstyle import CStyleLanguage, named_vector

# Everything a kernel may use, ahead of it. ``half`` has two constructors (float and double) and no others,
# so the renderer converts other types explicitly (an int would be ambiguous between them).
CUDA_PRELUDE = r"""#define INFINITY (__int_as_float(0x7f800000))
#define NAN (__int_as_float(0x7fc00000))
struct __align__(2) half {
  unsigned short bits;
  half() = default;
  __device__ __forceinline__ half(float f) { asm("cvt.rn.f16.f32 %0, %1;" : "=h"(bits) : "f"(f)); }
  __device__ __forceinline__ half(double d) { asm("cvt.rn.f16.f64 %0, %1;" : "=h"(bits) : "d"(d)); }
  __device__ __forceinline__ operator float() const { float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(bits)); return f; }
};
template <typename T, int N> struct fg_vec {
  T v[N];
  __device__ __forceinline__ T& operator[](int i) { return v[i]; }
  __device__ __forceinline__ const T& operator[](int i) const { return v[i]; }
};
// (the one vector arithmetic codegen makes here: tensor core sums added up, after UNROLL of their reduce)
template <typename T, int N> __device__ __forceinline__ fg_vec<T, N> operator+(fg_vec<T, N> a, const fg_vec<T, N>& b) {
  for (int i = 0; i < N; i++) a[i] = a[i] + b[i];
  return a;
}
template <typename To, typename From> __device__ __forceinline__ To fg_bitcast(From x) {
  static_assert(sizeof(To) == sizeof(From), "bitcast between types of different sizes");
  union { From from; To to; } u; u.from = x; return u.to;   // (CUDA defines union type punning)
}
"""

# ``mma.sync.aligned.m16n8k16.row.col`` (sm_80 and later): a warp multiplies a 16x16 A by a 16x8 B into 16x8
# float sums. Lane t = 4*g + q (g = t // 4, q = t % 4) holds, per the PTX ISA's fragment tables:
#   a: (g + 8*e1, 2q + e0 + 8*e2) for its elements e = 0..7 (bits e0, e1, e2), as four registers of two halves
#   b: (2q + e0 + 8*e1, g)         for e = 0..3, two registers
#   c: (g + 8*e1, 2q + e0)         for e = 0..3, four floats
MMA_A = FragmentLayout(lane_bits=((1, 1), (1, 2), (0, 0), (0, 1), (0, 2)), element_bits=((1, 0), (0, 3), (1, 3)))
MMA_B = FragmentLayout(lane_bits=((0, 1), (0, 2), (1, 0), (1, 1), (1, 2)), element_bits=((0, 0), (0, 3)))
MMA_C = FragmentLayout(lane_bits=((1, 1), (1, 2), (0, 0), (0, 1), (0, 2)), element_bits=((1, 0), (0, 3)))
MMA_TENSOR_CORES = [TensorCore(dims=(8, 16, 16), dtype_in=dtype_in, dtype_out=dtypes.float32, name=f"mma_m16n8k16_{name}_f32",
                               threads=32, layout=(MMA_A, MMA_B, MMA_C))
                    for dtype_in, name in ((dtypes.float16, "f16"), (dtypes.bfloat16, "bf16"))]

# a register holds two 16-bit elements, the first in its low half (halves as their bits; bfloat16 already is bits)
_PACK2 = r"""__device__ __forceinline__ unsigned fg_pack2(half lo, half hi) { return (unsigned)lo.bits | ((unsigned)hi.bits << 16); }
__device__ __forceinline__ unsigned fg_pack2(unsigned short lo, unsigned short hi) { return (unsigned)lo | ((unsigned)hi << 16); }
"""

def mma_helper(tc: TensorCore) -> str:
    """CUDA C of ``fg_wmma_<name>(a, b, c)``: one ``mma.sync`` of the warp (c is the running sum)."""
    element = "half" if tc.dtype_in == dtypes.float16 else "unsigned short"   # bfloat16 fragments are bits
    kind = "f16" if tc.dtype_in == dtypes.float16 else "bf16"
    a_registers = ", ".join(f'"r"(fg_pack2(a[{2 * i}], a[{2 * i + 1}]))' for i in range(4))
    b_registers = ", ".join(f'"r"(fg_pack2(b[{2 * i}], b[{2 * i + 1}]))' for i in range(2))
    return (f"__device__ __forceinline__ fg_vec<float, 4> fg_wmma_{tc.name}(fg_vec<{element}, 8> a, fg_vec<{element}, 4> b, fg_vec<float, 4> c) {{\n"
            f'  asm("mma.sync.aligned.m16n8k16.row.col.f32.{kind}.{kind}.f32 {{%0, %1, %2, %3}}, {{%4, %5, %6, %7}}, {{%8, %9}}, {{%0, %1, %2, %3}};"\n'
            f'      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3]) : {a_registers}, {b_registers});\n'
            "  return c;\n}\n")

# exported by flat kernels (see the module doc); the runtime looks it up with cuModuleGetGlobal
FLAT_LAUNCH_SYMBOL = "fg_flat_launch"

# Shared memory: a kernel's static ``__shared__`` arrays may total 48 KiB. Beyond that (up to the GPU's opt-in
# limit per block) they are slices of one ``extern __shared__`` array, whose size the kernel exports as
# DYNAMIC_SHARED_SYMBOL: the runtime raises the function's limit and passes the size at every launch.
STATIC_SHARED_MAX = 48 * 1024
DYNAMIC_SHARED_SYMBOL = "fg_dynamic_shared"
# the opt-in shared memory per block by compute capability (CUDA programming guide's table); the device reports
# its own, this is for rendering without one (other archs: the static 48 KiB)
OPTIN_SHARED_BYTES = {70: 96 * 1024, 72: 48 * 1024, 75: 64 * 1024, 80: 163 * 1024, 86: 99 * 1024, 87: 163 * 1024, 89: 99 * 1024,
                      90: 227 * 1024, 100: 227 * 1024, 120: 99 * 1024}
FLAT_BLOCK = 256   # the most threads per block the runtime gives a flat kernel (its __launch_bounds__)

# The dimension names of launch indices: gidx0/lidx0/idx0 are x.
_DIMS = "xyz"

def parse_arch(arch: str) -> int:
    """``"sm_80"`` -> 80: the compute capability of an arch name (``compute_80`` also accepted).

    >>> parse_arch("sm_90a")
    90
    """
    if not isinstance(arch, str) or (match := re.fullmatch(r"(?:sm|compute)_(\d+)[af]?", arch)) is None:
        raise ValueError(f"CUDA arch must look like 'sm_80', got {arch!r}")
    return int(match.group(1))

class CUDARenderer(CStyleLanguage):
    """CUDA C for one GPU architecture (``arch``: ``"sm_80"``, ``"sm_90"``, ...). Usable without a GPU:
    ``get_program(ast, CUDARenderer(arch="sm_80"))`` renders a kernel that ``CUDACompiler`` turns into PTX."""
    device = "CUDA"
    has_local = True
    has_shared = True
    vector_loops = False              # vectors only where codegen builds them (TC fragments); no gcc vector types
    native_transcendentals = True     # exp2f/log2f/sinf are accurate to a few ulp on the GPU (no --use_fast_math)
    local_max = (1024, 1024, 64)
    local_max_threads = 1024
    max_vector_bytes = 16
    gpu_heuristic = True              # codegen/opt/gpu_heuristic.py: workgroups, grouped reduces, warp tensor cores
    flat_elementwise = True           # elementwise kernels stay flat: the runtime gives them blocks of 256 threads
    kernel_prefix = 'extern "C" __global__ void '
    smem_prefix = "__shared__ __align__(16) "
    barrier = "__syncthreads();"
    type_map = {**CStyleLanguage.type_map, dtypes.float16: "half", dtypes.bool: "bool"}

    def __init__(self, arch: str = "sm_80", shared_max: int | None = None):
        # mma.sync m16n8k16 for half and bfloat16 from sm_80 (Ampere) on (docs/decisions.md, "CUDA tensor cores")
        self.tensor_cores = MMA_TENSOR_CORES if parse_arch(arch) >= 80 else []
        self.arch = arch
        # shared memory per workgroup: the device's opt-in limit (past 48 KiB it is dynamic shared memory, see above)
        self.shared_max = OPTIN_SHARED_BYTES.get(parse_arch(arch), STATIC_SHARED_MAX) if shared_max is None else shared_max
        if not isinstance(self.shared_max, int) or self.shared_max < 0: raise ValueError(f"shared_max must be a byte count, got {shared_max!r}")
    def __reduce__(self): return self.__class__, (self.arch, self.shared_max)
    def __repr__(self) -> str: return f"CUDARenderer(arch={self.arch!r}, shared_max={self.shared_max})"

    # ---------------------------------------------------------------- types and constants
    def render_dtype(self, dtype: DType) -> str:
        if isinstance(dtype, PtrDType): return self.render_dtype(dtype.base) + "*"
        if dtype.count > 1: return f"fg_vec<{self.render_dtype(dtype.scalar())}, {dtype.count}>"
        return super().render_dtype(dtype)

    def render_const(self, value, dtype: DType) -> str:
        if dtypes.is_float(dtype) and (math.isnan(value) or math.isinf(value)):
            text = "NAN" if math.isnan(value) else ("-INFINITY" if value < 0 else "INFINITY")
            if dtype == dtypes.float64: text = f"((double){text})"
            return f"half({text})" if dtype == dtypes.float16 else f"({text})"
        if dtype == dtypes.float16: return f"half({float(value)!r}f)"
        if dtype == dtypes.bool: return "true" if value else "false"
        return super().render_const(value, dtype)

    # ---------------------------------------------------------------- ALU, casts
    def render_alu(self, u: UOp, s: list[str]) -> str:
        if u.dtype.count > 1 and u.op is not Ops.ADD: raise NotImplementedError(f"the CUDA renderer has no vector {u.op} (vector_loops is off)")
        value = super().render_alu(u, s)
        # half arithmetic is float arithmetic (the struct converts); round the result back to half here, so
        # every half-typed expression has type half (a ?: of half and float would be ambiguous in C++)
        if u.dtype == dtypes.float16 and u.op not in (Ops.WHERE,) and not value.startswith("((half)"): return f"half({value})"
        return value

    def render_cast(self, dtype: DType, x: str, src_dtype: DType) -> str:
        if dtype.count > 1: raise NotImplementedError("the CUDA renderer has no vector casts (vector_loops is off)")
        if dtype == dtypes.float16:
            # through double for 64-bit sources (int64 -> float would round once before half rounds again)
            wide = src_dtype in (dtypes.float64, dtypes.int64, dtypes.uint64)
            return f"half(({'double' if wide else 'float'})({x}))"
        if src_dtype == dtypes.float16:   # half -> T goes through float (its only conversion)
            if dtype == dtypes.bool: return f"((float)({x})!=0.0f)"
            return f"(({self.render_dtype(dtype)})(float)({x}))"
        return super().render_cast(dtype, x, src_dtype)

    def render_bitcast(self, dtype: DType, x: str, src_dtype: DType) -> str:
        return f"fg_bitcast<{self.render_dtype(dtype)}>(({self.render_dtype(src_dtype)})({x}))"

    # ---------------------------------------------------------------- kernel structure
    def render_special(self, name: str) -> str:
        kind, dim = name.rstrip("012"), name[-1]
        if dim not in "012" or kind not in ("gidx", "lidx", "idx"): raise ValueError(f"unknown launch index {name!r}")
        axis = _DIMS[int(dim)]
        if kind == "lidx": return f"threadIdx.{axis}"
        if kind == "gidx" and not self._flat: return f"blockIdx.{axis}"
        return f"(blockIdx.{axis}*blockDim.{axis}+threadIdx.{axis})"   # a global thread index

    def render_param(self, u: UOp, name: str) -> str:
        return f"{self.render_dtype(u.dtype.base)}* __restrict__ {name}"

    def vector_typedefs(self, uops: list[UOp]) -> str: return ""   # fg_vec<T, N> is in the prelude

    def render_vectorize(self, state, u: UOp) -> None:
        # an aggregate built with braces (C++ has no compound literals); the lanes are values of the element type
        value = f"{self.render_dtype(u.dtype)}{{{', '.join(state.expr[x] for x in u.src)}}}"
        if named_vector(state, u): state.declare(self, u, value, "vec")
        else: state.expr[u] = value

    def tensor_core_helper(self, tc: TensorCore) -> str:
        if tc not in self.tensor_cores: return super().tensor_core_helper(tc)
        return mma_helper(tc)

    def render_local(self, name: str, dtype: DType, size: int) -> tuple[str, str | None]:
        if name not in self._shared_offsets: return super().render_local(name, dtype, size)
        return f"{self.render_dtype(dtype)}* {name} = ({self.render_dtype(dtype)}*)(fg_shared + {self._shared_offsets[name]});", None

    def render_kernel(self, name: str, params: list[str], body: list[str]) -> str:
        bounds = f"__launch_bounds__({self._threads}) " if self._threads else ""
        exported = f'extern "C" __device__ const int {FLAT_LAUNCH_SYMBOL} = 1;\n' if self._flat else ""
        if self._shared_offsets:
            exported += f'extern "C" __device__ const unsigned int {DYNAMIC_SHARED_SYMBOL} = {self._dynamic_shared};\n'
            body = ["  extern __shared__ __align__(16) unsigned char fg_shared[];"] + body
        body = ([f"  if ({self._guard}) return;"] if self._guard else []) + body
        return exported + f"{self.kernel_prefix}{bounds}{name}({', '.join(params)}) {{\n" + "\n".join(body) + "\n}\n"

    def render(self, name: str, uops: list[UOp]) -> str:
        specials = [u for u in uops if u.op is Ops.SPECIAL]
        # the launch style is per kernel: a copy of the renderer carries it (the renderer itself is shared by threads)
        kernel = copy.copy(self)
        # flat: group indices without local ones, and nothing that needs a workgroup (shared memory, barriers)
        kernel._flat = any(u.arg.startswith("gidx") for u in specials) and not any(u.arg.startswith("lidx") for u in specials) \
            and not any(u.op in (Ops.DEFINE_LOCAL, Ops.BARRIER) for u in uops)
        local_sizes = [u.src[0].arg if u.src[0].op is Ops.CONST else None for u in specials if u.arg.startswith("lidx")]
        kernel._threads = FLAT_BLOCK if kernel._flat else (math.prod(local_sizes) if local_sizes and None not in local_sizes else 0)
        # threads past the global size (in the last block of a dimension) return first thing, before any memory access
        kernel._guard = " || ".join(f"{kernel.render_special(u.arg)} >= {self._size_expr(u.src[0])}"
                                    for u in sorted(specials, key=lambda u: u.arg)) if kernel._flat else ""
        kernel._shared_offsets, kernel._dynamic_shared = dynamic_shared_layout([u for u in uops if u.op is Ops.DEFINE_LOCAL])
        # the prelude first: the tensor core helpers CStyleLanguage.render puts ahead of the kernel use its types
        return CUDA_PRELUDE + (_PACK2 if any(u.op is Ops.WMMA for u in uops) else "") + CStyleLanguage.render(kernel, name, uops)

    def _size_expr(self, size: UOp) -> str:
        """C for a launch size: a constant, or an expression of the kernel's variables."""
        if size.op is Ops.CONST: return str(size.arg)
        if size.op is Ops.DEFINE_VAR: return f"{size.arg[0]}_arg"   # (a parameter: declared before any statement)
        if size.op in GroupOp.ALU and len(size.src) == 2:
            infix = {Ops.ADD: "+", Ops.MUL: "*", Ops.IDIV: "/", Ops.MOD: "%", Ops.SUB: "-"}
            if size.op in infix: return f"({self._size_expr(size.src[0])}{infix[size.op]}{self._size_expr(size.src[1])})"
            if size.op is Ops.MAX: return f"max({self._size_expr(size.src[0])}, {self._size_expr(size.src[1])})"
        raise NotImplementedError(f"can't render the launch size {size}")

    # per kernel, set on the copy that renders it
    _flat, _threads, _guard, _shared_offsets, _dynamic_shared = False, 0, "", {}, 0

def dynamic_shared_layout(locals_: list[UOp]) -> tuple[dict[str, int], int]:
    """Where each DEFINE_LOCAL array lies in the dynamic shared memory (name -> byte offset) and its total size,
    or ({}, 0) when the arrays fit in static shared memory. Larger elements first: every array starts aligned to
    its element without padding.

    >>> from fusegrad.dtype import dtypes
    >>> dynamic_shared_layout([UOp(Ops.DEFINE_LOCAL, dtypes.half.ptr(8192, local=True), arg="a"), UOp(Ops.DEFINE_LOCAL, dtypes.float.ptr(10000, local=True), arg="b")])
    ({'b': 0, 'a': 40000}, 56384)
    """
    sizes = {u.arg: (u.dtype.size * u.dtype.base.itemsize, u.dtype.base.itemsize) for u in locals_}
    total = sum(nbytes for nbytes, _ in sizes.values())
    if total <= STATIC_SHARED_MAX: return {}, 0
    offsets, at = {}, 0
    for name, (nbytes, _) in sorted(sizes.items(), key=lambda item: -item[1][1]):
        offsets[name] = at
        at += nbytes
    return offsets, total
