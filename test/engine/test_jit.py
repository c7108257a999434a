"""TinyJit: capture on the second call, replay afterwards, and clear errors on mismatches."""
import numpy as np
import pytest
from fusegrad import Tensor, TinyJit, Variable, GlobalCounters, Context
from fusegrad.engine.jit import JitError
from fusegrad.nn.optim import Adam

def test_replay_matches_unjitted(rng):
    w = Tensor(rng.standard_normal((4, 5)).astype(np.float32)).realize()
    def fn(x, y): return ((x @ w) + y).relu().sum(0).realize()
    jitted = TinyJit(fn)
    for _ in range(5):
        a, b = rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal((3, 5)).astype(np.float32)
        np.testing.assert_allclose(jitted(Tensor(a), Tensor(b)).numpy(), fn(Tensor(a), Tensor(b)).numpy(), rtol=1e-6)
    # one fused kernel: matmul + add + relu + sum
    assert len(jitted.jit_cache) == 1

def test_captured_kernel_count_and_no_graph_work(rng):
    @TinyJit
    def fn(x): return (x * 2).sum(1).realize(), (x + 1).max().realize()
    x = Tensor(rng.standard_normal((8, 8)).astype(np.float32))
    for _ in range(3): fn(x)
    assert len(fn.jit_cache) == 2
    GlobalCounters.reset()
    s, m = fn(Tensor(rng.standard_normal((8, 8)).astype(np.float32)))
    assert GlobalCounters.kernel_count == 2

def test_shape_change_raises(rng):
    @TinyJit
    def fn(x): return (x + 1).realize()
    for _ in range(3): fn(Tensor.ones(4))
    with pytest.raises(JitError, match=r"shape=\(5,\)"): fn(Tensor.ones(5))
    with pytest.raises(JitError, match="dtype"): fn(Tensor.ones(4, dtype="int32"))

def test_changed_python_argument_raises():
    @TinyJit
    def fn(x, scale): return (x * scale).realize()
    for _ in range(3): fn(Tensor.ones(4), 2)
    with pytest.raises(JitError, match="scale|arg1"): fn(Tensor.ones(4), 3)

def test_kwargs_and_nested_inputs(rng):
    @TinyJit
    def fn(pair, *, bias): return (pair[0] * pair[1] + bias["b"]).realize()
    for _ in range(4):
        a, b, c = (rng.standard_normal(6).astype(np.float32) for _ in range(3))
        out = fn([Tensor(a), Tensor(b)], bias={"b": Tensor(c)})
        np.testing.assert_allclose(out.numpy(), a * b + c, rtol=1e-6)

def test_random_advances_on_replay():
    @TinyJit
    def fn(): return Tensor.rand(16).realize()
    draws = [fn().numpy().copy() for _ in range(5)]
    assert all(not np.array_equal(draws[i], draws[i + 1]) for i in range(4))

def test_jit_disabled_runs_function_each_time():
    calls = []
    @TinyJit
    def fn(x):
        calls.append(1)
        return (x + 1).realize()
    with Context(JIT=0):
        for _ in range(4): fn(Tensor.ones(2))
    assert len(calls) == 4 and fn.captured is None

def test_reset_recaptures():
    @TinyJit
    def fn(x): return (x + 1).realize()
    for _ in range(3): fn(Tensor.ones(3))
    fn.reset()
    assert fn.captured is None
    for _ in range(3): out = fn(Tensor.ones(5))
    assert out.tolist() == [2.0] * 5

def test_symbolic_length_one_capture(rng):
    keys = Tensor(rng.standard_normal((32, 8)).astype(np.float32)).realize()
    def attend(q, length):
        k = keys.shrink(((0, length), None))
        return ((q @ k.T) / 8 ** 0.5).softmax(-1).matmul(k).realize()
    jitted = TinyJit(attend)
    v = Variable("length", 1, 32)
    for n in range(1, 33):
        q = Tensor(rng.standard_normal((1, 8)).astype(np.float32))
        got = jitted(q, v.bind(n)).numpy()
        k = keys.numpy()[:n]
        s = q.numpy() @ k.T / 8 ** 0.5
        e = np.exp(s - s.max())
        np.testing.assert_allclose(got, (e / e.sum()) @ k, rtol=1e-4, atol=1e-6)
    assert jitted.captured is not None and len(jitted.jit_cache) >= 1
    captured = jitted.captured
    jitted(Tensor.ones(1, 8), v.bind(5))
    assert jitted.captured is captured   # one capture served every length

def test_training_step_matches_unjitted(rng):
    data = rng.standard_normal((16, 4)).astype(np.float32)
    target = rng.standard_normal((16, 2)).astype(np.float32)
    def make():
        Tensor.manual_seed(3)
        w1, w2 = Tensor.randn(4, 8).realize(), Tensor.randn(8, 2).realize()
        for w in (w1, w2): w.requires_grad = True
        return [w1, w2], Adam([w1, w2], lr=0.01)
    def step(params, opt, x, y):
        with Tensor.train():
            opt.zero_grad()
            loss = ((x @ params[0]).relu() @ params[1] - y).square().mean().backward()
            opt.step()
            return loss.realize()
    params_a, opt_a = make()
    params_b, opt_b = make()
    jitted = TinyJit(lambda x, y: step(params_b, opt_b, x, y))
    for _ in range(6):
        la = step(params_a, opt_a, Tensor(data), Tensor(target)).item()
        lb = jitted(Tensor(data), Tensor(target)).item()
        assert abs(la - lb) < 1e-5 * max(1, abs(la))
    np.testing.assert_allclose(params_a[0].numpy(), params_b[0].numpy(), rtol=1e-5, atol=1e-6)
