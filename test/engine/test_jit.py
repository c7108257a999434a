"""TinyJit: capture on the second call, replay afterwards, and clear errors on mismatches."""
import warnings
import numpy as np
import pytest
from fusegrad import Tensor, TinyJit, Variable, GlobalCounters, Context
from fusegrad.engine.jit import JitError, JitWarning
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

def test_changed_python_argument_replays_the_captured_value_with_a_warning():
    """tinygrad's rule: a capture bakes non-Tensor values in; a changed one replays the old value (with a warning here)."""
    @TinyJit
    def fn(x, scale): return (x * scale).realize()
    for _ in range(3): fn(Tensor.ones(4), 2)
    with pytest.warns(JitWarning, match="arg1"): out = fn(Tensor.ones(4), 3)
    np.testing.assert_array_equal(out.numpy(), [2.0] * 4)
    with pytest.raises(JitError, match="structure"): fn(Tensor.ones(4), (3, 4))

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

# ---------------------------------------------------------------- replay never aliases an input with an output

def test_feedback_flip_matches_numpy():
    """h = step(h): the replay's input is the buffer the capture writes (the RNN / decode-loop pattern)."""
    @TinyJit
    def step(h): return (h.flip(0) + 1).realize()
    h, expected = Tensor.arange(64).float(), np.arange(64, dtype=np.float32)
    for _ in range(6):
        h, expected = step(h), expected[::-1] + 1
        np.testing.assert_array_equal(h.numpy(), expected)

def test_feedback_matmul_matches_numpy(rng):
    w_np = rng.standard_normal((16, 16)).astype(np.float32) / 4
    w = Tensor(w_np).realize()
    @TinyJit
    def step(h): return (h @ w).realize()
    h_np = rng.standard_normal((4, 16)).astype(np.float32)
    h = Tensor(h_np)
    for _ in range(6):
        h, h_np = step(h), h_np @ w_np
        np.testing.assert_allclose(h.numpy(), h_np, rtol=1e-4, atol=1e-5)

def test_feedback_two_outputs_matches_numpy():
    @TinyJit
    def step(a, b): return (a + b.flip(0)).realize(), (a * b).realize()
    a_np, b_np = np.linspace(-1, 1, 32).astype(np.float32), np.linspace(0.5, 1.5, 32).astype(np.float32)
    a, b = Tensor(a_np), Tensor(b_np)
    for _ in range(6):
        a, b = step(a, b)
        a_np, b_np = a_np + b_np[::-1], a_np * b_np
        np.testing.assert_allclose(a.numpy(), a_np, rtol=1e-6)
        np.testing.assert_allclose(b.numpy(), b_np, rtol=1e-6)

def test_feedback_swapped_outputs_in_a_dict():
    @TinyJit
    def step(state): return {"x": (state["y"] + 1).realize(), "y": (state["x"].flip(0) * 2).realize()}
    x_np, y_np = np.arange(8, dtype=np.float32), np.ones(8, dtype=np.float32)
    state = {"x": Tensor(x_np), "y": Tensor(y_np)}
    for _ in range(6):
        state = step(state)
        x_np, y_np = y_np + 1, x_np[::-1] * 2
        np.testing.assert_array_equal(state["x"].numpy(), x_np)
        np.testing.assert_array_equal(state["y"].numpy(), y_np)

def test_returned_input_is_the_current_input():
    @TinyJit
    def step(a, b): return [a, (a + b).realize()]
    a_np = np.zeros(5, dtype=np.float32)
    a = Tensor(a_np)
    for i in range(6):
        b_np = np.full(5, i, dtype=np.float32)
        b = Tensor(b_np)
        same, a = step(a, b)
        np.testing.assert_array_equal(same.numpy(), a_np)   # the input, unchanged
        a_np = a_np + b_np
        np.testing.assert_array_equal(a.numpy(), a_np)

def test_returned_view_of_input_follows_the_input():
    @TinyJit
    def step(a): return a.reshape(2, 3), (a * 2).realize()
    for i in range(5):
        data = np.arange(6, dtype=np.float32) + i
        view, doubled = step(Tensor(data))
        np.testing.assert_array_equal(view.numpy(), data.reshape(2, 3))
        np.testing.assert_array_equal(doubled.numpy(), data * 2)

def test_in_place_update_of_input_feeds_back():
    @TinyJit
    def step(h):
        h.assign(h.flip(0) + 1)
        return (h * 2).realize()
    h_np = np.arange(16, dtype=np.float32)
    h = Tensor(h_np).contiguous().realize()
    for _ in range(6):
        out = step(h)
        h_np = h_np[::-1] + 1
        np.testing.assert_array_equal(h.numpy(), h_np)
        np.testing.assert_array_equal(out.numpy(), h_np * 2)

def test_outputs_are_overwritten_by_the_next_call():
    """tinygrad's rule: a replay returns the same output tensors, so call n+1 overwrites call n's result."""
    @TinyJit
    def fn(x): return (x * 2).realize()
    outs = [fn(Tensor([float(i)] * 3)) for i in range(4)]
    kept = outs[-1].clone().realize()
    assert outs[2] is outs[3]
    fn(Tensor([10.0] * 3))
    np.testing.assert_array_equal(outs[3].numpy(), [20.0] * 3)
    np.testing.assert_array_equal(kept.numpy(), [6.0] * 3)

# ---------------------------------------------------------------- guard rails

def test_same_buffer_twice_raises():
    @TinyJit
    def add(a, b): return (a + b).realize()
    x = Tensor([1.0, 2.0]).realize()
    with pytest.raises(JitError, match="same buffer.*twice.*clone"): add(x, x)
    with pytest.raises(JitError, match="same buffer"): add(x[:1], x[1:])

def test_nothing_captured_raises():
    @TinyJit
    def passthrough(a): return a
    x = Tensor([1.0, 2.0]).realize()
    passthrough(x)
    with pytest.raises(JitError, match="no kernel"): passthrough(x)

@pytest.mark.parametrize("read", [lambda t: t.item(), lambda t: t.tolist(), lambda t: float(t.numpy())], ids=["item", "tolist", "numpy"])
def test_data_access_inside_capture_raises(read):
    @TinyJit
    def fn(a): return (a * read(a.sum())).realize()
    x = Tensor([1.0, 2.0]).realize()
    fn(x)   # the warm-up is a plain call
    with pytest.raises(JitError, match="baked"): fn(x)

def test_view_input_changed_raises():
    @TinyJit
    def fn(a): return (a + 1).realize()
    base = Tensor.arange(12).float().contiguous().realize()
    for _ in range(3): fn(base[2:6].contiguous())
    with pytest.raises(JitError, match="view .*shrink.*whole realized buffer"): fn(base[4:8])
    with pytest.raises(JitError, match="view"): fn(base.reshape(3, 4).T[0])

def test_same_view_input_replays_over_new_buffers():
    @TinyJit
    def fn(a): return (a * 3).realize()
    for i in range(5):
        data = np.arange(12, dtype=np.float32).reshape(3, 4) + i
        base = Tensor(data).contiguous().realize()
        np.testing.assert_array_equal(fn(base.T[1:3]).numpy(), data.T[1:3] * 3)

def test_assign_through_view_input_writes_the_buffer():
    @TinyJit
    def fn(a):
        a.assign(a + 1)
        return (a * 2).realize()
    base = Tensor.zeros(8).contiguous().realize()
    expected = np.zeros(8, dtype=np.float32)
    for _ in range(4):
        out = fn(base[2:6])
        expected[2:6] += 1
        np.testing.assert_array_equal(out.numpy(), expected[2:6] * 2)
    np.testing.assert_array_equal(base.numpy(), expected)

def test_nested_jit_raises_runtime_error():
    @TinyJit
    def inner(a): return (a * 3).realize()
    @TinyJit
    def outer(a): return inner(a + 1)
    x = Tensor([1.0, 2.0]).realize()
    outer(x)
    with pytest.raises(RuntimeError, match="nested"): outer(x)

def test_const_tensor_input_is_not_baked_in():
    @TinyJit
    def fn(a, scale): return (a * scale).realize()
    x = Tensor([1.0, 2.0]).realize()
    for i in range(5):
        np.testing.assert_array_equal(fn(x, Tensor(float(i))).numpy(), [i, 2.0 * i])

def test_changed_identity_argument_replays():
    """tinygrad ignores non-Tensor arguments; objects without value equality (a model) are ignored here too."""
    class Model:
        def __init__(self, w): self.w = w
    w = Tensor([1.0, 2.0]).realize()
    @TinyJit
    def fn(model, x): return (x * w).realize()
    for i in range(4): out = fn(Model(None), Tensor([float(i)] * 2))
    np.testing.assert_array_equal(out.numpy(), [3.0, 6.0])

def test_changed_array_argument_warns():
    @TinyJit
    def fn(x, table): return (x + float(table[0])).realize()
    for _ in range(3): fn(Tensor.ones(2), np.array([1.0, 2.0]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fn(Tensor.ones(2), np.array([1.0, 2.0]))   # equal contents, another object: no warning
    with pytest.warns(JitWarning, match="arg1"): fn(Tensor.ones(2), np.array([5.0, 2.0]))

# ---------------------------------------------------------------- prune, JIT=2, pickle

def test_prune_drops_input_independent_kernels(rng):
    w_np = rng.standard_normal(32).astype(np.float32)
    w = Tensor(w_np).realize()
    def fn(x): return (x + (w * 2).exp().sum()).realize()
    plain, pruned = TinyJit(fn), TinyJit(fn, prune=True)
    for i in range(5):
        x_np = rng.standard_normal(32).astype(np.float32)
        expected = x_np + np.exp(w_np * 2).sum()
        np.testing.assert_allclose(plain(Tensor(x_np)).numpy(), expected, rtol=1e-5)
        np.testing.assert_allclose(pruned(Tensor(x_np)).numpy(), expected, rtol=1e-5)
    assert len(pruned.jit_cache) < len(plain.jit_cache)
    GlobalCounters.reset()
    pruned(Tensor(x_np))
    assert GlobalCounters.kernel_count == len(pruned.jit_cache)

def test_prune_decorator_keeps_kernels_whose_buffers_change():
    """A kernel that doesn't read the inputs but reads a buffer a kept kernel updates stays."""
    counter = Tensor.zeros(4).contiguous().realize()
    @TinyJit(prune=True)
    def fn(x):
        snapshot = (counter * 10).realize()
        counter.assign(counter + x).realize()
        return snapshot
    expected = np.zeros(4, dtype=np.float32)
    for _ in range(5):
        np.testing.assert_array_equal(fn(Tensor.ones(4)).numpy(), expected * 10)
        expected += 1

def test_jit2_replays_kernel_by_kernel(rng):
    def fn(x): return (x * 2).sum(1).realize(), (x + 1).max().realize()
    with Context(JIT=2):
        jitted = TinyJit(fn)
        for _ in range(4):
            x_np = rng.standard_normal((8, 8)).astype(np.float32)
            s, m = jitted(Tensor(x_np))
            np.testing.assert_allclose(s.numpy(), (x_np * 2).sum(1), rtol=1e-5)
            np.testing.assert_allclose(m.numpy(), (x_np + 1).max(), rtol=1e-6)
        assert jitted.captured is not None and jitted.captured.graph is None and len(jitted.jit_cache) == 2
        GlobalCounters.reset()
        jitted(Tensor(x_np))
        assert GlobalCounters.kernel_count == 2

def test_jit2_replay_counts_what_an_unjitted_call_counts(rng):
    """JIT=2 adds a replay's kernels, ops and bytes to GlobalCounters once per call (not per kernel):
    the totals must equal those of running the same function without the JIT."""
    def fn(x): return ((x * 2).exp().sum(1) + 1).realize(), (x @ x).relu().realize()
    x_np = rng.standard_normal((16, 16)).astype(np.float32)
    fn(Tensor(x_np))
    GlobalCounters.reset()
    fn(Tensor(x_np).realize())
    expected = (GlobalCounters.kernel_count, GlobalCounters.global_ops, GlobalCounters.global_mem)
    with Context(JIT=2):
        jitted = TinyJit(fn)
        for _ in range(3): jitted(Tensor(x_np).realize())
        for _ in range(2):   # the counts are worked out once and reused: the second replay adds the same again
            GlobalCounters.reset()
            a, b = jitted(Tensor(x_np).realize())
            assert (GlobalCounters.kernel_count, GlobalCounters.global_ops, GlobalCounters.global_mem) == expected
    np.testing.assert_allclose(a.numpy(), np.exp(x_np * 2).sum(1) + 1, rtol=1e-5)
    np.testing.assert_allclose(b.numpy(), np.maximum(x_np @ x_np, 0), rtol=1e-4, atol=1e-4)

def test_input_checks_are_redone_when_an_input_changes():
    """A replay skips re-checking an input whose UOp is the one it checked last call; any other
    input, even after many replays of the same tensor, is checked again."""
    @TinyJit
    def fn(a): return (a + 1).realize()
    base = Tensor.arange(12).float().contiguous().realize()
    same = base[2:6]
    for _ in range(5): np.testing.assert_array_equal(fn(same).numpy(), np.arange(2, 6) + 1)
    with pytest.raises(JitError, match="view"): fn(base[2:6].contiguous())
    with pytest.raises(JitError, match="args mismatch"): fn(Tensor.ones(5))
    np.testing.assert_array_equal(fn(same).numpy(), np.arange(2, 6) + 1)
    other = (Tensor.arange(12).float() * 2).contiguous().realize()
    np.testing.assert_array_equal(fn(other[2:6]).numpy(), np.arange(2, 6) * 2 + 1)

def test_pickled_jit_runs_in_another_process(tmp_path, rng):
    import pickle, subprocess, sys, pathlib
    w_np = rng.standard_normal((6, 3)).astype(np.float32)
    w = Tensor(w_np).realize()
    @TinyJit
    def fn(x, b): return [(x @ w + b).relu().realize(), x]
    for _ in range(3): fn(Tensor(rng.standard_normal((2, 6)).astype(np.float32)), Tensor.ones(3))
    path = tmp_path / "jit.pkl"
    path.write_bytes(pickle.dumps(fn))
    x_np = rng.standard_normal((2, 6)).astype(np.float32)
    np.save(tmp_path / "x.npy", x_np)
    script = (f"import pickle, numpy as np\nfrom fusegrad import Tensor\n"
              f"fn = pickle.loads(open({str(path)!r}, 'rb').read())\n"
              f"x = np.load({str(tmp_path / 'x.npy')!r})\n"
              f"for i in range(3): out, same = fn(Tensor(x), Tensor.full((3,), float(i)))\n"
              f"np.save({str(tmp_path / 'out.npy')!r}, out.numpy()); assert np.array_equal(same.numpy(), x)\n")
    root = pathlib.Path(__file__).resolve().parents[2]
    subprocess.run([sys.executable, "-c", script], check=True, cwd=root, timeout=300)
    np.testing.assert_allclose(np.load(tmp_path / "out.npy"), np.maximum(x_np @ w_np + 2, 0), rtol=1e-5, atol=1e-6)

def test_pickling_before_capture_raises():
    import pickle
    @TinyJit
    def fn(x): return (x + 1).realize()
    with pytest.raises(JitError, match="capture"): pickle.dumps(fn)
