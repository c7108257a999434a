"""Pickling: tensors by value (realized or lazy, every dtype, sharded), dtypes and devices."""
import pickle, subprocess, sys
import numpy as np
import pytest
from fusegrad import Tensor, dtypes, Device, Variable

def roundtrip(x): return pickle.loads(pickle.dumps(x))

@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.float16, dtypes.bfloat16, dtypes.int8, dtypes.uint64, dtypes.bool])
def test_tensor_roundtrips_by_value(dtype):
    source = Tensor([[1, 0, 3], [2, 1, 0]], dtype=dtype)
    copy = roundtrip(source)
    assert copy.dtype == dtype and copy.shape == (2, 3) and copy.device == source.device
    assert copy.tolist() == source.tolist()

def test_lazy_tensor_is_computed_and_pickled_as_its_value():
    lazy = Tensor.arange(6).reshape(2, 3).float() * 2 + 1
    copy = roundtrip(lazy)
    np.testing.assert_array_equal(copy.numpy(), np.arange(6).reshape(2, 3) * 2 + 1)
    assert copy.uop.base.op.name == "BUFFER"     # a realized buffer, not the graph

def test_view_pickles_only_its_elements():
    base = Tensor.arange(100).realize()
    view = base[10:20:3]
    assert roundtrip(view).tolist() == list(range(10, 20, 3))
    assert len(pickle.dumps(view)) < len(pickle.dumps(base))

def test_requires_grad_and_device_survive():
    t = Tensor([1.0, 2.0], requires_grad=True, device="PYTHON")
    copy = roundtrip(t)
    assert copy.requires_grad is True and copy.device == "PYTHON"
    (copy * copy).sum().backward()
    assert copy.grad.tolist() == [2.0, 4.0]

def test_sharded_tensor_keeps_devices_and_axis():
    t = Tensor(np.arange(8, dtype=np.float32).reshape(4, 2)).shard(("CPU:1", "CPU:2"), axis=0) + 1
    copy = roundtrip(t)
    assert copy.device == ("CPU:1", "CPU:2") and copy.uop.axis == 0
    np.testing.assert_array_equal(copy.numpy(), np.arange(8).reshape(4, 2) + 1)

def test_tensor_unpickles_in_another_process():
    data = pickle.dumps(Tensor([[1.5, -2.0]]) * 2)
    code = ("import pickle, sys; from fusegrad import dtypes; t = pickle.loads(sys.stdin.buffer.read()); "
            "print(t.tolist(), t.dtype == dtypes.float32)")
    out = subprocess.run([sys.executable, "-c", code], input=data, capture_output=True, check=True).stdout.decode()
    assert out.strip() == "[[3.0, -4.0]] True"

@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.bfloat16, dtypes.fp8e5m2, dtypes.float32.vec(4), dtypes.int64])
def test_dtypes_roundtrip(dtype):
    assert roundtrip(dtype) == dtype

def test_devices_and_variables_roundtrip():
    assert roundtrip(Device["CPU"]).device == "CPU"
    v = Variable("n", 1, 10)
    assert roundtrip(v) == v and roundtrip(v.bind(3)) == v.bind(3)
