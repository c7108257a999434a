"""Long float sums are blocked (gradient.split_reduce splits again while a partial would add up 32768 or more terms):
one accumulator adding millions of terms loses the small ones once the running sum is large."""
import numpy as np
from fusegrad import Tensor
from fusegrad.uop.ops import Ops

N = 1 << 24   # a partial of the first split still adds 65536 terms: the size where a second split starts

def test_long_float32_sum_of_a_constant_is_accurate():
    x = Tensor.full((N,), 0.1).contiguous().realize()
    exact = float(np.float32(0.1)) * N
    # one split (256 partials of 65536 terms, each an accumulator chain) was off by 3.8e-5; PyTorch's is ~1e-7
    assert abs(x.sum().item() - exact) / exact < 1e-6
    assert abs(x.mean().item() - float(np.float32(0.1))) < 1e-7

def test_long_sums_split_twice_only_for_floats():
    kernels = lambda t: sum(1 for item in t.schedule() if item.ast.op is Ops.SINK)
    assert kernels(Tensor.full((N,), 0.1).contiguous().realize().sum()) == 3   # partials of partials, then the total
    assert kernels(Tensor.full((N,), 1, dtype="int32").contiguous().realize().sum()) == 2   # exact either way
    assert kernels(Tensor.full((N // 256,), 0.1).contiguous().realize().sum()) == 2   # short enough after one split

def test_long_sum_of_random_values_matches_float64():
    values = np.random.default_rng(0).random(N, dtype=np.float32) * 3 + 1
    exact = values.astype(np.float64).sum()
    assert abs(Tensor(values).sum().item() - exact) / exact < 1e-6
