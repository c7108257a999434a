"""Tensors whose shape has a bound Variable schedule and compile once for every value."""
import numpy as np
import pytest
from fusegrad import Tensor, Variable
from fusegrad.engine.realize import method_cache

@pytest.fixture
def data(rng):
    return rng.standard_normal((10, 6)).astype(np.float32)

def test_symbolic_shrink_ops(data):
    base = Tensor(data).realize()
    v = Variable("n", 1, 10)
    for n in (2, 7, 10):
        x = base.shrink(((0, v.bind(n)), None))
        np.testing.assert_allclose((x * 2 + 1).numpy(), data[:n] * 2 + 1, rtol=1e-6)
        np.testing.assert_allclose(x.sum(0).numpy(), data[:n].sum(0), rtol=1e-5)
        np.testing.assert_allclose(x.mean(0).numpy(), data[:n].mean(0), rtol=1e-5)
        np.testing.assert_allclose(x.mean().numpy(), data[:n].mean(), rtol=1e-5)
        np.testing.assert_allclose((x.T @ x).numpy(), data[:n].T @ data[:n], rtol=1e-4, atol=1e-5)

def test_compiles_once_for_all_values(data):
    base = Tensor(data).realize()
    v = Variable("m", 1, 10)
    (base.shrink(((0, v.bind(3)), None)) * 3).sum(0).realize()
    kernels = len(method_cache)
    for n in (1, 4, 9):
        out = (base.shrink(((0, v.bind(n)), None)) * 3).sum(0)
        np.testing.assert_allclose(out.numpy(), (data[:n] * 3).sum(0), rtol=1e-5)
    assert len(method_cache) == kernels

def test_bind_out_of_range_is_an_error():
    v = Variable("k", 1, 10)
    with pytest.raises(ValueError, match="out of bounds"): v.bind(11)
    with pytest.raises(TypeError): v.bind(2.5)
