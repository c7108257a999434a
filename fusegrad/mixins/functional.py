"""The functional nn API: linear, sequential, norms, dropout, one_hot, attention and losses.

Everything here is written with core Tensor ops only, so autograd covers it for free.

>>> from fusegrad import Tensor
>>> Tensor([[1.0, 2.0]]).linear(Tensor([[1.0], [1.0]]), Tensor([0.5])).tolist()
[[3.5]]
"""
from __future__ import annotations
import functools, math
from typing import TYPE_CHECKING, Any, Callable, Sequence
if TYPE_CHECKING: from fusegrad.tensor import Tensor

REDUCTIONS = ("none", "sum", "mean")

def _tensor_cls():
    from fusegrad.tensor import Tensor
    return Tensor

def _dtypes():
    from fusegrad.dtype import dtypes
    return dtypes

def _check_reduction(reduction: str) -> None:
    if reduction not in REDUCTIONS: raise ValueError(f"reduction={reduction!r} must be one of {REDUCTIONS}")

def _check_label_smoothing(label_smoothing: float) -> None:
    if not 0.0 <= label_smoothing <= 1.0: raise RuntimeError(f"label_smoothing={label_smoothing} must be in [0.0, 1.0]")

def _check_index_dtype(Y: "Tensor", what: str) -> None:
    dtypes = _dtypes()
    if not (dtypes.is_int(Y.dtype) or dtypes.is_float(Y.dtype)) or Y.dtype == dtypes.bool:
        raise TypeError(f"{what} needs integer class indices, got a {Y.dtype} tensor")

def _check_targets(Y: "Tensor", num_classes: int, classes_dim: int, ignore_index: int | None = None) -> None:
    """Class-index targets outside [0, num_classes) (other than ``ignore_index``) select no class and silently
    add nothing to a loss: PyTorch's IndexError, where the values are known on the host (indexing.py)."""
    from fusegrad.indexing import check_index_bounds
    check_index_bounds(Y, num_classes, classes_dim, negative=False, what="target", allowed=ignore_index)

class FunctionalMixin:
    """Mixed into Tensor. Methods here build on the core Tensor ops only."""
    __slots__ = ()

    # ---------------------------------------------------------------- layers as functions
    def linear(self: "Tensor", weight: "Tensor", bias: "Tensor | None" = None, dtype: Any = None) -> "Tensor":
        """``x @ weight + bias`` with ``weight`` shaped (in, out) like tinygrad (a 1-d weight multiplies
        elementwise instead).

        >>> Tensor([[1.0, 2.0]]).linear(Tensor([[1.0, 0.0], [0.0, 1.0]]), Tensor([1.0, 1.0])).tolist()
        [[2.0, 3.0]]
        """
        if dtype is not None:
            return self.cast(dtype).linear(weight.cast(dtype), bias.cast(dtype) if bias is not None else None)
        if weight.ndim == 1:
            if self.ndim == 0 or self.shape[-1] != weight.shape[0]:
                raise IndexError(f"linear with a 1-d weight needs x.shape[-1] == {weight.shape[0]}, got x of shape {self.shape}")
            x = self.mul(weight)
        else: x = self.dot(weight)
        return x.add(bias) if bias is not None else x

    def sequential(self: "Tensor", ll: Sequence[Callable[["Tensor"], "Tensor"]]) -> "Tensor":
        """Apply each callable in turn: ``x.sequential([f, g]) == g(f(x))``.

        >>> Tensor([-1.0, 2.0]).sequential([Tensor.relu, lambda t: t * 2]).tolist()
        [0.0, 4.0]
        """
        for i, f in enumerate(ll):
            if not callable(f): raise TypeError(f"sequential needs callables, item {i} is a {type(f).__name__}")
        return functools.reduce(lambda x, f: f(x), ll, self)

    def layernorm(self: "Tensor", axis: int | tuple[int, ...] = -1, eps: float = 1e-5) -> "Tensor":
        """Normalize to zero mean and unit (biased) variance over ``axis``, without an affine part.

        >>> [round(v, 3) for v in Tensor([1.0, 3.0]).layernorm().tolist()]
        [-1.0, 1.0]
        """
        y = self - self.mean(axis, keepdim=True)
        return y.mul((y * y).mean(axis, keepdim=True).add(eps).rsqrt())

    def batchnorm(self: "Tensor", weight: "Tensor | None", bias: "Tensor | None", mean: "Tensor", invstd: "Tensor",
                                axis: int | tuple[int, ...] = 1) -> "Tensor":
        """``(x - mean) * weight * invstd + bias`` with the statistics laid along ``axis`` (the channel
        axis, 1 by default). ``invstd`` is ``1/sqrt(var + eps)``.

        >>> Tensor([[1.0, 2.0]]).batchnorm(None, None, Tensor([1.0, 1.0]), Tensor([2.0, 2.0])).tolist()
        [[0.0, 2.0]]
        """
        axes = tuple(self._resolve_dim(a) for a in ((axis,) if isinstance(axis, int) else axis))
        shape = tuple(s if i in axes else 1 for i, s in enumerate(self.shape))
        stat_shape = tuple(self.shape[a] for a in axes)

        def as_stat(t: "Tensor", name: str) -> "Tensor":
            if t.numel() != math.prod(stat_shape):
                raise ValueError(f"batchnorm {name} of shape {t.shape} doesn't match the {stat_shape} channels of x {self.shape} on axis {axis}")
            return t.reshape(shape)
        x = self - as_stat(mean, "mean")
        if weight is not None: x = x * as_stat(weight, "weight")
        ret = x.mul(as_stat(invstd, "invstd") if invstd.ndim != 0 else invstd)
        return ret + as_stat(bias, "bias") if bias is not None else ret

    def dropout(self: "Tensor", p: float = 0.5) -> "Tensor":
        """In training mode (``Tensor.train()`` / ``Context(TRAINING=1)``) zero each element with
        probability ``p`` and scale the rest by ``1/(1-p)``; outside training it is the identity.

        >>> Tensor([1.0, 2.0]).dropout(0.5).tolist()   # not training: unchanged
        [1.0, 2.0]
        """
        if not isinstance(p, (int, float)) or not 0 <= p <= 1: raise ValueError(f"dropout probability p={p!r} must be in [0, 1]")
        Tensor = _tensor_cls()
        if not Tensor.training or p == 0: return self
        dtypes = _dtypes()
        if p == 1: return Tensor.full(self.shape, False, dtype=dtypes.bool, device=self.device).where(self, 0)
        keep = Tensor.rand(*self.shape, device=self.device, dtype=dtypes.default_float, requires_grad=False) >= p
        return keep.where(self, 0) / (1.0 - p)

    # ---------------------------------------------------------------- one-hot
    def _one_hot_along_dim(self: "Tensor", num_classes: int, dim: int = -1) -> "Tensor":
        """Bool tensor: ``self == arange(num_classes)`` with the arange laid along ``dim`` (``self``
        must have size 1 there). Values outside [0, num_classes) give all-False rows."""
        Tensor = _tensor_cls()
        offset = self.ndim - self._resolve_dim(dim) - 1
        classes = Tensor.arange(num_classes, device=self.device, requires_grad=False)
        if classes.dtype != self.dtype: classes = classes.cast(self.dtype)
        return self == classes.reshape((num_classes,) + (1,) * offset)

    def one_hot(self: "Tensor", num_classes: int | None = None) -> "Tensor":
        """A new last axis of size ``num_classes`` holding 1 at each index (int32, like tinygrad).
        Left out, it is ``max + 1`` (this reads the values, so it realizes the input and
        checks that no index is negative). With an explicit ``num_classes``, indices outside
        [0, num_classes) are not checked and give a row of zeros.

        >>> Tensor([0, 2]).one_hot(3).tolist()
        [[1, 0, 0], [0, 0, 1]]
        """
        dtypes = _dtypes()
        if not dtypes.is_int(self.dtype): raise RuntimeError(f"one_hot needs an integer tensor, got {self.dtype}")
        if num_classes is not None and (not isinstance(num_classes, int) or num_classes < 0):
            raise ValueError(f"num_classes must be a non-negative int (or left out to infer it), got {num_classes!r}")
        if num_classes is None:
            if self.numel() == 0: raise RuntimeError("one_hot can't infer the number of classes from an empty tensor")
            Tensor = _tensor_cls()
            low, high = Tensor.stack(self.min().cast(dtypes.int64), self.max().cast(dtypes.int64)).tolist()
            if low < 0: raise RuntimeError(f"one_hot class values must be non-negative, got {low}")
            num_classes = int(high) + 1
        else:   # a value outside [0, num_classes) would give a row of zeros: PyTorch's RuntimeError where it is known
            from fusegrad.indexing import check_index_bounds
            check_index_bounds(self, num_classes, -1, negative=False, error=RuntimeError, what="one_hot class value")
        return self[..., None]._one_hot_along_dim(num_classes).cast(dtypes.default_int)

    # ---------------------------------------------------------------- attention
    def scaled_dot_product_attention(self: "Tensor", key: "Tensor", value: "Tensor", attn_mask: "Tensor | None" = None,
                                                                      dropout_p: float = 0.0, is_causal: bool = False, enable_gqa: bool = False) -> "Tensor":
        """``softmax(q @ k^T / sqrt(E) + mask) @ v`` for q (..., L, E), k (..., S, E), v (..., S, Ev).
        A bool ``attn_mask`` keeps positions where it is True; a float mask is added to the scores.
        ``is_causal`` keeps key j for query i when j <= i. ``enable_gqa`` repeats key/value heads
        (axis -3) to match the query heads. ``dropout_p`` applies only in training mode.

        >>> q = k = v = Tensor.ones(1, 2, 4)
        >>> q.scaled_dot_product_attention(k, v).shape
        (1, 2, 4)
        """
        Tensor = _tensor_cls()
        dtypes = _dtypes()
        from fusegrad.dtype import least_upper_dtype
        for name, t in (("query", self), ("key", key), ("value", value)):
            if t.ndim < 2: raise ValueError(f"scaled_dot_product_attention needs at least 2-d tensors, {name} has shape {t.shape}")
        if self.shape[-1] != key.shape[-1]:
            raise RuntimeError(f"query and key must share the embedding size, got {self.shape} and {key.shape}")
        if key.shape[-2] != value.shape[-2]:
            raise ValueError(f"key and value must have the same sequence length, got {key.shape} and {value.shape}")
        if enable_gqa:
            if self.ndim < 3 or key.ndim < 3 or value.ndim < 3: raise ValueError("enable_gqa needs a heads axis (-3) on query, key and value")
            heads = self.shape[-3]
            for name, t in (("key", key), ("value", value)):
                if heads % t.shape[-3] != 0: raise ValueError(f"enable_gqa: {heads} query heads aren't a multiple of the {t.shape[-3]} {name} heads")
            key, value = _repeat_heads(key, heads // key.shape[-3]), _repeat_heads(value, heads // value.shape[-3])
        acc = least_upper_dtype(self.dtype, key.dtype, dtypes.float32)
        qk = self.matmul(key.transpose(-2, -1), dtype=acc) / math.sqrt(self.shape[-1])
        if is_causal:
            if attn_mask is not None: raise RuntimeError("scaled_dot_product_attention: can't set attn_mask when is_causal=True")
            L, S = qk.shape[-2], qk.shape[-1]
            attn_mask = Tensor.arange(L, device=self.device).reshape(L, 1) >= Tensor.arange(S, device=self.device).reshape(1, S)
        if attn_mask is not None:
            if attn_mask.dtype == dtypes.bool: attn_mask = attn_mask.where(0.0, -math.inf).cast(acc)
            qk = qk + attn_mask
        return qk.cast(self.dtype).softmax(-1).dropout(dropout_p) @ value

    # ---------------------------------------------------------------- losses
    def _do_reduction(self: "Tensor", reduction: str = "mean") -> "Tensor":
        _check_reduction(reduction)
        return self.mean() if reduction == "mean" else self.sum() if reduction == "sum" else self

    def binary_crossentropy(self: "Tensor", Y: "Tensor", reduction: str = "mean") -> "Tensor":
        """``-(Y log p + (1-Y) log(1-p))`` for probabilities ``self``. Unlike torch the logs are not
        clamped at -100 (tinygrad's behaviour), so p of exactly 0 or 1 gives inf/nan.

        >>> round(Tensor([0.5]).binary_crossentropy(Tensor([1.0])).item(), 4)
        0.6931
        """
        _check_reduction(reduction)
        Y = _as_target(self, Y, "binary_crossentropy")
        return (-Y * self.log() - (1 - Y) * (1 - self).log())._do_reduction(reduction)

    def binary_crossentropy_logits(self: "Tensor", Y: "Tensor", reduction: str = "mean", pos_weight: "Tensor | None" = None) -> "Tensor":
        """Binary cross entropy on logits (stable: uses logsigmoid), with optional ``pos_weight`` for
        the positive term like ``torch.nn.functional.binary_cross_entropy_with_logits``.

        >>> round(Tensor([0.0]).binary_crossentropy_logits(Tensor([1.0])).item(), 4)
        0.6931
        """
        _check_reduction(reduction)
        Y = _as_target(self, Y, "binary_crossentropy_logits")
        log_p, log_1_minus_p = self.logsigmoid(), (-self).logsigmoid()
        return (-((1 if pos_weight is None else pos_weight) * Y * log_p + (1 - Y) * log_1_minus_p))._do_reduction(reduction)

    def sparse_categorical_crossentropy(self: "Tensor", Y: "Tensor", ignore_index: int = -1, label_smoothing: float = 0.0,
                                                                            reduction: str = "mean") -> "Tensor":
        """Cross entropy of logits ``self`` (..., C) (classes on the LAST axis) against class indices ``Y``
        (shape ``self.shape[:-1]``). Entries equal to ``ignore_index`` count for nothing; "mean"
        divides by the number of counted entries. With label smoothing ``ls`` the loss per entry is
        ``-((1-ls) logp[y] + ls mean(logp))``. Out-of-range indices are not checked (they add only the
        smoothing term). tinygrad's rule: the default ``ignore_index=-1`` ignores nothing, so a label -1 is an
        out-of-range index that still counts in the mean (PyTorch's default, -100, does ignore).

        >>> round(Tensor([[0.0, 0.0]]).sparse_categorical_crossentropy(Tensor([1])).item(), 4)
        0.6931
        """
        _check_label_smoothing(label_smoothing)
        _check_reduction(reduction)
        _check_index_dtype(Y, "sparse_categorical_crossentropy")
        if not _dtypes().is_int(Y.dtype): raise RuntimeError(f"sparse_categorical_crossentropy needs integer class indices, got a {Y.dtype} tensor")
        if self.ndim == 0 or tuple(Y.shape) != tuple(self.shape[:-1]):
            raise IndexError(f"sparse_categorical_crossentropy needs Y of shape {self.shape[:-1]} for logits {self.shape}, got {Y.shape}")
        # a target outside [0, C) adds only the smoothing term: PyTorch's IndexError where the values are known
        # (-1 under the default ignore_index=-1 is tinygrad's documented case above, not an error)
        _check_targets(Y, self.shape[-1], self.ndim - 1, ignore_index)
        log_probs = self.log_softmax()
        loss_mask = Y != ignore_index if ignore_index != -1 else Y.ones_like(dtype=_dtypes().bool)
        y = Y.reshape(-1, 1)._one_hot_along_dim(num_classes=self.shape[-1]).mul(loss_mask.reshape(-1, 1)).reshape(*Y.shape, self.shape[-1])
        smoothing = label_smoothing * (log_probs.mean(-1) * loss_mask)
        unreduced = (1 - label_smoothing) * (log_probs * y).sum(-1) + smoothing
        return -(unreduced.sum() / loss_mask.sum() if reduction == "mean" else unreduced._do_reduction(reduction))

    def cross_entropy(self: "Tensor", Y: "Tensor", reduction: str = "mean", label_smoothing: float = 0.0) -> "Tensor":
        """Cross entropy of logits ``self`` with classes on axis 1 (axis 0 for a 1-d input), like
        ``torch.nn.functional.cross_entropy``. ``Y`` holds class indices (shape of ``self`` without the
        class axis) or class probabilities (same shape as ``self``). Out-of-range indices aren't checked.

        >>> round(Tensor([[0.0, 0.0]]).cross_entropy(Tensor([1])).item(), 4)
        0.6931
        """
        _check_label_smoothing(label_smoothing)
        _check_reduction(reduction)
        if self.ndim == 0: raise ValueError("cross_entropy needs at least a 1-d input")
        classes_dim = 0 if self.ndim == 1 else 1
        num_classes = self.shape[classes_dim]
        if tuple(self.shape) != tuple(Y.shape):
            expected = tuple(s for i, s in enumerate(self.shape) if i != classes_dim)
            if tuple(Y.shape) != expected:
                raise RuntimeError(f"cross_entropy shape mismatch: input {self.shape} needs Y of shape {expected} (indices) or {self.shape} (probabilities), got {Y.shape}")
            _check_index_dtype(Y, "cross_entropy")
            _check_targets(Y, num_classes, classes_dim)   # (no ignore_index here: torch's -100 is out of range too)
            Y = Y.unsqueeze(classes_dim)._one_hot_along_dim(num_classes=num_classes, dim=classes_dim).cast(self.dtype)
        elif not _dtypes().is_float(Y.dtype):
            raise TypeError(f"cross_entropy with Y shaped like the input needs class probabilities (floats), got {Y.dtype}")
        Y = (1 - label_smoothing) * Y + label_smoothing / num_classes
        return -self.log_softmax(classes_dim).mul(Y).sum(classes_dim)._do_reduction(reduction)

    def nll_loss(self: "Tensor", Y: "Tensor", weight: "Tensor | None" = None, ignore_index: int | None = None,
                              reduction: str = "mean") -> "Tensor":
        """Negative log likelihood of log-probabilities ``self`` (N, C, ...) (or (C,)) at class indices
        ``Y`` (N, ...), with optional per-class ``weight`` and ``ignore_index``; "mean" divides by the
        summed weights of the counted entries, like torch. Out-of-range indices aren't checked (they
        add nothing).

        >>> Tensor([[-1.0, -2.0]]).nll_loss(Tensor([1])).item()
        2.0
        """
        _check_reduction(reduction)
        _check_index_dtype(Y, "nll_loss")
        if self.ndim == 0: raise ValueError("nll_loss needs at least a 1-d input")
        classes_dim = 0 if self.ndim == 1 else 1
        num_classes = self.shape[classes_dim]
        expected = tuple(s for i, s in enumerate(self.shape) if i != classes_dim)
        if tuple(Y.shape) != expected: raise ValueError(f"nll_loss needs Y of shape {expected} for input {self.shape}, got {Y.shape}")
        if weight is not None and tuple(weight.shape) != (num_classes,):
            raise ValueError(f"nll_loss weight must have shape ({num_classes},), got {weight.shape}")
        _check_targets(Y, num_classes, classes_dim, ignore_index)
        one_hot = Y.unsqueeze(classes_dim)._one_hot_along_dim(num_classes=num_classes, dim=classes_dim)
        picked = one_hot.where(self, 0).sum(classes_dim)
        if weight is None: w = Y._const_like(1.0, self.dtype)
        else: w = one_hot.where(weight.reshape((num_classes,) + (1,) * (self.ndim - classes_dim - 1)), 0).sum(classes_dim)
        if ignore_index is not None: w = w * (Y != ignore_index)
        nll = -picked * w
        return nll.sum() / w.sum() if reduction == "mean" else nll._do_reduction(reduction)

    def _const_like(self: "Tensor", value: Any, dtype: Any) -> "Tensor":
        Tensor = _tensor_cls()
        return Tensor.full(self.shape, value, dtype=dtype, device=self.device, requires_grad=False)

def _repeat_heads(t: "Tensor", n: int) -> "Tensor":
    """repeat_interleave ``n`` times along axis -3 (the heads axis)."""
    if n == 1: return t
    shape = t.shape
    return t.unsqueeze(-3).expand(*shape[:-2], n, *shape[-2:]).reshape(*shape[:-3], shape[-3] * n, *shape[-2:])

def _as_target(x: "Tensor", Y: Any, what: str) -> "Tensor":
    Tensor = _tensor_cls()
    if not isinstance(Y, Tensor): Y = Tensor(Y, device=x.device, dtype=x.dtype)
    try: from fusegrad.tensor import _broadcast_shape; _broadcast_shape(x.shape, Y.shape)
    except IndexError: raise IndexError(f"{what}: target shape {Y.shape} doesn't broadcast with input shape {x.shape}") from None
    return Y
