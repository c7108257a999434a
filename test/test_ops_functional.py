"""The functional nn API (fusegrad/mixins/functional.py) and the elementwise activations, checked
forward AND backward against PyTorch.

Every comparison builds the same computation in torch and in fusegrad, feeds the same inputs,
back-propagates the same random upstream gradient, and compares outputs and input gradients.
"""
from __future__ import annotations
import math
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from fusegrad import Tensor, dtypes, Context

# ------------------------------------------------------------------ comparison helper

def _to_torch(a):
    if not isinstance(a, np.ndarray): return a
    if a.dtype.kind == "f": return torch.tensor(a, requires_grad=True)
    if a.dtype.kind in "iu": return torch.tensor(a.astype(np.int64))
    return torch.tensor(a)

def _to_fg(a, device):
    if not isinstance(a, np.ndarray): return a
    if a.dtype.kind in "iu": return Tensor(a.astype(np.int32), device=device)
    return Tensor(a, device=device)

def check(fg_fn, torch_fn, *args, atol=1e-6, rtol=1e-3, grad_atol=1e-4, grad_rtol=1e-3, forward_only=False,
          device=None, upstream="random", seed=0):
    """Run ``fg_fn`` on fusegrad tensors and ``torch_fn`` on torch tensors built from the same numpy
    ``args`` (float arrays are differentiated; int arrays become int32 / int64 indices; other values
    pass through), then compare the outputs and the gradients of every float input."""
    t_args = [_to_torch(a) for a in args]
    f_args = [_to_fg(a, device) for a in args]
    t_out, f_out = torch_fn(*t_args), fg_fn(*f_args)
    assert tuple(f_out.shape) == tuple(t_out.shape), f"shape: fusegrad {f_out.shape} vs torch {tuple(t_out.shape)}"
    float_idx = [i for i, a in enumerate(args) if isinstance(a, np.ndarray) and a.dtype.kind == "f"]
    f_grads = []
    if not forward_only and float_idx:
        # build the gradient graph before realizing: realizing replaces f_out's graph with its buffer (like tinygrad)
        shape = tuple(t_out.shape)
        up = (np.random.default_rng(seed + 1).standard_normal(shape).astype(np.float32) if upstream == "random"
              else np.ones(shape, dtype=np.float32))
        t_out.backward(torch.tensor(up))
        f_grads = f_out.gradient(*[f_args[i] for i in float_idx], gradient=Tensor(up, device=device))
    got = f_out.numpy()
    np.testing.assert_allclose(got, t_out.detach().numpy(), atol=atol, rtol=rtol, equal_nan=True, err_msg="forward")
    if not f_grads: return got
    for i, fg in zip(float_idx, f_grads):
        tg = t_args[i].grad
        tg = np.zeros(args[i].shape, np.float32) if tg is None else tg.numpy()
        assert tuple(fg.shape) == tuple(tg.shape), f"grad {i} shape: {fg.shape} vs {tg.shape}"
        np.testing.assert_allclose(fg.numpy(), tg, atol=grad_atol, rtol=grad_rtol, equal_nan=True, err_msg=f"gradient of input {i}")
    return got

def randn(*shape, seed=0, scale=1.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)

def uniform(*shape, low=-1.5, high=1.5, seed=0):
    return np.random.default_rng(seed).uniform(low, high, shape).astype(np.float32)

def randint(*shape, high, low=0, seed=0):
    return np.random.default_rng(seed).integers(low, high, shape).astype(np.int64)

# ------------------------------------------------------------------ activations / elementwise

# (fusegrad, torch, (low, high)) — tinygrad's gelu is the tanh approximation
UNARY = {
    "neg": (Tensor.neg, torch.neg, None),
    "log": (Tensor.log, torch.log, (0.1, 3)),
    "log2": (Tensor.log2, torch.log2, (0.1, 3)),
    "log10": (Tensor.log10, torch.log10, (0.1, 3)),
    "exp": (Tensor.exp, torch.exp, None),
    "exp2": (Tensor.exp2, torch.exp2, None),
    "sqrt": (Tensor.sqrt, torch.sqrt, (0.1, 3)),
    "rsqrt": (Tensor.rsqrt, torch.rsqrt, (0.1, 3)),
    "sin": (Tensor.sin, torch.sin, (-6, 6)),
    "cos": (Tensor.cos, torch.cos, (-6, 6)),
    "tan": (Tensor.tan, torch.tan, (-1.4, 1.4)),
    "asin": (Tensor.asin, torch.asin, (-0.95, 0.95)),
    "acos": (Tensor.acos, torch.acos, (-0.95, 0.95)),
    "atan": (Tensor.atan, torch.atan, (-5, 5)),
    "square": (Tensor.square, torch.square, None),
    "sign": (Tensor.sign, torch.sign, None),
    "abs": (Tensor.abs, torch.abs, None),
    "reciprocal": (Tensor.reciprocal, torch.reciprocal, (0.2, 3)),
    "relu": (Tensor.relu, torch.relu, None),
    "sigmoid": (Tensor.sigmoid, torch.sigmoid, (-5, 5)),
    "logsigmoid": (Tensor.logsigmoid, F.logsigmoid, (-5, 5)),
    "hardsigmoid": (Tensor.hardsigmoid, F.hardsigmoid, (-5, 5)),
    "elu": (Tensor.elu, F.elu, None),
    "celu": (Tensor.celu, F.celu, None),
    "selu": (Tensor.selu, F.selu, None),
    "swish": (Tensor.swish, F.silu, (-5, 5)),
    "silu": (Tensor.silu, F.silu, (-5, 5)),
    "relu6": (Tensor.relu6, F.relu6, (-8, 8)),
    "hardswish": (Tensor.hardswish, F.hardswish, (-5, 5)),
    "tanh": (Tensor.tanh, torch.tanh, (-4, 4)),
    "sinh": (Tensor.sinh, torch.sinh, None),
    "cosh": (Tensor.cosh, torch.cosh, None),
    "atanh": (Tensor.atanh, torch.atanh, (-0.9, 0.9)),
    "asinh": (Tensor.asinh, torch.asinh, (-3, 3)),
    "acosh": (Tensor.acosh, torch.acosh, (1.1, 4)),
    "hardtanh": (Tensor.hardtanh, F.hardtanh, (-3, 3)),
    "erf": (Tensor.erf, torch.erf, (-3, 3)),
    "gelu": (Tensor.gelu, lambda x: F.gelu(x, approximate="tanh"), (-4, 4)),
    "quick_gelu": (Tensor.quick_gelu, lambda x: x * torch.sigmoid(1.702 * x), (-4, 4)),
    "leaky_relu": (Tensor.leaky_relu, F.leaky_relu, None),
    "mish": (Tensor.mish, F.mish, (-4, 4)),
    "softplus": (Tensor.softplus, F.softplus, (-5, 5)),
    "softsign": (Tensor.softsign, F.softsign, None),
}

@pytest.mark.parametrize("name", list(UNARY))
def test_unary_random(name):
    fg, tf, bounds = UNARY[name]
    low, high = bounds or (-2.0, 2.0)
    x = uniform(3, 7, low=low, high=high, seed=len(name))
    check(fg, tf, x, atol=1e-5, rtol=1e-4, grad_atol=1e-4, grad_rtol=1e-3)

ACT_PARAMS = [
    ("elu", lambda x: x.elu(0.5), lambda x: F.elu(x, 0.5)),
    ("celu", lambda x: x.celu(0.7), lambda x: F.celu(x, 0.7)),
    ("leaky_relu", lambda x: x.leaky_relu(0.2), lambda x: F.leaky_relu(x, 0.2)),
    ("leakyrelu", lambda x: x.leakyrelu(0.2), lambda x: F.leaky_relu(x, 0.2)),
    ("hardtanh", lambda x: x.hardtanh(-0.5, 1.5), lambda x: F.hardtanh(x, -0.5, 1.5)),
    ("softplus", lambda x: x.softplus(2.0), lambda x: F.softplus(x, 2.0)),
    ("clip", lambda x: x.clip(-0.7, 0.4), lambda x: x.clamp(-0.7, 0.4)),
    ("clamp", lambda x: x.clamp(-0.7, 0.4), lambda x: x.clamp(-0.7, 0.4)),
    ("lerp", lambda x: x.lerp(x * 2 + 1, 0.3), lambda x: torch.lerp(x, x * 2 + 1, 0.3)),
]

@pytest.mark.parametrize("name,fg,tf", ACT_PARAMS, ids=[p[0] for p in ACT_PARAMS])
def test_activation_params(name, fg, tf):
    check(fg, tf, uniform(4, 5, low=-3, high=3, seed=1), atol=1e-5, rtol=1e-4)

@pytest.mark.parametrize("name,fg,tf", [("trunc", Tensor.trunc, torch.trunc), ("floor", Tensor.floor, torch.floor),
                                        ("ceil", Tensor.ceil, torch.ceil), ("round", Tensor.round, torch.round)])
def test_rounding_forward(name, fg, tf):
    x = np.array([-2.5, -1.5, -0.5, -0.49, 0.0, 0.5, 0.51, 1.5, 2.5, 3.7, -3.7], np.float32)
    check(fg, tf, x, forward_only=True, atol=0, rtol=0)
    # torch's gradient of a rounding op is 0 everywhere; fusegrad's graph has no gradient path at all
    # (TRUNC has no derivative), so ask for materialized zeros
    t = Tensor(x)
    g, = fg(t).sum().gradient(t, materialize_grads=True)
    tx = torch.tensor(x, requires_grad=True)
    tf(tx).sum().backward()
    np.testing.assert_array_equal(g.numpy(), tx.grad.numpy())

@pytest.mark.parametrize("name,fg,tf", [("isinf", Tensor.isinf, torch.isinf), ("isnan", Tensor.isnan, torch.isnan),
                                        ("isfinite", Tensor.isfinite, torch.isfinite),
                                        ("logical_not", lambda x: (x > 0).logical_not(), lambda x: (x > 0).logical_not())])
def test_predicates(name, fg, tf):
    x = np.array([-math.inf, -1.0, 0.0, 2.0, math.inf, math.nan], np.float32)
    got = check(fg, tf, x, forward_only=True)
    assert got.dtype == np.bool_

# singular points: exact values and gradients must match torch (inf and nan included)
SINGULAR = [
    ("sign", Tensor.sign, torch.sign, [-1.0, 0.0, 1.0, -0.0, 3.0]),
    ("abs", Tensor.abs, torch.abs, [-1.0, 0.0, 1.0, -0.0]),
    ("softsign", Tensor.softsign, F.softsign, [-1.0, 0.0, 1.0]),
    ("relu", Tensor.relu, torch.relu, [-1.0, 0.0, 1.0]),
    ("sigmoid", Tensor.sigmoid, torch.sigmoid, [-300.0, -100.0, 0.0, 100.0, 300.0]),
    ("logsigmoid", Tensor.logsigmoid, F.logsigmoid, [-300.0, -100.0, 0.0, 100.0, 300.0]),
    ("softplus", Tensor.softplus, F.softplus, [-300.0, -100.0, 0.0, 100.0, 300.0]),
    ("tanh", Tensor.tanh, torch.tanh, [-300.0, -50.0, 0.0, 50.0, 300.0]),
    ("swish", Tensor.swish, F.silu, [-300.0, 0.0, 300.0]),
    ("elu", Tensor.elu, F.elu, [-300.0, -1.0, 300.0]),
    ("celu", Tensor.celu, F.celu, [-300.0, -1.0, 300.0]),
    ("selu", Tensor.selu, F.selu, [-300.0, -1.0, 300.0]),
    ("mish", Tensor.mish, F.mish, [-300.0, 0.0, 300.0]),
    ("gelu", Tensor.gelu, lambda x: F.gelu(x, approximate="tanh"), [-300.0, 0.0, 300.0]),
    ("quick_gelu", Tensor.quick_gelu, lambda x: x * torch.sigmoid(1.702 * x), [-300.0, 0.0, 300.0]),
    ("log", Tensor.log, torch.log, [0.0, -1.0, 1.0, math.inf]),
    ("log2", Tensor.log2, torch.log2, [0.0, -1.0, 1.0]),
    ("sqrt", Tensor.sqrt, torch.sqrt, [-1.0, 0.0, 4.0, math.inf]),
    ("rsqrt", Tensor.rsqrt, torch.rsqrt, [-1.0, 0.0, 4.0]),
    ("reciprocal", Tensor.reciprocal, torch.reciprocal, [0.0, -0.0, 2.0]),
    ("exp", Tensor.exp, torch.exp, [-1000.0, 0.0, 1000.0]),
    ("erf", Tensor.erf, torch.erf, [-10.0, 0.0, 10.0]),
    ("asin", Tensor.asin, torch.asin, [-2.0, 0.0, 2.0]),
    ("acos", Tensor.acos, torch.acos, [-2.0, 0.0, 2.0]),
    ("atan", Tensor.atan, torch.atan, [0.0]),
]

@pytest.mark.parametrize("name,fg,tf,vals", SINGULAR, ids=[s[0] for s in SINGULAR])
def test_singular_points(name, fg, tf, vals):
    check(fg, tf, np.array(vals, np.float32), atol=1e-6, rtol=1e-5, grad_atol=1e-6, grad_rtol=1e-5, upstream="ones")

def test_relu_gradient_at_zero_is_zero():
    x = Tensor([0.0, 0.0])
    g, = x.relu().sum().gradient(x)
    assert g.tolist() == [0.0, 0.0]

def test_sqrt_negative_is_nan_and_log_zero_is_minus_inf():
    assert math.isnan(Tensor([-1.0]).sqrt().item())
    assert Tensor([0.0]).log().item() == -math.inf
    assert math.isnan(Tensor([-1.0]).log().item())

# ------------------------------------------------------------------ linear / sequential / norms

def test_linear():
    x, w, b = randn(3, 4), randn(4, 5, seed=1), randn(5, seed=2)
    check(lambda x, w, b: x.linear(w, b), lambda x, w, b: F.linear(x, w.T, b), x, w, b, atol=1e-5)
    check(lambda x, w: x.linear(w), lambda x, w: x @ w, x, w, atol=1e-5)

def test_linear_batched_and_1d_weight():
    x, w, b = randn(2, 3, 4), randn(4, 6, seed=1), randn(6, seed=2)
    check(lambda x, w, b: x.linear(w, b), lambda x, w, b: F.linear(x, w.T, b), x, w, b, atol=1e-5)
    w1 = randn(4, seed=3)
    check(lambda x, w, b: x.linear(w, b), lambda x, w, b: x * w + b, x, w1, randn(4, seed=4), atol=1e-5)

def test_linear_dtype():
    x, w = Tensor(randn(2, 3)), Tensor(randn(3, 4, seed=1))
    assert x.linear(w, dtype=dtypes.float16).dtype == dtypes.float16

def test_linear_errors():
    with pytest.raises(RuntimeError): Tensor.ones(2, 3).linear(Tensor.ones(4, 5))
    with pytest.raises(IndexError): Tensor.ones(2, 3).linear(Tensor.ones(4))
    with pytest.raises(IndexError): Tensor.ones(2, 3).linear(Tensor.ones(3, 5), Tensor.ones(4))

def test_sequential():
    x = randn(3, 4)
    w = randn(4, 4, seed=1)
    check(lambda x, w: x.sequential([lambda t: t.linear(w), Tensor.relu, lambda t: t * 2]),
          lambda x, w: torch.relu(x @ w) * 2, x, w, atol=1e-5)
    assert Tensor([1.0]).sequential([]).tolist() == [1.0]
    with pytest.raises(TypeError): Tensor([1.0]).sequential([1])

@pytest.mark.parametrize("axis,shape,eps", [(-1, (3, 5), 1e-5), ((-2, -1), (2, 3, 4), 1e-5), (-1, (2, 4), 1e-1)])
def test_layernorm(axis, shape, eps):
    nshape = shape[-1:] if axis == -1 else shape[-2:]
    check(lambda x: x.layernorm(axis, eps), lambda x: F.layer_norm(x, nshape, eps=eps), randn(*shape, scale=2.0), atol=1e-5, grad_atol=1e-4)

@pytest.mark.parametrize("shape", [(4, 3), (2, 3, 4, 4)])
def test_batchnorm(shape):
    C, eps = shape[1], 1e-5
    x, w, b = randn(*shape), randn(C, seed=1), randn(C, seed=2)
    mean, var = randn(C, seed=3) * 0.1, np.abs(randn(C, seed=4)) + 0.5
    invstd = (1 / np.sqrt(var + eps)).astype(np.float32)
    check(lambda x, w, b: x.batchnorm(w, b, Tensor(mean), Tensor(invstd)),
          lambda x, w, b: F.batch_norm(x, torch.tensor(mean), torch.tensor(var), w, b, training=False, eps=eps), x, w, b, atol=1e-5)
    # without affine parameters
    check(lambda x: x.batchnorm(None, None, Tensor(mean), Tensor(invstd)),
          lambda x: F.batch_norm(x, torch.tensor(mean), torch.tensor(var), training=False, eps=eps), x, atol=1e-5)

def test_batchnorm_other_axis_and_errors():
    x, mean, invstd = randn(2, 3, 5), randn(5, seed=1), np.abs(randn(5, seed=2)) + 0.5
    out = Tensor(x).batchnorm(None, None, Tensor(mean), Tensor(invstd), axis=-1).numpy()
    np.testing.assert_allclose(out, (x - mean) * invstd, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError): Tensor(x).batchnorm(None, None, Tensor(mean), Tensor(invstd), axis=1)

# ------------------------------------------------------------------ dropout

def test_dropout_eval_is_identity():
    x = Tensor(randn(50))
    assert not Tensor.training
    assert x.dropout(0.5) is x
    with Tensor.train(False): assert x.dropout(0.9) is x

@pytest.mark.parametrize("p", [0.1, 0.5, 0.8])
def test_dropout_training_statistics(p):
    Tensor.manual_seed(1234)
    n = 20000
    x = Tensor.ones(n).contiguous()
    with Tensor.train():
        y = x.dropout(p)
        g, = (y * Tensor(np.arange(n, dtype=np.float32))).sum().gradient(x)
    out, grad = y.numpy(), g.numpy()
    zeroed = out == 0
    assert abs(zeroed.mean() - p) < 0.02, f"fraction zeroed {zeroed.mean()} should be about {p}"
    np.testing.assert_allclose(out[~zeroed], 1 / (1 - p), rtol=1e-6)
    # the gradient is the same mask and scale
    np.testing.assert_allclose(grad, np.where(zeroed, 0.0, np.arange(n) / (1 - p)), rtol=1e-5)
    assert abs(out.mean() - 1.0) < 0.05   # unbiased in expectation

def test_dropout_context_training_and_edge_p():
    x = Tensor(randn(100) + 5)
    with Context(TRAINING=1):
        assert Tensor.training
        assert x.dropout(0.0) is x
        zero = x.dropout(1.0)
        assert (zero.numpy() == 0).all()
        g, = zero.sum().gradient(x, materialize_grads=True)   # p=1 folds to a constant, like tinygrad's zeros_like
        assert (g.numpy() == 0).all()
        a, b = x.dropout(0.5).numpy(), x.dropout(0.5).numpy()
        assert not np.array_equal(a == 0, b == 0), "each dropout call draws a new mask"
    for bad in (-0.1, 1.5):
        with pytest.raises(ValueError): x.dropout(bad)

# ------------------------------------------------------------------ one_hot

def test_one_hot():
    y = randint(3, 4, high=5)
    out = Tensor(y.astype(np.int32)).one_hot(6)
    assert out.dtype == dtypes.int32 and out.shape == (3, 4, 6)
    np.testing.assert_array_equal(out.numpy(), F.one_hot(torch.tensor(y), 6).numpy())
    inferred = Tensor(y.astype(np.int32)).one_hot()
    np.testing.assert_array_equal(inferred.numpy(), F.one_hot(torch.tensor(y)).numpy())
    assert Tensor(3).one_hot(4).tolist() == [0, 0, 0, 1]

def test_one_hot_errors():
    with pytest.raises(RuntimeError): Tensor([0.0, 1.0]).one_hot(2)
    with pytest.raises(RuntimeError): Tensor([0, -1]).one_hot()
    with pytest.raises(ValueError): Tensor([0, 1]).one_hot(-3)

# ------------------------------------------------------------------ scaled dot product attention

def _qkv(B=2, H=3, L=4, S=5, E=8, Ev=6, Hkv=None):
    Hkv = H if Hkv is None else Hkv
    return randn(B, H, L, E, seed=1), randn(B, Hkv, S, E, seed=2), randn(B, Hkv, S, Ev, seed=3)

def test_sdpa_plain():
    check(lambda q, k, v: q.scaled_dot_product_attention(k, v), F.scaled_dot_product_attention, *_qkv(), atol=1e-5)

def test_sdpa_3d_and_float_mask():
    q, k, v = randn(2, 4, 8, seed=1), randn(2, 5, 8, seed=2), randn(2, 5, 3, seed=3)
    m = randn(4, 5, seed=4)
    check(lambda q, k, v, m: q.scaled_dot_product_attention(k, v, attn_mask=m),
          lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m), q, k, v, m, atol=1e-5)

def test_sdpa_bool_mask():
    q, k, v = _qkv()
    m = np.random.default_rng(5).random((2, 1, 4, 5)) < 0.6
    m[..., 0] = True   # no fully masked rows
    check(lambda q, k, v: q.scaled_dot_product_attention(k, v, attn_mask=Tensor(m)),
          lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=torch.tensor(m)), q, k, v, atol=1e-5)

@pytest.mark.parametrize("L,S", [(4, 4), (3, 5)])
def test_sdpa_causal(L, S):
    q, k, v = _qkv(L=L, S=S)
    check(lambda q, k, v: q.scaled_dot_product_attention(k, v, is_causal=True),
          lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), q, k, v, atol=1e-5)

def test_sdpa_gqa():
    q, k, v = _qkv(H=4, Hkv=2)
    check(lambda q, k, v: q.scaled_dot_product_attention(k, v, is_causal=False, enable_gqa=True),
          lambda q, k, v: F.scaled_dot_product_attention(q, k, v, enable_gqa=True), q, k, v, atol=1e-5)

def test_sdpa_dropout():
    q, k, v = [Tensor(a) for a in _qkv()]
    plain = q.scaled_dot_product_attention(k, v).numpy()
    np.testing.assert_allclose(q.scaled_dot_product_attention(k, v, dropout_p=0.5).numpy(), plain, rtol=1e-6)  # eval: no dropout
    with Tensor.train():
        dropped = q.scaled_dot_product_attention(k, v, dropout_p=1.0).numpy()
    assert (dropped == 0).all()

def test_sdpa_errors():
    q, k, v = [Tensor(a) for a in _qkv()]
    with pytest.raises(RuntimeError): q.scaled_dot_product_attention(k, v, attn_mask=Tensor.ones(4, 5), is_causal=True)
    with pytest.raises(RuntimeError): q.scaled_dot_product_attention(Tensor.ones(2, 3, 5, 7), v)
    with pytest.raises(ValueError): q.scaled_dot_product_attention(k, Tensor.ones(2, 3, 6, 6))
    q4, k2, v2 = [Tensor(a) for a in _qkv(H=3, Hkv=2)]
    with pytest.raises(ValueError): q4.scaled_dot_product_attention(k2, v2, enable_gqa=True)

# ------------------------------------------------------------------ losses

REDS = ["none", "sum", "mean"]

@pytest.mark.parametrize("reduction", REDS)
def test_binary_crossentropy(reduction):
    p, y = uniform(3, 4, low=0.05, high=0.95, seed=1), (uniform(3, 4, seed=2) > 0).astype(np.float32)
    check(lambda p: p.binary_crossentropy(Tensor(y), reduction=reduction),
          lambda p: F.binary_cross_entropy(p, torch.tensor(y), reduction=reduction), p, atol=1e-5)
    soft = uniform(3, 4, low=0, high=1, seed=3)
    check(lambda p: p.binary_crossentropy(Tensor(soft), reduction=reduction),
          lambda p: F.binary_cross_entropy(p, torch.tensor(soft), reduction=reduction), p, atol=1e-5)

@pytest.mark.parametrize("reduction", REDS)
def test_binary_crossentropy_logits(reduction):
    x, y = randn(3, 4, scale=3.0), (uniform(3, 4, seed=2) > 0).astype(np.float32)
    check(lambda x: x.binary_crossentropy_logits(Tensor(y), reduction=reduction),
          lambda x: F.binary_cross_entropy_with_logits(x, torch.tensor(y), reduction=reduction), x, atol=1e-5)
    pw = np.abs(randn(4, seed=5)) + 0.5
    check(lambda x: x.binary_crossentropy_logits(Tensor(y), reduction=reduction, pos_weight=Tensor(pw)),
          lambda x: F.binary_cross_entropy_with_logits(x, torch.tensor(y), reduction=reduction, pos_weight=torch.tensor(pw)), x, atol=1e-5)

def test_binary_crossentropy_logits_extreme():
    x = np.array([-200.0, -30.0, 0.0, 30.0, 200.0], np.float32)
    y = np.array([1.0, 0.0, 1.0, 1.0, 0.0], np.float32)
    check(lambda x: x.binary_crossentropy_logits(Tensor(y), reduction="none"),
          lambda x: F.binary_cross_entropy_with_logits(x, torch.tensor(y), reduction="none"), x, atol=1e-5, upstream="ones")

def _sparse_torch(x, y, ignore_index, ls, reduction):
    xt = x.movedim(-1, 1) if x.ndim > 2 else x
    return F.cross_entropy(xt, y, ignore_index=ignore_index, label_smoothing=ls, reduction=reduction)

@pytest.mark.parametrize("reduction", REDS)
@pytest.mark.parametrize("ls", [0.0, 0.25])
def test_sparse_categorical_crossentropy(reduction, ls):
    x, y = randn(6, 5, scale=2.0), randint(6, high=5, seed=1)
    check(lambda x, y: x.sparse_categorical_crossentropy(y, label_smoothing=ls, reduction=reduction),
          lambda x, y: _sparse_torch(x, y, -1, ls, reduction), x, y, atol=1e-5)

@pytest.mark.parametrize("reduction", REDS)
@pytest.mark.parametrize("ls", [0.0, 0.3])
def test_sparse_categorical_crossentropy_ignore_index(reduction, ls):
    x, y = randn(2, 4, 5, scale=2.0), randint(2, 4, high=5, seed=1)
    y[0, 1] = y[1, 3] = -1
    y2 = y.copy()
    y2[y2 == -1] = -100   # an explicit ignore_index other than -1 ignores its entries (PyTorch's rule)
    check(lambda x, y: x.sparse_categorical_crossentropy(y, ignore_index=-100, label_smoothing=ls, reduction=reduction),
          lambda x, y: _sparse_torch(x, y, -100, ls, reduction), x, y2, atol=1e-5)
    y3 = y.copy()
    y3[y3 == -1] = 2   # a custom ignore_index that is also a valid class
    check(lambda x, y: x.sparse_categorical_crossentropy(y, ignore_index=2, label_smoothing=ls, reduction=reduction),
          lambda x, y: _sparse_torch(x, y, 2, ls, reduction), x, y3, atol=1e-5)

@pytest.mark.parametrize("reduction", REDS)
@pytest.mark.parametrize("ls", [0.0, 0.3])
def test_sparse_categorical_crossentropy_default_ignores_nothing(reduction, ls):
    """tinygrad's rule: the default ignore_index=-1 ignores nothing. A label -1 is out of range: its entry adds only
    the smoothing term and still counts in the mean."""
    x, y = randn(6, 5, scale=2.0), randint(6, high=5, seed=2)
    y[1] = y[4] = -1
    log_probs = x - np.log(np.exp(x).sum(-1, keepdims=True))
    picked = np.where(y >= 0, log_probs[np.arange(6), np.clip(y, 0, None)], 0.0)
    per_entry = -((1 - ls) * picked + ls * log_probs.mean(-1))
    expected = {"mean": per_entry.mean(), "sum": per_entry.sum(), "none": per_entry}[reduction]
    got = Tensor(x).sparse_categorical_crossentropy(Tensor(y), label_smoothing=ls, reduction=reduction)
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-5, atol=1e-6)

def test_sparse_categorical_crossentropy_errors():
    x = Tensor(randn(3, 4))
    with pytest.raises(IndexError): x.sparse_categorical_crossentropy(Tensor([0, 1]))
    with pytest.raises(ValueError): x.sparse_categorical_crossentropy(Tensor([0, 1, 2]), reduction="avg")
    with pytest.raises(RuntimeError): x.sparse_categorical_crossentropy(Tensor([0, 1, 2]), label_smoothing=1.5)

@pytest.mark.parametrize("reduction", REDS)
@pytest.mark.parametrize("ls", [0.0, 0.2])
def test_cross_entropy_indices(reduction, ls):
    x, y = randn(5, 4, scale=2.0), randint(5, high=4, seed=1)
    check(lambda x, y: x.cross_entropy(y, reduction=reduction, label_smoothing=ls),
          lambda x, y: F.cross_entropy(x, y, reduction=reduction, label_smoothing=ls), x, y, atol=1e-5)

@pytest.mark.parametrize("reduction", REDS)
def test_cross_entropy_kdim_and_probabilities(reduction):
    x, y = randn(2, 4, 3, scale=2.0), randint(2, 3, high=4, seed=1)
    check(lambda x, y: x.cross_entropy(y, reduction=reduction, label_smoothing=0.1),
          lambda x, y: F.cross_entropy(x, y, reduction=reduction, label_smoothing=0.1), x, y, atol=1e-5)
    probs = np.random.default_rng(3).dirichlet(np.ones(4), size=5).astype(np.float32)
    xp = randn(5, 4, seed=4)
    check(lambda x: x.cross_entropy(Tensor(probs), reduction=reduction, label_smoothing=0.1),
          lambda x: F.cross_entropy(x, torch.tensor(probs), reduction=reduction, label_smoothing=0.1), xp, atol=1e-5)

def test_cross_entropy_1d():
    check(lambda x, y: x.cross_entropy(y), lambda x, y: F.cross_entropy(x, y), randn(5), np.array(3, np.int64), atol=1e-5)

def test_cross_entropy_errors():
    x = Tensor(randn(3, 4))
    with pytest.raises(RuntimeError): x.cross_entropy(Tensor([0, 1]))
    with pytest.raises(ValueError): x.cross_entropy(Tensor([0, 1, 2]), reduction="max")
    with pytest.raises(RuntimeError): x.cross_entropy(Tensor([0, 1, 2]), label_smoothing=-0.1)
    with pytest.raises(TypeError): x.cross_entropy(Tensor([[True] * 4] * 3))

@pytest.mark.parametrize("reduction", REDS)
def test_nll_loss(reduction):
    x, y = randn(6, 4), randint(6, high=4, seed=1)
    w = np.abs(randn(4, seed=2)) + 0.1
    logp = lambda t: t.log_softmax(1)
    check(lambda x, y: logp(x).nll_loss(y, reduction=reduction), lambda x, y: F.nll_loss(logp(x), y, reduction=reduction), x, y, atol=1e-5)
    # torch can't differentiate nll_loss with respect to weight, so it is a constant here
    check(lambda x, y: logp(x).nll_loss(y, Tensor(w), reduction=reduction),
          lambda x, y: F.nll_loss(logp(x), y, torch.tensor(w), reduction=reduction), x, y, atol=1e-5)
    y2 = y.copy(); y2[[1, 4]] = 0
    check(lambda x, y: logp(x).nll_loss(y, Tensor(w), ignore_index=0, reduction=reduction),
          lambda x, y: F.nll_loss(logp(x), y, torch.tensor(w), ignore_index=0, reduction=reduction), x, y2, atol=1e-5)

def test_nll_loss_kdim_and_1d():
    x, y = randn(2, 4, 3), randint(2, 3, high=4, seed=1)
    y[0, 0] = -100
    check(lambda x, y: x.nll_loss(y, ignore_index=-100), lambda x, y: F.nll_loss(x, y, ignore_index=-100), x, y, atol=1e-5)
    check(lambda x, y: x.nll_loss(y), lambda x, y: F.nll_loss(x, y), randn(4), np.array(2, np.int64), atol=1e-5)

def test_nll_loss_errors():
    x = Tensor(randn(3, 4))
    with pytest.raises(ValueError): x.nll_loss(Tensor([0, 1]))
    with pytest.raises(ValueError): x.nll_loss(Tensor([0, 1, 2]), weight=Tensor.ones(3))
    with pytest.raises(ValueError): x.nll_loss(Tensor([0, 1, 2]), reduction="mean ")
    with pytest.raises(ValueError): x.binary_crossentropy(Tensor.ones(3, 4), reduction="total")
    with pytest.raises(ValueError): x.binary_crossentropy_logits(Tensor.ones(3, 4), reduction="")
    with pytest.raises(IndexError): x.binary_crossentropy(Tensor.ones(2, 4))

# ------------------------------------------------------------------ a few ops on the PYTHON (numpy-interpreted) backend too

def test_cross_entropy_on_devices(device):
    x, y = randn(4, 5, scale=2.0), randint(4, high=5, seed=1)
    check(lambda x, y: x.cross_entropy(y, label_smoothing=0.1), lambda x, y: F.cross_entropy(x, y, label_smoothing=0.1),
          x, y, atol=1e-5, device=device)

def test_layernorm_on_devices(device):
    check(lambda x: x.layernorm(), lambda x: F.layer_norm(x, (5,)), randn(4, 5, scale=2.0), atol=1e-5, device=device)

def test_sdpa_on_devices(device):
    q, k, v = randn(2, 3, 4, seed=2), randn(2, 5, 4, seed=3), randn(2, 5, 4, seed=4)
    check(lambda q, k, v: q.scaled_dot_product_attention(k, v, is_causal=True),
          lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), q, k, v, atol=1e-5, device=device)
