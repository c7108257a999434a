"""Autograd through realized tensors (fusegrad/gradient.py, Tensor.backward/gradient/realize),
checked against PyTorch.

Realizing a tensor swaps its graph for a buffer; the graph is kept as the buffer's origin when it
depends on a live float tensor (not under Tensor.no_grad), so backward() after
.numpy()/.item()/.realize() gives the same gradients as PyTorch."""
import gc, weakref
import numpy as np
import pytest
import torch
from fusegrad import Tensor, GlobalCounters
from fusegrad.gradient import origin_of
from fusegrad.uop.ops import Ops

def _randn(rng, *shape) -> np.ndarray: return rng.standard_normal(shape).astype(np.float32)

def _close(t: Tensor, expected, tol: float = 1e-5) -> None:
    assert t is not None, "no gradient"
    np.testing.assert_allclose(t.numpy(), expected.detach().numpy() if isinstance(expected, torch.Tensor) else expected, rtol=tol, atol=tol)

# ---------------------------------------------------------------- realize, then backward

@pytest.mark.parametrize("realize", ["numpy", "realize", "tolist", "static_realize"])
def test_backward_after_realize(realize):
    x = Tensor([1., 2., 3.], requires_grad=True)
    y = (x * 2).exp()
    if realize == "numpy": np.testing.assert_allclose(y.numpy(), np.exp([2., 4., 6.]), rtol=1e-6)
    elif realize == "realize": y.realize()
    elif realize == "tolist": y.tolist()
    else: Tensor.realize(y)
    assert y.uop.base.op is Ops.BUFFER   # y really is a buffer now
    y.sum().backward()
    tx = torch.tensor([1., 2., 3.], requires_grad=True)
    (tx * 2).exp().sum().backward()
    _close(x.grad, tx.grad)

def test_gradient_after_realize():
    x = Tensor([0.5, -1.0, 2.0], requires_grad=True)
    y = x.sigmoid() * x
    y.realize()
    dx, = y.sum().gradient(x)
    tx = torch.tensor([0.5, -1.0, 2.0], requires_grad=True)
    (tx.sigmoid() * tx).sum().backward()
    _close(dx, tx.grad)

def _mlp_data(rng):
    return _randn(rng, 8, 5), _randn(rng, 5, 6), _randn(rng, 6, 3), rng.integers(0, 3, 8).astype(np.int32)

def _torch_mlp(xn, w1n, w2n, yn):
    w1, w2 = torch.tensor(w1n, requires_grad=True), torch.tensor(w2n, requires_grad=True)
    h = (torch.tensor(xn) @ w1).relu()
    loss = torch.nn.functional.cross_entropy(h @ w2, torch.tensor(yn.astype(np.int64)))
    loss.backward()
    return loss, w1.grad, w2.grad

def test_realize_intermediate_then_loss_backward(rng):
    xn, w1n, w2n, yn = _mlp_data(rng)
    w1, w2 = Tensor(w1n, requires_grad=True), Tensor(w2n, requires_grad=True)
    h = (Tensor(xn) @ w1).relu()
    h.realize()
    loss = (h @ w2).sparse_categorical_crossentropy(Tensor(yn))
    loss.backward()
    tloss, tg1, tg2 = _torch_mlp(xn, w1n, w2n, yn)
    _close(loss, tloss)
    _close(w1.grad, tg1)
    _close(w2.grad, tg2)

def test_realize_intermediate_squared_loss(rng):
    xn, wn = _randn(rng, 4, 5), _randn(rng, 5, 3)
    w = Tensor(wn, requires_grad=True)
    h = (Tensor(xn) @ w).relu()
    h.realize()
    (h * h).sum().backward()
    tw = torch.tensor(wn, requires_grad=True)
    th = (torch.tensor(xn) @ tw).relu()
    (th * th).sum().backward()
    _close(w.grad, tw.grad, 1e-4)

def test_loss_item_then_backward(rng):
    # the common training-loop pattern: print the loss, then backward
    xn, w1n, w2n, yn = _mlp_data(rng)
    w1, w2 = Tensor(w1n, requires_grad=True), Tensor(w2n, requires_grad=True)
    loss = (Tensor(xn) @ w1).relu().__matmul__(w2).sparse_categorical_crossentropy(Tensor(yn))
    value = loss.item()
    loss.backward()
    tloss, tg1, tg2 = _torch_mlp(xn, w1n, w2n, yn)
    assert value == pytest.approx(tloss.item(), rel=1e-5)
    _close(w1.grad, tg1)
    _close(w2.grad, tg2)

def test_numpy_of_several_intermediates(rng):
    xn, wn = _randn(rng, 3, 4), _randn(rng, 4, 4)
    x, w = Tensor(xn, requires_grad=True), Tensor(wn, requires_grad=True)
    a = x @ w
    b = a.tanh()
    c = (b * x).exp()
    tx, tw = torch.tensor(xn, requires_grad=True), torch.tensor(wn, requires_grad=True)
    ta = tx @ tw
    tb = ta.tanh()
    tc = (tb * tx).exp()
    for t, tt in ((a, ta), (b, tb), (c, tc)): _close(t, tt)   # realizes each one by one
    (c.sum() + b.mean()).backward()
    (tc.sum() + tb.mean()).backward()
    _close(x.grad, tx.grad, 1e-4)
    _close(w.grad, tw.grad, 1e-4)

def test_static_realize_of_two(rng):
    xn = _randn(rng, 5)
    x = Tensor(xn, requires_grad=True)
    a, b = x.sin(), (x * x).log()
    Tensor.realize(a, b)
    (a * b).sum().backward()
    tx = torch.tensor(xn, requires_grad=True)
    (tx.sin() * (tx * tx).log()).sum().backward()
    _close(x.grad, tx.grad, 1e-4)

def test_implicitly_realized_tensor(rng):
    # y is realized as a stored intermediate of z's schedule (the becomes map replaces y too)
    xn, wn = _randn(rng, 4, 3), _randn(rng, 3, 3)
    w = Tensor(wn, requires_grad=True)
    y = Tensor(xn) @ w
    z = y.exp().sum() + (y * 2).max()    # two reduces read y: the schedule stores it
    z.realize()
    assert y.uop.base.op is Ops.BUFFER
    (y * y).sum().backward()
    tw = torch.tensor(wn, requires_grad=True)
    ty = torch.tensor(xn) @ tw
    (ty * ty).sum().backward()
    _close(w.grad, tw.grad, 1e-4)

def test_lazy_consumer_of_realized_tensor():
    # z was built before y was realized: its graph now reads y's buffer
    x = Tensor([1., 2.], requires_grad=True)
    y = x * x
    z = y + 1
    y.realize()
    assert y.uop in z.uop.toposort or y.uop.base in z.uop.toposort
    z.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [2., 4.])

def test_grads_accumulate_with_realize_between():
    x = Tensor([1., 2., 3.], requires_grad=True)
    y = x * x
    y.realize()
    y.sum().backward()
    x.grad.realize()
    y2 = (x * 3).realize()
    y2.sum().backward()
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * (2 * np.array([1., 2., 3.])) + 3, rtol=1e-6)

def test_training_loop_with_item_matches_torch(rng):
    from fusegrad.nn.optim import SGD
    xn, w1n, w2n, yn = _mlp_data(rng)
    w1, w2 = Tensor(w1n, requires_grad=True), Tensor(w2n, requires_grad=True)
    opt = SGD([w1, w2], lr=0.1)
    tw1, tw2 = torch.tensor(w1n, requires_grad=True), torch.tensor(w2n, requires_grad=True)
    topt = torch.optim.SGD([tw1, tw2], lr=0.1)
    with Tensor.train():
        for _ in range(3):
            opt.zero_grad()
            loss = (Tensor(xn) @ w1).relu().__matmul__(w2).sparse_categorical_crossentropy(Tensor(yn))
            value = loss.item()
            loss.backward()
            opt.step()
            topt.zero_grad()
            tloss = torch.nn.functional.cross_entropy((torch.tensor(xn) @ tw1).relu() @ tw2, torch.tensor(yn.astype(np.int64)))
            tloss.backward()
            topt.step()
            assert value == pytest.approx(tloss.item(), rel=1e-5)
    _close(w1, tw1, 1e-4)
    _close(w2, tw2, 1e-4)

# ---------------------------------------------------------------- what still stops gradients

def test_detach_of_realized_tensor_stops_gradient():
    x = Tensor([1., 2., 3.], requires_grad=True)
    y = (x * 2).realize()
    z = y.detach() * 3 + y
    z.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [2., 2., 2.])   # only through y, not through the detached copy

def test_realized_detach_stops_gradient():
    x = Tensor([1., 2., 3.], requires_grad=True)
    d = (x * 2).detach().realize()
    assert origin_of(d.uop.base) is None
    (d * x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [2., 4., 6.])   # d is a constant: d(d*x)/dx = d

def test_requires_grad_false_stops_gradient():
    x = Tensor([1., 2.], requires_grad=False)
    w = Tensor([3., 4.], requires_grad=True)
    y = (x * w).realize()
    y.sum().backward()
    assert x.grad is None
    np.testing.assert_allclose(w.grad.numpy(), [1., 2.])

def test_no_grad_records_nothing():
    x = Tensor([1., 2.], requires_grad=True)
    previous = Tensor.no_grad
    Tensor.no_grad = True
    try: y = (x * 2).realize()
    finally: Tensor.no_grad = previous
    assert origin_of(y.uop.base) is None
    y.sum().backward()
    assert x.grad is None

# ---------------------------------------------------------------- memory and work

def test_no_grad_path_keeps_no_graph():
    x = Tensor([1., 2., 3.])
    previous = Tensor.no_grad
    Tensor.no_grad = True
    try:
        y = (x * 2).exp()
        graph = weakref.ref(y.uop)
        y.realize()
    finally: Tensor.no_grad = previous
    gc.collect()
    assert graph() is None
    assert origin_of(y.uop.base) is None

def test_graph_without_requires_grad_freed_with_tensor():
    # requires_grad not set: the graph is kept for gradient() while y lives, and freed with it
    x = Tensor([1., 2., 3.])
    y = (x * 2).exp()
    graph = weakref.ref(y.uop)
    y.realize()
    gc.collect()
    assert graph() is not None
    np.testing.assert_allclose(y.sum().gradient(x)[0].numpy(), 2 * np.exp(2 * x.numpy()), rtol=1e-6)
    del y
    gc.collect()
    assert graph() is None

def test_non_float_result_keeps_no_graph():
    x = Tensor([1., 2., 3.])
    y = (x * 2 > 3)   # a bool: nothing to differentiate
    graph = weakref.ref(y.uop)
    y.realize()
    gc.collect()
    assert graph() is None

def test_grad_path_graph_freed_with_tensor():
    x = Tensor([1., 2., 3.], requires_grad=True)
    y = (x * 2).exp()
    graph = weakref.ref(y.uop)
    y.realize()
    gc.collect()
    assert graph() is not None   # kept for backward while y lives
    del y
    gc.collect()
    assert graph() is None       # and freed with it

def _ast_ops(t: Tensor) -> tuple[int, set]:
    items = t.schedule()
    return len(items), {u.op for item in items for u in item.ast.toposort}

def test_backward_reads_realized_value():
    # d exp(2x)/dx = 2 exp(2x): the gradient kernel reads exp(2x) from y's buffer, it doesn't recompute it
    x = Tensor([1., 2., 3.], requires_grad=True)
    y = (x * 2).exp().realize()
    y.sum().backward()
    kernels, ops = _ast_ops(x.grad)
    assert kernels == 1 and Ops.EXP2 not in ops

def _mlp_grad_kernels(rng, realize_loss: bool) -> tuple[int, int]:
    xn, w1n, w2n, yn = _mlp_data(rng)
    w1, w2 = Tensor(w1n, requires_grad=True), Tensor(w2n, requires_grad=True)
    loss = (Tensor(xn) @ w1).relu().__matmul__(w2).sparse_categorical_crossentropy(Tensor(yn))
    GlobalCounters.reset()
    if realize_loss: loss.item()
    forward = GlobalCounters.kernel_count
    loss.backward()
    GlobalCounters.reset()
    Tensor.realize(w1.grad, w2.grad)
    return forward, GlobalCounters.kernel_count

def test_backward_after_item_reuses_forward_kernels(rng):
    _, together = _mlp_grad_kernels(rng, realize_loss=False)   # forward + backward in one schedule
    forward, backward = _mlp_grad_kernels(rng, realize_loss=True)
    assert forward >= 2
    # the stored forward values (the loss's reductions) are read, so the backward alone costs less than
    # forward and backward from scratch (a hidden activation the forward fused away is recomputed)
    assert backward < together

def test_assign_to_lazy_param_keeps_no_graph():
    # assign() gives a lazy target a buffer first; the old value is overwritten, so no graph is kept for it
    w = (Tensor.ones(3) * 2).requires_grad_()
    w.assign(Tensor([1., 2., 3.])).realize()
    assert origin_of(w.uop.base) is None
    (w * w).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), [2., 4., 6.])

def test_equal_constant_leaves_get_their_own_gradients():
    # constants are interned UOps: two Tensor.ones(3, requires_grad=True) (and the plain Tensor.ones(3)
    # in the graph) were one node, so each leaf got the sum of all three gradients
    x = np.array([1., 2., 3.], dtype=np.float32)
    a, b = Tensor.ones(3, requires_grad=True), Tensor.ones(3, requires_grad=True)
    (Tensor(x) * a + Tensor(x) ** 2 * b + Tensor.ones(3) * Tensor(x)).sum().backward()
    ta, tb = torch.ones(3, requires_grad=True), torch.ones(3, requires_grad=True)
    (torch.tensor(x) * ta + torch.tensor(x) ** 2 * tb + torch.ones(3) * torch.tensor(x)).sum().backward()
    _close(a.grad, ta.grad)
    _close(b.grad, tb.grad)


# ---------------------------------------------------------------- big gradient reduces run as two kernels

def _broadcast_gradient_kernels(rng, split: int) -> tuple[int, np.ndarray, np.ndarray]:
    from fusegrad import Context
    xn, bn = _randn(rng, 1 << 17, 4), _randn(rng, 1, 4)
    with Context(SPLIT_REDUCEOP=split):
        b = Tensor(bn, requires_grad=True)
        ((Tensor(xn) + b) ** 2).sum().backward()
        GlobalCounters.reset()
        grad = b.grad.numpy()
    return GlobalCounters.kernel_count, grad, 2 * (xn + bn).sum(0, keepdims=True)

def test_broadcast_gradient_of_a_big_reduce_is_split(rng):
    # b's gradient sums 131072 rows per output (GRADIENT_SPLIT_THRESHOLD): partial sums in one kernel, their sum
    # in a second, as a forward Tensor.sum of that size runs (SPLIT_REDUCEOP=0: one kernel)
    split_kernels, split_grad, expected = _broadcast_gradient_kernels(rng, 1)
    whole_kernels, whole_grad, whole_expected = _broadcast_gradient_kernels(rng, 0)
    assert (split_kernels, whole_kernels) == (2, 1)
    np.testing.assert_allclose(split_grad, expected, rtol=1e-3)
    np.testing.assert_allclose(whole_grad, whole_expected, rtol=1e-3)

@pytest.mark.parametrize("split", [1, 0])
def test_conv_weight_gradient_over_a_big_batch_is_split(rng, split):
    # the weight gradient of a conv reduces over batch x output pixels (512 * 16 * 16 = 131072 per weight)
    from fusegrad import Context
    xn, wn, gn = _randn(rng, 512, 1, 18, 18), _randn(rng, 4, 1, 3, 3), _randn(rng, 512, 4, 16, 16)
    from fusegrad.engine.realize import run_schedule
    with Context(SPLIT_REDUCEOP=split):
        w = Tensor(wn, requires_grad=True)
        Tensor(xn).conv2d(w).backward(Tensor(gn))
        items = w.grad.schedule()
        run_schedule(items)
    reduces = [item for item in items if any(u.op is Ops.REDUCE for u in item.ast.toposort)]
    assert len(reduces) == (2 if split else 1)
    if split:   # the partials' sum runs over one flat axis of the 36 weights, not over their (4, 1, 3, 3) shape
        assert max(len([u for u in item.ast.toposort if u.op is Ops.RANGE]) for item in reduces[1:]) == 2
    tw = torch.tensor(wn, requires_grad=True)
    torch.nn.functional.conv2d(torch.tensor(xn), tw).backward(torch.tensor(gn))
    _close(w.grad, tw.grad, tol=1e-3)

@pytest.mark.parametrize("shape,axis", [((40009,), None), ((3, 40009), 1), ((191, 191), None)])
def test_a_big_reduce_over_a_prime_axis_is_split_too(rng, shape, axis):
    """No axis has a divisor to split by: the longest one is padded with the reduce's
    identity up to a multiple of the split (0 for sums, the dtype's lowest value for max, 1 for prod), and the reduce
    still runs as partials plus their reduce, two kernels (before: one serial loop; an 8191 x 8191 sum 56 -> 8 ms).
    (40009 and 191 are prime.)"""
    from helpers import count_kernels
    xn = _randn(rng, *shape)
    ints = (xn * 100).astype(np.int32)
    # (a float32 product of 40009 factors carries ~40009 roundings: a looser tolerance against float64)
    for build, expected, rtol in [(lambda: Tensor(xn).sum(axis), xn.astype(np.float64).sum(axis), 1e-4),
                                  (lambda: (-Tensor(xn).abs() - 1).max(axis), (-np.abs(xn) - 1).max(axis), 0),
                                  (lambda: (-Tensor(xn).abs() - 1).min(axis), (-np.abs(xn) - 1).min(axis), 0),
                                  (lambda: (Tensor(xn) * 1e-4 + 1).prod(axis), (xn.astype(np.float64) * 1e-4 + 1).prod(axis), 3e-3),
                                  (lambda: (-Tensor(ints).abs() - 5).max(axis), (-np.abs(ints) - 5).max(axis), 0)]:
        assert count_kernels(build()) == 2
        np.testing.assert_allclose(build().numpy(), expected, rtol=rtol)

# ---------------------------------------------------------------- gradients of gradients

POWERS = {"x**3": lambda x: x ** 3, "x**2": lambda x: x ** 2, "x**3.0": lambda x: x.pow(3.0), "x**-1": lambda x: x ** -1,
          "x**-2": lambda x: x ** -2, "x**2.5": lambda x: x ** 2.5, "x**0.5": lambda x: x ** 0.5, "x**0": lambda x: x ** 0,
          "x**x": lambda x: x ** x, "2**x": lambda x: 2.0 ** x, "x**(x/2)": lambda x: x ** (x / 2)}

@pytest.mark.parametrize("name", POWERS)
@pytest.mark.parametrize("realize_first", [False, True])
def test_second_derivatives_of_powers_match_torch(name, realize_first):
    """pow's gradients are PyTorch's formulas (not the chain rule through exp2/log2): built from the inputs themselves,
    they are differentiable again, whether the first gradient is realized before the second is asked for."""
    values = [0.5, 2.0, 1.5]
    x = Tensor(values, requires_grad=True)
    first = POWERS[name](x).sum().gradient(x)[0]
    if realize_first: first.realize()
    second = first.sum().gradient(x)[0]
    tx = torch.tensor(values, dtype=torch.float64, requires_grad=True)
    t_first, = torch.autograd.grad(POWERS[name](tx).sum(), tx, create_graph=True)
    t_second = torch.autograd.grad(t_first.sum(), tx)[0] if t_first.requires_grad else torch.zeros(3)
    np.testing.assert_allclose(first.numpy(), t_first.detach().numpy(), rtol=1e-5)
    np.testing.assert_allclose(second.numpy(), t_second.numpy(), rtol=1e-5, atol=1e-6)

def test_gradient_penalty_through_a_realized_input_gradient_matches_torch():
    w_np, x_np = np.array([[1.0, 2.0], [3.0, 4.0]]), np.array([[0.5, -1.0]])
    w, x = Tensor(w_np, requires_grad=True), Tensor(x_np, requires_grad=True)
    gx, = (x @ w).tanh().sum().gradient(x)
    (gx.realize() ** 2).sum().backward()
    tw, tx = torch.tensor(w_np, requires_grad=True), torch.tensor(x_np, requires_grad=True)
    t_gx, = torch.autograd.grad((tx @ tw).tanh().sum(), tx, create_graph=True)
    (t_gx ** 2).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy(), rtol=1e-4, atol=1e-6)

def test_gradient_of_an_unrelated_target_is_zeros():
    """tinygrad 0.14's rule: a target the tensor doesn't depend on gets zeros (not an error)."""
    x, y = Tensor([1.0, 2.0], requires_grad=True), Tensor([3.0, 4.0, 5.0], requires_grad=True)
    dx, dy = (x * 2).sum().gradient(x, y)
    assert dx.tolist() == [2.0, 2.0] and dy.tolist() == [0.0, 0.0, 0.0]

def test_no_grad_results_do_not_require_grad():
    """Ops made under ``Tensor.no_grad`` (older tinygrad's switch, torch.no_grad()) don't require grad, and backward()
    of a tensor that doesn't require grad is PyTorch's RuntimeError (it filled the inputs' .grad anyway)."""
    x = Tensor([1.0, 2.0, 3.0], requires_grad=True)
    previous, Tensor.no_grad = Tensor.no_grad, True
    try: y = (x * x).sum()
    finally: Tensor.no_grad = previous
    assert y.requires_grad is False
    with pytest.raises(RuntimeError, match="doesn't require grad"): y.backward()
    with pytest.raises(RuntimeError, match="doesn't require grad"): (x * x).detach().sum().backward()
    assert x.grad is None
    (x * x).sum().backward()   # outside no_grad, as before
    assert x.grad.tolist() == [2.0, 4.0, 6.0]
