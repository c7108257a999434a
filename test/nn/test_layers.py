"""fusegrad.nn layers against their torch.nn equivalents: weights are copied over, then the forward
output and the gradients (input and every parameter) are compared. BatchNorm is checked in train
and eval mode, including its running statistics over several steps."""
import math
import numpy as np
import pytest
import torch
from fusegrad import Tensor, GlobalCounters, Context, dtypes, nn

def _np(t): return t.detach().numpy().copy() if isinstance(t, torch.Tensor) else t.numpy()

def _rand(rng, *shape, scale=1.0): return (rng.standard_normal(shape) * scale).astype(np.float32)

def _copy_params(layer, tlayer, names, rng=None):
    """Give torch our values (randomized first when ``rng`` is given, so an all-ones init doesn't hide bugs)."""
    for name in names:
        ours = getattr(layer, name)
        if rng is not None:
            setattr(layer, name, Tensor(_rand(rng, *ours.shape), requires_grad=True))
            ours = getattr(layer, name)
        with torch.no_grad(): getattr(tlayer, name).copy_(torch.tensor(ours.numpy()))

def _compare(layer, tlayer, x_np, names, atol=1e-5, rtol=1e-5, grad_atol=None, seed=0, x_dtype=None):
    """Forward both, then backward (out * r).sum() for a fixed random r; compare out, dx, d(param)."""
    grad_atol = atol if grad_atol is None else grad_atol
    x = Tensor(x_np, requires_grad=x_dtype is None, dtype=x_dtype)
    tx = torch.tensor(x_np, requires_grad=x_dtype is None)
    params = [getattr(layer, n) for n in names]
    for p in params: p.requires_grad = True
    out, tout = layer(x), tlayer(tx)
    r = _rand(np.random.default_rng(seed + 100), *tout.shape)
    targets = ([x] if x_dtype is None else []) + params
    grads = (out * Tensor(r)).sum().gradient(*targets)   # taken before out is realized (that drops its graph)
    Tensor.realize(out, *grads)
    np.testing.assert_allclose(out.numpy(), _np(tout), atol=atol, rtol=rtol, err_msg="forward")
    ttargets = ([tx] if x_dtype is None else []) + [getattr(tlayer, n) for n in names]
    for tt in ttargets: tt.grad = None
    (tout * torch.tensor(r)).sum().backward()
    labels = (["input"] if x_dtype is None else []) + names
    for g, tt, label in zip(grads, ttargets, labels):
        np.testing.assert_allclose(g.numpy(), _np(tt.grad), atol=grad_atol, rtol=rtol, err_msg=f"grad of {label}")

# ---------------------------------------------------------------- Linear

@pytest.mark.parametrize("bias", [True, False])
def test_linear(bias):
    rng = np.random.default_rng(0)
    layer, tlayer = nn.Linear(6, 5, bias=bias), torch.nn.Linear(6, 5, bias=bias)
    names = ["weight", "bias"] if bias else ["weight"]
    _copy_params(layer, tlayer, names)
    _compare(layer, tlayer, _rand(rng, 2, 3, 6), names)

def test_linear_init():
    Tensor.manual_seed(0)
    layer = nn.Linear(16, 32)
    assert layer.weight.shape == (32, 16) and layer.bias.shape == (32,)
    bound = 1 / math.sqrt(16)
    w, b = layer.weight.numpy(), layer.bias.numpy()
    assert np.abs(w).max() <= bound and np.abs(b).max() <= bound
    assert w.std() > bound / 3 and len(np.unique(w)) > 500                          # spread over the range
    assert nn.Linear(4, 3, bias=False).bias is None

# ---------------------------------------------------------------- convolutions

@pytest.mark.parametrize("kwargs", [
    dict(kernel_size=3),
    dict(kernel_size=(3, 2), stride=2, padding=1),
    dict(kernel_size=3, dilation=2, padding=2, groups=2),
    dict(kernel_size=3, padding="same", bias=False),
])
def test_conv2d(kwargs):
    rng = np.random.default_rng(1)
    layer, tlayer = nn.Conv2d(4, 6, **kwargs), torch.nn.Conv2d(4, 6, **kwargs)
    names = ["weight"] + (["bias"] if kwargs.get("bias", True) else [])
    _copy_params(layer, tlayer, names)
    _compare(layer, tlayer, _rand(rng, 2, 4, 7, 6), names, atol=1e-5, grad_atol=5e-4)

@pytest.mark.parametrize("kwargs", [dict(kernel_size=3), dict(kernel_size=2, stride=2, padding=1, groups=3), dict(kernel_size=3, padding="same")])
def test_conv1d(kwargs):
    rng = np.random.default_rng(2)
    layer, tlayer = nn.Conv1d(3, 6, **kwargs), torch.nn.Conv1d(3, 6, **kwargs)
    _copy_params(layer, tlayer, ["weight", "bias"])
    _compare(layer, tlayer, _rand(rng, 2, 3, 9), ["weight", "bias"], atol=1e-5, grad_atol=5e-4)

@pytest.mark.parametrize("kwargs", [
    dict(kernel_size=3),
    dict(kernel_size=3, stride=2, padding=1, output_padding=1),
    dict(kernel_size=(2, 3), stride=(2, 1), groups=2, bias=False),
    dict(kernel_size=3, dilation=2, padding=1),
])
def test_conv_transpose2d(kwargs):
    rng = np.random.default_rng(3)
    layer, tlayer = nn.ConvTranspose2d(4, 6, **kwargs), torch.nn.ConvTranspose2d(4, 6, **kwargs)
    names = ["weight"] + (["bias"] if kwargs.get("bias", True) else [])
    _copy_params(layer, tlayer, names)
    _compare(layer, tlayer, _rand(rng, 2, 4, 5, 4), names, atol=1e-5, grad_atol=5e-4)

def test_conv_transpose1d():
    rng = np.random.default_rng(4)
    kwargs = dict(kernel_size=3, stride=2, padding=1, output_padding=1)
    layer, tlayer = nn.ConvTranspose1d(3, 4, **kwargs), torch.nn.ConvTranspose1d(3, 4, **kwargs)
    _copy_params(layer, tlayer, ["weight", "bias"])
    _compare(layer, tlayer, _rand(rng, 2, 3, 6), ["weight", "bias"], atol=1e-5, grad_atol=5e-4)

def test_conv_init_and_shapes():
    Tensor.manual_seed(1)
    conv = nn.Conv2d(4, 8, 3, groups=2)
    assert conv.weight.shape == (8, 2, 3, 3) and conv.bias.shape == (8,)
    bound = 1 / math.sqrt(4 * 9)
    assert np.abs(conv.weight.numpy()).max() <= bound and np.abs(conv.bias.numpy()).max() <= bound
    assert conv.weight.numpy().std() > bound / 3
    assert nn.Conv1d(3, 5, 4).weight.shape == (5, 3, 4)
    assert nn.ConvTranspose2d(4, 6, 3, groups=2).weight.shape == (4, 3, 3, 3)
    assert nn.ConvTranspose1d(4, 6, 3).weight.shape == (4, 6, 3)
    assert nn.Conv2d(2, 2, 3, bias=False).bias is None

# ---------------------------------------------------------------- BatchNorm

def _bn_pair(ndim, sz, **kwargs):
    tcls = {2: torch.nn.BatchNorm1d, 3: torch.nn.BatchNorm1d, 4: torch.nn.BatchNorm2d, 5: torch.nn.BatchNorm3d}[ndim]
    ours = {2: nn.BatchNorm1d, 3: nn.BatchNorm1d, 4: nn.BatchNorm2d, 5: nn.BatchNorm3d}[ndim](sz, **kwargs)
    return ours, tcls(sz, **kwargs)

@pytest.mark.parametrize("shape,kwargs", [
    ((4, 3, 5, 5), {}),
    ((4, 3, 5, 5), {"momentum": 0.3, "eps": 1e-3}),
    ((6, 3), {}),
    ((3, 2, 7), {"affine": False}),
    ((2, 2, 3, 3, 3), {}),
])
def test_batchnorm_train_and_running_stats(shape, kwargs):
    rng = np.random.default_rng(5)
    bn, tbn = _bn_pair(len(shape), shape[1], **kwargs)
    names = ["weight", "bias"] if kwargs.get("affine", True) else []
    _copy_params(bn, tbn, names, rng=rng)
    tbn.train()
    with Tensor.train():
        for step in range(3):
            x_np = _rand(rng, *shape, scale=2.0) + step
            _compare(bn, tbn, x_np, names, atol=1e-5, rtol=1e-4, grad_atol=1e-4, seed=step)
            np.testing.assert_allclose(bn.running_mean.numpy(), _np(tbn.running_mean), atol=1e-5, rtol=1e-5)
            np.testing.assert_allclose(bn.running_var.numpy(), _np(tbn.running_var), atol=1e-5, rtol=1e-5)
    assert bn.num_batches_tracked.shape == () and bn.num_batches_tracked.item() == 3 == tbn.num_batches_tracked.item()
    # eval mode uses the running statistics
    tbn.eval()
    with Tensor.train(False):
        _compare(bn, tbn, _rand(rng, *shape), names, atol=1e-5, rtol=1e-4, grad_atol=1e-4)
        np.testing.assert_allclose(bn.running_mean.numpy(), _np(tbn.running_mean), atol=1e-6)   # unchanged in eval

def test_batchnorm_eval_uses_running_stats():
    rng = np.random.default_rng(6)
    bn, tbn = nn.BatchNorm2d(3), torch.nn.BatchNorm2d(3)
    mean, var = _rand(rng, 3), np.abs(_rand(rng, 3)) + 0.5
    bn.running_mean.assign(Tensor(mean)); bn.running_var.assign(Tensor(var))
    with torch.no_grad(): tbn.running_mean.copy_(torch.tensor(mean)); tbn.running_var.copy_(torch.tensor(var))
    _copy_params(bn, tbn, ["weight", "bias"], rng=rng)
    tbn.eval()
    with Context(TRAINING=0):
        _compare(bn, tbn, _rand(rng, 2, 3, 4, 4), ["weight", "bias"], atol=1e-5, grad_atol=1e-4)

def test_batchnorm_without_running_stats():
    rng = np.random.default_rng(7)
    bn, tbn = nn.BatchNorm2d(3, track_running_stats=False), torch.nn.BatchNorm2d(3, track_running_stats=False)
    assert not hasattr(bn, "running_mean")
    _copy_params(bn, tbn, ["weight", "bias"], rng=rng)
    tbn.eval()   # without running stats torch uses batch statistics even in eval, and so do we
    _compare(bn, tbn, _rand(rng, 3, 3, 4, 4), ["weight", "bias"], atol=1e-5, rtol=1e-4, grad_atol=1e-4)

def test_batchnorm_params_and_context_training():
    bn = nn.BatchNorm(4)
    assert nn.BatchNorm2d is nn.BatchNorm and nn.BatchNorm1d is nn.BatchNorm and nn.BatchNorm3d is nn.BatchNorm
    assert bn.weight.tolist() == [1.0] * 4 and bn.bias.tolist() == [0.0] * 4
    assert bn.running_mean.tolist() == [0.0] * 4 and bn.running_var.tolist() == [1.0] * 4
    assert bn.num_batches_tracked.dtype == dtypes.int64 and bn.num_batches_tracked.shape == () and bn.num_batches_tracked.item() == 0
    assert bn.running_mean.requires_grad is False and bn.running_var.requires_grad is False
    x = Tensor(np.arange(16, dtype=np.float32).reshape(2, 4, 2))
    with Context(TRAINING=1): bn(x).realize()   # today's spelling of training mode updates the stats too
    assert bn.num_batches_tracked.item() == 1 and bn.running_mean.numpy()[0] > 0
    assert nn.BatchNorm2d(3, affine=False).weight is None

def test_batchnorm_num_batches_tracked_is_a_0d_int64_like_torch_and_tinygrad(tmp_path):
    # shape () and int64 (torch's and tinygrad's "long"), so a torch BatchNorm2d state dict loads as it is
    from fusegrad.nn.state import torch_load, load_state_dict, get_state_dict
    tbn = torch.nn.BatchNorm2d(3).train()
    for _ in range(2): tbn(torch.randn(4, 3, 5, 5))
    path = tmp_path / "bn.pt"
    torch.save(tbn.state_dict(), str(path))
    bn = nn.BatchNorm2d(3)
    assert {k: (v.shape, v.dtype) for k, v in get_state_dict(bn).items()} == \
        {k: (tuple(v.shape), dtypes.int64 if v.dtype == torch.int64 else dtypes.float32) for k, v in tbn.state_dict().items()}
    load_state_dict(bn, torch_load(str(path)), verbose=False)
    assert bn.num_batches_tracked.shape == () and bn.num_batches_tracked.dtype == dtypes.int64 and bn.num_batches_tracked.item() == 2
    np.testing.assert_allclose(bn.running_mean.numpy(), _np(tbn.running_mean), atol=1e-6)
    # training steps keep counting from the loaded value, as a scalar
    with Tensor.train():
        for _ in range(3): bn(Tensor.rand(2, 3, 4, 4)).realize()
    assert bn.num_batches_tracked.shape == () and bn.num_batches_tracked.dtype == dtypes.int64 and bn.num_batches_tracked.item() == 5

def test_batchnorm_train_kernel_count():
    # train-mode forward (no running stats): the mean, the variance and the normalized output
    # are three reductions/passes that can't share a kernel
    x = Tensor(np.random.default_rng(8).standard_normal((4, 3, 6, 6)).astype(np.float32)).realize()
    bn = nn.BatchNorm2d(3, track_running_stats=False)
    Tensor.realize(bn.weight, bn.bias)
    with Tensor.train():
        GlobalCounters.reset()
        bn(x).realize()
    assert GlobalCounters.kernel_count <= 3

# ---------------------------------------------------------------- other norms

@pytest.mark.parametrize("affine", [True, False])
def test_groupnorm(affine):
    rng = np.random.default_rng(9)
    layer, tlayer = nn.GroupNorm(2, 6, affine=affine), torch.nn.GroupNorm(2, 6, affine=affine)
    names = ["weight", "bias"] if affine else []
    _copy_params(layer, tlayer, names, rng=rng)
    _compare(layer, tlayer, _rand(rng, 3, 6, 4, 5), names, atol=1e-5, rtol=1e-4, grad_atol=1e-4)

def test_instancenorm():
    rng = np.random.default_rng(10)
    layer, tlayer = nn.InstanceNorm(3), torch.nn.InstanceNorm2d(3, affine=True)
    _copy_params(layer, tlayer, ["weight", "bias"], rng=rng)
    _compare(layer, tlayer, _rand(rng, 2, 3, 4, 5), ["weight", "bias"], atol=1e-5, rtol=1e-4, grad_atol=1e-4)
    no_affine = nn.InstanceNorm(3, affine=False)
    assert no_affine.weight is None
    _compare(no_affine, torch.nn.InstanceNorm1d(3), _rand(rng, 2, 3, 6), [], atol=1e-5, rtol=1e-4, grad_atol=1e-4)

@pytest.mark.parametrize("normalized_shape,affine", [(5, True), ((4, 5), True), (5, False)])
def test_layernorm(normalized_shape, affine):
    rng = np.random.default_rng(11)
    layer = nn.LayerNorm(normalized_shape, elementwise_affine=affine)
    tlayer = torch.nn.LayerNorm(normalized_shape, elementwise_affine=affine)
    names = ["weight", "bias"] if affine else []
    _copy_params(layer, tlayer, names, rng=rng)
    _compare(layer, tlayer, _rand(rng, 3, 4, 5), names, atol=1e-5, rtol=1e-4, grad_atol=1e-4)

def test_layernorm2d():
    rng = np.random.default_rng(12)
    layer, tln = nn.LayerNorm2d(3), torch.nn.LayerNorm(3)
    tlayer = lambda x: tln(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
    _copy_params(layer, tln, ["weight", "bias"], rng=rng)
    x_np = _rand(rng, 2, 3, 4, 5)
    x, tx = Tensor(x_np, requires_grad=True), torch.tensor(x_np, requires_grad=True)
    out, tout = layer(x), tlayer(tx)
    gx, gw, gb = (out * out).sum().gradient(x, layer.weight, layer.bias)
    np.testing.assert_allclose(out.numpy(), _np(tout), atol=1e-5, rtol=1e-4)
    (tout * tout).sum().backward()
    for g, t in ((gx, tx), (gw, tln.weight), (gb, tln.bias)): np.testing.assert_allclose(g.numpy(), _np(t.grad), atol=1e-4, rtol=1e-4)

@pytest.mark.parametrize("affine", [True, False])
def test_rmsnorm(affine):
    rng = np.random.default_rng(13)
    layer, tlayer = nn.RMSNorm(6, elementwise_affine=affine), torch.nn.RMSNorm(6, eps=1e-6, elementwise_affine=affine)
    names = ["weight"] if affine else []
    _copy_params(layer, tlayer, names, rng=rng)
    _compare(layer, tlayer, _rand(rng, 2, 3, 6), names, atol=1e-5, rtol=1e-4, grad_atol=1e-4)

def test_rmsnorm_half_input_computes_in_float():
    x = Tensor(np.array([[300.0, -300.0, 200.0, 100.0]], dtype=np.float16))   # x*x overflows float16
    xf = x.numpy().astype(np.float32)
    expected = xf / np.sqrt((xf * xf).mean(-1, keepdims=True) + 1e-6)
    out = nn.RMSNorm(4, elementwise_affine=False)(x)
    assert out.dtype == dtypes.half                  # normalized in float32, cast back to the input dtype
    np.testing.assert_allclose(out.numpy().astype(np.float32), expected, rtol=2e-3)
    out = nn.RMSNorm(4)(x)                           # then times the float32 weight (promotes, like tinygrad)
    assert out.dtype == dtypes.float32
    np.testing.assert_allclose(out.numpy(), expected, rtol=2e-3)

# ---------------------------------------------------------------- Embedding

def test_embedding():
    rng = np.random.default_rng(14)
    layer, tlayer = nn.Embedding(10, 4), torch.nn.Embedding(10, 4)
    _copy_params(layer, tlayer, ["weight"])
    idx = np.array([[1, 2, 9], [0, 2, 2]], dtype=np.int32)
    out, tout = layer(Tensor(idx)), tlayer(torch.tensor(idx, dtype=torch.long))
    r = _rand(rng, *tout.shape)
    gw, = (out * Tensor(r)).sum().gradient(layer.weight)
    np.testing.assert_allclose(out.numpy(), _np(tout), atol=1e-6)
    (tout * torch.tensor(r)).sum().backward()
    np.testing.assert_allclose(gw.numpy(), _np(tlayer.weight.grad), atol=1e-6)

def test_embedding_init_and_errors():
    Tensor.manual_seed(2)
    layer = nn.Embedding(20, 8)
    bound = math.sqrt(6 / (20 + 8))          # glorot uniform
    assert layer.weight.shape == (20, 8) and np.abs(layer.weight.numpy()).max() <= bound
    with pytest.raises(TypeError): layer(Tensor([1.0, 2.0]))

def test_embedding_is_one_kernel():
    layer = nn.Embedding(16, 8)
    layer.weight.realize()
    idx = Tensor(np.array([[3, 1, 15, 0]], dtype=np.int32)).realize()
    layer(idx).realize()   # the first call may build the cached arange
    GlobalCounters.reset()
    out = layer(idx).realize()
    assert GlobalCounters.kernel_count == 1
    np.testing.assert_allclose(out.numpy()[0], layer.weight.numpy()[[3, 1, 15, 0]])

# ---------------------------------------------------------------- LSTMCell

@pytest.mark.parametrize("bias", [True, False])
def test_lstmcell(bias):
    rng = np.random.default_rng(15)
    cell, tcell = nn.LSTMCell(3, 5, bias=bias), torch.nn.LSTMCell(3, 5, bias=bias)
    names = ["weight_ih", "weight_hh"] + (["bias_ih", "bias_hh"] if bias else [])
    _copy_params(cell, tcell, names, rng=rng)
    x_np, h_np, c_np = _rand(rng, 2, 3), _rand(rng, 2, 5), _rand(rng, 2, 5)
    x, h, c = (Tensor(a, requires_grad=True) for a in (x_np, h_np, c_np))
    tx, th, tc = (torch.tensor(a, requires_grad=True) for a in (x_np, h_np, c_np))
    (h1, c1), (th1, tc1) = cell(x, (h, c)), tcell(tx, (th, tc))
    params = [getattr(cell, n) for n in names]
    grads = (h1.sum() * 2 + (c1 * c1).sum()).gradient(x, h, c, *params)
    np.testing.assert_allclose(h1.numpy(), _np(th1), atol=1e-5)
    np.testing.assert_allclose(c1.numpy(), _np(tc1), atol=1e-5)
    (th1.sum() * 2 + (tc1 * tc1).sum()).backward()
    for g, t in zip(grads, [tx, th, tc] + [getattr(tcell, n) for n in names]):
        np.testing.assert_allclose(g.numpy(), _np(t.grad), atol=1e-5, rtol=1e-4)

def test_lstmcell_default_state_and_init():
    Tensor.manual_seed(3)
    cell = nn.LSTMCell(3, 4)
    assert cell.weight_ih.shape == (16, 3) and cell.weight_hh.shape == (16, 4) and cell.bias_ih.shape == (16,)
    assert np.abs(cell.weight_ih.numpy()).max() <= 0.5
    tcell = torch.nn.LSTMCell(3, 4)
    _copy_params(cell, tcell, ["weight_ih", "weight_hh", "bias_ih", "bias_hh"])
    x_np = _rand(np.random.default_rng(16), 2, 3)
    h, c = cell(Tensor(x_np))
    th, tc = tcell(torch.tensor(x_np))
    np.testing.assert_allclose(h.numpy(), _np(th), atol=1e-5)
    np.testing.assert_allclose(c.numpy(), _np(tc), atol=1e-5)

# ---------------------------------------------------------------- parameter names (state dicts interchange with torch)

def test_parameter_names_match_torch():
    def ours(layer): return {k for k, v in vars(layer).items() if isinstance(v, Tensor) and k != "arange"}
    def theirs(m): return set(m.state_dict().keys())
    assert ours(nn.Linear(2, 3)) == theirs(torch.nn.Linear(2, 3))
    assert ours(nn.Conv2d(2, 3, 3)) == theirs(torch.nn.Conv2d(2, 3, 3))
    assert ours(nn.ConvTranspose2d(2, 3, 3)) == theirs(torch.nn.ConvTranspose2d(2, 3, 3))
    assert ours(nn.BatchNorm2d(3)) == theirs(torch.nn.BatchNorm2d(3))
    assert ours(nn.GroupNorm(1, 3)) == theirs(torch.nn.GroupNorm(1, 3))
    assert ours(nn.LayerNorm(3)) == theirs(torch.nn.LayerNorm(3))
    assert ours(nn.Embedding(4, 3)) == theirs(torch.nn.Embedding(4, 3))
    assert ours(nn.LSTMCell(2, 3)) == theirs(torch.nn.LSTMCell(2, 3))
