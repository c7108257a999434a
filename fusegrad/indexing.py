"""``Tensor.__getitem__`` and ``__setitem__`` with numpy semantics.

Basic indices (ints, slices with steps, None, Ellipsis) become movement ops: views, no copies.
A step is a shrink, a pad up to a multiple of the step, a reshape to (n, step), and taking
column 0. Tensor/list indices (advanced indexing) compare the index with an arange to build a
one-hot mask per indexed dim and sum it away, all lazily and fused.
"""
from __future__ import annotations
import math
from typing import Any, TYPE_CHECKING
from fusegrad.dtype import dtypes
from fusegrad.helpers import prod
if TYPE_CHECKING: from fusegrad.tensor import Tensor

def _normalize(indices: Any) -> list:
    if not isinstance(indices, tuple): indices = (indices,)
    return list(indices)

def _is_advanced(index: Any) -> bool:
    from fusegrad.tensor import Tensor
    return isinstance(index, (Tensor, list)) or (type(index).__module__ == "numpy" and hasattr(index, "shape"))

def _slice_dim(x: "Tensor", dim: int, index: slice) -> "Tensor":
    size = x.shape[dim]
    if not isinstance(size, int):
        if index == slice(None): return x
        raise IndexError(f"dimension {dim} has symbolic size {size.render()}: only ':' can slice it; use shrink with a Variable")
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

def getitem(x: "Tensor", indices: Any) -> "Tensor":
    from fusegrad.tensor import Tensor
    items = _normalize(indices)
    for item in items:
        if isinstance(item, float) or isinstance(item, str) or (item is not None and not isinstance(item, (int, slice, type(Ellipsis))) and not _is_advanced(item)):
            raise IndexError(f"invalid index type {type(item).__name__}: only ints, slices, None, Ellipsis and int/bool tensors are valid")
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
            elif not 0 <= item < size.vmin:   # symbolic size: the index must be valid for every value
                raise IndexError(f"index {item} may be out of bounds for dimension {dim} of symbolic size {size.render()}")
            result = result.shrink(tuple((item, item + 1) if i == dim else None for i in range(result.ndim)))
            result = result.reshape(result.shape[:dim] + result.shape[dim + 1:])
        elif isinstance(item, slice):
            if item.step == 0: raise ValueError("slice step cannot be zero")
            result = _slice_dim(result, dim, item)
            dim += 1
        else:
            index = item if isinstance(item, Tensor) else Tensor(item, device=x.device)
            if index.dtype == dtypes.bool:
                raise IndexError("boolean mask indexing has a data-dependent shape; use masked_select or where instead")
            if not dtypes.is_int(index.dtype): raise IndexError(f"tensors used as indices must be int or bool, got {index.dtype}")
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
    except ValueError: raise IndexError(f"cannot broadcast indices: {[tuple(i.shape) for _, i in advanced]}") from None
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

def setitem(x: "Tensor", indices: Any, value: Any) -> None:
    """``x[indices] = value``: writes into x's buffer through a view (basic indices only)."""
    from fusegrad.tensor import Tensor
    from fusegrad.uop.ops import Ops
    if not isinstance(value, (Tensor, int, float, bool)): raise TypeError(f"can't assign a {type(value).__name__} to a tensor slice")
    if any(_is_advanced(i) for i in _normalize(indices)): raise NotImplementedError("setitem with tensor (advanced) indices is not supported")
    if x.requires_grad or (isinstance(value, Tensor) and value.requires_grad):
        raise NotImplementedError("setitem on tensors that require grad is not supported")
    if x.uop.base.op is not Ops.BUFFER or not (x.uop.op is Ops.RESHAPE and x.uop.src[0].op is Ops.BUFFER or x.uop.op is Ops.BUFFER):
        x.uop = x.contiguous().realize().uop
    x.realize()
    view = x[indices]
    if not isinstance(value, Tensor): value = Tensor(value, device=x.device, dtype=x.dtype)
    value = value.cast(x.dtype)._broadcast_to(view.shape).contiguous()
    view.assign(value).realize()
    x.uop = x.uop  # the buffer was written in place
