"""CI's hook for the CL device: the op, gradient, JIT and optimization-action tests, run with ``DEV=CL`` in a
subprocess (the device fixture, Device.DEFAULT and ``native_device()`` then all mean CL, on PoCL here).

Every new kernel costs PoCL a source build of about 0.5-1.5 s, so the whole of test_tensor_ops.py (about 1050
tests, 20-40 minutes on 2 cores) doesn't fit CI's budget: CI runs every ``CL_SAMPLE``-th of its tests
(``FUSEGRAD_TEST_SAMPLE``, see conftest.py) and the other three files whole. ``FUSEGRAD_CL_SUITE=full`` runs
everything, as ``DEV=CL python -m pytest test/test_tensor_ops.py test/test_gradient.py test/engine/test_jit.py
test/codegen/test_opts.py`` does."""
import os, pathlib, subprocess, sys
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
CL_SAMPLE = 8

# (no skip without OpenCL: scripts/install_system.sh installs PoCL; a missing runtime fails here, naming the packages)
pytestmark = pytest.mark.hang_guard(1800)

def _run_on_cl(files: list[str], sample: int) -> None:
    env = {**os.environ, "DEV": "CL", "FUSEGRAD_TEST_SAMPLE": str(sample)}
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-n", "0", "-p", "no:cacheprovider", *files],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=1750)
    assert result.returncode == 0, f"DEV=CL pytest {' '.join(files)} failed:\n{result.stdout[-6000:]}\n{result.stderr[-2000:]}"

def test_op_tests_on_cl():
    full = os.environ.get("FUSEGRAD_CL_SUITE", "") == "full"
    _run_on_cl(["test/test_tensor_ops.py"], 1 if full else CL_SAMPLE)

def test_gradient_jit_and_opt_tests_on_cl():
    _run_on_cl(["test/test_gradient.py", "test/engine/test_jit.py", "test/codegen/test_opts.py"], 1)
