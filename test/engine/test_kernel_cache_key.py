"""The compiled-kernel cache key holds every setting that changes generated code, so a Context change
compiles anew instead of silently reusing a kernel built under other settings."""
import numpy as np
import pytest
from fusegrad import Tensor, Context, Device
from fusegrad.engine.realize import get_runner

def _ast():
    a, b = Tensor.empty(64, 64), Tensor.empty(64, 64)
    return (a * b + 1).exp().schedule()[-1].ast

@pytest.mark.parametrize("setting, values", [("VECTORIZE", (1, 0)), ("TC", (1, 0)), ("NOOPT", (0, 1)), ("TRANSCENDENTAL", (1, 2))])
def test_settings_give_distinct_cache_entries(setting, values):
    ast = _ast()
    runners = []
    for value in values:
        with Context(**{setting: value}): runners.append(get_runner(Device.DEFAULT, ast))
    assert runners[0] is not runners[1]
    with Context(**{setting: values[0]}): assert get_runner(Device.DEFAULT, ast) is runners[0]   # and each is reused

def test_vectorize_setting_changes_the_source():
    ast = (Tensor.empty(256, 256) @ Tensor.empty(256, 256)).schedule()[-1].ast   # a register-tiled kernel
    with Context(VECTORIZE=1): vectorized = get_runner(Device.DEFAULT, ast).p.src
    with Context(VECTORIZE=0): scalar = get_runner(Device.DEFAULT, ast).p.src
    assert vectorized != scalar

def test_results_agree_across_settings():
    x = np.random.default_rng(0).standard_normal((33, 17)).astype(np.float32)
    results = []
    for vectorize in (1, 0):
        with Context(VECTORIZE=vectorize): results.append((Tensor(x) * 2 + 1).exp().numpy())
    np.testing.assert_allclose(results[0], results[1], rtol=1e-6)
