"""Convolution, pooling, cumulative ops, sorting, gather/scatter, einsum and friends.

Everything here is built from the core Tensor ops (movement ops, ``where``, ``arange``,
reductions), so results stay lazy, fuse into kernels, and get gradients automatically.
Windows (``_pool``) are views made by repeat/shrink/reshape, so their graph size doesn't grow
with the tensor. Gathers and scatters compare indices with an ``arange`` (one-hot masks).
"""
from __future__ import annotations
import functools, itertools, math, string
from typing import TYPE_CHECKING, Any, Sequence
from dataclasses import dataclass
from fusegrad.helpers import prod, flatten, argsort, argfix, ceildiv, round_up
from fusegrad.dtype import dtypes
from fusegrad.uop.ops import UOp, Ops
from fusegrad.indexing import check_index_bounds
if TYPE_CHECKING: from fusegrad.tensor import Tensor

# ---------------------------------------------------------------- module helpers

@dataclass(frozen=True)
class _UnpoolGradient:
    """The gradient rule of max_unpool's ``CUSTOM(value, x, indices)`` (the last ``spatial`` dims are unpooled): each
    input gets the gradient of the output position its index names (PyTorch's gather), the indices none."""
    spatial: int
    def __call__(self, ret: UOp, grad: UOp) -> tuple:
        x, indices = ret.src[1], _T()(ret.src[2])
        lead = x.shape[:len(x.shape) - self.spatial]
        picked = _T()(grad).reshape(*lead, -1).gather(-1, indices.reshape(*lead, -1))
        return picked.reshape(x.shape).uop, None

@dataclass(frozen=True)
class _ConvInputGradient:
    """The gradient rule of a convolution's (padded) input (an Ops.CUSTOM arg; equal convs give
    equal rules, so equal graphs stay equal and schedules stay cached).

    Differentiating the sliding-window reshape trick gives index math full of data-dependent div/mod
    (slow kernels: a stride-2 conv's input gradient ran at 9 GFLOPS). The same input gradient is a
    plain stride-1 convolution: the output gradient padded by d*(k-1) on every side, convolved
    (dilation d) with the weights flipped and with in/out channels swapped (per group). A strided,
    undilated conv does it per stride phase (``_polyphase``); a strided and dilated one stuffs
    stride-1 zeros between the gradient's elements first. Rows and columns no window reached get
    zeros. The weight gradient still comes from ordinary autograd through the windows, rebuilt
    with the input held constant (``weight_gradient``), so each path is counted exactly once."""
    groups: int
    kernel: tuple
    stride: tuple
    dilation: tuple
    acc_dtype: Any = None
    dtype: Any = None
    def __call__(self, node: UOp, grad: UOp) -> tuple:
        return self.input_gradient(node, grad), self.weight_gradient(node, grad)

    def weight_gradient(self, node: UOp, grad: UOp) -> UOp | None:
        """d out / d weight with the input held constant. The forward value (``node.src[0]``) can't be
        differentiated as it is: the input may itself depend on the weight (``(x*w).conv2d(w)``, or
        input and weight the same tensor), and that path is already covered by the input gradient
        flowing back into the input's own graph; counting it here too would count it twice. So the
        windowed product is rebuilt from a DETACHed input and the weight, and differentiated."""
        from fusegrad.gradient import compute_gradient
        Tensor = _T()
        _, x_node, w_node = node.src
        constant_input = Tensor(UOp(Ops.DETACH, x_node.dtype, (x_node,)), requires_grad=False)
        value = _conv_windows_product(constant_input, Tensor(w_node), self.groups, self.kernel, self.stride, self.dilation,
                                      self.acc_dtype, self.dtype)
        return compute_gradient(value.uop, grad, {w_node}).get(w_node)

    def input_gradient(self, node: UOp, grad: UOp) -> UOp:
        """d out / d (padded) input with the weight held constant (the weight's values are read, never
        differentiated here)."""
        Tensor = _T()
        _, x_node, w_node = node.src
        w = Tensor(w_node, requires_grad=False)
        cout, cin = w.shape[:2]
        swapped = w.reshape(self.groups, cout // self.groups, cin, *self.kernel).transpose(1, 2)
        swapped = swapped.reshape(self.groups * cin, cout // self.groups, *self.kernel)
        flipped = swapped.flip(*range(2, 2 + len(self.kernel)))
        g = Tensor(grad, requires_grad=False)
        if any(s > 1 for s in self.stride) and all(d == 1 for d in self.dilation):
            return self._polyphase(g, flipped, x_node).cast(x_node.dtype).uop
        if any(s > 1 for s in self.stride):   # stride-1 zeros between elements (as conv_transpose2d does)
            g = g.reshape(*g.shape[:2], *flatten((n, 1) for n in g.shape[2:]))
            g = g.pad((None, None, *flatten((None, (0, s - 1)) for s in self.stride)))
            g = g.reshape(*g.shape[:2], *[n * s for n, s in zip(g.shape[2::2], self.stride)])
            g = g.shrink((None, None, *[(0, n - (s - 1)) for n, s in zip(g.shape[2:], self.stride)]))
        # the padded gradient is stored: read in place, the pad would be a per-element gate in the
        # conv's innermost loop, which keeps the compiler from vectorizing it (~3x slower)
        g = g.pad([d * (k - 1) for k, d in zip(reversed(self.kernel), reversed(self.dilation)) for _ in range(2)]).contiguous()
        dx = g.conv2d(flipped, groups=self.groups, dilation=self.dilation).cast(x_node.dtype)
        # input rows/columns past the last window (a stride that doesn't divide) get no gradient
        missing = [i - o for i, o in zip(x_node.shape[2:], dx.shape[2:])]
        if any(missing): dx = dx.pad(_grouped_to_flat([(0, m) for m in missing]))
        return dx.uop

    def _polyphase(self, g: "Tensor", flipped: "Tensor", x_node: UOp) -> "Tensor":
        """A strided conv's input gradient without the stuffed zeros: input position s*q + r (phase r)
        collects ``g[q - j] * w[r + j*s]``, a stride-1 convolution of g (padded by J_r - 1 on the left)
        with every s-th tap of the flipped kernel, starting at K-1-r-(J_r-1)*s, where J_r taps of the
        kernel fall in phase r. The s*s phase results interleave into the input gradient (a quarter of
        the zero-stuffed convolution's work for stride 2)."""
        Tensor = _T()
        sizes = x_node.shape[2:]
        phases_out = [ceildiv(i, s) for i, s in zip(sizes, self.stride)]   # Q per dim: outputs of each phase
        results = []
        for phase in itertools.product(*[range(s) for s in self.stride]):
            taps = [ceildiv(k - r, s) if k > r else 0 for k, r, s in zip(self.kernel, phase, self.stride)]
            if 0 in taps:   # no tap of the kernel lands on this phase: its gradient is 0
                results.append(Tensor.zeros(*g.shape[:1], flipped.shape[0], *phases_out, device=g.device, dtype=g.dtype))
                continue
            starts = [k - 1 - r - (j - 1) * s for k, r, j, s in zip(self.kernel, phase, taps, self.stride)]
            kernel = flipped.shrink((None, None, *[(st, st + (j - 1) * s + 1) for st, j, s in zip(starts, taps, self.stride)]))
            kernel = kernel[(slice(None), slice(None), *[slice(None, None, s) for s in self.stride])]
            pads = [(j - 1, q - o) for j, q, o in zip(taps, phases_out, g.shape[2:])]
            padded = g.pad(_grouped_to_flat([(lo, max(hi, 0)) for lo, hi in pads]))
            padded = padded.shrink((None, None, *[(0, lo + o + hi) for (lo, hi), o in zip(pads, g.shape[2:])])).contiguous()
            results.append(padded.conv2d(kernel, groups=self.groups).contiguous())   # (one kernel per phase)
        # interleave: (N, C, Q1, ..., phases) -> position s*q + r in each dim, then crop to the input
        stacked = Tensor.stack(*results, dim=-1).reshape(*results[0].shape, *self.stride)
        dims = len(sizes)
        order = [0, 1] + [x for d in range(dims) for x in (2 + d, 2 + dims + d)]
        dx = stacked.permute(*order).reshape(*results[0].shape[:2], *[q * s for q, s in zip(phases_out, self.stride)])
        return dx.shrink((None, None, *[(0, i) for i in sizes]))

def _conv_windows_product(padded: "Tensor", weight: "Tensor", groups: int, HW: tuple, stride: tuple, dilation: tuple,
                          acc_dtype: Any, dtype: Any) -> "Tensor":
    """The convolution of an already padded input as a product of sliding windows and the weight,
    summed over input channels and kernel taps: shape ``(N, Cout, *out_spatial)``."""
    bs, cout, cin = padded.shape[0], weight.shape[0], weight.shape[1]
    x = padded._pool(HW, stride, dilation)   # (bs, groups*cin, *oyx, *HW)
    rcout, oyx = cout // groups, x.shape[2:-len(HW)]
    x = x.reshape(bs, groups, cin, 1, *oyx, *HW).expand(bs, groups, cin, rcout, *oyx, *HW)
    x = x.permute(0, 1, 3, *[4 + i for i in range(len(oyx))], 2, *[4 + len(oyx) + i for i in range(len(HW))])
    # broadcast to (bs, groups, rcout, *oyx, cin, *HW) and reduce cin and the kernel
    ret = (x * weight.reshape(1, groups, rcout, *[1] * len(oyx), cin, *HW))
    return ret.sum([-1 - i for i in range(1 + len(oyx))], keepdim=True, acc_dtype=acc_dtype, dtype=dtype).reshape(bs, cout, *oyx)

def _with_conv_gradient(ret: "Tensor", padded: "Tensor", weight: "Tensor", rule: _ConvInputGradient) -> "Tensor":
    """``ret`` with the explicit gradient rule of _ConvInputGradient attached."""
    return _T()(UOp(Ops.CUSTOM, ret.dtype, (ret.uop, padded.uop, weight.uop), rule), requires_grad=ret.requires_grad)

def _T() -> type:
    from fusegrad.tensor import Tensor
    return Tensor

def _dt():
    from fusegrad.dtype import dtypes
    return dtypes

def _make_tuple(x: Any, n: int, name: str = "argument") -> tuple:
    if isinstance(x, int) and not isinstance(x, bool): return (x,) * n
    if isinstance(x, (tuple, list)):
        if len(x) == 1: return tuple(x) * n
        if len(x) != n: raise ValueError(f"{name} must be an int or a sequence of {n} ints, got {x!r}")
        if not all(isinstance(v, int) for v in x): raise TypeError(f"{name} must hold ints, got {x!r}")
        return tuple(x)
    raise TypeError(f"{name} must be an int or a sequence of ints, got {x!r}")

def _flat_to_grouped(pads: Sequence[int]) -> list[tuple[int, int]]:
    """Flat torch-style pads (last dim first) to (before, after) pairs in dim order."""
    return [(pads[i], pads[i + 1]) for i in range(len(pads) - 2, -1, -2)]

def _grouped_to_flat(pairs: Sequence[tuple[int, int]]) -> list[int]:
    return [p for pair in reversed(list(pairs)) for p in pair]

def _one_hot(index: "Tensor", n: int) -> "Tensor":
    """Bool mask of shape ``index.shape + (n,)``: ``mask[..., j] = index[...] == j``."""
    Tensor = _T()
    classes = Tensor.arange(n, device=index.device, requires_grad=False)
    if classes.dtype != index.dtype: classes = classes.cast(index.dtype)
    return index.unsqueeze(-1) == classes

def _check_int_index(index: Any, op: str, target: Any = None) -> None:
    """An index tensor of ints, on ``target``'s device (RuntimeError, as every device mismatch; a single-device index
    of a multi-device tensor is copied to its devices)."""
    Tensor, dtypes = _T(), _dt()
    if not isinstance(index, Tensor): raise TypeError(f"{op} needs the index as a Tensor, got {type(index).__name__}")
    if not dtypes.is_int(index.dtype): raise RuntimeError(f"{op} needs an integer index tensor, got {index.dtype}")
    if target is not None and index.device != target.device and isinstance(index.device, tuple) == isinstance(target.device, tuple):
        raise RuntimeError(f"{op}: the index is on {index.device}, the tensor on {target.device}; move one of them first")

def _identity(op: str, dtype) -> Any:
    dtypes = _dt()
    value = {"add": 0, "mul": 1, "max": dtypes.min(dtype)}[op]
    return bool(value) if dtype == dtypes.bool else value   # (an int literal would promote a bool pad to int32)

def _nonneg_ints(xs: Sequence[Any], name: str, positive: bool = False) -> None:
    for v in xs:
        if not isinstance(v, int) or isinstance(v, bool) or v < int(positive):
            raise RuntimeError(f"{name} must be {'positive' if positive else 'non-negative'} ints, got {tuple(xs)}")


class ProcessingMixin:
    """Mixed into Tensor. Methods here build on the core Tensor ops only."""
    __slots__ = ()

    # ================================================================ windows and convolution
    def _pool(self: "Tensor", k_: Sequence[int], stride: int | Sequence[int] = 1, dilation: int | Sequence[int] = 1) -> "Tensor":
        """Sliding windows over the last ``len(k_)`` dims, made only with movement ops:
        shape ``(*leading, *out_sizes, *k_)``.

        >>> Tensor.arange(5)._pool((2,)).tolist()
        [[0, 1], [1, 2], [2, 3], [3, 4]]
        """
        k_ = tuple(k_)
        if self.ndim < len(k_): raise ValueError(f"can't pool a tensor of shape {self.shape} with kernel {k_}")
        s_, d_ = _make_tuple(stride, len(k_), "stride"), _make_tuple(dilation, len(k_), "dilation")
        _nonneg_ints(k_, "kernel size", True); _nonneg_ints(s_, "stride", True); _nonneg_ints(d_, "dilation", True)
        noop, i_ = [None] * (self.ndim - len(k_)), self.shape[-len(k_):] if k_ else ()
        for k, d, i in zip(k_, d_, i_):
            if d * (k - 1) + 1 > i: raise RuntimeError(f"kernel {k_} (dilation {d_}) is larger than the input {tuple(i_)}")
        o_ = [ceildiv(i - d * (k - 1), s) for i, d, k, s in zip(i_, d_, k_, s_)]
        if any(k > s for k, s in zip(k_, s_)) or any(d != 1 for d in d_):
            # repeat the input so every window becomes a row of a reshaped view (no padding needed)
            f_ = [1 + int(o * s > i - d * (k - 1)) for o, s, i, d, k in zip(o_, s_, i_, d_, k_)]
            x = self.repeat([1] * len(noop) + [ceildiv(k * (i * f + d), i) for k, i, d, f in zip(k_, i_, d_, f_)])
            x = x.shrink(tuple(noop + [(0, k * (i * f + d)) for k, i, d, f in zip(k_, i_, d_, f_)]))
            x = x.reshape(noop + flatten((k, i * f + d) for k, i, d, f in zip(k_, i_, d_, f_)))
            x = x.shrink(tuple(noop + flatten(((0, k), (0, o * s)) for k, o, s in zip(k_, o_, s_))))
            x = x.reshape(noop + flatten((k, o, s) for k, o, s in zip(k_, o_, s_)))
            x = x.shrink(tuple(noop + flatten(((0, k), (0, o), (0, 1)) for k, o in zip(k_, o_))))
            x = x.reshape(noop + flatten((k, o) for k, o in zip(k_, o_)))
            return x.permute(*range(len(noop)), *[len(noop) + i * 2 + 1 for i in range(len(i_))], *[len(noop) + i * 2 for i in range(len(i_))])
        # kernel <= stride and no dilation: windows don't overlap, a pad + reshape is enough
        x = self.pad(tuple(noop + [(0, max(0, o * s - i)) for i, o, s in zip(i_, o_, s_)]))
        x = x.shrink(tuple(noop + [(0, o * s) for o, s in zip(o_, s_)]))
        x = x.reshape(noop + flatten(((o, s) for o, s in zip(o_, s_))))
        x = x.shrink(tuple(noop + flatten(((0, o), (0, k)) for o, k in zip(o_, k_))))
        return x.permute(*range(len(noop)), *[len(noop) + i * 2 for i in range(len(i_))], *[len(noop) + i * 2 + 1 for i in range(len(i_))])

    def _resolve_pool_pads(self: "Tensor", padding: Any, dims: int) -> list[int]:
        """Flat torch-style pads (last dim first) from an int, a per-dim tuple, or a per-side tuple."""
        if isinstance(padding, int) and not isinstance(padding, bool): return [padding] * 2 * dims
        if not isinstance(padding, (tuple, list)) or not (len(padding) == 2 * dims or len(padding) == dims) \
                or not all(isinstance(p, int) for p in padding):
            raise ValueError(f"padding must be an int or a sequence of {dims} or {2 * dims} ints, got {padding!r} for shape {self.shape}")
        return list(padding) if len(padding) == 2 * dims else [p for p in reversed(padding) for _ in range(2)]

    def conv2d(self: "Tensor", weight: "Tensor", bias: "Tensor | None" = None, groups: int = 1, stride: int | Sequence[int] = 1,
               dilation: int | Sequence[int] = 1, padding: int | Sequence[int] | str = 0, acc_dtype: Any = None,
               dtype: Any = None) -> "Tensor":
        """N-d convolution (cross-correlation, like torch): input ``(N, Cin, *spatial)``, weight
        ``(Cout, Cin/groups, *kernel)``. 1-d and 3-d convs use the same path. ``padding`` is an int,
        one int per spatial dim, one per side (flat, last dim first), or ``'same'`` / ``'valid'``.

        >>> Tensor.ones(1, 1, 3, 3).conv2d(Tensor.ones(1, 1, 2, 2)).tolist()
        [[[[4.0, 4.0], [4.0, 4.0]]]]
        """
        Tensor = _T()
        if not isinstance(weight, Tensor): raise TypeError(f"conv2d weight must be a Tensor, got {type(weight).__name__}")
        if self.ndim < 3 or self.ndim != weight.ndim:
            raise RuntimeError(f"conv2d input {self.shape} and weight {weight.shape} must have the same number (>= 3) of dims")
        (bs, cin_), (cout, cin), HW = self.shape[:2], weight.shape[:2], weight.shape[2:]
        if not isinstance(groups, int) or groups < 1: raise RuntimeError(f"groups must be a positive int, got {groups!r}")
        if groups * cin != cin_:
            raise RuntimeError(f"input shape {self.shape} does not match the weight shape {weight.shape}: "
                             f"{cin_} input channels vs groups*weight channels {groups * cin}")
        if cout % groups != 0: raise RuntimeError(f"output channels {cout} must be divisible by groups {groups}")
        if bias is not None and (not isinstance(bias, Tensor) or bias.shape != (cout,)):
            raise RuntimeError(f"conv2d bias must have shape ({cout},), got {getattr(bias, 'shape', bias)}")
        s_, d_ = _make_tuple(stride, len(HW), "stride"), _make_tuple(dilation, len(HW), "dilation")
        _nonneg_ints(s_, "stride", True); _nonneg_ints(d_, "dilation", True)
        if isinstance(padding, str):
            if padding == "valid": padding = 0
            elif padding == "same":
                if any(s != 1 for s in s_): raise RuntimeError("padding='same' needs stride 1")
                totals = [d * (k - 1) for d, k in zip(d_, HW)]
                padding = _grouped_to_flat([(t // 2, t - t // 2) for t in totals])
            else: raise RuntimeError(f"padding string must be 'same' or 'valid', got {padding!r}")
        padding_ = self._resolve_pool_pads(padding, len(HW))
        x = padded = self.pad(padding_)
        for k, d, i in zip(HW, d_, x.shape[2:]):
            if d * (k - 1) + 1 > i:
                raise RuntimeError(f"kernel {tuple(HW)} (dilation {d_}) is larger than the padded input {tuple(x.shape[2:])}")
        ret = _conv_windows_product(padded, weight, groups, tuple(HW), s_, d_, acc_dtype, dtype)
        if dtypes.is_float(ret.dtype):
            ret = _with_conv_gradient(ret, padded, weight, _ConvInputGradient(groups, tuple(HW), s_, d_, acc_dtype, dtype))
        return ret if bias is None else ret.add(bias.reshape(1, -1, *[1] * len(HW)))

    def conv_transpose2d(self: "Tensor", weight: "Tensor", bias: "Tensor | None" = None, groups: int = 1, stride: int | Sequence[int] = 1,
                         dilation: int | Sequence[int] = 1, padding: int | Sequence[int] = 0,
                         output_padding: int | Sequence[int] = 0) -> "Tensor":
        """Transposed convolution (the gradient of conv2d w.r.t. its input): input ``(N, Cin, *spatial)``,
        weight ``(Cin, Cout/groups, *kernel)``; works for 1-d/2-d/3-d.

        >>> Tensor.ones(1, 1, 2, 2).conv_transpose2d(Tensor.ones(1, 1, 2, 2)).tolist()
        [[[[1.0, 2.0, 1.0], [2.0, 4.0, 2.0], [1.0, 2.0, 1.0]]]]
        """
        Tensor = _T()
        if not isinstance(weight, Tensor): raise TypeError(f"conv_transpose2d weight must be a Tensor, got {type(weight).__name__}")
        if self.ndim < 3 or self.ndim != weight.ndim:
            raise RuntimeError(f"conv_transpose2d input {self.shape} and weight {weight.shape} must have the same number (>= 3) of dims")
        if not isinstance(groups, int) or groups < 1: raise RuntimeError(f"groups must be a positive int, got {groups!r}")
        if self.shape[1] != weight.shape[0] or weight.shape[0] % groups != 0:
            raise RuntimeError(f"input shape {self.shape} does not match the weight shape {weight.shape} with groups={groups}")
        HW = weight.shape[2:]
        s_, d_ = _make_tuple(stride, len(HW), "stride"), _make_tuple(dilation, len(HW), "dilation")
        op_ = _make_tuple(output_padding, len(HW), "output_padding")
        _nonneg_ints(s_, "stride", True); _nonneg_ints(d_, "dilation", True); _nonneg_ints(op_, "output_padding")
        for o, s, d in zip(op_, s_, d_):
            if o >= max(s, d): raise RuntimeError(f"output_padding {op_} must be smaller than stride {s_} or dilation {d_}")
        pads = _flat_to_grouped(self._resolve_pool_pads(padding, len(HW)))
        x = self
        w = weight.unflatten(0, (groups, -1)).transpose(1, 2).flip(*range(3, weight.ndim + 1)).flatten(0, 1)
        if any(s > 1 for s in s_):   # insert (stride-1) zeros between input elements
            x = x.reshape(*x.shape[:2], *flatten((k, 1) for k in x.shape[2:]))
            x = x.pad((None, None, *flatten((None, (0, s - 1)) for s in s_)))
            x = x.reshape(*x.shape[:2], *[k * s for k, s in zip(x.shape[2::2], s_)])
            x = x.shrink((None, None, *[(0, k - (s - 1)) for k, s in zip(x.shape[2:], s_)]))
        conv_pads = [((k - 1) * d - pB, (k - 1) * d - pA + o) for k, d, (pB, pA), o in zip(HW, d_, pads, op_)]
        return x.conv2d(w, groups=groups, bias=bias, dilation=d_, padding=_grouped_to_flat(conv_pads))

    def _ceil_mode_pads(self: "Tensor", pads: list[int], k_: tuple, s_: tuple, d_: tuple) -> list[int]:
        """Extra right padding so the last (partial) window of ceil_mode is produced, with torch's rule
        that a window must start inside the input or the left padding."""
        i_, grouped = self.shape[-len(k_):], _flat_to_grouped(pads)
        out = []
        for i, k, s, d, (pB, pA) in zip(i_, k_, s_, d_, grouped):
            o = ceildiv(i + pB + pA - (d * (k - 1) + 1), s) + 1
            if (o - 1) * s >= i + pB: o -= 1
            out.append((pB, pA + max(0, (o - 1) * s + d * (k - 1) + 1 - (i + pB + pA))))
        return _grouped_to_flat(out)

    def _pool_args(self: "Tensor", kernel_size: Any, stride: Any, dilation: Any, padding: Any, name: str) -> tuple:
        k_ = _make_tuple(kernel_size, 2 if isinstance(kernel_size, int) else len(kernel_size), "kernel_size")
        s_ = _make_tuple(stride if stride is not None else k_, len(k_), "stride")
        d_ = _make_tuple(dilation, len(k_), "dilation")
        _nonneg_ints(k_, "kernel_size", True); _nonneg_ints(s_, "stride", True); _nonneg_ints(d_, "dilation", True)
        if self.ndim < len(k_): raise ValueError(f"{name} needs at least {len(k_)} dims, got shape {self.shape}")
        pads = self._resolve_pool_pads(padding, len(k_))
        for (pB, pA), k in zip(_flat_to_grouped(pads), k_):
            if pB < 0 or pA < 0 or pB > k // 2 or pA > k // 2:
                raise RuntimeError(f"{name} padding {padding!r} must be non-negative and at most half the kernel size {k_}")
        return k_, s_, d_, pads

    def avg_pool2d(self: "Tensor", kernel_size: int | Sequence[int] = (2, 2), stride: Any = None, dilation: Any = 1, padding: Any = 0,
                   ceil_mode: bool = False, count_include_pad: bool = True) -> "Tensor":
        """Average over windows of the last ``len(kernel_size)`` dims (an int means 2 dims).

        >>> Tensor.arange(4.0).reshape(1, 1, 2, 2).avg_pool2d().tolist()
        [[[[1.5]]]]
        """
        k_, s_, d_, reg_pads = self._pool_args(kernel_size, stride, dilation, padding, "avg_pool2d")
        axis = tuple(range(-len(k_), 0))
        def pool(x: "Tensor", pads: Sequence[int]) -> "Tensor": return x.pad(pads)._pool(k_, s_, d_)
        ceil_pads = self._ceil_mode_pads(reg_pads, k_, s_, d_) if ceil_mode else reg_pads
        if not count_include_pad: return pool(self, ceil_pads).sum(axis) / pool(self.ones_like(requires_grad=False), ceil_pads).sum(axis)
        if not ceil_mode: return pool(self, reg_pads).mean(axis)
        # ceil mode counts the regular padding but not the extra padding on the right
        ones = self.pad(reg_pads).ones_like(requires_grad=False)
        return pool(self, ceil_pads).sum(axis) / pool(ones, [c - r for c, r in zip(ceil_pads, reg_pads)]).sum(axis)

    def max_pool2d(self: "Tensor", kernel_size: int | Sequence[int] = (2, 2), stride: Any = None, dilation: Any = 1, padding: Any = 0,
                   ceil_mode: bool = False, return_indices: bool = False) -> "Tensor | tuple[Tensor, Tensor]":
        """Max over windows of the last ``len(kernel_size)`` dims; ``return_indices`` also gives the
        flat index (within each input plane) of the first max of each window, as int32.

        >>> Tensor.arange(4.0).reshape(1, 1, 2, 2).max_pool2d().tolist()
        [[[[3.0]]]]
        """
        Tensor, dtypes = _T(), _dt()
        k_, s_, d_, pads = self._pool_args(kernel_size, stride, dilation, padding, "max_pool2d")
        axis = tuple(range(-len(k_), 0))
        if ceil_mode: pads = self._ceil_mode_pads(pads, k_, s_, d_)
        pooled = self.pad(pads, value=dtypes.min(self.dtype))._pool(k_, s_, d_)
        if not return_indices: return pooled.max(axis)
        spatial = self.shape[-len(k_):]
        size = prod(spatial)
        countdown = Tensor.arange(size, 0, -1, device=self.device, requires_grad=False).reshape(spatial)
        countdown = countdown.reshape((1,) * (self.ndim - len(k_)) + tuple(spatial))
        is_max = pooled == pooled.max(axis, keepdim=True)
        idx = is_max.where(countdown.pad(pads, value=0)._pool(k_, s_, d_), 0)
        return pooled.max(axis), (size - idx.max(axis)).cast(dtypes.int32)

    def max_unpool2d(self: "Tensor", indices: "Tensor", kernel_size: int | Sequence[int] = (2, 2), stride: Any = None, dilation: Any = 1,
                     padding: Any = 0, output_size: Sequence[int] | None = None) -> "Tensor":
        """The inverse of ``max_pool2d(..., return_indices=True)``: put each value at its index in a
        zero tensor of the unpooled size.

        >>> Tensor([[[[5.0]]]]).max_unpool2d(Tensor([[[[3]]]])).tolist()
        [[[[0.0, 0.0], [0.0, 5.0]]]]
        """
        _check_int_index(indices, "max_unpool2d")
        if indices.shape != self.shape: raise ValueError(f"max_unpool2d indices {indices.shape} must match the input {self.shape}")
        k_ = _make_tuple(kernel_size, 2 if isinstance(kernel_size, int) else len(kernel_size), "kernel_size")
        if self.ndim < len(k_) + 1: raise ValueError(f"max_unpool2d needs at least {len(k_) + 1} dims, got {self.shape}")
        lead, spatial = self.shape[:-len(k_)], self.shape[-len(k_):]
        if output_size is None:
            s_ = _make_tuple(stride if stride is not None else k_, len(k_), "stride")
            d_ = _make_tuple(dilation, len(k_), "dilation")
            p_ = _flat_to_grouped(self._resolve_pool_pads(padding, len(k_)))
            output_size = tuple((i - 1) * s - (pB + pA) + (d * (k - 1) + 1) for i, k, d, s, (pB, pA) in zip(spatial, k_, d_, s_, p_))
        else: output_size = tuple(output_size)[-len(k_):]
        n = prod(output_size)
        mask = _one_hot(indices.reshape(*lead, -1), n).transpose(-1, -2)   # (*lead, n, n_in)
        if not _dt().is_float(self.dtype):
            total = mask.where(self.reshape(*lead, 1, -1), 0).sum(-1, dtype=self.dtype)
            return total.idiv(mask.sum(-1, dtype=_dt().int32).maximum(1).cast(self.dtype)).reshape(*lead, *output_size)
        # overlapping windows can name the same input twice (with the same value): write it once, like torch, as the
        # max of the values named there (exact, infinities included; a sum divided by the count was inf - inf = NaN
        # in its gradient trick), while each pooled value gets the full gradient of its output position (torch's
        # gather, an explicit rule: the max would share it among the copies)
        named = mask.where(self.detach().reshape(*lead, 1, -1), -math.inf).max(-1)
        value = mask.any(-1).where(named, 0).reshape(*lead, *output_size)
        if self.requires_grad is False: return value
        return _T()(UOp(Ops.CUSTOM, value.dtype, (value.uop, self.uop, indices.uop), _UnpoolGradient(len(k_))), requires_grad=self.requires_grad)

    # ================================================================ cumulative ops
    def _cumalu(self: "Tensor", axis: int, op: str, _include_initial: bool = False) -> "Tensor":
        n = self.shape[axis]
        pl_sz = n - int(not _include_initial)
        x = self.transpose(axis, -1)
        pooled = x.pad((pl_sz, -int(_include_initial)), value=_identity(op, self.dtype))._pool((n,))
        red = {"add": lambda t: t.sum(-1), "max": lambda t: t.max(-1), "mul": lambda t: t.prod(-1)}[op](pooled)
        return red.transpose(axis, -1)

    def _split_cumalu(self: "Tensor", axis: int, op: str) -> "Tensor":
        axis = self._resolve_dim(axis)   # a 0-d tensor takes axis 0 or -1 (IndexError otherwise, like tinygrad)
        if self.ndim == 0 or 0 in self.shape:   # nothing to accumulate; the result still has the reduce's dtype
            return self.cast(self.sum().dtype) if op == "add" else self
        SPLIT = 256
        s = self.shape[axis]
        if s <= SPLIT * 2: return self._cumalu(axis, op)
        # two stages: cumulative op inside blocks of SPLIT, then across the block totals
        ret = self.transpose(axis, -1).pad((round_up(s, SPLIT) - s, 0), value=_identity(op, self.dtype)).unflatten(-1, (-1, SPLIT))._cumalu(-1, op)
        base = ret[..., -1]._cumalu(-1, op, _include_initial=True)
        base = base.unsqueeze(-1).expand(*base.shape, ret.shape[-1])
        def fix(x: "Tensor") -> "Tensor": return x.flatten(start_dim=-2)[..., -s:].transpose(axis, -1)
        if op == "add": return fix(ret) + fix(base)
        if op == "mul": return fix(ret) * fix(base)
        return fix(ret).maximum(fix(base))

    def cumsum(self: "Tensor", axis: int = 0) -> "Tensor":
        """Running sum along ``axis``.

        >>> Tensor([1, 2, 3]).cumsum().tolist()
        [1, 3, 6]
        """
        return self._split_cumalu(axis, "add")

    def cumprod(self: "Tensor", axis: int = 0) -> "Tensor":
        """Running product along ``axis``.

        >>> Tensor([1, 2, 3]).cumprod(0).tolist()
        [1, 2, 6]
        """
        return self._split_cumalu(axis, "mul")

    def _cum_extreme(self: "Tensor", axis: int, largest: bool) -> tuple["Tensor", "Tensor"]:
        Tensor, dtypes = _T(), _dt()
        axis = self._resolve_dim(axis)
        if self.ndim == 0: return self, Tensor.zeros((), dtype=dtypes.int32, device=self.device)
        n = self.shape[axis]
        if n == 0: return self, self.cast(dtypes.int32)
        x = self.transpose(axis, -1)
        key = x if largest else x._inverse()
        if key.dtype == dtypes.bool: key = key.cast(dtypes.int32)
        running = key.detach()._cumalu(-1, "max")                        # (..., n)
        # indices: the last i <= j where key[i] == running max[j] (torch picks the latest tie)
        tri = Tensor.ones(n, n, dtype=dtypes.bool, device=self.device, requires_grad=False).tril()   # [j, i]: i <= j
        hit = tri & (key.detach().unsqueeze(-2) == running.unsqueeze(-1))   # (..., j, i)
        ar = Tensor.arange(n, device=self.device, requires_grad=False)
        idx = hit.where(ar, -1).max(-1)                                      # (..., n)
        if dtypes.is_float(key.dtype):   # once a nan is seen it is the running value: torch takes the latest nan
            last_nan = (tri & key.detach().isnan().unsqueeze(-2)).where(ar, -1).max(-1)
            idx = (last_nan >= 0).where(last_nan, idx)
        values = x.gather(-1, idx).transpose(axis, -1)
        return values, idx.cast(dtypes.int32).transpose(axis, -1)

    def cummax(self: "Tensor", axis: int = 0) -> tuple["Tensor", "Tensor"]:
        """Running max along ``axis``: (values, int32 indices of the max, the latest one on ties).

        >>> [t.tolist() for t in Tensor([1, 3, 2]).cummax(0)]
        [[1, 3, 3], [0, 1, 1]]
        """
        return self._cum_extreme(axis, True)

    def cummin(self: "Tensor", axis: int = 0) -> tuple["Tensor", "Tensor"]:
        """Running min along ``axis``: (values, int32 indices).

        >>> [t.tolist() for t in Tensor([2, 1, 3]).cummin(0)]
        [[2, 1, 1], [0, 1, 1]]
        """
        return self._cum_extreme(axis, False)

    def logcumsumexp(self: "Tensor", axis: int = 0) -> "Tensor":
        """log(cumsum(exp(x))) along ``axis``, computed stably (shifted by the running max).

        >>> [round(v, 4) for v in Tensor([0.0, 0.0]).logcumsumexp().tolist()]
        [0.0, 0.6931]
        """
        Tensor, dtypes = _T(), _dt()
        axis = self._resolve_dim(axis)
        # a float result whatever the shape (tinygrad 0.14 returns a 0-d int tensor as it is; empty ones are float)
        if self.ndim == 0 or self.shape[axis] == 0: return self._float()
        n = self.shape[axis]
        x = self._float().transpose(axis, -1)
        m = x.detach()._cumalu(-1, "max")
        m = m.isinf().where(0, m)                                           # all -inf so far: no shift
        tri = Tensor.ones(n, n, dtype=dtypes.bool, device=self.device, requires_grad=False).tril()
        terms = tri.where(x.unsqueeze(-2) - m.unsqueeze(-1), -math.inf)      # (..., j, i)
        return (terms.exp().sum(-1).log() + m).transpose(axis, -1)

    # ================================================================ triangles and diagonals
    def triu(self: "Tensor", diagonal: int = 0) -> "Tensor":
        """Keep the upper triangle (``j - i >= diagonal``) of the last two dims, zero the rest.

        >>> Tensor([[1, 2], [3, 4]]).triu().tolist()
        [[1, 2], [0, 4]]
        """
        Tensor = _T()
        if self.ndim < 2: raise RuntimeError(f"triu needs at least 2 dims, got shape {self.shape}")
        r, c = self.shape[-2], self.shape[-1]
        keep = Tensor.arange(r, device=self.device, requires_grad=False).unsqueeze(-1) + diagonal <= Tensor.arange(c, device=self.device, requires_grad=False)
        return keep.where(self, self._const(0, shape=()))

    def tril(self: "Tensor", diagonal: int = 0) -> "Tensor":
        """Keep the lower triangle (``j - i <= diagonal``) of the last two dims, zero the rest.

        >>> Tensor([[1, 2], [3, 4]]).tril().tolist()
        [[1, 0], [3, 4]]
        """
        Tensor = _T()
        if self.ndim < 2: raise RuntimeError(f"tril needs at least 2 dims, got shape {self.shape}")
        r, c = self.shape[-2], self.shape[-1]
        drop = Tensor.arange(r, device=self.device, requires_grad=False).unsqueeze(-1) + diagonal + 1 <= Tensor.arange(c, device=self.device, requires_grad=False)
        return drop.where(self._const(0, shape=()), self)

    def diag(self: "Tensor", diagonal: int = 0) -> "Tensor":
        """1-d input: a square matrix with it on the ``diagonal``; 2-d input: that diagonal (torch.diag).

        >>> Tensor([1, 2]).diag().tolist()
        [[1, 0], [0, 2]]
        """
        if self.ndim == 2: return self.diagonal(diagonal)
        if self.ndim != 1: raise ValueError(f"diag needs a 1-d or 2-d tensor, got shape {self.shape}")
        n = self.shape[0]
        m = self.unsqueeze(-1).pad((None, (0, n))).flatten().shrink(((0, n * n),)).reshape(n, n)
        if diagonal == 0: return m
        k = abs(diagonal)
        return m.pad(((0, k), (k, 0)) if diagonal > 0 else ((k, 0), (0, k)))

    def diagonal(self: "Tensor", offset: int = 0, dim1: int = 0, dim2: int = 1) -> "Tensor":
        """The diagonal of dims ``dim1``/``dim2`` (shifted by ``offset``), as a new last dim.

        >>> Tensor([[1, 2], [3, 4]]).diagonal().tolist()
        [1, 4]
        """
        d1, d2 = self._resolve_dim(dim1), self._resolve_dim(dim2)
        if d1 == d2: raise RuntimeError(f"diagonal dimensions cannot be identical: {dim1}, {dim2}")
        rest = [d for d in range(self.ndim) if d not in (d1, d2)]
        x = self.permute(*rest, d1, d2)
        a, b = x.shape[-2], x.shape[-1]
        r0, c0 = (0, offset) if offset >= 0 else (-offset, 0)
        L = max(0, min(a - r0, b - c0))
        lead = [None] * len(rest)
        if L == 0: return x.shrink(tuple(lead + [(0, 0), (0, 1) if b else (0, 0)])).reshape(*x.shape[:-2], 0)
        x = x.shrink(tuple(lead + [(r0, r0 + L), (c0, c0 + L)])).flatten(-2)
        x = x.pad(tuple(lead + [(0, L)])).reshape(*x.shape[:-1], L, L + 1)
        return x.shrink(tuple(lead + [None, (0, 1)])).reshape(*x.shape[:-2], L)

    # ================================================================ gather / scatter / masks
    def gather(self: "Tensor", dim: int, index: "Tensor") -> "Tensor":
        """``out[..i..] = self[..index[..i..]..]`` along ``dim`` (torch.gather); differentiable in self.

        >>> Tensor([[1, 2], [3, 4]]).gather(1, Tensor([[1], [0]])).tolist()
        [[2], [3]]
        """
        _check_int_index(index, "gather", self)
        if index.ndim != self.ndim: raise RuntimeError(f"gather index must have the same number of dims as the input: {index.shape} vs {self.shape}")
        dim = self._resolve_dim(dim) if self.ndim else 0
        if self.ndim == 0: return self.reshape(1).gather(0, index.reshape(1)).reshape(())
        for d, (s, i) in enumerate(zip(self.shape, index.shape)):
            if d != dim and i > s: raise RuntimeError(f"gather index shape {index.shape} is larger than the input {self.shape} in dim {d}")
        # an index outside [0, size) would read 0: PyTorch's RuntimeError where the values are known (indexing.py)
        check_index_bounds(index, self.shape[dim], dim, negative=False, error=RuntimeError)
        index = index.to(self.device)
        x = self.shrink(tuple((0, i) if d != dim else None for d, i in enumerate(index.shape))).unsqueeze(-1).transpose(-1, dim)
        mask = _one_hot(index, self.shape[dim])
        if self.dtype == _dt().bool: return mask.where(x, False).any(-1)
        return mask.where(x, 0).sum(-1, dtype=self.dtype)

    def _pre_scatter(self: "Tensor", dim: int, index: "Tensor", src: "Tensor") -> tuple["Tensor", "Tensor"]:
        _check_int_index(index, "scatter", self)
        if not (index.ndim == self.ndim == src.ndim):
            raise ValueError(f"scatter needs self, index and src with the same number of dims: {self.shape}, {index.shape}, {src.shape}")
        dim = self._resolve_dim(dim)
        for d, (s, i, r) in enumerate(zip(self.shape, index.shape, src.shape)):
            if (d != dim and i > s) or i > r:
                raise ValueError(f"scatter index shape {index.shape} must be <= src {src.shape} in every dim and <= self {self.shape} except dim {dim}")
        if self.dtype != src.dtype: raise RuntimeError(f"scatter needs src of the same dtype as self: {src.dtype} vs {self.dtype}")
        # an index outside [0, size) would write nothing: PyTorch's RuntimeError where the values are known (indexing.py)
        check_index_bounds(index, self.shape[dim], dim, negative=False, error=RuntimeError)
        index = index.to(self.device)
        src = src.shrink(tuple((0, s) for s in index.shape))
        # (.., self.shape[dim] at dim, .., index.shape[dim] last): candidate sources for every target
        src = src.unsqueeze(-1).expand(*src.shape, self.shape[dim]).transpose(-1, dim)
        mask = _one_hot(index, self.shape[dim]).transpose(-1, dim)
        src, mask = (x.pad(tuple((0, self.shape[i] - x.shape[i]) if i != dim else None for i in range(self.ndim)) + (None,)) for x in (src, mask))
        return src, mask

    def scatter(self: "Tensor", dim: int, index: "Tensor", src: "Tensor | Any", reduce: str | None = None) -> "Tensor":
        """Write ``src`` (a tensor or a scalar) into a copy of self at ``index`` along ``dim``
        (torch.scatter). With repeated indices the last write wins. ``reduce`` 'add' or 'multiply'
        combines with the existing values instead.

        >>> Tensor.zeros(3).scatter(0, Tensor([2, 0]), Tensor([5.0, 6.0])).tolist()
        [6.0, 0.0, 5.0]
        """
        Tensor, dtypes = _T(), _dt()
        if reduce not in (None, "add", "multiply"): raise TypeError(f"scatter reduce must be None, 'add' or 'multiply', got {reduce!r}")
        _check_int_index(index, "scatter", self)
        if not isinstance(src, Tensor):
            if not isinstance(src, (int, float, bool)): raise TypeError(f"scatter src must be a Tensor or a number, got {type(src).__name__}")
            src = Tensor.full(index.shape, src, device=self.device, dtype=self.dtype)
        if reduce == "add": return self.scatter_reduce(dim, index, src, "sum", include_self=True)
        if reduce == "multiply": return self.scatter_reduce(dim, index, src, "prod", include_self=True)
        src, mask = self._pre_scatter(dim, index, src)
        n = mask.shape[-1]
        pos = Tensor.arange(1, n + 1, device=self.device, requires_grad=False)
        last = mask.where(pos, 0).max(-1, keepdim=True)
        chosen = mask & (pos == last)
        if self.dtype == dtypes.bool: values = chosen.where(src, False).any(-1)
        else: values = chosen.where(src, 0).sum(-1, dtype=self.dtype)
        return mask.any(-1).where(values, self)

    def scatter_reduce(self: "Tensor", dim: int, index: "Tensor", src: "Tensor", reduce: str, include_self: bool = True) -> "Tensor":
        """Combine ``src`` into self at ``index`` along ``dim`` with ``reduce`` in
        'sum', 'prod', 'mean', 'amax', 'amin' (torch.scatter_reduce).

        >>> Tensor([1.0, 1.0]).scatter_reduce(0, Tensor([0, 0]), Tensor([2.0, 3.0]), "sum").tolist()
        [6.0, 1.0]
        """
        Tensor, dtypes = _T(), _dt()
        if reduce not in ("sum", "prod", "mean", "amax", "amin"):
            raise RuntimeError(f"scatter_reduce reduce must be one of 'sum', 'prod', 'mean', 'amax', 'amin', got {reduce!r}")
        if not isinstance(src, Tensor): raise TypeError(f"scatter_reduce src must be a Tensor, got {type(src).__name__}")
        src, mask = self._pre_scatter(dim, index, src)
        untouched = mask.any(-1).logical_not()
        def base(identity: Any) -> "Tensor": return self if include_self else untouched.where(self, identity)
        if reduce == "sum": return mask.where(src, 0).sum(-1, dtype=self.dtype).add(base(0))
        if reduce == "prod": return mask.where(src, 1).prod(-1, dtype=self.dtype).mul(base(1))
        if reduce == "amax": return mask.where(src, m := dtypes.min(src.dtype)).max(-1).maximum(base(m))
        if reduce == "amin": return mask.where(src, m := dtypes.max(src.dtype)).min(-1).minimum(base(m))
        # mean: untouched elements keep their value
        count = mask.where(1, 0).sum(-1, dtype=dtypes.int32) + (1 if include_self else 0)
        total = mask.where(src, 0).sum(-1, dtype=self.dtype).add(base(0))
        if dtypes.is_float(self.dtype): return (count == 0).where(self, total / count.maximum(1).cast(self.dtype))
        return (count == 0).where(self, total.div(count.maximum(1).cast(self.dtype), rounding_mode="floor"))

    def masked_fill(self: "Tensor", mask: "Tensor", value: Any) -> "Tensor":
        """``value`` where ``mask`` is True, else self (broadcasting).

        >>> Tensor([1, 2]).masked_fill(Tensor([True, False]), 0).tolist()
        [0, 2]
        """
        Tensor, dtypes = _T(), _dt()
        if not isinstance(mask, Tensor) or mask.dtype != dtypes.bool: raise RuntimeError(f"masked_fill needs a bool mask tensor, got {getattr(mask, 'dtype', type(mask))}")
        if isinstance(value, Tensor):
            if value.ndim != 0: raise ValueError(f"masked_fill value must be a number or a 0-d tensor, got shape {value.shape}")
            value = value.cast(self.dtype)
        out = mask.where(value, self)
        if out.shape != self.shape: raise ValueError(f"masked_fill mask {mask.shape} doesn't broadcast to {self.shape}")
        return out.cast(self.dtype)

    def _nonzero_flat(self: "Tensor", mask: "Tensor") -> "Tensor":
        """Flat positions of the True entries of a 1-d bool ``mask`` (realizes the count)."""
        Tensor, dtypes = _T(), _dt()
        csum = mask.cast(dtypes.int32).cumsum(0)
        count = int(csum[-1].item()) if mask.shape[0] else 0
        if count == 0: return Tensor.zeros(0, dtype=dtypes.int32, device=self.device)
        # position k = number of entries whose running count is <= k
        k = Tensor.arange(count, device=self.device, requires_grad=False)
        return (csum.unsqueeze(0) <= k.unsqueeze(-1)).cast(dtypes.int32).sum(-1, dtype=dtypes.int32)

    def _nonzero_positions_sized(self: "Tensor", mask: "Tensor", size: int) -> tuple["Tensor", "Tensor"]:
        """The first ``size`` flat positions of the True entries of a 1-d bool ``mask``, and which of
        them exist (k < count). Nothing is realized, so the shape doesn't depend on the data."""
        Tensor, dtypes = _T(), _dt()
        if not isinstance(size, int) or size < 0: raise ValueError(f"size must be a non-negative int, got {size!r}")
        csum = mask.cast(dtypes.int32).cumsum(0) if mask.shape[0] else Tensor.zeros(1, dtype=dtypes.int32, device=self.device)
        k = Tensor.arange(size, device=self.device, requires_grad=False)
        # position k = number of entries whose running count is <= k (the mask length when k >= count)
        positions = (csum.unsqueeze(0) <= k.unsqueeze(-1)).cast(dtypes.int32).sum(-1, dtype=dtypes.int32)
        return positions.clip(0, max(mask.shape[0] - 1, 0)), k < csum[-1]

    def masked_select(self: "Tensor", mask: "Tensor", size: int | None = None, fill_value: Any = 0) -> "Tensor":
        """The entries where ``mask`` is True, as a 1-d tensor. Without ``size`` its length depends on
        the data, so the mask's count is computed first; with ``size=N`` the result has N entries,
        the missing ones ``fill_value`` (cast to the dtype), extra ones dropped, and nothing is realized.

        >>> Tensor([1, 2, 3]).masked_select(Tensor([True, False, True])).tolist()
        [1, 3]
        >>> Tensor([1, 2, 3]).masked_select(Tensor([True, False, True]), size=3, fill_value=-1).tolist()
        [1, 3, -1]
        """
        Tensor, dtypes = _T(), _dt()
        if not isinstance(mask, Tensor) or mask.dtype != dtypes.bool: raise RuntimeError(f"masked_select needs a bool mask tensor, got {getattr(mask, 'dtype', type(mask))}")
        from fusegrad.tensor import _broadcast_shape
        shape = _broadcast_shape(self.shape, mask.shape)
        x, m = self._broadcast_to(shape).flatten(), mask._broadcast_to(shape).flatten()
        if size is not None:
            positions, exists = self._nonzero_positions_sized(m, size)
            values = x.gather(0, positions) if x.shape[0] else Tensor.zeros(size, dtype=self.dtype, device=self.device)
            return exists.where(values, fill_value).cast(self.dtype)
        pos = self._nonzero_flat(m)
        if pos.shape[0] == 0: return x.shrink(((0, 0),))
        return x.gather(0, pos)

    def nonzero(self: "Tensor", size: int | None = None, fill_value: Any = 0) -> "Tensor":
        """Indices of the non-zero entries, shape ``(count, ndim)``, int32, in row-major order. With
        ``size=N`` the shape is ``(N, ndim)``: missing rows are ``fill_value``, extra ones dropped, and
        nothing is realized (the count isn't needed).

        >>> Tensor([0, 3, 0, 4]).nonzero().tolist()
        [[1], [3]]
        >>> Tensor([0, 3, 0, 4]).nonzero(size=3, fill_value=-1).tolist()
        [[1], [3], [-1]]
        """
        Tensor, dtypes = _T(), _dt()
        if size is not None: return self._nonzero_sized(size, fill_value)
        pos = self._nonzero_flat((self != 0).flatten() if self.ndim else (self != 0).reshape(1))
        if self.ndim == 0: return pos.reshape(pos.shape[0], 0)
        strides = [prod(self.shape[i + 1:]) for i in range(self.ndim)]
        if pos.shape[0] == 0: return Tensor.zeros(0, self.ndim, dtype=dtypes.int32, device=self.device)
        return Tensor.stack(*[pos.idiv(st).mod(sz) if sz else pos for st, sz in zip(strides, self.shape)], dim=-1)

    def _nonzero_sized(self: "Tensor", size: int, fill_value: Any) -> "Tensor":
        Tensor, dtypes = _T(), _dt()
        flat = (self != 0).flatten() if self.ndim else (self != 0).reshape(1)
        positions, exists = self._nonzero_positions_sized(flat, size)
        if self.ndim == 0: return Tensor.zeros(size, 0, dtype=dtypes.int32, device=self.device)
        strides = [prod(self.shape[i + 1:]) for i in range(self.ndim)]
        coords = Tensor.stack(*[positions.idiv(st).mod(sz) if sz else positions for st, sz in zip(strides, self.shape)], dim=-1)
        return exists.unsqueeze(-1).where(coords, fill_value).cast(dtypes.int32)

    # ================================================================ sorting
    def sort(self: "Tensor", dim: int = -1, descending: bool = False) -> tuple["Tensor", "Tensor"]:
        """Sort along ``dim`` with a bitonic network (log2(n)^2 stages, each one fused kernel).
        Returns (values, int32 indices); stable for ties like torch (equal values keep their order),
        nan sorts as the largest value.

        >>> [t.tolist() for t in Tensor([3, 1, 2]).sort()]
        [[1, 2, 3], [1, 2, 0]]
        """
        Tensor, dtypes = _T(), _dt()
        if self.ndim == 0: return self, Tensor.zeros((), dtype=dtypes.int32, device=self.device)
        dim = self._resolve_dim(dim)
        n = self.shape[dim]
        if n <= 1: return self, Tensor.zeros(*self.shape, dtype=dtypes.int32, device=self.device)
        work_dtype = dtypes.int32 if self.dtype == dtypes.bool else self.dtype
        is_float = dtypes.is_float(work_dtype)
        x = self.cast(work_dtype).transpose(dim, -1)
        lead = x.shape[:-1]
        stages = (n - 1).bit_length()
        N = 1 << stages
        # padding sorts last: ascending floats pad with nan (nan is the largest), the index breaks ties
        pad_value = dtypes.min(work_dtype) if descending else (math.nan if is_float else dtypes.max(work_dtype))
        v = x.pad([None] * len(lead) + [(0, N - n)], value=pad_value)
        i = Tensor.arange(N, device=self.device, requires_grad=False).reshape((1,) * len(lead) + (N,)).expand(*lead, N)
        # bit b of the position lives at axis -(b+1) after unflattening
        v, i = v.reshape(*lead, *(2,) * stages), i.reshape(*lead, *(2,) * stages)
        nd = len(lead) + stages

        def before(av, ai, bv, bi) -> "Tensor":
            """True where element a must come before b (total order with the index as tie break)."""
            if descending: strict = av > bv
            else: strict = av < bv
            tie = av == bv
            if is_float:
                an, bn = av.isnan(), bv.isnan()
                strict = (strict & an.logical_not() & bn.logical_not()) | ((an & bn.logical_not()) if descending else (an.logical_not() & bn))
                tie = tie | (an & bn)
            return strict | (tie & (ai < bi))

        def split(t: "Tensor", axis: int) -> tuple["Tensor", "Tensor"]:
            return (t.shrink(tuple((0, 1) if a == axis else None for a in range(nd))),
                    t.shrink(tuple((1, 2) if a == axis else None for a in range(nd))))

        def exchange(v: "Tensor", i: "Tensor", axis: int, mirror_axes: tuple) -> tuple:
            (av, bv), (ai, bi) = split(v, axis), split(i, axis)
            if mirror_axes: bv, bi = bv.flip(*mirror_axes), bi.flip(*mirror_axes)
            swap = before(bv, bi, av, ai)
            nav, nbv, nai, nbi = swap.where(bv, av), swap.where(av, bv), swap.where(bi, ai), swap.where(ai, bi)
            if mirror_axes: nbv, nbi = nbv.flip(*mirror_axes), nbi.flip(*mirror_axes)
            # one kernel per stage, forward and backward (else the stages fuse into one huge expression)
            return nav.cat(nbv, dim=axis).contiguous().contiguous_backward(), nai.cat(nbi, dim=axis).contiguous()

        for stage in range(1, stages + 1):
            for sub in range(stage - 1, -1, -1):
                axis = nd - 1 - sub
                mirror = tuple(nd - 1 - b for b in range(sub)) if sub == stage - 1 else ()
                v, i = exchange(v, i, axis, mirror)
        v, i = v.reshape(*lead, N).shrink(tuple([None] * len(lead) + [(0, n)])), i.reshape(*lead, N).shrink(tuple([None] * len(lead) + [(0, n)]))
        return v.transpose(dim, -1).cast(self.dtype), i.transpose(dim, -1).cast(dtypes.int32)

    def argsort(self: "Tensor", dim: int = -1, descending: bool = False) -> "Tensor":
        """Indices (int32) that sort the tensor along ``dim`` (stable).

        >>> Tensor([3, 1, 2]).argsort().tolist()
        [1, 2, 0]
        """
        return self.sort(dim, descending)[1]

    def topk(self: "Tensor", k: int, dim: int = -1, largest: bool = True, sorted_: bool = True, **kwargs: Any) -> tuple["Tensor", "Tensor"]:
        """The ``k`` largest (or smallest) entries along ``dim``: (values, int32 indices), sorted.
        ``sorted`` is accepted as a keyword too (torch spelling).

        >>> [t.tolist() for t in Tensor([1, 5, 3]).topk(2)]
        [[5, 3], [1, 2]]
        """
        if kwargs:
            unknown = set(kwargs) - {"sorted"}
            if unknown: raise TypeError(f"topk got unexpected keyword arguments {sorted(unknown)}")
            sorted_ = kwargs["sorted"]
        if not isinstance(k, int) or isinstance(k, bool): raise RuntimeError(f"topk k must be an int, got {k!r}")
        dim = self._resolve_dim(dim) if self.ndim else 0
        size = self.shape[dim] if self.ndim else 1
        if not 0 <= k <= size: raise ValueError(f"topk k={k} is out of range for dim {dim} of size {size}")
        values, idx = self.sort(dim, descending=largest)
        if self.ndim == 0: return values, idx
        keep = tuple((0, k) if d == dim else None for d in range(self.ndim))
        return values.shrink(keep), idx.shrink(keep)

    # ================================================================ random
    def multinomial(self: "Tensor", num_samples: int = 1, replacement: bool = False) -> "Tensor":
        """Sample indices (int32) from the categorical distribution(s) given by non-negative weights
        (1-d, or 2-d with one distribution per row). Without replacement every index appears once.

        >>> Tensor([0.0, 1.0]).multinomial(2, replacement=True).tolist()
        [1, 1]
        """
        Tensor, dtypes = _T(), _dt()
        if not 1 <= self.ndim <= 2: raise RuntimeError(f"multinomial needs a 1-d or 2-d tensor, got shape {self.shape}")
        if not isinstance(num_samples, int) or num_samples <= 0: raise RuntimeError(f"num_samples must be a positive int, got {num_samples!r}")
        weight = (self.unsqueeze(0) if self.ndim == 1 else self).float().detach()
        rows, n = weight.shape
        if not replacement and num_samples > n:
            raise RuntimeError(f"can't take {num_samples} samples without replacement from {n} categories")
        if not replacement and num_samples > 1:
            # Efraimidis-Spirakis: the num_samples largest log2(u)/w (u uniform) are a sample without
            # replacement; the same draws as tinygrad's, so a seeded run picks the same indices
            u = Tensor.rand(rows, n, device=self.device)
            indices = (u.log2() / weight).topk(num_samples, dim=1)[1]
        else:
            cw = weight.cumsum(1)
            cdf = cw / cw[:, -1:]
            unif = Tensor.rand(num_samples, rows, 1, device=self.device)
            indices = (unif.expand(-1, -1, n) >= cdf).sum(2, dtype=dtypes.int32).minimum(n - 1).permute(1, 0)
        return (indices.squeeze(0) if self.ndim == 1 else indices).cast(dtypes.int32)

    @staticmethod
    def randperm(n: int, device: str | None = None, dtype: Any = None, **kwargs: Any) -> "Tensor":
        """A random permutation of ``0..n-1`` (int32 by default).

        >>> sorted(Tensor.randperm(4).tolist())
        [0, 1, 2, 3]
        """
        Tensor, dtypes = _T(), _dt()
        if not isinstance(n, int) or n < 0: raise ValueError(f"randperm needs a non-negative int, got {n!r}")
        dtype = dtype if dtype is not None else dtypes.int32
        if n == 0: return Tensor.zeros(0, device=device, dtype=dtype, **kwargs)
        r = Tensor.rand(n, device=device)
        return Tensor(r.argsort().cast(dtype).uop, **kwargs)

    # ================================================================ einsum
    @staticmethod
    def einsum(formula: str, *operands: "Tensor | Sequence[Tensor]", acc_dtype: Any = None, dtype: Any = None) -> "Tensor":
        """Einstein summation: ``Tensor.einsum("ij,jk->ik", a, b)`` is ``a @ b``. Without ``->`` the
        output is the sorted letters that appear once; ``...`` stands for broadcast dims; a letter
        repeated in one operand takes its diagonal.

        >>> Tensor.einsum("i,i", Tensor([1.0, 2.0]), Tensor([3.0, 4.0])).item()
        11.0
        """
        Tensor = _T()
        xs = argfix(*operands)
        if not isinstance(formula, str): raise TypeError(f"einsum formula must be a string, got {type(formula).__name__}")
        if not xs or not all(isinstance(x, Tensor) for x in xs): raise ValueError("einsum needs Tensor operands")
        formula = formula.replace(" ", "")
        lhs, arrow, out = formula.partition("->")
        inputs = lhs.split(",")
        if len(inputs) != len(xs): raise ValueError(f"einsum formula has {len(inputs)} operands but {len(xs)} tensors were given")
        for s in inputs + ([out] if arrow else []):
            if s.replace("...", "").strip(string.ascii_letters) or s.count("...") > 1 or "." in s.replace("...", ""):
                raise ValueError(f"invalid einsum subscripts {s!r} in {formula!r}")
        # ellipsis: right-aligned broadcast dims named with unused letters
        spare = [c for c in string.ascii_letters if c not in formula]
        ell_counts = []
        for s, x in zip(inputs, xs):
            named = len(s.replace("...", ""))
            if "..." in s:
                if x.ndim < named: raise RuntimeError(f"einsum operand {s!r} has more subscripts than dims {x.shape}")
                ell_counts.append(x.ndim - named)
            elif x.ndim != named: raise RuntimeError(f"einsum operand {s!r} needs {named} dims, got shape {x.shape}")
        n_ell = max(ell_counts, default=0)
        ell = "".join(spare[:n_ell])
        inputs = [s.replace("...", ell[n_ell - (x.ndim - len(s.replace('...', ''))):] if "..." in s else "") for s, x in zip(inputs, xs)]
        if arrow: output = out.replace("...", ell)
        else:
            joined = "".join(inputs)
            output = ell + "".join(sorted(c for c in set(joined) if joined.count(c) == 1 and c not in ell))
        if len(set(output)) != len(output): raise RuntimeError(f"einsum output {output!r} repeats a subscript")
        all_letters = set("".join(inputs))
        for c in output:
            if c not in all_letters: raise RuntimeError(f"einsum output subscript {c!r} doesn't appear in the inputs")
        # sizes per letter (size 1 broadcasts)
        sizes: dict[str, int] = {}
        for s, x in zip(inputs, xs):
            for c, n in zip(s, x.shape):
                if c in sizes and sizes[c] != n and sizes[c] != 1 and n != 1:
                    raise RuntimeError(f"einsum subscript {c!r} has mismatched sizes {sizes[c]} and {n}")
                if c not in sizes or sizes[c] == 1: sizes[c] = n
        letters = sorted(sizes)
        expanded = []
        for s, x in zip(inputs, xs):
            # repeated letters in one operand: take the diagonal
            while len(set(s)) != len(s):
                c = next(c for c in s if s.count(c) > 1)
                a = s.index(c)
                b = s.index(c, a + 1)
                if x.shape[a] != x.shape[b]: raise RuntimeError(f"einsum repeated subscript {c!r} needs equal sizes, got {x.shape}")
                x = x.diagonal(0, a, b)
                s = s[:a] + s[a + 1:b] + s[b + 1:] + c
            order = sorted(range(len(s)), key=lambda k: s[k])
            x = x.permute(order) if s else x
            have = [s[k] for k in order]
            x = x.reshape([x.shape[have.index(c)] if c in have else 1 for c in letters])
            expanded.append(x.expand([sizes[c] for c in letters]))
        product = functools.reduce(lambda a, b: a * b, expanded)
        reduce_axes = [k for k, c in enumerate(letters) if c not in output]
        result = product.sum(reduce_axes, acc_dtype=acc_dtype, dtype=dtype) if reduce_axes else product
        remaining = [c for c in letters if c in output]
        return result.permute([remaining.index(c) for c in output]) if output else result

    # ================================================================ resampling
    def interpolate(self: "Tensor", size: Sequence[int] | None = None, mode: str = "linear", align_corners: bool = False,
                    scale_factor: Any = None) -> "Tensor":
        """Resize the last ``len(size)`` dims. ``mode``: 'nearest', 'nearest-exact', 'linear'
        ('bilinear'/'trilinear'/'bicubic' not: the first two are aliases of 'linear').

        >>> Tensor([[[1.0, 3.0]]]).interpolate((3,), align_corners=True).tolist()
        [[[1.0, 2.0, 3.0]]]
        """
        Tensor, dtypes = _T(), _dt()
        if mode in ("bilinear", "trilinear"): mode = "linear"
        if mode not in ("linear", "nearest", "nearest-exact"): raise NotImplementedError(f"interpolate mode must be linear, bilinear, trilinear, nearest or nearest-exact, got {mode!r}")
        if align_corners and mode != "linear": raise ValueError("align_corners can only be set with a linear mode")
        if size is None:
            if scale_factor is None: raise ValueError("interpolate needs size or scale_factor")
            dims = len(scale_factor) if isinstance(scale_factor, (tuple, list)) else self.ndim - 2
            sf = scale_factor if isinstance(scale_factor, (tuple, list)) else (scale_factor,) * dims
            size = tuple(int(math.floor(self.shape[-dims + k] * f)) for k, f in enumerate(sf))
        if isinstance(size, int): size = (size,) * max(1, self.ndim - 2)
        if not isinstance(size, (tuple, list)) or not all(isinstance(s, int) and s > 0 for s in size) or not 0 < len(size) <= self.ndim:
            raise ValueError(f"invalid interpolate size {size!r} for shape {self.shape}")
        x, expand = self._float() if mode == "linear" else self, list(self.shape)
        for k in range(-1, -len(size) - 1, -1):
            n_in, n_out = self.shape[k], size[k]
            reshape = [1] * self.ndim
            reshape[k] = expand[k] = n_out
            arr = Tensor.arange(n_out, dtype=dtypes.float32, device=self.device, requires_grad=False)
            if mode == "linear":
                if align_corners: index = arr * ((n_in - 1) / (n_out - 1)) if n_out > 1 else arr * 0
                else: index = ((arr + 0.5) * (n_in / n_out) - 0.5).clip(0, n_in - 1)
                index = index.clip(0, n_in - 1)
                low, high = index.floor().cast(dtypes.int32), index.ceil().cast(dtypes.int32)
                perc = (index - index.floor()).reshape(reshape).expand(expand).cast(x.dtype)
                low, high = low.reshape(reshape).expand(expand), high.reshape(reshape).expand(expand)
                x = x.gather(k, low).lerp(x.gather(k, high), perc)
            else:
                scale = n_in / n_out
                index = ((arr + 0.5) * scale).floor() if mode == "nearest-exact" else (arr * scale).floor()
                index = index.cast(dtypes.int32).minimum(n_in - 1).reshape(reshape).expand(expand)
                x = x.gather(k, index)
        return x.cast(self.dtype) if mode != "linear" or dtypes.is_float(self.dtype) else x

    # ================================================================ movement helpers
    def repeat(self: "Tensor", repeats: Any, *args: Any) -> "Tensor":
        """Tile the tensor: ``repeats`` per dim (more repeats than dims add leading dims).

        >>> Tensor([1, 2]).repeat(2).tolist()
        [1, 2, 1, 2]
        """
        repeats = argfix(repeats, *args)
        if len(repeats) < self.ndim: raise ValueError(f"repeat needs at least {self.ndim} repeats for shape {self.shape}, got {repeats}")
        _nonneg_ints(repeats, "repeats")
        base_shape = (1,) * (len(repeats) - self.ndim) + self.shape
        unsqueezed = flatten([[s] if r == 1 else [1, s] for r, s in zip(repeats, base_shape)])
        expanded = flatten([[s] if r == 1 else [r, s] for r, s in zip(repeats, base_shape)])
        final = [r * s for r, s in zip(repeats, base_shape)]
        return self.reshape(unsqueezed).expand(expanded).reshape(final)

    def repeat_interleave(self: "Tensor", repeats: "int | Sequence[int] | Tensor", dim: int | None = None) -> "Tensor":
        """Repeat each element ``repeats`` times along ``dim`` (flattened if None). ``repeats`` may
        also be one count per element (then the output size depends on the counts).

        >>> Tensor([1, 2]).repeat_interleave(2).tolist()
        [1, 1, 2, 2]
        """
        Tensor, dtypes = _T(), _dt()
        x, dim = (self.flatten(), 0) if dim is None else (self, self._resolve_dim(dim))
        if isinstance(repeats, int) and not isinstance(repeats, bool):
            if repeats < 0: raise ValueError(f"repeats must be non-negative, got {repeats}")
            shp = x.shape
            return x.reshape(*shp[:dim + 1], 1, *shp[dim + 1:]).expand(*shp[:dim + 1], repeats, *shp[dim + 1:]).flatten(dim, dim + 1)
        counts = [int(r) for r in (repeats.tolist() if isinstance(repeats, Tensor) else repeats)]
        if isinstance(repeats, Tensor) and repeats.ndim == 0: return x.repeat_interleave(counts[0] if isinstance(counts, list) else int(repeats.item()), dim)
        if len(counts) == 1: return x.repeat_interleave(counts[0], dim)
        if len(counts) != x.shape[dim] or any(c < 0 for c in counts):
            raise ValueError(f"repeats must be non-negative and have {x.shape[dim]} entries, got {counts}")
        index = [k for k, c in enumerate(counts) for _ in range(c)]
        if not index: return x.shrink(tuple((0, 0) if d == dim else None for d in range(x.ndim)))
        return x[(slice(None),) * dim + (Tensor(index, dtype=dtypes.int32, device=self.device),)]

    def split(self: "Tensor", sizes: int | Sequence[int], dim: int = 0) -> tuple["Tensor", ...]:
        """Pieces of ``sizes`` (an int: equal pieces, the last may be smaller) along ``dim``.

        >>> [t.tolist() for t in Tensor([1, 2, 3]).split(2)]
        [[1, 2], [3]]
        """
        dim = self._resolve_dim(dim)
        n = self.shape[dim]
        if isinstance(sizes, int) and not isinstance(sizes, bool):
            if sizes <= 0 and n: raise RuntimeError(f"split size must be positive, got {sizes}")
            sizes = [min(sizes, n - i) for i in range(0, max(1, n), max(1, sizes))]
        sizes = list(sizes)
        _nonneg_ints(sizes, "split sizes")
        if sum(sizes) != n: raise RuntimeError(f"split sizes {sizes} must sum to the size {n} of dim {dim}")
        offsets = list(itertools.accumulate(sizes, initial=0))
        return tuple(self.shrink(tuple((offsets[k], offsets[k + 1]) if d == dim else None for d in range(self.ndim))) for k in range(len(sizes)))

    def chunk(self: "Tensor", chunks: int, dim: int = 0) -> list["Tensor"]:
        """Split into ``chunks`` pieces of size ceil(n/chunks) (fewer if it doesn't divide evenly).

        >>> [t.tolist() for t in Tensor([1, 2, 3]).chunk(2)]
        [[1, 2], [3]]
        """
        if not isinstance(chunks, int) or chunks <= 0: raise RuntimeError(f"chunks must be a positive int, got {chunks!r}")
        dim = self._resolve_dim(dim)
        n = self.shape[dim]
        return list(self.split(ceildiv(n, chunks) if n else [0] * chunks, dim=dim))

    def unfold(self: "Tensor", dim: int, size: int, step: int) -> "Tensor":
        """All windows of ``size`` with ``step`` along ``dim``; the window is a new last dim.

        >>> Tensor([1, 2, 3, 4]).unfold(0, 2, 2).tolist()
        [[1, 2], [3, 4]]
        """
        if not isinstance(size, int) or size < 0: raise RuntimeError(f"unfold size must be >= 0, got {size!r}")
        if not isinstance(step, int) or step <= 0: raise RuntimeError(f"unfold step must be > 0, got {step!r}")
        if self.ndim == 0:
            if size > 1: raise RuntimeError(f"unfold size {size} is larger than a 0-d tensor")
            return self.reshape(1)
        dim = self._resolve_dim(dim)
        if size > self.shape[dim]: raise RuntimeError(f"unfold size {size} is larger than dim {dim} of size {self.shape[dim]}")
        perm = tuple(i for i in range(self.ndim) if i != dim) + (dim,)
        x = self.permute(perm)
        if size == 0:
            count = self.shape[dim] // step + 1
            win = x.reshape(*x.shape[:-1], x.shape[-1], 1).shrink(tuple([None] * (self.ndim - 1) + [(0, 0), (0, 1)]))
            win = win.reshape(*x.shape[:-1], 0, 1).pad(tuple([None] * (self.ndim - 1) + [(0, count), None])).shrink(tuple([None] * self.ndim + [(0, 0)]))
        else: win = x._pool((size,), step)
        return win.permute(*argsort(perm), self.ndim)

    def meshgrid(self: "Tensor", *args: "Tensor", indexing: str = "ij") -> tuple["Tensor", ...]:
        """Coordinate grids from 1-d tensors: ``Tensor.meshgrid(x, y)`` (``indexing`` 'ij' or 'xy').

        >>> [t.tolist() for t in Tensor.meshgrid(Tensor([1, 2]), Tensor([3]))]
        [[[1], [2]], [[3], [3]]]
        """
        from fusegrad.tensor import _broadcast_shape
        if indexing not in ("ij", "xy"): raise RuntimeError(f"meshgrid indexing must be 'ij' or 'xy', got {indexing!r}")
        tensors = (self, *args)
        for t in tensors:
            if t.ndim > 1: raise RuntimeError(f"meshgrid needs 0-d or 1-d tensors, got shape {t.shape}")
        tensors = tuple(t.reshape(-1) if t.ndim == 0 else t for t in tensors)
        if len(tensors) == 1: return tensors
        basis = tuple(range(len(tensors))) if indexing == "ij" else (1, 0) + tuple(range(2, len(tensors)))
        tensors = tuple(t.reshape((-1,) + (1,) * (len(tensors) - 1 - b)) for b, t in zip(basis, tensors))
        out = _broadcast_shape(*(t.shape for t in tensors))
        return tuple(t._broadcast_to(out) for t in tensors)

    def roll(self: "Tensor", shifts: int | Sequence[int], dims: int | Sequence[int] | None = None) -> "Tensor":
        """Rotate elements along ``dims`` by ``shifts`` (flattened if ``dims`` is None).

        >>> Tensor([1, 2, 3]).roll(1).tolist()
        [3, 1, 2]
        """
        if dims is None:
            if not isinstance(shifts, int): raise RuntimeError(f"roll without dims needs a single int shift, got {shifts!r}")
            return self.flatten().roll(shifts, 0).reshape(self.shape)
        dims_t = (dims,) if isinstance(dims, int) else tuple(dims)
        shifts_t = (shifts,) if isinstance(shifts, int) else tuple(shifts)
        if len(dims_t) != len(shifts_t): raise RuntimeError(f"roll needs as many shifts as dims, got {shifts!r} and {dims!r}")
        x = self
        for d, s in zip(dims_t, shifts_t):
            d = self._resolve_dim(d)
            n = self.shape[d]
            if n == 0: continue
            s %= n
            if s == 0: continue
            x = x.repeat(*[2 if i == d else 1 for i in range(self.ndim)]).shrink(tuple((n - s, 2 * n - s) if i == d else None for i in range(self.ndim)))
        return x

    def rearrange(self: "Tensor", formula: str, **sizes: int) -> "Tensor":
        """einops-style reshape/transpose: ``t.rearrange("b (h w) c -> b c h w", h=2)``.

        >>> Tensor([[1, 2], [3, 4]]).rearrange("a b -> (b a)").tolist()
        [1, 3, 2, 4]
        """
        def parse(side: str) -> list[list[str] | str]:
            tokens = side.replace("…", "...").replace("(", " ( ").replace(")", " ) ").split()
            groups: list[list[str] | str] = []
            current: list[str] | None = None
            for tok in tokens:
                if tok == "(":
                    if current is not None: raise ValueError(f"nested parentheses in {formula!r}")
                    current = []
                elif tok == ")":
                    if current is None: raise ValueError(f"unbalanced parentheses in {formula!r}")
                    groups.append(current)
                    current = None
                elif current is not None: current.append(tok)
                else: groups.append(tok)
            if current is not None: raise ValueError(f"unbalanced parentheses in {formula!r}")
            return groups

        if not isinstance(formula, str) or formula.count("->") != 1: raise ValueError(f'rearrange formula needs exactly one "->", got {formula!r}')
        lhs_s, rhs_s = formula.split("->")
        lhs, rhs = parse(lhs_s), parse(rhs_s)
        def names(groups) -> list[str]: return [n for g in groups for n in (g if isinstance(g, list) else [g]) if n != "1"]
        ln, rn = names(lhs), names(rhs)
        for n in ln + rn:
            if n != "..." and not (n.isidentifier() or n.isdigit()): raise ValueError(f"invalid axis name {n!r} in {formula!r}")
            if n.isdigit() and n != "1": raise ValueError(f"only 1 is allowed as a number in {formula!r}")
        if len(set(ln)) != len(ln) or sorted(ln) != sorted(rn): raise RuntimeError(f"rearrange names must match on both sides (each once): {formula!r}")
        for name in sizes:
            if name not in ln: raise ValueError(f"axis {name!r} is not used in {formula!r}")
        if any(isinstance(g, list) and "..." in g for g in lhs): raise ValueError(f"'...' can't be inside parentheses on the left: {formula!r}")
        if len(lhs) - ("..." in lhs) > self.ndim or ("..." not in lhs and len(lhs) != self.ndim):
            raise IndexError(f"rearrange pattern {lhs_s.strip()!r} doesn't match shape {self.shape}")
        ell_len = self.ndim - (len(lhs) - 1) if "..." in lhs else 0
        ell_names = [f"...{j}" for j in range(ell_len)]
        def expand_ell(groups):
            out = []
            for g in groups:
                if g == "...": out.extend(ell_names)
                elif isinstance(g, list): out.append([x for n in g for x in (ell_names if n == "..." else [n])])
                else: out.append(g)
            return out
        lhs, rhs = expand_ell(lhs), expand_ell(rhs)
        # unflatten the left side
        new_shape: list[int] = []
        order: list[str] = []
        for g, s in zip(lhs, self.shape):
            if isinstance(g, list):
                real = [n for n in g if n != "1"]
                known = prod(sizes[n] for n in real if n in sizes)
                unknown = [n for n in real if n not in sizes]
                if len(unknown) > 1: raise RuntimeError(f"can't infer the sizes of {unknown} in {formula!r}")
                if unknown:
                    if known == 0 or s % known: raise ValueError(f"dim of size {s} can't be split by {sizes} in {formula!r}")
                    sizes = {**sizes, unknown[0]: s // known}
                elif known != s: raise ValueError(f"sizes {[sizes[n] for n in real]} don't multiply to {s} in {formula!r}")
                new_shape.extend(sizes[n] for n in real)
                order.extend(real)
            elif g == "1":
                if s != 1: raise ValueError(f"axis '1' needs size 1, got {s} in {formula!r}")
            else:
                if g in sizes and sizes[g] != s: raise ValueError(f"size provided for axis {g!r} is {sizes[g]}, but it is {s}")
                new_shape.append(s)
                order.append(g)
        t = self.reshape(new_shape)
        rhs_flat = [n for g in rhs for n in (g if isinstance(g, list) else [g]) if n != "1"]
        t = t.permute([order.index(n) for n in rhs_flat]) if rhs_flat else t
        final = []
        dims = dict(zip(order, new_shape))
        for g in rhs:
            if isinstance(g, list): final.append(prod(dims[n] for n in g if n != "1"))
            elif g == "1": final.append(1)
            else: final.append(dims[g])
        return t.reshape(final)

    # ================================================================ linear algebra
    def qr(self: "Tensor") -> tuple["Tensor", "Tensor"]:
        """QR decomposition by Householder reflections over the last two dims (batched): Q is
        ``(..., m, m)`` orthogonal, R ``(..., m, n)`` upper triangular, signs like LAPACK/torch.

        >>> Q, R = Tensor([[3.0, 0.0], [4.0, 1.0]]).qr()
        >>> [round(v, 4) for v in R[0].tolist()]
        [-5.0, -0.8]
        """
        Tensor, dtypes = _T(), _dt()
        if self.ndim < 2: raise RuntimeError(f"qr needs at least 2 dims, got shape {self.shape}")
        if not dtypes.is_float(self.dtype): raise TypeError(f"qr needs a float tensor, got {self.dtype}")
        b_shape, m, n = self.shape[:-2], self.shape[-2], self.shape[-1]
        R = self
        Q = Tensor.eye(m, dtype=self.dtype, device=self.device).reshape((1,) * len(b_shape) + (m, m)).expand(*b_shape, m, m)
        for i in range(min(m - 1, n) if m > 1 else 0):
            x = R[..., i:m, i]                                     # (..., m-i)
            x0 = x[..., 0:1]
            norm = x.square().sum(-1, keepdim=True).sqrt()
            s = (x0 != 0).where(-x0.sign(), -1.0)
            u1 = x0 - s * norm
            safe_u1 = (u1 == 0).where(1.0, u1)
            w = Tensor.cat(x0 * 0 + 1, x[..., 1:] / safe_u1, dim=-1) if m - i > 1 else x0 * 0 + 1
            tau = (norm == 0).where(0.0, -s * u1 / (norm == 0).where(1.0, norm))   # (..., 1)
            v = w.pad(tuple([None] * len(b_shape) + [(i, 0)])).unsqueeze(-1)          # (..., m, 1)
            tau = tau.unsqueeze(-1)                                                   # (..., 1, 1)
            v, tau = v.contiguous().contiguous_backward(), tau.contiguous().contiguous_backward()
            R = (R - (v * tau) @ (v.transpose(-2, -1) @ R)).contiguous().contiguous_backward()
            Q = (Q - (Q @ v) @ (tau * v).transpose(-2, -1)).contiguous().contiguous_backward()
        return Q, R

    def svd(self: "Tensor", full_matrices: bool = True) -> tuple["Tensor", "Tensor", "Tensor"]:
        """Singular value decomposition ``A = U @ diag(S) @ Vh`` by one-sided Jacobi rotations over
        the last two dims (batched; meant for small matrices). S is descending.

        >>> U, S, Vh = Tensor([[3.0, 0.0], [0.0, -2.0]]).svd()
        >>> [round(v, 4) for v in S.tolist()]
        [3.0, 2.0]
        """
        Tensor, dtypes = _T(), _dt()
        if self.ndim < 2: raise RuntimeError(f"svd needs at least 2 dims, got shape {self.shape}")
        if not dtypes.is_float(self.dtype): raise TypeError(f"svd needs a float tensor, got {self.dtype}")
        m, n = self.shape[-2], self.shape[-1]
        if m < n:
            U, S, Vh = self.transpose(-2, -1).svd(full_matrices)
            return Vh.transpose(-2, -1), S, U.transpose(-2, -1)
        b_shape, k = self.shape[:-2], n
        # A = Q R, then SVD of the square top of R
        if m > n:
            Q, Rfull = self.qr()
            B = Rfull[..., :n, :]
        else: Q, B = None, self
        nn_ = n + (n % 2)                      # even number of columns for the round-robin pairs
        W = B.pad(tuple([None] * len(b_shape) + [None, (0, nn_ - n)])) if nn_ != n else B
        V = Tensor.eye(nn_, dtype=self.dtype, device=self.device).reshape((1,) * len(b_shape) + (nn_, nn_)).expand(*b_shape, nn_, nn_)
        h = nn_ // 2
        players = list(range(nn_))
        sweeps = 10 if dtypes.concrete(self.dtype).itemsize >= 4 else 6
        eps = 1e-30
        for _ in range(sweeps if nn_ > 1 else 0):
            for _r in range(nn_ - 1):
                top, bottom = players[:h], players[h:][::-1]
                perm = top + bottom
                P = Tensor(_perm_matrix(perm), dtype=self.dtype, device=self.device)   # columns reordered: pairs (k, h+k)
                Wp, Vp = W @ P, V @ P
                wp, wq = Wp[..., :h], Wp[..., h:]
                vp, vq = Vp[..., :h], Vp[..., h:]
                alpha, beta, gamma = wp.square().sum(-2, keepdim=True), wq.square().sum(-2, keepdim=True), (wp * wq).sum(-2, keepdim=True)
                rotate = gamma.abs() > 1e-12 * (alpha * beta).sqrt() + eps
                zeta = (beta - alpha) / (2 * rotate.where(gamma, 1.0))
                t = (zeta >= 0).where(1.0, -1.0) / (zeta.abs() + (1 + zeta.square()).sqrt())
                t = rotate.where(t, 0.0)
                c = (1 + t.square()).rsqrt()
                sn = c * t
                W2 = Tensor.cat(c * wp - sn * wq, sn * wp + c * wq, dim=-1)
                V2 = Tensor.cat(c * vp - sn * vq, sn * vp + c * vq, dim=-1)
                W, V = (W2 @ P.T).contiguous(), (V2 @ P.T).contiguous()
                players = [players[0]] + [players[-1]] + players[1:-1]
        W, V = W[..., :n, :n] if nn_ != n else W, V[..., :n, :n] if nn_ != n else V
        S = W.square().sum(-2).sqrt()                                # (..., n)
        order = S.detach().argsort(-1, descending=True)             # (..., n)
        S = S.gather(-1, order)
        idx = order.unsqueeze(-2).expand(*b_shape, n, n)
        W, V = W.gather(-1, idx), V.gather(-1, idx)
        U = W / (S == 0).where(1.0, S).unsqueeze(-2)
        Vh = V.transpose(-2, -1)
        if Q is None: return U, S, Vh
        if full_matrices:
            # U_full = Q @ blockdiag(U, I)
            block = U.pad(tuple([None] * len(b_shape) + [(0, m - n), (0, m - n)])) + _tail_mask(m, n, self.dtype, self.device)
            return Q @ block, S, Vh
        return Q[..., :, :n] @ U, S, Vh


def _perm_matrix(perm: list[int]) -> list[list[float]]:
    """P with ``A @ P`` taking column ``perm[j]`` of A as column j."""
    n = len(perm)
    return [[1.0 if perm[j] == r else 0.0 for j in range(n)] for r in range(n)]

def _tail_mask(m: int, n: int, dtype, device) -> "Tensor":
    """(m, m) mask with ones on the diagonal entries past ``n`` (to complete U with the rest of Q)."""
    Tensor = _T()
    r = Tensor.arange(m, device=device).reshape(m, 1)
    c = Tensor.arange(m, device=device).reshape(1, m)
    return ((r == c) & (r >= n)).cast(dtype)
