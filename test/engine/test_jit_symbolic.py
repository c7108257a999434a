"""TinyJit with inputs whose shape has a bound Variable: one capture replays for every value of it,
never recompiles, and returns outputs of the current value's real size."""
import numpy as np
import pytest
from fusegrad import Tensor, TinyJit, Variable
from fusegrad.engine.realize import method_cache

DATA = np.arange(32, dtype=np.float32) * 0.25 - 3
VALUES = (1, 2, 16, 7, 32, 3)   # the first two warm up and capture; the rest replay

def _input_forms():
    base = Tensor(DATA).realize()
    var = Variable("i", 1, 32)
    return {
        "shrink": lambda n: base.shrink(((0, var.bind(n)),)),
        "slice": lambda n: base[:var.bind(n)],
        "reshaped": lambda n: base[:var.bind(n)].reshape(1, var.bind(n)),
    }

@pytest.mark.parametrize("form", ["shrink", "slice", "reshaped"])
def test_one_capture_replays_every_binding(form):
    make = _input_forms()[form]
    @TinyJit
    def step(x: Tensor) -> tuple[Tensor, Tensor]: return (x * 2 + 1).realize(), (x * x).sum().realize()
    kernels = None
    for call, n in enumerate(VALUES):
        elementwise, total = step(make(n))
        expected = DATA[:n].reshape((1, n) if form == "reshaped" else (n,))
        # the output reads back exactly this call's length, not the capture's
        np.testing.assert_allclose(elementwise.numpy(), expected * 2 + 1, rtol=1e-6)
        np.testing.assert_allclose(total.numpy(), (DATA[:n] ** 2).sum(), rtol=1e-5)
        if call >= 1:
            assert step.captured is not None and len(step.jit_cache) == 2   # one kernel per output, one capture
            if kernels is None: kernels = len(method_cache)
            assert len(method_cache) == kernels, f"binding {n} compiled a new kernel"

def test_single_kernel_capture_stays_one_kernel():
    base, var = Tensor(DATA).realize(), Variable("i", 1, 32)
    @TinyJit
    def step(x: Tensor) -> Tensor: return (x * 3).sum().realize()
    for n in VALUES:
        np.testing.assert_allclose(step(base[:var.bind(n)]).numpy(), (DATA[:n] * 3).sum(), rtol=1e-5)
    assert len(step.jit_cache) == 1

def test_another_variable_or_shape_is_refused():
    base = Tensor(DATA).realize()
    var, other = Variable("i", 1, 32), Variable("j", 1, 32)
    @TinyJit
    def step(x: Tensor) -> Tensor: return (x + 1).realize()
    for n in (3, 4): step(base[:var.bind(n)])
    step(base[:var.bind(5)])
    from fusegrad.engine.jit import JitError
    with pytest.raises(JitError): step(base[:other.bind(5)])
    with pytest.raises(JitError): step(base[:5])

def test_symbolic_input_and_variable_argument_together():
    base, var = Tensor(DATA).realize(), Variable("i", 1, 31)
    @TinyJit
    def step(x: Tensor, pos) -> Tensor: return (x[pos:pos + 1] * 10).realize()
    for n in (2, 5, 9, 31, 4):
        out = step(base[:var.bind(n) + 1], var.bind(n))
        np.testing.assert_allclose(out.numpy(), DATA[n:n + 1] * 10)

def test_multi_device_input_with_a_symbolic_dim():
    data = np.arange(80, dtype=np.float32).reshape(8, 10)
    sharded = Tensor(data).shard(("CPU:1", "CPU:2"), axis=0).realize()
    var = Variable("n", 1, 10)
    @TinyJit
    def step(x: Tensor) -> Tensor: return (x * 2 + 1).realize()
    sizes = []
    for n in (1, 3, 10, 5, 7):
        x = sharded[:, :var.bind(n)]
        np.testing.assert_allclose(x.sum(1).numpy(), data[:, :n].sum(1), rtol=1e-5)
        np.testing.assert_allclose(step(x).numpy(), data[:, :n] * 2 + 1)
        sizes.append(len(step.jit_cache))
    assert len(set(sizes[1:])) == 1   # the capture is never redone

def test_a_shrink_past_the_end_is_refused_eagerly_and_on_replay():
    """A Variable's range may be wider than the dimension it slices (tinygrad assumes the best then); its bound value
    decides. Out of range, the eager shrink raises, and so does a replay with such a value, before any kernel runs
    (it would read past the end of the buffer), also for a capture that went through pickle."""
    import pickle
    base = Tensor([1.0] * 10).realize()
    for bound in (11, 1000, 10 ** 7):
        with pytest.raises(ValueError, match="invalid shrink"): base.shrink(((0, Variable("i", 1, 10 ** 8).bind(bound)),))
        with pytest.raises(ValueError, match="invalid shrink"): base[:Variable("j", 1, 10 ** 8).bind(bound)]
    @TinyJit
    def head_sum(v): return (base[:v].sum() * 1).realize()
    for value in (3, 4, 10, 7):
        assert head_sum(Variable("i", 1, 10 ** 8).bind(value)).item() == value
    for value in (11, 10 ** 7):
        with pytest.raises(ValueError, match=f"i=\\d+, a shrink the capture made is out of range"):
            head_sum(Variable("i", 1, 10 ** 8).bind(value))
    loaded = pickle.loads(pickle.dumps(head_sum))
    with pytest.raises(ValueError, match="out of range"): loaded(Variable("i", 1, 10 ** 8).bind(50))
    assert loaded(Variable("i", 1, 10 ** 8).bind(6)).item() == 6
