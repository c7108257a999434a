"""Gradients checked against PyTorch and tinygrad 0.14's observed results: softmax's backward formula, a sigmoid
written by hand, acosh/atanh/sinh/cosh outside their domain or beyond overflow, max_unpool2d with infinities, the
quotient and maximum rules, and gradients with respect to 0-d tensors made from numpy scalars."""
import math
import numpy as np
import pytest
import torch
from fusegrad import Tensor, dtypes
from fusegrad.uop.ops import Ops

inf, nan = math.inf, math.nan

def _grad(fn, values, dtype=dtypes.float32, weight=None):
    x = Tensor(values, dtype=dtype)
    y = fn(x)
    if weight is not None: y = y * Tensor(weight, dtype=dtype)
    return y.sum().gradient(x)[0].numpy()

def _torch_grad(fn, values, dtype=torch.float32, weight=None):
    t = torch.tensor(values, dtype=dtype, requires_grad=True)
    y = fn(t)
    if weight is not None: y = y * torch.tensor(weight, dtype=dtype)
    y.sum().backward()
    return t.grad.numpy()

# ---------------------------------------------------------------- softmax family

ROWS = [[1.0, 2.0, 3.0, -1.5], [0.0, -30.0, 5.0, 1.0], [10.0, 10.0, 10.0, 10.0]]

@pytest.mark.parametrize("name", ["softmax", "softmin"])
def test_softmax_sum_gradient_is_zero(name):
    # torch's backward s * (g - sum(g * s)) is 0 for g = 1 where the row's softmax sums to 1 exactly, and only
    # (1 - sum) * s where it doesn't (the second row); the chain rule through exp/sum/divide left ~1e-8 everywhere
    theirs = torch.nn.functional.softmin if name == "softmin" else torch.softmax
    g = _grad(lambda x: getattr(x, name)(-1), ROWS)
    np.testing.assert_allclose(g, _torch_grad(lambda t: theirs(t, -1), ROWS), rtol=1e-6, atol=1e-12)
    assert np.abs(g[0]).max() <= 1e-9 and np.abs(g[2]).max() <= 1e-9, g

@pytest.mark.parametrize("name,axis", [("softmax", -1), ("softmax", 0), ("log_softmax", -1), ("log_softmax", 0), ("softmin", 1)])
def test_softmax_family_weighted_gradient_matches_torch(name, axis):
    w = np.random.default_rng(3).standard_normal((3, 4)).astype(np.float32)
    theirs = torch.nn.functional.softmin if name == "softmin" else getattr(torch, name)
    got = _grad(lambda x: getattr(x, name)(axis), ROWS, weight=w)
    want = _torch_grad(lambda t: theirs(t, axis), ROWS, weight=w)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)

def test_log_softmax_sum_gradient_matches_torch_to_rounding():
    # torch: g - e**out * sum(g) = 1 - n * softmax
    got = _grad(lambda x: x.log_softmax(-1), ROWS)
    want = _torch_grad(lambda t: t.log_softmax(-1), ROWS)
    np.testing.assert_allclose(got, want, rtol=0, atol=1.5e-7)

def test_softmax_second_derivative_matches_torch():
    w = np.array([[0.3, -1.2, 0.7, 2.0]], np.float32)
    x = Tensor(ROWS[:1])
    (g,) = (x.softmax() * Tensor(w)).sum().gradient(x)
    got = (g * g).sum().gradient(x)[0].numpy()
    t = torch.tensor(ROWS[:1], requires_grad=True)
    (tg,) = torch.autograd.grad((t.softmax(-1) * torch.tensor(w)).sum(), t, create_graph=True)
    (tg * tg).sum().backward()
    np.testing.assert_allclose(got, t.grad.numpy(), rtol=1e-5, atol=1e-8)

def test_softmax_keeps_its_value_and_masked_entries():
    v = [[0.0, -inf, 2.0], [1.0, 1.0, 1.0]]
    np.testing.assert_allclose(Tensor(v).softmax().numpy(), torch.tensor(v).softmax(-1).numpy(), rtol=1e-6)
    got = _grad(lambda x: x.softmax(), v, weight=[[1.0, 2.0, 3.0], [1.0, 2.0, 3.0]])
    want = _torch_grad(lambda t: t.softmax(-1), v, weight=[[1.0, 2.0, 3.0], [1.0, 2.0, 3.0]])
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-8)

# ---------------------------------------------------------------- a sigmoid written by hand

def test_hand_written_sigmoid_is_stable_like_tinygrad():
    # tinygrad 0.14: value [1, 0.5, 0, 1], gradient [0, 0.25, 0, 0] (exp(300) = inf: inf / inf was NaN)
    x = Tensor([300.0, 0.0, -300.0, 50.0])
    y = x.exp() / (1 + x.exp())
    assert y.numpy().tolist() == [1.0, 0.5, 0.0, 1.0]
    assert y.sum().gradient(x)[0].numpy().tolist() == [0.0, 0.25, 0.0, 0.0]
    z = x.exp() / (x.exp() + 1)   # the sum in the other order
    assert z.numpy().tolist() == [1.0, 0.5, 0.0, 1.0]

def test_hand_written_sigmoid_accuracy():
    v = np.linspace(-100, 100, 801).astype(np.float32)
    x = Tensor(v)
    y = x.exp() / (1 + x.exp())
    s = 1 / (1 + np.exp(-v.astype(np.float64)))
    got = y.numpy().astype(np.float64)
    normal = s > 1.2e-38
    assert np.all(np.abs(got - s)[normal] <= 2 * np.spacing(s[normal].astype(np.float32)))
    assert np.all(np.abs(got - s)[~normal] <= 2e-45)   # subnormal results stay (1 / (1 + 1 / e) would flush them)
    g = y.sum().gradient(x)[0].numpy()
    assert np.all(np.isfinite(g)) and np.abs(g - s * (1 - s)).max() < 1.2e-7   # absolute: 1 - s cancels for large x

def test_quotient_gradient_does_not_overflow():
    # d(a/b)/db = -g * (a/b) / b (torch's form): b * b overflowed to inf and gave -0
    a, b = Tensor([1e20, 3.0]), Tensor([1e20, 2.0])
    ga, gb = (a / b).sum().gradient(a, b)
    ta, tb = torch.tensor([1e20, 3.0], requires_grad=True), torch.tensor([1e20, 2.0], requires_grad=True)
    (ta / tb).sum().backward()
    np.testing.assert_allclose(gb.numpy(), tb.grad.numpy(), rtol=1e-6)
    np.testing.assert_allclose(ga.numpy(), ta.grad.numpy(), rtol=1e-6)
    assert gb.numpy()[0] != 0

# ---------------------------------------------------------------- domain edges and overflow

@pytest.mark.parametrize("name,points", [
    ("acosh", [0.5, -0.5, 0.0, -3.0, 1.0, -1.0, 2.0, 1e20, nan]),
    ("atanh", [2.0, -2.0, 0.5, 1.0, -1.0, 0.0, -0.99, 1e20, nan]),
    ("sinh", [100.0, -100.0, 1e4, -1e4, 0.5, 0.0]),
    ("cosh", [100.0, -100.0, 1e4, -1e4, 0.5, 0.0, -0.0]),
])
def test_gradient_outside_the_domain_matches_torch(name, points):
    # torch's formulas everywhere: acosh 1/sqrt(x*x - 1) is NaN for |x| < 1 (fusegrad gave 0) and finite for x < -1,
    # atanh 1/(1 - x*x) is -1/3 at +-2 (NaN before), sinh/cosh overflow to +-inf (NaN before)
    for dtype, tdtype in ((dtypes.float32, torch.float32), (dtypes.float64, torch.float64)):
        got = _grad(lambda x: getattr(x, name)(), points, dtype)
        want = _torch_grad(lambda t: getattr(t, name)(), points, tdtype)
        np.testing.assert_allclose(got, want, rtol=1e-6, equal_nan=True)

# ---------------------------------------------------------------- max_unpool2d

V = np.array([[[[1.0, inf, 3.0, -inf], [5.0, 6.0, nan, 8.0], [-inf, 2.0, 0.0, 1.0], [4.0, 4.0, inf, -1.0]]]], np.float32)

@pytest.mark.parametrize("kernel,stride", [(2, 2), (2, 1), (3, 1)])
def test_max_unpool2d_with_infinities_matches_torch(kernel, stride):
    # a sum divided by the count, with a straight-through gradient trick, made every inf NaN
    pooled, indices = torch.nn.functional.max_pool2d(torch.tensor(V), kernel, stride, return_indices=True)
    pooled.requires_grad_(True)
    want = torch.nn.functional.max_unpool2d(pooled, indices, kernel, stride, output_size=V.shape[-2:])
    w = torch.arange(want.numel(), dtype=torch.float32).reshape(want.shape)
    (want_grad,) = torch.autograd.grad((want * w).sum(), pooled)
    x = Tensor(pooled.detach().numpy())
    got = x.max_unpool2d(Tensor(indices.numpy()), kernel, stride, output_size=V.shape[-2:])
    np.testing.assert_array_equal(got.numpy(), want.detach().numpy())
    np.testing.assert_array_equal((got * Tensor(w.numpy())).sum().gradient(x)[0].numpy(), want_grad.numpy())

def test_max_unpool2d_infinite_values_land_unchanged():
    values, indices = [[[[-inf, inf, nan]]]], [[[[1, 2, 4]]]]
    got = Tensor(values).max_unpool2d(Tensor(indices), (1, 2), output_size=(1, 6)).numpy()
    want = torch.nn.functional.max_unpool2d(torch.tensor(values), torch.tensor(indices), (1, 2), output_size=(1, 6)).numpy()
    np.testing.assert_array_equal(got, want)

# ---------------------------------------------------------------- maximum with NaN

def test_maximum_and_minimum_gradients_with_nan_match_torch():
    # torch: a NaN on either side gives both sides the gradient (fusegrad gave it all to the second operand)
    a, b = [nan, 1.0, 2.0, 3.0, nan], [1.0, nan, 2.0, 1.0, nan]
    for ours, theirs in ((Tensor.maximum, torch.maximum), (Tensor.minimum, torch.minimum)):
        ta, tb = Tensor(a), Tensor(b)
        ga, gb = ours(ta, tb).sum().gradient(ta, tb)
        pa, pb = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
        theirs(pa, pb).sum().backward()
        np.testing.assert_array_equal(ga.numpy(), pa.grad.numpy())
        np.testing.assert_array_equal(gb.numpy(), pb.grad.numpy())

# ---------------------------------------------------------------- 0-d tensors from numpy scalars

ZERO_D_OPS = [("exp", lambda t: t.exp()), ("cosh", lambda t: t.cosh()), ("atanh", lambda t: t.atanh()),
              ("erf", lambda t: t.erf()), ("times a literal equal to x", lambda t: t * 0.5), ("sigmoid", lambda t: t.sigmoid())]

@pytest.mark.parametrize("name,fn", ZERO_D_OPS, ids=[n for n, _ in ZERO_D_OPS])
@pytest.mark.parametrize("realize_first", [False, True])
def test_gradient_of_0d_numpy_input(name, fn, realize_first):
    # Tensor(np.array(0.5)) was the interned constant 0.5: the same node as every literal 0.5 in the graph (x * 0.5,
    # the 0.5 inside atanh and cosh), and exp of a constant folded away from it: exp gave 0, x * 0.5 gave 1
    x = Tensor(np.array(0.5, np.float32))
    if realize_first: fn(x).realize()
    got = fn(x).sum().gradient(x)[0].numpy()
    t = torch.tensor(0.5, requires_grad=True)
    fn(t).backward()
    np.testing.assert_allclose(got, t.grad.numpy(), rtol=1e-6)

def test_0d_numpy_float_is_its_own_node_int_stays_constant():
    assert Tensor(np.array(0.5, np.float32)).uop.op is not Ops.CONST
    assert Tensor(np.array(0.5, np.float32), requires_grad=False).uop.op is Ops.CONST
    assert Tensor(np.array(3, np.int32)).uop.op is Ops.CONST
    assert Tensor(np.array(0.5, np.float32)).tolist() == 0.5

def test_exp_of_a_constant_keeps_its_gradient():
    # a broadcast constant gradient() may target: exp folded it to a new constant, cut off from x
    x = Tensor.full((3,), 0.5)
    np.testing.assert_allclose(x.exp().sum().gradient(x)[0].numpy(), [math.exp(0.5)] * 3, rtol=1e-6)
    assert x.exp().numpy().tolist() == [np.float32(math.exp(0.5))] * 3
