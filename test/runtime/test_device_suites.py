"""CI's hook for the devices other than the default CPU: the op, gradient, JIT, optimization-action and op-fuzz tests
rerun with ``DEV=<device>`` in a subprocess (the ``device`` fixture, ``Device.DEFAULT`` and ``native_device()`` then
all mean that device), one test per (device, group of files) so the main run's two workers can balance them.

What runs, and why (``SUITES`` below):
- Tests whose ``device`` parameter is CPU or PYTHON are deselected (``FUSEGRAD_TEST_DESELECT_DEVICES``, conftest.py):
  the main suite already runs every one of them, since its ``device`` fixture means CPU and PYTHON. On LLVM and CL
  that drops the PYTHON halves of ``[native_device(), "PYTHON"]`` parametrizations; on PYTHON it leaves the tests
  that run on ``Device.DEFAULT`` (gradients, JIT, op fuzzing, the unparametrized opt tests), which is what
  ``DEV=PYTHON`` adds over the main suite.
- LLVM compiles in-process in milliseconds: every remaining test of the five files runs.
- CL (PoCL) builds every new kernel from source (~0.3 s each): the op tests run as a sample of every
  ``CL_OPS_SAMPLE``-th test (``FUSEGRAD_TEST_SAMPLE``), the other files whole.
- PYTHON interprets every uop in Python: what is left after deselection runs whole.
- PYTHON with ``EMULATE=CUDA`` renders every kernel as the CUDA device would (the GPU heuristic, flat elementwise
  kernels, warp tensor cores for half and bfloat16 matmuls) and checks the results on this GPU-less machine: the op,
  gradient, JIT and op-fuzz tests run whole, nothing deselected (on the emulated device the PYTHON-parametrized tests
  are new kernels). The opt tests stay out: they pin the plain PYTHON renderer's limits (64 KiB of shared memory).

Measured seconds of one worker per suite (each suite's subprocess on its own, this 2-core machine nearly idle;
"cold" with empty fusegrad and PoCL caches, FUSEGRAD_CACHE and POCL_CACHE_DIR pointing at new folders, "warm" the
same run again):

    suite        tests    cold   warm
    LLVM-ops      1047      28     10
    LLVM-rest      283      31     14
    CL-ops    524 (1/2)    173      8
    CL-rest        124      61     10
    CL-fuzz        159      79      9
    PYTHON-all     275      34     15
    together              406     66    (the CL hook this replaced: 188 cold, for CL alone)
    PYTHON-emulated-CUDA  1269  22     22    (added later; PYTHON compiles nothing, so cold = warm)

That is ~7 minutes of one worker cold, about 3.5 minutes added to the 2-worker main suite (~4 minutes warm), and
under a minute warm; CL-ops, the longest, stays shorter than the main suite. Under load (other work on the same
2 cores) the cold figures were up to 2.5 times these.

``FUSEGRAD_DEVICE_SUITE=full`` runs everything instead: every test of every file, the CPU- and PYTHON-parametrized
ones too, as ``DEV=<device> python -m pytest <files>`` does."""
import os, pathlib, subprocess, sys
from dataclasses import dataclass
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
OPS = ("test/test_tensor_ops.py",)
GRADIENT_JIT_OPTS = ("test/test_gradient.py", "test/engine/test_jit.py", "test/codegen/test_opts.py")
FUZZ = ("test/test_fuzz_ops.py",)
CL_OPS_SAMPLE = 2
# the main suite's device fixture runs these (conftest.DEVICES without DEV): their tests need no second run
MAIN_SUITE_DEVICES = "CPU,PYTHON"

@dataclass(frozen=True)
class DeviceSuite:
    """Test files to rerun with ``DEV=device``, keeping every ``sample``-th selected test."""
    device: str
    name: str
    files: tuple[str, ...]
    sample: int = 1
    emulate: str = ""            # EMULATE for the subprocess (PYTHON rendering like another device)
    deselect_main: bool = True   # leave out the tests the main suite runs (False: the emulated device makes them new)

SUITES = (
    DeviceSuite("LLVM", "ops", OPS),
    DeviceSuite("LLVM", "rest", GRADIENT_JIT_OPTS + FUZZ),
    DeviceSuite("CL", "ops", OPS, CL_OPS_SAMPLE),
    DeviceSuite("CL", "rest", GRADIENT_JIT_OPTS),
    DeviceSuite("CL", "fuzz", FUZZ),
    DeviceSuite("PYTHON", "all", OPS + GRADIENT_JIT_OPTS + FUZZ),
    DeviceSuite("PYTHON", "emulated-CUDA", OPS + ("test/test_gradient.py", "test/engine/test_jit.py") + FUZZ, emulate="CUDA", deselect_main=False),
)

# (no skip without OpenCL or llvmlite: scripts/install_system.sh installs PoCL and the testing extra llvmlite;
# a missing one fails the suite, naming it)
pytestmark = pytest.mark.hang_guard(1800)

def suite_env(suite: DeviceSuite, full: bool) -> dict[str, str]:
    """The subprocess's environment: ``DEV`` names the suite's device; outside ``full`` runs, tests the main suite
    already runs are deselected and the suite's sample rate applies."""
    env = {**os.environ, "DEV": suite.device, "FUSEGRAD_TEST_SAMPLE": "1" if full else str(suite.sample), "EMULATE": suite.emulate}
    env.pop("FUSEGRAD_TEST_DESELECT_DEVICES", None)
    if not full and suite.deselect_main: env["FUSEGRAD_TEST_DESELECT_DEVICES"] = MAIN_SUITE_DEVICES
    return env

@pytest.mark.parametrize("suite", SUITES, ids=lambda suite: f"{suite.device}-{suite.name}")
def test_device_suite(suite: DeviceSuite):
    """The suite's files pass with ``DEV=suite.device`` (everything, with ``FUSEGRAD_DEVICE_SUITE=full``)."""
    full = os.environ.get("FUSEGRAD_DEVICE_SUITE", "") == "full"
    command = [sys.executable, "-m", "pytest", "-q", "--maxfail=5", "-n", "0", "-p", "no:cacheprovider", *suite.files]
    result = subprocess.run(command, cwd=ROOT, env=suite_env(suite, full), capture_output=True, text=True, timeout=1750)
    # exit code 5 (nothing collected) fails too: a suite that selects no test checks nothing
    assert result.returncode == 0, (f"DEV={suite.device} pytest {' '.join(suite.files)} failed (exit code {result.returncode}):\n"
                                    f"{result.stdout[-6000:]}\n{result.stderr[-2000:]}")
    assert " passed" in result.stdout, f"DEV={suite.device}: no test ran:\n{result.stdout[-2000:]}"

def test_suites_deselect_only_tests_the_main_suite_runs():
    # the deselection contract: DEV=LLVM collection drops exactly the CPU- and PYTHON-parametrized tests and keeps
    # every LLVM-parametrized and unparametrized one (counted here from a plain collection of the same file)
    def collected(env: dict[str, str]) -> list[str]:
        command = [sys.executable, "-m", "pytest", "-q", "--collect-only", "-p", "no:cacheprovider", "test/codegen/test_opts.py"]
        out = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300).stdout
        return [line for line in out.splitlines() if "::" in line]
    plain = collected({**os.environ, "DEV": "LLVM", "FUSEGRAD_TEST_SAMPLE": "1", "FUSEGRAD_TEST_DESELECT_DEVICES": ""})
    suite = collected(suite_env(DeviceSuite("LLVM", "rest", ()), full=False))
    def on_main_devices(test_id: str) -> bool:
        params = test_id.partition("[")[2].rstrip("]").split("-")
        return any(param in ("CPU", "PYTHON") for param in params)
    assert any(on_main_devices(t) for t in plain) and any("LLVM" in t for t in suite)
    assert suite == [t for t in plain if not on_main_devices(t)]
    # a full run deselects and samples nothing
    full_env = suite_env(DeviceSuite("CL", "ops", OPS, CL_OPS_SAMPLE), full=True)
    assert "FUSEGRAD_TEST_DESELECT_DEVICES" not in full_env and full_env["FUSEGRAD_TEST_SAMPLE"] == "1"
