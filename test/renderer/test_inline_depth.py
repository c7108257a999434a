"""The C renderer inlines a value used once into its user, but not without end: an expression nested deeper than
MAX_INLINE_NEST ALU ops gets a named variable, so a long chain renders in linear time and compilers don't recurse
through one enormous expression."""
import numpy as np
from fusegrad import Tensor
from fusegrad.codegen import get_program
from fusegrad.device import Device
from fusegrad.uop.ops import Ops
from fusegrad.renderer.cstyle import MAX_INLINE_NEST

def _chain(steps: int) -> Tensor:
    y = Tensor.ones(4).contiguous().realize()
    for _ in range(steps): y = y * 1.0001 + 0.5
    return y

def _source(t: Tensor) -> str:
    (item,) = [item for item in t.schedule() if item.ast.op is Ops.SINK]
    return get_program(item.ast, Device["CPU"].renderer).src

def _deepest_parentheses(src: str) -> int:
    depth = deepest = 0
    for c in src:
        depth += 1 if c == "(" else -1 if c == ")" else 0
        deepest = max(deepest, depth)
    return deepest

def test_short_chain_is_one_expression():
    src = _source(_chain(20))   # 40 ops: inlined whole, as before
    assert "float alu" not in src and _deepest_parentheses(src) >= 39

def test_long_chain_is_split_into_named_values():
    src = _source(_chain(400))  # 800 single-use ops
    assert _deepest_parentheses(src) <= MAX_INLINE_NEST + 8
    assert src.count("float alu") >= 800 // MAX_INLINE_NEST - 1
    ref = np.ones(4, np.float32)
    for _ in range(400): ref = ref * np.float32(1.0001) + np.float32(0.5)
    np.testing.assert_allclose(_chain(400).numpy(), ref, rtol=1e-6)
