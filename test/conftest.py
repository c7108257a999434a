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
