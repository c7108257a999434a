"""The memory planner: intermediates with disjoint lifetimes share memory."""
import numpy as np
from fusegrad import Tensor, GlobalCounters, Context
from fusegrad.dtype import dtypes
from fusegrad.engine.memory import plan_memory
from fusegrad.schedule import new_buffer_uop

def test_disjoint_lifetimes_share_a_block():
    a, b, c = (new_buffer_uop("CPU", 100, dtypes.float32) for _ in range(3))
    out = new_buffer_uop("CPU", 100, dtypes.float32)
    buffers: dict = {}
    # a is last used at step 1, c starts at step 2: c may reuse a's memory; b overlaps both
    before, after = plan_memory([[a], [b, a], [c, b], [out, c]], keep={out}, buffers=buffers)
    assert before == 3 * 400 and after == 2 * 400
    assert buffers[a].base is buffers[c].base and buffers[a].base is not buffers[b].base
    assert out not in buffers

def test_planner_keeps_values_correct(rng):
    x = Tensor(rng.standard_normal((64, 64)).astype(np.float32)).realize()
    y = (((x @ x).relu() @ x) * 0.01).exp2().sum(0)
    expected = np.exp2((np.maximum(x.numpy() @ x.numpy(), 0) @ x.numpy()) * 0.01).sum(0)
    np.testing.assert_allclose(y.numpy(), expected, rtol=1e-4)

def _mlp_peak(layers: int = 10) -> tuple[int, float]:
    Tensor.manual_seed(0)
    weights = [(Tensor.randn(64, 64) * 0.1).realize() for _ in range(layers)]
    for w in weights: w.requires_grad = True
    x = Tensor.randn(32, 64).realize()
    GlobalCounters.reset()
    start = GlobalCounters.mem_used
    h = x
    for w in weights: h = (h @ w).relu()
    loss = h.square().mean()
    loss.backward()
    Tensor.realize(loss, *[w.grad for w in weights])
    return GlobalCounters.mem_high_water - start, loss.item()

def test_mlp_peak_memory_lower_with_planner():
    with_planner, loss_a = _mlp_peak()
    with Context(NO_MEMORY_PLANNER=1): without_planner, loss_b = _mlp_peak()
    assert loss_a == loss_b
    assert with_planner < without_planner
