"""The DISK device: files as memory-mapped buffers.

``Device["DISK:/path/to/file"]`` maps the file; ``Tensor.empty(n, dtype=dtypes.uint8, device="disk:/path")``
gives a tensor over its first ``n`` bytes (the file grows to ``n`` bytes if it is shorter). Buffers are
``DiskBuffer`` views ``(mapping, offset, size)``; sub-buffers (``Buffer.view``) are more views of the same
mapping, so slicing costs nothing and a copy to another device reads only the bytes it needs.

DISK runs no kernels: a DISK tensor can only be moved to another device, bitcast, or sliced. Computing on one
raises an error that says so (from the renderer, compiler and runtime, whichever is touched first).

>>> import os, tempfile
>>> from fusegrad import Tensor, dtypes
>>> path = os.path.join(tempfile.mkdtemp(), "f.bin")
>>> _ = open(path, "wb").write(bytes(range(16)))
>>> t = Tensor.empty(16, dtype=dtypes.uint8, device=f"disk:{path}")
>>> disk_view(t, 4, 8).to("CPU").tolist()
[4, 5, 6, 7, 8, 9, 10, 11]
"""
from __future__ import annotations
import mmap, os
from typing import Any
from fusegrad.device import Allocator, Compiled, Compiler
from fusegrad.dtype import DType, dtypes, to_dtype
from fusegrad.helpers import prod

DISK_ONLY_MESSAGE = "DISK tensors can only be moved to another device, bitcast, or sliced"

class DiskComputeError(RuntimeError):
    """Someone tried to run a kernel on a DISK device."""

# ---------------------------------------------------------------- memory

class DiskMapping:
    """One open file and its mmap. Reference counted: the last ``release`` unmaps and closes."""
    def __init__(self, path: str, size: int):
        self.path, self.size, self.refcount = path, size, 0
        try:
            self.fd, self.writable = os.open(path, os.O_RDWR | os.O_CREAT), True
        except PermissionError:
            self.fd, self.writable = os.open(path, os.O_RDONLY), False
        try:
            st = os.fstat(self.fd)
            if st.st_size < size:
                if not self.writable: raise RuntimeError(f"DISK:{path} is a read-only file of {st.st_size} bytes; can't map {size} bytes")
                os.ftruncate(self.fd, size)
            self.inode = (st.st_dev, st.st_ino)
            self.mem = mmap.mmap(self.fd, size, access=mmap.ACCESS_WRITE if self.writable else mmap.ACCESS_READ)
            self.view = memoryview(self.mem)
        except BaseException:
            os.close(self.fd)
            raise
    def is_current(self) -> bool:
        """Is the path still the file that is mapped (not deleted or replaced since)?"""
        try: st = os.stat(self.path)
        except OSError: return False
        return (st.st_dev, st.st_ino) == self.inode
    def acquire(self) -> "DiskMapping":
        self.refcount += 1
        return self
    def release(self) -> None:
        self.refcount -= 1
        if self.refcount > 0: return
        self.view.release()
        try: self.mem.close()
        except BufferError: pass   # a zero-copy memoryview handed out earlier is still alive; the GC closes it
        os.close(self.fd)
        self.fd = -1

class DiskBuffer:
    """``size`` bytes at ``offset`` in a mapping."""
    __slots__ = ("mapping", "offset", "size")
    def __init__(self, mapping: DiskMapping, offset: int, size: int):
        if offset < 0 or size < 0 or offset + size > mapping.size:
            raise ValueError(f"DISK buffer [{offset}, {offset + size}) is outside the mapped {mapping.size} bytes of {mapping.path}")
        self.mapping, self.offset, self.size = mapping, offset, size
    def mv(self) -> memoryview:
        if self.mapping.fd < 0: raise RuntimeError(f"DISK buffer of {self.mapping.path} used after its file was closed")
        return self.mapping.view[self.offset:self.offset + self.size]
    def __repr__(self) -> str: return f"<DiskBuffer {self.mapping.path} offset={self.offset} size={self.size}>"

class DiskAllocator(Allocator):
    """Buffers are views of the device's mapping. No LRU cache: freeing releases the file."""
    def __init__(self, device: "DiskDevice"):
        super().__init__()
        self.device = device
    def alloc(self, size: int, options: Any = None) -> DiskBuffer:
        if size <= 0: raise ValueError(f"buffer size must be positive, got {size}")
        return self._alloc(size, options)
    def free(self, opaque: DiskBuffer, size: int, options: Any = None) -> None: self._free(opaque, options)
    def _alloc(self, size: int, options: Any) -> DiskBuffer: return DiskBuffer(self.device._open(size), 0, size)
    def _free(self, opaque: DiskBuffer, options: Any) -> None: opaque.mapping.release()
    def _as_buffer(self, src: DiskBuffer) -> memoryview: return src.mv()
    def _copyout(self, dest: memoryview, src: DiskBuffer) -> None: dest[:] = src.mv()
    def _copyin(self, dest: DiskBuffer, src: memoryview) -> None:
        if not dest.mapping.writable: raise PermissionError(f"DISK:{dest.mapping.path} was opened read-only; can't write to it")
        dest.mv()[:] = src
    def _offset(self, opaque: DiskBuffer, size: int, offset: int) -> DiskBuffer:
        return DiskBuffer(opaque.mapping, opaque.offset + offset, size)
    def readinto(self, src: DiskBuffer, dest: memoryview) -> None:
        """Read with the OS (``os.preadv``) instead of faulting pages in through the mapping."""
        if hasattr(os, "preadv"):
            done = 0
            while done < len(dest):
                n = os.preadv(src.mapping.fd, [dest[done:]], src.offset + done)
                if n <= 0: raise OSError(f"short read from {src.mapping.path} at {src.offset + done}")
                done += n
        else: dest[:] = src.mv()

# ---------------------------------------------------------------- no kernels on DISK

class DiskRenderer:
    """Any use (the scheduler asking what the device can do, or rendering) is an error."""
    device = "DISK"
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"): raise AttributeError(name)
        raise DiskComputeError(f"{DISK_ONLY_MESSAGE}; a kernel was scheduled on a DISK device")
    def __reduce__(self): return self.__class__, ()

class DiskCompiler(Compiler):
    def __init__(self) -> None: super().__init__(None)
    def compile(self, src: str) -> bytes: raise DiskComputeError(f"{DISK_ONLY_MESSAGE}; nothing can be compiled for DISK")
    def compile_cached(self, src: str) -> bytes: return self.compile(src)

class DiskProgram:
    def __init__(self, name: str, lib: bytes): raise DiskComputeError(f"{DISK_ONLY_MESSAGE}; kernel {name} can't run on DISK")

class DiskDevice(Compiled):
    """``DISK:/path``. The first buffer opened decides the mapped size; a later, larger request while the
    file is still open is an error ("can't reopen ... larger"). A file that was replaced or deleted since it
    was mapped is opened afresh (old buffers keep the old mapping)."""
    def __init__(self, device: str):
        if not device.upper().startswith("DISK:") or len(device) <= 5: raise ValueError(f"a DISK device needs a path: DISK:/path, got {device!r}")
        self.path = device[5:]
        self.mapping: DiskMapping | None = None
        super().__init__(device, DiskAllocator(self), DiskRenderer(), DiskCompiler(), DiskProgram)
    @property
    def size(self) -> int | None:
        """Bytes mapped now (None when the file isn't open)."""
        return self.mapping.size if self.mapping is not None and self.mapping.refcount > 0 else None
    def _open(self, size: int) -> DiskMapping:
        m = self.mapping
        if m is not None and m.refcount > 0 and m.is_current():
            if size > m.size:
                raise RuntimeError(f"can't reopen DISK:{self.path} with a larger size: it is open with {m.size} bytes, "
                                   f"tried to open it with {size} (release the tensors that use it first)")
            return m.acquire()
        self.mapping = DiskMapping(self.path, size)
        return self.mapping.acquire()

# ---------------------------------------------------------------- views of DISK tensors (no copies)

def _c_strides(shape: tuple, itemsize: int) -> tuple:
    strides, acc = [], itemsize
    for s in reversed(shape):
        strides.append(acc)
        acc *= s
    return tuple(reversed(strides))

def _is_contiguous(shape: tuple, strides: tuple, itemsize: int) -> bool:
    return all(st == c for s, st, c in zip(shape, strides, _c_strides(shape, itemsize)) if s != 1)

def is_disk(device: Any) -> bool:
    return isinstance(device, str) and device.upper().startswith("DISK:")

def disk_byte_range(u: Any) -> tuple[Any, int, int]:
    """For a UOp that is a chain of RESHAPE / SHRINK / same-size BITCAST over a DISK BUFFER, the base BUFFER uop
    and the (byte offset, byte length) it covers. Raises if the view isn't one contiguous byte range."""
    from fusegrad.uop.ops import Ops
    chain = []
    node = u
    while node.op is not Ops.BUFFER:
        if node.op not in (Ops.RESHAPE, Ops.SHRINK, Ops.BITCAST) or (node.op is Ops.BITCAST and node.dtype.itemsize != node.src[0].dtype.itemsize):
            raise DiskComputeError(f"{DISK_ONLY_MESSAGE}; {node.op.name} isn't possible on a DISK tensor")
        chain.append(node)
        node = node.src[0]
    if not is_disk(node.device): raise ValueError(f"not a DISK tensor (it is on {node.device})")
    itemsize = node.dtype.itemsize
    shape, strides, offset = tuple(node.shape), (itemsize,), 0
    for x in reversed(chain):
        if x.op is Ops.RESHAPE:
            if not _is_contiguous(shape, strides, itemsize):
                raise DiskComputeError(f"{DISK_ONLY_MESSAGE}; can't reshape a non-contiguous slice of a DISK tensor")
            shape = tuple(x.arg)
            strides = _c_strides(shape, itemsize)
        elif x.op is Ops.SHRINK:
            if not all(isinstance(b, int) and isinstance(e, int) for b, e in x.arg):
                raise DiskComputeError(f"{DISK_ONLY_MESSAGE}; symbolic slices of DISK tensors aren't supported")
            offset += sum(b * st for (b, _), st in zip(x.arg, strides))
            shape = tuple(e - b for b, e in x.arg)
    if prod(shape) and not _is_contiguous(shape, strides, itemsize):
        raise DiskComputeError(f"{DISK_ONLY_MESSAGE}; this slice of a DISK tensor (shape {u.shape}) isn't one contiguous "
                               f"byte range, so it can't be copied without a kernel")
    return node, offset, prod(shape) * itemsize

def _view_of(base: Any, byte_offset: int, dtype: DType, shape: tuple) -> Any:
    """A fresh BUFFER uop (reshaped to ``shape``) for a sub-buffer of the DISK BUFFER ``base``."""
    from fusegrad.uop.ops import UOp
    from fusegrad.schedule import new_buffer_uop, buffer_of, BUFFERS
    count = prod(shape)
    if count == 0: return UOp.const(dtype, 0, base.device, shape)
    buf = buffer_of(base).ensure_allocated()
    view = new_buffer_uop(base.device, count, dtype)
    BUFFERS[view] = buf.view(count, dtype, byte_offset).ensure_allocated()
    return view.reshape(shape)

def disk_view_uop(u: Any, dtype: DType | None = None, shape: tuple | None = None) -> Any:
    """A new BUFFER uop (reshaped to ``shape``) whose Buffer is a sub-buffer of the DISK buffer under ``u``:
    same bytes, no copy. ``dtype`` reinterprets them (any item size), and ``shape`` defaults to ``u``'s shape
    with the last dim rescaled by the item size change (as ``Tensor.bitcast`` does)."""
    base, offset, nbytes = disk_byte_range(u)
    dtype = u.dtype if dtype is None else to_dtype(dtype)
    if shape is None:
        shape = tuple(u.shape)
        if dtype.itemsize != u.dtype.itemsize:
            if not shape or (shape[-1] * u.dtype.itemsize) % dtype.itemsize:
                raise ValueError(f"can't bitcast shape {shape} of {u.dtype} to {dtype}: the last dimension doesn't divide")
            shape = shape[:-1] + (shape[-1] * u.dtype.itemsize // dtype.itemsize,)
    if prod(shape) * dtype.itemsize != nbytes:
        raise ValueError(f"a DISK view of {nbytes} bytes can't hold shape {shape} of {dtype}")
    return _view_of(base, offset, dtype, tuple(shape))

def disk_view(t: Any, offset: int | None = None, nbytes: int | None = None, dtype: DType | str | None = None,
              shape: tuple | None = None) -> Any:
    """A DISK tensor over bytes of the DISK tensor ``t`` (itself any contiguous slice/bitcast of a DISK
    buffer), without copying. With ``offset``/``nbytes`` it takes those bytes of ``t`` (default: from
    ``offset`` to the end), reinterpreted as ``dtype`` (default uint8) and shaped ``shape`` (default 1-d).
    Without them it is ``t`` itself as a plain sub-buffer, optionally bitcast to ``dtype``.

    This is also what ``Tensor.bitcast`` and ``Tensor.to`` need for slices of DISK tensors."""
    from fusegrad.tensor import Tensor
    if not is_disk(t.device): raise ValueError(f"disk_view needs a DISK tensor, this one is on {t.device}")
    if offset is None and nbytes is None: return Tensor(disk_view_uop(t.uop, dtype, shape), requires_grad=False)
    base, start, total = disk_byte_range(t.uop)
    offset = 0 if offset is None else offset
    nbytes = total - offset if nbytes is None else nbytes
    if offset < 0 or nbytes < 0 or offset + nbytes > total:
        raise ValueError(f"byte range [{offset}, {offset + nbytes}) is outside this DISK tensor of {total} bytes")
    dtype = dtypes.uint8 if dtype is None else to_dtype(dtype)
    if nbytes % dtype.itemsize: raise ValueError(f"{nbytes} bytes isn't a whole number of {dtype} items")
    shape = (nbytes // dtype.itemsize,) if shape is None else tuple(shape)
    if prod(shape) * dtype.itemsize != nbytes: raise ValueError(f"shape {shape} of {dtype} doesn't fill {nbytes} bytes")
    return Tensor(_view_of(base, start + offset, dtype, shape), requires_grad=False)

def disk_buffer(t: Any) -> Any:
    """The (sub-)``Buffer`` holding exactly the bytes of the DISK tensor ``t`` (for ``copyin`` / ``as_buffer``)."""
    from fusegrad.schedule import buffer_of
    v = disk_view(t)
    if v.numel() == 0: raise ValueError("an empty DISK tensor has no buffer")
    return buffer_of(v.uop.base).ensure_allocated()

def tensor_bytes(t: Any) -> bytes:
    """The bytes of a tensor in row-major order (bfloat16 and fp8 as their raw bits), read from its realized
    buffer: same-size bitcasts are peeled off first, since they don't change the bytes."""
    from fusegrad.tensor import Tensor
    from fusegrad.device import Device
    from fusegrad.uop.ops import Ops, GroupOp
    from fusegrad.schedule import buffer_of
    if isinstance(t.device, tuple): t = t.to(t.device[0])
    if is_disk(t.device): t = disk_view(t).to(Device.DEFAULT)
    u, movement = t.uop, []
    while True:   # movement ops over same-size bitcasts: replay the movement on the bitcast's source instead
        if u.op in GroupOp.Movement: movement.append((u.op, u.arg))
        elif not (u.op in (Ops.DETACH, Ops.CONTIGUOUS_BACKWARD) or (u.op is Ops.BITCAST and u.dtype.itemsize == u.src[0].dtype.itemsize)): break
        u = u.src[0]
    for op, arg in reversed(movement): u = u._mop(op, arg)
    x = Tensor(u, requires_grad=False)
    if x.numel() == 0: return b""
    if not (u.op is Ops.BUFFER or (u.op is Ops.RESHAPE and u.src[0].op is Ops.BUFFER)) or not x._is_realized():
        x = x.contiguous().realize()
    buf = buffer_of(x.uop.base)
    if x.uop.base.op is not Ops.BUFFER or buf.nbytes != x.numel() * t.dtype.itemsize: raise RuntimeError(f"couldn't read the bytes of a {t.dtype} tensor of shape {t.shape}")
    return bytes(buf.as_buffer())

def disk_assign(target: Any, value: Any) -> Any:
    """Write ``value`` into the bytes of the DISK tensor ``target`` (a slice or bitcast of a file) now, through
    ``copyin``: what ``Tensor.assign`` needs on DISK. Returns ``target``."""
    from fusegrad.tensor import Tensor
    if not isinstance(value, Tensor): value = Tensor(value, dtype=target.dtype)
    if value.shape != target.shape: raise ValueError(f"assign shape mismatch: target {target.shape}, value {value.shape}")
    if value.dtype != target.dtype: value = value.cast(target.dtype)
    if target.numel() == 0: return target
    disk_buffer(target).copyin(memoryview(tensor_bytes(value)))
    return target
