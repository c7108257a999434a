"""Index math past 2**31: which integer type a kernel's indices get, and arange past int32.

``narrow_index_dtype`` gives every index value of a kernel int32 when all their bounds
(vmin/vmax) fit, else int64. The decision is tested on UOps at the boundaries, on kernels of the
NULL device (any size, nothing allocated), and end to end with kernels that compute only a few
elements of a view whose flat positions pass 2**31 (an arange grid: no buffer behind it).
"""
import numpy as np
import pytest
from fusegrad import Tensor, dtypes, Device
from fusegrad.codegen import get_program
from fusegrad.codegen.lowering import narrow_index_dtype
from fusegrad.uop.ops import UOp, Ops, AxisType

INT32_MAX = 2**31 - 1

def loop(size: int, number: int = 0) -> UOp:
    return UOp(Ops.RANGE, dtypes.index, (UOp.const(dtypes.index, size),), (number, AxisType.LOOP))

def index_dtypes(sink: UOp) -> set:
    """The dtypes the index values of ``sink`` got (loop counters and the math on them)."""
    narrowed = narrow_index_dtype(sink)
    assert not any(x.dtype == dtypes.index for x in narrowed.toposort), "every index value gets a real type"
    return {x.dtype for x in narrowed.toposort if x.op in (Ops.RANGE, Ops.ADD, Ops.MUL, Ops.IDIV, Ops.MOD)}

def store_at(offset: UOp) -> UOp:
    """A kernel that stores 1 at ``offset`` of a byte buffer as large as the offset needs."""
    size = max(int(offset.vmax) + 1, 1)
    buffer = UOp(Ops.PARAM, dtypes.uint8.ptr(size), (), 0)
    return UOp(Ops.SINK, dtypes.void, (UOp(Ops.STORE, dtypes.void, (buffer.index(offset), UOp.const(dtypes.uint8, 1))),))

@pytest.mark.parametrize("rows,cols,want", [
    (2**15, 2**16, dtypes.int32),        # last flat position 2**31 - 1: fits
    (2**15 + 1, 2**16, dtypes.int64),    # passes 2**31
    (2**20, 2**20, dtypes.int64),
    (7, 9, dtypes.int32),
])
def test_flat_index_bound_decides(rows, cols, want):
    offset = loop(rows, 0) * cols + loop(cols, 1)
    assert offset.vmax == rows * cols - 1
    assert index_dtypes(store_at(offset)) == {want}

@pytest.mark.parametrize("start,want", [(INT32_MAX - 9, dtypes.int32), (INT32_MAX - 8, dtypes.int64), (2**40, dtypes.int64)])
def test_offset_of_a_view_decides(start, want):
    # a shrunk view: ten elements starting at ``start`` (the last one is start + 9)
    assert index_dtypes(store_at(loop(10) + start)) == {want}

@pytest.mark.parametrize("low,want", [(-2**31, dtypes.int32), (-2**31 - 1, dtypes.int64)])
def test_negative_bounds_decide(low, want):
    # offsets that go negative (a padded view's, before its gate): int32 down to -2**31
    value = loop(16) + low
    assert value.vmin == low
    assert index_dtypes(UOp(Ops.SINK, dtypes.void, (value,))) == {want}

def test_division_of_a_wide_value_stays_wide():
    # (r * 2**20 + s) // 2**20 fits in int32 but its dividend doesn't: the kernel computes in int64
    flat = loop(2**12, 0) * 2**20 + loop(2**20, 1)
    assert index_dtypes(store_at((flat // 2**20) * 0 + flat % 7)) == {dtypes.int64}

def null_program(t: Tensor):
    """The program of the last kernel that computes ``t`` (on NULL: nothing runs or is allocated)."""
    schedule = t.schedule()
    return get_program(schedule[-1].ast, Device["NULL"].renderer)

def kernel_index_dtypes(program) -> set:
    return {u.dtype for u in program.uops if u.op is Ops.RANGE}

def test_null_view_past_2_31_is_int64():
    big = Tensor.empty(2**31 + 16, dtype=dtypes.uint8, device="NULL")
    program = null_program(big[-16:].contiguous())
    assert kernel_index_dtypes(program) == {dtypes.int64}
    assert "2147483648" in program.src
    small = Tensor.empty(2**31 - 16, dtype=dtypes.uint8, device="NULL")
    assert kernel_index_dtypes(null_program(small[-16:].contiguous())) == {dtypes.int32}

def null_programs(t: Tensor) -> list:
    return [get_program(item.ast, Device["NULL"].renderer) for item in t.schedule()]

def test_null_reduce_over_a_huge_buffer_is_int64_where_it_reads():
    # 2**33 bytes summed in two kernels: the one reading the buffer needs int64 positions, the one
    # that adds the 256 partial sums doesn't
    first, second = null_programs(Tensor.empty(2**17, 2**16, dtype=dtypes.uint8, device="NULL").sum())
    assert kernel_index_dtypes(first) == {dtypes.int64}
    assert kernel_index_dtypes(second) == {dtypes.int32}

def test_null_reduce_over_an_expanded_huge_shape_stays_int32():
    # 2**33 positions, but the expand drops the column index: every load reads row r, whose
    # position fits in int32, so the bounds allow int32 everywhere
    for program in null_programs(Tensor.empty(2**17, 1, device="NULL").expand(2**17, 2**16).sum()):
        assert kernel_index_dtypes(program) == {dtypes.int32}

def grid(rows: int, cols: int, device: str) -> Tensor:
    """The int64 flat positions of a rows x cols grid, computed from two aranges (no buffer)."""
    return (Tensor.arange(rows, dtype=dtypes.int64, device=device).reshape(-1, 1) * cols +
            Tensor.arange(cols, dtype=dtypes.int64, device=device).reshape(1, -1)).reshape(-1)

def test_flat_positions_past_2_31_end_to_end(device):
    flat = grid(2**17, 2**15, device)        # 2**32 positions, only a few computed
    assert flat[-5:].tolist() == [2**32 - 5 + i for i in range(5)]
    assert flat[2**31 - 2:2**31 + 2].tolist() == [2**31 - 2, 2**31 - 1, 2**31, 2**31 + 1]
    assert flat[2**31 + 7:2**31 + 1007].sum().item() == sum(range(2**31 + 7, 2**31 + 1007))
    expanded = Tensor.arange(2**17, device=device).reshape(-1, 1).expand(2**17, 2**15).reshape(-1)
    assert expanded[2**31:2**31 + 2**15].max().item() == 2**16
    assert expanded[-3:].tolist() == [2**17 - 1] * 3

# ---------------------------------------------------------------- arange past int32

def test_arange_int64_past_2_31(device):
    n = 2**31 + 10
    assert Tensor.arange(n, dtype=dtypes.int64, device=device)[-3:].tolist() == [n - 3, n - 2, n - 1]

@pytest.mark.parametrize("args,kwargs", [
    ((0, 2**33, 2**31), {}),
    ((2**40, 2**40 + 5), {}),
    ((2**40, 2**40 + 5), {"dtype": dtypes.int64}),
    ((-2**40, -2**40 + 50, 7), {}),
    ((2**31 + 3, 2**31 - 3, -2), {}),
    ((5,), {}),
    ((2**31 - 3, 2**31), {"dtype": dtypes.int64}),
])
def test_arange_values_and_dtype_match_numpy(device, args, kwargs):
    got = Tensor.arange(*args, device=device, **kwargs)
    want = np.arange(*args, dtype=np.int64)
    # as tinygrad: default_int unless the range needs int64
    fits_int32 = want.size == 0 or (want.min() >= -2**31 and want.max() <= INT32_MAX)
    assert got.dtype == kwargs.get("dtype", dtypes.int32 if fits_int32 else dtypes.int64)
    assert got.tolist() == want.tolist()

def test_arange_that_doesnt_fit_its_dtype_raises():
    with pytest.raises(OverflowError, match="dtypes.int\\b"): Tensor.arange(2**31, 2**31 + 2, dtype=dtypes.int32)
    with pytest.raises(OverflowError, match="dtypes.uchar"): Tensor.arange(250, 260, dtype=dtypes.uint8)
