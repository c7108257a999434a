"""Realizing from several Python threads (issue 35): scheduling rebinds every live tensor to buffers that are written
only when the kernels run, so without engine/realize.py's realize_lock a second thread could read a tensor that
looked realized before its kernel had run (`.item()` gave 0.0 instead of 5995.0). Every value here is checked
against numpy, whatever thread computed it."""
from __future__ import annotations
import sys, threading
import numpy as np
import pytest
from fusegrad import Tensor

THREADS = 6

@pytest.fixture(autouse=True)
def frequent_thread_switches():
    """Switch threads every few microseconds, so the interleavings a race needs happen within a short test."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    yield
    sys.setswitchinterval(before)

def run_together(functions: list) -> list:
    """Run each function in its own thread, all released at once; returns their results (re-raising any error)."""
    results: list = [None] * len(functions)
    errors: list = []
    start = threading.Barrier(len(functions))
    def worker(i: int) -> None:
        try:
            start.wait()
            results[i] = functions[i]()
        except BaseException as e: errors.append(e)
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(functions))]
    for t in threads: t.start()
    for t in threads: t.join()
    if errors: raise errors[0]
    return results

def test_item_of_one_lazy_tensor_from_many_threads():
    for trial in range(12):
        scale = float(trial + 1)   # a new constant each trial: a new kernel, compiled while the others wait
        shared = (Tensor.arange(110).float() * scale).sum()
        expected = float((np.arange(110, dtype=np.float32) * np.float32(scale)).sum())
        got = run_together([shared.item] * THREADS)
        assert got == [expected] * THREADS, f"trial {trial}"

def test_different_tensors_over_one_shared_lazy_input():
    for trial in range(8):
        base_np = np.arange(48, dtype=np.float32).reshape(6, 8) - trial
        base = Tensor(base_np) * 2 + trial   # lazy, read by every thread's graph
        base_ref = base_np * 2 + trial
        builders = [
            (lambda: base.sum(axis=1).numpy(), lambda: base_ref.sum(axis=1)),
            (lambda: (base * base).max(axis=0).numpy(), lambda: (base_ref * base_ref).max(axis=0)),
            (lambda: base.relu().mean().numpy(), lambda: np.maximum(base_ref, 0).mean()),
            (lambda: (base @ base.T).numpy(), lambda: base_ref @ base_ref.T),
            (lambda: base.numpy(), lambda: base_ref),
            (lambda: (base + 1).exp2().sum().numpy(), lambda: np.exp2(base_ref + 1).sum()),
        ]
        got = run_together([build for build, _ in builders])
        for i, (value, (_, reference)) in enumerate(zip(got, builders)):
            np.testing.assert_allclose(value, reference(), rtol=1e-5, err_msg=f"trial {trial}, function {i}")

def _numpy_sgd(x: np.ndarray, y: np.ndarray, w: np.ndarray, lr: float, steps: int) -> np.ndarray:
    """Linear regression by gradient descent on the mean squared error, in numpy (the reference)."""
    for _ in range(steps):
        w = w - lr * (2 / len(x)) * x.T @ (x @ w - y)
    return w

def _fusegrad_sgd(x: np.ndarray, y: np.ndarray, w0: np.ndarray, lr: float, steps: int) -> np.ndarray:
    """The same training in fusegrad without TinyJit: forward, backward, an in-place update, realized each step."""
    w, tx, ty = Tensor(w0, requires_grad=True), Tensor(x), Tensor(y)
    for _ in range(steps):
        loss = ((tx @ w - ty) ** 2).mean()
        loss.backward()
        w.assign(w.detach() - lr * w.grad).realize()
        w.grad = None
        loss.item()   # a read between steps, as a training loop logs its loss
    return w.numpy()

def test_training_loops_in_threads_match_numpy():
    rng = np.random.default_rng(0)
    problems = []
    for i in range(THREADS):
        x = rng.standard_normal((16, 3)).astype(np.float32)
        y = (x @ np.array([[1.0], [-2.0], [0.5]], np.float32) + i).astype(np.float32)
        w0 = rng.standard_normal((3, 1)).astype(np.float32)
        problems.append((x, y, w0))
    got = run_together([lambda p=p: _fusegrad_sgd(*p, lr=0.05, steps=12) for p in problems])
    for i, (x, y, w0) in enumerate(problems):
        np.testing.assert_allclose(got[i], _numpy_sgd(x, y, w0, 0.05, 12), rtol=1e-4, atol=1e-5, err_msg=f"thread {i}")
