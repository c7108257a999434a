"""The NPY device: buffers that are numpy arrays, so a numpy input can enter fusegrad without a
copy. It runs no kernels: move NPY tensors to a compute device with ``.to("CPU")``.

>>> t = Tensor(np.arange(4, dtype=np.float32), device="NPY")     # wraps the array's memory
>>> (t.to("CPU") + 1).tolist()
[1.0, 2.0, 3.0, 4.0]
"""
from __future__ import annotations
from typing import Any
import numpy as np
from fusegrad.device import Allocator, Compiled, Compiler
from fusegrad.renderer import Renderer

class NpyAllocator(Allocator):
    """Memory is a flat uint8 numpy array; an existing array can be wrapped as the opaque."""
    def _alloc(self, size: int, options: Any) -> np.ndarray: return np.empty(size, dtype=np.uint8)
    def _as_buffer(self, src: np.ndarray) -> memoryview: return memoryview(src.reshape(-1).view(np.uint8))
    def _copyin(self, dest: np.ndarray, src: memoryview) -> None: dest.reshape(-1).view(np.uint8)[:] = np.frombuffer(src, dtype=np.uint8)
    def _copyout(self, dest: memoryview, src: np.ndarray) -> None: np.frombuffer(dest, dtype=np.uint8)[:] = src.reshape(-1).view(np.uint8)
    def _offset(self, opaque: np.ndarray, size: int, offset: int) -> np.ndarray: return opaque.reshape(-1).view(np.uint8)[offset:offset + size]

class NpyRenderer(Renderer):
    device = "NPY"
    def render(self, name: str, uops: list) -> str:
        raise RuntimeError("the NPY device holds numpy arrays and can't run kernels; move the tensor with .to('CPU') first")

class NpyDevice(Compiled):
    def __init__(self, device: str):
        super().__init__(device, NpyAllocator(), NpyRenderer(), Compiler(None), lambda *args: None)
