"""The PYTHON device runs hand-built linear programs (docs/linear_uops.md) exactly like exec_alu says."""
import itertools, math, struct
import numpy as np
import pytest
from fusegrad.dtype import DType, dtypes, truncate_float
from fusegrad.device import Buffer, Device, MallocAllocator
from fusegrad.uop.ops import UOp, Ops, AxisType
from fusegrad.uop.alu import exec_alu
from fusegrad.runtime.ops_python import PythonRenderer, PythonCompiler, PythonProgram, PythonDevice

# ---------------------------------------------------------------- helpers

def linear(*uops: UOp) -> list[UOp]:
    """The listed uops in order, each preceded by those of its sources not listed yet."""
    out: list[UOp] = []
    seen: set[int] = set()
    for u in uops:
        for d in u.toposort:
            if id(d) not in seen:
                seen.add(id(d))
                out.append(d)
    return out

def compile_prg(uops: list[UOp], name: str = "test") -> PythonProgram:
    return PythonProgram(name, PythonCompiler().compile(PythonRenderer().render(name, uops)))

def run(uops: list[UOp], *bufs: np.ndarray, global_size=(1, 1, 1), local_size=(1, 1, 1), vals=()) -> None:
    compile_prg(uops)(*bufs, global_size=global_size, local_size=local_size, vals=vals)

def c(v, dt: DType = dtypes.int32) -> UOp: return UOp.const(dt, v)
def param(slot: int, dt: DType, size: int) -> UOp: return UOp(Ops.PARAM, dt.ptr(size), arg=slot)
def rng(bound, rid: int, kind: AxisType = AxisType.LOOP) -> UOp:
    return UOp(Ops.RANGE, dtypes.int32, (bound if isinstance(bound, UOp) else c(bound),), (rid, kind))
def end(r: UOp) -> UOp: return UOp(Ops.END, dtypes.void, (r,))
def special(name: str, size: int) -> UOp: return UOp(Ops.SPECIAL, dtypes.int32, (c(size),), name)

def same(got, want) -> bool:
    """Equal, NaN equal to NaN, 0.0 distinct from -0.0 for floats."""
    if isinstance(want, float):
        if math.isnan(want): return math.isnan(got)
        return got == want and math.copysign(1, got) == math.copysign(1, want)
    return got == want

# ---------------------------------------------------------------- programs

def test_elementwise_add_loop():
    out, a, b = param(0, dtypes.float32, 16), param(1, dtypes.float32, 16), param(2, dtypes.float32, 16)
    r = rng(16, 0)
    st = out.index(r).store(a.index(r).load() + b.index(r).load())
    A, B, O = np.arange(16, dtype=np.float32), np.linspace(-1, 1, 16, dtype=np.float32), np.zeros(16, np.float32)
    run(linear(out, a, b, r, st, end(r)), O, A, B)
    np.testing.assert_array_equal(O, A + B)

def test_through_buffers_and_device():
    assert isinstance(Device["PYTHON"], PythonDevice)
    dev = Device["PYTHON"]
    out, a = param(0, dtypes.int32, 8), param(1, dtypes.int32, 8)
    r = rng(8, 0)
    uops = linear(out, a, r, out.index(r).store(a.index(r).load() * c(3) + c(1)), end(r))
    prg = dev.runtime("k", dev.compiler.compile(dev.renderer.render("k", uops)))
    bo, ba = Buffer("PYTHON", 8, dtypes.int32).ensure_allocated(), Buffer("PYTHON", 8, dtypes.int32)
    ba.copyin(memoryview(np.arange(8, dtype=np.int32).tobytes()))
    et = prg(bo._buf, ba._buf, global_size=[1, 1, 1], local_size=None, wait=True)
    assert isinstance(et, float) and et >= 0
    res = np.frombuffer(bo.copyout(memoryview(bytearray(32))), np.int32)
    np.testing.assert_array_equal(res, np.arange(8) * 3 + 1)

def test_malloc_allocator_buffers():
    alloc = MallocAllocator()
    raw = alloc.alloc(16)
    out = param(0, dtypes.float32, 4)
    i = special("gidx0", 4)
    run(linear(out, i, out.index(i).store(i.cast(dtypes.float32) * c(0.5, dtypes.float32))), raw, global_size=(4, 1, 1))
    np.testing.assert_array_equal(np.frombuffer(alloc._as_buffer(raw), np.float32), [0, 0.5, 1, 1.5])

def test_render_deterministic():
    def build():
        out = UOp(Ops.PARAM, dtypes.float32.ptr(4), arg=0)
        r = rng(4, 0)
        return linear(out, r, out.index(r).store(r.cast(dtypes.float32)), end(r))
    r = PythonRenderer()
    assert r.render("k", build()) == r.render("k", build())
    # equal PtrDTypes (interned: one object) in different PARAMs give the same bytes
    p1, p2 = dtypes.float32.ptr(4), dtypes.float32.ptr(4)
    a = [UOp(Ops.PARAM, p1, arg=0), UOp(Ops.PARAM, p1, arg=1)]
    b = [UOp(Ops.PARAM, p1, arg=0), UOp(Ops.PARAM, p2, arg=1)]
    assert r.render("k", a) == r.render("k", b)

def test_render_rejects_bad_order():
    out = param(0, dtypes.int32, 1)
    with pytest.raises(ValueError):
        PythonRenderer().render("k", [out.index(c(0)).store(c(1)), out])

def test_reduce_nested_loops_register():
    out, x = param(0, dtypes.float32, 4), param(1, dtypes.float32, 48)
    acc = UOp(Ops.DEFINE_REG, dtypes.float32.ptr(1), arg=0)
    ri, rj, rk = rng(4, 0), rng(3, 1, AxisType.REDUCE), rng(4, 2, AxisType.REDUCE)
    a0 = acc.index(c(0))
    init = a0.store(c(0.0, dtypes.float32))
    base = ri * c(12)  # computed in the outer body, used in the inner loop on every trip
    v = x.index(base + rj * c(4) + rk).load()
    upd = a0.store(a0.load() + v)
    ej, ek = end(rj), end(rk)
    final = out.index(ri).store(a0.load(ej))
    uops = linear(out, x, acc, ri, init, base, rj, rk, upd, ek, ej, final, end(ri))
    X, O = np.random.default_rng(0).standard_normal(48).astype(np.float32), np.zeros(4, np.float32)
    run(uops, O, X)
    np.testing.assert_allclose(O, X.reshape(4, 12).sum(axis=1), rtol=1e-6)
    # the register is private to each lane: run the same reduce with 3 lanes over a SPECIAL
    out3, x3 = param(0, dtypes.float32, 3), param(1, dtypes.float32, 12)
    g = special("gidx0", 3)
    r = rng(4, 0, AxisType.REDUCE)
    upd3 = a0.store(a0.load() + x3.index(g * c(4) + r).load())
    er = end(r)
    uops3 = linear(out3, x3, acc, g, init, r, upd3, er, out3.index(g).store(a0.load(er)))
    O3, X3 = np.zeros(3, np.float32), np.arange(12, dtype=np.float32)
    run(uops3, O3, X3, global_size=(3, 1, 1))
    np.testing.assert_array_equal(O3, X3.reshape(3, 4).sum(axis=1))

def test_zero_trip_loop():
    out = param(0, dtypes.int32, 2)
    n = UOp(Ops.DEFINE_VAR, dtypes.int32, arg=("n", 0, 4))
    r = rng(n, 0)
    uops = linear(out, n, out.index(c(1)).store(c(5)), r, out.index(r).store(c(9)), end(r), out.index(c(1)).store(c(7)))
    O = np.zeros(2, np.int32)
    run(uops, O, vals=(0,))
    assert O.tolist() == [0, 7]
    run(uops, O, vals=(1,))
    assert O.tolist() == [9, 7]

def test_special_ids_two_workgroups():
    o1, o2, o3 = param(0, dtypes.int32, 8), param(1, dtypes.int32, 8), param(2, dtypes.int32, 8)
    g, l, i = special("gidx0", 2), special("lidx0", 4), special("idx0", 8)
    gi = g * c(4) + l
    uops = linear(o1, o2, o3, g, l, i, o1.index(gi).store(g * c(100) + l), o2.index(i).store(i), o3.index(i).store(gi))
    O1, O2, O3 = (np.full(8, -1, np.int32) for _ in range(3))
    run(uops, O1, O2, O3, global_size=(2, 1, 1), local_size=(4, 1, 1))
    assert O1.tolist() == [0, 1, 2, 3, 100, 101, 102, 103]
    assert O2.tolist() == list(range(8))
    assert O3.tolist() == list(range(8))

def test_special_3d():
    out = param(0, dtypes.int32, 2 * 3 * 2 * 2)
    gx, gy, lx, lz = special("gidx0", 2), special("gidx1", 3), special("lidx0", 2), special("lidx2", 2)
    idx = ((gy * c(2) + gx) * c(2) + lz) * c(2) + lx
    val = gx * c(1000) + gy * c(100) + lz * c(10) + lx
    O = np.full(24, -1, np.int32)
    run(linear(out, gx, gy, lx, lz, out.index(idx).store(val)), O, global_size=(2, 3, 1), local_size=(2, 1, 2))
    want = [gx * 1000 + gy * 100 + lz * 10 + lx for gy in range(3) for gx in range(2) for lz in range(2) for lx in range(2)]
    assert O.tolist() == want

def _local_rotate_program():
    out, inp = param(0, dtypes.float32, 8), param(1, dtypes.float32, 8)
    lm = UOp(Ops.DEFINE_LOCAL, dtypes.float32.ptr(4, local=True), arg="temp0")
    g, l = special("gidx0", 2), special("lidx0", 4)
    st = lm.index(l).store(inp.index(g * c(4) + l).load())
    bar = UOp(Ops.BARRIER, dtypes.void, (st,))
    rd = out.index(g * c(4) + l).store(lm.index((l + c(1)) % c(4)).load())
    return linear(out, inp, lm, g, l, st, bar, rd)

def test_define_local_barrier():
    I, O = np.arange(8, dtype=np.float32), np.zeros(8, np.float32)
    run(_local_rotate_program(), O, I, global_size=(2, 1, 1), local_size=(4, 1, 1))
    assert O.tolist() == [1, 2, 3, 0, 5, 6, 7, 4]

def test_local_race_without_barrier_raises():
    # lockstep would hide it: a lane reads what another lane stored, with no BARRIER in between
    out, inp = param(0, dtypes.float32, 8), param(1, dtypes.float32, 8)
    lm = UOp(Ops.DEFINE_LOCAL, dtypes.float32.ptr(4, local=True), arg="temp0")
    g, l = special("gidx0", 2), special("lidx0", 4)
    st = lm.index(l).store(inp.index(g * c(4) + l).load())
    racy = out.index(g * c(4) + l).store(lm.index((l + c(1)) % c(4)).load())
    with pytest.raises(RuntimeError, match="race on local temp0.*no BARRIER"):
        run(linear(out, inp, lm, g, l, st, racy), np.zeros(8, np.float32), np.arange(8, dtype=np.float32),
            global_size=(2, 1, 1), local_size=(4, 1, 1))
    # reading back its own element needs no barrier
    O = np.zeros(8, np.float32)
    own = out.index(g * c(4) + l).store(lm.index(l).load())
    run(linear(out, inp, lm, g, l, st, own), O, np.arange(8, dtype=np.float32), global_size=(2, 1, 1), local_size=(4, 1, 1))
    assert O.tolist() == list(range(8))

def test_chunked_workgroups(monkeypatch):
    # workgroups run in chunks when the launch is large: same results, locals stay per group
    monkeypatch.setattr(PythonProgram, "max_lanes", 4)
    I, O = np.arange(8, dtype=np.float32), np.zeros(8, np.float32)
    run(_local_rotate_program(), O, I, global_size=(2, 1, 1), local_size=(4, 1, 1))
    assert O.tolist() == [1, 2, 3, 0, 5, 6, 7, 4]
    out = param(0, dtypes.int32, 12)
    i = special("idx0", 12)
    O2 = np.zeros(12, np.int32)
    run(linear(out, i, out.index(i).store(i * c(2))), O2, global_size=(6, 1, 1), local_size=(2, 1, 1))
    assert O2.tolist() == [2 * x for x in range(12)]

def test_gated_load_and_store():
    out, inp = param(0, dtypes.int32, 8), param(1, dtypes.int32, 4)
    i = special("gidx0", 8)
    gate = i < c(4)
    ld = inp.index(i, gate).load()
    O, I = np.full(8, -1, np.int32), np.array([10, 11, 12, 13], np.int32)
    run(linear(out, inp, i, out.index(i).store(ld)), O, I, global_size=(8, 1, 1))
    assert O.tolist() == [10, 11, 12, 13, 0, 0, 0, 0]
    # gated store: the index is far out of range where the gate is false
    O2 = np.full(4, -1, np.int32)
    far = i + c(1000) * (c(1) - gate.cast(dtypes.int32))
    run(linear(out, i, out.index(far, gate).store(i * c(2))), O2, global_size=(8, 1, 1))
    assert O2.tolist() == [0, 2, 4, 6]
    # a gate that is false everywhere (a constant) never touches memory
    O3 = np.full(1, -1, np.int32)
    f = c(False, dtypes.bool)
    run(linear(out, inp, i, out.index(c(0)).store(inp.index(c(99999), f).load()), out.index(c(-5), f).store(c(3))),
        O3, I, global_size=(8, 1, 1))
    assert O3.tolist() == [0]

def test_out_of_bounds_raises():
    out, inp = param(0, dtypes.int32, 4), param(1, dtypes.int32, 4)
    i = special("gidx0", 8)
    with pytest.raises(IndexError, match=r"slot 1.*index 4"):
        run(linear(out, inp, i, out.index(i % c(4)).store(inp.index(i).load())), np.zeros(4, np.int32), np.zeros(4, np.int32),
            global_size=(8, 1, 1))
    with pytest.raises(IndexError, match=r"slot 0.*index 4"):
        run(linear(out, i, out.index(i).store(i)), np.zeros(4, np.int32), global_size=(8, 1, 1))
    with pytest.raises(IndexError, match=r"slot 0.*index -1"):
        run(linear(out, out.index(c(-1)).store(c(1))), np.zeros(4, np.int32))
    # a gate that is true still checks
    with pytest.raises(IndexError):
        run(linear(out, i, out.index(i, i < c(6)).store(i)), np.zeros(4, np.int32), global_size=(8, 1, 1))
    # vector access past the end
    with pytest.raises(IndexError):
        run(linear(out, inp, inp.index(c(2)).load(dtype=dtypes.int32.vec(4))), np.zeros(4, np.int32), np.zeros(4, np.int32))
    # registers and locals are checked too
    reg = UOp(Ops.DEFINE_REG, dtypes.int32.ptr(2), arg=0)
    with pytest.raises(IndexError, match="register"):
        run(linear(reg, reg.index(c(2)).store(c(1))))

def test_if_endif_masks():
    out = param(0, dtypes.int32, 8)
    i = special("gidx0", 8)
    cond = i < c(3)
    iff = UOp(Ops.IF, dtypes.void, (cond,))
    # inside the IF, lanes >= 3 would be out of bounds: they are inactive so nothing is checked or written
    st = out.index(i * c(100)).store(i + c(1))
    O = np.zeros(8, np.int32)
    O[:] = 0
    uops = linear(out, i, cond, iff, st, UOp(Ops.ENDIF, dtypes.void, (iff,)))
    with pytest.raises(IndexError):  # lanes 0..2 write 0, 100, 200: lane 1 is out of bounds
        run(uops, O, global_size=(8, 1, 1))
    st2 = out.index(i).store(i + c(1))
    iff2 = UOp(Ops.IF, dtypes.void, (cond,))
    after = out.index(c(7)).store(c(42))
    O2 = np.zeros(8, np.int32)
    run(linear(out, i, cond, iff2, st2, UOp(Ops.ENDIF, dtypes.void, (iff2,)), after), O2, global_size=(8, 1, 1))
    assert O2.tolist() == [1, 2, 3, 0, 0, 0, 0, 42]
    # nested IFs and an IF with no active lane
    c2 = i.ne(c(1))
    if_a = UOp(Ops.IF, dtypes.void, (cond,))
    if_b = UOp(Ops.IF, dtypes.void, (c2,))
    never = UOp(Ops.IF, dtypes.void, (i < c(0),))
    O3 = np.zeros(8, np.int32)
    run(linear(out, i, cond, if_a, if_b, out.index(i).store(c(5)), UOp(Ops.ENDIF, dtypes.void, (if_b,)),
               UOp(Ops.ENDIF, dtypes.void, (if_a,)), never, out.index(c(1000)).store(c(1)), UOp(Ops.ENDIF, dtypes.void, (never,))),
        O3, global_size=(8, 1, 1))
    assert O3.tolist() == [5, 0, 5, 0, 0, 0, 0, 0]

def test_vector_register_and_index_dtype():
    # an upcast accumulator: a register of float4 elements, loop counters in dtypes.index (held as int64)
    out, x = param(0, dtypes.float32, 4), param(1, dtypes.float32, 32)
    f4 = dtypes.float32.vec(4)
    acc = UOp(Ops.DEFINE_REG, f4.ptr(1), arg=0)
    zero = UOp.const(dtypes.index, 0)
    a0 = acc.index(zero)
    r = UOp(Ops.RANGE, dtypes.index, (UOp.const(dtypes.index, 8),), (0, AxisType.REDUCE))
    z4 = UOp(Ops.VECTORIZE, f4, (c(0.0, dtypes.float32),) * 4)
    upd = a0.store(a0.load(dtype=f4) + x.index(r * UOp.const(dtypes.index, 4)).load(dtype=f4))
    er = end(r)
    X, O = np.arange(32, dtype=np.float32), np.zeros(4, np.float32)
    run(linear(out, x, acc, a0.store(z4), r, upd, er, out.index(zero).store(a0.load(er, dtype=f4))), O, X)
    np.testing.assert_array_equal(O, X.reshape(8, 4).sum(axis=0))

def test_if_block_value_used_after():
    # a value loaded inside an IF with no active lane is still defined after ENDIF (it reads 0)
    out, inp = param(0, dtypes.int32, 4), param(1, dtypes.int32, 4)
    i = special("gidx0", 4)
    never = UOp(Ops.IF, dtypes.void, (i < c(0),))
    ld = inp.index(i).load()
    endif = UOp(Ops.ENDIF, dtypes.void, (never,))
    O, I = np.full(4, -1, np.int32), np.arange(1, 5, dtype=np.int32)
    run(linear(out, inp, i, never, ld, endif, out.index(i).store(ld + c(1))), O, I, global_size=(4, 1, 1))
    assert O.tolist() == [1, 1, 1, 1]

def test_register_under_if():
    out = param(0, dtypes.int32, 4)
    acc = UOp(Ops.DEFINE_REG, dtypes.int32.ptr(1), arg=0)
    i = special("gidx0", 4)
    a0 = acc.index(c(0))
    init = a0.store(c(7))
    iff = UOp(Ops.IF, dtypes.void, (i < c(2),))
    upd = a0.store(i)
    endif = UOp(Ops.ENDIF, dtypes.void, (iff,))
    O = np.zeros(4, np.int32)
    run(linear(out, acc, i, init, iff, upd, endif, out.index(i).store(a0.load(endif))), O, global_size=(4, 1, 1))
    assert O.tolist() == [0, 1, 7, 7]

def test_last_lane_wins():
    out = param(0, dtypes.int32, 1)
    i = special("gidx0", 8)
    O = np.zeros(1, np.int32)
    run(linear(out, i, out.index(c(0)).store(i)), O, global_size=(8, 1, 1))
    assert O.tolist() == [7]
    O[:] = 0
    run(linear(out, i, out.index(i * c(0)).store(i)), O, global_size=(8, 1, 1))
    assert O.tolist() == [7]

def test_define_var():
    out = param(0, dtypes.int32, 16)
    n = UOp(Ops.DEFINE_VAR, dtypes.int32, arg=("n", 1, 16))
    m = UOp(Ops.DEFINE_VAR, dtypes.int32, arg=("m", -10, 10))
    r = rng(n, 0)
    O = np.zeros(16, np.int32)
    run(linear(out, n, m, r, out.index(r).store(r * m), end(r)), O, vals=(5, -3))
    assert O.tolist() == [0, -3, -6, -9, -12] + [0] * 11
    with pytest.raises(ValueError):
        run(linear(out, n, m, r, out.index(r).store(r * m), end(r)), O, vals=(5,))

def test_vectors():
    out, inp = param(0, dtypes.float32, 8), param(1, dtypes.float32, 8)
    f4 = dtypes.float32.vec(4)
    i = special("gidx0", 2)
    base = i * c(4)
    v = inp.index(base).load(dtype=f4)
    rev = UOp(Ops.GEP, f4, (v,), (3, 2, 1, 0))
    st = out.index(base).store(rev + rev)
    I, O = np.arange(8, dtype=np.float32), np.zeros(8, np.float32)
    run(linear(out, inp, i, st), O, I, global_size=(2, 1, 1))
    assert O.tolist() == [6, 4, 2, 0, 14, 12, 10, 8]
    # VECTORIZE of scalars (uniform and per lane), GEP of one lane, vector compare and WHERE
    vec = UOp(Ops.VECTORIZE, dtypes.int32.vec(3), (i, c(10), i * c(5)))
    o2 = param(0, dtypes.int32, 6)
    g1, g2 = UOp(Ops.GEP, dtypes.int32, (vec,), (1,)), UOp(Ops.GEP, dtypes.int32, (vec,), (2,))
    O2 = np.zeros(6, np.int32)
    run(linear(o2, i, vec, o2.index(i * c(3)).store(vec), o2.index(i * c(3) + c(1)).store(g1 + g2)), O2, global_size=(2, 1, 1))
    assert O2.tolist() == [0, 10, 0, 1, 15, 5]
    cv = UOp(Ops.VECTORIZE, dtypes.int32.vec(3), (c(1), c(1), c(1)))
    sel = (vec < cv).where(cv, vec)
    O3 = np.zeros(6, np.int32)
    run(linear(o2, i, vec, cv, o2.index(i * c(3)).store(sel)), O3, global_size=(2, 1, 1))
    assert O3.tolist() == [1, 10, 1, 1, 10, 5]

def test_bitcast_and_cast():
    vals = np.array([-2.7, 2.7, -0.0, 1e10, -1e10, 3e9, np.nan, np.inf, -np.inf, 0.5, 65504.0, 1e6], np.float32)
    n = len(vals)
    inp = param(1, dtypes.float32, n)
    i = special("gidx0", n)
    x = inp.index(i).load()
    for dt in (dtypes.int32, dtypes.uint8, dtypes.int8, dtypes.uint32, dtypes.int64, dtypes.bool, dtypes.float16, dtypes.float64):
        out = param(0, dt, n)
        O = np.zeros(n, np.dtype(dt.fmt))
        run(linear(out, inp, i, out.index(i).store(x.cast(dt))), O, vals, global_size=(n, 1, 1))
        want = [dtypes.as_const(float(v), dt) if not dtypes.is_float(dt) else truncate_float(float(v), dt) for v in vals]
        assert all(same(g.item(), w) for g, w in zip(O, want)), (dt, O.tolist(), want)
    # int -> float / bool / narrower int, bool -> float
    ivals = np.array([-2**31, -7, -1, 0, 1, 255, 256, 2**31 - 1, 16777217], np.int32)
    iin = param(1, dtypes.int32, len(ivals))
    j = special("gidx0", len(ivals))
    y = iin.index(j).load()
    for dt in (dtypes.float32, dtypes.float16, dtypes.bool, dtypes.uint8, dtypes.int16, dtypes.uint64):
        out = param(0, dt, len(ivals))
        O = np.zeros(len(ivals), np.dtype(dt.fmt))
        run(linear(out, iin, j, out.index(j).store(y.cast(dt))), O, ivals, global_size=(len(ivals), 1, 1))
        want = [UOp.const(dt, int(v)).arg for v in ivals]
        assert all(same(g.item(), w) for g, w in zip(O, want)), (dt, O.tolist(), want)
    out = param(0, dtypes.float32, len(ivals))
    O = np.zeros(len(ivals), np.float32)
    run(linear(out, iin, j, out.index(j).store(y.cast(dtypes.bool).cast(dtypes.float32))), O, ivals, global_size=(len(ivals), 1, 1))
    assert O.tolist() == [float(v != 0) for v in ivals]
    # BITCAST both ways
    out = param(0, dtypes.int32, n)
    O = np.zeros(n, np.int32)
    run(linear(out, inp, i, out.index(i).store(x.bitcast(dtypes.int32))), O, vals, global_size=(n, 1, 1))
    np.testing.assert_array_equal(O, vals.view(np.int32))
    outf = param(0, dtypes.float32, len(ivals))
    Of = np.zeros(len(ivals), np.float32)
    run(linear(outf, iin, j, outf.index(j).store(y.bitcast(dtypes.float32))), Of, ivals, global_size=(len(ivals), 1, 1))
    np.testing.assert_array_equal(Of.view(np.int32), ivals)
    # vector bitcast: two halves -> one uint32
    hin, uout = param(1, dtypes.float16, 4), param(0, dtypes.uint32, 2)
    k = special("gidx0", 2)
    h2 = hin.index(k * c(2)).load(dtype=dtypes.float16.vec(2))
    H, U = np.array([1.0, -2.0, 0.5, 65504], np.float16), np.zeros(2, np.uint32)
    run(linear(uout, hin, k, uout.index(k).store(h2.bitcast(dtypes.uint32))), U, H, global_size=(2, 1, 1))
    np.testing.assert_array_equal(U, H.view(np.uint32))

def test_bfloat16_moves_bits():
    out, inp = param(0, dtypes.bfloat16, 4), param(1, dtypes.bfloat16, 4)
    r = rng(4, 0)
    I = np.array([0x3F80, 0xC000, 0x7FC0, 0x0001], np.uint16)
    O = np.zeros(4, np.uint16)
    run(linear(out, inp, r, out.index(r).store(inp.index(r).load()), end(r)), O, I)
    np.testing.assert_array_equal(O, I)
    # and the float32 conversion that lowering would write, done by hand with bit ops
    of = param(0, dtypes.float32, 4)
    for raw in (inp.index(r).load(dtype=dtypes.uint16), inp.index(r).load().bitcast(dtypes.uint16)):
        bits = raw.cast(dtypes.uint32) << c(16, dtypes.uint32)
        Of = np.zeros(4, np.float32)
        run(linear(of, inp, r, of.index(r).store(bits.bitcast(dtypes.float32)), end(r)), Of, I)
        np.testing.assert_array_equal(Of.view(np.uint32), I.astype(np.uint32) << 16)
    # a CAST from bfloat16 is a value conversion
    Of = np.zeros(4, np.float32)
    run(linear(of, inp, r, of.index(r).store(inp.index(r).load().cast(dtypes.float32)), end(r)), Of, I)
    np.testing.assert_array_equal(Of.view(np.uint32), I.astype(np.uint32) << 16)

# ---------------------------------------------------------------- ALU against exec_alu

INT_VALS = [-2**31, -100000, -7, -3, -2, -1, 0, 1, 2, 3, 7, 100000, 2**31 - 1]
FLOAT_VALS = [-math.inf, -1e30, -3.0, -2.5, -1.0, -0.5, -0.0, 0.0, 1e-30, 0.5, 1.0, 2.0, 2.5, 3.0, 100.0, 1e30, math.inf, math.nan]
BOOL_VALS = [False, True]

UNARY = [Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.RECIPROCAL, Ops.NEG, Ops.TRUNC]
BINARY = [Ops.ADD, Ops.SUB, Ops.MUL, Ops.IDIV, Ops.MOD, Ops.FDIV, Ops.MAX, Ops.POW, Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ,
          Ops.AND, Ops.OR, Ops.XOR, Ops.SHL, Ops.SHR]
TERNARY = [Ops.WHERE, Ops.MULACC]

def _applicable(op: Ops, dt: DType) -> bool:
    if dtypes.is_float(dt): return op not in (Ops.AND, Ops.OR, Ops.XOR, Ops.SHL, Ops.SHR)
    if dt == dtypes.bool: return op in (Ops.AND, Ops.OR, Ops.XOR, Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ, Ops.MAX, Ops.ADD, Ops.MUL,
                                        Ops.NEG, Ops.WHERE, Ops.MULACC, Ops.SUB)
    return True

def _run_alu(op: Ops, dt: DType, cols: list[list]) -> list:
    """Run ``op`` over lanes whose operands come from the columns; returns Python values."""
    n = len(cols[0])
    src_dts = [dtypes.bool if op is Ops.WHERE and k == 0 else dt for k in range(len(cols))]
    out_dt = dtypes.bool if op in (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ) else dt
    out = param(0, out_dt, n)
    ins = [param(k + 1, sdt, n) for k, sdt in enumerate(src_dts)]
    i = special("gidx0", n)
    loads = [p.index(i).load() for p in ins]
    res = UOp(op, out_dt, tuple(loads))
    O = np.zeros(n, np.dtype(out_dt.fmt))
    with np.errstate(over="ignore"): arrays = [np.array(col, np.dtype(sdt.fmt)) for col, sdt in zip(cols, src_dts)]
    run(linear(out, *ins, i, *loads, res, out.index(i).store(res)), O, *arrays, global_size=(n, 1, 1))
    return O.tolist()

def _check_alu(op: Ops, dt: DType, cols: list[list]) -> None:
    out_dt = dtypes.bool if op in (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ) else dt
    # the operands as the kernel sees them (rounded to dt)
    npdt = {dtypes.bool: np.bool_, dtypes.int32: np.int32, dtypes.float32: np.float32, dtypes.float16: np.float16,
            dtypes.uint32: np.uint32, dtypes.int8: np.int8, dtypes.float64: np.float64}
    rows = []
    for row in zip(*cols):
        with np.errstate(over="ignore"):
            py = tuple(bool(v) if (op is Ops.WHERE and k == 0) else np.array(v, npdt[dt]).item() for k, v in enumerate(row))
        try: want = exec_alu(op, out_dt, py)
        except (ValueError, OverflowError): continue  # exec_alu itself has no answer (e.g. negative shift, (-x) ** nan)
        rows.append((row, py, want))
    got = _run_alu(op, dt, [[r[0][k] for r in rows] for k in range(len(cols))])
    bad = [(py, g, w) for (_, py, w), g in zip(rows, got) if not same(g, w)]
    assert not bad, f"{op} {dt}: {len(bad)} mismatches, e.g. (operands, got, want) {bad[:5]}"

def _grid(dt: DType, arity: int) -> list[list]:
    base = FLOAT_VALS if dtypes.is_float(dt) else BOOL_VALS if dt == dtypes.bool else INT_VALS
    if dt == dtypes.int8: base = [-128, -7, -3, -1, 0, 1, 2, 3, 7, 127]
    if dt == dtypes.uint32: base = [0, 1, 2, 3, 7, 100000, 2**31, 2**32 - 1]
    if arity == 3 and len(base) > 8: base = base[::2] + [base[-1]]
    rows = list(itertools.product(base, repeat=arity))
    return [[r[k] for r in rows] for k in range(arity)]

ALU_DTYPES = [dtypes.int32, dtypes.float32, dtypes.bool, dtypes.float16, dtypes.uint32, dtypes.int8, dtypes.float64]

# only the (op, dtype) pairs where the op is defined: no skipped cases
ALU_CASES = [pytest.param(op, dt, id=f"{op.name}-{dt}") for op in UNARY + BINARY + TERNARY for dt in ALU_DTYPES if _applicable(op, dt)]

@pytest.mark.parametrize("op,dt", ALU_CASES)
def test_alu_matches_exec_alu(op: Ops, dt: DType):
    arity = 1 if op in UNARY else 2 if op in BINARY else 3
    cols = _grid(dt, arity)
    if op in (Ops.SHL, Ops.SHR):
        # every amount has an answer (alu.py): the grid's negative and huge ones, and each value by those around the width
        values, edges = sorted(set(cols[0])), [8 * dt.itemsize + k for k in (-1, 0, 1)]
        cols = [cols[0] + [v for v in values for _ in edges], cols[1] + edges * len(values)]
    if op is Ops.WHERE: cols[0] = [bool(v) for v in cols[0]]
    _check_alu(op, dt, cols)

def test_int_division_semantics():
    a = [-7, 7, -7, 7, 5, -5, 0, -2**31, 3]
    b = [2, -2, -2, 2, 0, 0, 0, -1, -2**31]
    assert _run_alu(Ops.IDIV, dtypes.int32, [a, b]) == [-3, -3, 3, 3, 0, 0, 0, -2**31, 0]
    assert _run_alu(Ops.MOD, dtypes.int32, [a, b]) == [-1, 1, -1, 1, 0, 0, 0, 0, 3]

def test_int_wraps():
    assert _run_alu(Ops.ADD, dtypes.int32, [[2**31 - 1], [1]]) == [-2**31]
    assert _run_alu(Ops.MUL, dtypes.int32, [[65536], [65536]]) == [0]
    assert _run_alu(Ops.NEG, dtypes.int32, [[-2**31]]) == [-2**31]
    assert _run_alu(Ops.SHL, dtypes.int32, [[1, 3], [31, 30]]) == [-2**31, -2**30]
    assert _run_alu(Ops.SHR, dtypes.int32, [[-8], [1]]) == [-4]
    assert _run_alu(Ops.SUB, dtypes.uint32, [[0], [1]]) == [2**32 - 1]

def test_max_nan_and_fdiv():
    nan = math.nan
    got = _run_alu(Ops.MAX, dtypes.float32, [[nan, 1.0, -0.0, 0.0], [1.0, nan, 0.0, -0.0]])
    assert math.isnan(got[0]) and math.isnan(got[1]) and got[2:] == [0.0, 0.0]
    got = _run_alu(Ops.FDIV, dtypes.float32, [[1.0, -1.0, 0.0, 1.0], [0.0, 0.0, 0.0, -0.0]])
    assert got[:2] == [math.inf, -math.inf] and math.isnan(got[2]) and got[3] == -math.inf

def test_unsupported_op_named():
    out = param(0, dtypes.uint64, 1)
    t = UOp(Ops.THREEFRY, dtypes.uint64, (c(1, dtypes.uint64), c(2, dtypes.uint64)))
    with pytest.raises(NotImplementedError, match="THREEFRY"):
        PythonRenderer().render("k", linear(out, out.index(c(0)).store(t)))

def test_large_launch_is_fast():
    # 2**16 threads through a loop of 64: lockstep numpy, so this takes well under a second
    n = 1 << 16
    out, inp = param(0, dtypes.float32, n), param(1, dtypes.float32, n)
    acc = UOp(Ops.DEFINE_REG, dtypes.float32.ptr(1), arg=0)
    g, l = special("gidx0", n // 256), special("lidx0", 256)
    gi = g * c(256) + l
    a0 = acc.index(c(0))
    r = rng(64, 0, AxisType.REDUCE)
    upd = a0.store(a0.load() + inp.index((gi + r) % c(n)).load())
    er = end(r)
    uops = linear(out, inp, acc, g, l, a0.store(c(0.0, dtypes.float32)), r, upd, er, out.index(gi).store(a0.load(er)))
    I, O = np.ones(n, np.float32), np.zeros(n, np.float32)
    et = compile_prg(uops)(O, I, global_size=(n // 256, 1, 1), local_size=(256, 1, 1), wait=True)
    assert (O == 64).all()
    assert et < 5

def test_fma_float32_rounds_once():
    """The PYTHON device's float32 MULACC equals C's fmaf: one rounding of the exact a*b+c, also where the float64
    sum lands exactly on a float32 midpoint (double rounding would then go the wrong way)."""
    from fractions import Fraction
    from fusegrad.runtime.ops_python import fma_float32
    e = np.float32(1 + 2 ** -12)   # e*e = 1 + 2^-11 + 2^-24: a float32 midpoint
    cases = [(e, e, np.float32(2 ** -80), np.float32(1 + 2 ** -11 + 2 ** -23)), (e, e, np.float32(-2 ** -80), np.float32(1 + 2 ** -11)),
             (e, e, np.float32(0), np.float32(1 + 2 ** -11)), (e, e, np.float32(-1), np.float32(2 ** -11 + 2 ** -24))]
    for a, b, c, want in cases: assert fma_float32(np.array([a]), np.array([b]), np.array([c]))[0] == want, (a, b, c)
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((2, 500)).astype(np.float32)
    c = (rng.standard_normal(500) * rng.choice([1e-30, 1e-8, 1.0, 1e8], 500)).astype(np.float32)
    got = fma_float32(a, b, c)
    for x, y, z, g in zip(a, b, c, got):
        exact = Fraction(float(x)) * Fraction(float(y)) + Fraction(float(z))
        neighbours = [np.nextafter(g, np.float32(-np.inf)), g, np.nextafter(g, np.float32(np.inf))]
        assert min(neighbours, key=lambda v: abs(Fraction(float(v)) - exact)) == g
