"""Regression: conv + bias + relu + max_pool2d + linear + cross-entropy, the gradient of the conv
weight must match PyTorch (a register-tiled kernel over nested reduces once computed it wrongly)."""
import numpy as np
import torch
from fusegrad import Tensor

def test_conv_bias_relu_maxpool_weight_gradient():
    rng = np.random.default_rng(0)
    xn = rng.random((8, 1, 8, 8)).astype(np.float32)
    wn = rng.standard_normal((4, 1, 3, 3)).astype(np.float32)
    bn = rng.standard_normal(4).astype(np.float32)
    fn = rng.standard_normal((10, 64)).astype(np.float32)
    yn = rng.integers(0, 10, 8)
    w = Tensor(wn, requires_grad=True)
    h = Tensor(xn).conv2d(w, Tensor(bn), padding=1).relu().max_pool2d(2).flatten(1)
    grad, = h.linear(Tensor(fn).T).sparse_categorical_crossentropy(Tensor(yn.astype(np.int32))).gradient(w)
    tw = torch.tensor(wn, requires_grad=True)
    th = torch.nn.functional.max_pool2d(torch.nn.functional.conv2d(torch.tensor(xn), tw, torch.tensor(bn), padding=1).relu(), 2)
    torch.nn.functional.cross_entropy(th.flatten(1) @ torch.tensor(fn).T, torch.tensor(yn)).backward()
    np.testing.assert_allclose(grad.numpy(), tw.grad.numpy(), rtol=1e-4, atol=1e-4)
