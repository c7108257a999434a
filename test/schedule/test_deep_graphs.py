"""Depth must not matter: a lazy chain of 100,000 ops realizes, with memory linear in its length.

Each deep case runs in a child process under a 3 GB address-space limit, so a regression (a C stack overflow in a
recursive walk, memory quadratic in the depth) fails that test cleanly instead of taking pytest down with it. The
children compare against numpy computing the same float32 steps one by one.
"""
import os, subprocess, sys, textwrap
import numpy as np
import pytest
from fusegrad import Tensor
from fusegrad.dtype import dtypes
from fusegrad.uop.ops import UOp, Ops

MEMORY_LIMIT = 3 << 30

def run_limited(code: str, timeout: int = 300) -> str:
    """Run ``code`` in a child Python with its address space limited to MEMORY_LIMIT; return its stdout. The child
    prints OK when its checks pass."""
    prelude = f"import resource\nresource.setrlimit(resource.RLIMIT_AS, ({MEMORY_LIMIT}, {MEMORY_LIMIT}))\n"
    env = {**os.environ, "CACHELEVEL": "0"}   # (compile every kernel: a cached one would hide a compiler crash)
    done = subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=timeout, env=env)
    assert done.returncode == 0, f"child exited with {done.returncode}:\n{done.stderr[-3000:]}"
    assert done.stdout.strip().endswith("OK"), done.stdout[-3000:]
    return done.stdout

def test_affine_chain_of_100k_ops_on_cpu():
    run_limited("""
        import numpy as np
        from fusegrad import Tensor
        x = Tensor.ones(4).contiguous().realize(); y = x
        for _ in range(50_000): y = y * 1.0001 + 0.5
        got = y.numpy()
        ref = np.ones(4, np.float32)
        for _ in range(50_000): ref = ref * np.float32(1.0001) + np.float32(0.5)
        np.testing.assert_allclose(got, ref, rtol=1e-6)
        print("OK")
    """)

def test_unary_chain_of_100k_ops_on_cpu():
    run_limited("""
        import numpy as np
        from fusegrad import Tensor
        start = np.array([0.5, 0.25, 2.0, 9.0], np.float32)
        y = Tensor(start).contiguous().realize()
        for _ in range(50_000): y = y.sqrt().reciprocal()
        got = y.numpy()
        ref = start
        for _ in range(50_000): ref = np.float32(1) / np.sqrt(ref)
        np.testing.assert_allclose(got, ref, rtol=1e-6)
        print("OK")
    """)

def test_chain_mixing_movement_ops_on_cpu():
    # 50,000 transposes (a flip every 250 steps) and 50,000 adds; integers stay exact in float32
    run_limited("""
        import numpy as np
        from fusegrad import Tensor
        ref = np.arange(9, dtype=np.float32).reshape(3, 3)
        y = Tensor(ref).contiguous().realize()
        for i in range(50_000):
            y = y.permute(1, 0) + 1.0 if i % 250 else y.reshape(9).flip(0).reshape(3, 3) + 1.0
            ref = ref.T + np.float32(1) if i % 250 else ref.reshape(9)[::-1].reshape(3, 3) + np.float32(1)
        np.testing.assert_array_equal(y.numpy(), ref)
        print("OK")
    """)

def test_chain_across_two_inputs_on_cpu():
    run_limited("""
        import numpy as np
        from fusegrad import Tensor
        a = Tensor([1.0, 2.0, 3.0, 4.0]).contiguous().realize()
        b = Tensor([4.0, 3.0, 2.0, 1.0]).contiguous().realize()
        y = a
        for _ in range(50_000): y = y * 0.999 + b
        got = y.numpy()
        ref, rb = np.array([1, 2, 3, 4], np.float32), np.array([4, 3, 2, 1], np.float32)
        for _ in range(50_000): ref = ref * np.float32(0.999) + rb
        np.testing.assert_allclose(got, ref, rtol=1e-6)
        print("OK")
    """)

def test_chain_of_20k_ops_on_python_device():
    run_limited("""
        import numpy as np
        from fusegrad import Tensor
        x = Tensor([1.0, 2.0, 3.0, 4.0], device="PYTHON").contiguous().realize(); y = x
        for _ in range(10_000): y = y * 1.0001 + 0.5
        got = y.numpy()
        ref = np.array([1, 2, 3, 4], np.float32)
        for _ in range(10_000): ref = ref * np.float32(1.0001) + np.float32(0.5)
        np.testing.assert_allclose(got, ref, rtol=1e-6)
        print("OK")
    """)

def test_gradient_of_20k_deep_chain():
    # y_{k+1} = y_k * w + 0.5: dy_n/dx = w^n (one product per step, in backward order), dy_n/dw = sum_k y_k w^(n-1-k)
    run_limited("""
        import numpy as np
        from fusegrad import Tensor
        n = 20_000
        start = np.array([0.5, 1.0, 1.5, 2.0], np.float32)
        x = Tensor(start, requires_grad=True)
        w = Tensor.full((4,), 1.0001, requires_grad=True).contiguous().realize()
        y = x
        for _ in range(n): y = y * w + 0.5
        y.sum().backward()
        gx, gw = x.grad.numpy(), w.grad.numpy()
        c = np.float32(1.0001)
        ys = [start]
        for _ in range(n - 1): ys.append(ys[-1] * c + np.float32(0.5))
        g, ref_gw = np.ones(4, np.float32), np.zeros(4, np.float64)
        for k in range(n - 1, -1, -1):
            ref_gw += np.float64(g) * ys[k]
            g = g * c
        np.testing.assert_allclose(gx, g, rtol=1e-5)
        np.testing.assert_allclose(gw, ref_gw, rtol=1e-3)
        print("OK")
    """)

def test_cost_estimate_of_a_deep_gate_chain_is_linear():
    # a 20,000-deep chain of bool ANDs over index compares: the cost estimate asked each AND for its whole ancestry
    run_limited("""
        from fusegrad.dtype import dtypes
        from fusegrad.uop.ops import UOp, Ops, AxisType
        from fusegrad.codegen import estimate_cost
        rng = UOp(Ops.RANGE, dtypes.index, (UOp.const(dtypes.index, 50_000),), (0, AxisType.GLOBAL))
        gate = rng < 1
        for k in range(2, 20_002): gate = gate & (rng < k)
        buf = UOp(Ops.PARAM, dtypes.bool.ptr(50_000), (), 0)
        ast = UOp(Ops.SINK, dtypes.void, (buf.index(rng).store(gate),))
        flops, mem = estimate_cost(ast)
        assert flops == 0 and mem == 50_000, (flops, mem)
        print("OK")
    """)

def test_device_of_a_deep_graph_is_found_without_recursion():
    # a graph built by hand (as rewrites build them) whose nodes never computed their device
    node = UOp(Ops.BUFFER, dtypes.float32, (UOp(Ops.DEVICE, arg="CPU"),), (0, "CPU", 4))
    for _ in range(100_000): node = UOp(Ops.NEG, dtypes.float32, (node,))
    assert node.device == "CPU"

def _kernels(t: Tensor) -> int:
    return sum(1 for item in t.schedule() if item.ast.op is Ops.SINK)

def test_long_chain_is_stored_part_way_and_short_one_fuses():
    x = Tensor.ones(4).contiguous().realize()
    y = x
    for _ in range(200): y = y * 1.0001 + 0.5     # 400 ops: one kernel, as always
    assert _kernels(y) == 1
    def chain() -> Tensor:
        y = x
        for _ in range(2_000): y = y * 1.0001 + 0.5   # 4,000 ops: kernels of at most MAX_FUSED_DEPTH ops each
        return y
    assert _kernels(chain()) == 4
    ref = np.ones(4, np.float32)
    for _ in range(2_000): ref = ref * np.float32(1.0001) + np.float32(0.5)
    np.testing.assert_allclose(chain().numpy(), ref, rtol=1e-6)
