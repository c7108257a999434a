"""Optimizers against torch.optim (or, where torch has no equivalent, a numpy/torch reference written
from the published formulas) over several steps on a small model."""
import math, os, subprocess, sys, textwrap
import numpy as np
import pytest
import torch
from fusegrad import Tensor, GlobalCounters, Context, dtypes
from fusegrad.nn.optim import Optimizer, OptimizerGroup, SGD, LARS, LAMB, Adam, AdamW, Muon

_rng = np.random.default_rng(1337)
X_INIT = _rng.standard_normal((1, 4)).astype(np.float32)
W_INIT = _rng.standard_normal((4, 4)).astype(np.float32)
M_INIT = _rng.standard_normal((1, 4)).astype(np.float32)
B_INIT = _rng.standard_normal((4,)).astype(np.float32)

@pytest.fixture(autouse=True)
def _training():
    with Tensor.train(): yield

class Net:
    """loss = sum(log_softmax(relu(x @ W + b)) * m + m): a few params, a nonlinearity, a reduce."""
    def __init__(self, lib):
        self.lib = lib
        if lib is torch:
            self.x, self.W, self.b = (torch.tensor(a.copy(), requires_grad=True) for a in (X_INIT, W_INIT, B_INIT))
            self.m = torch.tensor(M_INIT.copy())
        else:
            self.x, self.W, self.b = (Tensor(a.copy(), requires_grad=True) for a in (X_INIT, W_INIT, B_INIT))
            self.m = Tensor(M_INIT.copy())
    def params(self): return [self.x, self.W, self.b]
    def loss(self):
        out = (self.x @ self.W + self.b).relu()
        out = out.log_softmax(1)
        return (out * self.m + self.m).sum()

def _values(ps): return [p.detach().numpy().copy() if isinstance(p, torch.Tensor) else p.numpy() for p in ps]

def _run(make_opt, make_torch_opt, steps, atol=1e-6, rtol=1e-5, lr_schedule=None):
    """Train both nets ``steps`` steps, comparing all params after every step. ``lr_schedule`` maps
    a step index to a new lr, set on fusegrad via ``opt.lr.assign`` and on torch via param_groups."""
    net, tnet = Net(Tensor), Net(torch)
    opt, topt = make_opt(net.params()), make_torch_opt(tnet.params())
    for step in range(steps):
        if lr_schedule and step in lr_schedule:
            opt.lr.assign(Tensor([lr_schedule[step]], dtype=opt.lr.dtype))
            for g in topt.param_groups: g["lr"] = lr_schedule[step]
        opt.zero_grad()
        net.loss().backward()
        opt.step()
        topt.zero_grad()
        tnet.loss().backward()
        topt.step()
        for ours, theirs in zip(_values(net.params()), _values(tnet.params())):
            np.testing.assert_allclose(ours, theirs, atol=atol, rtol=rtol, err_msg=f"after step {step}")
    return net, opt

# ---------------------------------------------------------------- SGD

@pytest.mark.parametrize("kwargs", [
    {"lr": 0.01},
    {"lr": 0.01, "momentum": 0.9},
    {"lr": 0.01, "momentum": 0.9, "nesterov": True},
    {"lr": 0.01, "weight_decay": 0.1},
    {"lr": 0.01, "momentum": 0.9, "weight_decay": 0.1},
    {"lr": 0.01, "momentum": 0.9, "nesterov": True, "weight_decay": 0.1},
])
def test_sgd(kwargs):
    _run(lambda p: SGD(p, **kwargs), lambda p: torch.optim.SGD(p, **kwargs), steps=5)

def test_sgd_classic_momentum_matches_torch_at_constant_lr():
    # classic momentum keeps lr * (torch's buffer); with a constant lr the params are the same
    _run(lambda p: SGD(p, lr=0.01, momentum=0.9, weight_decay=0.05, classic=True),
         lambda p: torch.optim.SGD(p, lr=0.01, momentum=0.9, weight_decay=0.05), steps=5, rtol=1e-5, atol=2e-6)

def test_sgd_defaults():
    opt = SGD([Tensor.ones(2, requires_grad=True)])
    assert math.isclose(opt.lr.item(), 0.001, rel_tol=1e-6) and opt.momentum == 0 and opt.wd == 0 and not opt.nesterov
    assert opt.tcoef == 0

# ---------------------------------------------------------------- Adam / AdamW

@pytest.mark.parametrize("kwargs,torch_kwargs", [
    ({}, {}),
    ({"lr": 0.01}, {"lr": 0.01}),
    ({"lr": 0.01, "b1": 0.8, "b2": 0.99, "eps": 1e-6}, {"lr": 0.01, "betas": (0.8, 0.99), "eps": 1e-6}),
])
def test_adam(kwargs, torch_kwargs):
    _run(lambda p: Adam(p, **kwargs), lambda p: torch.optim.Adam(p, **torch_kwargs), steps=6, atol=1e-5, rtol=1e-5)

@pytest.mark.parametrize("kwargs,torch_kwargs", [
    ({}, {}),
    ({"lr": 0.01, "weight_decay": 0.1}, {"lr": 0.01, "weight_decay": 0.1}),
])
def test_adamw(kwargs, torch_kwargs):
    _run(lambda p: AdamW(p, **kwargs), lambda p: torch.optim.AdamW(p, **torch_kwargs), steps=6, atol=1e-5, rtol=1e-5)

def test_adam_state_is_float32_even_for_half_params():
    w = Tensor.ones(3, dtype=dtypes.half, requires_grad=True)
    opt = Adam([w])
    assert all(t.dtype == dtypes.float32 for t in opt.m + opt.v + [opt.b1_t, opt.b2_t])

# ---------------------------------------------------------------- LAMB and LARS against numpy references

def _lamb_reference(steps, lr, b1, b2, eps, wd):
    """LAMB (You et al. 2019) with Adam bias correction and trust ratio |w| / |update|."""
    tnet = Net(torch)
    ps = tnet.params()
    m = [torch.zeros_like(p) for p in ps]
    v = [torch.zeros_like(p) for p in ps]
    history = []
    for t in range(1, steps + 1):
        for p in ps: p.grad = None
        tnet.loss().backward()
        with torch.no_grad():
            for i, p in enumerate(ps):
                m[i] = b1 * m[i] + (1 - b1) * p.grad
                v[i] = b2 * v[i] + (1 - b2) * p.grad * p.grad
                up = (m[i] / (1 - b1 ** t)) / ((v[i] / (1 - b2 ** t)).sqrt() + eps) + wd * p
                r1, r2 = p.norm(), up.norm()
                ratio = (r1 / r2) if (r1 > 0 and r2 > 0) else 1.0
                p -= lr * ratio * up
        history.append(_values(ps))
    return history

@pytest.mark.parametrize("wd", [0.0, 0.01])
def test_lamb(wd):
    steps, lr, b1, b2, eps = 5, 0.01, 0.9, 0.999, 1e-6
    expected = _lamb_reference(steps, lr, b1, b2, eps, wd)
    net = Net(Tensor)
    opt = LAMB(net.params(), lr=lr, b1=b1, b2=b2, eps=eps, weight_decay=wd)
    for step in range(steps):
        opt.zero_grad()
        net.loss().backward()
        opt.step()
        for ours, theirs in zip(_values(net.params()), expected[step]):
            np.testing.assert_allclose(ours, theirs, atol=1e-5, rtol=1e-5)

def _lars_reference(steps, lr, momentum, wd, tcoef, nesterov):
    """LARS (You et al. 2017) with classic momentum: b = m*b + lr*ratio*(g + wd*w); w -= b."""
    tnet = Net(torch)
    ps = tnet.params()
    buf = [torch.zeros_like(p) for p in ps]
    history = []
    for _ in range(steps):
        for p in ps: p.grad = None
        tnet.loss().backward()
        with torch.no_grad():
            for i, p in enumerate(ps):
                g = p.grad
                r1, r2 = p.norm(), g.norm()
                ratio = tcoef * r1 / (r2 + wd * r1) if (r1 > 0 and r2 > 0) else 1.0
                g = (g + wd * p) * ratio * lr
                buf[i] = momentum * buf[i] + g
                p -= (g + momentum * buf[i]) if nesterov else buf[i]
        history.append(_values(ps))
    return history

@pytest.mark.parametrize("nesterov", [False, True])
def test_lars(nesterov):
    steps, lr, momentum, wd, tcoef = 5, 0.1, 0.9, 1e-4, 0.001
    expected = _lars_reference(steps, lr, momentum, wd, tcoef, nesterov)
    net = Net(Tensor)
    opt = LARS(net.params(), lr=lr, momentum=momentum, weight_decay=wd, tcoef=tcoef, nesterov=nesterov)
    for step in range(steps):
        opt.zero_grad()
        net.loss().backward()
        opt.step()
        for ours, theirs in zip(_values(net.params()), expected[step]):
            np.testing.assert_allclose(ours, theirs, atol=1e-6, rtol=1e-5)

# ---------------------------------------------------------------- Muon

def _torch_newton_schulz(G, steps, coeffs, eps=1e-7):
    """Keller Jordan's quintic Newton-Schulz iteration, in float32."""
    a, b, c = coeffs
    X = G.T if G.shape[0] > G.shape[1] else G
    X = X / (X.norm() + eps)
    for _ in range(steps):
        A = X @ X.T
        X = a * X + (b * A + c * A @ A) @ X
    return X.T if G.shape[0] > G.shape[1] else X

@pytest.mark.parametrize("shape,weight_decay", [((4, 4), 0.0), ((6, 3), 0.1), ((3, 2, 2), 0.0)])
def test_muon(shape, weight_decay):
    rng = np.random.default_rng(0)
    w_init = rng.standard_normal(shape).astype(np.float32)
    xs = rng.standard_normal((4, shape[0])).astype(np.float32)
    lr, momentum, ns_steps, coeffs = 0.02, 0.95, 5, (3.4445, -4.775, 2.0315)
    w = Tensor(w_init.copy(), requires_grad=True)
    opt = Muon([w], lr=lr, momentum=momentum, weight_decay=weight_decay)
    tw = torch.tensor(w_init.copy(), requires_grad=True)
    buf = torch.zeros_like(tw)
    for step in range(4):
        x, tx = Tensor(xs[step:step + 1]), torch.tensor(xs[step:step + 1])
        opt.zero_grad()
        (x @ w.reshape(shape[0], -1)).square().sum().backward()
        opt.step()
        tw.grad = None
        (tx @ tw.reshape(shape[0], -1)).square().sum().backward()
        with torch.no_grad():
            g = tw.grad
            buf = momentum * buf + g
            update = g + momentum * buf                          # nesterov
            update = _torch_newton_schulz(update.reshape(shape[0], -1), ns_steps, coeffs).reshape(shape)
            tw.mul_(1 - lr * weight_decay)
            tw -= lr * update
        np.testing.assert_allclose(w.numpy(), tw.detach().numpy(), atol=1e-5, rtol=1e-4, err_msg=f"step {step}")

def test_muon_update_is_nearly_orthogonal():
    # after Newton-Schulz the update's singular values are all close to 1 (roughly in [0.6, 1.2])
    rng = np.random.default_rng(1)
    w_init = rng.standard_normal((8, 8)).astype(np.float32)
    g = rng.standard_normal((8, 8)).astype(np.float32)
    w = Tensor(w_init.copy(), requires_grad=True)
    opt = Muon([w], lr=1.0, momentum=0.0, nesterov=False)
    (w * Tensor(g)).sum().backward()
    opt.step()
    sv = np.linalg.svd(w_init - w.numpy(), compute_uv=False)
    assert sv.min() > 0.5 and sv.max() < 1.3, sv
    # and it points the way of the polar factor of g
    u, _, vt = np.linalg.svd(g)
    assert np.sum((w_init - w.numpy()) * (u @ vt)) / np.linalg.norm(u @ vt) ** 2 > 0.7

# ---------------------------------------------------------------- learning rate as a tensor

@pytest.mark.parametrize("make,make_torch", [
    (lambda p: SGD(p, lr=0.01, momentum=0.9), lambda p: torch.optim.SGD(p, lr=0.01, momentum=0.9)),
    (lambda p: Adam(p, lr=0.01), lambda p: torch.optim.Adam(p, lr=0.01)),
    (lambda p: AdamW(p, lr=0.01, weight_decay=0.1), lambda p: torch.optim.AdamW(p, lr=0.01, weight_decay=0.1)),
])
def test_lr_assign_mid_training(make, make_torch):
    _run(make, make_torch, steps=6, atol=1e-5, rtol=1e-5, lr_schedule={2: 0.05, 4: 0.001})

def test_lr_replaced_mid_training():
    net, tnet = Net(Tensor), Net(torch)
    opt, topt = SGD(net.params(), lr=0.01, momentum=0.5), torch.optim.SGD(tnet.params(), lr=0.01, momentum=0.5)
    for step in range(4):
        if step == 2:
            opt.lr = Tensor([0.1], dtype=dtypes.float32)
            topt.param_groups[0]["lr"] = 0.1
        opt.zero_grad(); net.loss().backward(); opt.step()
        topt.zero_grad(); tnet.loss().backward(); topt.step()
    for ours, theirs in zip(_values(net.params()), _values(tnet.params())):
        np.testing.assert_allclose(ours, theirs, atol=1e-6, rtol=1e-5)

def test_lr_is_a_float32_tensor():
    opt = Adam([Tensor.ones(2, requires_grad=True)], lr=3e-4)
    assert isinstance(opt.lr, Tensor) and opt.lr.dtype == dtypes.float32
    assert math.isclose(opt.lr.item(), 3e-4, rel_tol=1e-6)

# ---------------------------------------------------------------- mixed precision

def test_half_default_float_huge_lr_does_not_overflow():
    # tinygrad: "weight update would overflow without upcasting". The lr is stored in at least float32,
    # so 1e10 doesn't become inf under a half default_float; params made from float32 arrays stay float32.
    dtypes.default_float = dtypes.half   # restored by conftest
    opt = SGD([Tensor(W_INIT.copy(), requires_grad=True)], lr=1e10)
    assert opt.lr.dtype == dtypes.float32 and opt.lr.item() == np.float32(1e10)
    _run(lambda p: SGD(p, lr=1e10), lambda p: torch.optim.SGD(p, lr=1e10), steps=2, atol=1e-6, rtol=3e-4)
    _run(lambda p: Adam(p, lr=1e10), lambda p: torch.optim.Adam(p, lr=1e10), steps=1, atol=1e-4, rtol=1e-4)

def test_adam_half_param_float32_moments():
    # grads of 400 square to 1.6e5 > the float16 max (65504): v must be float32 to stay finite
    w_init = np.array([1.0, -2.0, 3.0, 0.5], dtype=np.float16)
    w = Tensor(w_init, requires_grad=True)
    tw = torch.tensor(w_init.astype(np.float32), requires_grad=True)
    opt, topt = Adam([w], lr=0.01), torch.optim.Adam([tw], lr=0.01)
    for _ in range(3):
        opt.zero_grad(); (w * 400).sum().backward(); opt.step()
        topt.zero_grad(); (tw * 400).sum().backward(); topt.step()
        with torch.no_grad(): tw.copy_(tw.half().float())   # the reference keeps its param in half too
    assert w.dtype == dtypes.half and all(t.dtype == dtypes.float32 for t in opt.m + opt.v)
    assert np.isfinite(opt.v[0].numpy()).all() and np.isfinite(w.numpy()).all()
    np.testing.assert_allclose(w.numpy().astype(np.float32), tw.detach().numpy(), atol=1e-3, rtol=1e-3)

# ---------------------------------------------------------------- the Optimizer base class

def test_schedule_step_requires_training():
    w = Tensor.ones(1, 1, requires_grad=True)
    opt = Adam([w])
    opt.zero_grad()
    w.sum().backward()
    with Tensor.train(False):   # a RuntimeError, as tinygrad raises (it was an assert, gone under python -O)
        with pytest.raises(RuntimeError, match="Tensor.training must be enabled"): opt.step()
        with pytest.raises(RuntimeError, match="Tensor.training=True"): opt.schedule_step()
        with pytest.raises(RuntimeError, match="Tensor.training"): OptimizerGroup(opt, SGD([Tensor.ones(2, requires_grad=True)])).step()
    assert w.numpy()[0, 0] == 1.0   # nothing was updated
    with Context(TRAINING=1): opt.step()
    assert w.numpy()[0, 0] < 1.0

def test_bad_arguments_raise_under_python_O():
    # the checks are raises, not asserts: python -O (which drops asserts) still reports them (RuntimeError: tinygrad's type;
    # ValueError where tinygrad asserts: PyTorch's)
    code = textwrap.dedent("""
        from fusegrad import Tensor
        from fusegrad.nn.optim import SGD, Muon
        w = Tensor.ones(2, 2, requires_grad=True)
        w.sum().backward()
        cases = {"step outside training": lambda: SGD([w]).step(), "Muon fused": lambda: Muon([w], fused=True),
                 "no params": lambda: SGD([Tensor.ones(2, requires_grad=False)])}
        for name, case in cases.items():
            try: case(); print(name, "-> nothing raised")
            except Exception as e: print(name, "->", [c.__name__ for c in type(e).__mro__ if c.__module__ == "builtins"][:3])
    """)
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    result = subprocess.run([sys.executable, "-O", "-c", code], capture_output=True, text=True, timeout=300, cwd=repo)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.splitlines() == ["step outside training -> ['RuntimeError', 'Exception', 'BaseException']",
                                          "Muon fused -> ['ValueError', 'Exception', 'BaseException']",
                                          "no params -> ['ValueError', 'Exception', 'BaseException']"]

def test_params_dedup_and_requires_grad():
    a = Tensor.ones(2)                          # requires_grad None: put into an optimizer, it becomes True
    b = Tensor.ones(3, requires_grad=True)
    c = Tensor.ones(4, requires_grad=False)     # kept as a buffer, never updated
    opt = SGD([a, b, a, c, b], lr=0.1)
    assert opt.params == [a, b] and opt.buffers == [c] and a.requires_grad is True
    with pytest.raises(ValueError, match="at least one param"): SGD([Tensor.ones(2, requires_grad=False)])   # (tinygrad asserts: PyTorch's type)

def test_zero_grad():
    w = Tensor.ones(3, requires_grad=True)
    opt = SGD([w], lr=0.1)
    (w * 2).sum().backward()
    assert w.grad is not None
    opt.zero_grad()
    assert w.grad is None

def test_step_returns_lazy_tensors_and_realizes_once():
    w = Tensor(W_INIT.copy(), requires_grad=True)
    opt = SGD([w], lr=0.1, momentum=0.9)
    (w * w).sum().backward()
    todo = opt.schedule_step()
    assert any(t is w for t in todo) and any(t is opt.b[0] for t in todo)
    Tensor.realize(*todo)
    np.testing.assert_allclose(w.numpy(), W_INIT - 0.1 * 2 * W_INIT, rtol=1e-6)

def test_optimizer_group():
    net, tnet = Net(Tensor), Net(torch)
    opt = OptimizerGroup(SGD([net.x], lr=0.01, momentum=0.9), Adam([net.W, net.b], lr=0.01))
    topts = [torch.optim.SGD([tnet.x], lr=0.01, momentum=0.9), torch.optim.Adam([tnet.W, tnet.b], lr=0.01)]
    assert opt.params == [net.x, net.W, net.b] and isinstance(opt[1], LAMB)
    for _ in range(4):
        opt.zero_grad(); net.loss().backward(); opt.step()
        for o in topts: o.zero_grad()
        tnet.loss().backward()
        for o in topts: o.step()
    for ours, theirs in zip(_values(net.params()), _values(tnet.params())):
        np.testing.assert_allclose(ours, theirs, atol=1e-5, rtol=1e-5)

def test_scalar_param():
    w, tw = Tensor(2.0, requires_grad=True), torch.tensor(2.0, requires_grad=True)
    opt, topt = Adam([w], lr=0.1), torch.optim.Adam([tw], lr=0.1)
    for _ in range(3):
        opt.zero_grad(); (w * w).backward(); opt.step()
        topt.zero_grad(); (tw * tw).backward(); topt.step()
    assert w.shape == ()
    np.testing.assert_allclose(w.numpy(), tw.detach().numpy(), rtol=1e-5)

# ---------------------------------------------------------------- fusion

def _step_kernels(make_opt, realize_loss=False):
    x = Tensor(np.random.default_rng(0).standard_normal((8, 16)).astype(np.float32))
    w = Tensor(np.random.default_rng(1).standard_normal((16, 4)).astype(np.float32), requires_grad=True)
    opt = make_opt([w])
    for _ in range(2):   # the second step counts: nothing left from construction or the first run
        opt.zero_grad()
        loss = (x @ w).relu().sum()
        loss.backward()
        GlobalCounters.reset()
        Tensor.realize(*([loss] if realize_loss else []), *opt.schedule_step())
    return GlobalCounters.kernel_count

def test_sgd_step_kernel_count():
    # The backward of (x@w).relu().sum() needs two reductions over different axes: f = x@w (for the
    # relu mask) and dw = x.T @ (f > 0); they can't share a kernel. dw reads w (through f) at other
    # elements than the one it updates, so the optimizer stores dw before overwriting w, and the
    # update w - lr*dw is one elementwise kernel: 3 kernels. (If the scheduler ordered reads of a
    # buffer before the assign that overwrites it, the update could fuse into dw's kernel: 2.)
    assert _step_kernels(lambda p: SGD(p, lr=0.01)) <= 3
    # realizing the loss as well adds at most its own reduce
    assert _step_kernels(lambda p: SGD(p, lr=0.01), realize_loss=True) <= 4
    # momentum: the buffer update b = 0.9*b + dw and the param update w - lr*b fuse into one
    # multi-output kernel or take one more
    assert _step_kernels(lambda p: SGD(p, lr=0.01, momentum=0.9)) <= 4

def test_linear_batchnorm_training_with_running_stats_as_buffers():
    # like tinygrad's get_parameters(model): running stats (requires_grad=False) go in as buffers and are
    # realized with each step; their pending updates read the old Linear weight, which the step overwrites
    from fusegrad import nn
    rng = np.random.default_rng(3)
    lin, bn = nn.Linear(5, 4), nn.BatchNorm1d(4)
    tlin, tbn = torch.nn.Linear(5, 4), torch.nn.BatchNorm1d(4)
    with torch.no_grad():
        tlin.weight.copy_(torch.tensor(lin.weight.numpy())); tlin.bias.copy_(torch.tensor(lin.bias.numpy()))
    params = [lin.weight, lin.bias, bn.weight, bn.bias, bn.running_mean, bn.running_var, bn.num_batches_tracked]
    opt = SGD(params, lr=0.1, momentum=0.9)
    topt = torch.optim.SGD(list(tlin.parameters()) + list(tbn.parameters()), lr=0.1, momentum=0.9)
    assert len(opt.params) == 4 and len(opt.buffers) == 3
    for _ in range(3):
        x_np = rng.standard_normal((6, 5)).astype(np.float32)
        opt.zero_grad()
        bn(lin(Tensor(x_np))).relu().square().mean().backward()
        opt.step()
        topt.zero_grad()
        tbn(tlin(torch.tensor(x_np))).relu().square().mean().backward()
        topt.step()
    for ours, theirs in [(lin.weight, tlin.weight), (lin.bias, tlin.bias), (bn.weight, tbn.weight), (bn.bias, tbn.bias),
                         (bn.running_mean, tbn.running_mean), (bn.running_var, tbn.running_var)]:
        np.testing.assert_allclose(ours.numpy(), theirs.detach().numpy(), atol=1e-5, rtol=1e-4)
    assert bn.num_batches_tracked.shape == () and bn.num_batches_tracked.item() == 3
