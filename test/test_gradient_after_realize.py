"""gradient() and backward() on tensors that never set requires_grad, after part of the graph (or
all of it) was realized: realizing must not cut the graph that is differentiated. References
come from PyTorch (with requires_grad set on its side)."""
import numpy as np
import pytest
import torch
from fusegrad import Tensor

ROW = [[1., 5., 3.]]

def _torch_reference(build, data) -> np.ndarray:
    y = torch.tensor(data, requires_grad=True)
    build(y).backward()
    return y.grad.numpy()

def test_issue_example_realized_intermediate():
    y = Tensor(ROW)
    m = y.max()
    o = (y * m).sum()
    m.realize()
    expected = _torch_reference(lambda y: (y * y.max()).sum(), ROW)   # [[5, 14, 5]]
    np.testing.assert_allclose(o.gradient(y)[0].numpy(), expected)

def test_realized_loss_itself():
    y = Tensor(ROW)
    o = (y * y.max()).sum()
    assert o.item() == 45.0
    np.testing.assert_allclose(o.gradient(y)[0].numpy(), _torch_reference(lambda y: (y * y.max()).sum(), ROW))

def test_realized_intermediate_whose_tensor_is_gone():
    y = Tensor(ROW)
    o = (y * y.max().realize()).sum()   # the realized max's tensor is a temporary
    np.testing.assert_allclose(o.gradient(y)[0].numpy(), _torch_reference(lambda y: (y * y.max()).sum(), ROW))

def test_realized_tensor_used_twice():
    data = [[0.5, -1.0, 2.0], [1.5, 0.25, -0.75]]
    y = Tensor(data)
    s = y.softmax(-1)
    o = (s * y).sum() + (s * s).sum()
    s.realize()
    expected = _torch_reference(lambda y: (y.softmax(-1) * y).sum() + (y.softmax(-1) ** 2).sum(), data)
    np.testing.assert_allclose(o.gradient(y)[0].numpy(), expected, rtol=1e-5, atol=1e-6)

def test_realized_in_two_steps():
    y = Tensor(ROW)
    m = y.max()
    o = (y * m).sum()
    m.realize()
    o.realize()   # the loss's graph reads m's buffer, whose own graph is still reachable
    del m
    np.testing.assert_allclose(o.gradient(y)[0].numpy(), _torch_reference(lambda y: (y * y.max()).sum(), ROW))

def test_after_backward_of_another_loss():
    y = Tensor(ROW)
    m = y.max()
    first = (m * 2 + y.sum())
    first.backward()   # no requires_grad anywhere: every float tensor in the graph gets .grad
    np.testing.assert_allclose(y.grad.numpy(), _torch_reference(lambda y: y.max() * 2 + y.sum(), ROW))
    o = (y * m).sum()
    m.realize()
    np.testing.assert_allclose(o.gradient(y)[0].numpy(), _torch_reference(lambda y: (y * y.max()).sum(), ROW))

def test_backward_through_realized_intermediate_without_requires_grad():
    y = Tensor(ROW)
    m = y.max()
    o = (y * m).sum()
    m.realize()
    o.backward()
    np.testing.assert_allclose(y.grad.numpy(), _torch_reference(lambda y: (y * y.max()).sum(), ROW))

def test_gradient_with_respect_to_realized_intermediate():
    y = Tensor(ROW)
    m = y.max()
    o = (y * m).sum()
    m.realize()
    dm, dy = o.gradient(m, y)
    assert dm.item() == 9.0   # sum(y)
    np.testing.assert_allclose(dy.numpy(), [[5., 14., 5.]])

def test_matmul_chain_realized_between_layers():
    rng = np.random.default_rng(0)
    xn, w1n, w2n = (rng.standard_normal(s).astype(np.float32) for s in ((4, 3), (3, 5), (5, 2)))
    x, w1, w2 = Tensor(xn), Tensor(w1n), Tensor(w2n)
    hidden = (x @ w1).relu().realize()
    loss = (hidden @ w2).square().mean()
    loss.realize()
    grads = loss.gradient(w1, w2)
    tw1, tw2 = torch.tensor(w1n, requires_grad=True), torch.tensor(w2n, requires_grad=True)
    ((torch.tensor(xn) @ tw1).relu() @ tw2).square().mean().backward()
    np.testing.assert_allclose(grads[0].numpy(), tw1.grad.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(grads[1].numpy(), tw2.grad.numpy(), rtol=1e-5, atol=1e-6)

# ---------------------------------------------------------------- graphs that simplify to a leaf's own buffer
# A BUFFER is flat, so a 0-d or n-d leaf holds it through a RESHAPE; ``x.reshape(-1) * 1`` simplifies to the
# bare buffer. Realizing such a graph must keep it connected to the leaf, or its gradient is lost.

def _loss_with_identity_branch(a):
    return (a * 2).sum() + ((a * 1) * 3).sum()

def test_gradient_through_graph_realized_to_a_leafs_buffer():
    for data in (np.array(0.5, np.float32), np.arange(6, dtype=np.float32).reshape(2, 3)):
        x = Tensor(data, requires_grad=True)
        a = x.reshape(-1)
        loss = _loss_with_identity_branch(a)
        Tensor.realize(a, a * 1)
        loss.backward()
        want = torch.tensor(data, requires_grad=True)
        _loss_with_identity_branch(want.reshape(-1)).backward()
        np.testing.assert_allclose(x.grad.numpy(), want.grad.numpy(), err_msg=f"shape {data.shape}")

def test_realized_identity_of_a_leaf_still_differentiates_to_it():
    x = Tensor([[1.0, 2.0, 3.0]], requires_grad=True)
    b = x.reshape(3) * 1
    b.realize()
    np.testing.assert_equal(b.numpy(), [1.0, 2.0, 3.0])
    (b * b).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [[2.0, 4.0, 6.0]])

def test_realized_identity_of_a_detached_leaf_has_no_gradient():
    x = Tensor([[1.0, 2.0, 3.0]], requires_grad=True)
    b = x.detach().reshape(3) * 1
    b.realize()
    (b * x.reshape(3)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [[1.0, 2.0, 3.0]])   # only through the second factor

@pytest.mark.parametrize("exponent", [2, 2.5, -0.5])
def test_realized_pow_differentiates_through_its_explicit_gradient(exponent):
    """``**`` has an explicit gradient around a detached value graph, with coefficients computed from that value:
    realizing it and then calling backward() once left the parameter without a gradient, or failed (the
    recorded origin read its own buffer: a cycle)."""
    data = np.linspace(-1, 1, 10, dtype=np.float32)
    x = Tensor(data, requires_grad=True)
    y = (x.abs() + 0.5) ** exponent
    y.realize()
    y.sum().backward()
    reference = torch.tensor(data, requires_grad=True)
    ((reference.abs() + 0.5) ** exponent).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), reference.grad.numpy(), rtol=1e-5)
