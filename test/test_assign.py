"""assign: writes through views reach the buffer, tinygrad's ordering of lazy reads and writes,
the checks on the value, and how many kernels a write costs. Expected values come from numpy."""
import numpy as np
import pytest
from fusegrad import Tensor, GlobalCounters, dtypes

def _fresh(n: int = 6, shape: tuple | None = None) -> tuple[Tensor, np.ndarray]:
    """A realized tensor and the numpy array it equals."""
    ref = np.arange(n, dtype=np.float32).reshape(shape or (n,))
    return Tensor(ref).contiguous().realize(), ref.copy()

def _kernels(*tensors: Tensor) -> int:
    """Kernels run to realize ``tensors``."""
    GlobalCounters.reset()
    Tensor.realize(*tensors)
    return GlobalCounters.kernel_count

# ---------------------------------------------------------------- writes through views reach the base

def test_slice_assign_writes_the_base_in_one_kernel():
    x, ref = _fresh(1000)
    x[2:4].assign(x[2:4] + 1)      # the assign's own tensor is dropped: the write must still happen
    ref[2:4] += 1
    assert _kernels(x) == 1        # one kernel over the slice, no copy of the whole base
    np.testing.assert_array_equal(x.numpy(), ref)

@pytest.mark.parametrize("name, view, write", [
    ("step", lambda t: t[::2], lambda r, v: r.__setitem__(slice(None, None, 2), v)),
    ("negative step", lambda t: t[::-2], lambda r, v: r.__setitem__(slice(None, None, -2), v)),
    ("flip", lambda t: t.flip(0)[:3], lambda r, v: r.__setitem__(slice(None, -4, -1), v)),
    ("chained", lambda t: t[1:][::2], lambda r, v: r.__setitem__(slice(1, None, 2), v)),
    ("shrink of pad", lambda t: t.pad(((1, 1),))[2:5], lambda r, v: r.__setitem__(slice(1, 4), v)),
])
def test_view_assign_1d(name, view, write):
    x, ref = _fresh()
    value = np.array([10.0, 20.0, 30.0], dtype=np.float32)
    view(x).assign(Tensor(value))
    write(ref, value)
    np.testing.assert_array_equal(x.numpy(), ref, err_msg=name)

def test_permute_and_reshape_views():
    x, ref = _fresh(6, (2, 3))
    x.T[0].assign(Tensor([7.0, 8.0]))
    ref.T[0] = [7.0, 8.0]
    np.testing.assert_array_equal(x.numpy(), ref)
    x.reshape(3, 2)[1].assign(Tensor([5.0, 6.0]))
    ref.reshape(3, 2)[1] = [5.0, 6.0]
    np.testing.assert_array_equal(x.numpy(), ref)
    x.permute(1, 0)[1:, 1].assign(Tensor([-1.0, -2.0]))
    ref.transpose(1, 0)[1:, 1] = [-1.0, -2.0]
    np.testing.assert_array_equal(x.numpy(), ref)

def test_detach_writes_the_original():
    x, _ = _fresh()
    x.detach().assign(Tensor.full((6,), 7.0))
    np.testing.assert_array_equal(x.numpy(), np.full(6, 7.0, np.float32))
    x.detach()[1:3].assign(Tensor([1.0, 2.0]))
    np.testing.assert_array_equal(x.numpy(), [7, 1, 2, 7, 7, 7])

def test_view_of_a_view_sees_the_write():
    x, ref = _fresh()
    v = x[2:4]
    x[3:5].assign(Tensor([7.0, 8.0]))
    ref[3:5] = [7.0, 8.0]
    np.testing.assert_array_equal(v.numpy(), ref[2:4])
    np.testing.assert_array_equal(x.numpy(), ref)

def test_view_of_a_computed_tensor_stores_it_first():
    x, ref = _fresh()
    y = x * 2
    y[1:3].assign(Tensor([0.5, 0.25]))
    expected = ref * 2
    expected[1:3] = [0.5, 0.25]
    np.testing.assert_array_equal(y.numpy(), expected)
    np.testing.assert_array_equal(x.numpy(), ref)      # x itself is untouched

def test_assign_to_expand_view_raises():
    x, _ = _fresh(3, (3, 1))
    with pytest.raises(RuntimeError, match="expand"): x.expand(3, 4)[0].assign(Tensor.ones(4).contiguous())

def test_sharded_view_assign():
    x, ref = _fresh(8, (4, 2))
    xs = x.shard(("CPU:1", "CPU:2"), axis=0).realize()
    xs[1:3].assign(Tensor([[10.0, 11.0], [12.0, 13.0]]).shard(("CPU:1", "CPU:2"), axis=None))
    ref[1:3] = [[10.0, 11.0], [12.0, 13.0]]
    np.testing.assert_array_equal(xs.numpy(), ref)

# ---------------------------------------------------------------- overlap: read first, then write

def test_overlapping_assign_reads_first():
    x, ref = _fresh(100)
    x[1:].assign(x[:-1])
    ref[1:] = ref[:-1].copy()
    assert _kernels(x) == 2          # the value is computed into a temporary first
    np.testing.assert_array_equal(x.numpy(), ref)

def test_self_flip_assign():
    x, ref = _fresh()
    x.assign(x.flip(0))
    np.testing.assert_array_equal(x.numpy(), ref[::-1])

# ---------------------------------------------------------------- ordering (tinygrad's rules)

def test_lazy_read_before_assign_realized_together_sees_old():
    a, ref = _fresh(3)
    b = a + 1
    a.assign(a * 10)
    Tensor.realize(a, b)
    np.testing.assert_array_equal(b.numpy(), ref + 1)
    np.testing.assert_array_equal(a.numpy(), ref * 10)

def test_lazy_read_realized_after_the_assign_sees_new():
    a, ref = _fresh(3)
    b = a + 1
    a.assign(a * 10).realize()
    np.testing.assert_array_equal(b.numpy(), ref * 10 + 1)

def test_lazy_read_realized_before_the_assign_sees_old():
    a, ref = _fresh(3)
    b = a + 1
    a.assign(a * 10)
    np.testing.assert_array_equal(b.numpy(), ref + 1)
    np.testing.assert_array_equal(a.numpy(), ref * 10)

def test_view_assign_updates_earlier_lazy_reads():
    # tinygrad: a write through a view replaces the buffer in every lazy graph that reads it
    x, ref = _fresh()
    b = x + 1
    x[2:4].assign(x[2:4] * 10)
    ref[2:4] *= 10
    np.testing.assert_array_equal(b.numpy(), ref + 1)

def test_chain_of_assigns_in_one_schedule():
    a, ref = _fresh(3)
    a.assign(a + 1)
    a.assign(a * 10)
    assert _kernels(a) == 2
    np.testing.assert_array_equal(a.numpy(), (ref + 1) * 10)

@pytest.mark.parametrize("read", [lambda a: a + 0.5, lambda a: a * 1])
def test_read_between_two_assigns(read):
    a, ref = _fresh(3)
    a.assign(a + 1)
    b = read(a)
    a.assign(a * 10)
    Tensor.realize(a, b)
    np.testing.assert_array_equal(b.numpy(), read(ref + 1))
    np.testing.assert_array_equal(a.numpy(), (ref + 1) * 10)

def test_two_views_of_one_buffer():
    x, ref = _fresh()
    x[0:4].assign(x[0:4] + 1)
    x[2:6].assign(x[2:6] * 2)
    ref[0:4] += 1
    ref[2:6] *= 2
    np.testing.assert_array_equal(x.numpy(), ref)

def test_unorderable_cycle_raises_naming_it():
    a, _ = _fresh(3)
    old = a.detach()
    a.assign(a + 1)
    with pytest.raises(RuntimeError, match="cycle: .*assign to buffer"): (a + old).realize()

# ---------------------------------------------------------------- checks

def test_value_broadcasts_and_python_values_take_the_dtype():
    x, _ = _fresh(6, (2, 3))
    x.assign(Tensor([1.0, 2.0, 3.0]))
    np.testing.assert_array_equal(x.numpy(), [[1, 2, 3], [1, 2, 3]])
    x.assign(5)
    np.testing.assert_array_equal(x.numpy(), np.full((2, 3), 5.0))
    x.assign([[1, 2, 3], [4, 5, 6]])
    assert x.dtype == dtypes.float32
    np.testing.assert_array_equal(x.numpy(), [[1, 2, 3], [4, 5, 6]])

def test_mismatches_raise_before_any_work():
    x, ref = _fresh()
    GlobalCounters.reset()
    with pytest.raises(ValueError, match="shape"): x.assign(Tensor([1.0, 2.0]))
    with pytest.raises(RuntimeError, match="dtype"): x.assign(Tensor([1, 2, 3, 4, 5, 6]))
    with pytest.raises(RuntimeError, match="dtype"): x.assign(Tensor([1.0] * 6, dtype=dtypes.float16))
    with pytest.raises(RuntimeError, match="device"): x.assign(Tensor([1.0] * 6, device="PYTHON"))
    assert GlobalCounters.kernel_count == 0
    np.testing.assert_array_equal(x.numpy(), ref)

def test_contiguous_twins_realized_together_get_their_own_buffers():
    """Equal graphs are one interned UOp; .contiguous() still promises each tensor its own storage
    (per-layer KV caches made in a loop and realized together must not share memory)."""
    caches = [Tensor.zeros(2, 2).contiguous() for _ in range(3)]
    Tensor.realize(*caches)
    caches[1][0].assign(Tensor([5.0, 5.0])).realize()
    caches[2].assign(Tensor.ones(2, 2).contiguous()).realize()
    np.testing.assert_array_equal(caches[0].numpy(), np.zeros((2, 2)))
    np.testing.assert_array_equal(caches[1].numpy(), [[5, 5], [0, 0]])
    np.testing.assert_array_equal(caches[2].numpy(), np.ones((2, 2)))
