"""Processing ops (fusegrad/mixins/processing.py) checked forward AND backward against PyTorch:
convolutions, pooling, cumulative ops, gather/scatter, sorting, einsum, interpolate, movement
helpers, qr/svd. Expected values always come from torch (or from first principles), never from
fusegrad itself."""
from __future__ import annotations
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from fusegrad import Tensor, dtypes
from helpers import helper_test_op, np_dtype

# ================================================================ _pool
def test_pool_shape_and_values():
    x = Tensor.arange(10).reshape(2, 5)
    p = x._pool((3,), stride=2)
    assert p.shape == (2, 2, 3)
    np.testing.assert_array_equal(p.numpy(), torch.arange(10).reshape(2, 5).unfold(1, 3, 2).numpy())

def test_pool_graph_is_constant_size():
    # windowing is movement ops only: the graph does not grow with the input
    small = Tensor.empty(1, 1, 8, 8)._pool((3, 3), 1, 1).uop
    big = Tensor.empty(1, 1, 64, 64)._pool((3, 3), 1, 1).uop
    assert len(small.toposort) == len(big.toposort)

def test_pool_kernel_too_big():
    with pytest.raises(RuntimeError): Tensor.empty(1, 1, 2, 2)._pool((3, 3))

# ================================================================ conv2d
@pytest.mark.parametrize("stride,dilation,padding,groups", [
    (1, 1, 0, 1), (2, 1, 1, 1), (1, 2, 0, 1), ((2, 1), (1, 2), (1, 0), 1), (1, 1, 1, 2), (2, 1, 0, 4), (3, 2, 2, 1),
])
def test_conv2d_grid(stride, dilation, padding, groups):
    cin, cout = 4, 4
    helper_test_op([(2, cin, 7, 6), (cout, cin // groups, 3, 2), (cout,)],
                   lambda x, w, b: F.conv2d(x, w, b, stride=stride, padding=padding, dilation=dilation, groups=groups),
                   lambda x, w, b: x.conv2d(w, b, groups=groups, stride=stride, dilation=dilation, padding=padding), atol=1e-4)

def torch_conv_input_grad(x, w):
    tx = torch.tensor(x, requires_grad=True)
    (F.conv2d(tx, torch.tensor(w), stride=2, padding=1) ** 2).sum().backward()
    return tx.grad.numpy()

def test_strided_conv_input_gradient_is_a_plain_convolution():
    # differentiating the window trick of a stride-2 conv gave a reduce full of div/mod index math
    # (9 GFLOPS); the explicit rule convolves the output gradient with each stride phase of the kernel
    from fusegrad.uop.ops import Ops
    x = Tensor.randn(2, 8, 12, 12, requires_grad=True).realize()
    w = Tensor.randn(16, 8, 3, 3).realize()
    dx, = (x.conv2d(w, stride=2, padding=1) ** 2).sum().gradient(x)
    reduces = [item.ast for item in dx.schedule() if item.ast.op is Ops.SINK and any(u.op is Ops.REDUCE for u in item.ast.toposort)]
    # the forward conv and the input gradient's four stride phases (one multi-output kernel, no stuffed zeros)
    assert len(reduces) == 2
    # (neither has integer division: the stride-2 windows of the forward conv split and merge only whole dimensions)
    assert not any(u.op in (Ops.IDIV, Ops.MOD) for ast in reduces for u in ast.toposort)
    dx, = (x.conv2d(w, stride=2, padding=1) ** 2).sum().gradient(x)
    np.testing.assert_allclose(dx.numpy(), torch_conv_input_grad(x.numpy(), w.numpy()), atol=1e-3, rtol=1e-4)

@pytest.mark.parametrize("kernel,stride,padding", [(1, 2, 0), (3, 3, 1), (2, 3, 0), (5, 2, 2), ((3, 1), (2, 3), (1, 0))])
def test_strided_conv_phases(kernel, stride, padding):
    # stride phases with no kernel tap (1x1 stride 2, 2 taps stride 3), uneven phases, per-dim strides
    k = kernel if isinstance(kernel, tuple) else (kernel, kernel)
    helper_test_op([(2, 3, 11, 10), (4, 3, *k)], lambda x, w: F.conv2d(x, w, stride=stride, padding=padding),
                   lambda x, w: x.conv2d(w, stride=stride, padding=padding), atol=1e-4)

def test_conv2d_no_bias_1x1_and_size1():
    helper_test_op([(1, 3, 1, 1), (2, 3, 1, 1)], lambda x, w: F.conv2d(x, w), lambda x, w: x.conv2d(w), atol=1e-5)

def test_conv2d_padding_per_side():
    # tinygrad/torch flat order: (left, right, top, bottom)
    helper_test_op([(1, 2, 5, 5), (3, 2, 3, 3)], lambda x, w: F.conv2d(F.pad(x, (1, 0, 2, 1)), w),
                   lambda x, w: x.conv2d(w, padding=(1, 0, 2, 1)), atol=1e-5)

@pytest.mark.parametrize("pad", ["same", "valid"])
def test_conv2d_padding_strings(pad):
    helper_test_op([(1, 2, 5, 6), (3, 2, 2, 3)], lambda x, w: F.conv2d(x, w, padding=pad, dilation=(2, 1)),
                   lambda x, w: x.conv2d(w, padding=pad, dilation=(2, 1)), atol=1e-5)

def test_conv1d():
    helper_test_op([(2, 3, 9), (4, 3, 3), (4,)], lambda x, w, b: F.conv1d(x, w, b, stride=2, padding=1),
                   lambda x, w, b: x.conv2d(w, b, stride=2, padding=1), atol=1e-5)

def test_conv3d():
    helper_test_op([(1, 2, 4, 5, 4), (2, 2, 2, 3, 2)], lambda x, w: F.conv3d(x, w, padding=1, dilation=(1, 1, 2)),
                   lambda x, w: x.conv2d(w, padding=1, dilation=(1, 1, 2)), atol=1e-5)

def test_conv2d_permuted_input():
    helper_test_op([(5, 4, 2, 3), (2, 3, 2, 2)], lambda x, w: F.conv2d(x.permute(2, 3, 0, 1), w),
                   lambda x, w: x.permute(2, 3, 0, 1).conv2d(w), atol=1e-5)

def test_conv2d_errors():
    x = Tensor.empty(1, 4, 5, 5)
    with pytest.raises(RuntimeError): x.conv2d(Tensor.empty(2, 3, 3, 3))              # channel mismatch
    with pytest.raises(RuntimeError): x.conv2d(Tensor.empty(3, 2, 3, 3), groups=2)    # cout not divisible
    with pytest.raises(RuntimeError): x.conv2d(Tensor.empty(2, 4, 3))                 # ndim mismatch
    with pytest.raises(RuntimeError): x.conv2d(Tensor.empty(2, 4, 7, 7))              # kernel bigger than input
    with pytest.raises(RuntimeError): x.conv2d(Tensor.empty(2, 4, 3, 3), bias=Tensor.empty(3))
    with pytest.raises(ValueError): x.conv2d(Tensor.empty(2, 4, 3, 3), padding=(1, 2, 3))
    with pytest.raises(RuntimeError): x.conv2d(Tensor.empty(2, 4, 3, 3), padding="same", stride=2)

# ================================================================ conv_transpose2d
@pytest.mark.parametrize("stride,dilation,padding,output_padding,groups", [
    (1, 1, 0, 0, 1), (2, 1, 0, 0, 1), (2, 1, 1, 1, 1), (3, 2, 1, 1, 1), ((2, 1), (1, 2), (1, 0), (1, 0), 1), (1, 1, 0, 0, 2), (2, 1, 2, 0, 2),
])
def test_conv_transpose2d_grid(stride, dilation, padding, output_padding, groups):
    cin, cout_g = 4, 3
    helper_test_op([(2, cin, 4, 3), (cin, cout_g, 3, 2), (cout_g * groups,)],
                   lambda x, w, b: F.conv_transpose2d(x, w, b, stride=stride, padding=padding, output_padding=output_padding,
                                                      groups=groups, dilation=dilation),
                   lambda x, w, b: x.conv_transpose2d(w, b, groups=groups, stride=stride, dilation=dilation, padding=padding,
                                                      output_padding=output_padding), atol=1e-4)

def test_conv_transpose1d_and_3d():
    helper_test_op([(1, 2, 5), (2, 3, 3)], lambda x, w: F.conv_transpose1d(x, w, stride=2, padding=1),
                   lambda x, w: x.conv_transpose2d(w, stride=2, padding=1), atol=1e-5)
    helper_test_op([(1, 2, 2, 3, 2), (2, 1, 2, 2, 2)], lambda x, w: F.conv_transpose3d(x, w, stride=2),
                   lambda x, w: x.conv_transpose2d(w, stride=2), atol=1e-5)

def test_conv_transpose2d_errors():
    with pytest.raises(RuntimeError): Tensor.empty(1, 4, 3, 3).conv_transpose2d(Tensor.empty(3, 2, 2, 2))
    with pytest.raises(RuntimeError): Tensor.empty(1, 4, 3, 3).conv_transpose2d(Tensor.empty(4, 2, 2, 2), stride=2, output_padding=2)

# ================================================================ pooling
@pytest.mark.parametrize("kernel,stride,dilation,padding", [
    ((2, 2), None, 1, 0), ((3, 3), 1, 1, 1), ((3, 2), (2, 1), 1, (1, 0)), ((2, 2), 3, 1, 0), ((3, 3), 2, 2, 1), ((1, 1), 1, 1, 0), ((5, 5), 1, 1, 2),
])
def test_max_pool2d_grid(kernel, stride, dilation, padding):
    helper_test_op([(2, 2, 7, 8)], lambda x: F.max_pool2d(x, kernel, stride=stride, dilation=dilation, padding=padding),
                   lambda x: x.max_pool2d(kernel, stride=stride, dilation=dilation, padding=padding))

@pytest.mark.parametrize("kernel,stride,padding", [((3, 3), 2, 0), ((2, 2), 2, 1), ((3, 2), (2, 3), (1, 1))])
def test_max_pool2d_ceil_mode(kernel, stride, padding):
    helper_test_op([(1, 2, 6, 7)], lambda x: F.max_pool2d(x, kernel, stride=stride, padding=padding, ceil_mode=True),
                   lambda x: x.max_pool2d(kernel, stride=stride, padding=padding, ceil_mode=True))

def test_max_pool2d_int_kernel_and_permuted():
    helper_test_op([(6, 5, 1, 2)], lambda x: F.max_pool2d(x.permute(2, 3, 0, 1), 2), lambda x: x.permute(2, 3, 0, 1).max_pool2d(2))

def test_max_pool1d_3d():
    helper_test_op([(2, 3, 9)], lambda x: F.max_pool1d(x, 3, stride=2, padding=1), lambda x: x.max_pool2d((3,), stride=2, padding=1))
    helper_test_op([(1, 2, 4, 5, 4)], lambda x: F.max_pool3d(x, 2), lambda x: x.max_pool2d((2, 2, 2)))

@pytest.mark.parametrize("kernel,stride,padding,dilation,ceil_mode", [((2, 2), None, 0, 1, False), ((3, 3), 2, 1, 1, False),
                                                                      ((3, 3), 2, 1, 2, True), ((2, 3), (1, 2), (1, 0), 1, True)])
def test_max_pool2d_return_indices(kernel, stride, padding, dilation, ceil_mode):
    x = np.random.default_rng(1).permutation(2 * 3 * 8 * 7).reshape(2, 3, 8, 7).astype(np.float32)
    tv, ti = F.max_pool2d(torch.tensor(x), kernel, stride, padding, dilation, ceil_mode=ceil_mode, return_indices=True)
    fv, fi = Tensor(x).max_pool2d(kernel, stride, dilation, padding, ceil_mode=ceil_mode, return_indices=True)
    np.testing.assert_equal(fv.numpy(), tv.numpy())
    np.testing.assert_equal(fi.numpy(), ti.numpy())
    assert fi.dtype == dtypes.int32

def test_max_pool2d_ties_pick_first_index():
    x = np.array([[[[1, 1, 0, 2], [1, 1, 2, 2]]]], dtype=np.float32)
    tv, ti = F.max_pool2d(torch.tensor(x), 2, return_indices=True)
    fv, fi = Tensor(x).max_pool2d(2, return_indices=True)
    np.testing.assert_equal(fv.numpy(), tv.numpy())
    np.testing.assert_equal(fi.numpy(), ti.numpy())

def test_max_pool2d_tie_gradient_sum():
    # the total gradient of a window goes to its maxima (how it is split among exact ties is not fixed)
    x = Tensor([[[[1.0, 1.0], [0.0, 1.0]]]])
    g, = x.max_pool2d(2).sum().gradient(x)
    assert g.numpy().sum() == pytest.approx(1.0) and g.numpy()[0, 0, 1, 0] == 0

def test_max_pool2d_errors():
    with pytest.raises(RuntimeError): Tensor.empty(1, 1, 4, 4).max_pool2d(2, padding=2)   # padding over half the kernel
    with pytest.raises(RuntimeError): Tensor.empty(1, 1, 4, 4).max_pool2d(0)

@pytest.mark.parametrize("kernel,stride,padding,ceil_mode,count_include_pad", [
    ((2, 2), None, 0, False, True), ((3, 3), 2, 1, False, True), ((3, 3), 2, 1, False, False), ((3, 2), (2, 1), (1, 1), True, True),
    ((3, 3), 2, 1, True, False), ((2, 2), 3, 0, True, True), ((1, 1), 1, 0, False, True),
])
def test_avg_pool2d_grid(kernel, stride, padding, ceil_mode, count_include_pad):
    helper_test_op([(2, 2, 7, 6)], lambda x: F.avg_pool2d(x, kernel, stride, padding, ceil_mode=ceil_mode, count_include_pad=count_include_pad),
                   lambda x: x.avg_pool2d(kernel, stride, padding=padding, ceil_mode=ceil_mode, count_include_pad=count_include_pad), atol=1e-5)

def test_avg_pool1d_3d():
    helper_test_op([(2, 3, 9)], lambda x: F.avg_pool1d(x, 3, stride=2), lambda x: x.avg_pool2d((3,), stride=2), atol=1e-5)
    helper_test_op([(1, 1, 4, 4, 4)], lambda x: F.avg_pool3d(x, 2), lambda x: x.avg_pool2d((2, 2, 2)), atol=1e-5)

def test_avg_pool2d_dilation_matches_definition():
    # torch's avg_pool2d has no dilation: compare with the mean of the dilated windows from unfold
    x = np.random.default_rng(0).standard_normal((1, 1, 7, 7)).astype(np.float32)
    want = F.unfold(torch.tensor(x), 3, dilation=2).mean(1).reshape(1, 1, 3, 3).numpy()
    np.testing.assert_allclose(Tensor(x).avg_pool2d(3, stride=1, dilation=2).numpy(), want, atol=1e-5)

@pytest.mark.parametrize("kernel,stride,padding", [((2, 2), None, 0), ((3, 3), 2, 1), ((2, 3), (1, 2), (1, 0))])
def test_max_unpool2d(kernel, stride, padding):
    x = np.random.default_rng(2).permutation(2 * 2 * 6 * 7).reshape(2, 2, 6, 7).astype(np.float32)
    tv, ti = F.max_pool2d(torch.tensor(x), kernel, stride, padding, return_indices=True)
    helper_test_op(None, lambda v, i: F.max_unpool2d(v, i, kernel, stride, padding, output_size=(6, 7)),
                   lambda v, i: v.max_unpool2d(i, kernel, stride, padding=padding, output_size=(2, 2, 6, 7)), vals=[tv.numpy(), ti.numpy().astype(np.int32)])

def test_max_unpool2d_default_size_roundtrip():
    x = np.random.default_rng(3).permutation(2 * 4 * 6).reshape(1, 2, 4, 6).astype(np.float32)
    v, i = Tensor(x).max_pool2d(2, return_indices=True)
    tv, ti = F.max_pool2d(torch.tensor(x), 2, return_indices=True)
    np.testing.assert_equal(v.max_unpool2d(i, 2).numpy(), F.max_unpool2d(tv, ti, 2).numpy())
    helper_test_op(None, lambda v, i: F.max_unpool2d(v, i, 2), lambda v, i: v.max_unpool2d(i, 2), vals=[tv.numpy(), ti.numpy().astype(np.int32)])

def test_max_unpool2d_errors():
    with pytest.raises(RuntimeError): Tensor.empty(1, 1, 2, 2).max_unpool2d(Tensor.empty(1, 1, 2, 2))   # float indices
    with pytest.raises(ValueError): Tensor.empty(1, 1, 2, 2).max_unpool2d(Tensor.zeros(1, 1, 2, 1, dtype=dtypes.int32))

# ================================================================ cumulative ops
@pytest.mark.parametrize("shape,axis", [((5,), 0), ((3, 4), 1), ((3, 4), -2), ((2, 3, 4), 1), ((1, 1), 0), ((600,), 0), ((2, 1100), 1)])
def test_cumsum(shape, axis):
    helper_test_op([shape], lambda x: torch.cumsum(x, axis), lambda x: x.cumsum(axis), atol=1e-4)

def test_cumsum_default_axis_int_and_0d():
    np.testing.assert_array_equal(Tensor([[1, 2], [3, 4]]).cumsum().numpy(), [[1, 2], [4, 6]])
    assert Tensor(3.0).cumsum().item() == 3.0
    assert Tensor.zeros(0, 3).cumsum(1).shape == (0, 3)

# tinygrad 0.14's result dtypes: cumsum has sum's dtype (small ints and bool widen to int32/uint32), whatever the
# shape (0-d and empty included); cumprod, cummax and cummin keep the input's dtype
SUM_DTYPE = {dtypes.bool: dtypes.int32, dtypes.int8: dtypes.int32, dtypes.int16: dtypes.int32, dtypes.uint8: dtypes.uint32}

@pytest.mark.parametrize("dtype", [dtypes.bool, dtypes.int8, dtypes.uint8, dtypes.int32, dtypes.float16], ids=str)
@pytest.mark.parametrize("shape", [(), (0,), (2, 0), (5,), (3, 4), (700,)], ids=str)
def test_cumulative_op_dtypes_and_values(shape, dtype):
    rng = np.random.default_rng(len(shape) + 7 * sum(shape))
    x = (rng.integers(-2, 4, size=shape) if dtype != dtypes.bool else rng.random(shape) < 0.7).astype(np_dtype(dtype))
    axis = -1 if shape else 0
    flat = x.reshape(-1) if x.ndim == 0 else x   # numpy's cumulative ops flatten 0-d arrays
    want = {"cumsum": np.cumsum(flat.astype(np.float64) if dtypes.is_float(dtype) else flat.astype(np.int64), axis).reshape(x.shape),
            "cumprod": np.cumprod(flat, axis, dtype=flat.dtype if dtype != dtypes.bool else np.int64).reshape(x.shape),
            "cummax": np.maximum.accumulate(flat, axis).reshape(x.shape), "cummin": np.minimum.accumulate(flat, axis).reshape(x.shape)}
    for name, expected in want.items():
        result = getattr(Tensor(x), name)(axis)
        result = result[0] if isinstance(result, tuple) else result
        want_dtype = SUM_DTYPE.get(dtype, dtype) if name == "cumsum" else dtype
        assert result.dtype == want_dtype and result.shape == shape, (name, result.dtype, result.shape)
        np.testing.assert_allclose(result.numpy().astype(np.float64), expected.astype(np_dtype(want_dtype)).astype(np.float64),
                                   rtol=1e-2 if dtype == dtypes.float16 else 1e-6, err_msg=name)

def test_cumsum_permuted():
    helper_test_op([(4, 3)], lambda x: torch.cumsum(x.T, 1), lambda x: x.T.cumsum(1), atol=1e-5)

@pytest.mark.parametrize("shape,axis", [((5,), 0), ((3, 4), 1), ((2, 3, 4), -1), ((600,), 0)])
def test_cumprod(shape, axis):
    # values near 1 so long products stay finite; away from 0 so the gradient is defined
    helper_test_op([shape], lambda x: torch.cumprod(x, axis), lambda x: x.cumprod(axis), low=0.95, high=1.05, atol=1e-4, grad_atol=1e-3)

@pytest.mark.parametrize("op", ["cummax", "cummin"])
@pytest.mark.parametrize("shape,axis", [((6,), 0), ((3, 5), 1), ((3, 5), 0), ((2, 3, 4), -1), ((1,), 0)])
def test_cummax_cummin(op, shape, axis):
    helper_test_op([shape], lambda x: getattr(torch, op)(x, axis)[0], lambda x: getattr(x, op)(axis)[0])
    helper_test_op([shape], lambda x: getattr(torch, op)(x, axis)[1], lambda x: getattr(x, op)(axis)[1], forward_only=True)

@pytest.mark.parametrize("op", ["cummax", "cummin"])
def test_cummax_ties_and_ints(op):
    x = np.array([[1, 3, 3, 2, 3, 0, 0], [2, 2, 1, 1, 5, 5, 1]], dtype=np.int32)
    tv, ti = getattr(torch, op)(torch.tensor(x), 1)
    fv, fi = getattr(Tensor(x), op)(1)
    np.testing.assert_array_equal(fv.numpy(), tv.numpy())
    np.testing.assert_array_equal(fi.numpy(), ti.numpy())
    assert fi.dtype == dtypes.int32 and fv.dtype == dtypes.int32

def test_cummax_nan():
    x = np.array([1.0, np.nan, 2.0, np.nan, 0.5], dtype=np.float32)
    tv, ti = torch.cummax(torch.tensor(x), 0)
    fv, fi = Tensor(x).cummax(0)
    np.testing.assert_array_equal(fv.numpy(), tv.numpy())
    np.testing.assert_array_equal(fi.numpy(), ti.numpy())

@pytest.mark.parametrize("shape,axis", [((5,), 0), ((3, 4), 1), ((3, 4), 0), ((2, 3, 4), -1)])
def test_logcumsumexp(shape, axis):
    helper_test_op([shape], lambda x: torch.logcumsumexp(x, axis), lambda x: x.logcumsumexp(axis), atol=1e-5)

def test_logcumsumexp_of_ints_is_float_for_every_shape():
    for shape in ((), (0,), (2, 0), (3,)):
        x = np.arange(int(np.prod(shape)), dtype=np.int32).reshape(shape)
        result = Tensor(x).logcumsumexp(-1 if shape else 0)
        expected = torch.logcumsumexp(torch.tensor(x, dtype=torch.float32), -1 if shape else 0).numpy()
        assert result.dtype == dtypes.float32 and result.shape == shape
        np.testing.assert_allclose(result.numpy(), expected, rtol=1e-6)

def test_logcumsumexp_wide_range():
    # entries far apart in magnitude: a global shift would underflow the early terms
    helper_test_op(None, lambda x: torch.logcumsumexp(x, 0), lambda x: x.logcumsumexp(0), vals=[[-100.0, 100.0, -50.0, 101.0]], atol=1e-4)
    x = np.array([-np.inf, -np.inf, 0.0], dtype=np.float32)
    np.testing.assert_allclose(Tensor(x).logcumsumexp().numpy(), torch.logcumsumexp(torch.tensor(x), 0).numpy())

# ================================================================ triangles and diagonals
@pytest.mark.parametrize("diagonal", [0, 1, -1, 3, -5])
def test_triu_tril(diagonal):
    helper_test_op([(4, 5)], lambda x: x.triu(diagonal), lambda x: x.triu(diagonal))
    helper_test_op([(2, 5, 3)], lambda x: x.tril(diagonal), lambda x: x.tril(diagonal))

def test_triu_tril_int_and_errors():
    x = np.arange(12, dtype=np.int32).reshape(3, 4)
    np.testing.assert_array_equal(Tensor(x).triu(1).numpy(), np.triu(x, 1))
    np.testing.assert_array_equal(Tensor(x).tril(-1).numpy(), np.tril(x, -1))
    assert Tensor(x).triu().dtype == dtypes.int32
    with pytest.raises(RuntimeError): Tensor([1, 2]).triu()

@pytest.mark.parametrize("diagonal", [0, 1, -2])
def test_diag(diagonal):
    helper_test_op([(4,)], lambda x: torch.diag(x, diagonal), lambda x: x.diag(diagonal))
    helper_test_op([(3, 5)], lambda x: torch.diag(x, diagonal), lambda x: x.diag(diagonal))

@pytest.mark.parametrize("offset,dim1,dim2", [(0, 0, 1), (1, 0, 1), (-1, 0, 1), (0, 1, 2), (2, -1, 0), (-2, 2, 1), (9, 0, 1)])
def test_diagonal(offset, dim1, dim2):
    helper_test_op([(3, 4, 5)], lambda x: torch.diagonal(x, offset, dim1, dim2), lambda x: x.diagonal(offset, dim1, dim2))

def test_diag_errors():
    with pytest.raises(ValueError): Tensor.empty(2, 2, 2).diag()
    with pytest.raises(RuntimeError): Tensor.empty(2, 2).diagonal(0, 1, -1)

# ================================================================ gather / scatter
def test_gather():
    idx = np.array([[0, 2, 1], [3, 3, 0]], dtype=np.int32)
    helper_test_op(None, lambda x, i: torch.gather(x, 1, i), lambda x, i: x.gather(1, i), vals=[np.random.default_rng(0).random((2, 4)), idx])
    helper_test_op(None, lambda x, i: torch.gather(x, 0, i), lambda x, i: x.gather(0, i), vals=[np.random.default_rng(0).random((4, 3)), idx])
    helper_test_op(None, lambda x, i: torch.gather(x, -1, i), lambda x, i: x.gather(-1, i),
                   vals=[np.random.default_rng(0).random((3, 5, 4)), np.array([[[0], [1]], [[3], [3]]], dtype=np.int32)])

def test_gather_permuted_and_errors():
    idx = np.array([[1, 0], [0, 0]], dtype=np.int32)
    helper_test_op(None, lambda x, i: torch.gather(x.T, 1, i), lambda x, i: x.T.gather(1, i), vals=[np.random.default_rng(0).random((3, 2)), idx])
    with pytest.raises(RuntimeError): Tensor.empty(2, 2).gather(0, Tensor([[0.0]]))
    with pytest.raises(RuntimeError): Tensor.empty(2, 2).gather(0, Tensor([0]))
    with pytest.raises(IndexError): Tensor.empty(2, 2).gather(2, Tensor([[0]]))

@pytest.mark.parametrize("dim", [0, 1, -1])
def test_scatter_tensor_src(dim):
    rng = np.random.default_rng(3)
    idx = np.stack([rng.permutation(4)[:3] for _ in range(3)], 1 if dim == 0 else 0).astype(np.int32)   # unique per line
    idx = idx[:3, :3] if dim == 0 else idx[:2, :3]
    # torch's backward needs src shaped like index; a larger src is checked forward only
    helper_test_op(None, lambda x, i, s: x.scatter(dim, i, s), lambda x, i, s: x.scatter(dim, i, s), vals=[rng.random((4, 4)), idx, rng.random(idx.shape)])
    helper_test_op(None, lambda x, i, s: x.scatter(dim, i, s), lambda x, i, s: x.scatter(dim, i, s),
                   vals=[rng.random((4, 4)), idx, rng.random((3, 4))], forward_only=True)

def test_scatter_scalar_and_reduce():
    idx = np.array([[0, 1, 2, 0], [1, 2, 0, 1]], dtype=np.int32)
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    helper_test_op(None, lambda x, i: x.scatter(0, i, 2.5), lambda x, i: x.scatter(0, i, 2.5), vals=[x, idx])
    helper_test_op(None, lambda x, i, s: x.scatter(1, i, s, reduce="add"), lambda x, i, s: x.scatter(1, i, s, reduce="add"),
                   vals=[x, np.array([[0, 0, 1, 3]], dtype=np.int32), np.ones((1, 4), np.float32) * 1.5], forward_only=True)  # no torch derivative
    helper_test_op(None, lambda x, i, s: x.scatter(1, i, s, reduce="multiply"), lambda x, i, s: x.scatter(1, i, s, reduce="multiply"),
                   vals=[x + 1, np.array([[0, 0, 1, 3]], dtype=np.int32), np.full((1, 4), 2.0, np.float32)], forward_only=True)  # no torch derivative
    t = torch.tensor(x).scatter(0, torch.tensor(idx.astype(np.int64)), 7, reduce="add")
    np.testing.assert_allclose(Tensor(x).scatter(0, Tensor(idx), 7, reduce="add").numpy(), t.numpy())

def test_scatter_repeated_index_last_wins_and_int():
    x = torch.zeros(4, dtype=torch.int32)
    i, s = torch.tensor([1, 3, 1, 1]), torch.tensor([5, 6, 7, 8], dtype=torch.int32)
    want = x.scatter(0, i, s)   # torch on CPU writes in order: the last write wins
    got = Tensor.zeros(4, dtype=dtypes.int32).scatter(0, Tensor([1, 3, 1, 1]), Tensor([5, 6, 7, 8]))
    np.testing.assert_array_equal(got.numpy(), want.numpy())
    assert got.dtype == dtypes.int32

def test_scatter_errors():
    with pytest.raises(TypeError): Tensor.zeros(3).scatter(0, Tensor([0]), Tensor([1.0]), reduce="max")
    with pytest.raises(RuntimeError): Tensor.zeros(3).scatter(0, Tensor([0.0]), Tensor([1.0]))
    with pytest.raises(RuntimeError): Tensor.zeros(3).scatter(0, Tensor([0]), Tensor([1]))   # dtype mismatch
    with pytest.raises(ValueError): Tensor.zeros(3).scatter(0, Tensor([[0]]), Tensor([1.0]))

@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce(reduce, include_self):
    rng = np.random.default_rng(4)
    idx = np.array([[0, 1, 0, 3], [2, 2, 2, 1], [0, 0, 0, 0]], dtype=np.int32)   # repeats; column 2 of row... untouched rows exist
    x, s = rng.uniform(0.5, 1.5, (4, 4)).astype(np.float32), rng.uniform(0.5, 1.5, (3, 4)).astype(np.float32)
    helper_test_op(None, lambda x, i, s: x.scatter_reduce(0, i, s, reduce, include_self=include_self),
                   lambda x, i, s: x.scatter_reduce(0, i, s, reduce, include_self=include_self), vals=[x, idx, s], atol=1e-5)
    helper_test_op(None, lambda x, i, s: x.scatter_reduce(1, i, s, reduce, include_self=include_self),
                   lambda x, i, s: x.scatter_reduce(1, i, s, reduce, include_self=include_self), vals=[x[:3], idx, s], atol=1e-5)
    big_src = rng.uniform(0.5, 1.5, (3, 6)).astype(np.float32)   # src larger than index: forward only (torch's backward refuses)
    helper_test_op(None, lambda x, i, s: x.scatter_reduce(1, i, s, reduce, include_self=include_self),
                   lambda x, i, s: x.scatter_reduce(1, i, s, reduce, include_self=include_self), vals=[x[:3], idx, big_src], atol=1e-5, forward_only=True)

@pytest.mark.parametrize("reduce", ["sum", "mean", "amax", "amin", "prod"])
def test_scatter_reduce_int(reduce):
    x = torch.tensor([5, -5, 3, 0], dtype=torch.int32)
    i, s = torch.tensor([0, 0, 1, 1, 1]), torch.tensor([-3, -4, 2, 7, -1], dtype=torch.int32)
    for include_self in (True, False):
        want = x.scatter_reduce(0, i, s, reduce, include_self=include_self)
        got = Tensor(x.numpy()).scatter_reduce(0, Tensor(i.numpy()), Tensor(s.numpy()), reduce, include_self=include_self)
        np.testing.assert_array_equal(got.numpy(), want.numpy())
        assert got.dtype == dtypes.int32

def test_scatter_reduce_bad_reduce():
    with pytest.raises(RuntimeError): Tensor.zeros(3).scatter_reduce(0, Tensor([0]), Tensor([1.0]), "max")

def test_masked_fill():
    mask = np.array([[True, False, True], [False, False, True]])
    helper_test_op(None, lambda x, m: x.masked_fill(m, -2.0), lambda x, m: x.masked_fill(m, -2.0), vals=[np.random.rand(2, 3), mask])
    helper_test_op(None, lambda x, m: x.masked_fill(m, 3.0), lambda x, m: x.masked_fill(m, 3.0), vals=[np.random.rand(2, 3), mask[:1]])
    got = Tensor([1, 2, 3]).masked_fill(Tensor([True, False, True]), Tensor(9))
    assert got.tolist() == [9, 2, 9] and got.dtype == dtypes.int32
    with pytest.raises(RuntimeError): Tensor([1, 2]).masked_fill(Tensor([1, 0]), 0)

def test_masked_select():
    rng = np.random.default_rng(5)
    x, mask = rng.random((3, 4)).astype(np.float32), rng.random((3, 4)) < 0.5
    helper_test_op(None, lambda x, m: x.masked_select(m), lambda x, m: x.masked_select(m), vals=[x, mask])
    helper_test_op(None, lambda x, m: x.masked_select(m), lambda x, m: x.masked_select(m), vals=[x, mask[1]])   # broadcast mask
    helper_test_op(None, lambda x, m: x.masked_select(m), lambda x, m: x.masked_select(m), vals=[x[:1], mask])   # broadcast input
    assert Tensor([1.0, 2.0]).masked_select(Tensor([False, False])).shape == (0,)
    assert Tensor([1, 2, 3]).masked_select(Tensor([True, True, True])).tolist() == [1, 2, 3]
    with pytest.raises(RuntimeError): Tensor([1, 2]).masked_select(Tensor([1, 0]))

@pytest.mark.parametrize("shape", [(7,), (3, 4), (2, 3, 2), (1, 1)])
def test_nonzero(shape):
    x = (np.random.default_rng(6).random(shape) < 0.5).astype(np.float32) * 2
    np.testing.assert_array_equal(Tensor(x).nonzero().numpy(), torch.tensor(x).nonzero().numpy())
    assert Tensor.zeros(2, 3).nonzero().shape == (0, 2)
    np.testing.assert_array_equal(Tensor([True, False, True]).nonzero().numpy(), [[0], [2]])

# ================================================================ sorting
@pytest.mark.parametrize("shape,dim", [((8,), 0), ((5,), -1), ((3, 7), 1), ((7, 3), 0), ((2, 3, 5), 1), ((1,), 0), ((4, 1), 1), ((2, 17), -1)])
@pytest.mark.parametrize("descending", [False, True])
def test_sort(shape, dim, descending):
    helper_test_op([shape], lambda x: x.sort(dim, descending)[0], lambda x: x.sort(dim, descending)[0])
    helper_test_op([shape], lambda x: x.sort(dim, descending)[1], lambda x: x.sort(dim, descending)[1], forward_only=True)

@pytest.mark.parametrize("descending", [False, True])
def test_sort_ties_stable(descending):
    x = np.array([[3, 1, 2, 1, 3, 3, 0, 1, 2], [1, 1, 1, 1, 1, 1, 1, 1, 1]], dtype=np.float32)
    tv, ti = torch.tensor(x).sort(dim=-1, descending=descending, stable=True)
    fv, fi = Tensor(x).sort(-1, descending)
    np.testing.assert_array_equal(fv.numpy(), tv.numpy())
    np.testing.assert_array_equal(fi.numpy(), ti.numpy())
    assert fi.dtype == dtypes.int32

@pytest.mark.parametrize("descending", [False, True])
def test_sort_ints_infs_nans(descending):
    xi = np.array([5, -3, 2147483647, -2147483648, 0, 7], dtype=np.int32)
    tv, ti = torch.tensor(xi).sort(dim=-1, descending=descending, stable=True)
    fv, fi = Tensor(xi).sort(descending=descending)
    np.testing.assert_array_equal(fv.numpy(), tv.numpy()); np.testing.assert_array_equal(fi.numpy(), ti.numpy())
    xf = np.array([np.nan, 1.0, np.inf, -np.inf, np.nan, 0.0, np.inf], dtype=np.float32)
    tv, ti = torch.tensor(xf).sort(dim=-1, descending=descending, stable=True)
    fv, fi = Tensor(xf).sort(descending=descending)
    np.testing.assert_array_equal(fv.numpy(), tv.numpy()); np.testing.assert_array_equal(fi.numpy(), ti.numpy())

def test_sort_permuted_and_argsort():
    helper_test_op([(4, 6)], lambda x: x.T.sort(1)[0], lambda x: x.T.sort(1)[0])
    x = np.random.default_rng(7).random((3, 6)).astype(np.float32)
    np.testing.assert_array_equal(Tensor(x).argsort(0, descending=True).numpy(), torch.tensor(x).argsort(0, descending=True).numpy())
    with pytest.raises(IndexError): Tensor(x).sort(2)

@pytest.mark.parametrize("k,dim,largest", [(1, -1, True), (3, -1, True), (2, 0, False), (5, 1, False), (0, 1, True)])
def test_topk(k, dim, largest):
    helper_test_op([(4, 5)], lambda x: x.topk(k, dim, largest)[0], lambda x: x.topk(k, dim, largest)[0])
    helper_test_op([(4, 5)], lambda x: x.topk(k, dim, largest)[1], lambda x: x.topk(k, dim, largest)[1], forward_only=True)

def test_topk_errors_and_sorted_kw():
    with pytest.raises(ValueError): Tensor.empty(3).topk(4)
    v, i = Tensor([1.0, 5.0, 3.0]).topk(2, sorted=True)
    assert v.tolist() == [5.0, 3.0] and i.tolist() == [1, 2]

# ================================================================ random
def test_multinomial_with_replacement_distribution():
    Tensor.manual_seed(0)
    w = Tensor([0.0, 1.0, 3.0, 0.0])
    s = w.multinomial(4000, replacement=True).numpy()
    assert s.shape == (4000,) and set(np.unique(s)) <= {1, 2}
    assert abs((s == 2).mean() - 0.75) < 0.04

def test_multinomial_2d_and_without_replacement():
    Tensor.manual_seed(1)
    s = Tensor([[1.0, 0.0, 0.0], [0.0, 0.0, 2.0]]).multinomial(3, replacement=True)
    assert s.shape == (2, 3) and s.dtype == dtypes.int32
    np.testing.assert_array_equal(s.numpy(), [[0, 0, 0], [2, 2, 2]])
    s = Tensor([[1.0, 2.0, 3.0, 4.0, 0.0]]).multinomial(4, replacement=False).numpy()
    assert sorted(s[0].tolist()) == [0, 1, 2, 3]
    # first draw without replacement follows the weights
    firsts = Tensor([1.0, 3.0]).reshape(1, 2).expand(3000, 2).contiguous().multinomial(1).numpy()
    assert abs((firsts == 1).mean() - 0.75) < 0.04
    with pytest.raises(RuntimeError): Tensor([1.0, 2.0]).multinomial(3)
    with pytest.raises(RuntimeError): Tensor.ones(2, 2, 2).multinomial(1)

def test_randperm():
    Tensor.manual_seed(2)
    p = Tensor.randperm(20)
    assert p.dtype == dtypes.int32 and sorted(p.tolist()) == list(range(20))
    assert p.tolist() != list(range(20))
    assert Tensor.randperm(5, dtype=dtypes.int64).dtype == dtypes.int64
    assert Tensor.randperm(0).shape == (0,)

# ================================================================ einsum
@pytest.mark.parametrize("formula,shapes", [
    ("ij,jk->ik", [(2, 3), (3, 4)]), ("ij,jk", [(2, 3), (3, 4)]), ("i,i", [(5,), (5,)]), ("i,j->ij", [(3,), (4,)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]), ("ij->ji", [(3, 4)]), ("ij->", [(3, 4)]), ("ii->i", [(3, 3)]), ("ii", [(4, 4)]),
    ("ijk,ikl,ilm->ijm", [(2, 2, 3), (2, 3, 2), (2, 2, 3)]), ("...ij,...jk->...ik", [(2, 3, 2, 3), (3, 3, 2)]),
    ("i...->...", [(2, 3, 4)]), ("ba,cb", [(3, 2), (4, 3)]), ("ij,ij->ij", [(1, 3), (2, 3)]), ("b i j , b j -> b i", [(2, 3, 4), (2, 4)]),
    ("...", [(2, 3)]),
])
def test_einsum(formula, shapes):
    helper_test_op(shapes, lambda *xs: torch.einsum(formula, *xs), lambda *xs: Tensor.einsum(formula, *xs), atol=1e-5)

def test_einsum_list_operands_and_errors():
    a, b = Tensor.ones(2, 3), Tensor.ones(3, 2)
    assert Tensor.einsum("ij,jk->ik", [a, b]).tolist() == [[3.0, 3.0], [3.0, 3.0]]
    with pytest.raises(ValueError): Tensor.einsum("ij,jk->ik", a)                     # operand count
    with pytest.raises(RuntimeError): Tensor.einsum("ij,jk->ik", a, Tensor.ones(2, 2))  # size mismatch
    with pytest.raises(RuntimeError): Tensor.einsum("ijk->i", a)                        # ndim mismatch
    with pytest.raises(RuntimeError): Tensor.einsum("ij->z", a)                         # unknown output letter

# ================================================================ interpolate
@pytest.mark.parametrize("in_shape,size,mode,align", [
    ((1, 1, 5), (8,), "linear", False), ((1, 2, 5), (3,), "linear", True), ((2, 1, 4, 5), (7, 3), "bilinear", False),
    ((1, 2, 4, 5), (2, 9), "bilinear", True), ((1, 1, 3, 4, 2), (5, 2, 3), "trilinear", False), ((1, 1, 6), (1,), "linear", True),
    ((1, 2, 5), (8,), "nearest", False), ((1, 1, 4, 6), (7, 3), "nearest", False), ((1, 1, 4, 6), (7, 3), "nearest-exact", False),
    ((1, 1, 1, 1), (3, 2), "bilinear", False),
])
def test_interpolate(in_shape, size, mode, align):
    kw = {"align_corners": align} if mode not in ("nearest", "nearest-exact") else {}
    helper_test_op([in_shape], lambda x: F.interpolate(x, size=size, mode=mode, **kw), lambda x: x.interpolate(size, mode=mode, **kw), atol=1e-5)

def test_interpolate_errors():
    with pytest.raises(NotImplementedError): Tensor.empty(1, 1, 4).interpolate((2,), mode="cubic")
    with pytest.raises(ValueError): Tensor.empty(1, 1, 4).interpolate((2,), mode="nearest", align_corners=True)
    with pytest.raises(ValueError): Tensor.empty(1, 1, 4).interpolate((0,))

# ================================================================ movement helpers
@pytest.mark.parametrize("shape,repeats", [((3,), (2,)), ((2, 3), (2, 1)), ((2, 3), (1, 3, 2)), ((1, 2), (3, 1)), ((2,), (0,))])
def test_repeat(shape, repeats):
    helper_test_op([shape], lambda x: x.repeat(*repeats), lambda x: x.repeat(*repeats))

def test_repeat_errors():
    with pytest.raises(ValueError): Tensor.empty(2, 3).repeat(2)

@pytest.mark.parametrize("repeats,dim", [(2, None), (3, 0), (2, 1), (1, -1), (0, 1)])
def test_repeat_interleave(repeats, dim):
    helper_test_op([(2, 3)], lambda x: x.repeat_interleave(repeats, dim), lambda x: x.repeat_interleave(repeats, dim))

def test_repeat_interleave_per_element():
    helper_test_op([(3, 2)], lambda x: x.repeat_interleave(torch.tensor([1, 0, 2]), 0), lambda x: x.repeat_interleave([1, 0, 2], 0))

@pytest.mark.parametrize("sizes,dim", [(2, 0), (3, 1), ([1, 3, 1], 1), (5, -1), ([0, 5], 1), (1, 0)])
def test_split(sizes, dim):
    for k in range(len(torch.ones(4, 5).split(sizes, dim))):
        helper_test_op([(4, 5)], lambda x: x.split(sizes, dim)[k], lambda x: x.split(sizes, dim)[k])
    assert len(Tensor.ones(4, 5).split(sizes, dim)) == len(torch.ones(4, 5).split(sizes, dim))

def test_split_errors():
    with pytest.raises(RuntimeError): Tensor.empty(4).split([1, 2])
    with pytest.raises(IndexError): Tensor.empty(4).split(2, 1)

@pytest.mark.parametrize("n,chunks,dim", [(6, 3, 0), (7, 3, 0), (5, 2, 1), (6, 4, 1), (3, 5, 0)])
def test_chunk(n, chunks, dim):
    shape = (n, 2) if dim == 0 else (2, n)
    want = torch.ones(shape).chunk(chunks, dim)
    got = Tensor.ones(*shape).chunk(chunks, dim)
    assert [t.shape for t in got] == [tuple(t.shape) for t in want]
    for k in range(len(want)): helper_test_op([shape], lambda x: x.chunk(chunks, dim)[k], lambda x: x.chunk(chunks, dim)[k])
    with pytest.raises(RuntimeError): Tensor.ones(3).chunk(0)

@pytest.mark.parametrize("shape,dim,size,step", [((7,), 0, 3, 2), ((4, 5), 1, 2, 1), ((4, 5), 0, 4, 3), ((3, 4, 2), -2, 1, 2), ((5,), 0, 5, 1), ((4, 3), 0, 0, 2)])
def test_unfold(shape, dim, size, step):
    helper_test_op([shape], lambda x: x.unfold(dim, size, step), lambda x: x.unfold(dim, size, step))

def test_unfold_errors():
    with pytest.raises(RuntimeError): Tensor.empty(3).unfold(0, 4, 1)
    with pytest.raises(RuntimeError): Tensor.empty(3).unfold(0, 2, 0)

@pytest.mark.parametrize("indexing", ["ij", "xy"])
def test_meshgrid(indexing):
    for k in range(3):
        helper_test_op([(3,), (4,), (2,)], lambda *xs: torch.meshgrid(*xs, indexing=indexing)[k], lambda *xs: Tensor.meshgrid(*xs, indexing=indexing)[k])
    a, b = Tensor([1, 2]).meshgrid(Tensor([3, 4, 5]), indexing=indexing)
    ta, tb = torch.meshgrid(torch.tensor([1, 2]), torch.tensor([3, 4, 5]), indexing=indexing)
    np.testing.assert_array_equal(a.numpy(), ta.numpy()); np.testing.assert_array_equal(b.numpy(), tb.numpy())
    with pytest.raises(RuntimeError): Tensor.meshgrid(Tensor([1]), indexing="ji")

@pytest.mark.parametrize("shifts,dims", [(1, 0), (-2, 1), (7, 1), ((1, 2), (0, 1)), (3, None), (0, 0), ((1, -1), (1, -1))])
def test_roll(shifts, dims):
    helper_test_op([(3, 4)], lambda x: torch.roll(x, shifts, dims), lambda x: x.roll(shifts, dims))

def test_roll_errors():
    with pytest.raises(RuntimeError): Tensor.empty(3, 4).roll((1, 2), 0)

@pytest.mark.parametrize("formula,shape,sizes,target", [
    ("a b -> b a", (2, 3), {}, lambda x: x.T),
    ("b (h w) c -> b c h w", (2, 6, 4), {"h": 2}, lambda x: x.reshape(2, 2, 3, 4).permute(0, 3, 1, 2)),
    ("b c h w -> b (c h w)", (2, 3, 2, 2), {}, lambda x: x.reshape(2, 12)),
    ("b c h w -> (b h) (w c)", (2, 3, 2, 4), {}, lambda x: x.permute(0, 2, 3, 1).reshape(4, 12)),
    ("... c -> c ...", (2, 3, 4), {}, lambda x: x.permute(2, 0, 1)),
    ("a ... -> (a ...)", (2, 3, 4), {}, lambda x: x.reshape(24)),
    ("a b -> a 1 b", (2, 3), {}, lambda x: x.reshape(2, 1, 3)),
    ("a 1 b -> b a", (2, 1, 3), {}, lambda x: x.reshape(2, 3).T),
    ("(a b) c -> a b c", (6, 2), {"a": 3, "b": 2}, lambda x: x.reshape(3, 2, 2)),
    ("a b c -> (c a) b", (2, 3, 4), {}, lambda x: x.permute(2, 0, 1).reshape(8, 3)),
])
def test_rearrange(formula, shape, sizes, target):
    helper_test_op([shape], target, lambda x: x.rearrange(formula, **sizes))

def test_rearrange_errors():
    x = Tensor.empty(2, 6)
    with pytest.raises(IndexError): x.rearrange("a b c -> a b c")            # wrong number of dims
    with pytest.raises(RuntimeError): x.rearrange("a b -> a")                  # names differ
    with pytest.raises(RuntimeError): x.rearrange("a (b c) -> a b c")          # can't infer two sizes
    with pytest.raises(ValueError): x.rearrange("a (b c) -> a b c", b=4)     # doesn't divide
    with pytest.raises(ValueError): x.rearrange("a b -> b a", a=3)           # wrong size
    with pytest.raises(ValueError): x.rearrange("a b")                       # no arrow
    with pytest.raises(ValueError): x.rearrange("a (b -> a b")               # bad parentheses

# ================================================================ linear algebra
@pytest.mark.parametrize("shape", [(3, 3), (4, 3), (5, 2), (2, 3, 3), (2, 4), (1, 1)])
def test_qr(shape):
    x = np.random.default_rng(8).standard_normal(shape).astype(np.float32)
    Q, R = Tensor(x).qr()
    m, n = shape[-2], shape[-1]
    assert Q.shape == (*shape[:-2], m, m) and R.shape == shape
    tq, tr = torch.linalg.qr(torch.tensor(x), mode="complete")
    # LAPACK's Householder sign convention: R's diagonal equals torch's, so Q and R match up to rounding
    np.testing.assert_allclose(R.numpy(), tr.numpy(), atol=1e-4, rtol=1e-4)
    np.testing.assert_allclose(Q.numpy()[..., :min(m, n)], tq.numpy()[..., :min(m, n)], atol=1e-4, rtol=1e-4)
    np.testing.assert_allclose((Q @ R).numpy(), x, atol=1e-4)
    np.testing.assert_allclose((Q.transpose(-1, -2) @ Q).numpy(), np.broadcast_to(np.eye(m), Q.shape), atol=1e-5)

def test_qr_gradient():
    # R is differentiable; compare the gradient of R with torch (square, full rank)
    helper_test_op([(3, 3)], lambda x: torch.linalg.qr(x)[1], lambda x: x.qr()[1], atol=1e-4, grad_atol=1e-3, grad_rtol=1e-2)

def test_qr_zero_column_and_errors():
    x = np.array([[0.0, 1.0], [0.0, 2.0], [0.0, 0.0]], dtype=np.float32)
    Q, R = Tensor(x).qr()
    np.testing.assert_allclose((Q @ R).numpy(), x, atol=1e-5)
    assert np.isfinite(Q.numpy()).all()
    with pytest.raises(RuntimeError): Tensor([1.0]).qr()

@pytest.mark.parametrize("shape", [(3, 3), (4, 3), (3, 5), (2, 4, 4), (1, 1), (5, 1)])
def test_svd(shape):
    x = np.random.default_rng(9).standard_normal(shape).astype(np.float32)
    U, S, Vh = Tensor(x).svd()
    tu, ts, tvh = torch.linalg.svd(torch.tensor(x))
    k = min(shape[-2:])
    assert U.shape == tu.shape and S.shape == ts.shape and Vh.shape == tvh.shape
    np.testing.assert_allclose(S.numpy(), ts.numpy(), atol=1e-4, rtol=1e-4)
    u, vh = U.numpy(), Vh.numpy()
    recon = (u[..., :, :k] * S.numpy()[..., None, :]) @ vh[..., :k, :]
    np.testing.assert_allclose(recon, x, atol=1e-4)
    np.testing.assert_allclose(np.swapaxes(u, -1, -2) @ u, np.broadcast_to(np.eye(u.shape[-1]), u.shape), atol=1e-4)
    np.testing.assert_allclose(vh[..., :k, :] @ np.swapaxes(vh[..., :k, :], -1, -2), np.broadcast_to(np.eye(k), vh.shape[:-2] + (k, k)), atol=1e-4)
    # singular vectors agree with torch up to sign (distinct singular values)
    dots = np.abs(np.sum(u[..., :, :k] * tu.numpy()[..., :, :k], axis=-2))
    np.testing.assert_allclose(dots, 1.0, atol=1e-3)

def test_svd_reduced_and_gradient():
    x = np.random.default_rng(10).standard_normal((4, 2)).astype(np.float32)
    U, S, Vh = Tensor(x).svd(full_matrices=False)
    assert U.shape == (4, 2) and Vh.shape == (2, 2)
    np.testing.assert_allclose(((U.numpy() * S.numpy()) @ Vh.numpy()), x, atol=1e-4)
    # the singular values are differentiable
    helper_test_op([(3, 3)], lambda x: torch.linalg.svdvals(x), lambda x: x.svd()[1], atol=1e-4, grad_atol=1e-3, grad_rtol=1e-2)
    with pytest.raises(RuntimeError): Tensor([1.0, 2.0]).svd()

# ================================================================ matmul/dot through the mixin-built ops
def test_matmul_shape_mismatch_is_clear():
    with pytest.raises(RuntimeError): Tensor.empty(2, 3) @ Tensor.empty(2, 3)
