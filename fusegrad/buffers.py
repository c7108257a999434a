"""The buffer registry: which device ``Buffer`` holds the memory of each BUFFER uop.

A BUFFER uop (``Ops.BUFFER``, arg ``(id, device, size)``) names memory; the ``Buffer`` object that
owns it (device.py) is created the first time someone asks for it (``buffer_of``) and allocated by
whoever needs the bytes. The registry is weak on the uop: when no graph or tensor refers to a BUFFER
uop any more, its ``Buffer`` (and memory) goes with it.

It lives here, beside device.py and below everything that finds memory through it (the scheduler,
the realize engine, the JIT, runtime/ops_disk.py, nn/state.py, tensor.py), so none of those has to
import the scheduler to reach a buffer. ``fusegrad.schedule`` re-exports the three names for older
callers.
"""
from __future__ import annotations
import itertools, weakref
from fusegrad.dtype import dtypes
from fusegrad.uop.ops import UOp, Ops
from fusegrad.device import Buffer

BUFFERS: "weakref.WeakKeyDictionary[UOp, Buffer]" = weakref.WeakKeyDictionary()
_buffer_ids = itertools.count()

def new_buffer_uop(device: str, size, dtype) -> UOp:
    """A fresh BUFFER node (each call is a distinct buffer). A symbolic size allocates its maximum."""
    if type(size) is not int and isinstance(size, UOp): size = int(size.vmax)
    # (dtypes.concrete inlined: dtypes are interned, and this runs for the output of every eager op)
    if dtype is dtypes.weakint or dtype is dtypes.weakfloat: dtype = dtypes.concrete(dtype)
    return UOp(Ops.BUFFER, dtype, (), (next(_buffer_ids), device, size if size > 1 else 1))

def buffer_of(buffer_uop: UOp) -> Buffer:
    """The ``Buffer`` object for a BUFFER uop, created (unallocated) on first use."""
    if (buf := BUFFERS.get(buffer_uop)) is None:
        _, device, size = buffer_uop.arg
        buf = BUFFERS[buffer_uop] = Buffer(device, size, buffer_uop.dtype)
    return buf
