"""assign: writes through views reach the buffer, tinygrad's ordering of lazy reads and writes,
the checks on the value, and how many kernels a write costs. Expected values come from numpy."""
import itertools, random
import numpy as np
import pytest
from fusegrad import Tensor, GlobalCounters, dtypes

def _fresh(n: int = 6, shape: tuple | None = None) -> tuple[Tensor, np.ndarray]:
    """A realized tensor and the numpy array it equals."""
    ref = np.arange(n, dtype=np.float32).reshape(shape or (n,))
    return Tensor(ref).contiguous().realize(), ref.copy()

def _kernels(*tensors: Tensor) -> int:
    """Kernels run to realize ``tensors``."""
    GlobalCounters.reset()
    Tensor.realize(*tensors)
    return GlobalCounters.kernel_count

# ---------------------------------------------------------------- writes through views reach the base

def test_slice_assign_writes_the_base_in_one_kernel():
    x, ref = _fresh(1000)
    x[2:4].assign(x[2:4] + 1)      # the assign's own tensor is dropped: the write must still happen
    ref[2:4] += 1
    assert _kernels(x) == 1        # one kernel over the slice, no copy of the whole base
    np.testing.assert_array_equal(x.numpy(), ref)

@pytest.mark.parametrize("name, view, write", [
    ("step", lambda t: t[::2], lambda r, v: r.__setitem__(slice(None, None, 2), v)),
    ("negative step", lambda t: t[::-2], lambda r, v: r.__setitem__(slice(None, None, -2), v)),
    ("flip", lambda t: t.flip(0)[:3], lambda r, v: r.__setitem__(slice(None, -4, -1), v)),
    ("chained", lambda t: t[1:][::2], lambda r, v: r.__setitem__(slice(1, None, 2), v)),
    ("shrink of pad", lambda t: t.pad(((1, 1),))[2:5], lambda r, v: r.__setitem__(slice(1, 4), v)),
])
def test_view_assign_1d(name, view, write):
    x, ref = _fresh()
    value = np.array([10.0, 20.0, 30.0], dtype=np.float32)
    view(x).assign(Tensor(value))
    write(ref, value)
    np.testing.assert_array_equal(x.numpy(), ref, err_msg=name)

def test_permute_and_reshape_views():
    x, ref = _fresh(6, (2, 3))
    x.T[0].assign(Tensor([7.0, 8.0]))
    ref.T[0] = [7.0, 8.0]
    np.testing.assert_array_equal(x.numpy(), ref)
    x.reshape(3, 2)[1].assign(Tensor([5.0, 6.0]))
    ref.reshape(3, 2)[1] = [5.0, 6.0]
    np.testing.assert_array_equal(x.numpy(), ref)
    x.permute(1, 0)[1:, 1].assign(Tensor([-1.0, -2.0]))
    ref.transpose(1, 0)[1:, 1] = [-1.0, -2.0]
    np.testing.assert_array_equal(x.numpy(), ref)

def test_detach_writes_the_original():
    x, _ = _fresh()
    x.detach().assign(Tensor.full((6,), 7.0))
    np.testing.assert_array_equal(x.numpy(), np.full(6, 7.0, np.float32))
    x.detach()[1:3].assign(Tensor([1.0, 2.0]))
    np.testing.assert_array_equal(x.numpy(), [7, 1, 2, 7, 7, 7])

def test_view_of_a_view_sees_the_write():
    x, ref = _fresh()
    v = x[2:4]
    x[3:5].assign(Tensor([7.0, 8.0]))
    ref[3:5] = [7.0, 8.0]
    np.testing.assert_array_equal(v.numpy(), ref[2:4])
    np.testing.assert_array_equal(x.numpy(), ref)

def test_view_of_a_computed_tensor_stores_it_first():
    x, ref = _fresh()
    y = x * 2
    y[1:3].assign(Tensor([0.5, 0.25]))
    expected = ref * 2
    expected[1:3] = [0.5, 0.25]
    np.testing.assert_array_equal(y.numpy(), expected)
    np.testing.assert_array_equal(x.numpy(), ref)      # x itself is untouched

def test_assign_to_expand_view_raises():
    x, _ = _fresh(3, (3, 1))
    with pytest.raises(RuntimeError, match="expand"): x.expand(3, 4)[0].assign(Tensor.ones(4).contiguous())

def test_sharded_view_assign():
    x, ref = _fresh(8, (4, 2))
    xs = x.shard(("CPU:1", "CPU:2"), axis=0).realize()
    xs[1:3].assign(Tensor([[10.0, 11.0], [12.0, 13.0]]).shard(("CPU:1", "CPU:2"), axis=None))
    ref[1:3] = [[10.0, 11.0], [12.0, 13.0]]
    np.testing.assert_array_equal(xs.numpy(), ref)

# ---------------------------------------------------------------- overlap: read first, then write

def test_overlapping_assign_reads_first():
    x, ref = _fresh(100)
    x[1:].assign(x[:-1])
    ref[1:] = ref[:-1].copy()
    assert _kernels(x) == 2          # the value is computed into a temporary first
    np.testing.assert_array_equal(x.numpy(), ref)

def test_self_flip_assign():
    x, ref = _fresh()
    x.assign(x.flip(0))
    np.testing.assert_array_equal(x.numpy(), ref[::-1])

# ---------------------------------------------------------------- ordering (tinygrad's rules)

def test_lazy_read_before_assign_realized_together_sees_old():
    a, ref = _fresh(3)
    b = a + 1
    a.assign(a * 10)
    Tensor.realize(a, b)
    np.testing.assert_array_equal(b.numpy(), ref + 1)
    np.testing.assert_array_equal(a.numpy(), ref * 10)

def test_lazy_read_realized_after_the_assign_sees_new():
    a, ref = _fresh(3)
    b = a + 1
    a.assign(a * 10).realize()
    np.testing.assert_array_equal(b.numpy(), ref * 10 + 1)

def test_lazy_read_realized_before_the_assign_sees_old():
    a, ref = _fresh(3)
    b = a + 1
    a.assign(a * 10)
    np.testing.assert_array_equal(b.numpy(), ref + 1)
    np.testing.assert_array_equal(a.numpy(), ref * 10)

def test_view_assign_updates_earlier_lazy_reads():
    # tinygrad: a write through a view replaces the buffer in every lazy graph that reads it
    x, ref = _fresh()
    b = x + 1
    x[2:4].assign(x[2:4] * 10)
    ref[2:4] *= 10
    np.testing.assert_array_equal(b.numpy(), ref + 1)

def test_chain_of_assigns_in_one_schedule():
    a, ref = _fresh(3)
    a.assign(a + 1)
    a.assign(a * 10)
    assert _kernels(a) == 2
    np.testing.assert_array_equal(a.numpy(), (ref + 1) * 10)

@pytest.mark.parametrize("read", [lambda a: a + 0.5, lambda a: a * 1])
def test_read_between_two_assigns(read):
    a, ref = _fresh(3)
    a.assign(a + 1)
    b = read(a)
    a.assign(a * 10)
    Tensor.realize(a, b)
    np.testing.assert_array_equal(b.numpy(), read(ref + 1))
    np.testing.assert_array_equal(a.numpy(), (ref + 1) * 10)

def test_two_views_of_one_buffer():
    x, ref = _fresh()
    x[0:4].assign(x[0:4] + 1)
    x[2:6].assign(x[2:6] * 2)
    ref[0:4] += 1
    ref[2:6] *= 2
    np.testing.assert_array_equal(x.numpy(), ref)

def test_a_view_of_a_pending_assign_aliases_the_buffer():
    # tinygrad: a slice (movement ops only) is a view of the buffer, so realized after a later
    # assign it shows what that assign left; a computed read of the same version keeps its value
    a, ref = _fresh()
    a.assign(a * 2 + 1)
    view, value = a[1:5], a[1:5] + 0
    a.assign(a * 2 + 1)
    Tensor.realize(a, view, value)
    np.testing.assert_array_equal(view.numpy(), ((ref * 2 + 1) * 2 + 1)[1:5])
    np.testing.assert_array_equal(value.numpy(), (ref * 2 + 1)[1:5])

def test_folded_arithmetic_is_a_copy_not_a_view():
    # a * 1 folds to a, but it is a new value (tinygrad copies too): a later assign doesn't change it
    a, ref = _fresh()
    same = a * 1
    assert _kernels(same) == 1
    a.assign(Tensor.full((6,), 9.0)).realize()
    np.testing.assert_array_equal(same.numpy(), ref)
    alias = a[1:3]              # a view stays an alias
    a.assign(Tensor.full((6,), 4.0)).realize()
    np.testing.assert_array_equal(alias.numpy(), [4.0, 4.0])

def test_a_read_that_depends_on_the_write_sees_it():
    # tinygrad's rule: a read is ordered before the write that replaces what it reads, unless it
    # needs that write's result itself; then it reads the buffer as the write left it
    a, a_ref = _fresh()
    b, b_ref = _fresh()
    b_ref = b_ref * -1
    b.assign(-b).realize()
    total = a.sum() + b[0]                  # reads a as it is now...
    a.assign(b)
    b[1:4].assign(a[1:4])                   # ...but b[0] now reads b after this write, which reads the new a
    Tensor.realize(a, b, total)
    np.testing.assert_array_equal(a.numpy(), b_ref)
    np.testing.assert_array_equal(b.numpy(), b_ref)
    assert total.item() == b_ref.sum() + b_ref[0]

def test_reads_of_two_versions_of_a_buffer_stay_in_separate_kernels():
    a, a_ref = _fresh()
    b, b_ref = _fresh()
    first = a.sum() + b[0]                  # reads b as it is now
    b.assign(a + 1)
    a[0:3].assign(a[0:3] * 3)               # both reads of a now see this write
    b.assign(a + 1)
    second = a.sum() + b[0]                 # reads b after the second assign
    Tensor.realize(a, b, first, second)
    a_ref[0:3] *= 3
    assert first.item() == a_ref.sum() + b_ref[0]
    assert second.item() == a_ref.sum() + a_ref[0] + 1
    np.testing.assert_array_equal(b.numpy(), a_ref + 1)

def test_setitem_with_a_detached_alias_writes_through_it():
    a, ref = _fresh()
    alias = a.detach()
    a[3:5] = 7.0                             # a view (detach) of the realized buffer isn't another lazy use
    ref[3:5] = 7.0
    np.testing.assert_array_equal(alias.numpy(), ref)
    np.testing.assert_array_equal(a.numpy(), ref)

def test_unorderable_cycle_raises_naming_it():
    a, _ = _fresh(3)
    old = a.detach()
    a.assign(a + 1)
    with pytest.raises(RuntimeError, match="cycle: .*assign to buffer"): (a + old).realize()

# ---------------------------------------------------------------- checks

def test_value_broadcasts_and_python_values_take_the_dtype():
    x, _ = _fresh(6, (2, 3))
    x.assign(Tensor([1.0, 2.0, 3.0]))
    np.testing.assert_array_equal(x.numpy(), [[1, 2, 3], [1, 2, 3]])
    x.assign(5)
    np.testing.assert_array_equal(x.numpy(), np.full((2, 3), 5.0))
    x.assign([[1, 2, 3], [4, 5, 6]])
    assert x.dtype == dtypes.float32
    np.testing.assert_array_equal(x.numpy(), [[1, 2, 3], [4, 5, 6]])

def test_mismatches_raise_before_any_work():
    x, ref = _fresh()
    GlobalCounters.reset()
    with pytest.raises(ValueError, match="shape"): x.assign(Tensor([1.0, 2.0]))
    with pytest.raises(RuntimeError, match="dtype"): x.assign(Tensor([1, 2, 3, 4, 5, 6]))
    with pytest.raises(RuntimeError, match="dtype"): x.assign(Tensor([1.0] * 6, dtype=dtypes.float16))
    with pytest.raises(RuntimeError, match="device"): x.assign(Tensor([1.0] * 6, device="PYTHON"))
    assert GlobalCounters.kernel_count == 0
    np.testing.assert_array_equal(x.numpy(), ref)

def test_contiguous_twins_realized_together_get_their_own_buffers():
    """Equal graphs are one interned UOp; .contiguous() still promises each tensor its own storage
    (per-layer KV caches made in a loop and realized together must not share memory)."""
    caches = [Tensor.zeros(2, 2).contiguous() for _ in range(3)]
    Tensor.realize(*caches)
    caches[1][0].assign(Tensor([5.0, 5.0])).realize()
    caches[2].assign(Tensor.ones(2, 2).contiguous()).realize()
    np.testing.assert_array_equal(caches[0].numpy(), np.zeros((2, 2)))
    np.testing.assert_array_equal(caches[1].numpy(), [[5, 5], [0, 0]])
    np.testing.assert_array_equal(caches[2].numpy(), np.ones((2, 2)))

# ---------------------------------------------------------------- sequences of writes, reads and realizes
#
# Short programs of assign / setitem / lazy reads / realize on two buffers ``a`` and ``b``, run on
# fusegrad and on a small numpy model of the rules (docs/decisions.md, Mutation). The model was
# checked against tinygrad 0.14 on ~8000 such programs; it agrees except where fusegrad writes
# what tinygrad loses (setitem into a buffer with a pending assign; see the decisions doc).
# The rules the model encodes:
# - each buffer has a chain of versions (0 = its memory); a write makes a new version;
# - a whole assign moves only the tensor assigned; a view assign (or setitem) moves every lazy
#   read of the buffer's current version to the new one (versions already in memory are all the
#   buffer itself);
# - realize runs what the realized tensors need; reads of memory see it as it was before the
#   realize, reads of a version see that version; a computed read is then a fixed value, a view
#   (slice, detach) stays an alias of the memory; versions that ran become the memory;
# - setitem raises while another lazy graph reads the buffer's current version (a view counts
#   only while the version is pending).

class _Ref:
    """A lazy read of one version of a buffer (by a read, a view or a pending write)."""
    def __init__(self, model: "_Model", buf: str, kind: str):
        self.buf, self.version, self.kind, self.live = buf, model.head[buf], kind, True
        model.refs.append(self)

class _Read:
    def __init__(self, model: "_Model", buf: str, fn, key: str, view: bool):
        self.ref, self.fn, self.key, self.view, self.value = _Ref(model, buf, "view" if view else "read"), fn, key, view, None

class _Model:
    def __init__(self, **buffers: np.ndarray):
        self.mem = {k: v.copy() for k, v in buffers.items()}
        self.head = {k: 0 for k in buffers}
        self.done = dict(self.head)               # versions up to this one are in memory
        self.writes = {k: {} for k in buffers}     # version -> (previous version, fn(previous value, evaluate), refs)
        self.refs, self.reads = [], []

    def _same(self, buf, v, w) -> bool: return v == w or (v <= self.done[buf] and w <= self.done[buf])

    def _eval(self, buf, version, start):
        if version <= self.done[buf]: return start[buf]
        prev, fn, _ = self.writes[buf][version]
        return fn(self._eval(buf, prev, start).copy(), lambda ref: self._eval(ref.buf, ref.version, start))

    def _write(self, buf, fn, refs) -> int:
        version = self.head[buf] + 1
        self.writes[buf][version] = (self.head[buf], fn, refs)
        return version

    def assign(self, buf, value, *reads):
        refs = [_Ref(self, r, "value") for r in reads]
        self.head[buf] = self._write(buf, lambda prev, ev: np.broadcast_to(value(*map(ev, refs)), prev.shape).copy(), refs)

    def view_assign(self, buf, index, value, *reads):
        refs = [_Ref(self, r, "value") for r in reads]
        def write(prev, ev):
            prev[index] = value(*map(ev, refs))
            return prev
        old = self.head[buf]
        new = self.head[buf] = self._write(buf, write, refs)
        for ref in self.refs:
            if ref.live and ref.buf == buf and self._same(buf, ref.version, old) and ref not in refs: ref.version = new

    def setitem(self, buf, index, value):
        in_memory = self.head[buf] <= self.done[buf]
        if any(r.live and r.buf == buf and self._same(buf, r.version, self.head[buf]) and (r.kind != "view" or not in_memory)
               for r in self.refs):
            raise RuntimeError("setitem on a tensor with other lazy uses")
        self.view_assign(buf, index, lambda: value)

    def read(self, buf, fn, key, view=False): self.reads.append(_Read(self, buf, fn, key, view))

    def realize(self, bufs=(), reads=()):
        # equal lazy graphs are one (interned) node: realizing one realizes its twins
        reads = [r for r in self.reads if r.ref.live and any(
            r.key == q.key and self._same(r.ref.buf, r.ref.version, q.ref.version) for q in reads if q.ref.live and q.ref.buf == r.ref.buf)]
        need = dict(self.done)
        def want(buf, version):
            if version <= need[buf]: return
            for v in range(need[buf] + 1, version + 1):
                for ref in self.writes[buf][v][2]: want(ref.buf, ref.version)
            need[buf] = version
        for b in bufs: want(b, self.head[b])
        for r in reads: want(r.ref.buf, r.ref.version)
        start = {k: v.copy() for k, v in self.mem.items()}
        for r in reads:
            if not r.view: r.value, r.ref.live = r.fn(self._eval(r.ref.buf, r.ref.version, start)), False
        new_memory = {buf: self._eval(buf, version, start) for buf, version in need.items() if version > self.done[buf]}
        self.mem.update(new_memory)
        for buf, version in need.items():
            for v in [v for v in self.writes[buf] if v <= version]:
                for ref in self.writes[buf].pop(v)[2]: ref.live = False
            self.done[buf] = version

    def result(self) -> dict:
        self.realize(("a", "b"), self.reads)
        return {"a": self.mem["a"], "b": self.mem["b"],
                "reads": [self.mem[r.ref.buf][r.fn] if r.view else r.value for r in self.reads]}

_C2, _C6 = np.array([20.0, 21.0], np.float32), np.arange(10, 16, dtype=np.float32)
# name: (the step on fusegrad tensors in env {a, b, reads}, the same step on the model)
_STEPS = {
    "a = a*2+1":        (lambda e: e["a"].assign(e["a"] * 2 + 1), lambda m: m.assign("a", lambda a: a * 2 + 1, "a")),
    "a = const":        (lambda e: e["a"].assign(Tensor(_C6)), lambda m: m.assign("a", lambda: _C6)),
    "a = flip(a)":      (lambda e: e["a"].assign(e["a"].flip(0)), lambda m: m.assign("a", lambda a: a[::-1], "a")),
    "a[1:3] += 10":     (lambda e: e["a"][1:3].assign(e["a"][1:3] + 10), lambda m: m.view_assign("a", slice(1, 3), lambda a: a[1:3] + 10, "a")),
    "a[2:4] = const":   (lambda e: e["a"][2:4].assign(Tensor(_C2)), lambda m: m.view_assign("a", slice(2, 4), lambda: _C2)),
    "a[0:3] *= 3":      (lambda e: e["a"][0:3].assign(e["a"][0:3] * 3), lambda m: m.view_assign("a", slice(0, 3), lambda a: a[0:3] * 3, "a")),
    "a[2:5] = a[0:3]":  (lambda e: e["a"][2:5].assign(e["a"][0:3]), lambda m: m.view_assign("a", slice(2, 5), lambda a: a[0:3], "a")),
    "a[1:4] = a[2:5]":  (lambda e: e["a"][1:4].assign(e["a"][2:5]), lambda m: m.view_assign("a", slice(1, 4), lambda a: a[2:5], "a")),
    "a[3:5] = 7":       (lambda e: e["a"].__setitem__(slice(3, 5), 7.0), lambda m: m.setitem("a", slice(3, 5), 7.0)),
    "b = a+1":          (lambda e: e["b"].assign(e["a"] + 1), lambda m: m.assign("b", lambda a: a + 1, "a")),
    "b = b+a":          (lambda e: e["b"].assign(e["b"] + e["a"]), lambda m: m.assign("b", lambda b, a: b + a, "b", "a")),
    "b[1:4] = a[1:4]":  (lambda e: e["b"][1:4].assign(e["a"][1:4]), lambda m: m.view_assign("b", slice(1, 4), lambda a: a[1:4], "a")),
    "b[2:5] += a[0:3]": (lambda e: e["b"][2:5].assign(e["a"][0:3] + e["b"][2:5]),
                         lambda m: m.view_assign("b", slice(2, 5), lambda a, b: a[0:3] + b[2:5], "a", "b")),
    "r = a+0.5":        (lambda e: e["reads"].append(e["a"] + 0.5), lambda m: m.read("a", lambda a: a + 0.5, "r = a+0.5")),
    "r = a[1:4]*2":     (lambda e: e["reads"].append(e["a"][1:4] * 2), lambda m: m.read("a", lambda a: a[1:4] * 2, "r = a[1:4]*2")),
    "r = a*1":          (lambda e: e["reads"].append(e["a"] * 1), lambda m: m.read("a", lambda a: a * 1, "r = a*1")),
    "v = a[1:5]":       (lambda e: e["reads"].append(e["a"][1:5]), lambda m: m.read("a", slice(1, 5), "v = a[1:5]", view=True)),
    "v = a.detach()":   (lambda e: e["reads"].append(e["a"].detach()), lambda m: m.read("a", slice(None), "v = a.detach()", view=True)),
    "realize a":        (lambda e: e["a"].realize(), lambda m: m.realize(["a"])),
    "realize b":        (lambda e: e["b"].realize(), lambda m: m.realize(["b"])),
    "realize last read": (lambda e: e["reads"] and e["reads"][-1].realize(), lambda m: m.reads and m.realize(reads=[m.reads[-1]])),
    "realize all":      (lambda e: Tensor.realize(e["a"], e["b"], *e["reads"]), lambda m: m.realize(["a", "b"], m.reads)),
}

def _outcome(steps: tuple, on_model: bool):
    """What a program leaves: the final a, b and reads, or the step that raised a RuntimeError."""
    a0, b0 = np.arange(6, dtype=np.float32), -np.arange(6, dtype=np.float32)
    env = _Model(a=a0, b=b0) if on_model else {"a": Tensor(a0).contiguous().realize(), "b": Tensor(b0).contiguous().realize(), "reads": []}
    for i, name in enumerate(steps):
        try: _STEPS[name][1 if on_model else 0](env)
        except RuntimeError: return f"RuntimeError at step {i}"
    if on_model: result = env.result()
    else:
        Tensor.realize(env["a"], env["b"], *env["reads"])
        result = {"a": env["a"].numpy(), "b": env["b"].numpy(), "reads": [r.numpy() for r in env["reads"]]}
    return {k: [np.asarray(x).tolist() for x in v] if k == "reads" else v.tolist() for k, v in result.items()}

def _mismatches(programs) -> list[str]:
    bad = []
    for steps in programs:
        got, want = _outcome(steps, on_model=False), _outcome(steps, on_model=True)
        if got != want: bad.append(f"{' | '.join(steps)}:\n  fusegrad {got}\n  expected {want}")
    return bad

def test_every_pair_of_steps_matches_the_model():
    bad = _mismatches(itertools.product(_STEPS, repeat=2))
    assert not bad, f"{len(bad)} programs differ, e.g.\n" + "\n".join(bad[:5])

def test_random_programs_match_the_model():
    rng = random.Random(14)
    programs = [tuple(rng.choice(list(_STEPS)) for _ in range(rng.randint(3, 6))) for _ in range(250)]
    bad = _mismatches(programs)
    assert not bad, f"{len(bad)} programs differ, e.g.\n" + "\n".join(bad[:5])

def test_the_model_raises_where_setitem_has_other_uses():
    # the check of the model itself: the programs above also cover its error outcome
    assert _outcome(("r = a+0.5", "a[3:5] = 7"), on_model=True) == "RuntimeError at step 1"
    assert _outcome(("v = a[1:5]", "a[3:5] = 7"), on_model=True) != "RuntimeError at step 1"     # a view of memory sees the write
    assert _outcome(("a = a*2+1", "v = a[1:5]", "a[3:5] = 7"), on_model=True) == "RuntimeError at step 2"

def test_readers_of_a_node_found_in_one_walk():
    # _replace_everywhere finds the tensors that read an assigned buffer with one walk over all their graphs
    # (UOp.reaching): a node reads the target when any path from it reaches the target (shared subgraphs and diamonds
    # included)
    from fusegrad.uop.ops import UOp
    a, b = Tensor([1.0, 2.0]).realize(), Tensor([3.0, 4.0]).realize()
    shared = a + 1
    readers = [shared * 2, (shared + b) * shared, b * 3]
    reads = UOp.reaching([t.uop for t in readers], (a.uop,))
    assert [reads[t.uop] for t in readers] == [True, True, False]
    assert reads[a.uop] and not reads[b.uop]

def test_contiguous_of_a_realized_buffer_is_a_new_tensor():
    """tinygrad's rule: ``c = a.contiguous()`` on a realized buffer reads that buffer without a copy, but it is not
    ``a``: a later assign to ``a`` changes ``a`` (and the memory once it runs), not what ``c`` read before that."""
    a = Tensor([1.0, 2.0, 3.0]).realize()
    c = a.contiguous()
    assert c is not a and c.uop is a.uop   # the same buffer, no copy
    a.assign(Tensor([0.0, 0.0, 0.0]))
    assert c.tolist() == [1.0, 2.0, 3.0] and a.tolist() == [0.0, 0.0, 0.0]
    b = Tensor([1.0, 2.0]).realize()
    d = b.contiguous()
    b += 1
    assert d.tolist() == [1.0, 2.0] and b.tolist() == [2.0, 3.0]
    w = Tensor([3.0], requires_grad=True).realize()
    (w.contiguous() * w).sum().backward()   # the new tensor is still w's value for autograd
    assert w.grad.tolist() == [6.0]
