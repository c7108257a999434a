"""TinyJit: run a function's kernels without redoing any graph work.

Call 1 runs the function normally (warm-up: everything compiles). Call 2 runs it again while
recording every kernel and copy it launches, with their buffers. Later calls replay that list
with the new input buffers swapped in: no graph building, scheduling or compiling.

>>> @TinyJit
... def step(x: Tensor) -> Tensor: return (x * 2 + 1).realize()
>>> for i in range(3): out = step(Tensor([1.0, 2.0]))   # third call replays
>>> out.tolist()
[3.0, 5.0]

Rules (tinygrad 0.14's, plus guard rails where replaying would silently compute something else):

- Inputs are the Tensor arguments (positional and keyword, also inside lists, tuples and dicts)
  and bound Variables. Unrealized inputs are realized first. On replay they must keep their shape,
  dtype, device, and view (a view such as ``x[2:6]`` or ``x.T`` of a realized buffer is replayed
  over the new buffer, so it must be the same view every call), else ``JitError``.
  A bound Variable in an input's shape or view (``x[:v]``, ``x.shrink(((0, v),))``) is compared
  unbound: any value of it replays the same capture, and returned tensors read back that call's length.
- The same buffer passed as two inputs raises ``JitError`` (the capture can't tell them apart).
- Outputs: the returned tensors are backed by the captured buffers and are the *same* tensors on
  every replay: call n+1 overwrites what call n returned (copy it, e.g. ``out.clone()``, to keep
  it). A returned input (or a view of one) is the current call's input. Feeding an output back in
  (``h = step(h)``) is safe: an input whose buffer the replay writes is copied first.
- Non-Tensor arguments: one compared by identity (a model, an optimizer, a function) is ignored,
  as in tinygrad. A changed *value* (number, string, tuple of values, numpy array) raises
  ``JitError``: the capture baked the old one in. Pass a Tensor or a bound Variable instead.
- ``.item()``, ``.tolist()``, ``.numpy()`` inside a captured call raise ``JitError`` (the value
  would be baked in), so does a function that launches no kernel; calling a TinyJit while another
  one captures raises ``RuntimeError``.
- ``TinyJit(fn, prune=True)`` (or ``@TinyJit(prune=True)``) drops kernels that don't depend on the
  inputs: they ran once during the capture and their results stay (a random draw that doesn't
  depend on the inputs is then frozen too).
- ``JIT=0`` disables capturing; ``JIT=2`` captures but replays kernel by kernel (no device graph);
  ``reset()`` forgets the capture. ``pickle.dumps(jit)`` of a captured JIT keeps the kernels'
  binaries and the captured buffers' contents, so another process can replay it.
"""
from __future__ import annotations
import functools, warnings, weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Generic, TypeVar
from fusegrad.device import Buffer, Device
from fusegrad.buffers import BUFFERS, buffer_of, new_buffer_uop
from fusegrad.helpers import DEBUG, JIT, PROFILE, GlobalCounters
from fusegrad.uop.ops import UOp, Ops, GroupOp, sym_infer, render_expr
from fusegrad.engine.realize import ExecItem, BufferCopy, capturing, shape_guards, CompiledRunner, _update_stats

ReturnType = TypeVar("ReturnType")

class JitWarning(UserWarning):
    """A TinyJit replay that follows tinygrad's rules but may not be what the caller meant."""

class JitError(Exception):
    """A jitted function was called in a way its capture can't serve."""

def refuse_data_access_in_capture(method: str) -> None:
    """Called by Tensor data accessors: reading a value while a JIT captures would bake it into the replay."""
    if capturing:
        raise JitError(f"{method} called inside a TinyJit capture: the value would be read once and baked into every replay; "
                       f"return the tensor from the jitted function and read it outside")

@dataclass(frozen=True)
class InputSignature:
    shape: tuple
    dtype: Any
    device: Any
    shard_axis: Any = None      # for a multi-device input: the axis it is split along (its shards' shapes depend on it)
    view: Any = None            # for a view of a realized buffer: (buffer size, movement ops from the tensor down to the buffer)

# ---------------------------------------------------------------- call arguments

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
        elif _is_value(value): constants.append((name, value))
        # anything else compares by identity (a model, an optimizer, a function): ignored, as tinygrad does
    for i, a in enumerate(args): walk(f"arg{i}", a)
    for k, v in sorted(kwargs.items()): walk(k, v)
    return inputs, constants

def _is_value(value: Any) -> bool:
    """Does ``value`` define its own equality (a number, a string, a dtype, an array), so that a
    change of it can be detected? Objects with identity equality are not compared."""
    return value is None or type(value).__eq__ is not object.__eq__

def _same_constant(a: Any, b: Any) -> bool:
    if a is b: return True
    if type(a) is not type(b): return False
    if hasattr(a, "__array__"):
        import numpy as np
        return bool(np.array_equal(np.asarray(a), np.asarray(b)))
    try: return bool(a == b)
    except Exception: return False

def _prepare_tensor_inputs(inputs: list[tuple[str, Any]]) -> list[list[Buffer] | None]:
    """Make every Tensor input a realized buffer or a view of one (computed tensors are realized,
    constants get a buffer of their own); returns each input's buffers (None for a Variable)."""
    buffers: list[list[Buffer] | None] = []
    for name, t in inputs:
        if isinstance(t, UOp):
            buffers.append(None)
            continue
        if (bufs := _realized_buffers(t)) is None:
            t.realize()
            if (bufs := _realized_buffers(t)) is None:
                t.uop = t.contiguous().realize().uop
                if (bufs := _realized_buffers(t)) is None: raise JitError(f"JIT input {name} could not be made a realized buffer")
        buffers.append(bufs)
    return buffers

def _check_no_duplicates(inputs: list[tuple[str, Any]], buffers: list[list[Buffer] | None]) -> None:
    owner: dict[int, str] = {}
    for (name, _), bufs in zip(inputs, buffers):
        for buf in bufs or ():
            if (first := owner.setdefault(id(buf.base), name)) != name:
                raise JitError(f"the same buffer is passed to the JIT twice ({first} and {name}): a replay swaps each input's "
                               f"buffer separately, so it can't serve both; pass a copy of one (x.clone())")

def _signature(value: Any) -> InputSignature:
    """What an input must keep between the capture and a replay. Sizes and views may hold bound
    Variables: the signature has the unbound Variable, so a new value of it replays the same capture."""
    from fusegrad.tensor import Tensor
    if isinstance(value, Tensor):
        shape = _map_uops(value.shape, unbind_variables)
        if isinstance(value.device, tuple):
            from fusegrad.schedule.multi import multi_axis
            return InputSignature(shape, value.dtype, value.device, multi_axis(value.uop))
        return InputSignature(shape, value.dtype, value.device, view=_map_uops(_view_of(value.uop), unbind_variables))
    return InputSignature((), value.dtype, ("variable", value.src[0].arg))

# ---------------------------------------------------------------- bound Variables in inputs and outputs

def _map_uops(value: Any, fn: Callable[[UOp], UOp]) -> Any:
    """``value`` (nested tuples of ints, ops and UOps: a shape or a view) with ``fn`` applied to every UOp."""
    if isinstance(value, UOp): return fn(value)
    if isinstance(value, tuple): return tuple(_map_uops(v, fn) for v in value)
    return value

def unbind_variables(u: UOp) -> UOp:
    """``u`` with every bound Variable replaced by the Variable itself."""
    binds = {b: b.src[0] for b in u.toposort if b.op is Ops.BIND}
    return u.substitute(binds) if binds else u

def _bound_values(value: Any) -> dict[UOp, int]:
    """The value of every bound Variable in an input: a Variable itself, or one in a tensor's shape or view."""
    from fusegrad.tensor import Tensor
    found: dict[UOp, int] = {}
    def collect(u: UOp) -> UOp:
        for b in u.toposort:
            if b.op is Ops.BIND: found[b.src[0]] = b.src[1].arg
        return u
    if isinstance(value, Tensor):
        _map_uops(value.shape, collect)
        node = value.uop
        while node.op in GroupOp.Movement or node.op is Ops.MULTI:
            _map_uops(node.arg, collect)
            node = node.src[0]
    elif isinstance(value, UOp): collect(value)
    return found

def _rebind(u: UOp, values: dict[UOp, int]) -> UOp:
    """A view (movement ops over a buffer) with its bound Variables bound to ``values`` instead."""
    def bind_again(x: UOp) -> UOp:
        binds = {b: b.src[0].bind(values[b.src[0]]) for b in x.toposort if b.op is Ops.BIND and b.src[0] in values}
        return x.substitute(binds) if binds else x
    if u.op in GroupOp.Movement: return UOp(u.op, u.dtype, (_rebind(u.src[0], values),), _map_uops(u.arg, bind_again))
    if u.op is Ops.MULTI: return u.replace(src=tuple(_rebind(s, values) for s in u.src))
    return u

def _describe(name: str, got: InputSignature, expected: InputSignature) -> str:
    if got.view != expected.view:
        def form(s: InputSignature) -> str:
            return "a whole realized buffer" if s.view is None else \
                f"a view ({', '.join(op.name.lower() for op, _ in s.view[1])}) of a buffer of {s.view[0]} elements"
        return (f"args mismatch in JIT: input {name} is {form(got)}, but the capture used {form(expected)}; the replay reads "
                f"the new buffer through the captured view, so pass the same kind of tensor every call (x.contiguous() "
                f"makes a view a buffer of its own)")
    return f"args mismatch in JIT: input {name} is {got}, but the capture used {expected}"

# ---------------------------------------------------------------- buffers behind inputs

def _view_of(u: UOp) -> tuple | None:
    """None for a whole buffer (or a reshape of one); for a view of a buffer, its size and the
    movement ops from ``u`` down to the buffer."""
    if u.op is Ops.BUFFER or (u.op is Ops.RESHAPE and u.src[0].op is Ops.BUFFER): return None
    ops = []
    node = u
    while node.op in GroupOp.Movement:
        ops.append((node.op, node.arg))
        node = node.src[0]
    return (node.arg[2], tuple(ops))

def _buffers_of(t: Any) -> list[Buffer]:
    """The buffer behind an input tensor (one per shard for a multi-device tensor)."""
    return [buffer_of(s.base) for s in (t.uop.src if t.uop.op is Ops.MULTI else (t.uop,))]

def _realized_buffers(t: Any) -> list[Buffer] | None:
    """The allocated buffer behind a realized buffer or a view of one (one per shard of a multi-device
    tensor, whose shards must be whole buffers); None when ``t`` needs realizing first."""
    u = t.uop
    if u.op is Ops.MULTI:
        found = [_allocated_buffer(s.base) if _view_of(s) is None else None for s in u.src]
        return None if any(b is None for b in found) else found   # type: ignore[return-value]
    return None if (buf := _allocated_buffer(u.base)) is None else [buf]

def _allocated_buffer(u: UOp) -> Buffer | None:
    if u.op is not Ops.BUFFER: return None
    return buf if (buf := BUFFERS.get(u)) is not None and buf.is_allocated() else None

def _written_positions(item: ExecItem) -> list[int]:
    if isinstance(item.prg, CompiledRunner): return list(item.prg.p.outs)
    if isinstance(item.prg, BufferCopy): return [0]
    return list(range(len(item.bufs)))

def _private_copy(buf: Buffer) -> Buffer:
    """A fresh buffer with ``buf``'s contents, for an input the replay would overwrite while reading it."""
    copy = Buffer(buf.device, buf.size, buf.dtype).allocate()
    copy.copyin(buf.ensure_allocated().as_buffer(allow_zero_copy=True))
    return copy

# ---------------------------------------------------------------- outputs

def _tensor_over(buf: Buffer, like: Any) -> Any:
    """A Tensor over ``buf`` seen through the same view as ``like`` sees its own buffer."""
    from fusegrad.tensor import Tensor
    uop = new_buffer_uop(buf.device, buf.size, buf.dtype)
    BUFFERS[uop] = buf
    return Tensor(like.uop.substitute({like.uop.base: uop}))

@dataclass(frozen=True)
class _InputOutput:
    """A returned tensor that is an input (``view`` None) or a view of one: replay returns the current input's."""
    input_index: int
    view: UOp | None = None
    captured_base: UOp | None = None

def _map_structure(value: Any, fn: Callable[[Any], Any]) -> Any:
    """``value`` with ``fn`` applied to every leaf of its lists, tuples and dicts."""
    if isinstance(value, list): return [_map_structure(v, fn) for v in value]
    if isinstance(value, tuple):
        items = [_map_structure(v, fn) for v in value]
        return type(value)._make(items) if hasattr(type(value), "_make") else type(value)(items)
    if isinstance(value, dict): return {k: _map_structure(v, fn) for k, v in value.items()}
    return fn(value)

def _tensors_in(value: Any) -> list:
    from fusegrad.tensor import Tensor
    found: list = []
    _map_structure(value, lambda v: found.append(v) if isinstance(v, Tensor) else None)
    return found

def _realize_outputs(result: Any) -> None:
    from fusegrad.tensor import Tensor
    if found := _tensors_in(result): Tensor.realize(*found)

def _output_template(result: Any, input_tensors: list) -> tuple[Any, bool]:
    """The return value with returned inputs (and views of inputs) replaced by markers, and whether there are any."""
    from fusegrad.tensor import Tensor
    bases = {t.uop.base: i for i, t in enumerate(input_tensors) if t is not None and t.uop.op is not Ops.MULTI}
    found = False
    def mark(v: Any) -> Any:
        nonlocal found
        if not isinstance(v, Tensor): return v
        for i, t in enumerate(input_tensors):
            if v is t:
                found = True
                return _InputOutput(i)
        if v.uop.op is not Ops.MULTI and (index := bases.get(v.uop.base)) is not None:
            found = True
            return _InputOutput(index, v.uop, v.uop.base)
        return v
    return _map_structure(result, mark), found

def _resolve_outputs(template: Any, input_tensors: list) -> Any:
    from fusegrad.tensor import Tensor
    def resolve(v: Any) -> Any:
        if not isinstance(v, _InputOutput): return v
        current = input_tensors[v.input_index]
        if v.view is None: return current
        return Tensor(v.view.substitute({v.captured_base: current.uop.base}))
    return _map_structure(template, resolve)

@dataclass(frozen=True)
class _PickledTensor:
    """A returned tensor in a pickled capture: which buffer of the table backs it."""
    buffer_index: int
    device: str
    size: int
    dtype: Any
    shape: tuple

# ---------------------------------------------------------------- the capture

@dataclass
class CapturedJit:
    """The recorded kernels of one capture and where the inputs go in them."""
    jit_cache: list[ExecItem]
    input_slots: dict[int, list[tuple[int, int]]]        # input buffer index -> [(item index, buffer index)]
    signatures: list[tuple[str, InputSignature]]
    constants: list[tuple[str, Any]]
    outputs: Any                                          # the return value; returned inputs are _InputOutput markers
    variables: list[UOp] = field(default_factory=list)
    graph: Any = None
    written_storage: set[int] = field(default_factory=set)   # ids of the base buffers the replay writes (inputs aside)
    outputs_have_inputs: bool = False
    shape_guards: list[tuple[Any, Any]] = field(default_factory=list)   # (small, large) sizes: small <= large for every replay
    _replay_totals: tuple[int, int, int] | None = field(default=None, repr=False)   # (kernels, ops, bytes) of one replay
    _last_inputs: list | None = field(default=None, repr=False)   # per input: (weakref to the UOp last checked, its bound values)

    def check_inputs(self, inputs: list[tuple[str, Any]]) -> list[dict[UOp, int]]:
        """Raise JitError unless every input matches its captured signature; returns each input's bound
        Variable values. Both depend only on the input's UOp (interned), so an input that comes back with
        the UOp it had on the last call (the usual case: the same tensor, or a new realized buffer
        seen through the same view) is neither checked nor walked again."""
        if self._last_inputs is None or len(self._last_inputs) != len(inputs): self._last_inputs = [None] * len(inputs)
        bound: list[dict[UOp, int]] = []
        for index, ((name, value), (expected_name, expected)) in enumerate(zip(inputs, self.signatures)):
            if name != expected_name: raise JitError(f"args mismatch in JIT: input {name} is where the capture had {expected_name}")
            uop = value if isinstance(value, UOp) else value.uop
            if (last := self._last_inputs[index]) is not None and last[0]() is uop:
                bound.append(last[1])
                continue
            if (got := _signature(value)) != expected: raise JitError(_describe(name, got, expected))
            bound.append(_bound_values(value))
            self._last_inputs[index] = (weakref.ref(uop), bound[-1])   # weak: it must not keep the input's buffer alive
        return bound

    def replay(self, buffers: list[Buffer | None], var_vals: dict[UOp, int]) -> list[Buffer | None]:
        """Run the kernels with ``buffers`` as the inputs; returns the buffers that served as inputs."""
        # an input that shares storage with a buffer the replay writes (a previous output fed back in)
        # would be read after being overwritten: the replay reads a private copy of it instead
        buffers = [_private_copy(b) if b is not None and id(b.base) in self.written_storage else b for b in buffers]
        for input_index, positions in self.input_slots.items():
            for item_index, buf_index in positions: self.jit_cache[item_index].bufs[buf_index] = buffers[input_index]
        # PROFILE on: a device graph that can't time its kernels (no ``profiles_kernels``) replays kernel by kernel
        if self.graph is not None and (not PROFILE.value or getattr(self.graph, "profiles_kernels", False)):
            self.graph.replay(buffers, var_vals)
            GlobalCounters.kernel_count += len(self.jit_cache)
        elif DEBUG.value >= 2 or PROFILE.value:   # a line / a trace event per kernel
            for item in self.jit_cache: item.run(var_vals)
        else:
            # kernel by kernel (JIT=2); the counters are added up once per call, not per kernel
            for item in self.jit_cache: item.run(var_vals, do_update_stats=False)
            self._count_replay(var_vals)
        return buffers

    def _count_replay(self, var_vals: dict[UOp, int]) -> None:
        """Add a replay's kernels, ops and bytes to GlobalCounters, as running each ExecItem with its stats would."""
        if var_vals or any(item.var_vals for item in self.jit_cache):   # symbolic estimates: worked out per call
            for item in self.jit_cache: _update_stats(item.prg, {**item.var_vals, **var_vals}, None, len(item.bufs))
            return
        if self._replay_totals is None:
            kernels = sum(isinstance(item.prg, CompiledRunner) for item in self.jit_cache)
            ops = sum(int(e) for item in self.jit_cache if isinstance(e := item.prg.op_estimate, int))
            mem = sum(int(e) for item in self.jit_cache if isinstance(e := item.prg.mem_estimate, int))
            self._replay_totals = (kernels, ops, mem)
        kernels, ops, mem = self._replay_totals
        GlobalCounters.kernel_count += kernels
        GlobalCounters.global_ops += ops
        GlobalCounters.global_mem += mem

    # pickling: kernels go as their programs (CompiledRunner pickles its source and binary), buffers
    # as their contents, each shared buffer once; the device graph is rebuilt on load
    def __getstate__(self) -> dict:
        from fusegrad.tensor import Tensor
        table: list[tuple] = []
        index_of: dict[int, int] = {}
        def buffer_index(buf: Buffer) -> int:
            if id(buf) not in index_of:
                if buf._base is not None:
                    entry: tuple = ("view", buffer_index(buf._base), buf.size, buf.dtype, buf.offset)
                else: entry = ("base", buf.device, buf.size, buf.dtype, bytes(buf.as_buffer()) if buf.is_allocated() else None)
                index_of[id(buf)] = len(table)
                table.append(entry)
            return index_of[id(buf)]
        input_positions = {pos for positions in self.input_slots.values() for pos in positions}
        items = [(item.prg, [None if (i, j) in input_positions else buffer_index(b) for j, b in enumerate(item.bufs)], item.var_vals)
                 for i, item in enumerate(self.jit_cache)]
        input_shapes = {k: (self.jit_cache[i].bufs[j].device, self.jit_cache[i].bufs[j].size, self.jit_cache[i].bufs[j].dtype)
                        for k, [(i, j), *_] in self.input_slots.items()}
        def pickle_output(v: Any) -> Any:
            if not isinstance(v, Tensor): return v
            if v.uop.op is Ops.MULTI or v.uop.base.op is not Ops.BUFFER:
                raise JitError("pickling a TinyJit whose outputs are multi-device or not realized buffers is not supported")
            if _view_of(v.uop) is not None: raise JitError("pickling a TinyJit that returns a view of a captured buffer is not supported")
            return _PickledTensor(buffer_index(_buffers_of(v)[0]), v.uop.base.arg[1], v.uop.base.arg[2], v.uop.base.dtype, v.shape)
        outputs = _map_structure(self.outputs, pickle_output)
        written = [index_of[id(b)] for b in {id(b.base): b.base for item in self.jit_cache for b in item.bufs
                                             if b is not None and id(b.base) in self.written_storage}.values()]
        return {"table": table, "items": items, "input_slots": self.input_slots, "input_shapes": input_shapes,
                "signatures": self.signatures, "constants": self.constants, "outputs": outputs, "variables": self.variables,
                "written": written, "outputs_have_inputs": self.outputs_have_inputs, "use_graph": self.graph is not None,
                "shape_guards": self.shape_guards}

    def __setstate__(self, state: dict) -> None:
        from fusegrad.tensor import Tensor
        buffers: list[Buffer] = []
        for entry in state["table"]:
            if entry[0] == "view": buffers.append(Buffer(buffers[entry[1]].device, entry[2], entry[3], base=buffers[entry[1]], offset=entry[4]))
            else:
                _, device, size, dtype, contents = entry
                buffers.append(Buffer(device, size, dtype, initial_value=contents) if contents is not None else Buffer(device, size, dtype))
        # input positions get stand-in buffers until the first replay swaps the real ones in
        stand_ins = {k: Buffer(*shape).allocate() for k, shape in state["input_shapes"].items()}
        self.jit_cache = [ExecItem(prg, [buffers[i] if i is not None else None for i in bufs], var_vals) for prg, bufs, var_vals in state["items"]]
        for k, positions in state["input_slots"].items():
            for i, j in positions: self.jit_cache[i].bufs[j] = stand_ins[k]
        def unpickle_output(v: Any) -> Any:
            if not isinstance(v, _PickledTensor): return v
            uop = new_buffer_uop(v.device, v.size, v.dtype)
            BUFFERS[uop] = buffers[v.buffer_index]
            return Tensor(uop.reshape(v.shape))
        self.input_slots, self.signatures, self.constants = state["input_slots"], state["signatures"], state["constants"]
        self.outputs, self.variables = _map_structure(state["outputs"], unpickle_output), state["variables"]
        self.written_storage = {id(buffers[i].base) for i in state["written"]}
        self._keep_alive = buffers
        self.outputs_have_inputs = state["outputs_have_inputs"]
        self.shape_guards = state.get("shape_guards", [])
        n_inputs = max(self.input_slots, default=-1) + 1
        self.graph = _make_graph(self.jit_cache, [stand_ins.get(k) for k in range(n_inputs)]) if state["use_graph"] else None

# ---------------------------------------------------------------- pruning

def _storages(item: ExecItem) -> set[int]:
    return {id(b.base) for b in item.bufs if b is not None}

def _written_storages(item: ExecItem) -> set[int]:
    return {id(item.bufs[i].base) for i in _written_positions(item)}

def _prune(items: list[ExecItem], input_storages: set[int]) -> list[ExecItem]:
    """The items that depend on the inputs (they touch an input's buffer, or a buffer an earlier such
    item touched). The others already ran during the capture and their results stay valid, unless a
    kept item writes a buffer they use: then they are kept too (their inputs or results change)."""
    forced: set[int] = set()
    while True:
        needed, kept = set(input_storages), []
        for index, item in enumerate(items):
            if index in forced or _storages(item) & needed:
                kept.append(index)
                needed |= _storages(item)
        written_by_kept = set().union(*(_written_storages(items[i]) for i in kept))
        newly_forced = {i for i in range(len(items)) if i not in kept and _storages(items[i]) & written_by_kept}
        if not newly_forced: return [items[i] for i in kept]
        forced |= newly_forced

# ---------------------------------------------------------------- TinyJit

class TinyJit(Generic[ReturnType]):
    """Capture a function's kernels on its second call and replay them afterwards (all rules in the
    module doc). ``TinyJit(fn)``, ``@TinyJit``, ``@TinyJit(prune=True)``.

    Every replay returns the same output tensors, so call n+1 overwrites what call n returned (as in
    tinygrad): ``out.clone()`` keeps a result. Passing an output back in (``h = step(h)``) is safe."""
    def __new__(cls, fxn: Callable[..., ReturnType] | None = None, captured: CapturedJit | None = None, prune: bool = False):
        if fxn is None and captured is None: return functools.partial(cls, prune=prune)   # @TinyJit(prune=True)
        return super().__new__(cls)
    def __init__(self, fxn: Callable[..., ReturnType] | None = None, captured: CapturedJit | None = None, prune: bool = False):
        self.fxn, self.captured, self.prune = fxn, captured, prune
        self.count = 0 if captured is None else 2
        if fxn is not None: functools.update_wrapper(self, fxn)
    def reset(self) -> None:
        """Forget the capture: the next call warms up again."""
        if self.fxn is None: raise JitError("a TinyJit loaded without its function can't be reset")
        self.captured, self.count = None, 0
    @property
    def jit_cache(self) -> list[ExecItem]: return self.captured.jit_cache if self.captured is not None else []
    def __get__(self, obj: Any, objtype: Any = None) -> Callable:
        return functools.partial(self.__call__, obj)   # works as a method decorator
    def __reduce__(self) -> tuple:
        if self.captured is None: raise JitError("can't pickle a TinyJit before it has captured (call it twice first)")
        return TinyJit, (None, self.captured, self.prune)

    def __call__(self, *args: Any, **kwargs: Any) -> ReturnType:
        if not JIT:
            if self.fxn is None: raise JitError("JIT=0, but this TinyJit was loaded without its function")
            return self.fxn(*args, **kwargs)
        if capturing:
            raise RuntimeError("a TinyJit was called while another TinyJit is capturing: nested JITs are not supported; "
                               "call the inner function without TinyJit (inner.fxn) inside the outer one")
        inputs, constants = _collect_inputs(args, kwargs)
        input_buffers = _prepare_tensor_inputs(inputs)
        _check_no_duplicates(inputs, input_buffers)
        if self.count >= 2 and self.captured is not None: return self._replay(inputs, constants, input_buffers)
        assert self.fxn is not None
        if self.count == 0:
            result = self.fxn(*args, **kwargs)
            _realize_outputs(result)
            self.count = 1
            return result
        return self._capture(args, kwargs, inputs, constants)

    def _capture(self, args: tuple, kwargs: dict, inputs: list, constants: list) -> ReturnType:
        from fusegrad.tensor import Tensor
        recorded: list[ExecItem] = []
        guards: list[tuple[Any, Any]] = []
        capturing.append(recorded.append)
        shape_guards.append(guards)
        try:
            result = self.fxn(*args, **kwargs)  # type: ignore[misc]
            _realize_outputs(result)
        finally:
            capturing.remove(recorded.append)
            shape_guards.remove(guards)
        if not recorded:
            raise JitError("the jitted function ran no kernel, so there is nothing to capture: return tensors computed from "
                           "the inputs and realize them (.realize()), or don't wrap this function in TinyJit")
        # one entry per buffer: a multi-device input contributes one per shard
        input_buffers = [b for _, t in inputs for b in (_buffers_of(t) if isinstance(t, Tensor) else [None])]
        input_storages = {id(b.base) for b in input_buffers if b is not None}
        if self.prune:
            before = len(recorded)
            recorded = _prune(recorded, input_storages)
            if DEBUG >= 1: print(f"JIT pruned {before} -> {len(recorded)} kernels")
        input_slots: dict[int, list[tuple[int, int]]] = {}
        slot_of = {id(b): i for i, b in enumerate(input_buffers) if b is not None}
        for item_index, item in enumerate(recorded):
            item.bufs = list(item.bufs)
            for buf_index, buf in enumerate(item.bufs):
                if (input_index := slot_of.get(id(buf))) is not None:
                    input_slots.setdefault(input_index, []).append((item_index, buf_index))
        written_storage = {id(item.bufs[i].base) for item_index, item in enumerate(recorded) for i in _written_positions(item)
                           if item.bufs[i] is not None and id(item.bufs[i]) not in slot_of}
        input_tensors = [t if isinstance(t, Tensor) else None for _, t in inputs]
        outputs, outputs_have_inputs = _output_template(result, input_tensors)
        if DEBUG >= 1: print(f"JIT captured {len(recorded)} kernels with {len(input_buffers)} inputs")
        self.captured = CapturedJit(recorded, input_slots, [(name, _signature(t)) for name, t in inputs], constants, outputs,
                                    list(dict.fromkeys(var for _, v in inputs for var in _bound_values(v))), written_storage=written_storage,
                                    outputs_have_inputs=outputs_have_inputs, shape_guards=list(dict.fromkeys(guards)))
        # JIT=2: replay kernel by kernel, without the device graph
        self.captured.graph = _make_graph(recorded, input_buffers) if JIT < 2 else None
        self.count = 2
        return result

    def _replay(self, inputs: list, constants: list, input_buffers: list[list[Buffer] | None]) -> ReturnType:
        from fusegrad.tensor import Tensor
        captured = self.captured
        assert captured is not None
        if len(inputs) != len(captured.signatures):
            raise JitError(f"args mismatch in JIT: expected {len(captured.signatures)} tensor/variable inputs, got {len(inputs)}")
        bound = captured.check_inputs(inputs)
        if len(constants) != len(captured.constants) or any(n1 != n2 for (n1, _), (n2, _) in zip(constants, captured.constants)):
            raise JitError("args mismatch in JIT: the structure of the non-Tensor arguments (lists, tuples, dict keys) "
                           "changed since the capture")
        if (changed := [n for (n, v1), (_, v2) in zip(constants, captured.constants) if not _same_constant(v1, v2)]):
            # tinygrad's rule: the capture replays with the values it baked in. Kept for fidelity, but said out loud
            warnings.warn(f"TinyJit: non-Tensor argument(s) {changed} changed since the capture; the replay uses the "
                          f"captured value(s). Pass a Tensor or a bound Variable for values that change", JitWarning, stacklevel=3)
        buffers: list[Buffer | None] = []
        first_buffer: list[int] = []     # input index -> index of its (first) buffer
        for bufs in input_buffers:
            first_buffer.append(len(buffers))
            if bufs is None: buffers.append(None)
            else: buffers.extend(bufs)
        var_vals = {var: val for values in bound for var, val in values.items()} if any(bound) else {}
        if var_vals and captured.shape_guards: _check_shape_guards(captured.shape_guards, var_vals)
        used = captured.replay(buffers, var_vals)
        if var_vals: _rebind_outputs(captured.outputs, var_vals)
        if not captured.outputs_have_inputs: return captured.outputs
        # a returned input whose buffer was copied (it is a previous output, which this call overwrote)
        # is returned as the copy: it holds the input's value, as the tensor passed in did before the call
        returned_inputs = []
        for (_, t), index in zip(inputs, first_buffer):
            if isinstance(t, Tensor) and used[index] is not buffers[index]: t = _tensor_over(used[index], t)
            returned_inputs.append(t if isinstance(t, Tensor) else None)
        return _resolve_outputs(captured.outputs, returned_inputs)

def _check_shape_guards(guards: list[tuple[Any, Any]], var_vals: dict[UOp, int]) -> None:
    """Raise ValueError, before any kernel runs, when this replay's variable values break a size condition the
    capture's shrinks relied on (their kernels would read past the end of a buffer)."""
    for small, large in guards:
        if (a := sym_infer(small, var_vals)) > (b := sym_infer(large, var_vals)):
            names = ", ".join(f"{v.arg[0]}={value}" for v, value in var_vals.items())
            raise ValueError(f"TinyJit: with {names}, a shrink the capture made is out of range: {_expr(small, a)} > {_expr(large, b)}")

def _expr(size: Any, value: int) -> str: return f"{render_expr(size)} (= {value})" if isinstance(size, UOp) else str(value)

def _rebind_outputs(outputs: Any, var_vals: dict[UOp, int]) -> None:
    """Returned tensors whose shape has a bound Variable get this call's value of it, so they read
    back exactly the elements this replay computed."""
    from fusegrad.tensor import Tensor
    def update(v: Any) -> Any:
        if isinstance(v, Tensor): v.uop = _rebind(v.uop, var_vals)
        return v
    _map_structure(outputs, update)

def _make_graph(items: list[ExecItem], input_buffers: list) -> Any:
    """A device graph that runs all captured kernels in one native call, when the device has one."""
    devices = {item.prg.device for item in items}
    if len(devices) != 1 or not items or not all(isinstance(item.prg, CompiledRunner) for item in items): return None
    graph_class = getattr(Device[devices.pop()], "graph", None)
    if graph_class is None: return None
    try: return graph_class(items, input_buffers)
    except NotImplementedError: return None
