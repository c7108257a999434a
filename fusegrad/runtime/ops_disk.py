"""The DISK device: files as buffers.

``Device["DISK:/path/to/file"]`` opens the file; ``Tensor.empty(n, dtype=dtypes.uint8, device="disk:/path")``
gives a tensor over its first ``n`` bytes (the file grows to ``n`` bytes if it is shorter). Buffers are
``DiskBuffer`` views ``(file, offset, size)``; sub-buffers (``Buffer.view``) are more views of the same
file, so slicing costs nothing and a copy to another device reads only the bytes it needs.

Files are read with ``os.pread`` and written with ``os.pwrite``, never memory-mapped: a mapping of a file that
another process truncates kills this process (SIGBUS) on the next access past the new end, while a short read
is an ordinary ``DiskFileError``. ``disk_file_tensor`` opens a file read-only (what the checkpoint loaders use).

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
import os
from typing import Any
from fusegrad.device import Allocator, Compiled, Compiler
from fusegrad.buffers import BUFFERS, buffer_of, new_buffer_uop
from fusegrad.dtype import DType, dtypes, to_dtype
from fusegrad.helpers import prod

DISK_ONLY_MESSAGE = "DISK tensors can only be moved to another device, bitcast, or sliced"

class DiskComputeError(RuntimeError):
    """Someone tried to run a kernel on a DISK device."""

class DiskCastError(DiskComputeError, NotImplementedError):
    """``cast`` on a DISK tensor (tinygrad raises NotImplementedError): a cast is a kernel."""

# ---------------------------------------------------------------- memory

class DiskFileError(OSError):
    """A DISK file no longer has the bytes it had when it was opened (truncated by someone else)."""

class DiskFile:
    """One open file of a DISK device. Reference counted: the last ``release`` closes it.

    Nothing is memory-mapped: every read is an ``os.pread`` and every write an ``os.pwrite``. A mapped file
    that another process truncates kills this process with SIGBUS on the next access past the new end; a
    short ``pread`` is an ordinary error instead (``DiskFileError``).

    A file that exists with at least ``size`` bytes is opened read-only; a write (``copyin``) opens a second,
    writable descriptor on first use. Only a missing or shorter file is opened for writing up front, because it
    is created or grown to ``size`` bytes (``Tensor.empty(n, device="disk:/new/file")``). ``readonly=True``
    never writes: a shorter file is an error."""
    def __init__(self, path: str, size: int, readonly: bool = False):
        self.path, self.size, self.refcount = path, size, 0
        self.write_fd = -1
        try: self.fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            if readonly: raise
            self.fd = -1
        try:
            st = os.fstat(self.fd) if self.fd >= 0 else None
            if st is None or st.st_size < size:
                if readonly: raise DiskFileError(f"DISK:{path} has {st.st_size if st else 0} bytes; can't open {size} bytes of it read-only")
                self._open_for_writing(create=True)
                if self.fd >= 0: os.close(self.fd)
                self.fd = os.open(path, os.O_RDONLY)
                os.ftruncate(self.write_fd, size)
                st = os.fstat(self.fd)
            self.inode = (st.st_dev, st.st_ino)
        except BaseException:
            self._close()
            raise
    @property
    def writable(self) -> bool:
        """Can this file be written (opening it for writing if needed)?"""
        try: self._open_for_writing()
        except PermissionError: return False
        return True
    def _open_for_writing(self, create: bool = False) -> int:
        if self.write_fd < 0:
            try: self.write_fd = os.open(self.path, os.O_WRONLY | (os.O_CREAT if create else 0))
            except PermissionError:
                raise PermissionError(f"DISK:{self.path} is a read-only file; can't write to it") from None
            st = os.fstat(self.write_fd)
            if not create and (st.st_dev, st.st_ino) != self.inode:
                os.close(self.write_fd)
                self.write_fd = -1
                raise DiskFileError(f"DISK:{self.path} was replaced since it was opened; not writing into the new file")
        return self.write_fd
    def check_open(self) -> None:
        if self.fd < 0: raise RuntimeError(f"DISK buffer of {self.path} used after its file was closed")
    def pread_into(self, offset: int, dest: memoryview) -> None:
        """Fill ``dest`` with the bytes at ``offset``; a file shorter than that (truncated since it was opened)
        raises ``DiskFileError``."""
        self.check_open()
        done = 0
        while done < len(dest):
            n = os.preadv(self.fd, [dest[done:]], offset + done) if hasattr(os, "preadv") else self._pread_copy(dest[done:], offset + done)
            if n <= 0:
                now = os.fstat(self.fd).st_size
                raise DiskFileError(f"DISK:{self.path}: needed bytes [{offset}, {offset + len(dest)}) but the file has {now} bytes now "
                                    f"(it was truncated after it was opened)")
            done += n
    def _pread_copy(self, dest: memoryview, offset: int) -> int:
        data = os.pread(self.fd, len(dest), offset)
        dest[:len(data)] = data
        return len(data)
    def pwrite_from(self, offset: int, src: memoryview) -> None:
        self.check_open()
        fd, done = self._open_for_writing(), 0
        while done < len(src):
            n = os.pwrite(fd, src[done:], offset + done)
            if n <= 0: raise DiskFileError(f"DISK:{self.path}: short write at byte {offset + done}")
            done += n
    def is_current(self) -> bool:
        """Is the path still the file that is open (not deleted or replaced since)?"""
        try: st = os.stat(self.path)
        except OSError: return False
        return (st.st_dev, st.st_ino) == self.inode
    def acquire(self) -> "DiskFile":
        self.refcount += 1
        return self
    def release(self) -> None:
        self.refcount -= 1
        if self.refcount <= 0: self._close()
    def _close(self) -> None:
        for fd in (self.fd, self.write_fd):
            if fd >= 0: os.close(fd)
        self.fd = self.write_fd = -1

class DiskBuffer:
    """``size`` bytes at ``offset`` in an open file."""
    __slots__ = ("file", "offset", "size")
    def __init__(self, file: DiskFile, offset: int, size: int):
        if offset < 0 or size < 0 or offset + size > file.size:
            raise ValueError(f"DISK buffer [{offset}, {offset + size}) is outside the opened {file.size} bytes of {file.path}")
        self.file, self.offset, self.size = file, offset, size
    def __repr__(self) -> str: return f"<DiskBuffer {self.file.path} offset={self.offset} size={self.size}>"

class DiskAllocator(Allocator):
    """Buffers are byte ranges of the device's open file. No LRU cache: freeing releases the file. There is no
    zero-copy ``_as_buffer``: ``Buffer.as_buffer`` reads a copy with ``copyout`` (see DiskFile for why)."""
    def __init__(self, device: "DiskDevice"):
        super().__init__()
        self.device = device
    def alloc(self, size: int, options: Any = None) -> DiskBuffer:
        if size <= 0: raise ValueError(f"buffer size must be positive, got {size}")
        return self._alloc(size, options)
    def free(self, opaque: DiskBuffer, size: int, options: Any = None) -> None: self._free(opaque, options)
    def _alloc(self, size: int, options: Any) -> DiskBuffer: return DiskBuffer(self.device._open(size), 0, size)
    def _free(self, opaque: DiskBuffer, options: Any) -> None: opaque.file.release()
    def _copyout(self, dest: memoryview, src: DiskBuffer) -> None: src.file.pread_into(src.offset, dest)
    def _copyin(self, dest: DiskBuffer, src: memoryview) -> None: dest.file.pwrite_from(dest.offset, src)
    def _offset(self, opaque: DiskBuffer, size: int, offset: int) -> DiskBuffer:
        return DiskBuffer(opaque.file, opaque.offset + offset, size)
    def readinto(self, src: DiskBuffer, dest: memoryview) -> None:
        """Read the bytes of ``src`` into ``dest`` (``os.preadv``: no pages are mapped)."""
        src.file.pread_into(src.offset, dest)

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
    """``DISK:/path``. The first buffer opened decides the opened size; a later, larger request while the
    file is still open is an error ("can't reopen ... larger"). A file that was replaced or deleted since it
    was opened is opened afresh (old buffers keep reading the old file)."""
    def __init__(self, device: str):
        if not device.upper().startswith("DISK:") or len(device) <= 5: raise ValueError(f"a DISK device needs a path: DISK:/path, got {device!r}")
        self.path = device[5:]
        self.file: DiskFile | None = None
        super().__init__(device, DiskAllocator(self), DiskRenderer(), DiskCompiler(), DiskProgram)
    @property
    def size(self) -> int | None:
        """Bytes open now (None when the file isn't open)."""
        return self.file.size if self.file is not None and self.file.refcount > 0 else None
    def _open(self, size: int, readonly: bool = False) -> DiskFile:
        m = self.file
        if m is not None and m.refcount > 0 and m.is_current():
            if size > m.size:
                raise RuntimeError(f"can't reopen DISK:{self.path} with a larger size: it is open with {m.size} bytes, "
                                   f"tried to open it with {size} (release the tensors that use it first)")
            return m.acquire()
        self.file = DiskFile(self.path, size, readonly)
        return self.file.acquire()

def disk_file_tensor(path: str | os.PathLike) -> Any:
    """The whole file at ``path`` as a 1-d uint8 DISK tensor, opened read-only: nothing is read yet, the size is
    the open file's (no race with a file that changes between a size check and the open), and the file is
    never created, grown or opened for writing."""
    from fusegrad.tensor import Tensor
    from fusegrad.device import Device
    path = os.path.abspath(os.fspath(path))
    if not os.path.isfile(path): raise FileNotFoundError(f"no such file: {path}")
    device = Device[f"DISK:{path}"]
    with open(path, "rb") as f: size = os.fstat(f.fileno()).st_size
    if size == 0: raise ValueError(f"{path} is empty")
    opened = device._open(size, readonly=True)   # held while the tensor's buffer takes its own reference
    try:
        t = Tensor.empty(size, dtype=dtypes.uint8, device=f"DISK:{path}")
        buffer_of(t.uop.base).ensure_allocated()
    finally: opened.release()
    return t

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
    """For a UOp that is a chain of RESHAPE / SHRINK / same-size BITCAST over a DISK BUFFER (or over a pending
    copy onto DISK, which runs first), the base BUFFER uop and the (byte offset, byte length) it covers. Raises
    if the view isn't one contiguous byte range."""
    from fusegrad.uop.ops import Ops
    chain = []
    node = u
    while node.op is not Ops.BUFFER:
        if node.op is Ops.COPY and is_disk(node.device):
            # a pending copy onto DISK (``x.to("disk:...")``): write the file now, so reads see the copy
            from fusegrad.tensor import Tensor
            node = Tensor(node, requires_grad=False).realize().uop
            continue
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
                raise RuntimeError(f"can't bitcast shape {shape} of {u.dtype} to {dtype}: the last dimension doesn't divide")
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
    v = disk_view(t)
    if v.numel() == 0: raise ValueError("an empty DISK tensor has no buffer")
    return buffer_of(v.uop.base).ensure_allocated()

def disk_read_into(buffer: Any, offset: int, out: memoryview) -> None:
    """Read ``len(out)`` bytes at ``offset`` within the DISK ``Buffer`` into ``out`` (a short file raises
    ``DiskFileError``, it never crashes)."""
    opaque = buffer.ensure_allocated()._buf
    if offset < 0 or offset + len(out) > opaque.size:
        raise ValueError(f"read of [{offset}, {offset + len(out)}) is outside this DISK buffer of {opaque.size} bytes")
    opaque.file.pread_into(opaque.offset + offset, out)

def tensor_bytes(t: Any) -> bytes:
    """The bytes of a tensor in row-major order (bfloat16 and fp8 as their raw bits), read from its realized
    buffer: same-size bitcasts are peeled off first, since they don't change the bytes."""
    from fusegrad.tensor import Tensor
    from fusegrad.device import Device
    from fusegrad.uop.ops import Ops, GroupOp
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
    from fusegrad.uop.ops import Ops
    if not isinstance(value, Tensor): value = Tensor(value, dtype=target.dtype)
    # a pending copy to DISK (``x.to(disk_tensor.device)``): write its source's bytes, so the copy
    # happens here and later reads of the file see it
    while is_disk(value.device) and value.uop.op is Ops.COPY: value = Tensor(value.uop.src[0], requires_grad=False)
    if value.shape != target.shape: raise ValueError(f"assign shape mismatch: target {target.shape}, value {value.shape}")
    if value.dtype != target.dtype: value = value.cast(target.dtype)
    if target.numel() == 0: return target
    disk_buffer(target).copyin(memoryview(tensor_bytes(value)))
    return target
