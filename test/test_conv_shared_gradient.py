"""Convolutions whose input and weight share a path (the input computed from the weight, the same
tensor as both, weights and bias shared by two convs, a weight computed from the input): forward
and every gradient must match PyTorch. The explicit conv gradient rule (mixins/processing.py
_ConvInputGradient) must count each path exactly once."""
from typing import Callable
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from fusegrad import Tensor

def _check(build_fg: Callable, build_torch: Callable, arrays: list[np.ndarray], rtol: float = 1e-4, atol: float = 1e-4) -> None:
    """Run the same computation on fusegrad and torch from ``arrays``; compare the output and the
    gradient of its sum with respect to every array, once differentiating the lazy graph and once
    after the output was realized (backward then goes through the recorded origins)."""
    theirs = [torch.tensor(a, requires_grad=True) for a in arrays]
    expected = build_torch(*theirs)
    expected.sum().backward()
    for realize_first in (False, True):
        ours = [Tensor(a, requires_grad=True) for a in arrays]
        out = build_fg(*ours)
        if realize_first: out.realize()
        out.sum().backward()
        np.testing.assert_allclose(out.numpy(), expected.detach().numpy(), rtol=rtol, atol=atol)
        for i, (t, e) in enumerate(zip(ours, theirs)):
            assert t.grad is not None, f"input {i} got no gradient"
            np.testing.assert_allclose(t.grad.numpy(), e.grad.numpy(), rtol=rtol, atol=atol,
                                       err_msg=f"gradient of input {i} (realized first: {realize_first})")

def _rand(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed + sum(shape)).standard_normal(shape).astype(np.float32)

def test_issue_example_scalar_conv_of_input_times_weight():
    x = Tensor.full((1, 1, 1, 1), 3.0, requires_grad=True)
    w = Tensor.full((1, 1, 1, 1), 2.0, requires_grad=True)
    (x * w).conv2d(w).sum().backward()
    tx = torch.full((1, 1, 1, 1), 3.0, requires_grad=True)
    tw = torch.full((1, 1, 1, 1), 2.0, requires_grad=True)
    F.conv2d(tx * tw, tw).sum().backward()
    assert w.grad.item() == pytest.approx(tw.grad.item())   # 12, not 18
    assert x.grad.item() == pytest.approx(tx.grad.item())

def test_input_depends_on_weight():
    _check(lambda x, w: (x * w.mean()).conv2d(w, padding=1),
           lambda x, w: F.conv2d(x * w.mean(), w, padding=1), [_rand(2, 3, 5, 5), _rand(4, 3, 3, 3)])

def test_same_tensor_as_input_and_weight():
    # a (2, 2, 3, 3) tensor is a batch of two 2-channel 3x3 images and a 2->2 3x3 kernel
    _check(lambda w: w.conv2d(w, padding=1), lambda w: F.conv2d(w, w, padding=1), [_rand(2, 2, 3, 3)])

def test_two_convs_share_weight_and_bias():
    _check(lambda x, w, b: x.conv2d(w, b, padding=1).relu().conv2d(w, b, padding=1),
           lambda x, w, b: F.conv2d(F.conv2d(x, w, b, padding=1).relu(), w, b, padding=1),
           [_rand(2, 3, 6, 6), _rand(3, 3, 3, 3), _rand(3)])

def test_weight_depends_on_input():
    _check(lambda x, w: x.conv2d(w * x.mean()), lambda x, w: F.conv2d(x, w * x.mean()), [_rand(2, 2, 5, 5), _rand(3, 2, 2, 2)])

@pytest.mark.parametrize("groups,stride,dilation,padding", [
    (1, 2, 1, 1), (1, 1, 2, 2), (1, 2, 2, 1), (2, 1, 1, 0), (2, 2, 1, 1), (4, 3, 1, 2), (2, 2, 2, 2)])
def test_shared_paths_grouped_strided_dilated(groups: int, stride: int, dilation: int, padding: int):
    cin, cout = 4, 4
    x, w, b = _rand(2, cin, 9, 8), _rand(cout, cin // groups, 3, 3), _rand(cout)
    kwargs = dict(groups=groups, stride=stride, dilation=dilation, padding=padding)
    # the input is scaled by the weight, and the same weight and bias are used by a second conv
    _check(lambda x, w, b: (x * w.square().mean()).conv2d(w, b, **kwargs).conv2d(w, b, groups=groups, padding=1),
           lambda x, w, b: F.conv2d(F.conv2d(x * w.square().mean(), w, b, **kwargs), w, b, groups=groups, padding=1), [x, w, b])

@pytest.mark.parametrize("groups,stride,dilation", [(1, 1, 1), (1, 2, 1), (2, 2, 1), (1, 1, 2), (2, 3, 2)])
def test_conv_transpose_input_depends_on_weight(groups: int, stride: int, dilation: int):
    cin, cout = 4, 2
    x, w = _rand(2, cin, 4, 5), _rand(cin, cout // groups * 1, 3, 3)
    kwargs = dict(groups=groups, stride=stride, dilation=dilation, padding=1)
    _check(lambda x, w: (x * w.sum()).conv_transpose2d(w, **kwargs),
           lambda x, w: F.conv_transpose2d(x * w.sum(), w, **kwargs), [x, w])

def test_conv_and_conv_transpose_share_weight():
    # conv (3 -> 4 channels) then the transposed conv with the same weight maps back to 3 channels
    _check(lambda x, w: x.conv2d(w, stride=2, padding=1).conv_transpose2d(w, stride=2, padding=1),
           lambda x, w: F.conv_transpose2d(F.conv2d(x, w, stride=2, padding=1), w, stride=2, padding=1),
           [_rand(2, 3, 7, 7), _rand(4, 3, 3, 3)])

def test_gradient_api_with_shared_weight():
    # Tensor.gradient (no .grad) takes the same rule
    xn, wn = _rand(1, 2, 4, 4), _rand(2, 2, 3, 3)
    x, w = Tensor(xn), Tensor(wn)
    dx, dw = (x * w.sum()).conv2d(w).square().sum().gradient(x, w)
    tx, tw = torch.tensor(xn, requires_grad=True), torch.tensor(wn, requires_grad=True)
    F.conv2d(tx * tw.sum(), tw).square().sum().backward()
    np.testing.assert_allclose(dx.numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(dw.numpy(), tw.grad.numpy(), rtol=1e-4, atol=1e-4)
