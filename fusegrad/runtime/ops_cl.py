"""The CL device: OpenCL C from OpenCLRenderer, run through the OpenCL ICD loader (``libOpenCL.so.1``) with ctypes,
so it needs no Python package. ``DEV=CL`` (or ``GPU``, or ``OPENCL``) selects it.

- Buffers are ``cl_mem`` objects of one context; copies in and out are blocking reads and writes on the device's
  in-order command queue, so a copy out sees every kernel queued before it.
- The compiler builds the source for the device and returns the program binary
  (``clGetProgramInfo(CL_PROGRAM_BINARIES)``), which ``Compiler.compile_cached`` keeps on disk keyed by the
  platform, device and driver; a program is created from that binary.
- A kernel launch is ``clEnqueueNDRangeKernel`` of ``global_size`` workgroups of ``local_size`` threads (no local
  size after NOLOCALS: the runtime picks one). ``wait=True`` times the kernel with CL profiling events (what BEAM
  and DEBUG=2 report), else launches return at once.
- ``CL:N`` is the N-th OpenCL device of the machine (all platforms, in order). A machine with fewer devices
  (PoCL exposes one) gives ``CL:N`` device ``N mod count``, as a separate instance: its own context, queue and
  memory, like ``CPU:1`` is a second CPU instance (docs/decisions.md, "The CL device").

On these machines it runs on PoCL (Debian's ``pocl-opencl-icd``): OpenCL on the CPU, so its timings say little
about a GPU; what runs here are the GPU-style kernels (workgroups, local memory, barriers) on a real runtime.
"""
from __future__ import annotations
import ctypes, functools
from typing import Any
from fusegrad.device import Compiled, Compiler, CompileError, Allocator
from fusegrad.helpers import DEBUG, getenv
from fusegrad.renderer.opencl import OpenCLRenderer

INSTALL_HINT = "apt-get install ocl-icd-libopencl1 pocl-opencl-icd (the OpenCL ICD loader and PoCL, OpenCL on the CPU)"

# ---------------------------------------------------------------- the C API (only what this device uses)

cl_int, cl_uint, cl_ulong, size_t, void_p = ctypes.c_int32, ctypes.c_uint32, ctypes.c_uint64, ctypes.c_size_t, ctypes.c_void_p
CL_DEVICE_TYPE_ALL = 0xFFFFFFFF
CL_DEVICE_MAX_COMPUTE_UNITS, CL_DEVICE_MAX_WORK_ITEM_SIZES, CL_DEVICE_MAX_WORK_GROUP_SIZE = 0x1002, 0x1005, 0x1004
CL_DEVICE_MEM_BASE_ADDR_ALIGN, CL_DEVICE_LOCAL_MEM_SIZE, CL_DEVICE_NAME, CL_DRIVER_VERSION = 0x1019, 0x1023, 0x102B, 0x102D
CL_DEVICE_VERSION, CL_DEVICE_EXTENSIONS, CL_PLATFORM_NAME = 0x102F, 0x1030, 0x0902
CL_QUEUE_PROFILING_ENABLE, CL_MEM_READ_WRITE, CL_BUFFER_CREATE_TYPE_REGION = 1 << 1, 1, 0x1220
CL_PROGRAM_BINARY_SIZES, CL_PROGRAM_BINARIES, CL_PROGRAM_BUILD_LOG = 0x1165, 0x1166, 0x1183
CL_PROFILING_COMMAND_START, CL_PROFILING_COMMAND_END = 0x1282, 0x1283

ERRORS = {-1: "CL_DEVICE_NOT_FOUND", -2: "CL_DEVICE_NOT_AVAILABLE", -3: "CL_COMPILER_NOT_AVAILABLE", -4: "CL_MEM_OBJECT_ALLOCATION_FAILURE",
          -5: "CL_OUT_OF_RESOURCES", -6: "CL_OUT_OF_HOST_MEMORY", -11: "CL_BUILD_PROGRAM_FAILURE", -13: "CL_MISALIGNED_SUB_BUFFER_OFFSET",
          -30: "CL_INVALID_VALUE", -33: "CL_INVALID_DEVICE", -34: "CL_INVALID_CONTEXT", -36: "CL_INVALID_COMMAND_QUEUE",
          -38: "CL_INVALID_MEM_OBJECT", -42: "CL_INVALID_BINARY", -44: "CL_INVALID_PROGRAM", -45: "CL_INVALID_PROGRAM_EXECUTABLE",
          -46: "CL_INVALID_KERNEL_NAME", -48: "CL_INVALID_KERNEL", -49: "CL_INVALID_ARG_INDEX", -50: "CL_INVALID_ARG_VALUE",
          -51: "CL_INVALID_ARG_SIZE", -52: "CL_INVALID_KERNEL_ARGS", -53: "CL_INVALID_WORK_DIMENSION", -54: "CL_INVALID_WORK_GROUP_SIZE",
          -55: "CL_INVALID_WORK_ITEM_SIZE", -61: "CL_INVALID_BUFFER_SIZE", -63: "CL_INVALID_GLOBAL_WORK_SIZE",
          -1001: "CL_PLATFORM_NOT_FOUND_KHR"}

_SIGNATURES: dict[str, tuple[Any, list]] = {
    "clGetPlatformIDs": (cl_int, [cl_uint, void_p, ctypes.POINTER(cl_uint)]),
    "clGetPlatformInfo": (cl_int, [void_p, cl_uint, size_t, void_p, ctypes.POINTER(size_t)]),
    "clGetDeviceIDs": (cl_int, [void_p, cl_ulong, cl_uint, void_p, ctypes.POINTER(cl_uint)]),
    "clGetDeviceInfo": (cl_int, [void_p, cl_uint, size_t, void_p, ctypes.POINTER(size_t)]),
    "clCreateContext": (void_p, [void_p, cl_uint, void_p, void_p, void_p, ctypes.POINTER(cl_int)]),
    "clCreateCommandQueue": (void_p, [void_p, void_p, cl_ulong, ctypes.POINTER(cl_int)]),
    "clCreateBuffer": (void_p, [void_p, cl_ulong, size_t, void_p, ctypes.POINTER(cl_int)]),
    "clCreateSubBuffer": (void_p, [void_p, cl_ulong, cl_uint, void_p, ctypes.POINTER(cl_int)]),
    "clReleaseMemObject": (cl_int, [void_p]),
    "clEnqueueWriteBuffer": (cl_int, [void_p, void_p, cl_uint, size_t, size_t, void_p, cl_uint, void_p, void_p]),
    "clEnqueueReadBuffer": (cl_int, [void_p, void_p, cl_uint, size_t, size_t, void_p, cl_uint, void_p, void_p]),
    "clCreateProgramWithSource": (void_p, [void_p, cl_uint, ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(size_t), ctypes.POINTER(cl_int)]),
    "clCreateProgramWithBinary": (void_p, [void_p, cl_uint, void_p, ctypes.POINTER(size_t), ctypes.POINTER(ctypes.c_char_p),
                                           ctypes.POINTER(cl_int), ctypes.POINTER(cl_int)]),
    "clBuildProgram": (cl_int, [void_p, cl_uint, void_p, ctypes.c_char_p, void_p, void_p]),
    "clGetProgramBuildInfo": (cl_int, [void_p, void_p, cl_uint, size_t, void_p, ctypes.POINTER(size_t)]),
    "clGetProgramInfo": (cl_int, [void_p, cl_uint, size_t, void_p, ctypes.POINTER(size_t)]),
    "clReleaseProgram": (cl_int, [void_p]),
    "clCreateKernel": (void_p, [void_p, ctypes.c_char_p, ctypes.POINTER(cl_int)]),
    "clReleaseKernel": (cl_int, [void_p]),
    "clSetKernelArg": (cl_int, [void_p, cl_uint, size_t, void_p]),
    "clEnqueueNDRangeKernel": (cl_int, [void_p, void_p, cl_uint, void_p, ctypes.POINTER(size_t), ctypes.POINTER(size_t), cl_uint, void_p, void_p]),
    "clWaitForEvents": (cl_int, [cl_uint, ctypes.POINTER(void_p)]),
    "clGetEventProfilingInfo": (cl_int, [void_p, cl_uint, size_t, void_p, ctypes.POINTER(size_t)]),
    "clReleaseEvent": (cl_int, [void_p]),
    "clFinish": (cl_int, [void_p]),
}

@functools.cache
def opencl() -> ctypes.CDLL:
    """The OpenCL ICD loader, its functions typed; a clear RuntimeError when it isn't installed."""
    try: lib = ctypes.CDLL("libOpenCL.so.1")
    except OSError as e: raise RuntimeError(f"the CL device needs an OpenCL runtime, and libOpenCL.so.1 can't be loaded ({e}): {INSTALL_HINT}") from None
    for name, (restype, argtypes) in _SIGNATURES.items():
        function = getattr(lib, name)
        function.restype, function.argtypes = restype, argtypes
    return lib

class CLError(RuntimeError):
    """An OpenCL call failed; the message names the call and the error code."""

def check(status: int, call: str) -> None:
    if status != 0: raise CLError(f"OpenCL {call} failed: {ERRORS.get(status, 'error')} ({status})")

def _checked(call: str, *args) -> Any:
    """Call an OpenCL function that reports its error through its last argument (an errcode_ret)."""
    status = cl_int(0)
    result = getattr(opencl(), call)(*args, ctypes.byref(status))
    check(status.value, call)
    return result

def _info(getter, handle, param: int, ctype=None, extra: tuple = ()) -> Any:
    """clGet*Info: a string when ``ctype`` is None, else a value of ``ctype``."""
    if ctype is not None:
        value = ctype()
        check(getter(handle, *extra, param, ctypes.sizeof(value), ctypes.byref(value), None), getter.__name__)
        return value.value if hasattr(value, "value") else value
    size = size_t(0)
    check(getter(handle, *extra, param, 0, None, ctypes.byref(size)), getter.__name__)
    text = ctypes.create_string_buffer(size.value)
    check(getter(handle, *extra, param, size.value, text, None), getter.__name__)
    return text.value.decode(errors="replace")

@functools.cache
def all_devices() -> tuple[tuple[int, int], ...]:
    """(platform, device) handles of every OpenCL device, platforms in order."""
    cl = opencl()
    count = cl_uint(0)
    status = cl.clGetPlatformIDs(0, None, ctypes.byref(count))
    if status == -1001 or (status == 0 and count.value == 0):
        raise RuntimeError(f"the CL device found no OpenCL platform (libOpenCL.so.1 is there, but no driver is registered in /etc/OpenCL/vendors): {INSTALL_HINT}")
    check(status, "clGetPlatformIDs")
    platforms = (void_p * count.value)()
    check(cl.clGetPlatformIDs(count.value, platforms, None), "clGetPlatformIDs")
    found = []
    for platform in platforms:
        n = cl_uint(0)
        if cl.clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, 0, None, ctypes.byref(n)) != 0 or n.value == 0: continue
        devices = (void_p * n.value)()
        check(cl.clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, n.value, devices, None), "clGetDeviceIDs")
        found += [(platform, device) for device in devices]
    if not found: raise RuntimeError(f"the CL device found OpenCL platforms but no device: {INSTALL_HINT}")
    return tuple(found)

# ---------------------------------------------------------------- memory

class CLAllocator(Allocator):
    """``cl_mem`` buffers of the device's context. Reads and writes block, so host memory can be reused at once."""
    def __init__(self, device: "CLDevice"):
        super().__init__()
        self.device = device
    def _alloc(self, size: int, options: Any) -> ctypes.c_void_p:
        status = cl_int(0)
        mem = opencl().clCreateBuffer(self.device.context, CL_MEM_READ_WRITE, size, None, ctypes.byref(status))
        if status.value in (-4, -6, -61): raise MemoryError(f"the CL device can't allocate {size} bytes ({ERRORS[status.value]})")
        check(status.value, "clCreateBuffer")
        return ctypes.c_void_p(mem)
    def _free(self, opaque: ctypes.c_void_p, options: Any) -> None: opencl().clReleaseMemObject(opaque)
    def _copyin(self, dest: ctypes.c_void_p, src: memoryview) -> None:
        host = bytes(src) if src.readonly else (ctypes.c_char * src.nbytes).from_buffer(src)
        check(opencl().clEnqueueWriteBuffer(self.device.queue, dest, 1, 0, src.nbytes, host, 0, None, None), "clEnqueueWriteBuffer")
    def _copyout(self, dest: memoryview, src: ctypes.c_void_p) -> None:
        host = (ctypes.c_char * dest.nbytes).from_buffer(dest)
        check(opencl().clEnqueueReadBuffer(self.device.queue, src, 1, 0, dest.nbytes, host, 0, None, None), "clEnqueueReadBuffer")
    def _offset(self, opaque: ctypes.c_void_p, size: int, offset: int) -> ctypes.c_void_p:
        """A sub-buffer view: OpenCL needs its start aligned to the device's base address alignment."""
        if offset % self.device.base_alignment:
            raise NotImplementedError(f"the CL device can't view a buffer at byte offset {offset}: OpenCL sub-buffers start at multiples of "
                                      f"{self.device.base_alignment} bytes")
        region = (size_t * 2)(offset, size)
        return ctypes.c_void_p(_checked("clCreateSubBuffer", opaque, CL_MEM_READ_WRITE, CL_BUFFER_CREATE_TYPE_REGION, region))

# ---------------------------------------------------------------- compiling

class CLCompiler(Compiler):
    """OpenCL C source in, the device's program binary out (built by the driver; PoCL's holds LLVM bitcode)."""
    def __init__(self, device: "CLDevice"):
        self.device = device
        super().__init__(f"cl_{device.platform_name}_{device.name}_{device.driver_version}")
    def compile(self, src: str) -> bytes:
        program = build_program(self.device, src=src)
        try:
            size = _info(opencl().clGetProgramInfo, program, CL_PROGRAM_BINARY_SIZES, size_t)
            binary = ctypes.create_string_buffer(size)
            pointers = (ctypes.c_void_p * 1)(ctypes.cast(binary, ctypes.c_void_p))
            check(opencl().clGetProgramInfo(program, CL_PROGRAM_BINARIES, ctypes.sizeof(pointers), pointers, None), "clGetProgramInfo")
            return binary.raw
        finally: opencl().clReleaseProgram(program)

def build_program(device: "CLDevice", src: str | None = None, binary: bytes | None = None) -> int:
    """A built ``cl_program`` from source or from a binary; a failed build raises CompileError with the build log."""
    cl = opencl()
    if src is not None:
        text = src.encode()
        program = _checked("clCreateProgramWithSource", device.context, 1, (ctypes.c_char_p * 1)(text), (size_t * 1)(len(text)))
    else:
        status = cl_int(0)
        program = _checked("clCreateProgramWithBinary", device.context, 1, (void_p * 1)(device.device_id), (size_t * 1)(len(binary)),
                           (ctypes.c_char_p * 1)(binary), ctypes.byref(status))
        check(status.value, "clCreateProgramWithBinary")
    status = cl.clBuildProgram(program, 1, (void_p * 1)(device.device_id), b"", None, None)
    if status != 0:
        log = _info(cl.clGetProgramBuildInfo, program, CL_PROGRAM_BUILD_LOG, extra=(device.device_id,))
        cl.clReleaseProgram(program)
        raise CompileError(f"OpenCL build failed ({ERRORS.get(status, status)}):\n{log}\n--- source ---\n{src if src is not None else '(binary)'}")
    return program

# ---------------------------------------------------------------- kernels

class CLProgram:
    """One kernel of a program binary. Called with ``cl_mem`` buffers, then the 64-bit variable values."""
    def __init__(self, device: "CLDevice", name: str, lib: bytes):
        self.device, self.name = device, name
        self.program = build_program(device, binary=lib)
        self.kernel = _checked("clCreateKernel", self.program, name.encode())
    def __call__(self, *bufs, global_size=(1, 1, 1), local_size=(1, 1, 1), vals=(), wait: bool = False) -> float | None:
        cl = opencl()
        for i, buf in enumerate(bufs): check(cl.clSetKernelArg(self.kernel, i, ctypes.sizeof(void_p), ctypes.byref(buf)), "clSetKernelArg")
        for i, value in enumerate(vals, start=len(bufs)):
            check(cl.clSetKernelArg(self.kernel, i, 8, ctypes.byref(ctypes.c_int64(value))), "clSetKernelArg")
        # global_size counts workgroups; OpenCL's global work size counts threads
        threads = [g * l for g, l in zip(global_size, local_size)] if local_size is not None else list(global_size)
        if any(t == 0 for t in threads): return 0.0 if wait else None   # an empty launch (a zero-size dimension) does nothing
        event = void_p() if wait else None
        check(cl.clEnqueueNDRangeKernel(self.device.queue, self.kernel, len(threads), None, (size_t * len(threads))(*threads),
                                        (size_t * len(local_size))(*local_size) if local_size is not None else None, 0, None,
                                        ctypes.byref(event) if wait else None), f"clEnqueueNDRangeKernel ({self.name})")
        if not wait: return None
        try:
            check(cl.clWaitForEvents(1, ctypes.byref(event)), "clWaitForEvents")
            start = _info(cl.clGetEventProfilingInfo, event, CL_PROFILING_COMMAND_START, cl_ulong)
            end = _info(cl.clGetEventProfilingInfo, event, CL_PROFILING_COMMAND_END, cl_ulong)
            return (end - start) * 1e-9
        finally: cl.clReleaseEvent(event)
    def __del__(self) -> None:
        try:
            opencl().clReleaseKernel(self.kernel)
            opencl().clReleaseProgram(self.program)
        except Exception: pass

# ---------------------------------------------------------------- the device

class CLDevice(Compiled):
    """An OpenCL device with its context and a profiling command queue (see the module doc for ``CL:N``)."""
    def __init__(self, device: str):
        cl = opencl()
        handles = all_devices()
        number = int(device.split(":")[1]) if ":" in device else 0
        self.platform_id, self.device_id = handles[number % len(handles)]
        if DEBUG >= 1 and number >= len(handles): print(f"{device}: the machine has {len(handles)} OpenCL device(s); using device {number % len(handles)}")
        self.platform_name = _info(cl.clGetPlatformInfo, self.platform_id, CL_PLATFORM_NAME)
        self.name = _info(cl.clGetDeviceInfo, self.device_id, CL_DEVICE_NAME)
        self.driver_version = _info(cl.clGetDeviceInfo, self.device_id, CL_DRIVER_VERSION)
        self.extensions = _info(cl.clGetDeviceInfo, self.device_id, CL_DEVICE_EXTENSIONS).split()
        self.base_alignment = max(1, _info(cl.clGetDeviceInfo, self.device_id, CL_DEVICE_MEM_BASE_ADDR_ALIGN, cl_uint) // 8)
        self.compute_units = _info(cl.clGetDeviceInfo, self.device_id, CL_DEVICE_MAX_COMPUTE_UNITS, cl_uint)
        max_threads = _info(cl.clGetDeviceInfo, self.device_id, CL_DEVICE_MAX_WORK_GROUP_SIZE, size_t)
        item_sizes = tuple(_info(cl.clGetDeviceInfo, self.device_id, CL_DEVICE_MAX_WORK_ITEM_SIZES, size_t * 3))
        local_memory = _info(cl.clGetDeviceInfo, self.device_id, CL_DEVICE_LOCAL_MEM_SIZE, cl_ulong)
        self.context = ctypes.c_void_p(_checked("clCreateContext", None, 1, (void_p * 1)(self.device_id), None, None))
        self.queue = ctypes.c_void_p(_checked("clCreateCommandQueue", self.context, self.device_id, CL_QUEUE_PROFILING_ENABLE))
        renderer = OpenCLRenderer(local_max_threads=max_threads, local_max=item_sizes, shared_max=local_memory,
                                  has_fp16="cl_khr_fp16" in self.extensions, has_fp64="cl_khr_fp64" in self.extensions)
        super().__init__(device, CLAllocator(self), renderer, CLCompiler(self), functools.partial(CLProgram, self))
    def synchronize(self) -> None: check(opencl().clFinish(self.queue), "clFinish")
