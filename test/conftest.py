"""Shared pytest fixtures for the fusegrad test suite."""
import os
import pytest
from hypothesis import settings, HealthCheck

# small, deterministic hypothesis runs: the suite must stay fast on two cores
settings.register_profile("fusegrad", max_examples=int(os.environ.get("HYPOTHESIS_EXAMPLES", "15")), deadline=None,
                          derandomize=True, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
settings.load_profile("fusegrad")

DEVICES = ("CPU", "PYTHON")

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

HANG_GUARD_S = int(os.environ.get("FUSEGRAD_TEST_HANG_GUARD", "20"))

@pytest.fixture(autouse=True)
def _hang_guard():
    """Fail (instead of hanging the whole run) a test that is stuck for over HANG_GUARD_S seconds.
    This is not a performance assertion: every test here takes well under a second normally."""
    import signal, threading
    if HANG_GUARD_S <= 0 or threading.current_thread() is not threading.main_thread() or not hasattr(signal, "SIGALRM"):
        yield
        return
    def on_alarm(signum, frame):
        raise TimeoutError(f"test still running after {HANG_GUARD_S} s: hang guard (set FUSEGRAD_TEST_HANG_GUARD=0 to disable)")
    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(HANG_GUARD_S)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
