"""The schedule cache (issue 19): a graph whose structure was scheduled before is instantiated from the cached
template. What the template gives (the kernels' buffers and ``becomes``, the map the front end applies to its
tensors) must be what scheduling the graph afresh gives, for every kind of root result: a new buffer, a view of
an assigned buffer, a constant, several roots, realized intermediates."""
import numpy as np
import pytest
from fusegrad import Tensor
from fusegrad import schedule as schedule_module
from fusegrad.schedule import create_schedule, schedule_cache_stats
from fusegrad.uop.ops import UOp, Ops, GroupOp

def _describe(items, becomes, roots: list[UOp]) -> tuple:
    """Items and ``becomes`` with every buffer named by where it comes from: its position in the graph's
    toposort (an existing buffer) or the order it first appears in the items (a new one)."""
    order = list(UOp(Ops.SINK, src=tuple(roots)).toposort)
    position = {u: i for i, u in enumerate(order)}
    new_names: dict[UOp, int] = {}
    def name(buffer: UOp):
        if buffer in position: return ("graph", position[buffer])
        return ("new", new_names.setdefault(buffer, len(new_names)))
    def view(u: UOp):
        chain = []
        while u.op in GroupOp.Movement: chain, u = [(u.op, u.arg)] + chain, u.src[0]
        return (name(u) if u.op is Ops.BUFFER else u, tuple(chain))
    described_items = [(item.ast, tuple(name(b) for b in item.buffer_uops), item.var_vals,
                        frozenset(name(b) for b in item.raw_reads), tuple(name(b) for b in item.assigns)) for item in items]
    # (in any order: the map is applied as a substitution. A node simplification made is in no tensor's graph: a
    # fresh schedule may list it, a cached one doesn't)
    described_becomes = {position[node]: view(new) for node, new in becomes.items() if node in position}
    return described_items, described_becomes

def _builders():
    def new_buffer(): return [(Tensor.arange(6).float().contiguous().realize() + 1).uop]
    def reduce_and_elementwise():
        x = Tensor(np.arange(12, dtype=np.float32).reshape(3, 4)).realize()
        s = (x * 2).sum(axis=1)
        return [s.uop, (x - s.reshape(3, 1)).exp().uop]
    def constant(): return [(Tensor.ones(4) * 0 + 3).uop]
    def view_of_assign():
        a = Tensor.zeros(8).contiguous().realize()
        return [a.assign(a + 1).shrink(((2, 5),)).uop]
    def intermediate():
        x = Tensor(np.arange(8, dtype=np.float32)).realize()
        y = (x * 3).contiguous()
        return [(y + y.sum()).uop, y.uop]
    return [new_buffer, reduce_and_elementwise, constant, view_of_assign, intermediate]

@pytest.mark.parametrize("build", _builders(), ids=lambda f: f.__name__)
def test_cached_schedule_equals_a_fresh_one(monkeypatch, build):
    first_roots, second_roots = build(), build()   # (building realizes inputs: before the cache is watched)
    assert all(a is not b for a, b in zip(first_roots, second_roots)) or build.__name__ == "constant"
    monkeypatch.setattr(schedule_module, "SCHEDULE_CACHE", {})
    misses = schedule_cache_stats.misses
    fresh = _describe(*create_schedule(first_roots), first_roots)
    assert schedule_cache_stats.misses == misses + 1 and len(schedule_module.SCHEDULE_CACHE) == 1
    hits = schedule_cache_stats.hits
    cached = _describe(*create_schedule(second_roots), second_roots)
    assert schedule_cache_stats.hits == hits + 1
    assert cached == fresh
