"""TinyJit: run a function's kernels without redoing any graph work.

Call 1 runs the function normally (warm-up: everything compiles). Call 2 runs it again while
recording every kernel and copy it launches, with their buffers. Later calls replay that list
with the new input buffers swapped in: no graph building, scheduling or compiling.

>>> @TinyJit
... def step(x: Tensor) -> Tensor: return (x * 2 + 1).realize()
>>> for i in range(3): out = step(Tensor([1.0, 2.0]))   # third call replays
>>> out.tolist()
[3.0, 5.0]

Inputs are the Tensor arguments (positional and keyword, also inside lists, tuples and dicts) and
bound Variables. On replay they must keep their shape, dtype and device, and other arguments must
not change; otherwise a ``JitError`` says which one differs. Outputs are Tensors backed by the
captured buffers, so a later call overwrites them (copy them if you keep them). ``JIT=0``
disables capturing; ``reset()`` forgets the capture.
"""
from __future__ import annotations
import functools
from dataclasses import dataclass, field
from typing import Any, Callable, Generic, TypeVar
from fusegrad.device import Buffer, Device
from fusegrad.helpers import DEBUG, JIT, GlobalCounters
from fusegrad.uop.ops import UOp, Ops
from fusegrad.engine.realize import ExecItem, capturing, CompiledRunner, _update_stats

ReturnType = TypeVar("ReturnType")

class JitError(Exception):
    """A jitted function was called in a way its capture can't serve."""

@dataclass(frozen=True)
class InputSignature:
    shape: tuple
    dtype: Any
    device: Any
    shard_axis: Any = None      # for a multi-device input: the axis it is split along (its shards' shapes depend on it)

def _collect_inputs(args: tuple, kwargs: dict) -> tuple[list[tuple[str, Any]], list[tuple[str, Any]]]:
    """Split the call's arguments into (name, Tensor or bound Variable) inputs and (name, value)
    constants, walking into lists, tuples and dicts. Names are stable paths like 'arg0[1]'."""
    from fusegrad.tensor import Tensor
    inputs: list[tuple[str, Any]] = []
    constants: list[tuple[str, Any]] = []
    def walk(name: str, value: Any) -> None:
        if isinstance(value, Tensor): inputs.append((name, value))
        elif isinstance(value, UOp) and value.op is Ops.BIND: inputs.append((name, value))
        elif isinstance(value, (list, tuple)):
            constants.append((name + ".type", (type(value).__name__, len(value))))
            for i, v in enumerate(value): walk(f"{name}[{i}]", v)
        elif isinstance(value, dict):
            constants.append((name + ".keys", tuple(value.keys())))
            for k, v in value.items(): walk(f"{name}[{k!r}]", v)
        else: constants.append((name, value))
    for i, a in enumerate(args): walk(f"arg{i}", a)
    for k, v in sorted(kwargs.items()): walk(k, v)
    return inputs, constants

def _same_constant(a: Any, b: Any) -> bool:
    try: return bool(a == b) if not callable(a) else a is b
    except Exception: return a is b

@dataclass
class CapturedJit:
    """The recorded kernels of one capture and where the inputs go in them."""
    jit_cache: list[ExecItem]
    input_slots: dict[int, list[tuple[int, int]]]        # input index -> [(item index, buffer index)]
    signatures: list[tuple[str, InputSignature]]
    constants: list[tuple[str, Any]]
    outputs: Any                                          # the function's return value, with buffer-backed tensors
    variables: list[UOp] = field(default_factory=list)
    graph: Any = None

    def replay(self, buffers: list[Buffer], var_vals: dict[UOp, int]) -> None:
        for input_index, positions in self.input_slots.items():
            for item_index, buf_index in positions: self.jit_cache[item_index].bufs[buf_index] = buffers[input_index]
        if self.graph is not None:
            self.graph.replay(buffers, var_vals)
            GlobalCounters.kernel_count += len(self.jit_cache)
            return
        for item in self.jit_cache: item.run(var_vals, do_update_stats=DEBUG >= 2)

class TinyJit(Generic[ReturnType]):
    """Capture a function's kernels on its second call and replay them afterwards (see module doc)."""
    def __init__(self, fxn: Callable[..., ReturnType] | None = None, captured: CapturedJit | None = None, prune: bool = False):
        if fxn is None and captured is None: raise ValueError("TinyJit needs a function")
        self.fxn, self.captured, self.count = fxn, captured, 0 if captured is None else 2
        if fxn is not None: functools.update_wrapper(self, fxn)
    def reset(self) -> None:
        """Forget the capture: the next call warms up again."""
        self.captured, self.count = None, 0
    @property
    def jit_cache(self) -> list[ExecItem]: return self.captured.jit_cache if self.captured is not None else []
    def __get__(self, obj: Any, objtype: Any = None) -> Callable:
        return functools.partial(self.__call__, obj)   # works as a method decorator

    def __call__(self, *args: Any, **kwargs: Any) -> ReturnType:
        from fusegrad.tensor import Tensor
        inputs, constants = _collect_inputs(args, kwargs)
        tensors = [t for _, t in inputs if isinstance(t, Tensor)]
        var_vals = {v.src[0]: v.src[1].arg for _, v in inputs if isinstance(v, UOp)}
        if not JIT or self.fxn is None and self.captured is None:
            return self.fxn(*args, **kwargs)  # type: ignore[misc]
        if self.count >= 2 and self.captured is not None:
            return self._replay(inputs, constants, var_vals)
        # inputs must be plain buffers before we run (or capture) the function
        for t in tensors:
            if not _is_plain_buffer(t): t.uop = t.contiguous().realize().uop
        if self.count == 0:
            result = self.fxn(*args, **kwargs)  # type: ignore[misc]
            _realize_outputs(result)
            self.count = 1
            return result
        return self._capture(args, kwargs, inputs, constants, var_vals)

    def _capture(self, args: tuple, kwargs: dict, inputs: list, constants: list, var_vals: dict) -> ReturnType:
        from fusegrad.tensor import Tensor
        from fusegrad.schedule import buffer_of
        recorded: list[ExecItem] = []
        capturing.append(recorded.append)
        try:
            result = self.fxn(*args, **kwargs)  # type: ignore[misc]
            _realize_outputs(result)
        finally:
            capturing.remove(recorded.append)
        # one entry per buffer: a multi-device input contributes one per shard
        input_buffers = [b for _, t in inputs for b in (_buffers_of(t) if isinstance(t, Tensor) else [None])]
        input_slots: dict[int, list[tuple[int, int]]] = {}
        for item_index, item in enumerate(recorded):
            item.bufs = list(item.bufs)
            for buf_index, buf in enumerate(item.bufs):
                for input_index, input_buffer in enumerate(input_buffers):
                    if input_buffer is not None and buf is input_buffer:
                        input_slots.setdefault(input_index, []).append((item_index, buf_index))
        signatures = [(name, _signature(t)) for name, t in inputs]
        if DEBUG >= 1: print(f"JIT captured {len(recorded)} kernels with {len(input_buffers)} inputs")
        self.captured = CapturedJit(recorded, input_slots, signatures, constants, result,
                                    [v.src[0] for _, v in inputs if isinstance(v, UOp)])
        self.captured.graph = _make_graph(recorded, input_buffers)
        self.count = 2
        return result

    def _replay(self, inputs: list, constants: list, var_vals: dict) -> ReturnType:
        from fusegrad.tensor import Tensor
        from fusegrad.schedule import buffer_of
        captured = self.captured
        assert captured is not None
        if len(inputs) != len(captured.signatures):
            raise JitError(f"args mismatch in JIT: expected {len(captured.signatures)} tensor/variable inputs, got {len(inputs)}")
        for (name, value), (expected_name, expected) in zip(inputs, captured.signatures):
            got = _signature(value)
            if name != expected_name or got != expected:
                raise JitError(f"args mismatch in JIT: input {name} is {got}, but the capture used {expected_name} {expected}")
        if len(constants) != len(captured.constants) or any(
                n1 != n2 or not _same_constant(v1, v2) for (n1, v1), (n2, v2) in zip(constants, captured.constants)):
            changed = [n for (n, v1), (_, v2) in zip(constants, captured.constants) if not _same_constant(v1, v2)]
            raise JitError(f"args mismatch in JIT: non-Tensor argument(s) {changed or 'structure'} changed since the capture; "
                           f"use a Tensor or a bound Variable for values that change")
        buffers = []
        for _, t in inputs:
            if isinstance(t, Tensor):
                if not _is_plain_buffer(t): t.uop = t.contiguous().realize().uop
                buffers.extend(b.ensure_allocated() for b in _buffers_of(t))
            else: buffers.append(None)
        captured.replay(buffers, var_vals)
        return captured.outputs

def _signature(value: Any) -> InputSignature:
    from fusegrad.tensor import Tensor
    if isinstance(value, Tensor):
        if isinstance(value.device, tuple):
            from fusegrad.schedule.multi import multi_axis
            return InputSignature(value.shape, value.dtype, value.device, multi_axis(value.uop))
        return InputSignature(value.shape, value.dtype, value.device)
    return InputSignature((), value.dtype, ("variable", value.src[0].arg))

def _buffers_of(t: Any) -> list[Buffer]:
    """The buffer behind a plain input tensor (one per shard for a multi-device tensor)."""
    from fusegrad.schedule import buffer_of
    return [buffer_of(s.base) for s in (t.uop.src if t.uop.op is Ops.MULTI else (t.uop,))]

def _is_plain_buffer(t: Any) -> bool:
    u = t.uop
    if u.op is Ops.MULTI: return all(_is_plain_uop(s) for s in u.src)
    return _is_plain_uop(u)

def _is_plain_uop(u: UOp) -> bool:
    from fusegrad.schedule import BUFFERS
    return (u.op is Ops.BUFFER or (u.op is Ops.RESHAPE and u.src[0].op is Ops.BUFFER)) and BUFFERS.get(u.base) is not None \
        and BUFFERS[u.base].is_allocated()

def _realize_outputs(result: Any) -> None:
    from fusegrad.tensor import Tensor
    found: list[Tensor] = []
    def walk(x: Any) -> None:
        if isinstance(x, Tensor): found.append(x)
        elif isinstance(x, (list, tuple)):
            for v in x: walk(v)
        elif isinstance(x, dict):
            for v in x.values(): walk(v)
    walk(result)
    if found: Tensor.realize(*found)

def _make_graph(items: list[ExecItem], input_buffers: list) -> Any:
    """A device graph that runs all captured kernels in one native call, when the device has one."""
    devices = {item.prg.device for item in items}
    if len(devices) != 1 or not items or not all(isinstance(item.prg, CompiledRunner) for item in items): return None
    graph_class = getattr(Device[devices.pop()], "graph", None)
    if graph_class is None: return None
    try: return graph_class(items, input_buffers)
    except NotImplementedError: return None
