"""Loop nesting is derived from a kernel's structure (codegen/kernel.py ``loop_nesting``): a RANGE carries only its
trip count, so these check the derivation on small hand-built kernels, and that every range of real kernels, after
the optimizer's actions, is bare."""
import numpy as np
import pytest
from fusegrad import Tensor, Device, dtypes
from fusegrad.codegen import get_program, simplify_kernel
from fusegrad.codegen.kernel import loop_nesting
from fusegrad.codegen.linearize import linearize
from fusegrad.codegen.lowering import lower_reduces
from fusegrad.codegen.opt import optimize_kernel
from fusegrad.uop.ops import UOp, Ops, AxisType

def loop(size: int, number: int, kind: AxisType = AxisType.LOOP) -> UOp:
    return UOp(Ops.RANGE, dtypes.index, (UOp.const(dtypes.index, size),), (number, kind))

def buffer(slot: int, size: int) -> UOp:
    return UOp(Ops.PARAM, dtypes.float32.ptr(size), (), slot)

def total(value: UOp, *ranges: UOp) -> UOp:
    return UOp(Ops.REDUCE, value.dtype, (value,) + ranges, Ops.ADD)

def kernel(*stores: UOp) -> UOp:
    return UOp(Ops.SINK, dtypes.void, stores)

def test_a_reduce_runs_inside_the_output_loops_its_value_reads():
    out, x = buffer(0, 4), buffer(1, 32)
    g, r = loop(4, 0), loop(8, 1, AxisType.REDUCE)
    sink = kernel(out.index(g).store(total(x.index(g * 8 + r).load(), r)))
    nesting = loop_nesting(sink)
    assert nesting[g] == frozenset() and nesting[r] == {g}

def test_a_reduce_that_reads_no_output_loop_is_hoisted_out_of_them():
    out, x, y = buffer(0, 4), buffer(1, 8), buffer(2, 4)
    g, r = loop(4, 0), loop(8, 1, AxisType.REDUCE)
    sink = kernel(out.index(g).store(total(x.index(r).load(), r) + y.index(g).load()))
    assert loop_nesting(sink)[r] == frozenset()
    # so the linear program runs the reduce loop once, before the output loop opens
    opened = [u.arg[0] for u in linearize(lower_reduces(sink)) if u.op is Ops.RANGE]
    assert opened[0] == 1 and opened[-1] == 0

def test_output_lanes_nest_innermost_and_a_reduce_gets_its_own_copies_of_them():
    out, x = buffer(0, 16), buffer(1, 128)
    g, lane, r = loop(4, 0), loop(4, 2, AxisType.UPCAST), loop(8, 1, AxisType.REDUCE)
    sink = kernel(out.index(g * 4 + lane).store(total(x.index((g * 4 + lane) * 8 + r).load(), r)))
    nesting = loop_nesting(sink)
    assert nesting[lane] == {g}
    assert nesting[r] == {g}   # not inside the lane: the accumulator keeps one slot per lane instead
    lowered = lower_reduces(sink)
    copies = [x for x in lowered.toposort if x.op is Ops.RANGE and x.arg[1] is AxisType.UPCAST and x is not lane]
    after = loop_nesting(lowered)
    update_lane = next(c for c in copies if r in after[c])
    init_lane = next(c for c in copies if r not in after[c])
    assert after[update_lane] == {g, r} and after[init_lane] == {g}

def test_the_loops_of_one_reduce_nest_in_the_order_it_lists_them():
    out, x = buffer(0, 4), buffer(1, 4 * 6 * 5)
    g, r1, r2 = loop(4, 0), loop(6, 1, AxisType.REDUCE), loop(5, 2, AxisType.REDUCE)
    sink = kernel(out.index(g).store(total(x.index(g * 30 + r1 * 5 + r2).load(), r1, r2)))
    nesting = loop_nesting(sink)
    assert nesting[r1] == {g} and nesting[r2] == {g, r1}

def test_a_reduce_inside_another_reduce_nests_inside_its_loop():
    out, x = buffer(0, 1), buffer(1, 6 * 5)
    r1, r2 = loop(6, 0, AxisType.REDUCE), loop(5, 1, AxisType.REDUCE)
    inner = total(x.index(r1 * 5 + r2).load(), r2)
    sink = kernel(out.index(UOp.const(dtypes.index, 0)).store(total(inner * inner, r1)))
    nesting = loop_nesting(sink)
    assert nesting[r2] == {r1} and nesting[r1] == frozenset()

def test_loops_that_would_nest_in_a_cycle_are_an_error():
    out, x = buffer(0, 1), buffer(1, 30)
    r1, r2 = loop(6, 0, AxisType.REDUCE), loop(5, 1, AxisType.REDUCE)
    # r2 closes inside r1's body and r1 inside r2's: no loop order runs both
    first = total(total(x.index(r1 * 5 + r2).load(), r2), r1)
    second = total(total(x.index(r1 * 5 + r2).load(), r1), r2)
    zero = UOp.const(dtypes.index, 0)
    with pytest.raises(ValueError, match="cycle"): loop_nesting(kernel(out.index(zero).store(first + second)))

def _optimized_kernels(*tensors: Tensor) -> list[UOp]:
    renderer = Device["CPU"].renderer
    return [optimize_kernel(simplify_kernel(item.ast), renderer)[0] for item in Tensor.schedule(*tensors) if item.ast.op is Ops.SINK]

def test_ranges_stay_bare_through_the_optimizer_and_lowering():
    rng = np.random.default_rng(0)
    x = Tensor(rng.standard_normal((4, 8, 12, 12)).astype(np.float32)).realize()
    w = Tensor(rng.standard_normal((16, 8, 3, 3)).astype(np.float32), requires_grad=True).realize()
    a = Tensor(rng.standard_normal((64, 48)).astype(np.float32), requires_grad=True).realize()
    loss = x.conv2d(w, padding=1).relu().sum() + (a @ a.T).softmax(-1).sum()
    asts = _optimized_kernels(loss, *loss.gradient(w, a))
    assert len(asts) >= 4
    for ast in asts:
        lowered = lower_reduces(ast)
        assert all(len(r.src) == 1 for r in lowered.toposort if r.op is Ops.RANGE)
        program = linearize(lowered)
        # every loop the program opens, it closes, innermost first
        stack = []
        for u in program:
            if u.op is Ops.RANGE: stack.append(u)
            if u.op is Ops.END: assert stack.pop() is u.src[0]
        assert not stack

def test_swapped_and_unrolled_nests_compute_the_same_result():
    # the bug class that hand-repaired nesting had: an action on a range that other ranges nested in
    from fusegrad.codegen.opt import Opt, OptOps
    rng = np.random.default_rng(1)
    a = rng.standard_normal((24, 16)).astype(np.float32)
    b = rng.standard_normal((16, 20)).astype(np.float32)
    out = (Tensor(a) @ Tensor(b)).sum(0)   # a reduce whose value holds another reduce
    item = [i for i in Tensor.schedule(out) if i.ast.op is Ops.SINK][-1]
    from helpers import run_kernel
    expected = (a @ b).sum(0)
    for opts in ([], [Opt(OptOps.UNROLL, 1, 4)], [Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.UNROLL, 1, 2)],
                 [Opt(OptOps.UNROLL, 2, 4), Opt(OptOps.UNROLL, 1, 2)]):
        np.testing.assert_allclose(run_kernel(item, opts, "CPU")[0], expected, rtol=1e-4, atol=1e-4, err_msg=str(opts))
