"""Data-parallel training across processes and nodes, over MPI.

The transport is the system's MPI (OpenMPI on Debian: ``sh scripts/install_system.sh``) through
mpi4py (``pip install 'fusegrad[dist]'``). Start one process per rank with ``mpirun``::

    mpirun -n 2 python -m fusegrad.examples.train_digits --distributed

(as root, and with more ranks than cores, ``mpirun`` needs ``--allow-run-as-root --oversubscribe``;
``mpirun_command`` builds a command line that works here).

Collectives work on realized device buffers: a tensor is realized (a view is first made
contiguous), and its buffer is handed to MPI as it is when the device's memory is host memory
(CPU, PYTHON, NPY); other devices go through a host copy. Every collective is a ``Runner`` that the
engine runs like a kernel, so a ``TinyJit`` capture records it and replays it with the step.

>>> from fusegrad import Tensor, distributed as dist
>>> dist.init()                                    # doctest: +SKIP
>>> total = dist.allreduce(Tensor([1.0, 2.0]))     # doctest: +SKIP

Results are new tensors (their own buffers) without a gradient connection, as in PyTorch where
collectives are not differentiated. ``DataParallel`` averages the gradients of a model's
parameters across ranks in buckets (see its docstring for the training pattern).
"""
from __future__ import annotations
import os
from typing import Any, Callable, Sequence
from fusegrad.device import Buffer
from fusegrad.buffers import buffer_of, new_buffer_uop
from fusegrad.dtype import DType, dtypes
from fusegrad.helpers import DEBUG, dedup
from fusegrad.engine import realize as _realize
from fusegrad.engine.realize import ExecItem, Runner
from fusegrad.tensor import Tensor
from fusegrad.uop.ops import Ops

__all__ = ["init", "is_initialized", "allreduce", "broadcast", "allgather", "barrier", "broadcast_parameters",
           "DataParallel", "shard_batch", "mpirun_command", "REDUCE_OPS"]

REDUCE_OPS = ("sum", "avg", "max", "min", "prod")
DEFAULT_BUCKET_BYTES = 25 * 2**20    # PyTorch DDP's default bucket size

_comm: Any = None      # the mpi4py communicator after init()
_MPI: Any = None       # the mpi4py.MPI module after init()

# ---------------------------------------------------------------- setup

def init(comm: Any = None) -> None:
    """Initialize MPI (once; later calls do nothing) and use ``comm`` (default: MPI.COMM_WORLD).

    Without ``mpirun`` the process is a world of one rank. Raises ImportError naming what to
    install when mpi4py or the MPI library is missing."""
    global _comm, _MPI
    if _comm is not None: return
    try:
        from mpi4py import MPI
    except ImportError as e:
        raise ImportError(f"fusegrad.distributed needs mpi4py and an MPI library ({e}): run `sh scripts/install_system.sh` "
                          f"(installs OpenMPI) and `pip install 'fusegrad[dist]'`") from None
    _MPI, _comm = MPI, (comm if comm is not None else MPI.COMM_WORLD)
    if DEBUG >= 1: print(f"distributed: rank {_comm.Get_rank()} of {_comm.Get_size()} ({MPI.Get_library_version().splitlines()[0]})")

def is_initialized() -> bool:
    """Whether ``init()`` has run in this process."""
    return _comm is not None

def _communicator() -> Any:
    if _comm is None: raise RuntimeError("fusegrad.distributed is not initialized: call fusegrad.distributed.init() first")
    return _comm

def __getattr__(name: str) -> int:
    # ``dist.rank`` and ``dist.world_size`` read the communicator when asked (module attributes set at
    # import time would be stale before init())
    if name == "rank": return _communicator().Get_rank()
    if name == "world_size": return _communicator().Get_size()
    raise AttributeError(f"module 'fusegrad.distributed' has no attribute {name!r}")

def mpirun_command(num_processes: int, command: Sequence[str], threads_per_rank: int | None = None) -> list[str]:
    """An ``mpirun`` command line that starts ``command`` on ``num_processes`` ranks of this machine.

    It adds what this machine needs: ``--allow-run-as-root`` when running as root, ``--oversubscribe``
    (more ranks than cores is allowed), ``--bind-to none`` (ranks share the cores with other work),
    and ``OMP_NUM_THREADS`` so the ranks' kernel threads together use each core once."""
    if not isinstance(num_processes, int) or num_processes < 1: raise ValueError(f"num_processes must be a positive int, got {num_processes!r}")
    if threads_per_rank is None: threads_per_rank = max(1, (os.cpu_count() or 1) // num_processes)
    args = ["mpirun", "-n", str(num_processes), "--oversubscribe", "--bind-to", "none", "-x", f"OMP_NUM_THREADS={threads_per_rank}"]
    if hasattr(os, "geteuid") and os.geteuid() == 0: args.insert(1, "--allow-run-as-root")
    return args + list(command)

# ---------------------------------------------------------------- buffers

# the MPI datatype (an attribute of mpi4py.MPI) of each dtype MPI can compute with
_MPI_TYPE_NAMES = {dtypes.bool: "C_BOOL", dtypes.int8: "INT8_T", dtypes.uint8: "UINT8_T", dtypes.int16: "INT16_T",
                   dtypes.uint16: "UINT16_T", dtypes.int32: "INT32_T", dtypes.uint32: "UINT32_T", dtypes.int64: "INT64_T",
                   dtypes.uint64: "UINT64_T", dtypes.float32: "FLOAT", dtypes.float64: "DOUBLE"}

def _check_reducible(dtype: DType) -> None:
    if dtypes.concrete(dtype) not in _MPI_TYPE_NAMES:
        raise TypeError(f"allreduce of {dtype} is not supported (MPI has no {dtype} arithmetic): cast to float32 first")

def _mpi_datatype(dtype: DType) -> Any:
    """The MPI datatype for ``dtype``; one MPI can't compute with (half, bfloat16, fp8) moves as bytes."""
    return getattr(_MPI, _MPI_TYPE_NAMES.get(dtypes.concrete(dtype), "BYTE"))

def _check_tensor(t: Any, what: str) -> Tensor:
    if not isinstance(t, Tensor): raise TypeError(f"{what} takes a Tensor, got {type(t).__name__}")
    if isinstance(t.device, tuple):
        raise ValueError(f"{what} of a multi-device tensor (on {t.device}) is not supported: its shards are reduced inside the "
                         f"process already; pass a single-device tensor (e.g. t.to('CPU'))")
    if not all(isinstance(s, int) for s in t.shape): raise ValueError(f"{what} needs a concrete shape, got {t.shape}")
    return t

def _input_buffer(t: Tensor) -> tuple[Tensor, Buffer]:
    """A tensor over the buffer holding ``t``'s values densely, and that buffer: ``t`` is realized,
    and a view or a constant is first computed into a buffer of its own."""
    dense = t.detach().contiguous().realize()
    if not _is_whole_buffer(dense): dense = t.detach().clone().realize()
    if not _is_whole_buffer(dense): raise RuntimeError(f"could not compute a buffer for a tensor of shape {t.shape}")
    return dense, buffer_of(dense.uop.base).ensure_allocated()

def _is_whole_buffer(t: Tensor) -> bool:
    u = t.uop
    return u.op is Ops.BUFFER or (u.op is Ops.RESHAPE and u.src[0].op is Ops.BUFFER)

def _new_output(device: str, shape: tuple[int, ...], dtype: DType) -> tuple[Tensor, Buffer]:
    """A fresh allocated buffer and a Tensor of ``shape`` over it."""
    size = 1
    for s in shape: size *= s
    uop = new_buffer_uop(device, size, dtype)
    buf = buffer_of(uop).ensure_allocated()
    return Tensor(uop.reshape(shape), requires_grad=False), buf

def _host_memory(buf: Buffer) -> tuple[memoryview, Callable[[], None]]:
    """A writable host view of ``buf`` and a function to call after MPI wrote it. Host-memory devices
    give their memory itself (no copy); others a staging copy that is written back."""
    buf.ensure_allocated()
    try:
        view = buf.allocator._as_buffer(buf._buf)
        if not view.readonly: return view, lambda: None
    except NotImplementedError: pass
    staging = memoryview(bytearray(buf.nbytes))
    buf.copyout(staging)
    return staging, lambda: buf.copyin(staging)

def _run_collective(runner: Runner, bufs: list[Buffer]) -> None:
    """Run ``runner`` now, and let an active TinyJit capture record it (so its replay runs it too)."""
    item = ExecItem(runner, bufs)
    for hook in _realize.capturing: hook(item)
    item.run()

def _verify_same_everywhere(what: str, signature: tuple) -> None:
    """Raise on every rank when the ranks call a collective with different shapes or dtypes (MPI would
    hang or read past a buffer). Runs on the Python path only, not in a JIT replay."""
    seen = _communicator().allgather(signature)
    if any(s != signature for s in seen):
        raise ValueError(f"{what}: the ranks passed different tensors: " + ", ".join(f"rank {i}: {s}" for i, s in enumerate(seen)))

# ---------------------------------------------------------------- runners (what the engine and the JIT run)

class CollectiveRunner(Runner):
    """An MPI collective over device buffers; ``bufs[0]`` is the one written."""
    def __init__(self, name: str, device: str, nbytes: int):
        super().__init__(f"{name} {nbytes:10d} bytes", device, 0, nbytes)
    def __call__(self, bufs: list[Buffer], var_vals: dict, wait: bool = False) -> float | None:
        import time
        start = time.perf_counter()
        self.collective(bufs)
        return time.perf_counter() - start if wait else None
    def collective(self, bufs: list[Buffer]) -> None: raise NotImplementedError

class AllreduceRunner(CollectiveRunner):
    """``bufs[0] = op(bufs[1] of every rank)``; in place when both are the same buffer."""
    def __init__(self, device: str, dtype: DType, nbytes: int, op: str):
        super().__init__(f"allreduce {op}", device, nbytes)
        self.datatype, self.op = _mpi_datatype(dtype), {"sum": _MPI.SUM, "max": _MPI.MAX, "min": _MPI.MIN, "prod": _MPI.PROD}[op]
    def collective(self, bufs: list[Buffer]) -> None:
        out, finish = _host_memory(bufs[0])
        send = _MPI.IN_PLACE if bufs[1] is bufs[0] else [bufs[1].as_buffer(allow_zero_copy=True), self.datatype]
        _communicator().Allreduce(send, [out, self.datatype], op=self.op)
        finish()

class BroadcastRunner(CollectiveRunner):
    """``bufs[0]`` gets ``root``'s values (on ``root`` it is the source buffer itself)."""
    def __init__(self, device: str, dtype: DType, nbytes: int, root: int):
        super().__init__(f"broadcast from {root}", device, nbytes)
        self.datatype, self.root = _mpi_datatype(dtype), root
    def collective(self, bufs: list[Buffer]) -> None:
        memory, finish = _host_memory(bufs[0])
        _communicator().Bcast([memory, self.datatype], root=self.root)
        finish()

class AllgatherRunner(CollectiveRunner):
    """``bufs[0]`` = every rank's ``bufs[1]``, one after the other in rank order."""
    def __init__(self, device: str, dtype: DType, nbytes: int):
        super().__init__("allgather", device, nbytes)
        self.datatype = _mpi_datatype(dtype)
    def collective(self, bufs: list[Buffer]) -> None:
        out, finish = _host_memory(bufs[0])
        _communicator().Allgather([bufs[1].as_buffer(allow_zero_copy=True), self.datatype], [out, self.datatype])
        finish()

class BarrierRunner(CollectiveRunner):
    """Every rank waits here until all have arrived."""
    def __init__(self, device: str): super().__init__("barrier", device, 0)
    def collective(self, bufs: list[Buffer]) -> None: _communicator().Barrier()

# ---------------------------------------------------------------- collectives

def allreduce(tensor: Tensor, op: str = "sum") -> Tensor:
    """``op`` ("sum", "avg", "max", "min", "prod") of ``tensor`` over all ranks, elementwise; every
    rank gets the result as a new tensor. "avg" is the sum divided by the world size (a float)."""
    t = _check_tensor(tensor, "allreduce")
    if op not in REDUCE_OPS: raise ValueError(f"allreduce op must be one of {REDUCE_OPS}, got {op!r}")
    _check_reducible(t.dtype)
    _verify_same_everywhere("allreduce", (t.shape, str(t.dtype), op))
    dense, source = _input_buffer(t)
    out, buf = _new_output(source.device, t.shape, t.dtype)
    _run_collective(AllreduceRunner(source.device, t.dtype, source.nbytes, "sum" if op == "avg" else op), [buf, source])
    return out / _communicator().Get_size() if op == "avg" else out

def broadcast(tensor: Tensor, root: int = 0) -> Tensor:
    """``root``'s ``tensor`` on every rank (every rank passes a tensor of the same shape and dtype)."""
    t = _check_tensor(tensor, "broadcast")
    size = _communicator().Get_size()
    if not isinstance(root, int) or not 0 <= root < size: raise ValueError(f"broadcast root must be a rank in [0, {size}), got {root!r}")
    _verify_same_everywhere("broadcast", (t.shape, str(t.dtype), root))
    dense, source = _input_buffer(t)
    if _communicator().Get_rank() == root: out, buf = dense, source
    else: out, buf = _new_output(source.device, t.shape, t.dtype)
    _run_collective(BroadcastRunner(source.device, t.dtype, source.nbytes, root), [buf])
    return out

def allgather(tensor: Tensor) -> Tensor:
    """Every rank's ``tensor`` concatenated along the first axis in rank order (a scalar becomes a
    vector of world_size values); all ranks pass the same shape and dtype."""
    t = _check_tensor(tensor, "allgather")
    _verify_same_everywhere("allgather", (t.shape, str(t.dtype)))
    size = _communicator().Get_size()
    dense, source = _input_buffer(t)
    shape = (size * t.shape[0], *t.shape[1:]) if t.ndim else (size,)
    out, buf = _new_output(source.device, shape, t.dtype)
    _run_collective(AllgatherRunner(source.device, t.dtype, buf.nbytes), [buf, source])
    return out

def barrier() -> None:
    """Wait until every rank has called ``barrier()`` (inside a TinyJit capture it is replayed too)."""
    _communicator()
    from fusegrad.device import Device
    _run_collective(BarrierRunner(Device.DEFAULT), [])

# ---------------------------------------------------------------- data parallel training

def shard_batch(batch: Tensor, axis: int = 0) -> Tensor:
    """This rank's equal slice of ``batch`` along ``axis`` (rank r takes the r-th of world_size
    parts). The size along ``axis`` must divide evenly, so that averaging the ranks' mean losses'
    gradients equals the gradient of the mean loss over the whole batch."""
    t = _check_tensor(batch, "shard_batch")
    if not -t.ndim <= axis < t.ndim: raise ValueError(f"shard_batch axis {axis} is out of range for shape {t.shape}")
    axis %= t.ndim
    size, rank = _communicator().Get_size(), _communicator().Get_rank()
    if t.shape[axis] % size:
        raise ValueError(f"shard_batch: the batch size {t.shape[axis]} (axis {axis}) doesn't divide into {size} equal parts; "
                         f"use a multiple of the world size")
    part = t.shape[axis] // size
    return t[(slice(None),) * axis + (slice(rank * part, (rank + 1) * part),)]

def _own_buffer(param: Tensor) -> Buffer:
    """The buffer that is ``param`` (realized first; a parameter that is a view gets a buffer of its own)."""
    param.realize()
    if not _is_whole_buffer(param): param.uop = param.detach().contiguous().realize().uop
    return buffer_of(param.uop.base).ensure_allocated()

def broadcast_parameters(params: Sequence[Tensor], root: int = 0) -> None:
    """Overwrite every tensor in ``params`` with ``root``'s values, in its own buffer, so that all
    ranks start training from the same parameters."""
    params = [_check_tensor(p, "broadcast_parameters") for p in params]
    size = _communicator().Get_size()
    if not isinstance(root, int) or not 0 <= root < size: raise ValueError(f"broadcast root must be a rank in [0, {size}), got {root!r}")
    _verify_same_everywhere("broadcast_parameters", tuple((p.shape, str(p.dtype)) for p in params))
    for p in params:
        buf = _own_buffer(p)
        _run_collective(BroadcastRunner(buf.device, p.dtype, buf.nbytes, root), [buf])

class _StartAllreduce(CollectiveRunner):
    """Starts a non-blocking in-place sum of ``bufs[0]`` over the ranks and returns at once; the
    matching ``_WaitAllreduces`` finishes it. Starting also lets MPI progress the earlier ones."""
    def __init__(self, device: str, dtype: DType, nbytes: int, pending: list):
        super().__init__("allreduce start", device, nbytes)
        self.datatype, self.pending = _mpi_datatype(dtype), pending
    def collective(self, bufs: list[Buffer]) -> None:
        if self.pending: _MPI.Request.Testall([request for request, _ in self.pending])
        memory, finish = _host_memory(bufs[0])
        self.pending.append((_communicator().Iallreduce(_MPI.IN_PLACE, [memory, self.datatype], op=_MPI.SUM), finish))

class _WaitAllreduces(CollectiveRunner):
    """Waits for every started allreduce of a ``DataParallel`` step (its ``bufs`` are the buckets)."""
    def __init__(self, device: str, nbytes: int, pending: list):
        super().__init__("allreduce wait", device, nbytes)
        self.pending = pending
    def collective(self, bufs: list[Buffer]) -> None:
        _MPI.Request.Waitall([request for request, _ in self.pending])
        for _, finish in self.pending: finish()
        self.pending.clear()

class DataParallel:
    """Average the gradients of ``params`` over all ranks, as PyTorch's DistributedDataParallel does.

    Construction broadcasts ``params`` from rank ``root`` so every rank starts identical. Each rank
    then runs the same step on its slice of the batch (``shard_batch``) and calls
    ``allreduce_gradients()`` between ``backward()`` and ``optimizer.step()``::

        ddp = DataParallel(get_parameters(model))
        optimizer = Adam(get_parameters(model))
        @TinyJit
        @Tensor.train()
        def step(x: Tensor, y: Tensor) -> Tensor:
            optimizer.zero_grad()
            loss = model(shard_batch(x)).sparse_categorical_crossentropy(shard_batch(y)).backward()
            ddp.allreduce_gradients()
            optimizer.step()
            return allreduce(loss, "avg").realize()   # the whole batch's loss, the same on every rank

    The result equals single-process training on the whole batch (up to float rounding).

    Gradients travel in buckets of at most ``bucket_bytes`` (one parameter larger than that has a
    bucket to itself), filled in reverse parameter order, roughly the order in which the backward
    pass produces them. Each bucket is computed (its gradients divided by the world size and packed
    into one buffer), and its allreduce is started without waiting; the next bucket's kernels run
    while it is in flight, and all are waited for at the end. Each ``param.grad`` then is a view of
    its bucket. Inside a TinyJit the starts and the wait are part of the replayed step."""
    def __init__(self, params: Sequence[Tensor], bucket_bytes: int = DEFAULT_BUCKET_BYTES, root: int = 0):
        if not isinstance(bucket_bytes, int) or bucket_bytes < 1: raise ValueError(f"bucket_bytes must be a positive int, got {bucket_bytes!r}")
        params = [_check_tensor(p, "DataParallel") for p in params]
        self.params: list[Tensor] = dedup([p for p in params if p.requires_grad is not False])
        if not self.params: raise ValueError("DataParallel needs at least one parameter that requires a gradient")
        self.world_size = _communicator().Get_size()
        broadcast_parameters(self.params, root)
        self.buckets = _make_buckets(self.params, bucket_bytes)
        self._pending: list = []

    def allreduce_gradients(self) -> None:
        """Replace every parameter's ``.grad`` by its average over the ranks (call after backward())."""
        grads = []
        for i, p in enumerate(self.params):
            if p.grad is None:
                raise RuntimeError(f"DataParallel parameter {i} (shape {p.shape}) has no gradient: call backward() before "
                                   f"allreduce_gradients(), and leave parameters the loss doesn't use out of DataParallel")
            grads.append(p.grad)
        if self.world_size == 1: return   # one rank: the local gradients are the average
        grad_of = {id(p): g for p, g in zip(self.params, grads)}
        bucket_buffers: list[tuple[Tensor, Buffer]] = []
        for bucket in self.buckets:
            scale = 1.0 / self.world_size     # divide before summing (as DDP does): the sum is the average
            # the gradients are computed first, each in its own kernels, then packed (a copy of the bucket's
            # bytes): computing them inside the packing kernel would fuse every backward reduce into one
            # kernel that evaluates all of them for each element
            scaled = [(grad_of[id(p)].flatten() * scale).cast(p.dtype).contiguous() for p in bucket]
            Tensor.realize(*scaled)
            packed = Tensor.cat(*scaled).realize() if len(scaled) > 1 else scaled[0]
            if not _is_whole_buffer(packed): packed = packed.contiguous().realize()
            buf = buffer_of(packed.uop.base).ensure_allocated()
            _run_collective(_StartAllreduce(buf.device, packed.dtype, buf.nbytes, self._pending), [buf])
            bucket_buffers.append((packed, buf))
        _run_collective(_WaitAllreduces(bucket_buffers[0][1].device, sum(b.nbytes for _, b in bucket_buffers), self._pending),
                        [b for _, b in bucket_buffers])
        for bucket, (packed, _) in zip(self.buckets, bucket_buffers):
            offset = 0
            for p in bucket:
                p.grad = packed[offset:offset + p.numel()].reshape(p.shape)
                offset += p.numel()

def _make_buckets(params: list[Tensor], bucket_bytes: int) -> list[list[Tensor]]:
    """Group ``params`` in reverse order into buckets of one device and dtype, each at most
    ``bucket_bytes`` (unless a single parameter is larger)."""
    buckets: list[list[Tensor]] = []
    open_bucket: dict[tuple, tuple[list[Tensor], int]] = {}
    for p in reversed(params):
        key, nbytes = (p.device, p.dtype), p.numel() * p.dtype.itemsize
        members, filled = open_bucket.get(key, ([], 0))
        if members and filled + nbytes > bucket_bytes:
            buckets.append(members)
            members, filled = [], 0
        open_bucket[key] = (members + [p], filled + nbytes)
    buckets.extend(members for members, _ in open_bucket.values())
    return buckets
