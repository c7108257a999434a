"""Floating-point contraction happens only where the IR asks for it (MULACC, written by codegen/lowering.py into a
sum of products), never where a compiler decides to fuse a multiply and an add on its own.

The C compiler's choice depended on the CPU: on Sapphire Rapids (AVX512-FP16) gcc fused half ``a*a + c`` into a
native half FMA, so test_cstyle's exact half tests failed there and passed on a Zen 4. This file checks the other CPU
kinds without owning them: each kernel is compiled with the CPU device's own flags for several ``-march`` targets
(Sapphire Rapids, a plain AVX-512 machine with the FP16 extension, Haswell-class AVX2) and the assembly is read: a
kernel without MULACC has no FMA instruction on any of them, and a matmul has its FMAs on all of them."""
from __future__ import annotations
import re, subprocess
import numpy as np
import pytest
from fusegrad import Tensor, dtypes, nn
from fusegrad.device import Device
from fusegrad.codegen import get_program
from fusegrad.runtime.ops_cpu import ClangCompiler, _compiler_command
from fusegrad.uop.ops import Ops

# -march targets standing for the CPU kinds CI may land on; gcc compiles for each whatever this machine is
TARGETS = ["sapphirerapids", "x86-64-v4 -mavx512fp16", "haswell", "native"]
FMA_INSTRUCTION = re.compile(r"\bv?f(n)?m(add|sub)[0-9a-z]*\b")   # vfmadd231ps, vfnmsub213sh, vfmaddsub...

def _assembly(src: str, march: str) -> str:
    """The kernel's assembly with the CPU device's flags, ``-march=native`` replaced by ``march``."""
    flags = [f for f in ClangCompiler.base_flags if f not in ("-shared", "-march=native")] + march_flags(march)
    result = subprocess.run(_compiler_command() + flags + ["-fopenmp", "-S", "-o", "-", "-x", "c", "-"], input=src.encode(), capture_output=True)
    assert result.returncode == 0, result.stderr.decode()
    return result.stdout.decode()

def march_flags(march: str) -> list[str]:
    first, *rest = march.split()
    return [f"-march={first}", *rest]

def _kernels(*tensors: Tensor) -> list:
    """The programs (CPU renderer) of every kernel that realizing ``tensors`` runs."""
    schedule = Tensor.schedule(*tensors) if len(tensors) > 1 else tensors[0].schedule()
    return [get_program(item.ast, Device["CPU"].renderer) for item in schedule if item.ast.op is Ops.SINK]

def _elementwise_cases() -> dict[str, list]:
    rng = np.random.default_rng(0)
    half = Tensor(rng.standard_normal(64).astype(np.float16), device="CPU")
    x = Tensor(rng.standard_normal((8, 16, 5, 5)).astype(np.float32), device="CPU")
    y = Tensor(rng.standard_normal(1000).astype(np.float32), device="CPU")
    return {"half a*a+c": _kernels(half * half + half),
            "float a*b+c": _kernels(y * y + 0.5),
            "randn": _kernels(Tensor.randn(1000, device="CPU") * 2 + 1),
            "batchnorm": _kernels(nn.BatchNorm(16)(x)),
            "gelu": _kernels(y.gelu() * y + y)}

@pytest.mark.parametrize("march", TARGETS)
def test_no_fma_where_the_ir_has_no_mulacc(march):
    for name, programs in _elementwise_cases().items():
        for program in programs:
            if any(u.op is Ops.MULACC for u in program.uops): continue   # a reduce of products: fused on purpose
            fused = FMA_INSTRUCTION.findall(_assembly(program.src, march))
            assert not fused, f"{name}: gcc -march={march} fused a multiply and an add in {program.name}"

@pytest.mark.parametrize("march", TARGETS)
def test_matmul_accumulates_with_fma(march):
    a, b = Tensor.randn(256, 256, device="CPU"), Tensor.randn(256, 256, device="CPU")
    (program,) = [p for p in _kernels(a @ b) if p.name.startswith("r_")]
    assert any(u.op is Ops.MULACC for u in program.uops)
    assert FMA_INSTRUCTION.search(_assembly(program.src, march)), f"-march={march}: no FMA in the matmul"

def test_sum_of_products_becomes_mulacc_only_for_float32_and_float64():
    rng = np.random.default_rng(1)
    for dtype, fused in ((dtypes.float32, True), (dtypes.float64, True), (dtypes.float16, False), (dtypes.int32, False)):
        a = Tensor(rng.integers(-3, 3, (16, 16)), device="CPU").cast(dtype)
        programs = _kernels((a * a).sum(axis=1))
        assert any(u.op is Ops.MULACC for p in programs for u in p.uops) == fused, dtype
    # a sum of a value that is not a product, and an elementwise product plus a value, stay as written
    x = Tensor(rng.standard_normal((16, 16)).astype(np.float32), device="CPU")
    assert not any(u.op is Ops.MULACC for p in _kernels((x + 1).sum(axis=1)) + _kernels(x * x + 1) for u in p.uops)

@pytest.mark.parametrize("device", ["CPU", "PYTHON", "LLVM"])
def test_mulacc_rounds_once(device):
    # e = 1 + 2^-12: e*e = 1 + 2^-11 + 2^-24 exactly, and rounded to float32 the 2^-24 (half an ulp of 1, a tie) is
    # lost. The sum -1*1 + e*e is the running sum -1 updated by one fused multiply-add: 2^-11 + 2^-24 exactly. Rounding
    # the product first would give 2^-11. (Two terms keep both products in one lane of the accumulator.)
    e = np.float32(1 + 2 ** -12)
    a = Tensor(np.array([-1, e], np.float32), device=device)
    b = Tensor(np.array([1, e], np.float32), device=device)
    assert (a * b).sum().item() == 2 ** -11 + 2 ** -24
    assert a.dot(b).item() == 2 ** -11 + 2 ** -24

def test_same_value_in_two_kernels_has_the_same_bits():
    Tensor.manual_seed(0)
    a, b = Tensor.randn(10, 10, device="CPU"), Tensor.randn(10, 10, device="CPU")
    fused_here = (a + b).numpy()
    a += b   # the randn values are computed again, now inside the assign's kernel
    np.testing.assert_array_equal(a.numpy(), fused_here)
