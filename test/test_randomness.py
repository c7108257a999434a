"""Random ops follow their distributions (Kolmogorov-Smirnov tests against scipy) and are
reproducible from manual_seed."""
import math
import numpy as np
import pytest
from scipy import stats
from fusegrad import Tensor, dtypes

N = 20000
ALPHA = 1e-4   # a correct generator fails a single test this rarely; seeds are fixed, so runs are deterministic

def _ks(sample: np.ndarray, cdf) -> float:
    return stats.kstest(sample.reshape(-1).astype(np.float64), cdf).pvalue

def test_rand_is_uniform():
    Tensor.manual_seed(1)
    assert _ks(Tensor.rand(N).numpy(), stats.uniform(0, 1).cdf) > ALPHA

def test_randn_is_normal():
    Tensor.manual_seed(2)
    assert _ks(Tensor.randn(N).numpy(), stats.norm().cdf) > ALPHA

def test_normal_and_uniform_parameters():
    Tensor.manual_seed(3)
    assert _ks(Tensor.normal(N, mean=3.0, std=0.5).numpy(), stats.norm(3.0, 0.5).cdf) > ALPHA
    assert _ks(Tensor.uniform(N, low=-2.0, high=5.0).numpy(), stats.uniform(-2.0, 7.0).cdf) > ALPHA

def test_randint_is_discrete_uniform():
    Tensor.manual_seed(4)
    values = Tensor.randint(N, low=-3, high=7).numpy()
    assert values.min() >= -3 and values.max() < 7
    counts = np.bincount(values + 3, minlength=10)
    assert stats.chisquare(counts).pvalue > ALPHA

def test_kaiming_and_glorot_bounds():
    Tensor.manual_seed(5)
    w = Tensor.kaiming_uniform(200, 100).numpy()
    bound = math.sqrt(3.0) * math.sqrt(2.0 / (1 + 0.01 ** 2)) / math.sqrt(100)
    assert np.abs(w).max() <= bound and _ks(w, stats.uniform(-bound, 2 * bound).cdf) > ALPHA
    g = Tensor.glorot_uniform(200, 100).numpy()
    glorot = math.sqrt(6 / 300)
    assert np.abs(g).max() <= glorot and _ks(g, stats.uniform(-glorot, 2 * glorot).cdf) > ALPHA

def test_two_samples_are_independent_draws():
    Tensor.manual_seed(6)
    a, b = Tensor.rand(N).numpy(), Tensor.rand(N).numpy()
    assert not np.array_equal(a, b)
    assert abs(np.corrcoef(a, b)[0, 1]) < 0.05

def test_manual_seed_reproduces():
    Tensor.manual_seed(42)
    first = (Tensor.rand(5).numpy(), Tensor.randn(3, 3).numpy())
    Tensor.manual_seed(42)
    second = (Tensor.rand(5).numpy(), Tensor.randn(3, 3).numpy())
    for x, y in zip(first, second): np.testing.assert_array_equal(x, y)
    Tensor.manual_seed(43)
    assert not np.array_equal(Tensor.rand(5).numpy(), first[0])

def test_same_numbers_on_every_device():
    Tensor.manual_seed(7)
    cpu = Tensor.rand(64, device="CPU").numpy()
    Tensor.manual_seed(7)
    python = Tensor.rand(64, device="PYTHON").numpy()
    np.testing.assert_array_equal(cpu, python)

@pytest.mark.parametrize("dtype", [dtypes.float16, dtypes.bfloat16])
def test_randn_low_precision_is_finite(dtype):
    Tensor.manual_seed(8)
    values = Tensor.randn(256, 256, dtype=dtype).float().numpy()
    assert np.isfinite(values).all() and abs(values.mean()) < 0.05 and abs(values.std() - 1) < 0.05

def test_randperm_and_multinomial_if_present():
    Tensor.manual_seed(9)
    perm = Tensor.randperm(50).numpy()
    assert sorted(perm.tolist()) == list(range(50))
    probs = Tensor([0.1, 0.2, 0.7])
    draws = probs.multinomial(6000, replacement=True).numpy()
    counts = np.bincount(draws, minlength=3)
    assert stats.chisquare(counts, f_exp=np.array([0.1, 0.2, 0.7]) * 6000).pvalue > ALPHA

# ---------------------------------------------------------------- the Threefry-2x32 cipher built as UOps
def _threefry_reference(x0: int, x1: int, k0: int, k1: int) -> tuple[int, int]:
    """Threefry-2x32 (20 rounds) on Python ints, written from the Random123 paper's description."""
    mask = 0xFFFFFFFF
    keys = (k0, k1, k0 ^ k1 ^ 0x1BD11BDA)
    x0, x1 = (x0 + k0) & mask, (x1 + k1) & mask
    for block in range(5):
        for r in ((13, 15, 26, 6), (17, 29, 16, 24))[block % 2]:
            x0 = (x0 + x1) & mask
            x1 = (((x1 << r) | (x1 >> (32 - r))) & mask) ^ x0
        x0 = (x0 + keys[(block + 1) % 3]) & mask
        x1 = (x1 + keys[(block + 2) % 3] + block + 1) & mask
    return x0, x1

# Random123's known-answer vectors for threefry2x32_20: (counter, key) -> output
_THREEFRY_KAT = [((0, 0), (0, 0), (0x6B200159, 0x99BA4EFE)),
                 ((0xFFFFFFFF, 0xFFFFFFFF), (0xFFFFFFFF, 0xFFFFFFFF), (0x1CB996FC, 0xBB002BE7)),
                 ((0x243F6A88, 0x85A308D3), (0x13198A2E, 0x03707344), (0xC4923A9C, 0x483DF7A0))]

@pytest.mark.parametrize("counter,key,expected", _THREEFRY_KAT)
def test_threefry_known_answers(counter, key, expected):
    from fusegrad.tensor import _threefry2x32
    u32 = lambda v: Tensor([v], dtype=dtypes.uint32)
    out0, out1 = _threefry2x32(u32(counter[0]), u32(counter[1]), u32(key[0]), u32(key[1]))
    assert (out0.item(), out1.item()) == expected == _threefry_reference(*counter, *key)

def test_threefry_scalar_key_broadcasts_over_a_block():
    # rand's second cipher call: a block of counters under a 0-d key (the key broadcasts, constants too)
    from fusegrad.tensor import _threefry2x32
    rng = np.random.default_rng(0)
    low, high = rng.integers(0, 2**32, size=(2, 37), dtype=np.uint64).astype(np.uint32)
    k0, k1 = 0x9E3779B9, 0x7F4A7C15
    out0, out1 = _threefry2x32(Tensor(low), Tensor(high), Tensor([k0], dtype=dtypes.uint32).reshape(()),
                               Tensor([k1], dtype=dtypes.uint32).reshape(()))
    assert out0.dtype == out1.dtype == dtypes.uint32 and out0.shape == (37,)
    expected = [_threefry_reference(int(a), int(b), k0, k1) for a, b in zip(low, high)]
    assert list(zip(out0.tolist(), out1.tolist())) == expected

def test_rand_kernel_counts(monkeypatch):
    """On the CPU a draw runs no kernel when it is made (the host computes its keys from the counter's buffer) and one
    when it is realized: randn's uniforms are not stored, and its normals are one kernel with the cipher run once per
    normal. Inside a TinyJit capture (simulated here) the keys come from two small kernels (the counter's update and
    the keys), which replays run again."""
    import fusegrad.tensor as tensor_module
    from helpers import count_kernels
    from fusegrad.helpers import GlobalCounters
    Tensor.manual_seed(10)
    Tensor.rand(4).realize()   # the device's key and counter exist from here on
    for capture, made in ((False, 0), (True, 2)):
        monkeypatch.setattr(tensor_module, "capturing", [object()] if capture else [])
        for make in (lambda: Tensor.rand(16), lambda: Tensor.randn(512, 512)):
            GlobalCounters.reset()
            draw = make()
            assert GlobalCounters.kernel_count == made
            assert count_kernels(draw) == 1

def test_host_keys_are_the_kernels_keys(monkeypatch):
    """The host's keys (CPU outside a capture) and the kernels' keys (a capture) are the same Threefry blocks of the
    same counter: draws alternating between the two paths give the stream of draws that all take one path, and leave
    the counter at the same count."""
    import fusegrad.tensor as tensor_module
    def stream(paths):
        Tensor.manual_seed(21)
        out = []
        for capture, make in zip(paths, [lambda: Tensor.rand(5), lambda: Tensor.randn(3, 7), lambda: Tensor.rand(2, dtype=dtypes.float16),
                                          lambda: Tensor.randint(9, low=0, high=1000), lambda: Tensor.rand(1)]):
            monkeypatch.setattr(tensor_module, "capturing", [object()] if capture else [])
            out.append(make().numpy().tolist())
        monkeypatch.setattr(tensor_module, "capturing", [])
        return out, Tensor._device_rng_counters[Tensor.empty(1).device].tolist()
    host, kernels, mixed = stream([False] * 5), stream([True] * 5), stream([True, False, True, False, True])
    assert host == kernels == mixed
    # the counter counts uint32 words: rand 1 per float32 and 2 half floats per word, randn 2 per normal, randint 1 each
    assert host[1] == [5 + 2 * 21 + 1 + 9 + 1]

def test_pending_draws_are_not_rewritten_when_one_is_realized():
    """A lazy draw reads its keys from a buffer, not from the counter's chain of assigns: realizing one draw leaves
    the others' graphs alone (rewriting every pending draw on each realize made realizing 100 lazy draws one by
    one take seconds), and they give the same numbers as realized together."""
    Tensor.manual_seed(7)
    draws = [Tensor.randn(32, 32) for _ in range(8)]
    graphs = [d.uop for d in draws[1:]]
    first = draws[0].numpy()
    assert all(d.uop is g for d, g in zip(draws[1:], graphs))
    one_by_one = [first] + [d.numpy() for d in draws[1:]]
    Tensor.manual_seed(7)
    together = [Tensor.randn(32, 32) for _ in range(8)]
    Tensor.realize(*together)
    for a, b in zip(one_by_one, together): np.testing.assert_array_equal(a, b.numpy())
    assert len({a.tobytes() for a in one_by_one}) == 8
