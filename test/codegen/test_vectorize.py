"""Innermost UPCAST loops as gcc vector code (codegen/vectorize.py): the rendered C has vector
loads where the loop body is contiguous and scalar loops where it must fall back, and every
kernel computes what the unoptimized (NOOPT) kernel computes, and what the same kernel computes
with VECTORIZE=0 (fused multiply-adds are MULACCs in the IR, the same in scalar and vector code)."""
import re
import numpy as np
import pytest
from fusegrad import Tensor, Device, Context
from fusegrad.codegen import get_program
from fusegrad.codegen.opt import Opt, OptOps
from fusegrad.codegen.vectorize import vectorize_upcasts
from fusegrad.uop.ops import Ops, GroupOp
from test_opts import _kernel, _run, _matmul, _elementwise as _transposed, _reduce_rows as _reduce   # (x.permute(1, 0) * 3 + 1)

def _elementwise(m, n):
    def build(device):
        x = Tensor(np.random.default_rng(m).standard_normal((m, n)).astype(np.float32), device=device).realize()
        return (x * 3 + 1).relu().exp() + x.maximum(0.5)
    return build

def _conv(cin, cout, size):
    def build(device):
        rng = np.random.default_rng(cout)
        x = Tensor(rng.standard_normal((2, cin, size + 2, size + 2)).astype(np.float32), device=device).realize()
        w = Tensor(rng.standard_normal((cout, cin, 3, 3)).astype(np.float32), device=device).realize()
        return x.conv2d(w).relu()
    return build

def _padded(m, n):
    def build(device):
        x = Tensor(np.random.default_rng(0).standard_normal((m, n - 2)).astype(np.float32), device=device).realize()
        return x.pad(((0, 0), (1, 1))) * 2 + 1
    return build

def _sqrt(m, n):
    def build(device):   # (Box-Muller's sqrt(-2 log u): a sqrt in the vector loop, its value stored as it is)
        x = Tensor(np.random.default_rng(m).standard_normal((m, n)).astype(np.float32), device=device).realize()
        return (x * x + 1).sqrt()
    return build

# (build, opts, lanes of the vector type expected, buffer expected to be read with a vector load)
VECTOR_CASES = {
    "matmul_upcast_8x16": (_matmul(16, 24, 32), [Opt(OptOps.UPCAST, 0, 8), Opt(OptOps.UPCAST, 1, 16)], 16, "data2"),
    "matmul_upcast_4x32": (_matmul(8, 16, 64), [Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.UPCAST, 1, 32)], 16, "data2"),
    "matmul_upcast_2x8": (_matmul(8, 16, 24), [Opt(OptOps.UPCAST, 0, 2), Opt(OptOps.UPCAST, 1, 8)], 8, "data2"),
    "elementwise_upcast_8": (_elementwise(16, 64), [Opt(OptOps.UPCAST, 1, 8)], 8, "data1"),
    "elementwise_upcast_16": (_elementwise(16, 64), [Opt(OptOps.UPCAST, 1, 16)], 16, "data1"),
    "elementwise_upcast_12": (_elementwise(16, 36), [Opt(OptOps.UPCAST, 1, 12)], 4, "data1"),
    "reduce_unroll_16": (_reduce(6, 64), [Opt(OptOps.UNROLL, 1, 16)], 16, "data1"),
    "conv_register_tile": (_conv(4, 8, 16), [Opt(OptOps.UPCAST, 3, 16)], 16, "data1"),
    "sqrt_upcast_16": (_sqrt(8, 64), [Opt(OptOps.UPCAST, 1, 16)], 16, "data1"),
}
# kernels whose innermost loop must stay scalar: odd trip counts, strided access outside a register tile
SCALAR_CASES = {
    "matmul_odd_upcast_9": (_matmul(7, 5, 9), [Opt(OptOps.UPCAST, 1, 9)]),
    "matmul_odd_upcast_7x3": (_matmul(7, 5, 9), [Opt(OptOps.UPCAST, 1, 3), Opt(OptOps.UPCAST, 0, 7)]),
    "transposed_upcast_8": (_transposed(8, 16), [Opt(OptOps.UPCAST, 1, 8)]),
    "conv_heuristic_tile_2": (_conv(4, 8, 10), [Opt(OptOps.UPCAST, 1, 8), Opt(OptOps.UPCAST, 2, 2)]),
}

def _compare(item, opts):
    reference = _run(item, [], "CPU")
    out = _run(item, opts, "CPU")
    np.testing.assert_allclose(out, reference, rtol=1e-5, atol=1e-5, err_msg=str(opts))
    with Context(VECTORIZE=0): scalar = _run(item, opts, "CPU")
    # each lane does its scalar iteration's ops in the same order; only FMA contraction
    # (-ffp-contract=fast) may differ between gcc's scalar and vector code: a few ulps
    np.testing.assert_allclose(out, scalar, rtol=2e-6, atol=1e-6)

@pytest.mark.parametrize("case", sorted(VECTOR_CASES))
def test_vectorized(case):
    build, opts, lanes, buffer = VECTOR_CASES[case]
    item = _kernel(build, "CPU")
    src = get_program(item.ast, Device["CPU"].renderer, opts).src
    assert f"typedef float float{lanes} __attribute__((vector_size({lanes * 4})));" in src, src
    assert f"*((float{lanes}_u*)({buffer}+" in src, src
    _compare(item, opts)

@pytest.mark.parametrize("case", sorted(SCALAR_CASES))
def test_scalar_fallback(case):
    build, opts = SCALAR_CASES[case]
    item = _kernel(build, "CPU")
    src = get_program(item.ast, Device["CPU"].renderer, opts).src
    assert "vector_size" not in src and "_u*)" not in src, src
    _compare(item, opts)

def _cpu_renderer_with(**fields):
    return type("TargetRenderer", (type(Device["CPU"].renderer),), fields)()

def test_target_decides_where_gathers_pay():
    """``Renderer.vector_gathers``: a strided loop outside a register tile is a gather on a target where gathers always
    pay, a loop on the CPU ("register_tiles"); a register tile's channel gather is a loop on a target that takes none.
    Every choice computes what the unoptimized kernel computes; the choice is part of the options (the cache key)."""
    build, opts = SCALAR_CASES["transposed_upcast_8"]
    item = _kernel(build, "CPU")
    always = _cpu_renderer_with(vector_gathers="always")
    program = get_program(item.ast, always, opts)
    assert any(u.op is Ops.VECTORIZE and u.dtype.count == 8 and all(s.op is Ops.LOAD for s in u.src) for u in program.uops)
    from fusegrad.engine.realize import CompiledRunner
    for b in item.bufs: b.ensure_allocated()
    CompiledRunner(program)(item.bufs, {})
    np.testing.assert_allclose(item.bufs[0].numpy(), _run(item, [], "CPU"), rtol=1e-6)
    conv = _kernel(_conv(4, 8, 16), "CPU")
    never = _cpu_renderer_with(vector_gathers="never")
    uops = get_program(conv.ast, never, [Opt(OptOps.UPCAST, 3, 16), Opt(OptOps.UPCAST, 1, 4)]).uops
    assert not any(u.op is Ops.VECTORIZE and all(s.op is Ops.LOAD for s in u.src) for u in uops)
    assert any(u.op is Ops.RANGE and u.src[0].op is Ops.CONST and u.src[0].arg == 4 for u in uops), "the channel loop stays a loop"
    assert len({always.options, never.options, Device["CPU"].renderer.options}) == 3

def test_gathered_vector_in_a_register_tile():
    """A tile whose vector axis is strided in memory (a's rows): the lanes are loaded one by one into a
    vector (a gather) that feeds the accumulator tile, and the results are stored back lane by lane."""
    item = _kernel(_matmul(32, 24, 8), "CPU")
    opts = [Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.UPCAST, 0, 16)]
    src = get_program(item.ast, Device["CPU"].renderer, opts).src
    assert "typedef float float16 __attribute__((vector_size(64)));" in src and "((float16){val" in src, src
    assert ")[15];" in src   # the scatter of the last lane
    _compare(item, opts)

def _upsampled(m, n):
    def build(device):
        x = Tensor(np.random.default_rng(m).standard_normal((m, n)).astype(np.float32), device=device).realize()
        y = Tensor(np.random.default_rng(n).standard_normal((m, 2 * n)).astype(np.float32), device=device).realize()
        return (y > 0).where(x.reshape(m, n, 1).expand(m, n, 2).reshape(m, 2 * n) * y, 0.0)
    return build

def test_irregular_index_is_gathered():
    """x[i, j // 2] (a pooling or upsampling window) isn't affine in j: its lanes are loaded one by one,
    and the rest of the loop (the select, the contiguous load and store) is vector code."""
    item = _kernel(_upsampled(4, 32), "CPU")
    opts = [Opt(OptOps.UPCAST, 1, 16)]
    src = get_program(item.ast, Device["CPU"].renderer, opts).src
    assert "((float16){val" in src and "*((float16_u*)(data0+" in src, src
    _compare(item, opts)

def test_heuristic_vectorizes_elementwise_unless_strided():
    from fusegrad.codegen.opt import hand_coded_optimizations
    big = _kernel(_upsampled(64, 1024), "CPU")
    assert hand_coded_optimizations(big.ast, Device["CPU"].renderer)[0] == Opt(OptOps.UPCAST, 1, 16)
    # a transpose reads with a stride: gcc's scalar loop is faster than lanes gathered one by one
    transposed = _kernel(_transposed(256, 512), "CPU")
    assert not any(o.op is OptOps.UPCAST for o in hand_coded_optimizations(transposed.ast, Device["CPU"].renderer))

def test_gated_lanes_are_masked_loads_and_stores():
    """A pad gates the loads along the vector axis: masked vector loads (masked lanes read 0 and touch
    no memory: here the elements before and after each row). PADTO's extra columns are masked stores."""
    item = _kernel(_padded(4, 64), "CPU")
    opts = [Opt(OptOps.UPCAST, 1, 16)]
    src = get_program(item.ast, Device["CPU"].renderer, opts).src
    assert "FG_LOAD_float16((data1+" in src and "_mm512_maskz_loadu_ps" in src, src
    _compare(item, opts)
    item = _kernel(_matmul(7, 5, 9), "CPU")
    opts = [Opt(OptOps.PADTO, 1, 16), Opt(OptOps.UPCAST, 1, 16)]
    src = get_program(item.ast, Device["CPU"].renderer, opts).src
    assert "FG_STORE_float16((data0+" in src, src
    _compare(item, opts)
    # a stored vector literal has commas: the macro's arguments are parenthesized (found by fuzzing)
    item = _kernel(lambda device: Tensor.full((10,), 3.0, device=device).contiguous(), "CPU")
    opts = [Opt(OptOps.PADTO, 0, 16), Opt(OptOps.UPCAST, 0, 16)]
    assert "FG_STORE_float16(" in get_program(item.ast, Device["CPU"].renderer, opts).src
    np.testing.assert_equal(_run(item, opts, "CPU"), np.full(10, 3.0, np.float32))

def test_python_device_runs_masked_vector_loads_and_stores():
    """Gated lanes on the PYTHON device: a masked lane reads 0 and touches no memory (the interpreter bounds-checks
    every element it does touch, so a masked lane past the end of the row would raise)."""
    for build, opts in ((_padded(4, 64), [Opt(OptOps.UPCAST, 1, 16)]), (_matmul(7, 5, 9), [Opt(OptOps.PADTO, 1, 16), Opt(OptOps.UPCAST, 1, 16)])):
        item = _kernel(build, "PYTHON")
        program = get_program(item.ast, Device["PYTHON"].renderer, opts)
        assert any(u.op is Ops.INDEX and len(u.src) > 2 and u.src[2].dtype.count == 16 for u in program.uops), "a per-lane gate"
        np.testing.assert_allclose(_run(item, opts, "PYTHON"), _run(item, [], "PYTHON"), rtol=1e-5, atol=1e-5)

@pytest.mark.parametrize("flags", [["-march=native"], ["-mno-avx512f"]])
def test_masked_access_macros(tmp_path, flags):
    """The masked load/store macros, with AVX-512 intrinsics and with the lane loop used elsewhere:
    masked-off lanes read 0 and their memory is neither read nor written."""
    import subprocess
    from fusegrad.dtype import dtypes
    from fusegrad.renderer.cstyle import ClangRenderer
    renderer = ClangRenderer()
    vectors = {dtypes.float32.vec(16), dtypes.int32.vec(8)}
    program = renderer.vector_typedefs_for(vectors) + renderer.masked_access_macros(vectors) + """
#include <stdio.h>
int main(void) {
  float f[16]; int n[8];
  for (int i = 0; i < 16; i++) f[i] = i + 1;
  for (int i = 0; i < 8; i++) n[i] = -(i + 1);
  bool16 fm; bool8 nm;
  for (int i = 0; i < 16; i++) fm[i] = (i % 3 == 0) ? -1 : 0;
  for (int i = 0; i < 8; i++) nm[i] = (i >= 5) ? -1 : 0;
  float16 fv = FG_LOAD_float16(f, fm); int8 nv = FG_LOAD_int8(n, nm);
  FG_STORE_float16(f, fm, fv * 10); FG_STORE_int8(n, nm, nv * 10);
  for (int i = 0; i < 16; i++) printf("%g %g\\n", fv[i], f[i]);
  for (int i = 0; i < 8; i++) printf("%d %d\\n", nv[i], n[i]);
}
"""
    source, binary = tmp_path / "masked.c", tmp_path / "masked"
    source.write_text(program)
    subprocess.run(["cc", "-O2", *flags, str(source), "-o", str(binary)], check=True)
    lines = [tuple(float(v) for v in line.split()) for line in subprocess.run([str(binary)], capture_output=True, text=True, check=True).stdout.splitlines()]
    expected = [((i + 1.0, 10 * (i + 1.0)) if i % 3 == 0 else (0.0, i + 1.0)) for i in range(16)]
    expected += [((-(i + 1.0), -10 * (i + 1.0)) if i >= 5 else (0.0, -(i + 1.0))) for i in range(8)]
    assert lines == expected

def test_attention_block_gradients_match_torch():
    """An attention block's backward with the default heuristics: a vector loop's index math once
    folded ``a // 0`` while folding ``a + 0`` (the folding table was built eagerly), crashing codegen."""
    import torch
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(s).astype(np.float32) for s in [(2, 12, 32), (32, 32), (32, 32), (32, 32), (32, 32), (32,)]]
    def block(x, wq, wk, wv, wo, g, lib):
        q, k, v = x @ wq, x @ wk, x @ wv
        scores = q.reshape(2, 12, 4, 8).transpose(1, 2) @ k.reshape(2, 12, 4, 8).permute(0, 2, 3, 1) / 8 ** 0.5
        o = (scores.softmax(-1) @ v.reshape(2, 12, 4, 8).transpose(1, 2)).transpose(1, 2).reshape(2, 12, 32) @ wo
        h = (o + x).layernorm() * g if lib == "fg" else torch.nn.functional.layer_norm(o + x, (32,)) * g
        return h.relu().sum() + h.max()
    ours = [Tensor(a, requires_grad=True) for a in arrays]
    grads = block(*ours, "fg").gradient(*ours[1:])
    theirs = [torch.tensor(a, requires_grad=True) for a in arrays]
    block(*theirs, "torch").backward()
    for got, want in zip(grads, theirs[1:]): np.testing.assert_allclose(got.numpy(), want.grad.numpy(), rtol=2e-3, atol=2e-3)

def test_vectorize_off():
    item = _kernel(_matmul(16, 24, 32), "CPU")
    with Context(VECTORIZE=0): src = get_program(item.ast, Device["CPU"].renderer, [Opt(OptOps.UPCAST, 1, 16)]).src
    assert "vector_size" not in src

def test_register_tile_is_vector_array():
    """The matmul accumulator tile becomes an array of vectors (8 rows of float16)."""
    item = _kernel(_matmul(16, 24, 32), "CPU")
    src = get_program(item.ast, Device["CPU"].renderer, [Opt(OptOps.UPCAST, 0, 8), Opt(OptOps.UPCAST, 1, 16)]).src
    assert "float16 acc0[8];" in src, src

def test_unroll_final_sum_stays_scalar():
    """The partial-sum lanes of an UNROLL are summed in order by a scalar loop: vectorizing it would reorder the sum."""
    item = _kernel(_reduce(6, 64), "CPU")
    program = get_program(item.ast, Device["CPU"].renderer, [Opt(OptOps.UNROLL, 1, 16)])
    ranges = [u for u in program.uops if u.op is Ops.RANGE]
    assert any(r.src[0].op is Ops.CONST and r.src[0].arg == 16 for r in ranges), "the final sum over the 16 lanes is a loop"
    assert any(u.op is Ops.LOAD and u.dtype.count == 16 for u in program.uops)

def _vector_uops(program) -> list:
    return sorted((u.op.name, str(u.dtype)) for u in program.uops if u.dtype.count > 1 or getattr(u.dtype, "base", u.dtype).count > 1)

@pytest.mark.parametrize("case", ["matmul_upcast_8x16", "elementwise_upcast_12", "conv_register_tile"])
def test_python_device_runs_the_cpus_vector_uops(case):
    """The PYTHON device (the executable spec of the uops) gets the same vector nodes as the CPU's C and computes
    what the unoptimized kernel computes."""
    build, opts, lanes, _ = VECTOR_CASES[case]
    item = _kernel(build, "PYTHON")
    cpu = get_program(_kernel(build, "CPU").ast, Device["CPU"].renderer, opts)
    python = get_program(item.ast, Device["PYTHON"].renderer, opts)
    assert _vector_uops(python) == _vector_uops(cpu)
    assert any(u.op is Ops.LOAD and u.dtype.count == lanes for u in python.uops)
    np.testing.assert_allclose(_run(item, opts, "PYTHON"), _run(item, [], "PYTHON"), rtol=1e-5, atol=1e-5)

def test_pass_leaves_kernels_without_upcasts_alone():
    item = _kernel(_matmul(7, 5, 9), "CPU")
    assert vectorize_upcasts(item.ast) is item.ast

def test_strided_channel_vector_is_gathered():
    """Innermost loop over 4 output channels: the weight load is strided, so its 4 lanes are gathered
    into one vector (loop-invariant: the compiler hoists it out of the 16 tile positions); the
    accumulator is an array of vectors and the results are stored lane by lane."""
    item = _kernel(_conv(4, 8, 16), "CPU")
    opts = [Opt(OptOps.UPCAST, 3, 16), Opt(OptOps.UPCAST, 1, 4)]
    src = get_program(item.ast, Device["CPU"].renderer, opts).src
    assert "float4 acc0[16];" in src and re.search(r"\(\(float4\)\{val\d+,val\d+,val\d+,val\d+\}\)", src) and ")[3];" in src, src
    _compare(item, opts)

def _bool_arith(m, n):
    def build(device):
        rng = np.random.default_rng(n)
        x = Tensor(rng.standard_normal((m, n)).astype(np.float32), device=device).realize()
        y = Tensor(rng.standard_normal((m, n)).astype(np.float32), device=device).realize()
        # comparisons used as numbers and compared again (a relu gradient, a tie mask)
        return (x < y).float() * x - (x > 0).float() + ((x < y) < (y > 0)).float() * 3
    return build

def test_bool_lanes_used_as_numbers():
    """Vector compares give -1/0 lane masks, not 1/0: a loop that uses a bool as a number (or
    orders bools) must not be vectorized naively. Values must match NOOPT either way."""
    item = _kernel(_bool_arith(8, 64), "CPU")
    for opts in ([Opt(OptOps.UPCAST, 1, 8)], [Opt(OptOps.UPCAST, 1, 16)], [Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.UPCAST, 1, 16)]):
        _compare(item, opts)

def test_epilogue_reads_a_scalar_register_with_vector_loads():
    """A dot-form matmul tile (both inputs contiguous along the reduce: x @ w.T) sums its lanes into a scalar register
    in a scalar loop; the epilogue that only reads that register (bias + GELU over the tile) is still vector code,
    reading it with vector loads, and the register stays a scalar array."""
    rng = np.random.default_rng(0)
    x, w, b = (rng.standard_normal(s).astype(np.float32) for s in ((16, 64), (32, 64), (32,)))
    item = _kernel(lambda device: Tensor(x, device=device).linear(Tensor(w, device=device).T, Tensor(b, device=device)).gelu(), "CPU")
    program = get_program(item.ast, Device["CPU"].renderer)
    reads = [u for u in program.uops if u.op is Ops.LOAD and u.dtype.count > 1 and u.src[0].src[0].op is Ops.DEFINE_REG
             and u.src[0].src[0].dtype.base.count == 1]
    assert reads and any(u.op is Ops.EXP2 or (u.dtype.count > 1 and u.op is Ops.MUL) for u in program.uops), program.src
    h = x @ w.T + b
    want = 0.5 * h * (1 + np.tanh(np.sqrt(2 / np.pi) * (h + 0.044715 * h ** 3)))
    np.testing.assert_allclose(_run(item, None, "CPU").reshape(16, 32), want, rtol=1e-4, atol=1e-5)

def test_gather_action_lets_beam_choose_gathers():
    """OptOps.GATHER: a kernel-wide choice that vector loops take non-contiguous lanes as gathers even where the CPU's
    policy ("register_tiles") keeps the loop; BEAM is offered it. Legal once, only on renderers whose policy it changes."""
    from fusegrad.codegen.opt import KernelOptError, apply_opt
    from fusegrad.codegen.opt.search import candidate_actions
    from helpers import searchable_ast
    build, opts = SCALAR_CASES["transposed_upcast_8"]
    item = _kernel(build, "CPU")
    gathered = get_program(item.ast, Device["CPU"].renderer, [Opt(OptOps.GATHER)] + opts)
    assert any(u.op is Ops.VECTORIZE and u.dtype.count == 8 and all(s.op is Ops.LOAD for s in u.src) for u in gathered.uops)
    assert not any(u.op is Ops.VECTORIZE and all(s.op is Ops.LOAD for s in u.src) for u in get_program(item.ast, Device["CPU"].renderer, opts).uops)
    np.testing.assert_allclose(_run(item, [Opt(OptOps.GATHER)] + opts, "CPU"), _run(item, [], "CPU"), rtol=1e-6)
    ast = searchable_ast(item.ast)
    assert Opt(OptOps.GATHER) in candidate_actions(ast, Device["CPU"].renderer)
    with pytest.raises(KernelOptError, match="already"): apply_opt(apply_opt(ast, Opt(OptOps.GATHER), Device["CPU"].renderer), Opt(OptOps.GATHER), Device["CPU"].renderer)
    with pytest.raises(KernelOptError, match="never"): apply_opt(ast, Opt(OptOps.GATHER), _cpu_renderer_with(vector_gathers="never"))

def test_loads_stay_in_the_loops_the_vector_loop_ran_in():
    """A vectorized loop's loads stay inside the loops it was nested in (a register tile's), next to their use,
    rather than moving out as loop-invariant code: there they become the FMAs' memory operands, where hoisted ones
    would hold registers the tile's accumulators need (MNIST's conv kernels spilled)."""
    item = _kernel(_conv(4, 8, 16), "CPU")
    uops = get_program(item.ast, Device["CPU"].renderer, [Opt(OptOps.UPCAST, 3, 16), Opt(OptOps.UPCAST, 1, 4)]).uops
    tile = next(i for i, u in enumerate(uops) if u.op is Ops.RANGE and u.src[0].op is Ops.CONST and u.src[0].arg == 16
                and any(x.op is Ops.STORE and x.src[1].dtype.count == 4 for x in uops[i:]))
    end = next(i for i, u in enumerate(uops) if u.op is Ops.END and u.src[0] is uops[tile])
    gathered = [s for u in uops if u.op is Ops.VECTORIZE and all(s.op is Ops.LOAD for s in u.src) for s in u.src]
    assert gathered and all(tile < uops.index(s) < end for s in gathered)

def test_constant_lanes_fold():
    """A lane-wise op on constant lanes only (PADTO's mask: lane numbers against the row length) folds to constant
    lanes instead of code."""
    item = _kernel(_matmul(7, 5, 9), "CPU")
    opts = [Opt(OptOps.PADTO, 1, 16), Opt(OptOps.UPCAST, 1, 16)]
    uops = get_program(item.ast, Device["CPU"].renderer, opts).uops
    constant = lambda x: x.op is Ops.VECTORIZE and all(s.op is Ops.CONST for s in x.src)
    assert any(u.op is Ops.INDEX and len(u.src) > 2 and constant(u.src[2]) for u in uops), "the mask is a constant vector"
    assert not any(u.op in GroupOp.ALU and u.dtype.count > 1 and all(constant(s) for s in u.src) for u in uops)
    _compare(item, opts)

PACKED_TILE = [Opt(OptOps.UPCAST, 0, 8), Opt(OptOps.UPCAST, 1, 32), Opt(OptOps.SWAP, 0, 1), Opt(OptOps.PACK, 0)]

def _linear_transposed(m, k, n):
    def build(device):
        rng = np.random.default_rng(k)
        x = Tensor(rng.standard_normal((m, k)).astype(np.float32), device=device).realize()
        return x @ Tensor(rng.standard_normal((n, k)).astype(np.float32), device=device).realize().T
    return build

@pytest.mark.parametrize("device", ["CPU", "LLVM"])   # (the loop backends that PACK; PYTHON stages with STAGE)
@pytest.mark.parametrize("k,lanes", [(48, 8), (40, 8), (44, 4), (42, 1)])   # (8 x 8 blocks: vectorize.TRANSPOSE_LANES)
def test_pack_copy_transposes_in_register_blocks(device, k, lanes):
    # x @ w.T's panel holds w's rows as columns: the copy reads `lanes` weight rows as vectors along the reduce and
    # writes `lanes` panel rows regrouped from their lanes; with no lane count dividing 42 it stays a scalar copy
    item = _kernel(_linear_transposed(24, k, 64), device)
    program = get_program(item.ast, Device[device].renderer, PACKED_TILE)
    weight = next(u for u in program.uops if u.op is Ops.PARAM and u.dtype.size == 64 * k)
    weight_loads = [u for u in program.uops if u.op is Ops.LOAD and u.src[0].src[0] is weight]
    panel_stores = [u for u in program.uops if u.op is Ops.STORE and u.src[0].src[0].op is Ops.DEFINE_REG and u.src[0].src[0].dtype.size == 32 * k]
    assert [u.dtype.count for u in weight_loads] == [lanes] * lanes
    assert [u.src[1].dtype.count for u in panel_stores] == [lanes] * lanes
    if lanes > 1:
        assert all(u.src[1].op is Ops.VECTORIZE and {s.op for s in u.src[1].src} == {Ops.GEP} for u in panel_stores)
        # regrouped by the perfect-shuffle network: V log2 V vectors, each of lanes from at most two vectors
        shuffles = [u for u in program.uops if u.op is Ops.VECTORIZE and u.dtype.count == lanes and all(s.op is Ops.GEP for s in u.src)]
        assert len(shuffles) == lanes * (lanes.bit_length() - 1)
        assert all(len({s.src[0] for s in u.src}) <= 2 for u in shuffles)
    np.testing.assert_allclose(_run(item, PACKED_TILE, device), _run(item, [], device), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("lanes", [1, 2, 4, 8, 16, 3, 6])
def test_transposed_gives_the_columns(lanes):
    """vectorize.transposed: column i's lane j is lane i of row j, from V log2 V two-vector shuffles for V a power of
    two (and lane by lane otherwise). Evaluated on constant rows by following each GEP to its lane."""
    from fusegrad.dtype import dtypes
    from fusegrad.uop.ops import UOp
    from fusegrad.codegen.vectorize import transposed
    rows = [UOp(Ops.VECTORIZE, dtypes.float32.vec(lanes), tuple(UOp.const(dtypes.float32, 100 * j + i) for i in range(lanes)))
            for j in range(lanes)]
    def lane(u: UOp, i: int) -> float:
        if u.op is Ops.GEP: return lane(u.src[0], u.arg[0])
        return u.src[i].arg if u.src[i].op is Ops.CONST else lane(u.src[i], 0)
    columns = transposed(rows)
    assert [[lane(c, j) for j in range(lanes)] for c in columns] == [[100 * j + i for j in range(lanes)] for i in range(lanes)]
    built = {u for c in columns for u in c.toposort if u.op is Ops.VECTORIZE and u not in rows}
    network = lanes >= 2 and lanes & (lanes - 1) == 0
    assert len(built) == (lanes * (lanes.bit_length() - 1) if network else lanes)
    if network: assert all(len({s.src[0] for s in u.src}) <= 2 for u in built)
