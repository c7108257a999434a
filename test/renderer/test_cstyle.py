"""The C renderer (CPU device): float16 arithmetic rounds to half after every op, as torch and numpy do and as the
other backends do, even where the C compiler would keep an inlined _Float16 chain in float ("excess precision")."""
from __future__ import annotations
import numpy as np
import torch
from fusegrad import Tensor, dtypes
from fusegrad.renderer.cstyle import ClangRenderer
from fusegrad.uop.ops import UOp, Ops

def test_fused_half_chain_rounds_after_each_op():
    # a = 1 + 3/1024 (a half); a*a = 1 + 6/1024 + 9/2**20 rounds to 1 + 6/1024, so a*a - 1 is 6/1024 exactly. Kept
    # in float (or fused into an fma), the product would not round: 6/1024 + 9/2**20, a different half.
    a, c = np.full(3, 1 + 3 / 1024, dtype=np.float16), np.full(3, -1, dtype=np.float16)
    got = (Tensor(a, device="CPU") * Tensor(a, device="CPU") + Tensor(c, device="CPU")).numpy()
    want = a * a + c
    assert got.dtype == np.float16
    np.testing.assert_array_equal(got, want)
    assert got[0] == np.float16(6 / 1024)

def test_half_stored_and_recomputed_agree():
    # the same half expression, stored by one kernel and recomputed inside another, must be bit-identical: the
    # max's backward compares them (a mismatch used to give 0/0 = NaN gradients)
    rng = np.random.default_rng(0)
    x = Tensor(rng.standard_normal((4, 33)).astype(np.float16), device="CPU", requires_grad=True)
    y = (x.abs() * 1.37 + 0.11).softmax(1)
    y.max().backward()
    grad = x.grad.numpy()
    assert not np.isnan(grad).any()
    xt = torch.tensor(x.numpy(), requires_grad=True)
    (xt.abs() * 1.37 + 0.11).softmax(1).amax().backward()
    np.testing.assert_allclose(grad.astype(np.float64), xt.grad.numpy().astype(np.float64), atol=3e-3)

def test_render_wraps_half_arithmetic_only():
    renderer = ClangRenderer()
    a, b = UOp(Ops.CONST, dtypes.float16, (), 1.0), UOp(Ops.CONST, dtypes.float16, (), 2.0)
    assert renderer.render_alu(a * b, ["a", "b"]) == "((_Float16)(a*b))"
    assert renderer.render_alu(a.alu(Ops.CMPLT, b), ["a", "b"]) == "(a<b)"          # a bool, not a half
    assert renderer.render_alu(a.maximum(b), ["a", "b"]).count("_Float16") == 0    # picks an existing half
    f = UOp(Ops.CONST, dtypes.float32, (), 1.0)
    assert renderer.render_alu(f * f, ["a", "b"]) == "(a*b)"
