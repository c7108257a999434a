"""Realized tensors keep the graph they came from (their *origin*) so gradient() still works through them; an origin
recorded only for gradient() (no requires_grad=True tensor in the graph) must not pin the buffers it reads once no
tensor it could differentiate to is alive (issue 35): `x = (x + 1).realize()` in a loop kept every step's buffer
(+4 KB an iteration for 1000 floats). Origins that reach requires_grad=True tensors keep what backward() needs.
Values and gradients are checked against numpy / closed forms."""
from __future__ import annotations
import gc
import numpy as np
from fusegrad import Tensor
from fusegrad.buffers import BUFFERS
from fusegrad.gradient import origin_of
from fusegrad.helpers import GlobalCounters

def live_buffers() -> tuple[int, int]:
    """(allocated buffers reachable from BUFFER uops, bytes the allocator has handed out), after a full collection."""
    gc.collect()
    return sum(1 for b in list(BUFFERS.values()) if b.is_allocated()), GlobalCounters.mem_used

def test_realize_loop_without_grad_keeps_a_bounded_number_of_buffers():
    x = Tensor.zeros(1000).contiguous().realize()
    counts = []
    for i in range(60):
        x = (x + 1).realize()
        if i in (19, 59): counts.append(live_buffers())
    assert counts[0] == counts[1], f"buffers and bytes after 20 and 60 steps: {counts}"
    np.testing.assert_array_equal(x.numpy(), np.full(1000, 60, np.float32))

def test_realize_loop_of_two_tensors_together_keeps_a_bounded_number_of_buffers():
    # two tensors realized in one schedule: the general origin walk, not the eager one
    a, b = Tensor.ones(500).contiguous().realize(), Tensor.full((500,), 2.0).contiguous().realize()
    counts = []
    for i in range(40):
        new_a, new_b = (a * 0.5 + b * 0.25), (a - b) * 0.5
        Tensor.realize(new_a, new_b)   # (while the previous step's tensors live: their graphs get origins)
        a, b = new_a, new_b
        if i in (9, 39): counts.append(live_buffers())
    assert counts[0] == counts[1], f"buffers and bytes after 10 and 40 steps: {counts}"
    ra, rb = np.ones(500, np.float32), np.full(500, 2.0, np.float32)
    for _ in range(40): ra, rb = ra * np.float32(0.5) + rb * np.float32(0.25), (ra - rb) * np.float32(0.5)
    np.testing.assert_allclose(a.numpy(), ra, rtol=1e-6)
    np.testing.assert_allclose(b.numpy(), rb, rtol=1e-6)

def test_gradient_to_a_live_start_of_the_loop_still_flows():
    # the first tensor stays alive: every step's graph can still be differentiated back to it
    start = Tensor([1.0, 2.0, 3.0]).realize()
    x = start
    for _ in range(5): x = (x * 1.5).realize()
    np.testing.assert_allclose(x.sum().gradient(start)[0].numpy(), np.full(3, 1.5 ** 5, np.float32), rtol=1e-6)

def test_gradient_to_a_middle_step_that_is_still_alive():
    x = Tensor([0.5, -1.0]).realize()
    kept = None
    for i in range(6):
        x = (x * x + 1).realize()
        if i == 2: kept = x
    # d/dk of f(f(f(k))), f(v) = v*v + 1, at the kept value
    k = kept.numpy().astype(np.float64)
    v1 = k * k + 1
    v2 = v1 * v1 + 1
    expected = (2 * v2) * (2 * v1) * (2 * k)
    np.testing.assert_allclose(x.sum().gradient(kept)[0].numpy(), expected, rtol=1e-5)

def test_another_tensor_on_the_same_uop_keeps_the_origin():
    # contiguous() of a realized tensor is a second tensor on the same uop: the first one dying doesn't end gradient()
    x = Tensor([1.0, 2.0, 3.0]).realize()
    o = (x * x).sum().realize()
    same = x.contiguous()
    del x
    for _ in range(3): (o * 1).realize()   # later realizes read o's buffer: its origin is checked for liveness
    np.testing.assert_allclose(o.gradient(same)[0].numpy(), [2.0, 4.0, 6.0])

def test_requires_grad_chain_keeps_what_backward_needs():
    w = Tensor([1.0, -2.0, 0.5], requires_grad=True)
    h = w
    for _ in range(5):
        h = (h * h.detach().abs().sqrt() + h).realize()   # each step's origin reads the previous step's buffer
    h.sum().backward()
    ref = np.array([1.0, -2.0, 0.5], np.float64)
    grad = np.ones(3)
    for _ in range(5):
        grad = grad * (np.sqrt(np.abs(ref)) + 1)
        ref = ref * np.sqrt(np.abs(ref)) + ref
    np.testing.assert_allclose(h.numpy(), ref, rtol=1e-5)
    np.testing.assert_allclose(w.grad.numpy(), grad, rtol=1e-5)

def test_dropped_origins_are_only_those_without_live_targets():
    x = Tensor([2.0, 3.0]).realize()
    y = (x * 3).realize()
    z = (y + 1).realize()   # z's origin reads y; y's reads x
    del x
    (z * 2).realize()       # reads z: z's origin still differentiates to y (alive), so it stays
    assert origin_of(z.uop.base) is not None
    np.testing.assert_allclose(z.sum().gradient(y)[0].numpy(), [1.0, 1.0])
