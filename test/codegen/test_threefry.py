"""codegen/threefry.py: Ops.THREEFRY expanded into uint32 arithmetic in kernels."""
import numpy as np
import pytest
from fusegrad import Tensor, Device, dtypes
from fusegrad.uop.ops import UOp, Ops
from fusegrad.uop.alu import exec_alu
from fusegrad.codegen import get_program

# Random123's known answers for threefry2x32_20, as uint64 (high word << 32 | low word): (block, key) -> output
_KNOWN = [(0, 0, 0x99BA4EFE_6B200159), (0xFFFFFFFF_FFFFFFFF, 0xFFFFFFFF_FFFFFFFF, 0xBB002BE7_1CB996FC),
          (0x85A308D3_243F6A88, 0x03707344_13198A2E, 0x483DF7A0_C4923A9C)]

@pytest.mark.parametrize("block,key,expected", _KNOWN)
def test_constant_folding_runs_the_cipher(block, key, expected):
    assert exec_alu(Ops.THREEFRY, dtypes.uint64, (block, key)) == expected

def test_threefry_of_whole_uint64_values(device):
    """A block and key that are real uint64 values (loaded, not packed from two words): the kernel splits them into
    words with a cast and a shift, and joins the result."""
    blocks = np.array([b for b, _, _ in _KNOWN] + [12345, 2**63 + 7], dtype=np.uint64)
    keys = np.array([k for _, k, _ in _KNOWN] + [99, 2**40 + 3], dtype=np.uint64)
    out = Tensor(UOp(Ops.THREEFRY, dtypes.uint64, (Tensor(blocks, device=device).uop, Tensor(keys, device=device).uop)))
    expected = [exec_alu(Ops.THREEFRY, dtypes.uint64, (int(b), int(k))) for b, k in zip(blocks, keys)]
    assert out.numpy().tolist() == expected
    assert expected[:3] == [e for _, _, e in _KNOWN]

def test_a_draws_kernel_computes_in_uint32_only():
    """randn's kernel: the uint64 packing of counters and keys around THREEFRY is gone after the expansion (the
    words are used directly), so every lane is 32 bits wide and the loop vectorizes."""
    Tensor.manual_seed(1)
    draw = Tensor.randn(64, 64, device="CPU")
    (item,) = draw.schedule()
    program = get_program(item.ast, Device["CPU"].renderer)
    assert not any(u.op is Ops.THREEFRY for u in program.uops)
    assert not any(u.dtype.scalar() in (dtypes.uint64, dtypes.int64) for u in program.uops), \
        sorted({str(u.dtype) for u in program.uops})
