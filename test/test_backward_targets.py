"""Which tensors backward() fills .grad for (Tensor.backward's docstring, docs/decisions.md Autograd):
only requires_grad=True tensors when the graph has any (PyTorch), else every float tensor whose
requires_grad isn't False (tinygrad 0.14, which has no requires_grad)."""
import numpy as np
from fusegrad import Tensor
from fusegrad.nn.optim import SGD

def test_requires_grad_true_in_graph_fills_only_those():
    x, w = Tensor([1., 2.]), Tensor([3., 4.], requires_grad=True)
    hidden = x * w
    (hidden * 2).sum().backward()
    assert x.grad is None
    np.testing.assert_allclose(w.grad.numpy(), [2., 4.])
    # results of ops on a requires_grad=True tensor require grad too (tinygrad 0.8), so they get .grad
    assert hidden.requires_grad is True
    np.testing.assert_allclose(hidden.grad.numpy(), [2., 2.])

def test_no_requires_grad_fills_every_float_tensor():
    t = Tensor([1., 2.])
    hidden = t * 3
    hidden.sum().backward()
    np.testing.assert_allclose(t.grad.numpy(), [3., 3.])
    np.testing.assert_allclose(hidden.grad.numpy(), [1., 1.])

def test_no_requires_grad_skips_opted_out_and_non_float():
    t, frozen, index = Tensor([1., 2.]), Tensor([5., 6.], requires_grad=False), Tensor([1, 0])
    (t * frozen + index).sum().backward()
    np.testing.assert_allclose(t.grad.numpy(), [5., 6.])
    assert frozen.grad is None and index.grad is None

def test_requires_grad_set_by_requires_grad_():
    x, w = Tensor([1., 2.]), Tensor([3., 4.]).requires_grad_()
    (x * w).sum().backward()
    assert x.grad is None
    np.testing.assert_allclose(w.grad.numpy(), [1., 2.])

def test_optimizer_marks_params():
    x, w = Tensor([1., 2.]), Tensor([3., 4.])
    SGD([w], lr=0.1)
    assert w.requires_grad is True
    (x * w).sum().backward()
    assert x.grad is None
    np.testing.assert_allclose(w.grad.numpy(), [1., 2.])

def test_grad_accumulates_across_backward_calls():
    w = Tensor([3., 4.], requires_grad=True)
    (w * w).sum().backward()
    (w * 2).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), [8., 10.])
