"""Lowering rules (fusegrad/codegen/lowering.py) seen through the kernels they produce."""
import numpy as np
from fusegrad import Tensor, Device, dtypes, nn
from fusegrad.codegen import get_program
from fusegrad.uop.ops import Ops

def _programs(t: Tensor):
    """The rendered programs of ``t``'s schedule (earlier kernels run, so inputs exist)."""
    from fusegrad.engine.realize import lower_schedule_item
    programs = []
    for item in t.schedule():
        if item.ast.op is Ops.SINK: programs.append(get_program(item.ast, Device[Device.DEFAULT].renderer))
        lower_schedule_item(item).run()
    return programs

def test_embedding_lookup_is_a_read_not_a_sum_over_the_vocabulary():
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((5000, 16)).astype(np.float32)
    emb = nn.Embedding(5000, 16)
    emb.weight = Tensor(weight).realize()
    ids = np.array([[0, 4999, 17, 2500, 17]], np.int32)
    out = emb(Tensor(ids).realize())
    # no kernel loops over the 5000 rows: at most a reduce over the pieces a split vocabulary leaves (5000 = 8 x 625)
    assert all("5000" not in p.name and "625" not in p.name for p in _programs(out)), [p.name for p in _programs(out)]
    np.testing.assert_array_equal(out.numpy(), weight[ids])

def test_onehot_lookup_out_of_range_reads_zero():
    # the one-hot sum matches no row for an index outside [0, N): the collapsed read must give 0 too
    x = Tensor.arange(12, dtype=dtypes.float32).reshape(4, 3) + 1
    emb = nn.Embedding(4, 3)
    emb.weight = x.realize()
    got = emb(Tensor([[-1, 2, 4, 0, 7]], dtype=dtypes.int32)).numpy()[0]
    expected = np.array([[0, 0, 0], [7, 8, 9], [0, 0, 0], [1, 2, 3], [0, 0, 0]], np.float32)
    np.testing.assert_array_equal(got, expected)

def test_gather_and_tensor_indexing_still_match_numpy():
    data = np.arange(30, dtype=np.float32).reshape(5, 6)
    t = Tensor(data)
    idx = np.array([4, 0, 2, 2])
    np.testing.assert_array_equal(t[Tensor(idx)].numpy(), data[idx])
    cols = np.array([[5], [0], [3], [1], [2]])
    np.testing.assert_array_equal(t.gather(1, Tensor(cols)).numpy(), np.take_along_axis(data, cols, 1))
    # the gradient of a lookup is a scatter-add (a sum over positions, not a one-hot lookup): repeated ids add up
    w = Tensor(data, requires_grad=True)
    w[Tensor(idx)].sum().backward()
    expected = np.zeros_like(data)
    np.add.at(expected, idx, 1.0)
    np.testing.assert_array_equal(w.grad.numpy(), expected)

def test_a_one_sided_gate_bounds_a_wrapped_index():
    """A padding only at the end (a prime-length reduce padded for its split: ``row < 8191``) gives a gate with no lower
    clause; the sum's own lower bound (ranges start at 0) stands in, so the index's wrap is still dropped and the
    load stays affine (an 8191 x 8191 sum: per-lane gathers through ``% 67092481``, 56 ms -> 8 ms)."""
    from fusegrad import Tensor
    from fusegrad.codegen import simplify_kernel
    from fusegrad.uop.ops import Ops
    item = Tensor.empty(191, 191).sum().schedule()[0]
    index = next(u for u in simplify_kernel(item.ast).toposort if u.op is Ops.INDEX and len(u.src) == 3)
    assert index.src[1].op is not Ops.MOD
