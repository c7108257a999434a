"""The LLVM device (LLVM IR compiled in-process by llvmlite), in the normal suite: CI runs only the CPU suite, so
this is a representative subset on LLVM — ops against numpy, gradients against PyTorch, a matmul, convs,
reductions, random optimization action lists — plus what is particular to the backend (names, threads,
inf/NaN semantics, traps, masked vector loads). ``DEV=LLVM python -m pytest test/test_tensor_ops.py ...``
runs the full op, gradient and opt-fuzz tests on it."""
import numpy as np
import pytest
from fusegrad import Tensor, Device, dtypes
from fusegrad.codegen import get_program
from fusegrad.codegen.opt import Opt, OptOps
from fusegrad.codegen.opt.heuristic import cpu_count
from fusegrad.renderer.llvmir import LLVMRenderer, llvm_const
from helpers import (assert_tensor, run_kernel, UNARY_OPS, BINARY_OPS, CASTS, GRADIENT_FUNCTIONS, check_unary, check_binary,
                     check_integer_division, check_cast, check_reductions, check_matmul, check_padded_conv, check_conv_and_pool_gradients,
                     check_gradient_matches_torch, check_random_action_lists)

LLVM = "LLVM"

# ---------------------------------------------------------------- the device

def test_device_names():
    assert Device.canonicalize("llvm") == LLVM
    assert Device.canonicalize("CPU:LLVM") == LLVM   # tinygrad's spelling
    assert isinstance(Device[LLVM].renderer, LLVMRenderer)

@pytest.mark.parametrize("cores", [1, 2, 3, 16])
def test_threaded_kernels_split_the_outer_loop_over_cores(cores, monkeypatch, rng):
    """THREAD on LLVM: the kernel takes (core, cores) and runs a contiguous share of the outer loop; the runtime calls
    it once per core. Shares of a 10-row loop over 3 cores are 4, 4, 2; over 16 cores most are empty."""
    import fusegrad.runtime.ops_llvm as ops_llvm
    monkeypatch.setattr(ops_llvm, "cpu_count", lambda: cores)
    x = rng.standard_normal((10, 48)).astype(np.float32)
    w = rng.standard_normal((48, 32)).astype(np.float32)
    item = (Tensor(x, device=LLVM) @ Tensor(w, device=LLVM)).schedule()[-1]
    for build in item.bufs[1:]: build.ensure_allocated()
    item.bufs[1].copyin(memoryview(x.tobytes())), item.bufs[2].copyin(memoryview(w.tobytes()))
    opts = [Opt(OptOps.UPCAST, 1, 8), Opt(OptOps.THREAD, 0, 2)]
    src = get_program(item.ast, Device[LLVM].renderer, opts).src
    assert "i64 %core, i64 %cores" in src and ".threaded = constant" in src, src
    np.testing.assert_allclose(run_kernel(item, opts, LLVM)[0].reshape(10, 32), x @ w, rtol=1e-5, atol=1e-5)

def test_heuristic_threads_big_kernels(rng):
    a = Tensor(rng.standard_normal((256, 256)).astype(np.float32), device=LLVM)
    program = get_program((a @ a).schedule()[-1].ast, Device[LLVM].renderer)
    assert any(o.op is OptOps.THREAD for o in program.applied_opts) == (cpu_count() > 1)

def test_fast_math_flags_keep_inf_and_nan():
    """No fast-math flag is set: nnan/ninf would let LLVM fold away the inf/NaN results below, and ``contract`` would
    fuse ``a * 2 + 1`` into an fma that the IR did not ask for."""
    a = Tensor(np.array([np.inf, -np.inf, np.nan, 1.0, 0.0], np.float32), device=LLVM)
    src = get_program((a * 2 + 1).schedule()[-1].ast, Device[LLVM].renderer).src
    assert "fmul float" in src and "fadd float" in src and "llvm.fma" not in src
    assert not any(flag in src for flag in (" fast ", "contract", "nnan", "ninf", "reassoc", "arcp"))
    x = np.array([np.inf, -np.inf, np.nan, 1.0, 0.0, -0.0], np.float32)
    t = Tensor(x, device=LLVM)
    with np.errstate(all="ignore"):
        assert_tensor(t.maximum(0.5), np.maximum(x, 0.5))
        assert_tensor(t * t, x * x)
        assert_tensor(1 / t, 1 / x)
        assert_tensor((t != t), x != x)
        assert_tensor(t - t, x - x)

def test_compile_is_cached_and_deterministic():
    compiler = Device[LLVM].compiler
    a = Tensor(np.ones(8, np.float32), device=LLVM)
    src = get_program((a * 3).schedule()[-1].ast, Device[LLVM].renderer).src
    assert compiler.compile(src) == compiler.compile_cached(src) == compiler.compile_cached(src)

def test_constants_are_exact():
    assert llvm_const(0.1, dtypes.float32) == "0x3FB99999A0000000"   # 0.1f widened to double exactly
    assert llvm_const(1.0, dtypes.float16) == "0xH3C00"
    assert llvm_const(2**32 - 1, dtypes.uint32) == "-1"
    assert llvm_const(1, dtypes.float32.vec(4)) == "splat (float 0x3FF0000000000000)"

# ---------------------------------------------------------------- ops against numpy

@pytest.mark.parametrize("name", sorted(UNARY_OPS))
@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.float64, dtypes.float16])
def test_unary(name, dtype, rng): check_unary(LLVM, name, dtype, rng)

@pytest.mark.parametrize("name", sorted(BINARY_OPS))
@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.int32, dtypes.int8, dtypes.uint8, dtypes.int64, dtypes.uint32, dtypes.bool])
def test_binary(name, dtype, rng): check_binary(LLVM, name, dtype, rng)

@pytest.mark.parametrize("dtype", [dtypes.int32, dtypes.int8, dtypes.int64, dtypes.uint32])
def test_integer_division_never_traps(dtype):
    """x / 0, x % 0 and MIN / -1 would raise SIGFPE on x86: they give 0, 0 and MIN (two's complement wrap), as numpy."""
    check_integer_division(LLVM, dtype)

@pytest.mark.parametrize("source,target", CASTS)
def test_cast(source, target, rng): check_cast(LLVM, source, target, rng)

def test_bitcast_and_where():
    x = np.array([1.0, -2.0, 0.0, np.inf] * 5, np.float32)
    t = Tensor(x, device=LLVM)
    assert_tensor(t.bitcast(dtypes.uint32), x.view(np.uint32))
    assert_tensor((t > 0).where(t, -t), np.where(x > 0, x, -x))

# ---------------------------------------------------------------- reductions, matmul, conv

@pytest.mark.parametrize("shape,axis", [((1000,), None), ((37, 129), 1), ((64, 48), 0), ((4, 5, 6, 7), (0, 2))])
def test_reductions(shape, axis, rng): check_reductions(LLVM, shape, axis, rng)

@pytest.mark.parametrize("m,k,n", [(128, 256, 96), (33, 17, 65), (1, 512, 1)])
def test_matmul(m, k, n, rng): check_matmul(LLVM, m, k, n, rng)

def test_padded_conv(rng): check_padded_conv(LLVM, rng)

def test_padded_lanes_are_masked_vector_loads_and_stores(rng):
    """Lanes a pad gates off are masked: llvm.masked.load reads 0 there and touches no memory (the first and last
    lane of a padded row would read outside the buffer); a row padded to a whole vector (PADTO) masks its stores."""
    x = rng.standard_normal((64, 62)).astype(np.float32)
    padded = Tensor(x, device=LLVM).pad(((0, 0), (1, 1))) * 2
    item = padded.schedule()[-1]
    opts = [Opt(OptOps.UPCAST, 1, 16)]
    assert "@llvm.masked.load.v16f32" in get_program(item.ast, Device[LLVM].renderer, opts).src
    np.testing.assert_array_equal(run_kernel(item, opts, LLVM)[0].reshape(64, 64), np.pad(x, ((0, 0), (1, 1))) * 2)
    pooled = rng.standard_normal((4, 8, 20, 20)).astype(np.float32)
    item = (Tensor(pooled, device=LLVM) * 2).max_pool2d().schedule()[-1]
    assert "@llvm.masked.store.v16f32" in get_program(item.ast, Device[LLVM].renderer).src
    np.testing.assert_array_equal(run_kernel(item, None, LLVM)[0].reshape(4, 8, 10, 10), (pooled * 2).reshape(4, 8, 10, 2, 10, 2).max((3, 5)))

def test_conv_and_pool_gradients_match_torch(rng): check_conv_and_pool_gradients(LLVM, rng)

@pytest.mark.parametrize("name", sorted(GRADIENT_FUNCTIONS))
def test_gradients_match_torch(name, rng): check_gradient_matches_torch(LLVM, name, rng)

# ---------------------------------------------------------------- random optimization actions

def test_random_action_lists_match_unoptimized():
    """Legal action lists (BEAM's candidates, picked at random) must compute what the unoptimized kernel computes."""
    checked, _kinds = check_random_action_lists(LLVM, tries=3)
    assert checked >= 10
