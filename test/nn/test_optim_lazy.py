"""Optimizers are lazy, as tinygrad 0.14's (its examples/stunning_mnist.py asserts no kernel ran while a whole
training run is scheduled): constructing one and ``schedule_step()`` run no kernel; the realize does it all."""
import numpy as np
import pytest
import torch
from fusegrad import Tensor, GlobalCounters
from fusegrad.nn.optim import SGD, Adam, AdamW, LAMB, LARS

OPTIMIZERS = {
    "sgd": (lambda p: SGD(p, lr=0.1), lambda p: torch.optim.SGD(p, lr=0.1)),
    "sgd_momentum": (lambda p: SGD(p, lr=0.1, momentum=0.9, nesterov=True),
                     lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True)),
    "adam": (lambda p: Adam(p, lr=0.1), lambda p: torch.optim.Adam(p, lr=0.1)),
    "adamw": (lambda p: AdamW(p, lr=0.1, weight_decay=0.1), lambda p: torch.optim.AdamW(p, lr=0.1, weight_decay=0.1)),
}
W0, B0, X = np.array([[0.5, -1.0, 2.0], [1.5, 0.25, -0.75]], np.float32), np.array([0.1, -0.2, 0.3], np.float32), np.array([[1.0, 2.0], [-1.0, 0.5]], np.float32)

def _fresh() -> tuple[Tensor, Tensor]:
    return Tensor(W0.copy()).contiguous().realize(), Tensor(B0.copy()).contiguous().realize()

@pytest.mark.parametrize("make", [lambda p: SGD(p, lr=0.1), lambda p: SGD(p, lr=0.1, momentum=0.9), lambda p: Adam(p),
                                  lambda p: AdamW(p), lambda p: LAMB(p), lambda p: LARS(p)], ids=["sgd", "sgd_momentum", "adam", "adamw", "lamb", "lars"])
def test_constructing_an_optimizer_runs_no_kernel(make):
    w, b = _fresh()
    GlobalCounters.reset()
    make([w, b])
    assert GlobalCounters.kernel_count == 0

@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_scheduled_steps_run_nothing_until_realized_and_match_torch(name):
    make, make_torch = OPTIMIZERS[name]
    w, b = _fresh()
    x = Tensor(X)
    GlobalCounters.reset()
    opt = make([w, b])
    losses = []
    with Tensor.train():
        for _ in range(3):   # three steps scheduled back to back, each reading the previous (lazy) params
            opt.zero_grad()
            losses.append((x @ w + b).square().sum().backward())
            scheduled = opt.schedule_step()
            assert any(s is w for s in scheduled) and any(s is b for s in scheduled)
    assert GlobalCounters.kernel_count == 0, "kernels were run during scheduling"

    tw, tb = torch.tensor(W0, requires_grad=True), torch.tensor(B0, requires_grad=True)
    topt, tx, want_losses = make_torch([tw, tb]), torch.tensor(X), []
    for _ in range(3):
        topt.zero_grad()
        loss = (tx @ tw + tb).square().sum()
        loss.backward()
        topt.step()
        want_losses.append(loss.item())
    np.testing.assert_allclose([l.item() for l in losses], want_losses, rtol=1e-5)
    np.testing.assert_allclose(w.numpy(), tw.detach().numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(b.numpy(), tb.detach().numpy(), rtol=1e-4, atol=1e-5)
    assert GlobalCounters.kernel_count > 0

def test_schedule_step_returns_state_params_and_buffers():
    w, b = _fresh()
    running = Tensor.zeros(3).contiguous().realize().is_param_(False)
    opt = Adam([w, b, running])
    with Tensor.train():
        (Tensor(X) @ w + b).sum().backward()
        scheduled = opt.schedule_step()
    # tinygrad: extra (the optimizer's state) + params + buffers
    assert [id(t) for t in scheduled[-3:]] == [id(w), id(b), id(running)]
    assert all(any(s is t for s in scheduled) for t in [opt.b1_t, opt.b2_t, *opt.m, *opt.v])
