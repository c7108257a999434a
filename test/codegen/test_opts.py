"""Optimization actions: every optimized kernel must compute what the unoptimized kernel computes.

The GPU-style actions (LOCAL, GROUP, GROUPTOP, NOLOCALS) run on the PYTHON device, which has
workgroups, local memory and a race check for missing barriers; PADTO runs on both devices."""
import itertools
import numpy as np
import pytest
from fusegrad import Tensor, Device, Context
from fusegrad.codegen import get_program
from fusegrad.codegen.opt import Opt, OptOps, KernelOptError, apply_opt, kernel_axes, hand_coded_optimizations, colored_shape
from fusegrad.codegen.opt.search import candidate_actions
from fusegrad.uop.ops import Ops, AxisType
from fusegrad.engine.realize import CompiledRunner, lower_schedule_item
from helpers import random_action_list, native_device

def _kernel(build, device):
    """The last kernel of ``build()``'s schedule, with its input buffers realized."""
    out = build(device)
    items = out.schedule()
    for item in items[:-1]:
        from fusegrad.engine.realize import lower_schedule_item
        lower_schedule_item(item).run()
    return items[-1]

def _run(item, opts, device):
    program = get_program(item.ast, Device[device].renderer, opts)
    bufs = item.bufs
    for b in bufs: b.ensure_allocated()
    # the output starts as a NaN pattern, so a kernel that skips stores can't pass on stale results
    bufs[0].copyin(memoryview(np.full(bufs[0].nbytes // 4, 0x7FC00000, np.uint32).tobytes()))
    CompiledRunner(program)(bufs, dict(item.var_vals))
    return bufs[0].numpy().copy()

def _matmul(m, k, n):
    def build(device):
        rng = np.random.default_rng(m * 100 + n)
        a = Tensor(rng.standard_normal((m, k)).astype(np.float32), device=device).realize()
        b = Tensor(rng.standard_normal((k, n)).astype(np.float32), device=device).realize()
        return (a @ b).relu()
    return build

def _reduce_rows(m, n):
    def build(device):
        x = Tensor(np.random.default_rng(n).standard_normal((m, n)).astype(np.float32), device=device).realize()
        return (x * 2).sum(1) + x.max(1)
    return build

def _elementwise(m, n):
    def build(device):
        x = Tensor(np.random.default_rng(m).standard_normal((m, n)).astype(np.float32), device=device).realize()
        return (x.permute(1, 0) * 3 + 1).contiguous()
    return build

CASES = {
    "matmul_12x8x16": (_matmul(12, 8, 16), [[Opt(OptOps.UPCAST, 1, 4)], [Opt(OptOps.UPCAST, 0, 3), Opt(OptOps.UPCAST, 1, 8)],
                                            [Opt(OptOps.UNROLL, 2, 4)], [Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.UNROLL, 2, 2)],
                                            # a full-size upcast leaves the axis list: the reduce is then axis 1
                                            [Opt(OptOps.UPCAST, 1, 16), Opt(OptOps.UPCAST, 0, 2), Opt(OptOps.UNROLL, 1, 8)]]),
    "matmul_odd_7x5x9": (_matmul(7, 5, 9), [[Opt(OptOps.UPCAST, 0, 7)], [Opt(OptOps.UPCAST, 1, 3)], [Opt(OptOps.UNROLL, 2, 5)]]),
    "reduce_rows_6x64": (_reduce_rows(6, 64), [[Opt(OptOps.UNROLL, 1, 16)], [Opt(OptOps.UPCAST, 0, 3), Opt(OptOps.UNROLL, 1, 4)],
                                               [Opt(OptOps.UPCAST, 0, 6)]]),
    "elementwise_9x12": (_elementwise(9, 12), [[Opt(OptOps.UPCAST, 1, 9)], [Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.UPCAST, 1, 3)]]),
}

@pytest.mark.parametrize("device", [native_device(), "PYTHON"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_opts_match_unoptimized(case, device):
    build, opt_lists = CASES[case]
    item = _kernel(build, device)
    reference = _run(item, [], device)
    for opts in opt_lists:
        np.testing.assert_allclose(_run(item, opts, device), reference, rtol=1e-5, atol=1e-5, err_msg=str(opts))

def test_thread_opt_on_cpu():
    item = _kernel(_matmul(16, 8, 16), "CPU")
    reference = _run(item, [], "CPU")
    np.testing.assert_allclose(_run(item, [Opt(OptOps.THREAD, 0, 2), Opt(OptOps.UPCAST, 1, 4)], "CPU"), reference, rtol=1e-5)

def test_heuristic_matches_unoptimized(device="CPU"):
    for name, (build, _) in CASES.items():
        item = _kernel(build, device)
        opts = hand_coded_optimizations(item.ast, Device[device].renderer)
        np.testing.assert_allclose(_run(item, opts, device), _run(item, [], device), rtol=1e-5, atol=1e-5, err_msg=name)

def _conv_kernels(device):
    """Every kernel of a conv2d forward and backward (input and weight gradients), inputs realized."""
    from fusegrad.engine.realize import lower_schedule_item
    rng = np.random.default_rng(3)
    x = Tensor(rng.standard_normal((4, 8, 12, 12)).astype(np.float32), device=device).realize()
    w = Tensor(rng.standard_normal((16, 8, 5, 5)).astype(np.float32), device=device, requires_grad=True).realize()
    xg = Tensor(x.numpy(), device=device, requires_grad=True).realize()
    out = xg.conv2d(w).relu()
    dx, dw = (out * out).sum().gradient(xg, w)
    items = Tensor.schedule(dx, dw)
    kernels = []
    for item in items:
        if item.ast.op is Ops.SINK: kernels.append(item)
        lower_schedule_item(item).run()
    return kernels

def _opts_on(ast, device):
    """The heuristic's choice for a schedule AST, given what get_program gives it (simplify_kernel's output)."""
    from fusegrad.codegen import simplify_kernel
    return hand_coded_optimizations(simplify_kernel(ast), Device[device].renderer)

@pytest.mark.parametrize("device", [native_device(), "PYTHON"])
def test_heuristic_conv_kernels_match_unoptimized(device):
    tiled = 0
    for item in _conv_kernels(device):
        opts = _opts_on(item.ast, device)
        tiled += sum(o.op is OptOps.UPCAST for o in opts) >= 2
        np.testing.assert_allclose(_run(item, opts, device), _run(item, [], device), rtol=1e-4, atol=1e-4, err_msg=str(opts))
    assert tiled >= 2    # the forward conv and the input/weight gradients get register tiles

def test_heuristic_register_tile_shapes():
    # weight gradient (cout, cin, ky, kx) of a 5x5 conv: the whole 5x5 window is the tile's positions and
    # 16 output channels its vector; the output gradient is big, so its channel vector is gathered, not staged
    rng = np.random.default_rng(5)
    def weight_gradient_tiles(size, batch=48):
        x = Tensor(rng.standard_normal((batch, 8, size, size)).astype(np.float32)).realize()
        w = Tensor(rng.standard_normal((16, 8, 5, 5)).astype(np.float32), requires_grad=True).realize()
        dw, = (x.conv2d(w) ** 2).sum().gradient(w)
        return [_opts_on(i.ast, "CPU")[:3] for i in dw.schedule() if i.ast.op is Ops.SINK]
    assert [Opt(OptOps.UPCAST, 2, 5), Opt(OptOps.UPCAST, 2, 5), Opt(OptOps.UPCAST, 0, 16)] in weight_gradient_tiles(24)
    # a 3x3 window reuses the gathered vector 9 times: two input channels at once make it 18
    x = Tensor(rng.standard_normal((48, 8, 8, 8)).astype(np.float32), device="CPU").realize()   # (run on the CPU whatever DEV says)
    w = Tensor(rng.standard_normal((16, 8, 3, 3)).astype(np.float32), device="CPU", requires_grad=True).realize()
    dw, = (x.conv2d(w) ** 2).sum().gradient(w)
    item = dw.schedule()[-1]
    for earlier in dw.schedule()[:-1]: lower_schedule_item(earlier).run()
    opts = _opts_on(item.ast, "CPU")
    assert [o for o in opts if o.op is OptOps.UPCAST] == [Opt(OptOps.UPCAST, 2, 3), Opt(OptOps.UPCAST, 2, 3), Opt(OptOps.UPCAST, 1, 2),
                                                          Opt(OptOps.UPCAST, 0, 16)], opts
    np.testing.assert_allclose(_run(item, opts, "CPU").reshape(16, 8, 3, 3), _run(item, [], "CPU").reshape(16, 8, 3, 3), rtol=1e-4, atol=1e-3)
    # with 32-wide output rows both inputs are contiguous along the reduce's innermost axis and it fills
    # vectors: 16 partial sums per accumulator, for 4 output channels x 5 kernel columns
    assert [Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.UPCAST, 3, 5), Opt(OptOps.UNROLL, 5, 16)] in weight_gradient_tiles(36)
    # matmul: 8 rows (a's rows) x 32 columns (b's contiguous columns), then the column loop moves
    # outside the row loop (a is streamed once per column tile instead of b once per row tile)
    a, b = Tensor.ones(64, 96).contiguous().realize(), Tensor.ones(96, 128).contiguous().realize()
    assert _opts_on((a @ b).schedule()[-1].ast, "CPU")[:3] == [Opt(OptOps.UPCAST, 0, 8), Opt(OptOps.UPCAST, 1, 32),
                                                               Opt(OptOps.SWAP, 0, 1)]
    # conv forward (b, cout, y, x) with 8 output columns: the weights are staged with the output channels
    # contiguous, 16 channels are the vector, and a whole 8-pixel row x 2 rows the tile's positions (up to 12
    # columns and 24 positions: heuristic.MAX_TILE_COLUMNS)
    x, w = Tensor.ones(2, 8, 10, 10).contiguous().realize(), Tensor.ones(32, 8, 3, 3).contiguous().realize()
    opts = _opts_on(x.conv2d(w).schedule()[-1].ast, "CPU")
    assert opts == [Opt(OptOps.STAGE, 1), Opt(OptOps.UPCAST, 2, 2), Opt(OptOps.UPCAST, 3, 8), Opt(OptOps.UPCAST, 1, 16)]
    src = get_program(x.conv2d(w).schedule()[-1].ast, Device["CPU"].renderer, opts).src
    assert "float stage0[2304];" in src and "*((float16_u*)(stage0+" in src, src
    # unpadded, the 32-wide rows fill vectors: split 2 x 16 so the vector loop stays innermost
    w64 = Tensor.ones(64, 8, 3, 3).contiguous().realize()
    x34 = Tensor.ones(2, 8, 34, 34).contiguous().realize()
    assert _opts_on(x34.conv2d(w64).schedule()[-1].ast, "CPU")[:3] == [Opt(OptOps.UPCAST, 1, 8), Opt(OptOps.UPCAST, 2, 2),
                                                                         Opt(OptOps.UPCAST, 3, 16)]
    # a big padded input is stored padded first (schedule/__init__.py, _store_padded_windows): the conv reads it ungated
    # and gets the same tile
    x32 = Tensor.ones(16, 8, 32, 32).contiguous().realize()
    assert _opts_on(x32.conv2d(w64, padding=1).schedule()[-1].ast, "CPU")[:3] == [Opt(OptOps.UPCAST, 1, 8), Opt(OptOps.UPCAST, 2, 2),
                                                                                    Opt(OptOps.UPCAST, 3, 16)]
    # a small one stays fused, gated along its 32-wide rows (gated lanes stay scalar): channel vectors instead
    x32 = Tensor.ones(2, 8, 32, 32).contiguous().realize()
    opts = _opts_on(x32.conv2d(w64, padding=1).schedule()[-1].ast, "CPU")
    assert opts[0] == Opt(OptOps.STAGE, 1) and opts[-2] == Opt(OptOps.UPCAST, 1, 16), opts
    # without 16 channels the usual tile: channels outermost, 2 rows, columns split 4-wide to stay innermost
    w = Tensor.ones(24, 8, 3, 3).contiguous().realize()
    opts = _opts_on(x.conv2d(w).schedule()[-1].ast, "CPU")
    assert opts == [Opt(OptOps.UPCAST, 1, 8), Opt(OptOps.UPCAST, 2, 2), Opt(OptOps.UPCAST, 3, 4)]   # and no UNROLL

def test_heuristic_unrolls_the_reduce_axis_that_fills_vectors():
    # reduce axes 64 and 6: lanes of partial sums on the 64 (6 makes no vector), as in BatchNorm's
    # gradient over (batch, 6, 6)
    x = Tensor.ones(4, 64, 6, device="CPU").contiguous().realize()   # (CPU opts: on the CPU whatever DEV says)
    item = x.sum((1, 2)).schedule()[-1]
    assert Opt(OptOps.UNROLL, 1, 16) in _opts_on(item.ast, "CPU")
    np.testing.assert_allclose(_run(item, _opts_on(item.ast, "CPU"), "CPU"), np.full(4, 384.0))

def test_heuristic_pads_a_short_pooling_row_to_a_vector():
    # a 2x2 max-pool of 20-wide rows has 10 output columns and no tile rows: pad them to one 16-lane
    # vector (masked lanes) so the max runs as vector selects rather than branches
    x = Tensor(np.random.default_rng(2).standard_normal((4, 8, 20, 20)).astype(np.float32), device="CPU").realize()
    item = (x * 2).max_pool2d().schedule()[-1]
    opts = _opts_on(item.ast, "CPU")
    assert opts[:2] == [Opt(P, 3, 16), Opt(U, 3, 16)], opts
    expected = (x.numpy() * 2).reshape(4, 8, 10, 2, 10, 2).max((3, 5))
    np.testing.assert_allclose(_run(item, opts, "CPU").reshape(expected.shape), expected)
    assert "FG_LOAD_float16" in get_program(item.ast, Device["CPU"].renderer, opts).src

def test_heuristic_reads_rows_for_column_reductions():
    # v @ A and A.sum(0) reduce down A's columns: 64 outputs at a time read each row contiguously;
    # A @ v reduces along A's rows: partial-sum lanes along the (contiguous) reduce instead
    rng = np.random.default_rng(4)
    a = Tensor(rng.standard_normal((128, 256)).astype(np.float32), device="CPU").realize()
    v, w = [Tensor(rng.standard_normal(n).astype(np.float32), device="CPU").realize() for n in (128, 256)]
    for out, expected in [(v @ a, v.numpy() @ a.numpy()), (a.sum(0), a.numpy().sum(0))]:
        item = out.schedule()[-1]
        assert _opts_on(item.ast, "CPU")[0] == Opt(OptOps.UPCAST, 0, 64)
        np.testing.assert_allclose(_run(item, _opts_on(item.ast, "CPU"), "CPU"), expected, rtol=1e-4, atol=1e-4)
    assert _opts_on((a @ w).schedule()[-1].ast, "CPU")[0] == Opt(OptOps.UNROLL, 1, 16)

@pytest.mark.parametrize("opt, message", [
    (Opt(OptOps.UPCAST, 0, 5), "doesn't divide"),
    (Opt(OptOps.UPCAST, 2, 4), "UNROLL"),            # axis 2 is the reduce
    (Opt(OptOps.UNROLL, 0, 4), "reduce axes"),
    (Opt(OptOps.UPCAST, 7, 2), "out of range"),
    (Opt(OptOps.LOCAL, 0, 2), "local .workgroup. dims"),
    (Opt(OptOps.THREAD, 1, 2), "outermost"),
])
def test_illegal_opts_raise(opt, message):
    item = _kernel(_matmul(12, 8, 16), "CPU")
    with pytest.raises(KernelOptError, match=message): apply_opt(item.ast, opt, Device["CPU"].renderer)

def test_thread_illegal_on_python_device():
    item = _kernel(_matmul(4, 4, 4), "PYTHON")
    with pytest.raises(KernelOptError): apply_opt(item.ast, Opt(OptOps.THREAD, 0, 2), Device["PYTHON"].renderer)

def test_swap_reorders_loops_and_matches():
    item = _kernel(_matmul(12, 8, 16), "CPU")
    reference = _run(item, [], "CPU")
    np.testing.assert_allclose(_run(item, [Opt(OptOps.SWAP, 0, 1), Opt(OptOps.UPCAST, 1, 4)], "CPU"), reference, rtol=1e-5)
    with pytest.raises(KernelOptError, match="global"): apply_opt(item.ast, Opt(OptOps.SWAP, 0, 2), Device["CPU"].renderer)

@pytest.mark.parametrize("device", [native_device(), "PYTHON"])
def test_chained_swaps_keep_distinct_loops(device):
    # BEAM found this on a max-pool kernel: after one SWAP the second exchanged only one of the two
    # ranges (the other was rebuilt from its parents first), two loops shared one variable, and the
    # kernel wrote out of bounds (a segfault on CPU)
    def build(device):
        x = Tensor(np.random.default_rng(2).standard_normal((8, 4, 6, 6)).astype(np.float32), device=device).realize()
        return x.relu().max_pool2d(2)
    item = _kernel(build, device)
    reference = _run(item, [], device)
    for opts in ([Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.SWAP, 0, 1), Opt(OptOps.SWAP, 0, 2)],
                 [Opt(OptOps.SWAP, 0, 1), Opt(OptOps.SWAP, 1, 2), Opt(OptOps.SWAP, 0, 3)]):
        program = get_program(item.ast, Device[device].renderer, opts)
        loops = [u.arg[0] for u in program.uops if u.op is Ops.RANGE]
        assert len(loops) == len(set(loops)), (opts, loops)
        np.testing.assert_allclose(_run(item, opts, device), reference, rtol=1e-6, err_msg=str(opts))

# ---------------------------------------------------------------- GPU-style actions (LOCAL, GROUP, GROUPTOP, NOLOCALS, PADTO)

def _matmul_max(m, k, n):
    """(a @ b).max(1): a max reduce whose loop encloses the matmul's sum (nested reduces)."""
    def build(device):
        rng = np.random.default_rng(k)
        a = Tensor(rng.standard_normal((m, k)).astype(np.float32), device=device).realize()
        b = Tensor(rng.standard_normal((k, n)).astype(np.float32), device=device).realize()
        return (a @ b).max(1)
    return build

def _unsafe_rows(m, n):
    """Row reductions of values that are not 0 where the input is padded with 0: exp, 1/x, max."""
    def build(device):
        x = Tensor(np.random.default_rng(n).uniform(0.5, 2, (m, n)).astype(np.float32), device=device).realize()
        return x.exp().sum(1) + (1 / x).sum(1) + (-x).max(1)
    return build

def _int_rows(m, n):
    def build(device):
        x = Tensor(np.random.default_rng(n).integers(-50, 50, (m, n)).astype(np.int32), device=device).realize()
        return x.sum(1) * 3 + x.max(1)
    return build

L, G, GT, U, R, P, N, S = OptOps.LOCAL, OptOps.GROUP, OptOps.GROUPTOP, OptOps.UPCAST, OptOps.UNROLL, OptOps.PADTO, OptOps.NOLOCALS, OptOps.STAGE
GPU_CASES = {
    # axes: 0 rows (12), 1 columns (16), 2 the reduce (8); a LOCAL axis comes after the globals,
    # a GROUP_REDUCE axis before the reduces
    "matmul_12x8x16": (_matmul(12, 8, 16), [
        [Opt(L, 0, 3)], [Opt(L, 1, 4)], [Opt(L, 0, 2), Opt(L, 1, 8)], [Opt(L, 1, 16)], [Opt(L, 1, 0)],
        [Opt(G, 2, 4)], [Opt(GT, 2, 4)], [Opt(G, 2, 0)], [Opt(GT, 2, 8)],
        [Opt(G, 2, 4), Opt(U, 0, 3), Opt(L, 1, 4)],
        [Opt(U, 1, 4), Opt(L, 1, 2), Opt(R, 3, 2)],
        [Opt(L, 0, 4), Opt(GT, 3, 2), Opt(R, 4, 2), Opt(U, 1, 8)],
        [Opt(U, 0, 2), Opt(U, 1, 4), Opt(G, 2, 2), Opt(R, 3, 2), Opt(L, 0, 3)],
        [Opt(N,), Opt(U, 1, 4)], [Opt(U, 0, 4), Opt(N,), Opt(R, 2, 4)]]),
    "matmul_odd_7x5x9": (_matmul(7, 5, 9), [
        [Opt(L, 0, 7)], [Opt(G, 2, 5)], [Opt(L, 1, 3), Opt(GT, 3, 5), Opt(U, 0, 7)],
        [Opt(P, 0, 8), Opt(L, 0, 8)], [Opt(P, 1, 4), Opt(L, 1, 4), Opt(P, 3, 8), Opt(G, 3, 4)],
        [Opt(P, 2, 8), Opt(GT, 2, 2), Opt(R, 3, 4)]]),
    # two reduces (sum and max) over the same range: each gets its own local buffer
    "reduce_rows_6x64": (_reduce_rows(6, 64), [
        [Opt(G, 1, 16)], [Opt(GT, 1, 16)], [Opt(GT, 1, 16), Opt(R, 2, 4)], [Opt(R, 1, 4), Opt(G, 1, 4), Opt(U, 0, 2)],
        [Opt(L, 0, 2), Opt(G, 2, 8)], [Opt(G, 1, 4), Opt(GT, 2, 4)], [Opt(G, 1, 64)], [Opt(U, 0, 6), Opt(GT, 0, 32)],
        [Opt(L, 0, 3), Opt(G, 2, 16), Opt(R, 3, 4)]]),
    "reduce_rows_odd_5x63": (_reduce_rows(5, 63), [
        [Opt(G, 1, 9)], [Opt(GT, 1, 7), Opt(R, 2, 3)], [Opt(P, 1, 16), Opt(G, 1, 16)], [Opt(P, 1, 32), Opt(GT, 1, 8), Opt(R, 2, 4)],
        [Opt(P, 0, 8), Opt(L, 0, 8), Opt(G, 1, 3)]]),
    "unsafe_rows_5x63": (_unsafe_rows(5, 63), [[Opt(P, 1, 16)], [Opt(P, 1, 16), Opt(G, 1, 16)], [Opt(P, 1, 32), Opt(R, 1, 8)],
                                               [Opt(P, 0, 8), Opt(P, 1, 64), Opt(GT, 1, 16), Opt(U, 0, 4)]]),
    "int_rows_4x30": (_int_rows(4, 30), [[Opt(G, 1, 6)], [Opt(P, 1, 32), Opt(GT, 1, 8)], [Opt(L, 0, 4), Opt(G, 1, 10)]]),
    "elementwise_9x12": (_elementwise(9, 12), [
        [Opt(L, 0, 4)], [Opt(L, 1, 3), Opt(U, 0, 4)], [Opt(P, 1, 16), Opt(L, 1, 16)], [Opt(L, 0, 12), Opt(L, 0, 9)],
        [Opt(N,), Opt(U, 0, 3)], [Opt(P, 0, 16), Opt(P, 1, 16), Opt(L, 0, 4), Opt(L, 1, 8)]]),
    # grouping the outer max is fine: its partials include the whole inner sum
    "matmul_max_6x8x10": (_matmul_max(6, 8, 10), [[Opt(G, 1, 5)], [Opt(GT, 1, 2), Opt(R, 3, 4)], [Opt(L, 0, 3), Opt(G, 2, 10)],
                                                  [Opt(P, 2, 16), Opt(U, 0, 2)]]),
}

def _check_opt_lists(build, opt_lists, device):
    """Every opt list applies as given and computes what the unoptimized kernel computes."""
    item = _kernel(build, device)
    reference = _run(item, [], device)
    for opts in opt_lists:
        assert list(get_program(item.ast, Device[device].renderer, opts).applied_opts) == opts
        np.testing.assert_allclose(_run(item, opts, device), reference, rtol=1e-5, atol=1e-5, err_msg=str(opts))

@pytest.mark.parametrize("case", sorted(GPU_CASES))
def test_gpu_opts_match_unoptimized(case):
    _check_opt_lists(*GPU_CASES[case], "PYTHON")

PADTO_CPU_CASES = {
    "matmul_odd_7x5x9": (_matmul(7, 5, 9), [[Opt(P, 0, 8)], [Opt(P, 2, 8)], [Opt(P, 0, 8), Opt(U, 0, 8)],
                                            [Opt(P, 1, 4), Opt(U, 1, 4), Opt(P, 2, 8), Opt(R, 2, 8)], [Opt(P, 0, 16), Opt(P, 1, 32)]]),
    "unsafe_rows_5x63": (_unsafe_rows(5, 63), [[Opt(P, 1, 16)], [Opt(P, 1, 64), Opt(R, 1, 16)], [Opt(P, 0, 8), Opt(U, 0, 8), Opt(P, 0, 32)]]),
    "reduce_rows_odd_5x63": (_reduce_rows(5, 63), [[Opt(P, 1, 32), Opt(R, 1, 8), Opt(P, 0, 8), Opt(U, 0, 4)]]),
    "matmul_max_6x8x10": (_matmul_max(6, 7, 10), [[Opt(P, 1, 16)], [Opt(P, 2, 8), Opt(R, 2, 8)], [Opt(P, 0, 8), Opt(U, 0, 8)]]),
}

@pytest.mark.parametrize("case", sorted(PADTO_CPU_CASES))
def test_padto_on_cpu(case):
    _check_opt_lists(*PADTO_CPU_CASES[case], "CPU")

def _conv_forward(device):
    rng = np.random.default_rng(11)
    x = Tensor(rng.standard_normal((2, 8, 10, 10)).astype(np.float32), device=device).realize()
    w = Tensor(rng.standard_normal((32, 8, 3, 3)).astype(np.float32), device=device).realize()
    return x.conv2d(w).relu()

# the conv's axes: batch 2, cout 32, y 8, x 8 | cin 8, ky 3, kx 3
STAGE_CASES = [
    [Opt(S, 1)],
    [Opt(S, 1), Opt(U, 2, 2), Opt(U, 3, 4), Opt(U, 1, 16)],   # the heuristic's conv tile: staged weights as channel vectors
    [Opt(U, 1, 16), Opt(S, 1)],                                 # staged after the split: its upcast part stays innermost
    [Opt(S, 1), Opt(P, 1, 48), Opt(U, 1, 16)],                  # padded channels read zeros from the staged copy
    [Opt(P, 3, 12), Opt(S, 3)],                                 # a padded axis stages its gated zeros
    [Opt(S, 1), Opt(S, 0), Opt(U, 3, 4)],                       # two staged inputs (weights, then the image)
    [Opt(S, 1), Opt(OptOps.SWAP, 0, 2), Opt(R, 4, 4)],
    [Opt(S, 4), Opt(U, 0, 2)],                                  # along a reduce axis: both inputs
]

@pytest.mark.parametrize("device", [native_device(), "PYTHON"])
def test_stage_matches_unoptimized(device):
    item = _kernel(_conv_forward, device)
    reference = _run(item, [], device)
    extra = [[Opt(S, 1), Opt(U, 1, 16), Opt(OptOps.THREAD, 0, 2)]] if device == "CPU" else [[Opt(S, 1), Opt(L, 1, 4), Opt(G, 5, 2)]] \
        if device == "PYTHON" else [[Opt(S, 1), Opt(U, 1, 16)]]   # LLVM: no threads, no workgroups
    for opts in STAGE_CASES + extra:
        program = get_program(item.ast, Device[device].renderer, opts)
        assert list(program.applied_opts) == opts
        stages = {u.arg for u in program.uops if u.op is Ops.DEFINE_LOCAL and u.arg.startswith("stage")}
        assert len(stages) == 1 + (Opt(S, 0) in opts) + (Opt(S, 4) in opts), (opts, stages)
        np.testing.assert_allclose(_run(item, opts, device), reference, rtol=1e-5, atol=1e-5, err_msg=str(opts))

def _linear(m, k, n, transposed=True):
    """``(x @ w.T + b).gelu()`` (an nn.Linear's layout, w is (out, in)) or, with ``transposed=False``, ``x @ w``."""
    def build(device):
        rng = np.random.default_rng(m * 7 + n)
        x = Tensor(rng.standard_normal((m, k)).astype(np.float32), device=device).realize()
        if not transposed: return x @ Tensor(rng.standard_normal((k, n)).astype(np.float32), device=device).realize()
        w = Tensor(rng.standard_normal((n, k)).astype(np.float32), device=device).realize()
        return (x @ w.T + Tensor(rng.standard_normal(n).astype(np.float32), device=device).realize()).gelu()
    return build

K, W, T = OptOps.PACK, OptOps.SWAP, OptOps.THREAD

def _loop_device() -> str:
    """The device PACK runs on: the compiled backend when it runs loops (CPU, LLVM), else CPU (under DEV=CL)."""
    return "CPU" if Device[native_device()].renderer.has_local else native_device()
# axes: rows 24, columns 64 | the reduce 40 (60 columns in the padded case)
# (opts, the elements of the panel of the matmul's operand: 40 reduce steps x the tile's lanes along the packed loop)
PACK_CASES = [
    ([Opt(U, 0, 8), Opt(U, 1, 32), Opt(W, 0, 1), Opt(K, 0)], 40 * 32),                # the heuristic's packed tile
    ([Opt(U, 0, 4), Opt(U, 1, 16), Opt(K, 0)], 40 * 4),                                # rows outside: x's row block is packed
    ([Opt(U, 0, 8), Opt(U, 1, 32), Opt(W, 0, 1), Opt(K, 0), Opt(R, 2, 4)], 40 * 32),   # the panel's reads unrolled after packing
    ([Opt(U, 1, 16), Opt(U, 1, 2), Opt(W, 0, 1), Opt(K, 0)], 40 * 32),                 # two upcasts of the column: both in the panel
    ([Opt(U, 0, 8), Opt(U, 1, 32), Opt(W, 0, 1), Opt(T, 0, 2), Opt(K, 0)], 40 * 32),   # packing a THREAD loop
]

@pytest.mark.parametrize("transposed", [True, False])
def test_pack_matches_unoptimized(transposed):
    device = _loop_device()
    item = _kernel(_linear(24, 40, 64, transposed), device)
    reference = _run(item, [], device)
    for opts, panel in PACK_CASES[:-1] + (PACK_CASES[-1:] if Device[device].renderer.has_threads else []):
        program = get_program(item.ast, Device[device].renderer, opts)
        assert list(program.applied_opts) == opts
        assert panel in [u.dtype.size for u in program.uops if u.op is Ops.DEFINE_REG], opts
        np.testing.assert_allclose(_run(item, opts, device), reference, rtol=1e-4, atol=1e-4, err_msg=str(opts))

@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "int32"])
def test_pack_panels_of_other_dtypes(dtype):
    # the panel holds the input's own elements (bfloat16 as its 16-bit patterns, copied without a round trip)
    from fusegrad import dtypes
    device, dt = _loop_device(), getattr(dtypes, dtype)
    rng = np.random.default_rng(6)
    a, b = rng.integers(-4, 4, (24, 40)).astype(np.float32), rng.integers(-4, 4, (64, 40)).astype(np.float32)
    with Context(TC=0):
        item = _kernel(lambda d: (Tensor(a, device=d).cast(dt).realize() @ Tensor(b, device=d).cast(dt).realize().T).cast(dtypes.float32), device)
        program = get_program(item.ast, Device[device].renderer, PACK_CASES[0][0])
        assert 40 * 32 in [u.dtype.size for u in program.uops if u.op is Ops.DEFINE_REG]
        np.testing.assert_array_equal(_run(item, PACK_CASES[0][0], device).reshape(24, 64), a @ b.T)

def test_pack_copies_padded_columns_as_zeros():
    device = _loop_device()
    item = _kernel(_linear(24, 40, 60), device)   # 60 columns padded to 64: the panel's last 4 lanes read the gate's zeros
    opts = [Opt(P, 1, 32), Opt(U, 0, 8), Opt(U, 1, 32), Opt(W, 0, 1), Opt(K, 0)]
    np.testing.assert_allclose(_run(item, opts, device)[:24 * 60], _run(item, [], device)[:24 * 60], rtol=1e-4, atol=1e-4)

def test_pack_panel_is_private_to_each_thread():
    # the panel is filled inside the OpenMP loop: a shared one would be overwritten by the other threads' column blocks
    x, w = Tensor.ones(128, 96).contiguous().realize(), Tensor.ones(256, 96).contiguous().realize()
    opts = [Opt(U, 0, 8), Opt(U, 1, 32), Opt(W, 0, 1), Opt(K, 0), Opt(T, 0, 2)]
    src = get_program((x @ w.T).schedule()[-1].ast, Device["CPU"].renderer, opts).src
    assert "float acc0[3072];" in src and "private(" in src and "acc0" in src.split("private(")[1].split(")")[0], src

def test_pack_errors():
    x, w = Tensor.ones(128, 96).contiguous().realize(), Tensor.ones(256, 96).contiguous().realize()
    ast = (x @ w.T).schedule()[-1].ast
    cpu = Device["CPU"].renderer
    tiled = apply_opt(apply_opt(apply_opt(ast, Opt(U, 0, 8), cpu), Opt(U, 1, 32), cpu), Opt(W, 0, 1), cpu)
    with pytest.raises(KernelOptError, match="outermost loop"): apply_opt(tiled, Opt(K, 1), cpu)
    with pytest.raises(KernelOptError, match="no tile operand"): apply_opt(ast, Opt(K, 0), cpu)   # nothing upcast: no tile operand
    with pytest.raises(KernelOptError, match="STAGE"): apply_opt(tiled, Opt(K, 0), Device["PYTHON"].renderer)
    # a panel bigger than the renderer's limit is refused, not spilled
    from fusegrad.renderer.cstyle import ClangRenderer
    class SmallPanels(ClangRenderer): pack_max_bytes = 1024
    with pytest.raises(KernelOptError, match="1024-byte panel"): apply_opt(tiled, Opt(K, 0), SmallPanels())

def test_heuristic_packs_linear_weights():
    def opts(m, k, n, transposed=True):
        x, w = Tensor.ones(m, k).contiguous().realize(), Tensor.ones(*((n, k) if transposed else (k, n))).contiguous().realize()
        return _opts_on((x @ (w.T if transposed else w)).schedule()[-1].ast, "CPU")
    packed = [Opt(U, 0, 8), Opt(U, 1, 32), Opt(W, 0, 1), Opt(K, 0)]
    assert opts(128, 768, 3072)[:4] == packed                # GPT-2's MLP Linear: 16 row blocks reuse each panel
    assert opts(1024, 1024, 1024, transposed=False)[:4] == packed   # x @ w: only big matrices (rows far apart)
    assert Opt(K, 0) not in opts(128, 768, 3072, transposed=False)   # x @ w with 128 rows: the copy isn't repaid
    assert Opt(K, 0) not in opts(32, 768, 3072)              # 4 row blocks: the dot-product tile
    assert Opt(K, 0) not in opts(128, 8192, 256)             # a 1 MB panel is over the limit: the dot-product tile
    assert Opt(R, 2, 16) in opts(128, 8192, 256)
    # attention's q @ k.T per head (a short 64-step reduce, where the dot-product tile's lane sums cost more than the
    # products): the head loop is outermost already, so each head's 128 keys x 64 are one panel
    q, k = Tensor.ones(1, 12, 128, 64).contiguous().realize(), Tensor.ones(1, 12, 128, 64).contiguous().realize()
    item = (q @ k.transpose(-1, -2)).schedule()[-1]
    assert _opts_on(item.ast, "CPU")[:3] == [Opt(U, 1, 8), Opt(U, 2, 32), Opt(K, 0)]

def test_pack_per_batch_element_matches_numpy():
    rng = np.random.default_rng(4)
    q, k = rng.standard_normal((3, 40, 24)).astype(np.float32), rng.standard_normal((3, 64, 24)).astype(np.float32)
    device = _loop_device()
    item = _kernel(lambda d: Tensor(q, device=d).realize() @ Tensor(k, device=d).realize().transpose(-1, -2), device)
    opts = [Opt(U, 1, 8), Opt(U, 2, 32), Opt(K, 0)]
    assert 24 * 64 in [u.dtype.size for u in get_program(item.ast, Device[device].renderer, opts).uops if u.op is Ops.DEFINE_REG]
    np.testing.assert_allclose(_run(item, opts, device).reshape(3, 40, 64), q @ k.transpose(0, 2, 1), rtol=1e-4, atol=1e-4)

@pytest.mark.parametrize("device", [native_device(), "PYTHON"])
def test_unroll_replaces_the_range_everywhere(device):
    # BatchNorm's mean over (batch, y, x): after UNROLL of the batch and of y, x's loop is nested in
    # y's; a stale copy of y's range kept there ran as a second loop with y's variable (found by
    # fuzzing random action lists against the unoptimized kernel)
    x = Tensor(np.random.default_rng(8).standard_normal((4, 32, 20, 20)).astype(np.float32), device=device).realize()
    item = x.mean((0, 2, 3)).schedule()[-1]
    opts = [Opt(R, 1, 4), Opt(R, 2, 4), Opt(U, 0, 2)]
    ast = item.ast
    for opt in opts: ast = apply_opt(ast, opt, Device[device].renderer)
    assert [r.src[0].arg for r in kernel_axes(ast)] == [16, 1, 5, 20]
    np.testing.assert_allclose(_run(item, opts, device), x.numpy().mean((0, 2, 3)), rtol=1e-5, atol=1e-6)

def test_unroll_keeps_the_loop_order():
    """UNROLL splits a reduce axis into (outer, lanes) with outer where the axis was: x.sum((0, 2, 3)) with the last
    axis unrolled still walks each row contiguously (its outer part innermost), not every row once per lane group."""
    x = Tensor(np.random.default_rng(9).standard_normal((4, 8, 6, 20)).astype(np.float32), device="CPU").realize()
    item = x.sum((0, 2, 3)).schedule()[-1]
    program = get_program(item.ast, Device["CPU"].renderer, [Opt(R, 3, 4)])
    loops = [u.src[0].arg for u in program.uops if u.op is Ops.RANGE and u.arg[1] is AxisType.REDUCE]
    assert loops == [4, 6, 5], loops   # batch, row, then the row's 5 groups of 4 lanes
    np.testing.assert_allclose(_run(item, [Opt(R, 3, 4)], "CPU"), x.numpy().sum((0, 2, 3)), rtol=1e-5)

def test_heuristic_ignores_loads_outside_the_reduce():
    """A BatchNorm variance, ((x - mean) ** 2).sum((0, 2, 3)) split over the batch, reads the per-channel mean once per
    output: it isn't reused in the reduce loop, so it makes no register tile (which gathered 32 batch rows a lane each);
    the reduce gets partial-sum lanes like a plain sum."""
    x = Tensor(np.random.default_rng(10).standard_normal((512, 32, 20, 20)).astype(np.float32), device="CPU").realize()
    mean = x.mean((0, 2, 3), keepdim=True).realize()
    items = ((x - mean) ** 2).sum((0, 2, 3)).schedule()
    first = next(i for i in items if i.ast.op is Ops.SINK and len(i.bufs) == 3)   # the split reduce's first stage
    opts = _opts_on(first.ast, "CPU")
    assert all(o.op is not OptOps.UPCAST for o in opts) and any(o.op is R for o in opts), opts

def _training_kernels(device):
    """Every kernel of a small CNN's forward and backward (conv with 16 channels, BatchNorm, max-pool,
    linear), run in order so each has real inputs."""
    from fusegrad.engine.realize import lower_schedule_item
    rng = np.random.default_rng(12)
    def tensor(*shape): return Tensor(rng.standard_normal(shape).astype(np.float32), device=device, requires_grad=True).realize()
    x = Tensor(rng.standard_normal((2, 1, 12, 12)).astype(np.float32), device=device).realize()
    params = [tensor(16, 1, 5, 5), tensor(16), tensor(16, 16, 3, 3), tensor(1, 16, 1, 1), tensor(16 * 3 * 3, 3)]
    w1, b1, w2, gamma, fc = params
    h = x.conv2d(w1, b1).relu().conv2d(w2)
    h = (h - h.mean((0, 2, 3), keepdim=True)) * (h.var((0, 2, 3), keepdim=True) + 1e-5).rsqrt() * gamma   # BatchNorm
    loss = (h.max_pool2d().flatten(1) @ fc).sparse_categorical_crossentropy(Tensor([0, 2], device=device))
    items = Tensor.schedule(*loss.gradient(*params))
    for item in items: lower_schedule_item(item).run()
    return [item for item in items if item.ast.op is Ops.SINK]

def _attention_kernels(device):
    """Every kernel of an attention block's backward (matmuls, softmax, layernorm), run in order."""
    from fusegrad.engine.realize import lower_schedule_item
    rng = np.random.default_rng(13)
    def tensor(*shape): return Tensor(rng.standard_normal(shape).astype(np.float32), device=device, requires_grad=True).realize()
    x, wq, wk, wv = tensor(2, 12, 32), tensor(32, 32), tensor(32, 32), tensor(32, 32)
    q, k, v = (x @ w for w in (wq, wk, wv))
    scores = q.reshape(2, 12, 4, 8).transpose(1, 2) @ k.reshape(2, 12, 4, 8).permute(0, 2, 3, 1) / 8 ** 0.5
    h = ((scores.softmax(-1) @ v.reshape(2, 12, 4, 8).transpose(1, 2)).transpose(1, 2).reshape(2, 12, 32) + x).layernorm()
    items = Tensor.schedule(*(h.relu().sum() + h.max()).gradient(wq, wk, wv))
    for item in items: lower_schedule_item(item).run()
    return [item for item in items if item.ast.op is Ops.SINK]

@pytest.mark.parametrize("device,kernels", [("CPU", _training_kernels), ("PYTHON", _training_kernels), ("CPU", _attention_kernels)])
def test_random_action_lists_match_unoptimized(device, kernels):
    """Random legal action lists (BEAM's candidates, up to 4 deep) on every kernel of a training step:
    every list leaves each loop one range (no two ranges share a loop variable), and the first few
    (and the heuristic's choice) compute what the unoptimized kernel computes."""
    import random
    choose, renderer, checked = random.Random(7), Device[device].renderer, 0
    for item in kernels(device):
        np.testing.assert_allclose(_run(item, None, device), _run(item, [], device), rtol=1e-4, atol=1e-5, err_msg=str(item.ast.arg))
        reference = _run(item, [], device)
        for trial in range(25):
            ast, opts = random_action_list(item.ast, renderer, choose)
            ids = [r.arg[0] for r in {x for x in ast.toposort if x.op is Ops.RANGE}]
            assert len(ids) == len(set(ids)), f"two ranges share an id after {opts}"
            if trial < 4:
                np.testing.assert_allclose(_run(item, opts, device), reference, rtol=1e-4, atol=1e-5, err_msg=f"{item.ast.arg} {opts}")
                checked += 1
    assert checked >= 40

def test_stage_copies_once_before_the_threads():
    item = _kernel(_conv_forward, "CPU")
    src = get_program(item.ast, Device["CPU"].renderer, [Opt(S, 1), Opt(OptOps.THREAD, 0, 2)]).src
    assert src.index("float stage0[2304];") < src.index("stage0[") < src.index("#pragma omp parallel for")
    # a copy above 64 KB lives on the heap (threads' stacks are small) and is freed at the end
    item = _kernel(_matmul(8, 520, 40), "CPU")
    src = get_program(item.ast, Device["CPU"].renderer, [Opt(S, 1), Opt(OptOps.UPCAST, 1, 8)]).src
    assert "float* stage0 = (float*)malloc(83200);" in src and src.splitlines()[-2].strip() == "free(stage0);", src
    np.testing.assert_allclose(_run(item, [Opt(S, 1), Opt(OptOps.UPCAST, 1, 8)], "CPU"), _run(item, [], "CPU"), rtol=1e-5, atol=1e-5)

def test_stage_errors():
    item = _kernel(_matmul(520, 520, 8), "CPU")
    # a (520 x 520 floats, 1.08 MB) is too big to stage; b (520 x 8) is small
    with pytest.raises(KernelOptError, match="no input read along axis 0 fits"): apply_opt(item.ast, Opt(S, 0), Device["CPU"].renderer)
    staged = apply_opt(item.ast, Opt(S, 1), Device["CPU"].renderer)
    assert [u.dtype.size for u in staged.toposort if u.op is Ops.DEFINE_LOCAL] == [520 * 8]
    with pytest.raises(KernelOptError, match="no input read along axis 1"): apply_opt(staged, Opt(S, 1), Device["CPU"].renderer)
    # on a GPU-style renderer the copy is shared memory: its limit applies (PYTHON: 64 KB)
    item = _kernel(_matmul(130, 130, 4), "PYTHON")
    with pytest.raises(KernelOptError, match="fits in 65536 bytes"): apply_opt(item.ast, Opt(S, 0), Device["PYTHON"].renderer)

def test_padto_gates_reduce_only_when_needed():
    """A sum of products of padded loads needs no select (the gated loads read 0); exp, 1/x and
    max get ``valid.where(value, identity)``."""
    def wheres(ast): return sum(1 for x in ast.toposort if x.op is Ops.WHERE)
    matmul = _kernel(_matmul(7, 5, 9), "CPU").ast
    padded = apply_opt(matmul, Opt(P, 2, 8), Device["CPU"].renderer)
    assert wheres(padded) == wheres(matmul)
    assert sum(1 for x in padded.toposort if x.op is Ops.INDEX and len(x.src) == 3) == 2   # both loads gated
    rows = _kernel(_unsafe_rows(5, 63), "CPU").ast
    assert wheres(apply_opt(rows, Opt(P, 1, 16), Device["CPU"].renderer)) == wheres(rows) + 3
    # padding a global axis gates the output store
    out = apply_opt(rows, Opt(P, 0, 8), Device["CPU"].renderer)
    assert all(len(st.src[0].src) == 3 for st in out.src)

def _sizes(build, opts, device="PYTHON"):
    program = get_program(_kernel(build, device).ast, Device[device].renderer, opts)
    return program.global_size, program.local_size, program

@pytest.mark.parametrize("opts, global_size, local_size", [
    ([], [16, 12, 1], [1, 1, 1]),
    ([Opt(L, 1, 4)], [4, 12, 1], [4, 1, 1]),
    ([Opt(L, 0, 3), Opt(L, 1, 4)], [4, 4, 1], [4, 3, 1]),
    ([Opt(U, 1, 4), Opt(L, 1, 2)], [2, 12, 1], [2, 1, 1]),
    ([Opt(G, 2, 4)], [16, 12, 1], [4, 1, 1]),
    ([Opt(L, 1, 8), Opt(GT, 3, 2)], [2, 12, 1], [2, 8, 1]),      # lidx0 is the group threads, lidx1 the local columns
    ([Opt(L, 1, 16)], [12, 1, 1], [16, 1, 1]),          # a fully local axis leaves the global dims
    ([Opt(N,)], [16, 12, 1], None),
])
def test_launch_sizes_follow_opts(opts, global_size, local_size):
    got_global, got_local, program = _sizes(_matmul(12, 8, 16), opts)
    assert got_global == global_size and got_local == local_size
    specials = {u.arg for u in program.uops if u.op is Ops.SPECIAL}
    if local_size is None: assert specials == {"idx0", "idx1"}
    else: assert {s for s in specials if s.startswith("lidx")} == {f"lidx{d}" for d in range(3) if local_size[d] > 1}

def test_group_lowers_to_local_memory_barrier_and_gated_store():
    program = get_program(_kernel(_reduce_rows(6, 64), "PYTHON").ast, Device["PYTHON"].renderer, [Opt(G, 1, 16), Opt(U, 0, 2)])
    ops = [u.op for u in program.uops]
    locals_ = [u for u in program.uops if u.op is Ops.DEFINE_LOCAL]
    assert len(locals_) == 2 and all(u.dtype.size == 16 * 2 for u in locals_)   # sum and max: 16 threads x 2 upcast rows
    assert ops.count(Ops.BARRIER) == 2
    for barrier in [u for u in program.uops if u.op is Ops.BARRIER]:
        # the barrier is outside every loop, after the stores to its buffer and before the loads from it
        position = program.uops.index(barrier)
        depth = sum(1 if u.op is Ops.RANGE else -1 if u.op is Ops.END else 0 for u in program.uops[:position])
        assert depth == 0
        buffer = barrier.src[0]
        accesses = [(i, u.op) for i, u in enumerate(program.uops) if u.op in (Ops.LOAD, Ops.STORE) and u.src[0].src[0] is buffer]
        assert [op for i, op in accesses if i < position] == [Ops.STORE] and all(op is Ops.LOAD for i, op in accesses if i > position)
    out_store = [u for u in program.uops if u.op is Ops.STORE and u.src[0].src[0].op is Ops.PARAM]
    assert len(out_store) == 1 and len(out_store[0].src[0].src) == 3   # only the group's thread 0 stores

@pytest.mark.parametrize("opts, device, message", [
    ([Opt(L, 0, 2)], "CPU", "local .workgroup. dims"),
    ([Opt(G, 2, 2)], "CPU", "local .workgroup. dims"),
    ([Opt(GT, 2, 2)], "CPU", "local .workgroup. dims"),
    ([Opt(N,)], "CPU", "NOLOCALS is meaningless"),
    ([Opt(L, 2, 2)], "PYTHON", "LOCAL is for global axes"),
    ([Opt(L, 0, 5)], "PYTHON", "5 doesn't divide"),
    ([Opt(G, 2, 2), Opt(L, 2, 2)], "PYTHON", "LOCAL is for global axes, axis 2 is GROUP_REDUCE"),
    ([Opt(L, 1, 4), Opt(L, 2, 2)], "PYTHON", "LOCAL is for global axes, axis 2 is LOCAL"),
    ([Opt(G, 0, 4)], "PYTHON", "GROUP is for reduce axes"),
    ([Opt(GT, 1, 4)], "PYTHON", "GROUPTOP is for reduce axes"),
    ([Opt(G, 2, 3)], "PYTHON", "3 doesn't divide"),
    ([Opt(G, 2, 2), Opt(G, 2, 2)], "PYTHON", "GROUP is for reduce axes, axis 2 is GROUP_REDUCE"),
    ([Opt(G, 2, 2), Opt(U, 2, 2)], "PYTHON", "not grouped reduce"),
    ([Opt(G, 2, 2), Opt(R, 2, 2)], "PYTHON", "UNROLL is for reduce axes"),
    ([Opt(L, 0, 3), Opt(SW := OptOps.SWAP, 0, 2)], "PYTHON", "SWAP exchanges two global axes"),
    ([Opt(N,), Opt(L, 0, 2)], "PYTHON", "LOCAL after NOLOCALS"),
    ([Opt(N,), Opt(G, 2, 2)], "PYTHON", "GROUP after NOLOCALS"),
    ([Opt(N,), Opt(GT, 2, 2)], "PYTHON", "GROUPTOP after NOLOCALS"),
    ([Opt(N,), Opt(N,)], "PYTHON", "NOLOCALS was already applied"),
    ([Opt(L, 0, 2), Opt(N,)], "PYTHON", "already uses locals"),
    ([Opt(G, 2, 2), Opt(N,)], "PYTHON", "already uses locals"),
    ([Opt(P, 1, 8)], "PYTHON", "nothing to pad: 16 is already a multiple of 8"),
    ([Opt(P, 2, 64)], "CPU", "more than quadruple"),
    ([Opt(P, 2, 1)], "CPU", "at least 2"),
    ([Opt(L, 1, 4), Opt(P, 2, 8)], "PYTHON", "PADTO pads global and reduce axes, not LOCAL"),
    ([Opt(G, 2, 4), Opt(P, 2, 8)], "PYTHON", "PADTO pads global and reduce axes, not GROUP_REDUCE"),
    # (float32 products: no tensor core here takes them; test_tc.py has the rest)
    ([Opt(OptOps.TC, 0, 0)], "PYTHON", "no single sum of products that the PYTHON tensor cores"),
    ([Opt(OptOps.TC, 0, 0)], "CPU", r"no single sum of products that the CPU tensor cores \(bfloat16 -> float\)"),
])
def test_illegal_gpu_opts_raise(opts, device, message):
    ast = _kernel(_matmul(12, 8, 16), device).ast
    renderer = Device[device].renderer
    for opt in opts[:-1]: ast = apply_opt(ast, opt, renderer)
    with pytest.raises(KernelOptError, match=message): apply_opt(ast, opts[-1], renderer)

def test_group_of_nested_reduce_raises():
    ast = _kernel(_matmul_max(6, 8, 10), "PYTHON").ast
    # axes: 0 rows, 1 the max's columns (outer reduce), 2 the matmul's sum (inside the max's loop)
    with pytest.raises(KernelOptError, match="nested inside another loop"): apply_opt(ast, Opt(G, 2, 4), Device["PYTHON"].renderer)
    with pytest.raises(KernelOptError, match="nested inside another loop"): apply_opt(ast, Opt(GT, 2, 2), Device["PYTHON"].renderer)

class _SmallGPU(type(Device["PYTHON"].renderer)):
    local_max = (8, 4, 4)
    local_max_threads = 64
    shared_max = 256

@pytest.mark.parametrize("opts, message", [
    ([Opt(L, 1, 16)], "local dim 0 of size 16 exceeds the PYTHON renderer's limit 8"),
    ([Opt(L, 0, 6), Opt(L, 1, 2)], "local dim 1 of size 6 exceeds"),
    ([Opt(L, 0, 4), Opt(L, 1, 4), Opt(G, 4, 8)], "a workgroup of 128 threads exceeds the PYTHON renderer's maximum of 64"),
    ([Opt(G, 2, 8), Opt(L, 0, 12)], "a workgroup of 96 threads exceeds"),
    # 8 threads x 4 upcast columns x 4 bytes = 128 fits; a later UPCAST of the rows doubles it past 256
    ([Opt(G, 2, 8), Opt(U, 1, 4), Opt(U, 0, 4)], "exceeds maximum shared memory size: needs 512, max 256"),
])
def test_workgroup_limits(opts, message):
    ast = _kernel(_matmul(12, 8, 16), "PYTHON").ast
    renderer = _SmallGPU()
    for opt in opts[:-1]: ast = apply_opt(ast, opt, renderer)
    with pytest.raises(KernelOptError, match=message): apply_opt(ast, opts[-1], renderer)

def test_colored_shape_shows_local_and_group_axes(capsys, monkeypatch):
    monkeypatch.setenv("FORCE_COLOR", "1")   # captured output isn't a terminal: colours would be off
    monkeypatch.delenv("NO_COLOR", raising=False)
    item = _kernel(_matmul(12, 8, 16), "PYTHON")
    opts = [Opt(L, 1, 4), Opt(GT, 3, 2), Opt(U, 0, 3)]
    ast = item.ast
    for opt in opts: ast = apply_opt(ast, opt, Device["PYTHON"].renderer)
    # global (blue), local (cyan), grouped reduce (green), reduce (red), upcast (yellow), in that order
    expected = "_".join(f"\x1b[{code}m{size}\x1b[0m" for code, size in [(34, 4), (34, 4), (36, 4), (32, 2), (31, 4), (33, 3)])
    assert colored_shape(ast) == expected
    with Context(DEBUG=3): get_program(item.ast, Device["PYTHON"].renderer, opts)
    assert expected in capsys.readouterr().out

def test_candidate_actions_follow_the_renderer():
    def kinds(device, build=_matmul(7, 5, 9)):
        return {a.op for a in candidate_actions(_kernel(build, device).ast, Device[device].renderer)}
    gpu_only = {L, G, GT, N}
    assert gpu_only <= kinds("PYTHON") and not gpu_only & kinds("CPU")
    assert P in kinds("CPU") and P in kinds("PYTHON")
    assert P not in kinds("CPU", _matmul(32, 32, 64))       # nothing to pad
    assert OptOps.TC not in kinds("PYTHON")                 # float32: no tensor core takes it (bfloat16: test_tc.py)
    assert S in kinds("CPU") and S in kinds("PYTHON")

def test_every_legal_candidate_computes_the_same():
    """One BEAM step on the PYTHON device: every candidate that applies gives the unoptimized result."""
    item = _kernel(_reduce_rows(6, 48), "PYTHON")
    reference = _run(item, [], "PYTHON")
    renderer, applied = Device["PYTHON"].renderer, set()
    for action in candidate_actions(item.ast, renderer):
        try: apply_opt(item.ast, action, renderer)
        except KernelOptError: continue
        applied.add(action.op)
        np.testing.assert_allclose(_run(item, [action], "PYTHON"), reference, rtol=1e-5, atol=1e-5, err_msg=str(action))
    assert {U, R, L, G, GT, N, P, S} <= applied

@pytest.mark.parametrize("op, second_thread_starts_at", [(G, 1), (GT, 4)])
def test_group_and_grouptop_split_the_range_differently(op, second_thread_starts_at):
    """64 elements over 16 threads: GROUP interleaves them (thread 1 reads element 1 first),
    GROUPTOP gives each thread a contiguous block (thread 1 reads element 4 first)."""
    program = get_program(_kernel(_reduce_rows(6, 64), "PYTHON").ast, Device["PYTHON"].renderer, [Opt(op, 1, 16)])
    (index,) = {u.src[0].src[1] for u in program.uops if u.op is Ops.LOAD and u.src[0].src[0].op is Ops.PARAM}
    at = {x: x.const_like(1 if x.op is Ops.SPECIAL and x.arg == "lidx0" else 0) for x in index.toposort if x.op in (Ops.SPECIAL, Ops.RANGE)}
    assert index.substitute(at).simplify().arg == second_thread_starts_at

def test_group_in_a_multi_output_kernel():
    x = Tensor(np.random.default_rng(3).standard_normal((4, 32)).astype(np.float32), device="PYTHON").realize()
    (item,) = Tensor.schedule(x.sum(1), x.max(1))
    assert len(item.ast.src) == 2
    for opts in [[Opt(G, 1, 8)], [Opt(GT, 1, 4), Opt(U, 0, 2), Opt(L, 0, 2)], [Opt(P, 0, 8), Opt(L, 0, 8), Opt(G, 1, 4)]]:
        for b in item.bufs: b.ensure_allocated()
        for b in item.bufs[:2]: b.copyin(memoryview(np.full(4, np.nan, np.float32).tobytes()))   # no stale results
        CompiledRunner(get_program(item.ast, Device["PYTHON"].renderer, opts))(item.bufs, {})
        np.testing.assert_allclose(item.bufs[0].numpy(), x.numpy().sum(1), rtol=1e-5, atol=1e-5, err_msg=str(opts))
        np.testing.assert_allclose(item.bufs[1].numpy(), x.numpy().max(1), err_msg=str(opts))

def test_heuristic_dot_product_tile_puts_the_longer_axis_outside():
    # x @ w.T with w (out, in) as nn.Linear stores it, and too few rows of x to repay packing w (32 rows: 4 row
    # blocks): both inputs run along the reduce, so a dot-product tile (4 x 4 outputs, 16 partial-sum lanes). The
    # weight's axis (3072) is longer than x's rows: its loop goes outside, so each 4-row piece of the 9.4 MB weight
    # is read once and x streams from cache
    x, w = Tensor.ones(32, 768).contiguous().realize(), Tensor.ones(3072, 768).contiguous().realize()
    opts = _opts_on((x @ w.T).schedule()[-1].ast, "CPU")
    assert opts[:4] == [Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.UNROLL, 2, 16), Opt(OptOps.SWAP, 0, 1)], opts
    # the other way round (more rows than weight rows) keeps the row loop outside
    assert not any(o.op is OptOps.SWAP for o in _opts_on((w[:64] @ x.T).schedule()[-1].ast, "CPU"))
    # and the swapped tile computes the product
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((16, 48)).astype(np.float32), rng.standard_normal((256, 48)).astype(np.float32)
    item = _kernel(lambda device: Tensor(a, device=device).realize() @ Tensor(b, device=device).realize().T, "CPU")
    opts = _opts_on(item.ast, "CPU")
    assert Opt(OptOps.SWAP, 0, 1) in opts and Opt(OptOps.UNROLL, 2, 16) in opts, opts
    np.testing.assert_allclose(_run(item, opts, "CPU").reshape(16, 256), a @ b.T, rtol=1e-4, atol=1e-4)

def test_heuristic_threads_costly_elementwise_kernels(monkeypatch):
    # an elementwise kernel's work is elements x ops per element: random bits (threefry, ~100 integer ops per element)
    # over a quarter million elements get threads, a cheap op over as many elements doesn't
    from fusegrad.codegen.opt import heuristic
    monkeypatch.setattr(heuristic, "cpu_count", lambda: 2)
    x = Tensor.ones(512, 512).contiguous().realize()
    cheap = next(i.ast for i in (x * 2 + 1).schedule() if i.ast.op is Ops.SINK)
    assert not any(o.op is OptOps.THREAD for o in _opts_on(cheap, "CPU"))
    costly = [i.ast for i in Tensor.rand(512, 512).schedule() if i.ast.op is Ops.SINK][-1]
    assert Opt(OptOps.THREAD, 0, 2) in _opts_on(costly, "CPU")

def test_heuristic_widths_come_from_the_renderer():
    # the heuristic's vector widths are the renderer's (max_vector_bytes), not AVX-512 literals: a 32-byte (AVX2)
    # renderer gets 8-lane vectors and an 8 x 16 matmul tile where AVX-512 gets 16 lanes and 8 x 32
    from fusegrad.renderer.cstyle import ClangRenderer
    class AVX2(ClangRenderer): max_vector_bytes = 32
    x = Tensor.ones(256, 512).contiguous().realize()
    elementwise = next(i.ast for i in (x * 2 + 1).schedule() if i.ast.op is Ops.SINK)
    assert Opt(OptOps.UPCAST, 1, 16) in hand_coded_optimizations(elementwise, ClangRenderer())
    assert Opt(OptOps.UPCAST, 1, 8) in hand_coded_optimizations(elementwise, AVX2())
    a, b = Tensor.ones(64, 96).contiguous().realize(), Tensor.ones(96, 128).contiguous().realize()
    matmul = next(i.ast for i in (a @ b).schedule() if i.ast.op is Ops.SINK)
    assert hand_coded_optimizations(matmul, ClangRenderer())[:2] == [Opt(OptOps.UPCAST, 0, 8), Opt(OptOps.UPCAST, 1, 32)]
    # (two 8-lane vectors per tile row, 16 vector registers of accumulators: 8 rows)
    assert hand_coded_optimizations(matmul, AVX2())[:2] == [Opt(OptOps.UPCAST, 0, 8), Opt(OptOps.UPCAST, 1, 16)]

def test_gpu_heuristic_numbers_come_from_the_renderer():
    from fusegrad.renderer.opencl import OpenCLRenderer
    from fusegrad.codegen.kernel import local_axes, range_size
    from fusegrad.helpers import prod
    class SmallGroups(OpenCLRenderer): workgroup_threads, thread_accumulators = 32, 4
    a, b = Tensor.ones(128, 64).contiguous().realize(), Tensor.ones(64, 128).contiguous().realize()
    matmul = next(i.ast for i in (a @ b).schedule() if i.ast.op is Ops.SINK)
    for renderer, threads, tile in ((OpenCLRenderer(), 128, 16), (SmallGroups(), 32, 4)):
        ast = matmul
        for opt in hand_coded_optimizations(matmul, renderer): ast = apply_opt(ast, opt, renderer)
        assert prod(range_size(r) for r in local_axes(ast)) == threads
        lanes = {r for x in ast.toposort if x.op is Ops.REDUCE for r in x.src[1:]}   # (UNROLL's partial sums)
        upcasts = [x for x in ast.toposort if x.op is Ops.RANGE and x.arg[1].name == "UPCAST" and x not in lanes]
        assert prod(range_size(r) for r in upcasts) == tile
    assert SmallGroups().options != OpenCLRenderer().options   # and so they are different cache entries

def _batched_matmul(batch, m, k, n):
    def build(device):
        rng = np.random.default_rng(m + n)
        a = Tensor(rng.standard_normal((batch, m, k)).astype(np.float32), device=device).realize()
        return a @ Tensor(rng.standard_normal((batch, k, n)).astype(np.float32), device=device).realize()
    return build

@pytest.mark.parametrize("shape,pads", [((1, 61, 37, 59), [(1, 8), (2, 32)]), ((3, 127, 20, 127), [(1, 8), (2, 32)]),
                                        ((1, 40, 30, 100), [(2, 16)]), ((1, 63, 16, 64), [(1, 8)])])
def test_odd_matmul_is_padded_to_a_whole_tile(shape, pads):
    """A matmul whose rows or columns no good tile divides is padded (PADTO: rows to 8, columns to 32 or 16) and tiled
    8 x 32 or 8 x 16 like a round one; the padding's rows and columns are never stored (the output starts as NaNs in
    _run) and the values match the unoptimized kernel. (Before: 997 columns got no tile, 4 GFLOPS.)"""
    batch, m, k, n = shape
    item = _kernel(_batched_matmul(batch, m, k, n) if batch > 1 else _matmul(m, k, n), "CPU")
    opts = _opts_on(item.ast, "CPU")
    offset = 0 if batch > 1 else -1   # (a single matmul has no batch axis: rows are axis 0)
    assert [(o.axis, o.arg) for o in opts if o.op is OptOps.PADTO] == [(axis + offset, amount) for axis, amount in pads]
    upcasts = [o.arg for o in opts if o.op is OptOps.UPCAST]
    assert upcasts[0] == 8 and upcasts[1] in (16, 32)
    np.testing.assert_allclose(_run(item, opts, "CPU"), _run(item, [], "CPU"), rtol=1e-5, atol=1e-5)

@pytest.mark.parametrize("m,k,n", [(1, 64, 50), (64, 64, 10), (64, 32, 64)])
def test_matmul_padding_only_where_it_pays(m, k, n):
    """No padding for a round matmul, nor where it would add more than an eighth of an axis's work (1 row -> 8, 10
    columns -> 16)."""
    assert not any(o.op is OptOps.PADTO for o in _opts_on(_kernel(_matmul(m, k, n), "CPU").ast, "CPU"))

def _sum_along(m, n, axis):
    def build(device):
        return Tensor(np.random.default_rng(m).standard_normal((m, n)).astype(np.float32), device=device).realize().sum(axis)
    return build

@pytest.mark.parametrize("m,n,axis,expected", [(64, 1031, 1, [(OptOps.PADTO, 16), (OptOps.UNROLL, 16)]),
                                               (300, 1031, 0, [(OptOps.PADTO, 64), (OptOps.UPCAST, 64)])])
def test_reductions_with_odd_lengths_are_padded_to_vectors(m, n, axis, expected):
    """A long row whose length no vector width divides (1031 is prime) gets partial sums over its padding to 16 lanes
    (masked loads read 0) instead of serial adds; a sum down columns whose count none divides pads the columns to
    whole vectors instead of reading down them (4095 x 4097: rows 7.1 -> 1.9 ms, columns 20.6 -> 3.4 ms)."""
    item = _kernel(_sum_along(m, n, axis), "CPU")
    opts = _opts_on(item.ast, "CPU")
    assert [(o.op, o.arg) for o in opts if o.op is not OptOps.THREAD] == expected
    np.testing.assert_allclose(_run(item, opts, "CPU"), _run(item, [], "CPU"), rtol=1e-4, atol=1e-4)

def _conv(batch, cin, cout, size, k, padding):
    def build(device):
        rng = np.random.default_rng(cout)
        x = Tensor(rng.standard_normal((batch, cin, size, size)).astype(np.float32), device=device).realize()
        w = Tensor(rng.standard_normal((cout, cin, k, k)).astype(np.float32), device=device).realize()
        return x.conv2d(w, padding=padding)
    return build

@pytest.mark.parametrize("shape,pads", [((2, 63, 65, 31, 3, 1), [(1, 8), (3, 16)]), ((2, 255, 257, 14, 1, 0), [(1, 16)])])
def test_odd_conv_is_padded_to_a_whole_tile(shape, pads):
    """A conv whose output channels or image rows no tile divides pads them (channels to 16 or 8, the row to 16) before
    tiling like a round one: 63 -> 65 channels on a 31-wide image got a 5 x 31 tile, 121 ms against the round
    shape's 12.7 (padded: 13.7); a 1x1 conv with 257 channels no channel vector, 5.6 ms against 1.6 (padded: 1.8)."""
    item = _kernel(_conv(*shape), "CPU")
    opts = _opts_on(item.ast, "CPU")
    assert [(o.axis, o.arg) for o in opts if o.op is OptOps.PADTO] == pads
    np.testing.assert_allclose(_run(item, opts, "CPU"), _run(item, [], "CPU"), rtol=1e-4, atol=1e-4)
