"""engine/realize.py: compiling a schedule's kernels."""
import threading, time
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

def test_precompile_sends_batches_of_bounded_size(monkeypatch):
    """Kernels go to the compilers in batches of at most ceil(kernels / (CHUNKS_PER_WORKER x cores)) (or MIN_BATCH), each
    kernel once: one big batch of whatever piled up while the first batch compiled left a core idle for most of MNIST's
    first step."""
    import os
    monkeypatch.setattr(realize, "MIN_BATCH", 1)   # (this schedule is small: the bound is what is tested)
    device = native_device()
    compiler = Device[device].compiler
    batches: list[int] = []
    original_batch = type(compiler).compile_cached_batch
    def recording_batch(self, srcs):
        batches.append(len(srcs))
        time.sleep(0.1)   # a compiler much slower than code generation, as gcc is: kernels pile up while it runs
        return original_batch(self, srcs)
    monkeypatch.setattr(type(compiler), "compile_cached_batch", recording_batch)
    original_single = type(compiler).compile_cached
    def recording_single(self, src):
        if threading.current_thread() is not threading.main_thread():
            batches.append(1)
            time.sleep(0.1)
        return original_single(self, src)
    monkeypatch.setattr(type(compiler), "compile_cached", recording_single)
    xn = np.arange(12, dtype=np.float32).reshape(3, 4)
    x = Tensor(xn, device=device).realize()
    constants = [1.0625 + 0.015625 * i for i in range(24)]   # (constants no other test uses: every kernel is new)
    y, expected = x, xn
    for k in constants:   # a reduce per link: one kernel each (a contraction, so float32 rounding does not grow)
        y, expected = ((y * k).sum(1, keepdim=True) * 0.05).sin() - y * 0.5, np.sin((expected * k).sum(1, keepdims=True) * 0.05) - expected * 0.5
    items = y.schedule()
    realize.run_schedule(items)
    workers = max(1, os.cpu_count() or 1)
    assert len(items) >= len(constants) and sum(batches) == len(items)
    assert max(batches) <= -(-len(items) // (realize.CHUNKS_PER_WORKER * workers)), batches
    np.testing.assert_allclose(y.numpy(), expected, rtol=1e-4)
