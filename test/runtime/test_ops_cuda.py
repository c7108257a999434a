"""The CUDA device (renderer/cuda.py, runtime/ops_cuda.py).

Two parts:

- Everywhere (CI has no GPU): every kernel of a broad sweep of ops — elementwise work in every dtype (half and
  bfloat16 included), casts, reductions, matmul, conv, softmax, indexing, random numbers, symbolic shapes — and
  kernels optimized with LOCAL / GROUP / GROUPTOP / UPCAST / UNROLL / NOLOCALS and random BEAM-style action lists
  are rendered with ``CUDARenderer(arch="sm_80")`` and compiled to PTX by NVRTC, and the PTX is checked (the
  kernel's ``.entry``, shared memory and barriers for grouped reduces, launch bounds) and, where ``ptxas`` is
  installed (the nvidia-cuda-nvcc wheel), assembled for sm_80.
- With a GPU (``@pytest.mark.cuda``, skipped with the reason where there is none): the same ops run on the GPU
  against numpy, plus copies, timing, flat and NOLOCALS launches and the TinyJit CUDA graph.
"""
import ctypes, functools, glob, os, pickle, random, re, shutil, subprocess, sys, tempfile
import numpy as np
import pytest
from fusegrad import Tensor, Device, dtypes, TinyJit, Variable
from fusegrad.codegen import get_program
from fusegrad.codegen.opt import Opt, OptOps, KernelOptError, apply_opt
from fusegrad.device import probe_device, CompileError
from fusegrad.renderer.cuda import CUDARenderer, FLAT_LAUNCH_SYMBOL, DYNAMIC_SHARED_SYMBOL, parse_arch
from fusegrad.runtime.ops_cuda import CUDACompiler, flat_block, divisor_block
from helpers import assert_tensor, rand_np, run_kernel, random_action_list, searchable_ast, NP_DTYPES

ARCH = "sm_80"
RENDERER = CUDARenderer(arch=ARCH)

@functools.lru_cache(None)
def compiler() -> CUDACompiler: return CUDACompiler(ARCH)

def ptxas_path() -> str | None:
    """ptxas from the nvidia-cuda-nvcc wheel or the PATH (None: PTX is checked by NVRTC alone)."""
    for site in sys.path:
        for found in glob.glob(os.path.join(site, "nvidia", "cu*", "bin", "ptxas")) + glob.glob(os.path.join(site, "nvidia", "cuda_nvcc", "bin", "ptxas")):
            if os.access(found, os.X_OK): return found
    return shutil.which("ptxas")

def compile_kernel(ast, opts=None) -> tuple:
    """(ProgramSpec, PTX text) of a kernel AST rendered for CUDA with ``opts`` (None: the heuristic's)."""
    program = get_program(ast, RENDERER, opts)
    ptx = compiler().compile(program.src).decode()
    assert re.search(rf"\.entry {program.name}\(", ptx), f"no .entry {program.name} in the PTX"
    assert f".target {ARCH}" in ptx
    return program, ptx

def assemble(ptxs: list[str]) -> None:
    """Assemble PTX to sm_80 machine code with ptxas, where it is installed."""
    if (ptxas := ptxas_path()) is None or not ptxs: return
    with tempfile.TemporaryDirectory() as folder:
        for i, ptx in enumerate(ptxs):
            path = os.path.join(folder, f"k{i}.ptx")
            with open(path, "w") as f: f.write(ptx)
            result = subprocess.run([ptxas, f"-arch={ARCH}", path, "-o", os.path.join(folder, f"k{i}.cubin")], capture_output=True, text=True)
            assert result.returncode == 0, f"ptxas rejected the PTX:\n{result.stderr}\n{ptx[:3000]}"

def kernels_of(*tensors: Tensor) -> list:
    """The kernel ASTs of realizing ``tensors`` (copies and other non-kernel items left out)."""
    items = Tensor.schedule(*tensors) if len(tensors) > 1 else tensors[0].schedule()
    return [item.ast for item in items if item.ast.op.name == "SINK"]

# ---------------------------------------------------------------- the op sweep (built on CPU tensors, rendered for CUDA)

FLOATS = (dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64)
ALL_DTYPES = NP_DTYPES + (dtypes.bfloat16,)

def empty(*shape, dtype=dtypes.float32) -> Tensor: return Tensor.empty(*shape, dtype=dtype, device="CPU")

def _elementwise(dtype) -> list[Tensor]:
    a, b = empty(33, 7, dtype=dtype), empty(7, dtype=dtype)
    if dtype == dtypes.bool: return [a & b, a | b, a ^ b, a.logical_not(), a.where(b, a), a == b]
    out = [a + b, a * b, a - b, a.maximum(b), a < b, a != b, (a < b).where(a, b), a.cast(dtypes.float32)]
    if dtypes.is_int(dtype): out += [a // b, a % b, a & b, a ^ b, a << 3, a >> 1]
    if dtypes.is_float(dtype):
        out += [a / b, a.exp(), a.log(), a.sin(), a.sqrt(), a.reciprocal(), a.trunc(), a.pow(b), a.tanh(), a.sigmoid(), -a]
    return out

def _casts() -> list[Tensor]:
    return [empty(16, dtype=src).cast(dst) for src in ALL_DTYPES for dst in ALL_DTYPES if src != dst]

def _reductions() -> list[Tensor]:
    a = empty(12, 40, 9)
    out = [a.sum(), a.sum(1), a.max(0), a.mean((0, 2)), a.argmax(1), a.std(2), a.softmax(-1), a.cumsum(1), a.logsumexp(0)]
    for dtype in (dtypes.float16, dtypes.bfloat16, dtypes.int32, dtypes.uint8, dtypes.float64, dtypes.bool):
        out += [empty(64, 30, dtype=dtype).sum(1), empty(64, 30, dtype=dtype).max(0)]
    return out

def _linear_algebra() -> list[Tensor]:
    out = []
    for dtype in (dtypes.float32, dtypes.float16, dtypes.bfloat16, dtypes.float64, dtypes.int32):
        out.append(empty(48, 40, dtype=dtype) @ empty(40, 24, dtype=dtype))
    out.append(empty(2, 3, 12, 12).conv2d(empty(8, 3, 3, 3), padding=1, stride=2))
    out.append(empty(2, 4, 10, 10, dtype=dtypes.float16).conv2d(empty(4, 1, 3, 3, dtype=dtypes.float16), groups=4))
    out.append(empty(2, 3, 8, 8).max_pool2d(2) + empty(2, 3, 8, 8).avg_pool2d(2))
    return out

def _movement_and_indexing() -> list[Tensor]:
    a = empty(6, 10)
    # (a lazy index: an empty buffer's garbage would be read, and refused, by gather's bounds check)
    index = (Tensor.arange(24, dtype=dtypes.int32, device="CPU") % 10).reshape(6, 4)
    return [a.pad(((1, 2), (0, 3))) + 1, a.flip(1) * 2, a[1:5, ::2] + 1, a.permute(1, 0).contiguous() + 0, a.gather(1, index),
            a.repeat(2, 1) * 3, Tensor.arange(40, device="CPU").reshape(5, 8) + 1, Tensor.eye(9, device="CPU") + 0]

def _random() -> list[Tensor]:
    Tensor.manual_seed(0)
    return [Tensor.rand(100, device="CPU"), Tensor.randn(64, device="CPU", dtype=dtypes.float16), Tensor.randint(50, high=9, device="CPU")]

SWEEP = {"elementwise_" + repr(d).removeprefix("dtypes."): functools.partial(_elementwise, d) for d in ALL_DTYPES}
SWEEP.update({"casts": _casts, "reductions": _reductions, "linear_algebra": _linear_algebra,
              "movement_and_indexing": _movement_and_indexing, "random": _random})

@pytest.mark.parametrize("group", list(SWEEP))
def test_every_kernel_compiles_to_ptx(group):
    """Each kernel of the group renders for sm_80, NVRTC compiles it, and ptxas (where installed) assembles it."""
    tensors = SWEEP[group]()
    asts = list(dict.fromkeys(ast for t in tensors for ast in kernels_of(t)))
    assert asts, "the group scheduled no kernels"
    ptxs = [compile_kernel(ast)[1] for ast in asts]
    assemble(ptxs)

def test_symbolic_shape_kernel_compiles_and_guards_its_launch():
    """A kernel over a Variable-sized axis takes the variable as a 64-bit argument; the flat guard uses it."""
    n = Variable("n", 1, 1000)
    t = (Tensor.empty(1000, device="CPU")[:n.bind(10)] * 2)
    (ast,) = kernels_of(t)
    program, ptx = compile_kernel(ast)
    assert "const long long n_arg" in program.src and "n_arg" in program.src.split("return;")[0]
    assert ".param .u64" in ptx or ".param .s64" in ptx

# ---------------------------------------------------------------- optimized kernels: locals, groups, random action lists

def matmul_ast(n=64, dtype=dtypes.float32):
    return searchable_ast(kernels_of(empty(n, n, dtype=dtype) @ empty(n, n, dtype=dtype))[-1])

@pytest.mark.parametrize("opts", [
    [Opt(OptOps.LOCAL, 0, 16), Opt(OptOps.LOCAL, 1, 16)],
    [Opt(OptOps.LOCAL, 0, 8), Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.UNROLL, 3, 4)],
    [Opt(OptOps.GROUP, 2, 16)],
    [Opt(OptOps.GROUPTOP, 2, 32), Opt(OptOps.LOCAL, 0, 4)],
], ids=["local", "local_upcast_unroll", "group", "grouptop_local"])
def test_workgroup_kernels_use_thread_and_block_indices(opts):
    program, ptx = compile_kernel(matmul_ast(), opts)
    threads = int(np.prod(program.local_size))
    assert threads > 1 and "threadIdx.x" in program.src and "blockIdx.x" in program.src
    assert FLAT_LAUNCH_SYMBOL not in program.src and FLAT_LAUNCH_SYMBOL not in ptx   # the runtime keeps the local size
    assert re.search(rf"\.maxntid {threads}, 1, 1", ptx), "the launch bounds are the workgroup's size"
    if any(o.op in (OptOps.GROUP, OptOps.GROUPTOP) for o in opts):
        assert "__shared__" in program.src and "__syncthreads();" in program.src
        assert "st.shared" in ptx and "ld.shared" in ptx and "bar.sync" in ptx
    assemble([ptx])

def test_grouped_reduce_of_half_and_bfloat16():
    for dtype in (dtypes.float16, dtypes.bfloat16):
        ast = searchable_ast(kernels_of(empty(16, 256, dtype=dtype).sum(1))[-1])
        _, ptx = compile_kernel(ast, [Opt(OptOps.GROUPTOP, 1, 64)])
        assert "bar.sync" in ptx and "ld.shared" in ptx
        assemble([ptx])

def test_flat_kernel_has_its_marker_guard_and_bounds():
    (ast,) = kernels_of(empty(1000, 3) + 1)
    program, ptx = compile_kernel(ast)
    assert program.local_size == [1, 1, 1] and "lidx" not in program.src
    assert f"{FLAT_LAUNCH_SYMBOL}" in ptx and ".maxntid 256, 1, 1" in ptx
    # the guard comes before any statement: no thread past the global size touches memory
    body = program.src.split(f"{program.name}(")[1].split("\n")
    assert body[1] == "  if ((blockIdx.x*blockDim.x+threadIdx.x) >= 3 || (blockIdx.y*blockDim.y+threadIdx.y) >= 1000) return;"

def test_nolocals_kernel_uses_global_thread_index():
    (ast,) = kernels_of(empty(1000) * 2)
    program, ptx = compile_kernel(searchable_ast(ast), [Opt(OptOps.NOLOCALS, 0, None)])
    assert program.local_size is None and "(blockIdx.x*blockDim.x+threadIdx.x)" in program.src
    assert FLAT_LAUNCH_SYMBOL not in ptx   # tiled exactly by the runtime (divisor_block), no guard
    assemble([ptx])

def test_random_action_lists_compile():
    """BEAM-style random action lists on a matmul, a conv, a reduce and a half softmax all compile and assemble."""
    choose = random.Random(18)
    asts = [matmul_ast(32), matmul_ast(32, dtypes.float16),
            searchable_ast(kernels_of(empty(1, 4, 10, 10).conv2d(empty(8, 4, 3, 3)))[-1]),
            searchable_ast(kernels_of(empty(32, 96).sum(1))[-1]),
            searchable_ast(kernels_of(empty(8, 64, dtype=dtypes.float16).softmax(-1))[-1])]
    ptxs = []
    for ast in asts:
        for _ in range(3):
            _, opts = random_action_list(ast, RENDERER, choose)
            ptxs.append(compile_kernel(ast, opts)[1])
    assemble(ptxs)

def test_workgroup_limits_are_the_gpus():
    with pytest.raises(KernelOptError, match="1024"):   # 2048 threads in one block
        apply_opt(apply_opt(matmul_ast(), Opt(OptOps.LOCAL, 0, 32), RENDERER), Opt(OptOps.GROUP, 3, 64), RENDERER)
    assert (RENDERER.local_max_threads, RENDERER.local_max) == (1024, (1024, 1024, 64))
    # shared memory per block: the arch's opt-in limit (the device reports its own), 48 KiB for archs the table lacks
    assert (RENDERER.shared_max, CUDARenderer("sm_86").shared_max, CUDARenderer("sm_61").shared_max) == (163 * 1024, 99 * 1024, 48 * 1024)
    small = CUDARenderer(ARCH, shared_max=32 * 1024)
    assert pickle.loads(pickle.dumps(small)).shared_max == 32 * 1024
    with pytest.raises(KernelOptError, match="shared memory"): get_program(big_shared_ast(), small, BIG_SHARED_OPTS)

# a grouped matmul whose partial sums (16 x 16 threads x 4 groups x a 4 x 4 tile of floats) need 64 KiB of shared memory
BIG_SHARED_OPTS = [Opt(OptOps.GROUP, 2, 4), Opt(OptOps.LOCAL, 0, 16), Opt(OptOps.LOCAL, 1, 16), Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.UPCAST, 1, 4)]
def big_shared_ast(): return matmul_ast(256)

def test_shared_memory_past_48_kib_is_dynamic():
    """Static __shared__ arrays may total 48 KiB (ptxas rejects more); past that the kernel's arrays are slices of one
    extern __shared__ array, and the kernel exports its size for the runtime (which passes it at launch)."""
    program, ptx = compile_kernel(big_shared_ast(), BIG_SHARED_OPTS)
    assert "extern __shared__" in program.src and re.search(r"\.extern \.shared .*fg_shared\[\]", ptx)
    assert re.search(rf"\.global .*\.u32 {DYNAMIC_SHARED_SYMBOL} = 65536;", ptx)
    assemble([ptx])
    small, small_ptx = compile_kernel(matmul_ast(), [Opt(OptOps.GROUP, 2, 16)])   # 4 KiB: static, nothing exported
    assert "extern __shared__" not in small.src and DYNAMIC_SHARED_SYMBOL not in small_ptx

# ---------------------------------------------------------------- tensor cores

@pytest.mark.parametrize("dtype", [dtypes.float16, dtypes.bfloat16])
def test_tensor_core_kernels_compile_to_mma(dtype):
    """Half and bfloat16 matmuls get mma.sync m16n8k16 (the heuristic's tile and other action lists, a batched matmul with
    an epilogue): each kernel's PTX has the instructions the unrolled tile needs, and ptxas assembles it. (Their results
    are checked on the PYTHON device emulating CUDA: test/codegen/test_tc.py, and on a GPU below.)"""
    kind = "f16" if dtype == dtypes.float16 else "bf16"
    plain, batched = matmul_ast(dtype=dtype), searchable_ast(kernels_of((empty(3, 32, 48, dtype=dtype) @ empty(3, 48, 64, dtype=dtype) + 1).relu())[-1])
    # (the instructions one reduce step needs at least: the heuristic's 2 x 4 tile, 1, 4 steps unrolled; NVRTC may unroll more)
    cases = [(plain, None, 8), (plain, [Opt(OptOps.TC, 0, 0)], 1), (plain, [Opt(OptOps.TC, 0, 0), Opt(OptOps.UNROLL, 2, 0)], 4), (batched, None, 8)]
    ptxs = []
    for ast, opts, count in cases:
        program, ptx = compile_kernel(ast, opts)
        assert program.applied_opts[0] == Opt(OptOps.TC, 0, 0) and program.local_size[0] == 32
        found = ptx.count(f"mma.sync.aligned.m16n8k16.row.col.f32.{kind}.{kind}.f32")
        assert found >= count and found % count == 0 and found == ptx.count("mma."), (opts, found)
        ptxs.append(ptx)
    assemble(ptxs)
    assert [tc.name for tc in RENDERER.tensor_cores] == ["mma_m16n8k16_f16_f32", "mma_m16n8k16_bf16_f32"]
    with pytest.raises(KernelOptError, match="the CUDA renderer declares none"):   # mma.sync m16n8k16 needs sm_80
        apply_opt(matmul_ast(dtype=dtype), Opt(OptOps.TC, 0, 0), CUDARenderer(arch="sm_75"))

# ---------------------------------------------------------------- renderer and compiler without a device

def test_renderer_needs_no_device_and_pickles():
    assert pickle.loads(pickle.dumps(RENDERER)).arch == ARCH
    assert CUDARenderer(arch="sm_90").arch == "sm_90" and parse_arch("compute_86") == 86
    with pytest.raises(ValueError, match="sm_80"): CUDARenderer(arch="ampere")

def test_launch_indices():
    assert [RENDERER.render_special(n) for n in ("gidx0", "gidx2", "lidx0", "lidx1", "idx0")] == \
        ["blockIdx.x", "blockIdx.z", "threadIdx.x", "threadIdx.y", "(blockIdx.x*blockDim.x+threadIdx.x)"]

def test_special_float_constants():
    assert RENDERER.render_const(float("nan"), dtypes.float32) == "(NAN)"
    assert RENDERER.render_const(float("-inf"), dtypes.float16) == "half(-INFINITY)"
    assert RENDERER.render_const(float("inf"), dtypes.float64) == "(((double)INFINITY))"
    assert RENDERER.render_const(0.5, dtypes.float16) == "half(0.5f)"

def test_compile_error_names_the_problem():
    with pytest.raises(CompileError, match="undefined"):
        compiler().compile('extern "C" __global__ void k(float* x) { x[0] = not_declared; }')

def test_cubin_output_and_cache_key():
    src = 'extern "C" __global__ void k(float* x) { x[threadIdx.x] = 1.0f; }'
    cubin = CUDACompiler(ARCH, output="cubin").compile(src)
    assert cubin[:4] == b"\x7fELF"   # machine code for sm_80, no driver JIT needed
    assert CUDACompiler(ARCH).cachekey != CUDACompiler(ARCH, output="cubin").cachekey != CUDACompiler("sm_90", output="cubin").cachekey
    with pytest.raises(ValueError): CUDACompiler(ARCH, output="sass")

def test_block_choices():
    assert flat_block((3000, 1, 1)) == (256, 1, 1) and flat_block((3, 1000, 1)) == (3, 85, 1)
    assert divisor_block((1000, 1, 1)) == (250, 1, 1) and divisor_block((997, 1, 1)) == (1, 1, 1)
    assert np.prod(divisor_block((64, 64, 64))) <= 256

# ---------------------------------------------------------------- the device

def _gpu_reason() -> str | None:
    """Why the CUDA device can't run here (None when it can)."""
    works, reason = probe_device("CUDA")
    return None if works else reason

GPU_MISSING = _gpu_reason()

def test_device_is_listed_with_its_state():
    """``python -m fusegrad.device`` lists CUDA: PASS with a GPU, else FAIL saying that there is no driver/GPU."""
    from fusegrad.device import RUNTIMES, list_devices
    assert RUNTIMES["CUDA"] == "ops_cuda" and Device.canonicalize("cuda:0") == "CUDA" and Device.canonicalize("cuda:1") == "CUDA:1"
    (row,) = [r for r in list_devices() if r[0] == "CUDA"]
    if GPU_MISSING is None: assert row[1] and "result correct" in row[2]
    else: assert not row[1] and "RuntimeError" in row[2] and "no CUDA driver/GPU" in row[2]

cuda = pytest.mark.skipif(GPU_MISSING is not None, reason=f"no CUDA GPU here ({GPU_MISSING})")

@pytest.mark.cuda
@cuda
@pytest.mark.parametrize("dtype", [d for d in NP_DTYPES if d != dtypes.bool] + [dtypes.bfloat16])
def test_gpu_elementwise_matches_numpy(dtype):
    rng = np.random.default_rng(0)
    x, y = rand_np(rng, (33, 7), dtype), rand_np(rng, (7,), dtype, low=1, high=5)
    if dtype == dtypes.bfloat16:   # the values bfloat16 holds, so comparisons agree with numpy's
        x, y = (Tensor(v, dtype=dtype, device="CPU").float().numpy() for v in (x, y))
    a, b = Tensor(x, device="CUDA", dtype=dtype), Tensor(y, device="CUDA", dtype=dtype)
    for got, expected in ((a + b, x + y), (a * b, x * y), (a.maximum(b), np.maximum(x, y)), (a < b, x < y)):
        assert_tensor(got, expected, dtype=got.dtype)
    if dtypes.is_float(dtype):
        assert_tensor((a * a + 1).sqrt().log(), np.log(np.sqrt(x.astype(np.float64) ** 2 + 1)), dtype=dtype)

@pytest.mark.cuda
@cuda
def test_gpu_reductions_matmul_conv():
    import torch
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((2, 3, 12, 12)).astype(np.float32), rng.standard_normal((8, 3, 3, 3)).astype(np.float32)
    t = Tensor(x, device="CUDA")
    assert_tensor(t.sum(), x.sum(), rtol=1e-4)
    assert_tensor(t.max(1), x.max(1))
    assert_tensor(t.softmax(-1), torch.tensor(x).softmax(-1).numpy(), rtol=1e-5, atol=1e-6)
    assert_tensor(t.conv2d(Tensor(w, device="CUDA"), padding=1), torch.nn.functional.conv2d(torch.tensor(x), torch.tensor(w), padding=1).numpy(), rtol=1e-4, atol=1e-4)
    m = rng.standard_normal((70, 50)).astype(np.float16)
    assert_tensor(Tensor(m, device="CUDA") @ Tensor(m.T.copy(), device="CUDA"), (m.astype(np.float32) @ m.T.astype(np.float32)), rtol=2e-2, atol=2e-1)

@pytest.mark.cuda
@cuda
@pytest.mark.parametrize("opts", [[Opt(OptOps.LOCAL, 0, 16), Opt(OptOps.LOCAL, 1, 8)], [Opt(OptOps.GROUP, 2, 16)],
                                  [Opt(OptOps.GROUPTOP, 2, 32), Opt(OptOps.UPCAST, 0, 2)], [Opt(OptOps.NOLOCALS, 0, None)], []])
def test_gpu_optimized_kernels_match_the_cpu(opts):
    rng = np.random.default_rng(2)
    x, y = rng.standard_normal((64, 64)).astype(np.float32), rng.standard_normal((64, 64)).astype(np.float32)
    (item,) = (Tensor(x, device="CUDA") @ Tensor(y, device="CUDA")).schedule()[-1:]
    np.testing.assert_allclose(run_kernel(item, opts, "CUDA")[0].reshape(64, 64), x @ y, rtol=1e-4, atol=1e-4)

@pytest.mark.cuda
@cuda
def test_gpu_dynamic_shared_memory_kernel_matches_numpy():
    """The 64 KiB grouped matmul (dynamic shared memory, its arrays at computed offsets) on the GPU."""
    rng = np.random.default_rng(4)
    x, y = rng.standard_normal((256, 256)).astype(np.float32), rng.standard_normal((256, 256)).astype(np.float32)
    (item,) = (Tensor(x, device="CUDA") @ Tensor(y, device="CUDA")).schedule()[-1:]
    np.testing.assert_allclose(run_kernel(item, BIG_SHARED_OPTS, "CUDA")[0].reshape(256, 256), x @ y, rtol=1e-4, atol=1e-3)

@pytest.mark.cuda
@cuda
@pytest.mark.parametrize("dtype", [dtypes.float16, dtypes.bfloat16])
def test_gpu_tensor_core_matmul_matches_numpy_and_the_emulator(dtype):
    """mma.sync on the GPU: a half / bfloat16 matmul (heuristic: TC, a 2 x 4 tile, 2 x 2 warps) against numpy, and bit for bit
    against the PYTHON device emulating CUDA on sums that are exact (quarters of small integers), which pins the fragment
    layouts to the hardware's."""
    from fusegrad.runtime.ops_python import PythonRenderer
    rng = np.random.default_rng(4)
    a, b = rng.integers(-64, 64, (64, 96)).astype(np.float32) / 4, rng.integers(-64, 64, (96, 128)).astype(np.float32) / 4
    item = Tensor(a, device="CUDA").cast(dtype).realize().dot(Tensor(b, device="CUDA").cast(dtype).realize(), dtype=dtypes.float32).schedule()[-1]
    assert get_program(item.ast, Device["CUDA"].renderer).applied_opts[0] == Opt(OptOps.TC, 0, 0)
    (gpu,) = run_kernel(item, None, "CUDA")
    np.testing.assert_array_equal(gpu.reshape(64, 128), a @ b)
    emulated = Tensor(a, device="PYTHON").cast(dtype).realize().dot(Tensor(b, device="PYTHON").cast(dtype).realize(), dtype=dtypes.float32).schedule()[-1]
    np.testing.assert_array_equal(run_kernel(emulated, None, "PYTHON", PythonRenderer("CUDA"))[0], gpu)
    x = rng.standard_normal((256, 512)).astype(np.float32)
    assert_tensor(Tensor(x, device="CUDA").cast(dtype).realize() @ Tensor(x.T.copy(), device="CUDA").cast(dtype).realize(),
                  Tensor(x).cast(dtype).float().numpy() @ Tensor(x.T.copy()).cast(dtype).float().numpy(), dtype=dtype, rtol=2e-2, atol=5e-1)

@pytest.mark.cuda
@cuda
def test_gpu_copies_small_and_pinned():
    for n in (3, 1 << 20):   # below and above the pinned staging threshold
        x = np.arange(n, dtype=np.float32)
        t = Tensor(x, device="CUDA")
        np.testing.assert_array_equal(t.numpy(), x)
        np.testing.assert_array_equal((t + 1).to("CPU").numpy(), x + 1)

@pytest.mark.cuda
@cuda
def test_gpu_odd_sizes_and_variables():
    x = np.arange(997 * 3, dtype=np.float32)   # a prime: the last flat block is partly out of range
    assert_tensor(Tensor(x, device="CUDA") * 2, x * 2)
    n = Variable("n", 1, 100)
    t = Tensor(np.arange(100, dtype=np.float32), device="CUDA")
    for size in (7, 64):
        assert t[:n.bind(size)].sum().item() == sum(range(size))

@pytest.mark.cuda
@cuda
def test_gpu_kernel_timing():
    (item,) = (Tensor.empty(1 << 20, device="CUDA") * 2).schedule()[-1:]
    from fusegrad.engine.realize import CompiledRunner
    for b in item.bufs: b.ensure_allocated()
    elapsed = CompiledRunner(get_program(item.ast, Device["CUDA"].renderer))(item.bufs, {}, wait=True)
    assert elapsed is not None and 0 < elapsed < 10

@pytest.mark.cuda
@cuda
def test_gpu_jit_replays_a_cuda_graph():
    from fusegrad.runtime.ops_cuda import CUDAGraph
    @TinyJit
    def step(a: Tensor, b: Tensor) -> Tensor: return ((a @ b).relu() + 1).sum(0).realize()
    rng = np.random.default_rng(3)
    for _ in range(4):
        x, y = rng.standard_normal((16, 16)).astype(np.float32), rng.standard_normal((16, 16)).astype(np.float32)
        got = step(Tensor(x, device="CUDA"), Tensor(y, device="CUDA")).numpy()
        np.testing.assert_allclose(got, (np.maximum(x @ y, 0) + 1).sum(0), rtol=1e-4, atol=1e-4)
    assert isinstance(step.captured.graph, CUDAGraph)

# ---------------------------------------------------------------- the runtime's plumbing, on a fake driver (no GPU needed)

class FakeDriver:
    """Just enough of libcuda for the allocator, copies and launches: device memory is host memory, modules are
    the images given, and launches are recorded with their argument values (no kernel runs)."""
    def __init__(self):
        self.memory, self.launches, self.peer_copies, self.function_attributes = {}, [], [], {}
    def __getattr__(self, name):
        if name.startswith("cu"): return lambda *args: 0   # context, stream, event calls: succeed, do nothing
        raise AttributeError(name)
    def cuDeviceGetCount(self, count): count._obj.value = 1; return 0
    def cuDeviceGetAttribute(self, value, attribute, device): value._obj.value = {75: 8, 76: 0, 97: 99 * 1024}.get(attribute, 0); return 0
    def cuMemAlloc_v2(self, pointer, size):
        block = ctypes.create_string_buffer(size)
        pointer._obj.value = ctypes.addressof(block)
        self.memory[pointer._obj.value] = block
        return 0
    def cuMemFree_v2(self, address): del self.memory[address]; return 0
    def cuMemHostAlloc(self, pointer, size, flags): return self.cuMemAlloc_v2(pointer, size)
    def cuMemcpyHtoD_v2(self, dest, src, size): ctypes.memmove(dest, src, size); return 0
    def cuMemcpyDtoH_v2(self, dest, src, size): ctypes.memmove(dest, src, size); return 0
    def cuMemcpyHtoDAsync_v2(self, dest, src, size, stream): ctypes.memmove(dest, src, size); return 0
    def cuMemcpyDtoHAsync_v2(self, dest, src, size, stream): ctypes.memmove(dest, src, size); return 0
    def cuMemcpyPeerAsync(self, dest, dest_context, src, src_context, size, stream):
        self.peer_copies.append((dest_context, src_context, size))
        ctypes.memmove(dest, src, size)
        return 0
    def cuModuleLoadData(self, module, image): self.image = image; return 0
    def cuModuleGetGlobal_v2(self, address, size, module, name):
        if name not in self.image: return 500   # CUDA_ERROR_NOT_FOUND
        if (value := re.search(rb"%s = (\d+)" % name, self.image)) is not None:   # an exported constant: its value in "device memory"
            self.globals = getattr(self, "globals", []) + [ctypes.c_uint32(int(value.group(1)))]
            address._obj.value = ctypes.addressof(self.globals[-1])
        return 0
    def cuFuncSetAttribute(self, function, attribute, value): self.function_attributes[attribute] = value; return 0
    def cuLaunchKernel(self, function, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        values = [ctypes.c_uint64.from_address(params[i]).value for i in range(self.arguments)]
        self.launches.append(((gx, gy, gz), (bx, by, bz), values) + ((shared,) if shared else ()))
        return 0

@pytest.fixture
def fake_cuda(monkeypatch):
    from fusegrad.runtime import ops_cuda
    driver = FakeDriver()
    monkeypatch.setattr(ops_cuda, "libcuda", lambda: driver)
    return driver, ops_cuda.CUDADevice("CUDA")

def test_runtime_on_a_fake_driver_copies_both_ways(fake_cuda):
    driver, device = fake_cuda
    assert device.arch == "sm_80" and device.compiler.output == "cubin"
    for n in (5, 1 << 15):   # small (direct) and large (through the pinned staging buffer)
        data = np.arange(n, dtype=np.float32)
        pointer = device.allocator.alloc(data.nbytes)
        device.allocator._copyin(pointer, memoryview(data.tobytes()))
        out = memoryview(bytearray(data.nbytes))
        device.allocator._copyout(out, pointer)
        np.testing.assert_array_equal(np.frombuffer(out, np.float32), data)
        view = memoryview(bytearray(8))
        device.allocator._copyout(view, device.allocator._offset(pointer, 8, 8))   # elements 2 and 3
        np.testing.assert_array_equal(np.frombuffer(view, np.float32), data[2:4])

def test_runtime_on_a_fake_driver_copies_between_gpus(fake_cuda, monkeypatch):
    """A copy between two CUDA devices is one peer copy on the destination's stream (no trip through the host),
    for whole buffers and views; BufferCopy picks it for two CUDA buffers."""
    from fusegrad.device import Buffer
    from fusegrad.engine.realize import BufferCopy
    driver, first = fake_cuda
    second = type(first)("CUDA")
    second.context = ctypes.c_void_p(7)   # (the fake driver gives both the same device: tell their contexts apart)
    devices = {"CUDA": first, "CUDA:1": second}
    monkeypatch.setattr(type(Device), "__getitem__", lambda self, name: devices[name])
    data = np.arange(64, dtype=np.float32)
    src, dest = Buffer("CUDA", 64, dtypes.float32).ensure_allocated(), Buffer("CUDA:1", 64, dtypes.float32).ensure_allocated()
    src.copyin(memoryview(data.tobytes()))
    BufferCopy(dest.nbytes, "CUDA:1", "CUDA")([dest, src], {})
    assert driver.peer_copies == [(second.context, first.context, 256)]
    np.testing.assert_array_equal(np.frombuffer(dest.as_buffer(), np.float32), data)
    view, into = src.view(8, dtypes.float32, 16 * 4), Buffer("CUDA", 8, dtypes.float32).ensure_allocated()   # elements 16..23
    BufferCopy(into.nbytes, "CUDA", "CUDA")([into, view], {})
    np.testing.assert_array_equal(np.frombuffer(into.as_buffer(), np.float32), data[16:24])
    assert len(driver.peer_copies) == 2

def test_runtime_on_a_fake_driver_gives_dynamic_shared_memory(fake_cuda):
    """A kernel exporting its dynamic shared memory size gets the function's limit raised to it and the size at every
    launch; the device's renderer may plan up to the GPU's reported opt-in limit."""
    driver, device = fake_cuda
    assert device.renderer.shared_max == 99 * 1024   # attribute 97 of the (fake) GPU, not the sm_80 table's 163 KiB
    program = device.runtime("r_big", f"... {DYNAMIC_SHARED_SYMBOL} = 65536; ...".encode())
    assert program.shared_bytes == 65536 and driver.function_attributes == {8: 65536}   # CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    driver.arguments = 1
    program(0x1000, global_size=(16, 16, 1), local_size=(16, 16, 4))
    assert driver.launches[-1] == ((16, 16, 1), (16, 16, 4), [0x1000], 65536)

def test_runtime_on_a_fake_driver_launches(fake_cuda):
    driver, device = fake_cuda
    flat = device.runtime("E_1000_3", b"... fg_flat_launch ...")
    assert flat.flat
    driver.arguments = 3
    flat(0x1000, 0x2000, global_size=(3, 1000, 1), local_size=(1, 1, 1), vals=(7,))
    workgroup = device.runtime("r_4_4", b"no marker")
    workgroup(0x3000, global_size=(4, 4, 1), local_size=(16, 8, 1), vals=(-1, 5))
    nolocals = device.runtime("E_1000", b"no marker")
    nolocals(0x4000, 0x5000, 0x6000, global_size=(1000, 1, 1), local_size=None)
    assert driver.launches == [((1, 12, 1), (3, 85, 1), [0x1000, 0x2000, 7]),   # flat: ceil(1000 / 85) blocks of 3 x 85
                               ((4, 4, 1), (16, 8, 1), [0x3000, 2**64 - 1, 5]),  # exact; -1 travels as a 64-bit int
                               ((4, 1, 1), (250, 1, 1), [0x4000, 0x5000, 0x6000])]

# ---------------------------------------------------------------- every kernel of the op tests

OP_TEST_FILES = ["test/test_tensor_ops.py", "test/test_gradient.py", "test/test_ops_functional.py", "test/test_ops_processing.py"]

@pytest.mark.hang_guard(1800)
def test_every_op_test_kernel_compiles_for_cuda():
    """Every kernel the op, gradient and functional tests realize on the CPU also renders for CUDA (with the CUDA
    heuristic's own actions) and compiles to PTX with NVRTC (test/cuda_compile_check.py, a pytest plugin, in a
    subprocess): about 3,100 distinct kernels. The tests' PYTHON-device twins, which realize the same kernels, are left out."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {**os.environ, "DEV": "CPU", "FUSEGRAD_TEST_DESELECT_DEVICES": "PYTHON",
           "PYTHONPATH": os.pathsep.join([os.path.join(root, "test")] + [p for p in [os.environ.get("PYTHONPATH")] if p])}
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "cuda_compile_check", "-p", "no:cacheprovider",
                             *OP_TEST_FILES], cwd=root, env=env, capture_output=True, text=True, timeout=1750)
    assert result.returncode == 0, f"op tests with the CUDA compile check failed:\n{result.stdout[-6000:]}\n{result.stderr[-2000:]}"
    compiled = re.search(r"cuda_compile_check: (\d+) distinct kernels", result.stdout)
    assert compiled is not None and int(compiled.group(1)) > 1500, result.stdout[-2000:]

def test_driver_calls_need_a_declared_signature(fake_cuda):
    """ctypes passes an undeclared int argument as a 32-bit C int, which can't hold a device pointer: ``cu`` refuses
    any driver call without argument types (the peer copy above went through it), before reaching the driver."""
    from fusegrad.runtime.ops_cuda import cu, DRIVER_SIGNATURES
    driver, _ = fake_cuda
    driver.cuUndeclared = lambda *args: driver.launches.append("called") or 0
    with pytest.raises(RuntimeError, match="cuUndeclared has no declared signature"): cu("cuUndeclared", 1 << 40)
    assert "called" not in driver.launches
    assert all(ctypes.c_uint64 in DRIVER_SIGNATURES[name] for name in ("cuMemcpyPeerAsync", "cuMemcpyHtoD_v2", "cuMemFree_v2"))
