"""The program each MPI rank runs for test/test_distributed.py (not a test module itself).

    mpirun -n 2 python test/distributed_ranks.py collectives OUT_DIR
    mpirun -n 2 python test/distributed_ranks.py train OUT_DIR

Each rank writes what it computed to OUT_DIR/rank{R}.npz (training: one file per variant,
OUT_DIR/{VARIANT}_rank{R}.npz, see TRAIN_VARIANTS); the test checks those files against numpy
and against single-process training (``train_reference``, which doesn't use fusegrad.distributed).
"""
from __future__ import annotations
import os, sys
import numpy as np
from fusegrad import Tensor, TinyJit, nn
from fusegrad.nn.optim import SGD, Adam
from fusegrad.nn.state import get_parameters

STEPS, GLOBAL_BATCH, FEATURES, CLASSES = 6, 16, 12, 5
# name: (optimizer, jitted, gradients averaged over the ranks); "unsynced" shows that skipping the
# allreduce gives a visibly different result, so the comparison with the reference can fail
TRAIN_VARIANTS = {"sgd": ("sgd", False, True), "adam_jit": ("adam", True, True), "sgd_jit": ("sgd", True, True),
                  "unsynced": ("sgd", False, False)}

def rank_input(rank: int, shape: tuple, dtype: str = "float32") -> np.ndarray:
    """The data rank ``rank`` feeds to the collectives (the test rebuilds it to compute the expectation)."""
    rng = np.random.default_rng(100 + rank)
    if dtype.startswith("int"): return rng.integers(-50, 50, size=shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)

def run_collectives(out_dir: str) -> None:
    from fusegrad import distributed as dist
    dist.init()
    rank, results = dist.rank, {}
    x = Tensor(rank_input(rank, (3, 4)))
    for op in ("sum", "avg", "max", "min", "prod"): results[f"allreduce_{op}"] = dist.allreduce(x, op).numpy()
    results["allreduce_int32_sum"] = dist.allreduce(Tensor(rank_input(rank, (7,), "int32")), "sum").numpy()
    results["allreduce_int32_max"] = dist.allreduce(Tensor(rank_input(rank, (7,), "int32")), "max").numpy()
    results["allreduce_float64_sum"] = dist.allreduce(Tensor(rank_input(rank, (5,), "float64")), "sum").numpy()
    results["allreduce_transposed"] = dist.allreduce(x.T).numpy()               # a view: made contiguous first
    results["allreduce_slice"] = dist.allreduce(x[1:, ::2]).numpy()
    results["allreduce_lazy"] = dist.allreduce(x * 2 + 1).numpy()               # unrealized: computed first
    results["broadcast_from_1"] = dist.broadcast(x, root=1).numpy()
    results["broadcast_half"] = dist.broadcast(x.cast("float16"), root=1).numpy()  # moved as bytes
    results["allgather"] = dist.allgather(x).numpy()
    results["allgather_scalar"] = dist.allgather(x.sum()).numpy()
    dist.barrier()
    # a jitted function: the allreduce is part of the replay (call 3 and 4 replay)
    @TinyJit
    def jitted(t: Tensor) -> Tensor: return dist.allreduce(t * 2).realize()
    for call in range(4): results[f"jit_call{call}"] = jitted(Tensor(rank_input(rank + 10 * call, (6,)))).numpy()
    results["jit_items"] = np.array([len(jitted.jit_cache)])
    np.savez(os.path.join(out_dir, f"rank{rank}.npz"), **results)

class SmallNet:
    def __init__(self):
        self.l1, self.l2 = nn.Linear(FEATURES, 16), nn.Linear(16, CLASSES)
    def __call__(self, x: Tensor) -> Tensor: return self.l2(self.l1(x).tanh())

def batches() -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(7)
    return [(rng.standard_normal((GLOBAL_BATCH, FEATURES)).astype(np.float32), rng.integers(0, CLASSES, GLOBAL_BATCH).astype(np.int32))
            for _ in range(STEPS)]

def make_optimizer(name: str, params: list[Tensor]):
    return SGD(params, lr=0.1, momentum=0.9) if name == "sgd" else Adam(params, lr=0.01)

def final_params(model: SmallNet) -> dict[str, np.ndarray]:
    return {f"param{i}": p.numpy() for i, p in enumerate(get_parameters(model))}

def train_reference(optimizer_name: str) -> dict[str, np.ndarray]:
    """Single-process training on the whole batch (no fusegrad.distributed involved)."""
    Tensor.manual_seed(3)
    model = SmallNet()
    optimizer = make_optimizer(optimizer_name, get_parameters(model))
    with Tensor.train():
        for x, y in batches():
            optimizer.zero_grad()
            model(Tensor(x)).sparse_categorical_crossentropy(Tensor(y)).backward()
            optimizer.step()
    return final_params(model)

def run_train(out_dir: str, variant: str) -> None:
    from fusegrad import distributed as dist
    dist.init()
    optimizer_name, use_jit, sync = TRAIN_VARIANTS[variant]
    # a different seed on each rank: DataParallel's broadcast from rank 0 must make them identical
    Tensor.manual_seed(3 if dist.rank == 0 else 99)
    model = SmallNet()
    params = get_parameters(model)
    ddp = dist.DataParallel(params, bucket_bytes=300) if sync else None   # small buckets: several per step
    if not sync: dist.broadcast_parameters(params)
    optimizer = make_optimizer(optimizer_name, params)
    losses = []
    def step(x: Tensor, y: Tensor) -> Tensor:
        optimizer.zero_grad()
        loss = model(dist.shard_batch(x)).sparse_categorical_crossentropy(dist.shard_batch(y)).backward()
        if ddp is not None: ddp.allreduce_gradients()
        optimizer.step()
        return dist.allreduce(loss, "avg").realize()
    run = TinyJit(Tensor.train()(step)) if use_jit else Tensor.train()(step)
    for x, y in batches(): losses.append(run(Tensor(x), Tensor(y)).item())
    results = final_params(model)
    results["losses"] = np.array(losses, dtype=np.float32)
    if use_jit: results["jit_collectives"] = np.array([sum(isinstance(i.prg, dist.CollectiveRunner) for i in run.jit_cache)])
    np.savez(os.path.join(out_dir, f"{variant}_rank{dist.rank}.npz"), **results)

if __name__ == "__main__":
    scenario, out = sys.argv[1], sys.argv[2]
    if scenario == "collectives": run_collectives(out)
    elif scenario == "train":
        for variant in TRAIN_VARIANTS: run_train(out, variant)
    else: raise SystemExit(f"unknown scenario {scenario!r}")
