"""Tensor construction and creation functions against numpy, on the CPU and PYTHON devices."""
import numpy as np
import pytest
from fusegrad import Tensor, dtypes
from fusegrad.dtype import from_np
from fusegrad.uop.ops import Ops
from helpers import assert_tensor, rand_np, np_dtype, NP_DTYPES

# ============================================================================ construction

def test_from_python_scalars(device):
    assert Tensor(2, device=device).dtype == dtypes.weakint
    assert Tensor(2.5, device=device).dtype == dtypes.weakfloat
    assert Tensor(True, device=device).dtype == dtypes.bool
    for value in (2, 2.5, True, -7, 0.0):
        t = Tensor(value, device=device)
        assert t.shape == () and t.item() == value and type(t.item()) is type(value)
        assert t.numpy().dtype == np.dtype({int: np.int32, float: np.float32, bool: np.bool_}[type(value)])
    assert_tensor(Tensor(3, device=device, dtype=dtypes.int8), np.array(3, np.int8), dtypes.int8)
    assert_tensor(Tensor(3, device=device, dtype=dtypes.float16), np.array(3, np.float16), dtypes.float16)
    assert_tensor(Tensor(1.7, device=device, dtype=dtypes.int32), np.array(1, np.int32), dtypes.int32)

def test_weak_scalar_adopts_other_dtype(device):
    assert (Tensor(2, device=device) + Tensor([1, 2], device=device, dtype=dtypes.int8)).dtype == dtypes.int8
    assert (Tensor(2, device=device) * Tensor([1.0], device=device, dtype=dtypes.float16)).dtype == dtypes.float16
    assert (Tensor(2.5, device=device) * Tensor([1, 2], device=device, dtype=dtypes.int16)).dtype == dtypes.float32
    assert_tensor(Tensor(2, device=device) + Tensor([1, 2], device=device, dtype=dtypes.uint8), np.array([3, 4], np.uint8), dtypes.uint8)

@pytest.mark.parametrize("data,np_dtype_", [
  ([1, 2, 3], np.int32), ([1.0, 2, 3], np.float32), ([True, False], np.bool_), ([[1, 2], [3, 4]], np.int32),
  ([[[1.5]], [[2.5]]], np.float32), ([True, 2], np.int32), ([1, 2.5], np.float32), ((1, 2), np.int32),
  ([[1, 2], (3, 4)], np.int32), ([], np.float32), ([[], []], np.float32), ([True, 1.5], np.float32),
], ids=str)
def test_from_nested_list(device, data, np_dtype_):
    expected = np.array(data, dtype=np_dtype_)
    assert_tensor(Tensor(data, device=device), expected)
    assert Tensor(data, device=device).tolist() == expected.tolist()

@pytest.mark.parametrize("dtype", NP_DTYPES + (dtypes.bfloat16,), ids=str)
def test_from_list_with_dtype(device, dtype):
    data = [[0, 1, 2], [3, 4, 5]]
    t = Tensor(data, device=device, dtype=dtype)
    assert t.dtype == dtype and t.shape == (2, 3)
    expected = np.array(data).astype(np_dtype(dtype))
    assert_tensor(t if dtype != dtypes.bfloat16 else t.cast(dtypes.float32), expected, dtype if dtype != dtypes.bfloat16 else dtypes.float32)

@pytest.mark.parametrize("dtype", NP_DTYPES, ids=str)
def test_from_numpy(device, dtype, rng):
    x = rand_np(rng, (3, 2, 2), dtype)
    t = Tensor(x, device=device)
    assert_tensor(t, x, dtype)
    # non-contiguous numpy input
    assert_tensor(Tensor(x.transpose(2, 0, 1), device=device), x.transpose(2, 0, 1), dtype)
    assert_tensor(Tensor(x[::2, :, ::-1], device=device), x[::2, :, ::-1], dtype)
    # zero-d and size-0 arrays
    assert_tensor(Tensor(x[0, 0, 0:1].reshape(()), device=device), x[0, 0, 0:1].reshape(()), dtype)
    assert_tensor(Tensor(x[:0], device=device), x[:0], dtype)
    # an explicit dtype converts like astype
    assert_tensor(Tensor(x, device=device, dtype=dtypes.float32), x.astype(np.float32), dtypes.float32)

def test_from_zero_dim_numpy_is_a_constant_with_or_without_dtype(device):
    # tinygrad 0.14 makes a 0-d array a constant (as a Python number), an explicit dtype included; a float one that
    # gradient() may target (requires_grad None) is a buffer of its own, as an interned constant it would be the same
    # node as every equal literal in a graph (test_gradient_round3.py)
    for dtype, want, requires_grad in ((None, np.array(2.5, np.float64), False), (dtypes.float32, np.array(2.5, np.float32), False),
                                       (dtypes.int32, np.array(2, np.int32), None), (None, np.array(2.5, np.float64), None)):
        t = Tensor(np.array(2.5), device=device, dtype=dtype, requires_grad=requires_grad)
        assert (t.uop.op is Ops.CONST) == (requires_grad is False or dtype == dtypes.int32), dtype
        assert_tensor(t, want, from_np(want.dtype))

def test_scalar_leaves_with_requires_grad_are_separate_nodes(device):
    # constants are interned: two equal scalar leaves must still get their own gradients (torch: 2 and 3)
    for make in (lambda: Tensor(0.5, device=device, requires_grad=True),
                 lambda: Tensor(np.array(0.5, np.float32), device=device, requires_grad=True)):
        x, y = make(), make()
        assert x.dtype == dtypes.float32 and x.shape == ()
        (x * 2 + y * 3).backward()
        assert (x.grad.item(), y.grad.item()) == (2.0, 3.0)

def test_from_numpy_is_a_copy(device):
    x = np.array([1.0, 2.0], np.float32)
    t = Tensor(x, device=device).realize()
    x[0] = 100.0
    assert t.tolist() == [1.0, 2.0]

def test_from_bytes(device):
    data = bytes([0, 1, 127, 128, 255])
    assert_tensor(Tensor(data, device=device), np.frombuffer(data, np.uint8), dtypes.uint8)
    assert_tensor(Tensor(bytearray(data), device=device), np.frombuffer(data, np.uint8), dtypes.uint8)
    assert_tensor(Tensor(b"", device=device), np.zeros((0,), np.uint8), dtypes.uint8)

def test_from_tensor_and_none(device):
    a = Tensor([1, 2], device=device)
    assert_tensor(Tensor(a), np.array([1, 2], np.int32))
    assert_tensor(Tensor(a, dtype=dtypes.float16), np.array([1, 2], np.float16))
    assert_tensor(Tensor(None, device=device), np.zeros((0,), np.float32))

def test_device_names(device):
    t = Tensor([1], device=device.lower())
    assert t.device == device
    assert Tensor([1], device=f"{device}:0").device == device

# ============================================================================ creation

@pytest.mark.parametrize("shape", [(2, 3), (0,), (1,), (), (2, 0, 3), (4, 1)], ids=str)
def test_zeros_ones_full_empty(device, shape):
    assert_tensor(Tensor.zeros(*shape, device=device), np.zeros(shape, np.float32))
    assert_tensor(Tensor.ones(shape, device=device), np.ones(shape, np.float32))
    assert_tensor(Tensor.zeros(shape, device=device, dtype=dtypes.int8), np.zeros(shape, np.int8), dtypes.int8)
    assert_tensor(Tensor.ones(*shape, device=device, dtype=dtypes.bool), np.ones(shape, np.bool_), dtypes.bool)
    assert_tensor(Tensor.full(shape, 7, device=device), np.full(shape, 7, np.int32))
    assert_tensor(Tensor.full(shape, 2.5, device=device), np.full(shape, 2.5, np.float32))
    assert_tensor(Tensor.full(shape, 2.5, device=device, dtype=dtypes.float16), np.full(shape, 2.5, np.float16))
    assert_tensor(Tensor.full(shape, False, device=device), np.full(shape, False))
    e = Tensor.empty(*shape, device=device)
    assert e.shape == tuple(shape) and e.dtype == dtypes.float32 and e.numpy().shape == tuple(shape)
    e = Tensor.empty(*shape, device=device, dtype=dtypes.uint16)
    assert e.dtype == dtypes.uint16 and e.numpy().dtype == np.uint16

def test_full_int_scalar_shape(device):
    assert_tensor(Tensor.full(3, -1, device=device), np.full(3, -1, np.int32))

@pytest.mark.parametrize("dtype", NP_DTYPES, ids=str)
def test_like(device, dtype, rng):
    x = rand_np(rng, (2, 3), dtype)
    t = Tensor(x, device=device)
    assert_tensor(t.zeros_like(), np.zeros_like(x), dtype)
    assert_tensor(t.ones_like(), np.ones_like(x), dtype)
    assert_tensor(t.full_like(1), np.full_like(x, 1), dtype)
    assert_tensor(t.ones_like(dtype=dtypes.float32), np.ones((2, 3), np.float32), dtypes.float32)
    assert t.zeros_like().device == device

@pytest.mark.parametrize("args", [(5,), (0,), (1,), (2, 9), (2, 9, 3), (9, 2, -2), (-1, -100, -5), (5.5, 20, 3.5), (0, 1, 0.1),
                                  (3, 3), (5, 1), (10, 0, -3), (-3.0, 3.0, 1.5), (1, 2, 0.3)], ids=str)
def test_arange(device, args):
    expected = np.arange(*args)
    expected = expected.astype(np.float32 if any(isinstance(a, float) for a in args) else np.int32)
    assert_tensor(Tensor.arange(*args, device=device), expected, rtol=1e-6, atol=1e-6)

def test_arange_dtype(device):
    assert_tensor(Tensor.arange(5, device=device, dtype=dtypes.float32), np.arange(5, dtype=np.float32))
    assert_tensor(Tensor.arange(2, 11, 3, device=device, dtype=dtypes.int64), np.arange(2, 11, 3, dtype=np.int64), dtypes.int64)
    assert_tensor(Tensor.arange(6, device=device, dtype=dtypes.uint8), np.arange(6, dtype=np.uint8), dtypes.uint8)
    assert_tensor(Tensor.arange(4, device=device, dtype=dtypes.float16), np.arange(4, dtype=np.float16), dtypes.float16)

@pytest.mark.parametrize("args", [(0, 10, 5), (-1, 1, 11), (3, 3, 4), (0, 1, 1), (0, 1, 0), (1.5, -2.5, 7), (0, 100, 2)], ids=str)
def test_linspace(device, args):
    assert_tensor(Tensor.linspace(*args, device=device), np.linspace(*args).astype(np.float32), rtol=1e-6, atol=1e-6)

def test_linspace_dtype(device):
    assert_tensor(Tensor.linspace(0, 10, 6, device=device, dtype=dtypes.int32), np.linspace(0, 10, 6).astype(np.int32), dtypes.int32)
    assert_tensor(Tensor.linspace(0, 1, 5, device=device, dtype=dtypes.float16), np.linspace(0, 1, 5).astype(np.float16))

@pytest.mark.parametrize("args", [(3,), (1,), (0,), (2, 4), (4, 2), (3, 0)], ids=str)
def test_eye(device, args):
    assert_tensor(Tensor.eye(*args, device=device), np.eye(*args, dtype=np.float32))
    assert_tensor(Tensor.eye(*args, device=device, dtype=dtypes.int32), np.eye(*args, dtype=np.int32), dtypes.int32)
    assert_tensor(Tensor.eye(*args, device=device, dtype=dtypes.bool), np.eye(*args, dtype=np.bool_), dtypes.bool)

# ============================================================================ random

RANDOM = {
  "rand": lambda shape, **k: Tensor.rand(*shape, **k),
  "randn": lambda shape, **k: Tensor.randn(*shape, **k),
  "randint": lambda shape, **k: Tensor.randint(*shape, low=-3, high=7, **k),
  "uniform": lambda shape, **k: Tensor.uniform(*shape, low=-2.0, high=5.0, **k),
  "normal": lambda shape, **k: Tensor.normal(*shape, mean=3.0, std=0.5, **k),
  "scaled_uniform": lambda shape, **k: Tensor.scaled_uniform(*shape, **k),
  "glorot_uniform": lambda shape, **k: Tensor.glorot_uniform(*shape, **k),
  "kaiming_uniform": lambda shape, **k: Tensor.kaiming_uniform(*shape, **k),
  "kaiming_normal": lambda shape, **k: Tensor.kaiming_normal(*shape, **k),
}

@pytest.mark.parametrize("name", list(RANDOM))
def test_random_manual_seed_reproducible(device, name):
    fn = RANDOM[name]
    Tensor.manual_seed(1234)
    a, b = fn((3, 5), device=device).numpy(), fn((3, 5), device=device).numpy()
    Tensor.manual_seed(1234)
    a2, b2 = fn((3, 5), device=device).numpy(), fn((3, 5), device=device).numpy()
    np.testing.assert_array_equal(a, a2)
    np.testing.assert_array_equal(b, b2)
    assert not np.array_equal(a, b), "consecutive calls must give different numbers"
    Tensor.manual_seed(99)
    assert not np.array_equal(fn((3, 5), device=device).numpy(), a), "another seed must give other numbers"
    assert a.shape == (3, 5)

@pytest.mark.parametrize("name", ["rand", "randn", "randint"])
def test_random_same_on_every_device(name):
    fn = RANDOM[name]
    Tensor.manual_seed(7)
    on_cpu = fn((4, 3), device="CPU").numpy()
    Tensor.manual_seed(7)
    on_python = fn((4, 3), device="PYTHON").numpy()
    np.testing.assert_allclose(on_cpu, on_python, rtol=1e-6, atol=1e-6)

def test_rand_distribution(device):
    Tensor.manual_seed(0)
    x = Tensor.rand(64, 64, device=device)
    assert x.dtype == dtypes.float32 and x.shape == (64, 64)
    v = x.numpy()
    assert v.min() >= 0.0 and v.max() < 1.0
    assert abs(v.mean() - 0.5) < 0.02 and abs(v.var() - 1 / 12) < 0.01
    assert len(np.unique(v)) > 4000
    # each decile holds about a tenth of the samples
    hist, _ = np.histogram(v, bins=10, range=(0, 1))
    assert hist.min() > 330 and hist.max() < 490

def test_randn_distribution(device):
    Tensor.manual_seed(0)
    v = Tensor.randn(64, 64, device=device).numpy()
    assert v.dtype == np.float32 and np.isfinite(v).all()
    assert abs(v.mean()) < 0.05 and abs(v.std() - 1) < 0.05
    assert 0.62 < (np.abs(v) < 1).mean() < 0.74   # ~68% within one sigma

def test_randint_uniform_normal_ranges(device):
    Tensor.manual_seed(3)
    r = Tensor.randint(40, 40, low=-3, high=7, device=device)
    assert r.dtype == dtypes.int32
    v = r.numpy()
    assert v.min() == -3 and v.max() == 6 and set(np.unique(v)) == set(range(-3, 7))
    u = Tensor.uniform(40, 40, low=-2.0, high=5.0, device=device).numpy()
    assert u.min() >= -2.0 and u.max() < 5.0 and abs(u.mean() - 1.5) < 0.2
    n = Tensor.normal(40, 40, mean=3.0, std=0.5, device=device).numpy()
    assert abs(n.mean() - 3.0) < 0.05 and abs(n.std() - 0.5) < 0.05

@pytest.mark.parametrize("dtype", [dtypes.float16, dtypes.float64, dtypes.bfloat16], ids=str)
def test_random_dtypes(device, dtype):
    Tensor.manual_seed(5)
    for t in (Tensor.rand(8, 8, device=device, dtype=dtype), Tensor.randn(8, 8, device=device, dtype=dtype)):
        assert t.dtype == dtype and t.shape == (8, 8)
        v = t.cast(dtypes.float32).numpy()
        assert np.isfinite(v).all() and len(np.unique(v)) > 8
    assert 0 <= Tensor.rand(8, device=device, dtype=dtype).cast(dtypes.float32).numpy().min()

def test_random_like_and_zero_size(device):
    base = Tensor.zeros(3, 2, device=device, dtype=dtypes.float16)
    r = base.rand_like()
    assert r.shape == (3, 2) and r.dtype == dtypes.float16 and r.device == device
    assert base.randn_like().shape == (3, 2)
    assert_tensor(Tensor.rand(0, 3, device=device), np.zeros((0, 3), np.float32))
    assert Tensor.randn(2, 0, device=device).numpy().shape == (2, 0)

def test_random_bounds_of_initializers(device):
    Tensor.manual_seed(11)
    shape = (16, 9)
    bound = np.sqrt(6 / (16 + 9))
    g = Tensor.glorot_uniform(*shape, device=device).numpy()
    assert np.abs(g).max() <= bound + 1e-6 and np.abs(g).max() > bound * 0.8
    s = Tensor.scaled_uniform(*shape, device=device).numpy()
    assert np.abs(s).max() <= (16 * 9) ** -0.5 + 1e-6
    k = Tensor.kaiming_uniform(*shape, device=device).numpy()
    kb = np.sqrt(3.0) * np.sqrt(2.0 / (1 + 0.01 ** 2)) / np.sqrt(9)
    assert np.abs(k).max() <= kb + 1e-6
