"""``Tensor.__getitem__`` and ``__setitem__`` with numpy semantics.

Basic indices (ints, slices with steps, None, Ellipsis) become movement ops: views, no copies.
A step is a shrink, a pad up to a multiple of the step, a reshape to (n, step), and taking
column 0. Tensor/list indices (advanced indexing) compare the index with an arange to build a
one-hot mask per indexed dim and sum it away, all lazily and fused.
"""
from __future__ import annotations
import math, numbers
from typing import Any, TYPE_CHECKING
from fusegrad.dtype import dtypes
from fusegrad.helpers import prod
from fusegrad.uop.ops import UOp, Ops, GroupOp, resolve, sint_to_uop
if TYPE_CHECKING: from fusegrad.tensor import Tensor

def _normalize(indices: Any) -> list:
    if not isinstance(indices, tuple): indices = (indices,)
    return [_numpy_int(i) for i in indices]

def _numpy_int(index: Any) -> Any:
    """A numpy integer (``np.int64(2)``, a 0-d int array) is the Python int it holds: a plain index, bounds-checked
    like one (as a 0-d tensor index, an out-of-range value read 0 and wrote nothing)."""
    if type(index).__module__ == "numpy" and isinstance(index, numbers.Integral): return int(index)
    if type(index).__module__ == "numpy" and getattr(index, "ndim", None) == 0 and index.dtype.kind in "iu": return int(index)
    return index

def _is_advanced(index: Any) -> bool:
    from fusegrad.tensor import Tensor
    return isinstance(index, (Tensor, list, tuple)) or (type(index).__module__ == "numpy" and hasattr(index, "shape"))

def _symbolic_slice(x: "Tensor", dim: int, index: slice) -> "Tensor | None":
    """A slice of a dim whose size or bounds are symbolic (tinygrad's rules), or None when it is an
    ordinary int slice of an int size. Negative int bounds count from the (symbolic) end; a slice
    whose bounds all end up ints is clamped against the size's maximum; otherwise the step must be 1."""
    size = x.shape[dim]
    if isinstance(size, int) and not any(isinstance(b, UOp) for b in (index.start, index.stop, index.step)): return None
    if index == slice(None): return x
    for bound in (index.start, index.stop, index.step):
        if not (bound is None or isinstance(bound, (int, UOp))) or isinstance(bound, bool):
            raise TypeError(f"slice {index} is not supported: bounds must be ints, bound Variables or None")
    start = 0 if index.start is None else index.start
    stop = size if index.stop is None else index.stop
    step = 1 if index.step is None else index.step
    if isinstance(start, int) and start < 0: start = start + size
    if isinstance(stop, int) and stop < 0: stop = stop + size
    if all(isinstance(b, int) for b in (start, stop, step)):
        if step < 0: raise IndexError(f"a negative step can't slice dimension {dim} of symbolic size {size.render()}")
        # every bound is an int: clamp against the largest size the dim can have (tinygrad does the same)
        return _slice_dim(x, dim, slice(start, stop, step), int(size.vmax))
    if not (isinstance(step, int) and step == 1):
        raise TypeError(f"slice {index} is not supported: a slice with symbolic bounds needs step 1")
    if not resolve(sint_to_uop(stop - start) >= 0, False):
        raise TypeError(f"slice {index} is not supported: its length {_render_sint(stop - start)} may be negative")
    return x.shrink(tuple((start, stop) if i == dim else None for i in range(x.ndim)))

def _render_sint(x: Any) -> str: return x.render() if isinstance(x, UOp) else str(x)

def _slice_dim(x: "Tensor", dim: int, index: slice, size: int | None = None) -> "Tensor":
    """``x`` sliced along ``dim``. ``size`` overrides the dim's size for the bounds (a symbolic dim's maximum)."""
    if size is None and (sliced := _symbolic_slice(x, dim, index)) is not None: return sliced
    size = x.shape[dim] if size is None else size
    start, stop, step = index.indices(size)
    if step > 0:
        count = max(0, math.ceil((stop - start) / step))
        x = x.shrink(tuple((start, start + max(0, min(size - start, count * step))) if i == dim else None
                           for i in range(x.ndim)))
    else:
        count = max(0, math.ceil((start - stop) / -step))
        # after flipping, index i of the flipped dim is size-1-i of the original
        flipped_start = size - 1 - start
        x = x.flip(dim).shrink(tuple((flipped_start, flipped_start + max(0, min(size - flipped_start, count * -step))) if i == dim else None
                                     for i in range(x.ndim))) if count else \
            x.shrink(tuple((0, 0) if i == dim else None for i in range(x.ndim)))
        step = -step
    if step == 1 or count <= 1 or x.shape[dim] == 0:
        return x.shrink(tuple((0, count) if i == dim else None for i in range(x.ndim)))
    # take every step-th element: pad to count*step, split the dim into (count, step), keep column 0
    padded = x.pad(tuple((0, count * step - x.shape[dim]) if i == dim else None for i in range(x.ndim)))
    split = padded.reshape(x.shape[:dim] + (count, step) + x.shape[dim + 1:])
    return split.shrink(tuple((0, 1) if i == dim + 1 else None for i in range(split.ndim))).reshape(x.shape[:dim] + (count,) + x.shape[dim + 1:])

def _symbolic_index(x: "Tensor", dim: int, index: "UOp | int") -> "Tensor":
    """``x[..., v, ...]`` for a bound Variable (or an expression of them) ``v``, or an int index of a
    symbolic dim: a shrink to [v, v+1) along ``dim`` that drops the dim. Out of bounds only when that
    is certain from the bounds (tinygrad's rule); a negative index counts from the end."""
    if isinstance(index, UOp) and index.dtype not in (dtypes.index, dtypes.weakint) and not dtypes.is_int(index.dtype):
        raise IndexError(f"a symbolic index must be an integer, got {index.dtype}")
    size, index_uop = x.shape[dim], sint_to_uop(index)
    if resolve(index_uop >= size, False) or resolve(index_uop < -sint_to_uop(size), False):
        raise IndexError(f"index {_render_sint(index)} is out of bounds for dimension {dim} with size {_render_sint(size)}")
    start = index if resolve(index_uop >= 0, False) else index + size
    x = x.shrink(tuple((start, start + 1) if i == dim else None for i in range(x.ndim)))
    return x.reshape(x.shape[:dim] + x.shape[dim + 1:])

def _basic_view(x: "Tensor", items: list) -> "Tensor | None":
    """``x[items]`` for the everyday index, ints, None and step-1 slices with int bounds of a tensor with int sizes
    (one item per dim, Ellipsis expanded), as one shrink and one reshape; None for any other index. (Slicing dim
    by dim built a shrink and a tensor per dim: a KV-cache read ``cache[0, :, :n]`` took 72 us.)"""
    bounds: list[tuple[int, int]] = []
    shape: list[int] = []
    sizes = iter(x.shape)
    for item in items:
        kind = type(item)
        if item is None:
            shape.append(1)
            continue
        size = next(sizes)
        if type(size) is not int: return None
        if kind is int:
            if not -size <= item < size: return None   # (the general path names the dim in its IndexError)
            item = item + size if item < 0 else item
            bounds.append((item, item + 1))
        elif kind is slice:
            if item.step not in (None, 1) or not all(b is None or type(b) is int for b in (item.start, item.stop)): return None
            start, stop, _ = item.indices(size)
            bounds.append((start, max(start, stop)))
            shape.append(bounds[-1][1] - start)
        else: return None
    view = x.shrink(tuple(bounds))
    return view if view.shape == tuple(shape) else view.reshape(tuple(shape))

def getitem(x: "Tensor", indices: Any) -> "Tensor":
    from fusegrad.tensor import Tensor
    items = _normalize(indices)
    for item in items:
        if isinstance(item, float) or isinstance(item, str) or (item is not None and not isinstance(item, (int, slice, type(Ellipsis), UOp)) and not _is_advanced(item)):
            raise IndexError(f"invalid index type {type(item).__name__}: only ints, bound Variables, slices, None, Ellipsis and int/bool tensors are valid")
    if sum(1 for i in items if i is Ellipsis) > 1: raise IndexError("an index can only have a single ellipsis ('...')")
    consumed = sum(1 if not (i is None or i is Ellipsis) else 0 for i in items)
    for i in items:
        if _is_advanced(i) and isinstance(i, Tensor) and i.dtype == dtypes.bool: consumed += i.ndim - 1
    if consumed > x.ndim: raise IndexError(f"too many indices for a tensor of {x.ndim} dimensions: {indices}")
    if Ellipsis in [i for i in items if not _is_advanced(i)]:
        at = next(k for k, i in enumerate(items) if i is Ellipsis and not _is_advanced(i))
        items = items[:at] + [slice(None)] * (x.ndim - consumed) + items[at + 1:]
    else:
        items = items + [slice(None)] * (x.ndim - consumed)
    if (view := _basic_view(x, items)) is not None: return view
    # first pass: basic indexing; remember where advanced indices sit in the result
    result, dim, new_shape_ops, advanced = x, 0, [], []
    for k, item in enumerate(items):
        if item is None:
            result = result.unsqueeze(dim)
            dim += 1
        elif isinstance(item, bool):
            raise IndexError("boolean scalar indices are not supported")
        elif isinstance(item, int):
            size = result.shape[dim]
            if isinstance(size, int):
                if not -size <= item < size:   # name the dimension of x (``dim`` counts the result's dims)
                    raise IndexError(f"index {item} is out of bounds for dimension {k - sum(1 for j in items[:k] if j is None)} with size {size}")
                item = item + size if item < 0 else item
            else:   # a symbolic size: a negative index counts from its (symbolic) end
                result = _symbolic_index(result, dim, item)
                continue
            result = result.shrink(tuple((item, item + 1) if i == dim else None for i in range(result.ndim)))
            result = result.reshape(result.shape[:dim] + result.shape[dim + 1:])
        elif isinstance(item, UOp):
            result = _symbolic_index(result, dim, item)
        elif isinstance(item, slice):
            if item.step == 0: raise ValueError("slice step cannot be zero")
            result = _slice_dim(result, dim, item)
            dim += 1
        else:
            index = item if isinstance(item, Tensor) else Tensor(item, device=x.device)
            if index.dtype == dtypes.bool:
                raise IndexError("boolean mask indexing has a data-dependent shape; use masked_select or where instead")
            if not dtypes.is_int(index.dtype): raise IndexError(f"tensors used as indices must be int or bool, got {index.dtype}")
            # out of range would read 0: numpy's and PyTorch's IndexError where the values are known (dim: x's)
            check_index_bounds(item, result.shape[dim], k - sum(1 for j in items[:k] if j is None), negative=True)
            advanced.append((dim, index))
            dim += 1
    if not advanced: return result
    return _advanced(result, advanced)

def _advanced(x: "Tensor", advanced: list) -> "Tensor":
    """Gather with int tensor indices at dims ``advanced`` [(dim, index)], numpy rules: the
    broadcast index shape replaces the indexed dims (in place if they are adjacent, else first)."""
    from fusegrad.tensor import Tensor, _broadcast_shape
    dims = [d for d, _ in advanced]
    try: index_shape = _broadcast_shape(*[i.shape for _, i in advanced])
    except IndexError: raise IndexError(f"cannot broadcast indices: {[tuple(i.shape) for _, i in advanced]}") from None
    # bring the indexed dims to the front
    rest = [d for d in range(x.ndim) if d not in dims]
    moved = x.permute(dims + rest)
    rest_shape = tuple(x.shape[d] for d in rest)
    # one-hot mask per indexed dim: shape index_shape + (size_d,)
    selected = moved.reshape((1,) * len(index_shape) + moved.shape)
    for k, (d, index) in enumerate(advanced):
        size = x.shape[d]
        idx = index._broadcast_to(index_shape)
        idx = (idx < 0).where(idx + size, idx)
        onehot = idx.unsqueeze(-1) == Tensor.arange(size, device=x.device).reshape((1,) * len(index_shape) + (size,))
        shape = index_shape + tuple(size if j == k else 1 for j in range(len(advanced))) + (1,) * len(rest)
        onehot = onehot.reshape(index_shape + (1,) * k + (size,) + (1,) * (len(advanced) - k - 1) + (1,) * len(rest))
        selected = onehot.where(selected, 0)
    reduced = selected.sum(tuple(range(len(index_shape), len(index_shape) + len(advanced))), dtype=x.dtype) if x.dtype != dtypes.bool \
        else selected.any(tuple(range(len(index_shape), len(index_shape) + len(advanced))))
    # numpy: adjacent advanced dims stay in place, otherwise they go first
    adjacent = dims == list(range(dims[0], dims[0] + len(dims)))
    if adjacent and dims[0] > 0:
        n = len(index_shape)
        order = list(range(n, n + dims[0])) + list(range(n)) + list(range(n + dims[0], n + len(rest)))
        reduced = reduced.permute(order)
    return reduced

# ---------------------------------------------------------------- writes: assign and setitem
#
# The mutation model (docs/decisions.md, "Mutation"): a tensor that views a buffer (through
# movement ops or detach()) writes into that buffer. The write is the node
# ``ASSIGN(identity, value, arg=chain)``: ``identity`` is what holds the buffer's current contents
# (the BUFFER, or a pending ASSIGN to it), ``chain`` the movement ops from it to the written view,
# and the node itself is the whole buffer after the write. Every live tensor that reads
# ``identity`` is pointed at the new node, so views and later reads see the write (tinygrad's rule:
# a lazy read is resolved when it is realized).

def _is_storage(u: UOp) -> bool:
    """Does ``u`` stand for a buffer's whole contents: the BUFFER, a pending ASSIGN into it, or a
    sharded tensor whose shards are buffers?"""
    if u.op in (Ops.BUFFER, Ops.ASSIGN): return True
    return u.op is Ops.MULTI and all(s.op in (Ops.BUFFER, Ops.ASSIGN) or (s.op is Ops.RESHAPE and s.src[0].op in (Ops.BUFFER, Ops.ASSIGN))
                                     for s in u.src)

def view_chain(u: UOp, stop: UOp | None = None) -> tuple[UOp, tuple]:
    """Walk from view ``u`` down through movement ops and DETACH to the storage node under it (or to
    ``stop``). Returns (that node, the movement ops from it back up to ``u`` as (op, arg) pairs)."""
    chain = []
    while u is not stop and not _is_storage(u) and (u.op in GroupOp.Movement or u.op is Ops.DETACH):
        if u.op is not Ops.DETACH: chain.append((u.op, u.arg))
        u = u.src[0]
    return u, tuple(reversed(chain))

def apply_chain(u: UOp, chain: tuple) -> UOp:
    """The view of ``u`` that ``chain`` (from view_chain) describes."""
    for op, arg in chain: u = UOp(op, u.dtype, (u,), arg)
    return u

def merge_through(base: "Tensor", chain: tuple, value: "Tensor") -> "Tensor":
    """``base`` with the region that ``chain`` views replaced by ``value`` (a functional write:
    the inverse of each movement op, and a mask of the written positions)."""
    from fusegrad.tensor import Tensor
    shapes = [base.shape]
    for op, arg in chain: shapes.append(apply_chain(UOp.const(base.dtype, 0, None, shapes[-1]), ((op, arg),)).shape)
    written = Tensor.full(value.shape, True, dtype=dtypes.bool, device=base.device, requires_grad=False)
    for (op, arg), before in zip(reversed(chain), reversed(shapes[:-1])):
        if op is Ops.EXPAND: raise RuntimeError("can't write through an expand: several positions would share one element")
        if op is Ops.RESHAPE: value, written = value.reshape(before), written.reshape(before)
        elif op is Ops.PERMUTE:
            inverse = tuple(sorted(range(len(arg)), key=arg.__getitem__))
            value, written = value.permute(inverse), written.permute(inverse)
        elif op is Ops.FLIP:
            axes = [i for i, f in enumerate(arg) if f]
            value, written = value.flip(axes), written.flip(axes)
        elif op is Ops.SHRINK:
            pads = tuple((b, s - e) for (b, e), s in zip(arg, before))
            value, written = value.pad(pads), written.pad(pads)
        elif op is Ops.PAD:
            bounds = tuple((b, b + s) for (b, _), s in zip(arg, before))
            value, written = value.shrink(bounds), written.shrink(bounds)
    return written.where(value, base)

def _replace_everywhere(old: UOp, new: UOp) -> None:
    """Point every live tensor that reads ``old`` at ``new``. One walk over all their graphs together finds the
    readers (a toposort per tensor re-walked the subgraphs tensors share: a GPT-2 prefill's 12 cache writes spent
    10 ms in it)."""
    from fusegrad.tensor import _live_tensors
    # (a view of another buffer, every realized weight say, can't read ``old``: only the lazy graphs are walked)
    movement, buffer_op = GroupOp.Movement, Ops.BUFFER
    lazy = []
    for t in _live_tensors():
        base = t.uop
        while base.op in movement: base = base.src[0]
        if base.op is not buffer_op or base is old: lazy.append(t)
    for t, uop in zip(lazy, UOp.substitute_many([t.uop for t in lazy], {old: new})): t.uop = uop

def _checked_value(target: "Tensor", x: Any) -> "Tensor":
    """The value of ``target.assign(x)`` as a tensor of the target's shape, dtype and device; raises
    before any work on a shape, dtype or device mismatch (tinygrad's rules: broadcasting is allowed,
    Python values take the target's dtype, a tensor of another dtype is an error)."""
    from fusegrad.tensor import Tensor
    from fusegrad.dtype import least_upper_dtype
    if not isinstance(x, Tensor):
        if isinstance(target.device, tuple): return Tensor(x, device=target.device[0], dtype=target.dtype).to(target.device)._broadcast_to(target.shape) \
            if _broadcastable(_np_shape(x), target.shape) else _shape_error(target, _np_shape(x))
        x = Tensor(x, device=target.device, dtype=target.dtype)
    if not _broadcastable(x.shape, target.shape): _shape_error(target, x.shape)
    if dtypes.is_weak(x.dtype): x = x.cast(least_upper_dtype(target.dtype, x.dtype))
    if x.dtype != target.dtype:
        raise RuntimeError(f"assign dtype mismatch: target is {target.dtype}, value is {x.dtype}; cast the value first")
    if x.device != target.device:
        raise RuntimeError(f"assign device mismatch: target is on {target.device}, value on {x.device}")
    return x._broadcast_to(target.shape)

def _np_shape(x: Any) -> tuple:
    import numpy as np
    return np.shape(x)

def _broadcastable(have: tuple, want: tuple) -> bool:
    if len(have) > len(want): return False
    return all(h == w or (isinstance(h, int) and h == 1) for h, w in zip(have, want[len(want) - len(have):]))

def _shape_error(target: "Tensor", shape: tuple):
    raise ValueError(f"assign shape mismatch: can't broadcast a value of shape {tuple(shape)} to the target's shape {target.shape}")

def assign(target: "Tensor", x: Any) -> "Tensor":
    """``target.assign(x)``: write ``x`` into the buffer ``target`` views (see the note above)."""
    from fusegrad.tensor import Tensor
    value = _checked_value(target, x)
    if target.uop is value.uop or 0 in target.shape: return target   # (an empty view: nothing to write)
    u = target.uop
    if _is_storage(u) or (u.op is Ops.RESHAPE and _is_storage(u.src[0])):
        # the tensor is the whole buffer: only it changes (other lazy reads of the buffer see it
        # when they are realized after this write)
        if u.op is Ops.MULTI and not all(s.op in (Ops.BUFFER, Ops.ASSIGN) or s.base.op is Ops.BUFFER for s in u.src):
            target.uop = target.detach().contiguous().realize().uop
        target.uop = UOp(Ops.ASSIGN, target.dtype, (target.uop, value.uop))
        return target
    storage, chain = view_chain(u)
    if not _is_storage(storage):
        if (not chain and u.op is not Ops.DETACH) or storage.op is Ops.CONST or any(op is Ops.EXPAND for op, _ in chain):
            # a computed tensor (a broadcast constant too): it gets its own buffer first (its old
            # graph is kept for no gradient)
            target.uop = target.detach().contiguous().realize().uop
            target.uop = UOp(Ops.ASSIGN, target.dtype, (target.uop, value.uop))
            return target
        # a view of a computed tensor: compute that tensor into a buffer, then write the view
        stored = Tensor(storage, requires_grad=False).contiguous().realize().uop
        _replace_everywhere(storage, stored)
        storage, chain = view_chain(apply_chain(stored, chain))
    if isinstance(storage.device, tuple) and chain:
        from fusegrad.schedule.multi import view_pieces, multi_axis
        if any(op is Ops.EXPAND for op, _ in chain):
            raise RuntimeError("can't assign to an expanded view: several positions share one element")
        if view_pieces(storage.shape, multi_axis(storage), len(storage.device), chain) is None:
            # a view that mixes the split axis with others (a reshape across it): write the whole
            # tensor with the view's region replaced
            merged = merge_through(Tensor(storage, requires_grad=False), chain, value)
            _replace_everywhere(storage, UOp(Ops.ASSIGN, storage.dtype, (storage, merged.uop)))
            return target
        # each shard writes only the part of the view it holds (schedule/multi.py, view_pieces)
        _replace_everywhere(storage, UOp(Ops.ASSIGN, storage.dtype, (storage, value.uop), chain))
        return target
    if not chain:   # detach() of the whole buffer
        _replace_everywhere(storage, UOp(Ops.ASSIGN, storage.dtype, (storage, value.uop.reshape(storage.shape))))
        return target
    if any(op is Ops.EXPAND for op, _ in chain):
        raise RuntimeError("can't assign to an expanded view: several positions share one element")
    _replace_everywhere(storage, UOp(Ops.ASSIGN, storage.dtype, (storage, value.uop), chain))
    return target

def _has_other_uses(x: "Tensor", value: Any) -> bool:
    """Does a live tensor other than ``x`` (and the value being written) read ``x``'s lazy graph?
    Views of the same realized buffer (``detach()`` too) don't count: they see the write, as they should."""
    from fusegrad.tensor import Tensor, all_tensors
    if not any(n.op is Ops.BUFFER for n in x.uop.toposort): return False
    value_graph = value.uop.toposort if isinstance(value, Tensor) else ()
    shared = x.uop.base if x._is_realized() else None
    for t in list(all_tensors):
        if t is x or (isinstance(value, Tensor) and t.uop is value.uop) or t.uop in value_graph: continue
        # a view of the buffer (movement ops or detach()) sees the write, as it should
        if x.uop in t.uop.toposort and view_chain(t.uop)[0].base is not shared: return True
    return False

def _is_bool_mask(index: Any) -> bool:
    from fusegrad.tensor import Tensor
    if isinstance(index, Tensor): return index.dtype == dtypes.bool
    if type(index).__module__ == "numpy" and hasattr(index, "dtype"): return index.dtype == bool
    if isinstance(index, (list, tuple)):
        flat = list(_flat(index))
        return bool(flat) and all(isinstance(i, bool) for i in flat)
    return False

def _flat(x: Any):
    if isinstance(x, (list, tuple)):
        for i in x: yield from _flat(i)
    else: yield x

def setitem(x: "Tensor", indices: Any, value: Any) -> None:
    """``x[indices] = value`` with numpy semantics for every index kind. A realized tensor is
    written in place (one kernel over the indexed region); an unrealized float tensor gets the
    written value functionally, so gradients flow to both its old value and ``value``."""
    from fusegrad.tensor import Tensor
    from fusegrad.dtype import least_upper_dtype
    if dtypes.is_weak(x.dtype): raise RuntimeError("can't setitem into a tensor of a weak dtype (a Python literal): it has no storage")
    if isinstance(value, Tensor):
        if dtypes.is_weak(value.dtype): value = value.cast(least_upper_dtype(x.dtype, value.dtype))
        if value.dtype != x.dtype: raise RuntimeError(f"setitem dtype mismatch: the tensor is {x.dtype}, the value {value.dtype}; cast the value first")
    if _has_other_uses(x, value):
        raise RuntimeError("can't setitem on a tensor with other lazy uses: they would see the write or not depending on "
                           "when they are realized; realize them first, or use where()")
    items = _normalize(indices)
    is_disk = isinstance(x.device, str) and x.device.startswith("DISK:")
    masks = [i for i in items if _is_bool_mask(i)]
    advanced = [i for i in items if _is_advanced(i) and not _is_bool_mask(i)]
    if is_disk and (masks or advanced): raise RuntimeError("advanced (tensor, list or mask) setitem is not supported for DISK tensors")
    if not isinstance(value, Tensor):
        device = x.device[0] if isinstance(x.device, tuple) else x.device
        value = Tensor(value, device="CPU" if is_disk else device, dtype=x.dtype)
        if isinstance(x.device, tuple): value = value.to(x.device)
    storage, _ = view_chain(x.uop)
    realized = is_disk or _is_storage(storage)
    if masks: new_value, view = _masked_region(x, items, value)
    elif advanced: new_value, view = _scattered_region(x, items, value)
    else: view, new_value = getitem(x, indices), value
    if (not realized and dtypes.is_float(x.dtype)) or not (realized or masks or advanced):
        # nothing to write into yet: x becomes the written value (a graph, with gradients)
        _, chain = view_chain(view.uop, stop=x.uop)
        x.replace(merge_through(x, chain, new_value._broadcast_to(view.shape)))
        return
    if not is_disk: new_value = _checked_value(view, new_value)   # (a shape, dtype or device error before anything is written)
    _, chain = view_chain(view.uop, stop=x.uop)
    if view is not x and all(op is Ops.RESHAPE for op, _ in chain):
        # the view is all of x reshaped (``t[0]`` of a one-element dim, ``t[None]``): the write is x's
        x.assign(new_value.reshape(x.shape))
        return
    view.assign(new_value)

def _masked_region(x: "Tensor", items: list, value: "Tensor") -> tuple["Tensor", "Tensor"]:
    """``x[mask] = value``: the view the mask indexes (the dims it covers) and its new contents."""
    from fusegrad.tensor import Tensor
    if len(items) != 1 and not (len(items) == 2 and items[1] is Ellipsis):
        raise IndexError("a boolean mask index must be the only index (optionally followed by ...)")
    mask = items[0] if isinstance(items[0], Tensor) else Tensor(items[0], device=x.device, dtype=dtypes.bool)
    if mask.shape != x.shape[:mask.ndim]:
        raise IndexError(f"boolean mask of shape {mask.shape} doesn't match the indexed dims {x.shape[:mask.ndim]}")
    rest = x.shape[mask.ndim:]
    if value.ndim > len(rest) and value.shape[0] != 1:
        # one row per True element, in order (numpy): gather row k for the k-th True position
        count = int(mask.sum().item())
        if value.shape[0] != count or not _broadcastable(value.shape[1:], rest):
            raise ValueError(f"can't assign a value of shape {value.shape} to {count} masked elements of shape {rest}")
        position = (mask.flatten().cast(dtypes.int32).cumsum() - 1).maximum(0)
        value = value._broadcast_to((count,) + rest)[position].reshape(mask.shape + rest)
    elif not _broadcastable(value.shape, (1,) + rest if value.ndim > len(rest) else rest):
        raise ValueError(f"can't assign a value of shape {value.shape} to masked elements of shape {rest}")
    else: value = value.reshape(value.shape[1:] if value.ndim > len(rest) else value.shape)._broadcast_to(rest)
    m = mask.reshape(mask.shape + (1,) * len(rest))
    return m.where(value, x), x

def _scattered_region(x: "Tensor", items: list, value: "Tensor") -> tuple["Tensor", "Tensor"]:
    """``x[..tensor indices..] = value``: numpy's scatter. Basic indices give a view; within it the
    advanced dims get ``value`` at the indexed positions (the last write wins for duplicates)."""
    from fusegrad.tensor import Tensor, _broadcast_shape
    basic = [slice(None) if _is_advanced(i) else i for i in items]
    view = getitem(x, tuple(basic))
    # where each advanced index landed in the view: count the view dims made by earlier items
    dims, index_tensors, at, seen_ellipsis = [], [], 0, False
    explicit = sum(1 for i in items if i is not None and i is not Ellipsis)
    x_dim = 0   # the dim of x an item indexes (for the error message)
    for item in items:
        if item is Ellipsis: at, x_dim = at + x.ndim - explicit, x_dim + x.ndim - explicit
        elif item is None: at += 1
        elif isinstance(item, slice): at, x_dim = at + 1, x_dim + 1
        elif isinstance(item, int): x_dim += 1
        else:
            index = item if isinstance(item, Tensor) else Tensor(list(item) if isinstance(item, tuple) else item, device=view.device)
            if not dtypes.is_int(index.dtype): raise IndexError(f"tensors used as indices must be int, got {index.dtype}")
            # out of range would write nothing: numpy's and PyTorch's IndexError where the values are known
            check_index_bounds(item, view.shape[at], x_dim, negative=True)
            x_dim += 1
            dims.append(at)
            index_tensors.append(index)
            at += 1
    try: index_shape = _broadcast_shape(*[i.shape for i in index_tensors])
    except IndexError: raise IndexError(f"cannot broadcast indices: {[tuple(i.shape) for i in index_tensors]}") from None
    rest = [d for d in range(view.ndim) if d not in dims]
    adjacent = dims == list(range(dims[0], dims[0] + len(dims)))
    lead = dims[0] if adjacent else 0
    result_shape = tuple(view.shape[d] for d in rest[:lead]) + index_shape + tuple(view.shape[d] for d in rest[lead:])
    if not _broadcastable(value.shape, result_shape):
        raise ValueError(f"can't assign a value of shape {value.shape} to indexed elements of shape {result_shape}")
    value = value._broadcast_to(result_shape)
    # value as (index positions N, rest dims...)
    n_index = len(index_shape)
    value = value.permute(list(range(lead, lead + n_index)) + list(range(lead)) + list(range(lead + n_index, len(result_shape))))
    count = prod(index_shape)
    value = value.reshape((count,) + tuple(view.shape[d] for d in rest))
    sizes = [view.shape[d] for d in dims]
    # match[k, p_1..p_m]: index position k points at (p_1..p_m)
    match = None
    for j, (index, size) in enumerate(zip(index_tensors, sizes)):
        flat = index._broadcast_to(index_shape).reshape(count)
        flat = (flat < 0).where(flat + size, flat)
        hit = flat.reshape((count,) + (1,) * len(sizes)) == \
            Tensor.arange(size, device=view.device).cast(flat.dtype).reshape((1,) + tuple(size if k == j else 1 for k in range(len(sizes))))
        match = hit if match is None else match & hit
    order = Tensor.arange(count, device=view.device).reshape((count,) + (1,) * len(sizes))
    last = match.where(order, -1).max(0)                       # the last index position writing each element
    chosen = (order == last.unsqueeze(0)) & match
    pad_rest = (1,) * len(rest)
    gathered = chosen.reshape(chosen.shape + pad_rest).where(value.reshape((count,) + (1,) * len(sizes) + value.shape[1:]),
                                                             Tensor(0, dtype=view.dtype, device=view.device)).sum(0, dtype=view.dtype) \
        if view.dtype != dtypes.bool else chosen.reshape(chosen.shape + pad_rest).where(
            value.reshape((count,) + (1,) * len(sizes) + value.shape[1:]), False).any(0)
    written = (last >= 0).reshape(tuple(sizes) + pad_rest)
    current = view.permute(dims + rest)
    new = written.where(gathered, current)
    inverse = tuple(sorted(range(view.ndim), key=(dims + rest).__getitem__))
    return new.permute(inverse), view

# ---------------------------------------------------------------- bitcast between item sizes

def bitcast_item_size(x: "Tensor", dtype) -> "Tensor":
    """Reinterpret ``x``'s bytes as ``dtype`` of another item size (little-endian, like the memory):
    the last dimension grows or shrinks by the size ratio. Built from shifts on unsigned ints, so
    it runs as a fused kernel on any device."""
    from fusegrad.tensor import Tensor
    unsigned = {1: dtypes.uint8, 2: dtypes.uint16, 4: dtypes.uint32, 8: dtypes.uint64}
    old, new = dtypes.concrete(x.dtype).itemsize, dtype.itemsize
    bits = x.bitcast(unsigned[old]) if x.dtype != dtypes.bool else x.cast(dtypes.uint8)
    if old > new:   # split each element into ratio smaller ones, lowest bytes first
        ratio = old // new
        shifts = Tensor([8 * new * i for i in range(ratio)], dtype=unsigned[old], device=x.device)
        parts = (bits.unsqueeze(-1) >> shifts) & ((1 << (8 * new)) - 1)
        result = parts.cast(unsigned[new]).flatten(-2)
    else:           # join ratio consecutive elements into one, the first in the lowest bytes
        ratio = new // old
        shifts = Tensor([8 * old * i for i in range(ratio)], dtype=unsigned[new], device=x.device)
        groups = bits.cast(unsigned[new]).unflatten(-1, (x.shape[-1] // ratio, ratio))
        result = (groups << shifts).sum(-1, dtype=unsigned[new])   # the parts' bits don't overlap: a sum is an or
    return result.bitcast(dtype) if dtype != unsigned[new] else result

# ---------------------------------------------------------------- bounds of index values known on the host
#
# Indexing, gather/scatter, one_hot and the class-index losses compare an index with an arange: a value out of
# range matches nothing, so it reads 0 and writes nothing, silently (tinygrad's behaviour). Where PyTorch raises,
# fusegrad checks the values when they are known on the host before any kernel runs: a Python list, a numpy array,
# a constant, or a realized tensor whose buffer the host can read (CPU, LLVM, PYTHON), through any view of it.
# A lazy index (computed by a kernel that hasn't run) isn't read: checking it would mean running that kernel
# early and waiting for it, on every indexing op. With CHECK_OOB=1 (a debugging switch; tinygrad's name for its
# out-of-bounds checks) such an index is realized and checked too, where the op is built. (docs/api_fidelity.md)

def _host_readable(buffer: Any) -> bool:
    from fusegrad.device import MallocAllocator
    return buffer.is_allocated() and isinstance(buffer.allocator, MallocAllocator)

def _apply_view(values: Any, chain: tuple) -> Any:
    """``values`` (a numpy array) through the movement ops ``chain`` (from view_chain), or None for an op or
    argument numpy can't follow (a symbolic size)."""
    import numpy as np
    for op, arg in chain:
        if any(isinstance(a, UOp) for a in _flat(arg)): return None
        if op is Ops.RESHAPE: values = values.reshape(arg)
        elif op is Ops.PERMUTE: values = values.transpose(arg)
        elif op is Ops.EXPAND: values = np.broadcast_to(values, arg)
        elif op is Ops.SHRINK: values = values[tuple(slice(start, stop) for start, stop in arg)]
        elif op is Ops.FLIP: values = np.flip(values, tuple(i for i, flipped in enumerate(arg) if flipped))
        elif op is Ops.PAD: values = np.pad(values, arg)
        else: return None
    return values

def _realized_values(index: "Tensor") -> Any:
    """The values of a realized single-device int tensor read from host memory, or None."""
    import numpy as np
    from fusegrad.buffers import BUFFERS
    from fusegrad.dtype import to_np_dtype
    from fusegrad.schedule.tensor_rules import const_value
    if isinstance(index.device, tuple) or index.dtype.fmt is None or not all(isinstance(s, int) for s in index.shape): return None
    if (value := const_value(index.uop)) is not None: return np.full(index.shape, value)
    storage, chain = view_chain(index.uop)
    if storage.op is not Ops.BUFFER or (buffer := BUFFERS.get(storage)) is None or not _host_readable(buffer): return None
    if buffer.dtype != index.dtype: return None
    memory = np.frombuffer(buffer.as_buffer(allow_zero_copy=True), dtype=to_np_dtype(buffer.dtype), count=buffer.size)
    return _apply_view(memory, chain)

def known_index_values(index: Any) -> Any:
    """An index's integer values as a numpy array when they are known without running a kernel (see above), else
    None. With CHECK_OOB=1 a lazy index tensor is realized first (not inside a TinyJit capture)."""
    import numpy as np
    from fusegrad.tensor import Tensor
    if isinstance(index, Tensor):
        if not dtypes.is_int(index.dtype): return None
        values = _realized_values(index)
        if values is None and _check_oob_enabled() and not isinstance(index.device, tuple):
            values = _realized_values(index.realize())
        return values
    if isinstance(index, numbers.Integral) and not isinstance(index, bool): return np.array(int(index))
    if isinstance(index, (list, tuple)) or type(index).__module__ == "numpy":
        try: values = np.asarray(index)
        except (ValueError, TypeError): return None   # (ragged, or holding tensors)
        return values if values.dtype.kind in "iu" else None
    return None

def _check_oob_enabled() -> bool:
    from fusegrad.helpers import CHECK_OOB
    from fusegrad.engine.realize import capturing
    return bool(CHECK_OOB.value) and not capturing   # (inside a capture, a value read would be the first call's only)

def check_index_bounds(index: Any, size: Any, dim: int, *, negative: bool, error: type[Exception] = IndexError,
                       what: str = "index", allowed: int | None = None) -> None:
    """Raise ``error`` naming the first out-of-range value of ``index`` (where known, see known_index_values) for a
    dimension ``dim`` of ``size`` elements: the range is [-size, size) with ``negative`` (numpy's wrap-around),
    else [0, size). ``allowed`` is one more value that may appear (a loss's ignore_index)."""
    if not isinstance(size, int): return
    values = known_index_values(index)
    if values is None or values.size == 0: return
    low = -size if negative else 0
    outside = (values < low) | (values >= size)
    if allowed is not None: outside &= values != allowed
    if outside.any():
        bad = int(values[outside].flat[0])
        raise error(f"{what} {bad} is out of bounds for dimension {dim} with size {size}")
