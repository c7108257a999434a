"""The train_digits example (the README's main example) trains for real: a shortened run on the
scikit-learn digits must reach a clearly-better-than-chance test accuracy.

Measured with 150 steps (batch 128): 98.9%, 96.9% and 98.1% test accuracy for seeds 0, 1 and 2,
about 18 s of CPU each once the kernels are compiled; chance is 10%. The threshold leaves a
margin of about 4 points below the worst of those."""
import numpy as np
import pytest
from fusegrad.examples import train_digits

STEPS, THRESHOLD = 150, 0.93
# training takes far longer than a unit test in wall time on a loaded machine
pytestmark = pytest.mark.hang_guard(600)

def test_load_digits_split():
    x_train, y_train, x_test, y_test = train_digits.load_digits(seed=0)
    assert x_train.shape == (1437, 1, 8, 8) and x_test.shape == (360, 1, 8, 8)
    assert x_train.dtype == np.float32 and 0.0 <= x_train.min() and x_train.max() <= 1.0
    assert set(np.unique(y_train)) == set(range(10)) and y_test.shape == (360,)

def test_train_digits_reaches_accuracy():
    accuracy = train_digits.train(steps=STEPS, seed=0, quiet=True)
    assert isinstance(accuracy, float)
    assert accuracy > THRESHOLD, f"test accuracy {accuracy:.4f} after {STEPS} steps, expected > {THRESHOLD}"
