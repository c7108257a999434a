"""Renderers turn a linear list of kernel UOps into source for one backend.

The linear program format is documented in docs/linear_uops.md. ``ProgramSpec`` is what crosses
from codegen to the runtime: name, source, launch sizes, and the flop/byte estimates.
"""
from __future__ import annotations
from dataclasses import dataclass, field
from typing import Any
from fusegrad.dtype import DType, dtypes
from fusegrad.uop.ops import UOp, Ops, sym_infer

@dataclass(frozen=True)
class TensorCore:
    """A matrix instruction a backend declares: ``C[M x N] += A[M x K] @ B[K x N]`` on small fragments.

    ``OptOps.TC`` (codegen/opt/tc.py) turns a matching reduce into a ``WMMA`` uop per step of the
    remaining reduce loop. Its sources, every fragment a vector in row-major order:
    ``WMMA(a, b_0, .., b_{K-1}, c)`` with ``a`` of ``dtype_in.vec(M*K)`` (``a[m*K+k]``), one row
    ``b_k`` of ``dtype_in.vec(N)`` per k, and the accumulator ``c`` of ``dtype_out.vec(M*N)``; the
    result is ``c[m*N+n] + sum_k a[m*K+k] * b_k[n]``, the products exact and added in order
    k = 0, 1, ... (hardware may round the additions in another order). bfloat16 fragments travel as their
    16-bit patterns (codegen/lowering.py ``emulate_bfloat16``).

    >>> TensorCore(dims=(16, 1, 2), dtype_in=dtypes.bfloat16, dtype_out=dtypes.float32, name="bf16_16x1x2").fragment_lanes
    (2, 16, 16)
    """
    dims: tuple[int, int, int]   # N, M, K (tinygrad's order)
    dtype_in: DType
    dtype_out: DType
    name: str                    # the renderer's name for its instruction (a C helper function on the CPU)
    @property
    def fragment_lanes(self) -> tuple[int, int, int]:
        """Lanes of the ``a`` fragment, of each ``b`` row, and of ``c``."""
        n, m, k = self.dims
        return m * k, n, m * n
    def __repr__(self) -> str: return f"TensorCore({self.name})"

class Renderer:
    """What a backend can do, and ``render(name, uops) -> str``."""
    device: str = ""
    suffix: str = ""
    supports_float4: bool = False
    has_local: bool = False          # global/local launch dims (GPU-style); else globals become loops
    has_shared: bool = False
    has_threads: bool = False        # THREAD ranges run on CPU cores
    has_tensor_cores: bool = False
    global_max: tuple[int, ...] | None = (0x8FFFFFFF,) * 3
    local_max: tuple[int, ...] | None = (0x8FFFFFFF,) * 3   # per local launch dim, x, y, z
    local_max_threads: int = 1024    # threads in one workgroup (product of the local dims)
    shared_max: int = 32768
    max_vector_bytes: int = 64       # widest vector register (AVX-512)
    vector_loops: bool = False       # renders vector dtypes: innermost UPCAST loops become vector code (codegen/vectorize.py)
    native_transcendentals: bool = True   # False: exp2/log2/sin are decomposed into polynomials
    tensor_cores: list[TensorCore] = []   # matrix instructions OptOps.TC may use (the first that matches)
    def render(self, name: str, uops: list[UOp]) -> str: raise NotImplementedError
    def __reduce__(self): return self.__class__, ()

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
        global_size = [sym_infer(s, var_vals) for s in self.global_size]
        local_size = [sym_infer(s, var_vals) for s in self.local_size] if self.local_size is not None else None
        return global_size, local_size
