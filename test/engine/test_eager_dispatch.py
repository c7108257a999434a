"""Eager dispatch (issue 19): a small op realized again and again reuses its schedule and kernel, builds
its literal operand from a cache, and the per-realize bookkeeping does not grow with unrelated live
tensors. Each test checks the values too, against numpy."""
import math
import numpy as np
import pytest
from fusegrad import Tensor, dtypes
from fusegrad import schedule as schedule_module
from fusegrad.schedule import schedule_cache_stats
from fusegrad.engine import realize
from fusegrad.uop.ops import Ops

def test_repeated_eager_op_reuses_its_schedule_and_kernel(monkeypatch):
    x = Tensor(np.arange(16, dtype=np.float32) * 0.5).realize()
    first = (x + 3.75).realize()   # schedules (or finds) this structure once
    hits, misses = schedule_cache_stats.hits, schedule_cache_stats.misses
    # nothing may be scheduled or generated again: the cache must answer every later call
    monkeypatch.setattr(schedule_module, "_create_schedule", lambda roots: pytest.fail("scheduled again"))
    monkeypatch.setattr(realize.codegen, "get_program", lambda *a, **k: pytest.fail("generated again"))
    results = [(x + 3.75).realize() for _ in range(4)]
    assert (schedule_cache_stats.hits - hits, schedule_cache_stats.misses - misses) == (4, 0)
    expected = np.arange(16, dtype=np.float32) * 0.5 + 3.75
    for r in [first, *results]: np.testing.assert_array_equal(r.numpy(), expected)
    # each call got its own output buffer
    assert len({r.uop.base for r in results}) == 4

def test_repeated_assign_reuses_its_schedule():
    x = Tensor.zeros(8).contiguous().realize()
    x.assign(x + 1).realize()
    hits, misses = schedule_cache_stats.hits, schedule_cache_stats.misses
    for _ in range(3): x.assign(x + 1).realize()
    assert (schedule_cache_stats.hits - hits, schedule_cache_stats.misses - misses) == (3, 0)
    np.testing.assert_array_equal(x.numpy(), np.full(8, 4, np.float32))

@pytest.mark.parametrize("first,second", [(0.0, -0.0), (-0.0, 0.0)])
def test_schedule_cache_tells_zero_from_negative_zero(first, second):
    # the structure key once compared constants with ==, so x / -0.0 reused the kernel of x / 0.0
    x = Tensor([1.0, -2.0]).realize()
    with np.errstate(divide="ignore"):
        for divisor in (first, second):
            np.testing.assert_array_equal((x / divisor).numpy(), np.array([1.0, -2.0], np.float32) / np.float32(divisor))

def test_schedule_cache_tells_int_from_bool_constants():
    x = Tensor([3, 4], dtype=dtypes.uint8).realize()
    np.testing.assert_array_equal((x << 1).numpy(), [6, 8])
    np.testing.assert_array_equal((x ^ True).numpy(), [2, 5])
    np.testing.assert_array_equal((x ^ 1).numpy(), [2, 5])

@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.float16, dtypes.int8, dtypes.uint32, dtypes.int64, dtypes.bool])
@pytest.mark.parametrize("value", [1, -3, 2**40, 0.5, -0.0, float("inf"), float("nan")])
@pytest.mark.parametrize("op", ["__add__", "__rsub__", "__mul__", "__truediv__", "__lt__", "maximum"])
def test_literal_operand_builds_the_general_paths_graph(monkeypatch, dtype, value, op):
    # the literal fast path (Tensor._broadcast_scalar) must give the very node the general path builds:
    # a constant tensor, cast, reshaped and expanded (UOps are interned, so equal graphs are one object)
    x = Tensor.ones(2, 3, dtype=dtype).contiguous()
    def build():
        try: return getattr(x, op)(value).uop
        except Exception as e: return type(e)
    fast = build()
    monkeypatch.setattr(Tensor, "_broadcast_scalar", lambda self, v: None)
    assert build() is fast

def test_literal_operands_keep_their_sign_and_type():
    x = Tensor([2.0, 3.0]).realize()
    positive, negative = (x * 0.0).uop, (x * -0.0).uop
    constants = [next(u for u in node.toposort if u.op is Ops.CONST) for node in (positive, negative)]
    assert [math.copysign(1.0, c.arg) for c in constants] == [1.0, -1.0]
    i = Tensor([5, 6], dtype=dtypes.int32).realize()
    assert (i + 2).dtype == dtypes.int32 and (i + 2.5).dtype == dtypes.default_float
    np.testing.assert_array_equal((i + 2.5).numpy(), [7.5, 8.5])

def _is_float_calls_per_realize(monkeypatch, live: int) -> int:
    keep = [Tensor.ones(4, 4).contiguous().realize() for _ in range(live)]
    lazy = keep[0] * 2 if keep else None   # a pending graph over a realized tensor: must stay as it is
    x = Tensor.ones(16).contiguous().realize()
    (x + 1).realize()
    calls = []
    real = dtypes.is_float
    monkeypatch.setattr(dtypes, "is_float", staticmethod(lambda d: calls.append(d) or real(d)))
    y = (x + 1).realize()
    monkeypatch.setattr(dtypes, "is_float", staticmethod(real))
    np.testing.assert_array_equal(y.numpy(), np.full(16, 2, np.float32))
    if lazy is not None: np.testing.assert_array_equal(lazy.numpy(), np.full((4, 4), 2, np.float32))
    return len(calls)

def test_realize_bookkeeping_does_not_grow_with_unrelated_tensors(monkeypatch):
    # after a realize every live tensor is looked at once, but only tensors in the realized graph are
    # asked autograd questions (their dtype, whether they need a gradient)
    assert _is_float_calls_per_realize(monkeypatch, 0) == _is_float_calls_per_realize(monkeypatch, 200)

def test_realize_still_updates_lazy_tensors_built_on_the_realized_graph():
    x = Tensor([1.0, 2.0]).realize()
    y = x * 3
    z, w = y + 1, (y * 2).sum()
    y.realize()
    assert y.uop.base.op is Ops.BUFFER
    # z and w now read y's buffer instead of recomputing y
    assert any(u is y.uop.base for u in z.uop.toposort) and any(u is y.uop.base for u in w.uop.toposort)
    np.testing.assert_array_equal(z.numpy(), [4.0, 7.0])
    assert w.item() == 18.0

def test_gradient_through_an_eagerly_realized_op():
    x = Tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = (x * x).realize()
    (y + 1.5).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 4.0, 6.0])
    v = Tensor([4.0, 5.0]).realize()
    u = (v * 0.5).realize()
    (grad,) = u.sum().gradient(v)
    np.testing.assert_array_equal(grad.numpy(), [0.5, 0.5])
