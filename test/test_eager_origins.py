"""The autograd bookkeeping of an eager op (issue 19): a realize that turns one graph into one new buffer
records the graph's origin through a short search (gradient._record_root_origin) instead of the general
walk over every node. Both must decide alike; gradients through eagerly realized ops must match PyTorch's."""
import numpy as np
import pytest
import torch
from fusegrad import Tensor, dtypes
import fusegrad.tensor as tensor_module
from fusegrad import gradient
from fusegrad.gradient import origin_of
from fusegrad.uop.ops import Ops

def _new_buffers(becomes: dict) -> list:
    return [new.base for new in becomes.values()]

@pytest.fixture
def compare_with_general_walk(monkeypatch):
    """Every record_origins call the fast path would take is also run through the general walk (given the one
    graph twice, which the walk skips the second time but which keeps the fast path out): same origins, same result."""
    real = gradient.record_origins
    compared = []
    def both(becomes, graphs, grad_leaves, value_leaves, live):
        if len(graphs) != 1 or len(becomes) != 1: return real(becomes, graphs, grad_leaves, value_leaves, live)
        general = real(becomes, graphs + graphs, grad_leaves, value_leaves, live)
        general_origins = [origin_of(b) for b in _new_buffers(becomes)]
        for b in _new_buffers(becomes): b.__dict__.pop(gradient._ORIGIN, None)
        fast = real(becomes, graphs, grad_leaves, value_leaves, live)
        assert fast == general and [origin_of(b) for b in _new_buffers(becomes)] == general_origins
        compared.append(bool(fast))
        return fast
    monkeypatch.setattr(tensor_module, "record_origins", both)
    return compared

def test_eager_origins_match_the_general_walk(compare_with_general_walk):
    x = Tensor([1.0, -2.0, 3.0]).realize()                        # a float tensor: gradient() may target it
    i = Tensor([1, 2, 3], dtype=dtypes.int32).realize()
    w = Tensor([0.5, 1.5, -1.0], requires_grad=True).realize()
    kept = {
        "float op on a live float tensor": (x + 1).realize(),
        "through a detach": (x.detach() + 1).realize(),
        "int op": (i + 1).realize(),
        "bool result of a requires_grad tensor": (w > 0).realize(),
        "bool result of a float tensor": (x > 0).realize(),
        "int cast of a float tensor": (x * 2).cast(dtypes.int32).realize(),
        "reduce to a scalar": (x * x).sum().realize(),
        "temporary input only": (Tensor([4.0, 5.0]) * 3).realize(),
        "requires_grad tensor": (w * 2).realize(),
    }
    chained = (kept["float op on a live float tensor"] * 2).realize()   # reads a buffer with an origin
    # ten realizes, each one graph to one buffer; the detached result has requires_grad=False, so nothing is asked for it
    assert len(compare_with_general_walk) == len(kept) + 1 - 1
    # what each decision must be (PyTorch's notion: which results can carry a gradient back to a live tensor)
    recorded = {name for name, t in kept.items() if origin_of(t.uop.base) is not None}
    assert recorded == {"float op on a live float tensor", "bool result of a requires_grad tensor", "reduce to a scalar",
                        "requires_grad tensor"}
    assert origin_of(chained.uop.base) is not None

def test_no_origin_without_a_float_or_requires_grad_tensor_in_the_graph(compare_with_general_walk):
    i = Tensor([1, 2, 3], dtype=dtypes.int32).realize()
    j = (i * 2 + 1).realize()
    assert origin_of(j.uop.base) is None
    Tensor.no_grad = True
    try:
        x = Tensor([1.0, 2.0]).realize()
        y = (x + 1).realize()
    finally: Tensor.no_grad = False
    assert origin_of(y.uop.base) is None
    np.testing.assert_array_equal(j.numpy(), [3, 5, 7])
    np.testing.assert_array_equal(y.numpy(), [2.0, 3.0])

def test_eager_chain_gradients_equal_torch(compare_with_general_walk):
    data = np.array([[0.5, -1.25, 2.0], [1.5, 0.75, -0.5]], np.float32)
    weight = np.array([[1.0, -0.5], [0.25, 2.0], [-1.5, 0.5]], np.float32)
    # every op realized on its own, as an eager loop runs; x without requires_grad (gradient() targets it)
    x, w = Tensor(data).realize(), Tensor(weight, requires_grad=True).realize()
    h = (x @ w).realize()
    a = (h * 2 + 1).realize()
    r = a.relu().realize()
    loss = (r * r).sum().realize()
    gx, gw = loss.gradient(x, w)
    tx, tw = torch.tensor(data, requires_grad=True), torch.tensor(weight, requires_grad=True)
    ((tx @ tw * 2 + 1).relu() ** 2).sum().backward()
    np.testing.assert_allclose(gx.numpy(), tx.grad.numpy(), rtol=1e-6)
    np.testing.assert_allclose(gw.numpy(), tw.grad.numpy(), rtol=1e-6)
    loss.backward()
    np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy(), rtol=1e-6)
    assert any(compare_with_general_walk)

def test_pending_graphs_keep_their_ancestry_across_realizes():
    # realizing one lazy tensor asks every pending graph whether it read what was realized; a graph that stays pending
    # keeps its cached ancestry, so the next realize answers at its root instead of walking it again (100 lazy draws
    # realized one by one were quadratic without it)
    draws = [Tensor.randn(8, 8) * 0.1 for _ in range(3)]
    draws[0].realize()
    assert all("_ancestors" in d.uop.__dict__ for d in draws[1:])
    first = draws[1].uop
    draws[1].realize()
    assert draws[2].uop.op is not Ops.BUFFER and "_ancestors" in draws[2].uop.__dict__ and first is not draws[1].uop
