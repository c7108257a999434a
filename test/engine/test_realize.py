"""engine/realize.py: compiling a schedule's kernels."""
import threading
import numpy as np
from fusegrad import Tensor, Device
from fusegrad.engine import realize
from helpers import native_device

def test_schedule_kernels_compile_in_parallel(monkeypatch):
    # three new kernels (constants no other test uses) in one schedule: their compiles (C compiler processes on
    # CPU, llvmlite on DEV=LLVM) run in the worker pool while code generation goes on, and every kernel still
    # computes the right values
    device = native_device()
    compiler = Device[device].compiler
    threads: list[str] = []
    original = type(compiler).compile_cached
    def recording(self, src):
        threads.append(threading.current_thread().name)
        return original(self, src)
    monkeypatch.setattr(type(compiler), "compile_cached", recording)
    original_batch = type(compiler).compile_cached_batch   # (kernels generated while the compiler was busy go in one batch)
    def recording_batch(self, srcs):
        threads.extend(threading.current_thread().name for _ in srcs)
        return original_batch(self, srcs)
    monkeypatch.setattr(type(compiler), "compile_cached_batch", recording_batch)
    x = Tensor(np.arange(12, dtype=np.float32).reshape(3, 4), device=device).realize()
    a, b, c = (x * 3.25).sum(1), (x - 7.75).max(0), (x + 0.125).exp2().contiguous()
    Tensor.realize(a, b, c)
    assert len(threads) >= 2 and all(name != threading.main_thread().name for name in threads)
    xn = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_allclose(a.numpy(), (xn * 3.25).sum(1), rtol=1e-6)
    np.testing.assert_allclose(b.numpy(), (xn - 7.75).max(0), rtol=1e-6)
    np.testing.assert_allclose(c.numpy(), np.exp2(xn + 0.125), rtol=1e-5)

def test_precompile_skips_cached_kernels():
    x = Tensor(np.ones((5, 5), np.float32)).realize()
    y = (x * 9.5).sum(0)
    items = y.schedule()
    realize.run_schedule(items)
    before = dict(realize.method_cache)
    realize.precompile(items)      # everything is cached: nothing is generated again
    assert realize.method_cache == before
