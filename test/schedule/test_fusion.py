"""Fusion, checked by kernel counts: inputs are realized first, then ``GlobalCounters.kernel_count``
is read around one realize. Every case also checks the values against numpy. Counts are upper
bounds where the issue allows fewer kernels ("≤"); exact where it names a number."""
import numpy as np
import pytest
from fusegrad import Tensor, dtypes, GlobalCounters
from fusegrad.uop.ops import Ops
from helpers import assert_tensor, count_kernels, realized

@pytest.fixture
def abc(device):
    rng = np.random.default_rng(42)
    xs = [rng.uniform(0.5, 2.0, (4, 4)).astype(np.float32) for _ in range(3)]
    return xs, [realized(x, device) for x in xs]

def test_prerealized_inputs_cost_nothing(device, abc):
    _, (a, b, c) = abc
    assert count_kernels(a, b, c) == 0

def test_elementwise_chain_one_kernel(device, abc):
    (x, y, z), (a, b, c) = abc
    out = (a + b) * c
    assert count_kernels(out) == 1
    assert_tensor(out, (x + y) * z)

def test_mul_sum_one_kernel(device, abc):
    (x, y, _), (a, b, _) = abc
    out = (a * b).sum()
    assert count_kernels(out) == 1
    assert_tensor(out, (x.astype(np.float64) * y).sum().astype(np.float32), rtol=1e-5)

def test_reduce_then_elementwise_one_kernel(device, abc):
    (x, _, _), (a, _, _) = abc
    out = a.sum(axis=1) + 1
    assert count_kernels(out) == 1
    assert_tensor(out, x.sum(axis=1) + 1, rtol=1e-5)

def test_matmul_relu_one_kernel(device, abc):
    (x, y, _), (a, b, _) = abc
    out = (a @ (b - 1.2)).relu()
    assert count_kernels(out) == 1
    assert_tensor(out, np.maximum(x @ (y - np.float32(1.2)), 0), rtol=1e-5, atol=1e-5)

def test_permute_contiguous_one_kernel(device, abc):
    (x, _, _), (a, _, _) = abc
    out = a.permute(1, 0).contiguous()
    assert count_kernels(out) == 1
    assert_tensor(out, np.ascontiguousarray(x.T))

def test_const_sum_folds_to_zero_kernels(device):
    out = Tensor.ones(4, 5, 6, device=device).sum()
    assert count_kernels(out) == 0
    assert out.item() == 120
    out2 = Tensor.full((3, 7), 2, device=device).sum(axis=1)
    assert count_kernels(out2) == 0
    assert_tensor(out2, np.full(3, 14, np.int32))

def test_const_expressions_fold(device):
    out = Tensor.ones(3, 3, device=device) * 2 + 1
    assert count_kernels(out) == 0
    assert_tensor(out, np.full((3, 3), 3.0, np.float32))

def test_pad_of_elementwise_sum_one_kernel(device, abc):
    (x, y, _), (a, b, _) = abc
    out = (a + b).pad(((1, 1), (1, 1))).sum()
    assert count_kernels(out) == 1
    assert_tensor(out, np.pad(x + y, ((1, 1), (1, 1))).astype(np.float64).sum().astype(np.float32), rtol=1e-5)
    out2 = (a + b).pad(((1, 1), (1, 1)), value=1.0).sum()
    assert count_kernels(out2) == 1
    assert_tensor(out2, np.pad(x + y, ((1, 1), (1, 1)), constant_values=1.0).astype(np.float64).sum().astype(np.float32), rtol=1e-5)

def test_pad_of_unsafe_op_sum(device, abc):
    """log2(0) is -inf: padding must not be pushed through log2, the padded zeros stay zeros."""
    (x, _, _), (a, _, _) = abc
    out = a.log2().pad(((1, 1), (1, 1))).sum()
    assert count_kernels(out) <= 2
    assert_tensor(out, np.pad(np.log2(x), ((1, 1), (1, 1))).astype(np.float64).sum().astype(np.float32), rtol=1e-5, atol=1e-5)
    out2 = (a * 0.3).exp2().pad(((0, 2), (1, 0))).sum(axis=0)
    assert count_kernels(out2) <= 2
    assert_tensor(out2, np.pad(np.exp2(x * np.float32(0.3)), ((0, 2), (1, 0))).sum(axis=0), rtol=1e-5)

def test_shared_reduce_diamond(device):
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((4, 4)).astype(np.float32), rng.standard_normal((4, 4)).astype(np.float32)
    a, b = realized(x, device), realized(y, device)
    c = a.sum() + 2
    d = a.sum() * 2
    e = c * d
    f = (b - d).sum() - e
    assert count_kernels(f) <= 3
    xs = x.astype(np.float64).sum()
    cx, dx = xs + 2, xs * 2
    assert_tensor(f, np.array((y - dx).sum() - cx * dx, np.float32), rtol=1e-4, atol=1e-4)

def test_three_reduces_of_one_input_share_a_kernel(device):
    x = np.random.default_rng(1).standard_normal((5, 6)).astype(np.float32)
    a = realized(x, device)
    s, m, mean = a.sum(1), a.max(1), a.mean(1)
    assert count_kernels(s, m, mean) == 1
    assert_tensor(s, x.sum(1), rtol=1e-5, atol=1e-5)
    assert_tensor(m, x.max(1))
    assert_tensor(mean, x.mean(1), rtol=1e-5, atol=1e-5)

def test_softmax_last_axis(device):
    x = np.random.default_rng(2).standard_normal((4, 8)).astype(np.float32)
    a = realized(x, device)
    out = a.softmax(-1)
    assert count_kernels(out) <= 3
    e = np.exp(x - x.max(-1, keepdims=True))
    assert_tensor(out, e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-6)

def test_24_doublings_one_kernel(device):
    """``a = a + a`` 24 times: the graph is a chain that must not blow up exponentially in the
    scheduler or codegen (this test would hang if it did); it is one kernel."""
    a = realized(np.array([1.0, -2.0, 0.5], np.float32), device)
    for _ in range(24): a = a + a
    assert count_kernels(a) == 1
    assert_tensor(a, np.array([1.0, -2.0, 0.5], np.float32) * 2.0 ** 24)

def test_24_doublings_int(device):
    a = realized(np.array([1, -3], np.int64), device)
    for _ in range(24): a = a + a
    assert count_kernels(a) == 1
    assert_tensor(a, np.array([1, -3], np.int64) * 2 ** 24, dtypes.int64)

def test_realized_result_costs_nothing_again(device, abc):
    (x, y, _), (a, b, _) = abc
    out = a * b
    assert count_kernels(out) == 1
    assert count_kernels(out) == 0
    # x + 0 folds to x but is a new value: it gets its own buffer (as in tinygrad), so a later
    # assign to out doesn't change it (docs/decisions.md, Mutation)
    assert count_kernels(out + 0) == 1
    assert_tensor(out, x * y)

def test_elementwise_into_reduce_with_broadcast(device, abc):
    (x, y, _), (a, b, _) = abc
    v = realized(np.arange(4, dtype=np.float32), device)
    out = ((a - v) * b).sum(axis=0).abs().sqrt()
    assert count_kernels(out) == 1
    assert_tensor(out, np.sqrt(np.abs(((x - np.arange(4, dtype=np.float32)) * y).sum(0))), rtol=1e-5, atol=1e-5)

def test_kernel_count_reset(device, abc):
    _, (a, b, _) = abc
    (a + b).realize()
    assert GlobalCounters.kernel_count >= 1
    GlobalCounters.reset()
    assert GlobalCounters.kernel_count == 0

def _reduces_over(items, size: int) -> int:
    """How many kernels run a reduce loop of ``size`` iterations."""
    return sum(1 for item in items if item.ast.op is Ops.SINK
               and any(x.op is Ops.REDUCE and any(r.src[0].arg == size for r in x.src[1:]) for x in item.ast.toposort))

def test_value_from_a_reduce_used_twice_is_stored_once(device):
    # the max gradient compares logits with their max: both must read the same stored logits (a
    # recomputation with another summation order need not be bit-equal, and then no element "is"
    # the max); relu's two elementwise uses of the matmul stay fused
    rng = np.random.default_rng(0)
    x = realized(rng.standard_normal((8, 64)).astype(np.float32), device)
    w = Tensor(rng.standard_normal((10, 64)).astype(np.float32), device=device, requires_grad=True).realize()
    logits = x @ w.T
    grad, = logits.max(1).sum().gradient(w)
    assert _reduces_over(grad.schedule(), 64) == 1
    assert count_kernels((x @ w.T).relu().sum(0)) == 1
    # conv + bias + relu feeding both a max pool and its gradient: the conv runs once
    img = realized(rng.standard_normal((2, 3, 8, 8)).astype(np.float32), device)
    k = Tensor(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), device=device, requires_grad=True).realize()
    gk, = img.conv2d(k, padding=1).relu().max_pool2d(2).sum().gradient(k)
    assert sum(1 for item in gk.schedule() if item.ast.op is Ops.SINK and _has_window_reduce(item.ast, [3, 3, 3])) == 1

def _has_window_reduce(ast, window: list[int]) -> bool:
    """Does this kernel reduce over a window of these sizes (the forward conv's 3x3x3)?"""
    return any(x.op is Ops.REDUCE and sorted(r.src[0].arg for r in x.src[1:]) == window for x in ast.toposort)

# ---------------------------------------------------------------- store vs recompute: the cost model

from fusegrad.uop.ops import GroupOp
from fusegrad.schedule import create_schedule, store_is_cheaper, LAUNCH_COST

def _kernel_asts(*tensors) -> list:
    """The kernel ASTs that realizing ``tensors`` would run (scheduled only: the tensors are untouched)."""
    items, _ = create_schedule([t.uop for t in tensors])
    return [item.ast for item in items if item.ast.op is Ops.SINK]

def _alu_ops(ast) -> list:
    """The value ops of a kernel (index arithmetic left out)."""
    return [x.op for x in ast.toposort if x.op in GroupOp.ALU and x.dtype != dtypes.index]

def _reduce_sizes(ast) -> set:
    return {r.src[0].arg for x in ast.toposort if x.op is Ops.REDUCE for r in x.src[1:]}

def _nested_reduce(ast) -> bool:
    """Does a REDUCE run inside another REDUCE's loop (one reduce's value feeds another)?"""
    return any(y.op is Ops.REDUCE and y is not x for x in ast.toposort if x.op is Ops.REDUCE for y in x.src[0].toposort)

def test_store_is_cheaper_model():
    # random normals (~100 ops) broadcast over 512 columns of a matmul: store them
    assert store_is_cheaper(100, 512, 512 * 512, 4)
    # lr * grad (2 ops) broadcast over a batch of 8, 10 elements: a kernel launch costs more than recomputing
    assert not store_is_cheaper(2, 8, 10, 4)
    # read once (no repeat) is never worth a store, however much work it is
    assert not store_is_cheaper(10 ** 6, 1, 1 << 20, 4)
    # without a launch, the break-even is bytes written + read: 2 * 4 bytes per float32 element
    assert store_is_cheaper(9, 2, 1000, 4, launch=False) and not store_is_cheaper(8, 2, 1000, 4, launch=False)
    # with one, a value stays recomputed until the repeated work passes bytes + LAUNCH_COST
    # (here 3 * LAUNCH_COST for LAUNCH_COST one-byte elements)
    assert not store_is_cheaper(1, 4, LAUNCH_COST, 1) and store_is_cheaper(1, 5, LAUNCH_COST, 1)

def test_random_normals_into_a_matmul_are_stored_once(device):
    # randn is threefry + Box-Muller (~200 ops per element once cos is range-reduced); broadcast into
    # the matmul it would be recomputed for each of the 64 columns (the 512x512 case took 7 s instead of 0.2)
    Tensor.manual_seed(3)
    out = Tensor.randn(64, 64, device=device) @ Tensor.randn(64, 64, device=device)
    asts = _kernel_asts(out)
    matmuls = [ast for ast in asts if 64 in _reduce_sizes(ast)]
    assert len(matmuls) == 1
    ops = _alu_ops(matmuls[0])
    assert not {Ops.THREEFRY, Ops.SIN, Ops.LOG2, Ops.SQRT} & set(ops), ops
    assert len(ops) <= 2, ops   # the multiply (the sum is the REDUCE itself)
    # each tensor's normals are computed once, in a kernel of their own: one log per tensor
    assert sum(_alu_ops(ast).count(Ops.LOG2) for ast in asts) == 2
    Tensor.manual_seed(3)
    a, b = Tensor.randn(64, 64, device=device).realize(), Tensor.randn(64, 64, device=device).realize()
    Tensor.manual_seed(3)
    fused = Tensor.randn(64, 64, device=device) @ Tensor.randn(64, 64, device=device)
    assert_tensor(fused, (a.numpy().astype(np.float64) @ b.numpy()).astype(np.float32), rtol=1e-4, atol=1e-4)

def test_cheap_broadcast_value_recomputed_when_tiny_stored_when_large(device):
    rng = np.random.default_rng(5)
    # 4x4: (a*2+1) recomputed 4 times costs a few dozen ops, far less than a kernel launch: one kernel
    x, y = rng.standard_normal((4, 4)).astype(np.float32), rng.standard_normal((4, 4)).astype(np.float32)
    a, b = realized(x, device), realized(y, device)
    out = (a * 2 + 1) @ b
    assert count_kernels(out) == 1
    assert_tensor(out, (x * 2 + 1) @ y, rtol=1e-5, atol=1e-5)
    # 128x128: recomputed for each of 128 columns it is 2 ops x 127 x 16384 elements, more than
    # writing and reading 64 KiB and a launch: stored, and the matmul kernel is a plain multiply-add
    x, y = rng.standard_normal((128, 128)).astype(np.float32), rng.standard_normal((128, 128)).astype(np.float32)
    a, b = realized(x, device), realized(y, device)
    out = (a * 2 + 1) @ b
    asts = _kernel_asts(out)
    assert len(asts) == 2
    assert [len(_alu_ops(ast)) for ast in asts if 128 in _reduce_sizes(ast)] == [1]
    assert_tensor(out, ((x * 2 + 1).astype(np.float64) @ y).astype(np.float32), rtol=1e-4, atol=1e-4)

def test_reduce_tail_does_not_nest_a_second_reduce(device):
    # matmul + relu + sum(axis=1): in one kernel the matmul's reduce would run inside the sum's
    # loop, where it can't be tiled (25 ms vs 0.4 ms at 256x256). The relu tail stays in the
    # matmul's kernel; the sum gets its own.
    rng = np.random.default_rng(6)
    x, y = rng.standard_normal((128, 128)).astype(np.float32), rng.standard_normal((128, 128)).astype(np.float32)
    a, b = realized(x, device), realized(y, device)
    out = (a @ b).relu().sum(axis=1)
    asts = _kernel_asts(out)
    assert len(asts) == 2 and not any(_nested_reduce(ast) for ast in asts)
    with_relu = [ast for ast in asts if {Ops.MAX, Ops.WHERE} & set(_alu_ops(ast))]
    assert len(with_relu) == 1 and Ops.MUL in _alu_ops(with_relu[0]), "relu fuses into the matmul's kernel"
    assert_tensor(out, np.maximum(x.astype(np.float64) @ y, 0).sum(axis=1).astype(np.float32), rtol=1e-4, atol=1e-3)
    # a nest of a few thousand ops stays one kernel (a launch costs more): see test_value_from_a_reduce_used_twice_is_stored_once
    small = (a[:8, :64] @ b[:64, :10]).relu().sum(0)
    asts = _kernel_asts(small)
    assert len(asts) == 1 and _nested_reduce(asts[0])
    assert_tensor(small, np.maximum(x[:8, :64].astype(np.float64) @ y[:64, :10], 0).sum(0).astype(np.float32), rtol=1e-4, atol=1e-4)

def test_stored_for_expand_recomputed_again_when_cheap(device):
    # BatchNorm's normalizer rsqrt(var + eps) * weight is broadcast over every pixel of a channel.
    # While it computes the variance it is stored; once the variance is stored anyway (here it is
    # an output too, as for the running statistics), recomputing the normalizer (~10 ops) per pixel
    # costs more than storing it at a real batch size, and less than a launch at a tiny one
    rng = np.random.default_rng(7)
    for shape, normalizer_stored in (((2, 3, 4, 4), False), ((16, 8, 32, 32), True)):
        x = realized(rng.standard_normal(shape).astype(np.float32), device)
        w = realized(rng.uniform(0.5, 2.0, shape[1]).astype(np.float32), device)
        var = (x - x.mean((0, 2, 3), keepdim=True)).square().mean((0, 2, 3), keepdim=True)
        out = x * ((var + 1e-5).rsqrt() * w.reshape(1, -1, 1, 1))
        asts = _kernel_asts(out, var)
        full = [ast for ast in asts if not _reduce_sizes(ast)]   # the elementwise output kernel
        assert len(full) == 1
        # stored: the output kernel loads the normalizer; recomputed: it takes the reciprocal square root itself
        assert (Ops.SQRT not in _alu_ops(full[0])) == normalizer_stored
        xn = x.numpy().astype(np.float64)
        v = xn.var((0, 2, 3), keepdims=True)
        assert_tensor(out, (xn / np.sqrt(v + 1e-5) * w.numpy().reshape(1, -1, 1, 1)).astype(np.float32), rtol=1e-4, atol=1e-4)

def _gated_loads(ast) -> int:
    """Loads whose value a pad's validity gate selects (``valid.where(load, 0)``)."""
    return sum(1 for x in ast.toposort if x.op is Ops.WHERE and x.src[1].op is Ops.LOAD and x.src[2].op is Ops.CONST)

def test_padded_input_read_by_many_windows_is_stored_once(device):
    # a padded conv reads each input element once per output channel and kernel tap; through the pad every read pays
    # the gate (3x slower on the CPU): a real conv stores the padded input first (a copy); a small one stays fused (a
    # kernel stages small operands, zeros included, so their reads pay no gate)
    rng = np.random.default_rng(8)
    for (batch, channels, size), stored in (((8, 32, 24), True), ((4, 16, 16), False), ((1, 1, 4), False)):
        x = realized(rng.standard_normal((batch, channels, size, size)).astype(np.float32), device)
        w = realized(rng.standard_normal((channels, channels, 3, 3)).astype(np.float32), device)
        out = x.conv2d(w, padding=1)
        asts = _kernel_asts(out)
        conv = [ast for ast in asts if _reduce_sizes(ast)]
        assert len(conv) == 1 and len(asts) == (2 if stored else 1)
        assert (_gated_loads(conv[0]) == 0) == stored
        import torch
        assert_tensor(out, torch.nn.functional.conv2d(torch.tensor(x.numpy()), torch.tensor(w.numpy()), padding=1).numpy(), rtol=1e-4, atol=1e-4)

def test_reduce_read_through_a_pad_is_stored_first(device):
    # the input gradient of a padded conv pads the output gradient; when that gradient is the conv itself (d(out**2) =
    # 2 out), recomputing the conv inside the padded copy ran its loop on the padding too, with index math the pad's
    # gate hid from the simplifier (16 s instead of 12 ms): the conv's output is stored before the pad
    rng = np.random.default_rng(9)
    x = realized(rng.standard_normal((2, 8, 12, 12)).astype(np.float32), device)
    w = realized(rng.standard_normal((8, 8, 3, 3)).astype(np.float32), device)
    x.requires_grad = w.requires_grad = True
    out = x.conv2d(w, padding=1)
    (gx,) = (out * out).sum().gradient(x)
    asts = _kernel_asts(gx)
    conv_sized = [ast for ast in asts if _reduce_sizes(ast) == {8, 3}]   # the forward conv and the input gradient
    for ast in conv_sized:
        assert all(st.src[0].src[0].dtype.size == 2 * 8 * 12 * 12 for st in ast.src), "a conv kernel writes the padded grid"
    import torch
    tx = torch.tensor(x.numpy(), requires_grad=True)
    (torch.nn.functional.conv2d(tx, torch.tensor(w.numpy()), padding=1) ** 2).sum().backward()
    assert_tensor(gx, tx.grad.numpy(), rtol=1e-4, atol=1e-3)

def test_a_broadcast_scalar_is_computed_in_its_consumer():
    """A one-element value broadcast over a big tensor (an optimizer's lr * bias correction, a random draw's key word)
    stays in the consumer's kernel whatever its work: it doesn't move along the loops, so codegen computes it once
    before them. (Counted as repeated per element, it was stored in a kernel of its own.)"""
    rng = np.random.default_rng(3)
    x, s = rng.standard_normal((512, 512)).astype(np.float32), np.array([0.7], np.float32)
    a, scalar = realized(x, "CPU"), realized(s, "CPU")
    factor = ((scalar * 1.5 + 0.25).exp() * scalar).sqrt() - scalar.reciprocal()
    out = a * factor
    assert count_kernels(out) == 1
    expected_factor = np.sqrt(np.exp(s * 1.5 + 0.25) * s) - 1 / s
    assert_tensor(out, x * expected_factor.astype(np.float32), rtol=1e-5, atol=1e-6)
