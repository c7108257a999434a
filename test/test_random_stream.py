"""The seeded random stream is tinygrad 0.14's, bit for bit.

Two references: a plain-Python Threefry-2x32 written from the cipher's definition and tinygrad's
key/counter scheme (documented in tensor.py beside ``manual_seed``), and draws recorded from tinygrad
0.14 itself (test/fixtures/tinygrad_rng.json, written by scripts/make_rng_fixture.py)."""
import hashlib, json, pathlib
import numpy as np
import pytest
from fusegrad import Tensor, TinyJit, dtypes, Context

FIXTURE = json.loads((pathlib.Path(__file__).parent / "fixtures" / "tinygrad_rng.json").read_text())
MASK = 0xFFFFFFFF

def threefry2x32(x0: int, x1: int, key0: int, key1: int) -> tuple[int, int]:
    """Threefry-2x32 with 20 rounds on Python ints (the reference)."""
    keys = (key0, key1, key0 ^ key1 ^ 0x1BD11BDA)
    rotations = ((13, 15, 26, 6), (17, 29, 16, 24))
    x0, x1 = (x0 + keys[0]) & MASK, (x1 + keys[1]) & MASK
    for block in range(5):
        for r in rotations[block % 2]:
            x0 = (x0 + x1) & MASK
            x1 = (((x1 << r) | (x1 >> (32 - r))) & MASK) ^ x0
        x0 = (x0 + keys[(block + 1) % 3]) & MASK
        x1 = (x1 + keys[(block + 2) % 3] + block + 1) & MASK
    return x0, x1

def reference_words(seed: int, stream: int, counter: int, count: int) -> list[int]:
    """``count`` uint32 words a device with stream id ``stream`` hands out when its counter is ``counter``."""
    key = (int.from_bytes(hashlib.sha256(stream.to_bytes(4, "big")).digest(), "big") & MASK, seed & MASK)
    draw_key = threefry2x32(counter & MASK, counter >> 32, *key)
    half = (count + 1) // 2
    pairs = [threefry2x32(i, i + half, *draw_key) for i in range(half)]
    return ([low for low, _ in pairs] + [high for _, high in pairs])[:count]

def reference_float32_bits(words: list[int]) -> list[int]:
    """float32 bits of the [0, 1) values: the top 23 bits as mantissa of 1.x, minus 1."""
    ones = np.array([(w >> 9) | 0x3F800000 for w in words], dtype=np.uint32).view(np.float32)
    return (ones - np.float32(1)).view(np.uint32).tolist()

def float32_bits(t: Tensor) -> list[int]: return t.numpy().view(np.uint32).ravel().tolist()

def test_rand_follows_the_threefry_definition():
    Tensor.manual_seed(1234)
    first, second = float32_bits(Tensor.rand(3, 5)), float32_bits(Tensor.rand(7))
    assert first == reference_float32_bits(reference_words(1234, 0, 0, 15))
    assert second == reference_float32_bits(reference_words(1234, 0, 15, 7))   # the counter advanced by 15 words

def test_second_device_takes_the_next_stream():
    Tensor.manual_seed(5)
    Tensor.rand(2).realize()
    assert float32_bits(Tensor.rand(4, device="CPU:1")) == reference_float32_bits(reference_words(5, 1, 0, 4))

def test_float32_bits_equal_tinygrad():
    Tensor.manual_seed(42)
    assert float32_bits(Tensor.rand(2, 3)) == FIXTURE["rand_float32"]

@pytest.mark.parametrize("dtype, name", [(dtypes.float16, "rand_float16"), (dtypes.bfloat16, "rand_bfloat16"), (dtypes.float64, "rand_float64")])
def test_other_float_widths_equal_tinygrad(dtype, name):
    Tensor.manual_seed(42)
    Tensor.rand(2, 3).realize()      # the fixture drew these after the float32 draw
    if dtype != dtypes.float16: Tensor.rand(5, dtype=dtypes.float16).realize()
    if dtype == dtypes.float64: Tensor.rand(5, dtype=dtypes.bfloat16).realize()
    unsigned = {2: dtypes.uint16, 8: dtypes.uint64}[dtype.itemsize]
    assert Tensor.rand(*([5] if dtype.itemsize == 2 else [3]), dtype=dtype).bitcast(unsigned).tolist() == FIXTURE[name]

def test_every_derived_sampler_equals_tinygrad():
    Tensor.manual_seed(42)
    for dtype, shape in ((dtypes.float32, (2, 3)), (dtypes.float16, (5,)), (dtypes.bfloat16, (5,)), (dtypes.float64, (3,))):
        Tensor.rand(*shape, dtype=dtype).realize()
    assert Tensor.randint(7, low=-3, high=20).tolist() == FIXTURE["randint"]
    # tinygrad's compiler fuses rand * (high - low) + low into one fma; fusegrad rounds the product first (never
    # contracting outside sums of products: docs/api_fidelity.md), so the last bits may differ
    got = np.array(float32_bits(Tensor.uniform(4, low=-2.0, high=3.0)), np.int64)
    assert np.abs(got - np.array(FIXTURE["uniform_float32"], np.int64)).max() <= 2
    assert Tensor.randperm(9).tolist() == FIXTURE["randperm"]
    with Context(TRAINING=1): kept = (Tensor.ones(12).contiguous().dropout(0.5).numpy() != 0).tolist()
    assert kept == FIXTURE["dropout_kept"]
    assert Tensor([1.0, 2.0, 3.0, 4.0]).multinomial(8, replacement=True).tolist() == FIXTURE["multinomial_replacement"]
    assert Tensor([1.0, 2.0, 3.0, 4.0, 5.0]).multinomial(3).tolist() == FIXTURE["multinomial_no_replacement"]
    # normals go through cos/log/sqrt, whose last bits differ between implementations (tinygrad's own
    # devices differ too): equal within float32 rounding of those functions
    np.testing.assert_allclose(Tensor.randn(6).numpy(), FIXTURE["randn"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(Tensor.normal(4, mean=3.0, std=0.5).numpy(), FIXTURE["normal"], rtol=1e-5, atol=1e-6)
    Tensor.manual_seed(7)
    assert float32_bits(Tensor.rand(1000))[::97] == FIXTURE["rand_1000_every_97th"]

def test_counter_carries_into_its_high_word():
    Tensor.manual_seed(3)
    Tensor.rand(1).realize()
    device = Tensor.empty(1).device
    Tensor._device_rng_counters[device].assign(Tensor([0xFFFFFFFE], device=device, dtype=dtypes.uint64)).realize()
    assert float32_bits(Tensor.rand(4)) == FIXTURE["carry_rand"]
    assert FIXTURE["carry_rand"] == reference_float32_bits(reference_words(3, 0, 0xFFFFFFFE, 4))

def test_jit_replays_advance_the_stream():
    @TinyJit
    def draw() -> Tensor: return (Tensor.rand(6) * 1).realize()
    Tensor.manual_seed(11)
    jitted = [float32_bits(draw()) for _ in range(5)]
    Tensor.manual_seed(11)
    eager = [float32_bits(Tensor.rand(6)) for _ in range(5)]
    assert jitted == eager and len({tuple(x) for x in jitted}) == 5

@pytest.mark.parametrize("dtype", [dtypes.float16, dtypes.bfloat16])
def test_low_precision_rand_never_returns_one(dtype):
    Tensor.manual_seed(0)
    values = Tensor.rand(1 << 16, dtype=dtype).float().numpy()
    assert values.max() < 1.0 and values.min() >= 0.0
    assert len(np.unique(values)) > 100   # and it is not degenerate
