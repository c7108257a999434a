"""tinygrad 0.14 Tensor API names fusegrad added (see docs/api_fidelity.md); expected values come
from torch / numpy, semantics from tinygrad's documented behaviour."""
import math
import numpy as np
import pytest
import torch
from fusegrad import Tensor, dtypes, Device
from fusegrad.dtype import DType
from fusegrad.nn.optim import SGD, Adam, AdamW, Muon, LARS, LAMB

def test_stack_as_a_method_keeps_self():
    a, b, c = Tensor([1, 2]), Tensor([3, 4]), Tensor([5, 6])
    expected = torch.stack([torch.tensor([1, 2]), torch.tensor([3, 4]), torch.tensor([5, 6])], dim=1).numpy()
    np.testing.assert_equal(a.stack(b, c, dim=1).numpy(), expected)
    np.testing.assert_equal(Tensor.stack(a, b, c, dim=1).numpy(), expected)
    np.testing.assert_equal(Tensor.stack([a, b, c], dim=1).numpy(), expected)
    with pytest.raises(RuntimeError, match="equal shapes"): a.stack(Tensor([1]))

def test_normalize_matches_torch():
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    x[1] = 0
    for p, dim in [(2.0, 1), (1.0, 0), (3.0, -1), (math.inf, 1)]:
        want = torch.nn.functional.normalize(torch.tensor(x), p=p, dim=dim).numpy()
        np.testing.assert_allclose(Tensor(x).normalize(p=p, dim=dim).numpy(), want, rtol=1e-5, atol=1e-6)
    # p=0 divides by the count of non-zero entries (tinygrad's documented semantics)
    np.testing.assert_allclose(Tensor(x).normalize(p=0).numpy(), x / np.maximum((x != 0).sum(1, keepdims=True), 1e-12), rtol=1e-6)

def test_softmin_matches_torch():
    x = np.random.default_rng(1).standard_normal((2, 5)).astype(np.float32)
    for axis in (-1, 0):
        np.testing.assert_allclose(Tensor(x).softmin(axis).numpy(), torch.nn.functional.softmin(torch.tensor(x), dim=axis).numpy(), rtol=1e-5, atol=1e-7)

def test_gelu_approximate():
    x = np.linspace(-4, 4, 33).astype(np.float32)
    for mode in ("tanh", "none"):
        want = torch.nn.functional.gelu(torch.tensor(x), approximate=mode).numpy()
        np.testing.assert_allclose(Tensor(x).gelu(approximate=mode).numpy(), want, rtol=1e-5, atol=2e-6)
    np.testing.assert_allclose(Tensor(x).gelu().numpy(), torch.nn.functional.gelu(torch.tensor(x), approximate="tanh").numpy(), atol=2e-6)
    with pytest.raises(RuntimeError, match="approximate"): Tensor(x).gelu(approximate="erf")
    # the exact form's gradient
    t = Tensor(x, requires_grad=True); t.gelu(approximate="none").sum().backward()
    tt = torch.tensor(x, requires_grad=True); torch.nn.functional.gelu(tt).sum().backward()
    np.testing.assert_allclose(t.grad.numpy(), tt.grad.numpy(), rtol=1e-4, atol=1e-5)

def test_empty_like_and_const_like():
    x = Tensor.ones(2, 3, dtype=dtypes.float16)
    e = x.empty_like()
    assert (e.shape, e.dtype, e.device) == ((2, 3), dtypes.float16, x.device)
    assert x.empty_like(dtype=dtypes.int32).dtype == dtypes.int32
    c = x.const_like(7)
    assert (c.shape, c.dtype) == ((2, 3), dtypes.float16) and c.numpy().tolist() == np.full((2, 3), 7, np.float16).tolist()
    assert x.const_like(3, dtypes.int32).dtype == dtypes.int32

def test_pad_to_and_shrink_to():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_equal(Tensor(x).pad_to(4, 5).numpy(), np.pad(x, ((0, 2), (0, 2))))
    np.testing.assert_equal(Tensor(x).pad_to((None, 5), value=-1).numpy(), np.pad(x, ((0, 0), (0, 2)), constant_values=-1))
    np.testing.assert_equal(Tensor(x).shrink_to(1, None).numpy(), x[:1])
    np.testing.assert_equal(Tensor(x).shrink_to((2, 2)).numpy(), x[:, :2])
    with pytest.raises(ValueError, match="smaller"): Tensor(x).pad_to(1, 3)
    with pytest.raises(ValueError, match="dims"): Tensor(x).shrink_to(1)

def _numpy_newton_schulz(g: np.ndarray, steps: int, params: tuple, eps: float = 1e-7) -> np.ndarray:
    if g.shape[-2] > g.shape[-1]: return _numpy_newton_schulz(g.T, steps, params, eps).T
    g = g / (np.sqrt((g.astype(np.float64) ** 2).sum()) + eps)
    for _ in range(steps):
        gram = g @ g.T
        g = sum(p * np.linalg.matrix_power(gram, i) @ g for i, p in enumerate(params))
    return g

def test_newton_schulz_matches_numpy():
    rng = np.random.default_rng(2)
    for shape in [(4, 6), (6, 4)]:
        x = rng.standard_normal(shape).astype(np.float32)
        got = Tensor(x).newton_schulz(5, (3.4445, -4.775, 2.0315)).numpy()
        np.testing.assert_allclose(got, _numpy_newton_schulz(x.astype(np.float64), 5, (3.4445, -4.775, 2.0315)), rtol=1e-4, atol=1e-4)
    # with params (1.5, -0.5) the iteration converges to the orthogonal polar factor U V^T
    x = rng.standard_normal((3, 3)).astype(np.float32) + 3 * np.eye(3, dtype=np.float32)
    u, _, vt = np.linalg.svd(x)
    np.testing.assert_allclose(Tensor(x).newton_schulz(40, (1.5, -0.5)).numpy(), u @ vt, atol=1e-3)
    with pytest.raises(ValueError, match="2-d"): Tensor([1.0, 2.0]).newton_schulz(1, (1.0,))

def test_nonzero_and_masked_select_with_size():
    x = np.array([[1, 0, 2], [0, 3, 0]], dtype=np.int32)
    want = np.argwhere(x)
    np.testing.assert_equal(Tensor(x).nonzero().numpy(), want)
    got = Tensor(x).nonzero(size=5, fill_value=-1)
    assert got.dtype == dtypes.int32 and got.shape == (5, 2)
    np.testing.assert_equal(got.numpy(), np.concatenate([want, np.full((2, 2), -1)]))
    np.testing.assert_equal(Tensor(x).nonzero(size=2).numpy(), want[:2])
    y = np.array([1.5, -2.0, 3.0], dtype=np.float32)
    sel = Tensor(y).masked_select(Tensor(y > 0), size=4, fill_value=-7)
    assert sel.dtype == dtypes.float32
    np.testing.assert_equal(sel.numpy(), np.array([1.5, 3.0, -7, -7], dtype=np.float32))
    np.testing.assert_equal(Tensor(y).masked_select(Tensor(y > 0), size=1).numpy(), y[y > 0][:1])
    np.testing.assert_equal(Tensor(y).masked_select(Tensor(y > 0)).numpy(), torch.masked_select(torch.tensor(y), torch.tensor(y > 0)).numpy())

def test_clone_to_device_keeps_grad():
    x = Tensor([1.0, 2.0], requires_grad=True)
    (x * x).sum().backward()
    c = x.clone(device="PYTHON")
    assert c.device == "PYTHON" and c.grad is not None and c.grad.device == "PYTHON"
    np.testing.assert_equal(c.numpy(), [1.0, 2.0])
    np.testing.assert_equal(c.grad.numpy(), [2.0, 4.0])
    assert x.clone().device == x.device

def test_reverse_bitwise_and_shift_ops():
    a = np.array([1, 2, 3], dtype=np.int32)
    np.testing.assert_equal(Tensor(a).bitwise_and(6, reverse=True).numpy(), 6 & a)
    np.testing.assert_equal(Tensor(a).bitwise_or(8, reverse=True).numpy(), 8 | a)
    np.testing.assert_equal(Tensor(a).bitwise_xor(5, reverse=True).numpy(), 5 ^ a)
    np.testing.assert_equal(Tensor(a).lshift(1, reverse=True).numpy(), np.left_shift(1, a))
    np.testing.assert_equal(Tensor(a).rshift(64, reverse=True).numpy(), np.right_shift(64, a))
    np.testing.assert_equal((1 << Tensor(a)).numpy(), np.left_shift(1, a))
    np.testing.assert_equal((64 >> Tensor(a)).numpy(), np.right_shift(64, a))

def test_allclose_is_a_lazy_bool_tensor():
    a, b = Tensor([1.0, 2.0]), Tensor([1.0, 2.0 + 1e-7])
    close = a.allclose(b)
    assert isinstance(close, Tensor) and close.shape == () and close.dtype == dtypes.bool
    assert bool(close) == torch.allclose(torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.0 + 1e-7]))
    assert not a.allclose(a + 1)
    nan = Tensor([float("nan")])
    assert not nan.allclose(nan) and nan.allclose(nan, equal_nan=True)

def test_dtype_min_max_bitsize():
    for dt, np_dt in [(dtypes.int8, np.int8), (dtypes.uint16, np.uint16), (dtypes.int64, np.int64), (dtypes.uint64, np.uint64)]:
        info = np.iinfo(np_dt)
        assert (dt.min, dt.max, dt.bitsize) == (info.min, info.max, info.bits)
    assert (dtypes.float32.min, dtypes.float32.max, dtypes.float16.bitsize) == (-math.inf, math.inf, 16)
    assert (dtypes.bool.min, dtypes.bool.max, dtypes.bool.bitsize) == (False, True, 1)
    assert dtypes.int8.const(300) == np.array(300).astype(np.int8) and dtypes.float32.const(1) == 1.0
    assert DType.new(5, 32, "int", "i") == dtypes.int32
    assert dtypes.int8s == (dtypes.uint8, dtypes.int8) and dtypes.weaks == (dtypes.weakint, dtypes.weakfloat)

def test_muon_defaults_match_tinygrad():
    # tinygrad 0.14 nn/optim.py: Muon(lr=0.001, momentum=0.95, weight_decay=0.1, ns_steps=5,
    # ns_coefficients=(3.4445, -4.775, 2.0315), nesterov=True)
    opt = Muon([Tensor.ones(4, 4, requires_grad=True)])
    assert opt.lr.item() == pytest.approx(0.001)
    assert (opt.momentum, opt.wd, opt.ns_steps, opt.nesterov) == (0.95, 0.1, 5, True)
    assert opt.ns_coefficients == (3.4445, -4.775, 2.0315)

@pytest.mark.parametrize("make", [lambda ps, **kw: SGD(ps, lr=0.1, momentum=0.9, **kw), lambda ps, **kw: Adam(ps, lr=0.1, **kw),
                                  lambda ps, **kw: AdamW(ps, lr=0.1, **kw), lambda ps, **kw: Muon(ps, lr=0.1, **kw),
                                  lambda ps, **kw: LARS(ps, lr=0.1, **kw), lambda ps, **kw: LAMB(ps, lr=0.1, **kw)])
def test_optimizer_device_argument(make):
    def train(**kw):
        w = Tensor([[1.0, -2.0], [0.5, 3.0]], requires_grad=True).realize()
        opt = make([w], **kw)
        with Tensor.train():
            for _ in range(2):
                opt.zero_grad()
                (w * w * w).sum().backward()
                opt.step()
        return w, opt
    w_default, _ = train()
    w_other, opt = train(device="PYTHON")
    assert opt.device == "PYTHON" and opt.lr.device == "PYTHON" and w_other.device == Device.DEFAULT
    np.testing.assert_allclose(w_other.numpy(), w_default.numpy(), rtol=1e-5, atol=1e-6)

def test_clones_of_one_tensor_are_separate_copies():
    # UOps are interned: two clones of one tensor were the same node and realized into one buffer, so writing
    # one clone changed the other, and setitem on one refused ("other lazy uses": fuzz seed 20227)
    x = Tensor([0.0, 1.0, 2.0, 3.0])
    a, b = x.clone(), x.clone()
    b[1:3] = Tensor(9.0)
    a.realize()
    c = x.clone().realize()
    c.assign(Tensor([5.0, 5.0, 5.0, 5.0])).realize()
    assert a.tolist() == [0.0, 1.0, 2.0, 3.0] and b.tolist() == [0.0, 9.0, 9.0, 3.0]
    assert c.tolist() == [5.0] * 4 and x.tolist() == [0.0, 1.0, 2.0, 3.0]
