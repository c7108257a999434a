"""Train a small CNN on the handwritten digits bundled with scikit-learn (1797 real 8x8 scans).

    python -m fusegrad.examples.train_digits [--steps 300] [--batch 128] [--seed 0]
    mpirun -n 2 python -m fusegrad.examples.train_digits --distributed   # data parallel over MPI ranks

The training step (forward, backward, Adam update) is wrapped in TinyJit: it is captured on
its second call and then replayed as a fixed list of compiled kernels. Reaches >= 97% test
accuracy in a few hundred steps.

With ``--distributed`` (started under ``mpirun``, see fusegrad/distributed.py) every rank draws the
same batch indices, computes its slice of the batch, and the gradients are averaged across the
ranks inside the jitted step, so training follows the single-process run on the whole batch.
"""
from __future__ import annotations
import argparse, time
import numpy as np
from fusegrad import examples
from fusegrad import Tensor, TinyJit, GlobalCounters, nn
from fusegrad.nn.optim import Adam
from fusegrad.nn.state import get_parameters

class DigitsNet:
    """conv(1→16) → relu → conv(16→32) → relu → maxpool 2 → linear(32·4·4 → 10)."""
    def __init__(self):
        self.c1 = nn.Conv2d(1, 16, 3, padding=1)
        self.c2 = nn.Conv2d(16, 32, 3, padding=1)
        self.fc = nn.Linear(32 * 4 * 4, 10)
    def __call__(self, x: Tensor) -> Tensor:
        x = self.c1(x).relu()
        x = self.c2(x).relu().max_pool2d(2)
        return self.fc(x.flatten(1))

def load_digits(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The scikit-learn digits, scaled to [0, 1], split 80/20 with a fixed shuffle."""
    from sklearn.datasets import load_digits as sklearn_digits
    data = sklearn_digits()
    images = (data.images / 16.0).astype(np.float32)[:, None]   # (N, 1, 8, 8)
    labels = data.target.astype(np.int32)
    order = np.random.default_rng(seed).permutation(len(images))
    split = int(0.8 * len(images))
    return images[order[:split]], labels[order[:split]], images[order[split:]], labels[order[split:]]

def train(steps: int = 300, batch: int = 128, seed: int = 0, lr: float = 3e-3, quiet: bool = False, distributed: bool = False) -> float:
    """Train and return the test accuracy (with ``distributed``, data parallel over the MPI ranks)."""
    Tensor.manual_seed(seed)
    x_train, y_train, x_test, y_test = load_digits(seed)
    model = DigitsNet()
    data_parallel = None
    if distributed:
        from fusegrad import distributed as dist
        dist.init()
        data_parallel = dist.DataParallel(get_parameters(model))   # also starts every rank from rank 0's weights
        quiet = quiet or dist.rank != 0                             # one rank reports
    optimizer = Adam(get_parameters(model), lr=lr)
    X_train, Y_train = Tensor(x_train), Tensor(y_train)

    @TinyJit
    @Tensor.train()
    def train_step() -> Tensor:
        # sample the batch inside the step, so the jitted replay draws fresh indices each time
        indices = Tensor.randint(batch, high=x_train.shape[0])
        if data_parallel is not None: indices = dist.shard_batch(indices)   # the same draw on every rank: take our slice
        optimizer.zero_grad()
        loss = model(X_train[indices]).sparse_categorical_crossentropy(Y_train[indices]).backward()
        if data_parallel is not None:
            data_parallel.allreduce_gradients()
            loss = dist.allreduce(loss, "avg")   # the whole batch's loss
        optimizer.step()
        return loss.realize()

    @TinyJit
    def predict(x: Tensor) -> Tensor: return model(x).argmax(axis=1).realize()

    progress = examples.StepProgress(steps, quiet)
    start = time.perf_counter()
    for step in progress:
        loss = train_step()
        if step % 20 == 0 or step == steps - 1: progress.describe(f"step {step:4d}  loss {loss.item():.4f}")
    elapsed = time.perf_counter() - start
    predictions = np.concatenate([predict(Tensor(x_test[i:i + 120])).numpy()
                                  for i in range(0, len(x_test) - len(x_test) % 120, 120)]
                                 + [model(Tensor(x_test[len(x_test) - len(x_test) % 120:])).argmax(axis=1).numpy()])
    accuracy = float((predictions == y_test).mean())
    if not quiet: print(f"test accuracy {accuracy * 100:.2f}% after {steps} steps in {elapsed:.1f} s")
    return accuracy

if __name__ == "__main__":
    parser = examples.parser(__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=300, help="training steps")
    parser.add_argument("--batch", type=int, default=128, help="images per step")
    parser.add_argument("--seed", type=int, default=0, help="random seed")
    parser.add_argument("--lr", type=float, default=3e-3, help="Adam learning rate")
    parser.add_argument("--distributed", action="store_true", help="data parallel over the MPI ranks (start with mpirun)")
    args = parser.parse_args()
    examples.run(lambda: train(args.steps, args.batch, args.seed, args.lr, distributed=args.distributed),
                 "fusegrad.examples.train_digits")
