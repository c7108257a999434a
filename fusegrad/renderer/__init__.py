"""Renderers turn a linear list of kernel UOps into source for one backend.

The linear program format is documented in docs/linear_uops.md. ``ProgramSpec`` is what crosses
from codegen to the runtime: name, source, launch sizes, and the flop/byte estimates.
"""
from __future__ import annotations
from dataclasses import dataclass, field, fields
from typing import Any
from fusegrad.dtype import DType, dtypes
from fusegrad.helpers import BEAM, NOOPT, VECTORIZE, USE_TC, TC_OPT, TRANSCENDENTAL, ContextVar, getenv
from fusegrad.uop.ops import UOp, Ops, sym_infer

@dataclass(frozen=True)
class FragmentLayout:
    """Where a warp's lanes keep the elements of one operand of a warp tensor core (``TensorCore.threads`` > 1).

    An operand is a matrix with coordinates (row, col): (m, k) for ``a``, (k, n) for ``b``, (m, n) for ``c``.
    Lane ``t`` of the warp holds ``elements`` of it, and the coordinates of its element ``e`` are made of the
    bits of ``t`` and ``e``: bit ``b`` of the lane number is bit ``lane_bits[b][1]`` of coordinate
    ``lane_bits[b][0]`` (0 row, 1 col), and likewise for ``element_bits``. Every (lane, element) pair names a
    different point, so the lanes hold the whole matrix once (a permutation of its bits).

    mma.m16n8k16's accumulator: lane t = 4*g + q holds (g, 2q), (g, 2q+1), (g+8, 2q), (g+8, 2q+1):

    >>> c = FragmentLayout(lane_bits=((1, 1), (1, 2), (0, 0), (0, 1), (0, 2)), element_bits=((1, 0), (0, 3)))
    >>> [c.coordinates(5, e) for e in range(4)]
    [(1, 2), (1, 3), (9, 2), (9, 3)]
    """
    lane_bits: tuple[tuple[int, int], ...]
    element_bits: tuple[tuple[int, int], ...]
    @property
    def elements(self) -> int: return 1 << len(self.element_bits)
    def coordinates(self, lane: int, element: int) -> tuple[int, int]:
        """(row, col) of ``element`` of the fragment that lane ``lane`` holds."""
        place = [0, 0]
        for number, bits in ((lane, self.lane_bits), (element, self.element_bits)):
            for bit, (coordinate, position) in enumerate(bits): place[coordinate] |= ((number >> bit) & 1) << position
        return place[0], place[1]

@dataclass(frozen=True)
class TensorCore:
    """A matrix instruction a backend declares: ``C[M x N] += A[M x K] @ B[K x N]`` on small fragments.

    ``OptOps.TC`` (codegen/opt/tc.py) turns a matching reduce into a ``WMMA`` uop per step of the
    remaining reduce loop. Two kinds:

    - **Per thread** (``threads`` 1: the CPU's ``vdpbf16ps``). Its sources, every fragment a vector in
      row-major order: ``WMMA(a, b_0, .., b_{K-1}, c)`` with ``a`` of ``dtype_in.vec(M*K)`` (``a[m*K+k]``), one
      row ``b_k`` of ``dtype_in.vec(N)`` per k, and the accumulator ``c`` of ``dtype_out.vec(M*N)``; the result
      is ``c[m*N+n] + sum_k a[m*K+k] * b_k[n]``.
    - **Per warp** (``threads`` 32: CUDA's ``mma.sync``). ``threads`` lanes of a workgroup, consecutive in
      launch order (the kernel's ``AxisType.WARP`` range, always local dim x), run it together, each holding a
      slice of every operand: ``WMMA(a, b, c)`` with ``a`` of ``dtype_in.vec(M*K/threads)``, ``b`` of
      ``dtype_in.vec(K*N/threads)`` and ``c`` of ``dtype_out.vec(M*N/threads)``, the elements where
      ``layout`` (a, b, c) says. Every lane of the warp must execute it (no divergence).

    The products are exact and added in order k = 0, 1, ... (hardware may round the additions in another
    order). bfloat16 fragments travel as their 16-bit patterns (codegen/lowering.py ``emulate_bfloat16``).

    >>> TensorCore(dims=(16, 1, 2), dtype_in=dtypes.bfloat16, dtype_out=dtypes.float32, name="bf16_16x1x2").fragment_lanes
    (2, 16, 16)
    """
    dims: tuple[int, int, int]   # N, M, K (tinygrad's order)
    dtype_in: DType
    dtype_out: DType
    name: str                    # the renderer's name for its instruction (a C helper function on the CPU)
    threads: int = 1             # lanes that execute one instruction together (32: a warp)
    layout: tuple[FragmentLayout, FragmentLayout, FragmentLayout] | None = None   # a, b, c of a warp instruction
    def __post_init__(self):
        n, m, k = self.dims
        if self.threads > 1:
            assert self.layout is not None and [1 << len(f.lane_bits) for f in self.layout] == [self.threads] * 3, "a warp layout per operand"
            assert [f.elements * self.threads for f in self.layout] == [m * k, k * n, m * n], "the fragments hold the matrices"
    @property
    def fragment_lanes(self) -> tuple[int, int, int]:
        """Lanes of the ``a`` fragment, of each ``b`` row (per thread) or the ``b`` fragment (per warp), and of ``c``."""
        n, m, k = self.dims
        if self.layout is not None: return tuple(f.elements for f in self.layout)   # type: ignore[return-value]
        return m * k, n, m * n
    def __repr__(self) -> str: return f"TensorCore({self.name})"

# The Context settings that change generated code, by their RendererOptions field. Their values are part of
# every compiled-kernel cache key (engine/realize.py) and of the BEAM cache key (codegen/opt/search.py), so a
# kernel compiled under Context(VECTORIZE=0) or TC=0 is not reused under other settings. A new setting that
# changes generated code belongs here (and as a field of RendererOptions).
CODEGEN_FLAGS: dict[str, ContextVar] = {"beam": BEAM, "noopt": NOOPT, "vectorize": VECTORIZE, "use_tc": USE_TC, "tc_opt": TC_OPT,
                                        "transcendental": TRANSCENDENTAL}

@dataclass(frozen=True)
class RendererOptions:
    """Everything that decides the code one kernel compiles to, besides the kernel itself: the target, what
    its hardware can do, and the codegen flags' values. One frozen value, ``renderer.options``, the key of the
    compiled-kernel cache and (without ``beam``/``noopt``) of the BEAM cache.

    >>> from fusegrad.renderer.cstyle import ClangRenderer
    >>> from fusegrad.helpers import Context
    >>> with Context(VECTORIZE=0): ClangRenderer().options.vectorize
    0
    >>> ClangRenderer().options == ClangRenderer().options, ClangRenderer().options.target
    (True, 'CPU')
    """
    target: str                         # the renderer's device ("CPU", "LLVM", "CL", "CUDA", "PYTHON", ...)
    variant: tuple                      # the renderer's constructor arguments (CUDA arch, OpenCL limits, CPU threads)
    has_local: bool                     # global/local launch dims (GPU-style); else globals become loops
    has_shared: bool                    # workgroup-shared memory (GROUP, GROUPTOP, staged copies on the GPU)
    has_threads: bool                   # THREAD ranges run on CPU cores
    local_max: tuple[int, ...] | None   # per local launch dim, x, y, z
    local_max_threads: int              # threads in one workgroup (product of the local dims)
    shared_max: int                     # bytes of shared memory per workgroup
    max_vector_bytes: int               # widest vector register
    vector_registers: int               # vector registers a register tile's accumulators may fill
    scalar_accumulators: int            # scalar accumulators a register tile may hold when its column fills no vector
    stage_max_bytes: int                # staged copies per kernel without shared memory (OptOps.STAGE on the CPU)
    pack_max_bytes: int                 # a thread's packed panels (OptOps.PACK on the CPU, on its stack)
    workgroup_threads: int              # threads per workgroup the GPU heuristic aims for
    thread_accumulators: int            # accumulators of a GPU thread's register tile
    filling_outputs: int                # outputs below which a long reduce is split over a workgroup (GROUP)
    vector_loops: bool                  # innermost UPCAST loops become vector code (codegen/vectorize.py)
    vector_gathers: str                 # where lane-by-lane vectors (gathers, scatters) pay: "register_tiles", "always", "never"
    vector_dtypes: tuple[DType, ...] | None   # scalar dtypes whose vectors the target takes (None: all vectorize.py makes)
    native_transcendentals: bool        # False: exp2/log2/sin are decomposed into polynomials
    gpu_heuristic: bool                 # workgroup defaults from codegen/opt/gpu_heuristic.py
    flat_elementwise: bool              # the GPU heuristic leaves kernels without a reduce to the runtime's launch (CUDA)
    tensor_cores: tuple[TensorCore, ...]
    beam: int                           # the codegen flags (helpers.py ContextVars, CODEGEN_FLAGS), current values
    noopt: int
    vectorize: int
    use_tc: int
    tc_opt: int
    transcendental: int
    def __hash__(self) -> int:
        # (a cache key hashed per kernel launch: the field tuple is hashed once)
        if (cached := self.__dict__.get("_hash")) is None: cached = self.__dict__["_hash"] = hash(tuple(getattr(self, f.name) for f in fields(self)))
        return cached

class Renderer:
    """What a backend can do, and ``render(name, uops) -> str``. A renderer's fields don't change after it
    is made: ``options`` snapshots them (with the codegen flags) as the cache key of compiled kernels."""
    device: str = ""
    has_local: bool = False          # global/local launch dims (GPU-style); else globals become loops
    has_shared: bool = False
    has_threads: bool = False        # THREAD ranges run on CPU cores
    local_max: tuple[int, ...] | None = (0x8FFFFFFF,) * 3   # per local launch dim, x, y, z
    local_max_threads: int = 1024    # threads in one workgroup (product of the local dims)
    shared_max: int = 32768
    max_vector_bytes: int = 64       # widest vector register (AVX-512)
    vector_registers: int = 16       # accumulators of a register tile, in vector registers (AVX-512 has 32; half, measured)
    scalar_accumulators: int = 160   # accumulators of a register tile whose column fills no vector (measured on AVX-512)
    stage_max_bytes: int = 1 << 20   # staged copies per kernel on the CPU (stack up to 64 KB, else heap)
    # a thread's packed panels (OptOps.PACK): on its stack (OpenMP private arrays, an LLVM alloca); a 512 KB panel is
    # a 32-column slice of a 4096-deep weight and still fits the L2 cache it is meant to stream from
    pack_max_bytes: int = 1 << 19
    # the GPU heuristic's (codegen/opt/gpu_heuristic.py) hardware numbers; GPU_LOCAL_THREADS overrides the first
    workgroup_threads: int = getenv("GPU_LOCAL_THREADS", 128)
    thread_accumulators: int = 16    # accumulators per thread (registers: a 4x4 tile)
    filling_outputs: int = 2048      # outputs that keep the device busy without splitting a reduce over threads
    vector_loops: bool = False       # renders vector dtypes: innermost UPCAST loops become vector code (codegen/vectorize.py)
    # where a loop whose lanes aren't contiguous in memory still pays as vector code (gathered loads, scattered stores):
    # "register_tiles" only where the loop also works on a register tile, or its index isn't affine (measured on the
    # CPU: docs/decisions.md); "always"; "never" (such loops stay loops)
    vector_gathers: str = "register_tiles"
    vector_dtypes: tuple[DType, ...] | None = None   # scalar dtypes whose vectors it takes; None: all codegen/vectorize.py makes
    native_transcendentals: bool = True   # False: exp2/log2/sin are decomposed into polynomials
    gpu_heuristic: bool = False      # workgroup renderers (OpenCL): codegen/opt/gpu_heuristic.py picks their opts
    flat_elementwise: bool = False   # ... except for kernels without a reduce, whose blocks the runtime picks (CUDA's flat launch)
    tensor_cores: list[TensorCore] = []   # matrix instructions OptOps.TC may use (the first that matches)
    def render(self, name: str, uops: list[UOp]) -> str: raise NotImplementedError
    def __reduce__(self): return self.__class__, ()

    @property
    def options(self) -> RendererOptions:
        """This renderer's ``RendererOptions`` under the current Context (one object per distinct setting)."""
        # (read per kernel launch, as the compiled-kernel cache key: kept to a few dict lookups)
        flags = (BEAM.value, NOOPT.value, VECTORIZE.value, USE_TC.value, TC_OPT.value, TRANSCENDENTAL.value)   # CODEGEN_FLAGS' order
        try: return self.__dict__["_options_memo"][flags]
        except KeyError: pass
        memo: dict = self.__dict__.setdefault("_options_memo", {})
        found = memo[flags] = self._make_options(flags)
        return found

    def _make_options(self, flags: tuple) -> RendererOptions:
        return RendererOptions(
            target=self.device, variant=tuple(self.__reduce__()[1]), has_local=self.has_local, has_shared=self.has_shared,
            has_threads=self.has_threads, local_max=None if self.local_max is None else tuple(self.local_max),
            local_max_threads=self.local_max_threads, shared_max=self.shared_max, max_vector_bytes=self.max_vector_bytes,
            vector_registers=self.vector_registers, scalar_accumulators=self.scalar_accumulators, stage_max_bytes=self.stage_max_bytes,
            pack_max_bytes=self.pack_max_bytes, workgroup_threads=self.workgroup_threads, thread_accumulators=self.thread_accumulators,
            filling_outputs=self.filling_outputs,
            vector_loops=self.vector_loops, vector_gathers=self.vector_gathers,
            vector_dtypes=self.vector_dtypes, native_transcendentals=self.native_transcendentals, gpu_heuristic=self.gpu_heuristic,
            flat_elementwise=self.flat_elementwise, tensor_cores=tuple(self.tensor_cores), **dict(zip(CODEGEN_FLAGS, flags)))

@dataclass
class ProgramSpec:
    """A rendered kernel ready to compile: its source, launch shape and cost estimates."""
    name: str
    src: str
    device: str
    uops: list[UOp] = field(default_factory=list)
    global_size: list[Any] = field(default_factory=lambda: [1, 1, 1])
    local_size: list[Any] | None = None
    vars: list[UOp] = field(default_factory=list)        # DEFINE_VARs, in kernel-argument order
    outs: list[int] = field(default_factory=list)        # buffer slots written
    ins: list[int] = field(default_factory=list)         # buffer slots read
    op_estimate: Any = 0
    mem_estimate: Any = 0
    applied_opts: tuple = ()
    def launch_dims(self, var_vals: dict[UOp, int]) -> tuple[list[int], list[int] | None]:
        # (sizes hold the kernel's variables as the index-typed UOps, ``vars`` their narrowed copies: match by name)
        by_name = {v.arg[0]: val for v, val in var_vals.items()}
        def infer(s: Any) -> int:
            if isinstance(s, int): return s
            return sym_infer(s, {v: by_name[v.arg[0]] for v in s.toposort if v.op is Ops.DEFINE_VAR and v.arg[0] in by_name})
        global_size = [infer(s) for s in self.global_size]
        local_size = [infer(s) for s in self.local_size] if self.local_size is not None else None
        return global_size, local_size
