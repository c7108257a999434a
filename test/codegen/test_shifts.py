"""Shifts by any amount give one answer everywhere: numpy's and PyTorch's (alu.py). An amount outside [0, width) of
the shifted value's dtype (negative, the width, past it) shifts every bit out: ``<<`` gives 0, ``>>`` the sign fill
(-1 for a negative signed value, else 0). C leaves those amounts undefined and backends disagree (x86 takes the
amount mod the width, LLVM's ``shl``/``ashr`` by the width is poison, so its store could be dropped), so
``codegen.lowering.guard_shifts`` guards every shift whose amount's bounds (vmin/vmax) leave [0, width), and only
those: constant and masked amounts (random numbers, bfloat16, fp8, sin) keep their plain shift.

Checked here: the constant folder (``exec_alu``), kernels on CPU, LLVM, CL and PYTHON (tensor amounts, constant amounts
in the kernel, constants folded before any kernel, register-tile vector code), CUDA's source through NVRTC, the range
analysis the guard decision rests on, and that the kernels of random numbers, bfloat16, fp8 and sin get no guard."""
import itertools
import numpy as np
import pytest
from fusegrad import Tensor, Device, dtypes
from fusegrad.codegen import get_program
from fusegrad.codegen.opt import Opt, OptOps
from fusegrad.dtype import DType
from fusegrad.uop.alu import exec_alu
from fusegrad.uop.ops import UOp, Ops
from helpers import run_kernel

NAMES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
DEVICES = ("CPU", "LLVM", "CL", "PYTHON")
SHIFT = {"<<": (Ops.SHL, np.left_shift, lambda a, b: a << b), ">>": (Ops.SHR, np.right_shift, lambda a, b: a >> b)}

def values_and_amounts(dtype: DType) -> tuple[list[int], list[int]]:
    """Values with both signs and the extremes; amounts at and around the width, far past it, negative, the extremes."""
    bits, lo, hi = 8 * dtype.itemsize, int(dtypes.min(dtype)), int(dtypes.max(dtype))
    if dtypes.is_unsigned(dtype): return [0, 1, 5, 200, hi], [0, 1, bits - 1, bits, bits + 1, 2 * bits + 3, hi]
    return [lo, -8, -1, 0, 1, 5, hi], [0, 1, bits - 1, bits, bits + 1, 2 * bits + 3, hi, -1, -bits, lo]

def pairs(name: str) -> tuple[np.ndarray, np.ndarray]:
    """Every value against every amount, as two flat numpy arrays of dtype ``name``."""
    values, amounts = values_and_amounts(getattr(dtypes, name))
    grid = list(itertools.product(values, amounts))
    return np.array([v for v, _ in grid], name), np.array([n for _, n in grid], name)

# ---------------------------------------------------------------- the rule

def test_numpy_and_pytorch_agree_on_the_rule():
    """The reference: numpy and PyTorch 2.13 (CPU) give 0 / the sign fill for every amount outside [0, width).
    (PyTorch has no shifts of uint16/32/64 on the CPU.)"""
    import torch
    for name in NAMES:
        x, n = pairs(name)
        bits = 8 * x.dtype.itemsize
        outside = (n.astype(np.int64) < 0) | (n.astype(np.float64) >= bits)
        for op, (_, np_shift, _) in SHIFT.items():
            want = np_shift(x, n)
            fill = np.zeros_like(x) if op == "<<" else np.where(x < 0, -1, 0).astype(x.dtype)
            np.testing.assert_array_equal(want[outside], fill[outside], err_msg=f"numpy {name} {op}")
            if name in ("uint16", "uint32", "uint64"): continue
            a, b = torch.from_numpy(x), torch.from_numpy(n)
            np.testing.assert_array_equal((a << b if op == "<<" else a >> b).numpy(), want, err_msg=f"torch {name} {op}")

@pytest.mark.parametrize("name", NAMES)
def test_constant_folding_matches_numpy(name):
    dtype = getattr(dtypes, name)
    x, n = pairs(name)
    for op, (uop, np_shift, _) in SHIFT.items():
        folded = [exec_alu(uop, dtype, (int(a), int(b))) for a, b in zip(x, n)]
        assert folded == np_shift(x, n).tolist(), f"{name} {op}"

def test_constant_folding_keeps_python_ints_small():
    """A huge amount is past the width like any other (Python's ``1 << 2**63`` would need an exabyte)."""
    assert exec_alu(Ops.SHL, dtypes.uint64, (1, 2**64 - 1)) == 0
    assert exec_alu(Ops.SHR, dtypes.int64, (-5, 2**63 - 1)) == -1
    assert exec_alu(Ops.SHR, dtypes.int64, (5, -2**63)) == 0

# ---------------------------------------------------------------- kernels on every backend

def _results(device: str, name: str, op: str) -> dict[str, list]:
    """``x op n`` on ``device``: n a tensor, n each constant in a kernel (one kernel: the results concatenated), and
    both constants (folded before any kernel runs)."""
    dtype = getattr(dtypes, name)
    _, _, apply = SHIFT[op]
    x, n = pairs(name)
    values, amounts = values_and_amounts(dtype)
    xs = Tensor(np.array(values, name), device=device)
    return {"tensor amounts": apply(Tensor(x, device=device), Tensor(n, device=device)),
            "constant amounts": Tensor.cat(*(apply(xs, amount) for amount in amounts)),
            "folded": Tensor.cat(*(apply(Tensor.full((1,), int(v), dtype=dtype, device=device), Tensor.full((1,), int(b), dtype=dtype, device=device))
                                   for v, b in zip(x, n)))}

@pytest.mark.parametrize("device", DEVICES)
def test_kernels_match_numpy(device):
    for name in NAMES:
        x, n = pairs(name)
        values, amounts = values_and_amounts(getattr(dtypes, name))
        by_amount = np.array(values, name)
        for op, (_, np_shift, _) in SHIFT.items():
            want = {"tensor amounts": np_shift(x, n), "folded": np_shift(x, n),
                    "constant amounts": np.concatenate([np_shift(by_amount, np.array(a, name)) for a in amounts])}
            for how, result in _results(device, name, op).items():
                assert result.dtype == getattr(dtypes, name), f"{device} {name} {op} {how}: {result.dtype}"
                np.testing.assert_array_equal(result.numpy(), want[how], err_msg=f"{device} {name} {op} {how}")

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", ["int8", "uint16", "int32", "uint32", "int64"])
def test_register_tile_vector_code_matches_numpy(device, name, rng):
    """An UPCAST tile makes the shift, its compare and its select vector ops (gcc vectors, LLVM ``<8 x i32>``,
    OpenCL ``int8``): each lane must still get its own answer. run_kernel poisons the output first, so a dropped
    store (LLVM's poison) fails too."""
    npdt = np.dtype(name)
    bits, info = 8 * npdt.itemsize, np.iinfo(npdt)
    x = rng.integers(info.min, info.max, size=64, dtype=npdt, endpoint=True)
    n = rng.integers(0 if info.min == 0 else -bits - 2, 2 * bits + 2, size=64).astype(npdt)
    a, b = Tensor(x, device=device).realize(), Tensor(n, device=device).realize()
    for op, (_, np_shift, apply) in SHIFT.items():
        item = apply(a, b).schedule()[-1]
        np.testing.assert_array_equal(run_kernel(item, [Opt(OptOps.UPCAST, 0, 8)], device)[0], np_shift(x, n), err_msg=f"{device} {name} {op}")

def test_llvm_store_of_a_shift_by_the_width_is_not_dropped():
    """The reported bug: ``ashr i32 %v, 32`` is poison and LLVM dropped the store, leaving the memory's old contents."""
    old = (Tensor([1234567, 7654321, 42], dtype=dtypes.int32, device="LLVM") + 1).realize()
    old.tolist()
    del old
    x = Tensor([-8, 8, 1], dtype=dtypes.int32, device="LLVM").realize()
    assert (x >> 32).tolist() == [-1, 0, 0]
    assert (x >> Tensor([32, 33, 100], dtype=dtypes.int32, device="LLVM")).tolist() == [-1, 0, 0]

def test_the_amount_is_read_in_its_own_dtype():
    """A shift whose amount has another dtype than the value: an int32 259 (past int8's width) must not be narrowed
    to int8 first (3, in range). The PYTHON interpreter runs the raw uop; the guard makes the kernels agree."""
    from fusegrad.runtime.ops_python import _alu
    got = _alu(Ops.SHL, dtypes.int8, [dtypes.int8, dtypes.int32], [np.array([1, 1, -3], np.int8), np.array([259, -1, 2], np.int32)])
    assert got.tolist() == [0, 0, -12]
    got = _alu(Ops.SHR, dtypes.int8, [dtypes.int8, dtypes.uint64], [np.array([-3, 100], np.int8), np.array([2**63 + 1, 7], np.uint64)])
    assert got.tolist() == [-1, 0]

def test_guarded_kernels_compile_for_cuda():
    """CUDA C is C++, where these amounts are undefined too: the guarded kernels must render and compile (NVRTC)."""
    from fusegrad.renderer.cuda import CUDARenderer
    from fusegrad.runtime.ops_cuda import CUDACompiler
    renderer, compiler = CUDARenderer(arch="sm_80"), CUDACompiler("sm_80")
    for value, amount in ((dtypes.int64, dtypes.int8), (dtypes.uint8, dtypes.uint8), (dtypes.int32, dtypes.int32)):
        x, n = Tensor.empty(64, dtype=value), Tensor.empty(64, dtype=amount)
        for shifted in (x << n, x >> n):
            program = get_program(shifted.schedule()[-1].ast, renderer)
            assert f".entry {program.name}(" in compiler.compile(program.src).decode()

# ---------------------------------------------------------------- no guard where the amount is known to be in range

def _uops(tensor: Tensor, device: str) -> list[list[UOp]]:
    """The linear programs of ``tensor``'s kernels on ``device`` (earlier kernels run, so inputs exist)."""
    from fusegrad.engine.realize import lower_schedule_item
    programs = []
    for item in tensor.schedule():
        if item.ast.op is Ops.SINK: programs.append(get_program(item.ast, Device[device].renderer).uops)
        lower_schedule_item(item).run()
    return programs

NO_GUARD = {
    "random numbers": lambda d: Tensor.rand(1000, device=d),
    "bfloat16 matmul": lambda d: Tensor.ones(32, 32, dtype=dtypes.bfloat16, device=d).contiguous() @ Tensor.ones(32, 32, dtype=dtypes.bfloat16, device=d).contiguous(),
    "fp8 round trip": lambda d: Tensor.linspace(-3, 3, 64, device=d).cast(dtypes.fp8e4m3).cast(dtypes.float32),
    "sin": lambda d: Tensor.linspace(-30, 30, 64, device=d).sin(),
    "constant shift amounts": lambda d: (Tensor.arange(64, dtype=dtypes.int32, device=d) << 3) + (Tensor.arange(64, dtype=dtypes.uint32, device=d) >> 31),
}

@pytest.mark.parametrize("device", ["CPU", "LLVM"])
@pytest.mark.parametrize("case", list(NO_GUARD))
def test_known_amounts_get_no_guard(case, device, monkeypatch):
    """Amounts the range analysis bounds to [0, width): constants, random numbers' rotations, bfloat16's ``<< 16``,
    fp8's clamped subnormal shift and sin's ``31 - (e & 31)``. The kernels must be the same with guard_shifts off."""
    import fusegrad.codegen as codegen
    Tensor.manual_seed(0)
    guarded = _uops(NO_GUARD[case](device), device)
    assert any(u.op in (Ops.SHL, Ops.SHR) for program in guarded for u in program), "no shift to check"
    monkeypatch.setattr(codegen, "guard_shifts", lambda sink: sink)
    Tensor.manual_seed(0)
    plain = _uops(NO_GUARD[case](device), device)
    assert [len(p) for p in guarded] == [len(p) for p in plain]
    assert [[(u.op, u.dtype, u.arg) for u in p] for p in guarded] == [[(u.op, u.dtype, u.arg) for u in p] for p in plain]

@pytest.mark.parametrize("amount", [dtypes.uint32, dtypes.int32])
def test_a_tensor_amount_gets_one_guard(amount, monkeypatch):
    """The guard of ``x << n`` is a compare, a mask and a select, plus a cast to unsigned when n may be negative (one
    unsigned compare tests both ends); without guard_shifts the kernel has none of them."""
    import fusegrad.codegen as codegen
    ast = (Tensor.empty(64, dtype=dtypes.uint32) << Tensor.empty(64, dtype=amount)).schedule()[-1].ast
    def alu_ops() -> list[Ops]: return [u.op for u in get_program(ast, Device["CPU"].renderer, []).uops if u.op in (Ops.CAST, Ops.CMPLT, Ops.AND, Ops.WHERE, Ops.SHL)]
    guarded = alu_ops()
    monkeypatch.setattr(codegen, "guard_shifts", lambda sink: sink)
    plain = alu_ops()
    guard = [Ops.CMPLT, Ops.AND, Ops.WHERE] + ([Ops.CAST] if amount == dtypes.int32 else [])
    assert sorted(guarded, key=lambda op: op.value) == sorted(plain + guard, key=lambda op: op.value), (guarded, plain)

# ---------------------------------------------------------------- the range analysis the guard decision uses

def _variable(name: str, lo: int, hi: int, dtype: DType) -> UOp: return UOp.variable(name, lo, hi, dtype)

def _check_bounds(expr: UOp, variables: list[UOp]) -> None:
    """Every node's value, for every assignment of the variables, lies within its vmin/vmax (exec_alu evaluates)."""
    for values in itertools.product(*(range(v.arg[1], v.arg[2] + 1) for v in variables)):
        env = dict(zip(variables, values))
        seen: dict[UOp, int] = {}
        for node in expr.toposort:
            if node.op is Ops.DEFINE_VAR: seen[node] = env[node]
            elif node.op is Ops.CONST: seen[node] = node.arg
            else: seen[node] = exec_alu(node.op, node.dtype, tuple(seen[s] for s in node.src))
            assert node.vmin <= seen[node] <= node.vmax, f"{node.op} = {seen[node]} outside [{node.vmin}, {node.vmax}] at {values}"

def test_bounds_of_a_clamp_a_difference_and_unsigned_wrap():
    u32, i8 = dtypes.uint32, dtypes.int8
    e = _variable("e", 0, 255, u32)
    lowest, highest = UOp.const(u32, 116), UOp.const(u32, 140)
    clamped = (highest < e.maximum(lowest)).where(highest, e.maximum(lowest))   # fp8's exponent clamp: min(max(e, 116), 140)
    assert (clamped.vmin, clamped.vmax) == (116, 140)
    larger = (e < highest).where(highest, e)                                     # max(e, 140)
    assert (larger.vmin, larger.vmax) == (140, 255)
    shift = UOp.const(u32, 141) - clamped                                        # an unsigned a - b is a + (-b)
    assert (shift.vmin, shift.vmax) == (1, 25)
    assert ((shift - 1).vmin, (shift - 1).vmax) == (0, 24)                       # + 0xFFFFFFFF wraps the whole interval
    rest = UOp.const(u32, 31) - (e & 31)                                         # sin's 31 - (e & 31): -0 doesn't wrap, -1 does
    assert (rest.vmin, rest.vmax) == (0, 31)
    assert ((e - 1).vmin, (e - 1).vmax) == (0, 2**32 - 1)                        # e = 0 wraps, the rest doesn't
    n = _variable("n", -128, 127, i8)
    assert ((n & 7).vmin, (n & 7).vmax) == (0, 7)                                # a non-negative mask of a signed value
    for expr, variables in ((clamped, [e]), (larger, [e]), (shift - 1, [e]), (rest, [e]), (e - 1, [e]), (n & 7, [n])): _check_bounds(expr, variables)

def test_bounds_of_shifts_by_a_range():
    u8, i8 = dtypes.uint8, dtypes.int8
    x, n = _variable("x", 0, 20, u8), _variable("n", 0, 9, u8)
    assert ((x >> n).vmin, (x >> n).vmax) == (0, 20)
    assert ((x << n).vmin, (x << n).vmax) == (0, 255)    # may overflow: the whole range
    small = _variable("s", 0, 3, u8)
    assert ((x << small).vmin, (x << small).vmax) == (0, 160)
    _check_bounds(x >> n, [x, n]), _check_bounds(x << n, [x, n]), _check_bounds(x << small, [x, small])
    # a negative constant amount has bounds (it raised ValueError: Python has no negative shift)
    y = _variable("y", -5, 5, i8)
    for shifted in (y << UOp.const(i8, -1), y >> UOp.const(i8, -3), x << UOp.const(u8, 200)):
        assert (shifted.vmin, shifted.vmax) == (dtypes.min(shifted.dtype), dtypes.max(shifted.dtype))
    m = _variable("m", -9, 9, i8)
    _check_bounds(y >> m, [y, m]), _check_bounds(y << m, [y, m])
