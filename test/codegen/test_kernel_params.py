"""A kernel keeps one parameter per buffer slot even when simplification drops every use of a buffer.

Callers pass a kernel's buffers by slot; when ``c.where(x, x)`` folds to ``x`` (or a shrink of a cat
reads only one operand) the dropped buffer's parameter used to vanish from the C signature, so every
later buffer arrived one parameter early: silently wrong values (found by test/test_fuzz_ops.py)."""
import numpy as np
import pytest
import torch
from fusegrad import Tensor, dtypes, Device
from fusegrad.codegen import get_program

DEVICES = ["CPU", "PYTHON"]

@pytest.mark.parametrize("device", DEVICES)
def test_where_with_equal_branches(device):
    x = Tensor([1.0, 2.0, 3.0, 4.0], device=device)
    np.testing.assert_array_equal(Tensor([False, True, False, True], device=device).where(x, x).numpy(), [1, 2, 3, 4])

@pytest.mark.parametrize("device", DEVICES)
def test_slice_of_a_cat_reads_the_right_operand(device):
    a, b = Tensor([1.0, 2.0], device=device), Tensor([3.0, 4.0], device=device)
    np.testing.assert_array_equal(a.cat(b)[2:4].numpy(), [3, 4])
    m, n = np.arange(6, dtype=np.float32).reshape(2, 3), np.arange(6, 12, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(Tensor(m, device=device).cat(Tensor(n, device=device), dim=1)[:, 3:6].numpy(), n)
    np.testing.assert_array_equal(a.cat(b)[1::2].numpy(), [2, 4])

@pytest.mark.parametrize("device", DEVICES)
def test_gradient_of_a_cat_slice(device):
    a = Tensor([1.0, 2.0], device=device, requires_grad=True)
    b = Tensor([3.0, 4.0], device=device, requires_grad=True)
    (a.cat(b)[2:4] * Tensor([5.0, 6.0], device=device)).sum().backward()
    np.testing.assert_array_equal(a.grad.numpy(), [0, 0])
    np.testing.assert_array_equal(b.grad.numpy(), [5, 6])

def test_int_prod_fused_with_a_consumer():
    x = Tensor(np.arange(8, dtype=np.int32).reshape(2, 4))
    c = (x > x).cast(dtypes.int32)
    np.testing.assert_array_equal((c + c.prod(axis=1, keepdim=True)).numpy(), np.zeros((2, 4), np.int32))

def test_argmax_chain():
    t = Tensor([[[1.0]], [[2.0]]])
    assert t.argmax(axis=1, keepdim=True).argmax(axis=1).argmax(axis=0).tolist() == [0]

def test_gradient_through_max_then_index_is_zero_not_nan():
    data = np.arange(12, dtype=np.float32).reshape(3, 4)
    x = Tensor(data, requires_grad=True)
    (x.max(axis=0)[Tensor([1], dtype=dtypes.int32)] * 0).sum().backward()
    reference = torch.tensor(data, requires_grad=True)
    (reference.amax(0)[torch.tensor([1])] * 0).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), reference.grad.numpy())

def test_signature_declares_every_slot():
    x, c = Tensor.empty(4), Tensor.empty(4, dtype=dtypes.bool)
    item = c.where(x, x).schedule()[-1]
    source = get_program(item.ast, Device["CPU"].renderer).src
    assert all(f"data{slot}" in source for slot in range(len(item.bufs)))

@pytest.mark.parametrize("device", DEVICES)
def test_dropped_slot_of_an_emulated_dtype(device):
    """bfloat16 buffers are emulated as 16-bit ints by lowering: a dropped one is still declared (as bytes)."""
    c, b = Tensor([True, False], device=device), Tensor([1.5, 2.5], dtype=dtypes.bfloat16, device=device)
    assert c.where(b, b).contiguous().float().tolist() == [1.5, 2.5]
    assert (b - 1).contiguous().float().tolist() == [0.5, 1.5]
