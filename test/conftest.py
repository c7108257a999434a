"""Shared pytest fixtures for the fusegrad test suite."""
import os
import pytest
from hypothesis import settings, HealthCheck

# small, deterministic hypothesis runs: the suite must stay fast on two cores
settings.register_profile("fusegrad", max_examples=int(os.environ.get("HYPOTHESIS_EXAMPLES", "15")), deadline=None,
                          derandomize=True, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
settings.load_profile("fusegrad")

# DEV=LLVM (or any backend) runs the device-parametrized tests on that backend alone; by default on CPU and PYTHON
DEVICES = (os.environ["DEV"].upper().replace("CPU:LLVM", "LLVM"),) if os.environ.get("DEV") else ("CPU", "PYTHON")

@pytest.fixture(params=DEVICES)
def device(request) -> str:
    """Every test that takes ``device`` runs once per backend."""
    return request.param

@pytest.fixture
def rng():
    import numpy as np
    return np.random.default_rng(0)

@pytest.fixture(autouse=True)
def _restore_defaults():
    """Tests may change default dtypes or the seed; put them back afterwards."""
    from fusegrad import dtypes
    default_float, default_int = dtypes.default_float, dtypes.default_int
    yield
    dtypes.default_float, dtypes.default_int = default_float, default_int

HANG_GUARD_S = int(os.environ.get("FUSEGRAD_TEST_HANG_GUARD", "120"))

def pytest_configure(config):
    config.addinivalue_line("markers", "hang_guard(seconds): a longer hang guard for slow end-to-end tests")
    config.addinivalue_line("markers", "cuda: needs an NVIDIA GPU and its driver (skipped, with the reason, where there is none)")

def pytest_collection_modifyitems(config, items):
    """Two filters for test/runtime/test_device_suites.py, which reruns test files with ``DEV`` set to another device:
    ``FUSEGRAD_TEST_DESELECT_DEVICES=CPU,PYTHON`` deselects the tests whose ``device`` parameter names one of those
    devices (the main suite already runs them: only what runs on ``DEV`` is left), then ``FUSEGRAD_TEST_SAMPLE=N``
    keeps every N-th remaining test, deterministically (for devices where each new kernel costs a slow build)."""
    covered = {name.strip().upper() for name in os.environ.get("FUSEGRAD_TEST_DESELECT_DEVICES", "").split(",") if name.strip()}
    if covered:
        def runs_on_covered(item) -> bool:
            callspec = getattr(item, "callspec", None)
            return callspec is not None and str(callspec.params.get("device", "")).upper() in covered
        deselected = [item for item in items if runs_on_covered(item)]
        if deselected:
            config.hook.pytest_deselected(items=deselected)
            items[:] = [item for item in items if not runs_on_covered(item)]
    every = int(os.environ.get("FUSEGRAD_TEST_SAMPLE", "1"))
    if every > 1:
        config.hook.pytest_deselected(items=[item for i, item in enumerate(items) if i % every])
        items[:] = items[::every]

@pytest.fixture(autouse=True)
def _hang_guard(request):
    """Fail (instead of hanging the whole run) a test that is stuck for over HANG_GUARD_S seconds
    (or its ``hang_guard`` marker's seconds). This is not a performance assertion."""
    import signal, threading
    marker = request.node.get_closest_marker("hang_guard")
    limit = marker.args[0] if marker is not None else HANG_GUARD_S
    if limit <= 0 or threading.current_thread() is not threading.main_thread() or not hasattr(signal, "SIGALRM"):
        yield
        return
    def on_alarm(signum, frame):
        raise TimeoutError(f"test still running after {limit} s: hang guard (set FUSEGRAD_TEST_HANG_GUARD=0 to disable)")
    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(limit)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
