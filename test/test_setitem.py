"""setitem with every index kind against numpy, its errors, kernel counts and gradients (PyTorch)."""
import numpy as np
import pytest
import torch
from fusegrad import Tensor, GlobalCounters, dtypes

def _pair(shape=(3, 4), dtype=np.float32) -> tuple[Tensor, np.ndarray]:
    ref = np.arange(int(np.prod(shape))).reshape(shape).astype(dtype)
    return Tensor(ref).contiguous().realize(), ref.copy()

MASK = np.arange(12).reshape(3, 4) % 3 == 0
CASES = [
    ("int", 1, 7.0),
    ("negative int", -1, 7.0),
    ("int pair", (2, 1), 7.0),
    ("slice", slice(0, 2), 7.0),
    ("step", (slice(None), slice(None, None, 2)), 7.0),
    ("negative step", (slice(None), slice(None, None, -2)), np.array([1.0, 2.0], np.float32)),
    ("None", (None, 1), 7.0),
    ("Ellipsis", (Ellipsis, 1), np.array([1.0, 2.0, 3.0], np.float32)),
    ("bool mask", MASK, 7.0),
    ("bool mask rows", np.array([True, False, True]), np.array([1.0, 2.0, 3.0, 4.0], np.float32)),
    ("bool mask one row per true", MASK, np.array([10.0, 20.0, 30.0, 40.0], np.float32)),
    ("tensor index", np.array([0, 2]), 7.0),
    ("list index", [0, 2], np.array([[1.0, 2, 3, 4], [5, 6, 7, 8]], np.float32)),
    ("negative list index", [-1], 9.0),
    ("two index arrays", (np.array([0, 1]), np.array([1, 3])), np.array([100.0, 200.0], np.float32)),
    ("tuples as indices", ((0, 2), (3, 0)), np.array([100.0, 200.0], np.float32)),
    ("slice and index", (slice(1, None), [0, 2]), np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)),
    ("index then slice", ([2, 0], slice(None, None, 2)), 5.0),
    ("list value", 1, [1.0, 2.0, 3.0, 4.0]),
    ("numpy float64 value", 1, np.array([1.0, 2.0, 3.0, 4.0])),
    ("int scalar", 1, 3),
]

def _as_index(i):
    """The same index for fusegrad: numpy arrays become tensors (lists and tuples stay)."""
    if isinstance(i, tuple): return tuple(_as_index(j) for j in i)
    return Tensor(i) if isinstance(i, np.ndarray) else i

@pytest.mark.parametrize("name, index, value", CASES, ids=[c[0] for c in CASES])
def test_setitem_matches_numpy(name, index, value):
    x, ref = _pair()
    x[_as_index(index)] = Tensor(value) if isinstance(value, np.ndarray) and value.dtype == np.float32 else value
    ref[index] = value
    np.testing.assert_array_equal(x.numpy(), ref)

def test_duplicate_indices_last_write_wins():
    x, ref = _pair()
    x[Tensor([0, 2, 0])] = Tensor([[1.0] * 4, [2.0] * 4, [3.0] * 4])
    ref[[0, 2, 0]] = [[1.0] * 4, [2.0] * 4, [3.0] * 4]     # numpy: the last write wins too
    np.testing.assert_array_equal(x.numpy(), ref)

def test_int_tensor_setitem_casts_python_values():
    x, ref = _pair(dtype=np.int32)
    x[0, 1:3] = 2.7
    ref[0, 1:3] = 2.7
    x[1] += 10
    ref[1] += 10
    np.testing.assert_array_equal(x.numpy(), ref)

def test_slice_setitem_is_one_kernel():
    x, ref = _pair((64, 64))
    x[3:5, ::2] = 1.0
    GlobalCounters.reset()
    x.realize()
    assert GlobalCounters.kernel_count == 1
    ref[3:5, ::2] = 1.0
    np.testing.assert_array_equal(x.numpy(), ref)

def test_overlapping_setitem_reads_first():
    x, ref = _pair((8,))
    x[1:] = x[:-1]
    ref[1:] = ref[:-1].copy()
    np.testing.assert_array_equal(x.numpy(), ref)

def test_setitem_on_unrealized_tensor():
    x, ref = _pair()
    y = x + 1
    y[0] = 5.0
    expected = ref + 1
    expected[0] = 5.0
    np.testing.assert_array_equal(y.numpy(), expected)

def test_setitem_errors():
    x, _ = _pair()
    with pytest.raises(RuntimeError, match="dtype"): x[0] = Tensor([1, 2, 3, 4])
    y = x + 1
    _other = y * 2
    with pytest.raises(RuntimeError, match="other lazy uses"): y[0] = 1.0
    z, _ = _pair()
    _lazy = z + 1
    with pytest.raises(RuntimeError, match="other lazy uses"): z[0] = 1.0
    w, ref = _pair()
    with pytest.raises(ValueError, match="shape"): w[0] = Tensor([1.0, 2.0])
    with pytest.raises(IndexError): w[Tensor([True, False])] = 1.0
    np.testing.assert_array_equal(w.numpy(), ref)

def test_views_of_a_realized_tensor_see_the_write():
    x, ref = _pair()
    row = x[0]
    x[1] = 5.0
    np.testing.assert_array_equal(row.numpy(), ref[0])
    ref[1] = 5.0
    np.testing.assert_array_equal(x.numpy(), ref)

def test_gradient_through_setitem():
    a_np, b_np, w_np = np.array([1.0, 2.0, 3.0, 4.0], np.float32), np.array([10.0, 20.0], np.float32), np.arange(1, 5, dtype=np.float32)
    a, b = Tensor(a_np, requires_grad=True), Tensor(b_np, requires_grad=True)
    x = a.clone()
    x[1:3] = b
    (x * Tensor(w_np)).sum().backward()
    ta, tb = torch.tensor(a_np, requires_grad=True), torch.tensor(b_np, requires_grad=True)
    tx = ta.clone()
    tx[1:3] = tb
    (tx * torch.tensor(w_np)).sum().backward()
    np.testing.assert_allclose(x.numpy(), tx.detach().numpy())
    np.testing.assert_allclose(a.grad.numpy(), ta.grad.numpy())      # zero where overwritten
    np.testing.assert_allclose(b.grad.numpy(), tb.grad.numpy())

def test_gradient_through_advanced_setitem():
    a_np, b_np = np.arange(6, dtype=np.float32).reshape(3, 2), np.array([[5.0, 6.0]], np.float32)
    a, b = Tensor(a_np, requires_grad=True), Tensor(b_np, requires_grad=True)
    x = a * 1.5
    x[[2, 0]] = b
    (x * x).sum().backward()
    ta, tb = torch.tensor(a_np, requires_grad=True), torch.tensor(b_np, requires_grad=True)
    tx = ta * 1.5
    tx[[2, 0]] = tb
    (tx * tx).sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), ta.grad.numpy(), rtol=1e-6)
    np.testing.assert_allclose(b.grad.numpy(), tb.grad.numpy(), rtol=1e-6)

def _write_into_buffer(lib, x, realize):
    """Writes of pieces of ``x`` into a fresh zero buffer, several views in turn (``lib``: fusegrad's Tensor or torch)."""
    z = lib.zeros(4, 3)
    if lib is Tensor: z = z.contiguous().realize() if realize else z.contiguous()
    z[1:3, 1:] = x[:4].reshape(2, 2) * 2      # a slice
    z[0] = x[4:7]                              # a row
    z[2:, :2] = x[7:11].reshape(2, 2) + 1      # overlaps the first write: its (2, 1) element is overwritten
    z[1::2, 2] = x[11:13]                      # a step: rows 1 and 3
    z[[0, 3], [1, 0]] = x[13:15] * 3           # advanced indices
    return z

@pytest.mark.parametrize("realize", [False, True], ids=["lazy_buffer", "realized_buffer"])
def test_gradient_through_writes_into_a_buffer(realize):
    """The value written into a view of a buffer gets the gradient of that view, and what an earlier write put there
    gets the gradient of the positions later writes left alone (as PyTorch's)."""
    x_np, w_np = np.arange(1, 16, dtype=np.float32), np.arange(12, dtype=np.float32).reshape(4, 3)
    x = Tensor(x_np, requires_grad=True)
    z = _write_into_buffer(Tensor, x, realize)
    (z * Tensor(w_np)).sum().backward()
    tx = torch.tensor(x_np, requires_grad=True)
    tz = _write_into_buffer(torch, tx, realize)
    (tz * torch.tensor(w_np)).sum().backward()
    np.testing.assert_allclose(z.numpy(), tz.detach().numpy())
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy())

@pytest.mark.parametrize("realize", [False, True], ids=["lazy", "realized"])
@pytest.mark.parametrize("shape,index,value", [
    ((4, 1), (slice(None), slice(1, None)), -1.0),    # an empty region of a one-element dim: nothing is written
    ((1,), slice(1, None), -1.0),
    ((4, 1), (slice(None), slice(0, 0)), -1.0),
    ((1, 4), slice(1, None), -1.0),
    ((1,), 0, 5.0),                                   # the view is all of the tensor, reshaped
    ((1, 1), (0, 0), 5.0),
    ((1, 3), 0, 5.0),
    ((5,), (None, [0, 2]), 10.0),                     # None, then an advanced index
    ((5,), (None, "tensor"), 10.0),
])
def test_setitem_edge_views_match_numpy(shape, index, value, realize):
    index = tuple(Tensor([0, 2]) if i == "tensor" else i for i in index) if isinstance(index, tuple) else index
    np_index = tuple(np.array([0, 2]) if isinstance(i, Tensor) else i for i in index) if isinstance(index, tuple) else index
    expected = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    expected[np_index] = value
    t = Tensor(np.arange(np.prod(shape), dtype=np.float32).reshape(shape)).contiguous()
    if realize: t.realize()
    t[index] = value
    np.testing.assert_array_equal(t.numpy(), expected)

def test_empty_view_assign_writes_nothing():
    t = Tensor.zeros(4, 1).contiguous().realize()
    view = t[:, 1:]
    view.assign(Tensor.full((4, 0), -1.0))
    assert t.tolist() == [[0.0]] * 4 and view.shape == (4, 0)
    with pytest.raises(ValueError, match="shape mismatch"): t[:, 1:] = Tensor.ones(3, 2)

def test_counter_of_one_element_increments():
    counter = Tensor([0.0]).contiguous().realize()
    for _ in range(3): counter[0] += 1
    assert counter.tolist() == [3.0]

def test_numpy_integers_index_like_python_ints():
    """``np.int64(i)`` and 0-d int arrays are plain indices, bounds-checked (as 0-d tensor indices an out-of-range one
    read 0 and wrote nothing)."""
    t = Tensor.arange(5)
    assert t[np.int64(2)].item() == 2 and t[np.int32(-1)].item() == 4 and t[np.array(3)].item() == 3
    for bad in (np.int64(7), np.int64(-9), np.array(5)):
        with pytest.raises(IndexError, match="out of bounds"): t[bad]
    x = Tensor.zeros(5).contiguous().realize()
    with pytest.raises(IndexError, match="out of bounds"): x[np.int64(9)] = 3.0
    x[np.uint8(2)] = 3.0
    assert x.tolist() == [0.0, 0.0, 3.0, 0.0, 0.0]
