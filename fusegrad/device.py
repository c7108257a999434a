"""Devices: the registry, Buffer, and the Allocator / Compiler / Program interfaces.

A device is a ``Compiled``: an Allocator (memory), a Renderer (linear UOps → source), a Compiler
(source → binary, cached on disk) and a Program class (binary → something callable).

>>> Device.DEFAULT in ("CPU", "PYTHON")
True
>>> buf = Buffer("CPU", 4, dtypes.float32).ensure_allocated()
"""
from __future__ import annotations
import ctypes, errno, functools, importlib, mmap, os, pathlib, sqlite3, threading
from dataclasses import dataclass, field
from typing import Any, Callable
from fusegrad.dtype import DType, dtypes, ImageDType
from fusegrad.helpers import DEBUG, GlobalCounters, getenv, usable_cache_dir, content_hash, CACHELEVEL, LRU

# ---------------------------------------------------------------- registry

# Only backends that exist are listed: a device name without a runtime module is an unknown device.
RUNTIMES = {"CPU": "ops_cpu", "LLVM": "ops_llvm", "PYTHON": "ops_python", "NPY": "ops_npy", "DISK": "ops_disk", "NULL": "ops_null",
            "CL": "ops_cl", "CUDA": "ops_cuda"}
LEGACY_FLAGS = {"CLANG": "CPU", "CPU": "CPU", "LLVM": "LLVM", "PYTHON": "PYTHON", "NULL": "NULL", "CL": "CL", "GPU": "CL", "CUDA": "CUDA"}

class _Device:
    """``Device["CPU"]`` opens (once) and returns a device; ``Device.DEFAULT`` is the default name."""
    def __init__(self) -> None:
        self._opened: dict[str, Compiled] = {}
        self._lock = threading.Lock()
    @staticmethod
    def canonicalize(name: str | None) -> str:
        """``"cpu:0"`` → ``"CPU"``; ``"disk:/path"`` keeps its path; ``"CPU:1"`` stays a separate instance."""
        if name is None: return Device.DEFAULT
        if not isinstance(name, str): raise TypeError(f"device must be a string, got {type(name).__name__}")
        if name.upper().startswith("DISK:"): return "DISK:" + name[5:]
        base, _, rest = name.partition(":")
        base = base.upper()
        # tinygrad spells the CPU with its LLVM backend "CPU:LLVM"; here that is the LLVM device
        if base == "CPU" and rest.upper() == "LLVM": base, rest = "LLVM", ""
        base = {"CLANG": "CPU", "GPU": "CL", "OPENCL": "CL"}.get(base, base)
        if base not in RUNTIMES: raise RuntimeError(f"unknown device {name!r}; known devices: {sorted(RUNTIMES)}")
        if rest in ("", "0"): return base
        return f"{base}:{rest.upper() if not rest.isdigit() else rest}"
    def __getitem__(self, name: str) -> "Compiled":
        # an open device's canonical name (what Buffers hold) is found without canonicalizing again
        if type(name) is str and (opened := self._opened.get(name)) is not None: return opened
        name = self.canonicalize(name)
        if (opened := self._opened.get(name)) is not None: return opened
        with self._lock:
            if name not in self._opened:
                base = name.split(":")[0]
                module = importlib.import_module(f"fusegrad.runtime.{RUNTIMES[base]}")
                device_class = next(v for k, v in module.__dict__.items() if k.lower() == f"{base.lower()}device")
                self._opened[name] = device_class(name)
                if DEBUG >= 1: print(f"opened device {name}")
        return self._opened[name]
    @functools.cached_property
    def DEFAULT(self) -> str:
        if (dev := os.environ.get("DEV")): return self.canonicalize(dev)
        for flag, dev in LEGACY_FLAGS.items():
            if getenv(flag, 0) == 1: return self.canonicalize(dev)
        return "CPU"

Device = _Device()

# ---------------------------------------------------------------- memory

class Allocator:
    """Device memory: alloc/free/copyin/copyout, with a cache of freed buffers (LRU=0 disables)."""
    def __init__(self) -> None:
        self.cache: dict[tuple[int, Any], list[Any]] = {}
    def alloc(self, size: int, options: Any = None) -> Any:
        if size <= 0: raise ValueError(f"buffer size must be positive, got {size}")
        if (cached := self.cache.get((size, options))): return cached.pop()
        try: return self._alloc_or_memory_error(size, options)
        except MemoryError:
            self.free_cache()
            return self._alloc_or_memory_error(size, options)
    def _alloc_or_memory_error(self, size: int, options: Any) -> Any:
        """``_alloc``, with the ways a host allocation can fail (no memory, or a size past what the OS or ctypes
        takes: OverflowError, OSError ENOMEM from mmap) all reported as MemoryError naming the size."""
        try: return self._alloc(size, options)
        except (MemoryError, OverflowError) as e: raise MemoryError(f"can't allocate {size} bytes on {type(self).__name__}: {e}") from None
        except OSError as e:
            if e.errno != errno.ENOMEM: raise
            raise MemoryError(f"can't allocate {size} bytes on {type(self).__name__}: {e}") from None
    def free(self, opaque: Any, size: int, options: Any = None) -> None:
        if LRU.value and not (options is not None and getattr(options, "nolru", False)):   # (.value: no __bool__ call per free)
            self.cache.setdefault((size, options), []).append(opaque)
        else: self._free(opaque, options)
    def free_cache(self) -> None:
        for (_, options), opaques in self.cache.items():
            for opaque in opaques: self._free(opaque, options)
        self.cache.clear()
    # subclasses implement these
    def _alloc(self, size: int, options: Any) -> Any: raise NotImplementedError(f"{type(self).__name__} can't allocate")
    def _free(self, opaque: Any, options: Any) -> None: pass
    def _copyin(self, dest: Any, src: memoryview) -> None: raise NotImplementedError
    def _copyout(self, dest: memoryview, src: Any) -> None: raise NotImplementedError
    def _as_buffer(self, src: Any) -> memoryview: raise NotImplementedError
    def _offset(self, opaque: Any, size: int, offset: int) -> Any: raise NotImplementedError
    # a device-to-device copy between two allocators of this class (two GPUs, or two buffers of one) without a
    # trip through host memory; None: BufferCopy goes through the host. Signature: (dest, src, nbytes, src_allocator)
    _transfer: Any = None

HUGE_PAGE = 2 << 20

class MallocAllocator(Allocator):
    """Host memory from ctypes arrays (64-byte aligned so vector loads are fast). Zero-copy views.

    Buffers of 4 MB and more are anonymous mappings aligned to 2 MB and marked for transparent huge pages
    (``madvise(MADV_HUGEPAGE)``, as numpy does for its big arrays): a kernel walking down the rows of a big
    matrix touches one TLB entry per 2 MB instead of one per 4 KB page, and a new buffer costs one page fault
    per 2 MB. (Only the virtual range is padded; pages never touched cost no memory.)"""
    def _alloc(self, size: int, options: Any) -> Any:
        if size >= 2 * HUGE_PAGE and hasattr(mmap, "MADV_HUGEPAGE"):
            region = mmap.mmap(-1, size + HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
            region.madvise(mmap.MADV_HUGEPAGE)
            start = (-ctypes.addressof(ctypes.c_char.from_buffer(region))) % HUGE_PAGE
            return (ctypes.c_uint8 * size).from_buffer(region, start)   # (the array keeps the mapping alive)
        raw = (ctypes.c_uint8 * (size + 64))()
        offset = (-ctypes.addressof(raw)) % 64
        return (ctypes.c_uint8 * size).from_buffer(raw, offset)
    def _as_buffer(self, src: Any) -> memoryview: return memoryview(src).cast("B")
    def _copyin(self, dest: Any, src: memoryview) -> None: ctypes.memmove(dest, bytes(src) if src.readonly else _addr(src), src.nbytes)
    def _copyout(self, dest: memoryview, src: Any) -> None: ctypes.memmove(_addr(dest), src, len(dest))
    def _offset(self, opaque: Any, size: int, offset: int) -> Any: return (ctypes.c_uint8 * size).from_buffer(opaque, offset)

def _addr(mv: memoryview) -> int:
    """Address of a writable memoryview's data."""
    return ctypes.addressof(ctypes.c_char.from_buffer(mv))

@dataclass(frozen=True)
class BufferSpec:
    image: ImageDType | None = None
    uncached: bool = False
    cpu_access: bool = False
    host: bool = False
    nolru: bool = False

BufferOptions = BufferSpec

class Buffer:
    """A device allocation of ``size`` elements of ``dtype``; may be a view into a base buffer."""
    def __init__(self, device: str, size: int, dtype: DType, opaque: Any = None, options: BufferSpec | None = None,
                 initial_value: bytes | None = None, base: "Buffer | None" = None, offset: int = 0, preallocate: bool = False):
        if not isinstance(size, int) or size < 0: raise ValueError(f"buffer size must be a non-negative int, got {size!r}")
        self.device, self.size, self.dtype, self.options, self.offset = device, size, dtype, options, offset
        self._base = base
        if base is not None:
            if base._base is not None: raise RuntimeError("a view's base must itself be a base buffer")
            if offset + size * dtype.itemsize > base.nbytes: raise ValueError("buffer view exceeds its base")
        if opaque is not None: self.allocate(opaque)
        if initial_value is not None:
            self.allocate()
            self.copyin(memoryview(initial_value))
        if preallocate: self.allocate()
    @property
    def base(self) -> "Buffer": return self._base if self._base is not None else self
    @property
    def nbytes(self) -> int: return self.size * self.dtype.itemsize
    def is_allocated(self) -> bool: return hasattr(self, "_buf")
    def ensure_allocated(self) -> "Buffer": return self if self.is_allocated() else self.allocate()
    # allocate and deallocate run for the output of every eager op: plain reads, each computed value read once
    def allocate(self, opaque: Any = None) -> "Buffer":
        if hasattr(self, "_buf"): raise RuntimeError("buffer is already allocated")
        self.allocator = allocator = Device[self.device].allocator
        if self._base is not None:
            self._base.ensure_allocated()
            self._buf = allocator._offset(self._base._buf, self.nbytes, self.offset)
        elif opaque is not None: self._buf, self._owns = opaque, False
        else:
            nbytes = self.size * self.dtype.itemsize
            self._buf, self._owns = allocator.alloc(nbytes if nbytes > 1 else 1, self.options), True
            used = GlobalCounters.mem_used = GlobalCounters.mem_used + nbytes
            GlobalCounters.mem_used_per_device[self.device] += nbytes
            if used > GlobalCounters.mem_high_water: GlobalCounters.mem_high_water = used
        return self
    def deallocate(self) -> None:
        if not hasattr(self, "_buf"): return
        if self._base is None and self.__dict__.get("_owns", False):
            nbytes = self.size * self.dtype.itemsize
            GlobalCounters.mem_used -= nbytes
            GlobalCounters.mem_used_per_device[self.device] -= nbytes
            self.allocator.free(self._buf, nbytes if nbytes > 1 else 1, self.options)
        del self._buf
    def __del__(self) -> None:
        try: self.deallocate()
        except Exception: pass
    def view(self, size: int, dtype: DType, offset: int) -> "Buffer":
        """A sub-buffer sharing memory: ``size`` elements of ``dtype`` starting at byte ``offset``."""
        if self._base is not None: return Buffer(self.device, size, dtype, base=self._base, offset=self.offset + offset)
        return Buffer(self.device, size, dtype, base=self, offset=offset)
    def as_buffer(self, allow_zero_copy: bool = False) -> memoryview:
        if allow_zero_copy and hasattr(self.allocator, "_as_buffer"):
            try: return self.allocator._as_buffer(self._buf)
            except NotImplementedError: pass
        return self.copyout(memoryview(bytearray(self.nbytes)))
    def copyin(self, mv: memoryview) -> "Buffer":
        mv = mv.cast("B") if mv.format != "B" or mv.ndim != 1 else mv
        if mv.nbytes != self.nbytes: raise ValueError(f"copyin of {mv.nbytes} bytes into a buffer of {self.nbytes} bytes")
        self.ensure_allocated()
        if mv.nbytes: self.allocator._copyin(self._buf, mv)
        return self
    def copyout(self, mv: memoryview) -> memoryview:
        mv = mv.cast("B") if mv.format != "B" or mv.ndim != 1 else mv
        if mv.nbytes != self.nbytes: raise ValueError(f"copyout of {self.nbytes} bytes into {mv.nbytes} bytes")
        self.ensure_allocated()
        if mv.nbytes: self.allocator._copyout(mv, self._buf)
        return mv
    def numpy(self) -> Any:
        """A 1-d numpy copy of the whole buffer. The bytes are copied once, straight into the array's own memory:
        copying out into a bytearray and then copying that into an array took 0.95 ms for 1 MB (two fresh
        allocations, each one faulting its pages in), this takes 0.03 ms."""
        import numpy as np
        from fusegrad.dtype import to_np_dtype
        array = np.empty(self.size, dtype=to_np_dtype(self.dtype))
        self.copyout(memoryview(array).cast("B"))
        return array
    def __repr__(self) -> str:
        return f"<buf device:{self.device} size:{self.size} dtype:{self.dtype}{' offset:'+str(self.offset) if self._base else ''}>"

# ---------------------------------------------------------------- compiling

class CompileError(Exception):
    """The backend compiler rejected generated source (the message has the compiler's output)."""

class Compiler:
    """Turns source into a binary. ``compile_cached`` keeps results in an on-disk cache keyed by
    the source hash and ``cachekey`` (which names the compiler and its flags)."""
    def __init__(self, cachekey: str | None = None):
        self.cachekey = cachekey if getenv("DISABLE_COMPILER_CACHE", 0) == 0 else None
    def compile(self, src: str) -> bytes: return src.encode()
    def compile_batch(self, srcs: list[str]) -> list[bytes]:
        """One binary per source, each loadable by the device's Program under that source's kernel name.
        Backends whose compiler costs a process start per call (CPU: gcc) override this to compile many sources at once."""
        return [self.compile(src) for src in srcs]
    def compile_cached(self, src: str) -> bytes:
        if self.cachekey is None or CACHELEVEL < 1: return self.compile(src)
        key = content_hash(self.cachekey, src)
        if (cached := diskcache_get("compile", key)) is not None: return cached
        lib = self.compile(src)
        diskcache_put("compile", key, lib)
        return lib
    def compile_cached_batch(self, srcs: list[str]) -> list[bytes]:
        """``compile_cached`` for several sources: the ones in the disk cache are read, the rest go to one
        ``compile_batch`` call and are stored each under its own source's key (so a later single compile finds them)."""
        if self.cachekey is None or CACHELEVEL < 1: return self.compile_batch(srcs)
        keys = [content_hash(self.cachekey, src) for src in srcs]
        libs: list[bytes | None] = [diskcache_get("compile", key) for key in keys]
        if (missing := [i for i, lib in enumerate(libs) if lib is None]):
            for i, lib in zip(missing, self.compile_batch([srcs[i] for i in missing])): libs[i] = lib
            diskcache_put_many("compile", [(keys[i], libs[i]) for i in missing])
        return libs   # type: ignore[return-value]

class Compiled:
    """A device: allocator, renderer, compiler, program class and an optional JIT graph class."""
    def __init__(self, device: str, allocator: Allocator, renderer: Any, compiler: Compiler, runtime: Callable, graph: Any = None):
        self.device, self.allocator, self.renderer, self.compiler, self.runtime, self.graph = \
            device, allocator, renderer, compiler, runtime, graph
    def synchronize(self) -> None: pass
    @property
    def dname(self) -> str: return self.device
    def __reduce__(self):   # a device pickles as its name: unpickling opens that device in the new process
        return _open_device, (self.device,)

def _open_device(name: str) -> "Compiled": return Device[name]

# ---------------------------------------------------------------- the disk cache (sqlite, safe across processes)

_db_lock = threading.Lock()
_db_connection: sqlite3.Connection | None = None
_db_broken = False   # the cache database is unreadable or can't be opened: this process runs without it (warned once)

# What a damaged or unusable database can raise besides sqlite3.DatabaseError: a text value that isn't UTF-8
# (UnicodeDecodeError, from sqlite3's str conversion on some Python versions), a path that can't be opened or
# created (OSError: the cache location is a file, read-only, missing permissions) and MemoryError from a
# corrupt length field. Any of them means "run without the cache", never a failed kernel.
_DB_FAILURES = (sqlite3.DatabaseError, UnicodeDecodeError, OSError, MemoryError)

def _db_path() -> str | None:
    """The database file: CACHEDB, or cache.db in the cache folder (None when that folder can't be used)."""
    if (path := getenv("CACHEDB", "")): return path
    folder = usable_cache_dir()
    return None if folder is None else str(folder / "cache.db")

def _db() -> sqlite3.Connection:
    """The shared connection, opened on first use. Opening includes switching to WAL mode: on a damaged file that is
    the first statement to fail, so it raises here, inside the callers' fallback, like any later query."""
    global _db_connection, _db_broken
    if _db_connection is None:
        if (path := _db_path()) is None:   # (usable_cache_dir warned already: turned off without a second warning)
            _db_broken = True
            raise sqlite3.OperationalError("the cache folder can't be used")
        connection = sqlite3.connect(path, timeout=60, isolation_level=None, check_same_thread=False)
        try: connection.execute("PRAGMA journal_mode=WAL").fetchall()
        except BaseException as e:
            if not (isinstance(e, sqlite3.OperationalError) and "locked" in str(e)):   # (locked by another process: WAL is optional)
                connection.close()
                raise
        _db_connection = connection
    return _db_connection

def _db_unusable(error: BaseException) -> None:
    """A database that can't be used (garbage, truncated, a folder that can't be created or opened): caching is off
    for this process and everything is recomputed, with one warning. The file is left alone (CACHEDB may name any
    file); deleting it starts a fresh cache."""
    global _db_broken
    if not _db_broken:
        import warnings
        warnings.warn(f"the fusegrad cache database {getenv('CACHEDB', '') or 'in the cache folder'} is unreadable "
                      f"({type(error).__name__}: {error}); running without it (results are recomputed). Delete the "
                      f"file to start a fresh cache.", RuntimeWarning, stacklevel=3)
    _db_broken = True

def _is_transient(error: BaseException) -> bool:
    """Errors that leave the database usable: another process holds the lock, or the table isn't created yet."""
    return isinstance(error, sqlite3.OperationalError) and _db_connection is not None and \
        any(words in str(error) for words in ("locked", "no such table", "busy", "decode"))

# Values are plain data: bytes (stored as a BLOB) or JSON (str, int, float, bool, None, lists, str-keyed dicts;
# tuples come back as lists), stored as text. Nothing read from the database is unpickled or evaluated, so a
# planted entry can't run code. Each row also holds the SHA-256 of its table, its key and what was stored (so its
# length too): a row that doesn't match it (damaged, truncated, or moved to another key: two swapped rows of
# kernels would run one kernel's binary or source for the other) is a cache miss, with a warning, and is rewritten
# by the recompute. (Version 2 rows hashed only the value.)
CACHE_VERSION = 3

def _row_checksum(table: str, key: str, raw: bytes) -> str:
    import hashlib
    return hashlib.sha256(f"{table}\0{key}\0{len(raw)}\0".encode() + raw).hexdigest()

def _stored_form(table: str, key: str, value: Any) -> tuple[bytes | str, str]:
    import json
    if isinstance(value, (bytes, bytearray, memoryview)):
        blob = bytes(value)
        return blob, _row_checksum(table, key, blob)
    try: text = json.dumps(value, allow_nan=True, separators=(",", ":"))
    except TypeError as e: raise TypeError(f"the disk cache stores bytes or plain JSON data, not {type(value).__name__}: {e}") from None
    return text, _row_checksum(table, key, text.encode())

def _stored_value(table: str, key: str, stored: Any, checksum: Any) -> Any:
    import json, warnings
    try: raw = stored if isinstance(stored, bytes) else stored.encode() if isinstance(stored, str) else None
    except UnicodeError: raw = None   # (a str with lone surrogates)
    if raw is None or _row_checksum(table, key, raw) != checksum:
        warnings.warn(f"fusegrad cache: entry {key[:16]}... of {table} is damaged (its checksum doesn't match); recomputing it",
                      RuntimeWarning, stacklevel=4)
        return None
    if isinstance(stored, bytes): return stored
    try: return json.loads(stored)
    except ValueError:
        warnings.warn(f"fusegrad cache: entry {key[:16]}... of {table} isn't valid JSON; recomputing it", RuntimeWarning, stacklevel=4)
        return None

def diskcache_get(table: str, key: str) -> Any:
    """Read a value written by ``diskcache_put`` (None when missing, damaged, or caching is off)."""
    if CACHELEVEL < 1 or _db_broken: return None
    with _db_lock:
        try: row = _db().execute(f"SELECT val, checksum FROM {table}_{CACHE_VERSION} WHERE key=?", (key,)).fetchone()
        except _DB_FAILURES as e:   # no such table yet, or locked by another process: a miss; anything else: no cache
            if not _is_transient(e): _db_unusable(e)
            return None
    return _stored_value(table, key, row[0], row[1]) if row is not None else None

def diskcache_put(table: str, key: str, value: Any) -> Any:
    """Store ``value`` (bytes or plain JSON data) under ``key`` in ``table``; returns ``value``."""
    if CACHELEVEL < 1: return value
    stored, checksum = _stored_form(table, key, value)
    if _db_broken: return value
    with _db_lock:
        try:
            conn = _db()
            conn.execute(f"CREATE TABLE IF NOT EXISTS {table}_{CACHE_VERSION} (key TEXT PRIMARY KEY, val BLOB, checksum TEXT)")
            conn.execute(f"INSERT OR REPLACE INTO {table}_{CACHE_VERSION} (key, val, checksum) VALUES (?, ?, ?)", (key, stored, checksum))
        except _DB_FAILURES as e:   # locked: the value just isn't cached; read-only, damaged: no cache
            if not _is_transient(e): _db_unusable(e)
    return value

def diskcache_put_many(table: str, items: list[tuple[str, Any]]) -> None:
    """``diskcache_put`` of several (key, value) pairs in one transaction: one disk sync for all of them (a commit
    costs ~5 ms of fsync; a first training step stores two entries per kernel)."""
    if CACHELEVEL < 1 or not items: return
    rows = [(key, *_stored_form(table, key, value)) for key, value in items]
    if _db_broken: return
    with _db_lock:
        try:
            conn = _db()
            conn.execute(f"CREATE TABLE IF NOT EXISTS {table}_{CACHE_VERSION} (key TEXT PRIMARY KEY, val BLOB, checksum TEXT)")
            conn.execute("BEGIN")
            try:
                conn.executemany(f"INSERT OR REPLACE INTO {table}_{CACHE_VERSION} (key, val, checksum) VALUES (?, ?, ?)", rows)
                conn.execute("COMMIT")
            finally:   # (a failed insert or commit must not leave the shared connection inside a transaction)
                if conn.in_transaction: conn.execute("ROLLBACK")
        except _DB_FAILURES as e:   # locked: the values just aren't cached; read-only, damaged: no cache
            if not _is_transient(e): _db_unusable(e)

def diskcache_clear() -> None:
    if _db_broken: return
    with _db_lock:
        try:
            conn = _db()
            for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type='table'").fetchall():
                conn.execute(f"DROP TABLE IF EXISTS {name}")
        except _DB_FAILURES as e:
            if not _is_transient(e): _db_unusable(e)

def is_dtype_supported(dtype: DType, device: str | None = None) -> bool:
    """Whether tensors of ``dtype`` can be computed on ``device`` (the default device if None). Every dtype
    computes on the devices that run kernels, bfloat16 and fp8 through codegen's emulation (codegen/lowering.py);
    DISK and NPY only store bytes and run no kernels, so nothing computes there.

    >>> is_dtype_supported(dtypes.fp8e4m3, "CPU"), is_dtype_supported(dtypes.float32, "NPY")
    (True, False)
    """
    base = Device.canonicalize(device).split(":")[0]
    return dtypes.concrete(dtype) in dtypes.all and base not in ("DISK", "NPY")

# ---------------------------------------------------------------- listing: python -m fusegrad.device

def _probe_compute(device: str) -> str:
    """Run a small kernel on ``device`` and check its result; returns what was checked."""
    from fusegrad.tensor import Tensor
    got = (Tensor([1.0, 2.0, 3.0], device=device) * 2 + 1).sum().item()
    if got != 15.0: raise RuntimeError(f"(x * 2 + 1).sum() gave {got}, expected 15.0")
    return "ran a kernel, result correct"

def _probe_disk() -> str:
    import tempfile
    from fusegrad.tensor import Tensor
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "probe.bin")
        with open(path, "wb") as f: f.write(bytes(range(8)))
        got = Tensor.empty(8, dtype=dtypes.uint8, device=f"DISK:{path}").to("CPU").tolist()
    if got != list(range(8)): raise RuntimeError(f"read {got} from a file holding {list(range(8))}")
    return "read a file back"

def _probe_npy() -> str:
    import numpy as np
    from fusegrad.tensor import Tensor
    got = Tensor(np.arange(4, dtype=np.int32), device="NPY").to("CPU").tolist()
    if got != [0, 1, 2, 3]: raise RuntimeError(f"copied back {got}, expected [0, 1, 2, 3]")
    return "held an array and copied it back (NPY stores, it runs no kernels)"

def _probe_null() -> str:
    from fusegrad.tensor import Tensor
    (Tensor.empty(4, 4, device="NULL") @ Tensor.empty(4, 4, device="NULL")).realize()
    return "scheduled and rendered a kernel (NULL runs nothing)"

def probe_device(name: str) -> tuple[bool, str]:
    """``(works, reason)`` for the backend ``name`` (a key of RUNTIMES): it is opened and given a tiny job."""
    try:
        if name == "DISK": return True, _probe_disk()
        if name == "NULL": return True, _probe_null()
        if name == "NPY": return True, _probe_npy()
        Device[name]
        return True, _probe_compute(name)
    except Exception as error:   # any failure is the answer: which backend can't run here, and why
        message = str(error).strip().splitlines()[0] if str(error).strip() else ""
        return False, f"{type(error).__name__}: {message}"[:200]

def list_devices() -> list[tuple[str, bool, str]]:
    """Every backend in RUNTIMES with whether it works here and why (what ``python -m fusegrad.device`` prints)."""
    return [(name, *probe_device(name)) for name in RUNTIMES]

def _print_devices() -> int:
    rows = list_devices()
    for name, works, reason in rows:
        default = " (default)" if name == Device.DEFAULT else ""
        print(f"{name + default:16s} {'PASS' if works else 'FAIL'}  {reason}")
    return 0 if any(works for _, works, _ in rows) else 1

if __name__ == "__main__":
    # run as a script, this file is a second copy of the module: use the package's registry
    from fusegrad import device as _registry
    raise SystemExit(_registry._print_devices())
