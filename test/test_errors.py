"""Bad input fails early (when the graph is built, before anything runs) with a clear message."""
import re
import numpy as np
import pytest
from fusegrad import Tensor, dtypes, GlobalCounters

def _shape_pattern(*shapes) -> str:
    """A regex that finds every shape in the message, e.g. (2, 3) and (4,)."""
    return ".*".join(re.escape(str(tuple(s))) for s in shapes)

def _raises_early(exc, pattern, fn):
    """``fn`` raises ``exc`` whose message matches ``pattern``, and no kernel ran before it."""
    GlobalCounters.reset()
    with pytest.raises(exc, match=pattern):
        fn()
    assert GlobalCounters.kernel_count == 0

# ============================================================================ broadcasting

@pytest.mark.parametrize("sa,sb", [((2, 3), (4,)), ((3,), (4,)), ((2, 3), (3, 2)), ((5, 1, 2), (3, 3)), ((0,), (2,))], ids=str)
@pytest.mark.parametrize("op", ["add", "mul", "sub", "div", "lt", "eq", "maximum", "where"])
def test_broadcast_mismatch(device, sa, sb, op):
    a, b = Tensor.ones(*sa, device=device).contiguous(), Tensor.ones(*sb, device=device).contiguous()
    fn = {"add": lambda: a + b, "mul": lambda: a * b, "sub": lambda: a - b, "div": lambda: a / b, "lt": lambda: a < b,
          "eq": lambda: a == b, "maximum": lambda: a.maximum(b), "where": lambda: (a > 0).where(b, 1.0)}[op]
    _raises_early(IndexError, f"(?i)broadcast.*{_shape_pattern(sa, sb)}", fn)   # tinygrad's type

def test_expand_mismatch(device):
    t = Tensor.ones(2, 3, device=device)
    _raises_early(ValueError, _shape_pattern((2, 3)), lambda: t.expand(4, 3))
    _raises_early(ValueError, _shape_pattern((2, 3)), lambda: t.expand(3))

def test_matmul_mismatch(device):
    a, b = Tensor.ones(2, 3, device=device), Tensor.ones(4, 5, device=device)
    _raises_early(RuntimeError, _shape_pattern((2, 3), (4, 5)), lambda: a @ b)
    _raises_early(RuntimeError, "1-d|dimension", lambda: Tensor(2.0, device=device) @ a)

def test_cat_stack_mismatch(device):
    a, b = Tensor.ones(2, 3, device=device), Tensor.ones(2, 4, device=device)
    _raises_early(RuntimeError, _shape_pattern((2, 3), (2, 4)), lambda: a.cat(b, dim=0))
    _raises_early(RuntimeError, _shape_pattern((2, 3), (2, 4)), lambda: Tensor.stack(a, b))

# ============================================================================ reshape and movement

@pytest.mark.parametrize("src,dst", [((2, 3), (4, 2)), ((2, 3), (7,)), ((6,), (5, -1)), ((4,), (3, -1)), ((2, 3), (0, -1)), ((0,), (1,))], ids=str)
def test_reshape_wrong_size(device, src, dst):
    t = Tensor.ones(*src, device=device)
    _raises_early(ValueError, _shape_pattern(src, dst), lambda: t.reshape(dst))

def test_reshape_two_minus_ones_and_negative(device):
    t = Tensor.ones(2, 3, device=device)
    _raises_early(RuntimeError, r"\(-1, -1\)|one dimension", lambda: t.reshape(-1, -1))
    _raises_early(ValueError, r"-2", lambda: t.reshape(-2, -3))

def test_bad_permute_pad_shrink(device):
    t = Tensor.ones(2, 3, device=device)
    _raises_early(RuntimeError, r"permutation", lambda: t.permute(0, 0))
    _raises_early(RuntimeError, r"permutation", lambda: t.permute(0))
    _raises_early(ValueError, _shape_pattern((2, 3)), lambda: t.shrink(((0, 3), None)))
    _raises_early(ValueError, _shape_pattern((2, 3)), lambda: t.shrink(((1, 0), None)))
    _raises_early(ValueError, r"shrink needs 2", lambda: t.shrink(((0, 1),)))
    _raises_early(ValueError, r"padding|pad", lambda: t.pad(((1, 1),)))
    _raises_early(ValueError, r"reflect", lambda: t.pad(((0, 0), (3, 0)), mode="reflect"))
    _raises_early(NotImplementedError, r"'nope'", lambda: t.pad(((0, 0), (1, 0)), mode="nope"))

def test_negative_shape(device):
    _raises_early(ValueError, r"-1", lambda: Tensor.zeros(2, -1, device=device))   # (tinygrad's type)
    _raises_early(ValueError, r"-2", lambda: Tensor.empty(-2, device=device))
    _raises_early(ValueError, r"-3", lambda: Tensor.eye(-3, device=device))

# ============================================================================ axes

@pytest.mark.parametrize("axis", [2, -3, 5, (0, 2), (1, -4)], ids=str)
@pytest.mark.parametrize("op", ["sum", "max", "min", "mean", "prod", "any", "std", "softmax", "argmax", "logsumexp"])
def test_invalid_axis(device, op, axis):
    if op in ("softmax", "argmax") and isinstance(axis, tuple): axis = axis[1]
    t = Tensor.ones(2, 3, device=device)
    bad = [a for a in (axis if isinstance(axis, tuple) else (axis,)) if not -2 <= a < 2][0]
    _raises_early(IndexError, rf"(?i)dimension {bad}\b.*out of range.*2 dimensions", lambda: getattr(t, op)(axis))

def test_invalid_axis_movement(device):
    t = Tensor.ones(2, 3, device=device)
    for fn in (lambda: t.transpose(0, 2), lambda: t.flip(3), lambda: t.squeeze(2), lambda: t.unsqueeze(4), lambda: t.flatten(3),
               lambda: t.cat(t, dim=2), lambda: t.permute(0, 2), lambda: t.unsqueeze(-4)):
        _raises_early(IndexError, r"out of range", fn)

def test_repeated_axis(device):
    t = Tensor.ones(2, 3, device=device)
    _raises_early(RuntimeError, r"repeated axis", lambda: t.sum((1, -1)))
    _raises_early(RuntimeError, r"repeated axis", lambda: t.flip(0, 0))

def test_zero_d_axes(device):
    s = Tensor(1.0, device=device)
    _raises_early(IndexError, r"dimension 1 is out of range", lambda: s.sum(1))
    assert s.sum(0).item() == 1.0 and s.sum(-1).item() == 1.0

# ============================================================================ indexing

@pytest.mark.parametrize("index,bad,dim,size", [
  (3, 3, 0, 3), (-4, -4, 0, 3), ((0, 5), 5, 1, 4), ((slice(None), -5), -5, 1, 4), ((Ellipsis, 5), 5, 2, 5), ((None, 3), 3, 0, 3),
  ((1, None, 2, 7), 7, 2, 5), ((Ellipsis, 9, 0), 9, 1, 4), ((slice(None, None, -1), None, 4), 4, 1, 4)], ids=str)
def test_index_out_of_range(device, index, bad, dim, size):
    """The message names the index, the dimension of the indexed tensor and its size (like numpy)."""
    t = Tensor.ones(3, 4, 5, device=device)
    _raises_early(IndexError, rf"index {bad} is out of bounds for dimension {dim} with size {size}", lambda: t[index])

def test_too_many_indices_and_bad_types(device):
    t = Tensor.ones(3, 4, device=device)
    _raises_early(IndexError, r"too many indices", lambda: t[0, 0, 0])
    _raises_early(IndexError, r"float", lambda: t[1.5])
    _raises_early(IndexError, r"str", lambda: t["a"])
    _raises_early(IndexError, r"single ellipsis", lambda: t[..., ...])
    _raises_early(ValueError, r"step cannot be zero", lambda: t[::0])
    _raises_early(IndexError, r"float", lambda: t[Tensor([0.5, 1.5], device=device)])

def test_scalar_truthiness_and_item(device):
    t = Tensor([1.0, 2.0], device=device)
    with pytest.raises(TypeError, match=r"2 elements"): bool(t)
    with pytest.raises(RuntimeError, match=r"\(2,\)"): t.item()
    with pytest.raises(TypeError, match=r"0-d"): len(Tensor(1.0, device=device))

# ============================================================================ dtype misuse

@pytest.mark.parametrize("dtype", [dtypes.float16, dtypes.float32, dtypes.float64], ids=str)
def test_int_only_ops_on_floats(device, dtype):
    a, b = Tensor([1.0, 2.0], device=device, dtype=dtype), Tensor([3.0, 4.0], device=device, dtype=dtype)
    name = str(dtype)
    _raises_early(RuntimeError, re.escape(name), lambda: a & b)   # tinygrad's type
    _raises_early(RuntimeError, re.escape(name), lambda: a | b)
    _raises_early(RuntimeError, re.escape(name), lambda: a ^ b)
    _raises_early(RuntimeError, re.escape(name), lambda: ~a)
    _raises_early(RuntimeError, re.escape(name), lambda: a.bitwise_not())
    _raises_early(RuntimeError, re.escape(name), lambda: a << 1)
    _raises_early(RuntimeError, re.escape(name), lambda: a >> 1)
    _raises_early(TypeError, re.escape(name), lambda: a.idiv(b))

@pytest.mark.parametrize("dtype", [dtypes.int32, dtypes.uint8, dtypes.bool], ids=str)
def test_float_only_creation_with_int_dtype(device, dtype):
    _raises_early(ValueError, re.escape(str(dtype)), lambda: Tensor.rand(3, device=device, dtype=dtype))

def test_bad_div_rounding_mode(device):
    _raises_early(RuntimeError, r"'round'", lambda: Tensor([1, 2], device=device).div(2, rounding_mode="round"))

def test_unknown_dtype_name(device):
    _raises_early(AttributeError, r"float31", lambda: Tensor([1], device=device, dtype="float31"))
    _raises_early(AttributeError, r"float31", lambda: Tensor([1], device=device).cast("float31"))

def test_bad_construction_input(device):
    _raises_early(ValueError, r"ragged", lambda: Tensor([[1, 2], [3]], device=device))
    _raises_early(RuntimeError, r"dict", lambda: Tensor({"a": 1}, device=device))
    _raises_early(TypeError, r"object", lambda: Tensor(np.array([object()]), device=device))
    _raises_early(RuntimeError, r"str", lambda: Tensor([1.0], device=device) + "a")

def test_bad_random_and_creation_args(device):
    _raises_early(ValueError, r"low=5, high=2", lambda: Tensor.randint(3, low=5, high=2, device=device))
    _raises_early(RuntimeError, r"step.*zero", lambda: Tensor.arange(0, 5, 0, device=device))
    _raises_early(ValueError, r"non-negative", lambda: Tensor.linspace(0, 1, -1, device=device))

def test_assign_mismatch(device):
    t = Tensor.zeros(2, 3, device=device).contiguous().realize()
    _raises_early(ValueError, _shape_pattern((3, 2), (2, 3)), lambda: t.assign(Tensor.ones(3, 2, device=device)))

def test_clip_needs_a_bound(device):
    _raises_early(RuntimeError, r"min_.*max_", lambda: Tensor([1.0], device=device).clip())

# ============================================================================ devices

@pytest.mark.parametrize("name", ["NOPE", "cpux", "GPUU:0", "PYTHONX"])
def test_unknown_device(name):
    with pytest.raises(RuntimeError, match=rf"(?i)unknown device.*{re.escape(name)}"):
        Tensor([1.0, 2.0], device=name)
    with pytest.raises(RuntimeError, match=rf"(?i)unknown device.*{re.escape(name)}"):
        Tensor.zeros(2, device=name)
    with pytest.raises(RuntimeError, match=rf"(?i)unknown device.*{re.escape(name)}"):
        Tensor([1.0]).to(name)

def test_device_must_be_a_string():
    with pytest.raises(TypeError, match=r"int"):
        Tensor([1.0], device=3)

def test_mixing_devices_in_one_op():
    a, b = Tensor([1.0], device="CPU"), Tensor([1.0], device="PYTHON")
    with pytest.raises(RuntimeError, match=r"CPU.*PYTHON|PYTHON.*CPU"):   # tinygrad's type (it raises at realize)
        a + b
    with pytest.raises(RuntimeError, match=r"CPU.*PYTHON|PYTHON.*CPU"):   # tinygrad's type for an assign across devices
        a.assign(b)

def test_device_mismatches_raise_runtime_error_before_any_work():
    """tinygrad raises RuntimeError for operands on different devices (at realize; here at the call): binary ops,
    where's condition, gather's and scatter's index."""
    cpu, other = Tensor([1.0, 2.0], device="CPU"), Tensor([1.0, 2.0], device="PYTHON")
    for make in (lambda: cpu + other, lambda: Tensor([True, False], device="CPU").where(other, 0),
                 lambda: Tensor([True, False], device="PYTHON").where(cpu, cpu * 2),
                 lambda: Tensor.zeros(3).scatter(0, Tensor([1], device="PYTHON"), Tensor([5.0])),
                 lambda: Tensor.zeros(3).gather(0, Tensor([1], device="PYTHON"))):
        with pytest.raises(RuntimeError, match="CPU.*PYTHON|PYTHON.*CPU"): make()

def test_shape_sizes_must_be_ints():
    """tinygrad's rules: a float or bool size is a RuntimeError where it is given (not a failure at realize), a
    negative size a ValueError; numpy integers are ints, and constructors take a bool as 0 or 1 (as tinygrad's)."""
    t = Tensor.arange(12)
    for make in (lambda: t.reshape(3.0, 4), lambda: t.reshape(True, 12), lambda: t.view(3.0, 4), lambda: t.reshape(3, 4).expand(2.0, 3, 4),
                 lambda: Tensor.ones(2.5)):
        with pytest.raises(RuntimeError, match="shape must be int"): make()
    for make in (lambda: Tensor.zeros(2, -3), lambda: Tensor.empty(-5), lambda: Tensor.rand(2, -2)):
        with pytest.raises(ValueError, match="negative"): make()
    assert t.reshape(np.int64(3), 4).shape == (3, 4) and Tensor.ones((True, 2)).shape == (1, 2)

def test_host_allocation_failures_are_memory_errors():
    """A buffer past what the machine or ctypes can hold is a MemoryError naming the size (was a bare OverflowError from
    ctypes, or an OSError from mmap)."""
    for size in (2 ** 46, 2 ** 62):   # (256 TiB: past the address space, even where the OS overcommits)
        with pytest.raises(MemoryError, match=f"can't allocate {size * 4} bytes"): Tensor.empty(size).realize()
