"""Data-parallel figures for fusegrad.distributed (MPI), on this machine's ranks.

    python bench/bench_distributed.py                    # both sections
    python bench/bench_distributed.py --only allreduce   # or: --only train

1. Allreduce bandwidth, 2 ranks, float32 sums of 1 MB to 256 MB: ``fusegrad.distributed.allreduce``
   on a realized CPU tensor (the call as a user makes it, and its TinyJit replay) against mpi4py's
   ``Allreduce`` on raw numpy arrays, the floor fusegrad sits on. Bandwidth is bytes / time
   (the buffer's size, not the bytes MPI moves internally); median of --reps.
2. Training step time of the train_digits CNN (global batch --batch) on 1 and 2 ranks with
   DataParallel and TinyJit. With 2 ranks each computes half the batch; the ranks share the
   machine's cores (OMP_NUM_THREADS is the core count divided by the ranks).

Each measurement runs under its own ``mpirun``; rank 0 prints one result line the parent reads.
"""
from __future__ import annotations
import argparse, json, os, statistics, subprocess, sys, time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RESULT_TAG = "@@RESULT@@"
SIZES_MB = (1, 4, 16, 64, 256)

def _median_seconds(fn, reps: int, comm) -> float:
    times = []
    for i in range(reps + 1):
        comm.Barrier()
        start = time.perf_counter()
        fn()
        elapsed = comm.allreduce(time.perf_counter() - start, op=max_op(comm))   # the slowest rank's time
        if i: times.append(elapsed)
    return statistics.median(times)

def max_op(comm):
    from mpi4py import MPI
    return MPI.MAX

def child_allreduce(reps: int) -> dict:
    import numpy as np
    from mpi4py import MPI
    from fusegrad import Tensor, TinyJit, distributed as dist
    dist.init()
    comm, rows = MPI.COMM_WORLD, []
    for mb in SIZES_MB:
        n = mb * 2**20 // 4
        send, recv = np.full(n, 1.0 + comm.rank, np.float32), np.empty(n, np.float32)
        floor = _median_seconds(lambda: comm.Allreduce(send, recv, op=MPI.SUM), reps, comm)
        x = Tensor(send).realize()
        call = _median_seconds(lambda: dist.allreduce(x), reps, comm)
        jitted = TinyJit(lambda t: dist.allreduce(t).realize())
        for _ in range(2): jitted(x)
        replay = _median_seconds(lambda: jitted(x), reps, comm)
        assert float(jitted(x)[:4].numpy()[0]) == sum(1.0 + r for r in range(comm.size))
        rows.append({"mb": mb, "mpi4py_s": floor, "call_s": call, "replay_s": replay})
        del x, jitted
    return {"rows": rows, "ranks": comm.size}

def child_train(steps: int, batch: int) -> dict:
    from fusegrad import Tensor, TinyJit, distributed as dist
    from fusegrad.examples.train_digits import DigitsNet, load_digits
    from fusegrad.nn.optim import Adam
    from fusegrad.nn.state import get_parameters
    from mpi4py import MPI
    dist.init()
    Tensor.manual_seed(0)
    x_train, y_train, _, _ = load_digits(0)
    model = DigitsNet()
    ddp = dist.DataParallel(get_parameters(model))
    optimizer = Adam(get_parameters(model), lr=3e-3)
    X, Y = Tensor(x_train), Tensor(y_train)
    @TinyJit
    @Tensor.train()
    def step() -> Tensor:
        indices = dist.shard_batch(Tensor.randint(batch, high=x_train.shape[0]))
        optimizer.zero_grad()
        loss = model(X[indices]).sparse_categorical_crossentropy(Y[indices]).backward()
        ddp.allreduce_gradients()
        optimizer.step()
        return loss.realize()
    for _ in range(3): step()   # compile and capture
    comm = MPI.COMM_WORLD
    comm.Barrier()
    start = time.perf_counter()
    for _ in range(steps): step()
    elapsed = comm.allreduce(time.perf_counter() - start, op=MPI.MAX)
    return {"step_s": elapsed / steps, "ranks": comm.size, "threads": os.environ.get("OMP_NUM_THREADS")}

def child(task: dict) -> None:
    result = child_allreduce(task["reps"]) if task["task"] == "allreduce" else child_train(task["steps"], task["batch"])
    from fusegrad import distributed as dist
    if dist.rank == 0: print(RESULT_TAG + json.dumps(result), flush=True)

def launch(ranks: int, task: dict, timeout: float) -> dict:
    from fusegrad.distributed import mpirun_command
    command = mpirun_command(ranks, [sys.executable, os.path.abspath(__file__), "--child", json.dumps(task)])
    proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    for line in proc.stdout.splitlines():
        if line.startswith(RESULT_TAG): return json.loads(line[len(RESULT_TAG):])
    raise RuntimeError(f"mpirun failed (rc {proc.returncode}): {(proc.stderr or proc.stdout)[-2000:]}")

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--only", choices=("allreduce", "train"), help="run one section")
    parser.add_argument("--reps", type=int, default=5, help="timed allreduces per size (median printed)")
    parser.add_argument("--steps", type=int, default=30, help="timed training steps (after 3 warm-up steps)")
    parser.add_argument("--batch", type=int, default=128, help="global training batch")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child: return child(json.loads(args.child))
    print(f"cores {os.cpu_count()}, load average {os.getloadavg()[0]:.2f}")
    if args.only in (None, "allreduce"):
        result = launch(2, {"task": "allreduce", "reps": args.reps}, 900)
        print(f"\nallreduce (sum, float32), {result['ranks']} ranks: bandwidth in GB/s (buffer bytes / time), median of {args.reps}")
        print(f"{'size':>8s} {'mpi4py numpy':>13s} {'allreduce()':>12s} {'ratio':>6s} {'TinyJit':>8s} {'ratio':>6s}")
        for row in result["rows"]:
            nbytes = row["mb"] * 2**20
            floor, call, replay = (nbytes / row[k] / 1e9 for k in ("mpi4py_s", "call_s", "replay_s"))
            print(f"{row['mb']:>5d} MB {floor:13.2f} {call:12.2f} {call / floor:6.2f} {replay:8.2f} {replay / floor:6.2f}")
    if args.only in (None, "train"):
        print(f"\ntrain_digits CNN step (Adam, TinyJit, global batch {args.batch}), mean over {args.steps} steps")
        one = launch(1, {"task": "train", "steps": args.steps, "batch": args.batch}, 900)
        two = launch(2, {"task": "train", "steps": args.steps, "batch": args.batch}, 900)
        for result in (one, two):
            print(f"{result['ranks']} rank(s) x {result['threads']} thread(s): {result['step_s'] * 1e3:8.2f} ms/step")
        print(f"2 ranks / 1 rank: {two['step_s'] / one['step_s']:.2f}x the time")

if __name__ == "__main__":
    main()
