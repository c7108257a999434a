"""fusegrad.distributed: MPI collectives and data-parallel training, run with ``mpirun -n 2``.

The ranks run test/distributed_ranks.py and write their results to .npz files; these tests check
them against numpy (collectives) and against single-process training on the whole batch, computed
here without fusegrad.distributed (DataParallel must match it within 1e-6)."""
import os, subprocess, sys
import numpy as np
import pytest
from fusegrad import Tensor, distributed as dist
from fusegrad.distributed import mpirun_command
sys.path.insert(0, os.path.dirname(__file__))
import distributed_ranks as ranks   # noqa: E402

pytestmark = pytest.mark.hang_guard(900)
RANKS_SCRIPT = os.path.join(os.path.dirname(__file__), "distributed_ranks.py")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

def run_ranks(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    proc = subprocess.run(mpirun_command(2, list(args)), capture_output=True, text=True, timeout=timeout, cwd=REPO)
    assert proc.returncode == 0, f"mpirun failed (rc {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc

@pytest.fixture(scope="module")
def collectives(tmp_path_factory) -> list:
    out = tmp_path_factory.mktemp("collectives")
    run_ranks(sys.executable, RANKS_SCRIPT, "collectives", str(out))
    return [np.load(out / f"rank{r}.npz") for r in range(2)]

@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("train")
    run_ranks(sys.executable, RANKS_SCRIPT, "train", str(out))
    return {variant: [np.load(out / f"{variant}_rank{r}.npz") for r in range(2)] for variant in ranks.TRAIN_VARIANTS}

# ---------------------------------------------------------------- collectives on 2 ranks

def test_allreduce_ops_match_numpy(collectives):
    x = [ranks.rank_input(r, (3, 4)) for r in range(2)]
    expected = {"sum": x[0] + x[1], "avg": (x[0] + x[1]) / 2, "max": np.maximum(*x), "min": np.minimum(*x), "prod": x[0] * x[1]}
    for result in collectives:
        for op, value in expected.items(): np.testing.assert_allclose(result[f"allreduce_{op}"], value, rtol=1e-6, atol=1e-7, err_msg=op)
        np.testing.assert_allclose(result["allreduce_transposed"], (x[0] + x[1]).T, rtol=1e-6)
        np.testing.assert_allclose(result["allreduce_slice"], (x[0] + x[1])[1:, ::2], rtol=1e-6)
        np.testing.assert_allclose(result["allreduce_lazy"], (x[0] * 2 + 1) + (x[1] * 2 + 1), rtol=1e-6)

def test_allreduce_other_dtypes(collectives):
    ints = [ranks.rank_input(r, (7,), "int32") for r in range(2)]
    doubles = [ranks.rank_input(r, (5,), "float64") for r in range(2)]
    for result in collectives:
        assert result["allreduce_int32_sum"].dtype == np.int32 and result["allreduce_float64_sum"].dtype == np.float64
        np.testing.assert_array_equal(result["allreduce_int32_sum"], ints[0] + ints[1])
        np.testing.assert_array_equal(result["allreduce_int32_max"], np.maximum(*ints))
        np.testing.assert_allclose(result["allreduce_float64_sum"], doubles[0] + doubles[1], rtol=1e-15)

def test_broadcast_and_allgather(collectives):
    x = [ranks.rank_input(r, (3, 4)) for r in range(2)]
    for result in collectives:
        np.testing.assert_array_equal(result["broadcast_from_1"], x[1])
        np.testing.assert_array_equal(result["broadcast_half"], x[1].astype(np.float16))
        np.testing.assert_array_equal(result["allgather"], np.concatenate(x))
        np.testing.assert_allclose(result["allgather_scalar"], [x[0].sum(), x[1].sum()], rtol=1e-5)

def test_allreduce_is_part_of_the_jit_replay(collectives):
    for result in collectives:
        assert int(result["jit_items"][0]) >= 2   # the kernel and the allreduce were captured
        for call in range(4):   # calls 2 and 3 replay: their results are still the sums of both ranks' new inputs
            expected = 2 * ranks.rank_input(10 * call, (6,)) + 2 * ranks.rank_input(1 + 10 * call, (6,))
            np.testing.assert_allclose(result[f"jit_call{call}"], expected, rtol=1e-6, err_msg=f"call {call}")

# ---------------------------------------------------------------- data-parallel training on 2 ranks

@pytest.mark.parametrize("variant", [v for v, (_, _, sync) in ranks.TRAIN_VARIANTS.items() if sync])
def test_data_parallel_equals_single_process_training(trained, variant):
    optimizer_name, use_jit, _ = ranks.TRAIN_VARIANTS[variant]
    reference = ranks.train_reference(optimizer_name)
    for rank, result in enumerate(trained[variant]):
        for name, value in reference.items():
            np.testing.assert_allclose(result[name], value, atol=1e-6, rtol=0, err_msg=f"{variant} rank {rank} {name}")
        if use_jit: assert int(result["jit_collectives"][0]) >= 2   # bucket allreduces and the loss average were replayed
    np.testing.assert_array_equal(trained[variant][0]["losses"], trained[variant][1]["losses"])   # the averaged loss

def test_training_without_gradient_averaging_differs(trained):
    # the control: ranks that only use their own half batch end up far from the reference, so the
    # comparison above does detect a missing or wrong allreduce
    reference = ranks.train_reference("sgd")
    for result in trained["unsynced"]:
        assert max(np.abs(result[name] - value).max() for name, value in reference.items()) > 1e-3

def test_train_digits_example_distributed():
    proc = run_ranks(sys.executable, "-m", "fusegrad.examples.train_digits", "--distributed", "--steps", "100", timeout=800)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("test accuracy")]
    assert len(lines) == 1, proc.stdout[-2000:]   # rank 0 alone reports
    accuracy = float(lines[0].split()[2].rstrip("%")) / 100
    assert accuracy > 0.9, lines[0]

# ---------------------------------------------------------------- in this process (no MPI call)

def test_bad_arguments_raise_before_any_mpi_call():
    with pytest.raises(TypeError, match="takes a Tensor"): dist.allreduce([1.0, 2.0])
    with pytest.raises(ValueError, match="op must be one of"): dist.allreduce(Tensor([1.0]), "mean_of_squares")
    with pytest.raises(TypeError, match="dtypes.half"): dist.allreduce(Tensor([1.0], dtype="float16"))
    with pytest.raises(ValueError, match="multi-device"): dist.allreduce(Tensor([1.0, 2.0]).shard(("CPU:1", "CPU:2"), axis=0))

def test_not_initialized_error(monkeypatch):
    monkeypatch.setattr(dist, "_comm", None)
    with pytest.raises(RuntimeError, match=r"call fusegrad.distributed.init\(\) first"): dist.allreduce(Tensor([1.0]))
    with pytest.raises(RuntimeError, match="not initialized"): dist.rank
    with pytest.raises(AttributeError, match="no attribute"): dist.ranks

def test_bucketing_groups_in_reverse_order_up_to_the_size():
    params = [Tensor.zeros(n) for n in (10, 3, 4, 100, 2)]   # float32: 40, 12, 16, 400, 8 bytes
    buckets = dist._make_buckets(params, bucket_bytes=32)
    assert [[p.shape[0] for p in b] for b in buckets] == [[2], [100], [4, 3], [10]]
    assert [[p.shape[0] for p in b] for b in dist._make_buckets(params, 10**6)] == [[2, 100, 4, 3, 10]]

def test_mpirun_command():
    command = mpirun_command(2, ["python", "x.py"], threads_per_rank=3)
    assert command[0] == "mpirun" and command[-2:] == ["python", "x.py"] and "OMP_NUM_THREADS=3" in command
    assert ("--allow-run-as-root" in command) == (os.geteuid() == 0)
    with pytest.raises(ValueError, match="positive"): mpirun_command(0, ["python"])
