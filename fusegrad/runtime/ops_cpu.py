"""The CPU device: C from ClangRenderer, compiled by the system C compiler into a shared library
that ctypes loads. Compiled libraries are cached on disk by source hash (see Compiler)."""
from __future__ import annotations
import ctypes, os, pathlib, platform, subprocess, tempfile, time
from fusegrad.device import Compiled, Compiler, CompileError, MallocAllocator
from fusegrad.helpers import cache_dir, content_hash, getenv
from fusegrad.renderer.cstyle import ClangRenderer

def _compiler_command() -> list[str]:
    return [os.environ.get("CC", "cc")]

class ClangCompiler(Compiler):
    """``cc -shared -O2 -march=native``: C source in, shared-library bytes out."""
    flags = ["-shared", "-O2", "-fPIC", "-march=native", "-fno-math-errno", "-ffp-contract=fast", "-Wno-unused", "-x", "c", "-"]
    def __init__(self) -> None:
        try: version = subprocess.run(_compiler_command() + ["--version"], capture_output=True, text=True, check=True).stdout.split("\n")[0]
        except (OSError, subprocess.CalledProcessError) as e:
            raise RuntimeError(f"the CPU device needs a C compiler ({_compiler_command()[0]}); install gcc or clang, or set CC: {e}")
        super().__init__(f"cpu_{version}_{' '.join(self.flags)}_{platform.machine()}")
    def compile(self, src: str) -> bytes:
        with tempfile.TemporaryDirectory() as tmp:
            out = pathlib.Path(tmp) / "kernel.so"
            result = subprocess.run(_compiler_command() + self.flags + ["-o", str(out), "-lm"], input=src.encode(), capture_output=True)
            if result.returncode != 0:
                raise CompileError(f"C compiler failed:\n{result.stderr.decode()}\n--- source ---\n{src}")
            return out.read_bytes()

class CPUProgram:
    """A kernel in a shared library. Called with buffer pointers, then int arguments."""
    def __init__(self, name: str, lib: bytes):
        self.name = name
        path = cache_dir() / "libs" / f"{content_hash(lib)}.so"
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent)
            with os.fdopen(fd, "wb") as f: f.write(lib)
            os.replace(tmp, path)   # atomic, so concurrent processes never load a half-written file
        self.lib = ctypes.CDLL(str(path))
        self.fxn = getattr(self.lib, name)
    def __call__(self, *bufs, global_size=(1, 1, 1), local_size=(1, 1, 1), vals=(), wait: bool = False):
        args = [ctypes.c_void_p(ctypes.addressof(b)) for b in bufs] + [ctypes.c_int64(v) for v in vals]
        start = time.perf_counter() if wait else 0.0
        self.fxn(*args)
        return time.perf_counter() - start if wait else None

class CPUDevice(Compiled):
    def __init__(self, device: str):
        super().__init__(device, MallocAllocator(), ClangRenderer(), ClangCompiler(), CPUProgram)
