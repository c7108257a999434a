"""tinygrad 0.14 API that fusegrad gained in round 3 of issue 36: param marking, invalids, the raw RNG
primitives (threefry, random_bits), Keccak hashing and tinygrad's dtype spelling.

Expected values are tinygrad 0.14's, observed by running it (CPU device), or hashlib's for the hashes.
"""
import hashlib, inspect
import numpy as np
import pytest
from fusegrad import Tensor, dtypes, nn
from fusegrad.dtype import DType
from fusegrad.nn.state import get_parameters

# ---------------------------------------------------------------- is_param / is_param_ / as_param

def test_is_param_defaults_true_and_follows_requires_grad():
    # tinygrad: every tensor is a param unless marked; fusegrad: requires_grad=False is the same mark
    assert Tensor([1.0]).is_param is True
    assert Tensor([1.0], requires_grad=True).is_param is True
    assert Tensor([1.0], requires_grad=False).is_param is False
    assert Tensor([1, 2]).is_param is True

def test_is_param_underscore_marks_in_place_and_returns_self():
    t = Tensor.zeros(3)
    assert t.is_param_(False) is t and t.is_param is False and t.requires_grad is False
    assert t.is_param_() is t and t.is_param is True and t.requires_grad is None
    # an explicit requires_grad=True stays when the tensor is marked a param again
    u = Tensor([1.0], requires_grad=True).is_param_(True)
    assert u.requires_grad is True

def test_optimizer_splits_params_and_buffers_by_is_param():
    w, running = Tensor([1.0, 2.0]), Tensor.zeros(2).is_param_(False)
    opt = nn.optim.SGD([w, running], lr=0.5)
    assert opt.params == [w] and opt.buffers == [running]

def test_batchnorm_running_stats_are_not_params():
    bn = nn.BatchNorm(3)
    params = get_parameters(bn)
    marked = {id(t) for t in params if not t.is_param}
    assert id(bn.running_mean) in marked and id(bn.running_var) in marked and id(bn.weight) not in marked
    opt = nn.optim.SGD(params, lr=0.1)
    assert {id(t) for t in opt.buffers} == marked

def test_as_param_is_a_placeholder_like_self():
    t = Tensor([[1, 2, 3]], dtype=dtypes.int16)
    p = t.as_param(0)
    assert (p.shape, p.dtype, p.device, p.is_param) == ((1, 3), dtypes.int16, t.device, True)
    assert p.uop is not t.uop
    with pytest.raises(ValueError): t.as_param(-1)

# ---------------------------------------------------------------- invalids

@pytest.mark.parametrize("args, kwargs, shape, dtype", [
    ((2, 3), {}, (2, 3), dtypes.bool),          # tinygrad 0.14: the Invalid constant's dtype, bool
    ((4,), {"dtype": "int32"}, (4,), dtypes.int32),
    ((), {"dtype": dtypes.half}, (), dtypes.half),
    ((2, 0), {}, (2, 0), dtypes.bool),
    (((3, 2),), {"dtype": dtypes.uint8}, (3, 2), dtypes.uint8),
])
def test_invalids_shape_and_dtype(args, kwargs, shape, dtype):
    t = Tensor.invalids(*args, **kwargs)
    assert t.shape == shape and t.dtype == dtype
    assert t.numpy().shape == shape   # realizable (its values are undefined)

def test_invalids_can_be_written():
    t = Tensor.invalids(3, dtype=dtypes.float32)
    t.assign(Tensor([1.0, 2.0, 3.0]))
    assert t.tolist() == [1.0, 2.0, 3.0]

# ---------------------------------------------------------------- Tensor(buffer=) does not exist in tinygrad 0.14

def test_constructor_takes_no_buffer_argument():
    # tinygrad 0.14's Tensor.__init__(data, device, dtype) has no buffer=; fusegrad's doesn't invent one
    assert "buffer" not in inspect.signature(Tensor.__init__).parameters
    with pytest.raises(TypeError): Tensor([1.0], buffer=None)

# ---------------------------------------------------------------- threefry / random_bits (values from tinygrad 0.14)

def test_threefry_matches_tinygrad():
    x = Tensor([0, 1, 2**40 + 5, 2**64 - 1], dtype=dtypes.uint64)
    out = x.threefry(Tensor(0x1234567890abcdef, dtype=dtypes.uint64))
    assert out.dtype == dtypes.uint64 and repr(out.dtype) == "dtypes.ulong"
    assert out.tolist() == [5668690986549717120, 5770653626354771, 13661590655143906144, 13400577941247272481]

def test_threefry_broadcasts_the_key():
    out = Tensor([[1, 2], [3, 4]], dtype=dtypes.uint64).threefry(Tensor([7, 9], dtype=dtypes.uint64))
    assert out.tolist() == [[5731837475286458671, 15892597619904004717], [18293117372049887412, 2285924257932403250]]

def test_threefry_needs_uint64():
    with pytest.raises(RuntimeError): Tensor([1, 2], dtype=dtypes.uint32).threefry(Tensor(3, dtype=dtypes.uint64))

RB_7 = [2688976166, 3725325096, 2844835363, 3304239405, 1095000968, 770636860, 3708711925]

@pytest.mark.parametrize("num, want", [(0, []), (1, [3539849110]), (7, RB_7), (8, RB_7 + [1549556842])])
def test_random_bits_matches_tinygrad(num, want):
    bits = Tensor.random_bits(Tensor([11, 22], dtype=dtypes.uint32), Tensor([5, 0], dtype=dtypes.uint32), num)
    assert bits.dtype == dtypes.uint32 and bits.shape == (num,)
    assert bits.tolist() == want

def test_random_bits_counter_carries_into_the_high_word():
    bits = Tensor.random_bits(Tensor([11, 22], dtype=dtypes.uint32), Tensor([0xfffffffe, 3], dtype=dtypes.uint32), 5)
    assert bits.tolist() == [1481541925, 660106126, 3972212027, 2113021228, 2974441890]

def test_random_bits_is_the_stream_rand_draws_from():
    # tinygrad 0.14 after manual_seed(42): the CPU key is [347607321, 42], the counter starts at 0
    key, counter = Tensor([347607321, 42], dtype=dtypes.uint32), Tensor([0, 0], dtype=dtypes.uint32)
    assert Tensor.random_bits(key, counter, 6).tolist() == [1636565037, 41985424, 484475432, 505515671, 2170512860, 1598201759]
    Tensor.manual_seed(42)
    np.testing.assert_array_equal(Tensor.rand(3, device="CPU").numpy(),
                                  np.array([0.5334206819534302, 0.6701551675796509, 0.7630789279937744], dtype=np.float32))

# ---------------------------------------------------------------- keccak / hash (hashlib is the reference)

def _message(n: int, mul: int = 7, add: int = 3) -> bytes: return bytes((i * mul + add) % 256 for i in range(n))

@pytest.mark.parametrize("n", [0, 1, 135, 136, 137, 300])   # around sha3_256's 136-byte rate
def test_keccak_sha3_256_matches_hashlib(n):
    data = _message(n)
    t = Tensor(data) if n else Tensor.empty(0, dtype=dtypes.uint8)
    digest = t.keccak()
    assert digest.dtype == dtypes.uint8 and digest.shape == (32,)
    assert bytes(digest.tolist()) == hashlib.sha3_256(data).digest()

@pytest.mark.parametrize("n", [5, 167, 168, 200])
def test_keccak_shake_128_and_sha3_224_match_hashlib(n):
    data = _message(n, 11, 1)
    assert bytes(Tensor(data).keccak("shake_128").tolist()) == hashlib.shake_128(data).digest(16)
    assert bytes(Tensor(data).keccak("sha3_224").tolist()) == hashlib.sha3_224(data).digest()

def test_keccak_hashes_each_row_of_the_last_dim():
    rows = Tensor([[1, 2, 3, 4], [5, 6, 7, 8]], dtype=dtypes.uint8).keccak()
    assert rows.shape == (2, 32)
    assert [bytes(r) for r in rows.tolist()] == [hashlib.sha3_256(bytes([1, 2, 3, 4])).digest(), hashlib.sha3_256(bytes([5, 6, 7, 8])).digest()]

def test_keccak_of_a_wider_dtype_hashes_its_bytes():
    # (tinygrad 0.14 raises a reshape error here; fusegrad hashes the little-endian bytes)
    values = np.array([1, 2, 3], dtype=np.int32)
    assert bytes(Tensor(values).keccak().tolist()) == hashlib.sha3_256(values.tobytes()).digest()

def _tree_hash_reference(data: bytes) -> bytes:
    """tinygrad 0.14's Tensor.hash with hashlib: 1 MiB chunks of 256 SHAKE-128 row digests, hashed again."""
    def chunk(c: bytes) -> bytes:
        return hashlib.shake_128(b"".join(hashlib.shake_128(c[i:i + 4096]).digest(16) for i in range(0, 2**20, 4096))).digest(16)
    return chunk(data.ljust(2**20, b"\0"))

def test_hash_matches_the_tree_of_shake_128():
    digest = Tensor(b"Hello World!").hash()
    assert digest.dtype == dtypes.uint8 and digest.shape == (16,)
    assert bytes(digest.tolist()) == _tree_hash_reference(b"Hello World!")
    assert bytes(digest.tolist()).hex() == "e02b050b7b6e9bb60f9c033633502ee3"

# ---------------------------------------------------------------- dtype spelling (tinygrad 0.14's repr/str)

TINYGRAD_SPELLING = {
    "bool": "dtypes.bool", "int8": "dtypes.char", "uint8": "dtypes.uchar", "int16": "dtypes.short", "uint16": "dtypes.ushort",
    "int32": "dtypes.int", "uint32": "dtypes.uint", "int64": "dtypes.long", "uint64": "dtypes.ulong", "float16": "dtypes.half",
    "bfloat16": "dtypes.bfloat16", "float32": "dtypes.float", "float64": "dtypes.double", "fp8e4m3": "dtypes.fp8e4m3",
    "fp8e5m2": "dtypes.fp8e5m2", "fp8e4m3fnuz": "dtypes.fp8e4m3fnuz", "fp8e5m2fnuz": "dtypes.fp8e5m2fnuz", "void": "dtypes.void",
    "weakint": "dtypes.weakint", "weakfloat": "dtypes.weakfloat", "half": "dtypes.half", "float": "dtypes.float",
    "double": "dtypes.double", "uchar": "dtypes.uchar", "ushort": "dtypes.ushort", "uint": "dtypes.uint", "ulong": "dtypes.ulong",
    "char": "dtypes.char", "short": "dtypes.short", "int": "dtypes.int", "long": "dtypes.long"}

@pytest.mark.parametrize("name", sorted(TINYGRAD_SPELLING))
def test_dtype_repr_and_str_spelled_as_tinygrad(name):
    dtype = getattr(dtypes, name)
    assert repr(dtype) == str(dtype) == f"{dtype}" == TINYGRAD_SPELLING[name]
    assert eval(repr(dtype), {"dtypes": dtypes}) is dtype   # the spelling names the dtype back

def test_default_dtypes_and_containers_use_the_spelling():
    assert repr(dtypes.default_float) == "dtypes.float" and repr(dtypes.default_int) == "dtypes.int"
    assert repr([dtypes.int32, dtypes.float16]) == "[dtypes.int, dtypes.half]"

def test_vector_and_pointer_dtypes_use_the_scalar_spelling():
    assert repr(dtypes.float32.vec(4)) == "dtypes.float.vec(4)"
    assert repr(dtypes.int8.vec(2)) == "dtypes.char.vec(2)"
    assert repr(dtypes.float32.ptr(16)) == "dtypes.float.ptr(16)"
    assert repr(dtypes.half.ptr(local=True)) == "dtypes.half.ptr(-1, local=True)"
    assert all(isinstance(eval(repr(d), {"dtypes": dtypes}), DType) for d in (dtypes.int8.vec(2), dtypes.float32.ptr(16)))
