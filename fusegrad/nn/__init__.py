"""Neural-network layers with tinygrad's names, parameter names and initializations.

Each layer is a plain object holding Tensors (``weight``, ``bias``, ...) and a ``__call__`` that
builds the lazy forward graph, so ``fusegrad.nn.state.get_state_dict`` finds the same keys as
tinygrad (and PyTorch) and state dicts interchange.

>>> from fusegrad import Tensor, nn
>>> layer = nn.Linear(3, 2)
>>> layer(Tensor.ones(4, 3)).shape
(4, 2)
"""
from __future__ import annotations
import math
from fusegrad.tensor import Tensor
from fusegrad.dtype import DType, dtypes
from fusegrad.helpers import prod, flatten
from fusegrad.nn import optim, state, datasets  # noqa: F401,E402  (tinygrad's nn imports them too)

__all__ = ["BatchNorm", "BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "Conv1d", "Conv2d", "ConvTranspose1d", "ConvTranspose2d",
           "Linear", "GroupNorm", "InstanceNorm", "LayerNorm", "LayerNorm2d", "RMSNorm", "Embedding", "LSTMCell"]

def _make_tuple(x: int | tuple | list, cnt: int) -> tuple:
    return tuple(x) if isinstance(x, (tuple, list)) else (x,) * cnt

def _channel_shape(x: Tensor) -> tuple:
    """(1, -1, 1, ...): a per-channel vector laid along axis 1 of ``x``."""
    return (1, -1) + (1,) * (x.ndim - 2)

def _filled(*shape: int, value: float, dtype: DType | None = None, requires_grad: bool | None = None) -> Tensor:
    """A tensor of ``value`` in a buffer of its own (written when first realized), for parameters and
    statistics that start constant. Why not ``Tensor.full``: a constant is an interned UOp, so every
    ``Tensor.ones(8)`` is the same node; autograd keys gradients by node, so two layers' weights would
    each get the sum of both gradients (and of every equal constant in the graph). tinygrad 0.14's
    ``Tensor.ones`` is a fresh buffer too."""
    constant = Tensor.full(shape, value, dtype=dtype or dtypes.default_float, requires_grad=requires_grad)
    if prod(shape) == 0: return constant   # no elements, no gradient to mix up (and no buffer to write)
    return Tensor.empty(*shape, dtype=constant.dtype, requires_grad=requires_grad).assign(constant)

class BatchNorm:
    """Batch normalization over axis 1 (the channels) of an (N, C, ...) input.

    In training mode (``Tensor.training``) it normalizes with the batch's mean and biased variance
    and, when ``track_running_stats``, updates ``running_mean`` / ``running_var`` in place
    (``running = (1 - momentum) * running + momentum * batch``, with the unbiased variance, like
    PyTorch) and adds 1 to ``num_batches_tracked``. Outside training it uses the running statistics.

    >>> from fusegrad import Tensor, nn
    >>> bn = nn.BatchNorm2d(3)
    >>> bn(Tensor.ones(2, 3, 4, 4)).shape
    (2, 3, 4, 4)
    """
    def __init__(self, sz: int, eps: float = 1e-5, affine: bool = True, track_running_stats: bool = True, momentum: float = 0.1):
        self.eps, self.track_running_stats, self.momentum = eps, track_running_stats, momentum
        self.weight: Tensor | None = _filled(sz, value=1.0) if affine else None
        self.bias: Tensor | None = _filled(sz, value=0.0) if affine else None
        # a 0-d int64 counter, as in torch and tinygrad, so their state dicts load without a reshape
        self.num_batches_tracked = _filled(value=0, dtype=dtypes.int64, requires_grad=False)
        if track_running_stats:
            self.running_mean, self.running_var = _filled(sz, value=0.0, requires_grad=False), _filled(sz, value=1.0, requires_grad=False)

    def calc_stats(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """(mean, biased variance) per channel: the running ones outside training, else the batch's."""
        if self.track_running_stats and not Tensor.training: return self.running_mean, self.running_var
        reduce_axes = tuple(i for i in range(x.ndim) if i != 1)
        batch_mean = x.mean(axis=reduce_axes)
        y = x - batch_mean.detach().reshape(_channel_shape(x))   # d(var)/d(mean) is 0, so the detach changes nothing
        batch_var = (y * y).mean(axis=reduce_axes)
        return batch_mean, batch_var

    def __call__(self, x: Tensor) -> Tensor:
        if x.ndim < 2: raise ValueError(f"BatchNorm needs an input of shape (N, C, ...), got {x.shape}")
        batch_mean, batch_var = self.calc_stats(x)
        if self.track_running_stats and Tensor.training:
            n = x.numel() // x.shape[1]
            unbias = n / (n - 1) if n > 1 else 1.0
            self.running_mean.assign((1 - self.momentum) * self.running_mean + self.momentum * batch_mean.detach())
            self.running_var.assign((1 - self.momentum) * self.running_var + self.momentum * unbias * batch_var.detach())
            self.num_batches_tracked.assign(self.num_batches_tracked + 1)
        return x.batchnorm(self.weight, self.bias, batch_mean, batch_var.add(self.eps).rsqrt())

BatchNorm1d = BatchNorm2d = BatchNorm3d = BatchNorm

class Conv2d:
    """2-d (or n-d, by the length of ``kernel_size``) convolution over an (N, C, H, W) input.
    ``padding`` is an int, a tuple, or ``'same'`` (stride 1 only). Weight (out, in/groups, *kernel)
    and bias (out,) are uniform in ±1/sqrt(in * prod(kernel)).

    >>> from fusegrad import Tensor, nn
    >>> nn.Conv2d(1, 4, 3, padding=1)(Tensor.ones(1, 1, 5, 5)).shape
    (1, 4, 5, 5)
    """
    def __init__(self, in_channels: int, out_channels: int, kernel_size: int | tuple, stride=1, padding: int | tuple | str = 0,
                 dilation=1, groups: int = 1, bias: bool = True):
        self.kernel_size = _make_tuple(kernel_size, 2)
        if isinstance(padding, str):
            if padding.lower() != "same": raise ValueError(f"invalid padding string {padding!r}, only 'same' is supported")
            if any(s != 1 for s in _make_tuple(stride, len(self.kernel_size))):
                raise ValueError("padding='same' is not supported for strided convolutions")
            pad = [(d * (k - 1) // 2, d * (k - 1) - d * (k - 1) // 2)
                   for d, k in zip(_make_tuple(dilation, len(self.kernel_size))[::-1], self.kernel_size[::-1])]
            padding = tuple(flatten(pad))
        if in_channels % groups or out_channels % groups:
            raise ValueError(f"in_channels ({in_channels}) and out_channels ({out_channels}) must be divisible by groups ({groups})")
        self.stride, self.dilation, self.groups, self.padding = stride, dilation, groups, padding
        scale = 1 / math.sqrt(in_channels * prod(self.kernel_size))
        self.weight = Tensor.uniform(out_channels, in_channels // groups, *self.kernel_size, low=-scale, high=scale)
        self.bias: Tensor | None = Tensor.uniform(out_channels, low=-scale, high=scale) if bias else None

    def __call__(self, x: Tensor) -> Tensor:
        return x.conv2d(self.weight, self.bias, groups=self.groups, stride=self.stride, dilation=self.dilation, padding=self.padding)

def Conv1d(in_channels: int, out_channels: int, kernel_size: int, stride=1, padding: int | str = 0, dilation=1, groups: int = 1,
           bias: bool = True) -> Conv2d:
    """1-d convolution over an (N, C, L) input: a Conv2d with a 1-element kernel tuple.

    >>> from fusegrad import Tensor, nn
    >>> nn.Conv1d(2, 3, 3)(Tensor.ones(1, 2, 8)).shape
    (1, 3, 6)
    """
    return Conv2d(in_channels, out_channels, (kernel_size,) if isinstance(kernel_size, int) else tuple(kernel_size), stride, padding,
                  dilation, groups, bias)

class ConvTranspose2d(Conv2d):
    """Transposed 2-d convolution; weight is (in, out/groups, *kernel) like PyTorch.

    >>> from fusegrad import Tensor, nn
    >>> nn.ConvTranspose2d(2, 3, 3, stride=2)(Tensor.ones(1, 2, 4, 4)).shape
    (1, 3, 9, 9)
    """
    def __init__(self, in_channels: int, out_channels: int, kernel_size: int | tuple, stride=1, padding=0, output_padding=0,
                 dilation=1, groups: int = 1, bias: bool = True):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias)
        scale = 1 / math.sqrt(in_channels * prod(self.kernel_size))
        self.weight = Tensor.uniform(in_channels, out_channels // groups, *self.kernel_size, low=-scale, high=scale)
        self.output_padding = output_padding

    def __call__(self, x: Tensor) -> Tensor:
        return x.conv_transpose2d(self.weight, self.bias, groups=self.groups, stride=self.stride, dilation=self.dilation,
                                  padding=self.padding, output_padding=self.output_padding)

def ConvTranspose1d(in_channels: int, out_channels: int, kernel_size: int, stride=1, padding=0, output_padding=0, dilation=1,
                    groups: int = 1, bias: bool = True) -> ConvTranspose2d:
    """Transposed 1-d convolution over an (N, C, L) input.

    >>> from fusegrad import Tensor, nn
    >>> nn.ConvTranspose1d(2, 3, 3)(Tensor.ones(1, 2, 8)).shape
    (1, 3, 10)
    """
    return ConvTranspose2d(in_channels, out_channels, (kernel_size,) if isinstance(kernel_size, int) else tuple(kernel_size), stride,
                           padding, output_padding, dilation, groups, bias)

class Linear:
    """``y = x @ weight.T + bias`` with weight (out, in); weight and bias uniform in ±1/sqrt(in).

    >>> from fusegrad import Tensor, nn
    >>> nn.Linear(4, 2)(Tensor.ones(3, 4)).shape
    (3, 2)
    """
    def __init__(self, in_features: int, out_features: int, bias: bool = True):
        bound = 1 / math.sqrt(in_features)
        self.weight = Tensor.uniform(out_features, in_features, low=-bound, high=bound)
        self.bias: Tensor | None = Tensor.uniform(out_features, low=-bound, high=bound) if bias else None

    def __call__(self, x: Tensor) -> Tensor: return x.linear(self.weight.transpose(), self.bias)

class GroupNorm:
    """Normalize each of ``num_groups`` channel groups of an (N, C, ...) input, then a per-channel
    affine (weight ones, bias zeros).

    >>> from fusegrad import Tensor, nn
    >>> nn.GroupNorm(2, 4)(Tensor.rand(1, 4, 3)).shape
    (1, 4, 3)
    """
    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True):
        if num_channels % num_groups: raise ValueError(f"num_channels ({num_channels}) must be divisible by num_groups ({num_groups})")
        self.num_groups, self.num_channels, self.eps = num_groups, num_channels, eps
        self.weight: Tensor | None = _filled(num_channels, value=1.0) if affine else None
        self.bias: Tensor | None = _filled(num_channels, value=0.0) if affine else None

    def __call__(self, x: Tensor) -> Tensor:
        x = x.reshape(x.shape[0], self.num_groups, -1).layernorm(eps=self.eps).reshape(x.shape)
        if self.weight is None or self.bias is None: return x
        return x * self.weight.reshape(_channel_shape(x)) + self.bias.reshape(_channel_shape(x))

class InstanceNorm:
    """Normalize each channel of each sample of an (N, C, ...) input over its spatial axes, then a
    per-channel affine (weight ones, bias zeros).

    >>> from fusegrad import Tensor, nn
    >>> nn.InstanceNorm(3)(Tensor.rand(2, 3, 4, 4)).shape
    (2, 3, 4, 4)
    """
    def __init__(self, num_features: int, eps: float = 1e-5, affine: bool = True):
        self.num_features, self.eps = num_features, eps
        self.weight: Tensor | None = _filled(num_features, value=1.0) if affine else None
        self.bias: Tensor | None = _filled(num_features, value=0.0) if affine else None

    def __call__(self, x: Tensor) -> Tensor:
        x = x.reshape(x.shape[0], self.num_features, -1).layernorm(eps=self.eps).reshape(x.shape)
        if self.weight is None or self.bias is None: return x
        return x * self.weight.reshape(_channel_shape(x)) + self.bias.reshape(_channel_shape(x))

class LayerNorm:
    """Normalize over the trailing ``normalized_shape`` axes, then an elementwise affine
    (weight ones, bias zeros).

    >>> from fusegrad import Tensor, nn
    >>> nn.LayerNorm(4)(Tensor.rand(2, 4)).shape
    (2, 4)
    """
    def __init__(self, normalized_shape: int | tuple, eps: float = 1e-5, elementwise_affine: bool = True):
        self.normalized_shape: tuple = _make_tuple(normalized_shape, 1)
        self.axis, self.eps, self.elementwise_affine = tuple(-1 - i for i in range(len(self.normalized_shape))), eps, elementwise_affine
        self.weight: Tensor | None = _filled(*self.normalized_shape, value=1.0) if elementwise_affine else None
        self.bias: Tensor | None = _filled(*self.normalized_shape, value=0.0) if elementwise_affine else None

    def __call__(self, x: Tensor) -> Tensor:
        if tuple(self.normalized_shape) != tuple(x.shape[-len(self.normalized_shape):]):
            raise RuntimeError(f"last dimensions of {x.shape} must match {self.normalized_shape}")
        x = x.layernorm(eps=self.eps, axis=self.axis)
        if not self.elementwise_affine: return x
        return x * self.weight + self.bias

class LayerNorm2d(LayerNorm):
    """LayerNorm over the channel axis of an (N, C, H, W) input.

    >>> from fusegrad import Tensor, nn
    >>> nn.LayerNorm2d(3)(Tensor.rand(1, 3, 2, 2)).shape
    (1, 3, 2, 2)
    """
    def __call__(self, x: Tensor) -> Tensor: return super().__call__(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)

class RMSNorm:
    """``x / sqrt(mean(x^2, -1) + eps) * weight``, computed in float32 and cast back.

    >>> from fusegrad import Tensor, nn
    >>> nn.RMSNorm(4)(Tensor.ones(2, 4)).shape
    (2, 4)
    """
    def __init__(self, dim: int, eps: float = 1e-6, elementwise_affine: bool = True):
        self.eps = eps
        self.weight: Tensor | None = _filled(dim, value=1.0) if elementwise_affine else None

    def _norm(self, x: Tensor) -> Tensor: return x * (x.square().mean(-1, keepdim=True) + self.eps).rsqrt()

    def __call__(self, x: Tensor) -> Tensor:
        x = self._norm(x.float()).cast(x.dtype)
        return x if self.weight is None else x * self.weight

class Embedding:
    """A lookup table: ``Embedding(vocab, dim)(idx)`` gives ``weight[idx]`` with shape
    ``idx.shape + (dim,)``. It is computed as a one-hot (arange compare) times the weight, summed,
    so lookup and its gradient are ordinary fused reductions. Weight is glorot-uniform.

    >>> from fusegrad import Tensor, nn
    >>> nn.Embedding(10, 3)(Tensor([[1, 2, 3]])).shape
    (1, 3, 3)
    """
    def __init__(self, vocab_size: int, embed_size: int):
        self.vocab_sz, self.embed_sz = vocab_size, embed_size
        self.weight = Tensor.glorot_uniform(vocab_size, embed_size)

    def __call__(self, idx: Tensor) -> Tensor:
        if not dtypes.is_int(idx.dtype): raise TypeError(f"Embedding needs an integer index tensor, got {idx.dtype}")
        if not hasattr(self, "arange"):
            self.arange = Tensor.arange(self.vocab_sz, requires_grad=False, device=self.weight.device).unsqueeze(-1)
        big_shp = tuple(idx.shape) + (self.vocab_sz, self.embed_sz)
        arange = self.arange if self.arange.dtype == idx.dtype else self.arange.cast(idx.dtype)
        arange, idx, vals = arange.expand(big_shp), idx.reshape(tuple(idx.shape) + (1, 1)).expand(big_shp), self.weight.expand(big_shp)
        return (arange == idx).where(vals, 0).sum(-2, dtype=vals.dtype)

class LSTMCell:
    """One step of an LSTM: ``h, c = cell(x, (h, c))`` with gates ordered i, f, g, o like PyTorch.
    Weights uniform in ±1/sqrt(hidden_size); biases start at zero.

    >>> from fusegrad import Tensor, nn
    >>> h, c = nn.LSTMCell(3, 5)(Tensor.ones(2, 3))
    >>> h.shape, c.shape
    ((2, 5), (2, 5))
    """
    def __init__(self, input_size: int, hidden_size: int, bias: bool = True):
        stdv = 1.0 / math.sqrt(hidden_size)
        self.weight_ih = Tensor.uniform(hidden_size * 4, input_size, low=-stdv, high=stdv)
        self.weight_hh = Tensor.uniform(hidden_size * 4, hidden_size, low=-stdv, high=stdv)
        self.bias_ih: Tensor | None = _filled(hidden_size * 4, value=0.0) if bias else None
        self.bias_hh: Tensor | None = _filled(hidden_size * 4, value=0.0) if bias else None

    def __call__(self, x: Tensor, hc: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, Tensor]:
        hidden = self.weight_hh.shape[1]
        if hc is None: hc = (Tensor.zeros(x.shape[0], hidden, dtype=x.dtype, device=x.device),) * 2
        gates = x.linear(self.weight_ih.T, self.bias_ih) + hc[0].linear(self.weight_hh.T, self.bias_hh)
        i, f, g, o = (gates[:, k * hidden:(k + 1) * hidden] for k in range(4))
        i, f, g, o = i.sigmoid(), f.sigmoid(), g.tanh(), o.sigmoid()
        new_c = f * hc[1] + i * g
        new_h = o * new_c.tanh()
        return new_h.contiguous(), new_c.contiguous()
