"""Out-of-range indices whose values are known on the host (lists, numpy arrays, realized CPU tensors, their views)
raise where numpy and PyTorch do, before any kernel runs; before, they compared with an arange, matched nothing and
read 0 or wrote nothing. Negative indices in range keep wrapping. A lazy index isn't read unless CHECK_OOB=1.
Also: bytes with a dtype are that dtype's values, and a 0-d tensor has no dims to transpose."""
import struct
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from fusegrad import Tensor, dtypes, TinyJit
from fusegrad.helpers import Context, GlobalCounters

X = np.arange(8, dtype=np.int32).reshape(4, 2)

def torch_error(fn) -> tuple[type, str]:
    """The exception type and message PyTorch gives for ``fn``."""
    with pytest.raises(Exception) as info: fn()
    return type(info.value), str(info.value)

# ---------------------------------------------------------------- getitem / setitem

INDEX_KINDS = {"list": lambda v: v, "numpy": lambda v: np.array(v), "tensor": lambda v: Tensor(v),
               "tensor view": lambda v: Tensor([v, v]).T[:, 0]}   # (a view of a realized buffer: read through the view)

@pytest.mark.parametrize("kind", sorted(INDEX_KINDS))
@pytest.mark.parametrize("values, dim", [([0, 4], 0), ([0, -5], 0), ([1, 2], 1), ([-3], 1)])
def test_getitem_out_of_range_raises_torchs_error(kind, values, dim):
    index = INDEX_KINDS[kind](values)
    key = (index,) if dim == 0 else (slice(None), index)
    expected_type, _ = torch_error(lambda: torch.tensor(X)[(slice(None),) * dim + (torch.tensor(values),)])
    with pytest.raises(IndexError, match=f"index {values[-1]} is out of bounds for axis {dim} with size {X.shape[dim]}"): X[key[:dim] + (values,)]
    GlobalCounters.reset()
    with pytest.raises(expected_type) as info: Tensor(X)[key]
    # torch's words with numpy's dim (torch names dimension 0 for x[:, [1, 2]], the dim after its own transpose)
    assert str(info.value) == f"index {values[-1]} is out of bounds for dimension {dim} with size {X.shape[dim]}"
    assert GlobalCounters.kernel_count == 0

@pytest.mark.parametrize("kind", sorted(INDEX_KINDS))
def test_negative_indices_in_range_still_wrap(kind):
    np.testing.assert_array_equal(Tensor(X)[INDEX_KINDS[kind]([0, -1, -4])].numpy(), X[[0, -1, -4]])
    np.testing.assert_array_equal(Tensor(X)[:, INDEX_KINDS[kind]([-2, 1])].numpy(), X[:, [-2, 1]])

def test_the_error_names_the_indexed_dim_of_x():
    x = np.zeros((2, 3, 4), np.float32)
    for key, dim in [((None, 0, slice(None), [4]), 2), ((Ellipsis, [5]), 2), ((0, [3]), 1)]:
        with pytest.raises(IndexError, match=f"dimension {dim} with size"): Tensor(x)[key]
        with pytest.raises(IndexError): x[key]

@pytest.mark.parametrize("key, message", [([0, 4], "index 4 is out of bounds for dimension 0 with size 3"),
                                          ((slice(1, None), [0, -5]), "index -5 is out of bounds for dimension 1 with size 4")])
def test_setitem_out_of_range_raises_and_writes_nothing(key, message):
    target = Tensor(np.zeros((3, 4), np.float32)).realize()
    expected_type, _ = torch_error(lambda: torch.zeros(3, 4).__setitem__(key, 1.0))
    with pytest.raises(IndexError): np.zeros((3, 4)).__setitem__(key, 1.0)
    with pytest.raises(expected_type) as info: target[key] = 1.0
    assert str(info.value) == message   # (torch names dimension 0 for the second case)
    np.testing.assert_array_equal(target.numpy(), np.zeros((3, 4)))

def test_setitem_negative_indices_in_range_wrap():
    target, expected = Tensor(np.zeros((3, 4), np.float32)).realize(), np.zeros((3, 4), np.float32)
    target[1:, [0, -1]] = 5.0
    expected[1:, [0, -1]] = 5.0
    np.testing.assert_array_equal(target.numpy(), expected)

def test_lazy_index_is_checked_only_with_check_oob():
    """A computed index isn't read back by default (tinygrad's result: 0); CHECK_OOB=1 realizes and checks it."""
    lazy = lambda: Tensor([0, 2]) * 2   # [0, 4]: out of range, known only once a kernel has run
    assert Tensor(X)[lazy()].tolist() == [[0, 1], [0, 0]]
    with Context(CHECK_OOB=1):
        with pytest.raises(IndexError, match="index 4 is out of bounds for dimension 0 with size 4"): Tensor(X)[lazy()]
        with pytest.raises(RuntimeError, match="index 4 is out of bounds"): Tensor(X).gather(0, lazy().reshape(2, 1))
        assert Tensor(X)[lazy() - 1].tolist() == X[[-1, 3]].tolist()   # in range: unchanged

def test_check_oob_inside_a_jit_capture_doesnt_read_values():
    @TinyJit
    def pick(x: Tensor, i: Tensor) -> Tensor: return x[i * 1].realize()
    with Context(CHECK_OOB=1):
        for _ in range(3): assert pick(Tensor(X), Tensor([1, 3])).tolist() == X[[1, 3]].tolist()

# ---------------------------------------------------------------- gather, scatter, one_hot (torch: RuntimeError)

@pytest.mark.parametrize("index", [[[0, 1], [4, 0]], [[0, 1], [-1, 0]]])
def test_gather_out_of_range_raises_torchs_error(index):
    expected_type, expected_message = torch_error(lambda: torch.tensor(X).gather(0, torch.tensor(index)))
    with pytest.raises(expected_type) as info: Tensor(X).gather(0, Tensor(index))
    assert str(info.value) == expected_message
    with pytest.raises(expected_type): Tensor(X).gather(0, Tensor(np.array(index)).realize())

@pytest.mark.parametrize("index", [[0, 5], [0, -1]])
@pytest.mark.parametrize("reduce", [None, "add"])
def test_scatter_out_of_range_raises_torchs_error(index, reduce):
    kwargs = {} if reduce is None else {"reduce": reduce}
    expected_type, expected_message = torch_error(
        lambda: torch.zeros(3).scatter(0, torch.tensor(index), torch.tensor([1.0, 2.0]), **kwargs))
    with pytest.raises(expected_type) as info: Tensor.zeros(3).scatter(0, Tensor(index), Tensor([1.0, 2.0]), **kwargs)
    assert str(info.value) == expected_message
    with pytest.raises(expected_type, match="out of bounds"):
        Tensor.zeros(3).scatter_reduce(0, Tensor(index), Tensor([1.0, 2.0]), "amax")

def test_gather_and_scatter_in_range_match_torch():
    index = np.array([[3, 0], [1, 2]])
    np.testing.assert_array_equal(Tensor(X).gather(0, Tensor(index)).numpy(), torch.tensor(X).gather(0, torch.tensor(index)).numpy())
    np.testing.assert_array_equal(Tensor.zeros(4).scatter(0, Tensor([3, 0]), Tensor([1.0, 2.0])).numpy(),
                                  torch.zeros(4).scatter(0, torch.tensor([3, 0]), torch.tensor([1.0, 2.0])).numpy())

@pytest.mark.parametrize("values", [[0, 3], [0, -1]])
def test_one_hot_out_of_range_raises_torchs_type(values):
    expected_type, _ = torch_error(lambda: F.one_hot(torch.tensor(values), 3))
    with pytest.raises(expected_type, match=f"class value {values[1]} is out of bounds .* size 3"): Tensor(values).one_hot(3)
    assert Tensor([0, 2]).one_hot(3).tolist() == F.one_hot(torch.tensor([0, 2]), 3).tolist()

# ---------------------------------------------------------------- class-index losses (torch: IndexError)

LOGITS = np.array([[1.0, 2.0, 3.0], [0.5, -1.0, 2.0]], np.float32)

@pytest.mark.parametrize("target", [[0, 5], [-1, 0], [-100, 1]])
def test_cross_entropy_and_nll_targets_out_of_range_raise(target):
    expected_type, _ = torch_error(lambda: F.nll_loss(torch.tensor(LOGITS), torch.tensor([0, 5])))
    assert expected_type is IndexError
    if target != [-100, 1]:   # (torch's cross_entropy ignores -100 by default; fusegrad's has no ignore_index: refused)
        with pytest.raises(IndexError): F.cross_entropy(torch.tensor(LOGITS), torch.tensor(target))
    with pytest.raises(IndexError, match=f"target {target[0] if target[0] < 0 else target[1]} is out of bounds for dimension 1 with size 3"):
        Tensor(LOGITS).cross_entropy(Tensor(target))
    with pytest.raises(IndexError, match="is out of bounds"): Tensor(LOGITS).nll_loss(Tensor(target))

def test_ignore_index_targets_are_allowed():
    target = [1, -100]
    np.testing.assert_allclose(Tensor(LOGITS).nll_loss(Tensor(target), ignore_index=-100).item(),
                               F.nll_loss(torch.tensor(LOGITS), torch.tensor(target), ignore_index=-100).item(), rtol=1e-6)
    np.testing.assert_allclose(Tensor(LOGITS).sparse_categorical_crossentropy(Tensor(target), ignore_index=-100).item(),
                               F.cross_entropy(torch.tensor(LOGITS), torch.tensor(target), ignore_index=-100).item(), rtol=1e-6)

def test_sparse_categorical_crossentropy_targets():
    with pytest.raises(IndexError, match="target 3 is out of bounds for dimension 1 with size 3"):
        Tensor(LOGITS).sparse_categorical_crossentropy(Tensor([0, 3]))
    with pytest.raises(IndexError, match="target -2 is out of bounds"):
        Tensor(LOGITS).sparse_categorical_crossentropy(Tensor([-2, 0]))
    # -1 under the default ignore_index=-1 is tinygrad's documented case (it adds nothing, counts in the mean)
    assert Tensor(LOGITS).sparse_categorical_crossentropy(Tensor([-1, 0])).numpy().shape == ()

# ---------------------------------------------------------------- bytes and transpose

def test_bytes_with_a_dtype_are_that_dtypes_values():
    """tinygrad 0.14: Tensor(struct.pack("ff", 0.234, 0.8585), dtype=dtypes.float32) has shape (2,) and those values."""
    t = Tensor(struct.pack("ff", 0.234, 0.8585), dtype=dtypes.float32)
    assert t.shape == (2,)
    np.testing.assert_array_equal(t.numpy(), np.array([0.234, 0.8585], np.float32))
    assert Tensor(struct.pack("<3h", 1, -2, 300), dtype=dtypes.int16).tolist() == [1, -2, 300]
    assert Tensor(bytearray(struct.pack("<2q", -5, 1 << 40)), dtype=dtypes.int64).tolist() == [-5, 1 << 40]
    assert Tensor(b"\x80\x3f\x00\xc0", dtype=dtypes.bfloat16).tolist() == [1.0, -2.0]   # bfloat16's bits, as stored
    assert Tensor(b"\x00\x02\x01", dtype=dtypes.bool).tolist() == [False, True, True]
    assert Tensor(b"\x01\x02").dtype == dtypes.uint8 and Tensor(b"\x01\x02").tolist() == [1, 2]

def test_bytes_not_a_whole_number_of_items_raise():
    with pytest.raises(ValueError, match="7 bytes .* 4-byte items"): Tensor(bytes(7), dtype=dtypes.float32)

def test_transpose_of_a_0d_tensor_raises_index_error():
    """tinygrad 0.14 raises IndexError for Tensor(2.5).transpose(0, 0) (PyTorch returns the scalar)."""
    for dims in [(0, 0), (-1, -1), (1, 0)]:
        with pytest.raises(IndexError, match="0-d tensor"): Tensor(2.5).transpose(*dims)
    assert Tensor([1, 2]).transpose(0, 0).tolist() == [1, 2]
