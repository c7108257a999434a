"""The NPY device wraps numpy arrays without copying and refuses to run kernels."""
import numpy as np
import pytest
from fusegrad import Tensor

def test_zero_copy_and_transfer():
    data = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = Tensor(data, device="NPY")
    data[0, 0] = 42.0                      # the tensor sees the array's memory
    np.testing.assert_array_equal((t.to("CPU") * 2).numpy(), data * 2)
    assert t.device == "NPY"

def test_compute_on_npy_is_a_clear_error():
    t = Tensor(np.ones(3, dtype=np.float32), device="NPY")
    with pytest.raises(RuntimeError, match="can't run kernels"): (t + 1).realize()
