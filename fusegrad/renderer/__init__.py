"""Renderers turn a linear list of kernel UOps into source for one backend.

The linear program format is documented in docs/linear_uops.md. ``ProgramSpec`` is what crosses
from codegen to the runtime: name, source, launch sizes, and the flop/byte estimates.
"""
from __future__ import annotations
from dataclasses import dataclass, field
from typing import Any
from fusegrad.uop.ops import UOp, Ops, sym_infer

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
    tensor_cores: list = []
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
