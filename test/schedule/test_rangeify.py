"""schedule/rangeify.py: lowering tensor graphs to kernel index math."""
from fusegrad.dtype import dtypes
from fusegrad.uop.ops import UOp, Ops, AxisType
from fusegrad.schedule.rangeify import KernelBuilder

def _ranges(builder: KernelBuilder, shape: tuple) -> tuple[UOp, ...]:
    return tuple(builder.new_range(size, AxisType.GLOBAL) for size in shape)

def test_reshape_keeps_the_indices_of_shared_outer_dimensions():
    """Only the dimensions a reshape changes are flattened and split again: the ones it shares at the front and the
    back keep their index objects, and size-1 dimensions only come and go (simplifying every whole index was most of a
    first training step's scheduling time)."""
    builder = KernelBuilder({})
    b, c, h, w = _ranges(builder, (4, 6, 5, 7))
    # (4, 6, 35) <- (4, 6, 5, 7): the front two pass through, h and w merge into one index
    merged = builder.reshape_indices((b, c, h * 7 + w), (4, 6, 35), (4, 6, 5, 7))
    assert merged[0] is b and merged[1] is c and merged[2:] == (h, w)
    # (4, 1, 6, 1) <- (4, 6): size-1 dimensions only
    one = UOp.const(dtypes.index, 0)
    assert builder.reshape_indices((b, one, c, one), (4, 1, 6, 1), (4, 6)) == (b, c)
    assert builder.reshape_indices((b, c), (4, 6), (1, 4, 1, 6)) == (one, b, one, c)

def test_reshape_splits_the_changed_dimensions_exactly():
    """The dimensions in between still map to the same element: every output position of (2, 3, 4) -> (6, 4)
    -> (2, 12) lands on the row-major element it is."""
    builder = KernelBuilder({})
    i, j = _ranges(builder, (6, 4))
    src = builder.reshape_indices((i, j), (6, 4), (2, 3, 4))
    assert src[2] is j   # the shared last dimension
    for iv in range(6):
        for jv in range(4):
            values = [int(_evaluate(u, {i: iv, j: jv})) for u in src]
            assert values == [iv // 3, iv % 3, jv]

def _evaluate(u: UOp, env: dict) -> int:
    if u in env: return env[u]
    if u.op is Ops.CONST: return u.arg
    args = [_evaluate(s, env) for s in u.src]
    return {Ops.ADD: lambda a, b: a + b, Ops.MUL: lambda a, b: a * b, Ops.IDIV: lambda a, b: a // b, Ops.MOD: lambda a, b: a % b}[u.op](*args)

def test_an_alus_arg_reaches_the_kernel():
    """An ALU's arg is a fact codegen uses: randn's COS carries the bound of its angle (2 pi), which lets codegen
    reduce by Cody-Waite instead of Payne-Hanek (about 60 ops per lane). Lowering into a kernel dropped every ALU's
    arg, so randn's kernels ran the general reduction (seen as 1.05-1.7 ms per randn(512, 512) instead of 0.5)."""
    import math
    from fusegrad import Tensor
    from fusegrad.codegen.transcendental import decompose_transcendentals
    (item,) = [si for si in Tensor.randn(64, 64).schedule() if any(u.op is Ops.COS for u in si.ast.toposort)]
    (cos,) = [u for u in item.ast.toposort if u.op is Ops.COS]
    assert cos.arg == 2 * math.pi
    # and the payoff: the expanded kernel is the smaller reduction's (the unbounded one is 1.5x its size)
    bounded_size = len(decompose_transcendentals(item.ast).toposort)
    unbounded = item.ast.substitute({cos: UOp(Ops.COS, cos.dtype, cos.src)})
    assert 1.3 * bounded_size < len(decompose_transcendentals(unbounded).toposort)
