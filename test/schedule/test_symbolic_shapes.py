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

# ---------------------------------------------------------------- bound Variables anywhere a size or index goes
# Each case runs for the smallest, a middle and the largest value of its Variable, is checked against
# numpy, and must compile one set of kernels for all of them (the method cache doesn't grow after the first).

from fusegrad import dtypes

VALUES = (1, 4, 8)
MATRIX = np.arange(60, dtype=np.float32).reshape(6, 10) * 0.5 - 7

def _check_all_values(build, expected, values=VALUES, rtol=1e-5, atol=1e-5):
    """``build(bound)`` for every value (checked against ``expected(n)``); the kernels compile once."""
    var = Variable("n", 1, 8)
    kernels = None
    for n in values:
        out = build(var.bind(n))
        want = np.asarray(expected(n))
        got = out.numpy()
        assert got.shape == want.shape, (n, got.shape, want.shape)
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)
        if kernels is None: kernels = len(method_cache)
        else: assert len(method_cache) == kernels, f"value {n} compiled new kernels"

@pytest.fixture
def matrix():
    return Tensor(MATRIX).realize()

def test_slice_stop_is_a_variable(matrix):
    _check_all_values(lambda v: matrix[:, :v] * 2, lambda n: MATRIX[:, :n] * 2)

def test_slice_start_and_expression_bounds(matrix):
    _check_all_values(lambda v: matrix[:, v:] + 1, lambda n: MATRIX[:, n:] + 1)
    _check_all_values(lambda v: matrix[:, v - 1:v + 1], lambda n: MATRIX[:, n - 1:n + 1])
    _check_all_values(lambda v: matrix[:, :v + 2], lambda n: MATRIX[:, :n + 2])
    _check_all_values(lambda v: matrix.reshape(60)[:2 * v], lambda n: MATRIX.reshape(60)[:2 * n])

def test_slice_result_has_the_symbolic_shape(matrix):
    v = Variable("n", 1, 8).bind(3)
    assert matrix[:, :v].shape == (6, v)
    assert matrix[v:v + 1].shape == (1, 10)

def test_variable_as_a_plain_index(matrix):
    _check_all_values(lambda v: matrix.T[v], lambda n: MATRIX.T[n])
    _check_all_values(lambda v: matrix[:, v - 1] * 3, lambda n: MATRIX[:, n - 1] * 3)

def test_variable_index_mixed_with_tensor_indices(matrix):
    index = Tensor([0, 5, 2])
    _check_all_values(lambda v: matrix.T[v, index], lambda n: MATRIX.T[n, [0, 5, 2]])

def test_int_bounds_on_a_symbolic_dim(matrix):
    # negative ints count from the symbolic end; ints are clamped against the Variable's maximum (8)
    _check_all_values(lambda v: matrix[:, :v][:, -1:], lambda n: MATRIX[:, n - 1:n])
    _check_all_values(lambda v: matrix[:, :v][:, -1], lambda n: MATRIX[:, n - 1])
    _check_all_values(lambda v: matrix[:, :v + 2][:, :2], lambda n: MATRIX[:, :2])
    _check_all_values(lambda v: matrix[:, :v + 2][:, 1:], lambda n: MATRIX[:, 1:n + 2])
    v = Variable("n", 1, 8).bind(3)
    assert matrix[:, :v][:, :20].shape == (6, 8)

def test_symbolic_slices_that_cant_be_done_raise(matrix):
    v = Variable("n", 1, 8).bind(3)
    with pytest.raises(TypeError, match="step 1"): matrix[:, :v:2]
    with pytest.raises(TypeError, match="negative"): matrix[:, v:2]
    with pytest.raises(IndexError, match="out of bounds"): matrix[v + 6]

def test_shape_checks_decide_or_assume(matrix):
    v, w = Variable("n", 1, 8).bind(3), Variable("m", 1, 8).bind(2)
    sliced = matrix[:, :v]
    # v <= 10 is decided from the bounds, w <= v can't be decided: assumed (tinygrad's rule)
    assert sliced.shrink((None, (0, w))).shape == (6, w)
    assert sliced.pad((None, (0, w))).numpy().shape == (6, 5)
    assert sliced.reshape(2, 3, v).shape == (2, 3, v)
    with pytest.raises(ValueError, match="symbolic shape"): matrix.reshape(6, v)
    with pytest.raises(ValueError, match="invalid shrink"): matrix.shrink(((0, v + 6), None))

def test_tensor_from_a_variable():
    v = Variable("n", 1, 8)
    for n in VALUES:
        t = Tensor(v.bind(n))
        assert t.shape == () and t.dtype == dtypes.weakint
        assert t.item() == n
        assert Tensor(v.bind(n) * 4).item() == 4 * n
        as_float = Tensor(v.bind(n), dtype=dtypes.float32)
        assert as_float.dtype == dtypes.float32 and as_float.item() == float(n)
        np.testing.assert_allclose((Tensor(v.bind(n)) + Tensor([0.5, 1.5])).numpy(), np.array([0.5, 1.5]) + n)

def test_unbound_variable_tensor_and_variable_times_tensor_raise():
    v = Variable("n", 1, 8)
    with pytest.raises(RuntimeError, match="unbound"): Tensor(v).item()
    with pytest.raises(RuntimeError): v.bind(2) * Tensor([1.0, 2.0])
    np.testing.assert_allclose((Tensor([1.0, 2.0]) * v.bind(2)).numpy(), [2.0, 4.0])

def test_arange_with_variables():
    _check_all_values(lambda v: Tensor.arange(0, v), lambda n: np.arange(n, dtype=np.int32))
    _check_all_values(lambda v: Tensor.arange(v, 2 * v, 2), lambda n: np.arange(n, 2 * n, 2, dtype=np.int32))
    _check_all_values(lambda v: Tensor.arange(v, 12) * 2, lambda n: np.arange(n, 12, dtype=np.int32) * 2)

def test_tril_triu_masks_on_a_symbolic_length():
    _check_all_values(lambda v: Tensor.ones(v, v).tril(), lambda n: np.tril(np.ones((n, n), np.float32)))
    _check_all_values(lambda v: Tensor.ones(v, v).triu(1), lambda n: np.triu(np.ones((n, n), np.float32), 1))
    _check_all_values(lambda v: Tensor.arange(0, v).reshape(1, v) <= Tensor.arange(0, v).reshape(v, 1),
                      lambda n: np.arange(n).reshape(1, n) <= np.arange(n).reshape(n, 1))

def test_full_with_a_variable_value_or_shape():
    _check_all_values(lambda v: Tensor.full((2, 3), v), lambda n: np.full((2, 3), n, np.int32))
    _check_all_values(lambda v: Tensor.full((2, v), 1.5), lambda n: np.full((2, n), 1.5, np.float32))
    assert Tensor.full((2, 3), Variable("n", 1, 8).bind(2)).dtype == dtypes.int32

def test_flat_pad_with_variables(matrix):
    _check_all_values(lambda v: matrix.pad((0, v)), lambda n: np.pad(MATRIX, ((0, 0), (0, n))))
    _check_all_values(lambda v: matrix[:, :v].pad((v, 1, 1, 0), value=-1.0),
                      lambda n: np.pad(MATRIX[:, :n], ((1, 0), (n, 1)), constant_values=-1.0))

def test_cat_on_symbolic_dims(matrix):
    _check_all_values(lambda v: matrix[:, :v].cat(matrix[:, :v], dim=1),
                      lambda n: np.concatenate([MATRIX[:, :n]] * 2, axis=1))
    _check_all_values(lambda v: matrix[:, :v].cat(matrix, dim=1), lambda n: np.concatenate([MATRIX[:, :n], MATRIX], axis=1))
    _check_all_values(lambda v: matrix[:, :v].cat(matrix[:, :v], dim=0), lambda n: np.concatenate([MATRIX[:, :n]] * 2, axis=0))
    w = Variable("w", 1, 10)
    for n, m in ((1, 10), (4, 3), (8, 1)):
        out = matrix[:, :Variable("n", 1, 8).bind(n)].cat(matrix[:, :w.bind(m)], dim=1)
        np.testing.assert_allclose(out.numpy(), np.concatenate([MATRIX[:, :n], MATRIX[:, :m]], axis=1))

def test_reductions_over_symbolic_axes(matrix):
    _check_all_values(lambda v: matrix[:, :v].sum(1), lambda n: MATRIX[:, :n].sum(1), rtol=1e-5)
    _check_all_values(lambda v: matrix[:, :v].mean(1), lambda n: MATRIX[:, :n].mean(1), rtol=1e-5)
    _check_all_values(lambda v: matrix[:, :v + 1].var(1), lambda n: MATRIX[:, :n + 1].var(1, ddof=1), rtol=1e-4)
    _check_all_values(lambda v: matrix[:, :v].mean(), lambda n: MATRIX[:, :n].mean(), rtol=1e-5)

def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)

def test_matmul_softmax_attention_over_a_symbolic_length(rng):
    q = rng.standard_normal((1, 2, 1, 4)).astype(np.float32)
    cache = rng.standard_normal((1, 2, 8, 4)).astype(np.float32)
    tq, tcache = Tensor(q).realize(), Tensor(cache).realize()
    _check_all_values(lambda v: tcache[:, :, :v] @ tcache[:, :, :v].transpose(-1, -2),
                      lambda n: cache[:, :, :n] @ cache[:, :, :n].transpose(0, 1, 3, 2), rtol=1e-4)
    _check_all_values(lambda v: (tq @ tcache[:, :, :v].transpose(-1, -2)).softmax(-1),
                      lambda n: _softmax(q @ cache[:, :, :n].transpose(0, 1, 3, 2)), rtol=1e-4)
    _check_all_values(lambda v: tq.scaled_dot_product_attention(tcache[:, :, :v], tcache[:, :, :v]),
                      lambda n: _softmax(q @ cache[:, :, :n].transpose(0, 1, 3, 2) / 2.0) @ cache[:, :, :n], rtol=1e-4)

def test_symbolic_output_reads_back_its_bound_size(matrix):
    v = Variable("n", 1, 8)
    for n in VALUES:
        out = (matrix[:, :v.bind(n)] + 1).realize()
        assert out.numpy().shape == (6, n)
        assert len(out.tolist()[0]) == n
