"""The NULL device: it allocates nothing, compiles nothing and runs nothing.

Every stage in front of the runtime still happens — scheduling, optimization, lowering and
rendering of C source — so schedules, kernel counts, flop estimates and generated code can be
tested at any size without memory or a compiler:

>>> from fusegrad import Tensor, GlobalCounters
>>> a = Tensor.empty(65536, 65536, device="NULL")       # 16 GiB of float32: nothing is allocated
>>> GlobalCounters.reset(); (a @ a).sum().realize(); GlobalCounters.kernel_count >= 1
True

Reading values back (``numpy()``, ``item()``, copies to another device) raises RuntimeError, since
the data doesn't exist; ``NULL_ALLOW_COPYOUT=1`` makes copies out return zeros instead.
"""
from __future__ import annotations
import os
from typing import Any
from fusegrad.device import Allocator, Compiled, Compiler
from fusegrad.renderer.cstyle import ClangRenderer

class NullAllocator(Allocator):
    """Hands out placeholders instead of memory; copies in are dropped, copies out refused."""
    def alloc(self, size: int, options: Any = None) -> Any:
        if size <= 0: raise ValueError(f"buffer size must be positive, got {size}")
        return _NULL_MEMORY
    def free(self, opaque: Any, size: int, options: Any = None) -> None: pass
    def _copyin(self, dest: Any, src: memoryview) -> None: pass
    def _copyout(self, dest: memoryview, src: Any) -> None:
        if os.environ.get("NULL_ALLOW_COPYOUT", "0") in ("", "0"):   # read each time: tests flip it
            raise RuntimeError("the NULL device holds no data, so nothing can be read back from it "
                               "(set NULL_ALLOW_COPYOUT=1 to read zeros)")
        dest[:] = bytes(len(dest))
    def _offset(self, opaque: Any, size: int, offset: int) -> Any: return _NULL_MEMORY

class _NullMemory:
    """The placeholder every NULL buffer holds (one shared object: there is nothing to tell apart)."""
    def __repr__(self) -> str: return "<NULL memory>"

_NULL_MEMORY = _NullMemory()

class NullCompiler(Compiler):
    """The source is rendered (so codegen is exercised) but not compiled: the binary is empty."""
    def __init__(self) -> None: super().__init__(None)
    def compile(self, src: str) -> bytes: return b""

class NullProgram:
    """A kernel that does nothing when called; with ``wait=True`` it reports a zero run time."""
    def __init__(self, name: str, lib: bytes) -> None: self.name = name
    def __call__(self, *bufs: Any, global_size: Any = (1, 1, 1), local_size: Any = None, vals: Any = (), wait: bool = False) -> float | None:
        return 0.0 if wait else None

class NullRenderer(ClangRenderer):
    """The CPU's C renderer without threads, so NULL kernels look like CPU kernels."""
    device = "NULL"

class NullDevice(Compiled):
    def __init__(self, device: str):
        super().__init__(device, NullAllocator(), NullRenderer(has_threads=False), NullCompiler(), NullProgram)
