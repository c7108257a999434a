"""The LLVM device: LLVM IR from LLVMRenderer, optimized and compiled in-process by llvmlite (no compiler
process per kernel), for the host CPU. Binaries are relocatable object files, cached on disk like the CPU
device's libraries; a program loads its object into a small MCJIT engine and calls it through ctypes.

``DEV=LLVM`` (or ``CPU:LLVM``, tinygrad's spelling, or ``LLVM=1``) selects it. Needs ``pip install llvmlite``.
"""
from __future__ import annotations
import ctypes, threading, time
from concurrent.futures import ThreadPoolExecutor
from fusegrad.device import Compiled, Compiler, CompileError, MallocAllocator
from fusegrad.helpers import getenv, cpu_count
from fusegrad.renderer.llvmir import LLVMRenderer

try: import llvmlite.binding as llvm
except ImportError: llvm = None   # reported when the device is opened

# LLVM's optimization level: 2 is what clang -O2 runs (loop and SLP vectorizers included); 3 adds more
# aggressive inlining and unrolling, which buys nothing for single-function kernels and costs compile time
LLVM_OPT = getenv("LLVM_OPT", 2)

def _require_llvmlite() -> None:
    if llvm is None: raise RuntimeError("the LLVM device needs llvmlite: pip install llvmlite (or pip install 'fusegrad[llvm]')")

def host_target_machine():
    """A target machine for this CPU and all its features (AVX-512 where present), position-independent."""
    _require_llvmlite()
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    target = llvm.Target.from_triple(llvm.get_process_triple())
    return target.create_target_machine(cpu=llvm.get_host_cpu_name(), features=llvm.get_host_cpu_features().flatten(),
                                        opt=LLVM_OPT, reloc="pic", codemodel="default", jit=False)

class LLVMCompiler(Compiler):
    """LLVM IR text in, an object file (bytes) out: parse, verify, run the O2 pipeline, emit machine code."""
    def __init__(self) -> None:
        self.target_machine = host_target_machine()
        # LLVM contexts and target machines aren't safe to share across threads, but separate ones compile in
        # parallel: kernels compile in a thread pool (engine/realize.py precompile; llvmlite releases the GIL), so
        # each thread gets its own target machine and each compile its own context (a training step's kernels
        # take 20-80 ms each: the last batches of a step compile on every core)
        self.per_thread = threading.local()
        cpu, features = llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten()
        super().__init__(f"llvm_{'.'.join(map(str, llvm.llvm_version_info))}_{cpu}_{features}_O{LLVM_OPT}")
    def _thread_target_machine(self):
        if (machine := getattr(self.per_thread, "machine", None)) is None: machine = self.per_thread.machine = host_target_machine()
        return machine
    def compile(self, src: str) -> bytes:
        target_machine = self._thread_target_machine()
        context = llvm.create_context()
        try:
            module = llvm.parse_assembly(self.with_target(src), context=context)
            module.verify()
        except RuntimeError as e: raise CompileError(f"LLVM rejected the kernel:\n{e}\n--- source ---\n{src}") from None
        tuning = llvm.create_pipeline_tuning_options(speed_level=LLVM_OPT)
        builder = llvm.create_pass_builder(target_machine, tuning)
        builder.getModulePassManager().run(module, builder)
        return target_machine.emit_object(module)
    def with_target(self, src: str) -> str:
        """The module header that tells LLVM which machine the IR is for (data layout and triple)."""
        return f'target datalayout = "{self.target_machine.target_data}"\ntarget triple = "{self.target_machine.triple}"\n{src}'

# float16 conversions that x86 has no instruction for (double -> half; and every one without F16C) are calls into
# the compiler runtime. A JIT has no compiler-rt linked in: the functions come from libgcc, which the process can load.
HALF_RUNTIME_FUNCTIONS = ("__truncdfhf2", "__truncsfhf2", "__extendhfsf2", "__extendhfdf2")

def _register_runtime_functions() -> None:
    try: libgcc = ctypes.CDLL("libgcc_s.so.1")
    except OSError: return   # then kernels that need them fail to link, with LLVM naming the missing symbol
    for name in HALF_RUNTIME_FUNCTIONS:
        if (function := getattr(libgcc, name, None)) is not None: llvm.add_symbol(name, ctypes.cast(function, ctypes.c_void_p).value)

_pools: dict[int, ThreadPoolExecutor] = {}
_pool_lock = threading.Lock()

def _thread_pool(workers: int) -> ThreadPoolExecutor:
    """The threads that run the other cores' shares of threaded kernels (the calling thread runs core 0)."""
    with _pool_lock:
        if workers not in _pools: _pools[workers] = ThreadPoolExecutor(workers, thread_name_prefix="fusegrad-llvm")
        return _pools[workers]

class LLVMProgram:
    """One kernel: its object file linked into a private MCJIT engine (its own symbol table, so kernels of
    the same name never collide), called with buffer pointers, then the 64-bit variable values. A threaded
    kernel (it exports ``<name>.threaded``) is called once per core, at the same time, with ``core, cores`` last:
    ctypes releases the GIL during the call, so the shares run in parallel."""
    def __init__(self, name: str, lib: bytes):
        _require_llvmlite()
        self.name = name
        self.engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), host_target_machine())
        self.engine.add_object_file(llvm.ObjectFileRef.from_data(lib))
        self.engine.finalize_object()
        self.address = self.engine.get_function_address(name)
        if not self.address: raise RuntimeError(f"the LLVM object has no function {name}")
        self.fxn = None   # the ctypes function, built on the first call when the argument count is known
        self.threaded = bool(self.engine.get_global_value_address(f"{name}.threaded"))
    def __call__(self, *bufs, global_size=(1, 1, 1), local_size=(1, 1, 1), vals=(), wait: bool = False):
        if self.fxn is None:
            extra = 2 if self.threaded else 0
            self.fxn = ctypes.CFUNCTYPE(None, *([ctypes.c_void_p] * len(bufs) + [ctypes.c_int64] * (len(vals) + extra)))(self.address)
        args = [ctypes.addressof(b) for b in bufs] + list(vals)
        start = time.perf_counter() if wait else 0.0
        if not self.threaded: self.fxn(*args)
        else:
            cores = cpu_count()
            others = [_thread_pool(cores - 1).submit(self.fxn, *args, core, cores) for core in range(1, cores)] if cores > 1 else []
            self.fxn(*args, 0, cores)
            for share in others: share.result()
        return time.perf_counter() - start if wait else None

class LLVMDevice(Compiled):
    def __init__(self, device: str):
        _require_llvmlite()
        _register_runtime_functions()
        super().__init__(device, MallocAllocator(), LLVMRenderer(), LLVMCompiler(), LLVMProgram)
