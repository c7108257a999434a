"""The CPU device's cache of compiled libraries: a cached .so is checked against its content hash before it is
loaded, so a truncated one (SIGBUS in the loader) or a swapped/edited one (someone else's code) is rewritten."""
from __future__ import annotations
import hashlib, os, pathlib, subprocess, sys, textwrap
import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]

# two different kernels with the same name (E_3): a library swapped for the other still has the function it needs
PROGRAM = """
    from fusegrad import Tensor
    a = Tensor([1.0, 2.0, 3.0]).realize()
    print((a * 2).tolist(), (a + 1).tolist())
"""
EXPECTED = "[2.0, 4.0, 6.0] [2.0, 3.0, 4.0]"

def run_with_cache(cache: pathlib.Path) -> subprocess.CompletedProcess:
    """PROGRAM in a fresh interpreter using ``cache`` as its cache directory (a crash fails the test, not pytest)."""
    env = {**os.environ, "FUSEGRAD_CACHE": str(cache), "CACHEDB": str(cache / "cache.db"), "DEV": "CPU"}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(PROGRAM)], capture_output=True, text=True, timeout=300, cwd=REPO, env=env)

def libraries(cache: pathlib.Path) -> list[pathlib.Path]:
    return sorted((cache / "libs").glob("*.so"))

def assert_libraries_match_their_names(cache: pathlib.Path) -> None:
    for lib in libraries(cache): assert hashlib.sha256(lib.read_bytes()).hexdigest() == lib.stem, lib

@pytest.fixture
def warm_cache(tmp_path):
    first = run_with_cache(tmp_path)
    assert first.returncode == 0 and first.stdout.strip() == EXPECTED, first.stderr[-2000:]
    assert len(libraries(tmp_path)) == 2
    return tmp_path

def test_truncated_cached_library_is_rebuilt(warm_cache):
    for lib in libraries(warm_cache): os.truncate(lib, 100)
    again = run_with_cache(warm_cache)
    assert again.returncode == 0, f"the process died (returncode {again.returncode}): {again.stderr[-2000:]}"
    assert again.stdout.strip() == EXPECTED
    assert "doesn't match its hash" in again.stderr
    assert_libraries_match_their_names(warm_cache)

def test_swapped_cached_library_does_not_run(warm_cache):
    first, second = libraries(warm_cache)
    a, b = first.read_bytes(), second.read_bytes()
    first.write_bytes(b)   # each file now holds the other kernel: same function name, other code
    second.write_bytes(a)
    again = run_with_cache(warm_cache)
    assert again.returncode == 0, again.stderr[-2000:]
    assert again.stdout.strip() == EXPECTED
    assert "doesn't match its hash" in again.stderr
    assert_libraries_match_their_names(warm_cache)

# ---------------------------------------------------------------- compiler flags
def test_sum_over_a_flipped_inner_axis_is_not_miscompiled():
    # GCC 12's loop vectorizer summed x[2i], x[2i+1] and x[2i] again for `acc += x[2*i + 1 - j]` (j < 2): 44, not 42
    import numpy as np
    from fusegrad import Tensor
    # (4, 2) and (8, 3) are the smallest sizes that went wrong with the vectorizer on (44 for 42 at (3, 2) too)
    for rows, columns in ((3, 2), (5, 3), (4, 8), (4, 2), (8, 3), (130, 2)):
        weights = np.arange(1, rows * columns + 1, dtype=np.float32).reshape(rows, columns)
        scale = Tensor(np.array([[1.0]], np.float32), device="CPU")
        flipped = scale.expand(rows, columns) * Tensor(weights, device="CPU").flip(1)
        assert (flipped + flipped).sum().item() == 2 * weights.sum(), (rows, columns)

def _kernel_sources(*tensors) -> list[str]:
    from fusegrad import Device
    from fusegrad.codegen import get_program
    items = tensors[0].schedule(*tensors[1:])
    return [get_program(item.ast, Device["CPU"].renderer).src for item in items if item.ast.op.name == "SINK"]

def test_only_reductions_that_step_backwards_turn_the_loop_vectorizer_off():
    """The guard against that miscompile is per kernel and narrow: a sum over a flipped axis turns GCC's
    loop vectorizer off; other reductions (a conv's weight gradient: 1.5x slower without it) and
    elementwise kernels keep it."""
    import numpy as np
    from fusegrad import Tensor
    from fusegrad.renderer.cstyle import ClangRenderer
    guard = ClangRenderer.NO_LOOP_VECTORIZE
    x = Tensor(np.arange(16, dtype=np.float32), device="CPU").realize()
    assert all(guard in src for src in _kernel_sources(x.reshape(8, 2).flip(1).sum()))
    assert not any(guard in src for src in _kernel_sources(x.reshape(8, 2).sum(1)))
    assert not any(guard in src for src in _kernel_sources((x * 2).sqrt()))
    rng = np.random.default_rng(0)
    image = Tensor(rng.standard_normal((2, 3, 8, 8), dtype=np.float32), device="CPU").realize()
    weight = Tensor(rng.standard_normal((4, 3, 3, 3), dtype=np.float32), device="CPU").realize()
    out = image.conv2d(weight, padding=1)
    (weight_grad,) = (out * out).sum().gradient(weight)
    sources = _kernel_sources(weight_grad)
    assert sources and not any(guard in src for src in sources)

def test_big_host_buffers_are_huge_page_aligned():
    # buffers of 4 MB and more are their own mapping, 2 MB aligned and marked for transparent huge pages; smaller
    # ones stay 64-byte aligned arrays. Both hold what is written to them, and views of a big one work.
    import ctypes
    import numpy as np
    from fusegrad import Tensor, dtypes
    from fusegrad.device import Buffer, HUGE_PAGE
    big, small = Buffer("CPU", HUGE_PAGE // 2, dtypes.float32).allocate(), Buffer("CPU", 1000, dtypes.float32).allocate()
    assert ctypes.addressof(big._buf) % HUGE_PAGE == 0 and ctypes.addressof(small._buf) % 64 == 0
    data = np.arange(HUGE_PAGE // 2, dtype=np.float32)
    big.copyin(memoryview(data))
    assert np.array_equal(np.frombuffer(big.as_buffer(), np.float32), data)
    view = big.view(10, dtypes.float32, 4 * 1000)
    assert np.array_equal(np.frombuffer(view.as_buffer(), np.float32), data[1000:1010])
    x = Tensor(np.ones((1024, 2048), np.float32))
    assert (x * 3 + 1).sum().item() == 4 * 1024 * 2048
