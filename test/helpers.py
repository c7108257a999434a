"""Shared helpers: compare a fusegrad Tensor with a numpy expectation, random inputs per dtype,
and kernel counting."""
from __future__ import annotations
import numpy as np
from fusegrad import Tensor, dtypes, GlobalCounters
from fusegrad.dtype import DType, to_np_dtype

# dtypes numpy can hold directly (bfloat16 and fp8 travel through float32)
NP_DTYPES: tuple[DType, ...] = (dtypes.bool, dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.int32,
                                dtypes.uint32, dtypes.int64, dtypes.uint64, dtypes.float16, dtypes.float32, dtypes.float64)
INT_DTYPES = tuple(d for d in NP_DTYPES if dtypes.is_int(d))
FLOAT_DTYPES = (dtypes.float16, dtypes.float32, dtypes.float64)

def tolerance(dtype: DType) -> tuple[float, float]:
    """(rtol, atol) for comparing results of ``dtype``."""
    if dtype in (dtypes.float16,): return 1e-2, 1e-2
    if dtype == dtypes.bfloat16: return 2e-2, 2e-2
    if dtype == dtypes.float32: return 1e-5, 1e-5
    if dtype == dtypes.float64: return 1e-9, 1e-10
    return 0.0, 0.0

def native_device() -> str:
    """The compiled backend that device-dependent tests run on: the one ``DEV`` names (``DEV=LLVM``), else CPU.
    (PYTHON, the interpreter, is tested beside it; ``DEV=PYTHON`` leaves the compiled backend at CPU.)"""
    import os
    from fusegrad import Device
    return Device.canonicalize(os.environ["DEV"]) if os.environ.get("DEV", "").upper() not in ("", "PYTHON") else "CPU"

def np_dtype(dtype: DType):
    return to_np_dtype(dtype) if dtype.fmt is not None else np.float32

def assert_tensor(t: Tensor, expected, dtype: DType | None = None, rtol: float | None = None, atol: float | None = None,
                  shape: tuple | None = None) -> np.ndarray:
    """Check shape, dtype and values of ``t`` against ``expected`` (a numpy array or scalar).
    ``dtype`` defaults to the fusegrad dtype matching ``expected.dtype``; ints and bools must match
    exactly, floats within dtype-appropriate tolerances (NaNs must match NaNs, infs must match)."""
    expected = np.asarray(expected)
    if dtype is None:
        from fusegrad.dtype import from_np
        dtype = from_np(expected.dtype)
    assert isinstance(t, Tensor), f"expected a Tensor, got {type(t)}"
    assert t.dtype == dtype, f"dtype: got {t.dtype}, expected {dtype}"
    want_shape = expected.shape if shape is None else shape
    assert t.shape == tuple(want_shape), f"shape: got {t.shape}, expected {tuple(want_shape)}"
    got = t.numpy()
    assert got.shape == tuple(want_shape), f"numpy() shape: got {got.shape}, expected {tuple(want_shape)}"
    assert got.dtype == np_dtype(dtype), f"numpy() dtype: got {got.dtype}, expected {np_dtype(dtype)}"
    if dtypes.is_float(dtype):
        r, a = tolerance(dtype)
        rtol, atol = (r if rtol is None else rtol), (a if atol is None else atol)
        np.testing.assert_allclose(got.astype(np.float64), expected.astype(np.float64), rtol=rtol, atol=atol, equal_nan=True)
    else:
        np.testing.assert_array_equal(got, expected.astype(got.dtype))
    return got

def rand_np(rng: np.random.Generator, shape: tuple, dtype: DType, low: float | None = None, high: float | None = None) -> np.ndarray:
    """Random numpy data that is valid for ``dtype`` (ints within a small safe range unless low/high given)."""
    if dtype == dtypes.bool: return rng.random(shape) < 0.5
    if dtypes.is_int(dtype):
        lo = (0 if dtypes.is_unsigned(dtype) else -10) if low is None else int(low)
        hi = 10 if high is None else int(high)
        return rng.integers(lo, hi, size=shape).astype(np_dtype(dtype))
    lo = -2.0 if low is None else low
    hi = 2.0 if high is None else high
    return rng.uniform(lo, hi, size=shape).astype(np_dtype(dtype))

def realized(data, device: str, dtype: DType | None = None) -> Tensor:
    """A Tensor holding ``data`` in a buffer (realized), so it costs no kernel later."""
    return Tensor(data, device=device, dtype=dtype).realize()

def count_kernels(*tensors: Tensor) -> int:
    """Realize ``tensors`` together and return how many kernels ran."""
    GlobalCounters.reset()
    Tensor.realize(*tensors)
    return GlobalCounters.kernel_count

# ---------------------------------------------------------------- comparing ops with PyTorch (forward and backward)
def _to_torch_like(x):
    import torch
    if np.issubdtype(x.dtype, np.integer): return torch.tensor(x.astype(np.int64))   # torch index ops want int64
    return torch.tensor(x, requires_grad=np.issubdtype(x.dtype, np.floating))

def helper_test_op(shapes, torch_fn, fusegrad_fn=None, atol=1e-6, rtol=1e-3, grad_atol=1e-4, grad_rtol=1e-3, forward_only=False,
                   vals=None, low=-1.5, high=1.5, seed=0):
    """Run ``torch_fn`` on torch tensors and ``fusegrad_fn`` (default: the same function) on fusegrad
    Tensors built from the same random float32 inputs (``shapes``, uniform in [low, high)) or from
    ``vals`` (arrays or nested lists; ints stay ints and get no gradient). Compare the forward output
    (shape and values) and, unless ``forward_only``, the gradient of ``sum(out * r)`` (r random,
    the same for both) with respect to every float input. Returns the fusegrad output."""
    import torch
    if fusegrad_fn is None: fusegrad_fn = torch_fn
    rng = np.random.default_rng(seed)
    if vals is not None:
        np_inputs = [np.asarray(v) for v in vals]
        np_inputs = [v.astype(np.float32) if v.dtype == np.float64 else v for v in np_inputs]
    else:
        np_inputs = [rng.uniform(low, high, size=s).astype(np.float32) for s in shapes]
    torch_inputs = [_to_torch_like(x) for x in np_inputs]
    fg_inputs = [Tensor(x) for x in np_inputs]
    torch_out, fg_out = torch_fn(*torch_inputs), fusegrad_fn(*fg_inputs)
    assert isinstance(fg_out, Tensor), f"fusegrad_fn returned {type(fg_out)}"
    assert tuple(fg_out.shape) == tuple(torch_out.shape), f"shape mismatch: fusegrad {fg_out.shape} vs torch {tuple(torch_out.shape)}"
    want = torch_out.detach().numpy()
    float_idx = [i for i, x in enumerate(np_inputs) if np.issubdtype(x.dtype, np.floating)]
    fg_grads = []
    if not forward_only and np.issubdtype(want.dtype, np.floating) and float_idx and torch_out.requires_grad:
        # build the gradient graph before realizing the output: realizing replaces its graph with a buffer
        weights = rng.uniform(-1, 1, size=tuple(torch_out.shape)).astype(np.float32)
        (torch_out * torch.tensor(weights)).sum().backward()
        fg_grads = (fg_out * Tensor(weights)).sum().gradient(*[fg_inputs[i] for i in float_idx], materialize_grads=True)
    got = fg_out.numpy()
    if np.issubdtype(want.dtype, np.floating):
        np.testing.assert_allclose(got, want, atol=atol, rtol=rtol, equal_nan=True, err_msg="forward pass mismatch")
    else:
        np.testing.assert_array_equal(got, want, err_msg="forward pass mismatch")
    for i, g in zip(float_idx, fg_grads):
        tg = torch_inputs[i].grad
        want_g = np.zeros_like(np_inputs[i]) if tg is None else tg.numpy()
        assert tuple(g.shape) == want_g.shape, f"gradient shape mismatch for input {i}: {g.shape} vs {want_g.shape}"
        np.testing.assert_allclose(g.numpy(), want_g, atol=grad_atol, rtol=grad_rtol, err_msg=f"gradient mismatch for input {i}")
    return fg_out


def assert_decode_paths_agree(model, ref_next_token, prompt: list[int], count: int, context: int, vocab: int) -> None:
    """For a language-model example (see fusegrad/examples/decoding.py): greedy tokens from the
    unjitted forward (bound Variable positions), from the jitted step, and from generate() all equal
    the reference model's; the JIT captures once (same capture, same kernel count) for every position."""
    from fusegrad import Variable
    from fusegrad.examples import decoding
    zero, noise = Tensor([0.0]), Tensor.zeros(1, vocab)
    ref_tokens = list(prompt)
    for _ in range(count): ref_tokens.append(ref_next_token(ref_tokens))
    position = Variable("start_pos", 1, context - 1)
    def decode(step) -> list[int]:
        tokens = list(prompt)
        tokens.append(step(Tensor([prompt], dtype=dtypes.int32), 0, zero, noise).item())
        for pos in range(len(prompt), len(prompt) + count - 1):
            tokens.append(step(Tensor([[tokens[-1]]], dtype=dtypes.int32), position.bind(pos), zero, noise).item())
            if pos == len(prompt) + 1:   # the 2nd decode call captured
                captured, n_kernels = model.forward_jit.captured, len(model.forward_jit.jit_cache)
            elif pos > len(prompt) + 1 and step is model:
                assert model.forward_jit.captured is captured and len(model.forward_jit.jit_cache) == n_kernels
        return tokens
    assert decode(model.forward) == ref_tokens     # every step scheduled the ordinary way
    model.forward_jit.reset()
    assert decode(model) == ref_tokens             # decode steps through model.forward_jit
    assert model.forward_jit.captured is not None and len(model.forward_jit.jit_cache) > 0
    assert decoding.generate(model, prompt, count) == ref_tokens[len(prompt):]

# ---------------------------------------------------------------- running one kernel with given optimization actions
def _poison(buffer) -> None:
    """Fill an output buffer with a pattern no correct kernel leaves behind (NaN for floats), so a kernel that
    skips stores can't pass on stale results."""
    if buffer.dtype.itemsize == 4 and dtypes.is_float(buffer.dtype): pattern = np.full(buffer.size, 0x7FC00000, np.uint32)
    elif buffer.dtype.itemsize == 2 and dtypes.is_float(buffer.dtype): pattern = np.full(buffer.size, 0x7E00, np.uint16)
    else: pattern = np.full(buffer.nbytes, 0x5A, np.uint8)
    buffer.copyin(memoryview(pattern.tobytes()))

def run_kernel(item, opts, device: str, renderer=None) -> list[np.ndarray]:
    """Run the kernel of schedule item ``item`` compiled with optimization actions ``opts`` ([] for none, None for
    the heuristic's) on its buffers, and return copies of all its outputs (poisoned first, see ``_poison``).
    ``renderer`` (default: the device's) renders it: ``PythonRenderer("CUDA")`` runs CUDA's kernels on PYTHON."""
    from fusegrad import Device
    from fusegrad.codegen import get_program
    from fusegrad.engine.realize import CompiledRunner
    program = get_program(item.ast, renderer or Device[device].renderer, opts)
    buffers = item.bufs
    for b in buffers: b.ensure_allocated()
    for b in item.outputs: _poison(b)
    CompiledRunner(program)(buffers, dict(item.var_vals))
    return [b.numpy().copy() for b in item.outputs]

def searchable_ast(ast):
    """The kernel AST that ``get_program`` (and BEAM) applies actions to (``codegen.simplify_kernel``)."""
    from fusegrad.codegen import simplify_kernel
    return simplify_kernel(ast)

def random_action_list(ast, renderer, choose, max_depth: int = 4) -> tuple:
    """Apply 1..``max_depth`` random legal actions (from BEAM's candidates) to kernel ``ast``, one after another,
    the way a BEAM search could; ``choose`` is a ``random.Random``. Returns (optimized ast, the actions)."""
    from fusegrad.codegen.opt import KernelOptError, apply_opt
    from fusegrad.codegen.opt.search import candidate_actions
    opts = []
    for _ in range(choose.randint(1, max_depth)):
        actions = candidate_actions(ast, renderer)
        choose.shuffle(actions)
        for action in actions[:20]:
            try: ast = apply_opt(ast, action, renderer)
            except KernelOptError: continue
            opts.append(action)
            break
    return ast, opts

# ---------------------------------------------------------------- device test bodies shared by test/runtime/test_ops_*.py
# Each takes the device name; the device's test file parametrizes and calls it (and keeps what is particular to it).

UNARY_OPS = {"neg": (lambda t: -t, np.negative), "exp": (Tensor.exp, np.exp), "log": (Tensor.log, np.log),
             "sqrt": (Tensor.sqrt, np.sqrt), "sin": (Tensor.sin, np.sin), "relu": (Tensor.relu, lambda x: np.maximum(x, 0)),
             "reciprocal": (Tensor.reciprocal, np.reciprocal), "trunc": (Tensor.trunc, np.trunc)}

def check_unary(device: str, name: str, dtype: DType, rng) -> None:
    ours, theirs = UNARY_OPS[name]
    x = rand_np(rng, (7, 33), dtype, low=0.1 if name in ("log", "sqrt") else -3, high=3)
    assert_tensor(ours(Tensor(x, device=device)), theirs(x), dtype, rtol=2e-6 if dtype == dtypes.float32 else None)

BINARY_OPS = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "max": np.maximum, "lt": np.less, "eq": np.equal, "ne": np.not_equal}

def check_binary(device: str, name: str, dtype: DType, rng) -> None:
    if dtype == dtypes.bool and name == "sub": return   # numpy has no bool subtraction either
    x, y = rand_np(rng, (5, 40), dtype), rand_np(rng, (5, 40), dtype)
    a, b = Tensor(x, device=device), Tensor(y, device=device)
    ours = {"add": a + b, "sub": a - b, "mul": a * b, "max": a.maximum(b), "lt": a < b, "eq": a == b, "ne": a != b}[name]
    assert_tensor(ours, BINARY_OPS[name](x, y))

def check_integer_division(device: str, dtype: DType) -> None:
    """x / 0, x % 0 and MIN / -1 give 0, 0 and MIN (two's complement wrap), whatever the hardware does (SIGFPE on x86)."""
    np_type, low = np.dtype(dtype.fmt), dtypes.min(dtype)
    minus_one = -1 if not dtypes.is_unsigned(dtype) else 3
    x = np.array([7, -7 if not dtypes.is_unsigned(dtype) else 9, 7, low, low, 5, 0, 100], dtype=np_type)
    y = np.array([2, 2, 0, minus_one, 0, 3, 0, 7], dtype=np_type)
    wide_x, wide_y = x.astype(object), y.astype(object)   # exact Python ints: C's truncating division by hand
    quotient = [0 if b == 0 else (abs(a) // abs(b)) * (1 if (a < 0) == (b < 0) else -1) for a, b in zip(wide_x, wide_y)]
    remainder = [0 if b == 0 else a - b * q for a, b, q in zip(wide_x, wide_y, quotient)]
    wrap = lambda values: np.array([int(v) & ((1 << (8 * dtype.itemsize)) - 1) for v in values], dtype=np.uint64).astype(np_type)
    a, b = Tensor(x, device=device), Tensor(y, device=device)
    assert_tensor(a.idiv(b), wrap(quotient))
    assert_tensor(a.fmod(b), wrap(remainder))

CASTS = [(dtypes.float32, dtypes.int32), (dtypes.float32, dtypes.uint8), (dtypes.int32, dtypes.float16), (dtypes.float64, dtypes.float16),
         (dtypes.float16, dtypes.float64), (dtypes.int8, dtypes.int64), (dtypes.uint16, dtypes.int32), (dtypes.int64, dtypes.int8),
         (dtypes.float32, dtypes.bool), (dtypes.bool, dtypes.float32), (dtypes.int32, dtypes.bool), (dtypes.uint32, dtypes.float32)]

def check_cast(device: str, source: DType, target: DType, rng) -> None:
    x = rand_np(rng, (3, 37), source, low=0 if dtypes.is_unsigned(target) else None, high=100 if source != dtypes.bool else None)
    assert_tensor(Tensor(x, device=device).cast(target), x.astype(np.dtype(target.fmt)), target)

def check_reductions(device: str, shape: tuple, axis, rng) -> None:
    x = rng.standard_normal(shape).astype(np.float32)
    t = Tensor(x, device=device)
    assert_tensor(t.sum(axis), x.sum(axis), rtol=1e-4, atol=1e-4)
    assert_tensor(t.max(axis), x.max(axis))
    assert_tensor(t.mean(axis), x.mean(axis), rtol=1e-4, atol=1e-5)
    assert_tensor(Tensor(x.astype(np.int32), device=device).sum(axis), x.astype(np.int32).sum(axis).astype(np.int32))

def check_matmul(device: str, m: int, k: int, n: int, rng) -> None:
    a, b = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
    assert_tensor(Tensor(a, device=device) @ Tensor(b, device=device), a @ b, rtol=1e-4, atol=1e-4)

def check_padded_conv(device: str, rng) -> None:
    import torch
    x, w = rng.standard_normal((2, 16, 14, 14)).astype(np.float32), rng.standard_normal((32, 16, 3, 3)).astype(np.float32)
    out = Tensor(x, device=device).conv2d(Tensor(w, device=device), padding=1)
    want = torch.nn.functional.conv2d(torch.tensor(x), torch.tensor(w), padding=1).numpy()
    assert_tensor(out, want, rtol=1e-4, atol=1e-4)

def check_conv_and_pool_gradients(device: str, rng) -> None:
    """Gradients of a strided, padded conv -> relu -> max_pool2d -> square -> sum match PyTorch's."""
    import torch
    x, w = rng.standard_normal((2, 3, 12, 12)).astype(np.float32), rng.standard_normal((8, 3, 3, 3)).astype(np.float32)
    tx, tw = Tensor(x, device=device, requires_grad=True), Tensor(w, device=device, requires_grad=True)
    tx.conv2d(tw, stride=2, padding=1).relu().max_pool2d().square().sum().backward()
    px, pw = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    torch.nn.functional.max_pool2d(torch.nn.functional.conv2d(px, pw, stride=2, padding=1).relu(), 2).square().sum().backward()
    np.testing.assert_allclose(tx.grad.numpy(), px.grad.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(tw.grad.numpy(), pw.grad.numpy(), rtol=1e-4, atol=1e-4)

GRADIENT_FUNCTIONS = {"tanh": lambda t: t.tanh(), "sigmoid": lambda t: t.sigmoid(), "softmax": lambda t: t.softmax(-1),
                      "log_softmax": lambda t: t.log_softmax(-1), "gelu": lambda t: t.gelu(), "pow": lambda t: t.abs() ** 1.5,
                      "layernorm": lambda t: t.layernorm(), "cumsum": lambda t: t.cumsum(1)}

def _torch_gradient_function(name: str):
    """PyTorch's counterpart of ``GRADIENT_FUNCTIONS[name]`` (torch is imported only here, not with this module)."""
    import torch
    return {"tanh": torch.tanh, "sigmoid": torch.sigmoid, "softmax": lambda t: t.softmax(-1), "log_softmax": lambda t: t.log_softmax(-1),
            "gelu": lambda t: torch.nn.functional.gelu(t, approximate="tanh"), "pow": lambda t: t.abs() ** 1.5,
            "layernorm": lambda t: torch.nn.functional.layer_norm(t, (20,), eps=1e-5), "cumsum": lambda t: t.cumsum(1)}[name]

def check_gradient_matches_torch(device: str, name: str, rng) -> None:
    import torch
    x = rng.standard_normal((6, 20)).astype(np.float32)
    ours = Tensor(x, device=device, requires_grad=True)
    (GRADIENT_FUNCTIONS[name](ours) * Tensor(np.arange(20, dtype=np.float32), device=device)).sum().backward()
    theirs = torch.tensor(x, requires_grad=True)
    (_torch_gradient_function(name)(theirs) * torch.arange(20, dtype=torch.float32)).sum().backward()
    np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), rtol=1e-3, atol=1e-4)

def training_schedule(device: str) -> list:
    """The schedule of a small training step (conv, matmul, softmax, max and their gradients) on ``device``."""
    rng = np.random.default_rng(3)
    x = Tensor(rng.standard_normal((4, 8, 10, 10)).astype(np.float32), device=device).realize()
    w = Tensor(rng.standard_normal((16, 8, 3, 3)).astype(np.float32), device=device, requires_grad=True).realize()
    v = Tensor(rng.standard_normal((48, 40)).astype(np.float32), device=device, requires_grad=True).realize()
    loss = x.conv2d(w, padding=1).relu().mean() + (v @ v.T).softmax(-1).sum() + v.max(0).sum()
    return Tensor.schedule(loss, *loss.gradient(w, v))

def check_random_action_lists(device: str, tries: int) -> tuple[int, set]:
    """Run every kernel of ``training_schedule(device)`` under ``tries`` random legal action lists (BEAM's candidates,
    picked at random) and compare with the unoptimized kernel. Returns (lists checked, the kinds of action used)."""
    import random
    from fusegrad import Device
    from fusegrad.engine.realize import lower_schedule_item
    from fusegrad.uop.ops import Ops
    choose, checked, kinds = random.Random(0), 0, set()
    for item in training_schedule(device):
        if item.ast.op is Ops.SINK:
            reference = run_kernel(item, [], device)
            for _ in range(tries):
                _, opts = random_action_list(searchable_ast(item.ast), Device[device].renderer, choose)
                kinds |= {o.op for o in opts}
                for got, want in zip(run_kernel(item, opts, device), reference):
                    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, equal_nan=True, err_msg=f"{item.ast.arg} with {opts}")
                checked += 1
        lower_schedule_item(item).run()   # later kernels read its outputs
    return checked, kinds
