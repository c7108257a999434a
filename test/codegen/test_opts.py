"""Optimization actions: every optimized kernel must compute what the unoptimized kernel computes."""
import itertools
import numpy as np
import pytest
from fusegrad import Tensor, Device
from fusegrad.codegen import get_program
from fusegrad.codegen.opt import Opt, OptOps, KernelOptError, apply_opt, kernel_axes, hand_coded_optimizations
from fusegrad.engine.realize import CompiledRunner

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

@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
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

@pytest.mark.parametrize("opt, message", [
    (Opt(OptOps.UPCAST, 0, 5), "doesn't divide"),
    (Opt(OptOps.UPCAST, 2, 4), "UNROLL"),            # axis 2 is the reduce
    (Opt(OptOps.UNROLL, 0, 4), "reduce axes"),
    (Opt(OptOps.UPCAST, 7, 2), "out of range"),
    (Opt(OptOps.LOCAL, 0, 2), "not supported"),
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
