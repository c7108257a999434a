"""The CUDA device: CUDA C from CUDARenderer, compiled by NVRTC, run through the driver API (ctypes on
libcuda.so.1). No CUDA toolkit is needed: ``pip install nvidia-cuda-nvrtc`` (or ``fusegrad[cuda]``) provides
NVRTC, and the driver comes with the GPU.

- ``CUDACompiler`` works without a GPU: it turns kernel source into PTX (``output="ptx"``, for an arch such as
  ``sm_80``) or into a cubin for the device's own arch (what the device uses: no PTX JIT in the driver, so a
  driver older than NVRTC still loads it).
- ``CUDAAllocator``: ``cuMemAlloc``; copies run on the device's stream, through a pinned staging buffer when
  they are large enough for that to pay (pageable memory is copied at a fraction of the bus speed).
- ``CUDAProgram``: ``cuModuleLoadData`` + ``cuLaunchKernel`` with the kernel's grid (global size, in blocks)
  and block (local size). Flat kernels (renderer/cuda.py) and NOLOCALS kernels get a block size chosen here;
  a kernel that exports its dynamic shared memory size gets it at launch (and its limit raised past 48 KiB).
  ``wait=True`` times the launch with a pair of events.
- ``CUDAGraph``: a TinyJit capture as one CUDA graph, replayed with one ``cuGraphLaunch``.

``DEV=CUDA`` selects it; ``CUDA:1`` is the second GPU. ``CUDA_ARCH=sm_86`` overrides the arch (e.g. for PTX).
Opening it without a driver or GPU raises RuntimeError saying so.
"""
from __future__ import annotations
import ctypes, ctypes.util, functools, glob, os, sys
from typing import Any
from fusegrad.device import Allocator, Compiled, Compiler, CompileError
from fusegrad.helpers import getenv, DEBUG
from fusegrad.renderer.cuda import CUDARenderer, FLAT_LAUNCH_SYMBOL, FLAT_BLOCK, DYNAMIC_SHARED_SYMBOL, STATIC_SHARED_MAX, parse_arch

DEFAULT_ARCH = "sm_80"

# ---------------------------------------------------------------- NVRTC (no GPU needed)

def _nvrtc_candidates() -> list[str]:
    """Where libnvrtc may be: NVRTC_PATH, the nvidia-cuda-nvrtc wheel (nvidia/cu13/lib for CUDA 13,
    nvidia/cuda_nvrtc/lib for 12), then the system's library path."""
    found = [os.environ["NVRTC_PATH"]] if os.environ.get("NVRTC_PATH") else []
    for site in sys.path:
        for pattern in ("nvidia/cu*/lib/libnvrtc.so*", "nvidia/cuda_nvrtc/lib/libnvrtc.so*"):
            found += sorted(p for p in glob.glob(os.path.join(site, pattern)) if "builtins" not in p and "alt" not in p)
    return found + [name for name in (ctypes.util.find_library("nvrtc"), "libnvrtc.so") if name]

@functools.lru_cache(None)
def nvrtc() -> ctypes.CDLL:
    """The NVRTC library (loaded once), or RuntimeError naming how to get it."""
    for candidate in _nvrtc_candidates():
        try: lib = ctypes.CDLL(candidate)
        except OSError: continue
        lib.nvrtcGetErrorString.restype = ctypes.c_char_p
        lib.nvrtcCreateProgram.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int,
                                           ctypes.c_void_p, ctypes.c_void_p]
        lib.nvrtcCompileProgram.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
        for name in ("nvrtcGetProgramLogSize", "nvrtcGetPTXSize", "nvrtcGetCUBINSize"):
            getattr(lib, name).argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t)]
        for name in ("nvrtcGetProgramLog", "nvrtcGetPTX", "nvrtcGetCUBIN"): getattr(lib, name).argtypes = [ctypes.c_void_p, ctypes.c_char_p]
        lib.nvrtcDestroyProgram.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
        return lib
    raise RuntimeError("NVRTC not found: pip install nvidia-cuda-nvrtc (or pip install 'fusegrad[cuda]'), or set NVRTC_PATH")

def nvrtc_version() -> tuple[int, int]:
    major, minor = ctypes.c_int(), ctypes.c_int()
    nvrtc().nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
    return major.value, minor.value

def _nvrtc_check(status: int, what: str) -> None:
    if status != 0: raise RuntimeError(f"NVRTC {what} failed: {nvrtc().nvrtcGetErrorString(status).decode()}")

class CUDACompiler(Compiler):
    """CUDA C -> PTX text (``output="ptx"``) or a cubin for ``arch`` (``output="cubin"``), with NVRTC.

    >>> CUDACompiler("sm_80").compile('extern "C" __global__ void k(float* x) { x[0] = 1.0f; }').startswith(b"//")
    True
    """
    def __init__(self, arch: str = DEFAULT_ARCH, output: str = "ptx"):
        parse_arch(arch)
        if output not in ("ptx", "cubin"): raise ValueError(f"CUDACompiler output is 'ptx' or 'cubin', got {output!r}")
        self.arch, self.output = arch, output
        # PTX is for a virtual arch (compute_80): it runs on that arch and every later one, JIT-compiled by the driver
        target = arch if output == "cubin" else arch.replace("sm_", "compute_")
        # --fmad=false: a multiply and an add fuse only where the IR says so (MULACC -> fmaf), as on the CPU
        self.options = [f"--gpu-architecture={target}", "--std=c++17", "-default-device", "--fmad=false"]
        major, minor = nvrtc_version()
        super().__init__(f"cuda_nvrtc{major}.{minor}_{output}_{' '.join(self.options)}")
    def compile(self, src: str) -> bytes:
        lib, program = nvrtc(), ctypes.c_void_p()
        _nvrtc_check(lib.nvrtcCreateProgram(ctypes.byref(program), src.encode(), b"kernel.cu", 0, None, None), "create program")
        try:
            options = (ctypes.c_char_p * len(self.options))(*[o.encode() for o in self.options])
            status = lib.nvrtcCompileProgram(program, len(self.options), options)
            if status != 0: raise CompileError(f"NVRTC failed ({lib.nvrtcGetErrorString(status).decode()}):\n"
                                               f"{self._read(program, 'ProgramLog').decode(errors='replace')}\n--- source ---\n{src}")
            return self._read(program, "PTX" if self.output == "ptx" else "CUBIN")
        finally: lib.nvrtcDestroyProgram(ctypes.byref(program))
    @staticmethod
    def _read(program: ctypes.c_void_p, what: str) -> bytes:
        size = ctypes.c_size_t()
        _nvrtc_check(getattr(nvrtc(), f"nvrtcGet{what}Size")(program, ctypes.byref(size)), f"get {what} size")
        out = ctypes.create_string_buffer(size.value)
        _nvrtc_check(getattr(nvrtc(), f"nvrtcGet{what}")(program, out), f"get {what}")
        return out.raw.rstrip(b"\0") if what in ("PTX", "ProgramLog") else out.raw

# ---------------------------------------------------------------- the driver API

class CUDAError(RuntimeError):
    """A CUDA driver call failed (the message names the call and the driver's error)."""

# The argument types of every driver call fusegrad makes (ctypes would pass an undeclared int as a 32-bit C int,
# which can't hold a device pointer). ``cu`` refuses a name that isn't here.
_u64, _vp = ctypes.c_uint64, ctypes.c_void_p
DRIVER_SIGNATURES: dict[str, list] = {
    "cuMemAlloc_v2": [ctypes.POINTER(_u64), ctypes.c_size_t], "cuMemFree_v2": [_u64],
    "cuMemcpyHtoD_v2": [_u64, _vp, ctypes.c_size_t], "cuMemcpyDtoH_v2": [_vp, _u64, ctypes.c_size_t],
    "cuMemcpyHtoDAsync_v2": [_u64, _vp, ctypes.c_size_t, _vp], "cuMemcpyDtoHAsync_v2": [_vp, _u64, ctypes.c_size_t, _vp],
    "cuMemcpyDtoDAsync_v2": [_u64, _u64, ctypes.c_size_t, _vp],
    "cuMemcpyPeerAsync": [_u64, _vp, _u64, _vp, ctypes.c_size_t, _vp],
    "cuMemHostAlloc": [ctypes.POINTER(_vp), ctypes.c_size_t, ctypes.c_uint], "cuMemFreeHost": [_vp],
    "cuModuleLoadData": [ctypes.POINTER(_vp), ctypes.c_char_p], "cuModuleUnload": [_vp],
    "cuModuleGetFunction": [ctypes.POINTER(_vp), _vp, ctypes.c_char_p], "cuFuncSetAttribute": [_vp, ctypes.c_int, ctypes.c_int],
    "cuModuleGetGlobal_v2": [ctypes.POINTER(_u64), ctypes.POINTER(ctypes.c_size_t), _vp, ctypes.c_char_p],
    "cuLaunchKernel": [_vp] + [ctypes.c_uint] * 7 + [_vp, ctypes.POINTER(_vp), ctypes.POINTER(_vp)],
    "cuStreamCreate": [ctypes.POINTER(_vp), ctypes.c_uint], "cuStreamSynchronize": [_vp],
    "cuEventCreate": [ctypes.POINTER(_vp), ctypes.c_uint], "cuEventRecord": [_vp, _vp], "cuEventSynchronize": [_vp],
    "cuEventElapsedTime": [ctypes.POINTER(ctypes.c_float), _vp, _vp], "cuEventDestroy_v2": [_vp],
    "cuDeviceGet": [ctypes.POINTER(ctypes.c_int), ctypes.c_int], "cuDeviceGetCount": [ctypes.POINTER(ctypes.c_int)],
    "cuDeviceGetAttribute": [ctypes.POINTER(ctypes.c_int), ctypes.c_int, ctypes.c_int],
    "cuDeviceGetName": [ctypes.c_char_p, ctypes.c_int, ctypes.c_int],
    "cuDevicePrimaryCtxRetain": [ctypes.POINTER(_vp), ctypes.c_int], "cuCtxSetCurrent": [_vp], "cuCtxSynchronize": [],
    "cuGraphCreate": [ctypes.POINTER(_vp), ctypes.c_uint],
    "cuGraphAddKernelNode": [ctypes.POINTER(_vp), _vp, ctypes.POINTER(_vp), ctypes.c_size_t, _vp],
    "cuGraphInstantiateWithFlags": [ctypes.POINTER(_vp), _vp, ctypes.c_ulonglong],
    "cuGraphExecKernelNodeSetParams": [_vp, _vp, _vp], "cuGraphLaunch": [_vp, _vp],
    "cuGraphExecDestroy": [_vp], "cuGraphDestroy": [_vp],
}

@functools.lru_cache(None)
def libcuda() -> ctypes.CDLL:
    """The CUDA driver (loaded and initialized once), or RuntimeError when this machine has none."""
    try: lib = ctypes.CDLL("libcuda.so.1")
    except OSError: raise RuntimeError("no CUDA driver/GPU: libcuda.so.1 not found") from None
    lib.cuGetErrorString.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
    for name, argtypes in DRIVER_SIGNATURES.items():
        if (function := getattr(lib, name, None)) is not None: function.argtypes, function.restype = argtypes, ctypes.c_int
    check(lib.cuInit(0), "cuInit")
    return lib

def check(status: int, call: str) -> None:
    """Raise CUDAError for a failed driver call."""
    if status == 0: return
    message = ctypes.c_char_p()
    libcuda().cuGetErrorString(status, ctypes.byref(message))
    raise CUDAError(f"{call} failed: {message.value.decode() if message.value else f'CUDA error {status}'}")

def cu(name: str, *args: Any) -> None:
    """Call the driver function ``name`` (one of DRIVER_SIGNATURES) and check its status."""
    if name not in DRIVER_SIGNATURES: raise RuntimeError(f"internal error: the driver call {name} has no declared signature")
    check(getattr(libcuda(), name)(*args), name)

# device attributes (cuda.h CUdevice_attribute) and function attributes (CUfunction_attribute)
ATTR_CC_MAJOR, ATTR_CC_MINOR, ATTR_MULTIPROCESSORS, ATTR_SHARED_PER_BLOCK_OPTIN = 75, 76, 16, 97
FUNC_ATTR_MAX_DYNAMIC_SHARED = 8

# ---------------------------------------------------------------- memory

class CUDAAllocator(Allocator):
    """Device memory as ``CUdeviceptr`` ints. Copies go through the device's stream; host<->device copies of
    at least ``PINNED_MIN`` bytes are staged through one pinned host buffer (grown on demand)."""
    PINNED_MIN = 1 << 16
    def __init__(self, device: "CUDADevice"):
        super().__init__()
        self.device = device
        self.staging, self.staging_size = ctypes.c_void_p(), 0
    def _alloc(self, size: int, options: Any) -> int:
        self.device.make_current()
        pointer = ctypes.c_uint64()
        status = libcuda().cuMemAlloc_v2(ctypes.byref(pointer), size)
        if status == 2: raise MemoryError(f"CUDA out of memory allocating {size} bytes on {self.device.device}")   # CUDA_ERROR_OUT_OF_MEMORY
        check(status, "cuMemAlloc")
        return pointer.value
    def _free(self, opaque: int, options: Any) -> None:
        self.device.synchronize()   # kernels still queued may use it
        cu("cuMemFree_v2", opaque)
    def _offset(self, opaque: int, size: int, offset: int) -> int: return opaque + offset
    def _pinned(self, nbytes: int) -> ctypes.c_void_p:
        if nbytes > self.staging_size:
            if self.staging: cu("cuMemFreeHost", self.staging)
            self.staging = ctypes.c_void_p()
            cu("cuMemHostAlloc", ctypes.byref(self.staging), nbytes, 0)
            self.staging_size = nbytes
        return self.staging
    def _copyin(self, dest: int, src: memoryview) -> None:
        self.device.make_current()
        host = bytes(src) if src.readonly else src
        if src.nbytes >= self.PINNED_MIN:
            staging = self._pinned(src.nbytes)
            self.device.synchronize()   # the staging buffer may still feed an earlier copy
            ctypes.memmove(staging, host if isinstance(host, bytes) else ctypes.addressof(ctypes.c_char.from_buffer(host)), src.nbytes)
            cu("cuMemcpyHtoDAsync_v2", dest, staging, src.nbytes, self.device.stream)
            self.device.synchronize()
        else:
            self.device.synchronize()   # ordered after kernels that read the old contents
            buffer = ctypes.create_string_buffer(host if isinstance(host, bytes) else bytes(host), src.nbytes)
            cu("cuMemcpyHtoD_v2", dest, buffer, src.nbytes)
    def _copyout(self, dest: memoryview, src: int) -> None:
        self.device.make_current()
        self.device.synchronize()
        address = ctypes.addressof(ctypes.c_char.from_buffer(dest))
        if dest.nbytes >= self.PINNED_MIN:
            staging = self._pinned(dest.nbytes)
            cu("cuMemcpyDtoHAsync_v2", staging, src, dest.nbytes, self.device.stream)
            self.device.synchronize()
            ctypes.memmove(address, staging, dest.nbytes)
        else: cu("cuMemcpyDtoH_v2", address, src, dest.nbytes)
    def _transfer(self, dest: int, src: int, nbytes: int, src_allocator: "CUDAAllocator") -> None:
        """GPU to GPU (``CUDA:0`` -> ``CUDA:1``, or within one GPU): one ``cuMemcpyPeerAsync`` on this device's stream.
        The driver copies over NVLink/PCIe directly where the GPUs can reach each other, else stages it itself."""
        source = src_allocator.device
        source.synchronize()   # the source's kernels have written it
        self.device.make_current()
        cu("cuMemcpyPeerAsync", dest, self.device.context, src, source.context, nbytes, self.device.stream)
        self.device.synchronize()   # done before either side's next kernel writes src or reads dest

# ---------------------------------------------------------------- programs

def flat_block(global_size: tuple[int, ...], limit: int = FLAT_BLOCK) -> tuple[int, int, int]:
    """The block of a flat kernel: up to ``limit`` threads, x first (consecutive threads, consecutive elements).

    >>> flat_block((1000, 3, 1)), flat_block((4, 100, 1)), flat_block((1, 1, 7))
    ((256, 1, 1), (4, 64, 1), (1, 1, 7))
    """
    block = []
    for size in list(global_size) + [1] * (3 - len(global_size)):
        block.append(max(1, min(size, limit)))
        limit //= block[-1]
    return tuple(block)   # type: ignore[return-value]

def divisor_block(global_size: tuple[int, ...], limit: int = FLAT_BLOCK) -> tuple[int, int, int]:
    """The block of a NOLOCALS kernel, whose threads must tile its global size exactly: per dimension the
    largest divisor of the size that keeps the block within ``limit`` threads.

    >>> divisor_block((1000, 3, 1)), divisor_block((7, 5, 1))
    ((250, 1, 1), (7, 5, 1))
    """
    block = []
    for size in list(global_size) + [1] * (3 - len(global_size)):
        block.append(max(d for d in range(1, min(size, limit) + 1) if size % d == 0))
        limit //= block[-1]
    return tuple(block)   # type: ignore[return-value]

class CUDAProgram:
    """One kernel loaded into a module of the current device. Called with device pointers, then the
    variables' values (64-bit); ``global_size`` counts blocks, ``local_size`` threads per block."""
    def __init__(self, device: "CUDADevice", name: str, lib: bytes):
        self.device, self.name = device, name
        device.make_current()
        self.module, self.function = ctypes.c_void_p(), ctypes.c_void_p()
        cu("cuModuleLoadData", ctypes.byref(self.module), lib)
        cu("cuModuleGetFunction", ctypes.byref(self.function), self.module, name.encode())
        self.flat = self._global(FLAT_LAUNCH_SYMBOL) is not None
        # a kernel with more than 48 KiB of shared memory takes it dynamically: the size it exports, at every launch
        self.shared_bytes = 0
        if (address := self._global(DYNAMIC_SHARED_SYMBOL)) is not None:
            value = ctypes.c_uint32()
            cu("cuMemcpyDtoH_v2", ctypes.byref(value), address, 4)
            self.shared_bytes = value.value
            if self.shared_bytes > STATIC_SHARED_MAX:
                cu("cuFuncSetAttribute", self.function, FUNC_ATTR_MAX_DYNAMIC_SHARED, self.shared_bytes)
    def _global(self, symbol: str) -> int | None:
        """The device address of the module's global ``symbol`` (None when the kernel doesn't export it)."""
        address, size = ctypes.c_uint64(), ctypes.c_size_t()
        found = libcuda().cuModuleGetGlobal_v2(ctypes.byref(address), ctypes.byref(size), self.module, symbol.encode()) == 0
        return address.value if found else None
    def launch_dims(self, global_size, local_size) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(grid, block) for a launch: a flat kernel's global size counts threads (rounded up to whole
        blocks, the extra threads return at once); a NOLOCALS kernel (no local size) is tiled exactly."""
        global_size = tuple(global_size) + (1,) * (3 - len(global_size))
        if self.flat or local_size is None:
            block = flat_block(global_size) if self.flat else divisor_block(global_size)
            return tuple(-(-g // b) for g, b in zip(global_size, block)), block
        return global_size, tuple(local_size) + (1,) * (3 - len(local_size))
    def arguments(self, bufs, vals) -> tuple[Any, list]:
        """The ``void**`` kernelParams array and the values it points at (kept alive by the caller)."""
        values = [ctypes.c_uint64(b) for b in bufs] + [ctypes.c_int64(v) for v in vals]
        return (ctypes.c_void_p * max(1, len(values)))(*[ctypes.addressof(v) for v in values]), values
    def __call__(self, *bufs, global_size=(1, 1, 1), local_size=(1, 1, 1), vals=(), wait: bool = False):
        grid, block = self.launch_dims(global_size, local_size)
        if max(grid[1:]) > 65535: raise CUDAError(f"kernel {self.name}: grid {grid} exceeds CUDA's 65535 blocks in y/z")
        params, _keep = self.arguments(bufs, vals)
        self.device.make_current()
        if wait: cu("cuEventRecord", self.device.events[0], self.device.stream)
        cu("cuLaunchKernel", self.function, *grid, *block, self.shared_bytes, self.device.stream, params, None)
        if not wait: return None
        cu("cuEventRecord", self.device.events[1], self.device.stream)
        cu("cuEventSynchronize", self.device.events[1])
        elapsed = ctypes.c_float()
        cu("cuEventElapsedTime", ctypes.byref(elapsed), *self.device.events)
        return elapsed.value / 1000.0
    def __del__(self):
        try: cu("cuModuleUnload", self.module)
        except Exception: pass

# ---------------------------------------------------------------- the JIT graph

class CUDAGraph:
    """A TinyJit capture as one CUDA graph: a kernel node per captured kernel, each depending on the one
    before (kernels run in capture order, as on the stream). The JIT puts each call's input buffers into the
    captured items before a replay; the nodes whose buffer pointers (or variables) changed get new parameters,
    then the whole graph runs with one ``cuGraphLaunch``."""
    def __init__(self, items: list, input_buffers: list):
        from fusegrad.engine.realize import CompiledRunner
        programs = [item.prg._prg if isinstance(item.prg, CompiledRunner) else None for item in items]
        if not items or not all(isinstance(p, CUDAProgram) for p in programs):
            raise NotImplementedError("CUDAGraph only batches CUDA kernels")
        if len({id(p.device) for p in programs}) != 1: raise NotImplementedError("CUDAGraph batches the kernels of one device")
        self.device: CUDADevice = programs[0].device
        self.device.make_current()
        self.items = items
        self.graph, self.exec = ctypes.c_void_p(), ctypes.c_void_p()
        cu("cuGraphCreate", ctypes.byref(self.graph), 0)
        self.nodes: list[ctypes.c_void_p] = []
        self.launched: list[tuple] = []   # per node: the (pointers, variable values) it was last given
        for item in items:
            pointers, values = self._arguments(item, {})
            node, params = ctypes.c_void_p(), self._node_params(item, pointers, values)
            dependencies = (ctypes.c_void_p * 1)(self.nodes[-1]) if self.nodes else None
            cu("cuGraphAddKernelNode", ctypes.byref(node), self.graph, dependencies, len(self.nodes[-1:]), ctypes.byref(params))
            self.nodes.append(node)
            self.launched.append((pointers, values))
        cu("cuGraphInstantiateWithFlags", ctypes.byref(self.exec), self.graph, 0)
    @staticmethod
    def _arguments(item, var_vals: dict) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """The buffer pointers and variable values (in the kernel's order) of one captured kernel."""
        by_name = {v.expr: value for v, value in {**item.var_vals, **var_vals}.items()}
        return tuple(b.ensure_allocated()._buf for b in item.bufs), tuple(by_name[v.arg[0]] for v in item.prg.p.vars)
    @staticmethod
    def _node_params(item, pointers: tuple, values: tuple) -> "KernelNodeParams":
        program: CUDAProgram = item.prg._prg
        spec = item.prg.p
        global_size, local_size = spec.launch_dims(dict(zip(spec.vars, values)))
        grid, block = program.launch_dims(global_size, local_size)
        args, storage = program.arguments(pointers, values)
        params = KernelNodeParams(program.function, *grid, *block, program.shared_bytes, ctypes.cast(args, ctypes.POINTER(ctypes.c_void_p)), None)
        params._keep = (args, storage)   # the driver copies the values when the node is set; until then they must live
        return params
    def replay(self, new_inputs: list, var_vals: dict) -> None:
        self.device.make_current()
        for index, item in enumerate(self.items):
            arguments = self._arguments(item, var_vals)
            if arguments == self.launched[index]: continue
            params = self._node_params(item, *arguments)
            cu("cuGraphExecKernelNodeSetParams", self.exec, self.nodes[index], ctypes.byref(params))
            self.launched[index] = arguments
        cu("cuGraphLaunch", self.exec, self.device.stream)
    def __del__(self):
        try:
            cu("cuGraphExecDestroy", self.exec)
            cu("cuGraphDestroy", self.graph)
        except Exception: pass

class KernelNodeParams(ctypes.Structure):
    """cuda.h's CUDA_KERNEL_NODE_PARAMS (the v1 layout, which the unversioned graph entry points take)."""
    _fields_ = [("func", ctypes.c_void_p), ("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint), ("gridDimZ", ctypes.c_uint),
                ("blockDimX", ctypes.c_uint), ("blockDimY", ctypes.c_uint), ("blockDimZ", ctypes.c_uint),
                ("sharedMemBytes", ctypes.c_uint), ("kernelParams", ctypes.POINTER(ctypes.c_void_p)), ("extra", ctypes.c_void_p)]

# ---------------------------------------------------------------- the device

def device_count() -> int:
    """How many CUDA GPUs this machine has (RuntimeError when it has no driver)."""
    count = ctypes.c_int()
    cu("cuDeviceGetCount", ctypes.byref(count))
    return count.value

class CUDADevice(Compiled):
    """One GPU: its primary context, a stream that every copy and kernel goes through, and timing events."""
    def __init__(self, device: str):
        ordinal = int(device.split(":")[1]) if ":" in device else 0
        if (count := device_count()) == 0: raise RuntimeError("no CUDA driver/GPU: the driver found no CUDA device")
        if ordinal >= count: raise RuntimeError(f"{device}: this machine has {count} CUDA device(s)")
        self.cu_device, self.context = ctypes.c_int(), ctypes.c_void_p()
        cu("cuDeviceGet", ctypes.byref(self.cu_device), ordinal)
        cu("cuDevicePrimaryCtxRetain", ctypes.byref(self.context), self.cu_device)
        self.make_current()
        self.stream = ctypes.c_void_p()
        cu("cuStreamCreate", ctypes.byref(self.stream), 1)   # CU_STREAM_NON_BLOCKING: not serialized with the legacy stream
        self.events = (ctypes.c_void_p(), ctypes.c_void_p())
        for event in self.events: cu("cuEventCreate", ctypes.byref(event), 0)
        self.arch = os.environ.get("CUDA_ARCH") or f"sm_{self.attribute(ATTR_CC_MAJOR)}{self.attribute(ATTR_CC_MINOR)}"
        name = ctypes.create_string_buffer(256)
        cu("cuDeviceGetName", name, 256, self.cu_device)
        self.name = name.value.decode()
        if DEBUG >= 1: print(f"{device}: {self.name} ({self.arch})")
        compiler = CUDACompiler(self.arch, output="ptx" if getenv("CUDA_PTX", 0) else "cubin")
        renderer = CUDARenderer(self.arch, shared_max=self.attribute(ATTR_SHARED_PER_BLOCK_OPTIN) or None)
        super().__init__(device, CUDAAllocator(self), renderer, compiler,
                         functools.partial(CUDAProgram, self), CUDAGraph)
    def attribute(self, attribute: int) -> int:
        value = ctypes.c_int()
        cu("cuDeviceGetAttribute", ctypes.byref(value), attribute, self.cu_device)
        return value.value
    def make_current(self) -> None: cu("cuCtxSetCurrent", self.context)
    def synchronize(self) -> None:
        self.make_current()
        cu("cuStreamSynchronize", self.stream)
