"""OptOps.TC: reduces run on a renderer's tensor core (the CPU's AVX512-BF16 instruction, emulated on PYTHON).

A tensor core computes bfloat16 products exactly in float32, where the unoptimized kernel of ``a @ b``
rounds each product to bfloat16 first, so results are checked against float64 math on the same
bfloat16 inputs (and CPU against PYTHON, which run the same instruction)."""
import os, subprocess, sys
import numpy as np
import pytest
from fusegrad import Tensor, Device, Context, dtypes
from fusegrad.codegen import get_program
from fusegrad.codegen.opt import Opt, OptOps, KernelOptError, apply_opt, hand_coded_optimizations
from fusegrad.codegen.opt.tc import tensor_core_choices
from fusegrad.codegen.opt.search import candidate_actions
from fusegrad.renderer.cstyle import ClangRenderer, BF16_TENSOR_CORE, _BF16_HELPER
from fusegrad.uop.ops import Ops
from test_opts import _kernel, _run

TC, U, R, P, T, S = OptOps.TC, OptOps.UPCAST, OptOps.UNROLL, OptOps.PADTO, OptOps.THREAD, OptOps.SWAP

def _bf16(rng, *shape) -> np.ndarray:
    """Random values that are exact in bfloat16 (float32 with the low 16 bits cleared)."""
    x = rng.standard_normal(shape).astype(np.float32)
    return (x.view(np.uint32) & 0xFFFF0000).view(np.float32)

def _matmul(m, k, n, epilogue=False):
    """``a @ b`` in bfloat16 summed in float32 and kept in float32 (so no rounding hides the sums);
    with ``epilogue``, a bias and relu follow, then the cast to bfloat16 (and to float32 for reading)."""
    rng = np.random.default_rng(m * 1000 + k * 10 + n)
    a, b, bias = _bf16(rng, m, k), _bf16(rng, k, n), _bf16(rng, n)
    reference = a.astype(np.float64) @ b.astype(np.float64)
    if epilogue: reference = np.maximum(reference + bias, 0)
    def build(device):
        ta = Tensor(a, device=device).cast(dtypes.bfloat16).realize()
        tb = Tensor(b, device=device).cast(dtypes.bfloat16).realize()
        if not epilogue: return ta.dot(tb, dtype=dtypes.float32)
        return (ta @ tb + Tensor(bias, device=device).cast(dtypes.bfloat16).realize()).relu().float()
    return build, reference

def _conv(batch=8, cin=8, h=8, w=8, cout=16):
    rng = np.random.default_rng(1)
    x, weight = _bf16(rng, batch, cin, h, w), _bf16(rng, cout, cin, 3, 3)
    import torch
    reference = torch.nn.functional.conv2d(torch.tensor(x, dtype=torch.float64), torch.tensor(weight, dtype=torch.float64), padding=1).numpy()
    def build(device):
        tx = Tensor(x, device=device).cast(dtypes.bfloat16).realize()
        tw = Tensor(weight, device=device).cast(dtypes.bfloat16).realize()
        return tx.conv2d(tw, padding=1, dtype=dtypes.float32)
    return build, reference

def _check(build, reference, opt_lists, device, bfloat16_output=False):
    """Each opt list applies, uses the tensor core and matches the float64 reference (to bfloat16's
    precision when the result was rounded to bfloat16)."""
    item = _kernel(build, device)
    for opts in opt_lists:
        program = get_program(item.ast, Device[device].renderer, opts)
        assert list(program.applied_opts) == opts
        assert any(u.op is Ops.WMMA for u in program.uops), opts
        out = _run(item, opts, device)
        tolerance = 1e-2 if bfloat16_output else 1e-5
        np.testing.assert_allclose(out.reshape(reference.shape), reference, rtol=tolerance, atol=tolerance, err_msg=str(opts))

MATMUL_OPTS = [[Opt(TC, 0, 0)], [Opt(TC, 0, 0), Opt(U, 1, 2)], [Opt(TC, 0, 0), Opt(U, 0, 4), Opt(U, 1, 3)],
               [Opt(TC, 0, 0), Opt(R, 2, 4)], [Opt(TC, 0, 0), Opt(U, 0, 8), Opt(S, 0, 1)], [Opt(TC, 1, 0)]]

@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_tc_matmul_matches_float64(device):
    _check(*_matmul(32, 64, 96), MATMUL_OPTS, device)

def test_tc_matmul_with_threads_and_odd_rows():
    _check(*_matmul(7, 32, 32), [[Opt(TC, 0, 0), Opt(U, 1, 2), Opt(T, 0, 2)], [Opt(TC, 0, 0), Opt(U, 0, 7)]], "CPU")

@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_tc_epilogue_is_repeated_per_lane(device):
    """Bias, relu and the cast to bfloat16 after the reduce run once per fragment lane."""
    _check(*_matmul(8, 32, 32, epilogue=True), [[Opt(TC, 0, 0)], [Opt(TC, 0, 0), Opt(U, 1, 2), Opt(U, 0, 4)]], device,
           bfloat16_output=True)

def test_tc_cpu_and_python_agree_bit_for_bit_on_exact_sums():
    """Small integers in bfloat16: every sum is exact, so the CPU instruction and the PYTHON emulation
    must agree exactly whatever order the hardware adds in."""
    rng = np.random.default_rng(3)
    a, b = rng.integers(-8, 8, (16, 64)).astype(np.float32), rng.integers(-8, 8, (64, 32)).astype(np.float32)
    def build(device):
        ta, tb = Tensor(a, device=device).cast(dtypes.bfloat16).realize(), Tensor(b, device=device).cast(dtypes.bfloat16).realize()
        return ta.dot(tb, dtype=dtypes.float32)
    outs = [_run(_kernel(build, device), [Opt(TC, 0, 0), Opt(U, 1, 2)], device) for device in ("CPU", "PYTHON")]
    np.testing.assert_array_equal(outs[0], outs[1])
    np.testing.assert_array_equal(outs[0].reshape(16, 32), a @ b)

@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_tc_conv_axis_choices(device):
    """A conv has a choice per (n, k) pair: output channels with the weights as b rows (gathered:
    strided), or image positions with the padded input (``valid.where(load, 0)``) as b rows (gated
    lanes), over each reduce axis."""
    build, reference = _conv()
    ast = _kernel(build, device).ast
    choices = tensor_core_choices(ast, Device[device].renderer, 0)
    assert len(choices) == 12   # 1 x 3 with the weights as b, 3 x 3 with the image as b
    # (the image axes, 8 long, are padded to 16: tc_opt 2)
    _check(build, reference, [[Opt(TC, i, 2)] for i in range(len(choices))] + [[Opt(TC, 0, 2), Opt(U, 0, 2)]], device)

def test_tc_opt_2_pads_axes_to_the_instruction():
    build, reference = _matmul(6, 7, 24)
    ast = _kernel(build, "PYTHON").ast
    with pytest.raises(KernelOptError, match=r"to be a multiple of 16 \(tc_opt 2 pads it\)"): apply_opt(ast, Opt(TC, 0, 0), Device["PYTHON"].renderer)
    for device in ("CPU", "PYTHON"): _check(build, reference, [[Opt(TC, 0, 2)], [Opt(TC, 0, 2), Opt(U, 0, 2)]], device)

def test_tc_operands_computed_or_cast_need_tc_opt_1():
    """``relu(a) @ b``: one factor is computed, not loaded; ``a.float() @ b.float()``: float casts of loads."""
    rng = np.random.default_rng(5)
    a, b = _bf16(rng, 16, 32), _bf16(rng, 32, 16)
    cases = {"computed": (lambda ta, tb: ta.relu().dot(tb, dtype=dtypes.float32), np.maximum(a, 0).astype(np.float64) @ b),
             "cast": (lambda ta, tb: ta.float() @ tb.float(), a.astype(np.float64) @ b)}
    for name, (fn, reference) in cases.items():
        build = lambda device, fn=fn: fn(Tensor(a, device=device).cast(dtypes.bfloat16).realize(), Tensor(b, device=device).cast(dtypes.bfloat16).realize())
        ast = _kernel(build, "PYTHON").ast
        with pytest.raises(KernelOptError, match="tc_opt 1 allows"): apply_opt(ast, Opt(TC, 0, 0), Device["PYTHON"].renderer)
        for device in ("CPU", "PYTHON"): _check(build, reference, [[Opt(TC, 0, 1)]], device)

@pytest.mark.parametrize("opts, message", [
    ([Opt(U, 0, 2), Opt(TC, 0, 0)], "TC must be the first action"),
    ([Opt(TC, 0, 0), Opt(TC, 0, 0)], "TC must be the first action"),
    ([Opt(TC, 5, 0)], r"TC axis choice 5 is out of range \(2 choices\)"),
    ([Opt(TC, 0, 3)], "tc_opt is 0, 1 or 2"),
])
def test_tc_illegal(opts, message):
    ast = _kernel(_matmul(16, 32, 32)[0], "PYTHON").ast
    renderer = Device["PYTHON"].renderer
    for opt in opts[:-1]: ast = apply_opt(ast, opt, renderer)
    with pytest.raises(KernelOptError, match=message): apply_opt(ast, opts[-1], renderer)

def test_tc_needs_a_renderer_that_declares_one():
    class NoTensorCores(ClangRenderer): tensor_cores = []
    ast = _kernel(_matmul(16, 32, 32)[0], "CPU").ast
    with pytest.raises(KernelOptError, match="the CPU renderer declares none"): apply_opt(ast, Opt(TC, 0, 0), NoTensorCores())
    assert all(o.op is not TC for o in candidate_actions(ast, NoTensorCores()))

def test_tc_needs_a_single_sum_of_products():
    """A max of products, or a float32 matmul, has nothing a bfloat16 tensor core computes."""
    rng = np.random.default_rng(2)
    a, b = _bf16(rng, 16, 32), _bf16(rng, 32, 16)
    def build(device):
        ta, tb = Tensor(a, device=device).cast(dtypes.bfloat16), Tensor(b, device=device).cast(dtypes.bfloat16)
        return (ta.reshape(16, 32, 1) * tb.reshape(1, 32, 16)).float().max(1)
    for make in (build, lambda device: Tensor(a, device=device) @ Tensor(b, device=device)):
        ast = _kernel(make, "PYTHON").ast
        assert tensor_core_choices(ast, Device["PYTHON"].renderer, 1) == []
        with pytest.raises(KernelOptError, match="no single sum of products"): apply_opt(ast, Opt(TC, 0, 1), Device["PYTHON"].renderer)

def test_heuristic_uses_the_tensor_core_for_bfloat16_matmuls():
    build, reference = _matmul(64, 64, 128)
    item = _kernel(build, "CPU")
    opts = hand_coded_optimizations(item.ast, Device["CPU"].renderer)
    assert opts[:3] == [Opt(TC, 0, 0), Opt(U, 1, 4), Opt(U, 0, 8)]
    program = get_program(item.ast, Device["CPU"].renderer)
    # 8 rows x 4 column blocks of instructions per reduce step, in one unrolled tile loop
    assert sum(u.op is Ops.WMMA for u in program.uops) == 1 and "fg_wmma_bf16_16x1x2(" in program.src
    np.testing.assert_allclose(_run(item, None, "CPU").reshape(reference.shape), reference, rtol=1e-5, atol=1e-5)
    with Context(TC=0): assert all(o.op is not TC for o in hand_coded_optimizations(item.ast, Device["CPU"].renderer))

def test_tc_packed_panel_holds_an_instructions_lanes():
    """(CPU: PACK is for CPU loops, and only its renderer has a tensor core) PACK after TC copies each column block's b rows into one panel (the instruction's 16 lanes of both k rows
    side by side), not one panel per lane; the product is unchanged, with and without an epilogue."""
    opts = [Opt(TC, 0, 0), Opt(U, 1, 2), Opt(U, 0, 4), Opt(S, 0, 1), Opt(OptOps.PACK, 0)]
    build, reference = _matmul(32, 64, 96)
    _check(build, reference, [opts, opts + [Opt(T, 0, 3)]], "CPU")
    _check(*_matmul(16, 32, 64, epilogue=True), [opts], "CPU", bfloat16_output=True)
    program = get_program(_kernel(build, "CPU").ast, Device["CPU"].renderer, opts)
    panels = [u for u in program.uops if u.op is Ops.DEFINE_REG and u.dtype.base.itemsize == 2]   # (bfloat16 bits)
    assert [p.dtype.size for p in panels] == [64 * 32], [p.dtype for p in panels]   # k 64 x 2 column blocks x 16 lanes

def test_heuristic_packs_the_tensor_core_tile_of_a_big_matmul():
    """512+ rows reuse each packed column panel 64+ times: 8 rows x 2 column blocks, columns outside, b packed."""
    build, reference = _matmul(512, 64, 64)
    item = _kernel(build, "CPU")
    opts = hand_coded_optimizations(item.ast, Device["CPU"].renderer)
    assert opts[:5] == [Opt(TC, 0, 0), Opt(U, 1, 2), Opt(U, 0, 8), Opt(S, 0, 1), Opt(OptOps.PACK, 0)], opts
    np.testing.assert_allclose(_run(item, None, "CPU").reshape(reference.shape), reference, rtol=1e-5, atol=1e-5)

@pytest.mark.parametrize("rows, tensor_core", [(64, True), (8, False)])
def test_heuristic_for_a_linear_layers_layout(rows, tensor_core):
    """``x @ w.T`` in bfloat16 (w's rows run along the reduce, so each tensor-core lane is another row of w): from 8
    row blocks the tile packs w's column panel (the lanes become contiguous); with fewer rows the CPU computes it
    without the tensor core, where the lanes were gathers."""
    rng = np.random.default_rng(rows)
    x, w = _bf16(rng, rows, 32), _bf16(rng, 64, 32)
    def build(device):
        tx, tw = (Tensor(v, device=device).cast(dtypes.bfloat16).realize() for v in (x, w))
        return tx.dot(tw.T, dtype=dtypes.float32)
    item = _kernel(build, "CPU")
    opts = hand_coded_optimizations(item.ast, Device["CPU"].renderer)
    assert any(o.op is TC for o in opts) is tensor_core and any(o.op is OptOps.PACK for o in opts) is tensor_core, opts
    reference = x.astype(np.float64) @ w.T.astype(np.float64)
    np.testing.assert_allclose(_run(item, None, "CPU").reshape(reference.shape), reference, rtol=1e-5, atol=1e-5)

def test_tensor_core_actions_in_search():
    """BEAM offers TC on every axis choice (and padded where an axis needs it); each computes the product."""
    build, reference = _matmul(8, 32, 24)
    item = _kernel(build, "PYTHON")
    actions = [a for a in candidate_actions(item.ast, Device["PYTHON"].renderer) if a.op is TC]
    assert actions == [Opt(TC, 0, 0), Opt(TC, 1, 0), Opt(TC, 0, 2), Opt(TC, 1, 2)]
    legal = []
    for action in actions:   # n is 24 (b's columns) or 8 (a's rows): only padded
        try: legal.append([action]) if apply_opt(item.ast, action, Device["PYTHON"].renderer) is not None else None
        except KernelOptError as error: assert "multiple of 16" in str(error)
    assert legal == [[Opt(TC, 0, 2)], [Opt(TC, 1, 2)]]
    _check(build, reference, legal, "PYTHON")

@pytest.mark.parametrize("flags", [["-march=native"], ["-march=native", "-DFG_NO_BF16_INSTRUCTIONS"]])
def test_bf16_helper_instruction_and_portable_code_agree(tmp_path, flags):
    """The CPU helper with the AVX512-BF16 instruction (where the CPU has it) and its portable float32
    code compute c + a0*b0 + a1*b1 per column on exact inputs."""
    a0, a1 = 1.5, -2.0
    b0, b1 = np.arange(16, dtype=np.float32) - 3, np.arange(16, dtype=np.float32) * 0.25
    c = np.arange(16, dtype=np.float32) * 100
    def bits(x): return ", ".join(str(v >> 16) for v in np.asarray(x, np.float32).view(np.uint32))
    program = _BF16_HELPER + f"""
#include <stdio.h>
int main(void) {{
  fg_u16x2 a = {{{bits([a0, a1])}}}; fg_u16x16 b0 = {{{bits(b0)}}}, b1 = {{{bits(b1)}}};
  fg_f32x16 c = {{{", ".join(map(str, c))}}};
  fg_f32x16 out = fg_wmma_bf16_16x1x2(a, b0, b1, c);
  for (int i = 0; i < 16; i++) printf("%.9g\\n", out[i]);
}}
"""
    source, binary = tmp_path / "wmma.c", tmp_path / "wmma"
    source.write_text(program)
    subprocess.run(["cc", "-O2", *flags, str(source), "-o", str(binary)], check=True)
    out = [float(line) for line in subprocess.run([str(binary)], capture_output=True, text=True, check=True).stdout.split()]
    np.testing.assert_array_equal(out, c + a0 * b0 + a1 * b1)
    assert BF16_TENSOR_CORE.dims == (16, 1, 2)

# ---------------------------------------------------------------- warp tensor cores (CUDA's mma.sync, emulated on PYTHON)

from fusegrad.renderer import FragmentLayout
from fusegrad.renderer.cuda import CUDARenderer, MMA_TENSOR_CORES, MMA_A, MMA_B, MMA_C
from fusegrad.runtime.ops_python import PythonRenderer, _warp_wmma
from fusegrad.codegen.opt.gpu_heuristic import gpu_optimizations
from helpers import run_kernel

EMULATED_CUDA = PythonRenderer("CUDA")
L = OptOps.LOCAL

def test_mma_fragment_layouts_cover_each_matrix_once():
    """Every (lane, element) of an m16n8k16 fragment names a different point of its matrix (a 16x16, b 16x8,
    c 16x8), and spot checks from the PTX ISA's tables: lane 4g+q holds a at row g (+8 for a2, a3, a6, a7),
    column 2q (+1 for odd elements, +8 from a4); b at row 2q (+1, +8 from b2) and column g; c at (g, 2q)."""
    for layout, shape in ((MMA_A, (16, 16)), (MMA_B, (16, 8)), (MMA_C, (16, 8))):
        points = {layout.coordinates(t, e) for t in range(32) for e in range(layout.elements)}
        assert points == {(r, c) for r in range(shape[0]) for c in range(shape[1])}
    g, q = 5, 3   # lane 23
    assert [MMA_A.coordinates(23, e) for e in range(8)] == \
        [(g, 2 * q), (g, 2 * q + 1), (g + 8, 2 * q), (g + 8, 2 * q + 1), (g, 2 * q + 8), (g, 2 * q + 9), (g + 8, 2 * q + 8), (g + 8, 2 * q + 9)]
    assert [MMA_B.coordinates(23, e) for e in range(4)] == [(2 * q, g), (2 * q + 1, g), (2 * q + 8, g), (2 * q + 9, g)]
    assert [MMA_C.coordinates(23, e) for e in range(4)] == [(g, 2 * q), (g, 2 * q + 1), (g + 8, 2 * q), (g + 8, 2 * q + 1)]
    with pytest.raises(AssertionError, match="fragments hold"):   # 32 lanes x 4 elements isn't a 16x16 a operand
        type(MMA_TENSOR_CORES[0])(dims=(8, 16, 16), dtype_in=dtypes.float16, dtype_out=dtypes.float32, name="bad", threads=32,
                                  layout=(MMA_C, MMA_B, MMA_C))

def _half_matmul(m, k, n, dtype, batch=None, epilogue=False):
    """``a @ b`` in half or bfloat16 (values exact in both), summed and kept in float32; with ``epilogue`` a
    bias and relu follow and the result is rounded to ``dtype``. Built on PYTHON; the float64 reference."""
    rng = np.random.default_rng(m * 1000 + k * 10 + n)
    lead = (batch,) if batch else ()
    a, b, bias = (rng.integers(-64, 64, shape).astype(np.float32) / 16 for shape in (lead + (m, k), lead + (k, n), (n,)))
    reference = np.matmul(a.astype(np.float64), b.astype(np.float64))
    if epilogue: reference = np.maximum(reference + bias, 0)
    ta, tb = (Tensor(x, device="PYTHON").cast(dtype).realize() for x in (a, b))
    if epilogue: out = (ta @ tb + Tensor(bias, device="PYTHON").cast(dtype).realize()).relu()
    else: out = ta.dot(tb, dtype=dtypes.float32)
    return out.schedule()[-1], reference

def _check_warp(item, reference, opt_lists, rounded=False):
    for opts in opt_lists:
        program = get_program(item.ast, EMULATED_CUDA, opts)
        wmma = [u for u in program.uops if u.op is Ops.WMMA]
        assert wmma and all(u.arg.threads == 32 for u in wmma), opts
        assert program.local_size[0] == 32, "the warp is local dim x"
        (out,) = run_kernel(item, opts, "PYTHON", EMULATED_CUDA)
        tolerance = 1e-2 if rounded else 1e-6   # (quarters of small integers: the float32 sums are exact)
        np.testing.assert_allclose(out.astype(np.float64).reshape(reference.shape), reference, rtol=tolerance, atol=tolerance, err_msg=str(opts))

WARP_OPTS = [[Opt(TC, 0, 0)], [Opt(TC, 0, 0), Opt(U, 1, 4), Opt(U, 0, 2)], [Opt(TC, 0, 0), Opt(L, 0, 2), Opt(L, 0, 2)],
             [Opt(TC, 0, 0), Opt(U, 1, 2), Opt(R, 2, 3), Opt(L, 0, 2)], [Opt(TC, 0, 0), Opt(R, 2, 0)], [Opt(TC, 1, 0)]]

@pytest.mark.parametrize("dtype", [dtypes.float16, dtypes.bfloat16])
def test_warp_tc_matmul_matches_float64(dtype):
    _check_warp(*_half_matmul(64, 48, 32, dtype), WARP_OPTS)

def test_warp_tc_epilogue_padding_and_batches():
    """Bias + relu + the cast back to half per element of a lane's sums; axes padded to the instruction
    (tc_opt 2: 20 x 24 x 40); a batched matmul (the batch stays a global axis)."""
    _check_warp(*_half_matmul(32, 32, 16, dtypes.float16, epilogue=True), [[Opt(TC, 0, 0), Opt(U, 0, 2)]], rounded=True)
    _check_warp(*_half_matmul(20, 24, 40, dtypes.float16), [[Opt(TC, 0, 2)], [Opt(TC, 0, 2), Opt(L, 0, 2)]])
    _check_warp(*_half_matmul(16, 32, 16, dtypes.bfloat16, batch=3), [[Opt(TC, 0, 0)], [Opt(TC, 0, 0), Opt(L, 0, 3)]])

def test_warp_tc_cuda_heuristic():
    """The GPU heuristic gives a half matmul the tensor core, a 2 x 4 tile of instructions per warp and
    2 x 2 warps per workgroup; TC=0 turns it off; the emulated kernel matches."""
    item, reference = _half_matmul(64, 32, 128, dtypes.float16)
    cuda = CUDARenderer(arch="sm_80")
    for renderer in (cuda, EMULATED_CUDA):
        opts = gpu_optimizations(item.ast, renderer)
        assert opts == [Opt(TC, 0, 0), Opt(U, 1, 4), Opt(U, 0, 2), Opt(L, 1, 2), Opt(L, 0, 2)], opts
        assert hand_coded_optimizations(item.ast, renderer) == opts
        with Context(TC=0): assert all(o.op is not TC for o in hand_coded_optimizations(item.ast, renderer))
    assert get_program(item.ast, EMULATED_CUDA).local_size == [32, 2, 2]
    (out,) = run_kernel(item, None, "PYTHON", EMULATED_CUDA)
    np.testing.assert_allclose(out.reshape(reference.shape), reference, rtol=1e-6, atol=1e-6)

def test_warp_tc_illegal():
    item, _ = _half_matmul(32, 32, 16, dtypes.float16)
    with pytest.raises(KernelOptError, match="TC after NOLOCALS"):
        apply_opt(apply_opt(item.ast, Opt(OptOps.NOLOCALS), EMULATED_CUDA), Opt(TC, 0, 0), EMULATED_CUDA)
    with pytest.raises(KernelOptError, match="multiple of 16"): apply_opt(_half_matmul(20, 32, 16, dtypes.float16)[0].ast, Opt(TC, 0, 0), EMULATED_CUDA)
    warped = apply_opt(item.ast, Opt(TC, 0, 0), EMULATED_CUDA)
    with pytest.raises(KernelOptError, match="TC must be the first action"): apply_opt(warped, Opt(TC, 0, 0), EMULATED_CUDA)
    small = PythonRenderer("CUDA")
    small.local_max_threads = 32
    with pytest.raises(KernelOptError, match="a workgroup of 64 threads exceeds"): apply_opt(warped, Opt(L, 0, 2), small)   # the warp counts
    assert CUDARenderer(arch="sm_75").tensor_cores == [] and CUDARenderer(arch="sm_90").tensor_cores == MMA_TENSOR_CORES

def test_warp_wmma_needs_whole_converged_warps():
    """The emulator runs a warp instruction on runs of 32 lanes; lanes of one warp that skip it, or a
    workgroup that isn't whole warps, are errors (undefined on the GPU)."""
    tc = MMA_TENSOR_CORES[0]
    a, b, c = np.ones((64, 8), np.float16), np.ones((64, 4), np.float16), np.zeros((64, 4), np.float32)
    out = _warp_wmma(tc, [a, b, c], 64, 64, None)
    np.testing.assert_array_equal(out, np.full((64, 4), 16, np.float32))   # 16 products of 1 per sum
    mask = np.zeros(64, bool)
    mask[32:] = True   # the second warp only: fine
    _warp_wmma(tc, [a, b, c], 64, 64, mask)
    mask[0] = True
    with pytest.raises(RuntimeError, match="some lanes of a warp skip"): _warp_wmma(tc, [a, b, c], 64, 64, mask)
    with pytest.raises(RuntimeError, match="isn't whole warps"): _warp_wmma(tc, [a, b, c], 48, 48, None)

def test_emulate_cuda_runs_tensors_through_the_warp_tensor_core():
    """``EMULATE=CUDA``: the PYTHON device renders like CUDA (its tensor cores and heuristic), end to end."""
    code = ("import numpy as np\nfrom fusegrad import Tensor, Device, dtypes\n"
            "a = np.arange(64 * 32, dtype=np.float32).reshape(64, 32) % 7 - 3\n"
            "out = (Tensor(a).half() @ Tensor(a.T.copy()).half()).float().numpy()\n"
            "print(Device['PYTHON'].renderer.tensor_cores[0].name, np.abs(out - a @ a.T).max())\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, "DEV": "PYTHON", "EMULATE": "CUDA"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["mma_m16n8k16_f16_f32", "0.0"]
    result = subprocess.run([sys.executable, "-c", "from fusegrad import Device; Device['PYTHON']"], capture_output=True, text=True,
                            env={**os.environ, "EMULATE": "METAL"})
    assert "emulates CUDA or nothing" in result.stderr
