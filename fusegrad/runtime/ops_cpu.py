"""The CPU device: C from ClangRenderer, compiled by the system C compiler into a shared library
that ctypes loads. Compiled libraries are cached on disk by source hash (see Compiler)."""
from __future__ import annotations
import ctypes, os, pathlib, platform, re, subprocess, tempfile, time
from fusegrad.device import Compiled, Compiler, CompileError, MallocAllocator
from fusegrad.helpers import PROFILE, ansistrip, usable_cache_dir, content_hash, getenv
from fusegrad.renderer.cstyle import ClangRenderer

# OpenMP threads sleep between kernels instead of spinning: spinning wins a few microseconds on
# an idle machine but wastes whole time slices when the cores are shared (tests, other programs)
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# A packed panel (OptOps.PACK, up to renderer.pack_max_bytes = 512 KB) is an OpenMP private array on each thread's
# stack: worker threads get 8 MB whatever the C library's default (glibc: 8 MB, musl: 128 KB)
os.environ.setdefault("OMP_STACKSIZE", "8M")

def _compiler_command() -> list[str]:
    return [os.environ.get("CC", "cc")]

class ClangCompiler(Compiler):
    """``cc -shared -O2 -march=native``: C source in, shared-library bytes out."""
    base_flags = ["-shared", "-O3", "-fPIC", "-march=native", "-fno-math-errno", "-ffp-contract=off", "-Wno-unused"]
    def __init__(self) -> None:
        try: about = subprocess.run(_compiler_command() + ["--version"], capture_output=True, text=True, check=True).stdout
        except (OSError, subprocess.CalledProcessError) as e:
            raise RuntimeError(f"the CPU device needs a C compiler ({_compiler_command()[0]}); install gcc or clang, or set CC: {e}")
        self.has_openmp = _supports_openmp()
        # (GCC 12 miscompiles two loop shapes; the kernels that have them turn the guilty pass off for
        # themselves with an optimize attribute: see ClangRenderer.render)
        version = about.split("\n")[0]
        self.flags = self.base_flags + (["-fopenmp"] if self.has_openmp else []) + ["-x", "c", "-"]
        super().__init__(f"cpu_{version}_{' '.join(self.flags)}_{platform.machine()}")
    def compile(self, src: str) -> bytes:
        with tempfile.TemporaryDirectory() as tmp:
            out = pathlib.Path(tmp) / "kernel.so"
            result = subprocess.run(_compiler_command() + self.flags + ["-o", str(out), "-lm"], input=src.encode(), capture_output=True)
            if result.returncode != 0:
                raise CompileError(f"C compiler failed:\n{result.stderr.decode()}\n--- source ---\n{src}")
            return out.read_bytes()
    def compile_batch(self, srcs: list[str]) -> list[bytes]:
        """Many kernels, one compiler process: the sources are joined into one C file (each kernel's function renamed
        ``<name>_fgk<i>``, its typedefs and static helpers suffixed, its macros undefined after it) and compiled into
        one shared library; each kernel's binary is that library with its function's symbol appended
        (``kernel_symbol``). A compiler process costs ~40 ms before it reads a line and every source re-parses its
        headers (immintrin.h ~100 ms): joined, a training step's kernels take 2.5-3.5x less compiler CPU time. If the
        compiler rejects the joined file, each source is compiled alone, so the error names its kernel."""
        unique = list(dict.fromkeys(srcs))
        if len(unique) < 2 or not all(len(_EXPORTED.findall(src)) == 1 for src in unique): return [self.compile(src) for src in srcs]
        symbols = {src: f"{_EXPORTED.findall(src)[0]}_fgk{i}" for i, src in enumerate(unique)}
        try: lib = self.compile("".join(_isolated(src, i) for i, src in enumerate(unique)))
        except CompileError: return [self.compile(src) for src in srcs]
        return [lib + symbols[src].encode() + len(symbols[src]).to_bytes(2, "little") + _SYMBOL_MARK for src in srcs]

# A kernel compiled in a batch: the shared library's bytes, then its function's name, the name's length (2 bytes) and
# this mark. The loader ignores bytes past an ELF file's last section; CPUProgram strips them before writing the file.
_SYMBOL_MARK = b"\0fusegrad-symbol\0"

def kernel_symbol(lib: bytes, name: str) -> tuple[bytes, str]:
    """(the shared library, the symbol of kernel ``name`` in it): a batch-compiled binary names its symbol, a
    single compile's library exports ``name`` itself."""
    if not lib.endswith(_SYMBOL_MARK): return lib, name
    end = len(lib) - len(_SYMBOL_MARK) - 2
    length = int.from_bytes(lib[end:end + 2], "little")
    return lib[:end - length], lib[end - length:end].decode()

# the function a kernel source exports (``void name(``, rendered at the start of a line), and the file-scope names it
# may define that another kernel's source may define differently: typedefs, static helpers, macros
_EXPORTED = re.compile(r"^void\s+(\w+)\s*\(", re.M)
_STATIC_FUNCTION = re.compile(r"^static\b[^;{=]*?\b(\w+)\s*\(", re.M)
_TYPEDEF = re.compile(r"\btypedef\b([^;]*);")
_MACRO = re.compile(r"^\s*#\s*define\s+(\w+)", re.M)

def _isolated(src: str, index: int) -> str:
    """``src`` made safe to share a C file with other kernels: its typedefs and static functions get a suffix unique
    to it (renamed in its text, so system headers it includes are untouched), its exported function becomes
    ``<name>_fgk<index>``, and its macros are undefined after it."""
    src = _EXPORTED.sub(lambda m: f"void {m.group(1)}_fgk{index}(", src)
    local = set(_STATIC_FUNCTION.findall(src))
    for statement in _TYPEDEF.findall(src):
        if (words := re.findall(r"\w+", re.sub(r"__attribute__\s*\(\(.*\)\)", "", statement))): local.add(words[-1])
    if local: src = re.sub(r"\b(" + "|".join(map(re.escape, sorted(local))) + r")\b", rf"\1_fgk{index}", src)
    return src + "".join(f"#undef {name}\n" for name in dict.fromkeys(_MACRO.findall(src)))

def _supports_openmp() -> bool:
    """Can the compiler build and link an OpenMP shared library? (THREAD opts need it.)"""
    src = b"#include <omp.h>\nint f(void) { return omp_get_max_threads(); }\n"
    with tempfile.TemporaryDirectory() as tmp:
        result = subprocess.run(_compiler_command() + ["-shared", "-fPIC", "-fopenmp", "-x", "c", "-", "-o", f"{tmp}/t.so"],
                                input=src, capture_output=True)
        return result.returncode == 0

def _write_library(path: pathlib.Path, lib: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent)
    with os.fdopen(fd, "wb") as f: f.write(lib)
    os.replace(tmp, path)   # atomic, so concurrent processes never load a half-written file

def library_path(lib: bytes) -> pathlib.Path:
    """The cached shared library holding exactly ``lib``, named by its SHA-256. A file already there is checked
    against that hash before it is loaded: a truncated library would SIGBUS in the loader on every run, and an
    edited one would run its edits. A mismatch is rewritten from ``lib`` (with a warning). Where the cache folder
    can't be used or written (a file, read-only, full), the library goes to a folder of this process's own."""
    digest = content_hash(lib)
    # a batch's kernels share one library: it is checked once per process (dlopen hands back the copy already
    # loaded from this path, so checking the file again would not change what runs)
    if (known := _checked_libraries.get(digest)) is not None: return known
    folder = usable_cache_dir("libs")
    path = folder / f"{digest}.so" if folder is not None else _private_library_folder() / f"{digest}.so"
    try: on_disk = path.read_bytes() if path.is_file() else None
    except OSError: on_disk = None
    if on_disk is not None and content_hash(on_disk) != digest:
        import warnings
        warnings.warn(f"the cached kernel library {path} doesn't match its hash (damaged or edited); rewriting it", RuntimeWarning, stacklevel=3)
        on_disk = None
    if on_disk is None:
        try: _write_library(path, lib)
        except OSError:   # (the cache folder is full or went read-only: this process's own folder still works)
            path = _private_library_folder() / f"{digest}.so"
            _write_library(path, lib)
    _checked_libraries[digest] = path
    return path

_checked_libraries: dict[str, pathlib.Path] = {}   # SHA-256 of a library -> the checked file it is loaded from
_private_folder: list[pathlib.Path] = []

def _private_library_folder() -> pathlib.Path:
    """A temporary folder for this process's libraries when the cache can't hold them (removed at exit)."""
    if not _private_folder:
        import atexit, shutil
        _private_folder.append(pathlib.Path(tempfile.mkdtemp(prefix="fusegrad-libs-")))
        atexit.register(shutil.rmtree, _private_folder[0], True)
    return _private_folder[0]

class CPUProgram:
    """A kernel in a shared library. Called with buffer pointers, then int arguments."""
    def __init__(self, name: str, lib: bytes):
        self.name = name
        library, symbol = kernel_symbol(lib, name)
        self.lib = ctypes.CDLL(str(library_path(library)))
        self.fxn = getattr(self.lib, symbol)
    def __call__(self, *bufs, global_size=(1, 1, 1), local_size=(1, 1, 1), vals=(), wait: bool = False):
        # CPU buffers are ctypes arrays, which ctypes passes as pointers to their data: no c_void_p per
        # buffer on this per-launch path (eager dispatch calls it once per op)
        args = bufs if not vals else (*bufs, *[ctypes.c_int64(v) for v in vals])
        start = time.perf_counter() if wait else 0.0
        self.fxn(*args)
        return time.perf_counter() - start if wait else None

class CPUDevice(Compiled):
    def __init__(self, device: str):
        compiler = ClangCompiler()
        super().__init__(device, MallocAllocator(), ClangRenderer(has_threads=compiler.has_openmp), compiler, CPUProgram, CPUGraph)

class CPUGraph:
    """Runs a JIT capture in one native call: a generated C function calls every kernel in order
    through a table of function pointers, with buffer addresses from a pointer table. Replay only
    rewrites the table entries of the inputs, so a captured kernel costs a C call, not Python.
    With PROFILE on, a second generated function (built on first use) also reads the clock between
    kernels, so the trace gets a span per kernel inside the graph's span (``profiles_kernels``)."""
    profiles_kernels = True
    def __init__(self, items: list, input_buffers: list):
        from fusegrad.engine.realize import CompiledRunner
        self.items = items
        slot_of: dict[int, int] = {}
        buffers: list = []
        var_names: list[str] = []
        calls = []
        for index, item in enumerate(items):
            if not isinstance(item.prg, CompiledRunner) or not isinstance(item.prg._prg, CPUProgram):
                raise NotImplementedError("CPUGraph only batches CPU kernels")
            args, types = [], []
            for buf in item.bufs:
                if id(buf) not in slot_of:
                    slot_of[id(buf)] = len(buffers)
                    buffers.append(buf)
                args.append(f"bufs[{slot_of[id(buf)]}]")
                types.append("void*")
            for var in item.prg.p.vars:
                if var.arg[0] not in var_names: var_names.append(var.arg[0])
                args.append(f"vals[{var_names.index(var.arg[0])}]")
                types.append("long long")
            calls.append(f"  ((void(*)({', '.join(types) or 'void'}))fns[{index}])({', '.join(args)});")
        src = "void run(void **fns, void **bufs, long long *vals) {\n" + "\n".join(calls) + "\n}\n"
        self.calls, self.timed = calls, None
        from fusegrad.device import Device
        self.lib = CPUProgram("run", Device["CPU"].compiler.compile_cached(src))
        self.functions = (ctypes.c_void_p * len(items))(*[ctypes.cast(item.prg._prg.fxn, ctypes.c_void_p) for item in items])
        for buf in buffers: buf.ensure_allocated()
        self.table = (ctypes.c_void_p * max(1, len(buffers)))(*[ctypes.addressof(b._buf) for b in buffers])
        self.input_slots = [slot_of.get(id(b)) if b is not None else None for b in input_buffers]
        self.var_names = var_names
        self.vals = (ctypes.c_int64 * max(1, len(var_names)))()
        self.default_vals = {}
        for item in items:
            for var, value in item.var_vals.items(): self.default_vals[var.expr] = value
    def replay(self, new_inputs: list, var_vals: dict) -> None:
        for slot, buf in zip(self.input_slots, new_inputs):
            if slot is not None and buf is not None: self.table[slot] = ctypes.addressof(buf._buf)
        if self.var_names:
            by_name = {**self.default_vals, **{v.expr: val for v, val in var_vals.items()}}
            for i, name in enumerate(self.var_names): self.vals[i] = by_name[name]
        if PROFILE.value: self._replay_profiled()
        else: self.lib.fxn(self.functions, self.table, self.vals)

    def _replay_profiled(self) -> None:
        """Run the timed twin of ``run`` and record the graph's span and one span per kernel within it."""
        from fusegrad.viz import profile
        if self.timed is None:
            from fusegrad.device import Device
            stamped = [f"{call}\n  stamps[{i + 1}] = now();" for i, call in enumerate(self.calls)]
            src = ("#include <time.h>\nstatic double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); "
                   "return t.tv_sec + t.tv_nsec * 1e-9; }\n"
                   "void run_timed(void **fns, void **bufs, long long *vals, double *stamps) {\n  stamps[0] = now();\n"
                   + "\n".join(stamped) + "\n}\n")
            self.timed = CPUProgram("run_timed", Device["CPU"].compiler.compile_cached(src))
            self.stamps = (ctypes.c_double * (len(self.items) + 1))()
        start = profile.now()
        self.timed.fxn(self.functions, self.table, self.vals, self.stamps)
        end = profile.now()
        device = self.items[0].prg.device
        profile.record(f"JIT graph ({len(self.items)} kernels)", "graph", start, end - start, track=device)
        # the C clock's times, placed relative to the graph's start on the profiler's clock
        for i, item in enumerate(self.items):
            profile.record(ansistrip(item.prg.display_name).strip(), "kernel", start + self.stamps[i] - self.stamps[0],
                           self.stamps[i + 1] - self.stamps[i], track=device, buffers=len(item.bufs), in_graph=True)
