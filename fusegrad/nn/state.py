"""Checkpoints: safetensors, PyTorch .pt/.pth (zip and legacy formats), GGUF, tar and zip archives, and the
state-dict helpers that map a model's tensors to dotted names.

Loaders take a path (the file is opened read-only through the DISK device, so nothing is read until a tensor is
used) or a 1-d uint8 ``Tensor`` holding the file. Tensors stored contiguously come back as DISK tensors over
their bytes; ``.to(device)``, ``.numpy()`` and ``load_state_dict`` copy just those bytes.

Every file is untrusted: headers are checked against the file size before anything is read; a file truncated
after it was opened gives an error when a tensor is read (DISK reads are ``pread``s: no mapping to SIGBUS on);
memory the loader allocates beyond views of the file (decompressed zip members, gathered strided tensors) is
checked against ``max_bytes`` before it is allocated; and the pickle inside a torch checkpoint is read by an
unpickler that only knows the tensor-rebuild functions (a pickle that tries to call anything else is refused,
never run) and gives the pickle only new objects that refuse to be changed (pickle BUILD, SETITEM, APPEND: no
pickle can reach the loader's own functions or the process's dtypes), with every tensor's size, stride and offset
checked again where its bytes are read, and shared objects converted once (a pickle of shared tuples nested 40
deep stays cheap).

>>> import os, tempfile
>>> from fusegrad import Tensor
>>> path = os.path.join(tempfile.mkdtemp(), "m.safetensors")
>>> safe_save({"w": Tensor([[1.0, 2.0]])}, path)
>>> safe_load(path)["w"].to("CPU").tolist()
[[1.0, 2.0]]
"""
from __future__ import annotations
import collections, io, json, math, os, pathlib, pickle, struct, sys, tarfile, time, warnings, zipfile, zlib
from typing import Any, Callable
from fusegrad.tensor import Tensor
from fusegrad.dtype import DType, dtypes, to_np_dtype
from fusegrad.device import Device
from fusegrad.buffers import new_buffer_uop, buffer_of
from fusegrad.helpers import prod, getenv, DEBUG, GlobalCounters, tqdm
from fusegrad.runtime.ops_disk import is_disk, disk_view, disk_buffer, disk_file_tensor, disk_read_into, tensor_bytes

__all__ = ["safe_load", "safe_save", "safe_load_metadata", "get_state_dict", "get_parameters", "load_state_dict",
           "torch_load", "tar_extract", "zip_extract", "gguf_load", "TensorIO", "safe_dtypes", "inverse_safe_dtypes"]

# ---------------------------------------------------------------- reading bytes of a file or a uint8 tensor

def _check_byte_tensor(t: Tensor) -> Tensor:
    if not isinstance(t, Tensor): raise TypeError(f"expected a path or a 1-d uint8 Tensor, got {type(t).__name__}")
    if t.ndim != 1 or t.dtype != dtypes.uint8: raise ValueError(f"Tensor must be 1d and of dtype uint8! (got shape {t.shape}, {t.dtype})")
    return t

def _file_tensor(fn: Any) -> Tensor:
    """The whole file as a 1-d uint8 DISK tensor (opened read-only, nothing read yet)."""
    return disk_file_tensor(fn)

def _as_byte_tensor(fn: Any) -> Tensor:
    return _check_byte_tensor(fn) if isinstance(fn, Tensor) else _file_tensor(fn)

LOAD_MIN_BYTES = 1 << 30   # the default memory limit of a load is the larger of this and LOAD_FILE_RATIO x the file size
LOAD_FILE_RATIO = 16

class _MemoryBudget:
    """Bytes a loader may allocate beyond views of the file (decompressed members, gathered strided tensors, copies
    out of a non-DISK tensor). Every such allocation is declared here *before* it is made, so a 1.5 MB zip that
    inflates to gigabytes, or a 1-element storage expanded to a billion elements, is refused up front."""
    def __init__(self, max_bytes: int | None, file_nbytes: int, what: str):
        if max_bytes is None: max_bytes = getenv("LOAD_MAX_BYTES", 0) or max(LOAD_MIN_BYTES, LOAD_FILE_RATIO * file_nbytes)
        if not isinstance(max_bytes, int) or isinstance(max_bytes, bool) or max_bytes < 0:
            raise ValueError(f"max_bytes must be a non-negative int, got {max_bytes!r}")
        self.limit, self.used, self.what = max_bytes, 0, what
    def take(self, nbytes: int, name: str) -> None:
        if self.used + nbytes > self.limit:
            raise ValueError(f"{self.what}: {name} needs {nbytes:,} bytes of memory beyond the file ({self.used:,} taken already), over the "
                             f"limit of {self.limit:,} bytes; if the file is trusted, raise it with max_bytes= or the LOAD_MAX_BYTES "
                             f"environment variable")
        self.used += nbytes

class _Source:
    """Bounds-checked access to the bytes of a 1-d uint8 tensor: ``read`` returns bytes, ``tensor`` a tensor
    over a byte range (a zero-copy DISK view for DISK tensors, a fresh tensor on the same device otherwise).
    DISK bytes are read with ``pread`` when asked for, so a file truncated since it was opened gives an error
    (``DiskFileError``), never a crash. ``budget`` counts the memory the load allocates (see _MemoryBudget).
    ``error`` is the exception type of a byte range outside the source (the format's own: CorruptTarError, ...)."""
    def __init__(self, t: Tensor, what: str = "file", max_bytes: int | None = None, budget: _MemoryBudget | None = None,
                 error: type[ValueError] = ValueError):
        self.t, self.what, self.error = _check_byte_tensor(t), what, error
        self.nbytes = t.shape[0]
        self._host_buffer = None
        self.budget = budget if budget is not None else _MemoryBudget(max_bytes, self.nbytes, what)
        self.device = Device.DEFAULT if is_disk(t.device) else t.device   # where copies go
        if is_disk(t.device):
            self._buf = disk_buffer(t) if self.nbytes else None
            self._np = None
        else:
            self.budget.take(self.nbytes, f"a host copy of the {what}")
            self._buf, self._np = None, t.numpy()
    @classmethod
    def of_array(cls, data: Any, what: str, budget: _MemoryBudget, device: str, error: type[ValueError] = ValueError,
                 host_buffer: Any = None) -> "_Source":
        """A source over bytes already in memory (a numpy uint8 array, counted against ``budget`` by its maker). With
        ``host_buffer`` (the host-memory ``Buffer`` that ``data`` is a view of), ``tensor`` gives views of that buffer
        instead of copies."""
        src = cls.__new__(cls)
        src.t, src.what, src.nbytes, src.budget, src.device, src.error = None, what, len(data), budget, device, error
        src._buf, src._np, src._host_buffer = None, data, host_buffer
        return src
    def check(self, offset: int, nbytes: int, name: str = "data") -> None:
        if not (isinstance(offset, int) and isinstance(nbytes, int)) or offset < 0 or nbytes < 0 or offset + nbytes > self.nbytes:
            raise self.error(f"corrupt or truncated {self.what}: {name} needs bytes [{offset}, {offset + nbytes}) "
                             f"but the {self.what} has {self.nbytes} bytes")
    def read(self, offset: int, nbytes: int, name: str = "data") -> bytes:
        self.check(offset, nbytes, name)
        if self._np is not None: return self._np[offset:offset + nbytes].tobytes()
        out = bytearray(nbytes)
        if nbytes: disk_read_into(self._buf, offset, memoryview(out))
        return bytes(out)
    def read_into(self, offset: int, out: Any, name: str = "data") -> None:
        """Read exactly ``len(out)`` bytes at ``offset`` into ``out`` (a numpy uint8 array), bounds-checked."""
        self.check(offset, len(out), name)
        if not len(out): return
        if self._np is not None: out[:] = self._np[offset:offset + len(out)]
        else: disk_read_into(self._buf, offset, memoryview(out))
    def readinto(self, offset: int, out: memoryview) -> int:
        n = max(0, min(len(out), self.nbytes - offset))
        if n == 0: return 0
        if self._np is not None: out[:n] = self._np[offset:offset + n].tobytes()
        else: disk_read_into(self._buf, offset, out[:n])
        return n
    def tensor(self, offset: int, nbytes: int, dtype: DType, shape: tuple, name: str = "tensor") -> Tensor:
        self.check(offset, nbytes, name)
        shape = tuple(shape)
        if prod(shape) * dtype.itemsize != nbytes:
            raise self.error(f"corrupt {self.what}: {name} has {nbytes} bytes, but shape {shape} of {dtype} needs {prod(shape) * dtype.itemsize}")
        if self._np is None: return disk_view(self.t, offset, nbytes, dtype, shape)
        if self._host_buffer is not None and nbytes: return _buffer_view_tensor(self._host_buffer, offset, dtype, shape)
        self.budget.take(nbytes, name)
        return _tensor_from_bytes(self._np[offset:offset + nbytes], dtype, shape, self.device)   # (a view: copied once, into the buffer)

def _tensor_from_bytes(raw: Any, dtype: DType, shape: tuple, device: str) -> Tensor:
    """A realized tensor holding exactly ``raw`` (bytes or a numpy array's memory; any dtype, bfloat16 and fp8
    included: no kernel runs)."""
    return _new_tensor_filled(dtype, shape, device, lambda out: out.__setitem__(slice(None), memoryview(raw).cast("B")))

def _new_tensor_filled(dtype: DType, shape: tuple, device: str, fill: Callable[[Any], None]) -> Tensor:
    """A new realized tensor whose bytes ``fill`` writes into the numpy uint8 array it is given: the buffer's own
    memory on a device whose memory is the host's (CPU, LLVM, PYTHON), so the bytes are written once, where they
    stay; elsewhere a host array, copied in (the caller counts both)."""
    import numpy as np
    from fusegrad.uop.ops import UOp
    if prod(shape) == 0: return Tensor(UOp.const(dtype, 0, device, tuple(shape)), requires_grad=False)
    u = new_buffer_uop(device, prod(shape), dtype)
    buffer = buffer_of(u).allocate()
    if (host := _host_bytes(buffer)) is not None: fill(host)
    else:
        staging = np.empty(buffer.nbytes, np.uint8)
        fill(staging)
        buffer.copyin(memoryview(staging))
    return Tensor(u.reshape(tuple(shape)), requires_grad=False)

def _host_bytes(buffer: Any) -> Any:
    """A writable numpy uint8 array over an allocated ``Buffer``'s memory, or None where that memory isn't the host's."""
    import numpy as np
    from fusegrad.device import MallocAllocator
    if not isinstance(buffer.allocator, MallocAllocator): return None
    return np.frombuffer(buffer.allocator._as_buffer(buffer._buf), np.uint8)

def _buffer_view_tensor(buffer: Any, offset: int, dtype: DType, shape: tuple) -> Tensor:
    """A realized tensor over ``prod(shape)`` items of ``dtype`` at byte ``offset`` of the host ``buffer``: a sub-buffer
    sharing its memory (no copy; the view keeps ``buffer`` alive), like a DISK view."""
    from fusegrad.buffers import BUFFERS
    numel = prod(shape)
    u = new_buffer_uop(buffer.device, numel, dtype)
    BUFFERS[u] = buffer.view(numel, dtype, offset).ensure_allocated()
    return Tensor(u.reshape(tuple(shape)), requires_grad=False)

class TensorIO(io.RawIOBase):
    """A read-only, seekable file over a 1-d uint8 tensor: ``zipfile.ZipFile(TensorIO(t))`` works."""
    def __init__(self, t: Tensor):
        _check_byte_tensor(t)
        self._tensor, self._position, self._src, self._src_uop = t, 0, None, None
    def _source(self) -> _Source:
        if self._src is None or self._src_uop is not self._tensor.uop:
            self._src, self._src_uop = _Source(self._tensor, "tensor"), self._tensor.uop
        return self._src
    def readable(self) -> bool: return True
    def seekable(self) -> bool: return True
    def writable(self) -> bool: return False
    def readinto(self, buffer: Any) -> int:
        if self.closed: raise ValueError("I/O operation on closed TensorIO")
        out = memoryview(buffer).cast("B")
        n = self._source().readinto(self._position, out)
        self._position += n
        return n
    def read(self, size: int = -1) -> bytes:
        # never more than what is left: a corrupt length field (a pickle or tar header claiming gigabytes)
        # must not allocate a buffer of that size before the short read is noticed
        left = max(0, self._tensor.shape[0] - self._position)
        if (buf := super().read(left if size is None or size < 0 else min(size, left))) is None:
            raise ValueError("io.RawIOBase.read returned None")
        return buf
    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if self.closed: raise ValueError("I/O operation on closed TensorIO")
        if whence not in (io.SEEK_SET, io.SEEK_CUR, io.SEEK_END): raise ValueError(f"invalid whence {whence}")
        size = self._tensor.shape[0]
        self._position = min(size, max(0, [offset, self._position + offset, size + offset][whence]))
        return self._position
    def tell(self) -> int: return self._position
    def write(self, s: Any) -> int: raise io.UnsupportedOperation("TensorIO.write not supported")
    def writelines(self, lines: Any) -> None: raise io.UnsupportedOperation("TensorIO.writelines not supported")

_raw_bytes = tensor_bytes

def _write_file(path: Any, parts: list[tuple[int, bytes]], total: int) -> None:
    """Write ``parts`` (offset, bytes) into a new file of ``total`` bytes through the DISK device."""
    path = os.path.abspath(os.fspath(path))
    pathlib.Path(path).unlink(missing_ok=True)   # old mappings of the file keep the old bytes
    out = Tensor.empty(total, dtype=dtypes.uint8, device=f"disk:{path}")
    buf = disk_buffer(out)
    for offset, data in parts:
        if data: buf.view(len(data), dtypes.uint8, offset).copyin(memoryview(data))
    del buf, out

# ---------------------------------------------------------------- safetensors

safe_dtypes: dict[str, DType] = {"BOOL": dtypes.bool, "I8": dtypes.int8, "U8": dtypes.uint8, "I16": dtypes.int16, "U16": dtypes.uint16,
                                 "I32": dtypes.int32, "U32": dtypes.uint32, "I64": dtypes.int64, "U64": dtypes.uint64,
                                 "F16": dtypes.float16, "BF16": dtypes.bfloat16, "F32": dtypes.float32, "F64": dtypes.float64,
                                 "F8_E4M3": dtypes.fp8e4m3, "F8_E5M2": dtypes.fp8e5m2}
inverse_safe_dtypes: dict[DType, str] = {v: k for k, v in safe_dtypes.items()}
SAFETENSORS_MAX_HEADER = 100_000_000

def safe_load_metadata(fn: Tensor | str | os.PathLike) -> tuple[Tensor, int, dict[str, Any]]:
    """``(t, json_len, header)``: the file as a uint8 tensor, the header length and the parsed JSON header
    (``header["__metadata__"]`` holds the user metadata). The header is checked against the file size."""
    t = _as_byte_tensor(fn)
    src = _Source(t, "safetensors file")
    if src.nbytes < 8: raise ValueError(f"not a safetensors file: {src.nbytes} bytes is too short for the 8-byte header length")
    json_len = struct.unpack("<Q", src.read(0, 8))[0]
    if json_len > src.nbytes - 8 or json_len > SAFETENSORS_MAX_HEADER:
        raise ValueError(f"corrupt safetensors file: the header claims {json_len} bytes but only {src.nbytes - 8} follow the length")
    try: header = json.loads(src.read(8, json_len).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e: raise ValueError(f"corrupt safetensors header: not valid UTF-8 JSON ({e})") from None
    except RecursionError:   # json parses nested arrays and objects recursively: "[" * 100000 overflows the stack
        raise ValueError("corrupt safetensors header: its JSON nests arrays or objects too deeply to parse") from None
    if not isinstance(header, dict): raise ValueError(f"corrupt safetensors header: expected a JSON object, got {type(header).__name__}")
    if "__metadata__" in header and not isinstance(header["__metadata__"], dict):
        raise ValueError("corrupt safetensors header: __metadata__ must be an object")
    return t, json_len, header

def safe_load(fn: Tensor | str | os.PathLike, max_bytes: int | None = None) -> dict[str, Tensor]:
    """Load a .safetensors file: name → tensor (DISK tensors over the file when loading from a path; copies, within
    ``max_bytes`` in all, when loading from a tensor on another device: see ``torch_load``)."""
    t, json_len, header = safe_load_metadata(fn)
    src = _Source(t, "safetensors file", max_bytes)
    data_start, data_len = 8 + json_len, src.nbytes - 8 - json_len
    ret: dict[str, Tensor] = {}
    for name, info in _load_bar("safe_load", header.items(), len(header)):
        if name == "__metadata__": continue
        if not isinstance(info, dict) or not {"dtype", "shape", "data_offsets"} <= info.keys():
            raise ValueError(f"corrupt safetensors header: entry {name!r} needs dtype, shape and data_offsets, got {info!r:.200}")
        if info["dtype"] not in safe_dtypes: raise ValueError(f"safetensors entry {name!r}: unknown dtype {info['dtype']!r}")
        dtype, shape, offsets = safe_dtypes[info["dtype"]], info["shape"], info["data_offsets"]
        if not isinstance(shape, list) or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in shape):
            raise ValueError(f"corrupt safetensors header: entry {name!r} has invalid shape {shape!r}")
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)):
            raise ValueError(f"corrupt safetensors header: entry {name!r} has invalid data_offsets {offsets!r}")
        begin, end = offsets
        if not 0 <= begin <= end <= data_len:
            raise ValueError(f"corrupt or truncated safetensors file: entry {name!r} data_offsets [{begin}, {end}) are outside the "
                             f"{data_len} data bytes")
        if end - begin != prod(shape) * dtype.itemsize:
            raise ValueError(f"corrupt safetensors header: entry {name!r} has {end - begin} bytes but shape {shape} of "
                             f"{info['dtype']} needs {prod(shape) * dtype.itemsize}")
        ret[name] = src.tensor(data_start + begin, end - begin, dtype, tuple(shape), name)
    return ret

def safe_save(tensors: dict[str, Tensor], fn: str | os.PathLike, metadata: dict[str, Any] | None = None) -> None:
    """Write ``tensors`` (name → tensor) as a .safetensors file, with optional ``metadata`` (str → str)."""
    headers: dict[str, Any] = {}
    if metadata: headers["__metadata__"] = metadata
    offset, blobs = 0, []
    for k, v in tensors.items():
        if not isinstance(k, str) or k == "__metadata__": raise ValueError(f"invalid tensor name {k!r}")
        if not isinstance(v, Tensor): raise TypeError(f"safe_save: {k!r} is a {type(v).__name__}, not a Tensor")
        if v.dtype not in inverse_safe_dtypes: raise ValueError(f"safe_save: {k!r} has dtype {v.dtype}, which safetensors can't store")
        data = _raw_bytes(v)
        headers[k] = {"dtype": inverse_safe_dtypes[v.dtype], "shape": list(v.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append((offset, data))
        offset += len(data)
    j = json.dumps(headers, separators=(",", ":"))
    j += "\x20" * ((8 - len(j) % 8) % 8)
    jb = j.encode("utf-8")
    start = 8 + len(jb)
    _write_file(fn, [(0, struct.pack("<Q", len(jb)) + jb)] + [(start + o, d) for o, d in blobs], start + offset)

# ---------------------------------------------------------------- state dicts

def get_state_dict(obj: Any, prefix: str = "", tensor_type: type = Tensor) -> dict[str, Tensor]:
    """Every tensor reachable from ``obj`` through attributes, lists, tuples and dicts, by dotted name:
    ``{"l1.weight": ..., "layers.0.bias": ...}``."""
    return _state_dict(obj, prefix, tensor_type, set())

def _state_dict(obj: Any, prefix: str, tensor_type: type, active: set[int]) -> dict[str, Tensor]:
    if isinstance(obj, tensor_type): return {prefix.strip("."): obj}
    if id(obj) in active: return {}   # a reference cycle (e.g. a child pointing at its parent)
    active.add(id(obj))
    try:
        if hasattr(obj, "_asdict"): return _state_dict(obj._asdict(), prefix, tensor_type, active)   # namedtuple
        if isinstance(obj, collections.OrderedDict): return _state_dict(dict(obj), prefix, tensor_type, active)
        if hasattr(obj, "__dict__"): return _state_dict(obj.__dict__, prefix, tensor_type, active)
        state_dict: dict[str, Tensor] = {}
        if isinstance(obj, (list, tuple)):
            for i, x in enumerate(obj): state_dict.update(_state_dict(x, f"{prefix}{i}.", tensor_type, active))
        elif isinstance(obj, dict):
            for k, v in obj.items(): state_dict.update(_state_dict(v, f"{prefix}{k}.", tensor_type, active))
        return state_dict
    finally: active.discard(id(obj))

def get_parameters(obj: Any) -> list[Tensor]:
    """The tensors of ``get_state_dict(obj)``, in order."""
    return list(get_state_dict(obj).values())

LOAD_BAR_DELAY = 1.0       # a load shows its progress bar once it has taken this long (seconds)...
LOAD_BAR_MANY_TENSORS = 200   # ...or at once when it has this many tensors

def _load_bar(what: str, items: Any, total: int, show: bool = True, leave: bool = False) -> tqdm:
    """The progress bar of a load (one step per tensor): on stderr, only when it is a terminal (so never in a
    pipe, a log or under pytest), and only once the load has taken LOAD_BAR_DELAY seconds or has many tensors."""
    delay = 0.0 if total >= LOAD_BAR_MANY_TENSORS else LOAD_BAR_DELAY
    return tqdm(items, total=total, desc=what, disable=None if show else True, delay=delay, leave=leave, unit=" tensors")

def load_state_dict(model: Any, state_dict: dict[str, Tensor] | str | os.PathLike, strict: bool = True, verbose: bool = True,
                    consume: bool = False, realize: bool = True) -> list[Tensor]:
    """Put the tensors of ``state_dict`` into ``model``'s tensors (matched by ``get_state_dict`` names), copying
    them to each target's device. Shapes must match (an error names the key), except that () and (1,) load into
    each other, as in tinygrad. A model tensor takes the loaded tensor's dtype, as in tinygrad (a float16 checkpoint
    makes float16 weights; cast the state dict first to keep the model's dtypes). A key the model has but
    ``state_dict`` lacks is a KeyError when ``strict`` (a warning otherwise); keys nobody uses give a warning.
    ``consume`` deletes loaded entries from ``state_dict``. Returns the loaded tensors.

    With ``verbose`` (as in tinygrad) or DEBUG>=1 a progress bar runs on stderr when it is a terminal (a load of
    many tensors, or one that takes more than a second), and ``verbose`` prints the load time and bandwidth."""
    if isinstance(state_dict, (str, os.PathLike)): state_dict = safe_load(state_dict)
    start, start_mem = time.perf_counter(), GlobalCounters.mem_used
    model_state_dict = get_state_dict(model)
    if (unused := sorted(state_dict.keys() - model_state_dict.keys())):
        warnings.warn(f"load_state_dict: unused weights in state_dict: {unused}", stacklevel=2)
    missing = [k for k in model_state_dict if k not in state_dict]
    if missing and strict: raise KeyError(f"load_state_dict: the state dict has no value for {missing} (strict=True)")
    if missing: warnings.warn(f"load_state_dict: not loading {missing}: not in the state dict", stacklevel=2)
    ret = []
    bar = _load_bar("load_state_dict", model_state_dict.items(), len(model_state_dict), show=verbose or DEBUG >= 1, leave=True)
    for k, v in bar:
        bar.set_description(f"ram used: {GlobalCounters.mem_used / 1e9:5.2f} GB, {k}")
        if k not in state_dict: continue
        src = state_dict[k]
        if not isinstance(src, Tensor): raise TypeError(f"load_state_dict: {k!r} is a {type(src).__name__}, not a Tensor")
        if is_disk(src.device): src = disk_view(src)   # a plain sub-buffer, so the copy needs no kernel on DISK
        if v.shape != src.shape:
            # a scalar saved as (1,) or the other way round (older BatchNorm num_batches_tracked): the same one value
            if {v.shape, src.shape} == {(), (1,)}: src = src.reshape(v.shape)
            else: raise ValueError(f"Shape mismatch in layer `{k}`: Expected shape {v.shape}, but found {src.shape} in state dict.")
        if isinstance(v.device, tuple) and not isinstance(src.device, tuple):
            # a sharded model tensor: shard the loaded value the same way (through the first device, as DISK runs no kernels)
            from fusegrad.schedule.multi import multi_axis
            v.uop = (src.to(v.device[0]) if is_disk(src.device) else src).shard(v.device, multi_axis(v.uop)).uop
        else: v.uop = src.to(v.device).uop   # Tensor.replace: the model tensor now holds the loaded value (a multi source as it is)
        if realize: v.realize()
        if consume: del state_dict[k]
        ret.append(v)
    if verbose:
        dt = time.perf_counter() - start
        loaded = GlobalCounters.mem_used - start_mem
        print(f"loaded weights in {dt * 1e3:7.2f} ms, {loaded / 1e9:.2f} GB loaded at {loaded / max(dt, 1e-9) / 1e9:.2f} GB/s")
    return ret

# ---------------------------------------------------------------- tar and zip archives

# Errors for unreadable archives are the format's own exception types, as tinygrad raises them (code
# that catches tarfile.ReadError keeps working), and ValueErrors, as every other bad input here.
class CorruptTarError(tarfile.ReadError, ValueError):
    """A tar archive that can't be read."""
class CorruptZipError(zipfile.BadZipFile, ValueError):
    """A zip archive (or member) that can't be read."""
class CorruptCheckpointError(pickle.UnpicklingError, ValueError):
    """A file that is not a readable torch checkpoint."""

# what tarfile's header parsing lets escape besides TarError, on crafted headers: a PAX record length past
# sys.maxsize (OverflowError from re.match), a GNU sparse map of non-numbers (ValueError from int()), an old GNU
# sparse header cut short (IndexError), a bad base-256 or octal field in some paths (ValueError)
_TAR_PARSE_ERRORS = (tarfile.TarError, ValueError, OverflowError, IndexError, struct.error, EOFError, RecursionError)

class _CheckedTarFile(tarfile.TarFile):
    """A TarFile whose members move forward through the archive. tarfile steps to the next header by the member's
    size, and a crafted size (a negative base-256 number, a PAX ``size=-5000`` record) steps back to a header
    already read: tarfile then lists the same members forever (a hang that fills memory)."""
    def next(self) -> tarfile.TarInfo | None:
        if self.firstmember is not None: return super().next()   # (read when the archive was opened, checked then)
        before = self.offset
        member = super().next()
        if member is not None and (member.size < 0 or self.offset <= before):
            raise CorruptTarError(f"corrupt tar file: member {member.name!r:.100} has size {member.size} (its header is at offset "
                                  f"{before}, the next would be at {self.offset})")
        return member

def _tar_members(t: Tensor) -> list[tuple[str, int, int]]:
    """(name, data offset, size) of every regular file in a tar archive held by ``t``; anything tarfile can't parse
    is a CorruptTarError."""
    try:
        with _CheckedTarFile.open(fileobj=TensorIO(t), mode="r:") as tar:
            members = [(m.name, m.offset_data, m.size) for m in tar if m.isreg()]
    except CorruptTarError: raise
    except _TAR_PARSE_ERRORS as e: raise CorruptTarError(f"corrupt tar file: {type(e).__name__}: {e}") from None
    for name, offset, size in members:
        if not (isinstance(offset, int) and isinstance(size, int)) or offset < 0 or size < 0:
            raise CorruptTarError(f"corrupt tar file: member {name!r:.100} has size {size!r:.40} at offset {offset!r:.40}")
    return members

def tar_extract(fn: Tensor | str | os.PathLike, max_bytes: int | None = None) -> dict[str, Tensor]:
    """The regular files of an (uncompressed) tar archive: name → uint8 tensor over their bytes (views of a file;
    copies within ``max_bytes`` for a tensor on another device, see ``torch_load``). Sizes and offsets are
    checked against the archive; a malformed archive raises CorruptTarError (a ``tarfile.ReadError`` and a
    ``ValueError``)."""
    t = _as_byte_tensor(fn)
    src = _Source(t, "tar file", max_bytes, error=CorruptTarError)
    return {name: src.tensor(offset, size, dtypes.uint8, (size,), name) for name, offset, size in _tar_members(t)}

def _zip_data_offset(src: _Source, zi: zipfile.ZipInfo) -> int:
    """Where the bytes of a zip member start: after its local header (whose extra field length may differ
    from the central directory's)."""
    header = src.read(zi.header_offset, 30, f"local header of {zi.filename}")
    if header[:4] != b"PK\x03\x04": raise CorruptZipError(f"corrupt zip file: bad local header signature for {zi.filename}")
    name_len, extra_len = struct.unpack("<HH", header[26:30])
    return zi.header_offset + 30 + name_len + extra_len

# what zipfile and its decompressors raise on crafted input besides BadZipFile: bad header fields (ValueError,
# struct.error, IndexError, OverflowError), a broken deflate stream (zlib.error), bzip2 (OSError), lzma (LZMAError)
_ZIP_READ_ERRORS = (zipfile.BadZipFile, OSError, ValueError, EOFError, struct.error, IndexError, OverflowError, zlib.error,
                    NotImplementedError, RuntimeError)

def _zip_read_errors() -> tuple[type[BaseException], ...]:
    try: import lzma
    except ImportError: return _ZIP_READ_ERRORS
    return _ZIP_READ_ERRORS + (lzma.LZMAError,)

def _zip_members(src: _Source) -> tuple[zipfile.ZipFile, list[zipfile.ZipInfo]]:
    try: zf = zipfile.ZipFile(TensorIO(src.t), "r")
    except _zip_read_errors() as e: raise CorruptZipError(f"corrupt zip file: {type(e).__name__}: {e}") from None
    return zf, zf.infolist()

def _is_zip_dir(zi: zipfile.ZipInfo) -> bool: return zi.filename.endswith("/")   # (ZipInfo.is_dir fails on an empty name)

_ZIP_CHUNK = 1 << 20

def _take_inflated(src: _Source, zi: zipfile.ZipInfo) -> None:
    """Count a compressed member's declared size against the load's memory budget, before anything is allocated
    (twice where the device's memory isn't the host's: the host array it is inflated into, then the device copy)."""
    copies = 1 if _host_device(src.device) else 2
    src.budget.take(copies * zi.file_size, f"zip member {zi.filename!r} (declared {zi.file_size:,} bytes uncompressed)")

def _host_device(device: str) -> bool:
    from fusegrad.device import MallocAllocator
    return isinstance(Device[device].allocator, MallocAllocator)

def _inflate_into(zf: zipfile.ZipFile, zi: zipfile.ZipInfo, out: Any) -> None:
    """Decompress member ``zi`` into ``out`` (a numpy uint8 array of its declared size) a chunk at a time, so memory
    stays at that one array: ``zipfile.ZipFile.read`` would hold the whole member (and trust the header) before
    anything could be checked. A stream that ends early, runs past the declared size or is broken is a
    CorruptZipError; zipfile checks the CRC at the end."""
    done, size = 0, len(out)
    try:
        with zf.open(zi) as f:
            while done < size:
                chunk = f.read(min(_ZIP_CHUNK, size - done))
                if not chunk: raise EOFError(f"it ends after {done} of its declared {size} bytes")
                out[done:done + len(chunk)] = memoryview(chunk)
                done += len(chunk)
            if f.read(1): raise ValueError(f"it inflates to more than its declared {size} bytes")
    except _zip_read_errors() as e:
        raise CorruptZipError(f"corrupt zip member {zi.filename}: {type(e).__name__}: {e}") from None

def _zip_member_bytes(src: _Source, zf: zipfile.ZipFile, zi: zipfile.ZipInfo) -> Any:
    """A compressed member's bytes, decompressed into a numpy uint8 array of its declared size (checked against
    the memory budget first)."""
    import numpy as np
    src.budget.take(zi.file_size, f"zip member {zi.filename!r} (declared {zi.file_size:,} bytes uncompressed)")
    out = np.empty(zi.file_size, np.uint8)
    _inflate_into(zf, zi, out)
    return out

def _inflated_tensor(src: _Source, zf: zipfile.ZipFile, zi: zipfile.ZipInfo) -> Tensor:
    """A compressed member as a uint8 tensor, decompressed straight into the tensor's buffer (within the budget)."""
    _take_inflated(src, zi)
    return _new_tensor_filled(dtypes.uint8, (zi.file_size,), src.device, lambda out: _inflate_into(zf, zi, out))

def _zip_member_tensor(src: _Source, zf: zipfile.ZipFile, zi: zipfile.ZipInfo) -> Tensor:
    if zi.compress_type == zipfile.ZIP_STORED:
        if zi.compress_size != zi.file_size: raise CorruptZipError(f"corrupt zip file: stored member {zi.filename} has mismatched sizes")
        return src.tensor(_zip_data_offset(src, zi), zi.file_size, dtypes.uint8, (zi.file_size,), zi.filename)
    return _inflated_tensor(src, zf, zi)

def zip_extract(fn: Tensor | str | os.PathLike, max_bytes: int | None = None) -> dict[str, Tensor]:
    """The files of a zip archive: name → uint8 tensor (a view of stored members, a decompressed copy otherwise).
    Decompressed members may take at most ``max_bytes`` of memory in all (default: see ``torch_load``); they are
    decompressed straight into their tensors' memory, so that is what the load uses. A malformed archive raises
    CorruptZipError (a ``zipfile.BadZipFile`` and a ``ValueError``)."""
    src = _Source(_as_byte_tensor(fn), "zip file", max_bytes, error=CorruptZipError)
    zf, members = _zip_members(src)
    with zf: return {zi.filename: _zip_member_tensor(src, zf, zi) for zi in members if not _is_zip_dir(zi)}

# ---------------------------------------------------------------- torch checkpoints

_TORCH_STORAGE_DTYPES: dict[str, DType] = {
    "FloatStorage": dtypes.float32, "DoubleStorage": dtypes.float64, "HalfStorage": dtypes.float16, "BFloat16Storage": dtypes.bfloat16,
    "ByteStorage": dtypes.uint8, "CharStorage": dtypes.int8, "ShortStorage": dtypes.int16, "IntStorage": dtypes.int32,
    "LongStorage": dtypes.int64, "BoolStorage": dtypes.bool, "UntypedStorage": dtypes.uint8,
    "UInt16Storage": dtypes.uint16, "UInt32Storage": dtypes.uint32, "UInt64Storage": dtypes.uint64,
    "Float8_e4m3fnStorage": dtypes.fp8e4m3, "Float8_e5m2Storage": dtypes.fp8e5m2,
    "Float8_e4m3fnuzStorage": dtypes.fp8e4m3fnuz, "Float8_e5m2fnuzStorage": dtypes.fp8e5m2fnuz}
_TORCH_DTYPES: dict[str, DType] = {
    "float32": dtypes.float32, "float": dtypes.float32, "float64": dtypes.float64, "double": dtypes.float64,
    "float16": dtypes.float16, "half": dtypes.float16, "bfloat16": dtypes.bfloat16, "uint8": dtypes.uint8, "int8": dtypes.int8,
    "int16": dtypes.int16, "short": dtypes.int16, "int32": dtypes.int32, "int": dtypes.int32, "int64": dtypes.int64,
    "long": dtypes.int64, "bool": dtypes.bool, "uint16": dtypes.uint16, "uint32": dtypes.uint32, "uint64": dtypes.uint64,
    "float8_e4m3fn": dtypes.fp8e4m3, "float8_e5m2": dtypes.fp8e5m2, "float8_e4m3fnuz": dtypes.fp8e4m3fnuz,
    "float8_e5m2fnuz": dtypes.fp8e5m2fnuz}

class _Sealed:
    """The base of every object the checkpoint unpickler gives a pickle: the globals it may name, storages and
    tensor records. A pickle can do more to an object than call it: BUILD calls ``__setstate__`` or writes its state
    straight into the object's ``__dict__`` (or ``setattr``s it), which gets around ``__init__``'s checks and frozen
    dataclasses; SETITEM(S), APPEND(S) and ADDITEMS call ``__setitem__``, ``append``, ``extend`` and ``add``. Each of
    these refuses here, so the only objects a checkpoint makes are the ones the rebuild functions built and checked.
    No attribute dict (``__slots__``), so there is nothing else to write into."""
    __slots__ = ()
    def _refuse(self, what: str) -> Any:
        raise pickle.UnpicklingError(f"torch_load: refusing to {what} {self!r:.60}: a torch checkpoint never does that "
                                     f"(this pickle tries to change the loader's objects; it may be malicious)")
    def __setstate__(self, state: Any) -> None: self._refuse("set the state (pickle BUILD) of")
    def __setitem__(self, key: Any, value: Any) -> None: self._refuse("set an item of")
    def append(self, value: Any) -> None: self._refuse("append to")
    def extend(self, values: Any) -> None: self._refuse("extend")
    def add(self, value: Any) -> None: self._refuse("add to")

class _Global(_Sealed):
    """A callable the pickle found by name (``torch._utils._rebuild_tensor_v2``, ``collections.OrderedDict``, ...):
    a new wrapper per lookup, so the pickle never holds the loader's own functions or classes (a BUILD on a function
    could ``setattr`` its ``__defaults__`` for every later load in the process)."""
    __slots__ = ("fn", "name")
    def __init__(self, fn: Callable[..., Any], name: str): self.fn, self.name = fn, name
    def __call__(self, *args: Any) -> Any: return self.fn(*args)
    def __repr__(self) -> str: return self.name

class _TorchDType(_Sealed):
    """``torch.float32`` & co. as the pickle sees them: a fresh token per lookup over the fusegrad dtype, which is a
    process-wide interned object (a pickle that could BUILD into it would change ``dtypes.float32.itemsize`` for the
    whole process). Tokens left in the result become the dtype itself after unpickling (_Resolver)."""
    __slots__ = ("dtype", "name")
    def __init__(self, dtype: DType, name: str): self.dtype, self.name = dtype, name
    def __repr__(self) -> str: return f"torch.{self.name}"

class _StorageType(_Sealed):
    """Stands in for ``torch.FloatStorage`` & co. (never called)."""
    __slots__ = ("name", "dtype")
    def __init__(self, name: str, dtype: DType): self.name, self.dtype = name, dtype
    def __repr__(self) -> str: return f"torch.{self.name}"

class _StorageRef(_Sealed):
    """A storage in the checkpoint: its key, element dtype and element count (plus an element offset for
    the storage views of very old checkpoints)."""
    __slots__ = ("key", "dtype", "numel", "elem_offset", "root")
    def __init__(self, key: str, dtype: DType, numel: int, elem_offset: int = 0, root: "_StorageRef | None" = None):
        self.key, self.dtype, self.numel, self.elem_offset, self.root = key, dtype, numel, elem_offset, root
    def __repr__(self) -> str: return f"storage {self.key}"

class _TensorRef(_Sealed):
    """A tensor to build once the storages' places in the file are known."""
    __slots__ = ("storage", "offset", "size", "stride", "dtype", "requires_grad")
    def __init__(self, storage: _StorageRef, offset: int, size: tuple, stride: tuple, dtype: DType, requires_grad: bool = False):
        self.storage, self.offset, self.size, self.stride, self.dtype, self.requires_grad = storage, offset, size, stride, dtype, requires_grad
    def __repr__(self) -> str: return f"tensor of size {self.size}"

class _TorchClass(_Sealed):
    """Stands in for ``torch.Tensor`` / ``torch.nn.Parameter`` in ``_rebuild_from_type_v2``."""
    __slots__ = ("name",)
    def __init__(self, name: str): self.name = name
    def __repr__(self) -> str: return f"torch.{self.name}"

class _PickledOrderedDict(collections.OrderedDict):
    """The ``collections.OrderedDict`` a pickle makes: a new, empty one per call, so its items are the pickle's own
    business (SETITEMS). Its BUILD is torch's: ``state_dict()`` pickles its ``_metadata`` attribute that way. Only a
    dict of new, non-dunder attribute names is accepted, kept in ``pickled_attributes`` (written into ``__dict__``,
    a name like ``__setstate__`` or ``items`` would shadow a method); _Resolver sets them on the plain OrderedDict
    it returns."""
    def __init__(self, items: Any = ()) -> None:
        super().__init__(items)
        self.pickled_attributes: dict[str, Any] = {}
    def __setstate__(self, state: Any) -> None:
        if state is None: return
        if not isinstance(state, dict):
            raise pickle.UnpicklingError(f"torch_load: refusing an OrderedDict state of type {type(state).__name__} (pickle BUILD): "
                                         f"torch only pickles a dict of attributes")
        for name in state:
            if not (isinstance(name, str) and name.isidentifier() and not name.startswith("__") and not hasattr(collections.OrderedDict, name)):
                raise pickle.UnpicklingError(f"torch_load: refusing to set attribute {name!r:.60} of an OrderedDict (pickle BUILD): "
                                             f"only new, non-dunder attribute names (like torch's _metadata) are allowed")
        self.pickled_attributes.update(state)

def _int_tuple(x: Any, what: str) -> tuple[int, ...]:
    if isinstance(x, int) and not isinstance(x, bool): return (x,)
    if not isinstance(x, (tuple, list)) or not all(isinstance(i, int) and not isinstance(i, bool) for i in x):
        raise pickle.UnpicklingError(f"torch_load: invalid tensor {what} {x!r:.100}")
    return tuple(x)

def _rebuild_tensor(storage: Any, storage_offset: Any, size: Any, stride: Any, requires_grad: Any = False, backward_hooks: Any = None,
                    metadata: Any = None, *, dtype: DType | None = None) -> _TensorRef:
    if not isinstance(storage, _StorageRef): raise pickle.UnpicklingError(f"torch_load: a tensor's storage is {type(storage).__name__}, not a storage")
    if not isinstance(storage_offset, int) or isinstance(storage_offset, bool) or storage_offset < 0:
        raise pickle.UnpicklingError(f"torch_load: invalid storage offset {storage_offset!r:.50}")
    size, stride = _int_tuple(size, "size"), _int_tuple(stride, "stride")
    if len(size) != len(stride) or any(s < 0 for s in size) or any(s < 0 for s in stride):
        raise pickle.UnpicklingError(f"torch_load: invalid tensor size {size} / stride {stride}")
    return _TensorRef(storage, storage_offset, size, stride, storage.dtype if dtype is None else dtype, bool(requires_grad))

def _rebuild_tensor_v1(storage: Any, storage_offset: Any, size: Any, stride: Any) -> _TensorRef:
    return _rebuild_tensor(storage, storage_offset, size, stride)

def _rebuild_tensor_v3(storage, storage_offset, size, stride, requires_grad, backward_hooks, dtype, metadata=None) -> _TensorRef:
    if not isinstance(dtype, _TorchDType): raise pickle.UnpicklingError(f"torch_load: invalid dtype {dtype!r:.50}")
    return _rebuild_tensor(storage, storage_offset, size, stride, requires_grad, backward_hooks, metadata, dtype=dtype.dtype)

def _rebuild_parameter(data, requires_grad=True, backward_hooks=None, *state) -> Any:
    if isinstance(data, _TensorRef): data.requires_grad = bool(requires_grad)
    return data

def _rebuild_from_type_v2(func, new_type, args, state) -> Any:
    if not (isinstance(func, _Global) and func.fn in (_rebuild_tensor, _rebuild_tensor_v1, _rebuild_tensor_v3, _rebuild_parameter)) \
            or not isinstance(new_type, _TorchClass) or not isinstance(args, tuple):
        raise pickle.UnpicklingError("torch_load: unsupported tensor subclass rebuild")
    return func(*args)   # the tensor subclass's state (its attributes) is dropped: fusegrad tensors have no such attributes

def _codecs_encode(obj: Any, encoding: str = "utf-8", errors: str = "strict") -> bytes:
    if not isinstance(obj, str) or encoding.lower() not in ("latin1", "latin-1", "utf-8", "utf8", "ascii"):
        raise pickle.UnpicklingError(f"torch_load: refusing _codecs.encode with {encoding!r}")
    return obj.encode(encoding, errors)

def _bytearray(*args: Any) -> bytearray:
    if len(args) > 1 or (args and not isinstance(args[0], (bytes, bytearray, list))):
        raise pickle.UnpicklingError("torch_load: refusing bytearray() of a non-bytes value")
    return bytearray(*args)

def _torch_device(*args: Any) -> str: return ":".join(str(a) for a in args)

# what a pickle may call by name; find_class wraps each in a new _Global, so the pickle never holds these objects
_SAFE_GLOBALS: dict[tuple[str, str], Callable[..., Any]] = {
    ("collections", "OrderedDict"): _PickledOrderedDict,
    ("torch._utils", "_rebuild_tensor"): _rebuild_tensor_v1,
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor,
    ("torch._utils", "_rebuild_tensor_v3"): _rebuild_tensor_v3,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
    ("torch._utils", "_rebuild_parameter_with_state"): _rebuild_parameter,
    ("torch._tensor", "_rebuild_from_type_v2"): _rebuild_from_type_v2,
    ("torch", "Size"): tuple, ("torch", "device"): _torch_device,
    ("_codecs", "encode"): _codecs_encode,
    ("builtins", "set"): set, ("builtins", "frozenset"): frozenset, ("builtins", "bytearray"): _bytearray,
    ("__builtin__", "set"): set, ("__builtin__", "frozenset"): frozenset,
}
_TORCH_CLASSES: dict[tuple[str, str], str] = {("torch", "Tensor"): "Tensor", ("torch.nn.parameter", "Parameter"): "Parameter"}

class _TorchUnpickler(pickle.Unpickler):
    """Unpickles only what a torch checkpoint of tensors needs; anything else is refused before it can run. Every
    object it gives the pickle is a new one that refuses to be changed (see _Sealed), or a plain container."""
    def __init__(self, file: Any, persistent_load: Callable[[Any], Any]):
        super().__init__(file, encoding="utf-8")
        self._persistent = persistent_load
    def find_class(self, module: str, name: str) -> Any:
        if (found := _SAFE_GLOBALS.get((module, name))) is not None: return _Global(found, f"{module}.{name}")
        if (module, name) in _TORCH_CLASSES: return _TorchClass(_TORCH_CLASSES[(module, name)])
        if module in ("torch", "torch.storage", "torch.cuda") and name in _TORCH_STORAGE_DTYPES:
            return _StorageType(name, _TORCH_STORAGE_DTYPES[name])
        if module == "torch" and name in _TORCH_DTYPES: return _TorchDType(_TORCH_DTYPES[name], name)
        raise pickle.UnpicklingError(f"torch_load: refusing to load {module}.{name}: only tensors, storages and plain containers "
                                     f"can be loaded (this pickle would run other code; it may be malicious)")
    def persistent_load(self, pid: Any) -> Any: return self._persistent(pid)

def _storage_pid(storages: dict[str, _StorageRef]) -> Callable[[Any], Any]:
    """persistent_load for the zip and legacy formats: ('storage', storage_type, key, location, numel[, view_metadata])."""
    def load(pid: Any) -> Any:
        if not isinstance(pid, tuple) or len(pid) < 5 or pid[0] != "storage" or not isinstance(pid[1], _StorageType):
            raise pickle.UnpicklingError(f"torch_load: unsupported persistent id {pid!r:.100}")
        _, storage_type, key, _location, numel = pid[:5]
        if not isinstance(key, (str, int)) or not isinstance(numel, int) or numel < 0:
            raise pickle.UnpicklingError(f"torch_load: invalid storage record {pid!r:.100}")
        key = str(key)
        if key not in storages: storages[key] = _StorageRef(key, storage_type.dtype, numel)
        root = storages[key]
        if root.dtype != storage_type.dtype or root.numel != numel:
            raise pickle.UnpicklingError(f"torch_load: storage {key} is used with conflicting types or sizes")
        view = pid[5] if len(pid) > 5 else None
        if view is not None:   # (view_key, offset, view_size) from old torch versions
            if not (isinstance(view, tuple) and len(view) == 3 and all(isinstance(v, int) for v in view[1:])):
                raise pickle.UnpicklingError(f"torch_load: invalid storage view {view!r:.100}")
            _, offset, view_size = view
            if offset < 0 or view_size < 0 or offset + view_size > numel: raise pickle.UnpicklingError("torch_load: storage view out of range")
            return _StorageRef(key, root.dtype, view_size, offset, root)
        return root
    return load

def _checked_layout(ref: _TensorRef) -> tuple[int, int]:
    """(the tensor's storage's byte offset within its root storage, the bytes from the tensor's first element to past
    its last), after checking, where the bytes are about to be read, that every element lies inside the storage and
    the storage inside its root. The rebuild functions checked this when the pickle called them; it is checked again
    because the gather below (``as_strided``) reads whatever its strides point at: nothing that happened between
    the two (a pickle changing a record) may turn into a read outside the file's bytes."""
    storage = ref.storage
    root = storage.root if isinstance(storage, _StorageRef) and storage.root is not None else storage
    if not (isinstance(storage, _StorageRef) and isinstance(root, _StorageRef) and isinstance(ref.dtype, DType)
            and isinstance(ref.size, tuple) and isinstance(ref.stride, tuple) and len(ref.size) == len(ref.stride)):
        raise ValueError(f"corrupt torch checkpoint: invalid tensor record {ref!r:.100}")
    numbers = (ref.offset, storage.elem_offset, storage.numel, *ref.size, *ref.stride)
    if not all(type(n) is int and n >= 0 for n in numbers):
        raise ValueError(f"corrupt torch checkpoint: a tensor of size {ref.size}, stride {ref.stride}, offset {ref.offset} (storage "
                         f"{storage.key}) has a negative or non-integer size, stride or offset")
    if storage is not root and (storage.dtype != root.dtype or storage.elem_offset + storage.numel > root.numel):
        raise ValueError(f"corrupt torch checkpoint: a view of storage {root.key} lies outside it")
    if storage is root and storage.elem_offset != 0: raise ValueError(f"corrupt torch checkpoint: storage {root.key} has an offset")
    itemsize, storage_nbytes = ref.dtype.itemsize, storage.numel * storage.dtype.itemsize
    if prod(ref.size) == 0: return storage.elem_offset * root.dtype.itemsize, 0
    span = (sum((s - 1) * st for s, st in zip(ref.size, ref.stride)) + 1) * itemsize   # bytes from the first to past the last element
    if ref.offset * itemsize + span > storage_nbytes:
        raise ValueError(f"corrupt torch checkpoint: a tensor of size {ref.size}, stride {ref.stride}, offset {ref.offset} reads past its "
                         f"storage of {storage_nbytes} bytes")
    return storage.elem_offset * root.dtype.itemsize, span

def _build_tensor(ref: _TensorRef, src: _Source, places: dict[str, int]) -> Tensor:
    """A tensor from a storage at a known byte offset: a DISK view when it is contiguous, else a gathered copy."""
    storage_offset, span = _checked_layout(ref)
    root = ref.storage.root or ref.storage
    if root.key not in places: raise ValueError(f"corrupt torch checkpoint: storage {root.key} has no data")
    itemsize, size, stride = ref.dtype.itemsize, ref.size, ref.stride
    numel = prod(size)
    if numel == 0: return Tensor.zeros(*size, dtype=ref.dtype, device=src.device)
    first = places[root.key] + storage_offset + ref.offset * itemsize   # the first element's byte in the source
    contiguous = all(st == c for s, st, c in zip(size, stride, _c_strides(size)) if s != 1)
    if contiguous: return src.tensor(first, numel * itemsize, ref.dtype, size, "tensor")
    # a strided view: read the bytes it spans and gather them into a new tensor on the default device. Both are new
    # memory, counted before they are allocated: a 1-element storage "expanded" by stride 0 to a billion elements is
    # refused here. (The span is read straight into its array and gathered straight into the tensor's buffer.)
    copies = 1 if _host_device(src.device) else 2
    src.budget.take(span + copies * numel * itemsize, f"tensor of size {size} with stride {stride} (a gathered copy)")
    import numpy as np
    carrier = np.dtype(f"<u{itemsize}") if itemsize > 1 else np.dtype(np.uint8)
    padded = np.zeros(((span + itemsize - 1) // itemsize) * itemsize, np.uint8)
    src.read_into(first, padded[:span], "tensor")
    # in bounds: the strides are >= 0 and the last element, sum((size - 1) * stride), is the last one (_checked_layout)
    spanned = np.lib.stride_tricks.as_strided(padded.view(carrier), shape=size, strides=tuple(st * itemsize for st in stride))
    return _new_tensor_filled(ref.dtype, size, src.device, lambda out: np.copyto(out.view(carrier).reshape(size), spanned))

def _c_strides(shape: tuple) -> tuple:
    strides, acc = [], 1
    for s in reversed(shape):
        strides.append(acc)
        acc *= s
    return tuple(reversed(strides))

_MAX_NESTING = 500

class _Resolver:
    """Replaces every _TensorRef in the unpickled structure by its Tensor. An object the pickle shares (its memo:
    BINGET returns the same object) is converted once and the copies stay shared, like the pickle protocol does:
    a walk without this memo does each shared subtree again, so 300 bytes of tuples nested 40 deep, each level
    holding the previous one twice, take 2**40 steps. A _TensorRef used twice becomes one Tensor. ``steps``
    counts containers and tensors converted (tests check it stays linear)."""
    def __init__(self, build: Callable[[_TensorRef], Tensor]):
        self.build, self.steps = build, 0
        self.done: dict[int, Any] = {}       # id(original) -> converted
        self.keep: list[Any] = []            # the originals, alive so their ids stay unique during the walk
        self.open_tuples: set[int] = set()   # tuples being converted: meeting one again is a cycle
    def __call__(self, obj: Any) -> Any:
        try: return self.convert(obj, 0)
        except RecursionError: raise ValueError("torch_load: the checkpoint is nested too deeply") from None
    def convert(self, obj: Any, depth: int) -> Any:
        if (found := self.done.get(id(obj))) is not None or id(obj) in self.done: return found
        if isinstance(obj, _TorchDType): return obj.dtype   # (a dtype saved as a value; the pickle can't reach it any more)
        if not isinstance(obj, (_TensorRef, dict, list, tuple)): return obj
        if depth > _MAX_NESTING: raise ValueError(f"torch_load: the checkpoint nests containers more than {_MAX_NESTING} deep")
        self.steps += 1
        self.keep.append(obj)
        if isinstance(obj, _TensorRef): out: Any = self.build(obj)
        elif isinstance(obj, (dict, list)):   # registered before its items, so a list that contains itself stays a cycle
            out = self.done[id(obj)] = collections.OrderedDict() if isinstance(obj, collections.OrderedDict) else {} if isinstance(obj, dict) else []
            if isinstance(obj, dict):
                for k, v in obj.items(): out[k] = self.convert(v, depth + 1)
                if isinstance(obj, _PickledOrderedDict):   # its attributes (torch's _metadata), checked by its __setstate__
                    for name, v in obj.pickled_attributes.items(): setattr(out, name, self.convert(v, depth + 1))
            else:
                for v in obj: out.append(self.convert(v, depth + 1))
        else:
            if id(obj) in self.open_tuples: raise ValueError("torch_load: corrupt checkpoint: a tuple contains itself")
            self.open_tuples.add(id(obj))
            items = []
            for v in obj: items.append(self.convert(v, depth + 1))
            self.open_tuples.discard(id(obj))
            out = tuple(items)
        self.done[id(obj)] = out
        return out

def _resolve(obj: Any, build: Callable[[_TensorRef], Tensor]) -> Any:
    """``obj`` with every _TensorRef replaced by its Tensor (see _Resolver), with a progress bar for long loads."""
    bar = _load_bar("torch_load", None, 0)
    def build_counted(ref: _TensorRef) -> Tensor:
        tensor = build(ref)
        bar.update(1)
        return tensor
    try: return _Resolver(build_counted)(obj)
    finally: bar.close()

def torch_load(fn: Tensor | str | os.PathLike, max_bytes: int | None = None) -> Any:
    """Load a PyTorch checkpoint (``torch.save``: the zip format, the legacy pickle format written with
    ``_use_new_zipfile_serialization=False``, and the old tar format). Tensors come back as fusegrad tensors
    (DISK views when stored contiguously), in the same dicts/lists as saved (a ``state_dict()`` keeps its
    ``_metadata``). torch isn't needed, nothing in the pickle but the known tensor-rebuild functions can run, and
    a pickle that tries to change the loader's objects (pickle BUILD into a dtype, a function or a tensor record)
    is refused with ``pickle.UnpicklingError``.

    ``max_bytes`` limits the memory the load allocates beyond views of the file (compressed members, strided
    tensors gathered into copies, copies out of a non-DISK tensor), checked before each allocation. The default
    is the ``LOAD_MAX_BYTES`` environment variable, else the larger of 1 GiB and 16 x the file size."""
    t = _as_byte_tensor(fn)
    src = _Source(t, "torch checkpoint", max_bytes, error=CorruptCheckpointError)
    head = src.read(0, min(src.nbytes, 6))
    if head[:4] == b"PK\x03\x04" or _is_zip(t): return _torch_load_zip(t, src)
    if src.nbytes >= 512 and src.read(257, 5) == b"ustar": return _torch_load_tar(t, src)
    return _torch_load_legacy(t, src)

def _is_zip(t: Tensor) -> bool:
    try: return zipfile.is_zipfile(TensorIO(t))
    except Exception: return False

class _ArrayReader:
    """A read-only file over a numpy uint8 array that doesn't copy it (``io.BytesIO`` would: a pickle decompressed
    into memory would be held twice). Just what ``pickle.Unpickler`` calls."""
    def __init__(self, data: Any): self._data, self._pos = data, 0
    def read(self, n: int = -1) -> bytes:
        end = len(self._data) if n is None or n < 0 else min(len(self._data), self._pos + n)
        out, self._pos = self._data[self._pos:end].tobytes(), end
        return out
    def readinto(self, buffer: Any) -> int:
        out = memoryview(buffer).cast("B")
        n = min(len(out), len(self._data) - self._pos)
        out[:n] = self._data[self._pos:self._pos + n].data
        self._pos += n
        return n
    def readline(self) -> bytes:
        end = self._pos
        while end < len(self._data):   # (a window at a time: no copy of the whole rest per line)
            window = self._data[end:end + 4096].tobytes()
            if (newline := window.find(b"\n")) >= 0: return self.read(end + newline + 1 - self._pos)
            end += len(window)
        return self.read()

def _unpickle(data: Any, persistent_load: Callable[[Any], Any], what: str) -> Any:
    f = io.BytesIO(data) if isinstance(data, (bytes, bytearray)) else _ArrayReader(data) if type(data).__module__ == "numpy" else data
    try: return _TorchUnpickler(f, persistent_load).load()
    except pickle.UnpicklingError as e:
        if str(e).startswith("torch_load:"): raise
        raise pickle.UnpicklingError(f"torch_load: corrupt {what}: {e}") from None   # the unpickler's own ("pickle data was truncated")
    except (EOFError, ValueError, TypeError, KeyError, IndexError, AttributeError, struct.error, UnicodeDecodeError, RecursionError,
            MemoryError, OverflowError) as e:
        raise pickle.UnpicklingError(f"torch_load: corrupt {what}: {type(e).__name__}: {e}") from None

def _zip_member_data(src: _Source, zf: zipfile.ZipFile, zi: zipfile.ZipInfo) -> Any:
    """A small member's bytes (the pickle, the byte order), stored or compressed, within the memory budget."""
    if zi.compress_type != zipfile.ZIP_STORED: return _zip_member_bytes(src, zf, zi)   # (zipfile checks the CRC)
    data = src.read(_zip_data_offset(src, zi), zi.file_size, zi.filename)
    if zlib.crc32(data) != zi.CRC: raise CorruptZipError(f"corrupt zip file: bad CRC-32 for {zi.filename}")
    return data

def _torch_load_zip(t: Tensor, src: _Source) -> Any:
    zf, members = _zip_members(src)
    with zf:
        by_name = {zi.filename: zi for zi in members}
        pkls = [n for n in by_name if n == "data.pkl" or n.endswith("/data.pkl")]
        if not pkls: raise CorruptCheckpointError("not a torch checkpoint: the zip has no data.pkl")
        prefix = min(pkls, key=len)[:-len("data.pkl")]
        if (bo := by_name.get(prefix + "byteorder")) is not None:
            if bo.file_size > 16: raise ValueError(f"corrupt torch checkpoint: the byteorder member has {bo.file_size} bytes")
            if (order := bytes(_zip_member_data(src, zf, bo))).strip() not in (b"little", b""):
                raise NotImplementedError(f"torch_load: big-endian checkpoints are not supported (byteorder {order!r})")
        storages: dict[str, _StorageRef] = {}
        pkl = _zip_member_data(src, zf, by_name[prefix + "data.pkl"])
        result = _unpickle(pkl, _storage_pid(storages), "data.pkl")
        places: dict[str, int] = {}
        cpu_copies: dict[str, Any] = {}
        for key, ref in storages.items():
            zi = by_name.get(f"{prefix}data/{key}")
            if zi is None: raise ValueError(f"corrupt torch checkpoint: storage {key} is missing from the archive")
            need = ref.numel * ref.dtype.itemsize
            if zi.file_size < need: raise ValueError(f"corrupt torch checkpoint: storage {key} has {zi.file_size} bytes, needs {need}")
            if zi.compress_type != zipfile.ZIP_STORED:  # re-compressed by some tool: inflate it into memory
                cpu_copies[key] = _inflated_source(src, zf, zi, f"storage {key}")
                continue
            places[key] = _zip_data_offset(src, zi)
            src.check(places[key], need, f"storage {key}")
    def build(ref: _TensorRef) -> Tensor:
        root = ref.storage.root or ref.storage
        if root.key in cpu_copies: return _build_tensor(ref, cpu_copies[root.key], {root.key: 0})
        return _build_tensor(ref, src, places)
    return _resolve(result, build)

def _inflated_source(src: _Source, zf: zipfile.ZipFile, zi: zipfile.ZipInfo, what: str) -> _Source:
    """A compressed storage member decompressed into memory (within the budget), as a source its tensors are
    built from. On a host-memory device the member is inflated into a buffer of that device and its contiguous
    tensors are views of that buffer: the storage is in memory once (inflating it into an array, copying the
    array's bytes out and into each tensor held it three times, two of them uncounted)."""
    import numpy as np
    storage = _inflated_tensor(src, zf, zi)
    if zi.file_size == 0: return _Source.of_array(np.zeros(0, np.uint8), what, src.budget, src.device, CorruptCheckpointError)
    buffer = buffer_of(storage.uop.base)
    if (host := _host_bytes(buffer)) is not None:
        return _Source.of_array(host, what, src.budget, src.device, CorruptCheckpointError, host_buffer=buffer)
    return _Source.of_array(storage.numpy(), what, src.budget, src.device, CorruptCheckpointError)   # (counted by _take_inflated)

_LEGACY_MAGIC = 0x1950a86a20f9469cfc6c
_LEGACY_PROTOCOL = 1001

class _BoundedReader(io.BufferedReader):
    """A BufferedReader over a TensorIO whose ``read(n)`` never asks for more than what is left: the unpickler
    calls ``read(n)`` with the length a pickle opcode declares, and BufferedReader allocates ``n`` bytes first."""
    def read(self, size: int | None = -1) -> bytes:
        if size is not None and size > 0: size = min(size, max(0, self.raw._tensor.shape[0] - self.tell()))
        return super().read(size)

def _torch_load_legacy(t: Tensor, src: _Source) -> Any:
    f = _BoundedReader(TensorIO(t))
    def plain(what: str) -> Any:   # the small header pickles: plain data only
        return _unpickle(f, lambda pid: (_ for _ in ()).throw(pickle.UnpicklingError("unexpected persistent id")), what)
    try: magic = plain("header")
    except pickle.UnpicklingError as e: raise CorruptCheckpointError(f"not a torch checkpoint (neither zip, tar nor legacy pickle format): {e}") from None
    if magic != _LEGACY_MAGIC: raise CorruptCheckpointError("not a torch checkpoint: bad magic number")
    if (protocol := plain("protocol version")) != _LEGACY_PROTOCOL: raise ValueError(f"unsupported torch checkpoint protocol {protocol!r}")
    sys_info = plain("sys_info")
    if isinstance(sys_info, dict) and not sys_info.get("little_endian", True):
        raise NotImplementedError("torch_load: big-endian checkpoints are not supported")
    storages: dict[str, _StorageRef] = {}
    result = _unpickle(f, _storage_pid(storages), "checkpoint pickle")
    keys = plain("storage keys")
    if not isinstance(keys, list) or not all(isinstance(k, (str, int)) for k in keys): raise ValueError("corrupt torch checkpoint: bad storage key list")
    offset = f.tell()
    places: dict[str, int] = {}
    for key in map(str, keys):
        numel = struct.unpack("<q", src.read(offset, 8, f"size of storage {key}"))[0]
        if key not in storages: raise ValueError(f"corrupt torch checkpoint: storage {key} isn't used by any tensor")
        ref = storages[key]
        if numel != ref.numel: raise ValueError(f"corrupt torch checkpoint: storage {key} has {numel} elements, expected {ref.numel}")
        src.check(offset + 8, numel * ref.dtype.itemsize, f"storage {key}")
        places[key] = offset + 8
        offset += 8 + numel * ref.dtype.itemsize
    return _resolve(result, lambda ref: _build_tensor(ref, src, places))

def _torch_load_tar(t: Tensor, src: _Source) -> Any:
    """The pre-1.0 tar format: 'storages', 'tensors' and 'pickle' members."""
    offsets = {name: (offset, size) for name, offset, size in _tar_members(t)}
    for need in ("storages", "tensors", "pickle"):
        if need not in offsets: raise ValueError(f"corrupt torch checkpoint: the tar has no {need!r} member")
    def reader(name: str) -> tuple[io.BufferedReader, int, int]:
        start, size = offsets[name]
        return _BoundedReader(TensorIO(src.tensor(start, size, dtypes.uint8, (size,), name))), start, size
    plain_pid = lambda pid: (_ for _ in ()).throw(pickle.UnpicklingError("unexpected persistent id"))
    # storages: count, then (key, location, storage_type), int64 numel, raw data
    f, start, size = reader("storages")
    storages: dict[str, _StorageRef] = {}
    places: dict[str, int] = {}
    count = _unpickle(f, plain_pid, "storage count")
    if not isinstance(count, int) or count < 0: raise ValueError("corrupt torch checkpoint: bad storage count")
    for _ in range(count):
        rec = _unpickle(f, plain_pid, "storage record")
        if not (isinstance(rec, tuple) and len(rec) == 3 and isinstance(rec[2], _StorageType)): raise ValueError("corrupt torch checkpoint: bad storage record")
        key, _, stype = str(rec[0]), rec[1], rec[2]
        pos = f.tell()
        numel = struct.unpack("<q", src.read(start + pos, 8, f"size of storage {key}"))[0]
        if numel < 0 or pos + 8 + numel * stype.dtype.itemsize > size: raise ValueError(f"corrupt torch checkpoint: storage {key} overruns its member")
        storages[key] = _StorageRef(key, stype.dtype, numel)
        places[key] = start + pos + 8
        f.seek(pos + 8 + numel * stype.dtype.itemsize)
    views = _unpickle(f, plain_pid, "storage views")
    for view in views if isinstance(views, list) else []:
        target, root_key, off, numel = view
        root = storages[str(root_key)]
        if off < 0 or numel < 0 or off + numel > root.numel: raise ValueError("corrupt torch checkpoint: storage view out of range")
        storages[str(target)] = _StorageRef(root.key, root.dtype, numel, off, root)
    # tensors: count, then (key, storage_id, type), int32 ndim, 4 pad bytes, sizes, strides, int64 offset
    f, start, size = reader("tensors")
    tensors: dict[str, Any] = {}
    count = _unpickle(f, plain_pid, "tensor count")
    if not isinstance(count, int) or count < 0: raise ValueError("corrupt torch checkpoint: bad tensor count")
    for _ in range(count):
        rec = _unpickle(f, plain_pid, "tensor record")
        if not (isinstance(rec, tuple) and len(rec) == 3) or str(rec[1]) not in storages: raise ValueError("corrupt torch checkpoint: bad tensor record")
        key, storage = str(rec[0]), storages[str(rec[1])]
        pos = f.tell()
        ndim = struct.unpack("<i", src.read(start + pos, 4, "tensor ndim"))[0]
        if not 0 <= ndim <= 64: raise ValueError(f"corrupt torch checkpoint: tensor {key} has {ndim} dims")
        body = src.read(start + pos + 8, 16 * ndim + 8, f"tensor {key}")
        dims, strides, (offset,) = struct.unpack_from(f"<{ndim}q", body, 0), struct.unpack_from(f"<{ndim}q", body, 8 * ndim), struct.unpack_from("<q", body, 16 * ndim)
        f.seek(pos + 8 + 16 * ndim + 8)
        try: tensors[key] = _rebuild_tensor(storage, offset, dims, strides)
        except pickle.UnpicklingError as e: raise ValueError(f"corrupt torch checkpoint: {e}") from None
    f, _, _ = reader("pickle")
    def tar_pid(pid: Any) -> Any:
        if isinstance(pid, tuple): return None   # a module's source code record: ignored
        if str(pid) not in tensors: raise pickle.UnpicklingError(f"torch_load: unknown tensor id {pid!r:.50}")
        return tensors[str(pid)]
    result = _unpickle(f, tar_pid, "checkpoint pickle")
    return _resolve(result, lambda ref: _build_tensor(ref, src, places))

# ---------------------------------------------------------------- GGUF

GGML_QUANT_SIZES: dict[int, tuple[str, int, int]] = {   # ggml type: (name, elements per block, bytes per block)
    0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20), 6: ("Q5_0", 32, 22), 7: ("Q5_1", 32, 24),
    8: ("Q8_0", 32, 34), 12: ("Q4_K", 256, 144), 13: ("Q5_K", 256, 176), 14: ("Q6_K", 256, 210),
    24: ("I8", 1, 1), 25: ("I16", 1, 2), 26: ("I32", 1, 4), 27: ("I64", 1, 8), 28: ("F64", 1, 8), 30: ("BF16", 1, 2)}
_GGML_NATIVE: dict[int, DType] = {0: dtypes.float32, 1: dtypes.float16, 24: dtypes.int8, 25: dtypes.int16, 26: dtypes.int32,
                                  27: dtypes.int64, 28: dtypes.float64, 30: dtypes.bfloat16}
_GGUF_SCALARS: dict[int, str] = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}

class _GGUFReader:
    def __init__(self, src: _Source): self.src, self.pos = src, 0
    def unpack(self, fmt: str, what: str) -> Any:
        n = struct.calcsize(fmt)
        value = struct.unpack(fmt, self.src.read(self.pos, n, what))
        self.pos += n
        return value[0] if len(value) == 1 else value
    def string(self, what: str) -> str:
        n = self.unpack("<Q", f"length of {what}")
        if n > self.src.nbytes - self.pos: raise ValueError(f"corrupt or truncated GGUF file: {what} claims {n} bytes, only {self.src.nbytes - self.pos} remain")
        raw = self.src.read(self.pos, n, what)
        self.pos += n
        try: return raw.decode("utf-8")
        except UnicodeDecodeError as e: raise ValueError(f"corrupt GGUF file: {what} is not valid UTF-8 ({e})") from None
    def value(self, vtype: int, what: str, depth: int = 0) -> Any:
        if vtype in _GGUF_SCALARS:
            v = self.unpack(_GGUF_SCALARS[vtype], what)
            return bool(v) if vtype == 7 else v
        if vtype == 8: return self.string(what)
        if vtype == 9:
            if depth > 8: raise ValueError(f"corrupt GGUF file: {what} nests arrays too deeply")
            etype, n = self.unpack("<I", f"array type of {what}"), self.unpack("<Q", f"array length of {what}")
            if etype in _GGUF_SCALARS:
                size = struct.calcsize(_GGUF_SCALARS[etype])
                if n * size > self.src.nbytes - self.pos: raise ValueError(f"corrupt or truncated GGUF file: array {what} of {n} items overruns the file")
                values = list(struct.unpack(f"<{n}{_GGUF_SCALARS[etype][1]}", self.src.read(self.pos, n * size, what)))
                self.pos += n * size
                return [bool(v) for v in values] if etype == 7 else values
            if etype not in (8, 9): raise ValueError(f"corrupt GGUF file: {what} has unknown array element type {etype}")
            if n * 8 > self.src.nbytes - self.pos: raise ValueError(f"corrupt or truncated GGUF file: array {what} of {n} items overruns the file")
            return [self.value(etype, f"{what}[{i}]", depth + 1) for i in range(n)]
        raise ValueError(f"corrupt GGUF file: {what} has unknown value type {vtype}")

def gguf_load(fn: Tensor | str | os.PathLike, max_bytes: int | None = None) -> tuple[dict[str, Any], dict[str, Tensor]]:
    """Load a GGUF (v2/v3) file: ``(kv_data, state_dict)``. Quantized tensors (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K,
    Q5_K, Q6_K) are dequantized to float32 by tensor ops (lazily, on the default device); plain types are views.
    Counts, lengths, dims and offsets are checked against the file before use; ``max_bytes``: see ``torch_load``."""
    t = _as_byte_tensor(fn)
    src = _Source(t, "GGUF file", max_bytes)
    r = _GGUFReader(src)
    if src.nbytes < 4 or src.read(0, 4) != b"GGUF": raise ValueError("not a GGUF file: bad magic")
    r.pos = 4
    version = r.unpack("<I", "version")
    if version not in (2, 3): raise ValueError(f"unsupported GGUF version {version} (only 2 and 3)")
    n_tensors, n_kv = r.unpack("<Q", "tensor count"), r.unpack("<Q", "metadata count")
    if n_tensors > src.nbytes or n_kv > src.nbytes: raise ValueError("corrupt GGUF file: impossible tensor or metadata count")
    kv_data: dict[str, Any] = {}
    for i in range(n_kv):
        key = r.string(f"metadata key {i}")
        if key in kv_data: raise ValueError(f"corrupt GGUF file: duplicate metadata key {key!r}")
        kv_data[key] = r.value(r.unpack("<I", f"type of {key}"), key)
    infos = []
    for i in range(n_tensors):
        name = r.string(f"tensor name {i}")
        n_dims = r.unpack("<I", f"dims of {name}")
        if not 1 <= n_dims <= 4: raise ValueError(f"corrupt GGUF file: tensor {name!r} has {n_dims} dims (1 to 4 allowed)")
        dims = [r.unpack("<Q", f"dims of {name}") for _ in range(n_dims)]
        ggml_type, offset = r.unpack("<I", f"type of {name}"), r.unpack("<Q", f"offset of {name}")
        infos.append((name, dims, ggml_type, offset))
    alignment = kv_data.get("general.alignment", 32)
    if not isinstance(alignment, int) or alignment <= 0 or alignment & (alignment - 1): raise ValueError(f"corrupt GGUF file: bad alignment {alignment!r}")
    data_start = -(-r.pos // alignment) * alignment
    state_dict: dict[str, Tensor] = {}
    for name, dims, ggml_type, offset in _load_bar("gguf_load", infos, len(infos)):
        if name in state_dict: raise ValueError(f"corrupt GGUF file: duplicate tensor {name!r}")
        if ggml_type not in GGML_QUANT_SIZES: raise NotImplementedError(f"GGUF tensor {name!r}: ggml type {ggml_type} is not supported")
        type_name, block, block_bytes = GGML_QUANT_SIZES[ggml_type]
        n = prod(dims)
        if dims[0] % block: raise ValueError(f"corrupt GGUF file: tensor {name!r} ({type_name}) has rows of {dims[0]}, not a multiple of {block}")
        if offset % alignment: raise ValueError(f"corrupt GGUF file: tensor {name!r} offset {offset} isn't aligned to {alignment}")
        nbytes = n // block * block_bytes
        shape = tuple(reversed(dims))
        src.check(data_start + offset, nbytes, f"tensor {name!r}")
        if ggml_type in _GGML_NATIVE:
            state_dict[name] = src.tensor(data_start + offset, nbytes, _GGML_NATIVE[ggml_type], shape, name)
        else:
            blocks = src.tensor(data_start + offset, nbytes, dtypes.uint8, (n // block, block_bytes), name)
            if is_disk(blocks.device): blocks = blocks.to(Device.DEFAULT)
            state_dict[name] = ggml_dequantize(blocks, ggml_type).reshape(shape)
    return kv_data, state_dict

def _u16(b: Tensor) -> Tensor:
    """(..., 2) little-endian bytes → (...) uint16."""
    return b[..., 0].cast(dtypes.uint16) | (b[..., 1].cast(dtypes.uint16) << 8)

def _f16(b: Tensor) -> Tensor:
    """(..., 2) bytes of an IEEE half → (..., 1) float32, ready to broadcast over a block."""
    return _u16(b).bitcast(dtypes.float16).cast(dtypes.float32).unsqueeze(-1)

def _u32(b: Tensor) -> Tensor:
    b = b.cast(dtypes.uint32)
    return b[..., 0] | (b[..., 1] << 8) | (b[..., 2] << 16) | (b[..., 3] << 24)

def _nibbles(qs: Tensor) -> Tensor:
    """(..., k) bytes → (..., 2k): the k low nibbles, then the k high nibbles (ggml's order within a block)."""
    return (qs & 0xF).cat(qs >> 4, dim=-1)

def _bits(x: Tensor, count: int) -> Tensor:
    """(...) uint32 → (..., count) uint8 of its low ``count`` bits, bit 0 first."""
    shifts = Tensor.arange(count, device=x.device, dtype=dtypes.uint32)
    return ((x.unsqueeze(-1) >> shifts) & 1).cast(dtypes.uint8)

def _k_scales(scales: Tensor) -> tuple[Tensor, Tensor]:
    """The 12 packed bytes of a Q4_K/Q5_K block → 8 six-bit scales and 8 six-bit mins (get_scale_min_k4)."""
    s0, s4, s8 = scales[:, 0:4], scales[:, 4:8], scales[:, 8:12]
    sc = (s0 & 63).cat((s8 & 0xF) | ((s0 >> 6) << 4), dim=-1)
    mn = (s4 & 63).cat((s8 >> 4) | ((s4 >> 6) << 4), dim=-1)
    return sc.cast(dtypes.float32), mn.cast(dtypes.float32)

def ggml_dequantize(blocks: Tensor, ggml_type: int) -> Tensor:
    """(n_blocks, block_bytes) uint8 → (n_blocks, block_elements) float32, following ggml's dequantize_row_*."""
    f32 = dtypes.float32
    if ggml_type == 2:    # Q4_0: d, 16 bytes of nibbles; x = (q - 8) * d
        return (_nibbles(blocks[:, 2:18]).cast(f32) - 8) * _f16(blocks[:, 0:2])
    if ggml_type == 3:    # Q4_1: d, m, nibbles; x = q * d + m
        return _nibbles(blocks[:, 4:20]).cast(f32) * _f16(blocks[:, 0:2]) + _f16(blocks[:, 2:4])
    if ggml_type in (6, 7):   # Q5_0 / Q5_1: d[, m], 32 high bits, nibbles
        start = 2 if ggml_type == 6 else 4
        high = _bits(_u32(blocks[:, start:start + 4]), 32)
        q = (_nibbles(blocks[:, start + 4:start + 20]) | (high << 4)).cast(f32)
        if ggml_type == 6: return (q - 16) * _f16(blocks[:, 0:2])
        return q * _f16(blocks[:, 0:2]) + _f16(blocks[:, 2:4])
    if ggml_type == 8:    # Q8_0: d, 32 int8
        return blocks[:, 2:34].bitcast(dtypes.int8).cast(f32) * _f16(blocks[:, 0:2])
    if ggml_type in (12, 13):   # Q4_K / Q5_K: d, dmin, 12 bytes of scales[, 32 bytes of high bits], 128 bytes of nibbles
        nb = blocks.shape[0]
        d, dmin = _f16(blocks[:, 0:2]), _f16(blocks[:, 2:4])
        sc, mn = _k_scales(blocks[:, 4:16])
        qs = blocks[:, 16:144] if ggml_type == 12 else blocks[:, 48:176]
        qs = qs.reshape(nb, 4, 32)
        q = Tensor.stack(qs & 0xF, qs >> 4, dim=2).reshape(nb, 8, 32)   # sub-block 2c+h: the h-th nibble of chunk c
        if ggml_type == 13:
            qh = blocks[:, 16:48].reshape(nb, 1, 32)
            shifts = Tensor.arange(8, device=blocks.device, dtype=dtypes.uint8).reshape(1, 8, 1)
            q = q | (((qh >> shifts) & 1) << 4)
        y = (d * sc).unsqueeze(-1) * q.cast(f32) - (dmin * mn).unsqueeze(-1)
        return y.reshape(nb, 256)
    if ggml_type == 14:   # Q6_K: 128 bytes low 4 bits, 64 bytes high 2 bits, 16 int8 scales, d
        nb = blocks.shape[0]
        ql = blocks[:, 0:128].reshape(nb, 2, 2, 32)    # (half, ql[l] or ql[l+32], l)
        qh = blocks[:, 128:192].reshape(nb, 2, 1, 32)
        sc = blocks[:, 192:208].bitcast(dtypes.int8).cast(f32).reshape(nb, 2, 4, 2, 1).expand(nb, 2, 4, 2, 16).reshape(nb, 2, 4, 32)
        d = _f16(blocks[:, 208:210]).reshape(nb, 1, 1, 1)
        low = Tensor.cat(ql & 0xF, ql >> 4, dim=2)     # groups q1, q2, q3, q4
        shifts = Tensor([0, 2, 4, 6], device=blocks.device, dtype=dtypes.uint8).reshape(1, 1, 4, 1)
        high = (qh >> shifts) & 3
        q = (low | (high << 4)).cast(f32) - 32
        return (d * sc * q).reshape(nb, 256)
    name = GGML_QUANT_SIZES.get(ggml_type, (str(ggml_type),))[0]
    raise NotImplementedError(f"dequantizing ggml type {name} is not supported")
