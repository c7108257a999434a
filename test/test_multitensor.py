"""Multi-device tensors (``Tensor.shard``): values against numpy, gradients against PyTorch,
training steps against the same step on one device. "CPU:1".."CPU:4" are separate instances of
the CPU device, so every sharded kernel and copy really runs per device on one machine."""
import numpy as np
import pytest
import torch
from fusegrad import Tensor, Context, GlobalCounters, TinyJit, nn, dtypes, Device
from fusegrad.engine.jit import JitError
from fusegrad.engine.realize import run_schedule
from fusegrad.nn.optim import Adam, SGD
from fusegrad.nn.state import get_parameters, get_state_dict, load_state_dict
from fusegrad.schedule.multi import multi_axis
from fusegrad.uop.ops import Ops
from helpers import assert_tensor

D2 = ("CPU:1", "CPU:2")
D4 = ("CPU:1", "CPU:2", "CPU:3", "CPU:4")

def data(rng, *shape) -> np.ndarray: return rng.standard_normal(shape).astype(np.float32)

def shard_devices(t: Tensor) -> list[str]:
    """The device of every shard buffer of a realized multi-device tensor."""
    assert t.uop.op is Ops.MULTI
    return [s.base.arg[1] for s in t.uop.src]

# ---------------------------------------------------------------- shard / gather

@pytest.mark.parametrize("axis", [None, 0, 1, -1])
def test_round_trip(rng, axis):
    a = data(rng, 4, 6)
    t = Tensor(a).shard(D2, axis)
    assert t.device == D2 and t.shape == (4, 6) and t.dtype == dtypes.float32
    assert multi_axis(t.uop) == (None if axis is None else axis % 2)
    assert_tensor(t, a)
    t.realize()
    assert shard_devices(t) == list(D2)
    # a split axis stores 1/n of the tensor per device; a replicated one the whole tensor each
    sizes = [s.base.arg[2] for s in t.uop.src]
    assert sizes == ([24, 24] if axis is None else [12, 12])
    assert t.tolist() == a.tolist()

def test_gather_to_other_devices(rng):
    a = data(rng, 4, 6)
    t = Tensor(a).shard(D4, 0)
    for device in ("CPU", "CPU:3"):
        g = t.to(device)
        assert g.device == device
        assert_tensor(g, a)
    assert Tensor(a).shard(D2, 1)[2, 3].item() == pytest.approx(float(a[2, 3]))

def test_shard_is_idempotent_and_reshards(rng):
    a = data(rng, 4, 6)
    t = Tensor(a).shard(("cpu:1", "CPU:2"), 0)
    assert t.device == D2
    assert t.shard(D2, 0).uop is t.uop and t.shard(D2, -2).uop is t.uop
    r = t.shard(D2, 1)
    assert multi_axis(r.uop) == 1
    assert_tensor(r, a)
    r.realize()
    assert [s.shape for s in r.uop.src] == [(4, 3), (4, 3)]
    moved = t.shard(("CPU:3", "CPU:4"), None)
    assert moved.device == ("CPU:3", "CPU:4") and multi_axis(moved.uop) is None
    assert_tensor(moved, a)

def test_shard_in_place(rng):
    a = data(rng, 4, 2)
    t = Tensor(a)
    assert t.shard_(D2, 0) is t
    assert t.device == D2
    t.realize()
    assert t.uop.op is Ops.MULTI
    assert_tensor(t, a)

def test_device_tuple_creation():
    assert_tensor(Tensor([1, 2, 3], device=D2), np.array([1, 2, 3], dtype=np.int32))
    assert Tensor([1, 2, 3], device=D2).device == D2
    assert_tensor(Tensor.ones(2, 3, device=D2) + Tensor.arange(3, device=D2), np.ones((2, 3), np.float32) + np.arange(3, dtype=np.float32))

def test_python_devices(rng):
    a = data(rng, 4, 6)
    t = Tensor(a).shard(("PYTHON:1", "PYTHON:2"), 1)
    assert_tensor((t * 2 + 1).sum(1), (a * 2 + 1).sum(1))
    assert_tensor(t.exp().max(), np.exp(a).max(), rtol=1e-5)

# ---------------------------------------------------------------- elementwise

def test_elementwise_same_sharding(rng):
    a, b = data(rng, 4, 6), data(rng, 4, 6)
    x, y = Tensor(a).shard(D2, 0), Tensor(b).shard(D2, 0)
    out = (x * y + x.exp()).realize()
    assert multi_axis(out.uop) == 0 and shard_devices(out) == list(D2)
    assert_tensor(out, a * b + np.exp(a), rtol=1e-5)
    assert_tensor(x > y, a > b)

@pytest.mark.parametrize("axes", [(0, 1), (1, 0), (None, 0), (0, None)])
def test_elementwise_different_sharding(rng, axes):
    a, b = data(rng, 4, 6), data(rng, 4, 6)
    x, y = Tensor(a).shard(D2, axes[0]), Tensor(b).shard(D2, axes[1])
    assert_tensor(x - y, a - b)
    assert_tensor(x.maximum(y) / 2, np.maximum(a, b) / 2)

def test_elementwise_with_unsharded(rng):
    a, b, c = data(rng, 4, 6), data(rng, 4, 6), data(rng, 6)
    x = Tensor(a).shard(D2, 0)
    assert_tensor(x + Tensor(b), a + b)
    assert_tensor(Tensor(b) * x, b * a)
    assert_tensor(x + Tensor(c, device="CPU:3"), a + c)      # broadcast from yet another device
    assert_tensor(x * 3 - 1, a * 3 - 1)
    assert_tensor((x > 0).where(x, 0.5), np.where(a > 0, a, 0.5))

# ---------------------------------------------------------------- reduce

@pytest.mark.parametrize("shard_axis", [0, 1, None])
@pytest.mark.parametrize("reduce_axis", [None, 0, 1, (0, 1)])
def test_reduce(rng, shard_axis, reduce_axis):
    a = data(rng, 4, 6)
    x = Tensor(a).shard(D2, shard_axis)
    assert_tensor(x.sum(reduce_axis), a.sum(reduce_axis), rtol=1e-5, atol=1e-5)
    assert_tensor(x.max(reduce_axis), a.max(reduce_axis))
    assert_tensor(x.mean(reduce_axis), a.mean(reduce_axis), rtol=1e-5, atol=1e-6)
    assert_tensor(x.min(reduce_axis, keepdim=True), a.min(reduce_axis, keepdims=True))

def test_reduce_over_split_axis_is_replicated(rng):
    a = data(rng, 8, 3)
    out = Tensor(a).shard(D4, 0).sum(0).realize()
    # the allreduce leaves the whole result on every device
    assert multi_axis(out.uop) is None and shard_devices(out) == list(D4)
    for shard in out.uop.src: np.testing.assert_allclose(Tensor(shard).numpy(), a.sum(0), rtol=1e-5)
    other = Tensor(a).shard(D4, 0).sum(1).realize()   # over another axis: shard by shard, still split
    assert multi_axis(other.uop) == 0

@pytest.mark.parametrize("shape", [(8, 10), (4, 7, 3), (4, 5)])
@pytest.mark.parametrize("op", ["sum", "max"])
def test_ring_allreduce_equals_naive(rng, shape, op):
    a = data(rng, *shape)
    results, copies = {}, {}
    for ring in (0, 2):
        with Context(RING=ring):
            x = Tensor(a).shard(D4, 0).realize()
            out = getattr(x, op)(0)
            items = out.schedule()
            copies[ring] = sum(item.ast.op is Ops.COPY for item in items)
            run_schedule(items)
            results[ring] = [Tensor(s).numpy() for s in out.uop.src]
    assert copies[2] > copies[0]    # the ring really ran: it moves n chunks around in 2(n-1) steps
    expected = getattr(a, op)(0)
    for naive, ring in zip(results[0], results[2]):
        np.testing.assert_allclose(ring, naive, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(ring, expected, rtol=1e-5, atol=1e-5)

# ---------------------------------------------------------------- matmul

def test_matmul_data_parallel(rng):
    a, w = data(rng, 8, 5), data(rng, 5, 3)
    out = (Tensor(a).shard(D2, 0) @ Tensor(w).shard(D2)).realize()
    assert multi_axis(out.uop) == 0     # each device multiplies its half of the batch
    assert_tensor(out, a @ w, rtol=1e-5, atol=1e-5)

def test_matmul_sharded_reduce_axis(rng):
    a, w = data(rng, 3, 8), data(rng, 8, 5)
    out = (Tensor(a).shard(D4, 1) @ Tensor(w).shard(D4, 0)).realize()
    assert multi_axis(out.uop) is None  # partial products, then an allreduce
    assert_tensor(out, a @ w, rtol=1e-5, atol=1e-5)
    assert_tensor(Tensor(a).shard(D2, 1) @ Tensor(w), a @ w, rtol=1e-5, atol=1e-5)

# ---------------------------------------------------------------- movement

def test_reshape_tracks_axis(rng):
    a = data(rng, 4, 6)
    x = Tensor(a).shard(D2, 1)
    r = x.reshape(4, 2, 3)
    assert multi_axis(r.uop) == 1
    assert_tensor(r, a.reshape(4, 2, 3))
    y = Tensor(a).shard(D2, 0)
    assert multi_axis(y.reshape(24).uop) == 0 and multi_axis(y.reshape(1, 2, 12).uop) == 1
    assert_tensor(y.reshape(2, 12), a.reshape(2, 12))
    assert_tensor(y.reshape(1, 2, 12), a.reshape(1, 2, 12))

def test_permute_expand_flip(rng):
    a = data(rng, 4, 6)
    x = Tensor(a).shard(D2, 0)
    assert multi_axis(x.permute(1, 0).uop) == 1
    assert_tensor(x.permute(1, 0), a.T)
    assert_tensor(x.reshape(4, 1, 6).expand(4, 3, 6), np.broadcast_to(a.reshape(4, 1, 6), (4, 3, 6)))
    assert_tensor(x.flip(0), a[::-1])
    assert_tensor(x.flip(1), a[:, ::-1])

def test_pad_and_shrink(rng):
    a = data(rng, 4, 6)
    x = Tensor(a).shard(D2, 0)
    assert_tensor(x.pad(((0, 0), (1, 2))), np.pad(a, ((0, 0), (1, 2))))
    assert multi_axis(x.pad(((0, 0), (1, 2))).uop) == 0
    assert_tensor(x.pad(((1, 1), (0, 0)), value=2.0), np.pad(a, ((1, 1), (0, 0)), constant_values=2.0))
    assert_tensor(x[:, 1:4], a[:, 1:4])
    assert_tensor(x[2:4], a[2:4])        # exactly the second shard
    assert_tensor(x[1:3, ::2], a[1:3, ::2])
    assert_tensor(Tensor.cat(x, x, dim=0), np.concatenate([a, a]))
    assert_tensor(Tensor.cat(x, x, dim=1), np.concatenate([a, a], 1))

# ---------------------------------------------------------------- devices and kernels

def test_kernels_run_on_shard_devices(rng):
    x = Tensor(data(rng, 4, 6)).shard(D2, 0).realize()
    items = (x * 2 + 1).schedule()
    assert sorted(item.bufs[0].device for item in items) == list(D2)

def test_same_kernel_compiles_once(rng, monkeypatch):
    import fusegrad.codegen as codegen
    x = Tensor(data(rng, 6, 10)).shard(D2, 0).realize()
    compiled = []
    original = codegen.get_program
    def counting(ast, renderer, *args, **kwargs):
        compiled.append(ast)
        return original(ast, renderer, *args, **kwargs)
    monkeypatch.setattr(codegen, "get_program", counting)
    out = (x * 1.2345 + 6.789).sqrt().realize()   # one new elementwise kernel per shard
    assert shard_devices(out) == list(D2)
    assert len(compiled) == len(set(compiled)) == 1
    from fusegrad.engine.realize import method_cache
    runners = [method_cache[(device, compiled[0], key[2])] for key in method_cache if key[1] is compiled[0] for device in D2][:2]
    assert runners[0].lib is runners[1].lib and runners[0].p.device == "CPU:1" and runners[1].p.device == "CPU:2"

# ---------------------------------------------------------------- gradients

def test_gradients_match_torch(rng):
    a, w, b = data(rng, 8, 5), data(rng, 5, 4), data(rng, 4)
    x = Tensor(a).shard(D2, 0)
    W = Tensor(w, requires_grad=True).shard_(D2, 1).realize()
    B = Tensor(b, requires_grad=True).shard_(D2, 0).realize()
    loss = ((x @ W + B).relu() ** 2).mean()
    loss.backward()
    tx, tw, tb = torch.tensor(a), torch.tensor(w, requires_grad=True), torch.tensor(b, requires_grad=True)
    tloss = ((tx @ tw + tb).relu() ** 2).mean()
    tloss.backward()
    assert loss.item() == pytest.approx(tloss.item(), rel=1e-5)
    # gradients come out sharded like their parameters
    assert W.grad.device == D2 and multi_axis(W.grad.uop) == 1 and multi_axis(B.grad.uop) == 0
    np.testing.assert_allclose(W.grad.numpy(), tw.grad.numpy(), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(B.grad.numpy(), tb.grad.numpy(), rtol=1e-4, atol=1e-6)

def test_gradient_through_realized_sharded_intermediate(rng):
    # realizing a sharded activation (printing it, say) keeps its graph for backward
    a, w = data(rng, 4, 3), data(rng, 3, 5)
    W = Tensor(w, requires_grad=True).shard_(D2).realize()
    h = (Tensor(a).shard(D2, 0) @ W).relu()
    h.realize()
    (h * h).sum().backward()
    tw = torch.tensor(w, requires_grad=True)
    ((torch.tensor(a) @ tw).relu() ** 2).sum().backward()
    assert W.grad is not None and W.grad.device == D2
    np.testing.assert_allclose(W.grad.numpy(), tw.grad.numpy(), rtol=1e-4, atol=1e-6)

def test_gradient_through_shard(rng):
    a = data(rng, 4, 6)
    x = Tensor(a, requires_grad=True)
    y = x.shard(D2, 0).shard(D2, 1)
    dx, = (y * y).sum().gradient(x)
    assert dx.device == x.device == Device.DEFAULT   # back on x's single device (CPU, or what DEV names), not sharded
    assert_tensor(dx, 2 * a, rtol=1e-6)

def _train(model_fn, x: np.ndarray, y: np.ndarray, devices=None, weight_axis=None, steps=2) -> tuple[list[np.ndarray], float]:
    """A few Adam steps; with ``devices``: the batch split over them, 2-d+ weights split along
    ``weight_axis`` (or replicated), everything else replicated."""
    Tensor.manual_seed(1)
    model = model_fn()
    params = get_parameters(model)
    Tensor.realize(*params)
    if devices is not None:
        for p in params: p.shard_(devices, weight_axis if p.ndim >= 2 else None).realize()
    opt = Adam(params, lr=0.01)
    X, Y = Tensor(x), Tensor(y)
    if devices is not None: X, Y = X.shard(devices, 0), Y.shard(devices, 0)
    with Tensor.train():
        for _ in range(steps):
            opt.zero_grad()
            loss = model(X).sparse_categorical_crossentropy(Y)
            loss.backward()
            opt.step()
    if devices is not None:
        for p in params: assert p.device == devices and p.grad.device == devices and multi_axis(p.grad.uop) == multi_axis(p.uop)
    return [p.numpy() for p in params], loss.item()

class _MLP:
    def __init__(self): self.l1, self.l2 = nn.Linear(6, 8), nn.Linear(8, 4)
    def __call__(self, x): return self.l2(self.l1(x).relu())

class _ConvNet:
    def __init__(self): self.c1, self.c2, self.l = nn.Conv2d(3, 4, 3), nn.Conv2d(4, 4, 3, padding=1), nn.Linear(4 * 3 * 3, 4)
    def __call__(self, x): return self.l(self.c2(self.c1(x).relu()).relu().max_pool2d(2).flatten(1))

@pytest.mark.parametrize("weight_axis", [None, 0])
def test_linear_adam_step_matches_single_device(rng, weight_axis):
    x, y = data(rng, 8, 6), rng.integers(0, 4, (8,)).astype(np.int32)
    ref, ref_loss = _train(_MLP, x, y)
    got, loss = _train(_MLP, x, y, D2, weight_axis)
    assert loss == pytest.approx(ref_loss, rel=1e-5)
    for r, g in zip(ref, got): np.testing.assert_allclose(g, r, rtol=1e-5, atol=1e-5)

@pytest.mark.parametrize("weight_axis", [None, 0])
def test_conv_adam_step_matches_single_device(rng, weight_axis):
    x, y = data(rng, 4, 3, 8, 8), rng.integers(0, 4, (4,)).astype(np.int32)
    ref, ref_loss = _train(_ConvNet, x, y)
    got, loss = _train(_ConvNet, x, y, D4 if weight_axis is None else D2, weight_axis)
    assert loss == pytest.approx(ref_loss, rel=1e-5)
    for r, g in zip(ref, got): np.testing.assert_allclose(g, r, rtol=1e-5, atol=1e-5)

def test_sgd_step_on_sharded_params(rng):
    a, w = data(rng, 4, 6), data(rng, 6, 2)
    W = Tensor(w, requires_grad=True).shard_(D2, 0).realize()
    opt = SGD([W], lr=0.1, momentum=0.9)
    with Tensor.train():
        for _ in range(2):
            opt.zero_grad()
            (Tensor(a).shard(D2) @ W).sum().backward()
            opt.step()
    grad = a.sum(0)[:, None].repeat(2, 1)
    expected = w - 0.1 * grad - 0.1 * (0.9 * grad + grad)
    assert W.device == D2 and multi_axis(W.uop) == 0
    np.testing.assert_allclose(W.numpy(), expected, rtol=1e-5, atol=1e-5)

def test_batchnorm_on_batch_sharded_input(rng):
    a = data(rng, 4, 3, 2, 2)
    bn = nn.BatchNorm2d(3)
    for p in (bn.weight, bn.bias, bn.running_mean, bn.running_var): p.shard_(D2)
    with Tensor.train():
        out = bn(Tensor(a).shard(D2, 0))
        assert out.device == D2
        normalized = (a - a.mean((0, 2, 3), keepdims=True)) / np.sqrt(a.var((0, 2, 3), keepdims=True) + 1e-5)
        assert_tensor(out, normalized, rtol=1e-4, atol=1e-5)
    # the running statistics are replicated and updated on every device
    np.testing.assert_allclose(bn.running_mean.numpy(), 0.1 * a.mean((0, 2, 3)), rtol=1e-5, atol=1e-6)
    assert bn.running_mean.device == D2

# ---------------------------------------------------------------- state dicts and the JIT

def test_load_state_dict_onto_sharded_params(rng):
    source, target = nn.Linear(6, 4), nn.Linear(6, 4)
    target.weight.shard_(D2, 0).realize()
    target.bias.shard_(D2).realize()
    load_state_dict(target, get_state_dict(source), verbose=False)
    assert target.weight.device == D2 and multi_axis(target.weight.uop) == 0
    assert target.bias.device == D2 and multi_axis(target.bias.uop) is None
    np.testing.assert_array_equal(target.weight.numpy(), source.weight.numpy())
    np.testing.assert_array_equal(target.bias.numpy(), source.bias.numpy())
    x = data(rng, 2, 6)
    np.testing.assert_allclose(target(Tensor(x).shard(D2)).numpy(), source(Tensor(x)).numpy(), rtol=1e-6)

def test_jit_with_sharded_inputs(rng):
    @TinyJit
    def step(x: Tensor, w: Tensor) -> Tensor: return (x @ w).relu().sum(1).realize()
    w = data(rng, 6, 3)
    W = Tensor(w).shard(D2).realize()
    for i in range(4):
        a = data(rng, 4, 6)
        out = step(Tensor(a).shard(D2, 0), W)
        np.testing.assert_allclose(out.numpy(), np.maximum(a @ w, 0).sum(1), rtol=1e-5, atol=1e-6)
    assert len(step.jit_cache) > 0
    with pytest.raises(JitError):   # another sharding means other shard shapes: not this capture
        step(Tensor(data(rng, 4, 6)).shard(D2, 1), W)

# ---------------------------------------------------------------- errors (raised before any kernel runs)

def test_errors(rng):
    a = data(rng, 3, 4)
    with pytest.raises(ValueError, match="empty"): Tensor(a).shard(())
    with pytest.raises(RuntimeError, match="unknown device"): Tensor(a).shard(("CPU:1", "NOPE:2"))
    with pytest.raises(RuntimeError, match=r"\(3, 4\).*axis 0.*CPU:1.*not divisible"): Tensor(a).shard(D2, 0)
    with pytest.raises(IndexError): Tensor(a).shard(D2, 2)
    with pytest.raises(TypeError): Tensor(a).shard("CPU:1")
    x, y = Tensor(a).shard(D2, 1), Tensor(a).shard(("CPU:3", "CPU:4"), 1)
    with pytest.raises(RuntimeError, match="different devices"): x + y
    with pytest.raises(RuntimeError, match="device"): Tensor(a).realize().assign(x)
    GlobalCounters.reset()
    with pytest.raises(RuntimeError, match="move elements between shards"): x.reshape(2, 6).realize()
    assert GlobalCounters.kernel_count == 0

# ---------------------------------------------------------------- a data-parallel ResNet-style step

class _ResidualNet:
    """conv -> BatchNorm -> relu, a residual block of two convs with BatchNorm, pooling, a linear head."""
    def __init__(self):
        self.stem, self.stem_bn = nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8)
        self.c1, self.bn1 = nn.Conv2d(8, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8)
        self.c2, self.bn2 = nn.Conv2d(8, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8)
        self.head = nn.Linear(8, 5)
    def __call__(self, x):
        x = self.stem_bn(self.stem(x)).relu()
        x = (x + self.bn2(self.c2(self.bn1(self.c1(x)).relu()))).relu()
        return self.head(x.mean((2, 3)))

@pytest.mark.parametrize("devices", [D2, D4], ids=["2 devices", "4 devices"])
def test_data_parallel_resnet_step_equals_single_device(rng, devices):
    """Batch split over the devices, parameters (and BatchNorm statistics) replicated: three SGD steps
    give the single-device parameters within 1e-6."""
    x, y = data(rng, 8, 3, 8, 8), rng.integers(0, 5, (8,)).astype(np.int32)
    def train(devices):
        Tensor.manual_seed(4)
        model = _ResidualNet()
        state = get_state_dict(model)
        Tensor.realize(*state.values())
        if devices is not None:
            for t in state.values(): t.shard_(devices).realize()
        params = get_parameters(model)
        opt = SGD([p for p in params if p.requires_grad is not False], lr=0.05, momentum=0.9)
        X, Y = Tensor(x), Tensor(y)
        if devices is not None: X, Y = X.shard(devices, 0), Y.shard(devices, 0)
        with Tensor.train():
            for _ in range(3):
                opt.zero_grad()
                model(X).sparse_categorical_crossentropy(Y).backward()
                opt.step()
        return {name: t.numpy() for name, t in state.items()}
    single, parallel = train(None), train(devices)
    for name in single: np.testing.assert_allclose(parallel[name], single[name], rtol=1e-6, atol=1e-6, err_msg=name)

@pytest.mark.parametrize("devices", [None, D2], ids=["1 device", "2 devices"])
def test_two_batchnorms_of_one_size_get_their_own_gradients(rng, devices):
    """The smallest graph that showed the ResNet mismatch: two equal-sized BatchNorms in a row. Their
    weights start as the same constant (ones); as interned constant UOps both BNs' weights were one
    node, so each got the sum of both gradients (plus that of every equal constant in the graph)."""
    x, scale = data(rng, 4, 4, 2, 2), data(rng, 4, 4, 2, 2)
    first, second = nn.BatchNorm2d(4), nn.BatchNorm2d(4)
    params = [first.weight, first.bias, second.weight, second.bias]
    X = Tensor(x) if devices is None else Tensor(x).shard(devices, 0)
    if devices is not None:
        for t in [*get_state_dict(first).values(), *get_state_dict(second).values()]: t.shard_(devices)
    with Tensor.train():
        (second(first(X).relu()) * Tensor(scale).shard_like(X)).sum().backward()
    reference = [torch.nn.BatchNorm2d(4), torch.nn.BatchNorm2d(4)]
    (reference[1](reference[0](torch.tensor(x)).relu()) * torch.tensor(scale)).sum().backward()
    expected = [p.grad.numpy() for bn in reference for p in (bn.weight, bn.bias)]
    for name, t, grad in zip(("first.weight", "first.bias", "second.weight", "second.bias"), params, expected):
        np.testing.assert_allclose(t.grad.numpy(), grad, rtol=1e-5, atol=1e-5, err_msg=name)

# ---------------------------------------------------------------- tinygrad's multi-device API details

def test_uneven_shard_is_a_runtime_error():
    with pytest.raises(RuntimeError, match="not divisible by 3"): Tensor.arange(10).shard(("CPU:1", "CPU:2", "CPU:3"), axis=0)

def test_mem_used_per_device():
    before = dict(GlobalCounters.mem_used_per_device)
    t = Tensor.ones(8, 4).contiguous().shard(D2, axis=0).realize()
    for device in D2: assert GlobalCounters.mem_used_per_device[device] - before.get(device, 0) >= 4 * 4 * 4
    del t

@pytest.mark.parametrize("axis", [None, 0, 1])
def test_like_constructors_keep_the_sharding(axis):
    t = Tensor.ones(4, 6).contiguous().shard(D2, axis=axis)
    for made in (t.zeros_like(), t.ones_like(), t.full_like(3.0), t.rand_like(), t.randn_like()):
        assert made.device == D2 and made.uop.axis == axis and made.shape == (4, 6)
    assert t.full_like(3.0).numpy().tolist() == [[3.0] * 6] * 4
    with pytest.raises(RuntimeError, match="device"): t.zeros_like(device="CPU")

def test_rand_like_of_a_split_tensor_draws_per_device():
    Tensor.manual_seed(9)
    split = Tensor.ones(4, 2).shard(D2, axis=0).rand_like().numpy()
    Tensor.manual_seed(9)
    first, second = Tensor.rand(2, 2, device="CPU:1").numpy(), Tensor.rand(2, 2, device="CPU:2").numpy()
    np.testing.assert_array_equal(split, np.concatenate([first, second]))

def test_random_and_empty_constructors_on_device_tuples():
    with pytest.raises(ValueError, match="single device"): Tensor.rand(4, device=D2)
    empty = Tensor.empty(4, 2, device=D2)
    assert empty.device == D2 and empty.uop.axis is None and empty.shape == (4, 2)

def test_shard_like():
    w = Tensor.ones(4, 2).shard(D2, axis=0)
    x = Tensor(np.arange(8, dtype=np.float32).reshape(4, 2)).shard_like(w)
    assert x.device == D2 and x.uop.axis == 0
    np.testing.assert_array_equal(x.numpy(), np.arange(8).reshape(4, 2))
    assert x.shard_like(w) is x
    assert Tensor([1.0]).shard_like(Tensor([2.0], device="CPU:3")).device == "CPU:3"

def test_assign_between_devices_raises_before_work():
    single, split = Tensor.zeros(4, 4).contiguous().realize(), Tensor.ones(4, 4).contiguous().shard(D2, axis=0).realize()
    with pytest.raises(RuntimeError, match="device"): single.assign(split)
    with pytest.raises(RuntimeError, match="device"): split.assign(single)

# ---------------------------------------------------------------- view assigns write per shard

def _written_per_kernel(t: Tensor) -> list[tuple[str, int]]:
    """Schedule ``t``'s pending writes and run them; returns (device, elements its loops cover) per kernel."""
    items = t.schedule()
    loops = [(si.buffer_uops[0].arg[1], int(np.prod([r.src[0].arg for r in si.ast.toposort if r.op is Ops.RANGE])))
             for si in items]
    run_schedule(items)
    return loops

# (view, the numpy view of the same elements, the devices it reaches when split along axis 0 over D4)
SHARD_VIEWS = [
    ("cols", lambda t: t[:, 1:3], lambda r: r[:, 1:3], D4),
    ("rows in one shard", lambda t: t[2:4], lambda r: r[2:4], D4[1:2]),
    ("rows over two shards", lambda t: t[3:5], lambda r: r[3:5], D4[1:3]),
    ("every other row", lambda t: t[::2], lambda r: r[::2], D4),
    ("step rows", lambda t: t[1::3], lambda r: r[1::3], ("CPU:1", "CPU:3", "CPU:4")),
    ("step rows in one shard", lambda t: t[5::4], lambda r: r[5::4], D4[2:3]),
    ("negative step", lambda t: t[::-2, 2], lambda r: r[::-2, 2], D4),
    ("flip", lambda t: t.flip(0)[:2], lambda r: r[::-1][:2], D4[3:]),
    ("transpose", lambda t: t.T[1, 4:], lambda r: r.T[1, 4:], D4[2:]),
    ("reshape", lambda t: t.reshape(4, 12)[1, 3:9], lambda r: r.reshape(4, 12)[1, 3:9], D4[1:2]),
    ("chained", lambda t: t[1:][::2][1:3], lambda r: r[1:][::2][1:3], D4[1:3]),
    ("shrink of a pad", lambda t: t.pad(((1, 1), (0, 0)))[6:9], lambda r: r[5:8], D4[2:]),
]

@pytest.mark.parametrize("name, view, np_view, reached", SHARD_VIEWS, ids=[v[0] for v in SHARD_VIEWS])
def test_view_assign_on_split_tensor_writes_only_the_shards_it_reaches(name, view, np_view, reached):
    ref = np.arange(48, dtype=np.float32).reshape(8, 6)
    x = Tensor(ref).shard(D4, axis=0).realize()
    target = view(x)
    value = np.arange(100, 100 + int(np.prod(target.shape)), dtype=np.float32).reshape(target.shape)
    target.assign(Tensor(value).shard(D4, axis=None).realize())
    # one kernel per shard the view reaches, each over that shard's part of the view only
    loops = _written_per_kernel(x)
    assert [d for d, _ in loops] == list(reached)
    assert sum(n for _, n in loops) == value.size
    np_view(ref)[...] = value
    np.testing.assert_array_equal(x.numpy(), ref)

@pytest.mark.parametrize("axis", [0, 1, None])
def test_view_assign_on_sharded_tensor_matches_numpy(rng, axis):
    ref = data(rng, 4, 6)
    x = Tensor(ref).shard(D2, axis=axis).realize()
    x[1:3, 1:5].assign(x[1:3, 1:5] * 10)          # reads the target: each shard writes its own part
    ref[1:3, 1:5] *= 10
    x[::3, 1::2] = 7.0                             # setitem with steps takes the same path
    ref[::3, 1::2] = 7.0
    x.flip(1)[2:].assign(Tensor(np.ones((2, 6), np.float32)).shard(D2, axis=axis))   # a value split like the target
    ref[:, ::-1][2:] = 1.0
    np.testing.assert_array_equal(x.numpy(), ref)

def test_replicated_view_assign_is_one_kernel_per_device():
    x = Tensor(np.zeros((4, 4), np.float32)).shard(D2, axis=None).realize()
    x[1:3, 1:3].assign(Tensor.full((2, 2), 5.0, device=D2))
    assert _written_per_kernel(x) == [("CPU:1", 4), ("CPU:2", 4)]
    expected = np.zeros((4, 4), np.float32)
    expected[1:3, 1:3] = 5
    np.testing.assert_array_equal(x.numpy(), expected)

def test_view_assign_across_the_split_axis_rewrites_the_shards():
    # a reshape that moves elements between shards has no per-shard view: the whole tensor is
    # written with the view's region replaced (still correct, one kernel per shard)
    ref = np.arange(24, dtype=np.float32).reshape(6, 4)
    x = Tensor(ref).shard(D2, axis=1).realize()
    x.reshape(4, 6)[1:3].assign(Tensor.full((2, 6), -1.0, device=D2))
    ref.reshape(4, 6)[1:3] = -1
    np.testing.assert_array_equal(x.numpy(), ref)

def test_view_assign_after_a_pending_whole_assign_on_a_sharded_tensor():
    ref = np.arange(8, dtype=np.float32).reshape(4, 2)
    x = Tensor(ref).shard(D2, axis=0).realize()
    x.assign(x * 2)
    x[1:3].assign(x[1:3] + 100)                   # applies after the whole assign
    ref = ref * 2
    ref[1:3] += 100
    np.testing.assert_array_equal(x.numpy(), ref)
