"""The CL device (OpenCL through the ICD loader; PoCL on these machines), in the normal suite: a representative
subset on CL — ops against numpy, gradients against PyTorch, matmul, convs, reductions (long ones grouped over a
workgroup), random optimization action lists with LOCAL/GROUP/GROUPTOP/PADTO, JIT replay, copies — plus what is
particular to the backend (names, instances, the program cache, profiling, errors). test_device_suites.py runs the
op, gradient, JIT and opt tests with ``DEV=CL``. Skipped only where no OpenCL runtime is installed."""
import ctypes
import numpy as np
import pytest
from fusegrad import Tensor, Device, dtypes, TinyJit, GlobalCounters, Context
from fusegrad.codegen import get_program
from fusegrad.codegen.opt import Opt, OptOps, KernelOptError, apply_opt, hand_coded_optimizations
from fusegrad.device import CompileError, Buffer, probe_device
from fusegrad.renderer.opencl import OpenCLRenderer
from helpers import (assert_tensor, rand_np, run_kernel, searchable_ast, count_kernels, UNARY_OPS, BINARY_OPS, CASTS, GRADIENT_FUNCTIONS,
                     check_unary, check_binary, check_integer_division, check_cast, check_reductions, check_matmul, check_padded_conv,
                     check_conv_and_pool_gradients, check_gradient_matches_torch, check_random_action_lists)

# No skip when OpenCL is missing: scripts/install_system.sh installs PoCL, so a missing runtime is a broken
# install and every test here fails with the device's error naming the packages.
CL = "CL"

# ---------------------------------------------------------------- the device

def test_device_names():
    for name in ("cl", "CL:0", "GPU", "gpu:0", "OpenCL"): assert Device.canonicalize(name) == CL
    assert Device.canonicalize("gpu:1") == "CL:1"
    assert isinstance(Device[CL].renderer, OpenCLRenderer)
    assert Device["GPU"] is Device[CL]

def test_second_instance_is_separate_memory_and_copies_work(rng):
    """PoCL has one device: CL:1 is a second instance of it (own context and memory), as CPU:1 is of the CPU."""
    x = rng.standard_normal((5, 7)).astype(np.float32)
    a = Tensor(x, device=CL)
    b = (a.to("CL:1") * 2).realize()
    assert b.device == "CL:1" and Device["CL:1"] is not Device[CL] and Device["CL:1"].context.value != Device[CL].context.value
    np.testing.assert_array_equal(b.to("CPU").numpy(), x * 2)
    np.testing.assert_array_equal((b.to(CL) + a).numpy(), x * 3)

def test_shard_over_two_instances(rng):
    x = rng.standard_normal((8, 6)).astype(np.float32)
    t = Tensor(x).shard(("CL", "CL:1"), axis=0)
    np.testing.assert_allclose((t * 2).sum(0).numpy(), (x * 2).sum(0), rtol=1e-5, atol=1e-6)

def test_probe_lists_cl_as_passing():
    """``python -m fusegrad.device`` prints this row."""
    works, reason = probe_device(CL)
    assert works, reason

def test_copies_in_and_out_round_trip(rng):
    for dtype in (dtypes.uint8, dtypes.int64, dtypes.float64, dtypes.bool, dtypes.float16):
        x = rand_np(rng, (3, 11), dtype)
        buf = Buffer(CL, x.size, dtype).allocate().copyin(memoryview(np.ascontiguousarray(x)).cast("B"))
        np.testing.assert_array_equal(np.frombuffer(buf.as_buffer(), dtype=x.dtype).reshape(x.shape), x)

def test_program_binary_is_cached_and_loads(rng):
    """The compiler returns the driver's program binary (clGetProgramInfo); compile_cached keeps it on disk, and a
    program made from the cached binary runs."""
    from fusegrad.engine.realize import CompiledRunner
    device = Device[CL]
    a = Tensor(np.arange(16, dtype=np.float32), device=CL).realize()
    item = (a * 3 + 1).schedule()[-1]
    program = get_program(item.ast, device.renderer)
    first = device.compiler.compile_cached(program.src)
    assert isinstance(first, bytes) and len(first) > 0 and device.compiler.compile_cached(program.src) == first
    for b in item.bufs: b.ensure_allocated()
    CompiledRunner(program, precompiled=first)(item.bufs, {})
    np.testing.assert_array_equal(item.outputs[0].numpy(), np.arange(16, dtype=np.float32) * 3 + 1)

def test_kernel_times_come_from_profiling_events():
    from fusegrad.engine.realize import CompiledRunner
    a = Tensor(np.ones((256, 256), np.float32), device=CL).realize()
    item = (a.exp() * 2).schedule()[-1]
    for b in item.bufs: b.ensure_allocated()
    runner = CompiledRunner(get_program(item.ast, Device[CL].renderer))
    elapsed = runner(item.bufs, {}, wait=True)
    assert isinstance(elapsed, float) and 0 < elapsed < 10
    assert runner(item.bufs, {}, wait=False) is None

def test_source_is_opencl_c():
    a = Tensor(np.ones((64, 1024), np.float32), device=CL)
    src = get_program(a.sum(1).schedule()[-1].ast, Device[CL].renderer, [Opt(OptOps.GROUPTOP, 1, 16), Opt(OptOps.LOCAL, 0, 4)]).src
    for piece in ("__kernel void", "__global float* restrict", "__local float", "barrier(CLK_LOCAL_MEM_FENCE);", "get_group_id(0)", "get_local_id(0)"):
        assert piece in src, piece
    nolocals = get_program((a + 1).schedule()[-1].ast, Device[CL].renderer, [Opt(OptOps.NOLOCALS)]).src
    assert "get_global_id(0)" in nolocals and "get_local_id" not in nolocals

def _vector_kernel_cases(rng):
    x = Tensor(rng.standard_normal((16, 64)).astype(np.float32), device=CL).realize()
    w = Tensor(rng.standard_normal((64, 32)).astype(np.float32), device=CL).realize()
    yield "elementwise", ((x * 3 + 1).relu().exp() + x.maximum(0.5)), [Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.LOCAL, 0, 4)]
    yield "padded", x[:, :62].pad(((0, 0), (1, 1))) * 2 + 1, [Opt(OptOps.UPCAST, 1, 4)]   # lanes a pad gates: masked
    yield "PADTO", x[:, :61] + 1, [Opt(OptOps.PADTO, 1, 4), Opt(OptOps.UPCAST, 1, 4)]   # lanes past the end: masked stores
    yield "matmul tile", x @ w, [Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.LOCAL, 0, 2)]
    yield "compare and select", (x < 0.5).where(x * 2, -x), [Opt(OptOps.UPCAST, 1, 4)]

def test_upcast_lanes_are_float4_loads_and_stores(rng):
    """An innermost UPCAST of contiguous lanes is vector code on CL (codegen/vectorize.py, the renderer's 16-byte
    vectors): vload4/vstore4 (no alignment needed), lane by lane where a pad or PADTO masks lanes, compares as int4
    masks and select(). Every kernel computes what the unoptimized one does."""
    for name, out, opts in _vector_kernel_cases(rng):
        item = out.schedule()[-1]
        src = get_program(item.ast, Device[CL].renderer, opts).src
        assert "vstore4(" in src or "if ((" in src, (name, src)
        assert "vload4(" in src or name in ("padded", "PADTO"), (name, src)
        if name == "padded": assert ").s3?" in src, src   # a masked lane reads 0 without touching memory
        np.testing.assert_allclose(run_kernel(item, opts, CL)[0], run_kernel(item, [], CL)[0], rtol=1e-6, atol=1e-6, err_msg=name)

def test_heuristic_matmul_tile_has_float4_lanes(rng):
    """The GPU heuristic's register tile puts the contiguous output axis innermost: B rows load and C rows store as
    float4, A's value is broadcast, and the tiled reduce gets no UNROLL (4 float4 accumulators, not 16)."""
    a = Tensor(rng.standard_normal((64, 48)).astype(np.float32), device=CL).realize()
    b = Tensor(rng.standard_normal((48, 64)).astype(np.float32), device=CL).realize()
    item = (a @ b).schedule()[-1]
    program = get_program(item.ast, Device[CL].renderer)
    assert "vload4(0, data2" in program.src and "vstore4(" in program.src and "float4 acc0[4];" in program.src, program.src
    assert not any(opt.op is OptOps.UNROLL for opt in program.applied_opts)
    np.testing.assert_allclose(run_kernel(item, None, CL)[0].reshape(64, 64), a.numpy() @ b.numpy(), rtol=1e-4, atol=1e-4)

def test_vector_lanes_are_32_bit_on_cl():
    """Half may be storage-only on an OpenCL device: its loops stay loops (the renderer's ``vector_dtypes``)."""
    x = Tensor(np.ones((16, 64), np.float16), device=CL)
    src = get_program((x * 2).schedule()[-1].ast, Device[CL].renderer, [Opt(OptOps.UPCAST, 1, 4)]).src
    assert "vload" not in src.replace("vload_half", "") and "half4" not in src

# ---------------------------------------------------------------- errors

def test_missing_opencl_library_is_a_clear_error(monkeypatch):
    from fusegrad.runtime import ops_cl
    def no_library(*args, **kwargs): raise OSError("libOpenCL.so.1: cannot open shared object file")
    monkeypatch.setattr(ops_cl.ctypes, "CDLL", no_library)
    with pytest.raises(RuntimeError, match="ocl-icd-libopencl1 pocl-opencl-icd"): ops_cl.opencl.__wrapped__()

def test_bad_source_is_a_compile_error_with_the_build_log():
    with pytest.raises(CompileError, match="OpenCL build failed"): Device[CL].compiler.compile("__kernel void k(__global float* a) { a[0] = undefined_name; }")

def test_unaligned_view_is_a_clear_error():
    buf = Buffer(CL, 64, dtypes.float32).allocate()
    with pytest.raises(NotImplementedError, match="multiples of"): buf.view(4, dtypes.float32, 4).ensure_allocated()
    aligned = buf.view(4, dtypes.float32, Device[CL].base_alignment).ensure_allocated()
    assert aligned.numpy().shape == (4,)

def test_workgroup_limits_come_from_the_device():
    renderer = Device[CL].renderer
    assert renderer.local_max_threads >= 64 and renderer.shared_max >= 16384
    a = Tensor(np.ones((8192, 4), np.float32), device=CL)
    ast = searchable_ast((a + 1).schedule()[-1].ast)
    with pytest.raises(KernelOptError, match="exceeds"): apply_opt(ast, Opt(OptOps.LOCAL, 0, 8192), renderer)
    with pytest.raises(KernelOptError, match="no threads"): apply_opt(ast, Opt(OptOps.THREAD, 0, 2), renderer)

# ---------------------------------------------------------------- ops against numpy

@pytest.mark.parametrize("name", sorted(UNARY_OPS))
@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.float64, dtypes.float16])
def test_unary(name, dtype, rng): check_unary(CL, name, dtype, rng)

def test_half_arithmetic_rounds_like_ieee_half(rng):
    """Without cl_khr_fp16 half values compute in float, each result rounded to half: same bits as numpy's half."""
    x, y = rand_np(rng, (200,), dtypes.float16, -100, 100), rand_np(rng, (200,), dtypes.float16, -100, 100)
    a, b = Tensor(x, device=CL), Tensor(y, device=CL)
    for ours, theirs in ((a + b, x + y), (a * b, x * y), (a / b, x / y), (a - b * a, x - y * x)):
        np.testing.assert_array_equal(ours.numpy(), theirs)
    specials = np.array([np.inf, -np.inf, np.nan, 65504, 6e-8, -0.0], np.float16)
    np.testing.assert_array_equal(Tensor(specials, device=CL).bitcast(dtypes.uint16).numpy(), specials.view(np.uint16))
    big = np.array([1e6, -1e6, 65519.0, 65520.0, 1e-9], np.float64)
    with np.errstate(over="ignore"): want = big.astype(np.float16)
    np.testing.assert_array_equal(Tensor(big, device=CL).cast(dtypes.float16).numpy(), want)

@pytest.mark.parametrize("name", sorted(BINARY_OPS))
@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.int32, dtypes.int8, dtypes.uint8, dtypes.int64, dtypes.uint64, dtypes.bool])
def test_binary(name, dtype, rng): check_binary(CL, name, dtype, rng)

@pytest.mark.parametrize("dtype", [dtypes.int32, dtypes.int8, dtypes.int64, dtypes.uint32])
def test_integer_division_never_traps(dtype):
    """PoCL runs on x86, where x / 0 and MIN / -1 raise SIGFPE: they give 0, 0 and MIN, as on every device."""
    check_integer_division(CL, dtype)

@pytest.mark.parametrize("source,target", CASTS)
def test_cast(source, target, rng): check_cast(CL, source, target, rng)

def test_bitcast_where_and_special_values():
    x = np.array([1.0, -2.0, 0.0, np.inf, -np.inf, np.nan, -0.0, 1e-40] * 5, np.float32)
    t = Tensor(x, device=CL)
    assert_tensor(t.bitcast(dtypes.uint32), x.view(np.uint32))
    assert_tensor((t > 0).where(t, -t), np.where(x > 0, x, -x))
    with np.errstate(all="ignore"):
        assert_tensor(t.maximum(0.5), np.maximum(x, 0.5))
        zero = Tensor(np.zeros_like(x), device=CL)   # (a constant 0 is folded away before codegen: x * 0 is 0, as on every device)
        assert_tensor(t * zero + np.inf, x * 0 + np.inf)
        assert_tensor(t != t, x != x)
    assert_tensor(Tensor(np.arange(-3, 4, dtype=np.int64) * 2**40, device=CL) >> 3, (np.arange(-3, 4, dtype=np.int64) * 2**40) >> 3)

# ---------------------------------------------------------------- reductions, matmul, conv

@pytest.mark.parametrize("shape,axis", [((1000,), None), ((37, 129), 1), ((64, 48), 0), ((4, 5, 6, 7), (0, 2)), ((3, 4096), 1)])
def test_reductions(shape, axis, rng): check_reductions(CL, shape, axis, rng)

def test_long_reductions_are_grouped_over_a_workgroup(rng):
    """Few outputs and a long reduce: the heuristic splits the reduce over the threads of a workgroup (GROUPTOP)."""
    x = rng.standard_normal((3, 4096)).astype(np.float32)
    item = Tensor(x, device=CL).sum(1).schedule()[-1]
    opts = hand_coded_optimizations(searchable_ast(item.ast), Device[CL].renderer)
    assert any(o.op is OptOps.GROUPTOP for o in opts), opts
    np.testing.assert_allclose(run_kernel(item, None, CL)[0], x.sum(1), rtol=1e-4, atol=1e-4)

def test_matvec_uses_grouped_threads_per_row(rng):
    a, v = rng.standard_normal((256, 1024)).astype(np.float32), rng.standard_normal(1024).astype(np.float32)
    item = (Tensor(a, device=CL) @ Tensor(v, device=CL)).schedule()[-1]
    opts = hand_coded_optimizations(searchable_ast(item.ast), Device[CL].renderer)
    assert {o.op for o in opts} >= {OptOps.GROUP, OptOps.LOCAL, OptOps.UPCAST}, opts
    np.testing.assert_allclose(run_kernel(item, None, CL)[0], a @ v, rtol=1e-4, atol=1e-4)

@pytest.mark.parametrize("m,k,n", [(128, 256, 96), (33, 17, 65), (1, 512, 1)])
def test_matmul(m, k, n, rng): check_matmul(CL, m, k, n, rng)

def test_matmul_gets_a_register_tile_and_workgroups(rng):
    a = Tensor(rng.standard_normal((128, 64)).astype(np.float32), device=CL)
    item = (a @ a.T).schedule()[-1]
    opts = hand_coded_optimizations(searchable_ast(item.ast), Device[CL].renderer)
    assert sum(o.op is OptOps.UPCAST for o in opts) == 2 and any(o.op is OptOps.LOCAL for o in opts), opts

def test_padded_conv(rng): check_padded_conv(CL, rng)

def test_conv_and_pool_gradients_match_torch(rng): check_conv_and_pool_gradients(CL, rng)

@pytest.mark.parametrize("name", sorted(set(GRADIENT_FUNCTIONS) - {"pow"}))
def test_gradients_match_torch(name, rng): check_gradient_matches_torch(CL, name, rng)

# ---------------------------------------------------------------- kernel counts and the JIT

def test_kernel_counts_match_the_cpu(rng):
    """Scheduling doesn't depend on the device: a training step's graph is the same number of kernels on CL."""
    def step(device):
        x = Tensor(rng.standard_normal((16, 32)).astype(np.float32), device=device)
        w = Tensor(rng.standard_normal((32, 10)).astype(np.float32), device=device, requires_grad=True).realize()
        loss = (x @ w).log_softmax(-1).mean()
        return [loss, *loss.gradient(w)]
    assert count_kernels(*step(CL)) == count_kernels(*step("CPU"))

def test_jit_replays_on_cl(rng):
    w = Tensor(rng.standard_normal((32, 16)).astype(np.float32), device=CL).realize()
    @TinyJit
    def fn(x): return (x @ w).relu().sum(1).realize()
    for _ in range(4):
        x = rng.standard_normal((8, 32)).astype(np.float32)
        np.testing.assert_allclose(fn(Tensor(x, device=CL)).numpy(), np.maximum(x @ w.numpy(), 0).sum(1), rtol=1e-4, atol=1e-4)
    assert len(fn.jit_cache) == 1
    GlobalCounters.reset()
    fn(Tensor(rng.standard_normal((8, 32)).astype(np.float32), device=CL))
    assert GlobalCounters.kernel_count == 1

# ---------------------------------------------------------------- optimization actions on a real runtime

GPU_ACTIONS = [[Opt(OptOps.LOCAL, 0, 8), Opt(OptOps.GROUP, 3, 16)], [Opt(OptOps.GROUPTOP, 2, 32), Opt(OptOps.UPCAST, 0, 4)],
               [Opt(OptOps.PADTO, 0, 32), Opt(OptOps.LOCAL, 0, 32)], [Opt(OptOps.PADTO, 1, 32), Opt(OptOps.GROUP, 2, 16)],
               [Opt(OptOps.NOLOCALS), Opt(OptOps.UPCAST, 0, 2)], [Opt(OptOps.LOCAL, 0, 4), Opt(OptOps.UNROLL, 3, 4), Opt(OptOps.GROUP, 3, 4)]]

@pytest.mark.parametrize("opts", GPU_ACTIONS, ids=lambda opts: "+".join(f"{o.op.name}{o.axis}" for o in opts))
def test_workgroup_actions_compute_the_same(opts, rng):
    """A 40x64 @ 64x24 matmul (axes: 40, 24, reduce 64) under workgroup actions, padding included."""
    x, y = rng.standard_normal((40, 64)).astype(np.float32), rng.standard_normal((64, 24)).astype(np.float32)
    item = (Tensor(x, device=CL) @ Tensor(y, device=CL)).relu().schedule()[-1]
    np.testing.assert_allclose(run_kernel(item, opts, CL)[0].reshape(40, 24), np.maximum(x @ y, 0), rtol=1e-4, atol=1e-4)

def test_random_action_lists_match_unoptimized():
    """Legal action lists (BEAM's candidates, LOCAL/GROUP/GROUPTOP/PADTO among them, picked at random) must
    compute what the unoptimized kernel computes, on a real OpenCL runtime."""
    checked, kinds = check_random_action_lists(CL, tries=2)   # (PoCL compiles a kernel in about half a second)
    assert checked >= 8 and kinds & {OptOps.LOCAL, OptOps.GROUP, OptOps.GROUPTOP}, kinds

def test_beam_times_workgroup_actions_on_the_device(monkeypatch, rng):
    """BEAM over LOCAL/GROUP actions, timed with CL profiling events; the result computes the same sums."""
    from fusegrad.codegen.opt import search
    monkeypatch.setattr(search, "candidate_actions", lambda ast, renderer: [Opt(OptOps.GROUPTOP, 1, 16), Opt(OptOps.LOCAL, 0, 4),
                                                                             Opt(OptOps.GROUP, 1, 8)])
    x = rng.standard_normal((16, 2048)).astype(np.float32)
    item = Tensor(x, device=CL).sum(1).schedule()[-1]
    with Context(IGNORE_BEAM_CACHE=1):
        monkeypatch.setenv("BEAM_MAX_ROUNDS", "1")
        opts = search.beam_search(searchable_ast(item.ast), Device[CL].renderer, 2)
    assert all(o.op in (OptOps.GROUPTOP, OptOps.LOCAL, OptOps.GROUP, OptOps.UNROLL, OptOps.UPCAST) for o in opts)
    np.testing.assert_allclose(run_kernel(item, opts, CL)[0], x.sum(1), rtol=1e-4, atol=1e-4)
