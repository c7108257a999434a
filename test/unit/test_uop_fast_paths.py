"""The UOp fast paths eager dispatch relies on: member reads of ``Ops``, memoized node properties and
the interning key of plain arguments. Each must behave exactly like the slower form it replaced."""
import enum, math, pickle
import pytest
from fusegrad.dtype import dtypes
from fusegrad.uop import ops
from fusegrad.uop.ops import UOp, Ops, _arg_key

def test_ops_metaclass_has_no_member_fallback():
    # the fallback (a metaclass __getattr__) is what made every Ops.X read slow on Python < 3.12
    assert "__getattr__" not in vars(type(Ops))

def test_ops_still_behaves_as_an_enum():
    assert Ops["ADD"] is Ops.ADD and Ops(Ops.ADD.value) is Ops.ADD
    assert list(Ops)[0] is Ops.BUFFER and len(Ops) == len(Ops.__members__)
    assert isinstance(Ops.ADD, enum.IntEnum) and Ops.ADD == Ops.ADD.value
    assert pickle.loads(pickle.dumps(Ops.MUL)) is Ops.MUL
    assert str(Ops.SINK) == "Ops.SINK" and repr(Ops) == "<enum 'Ops'>"
    with pytest.raises(AttributeError): Ops.NOT_AN_OP
    with pytest.raises(AttributeError): Ops.ADD = 3   # members can't be reassigned
    with pytest.raises(ValueError): Ops(10_000)

def test_shape_is_computed_once_per_node(monkeypatch):
    calls = []
    real = ops._compute_shape
    monkeypatch.setattr(ops, "_compute_shape", lambda u: calls.append(u) or real(u))
    node = UOp(Ops.CONST, dtypes.float32, (UOp(Ops.DEVICE, arg="CPU"),), 2.5).reshape((1, 1)).expand((3, 7))
    assert node.shape == (3, 7) and node.shape == (3, 7)
    assert calls.count(node) == 1
    assert node.__dict__["shape"] == (3, 7)   # stored on the node: later reads call nothing

def test_memoized_property_reads_back_what_it_stored():
    tripled = UOp.variable("memo_x", 2, 9) * 3
    assert tripled.vmin_vmax == (6, 27)
    assert tripled.__dict__["vmin_vmax"] == (6, 27)
    assert isinstance(UOp.__dict__["shape"], ops.memoized_property)

@pytest.mark.parametrize("arg", [None, 3, "CPU", (4, 5), (7, "CPU", 16), (), (1, (2, 3))])
def test_plain_args_are_their_own_interning_key(arg):
    assert _arg_key(arg) == arg

def test_interning_key_still_tells_float_signs_and_bools_apart():
    assert _arg_key(0.0) != _arg_key(-0.0)
    assert _arg_key((1, 0.0)) != _arg_key((1, -0.0))
    assert _arg_key((1, True)) != _arg_key((1, 1))
    nan = float("nan")
    assert _arg_key(nan) == _arg_key(nan) and _arg_key((2, nan)) == _arg_key((2, nan))
    a = UOp(Ops.RESHAPE, dtypes.float32, (UOp.const(dtypes.float32, 1.0),), (1, -0.0))
    b = UOp(Ops.RESHAPE, dtypes.float32, (UOp.const(dtypes.float32, 1.0),), (1, 0.0))
    assert a is not b and math.copysign(1.0, a.arg[1]) == -1.0
