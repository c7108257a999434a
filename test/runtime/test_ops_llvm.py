"""The LLVM device (LLVM IR compiled in-process by llvmlite), in the normal suite: CI runs only the CPU suite, so
this is a representative subset on LLVM — ops against numpy, gradients against PyTorch, a matmul, convs,
reductions, random optimization action lists — plus what is particular to the backend (names, no threads,
inf/NaN semantics, traps, masked vector loads). ``DEV=LLVM python -m pytest test/test_tensor_ops.py ...``
runs the full op, gradient and opt-fuzz tests on it."""
import random
import numpy as np
import pytest
import torch
from fusegrad import Tensor, Device, dtypes
from fusegrad.codegen import get_program
from fusegrad.codegen.opt import Opt, OptOps, KernelOptError, apply_opt
from fusegrad.renderer.llvmir import LLVMRenderer, llvm_const
from helpers import assert_tensor, rand_np, run_kernel, random_action_list, searchable_ast

LLVM = "LLVM"

# ---------------------------------------------------------------- the device

def test_device_names():
    assert Device.canonicalize("llvm") == LLVM
    assert Device.canonicalize("CPU:LLVM") == LLVM   # tinygrad's spelling
    assert isinstance(Device[LLVM].renderer, LLVMRenderer)

def test_threads_are_illegal():
    a = Tensor(np.ones((64, 64), np.float32), device=LLVM)
    ast = searchable_ast((a + 1).schedule()[-1].ast)
    with pytest.raises(KernelOptError, match="no threads"): apply_opt(ast, Opt(OptOps.THREAD, 0, 2), Device[LLVM].renderer)

def test_fast_math_flags_keep_inf_and_nan():
    """Only ``contract`` is set: nnan/ninf would let LLVM fold away the inf/NaN results below."""
    a = Tensor(np.array([np.inf, -np.inf, np.nan, 1.0, 0.0], np.float32), device=LLVM)
    src = get_program((a * 2 + 1).schedule()[-1].ast, Device[LLVM].renderer).src
    assert "contract" in src and not any(flag in src for flag in (" fast ", "nnan", "ninf", "reassoc", "arcp"))
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

UNARY = {"neg": (lambda t: -t, np.negative), "exp": (Tensor.exp, np.exp), "log": (Tensor.log, np.log),
         "sqrt": (Tensor.sqrt, np.sqrt), "sin": (Tensor.sin, np.sin), "relu": (Tensor.relu, lambda x: np.maximum(x, 0)),
         "reciprocal": (Tensor.reciprocal, np.reciprocal), "trunc": (Tensor.trunc, np.trunc)}

@pytest.mark.parametrize("name", sorted(UNARY))
@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.float64, dtypes.float16])
def test_unary(name, dtype, rng):
    ours, theirs = UNARY[name]
    x = rand_np(rng, (7, 33), dtype, low=0.1 if name in ("log", "sqrt") else -3, high=3)
    assert_tensor(ours(Tensor(x, device=LLVM)), theirs(x), dtype, rtol=2e-6 if dtype == dtypes.float32 else None)

BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "max": np.maximum, "lt": np.less, "eq": np.equal, "ne": np.not_equal}

@pytest.mark.parametrize("name", sorted(BINARY))
@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.int32, dtypes.int8, dtypes.uint8, dtypes.int64, dtypes.uint32, dtypes.bool])
def test_binary(name, dtype, rng):
    if dtype == dtypes.bool and name == "sub": return   # numpy has no bool subtraction either
    x, y = rand_np(rng, (5, 40), dtype), rand_np(rng, (5, 40), dtype)
    a, b = Tensor(x, device=LLVM), Tensor(y, device=LLVM)
    ours = {"add": a + b, "sub": a - b, "mul": a * b, "max": a.maximum(b), "lt": a < b, "eq": a == b, "ne": a != b}[name]
    assert_tensor(ours, BINARY[name](x, y))

@pytest.mark.parametrize("dtype", [dtypes.int32, dtypes.int8, dtypes.int64, dtypes.uint32])
def test_integer_division_never_traps(dtype):
    """x / 0, x % 0 and MIN / -1 would raise SIGFPE on x86: they give 0, 0 and MIN (two's complement wrap), as numpy."""
    np_type, low = np.dtype(dtype.fmt), dtypes.min(dtype)
    minus_one = -1 if not dtypes.is_unsigned(dtype) else 3
    x = np.array([7, -7 if not dtypes.is_unsigned(dtype) else 9, 7, low, low, 5, 0, 100], dtype=np_type)
    y = np.array([2, 2, 0, minus_one, 0, 3, 0, 7], dtype=np_type)
    wide_x, wide_y = x.astype(object), y.astype(object)   # exact Python ints: C's truncating division by hand
    quotient = [0 if b == 0 else (abs(a) // abs(b)) * (1 if (a < 0) == (b < 0) else -1) for a, b in zip(wide_x, wide_y)]
    remainder = [0 if b == 0 else a - b * q for a, b, q in zip(wide_x, wide_y, quotient)]
    wrap = lambda values: np.array([int(v) & ((1 << (8 * dtype.itemsize)) - 1) for v in values], dtype=np.uint64).astype(np_type)
    a, b = Tensor(x, device=LLVM), Tensor(y, device=LLVM)
    assert_tensor(a.idiv(b), wrap(quotient))
    assert_tensor(a.fmod(b), wrap(remainder))

CASTS = [(dtypes.float32, dtypes.int32), (dtypes.float32, dtypes.uint8), (dtypes.int32, dtypes.float16), (dtypes.float64, dtypes.float16),
         (dtypes.float16, dtypes.float64), (dtypes.int8, dtypes.int64), (dtypes.uint16, dtypes.int32), (dtypes.int64, dtypes.int8),
         (dtypes.float32, dtypes.bool), (dtypes.bool, dtypes.float32), (dtypes.int32, dtypes.bool), (dtypes.uint32, dtypes.float32)]

@pytest.mark.parametrize("source,target", CASTS)
def test_cast(source, target, rng):
    x = rand_np(rng, (3, 37), source, low=0 if dtypes.is_unsigned(target) else None, high=100 if source != dtypes.bool else None)
    assert_tensor(Tensor(x, device=LLVM).cast(target), x.astype(np.dtype(target.fmt)), target)

def test_bitcast_and_where():
    x = np.array([1.0, -2.0, 0.0, np.inf] * 5, np.float32)
    t = Tensor(x, device=LLVM)
    assert_tensor(t.bitcast(dtypes.uint32), x.view(np.uint32))
    assert_tensor((t > 0).where(t, -t), np.where(x > 0, x, -x))

# ---------------------------------------------------------------- reductions, matmul, conv

@pytest.mark.parametrize("shape,axis", [((1000,), None), ((37, 129), 1), ((64, 48), 0), ((4, 5, 6, 7), (0, 2))])
def test_reductions(shape, axis, rng):
    x = rng.standard_normal(shape).astype(np.float32)
    t = Tensor(x, device=LLVM)
    assert_tensor(t.sum(axis), x.sum(axis), rtol=1e-4, atol=1e-4)
    assert_tensor(t.max(axis), x.max(axis))
    assert_tensor(t.mean(axis), x.mean(axis), rtol=1e-4, atol=1e-5)
    assert_tensor(Tensor(x.astype(np.int32), device=LLVM).sum(axis), x.astype(np.int32).sum(axis).astype(np.int32))

@pytest.mark.parametrize("m,k,n", [(128, 256, 96), (33, 17, 65), (1, 512, 1)])
def test_matmul(m, k, n, rng):
    a, b = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
    assert_tensor(Tensor(a, device=LLVM) @ Tensor(b, device=LLVM), a @ b, rtol=1e-4, atol=1e-4)

def test_padded_conv(rng):
    x, w = rng.standard_normal((2, 16, 14, 14)).astype(np.float32), rng.standard_normal((32, 16, 3, 3)).astype(np.float32)
    out = Tensor(x, device=LLVM).conv2d(Tensor(w, device=LLVM), padding=1)
    want = torch.nn.functional.conv2d(torch.tensor(x), torch.tensor(w), padding=1).numpy()
    assert_tensor(out, want, rtol=1e-4, atol=1e-4)

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

def test_conv_and_pool_gradients_match_torch(rng):
    x, w = rng.standard_normal((2, 3, 12, 12)).astype(np.float32), rng.standard_normal((8, 3, 3, 3)).astype(np.float32)
    tx, tw = Tensor(x, device=LLVM, requires_grad=True), Tensor(w, device=LLVM, requires_grad=True)
    loss = tx.conv2d(tw, stride=2, padding=1).relu().max_pool2d().square().sum()
    loss.backward()
    px, pw = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    torch.nn.functional.max_pool2d(torch.nn.functional.conv2d(px, pw, stride=2, padding=1).relu(), 2).square().sum().backward()
    np.testing.assert_allclose(tx.grad.numpy(), px.grad.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(tw.grad.numpy(), pw.grad.numpy(), rtol=1e-4, atol=1e-4)

GRADIENT_FUNCTIONS = {"tanh": lambda t: t.tanh(), "sigmoid": lambda t: t.sigmoid(), "softmax": lambda t: t.softmax(-1),
                      "log_softmax": lambda t: t.log_softmax(-1), "gelu": lambda t: t.gelu(), "pow": lambda t: t.abs() ** 1.5,
                      "layernorm": lambda t: t.layernorm(), "cumsum": lambda t: t.cumsum(1)}

@pytest.mark.parametrize("name", sorted(GRADIENT_FUNCTIONS))
def test_gradients_match_torch(name, rng):
    x = rng.standard_normal((6, 20)).astype(np.float32)
    fn = GRADIENT_FUNCTIONS[name]
    ours = Tensor(x, device=LLVM, requires_grad=True)
    (fn(ours) * Tensor(np.arange(20, dtype=np.float32), device=LLVM)).sum().backward()
    theirs = torch.tensor(x, requires_grad=True)
    torch_fn = {"tanh": torch.tanh, "sigmoid": torch.sigmoid, "softmax": lambda t: t.softmax(-1), "log_softmax": lambda t: t.log_softmax(-1),
                "gelu": lambda t: torch.nn.functional.gelu(t, approximate="tanh"), "pow": lambda t: t.abs() ** 1.5,
                "layernorm": lambda t: torch.nn.functional.layer_norm(t, (20,), eps=1e-5), "cumsum": lambda t: t.cumsum(1)}[name]
    (torch_fn(theirs) * torch.arange(20, dtype=torch.float32)).sum().backward()
    np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), rtol=1e-3, atol=1e-4)

# ---------------------------------------------------------------- random optimization actions

def _training_items():
    rng = np.random.default_rng(3)
    x = Tensor(rng.standard_normal((4, 8, 10, 10)).astype(np.float32), device=LLVM).realize()
    w = Tensor(rng.standard_normal((16, 8, 3, 3)).astype(np.float32), device=LLVM, requires_grad=True).realize()
    v = Tensor(rng.standard_normal((48, 40)).astype(np.float32), device=LLVM, requires_grad=True).realize()
    loss = x.conv2d(w, padding=1).relu().mean() + (v @ v.T).softmax(-1).sum() + v.max(0).sum()
    return Tensor.schedule(loss, *loss.gradient(w, v))

def test_random_action_lists_match_unoptimized():
    """Legal action lists (BEAM's candidates, picked at random) must compute what the unoptimized kernel computes."""
    from fusegrad.engine.realize import lower_schedule_item
    from fusegrad.uop.ops import Ops
    choose, checked = random.Random(0), 0
    for item in _training_items():
        if item.ast.op is Ops.SINK:
            reference = run_kernel(item, [], LLVM)
            for _ in range(3):
                _, opts = random_action_list(searchable_ast(item.ast), Device[LLVM].renderer, choose)
                for got, want in zip(run_kernel(item, opts, LLVM), reference):
                    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, equal_nan=True, err_msg=f"{item.ast.arg} with {opts}")
                checked += 1
        lower_schedule_item(item).run()   # later kernels read its outputs
    assert checked >= 10
