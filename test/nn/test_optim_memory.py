"""A training loop must run in constant memory: the input and label tensors, created once and reused
every step (requires_grad not set), get no ``.grad`` once the optimizer marked its params
requires_grad=True (backward()'s rule, tensor.py), and the params' ``.grad`` stays a buffer, not a
graph that grows step after step (Optimizer.step stores the gradients it reads)."""
import gc, os
import numpy as np
import pytest
from fusegrad import Tensor, TinyJit
from fusegrad.nn import Linear
from fusegrad.nn.optim import SGD, Adam
from fusegrad.schedule import BUFFERS

def _live_buffers() -> int:
    return sum(1 for b in list(BUFFERS.values()) if b is not None and b.is_allocated())

def _rss_mb() -> float:
    with open("/proc/self/statm") as f: return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20

def _snapshot(params: list[Tensor]) -> tuple[int, list[int], float]:
    gc.collect()
    return _live_buffers(), [len(p.grad.uop.toposort) for p in params], _rss_mb()

def _train(optimizer, use_jit: bool, checkpoints: tuple[int, int], zero_grad: bool = True) -> tuple[tuple, tuple, Tensor, list[Tensor]]:
    """Train a tiny MLP on one fixed batch; snapshot memory after each of ``checkpoints`` steps."""
    Tensor.manual_seed(0)
    hidden, out = Linear(8, 16), Linear(16, 4)
    params = [hidden.weight, hidden.bias, out.weight, out.bias]
    opt = optimizer(params)
    rng = np.random.default_rng(0)
    inputs = Tensor(rng.standard_normal((32, 8)).astype(np.float32))
    labels = Tensor(rng.integers(0, 4, 32).astype(np.int32))
    def step(x: Tensor, y: Tensor) -> Tensor:
        if zero_grad: opt.zero_grad()
        loss = out(hidden(x).relu()).sparse_categorical_crossentropy(y)
        loss.backward()
        opt.step()
        return loss
    if use_jit: step = TinyJit(step)
    snapshots = []
    with Tensor.train():
        for i in range(1, checkpoints[1] + 1):
            step(inputs, labels)
            if i in checkpoints: snapshots.append(_snapshot(params))
    return snapshots[0], snapshots[1], inputs, params

@pytest.mark.parametrize("optimizer", [lambda p: SGD(p, lr=0.01, momentum=0.9), lambda p: Adam(p, lr=1e-3)], ids=["sgd", "adam"])
def test_jit_training_loop_memory_is_flat(optimizer):
    early, late, inputs, _ = _train(optimizer, use_jit=True, checkpoints=(100, 1000))
    assert inputs.grad is None   # the reused input is no gradient target once params require grad
    assert late[0] == early[0], f"live buffers grew from {early[0]} to {late[0]}"
    assert late[1] == early[1], f"the params' grad graphs grew from {early[1]} to {late[1]}"
    assert late[2] - early[2] < 4.0, f"RSS grew by {late[2] - early[2]:.1f} MB"

def test_training_loop_memory_is_flat_without_jit():
    # each step schedules again (about 50 ms here), so fewer steps than the JIT test
    early, late, inputs, _ = _train(lambda p: SGD(p, lr=0.01), use_jit=False, checkpoints=(20, 120))
    assert inputs.grad is None
    assert late[0] == early[0], f"live buffers grew from {early[0]} to {late[0]}"
    assert late[1] == early[1], f"the params' grad graphs grew from {early[1]} to {late[1]}"
    assert late[2] - early[2] < 4.0, f"RSS grew by {late[2] - early[2]:.1f} MB"

def test_accumulating_grads_without_zero_grad_stays_a_buffer():
    # no zero_grad: every backward adds to .grad, and step() collapses the sum into a buffer
    early, late, _, params = _train(lambda p: SGD(p, lr=0.001), use_jit=False, checkpoints=(5, 40), zero_grad=False)
    assert all(p.grad.uop.base.op.name == "BUFFER" for p in params)
    assert late[0] == early[0] and late[1] == early[1]
