"""Random small op graphs for fuzzing fusegrad against PyTorch (used by test/test_fuzz_ops.py).

A graph is a list of steps. Each step computes one new value from earlier values (``v0``, ``v1``, ...)
and is written twice: as a fusegrad expression and as the equivalent torch expression. Both are
evaluated with ``eval``, so the reproducer printed for a failing seed is exactly the code that ran.

Where fusegrad differs from torch by design (it follows tinygrad), the torch expression states the
mapping explicitly, so it shows up in the reproducer:
- integer and bool ``sum``/``cumsum``, int32 ``prod`` and ``argmax``/``argmin`` give int32 (torch: int64):
  the torch side ends with ``.to(torch.int32)``; a bool ``prod`` is bool (tinygrad: all()), ``.to(torch.bool)``;
- ``mean`` of an int or bool tensor gives float32 (torch refuses): torch casts to float32 first;
- ``argmax()`` without an axis returns a 0-d index even with ``keepdim=True`` (torch keeps the
  dims): keepdim is only generated together with an axis;
- a float -> int/bool cast passes the gradient straight through (tinygrad does too; torch has no gradient
  there): the fusegrad side detaches before such a cast;
- a 0-d float32 tensor combined with a float16 tensor gives float32 (torch: float16, 0-d tensors don't
  raise the dtype within a category): such pairs are not generated;
- ``clip`` is ``maximum`` then ``minimum``, so a value exactly on a bound gets half the gradient
  (torch: all of it): clip is only generated when no value lies within a margin of a bound.

The generator evaluates every candidate step in torch and keeps it only if the result is
well-conditioned: finite, moderate magnitudes, no near-ties for comparisons/argmax/max and no
values near a rounding boundary for floor/round/casts (fusegrad may round a float a few ulp
differently, which must not flip a discrete result). So any mismatch is a real bug.
"""
from __future__ import annotations
import itertools, math
from dataclasses import dataclass, field
import numpy as np
import torch
import torch.nn.functional as F
from fusegrad import Tensor, dtypes

DTYPE_NAMES = ("float32", "float16", "int32", "bool")
TORCH_DTYPES = {"float32": torch.float32, "float16": torch.float16, "int32": torch.int32, "bool": torch.bool}
FUSEGRAD_DTYPES = {name: getattr(dtypes, name) for name in DTYPE_NAMES}
MAX_ELEMENTS = 4096     # keeps every graph cheap on both devices
MAX_FLOAT = 1e3         # values beyond this make relative rounding errors look like absolute ones
MAX_INT = 1 << 20       # int32 arithmetic far from overflow (signed overflow is undefined in C)

def input_array(seed: int, index: int, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """The data of input ``index`` of graph ``seed``: a reproducer rebuilds it from these four values."""
    rng = np.random.default_rng((seed, index))
    if dtype == "bool": return rng.random(shape) < 0.5
    if dtype == "int32": return rng.integers(-6, 7, size=shape).astype(np.int32)
    return rng.uniform(-2.0, 2.0, size=shape).astype(np.float16 if dtype == "float16" else np.float32)

def dtype_name(dtype) -> str:
    """The DTYPE_NAMES entry of a torch or fusegrad dtype (raises KeyError for any other dtype)."""
    for name in DTYPE_NAMES:
        if dtype in (TORCH_DTYPES[name], FUSEGRAD_DTYPES[name]): return name
    raise KeyError(f"dtype {dtype} is outside the fuzzer's dtypes {DTYPE_NAMES}")

def is_float(name: str) -> bool: return name in ("float32", "float16")

@dataclass(frozen=True)
class Step:
    """One new value of a graph: the same computation as a fusegrad and as a torch expression over v0, v1, ..."""
    op: str
    fusegrad: str
    torch: str

@dataclass
class FuzzInput:
    shape: tuple[int, ...]
    dtype: str

@dataclass
class FuzzGraph:
    """A generated graph: inputs (rebuilt with ``input_array``), steps, and which values are compared."""
    seed: int
    device: str
    inputs: list[FuzzInput]
    steps: list[Step]
    outputs: list[int]                        # value numbers (inputs first, then steps)
    realize_before_backward: bool = False     # realize outputs before building the gradients (tests recorded origins)

    def arrays(self) -> list[np.ndarray]:
        return [input_array(self.seed, i, x.shape, x.dtype) for i, x in enumerate(self.inputs)]

    def has_float16(self) -> bool:
        """Whether any input or step produces float16 (then float results are compared at float16 accuracy)."""
        return any(x.dtype == "float16" for x in self.inputs) or any("float16" in step.fusegrad for step in self.steps)

    def float_inputs(self) -> list[int]:
        return [i for i, x in enumerate(self.inputs) if is_float(x.dtype)]

    def output_weights(self, shapes: list[tuple[int, ...]]) -> list[np.ndarray]:
        """Random weights of the loss sum(out_i * w_i), the same for both frameworks."""
        rng = np.random.default_rng((self.seed, 1_000_003))
        return [rng.uniform(-1.0, 1.0, size=shape).astype(np.float32) for shape in shapes]

    def run_fusegrad(self) -> list[Tensor]:
        """All values of the graph as (lazy) fusegrad Tensors; float inputs require grad."""
        namespace: dict = {"Tensor": Tensor, "dtypes": dtypes, "np": np, "setitem_copy": setitem_copy}
        values = [Tensor(a, device=self.device, dtype=FUSEGRAD_DTYPES[x.dtype], requires_grad=is_float(x.dtype))
                  for a, x in zip(self.arrays(), self.inputs)]
        for step in self.steps: values.append(_evaluate(step.fusegrad, namespace, values, self.device))
        return values

    def run_torch(self) -> list[torch.Tensor]:
        """All values of the graph as torch tensors; float inputs require grad."""
        values = [torch.tensor(a, requires_grad=is_float(x.dtype)) for a, x in zip(self.arrays(), self.inputs)]
        for step in self.steps: values.append(_evaluate(step.torch, TORCH_NAMESPACE, values))
        return values

    def reproducer(self) -> str:
        """Standalone code (run from test/) that rebuilds this graph in fusegrad, with the torch lines as comments."""
        lines = [f"# fuzz graph seed={self.seed} device={self.device} outputs={['v%d' % o for o in self.outputs]}"
                 f"{' (outputs realized before backward)' if self.realize_before_backward else ''}",
                 "import numpy as np, torch; import torch.nn.functional as F",
                 "from fusegrad import Tensor, dtypes; from fuzz_graphs import input_array, setitem_copy", f"DEVICE = {self.device!r}"]
        for i, x in enumerate(self.inputs):
            data = f"input_array({self.seed}, {i}, {x.shape}, {x.dtype!r})"
            lines.append(f"v{i} = Tensor({data}, device={self.device!r}, dtype=dtypes.{x.dtype}, requires_grad={is_float(x.dtype)})"
                         f"   # torch: v{i} = torch.tensor({data}, requires_grad={is_float(x.dtype)})")
        for n, step in enumerate(self.steps, start=len(self.inputs)):
            lines.append(f"v{n} = {step.fusegrad}" + (f"   # torch: {step.torch}" if step.torch != step.fusegrad else ""))
        return "\n".join(lines)

def setitem_copy(target, index, value):
    """A copy of ``target`` (fusegrad or torch) with ``copy[index] = value``: setitem as an expression. The copy
    is a clone, so ``target`` keeps its values (later steps may read both)."""
    out = target.clone()
    out[index] = value
    return out

TORCH_NAMESPACE = {"torch": torch, "F": F, "np": np, "setitem_copy": setitem_copy}

def _evaluate(expression: str, namespace: dict, values: list, device: str | None = None):
    scope = dict(namespace, **{f"v{i}": v for i, v in enumerate(values)})
    if device is not None: scope["DEVICE"] = device
    return eval(expression, scope)

# ---------------------------------------------------------------- conditioning checks on torch values
def _margin(name: str) -> float:
    """How far (relative to max(1, |x|)) a float must stay from a discontinuity: a few hundred of its ulps."""
    return 2e-2 if name == "float16" else 1e-3

def _far_from(values: torch.Tensor, points: torch.Tensor, name: str) -> bool:
    """Every value is either exactly on ``points`` or clearly away from them."""
    distance = (values.double() - points.double()).abs()
    return bool(((distance == 0) | (distance > _margin(name) * values.double().abs().clamp(min=1))).all())

def _far_from_integers(values: torch.Tensor, name: str, half: bool = False) -> bool:
    """No value close to an integer (or, with ``half``, to a half-integer: round's boundary); exact ones are fine
    only for ints. Floats exactly on a boundary are rejected too: a 1-ulp difference would cross it."""
    v = values.double()
    boundary = (v - 0.5).round() + 0.5 if half else v.round()
    return bool(((v - boundary).abs() > _margin(name) * v.abs().clamp(min=1)).all())

def _separated_extremes(values: torch.Tensor, axes: tuple[int, ...] | None, name: str, largest: bool) -> bool:
    """In every slice reduced by a max/min/argmax, the extreme value is unique or tied exactly (ties from the
    same computation) and never within a margin of the runner-up (a rounding difference would move it)."""
    v = values.double() if largest else -values.double()
    if v.ndim == 0 or v.numel() == 0: return True
    axes = tuple(range(v.ndim)) if axes is None else axes
    kept = [d for d in range(v.ndim) if d not in axes]
    rows = v.permute(*kept, *axes).reshape(-1, math.prod(v.shape[d] for d in axes))
    if rows.shape[1] < 2: return True
    top = rows.max(dim=1, keepdim=True).values
    gap = top - rows
    close = (gap > 0) & (gap <= _margin(name) * top.abs().clamp(min=1))
    return not bool(close.any())

def _well_conditioned(result) -> bool:
    """A value the fuzzer may build on: a supported dtype, not too big, finite, moderate magnitudes."""
    if not isinstance(result, torch.Tensor) or result.dtype not in TORCH_DTYPES.values(): return False
    if result.numel() > MAX_ELEMENTS: return False
    if result.numel() == 0: return True
    if result.dtype == torch.bool: return True
    if result.dtype == torch.int32: return bool(result.abs().max() < MAX_INT)
    limit = 6e3 if result.dtype == torch.float16 else MAX_FLOAT
    return bool(torch.isfinite(result).all() and result.abs().max() < limit)

# ---------------------------------------------------------------- shapes
def random_shape(rng: np.random.Generator) -> tuple[int, ...]:
    """0-4 dims of size 1-7 (size 1 often); rarely one dim of size 0."""
    ndim = int(rng.choice(5, p=[0.08, 0.22, 0.3, 0.25, 0.15]))
    shape = [1 if rng.random() < 0.25 else int(rng.integers(2, 8)) for _ in range(ndim)]
    if shape and rng.random() < 0.04: shape[int(rng.integers(len(shape)))] = 0
    return tuple(shape)

def broadcastable_shape(rng: np.random.Generator, shape: tuple[int, ...]) -> tuple[int, ...]:
    """A shape that broadcasts with ``shape``: some dims set to 1, maybe some leading dims dropped."""
    out = [1 if rng.random() < 0.3 else s for s in shape]
    drop = int(rng.integers(0, len(out) + 1)) if rng.random() < 0.3 else 0
    return tuple(out[drop:])

def random_reshape(rng: np.random.Generator, shape: tuple[int, ...]) -> tuple[int, ...]:
    """Another shape with the same number of elements (0-4 dims)."""
    numel = math.prod(shape)
    if numel == 0: return tuple(int(x) for x in rng.permutation(list(shape) + [1] * int(rng.integers(0, 2))))
    factors = [p for p in range(2, numel + 1) for _ in range(_multiplicity(numel, p))]
    rng.shuffle(factors)
    ndim = int(rng.integers(1 if numel > 1 else 0, 5))
    dims = [1] * ndim if ndim else []
    if not dims: return ()
    for f in factors: dims[int(rng.integers(ndim))] *= f
    return tuple(dims)

def _multiplicity(n: int, p: int) -> int:
    """How often the prime p divides n (0 for composite p)."""
    if any(p % q == 0 for q in range(2, int(p ** 0.5) + 1)): return 0
    count = 0
    while n % p == 0: n, count = n // p, count + 1
    return count

# ---------------------------------------------------------------- the generator
UNARY_FLOAT = {   # name: (fusegrad template, torch template, allowed input range as max |x| or None)
    "neg": ("-{x}", "-{x}", None), "exp": ("{x}.exp()", "{x}.exp()", 5.0), "exp2": ("{x}.exp2()", "{x}.exp2()", 6.0),
    "log": ("({x}.abs() + 0.5).log()", None, None), "log2": ("({x}.abs() + 0.5).log2()", None, None),
    "sqrt": ("({x}.abs() + 0.5).sqrt()", None, None), "rsqrt": ("({x}.abs() + 0.5).rsqrt()", None, None),
    "reciprocal": ("({x}.abs() + 0.5).reciprocal()", None, None), "sin": ("{x}.sin()", None, 20.0), "cos": ("{x}.cos()", None, 20.0),
    "tanh": ("{x}.tanh()", None, None), "sigmoid": ("{x}.sigmoid()", None, None), "relu": ("{x}.relu()", None, None),
    "abs": ("{x}.abs()", None, None), "square": ("{x}.square()", None, 30.0), "erf": ("{x}.erf()", None, None),
    "atan": ("{x}.atan()", None, None), "sinh": ("{x}.sinh()", None, 5.0), "cosh": ("{x}.cosh()", None, 5.0),
    "asin": ("{x}.asin()", None, 0.9), "gelu": ("{x}.gelu()", "F.gelu({x}, approximate='tanh')", 10.0),
    "silu": ("{x}.silu()", "F.silu({x})", None), "softplus": ("{x}.softplus()", "F.softplus({x})", 15.0),
    "leaky_relu": ("{x}.leaky_relu(0.1)", "F.leaky_relu({x}, 0.1)", None), "elu": ("{x}.elu()", "F.elu({x})", None),
    "sign": ("{x}.sign()", None, None), "floor": ("{x}.floor()", None, None), "ceil": ("{x}.ceil()", None, None),
    "trunc": ("{x}.trunc()", None, None), "round": ("{x}.round()", None, None),
    "clip": ("{x}.clip(-1.0, 1.5)", None, None),
}
# TODO(known bug, being fixed): transcendental accuracy near 0. Re-enable by removing this set's check in
# unary(): inputs of these ops with any 0 < |x| < 1e-2 are not generated. Other known bugs need no exclusion
# here because the fuzzer never builds them: argmax of NaN (every value is finite), a conv weight used twice
# (no convs), writes through views (no assign), int8 + uint64 (only float32/float16/int32/bool).
TINY_INPUT_EXCLUDED = ("tanh", "sinh", "erf", "atan", "asin")

class GraphBuilder:
    """Grows a random graph step by step, checking every candidate step on torch values."""

    def __init__(self, seed: int, device: str, max_steps: int | None = None):
        self.rng = np.random.default_rng(seed)
        self.seed, self.device = seed, device
        self.inputs: list[FuzzInput] = []
        self.steps: list[Step] = []
        self.values: list[torch.Tensor] = []   # torch values (no grad) of inputs then steps
        self.max_steps = int(self.rng.integers(3, 9)) if max_steps is None else max_steps

    # -- values
    def name(self, i: int) -> str: return dtype_name(self.values[i].dtype)
    def shape(self, i: int) -> tuple[int, ...]: return tuple(self.values[i].shape)

    def add_input(self, shape: tuple[int, ...], dtype: str) -> None:
        self.inputs.append(FuzzInput(shape, dtype))
        self.values.append(torch.tensor(input_array(self.seed, len(self.inputs) - 1, shape, dtype)))

    def pick(self, accept=lambda i: True) -> int | None:
        """A random earlier value (recent ones more likely) that ``accept`` allows."""
        candidates = [i for i in range(len(self.values)) if accept(i)]
        if not candidates: return None
        weights = np.array([1.0 + 2.0 * (i >= len(self.values) - 2) + 3.0 * (i == len(self.values) - 1) for i in candidates])
        return int(self.rng.choice(candidates, p=weights / weights.sum()))

    def try_step(self, op: str, fusegrad: str, torch_expression: str | None = None) -> bool:
        """Add the step if torch computes a well-conditioned value for it."""
        step = Step(op, fusegrad, fusegrad if torch_expression is None else torch_expression)
        try:
            with torch.no_grad(): result = _evaluate(step.torch, TORCH_NAMESPACE, self.values)
        except (RuntimeError, TypeError, IndexError, ValueError): return False
        if not _well_conditioned(result): return False
        self.steps.append(step)
        self.values.append(result)
        return True

    # -- building
    def build(self) -> FuzzGraph:
        main = self.rng.choice(DTYPE_NAMES, p=[0.6, 0.13, 0.15, 0.12])
        shape = random_shape(self.rng)
        self.add_input(shape, str(main))
        for _ in range(int(self.rng.integers(0, 3))):
            other = main if self.rng.random() < 0.7 else self.rng.choice(DTYPE_NAMES)
            other_shape = shape if self.rng.random() < 0.3 else broadcastable_shape(self.rng, shape)
            self.add_input(other_shape, str(other))
        families = [self.unary, self.binary, self.compare, self.where, self.cast, self.reshape, self.permute, self.expand,
                    self.pad, self.shrink, self.flip, self.getitem, self.cat, self.reduce, self.softmax, self.argmax,
                    self.cumsum, self.gather, self.contiguous, self.matmul, self.conv2d, self.scatter, self.setitem]
        weights = np.array([6, 4, 1.5, 1, 1, 1.5, 1, 1, 1, 1, 1, 2, 1, 3, 0.7, 0.7, 0.7, 0.7, 0.3, 1.2, 0.8, 0.7, 1])
        attempts = 0
        while len(self.steps) < self.max_steps and attempts < 20 * self.max_steps:
            attempts += 1
            family = families[int(self.rng.choice(len(families), p=weights / weights.sum()))]
            family()
        outputs = [len(self.values) - 1]
        if len(self.steps) > 1 and self.rng.random() < 0.3: outputs.insert(0, len(self.inputs) + int(self.rng.integers(len(self.steps) - 1)))
        return FuzzGraph(self.seed, self.device, self.inputs, self.steps, outputs, bool(self.rng.random() < 0.3))

    def _choice(self, options):
        return options[int(self.rng.integers(len(options)))]

    def _axes(self, ndim: int, allow_none: bool = True, single: bool = False):
        """None (all axes), one axis (maybe negative) or a tuple of distinct axes."""
        if ndim == 0 or (allow_none and self.rng.random() < 0.25): return None
        if single or self.rng.random() < 0.5:
            axis = int(self.rng.integers(ndim))
            return axis - ndim if self.rng.random() < 0.3 else axis
        count = int(self.rng.integers(1, ndim + 1))
        return tuple(sorted(int(a) for a in self.rng.choice(ndim, size=count, replace=False)))

    # -- op families (each tries to add one step; failing is fine, the loop tries another)
    def unary(self) -> None:
        floats = self.rng.random() < 0.8   # float math is where most of the rules (and the gradients) are
        x = self.pick(lambda i: is_float(self.name(i))) if floats else None
        if x is None: x = self.pick()
        if x is None: return
        name = self.name(x)
        if not is_float(name):
            options = {"int32": [("-{x}", "neg"), ("{x}.abs()", "abs"), ("~{x}", "bitwise_not"), ("{x}.sign()", "sign")],
                       "bool": [("{x}.logical_not()", "logical_not")]}[name]
            template, op = self._choice(options)
            self.try_step(op, template.format(x=f"v{x}"))
            return
        op = self._choice(sorted(UNARY_FLOAT))
        fusegrad, torch_template, limit = UNARY_FLOAT[op]
        value = self.values[x].double()
        if limit is not None and value.numel() and value.abs().max() > limit: return
        if op in TINY_INPUT_EXCLUDED and bool(((value != 0) & (value.abs() < 1e-2)).any()): return
        if op in ("floor", "ceil", "trunc") and not _far_from_integers(value, name): return
        if op == "round" and not _far_from_integers(value, name, half=True): return
        if op == "sign" and not _far_from(value, torch.zeros(()), name): return
        if op == "clip" and not (_far_from(value, torch.tensor(-1.0), name) and _far_from(value, torch.tensor(1.5), name)
                                 and bool(((value - torch.tensor([-1.0, 1.5]).view(-1, *[1] * value.ndim)).abs() > 0).all())): return
        if op in ("abs", "relu", "leaky_relu") and not _far_from(value, torch.zeros(()), name): return  # kinks at 0
        self.try_step(op, fusegrad.format(x=f"v{x}"), (torch_template or fusegrad).format(x=f"v{x}"))

    def _partner(self, x: int, same_dtype: bool = False, float_only: bool = False) -> int | None:
        """Another value whose shape broadcasts with x's."""
        def fits(i: int) -> bool:
            if same_dtype and self.name(i) != self.name(x): return False
            if self._zero_dim_promotion_differs(x, i): return False
            if float_only and not is_float(self.name(i)): return False
            try: torch.broadcast_shapes(self.shape(x), self.shape(i))
            except RuntimeError: return False
            return True
        return self.pick(fits)

    def _zero_dim_promotion_differs(self, a: int, b: int) -> bool:
        """torch lets a 0-d tensor raise the result dtype only across categories (float16 tensor + 0-d float32
        tensor is float16); fusegrad, like tinygrad, promotes by dtype alone (float32). Such pairs aren't generated."""
        names = {self.name(a), self.name(b)}
        return names == {"float16", "float32"} and (len(self.shape(a)) == 0) != (len(self.shape(b)) == 0)

    def _scalar(self, name: str) -> str:
        if name == "bool" or (name == "int32" and self.rng.random() < 0.7): return str(int(self.rng.integers(1, 4)))
        return self._choice(["0.5", "1.5", "-0.75", "2.0", "3"])

    def binary(self) -> None:
        x = self.pick()
        if x is None: return
        name = self.name(x)
        op = self._choice(["add", "sub", "mul", "div", "maximum", "minimum", "pow", "floordiv", "mod", "bitwise"])
        use_scalar = self.rng.random() < 0.3
        if op in ("add", "sub", "mul"):
            if name == "bool": return    # torch refuses bool - bool; + and * on bools are logical ops, covered by "bitwise"
            y = self._scalar(name) if use_scalar else self._partner(x)
            if y is None: return
            right = y if use_scalar else f"v{y}"
            if op == "sub" and not use_scalar and self.name(y) == "bool": return
            symbol = {"add": "+", "sub": "-", "mul": "*"}[op]
            if self.rng.random() < 0.2 and use_scalar: self.try_step(op, f"{right} {symbol} v{x}")   # reflected operator
            else: self.try_step(op, f"v{x} {symbol} {right}")
        elif op == "div":
            if use_scalar: self.try_step(op, f"v{x} / {self._choice(['1.7', '-2.5', '4'])}")
            elif (y := self._partner(x)) is not None and self.name(y) != "bool":
                self.try_step(op, f"v{x} / (v{y}.abs() + {'1' if self.name(y) == 'int32' else '0.5'})")
        elif op in ("maximum", "minimum"):
            y = self._partner(x)
            if y is None or "bool" in (name, self.name(y)): return
            values = torch.broadcast_tensors(self.values[x].double(), self.values[y].double())
            if is_float(name) or is_float(self.name(y)):   # exact ties split the gradient in both; near-ties would not
                if not _far_from(values[0], values[1], "float16" if "float16" in (name, self.name(y)) else "float32"): return
            self.try_step(op, f"v{x}.{op}(v{y})", f"torch.{op}(v{x}, v{y})")
        elif op == "pow":
            if not is_float(name): return
            if use_scalar or self.rng.random() < 0.5:
                self.try_step(op, f"(v{x}.abs() + 0.5) ** {self._choice(['2', '0.5', '-1', '3', '1.5', '-0.5'])}")
                return
            y = self._partner(x, float_only=True)
            if y is None or (self.values[y].numel() and self.values[y].abs().max() > 3): return
            self.try_step(op, f"(v{x}.abs() + 0.5) ** v{y}")
        elif op in ("floordiv", "mod"):
            if name != "int32": return
            symbol = "//" if op == "floordiv" else "%"
            if use_scalar: self.try_step(op, f"v{x} {symbol} {self._choice(['2', '3', '5'])}")
            elif (y := self._partner(x, same_dtype=True)) is not None: self.try_step(op, f"v{x} {symbol} (v{y}.abs() + 1)")
        elif op == "bitwise":
            if name not in ("int32", "bool") or (y := self._partner(x, same_dtype=True)) is None: return
            self.try_step(op, f"v{x} {self._choice(['&', '|', '^'])} v{y}")

    def compare(self) -> None:
        x = self.pick()
        if x is None: return
        symbol = self._choice(["<", ">", "<=", ">=", "==", "!="])
        if self.rng.random() < 0.4:
            y, right = None, self._scalar(self.name(x))
            other = torch.tensor(float(right))
        else:
            y = self._partner(x)
            if y is None: return
            right, other = f"v{y}", self.values[y]
        names = (self.name(x), self.name(y) if y is not None else "int32")
        if any(is_float(n) for n in names):
            a, b = torch.broadcast_tensors(self.values[x].double(), other.double())
            if not _far_from(a, b, "float16" if "float16" in names else "float32"): return
        self.try_step("compare", f"v{x} {symbol} {right}")

    def where(self) -> None:
        x = self.pick()
        if x is None: return
        condition = self.pick(lambda i: self.name(i) == "bool" and self._broadcasts(i, x))   # (bool: promotion-neutral)
        if condition is None:
            if not is_float(self.name(x)) or not _far_from(self.values[x].double(), torch.tensor(0.3), self.name(x)): return
            fusegrad_condition = torch_condition = f"(v{x} > 0.3)"
        else: fusegrad_condition = torch_condition = f"v{condition}"
        y = self._partner(x) if self.rng.random() < 0.6 else None
        other = f"v{y}" if y is not None else self._scalar(self.name(x))
        self.try_step("where", f"{fusegrad_condition}.where(v{x}, {other})", f"torch.where({torch_condition}, v{x}, {other})")

    def _broadcasts(self, a: int, b: int) -> bool:
        try: torch.broadcast_shapes(self.shape(a), self.shape(b))
        except RuntimeError: return False
        return True

    def cast(self) -> None:
        x = self.pick()
        if x is None: return
        source, target = self.name(x), self._choice(DTYPE_NAMES)
        if source == target: return
        value = self.values[x].double()
        if is_float(source) and target == "int32" and not _far_from_integers(value, source): return
        if is_float(source) and target == "bool" and not _far_from(value, torch.zeros(()), source): return
        if target == "float16" and value.numel() and value.abs().max() > 2000: return
        # fusegrad (like tinygrad) passes a gradient straight through a float -> int/bool cast; torch has none
        detach = ".detach()" if is_float(source) and not is_float(target) else ""
        self.try_step("cast", f"v{x}{detach}.cast(dtypes.{target})", f"v{x}.to(torch.{target})")

    def reshape(self) -> None:
        x = self.pick()
        if x is None: return
        shape = random_reshape(self.rng, self.shape(x))
        if self.rng.random() < 0.2 and shape and math.prod(shape) > 0:   # let reshape infer one dim
            shape = tuple(-1 if i == int(self.rng.integers(len(shape))) else s for i, s in enumerate(shape))
        self.try_step("reshape", f"v{x}.reshape({shape})")

    def permute(self) -> None:
        x = self.pick(lambda i: len(self.shape(i)) >= 2)
        if x is None: return
        order = tuple(int(a) for a in self.rng.permutation(len(self.shape(x))))
        self.try_step("permute", f"v{x}.permute{order}" if len(order) > 1 else f"v{x}.permute({order[0]})")

    def expand(self) -> None:
        x = self.pick(lambda i: 1 in self.shape(i) or len(self.shape(i)) < 3)
        if x is None: return
        shape = [int(self.rng.integers(1, 5)) if s == 1 else s for s in self.shape(x)]
        leading = [int(self.rng.integers(1, 4)) for _ in range(int(self.rng.integers(0, 2)))]
        self.try_step("expand", f"v{x}.expand({tuple(leading + shape)})")

    def pad(self) -> None:
        x = self.pick(lambda i: len(self.shape(i)) >= 1)
        if x is None: return
        shape = self.shape(x)
        pads = [(int(self.rng.integers(-1 if s > 1 else 0, 3)), int(self.rng.integers(0, 3))) for s in shape]
        value = "0.0" if self.rng.random() < 0.6 or self.name(x) == "bool" else self._choice(["1.0", "-2.0"])
        if self.name(x) == "int32": value = value.split(".")[0]
        flat = [p for pair in reversed(pads) for p in pair]
        self.try_step("pad", f"v{x}.pad({tuple(pads)}, value={value})", f"F.pad(v{x}, {flat}, value={value})")

    def shrink(self) -> None:
        x = self.pick(lambda i: len(self.shape(i)) >= 1)
        if x is None: return
        bounds = []
        for s in self.shape(x):
            start = int(self.rng.integers(0, s + 1))
            empty = self.rng.random() < 0.05 or start == s
            bounds.append((start, start if empty else int(self.rng.integers(start + 1, s + 1))))
        slices = ", ".join(f"{a}:{b}" for a, b in bounds)
        self.try_step("shrink", f"v{x}.shrink({tuple(bounds)})", f"v{x}[{slices}]")

    def flip(self) -> None:
        x = self.pick(lambda i: len(self.shape(i)) >= 1)
        if x is None: return
        axes = self._axes(len(self.shape(x)), allow_none=False)
        axes = axes if isinstance(axes, tuple) else (axes,)
        self.try_step("flip", f"v{x}.flip({axes})")

    def getitem(self) -> None:
        x = self.pick(lambda i: len(self.shape(i)) >= 1)
        if x is None: return
        fusegrad_items, torch_items, flips, tensor_indices = [], [], [], 0
        shape = self.shape(x)
        for dim, size in enumerate(shape[:int(self.rng.integers(1, len(shape) + 1))]):
            kind = self.rng.choice(["int", "slice", "tensor", "all", "none"], p=[0.25, 0.35, 0.15, 0.15, 0.1])
            if kind == "none":   # a new axis, then this dim whole
                fusegrad_items.append("None"); torch_items.append("None")
                kind = "all"
            if kind == "int" and size > 0:
                index = int(self.rng.integers(-size, size))
                fusegrad_items.append(str(index)); torch_items.append(str(index))
            elif kind == "tensor" and size > 0 and tensor_indices < 2:
                tensor_indices += 1
                count = int(self.rng.integers(1, 5))
                index = self.rng.integers(-size, size, size=(count,) if self.rng.random() < 0.7 else (count, 1)).tolist()
                fusegrad_items.append(f"Tensor({index}, dtype=dtypes.int32, device=DEVICE)")
                torch_items.append(f"torch.tensor({index})")
            elif kind in ("slice", "int", "tensor"):
                fusegrad_slice, torch_slice, flipped = self._random_slice(size)
                fusegrad_items.append(fusegrad_slice); torch_items.append(torch_slice)
                if flipped: flips.append(dim)
            else:
                fusegrad_items.append(":"); torch_items.append(":")
        if self.rng.random() < 0.15:
            fusegrad_items.append("..."); torch_items.append("...")
        source = f"v{x}.flip({tuple(flips)})" if flips else f"v{x}"
        self.try_step("getitem", f"v{x}[{', '.join(fusegrad_items)}]", f"{source}[{', '.join(torch_items)}]")

    def _random_slice(self, size: int) -> tuple[str, str, bool]:
        """A slice with a random start/stop/step (step may be negative) in fusegrad syntax, and the same
        elements in torch syntax (torch has no negative steps: those become a positive slice of the flipped axis)."""
        step = int(self._choice([1, 1, 2, 3, -1, -2]))
        start = int(self.rng.integers(-size - 1, size + 2)) if self.rng.random() < 0.6 else None
        stop = int(self.rng.integers(-size - 1, size + 2)) if self.rng.random() < 0.6 else None
        text = f"{'' if start is None else start}:{'' if stop is None else stop}" + (f":{step}" if step != 1 else "")
        if step > 0: return text, text, False
        picked = list(range(size))[slice(start, stop, step)]
        if not picked: return text, "0:0", True
        first, last = size - 1 - picked[0], size - 1 - picked[-1]
        return text, f"{first}:{last + 1}:{-step}", True

    def cat(self) -> None:
        x = self.pick(lambda i: len(self.shape(i)) >= 1)
        if x is None: return
        dim = int(self.rng.integers(len(self.shape(x))))
        def fits(i: int) -> bool:
            other = self.shape(i)
            return self.name(i) == self.name(x) and len(other) == len(self.shape(x)) and \
                all(a == b for d, (a, b) in enumerate(zip(other, self.shape(x))) if d != dim)
        others = [self.pick(fits) for _ in range(int(self.rng.integers(1, 3)))]
        if None in others: return
        shown_dim = dim - len(self.shape(x)) if self.rng.random() < 0.3 else dim
        names = ", ".join(f"v{i}" for i in others)
        self.try_step("cat", f"v{x}.cat({names}, dim={shown_dim})", f"torch.cat([v{x}, {names}], {shown_dim})")

    def reduce(self) -> None:
        x = self.pick()
        if x is None: return
        name, ndim = self.name(x), len(self.shape(x))
        op = self._choice(["sum", "max", "min", "mean", "prod", "any", "all"] if name == "bool" else ["sum", "sum", "max", "min", "mean", "prod"])
        axes = self._axes(ndim, single=(op == "prod"))
        keepdim = bool(self.rng.random() < 0.3)
        if op in ("max", "min") and is_float(name):
            resolved = None if axes is None else tuple(a % ndim for a in (axes if isinstance(axes, tuple) else (axes,)))
            if not _separated_extremes(self.values[x], resolved, name, largest=(op == "max")): return
        arguments = ", ".join(([f"axis={axes}"] if axes is not None else []) + (["keepdim=True"] if keepdim else []))
        torch_arguments = ", ".join(([f"dim={axes}"] if axes is not None else []) + (["keepdim=True"] if keepdim else []))
        if op in ("any", "all") and isinstance(axes, tuple): return    # torch's any/all take one dim
        if keepdim and axes is None and op in ("prod", "any", "all"): return   # torch needs a dim for keepdim there
        torch_op = {"max": "amax", "min": "amin"}.get(op, op)
        source = f"v{x}.to(torch.float32)" if op == "mean" and not is_float(name) else f"v{x}"
        # torch: int64; fusegrad (tinygrad): int32 for sum, the input's dtype for prod (a bool product is all())
        narrowed = f".to(torch.{'bool' if op == 'prod' and name == 'bool' else 'int32'})" if op in ("sum", "prod") and not is_float(name) else ""
        self.try_step(op, f"v{x}.{op}({arguments})", f"{source}.{torch_op}({torch_arguments})" + narrowed)

    def softmax(self) -> None:
        x = self.pick(lambda i: is_float(self.name(i)) and len(self.shape(i)) >= 1)
        if x is None: return
        op = self._choice(["softmax", "log_softmax", "logsumexp"])
        axis = self._axes(len(self.shape(x)), allow_none=False, single=True)
        self.try_step(op, f"v{x}.{op}({axis})")

    def argmax(self) -> None:
        x = self.pick(lambda i: len(self.shape(i)) >= 1 and self.name(i) != "bool")
        if x is None: return
        op = self._choice(["argmax", "argmin"])
        axis = self._axes(len(self.shape(x)), single=True)
        resolved = None if axis is None else (axis % len(self.shape(x)),)
        if is_float(self.name(x)) and not _separated_extremes(self.values[x], resolved, self.name(x), largest=(op == "argmax")): return
        keepdim = axis is not None and bool(self.rng.random() < 0.3)   # without an axis fusegrad ignores keepdim (as tinygrad)
        arguments = ", ".join(([f"axis={axis}"] if axis is not None else []) + (["keepdim=True"] if keepdim else []))
        torch_arguments = ", ".join(([f"dim={axis}"] if axis is not None else []) + (["keepdim=True"] if keepdim else []))
        self.try_step(op, f"v{x}.{op}({arguments})", f"v{x}.{op}({torch_arguments}).to(torch.int32)")

    def cumsum(self) -> None:
        x = self.pick()
        if x is None: return
        ndim = len(self.shape(x))
        axis = int(self.rng.integers(-ndim, ndim)) if ndim else 0
        widened = not is_float(self.name(x))
        self.try_step("cumsum", f"v{x}.cumsum({axis})", f"v{x}.cumsum({axis})" + (".to(torch.int32)" if widened else ""))

    def gather(self) -> None:
        x = self.pick(lambda i: len(self.shape(i)) >= 1 and 0 not in self.shape(i))
        if x is None: return
        shape = self.shape(x)
        dim = int(self.rng.integers(len(shape)))
        index_shape = tuple(int(self.rng.integers(1, 5)) if d == dim else int(self.rng.integers(1, s + 1)) for d, s in enumerate(shape))
        index = self.rng.integers(0, shape[dim], size=index_shape)
        source = self.pick(lambda i: self.name(i) == "int32" and self.shape(i) == index_shape)
        if source is not None and self.rng.random() < 0.7:    # an index computed in the graph
            self.try_step("gather", f"v{x}.gather({dim}, v{source} % {shape[dim]})", f"v{x}.gather({dim}, (v{source} % {shape[dim]}).long())")
        else:
            self.try_step("gather", f"v{x}.gather({dim}, Tensor({index.tolist()}, dtype=dtypes.int32, device=DEVICE))",
                          f"v{x}.gather({dim}, torch.tensor({index.tolist()}))")

    def contiguous(self) -> None:
        x = self.pick()
        if x is not None: self.try_step("contiguous", f"v{x}.contiguous()")

    def _literal(self, shape: tuple[int, ...]) -> list:
        """Small float values with two decimals (exact in the reproducer) as a nested list."""
        return (self.rng.integers(-150, 151, size=shape) / 100).tolist()

    def matmul(self) -> None:
        x = self.pick(lambda i: len(self.shape(i)) >= 1 and self.name(i) != "bool")
        if x is None: return
        shape, name = self.shape(x), self.name(x)
        if self.rng.random() < 0.4 and len(shape) >= 2:   # with itself transposed: a gradient through both sides
            self.try_step("matmul", f"v{x} @ v{x}.transpose(-1, -2)")
            return
        if self.rng.random() < 0.3 and (y := self.pick(lambda i: self.name(i) == name and len(self.shape(i)) >= 1
                                                       and self.shape(i)[-2 if len(self.shape(i)) >= 2 else 0] == shape[-1])) is not None:
            self.try_step("matmul", f"v{x}.matmul(v{y})", f"torch.matmul(v{x}, v{y})")
            return
        columns = int(self.rng.integers(1, 6))
        weight_shape = (shape[-1], columns) if self.rng.random() < 0.8 else (shape[-1],)
        weight = self._literal(weight_shape) if is_float(name) else self.rng.integers(-3, 4, size=weight_shape).tolist()
        dtype = {"float32": "float32", "float16": "float16", "int32": "int32"}[name]
        self.try_step("matmul", f"v{x} @ Tensor({weight}, dtype=dtypes.{dtype}, device=DEVICE)", f"v{x} @ torch.tensor({weight}, dtype=torch.{dtype})")

    def conv2d(self) -> None:
        x = self.pick(lambda i: len(self.shape(i)) >= 2 and self.name(i) == "float32" and 0 not in self.shape(i))
        if x is None: return
        # (N, C, H, W) as it is; (C, H, W) and (H, W) as a batch of one (with one channel)
        shape = self.shape(x)
        batched = f"v{x}" + {4: "", 3: ".unsqueeze(0)", 2: f".reshape(1, 1, {shape[-2]}, {shape[-1]})"}.get(len(shape), "X")
        if len(shape) > 4: return
        _, channels, height, width = (1,) * (4 - len(shape)) + shape
        groups = int(self._choice([g for g in (1, 2, 3) if channels % g == 0]))
        stride, dilation, padding = int(self._choice([1, 1, 2])), int(self._choice([1, 1, 2])), int(self._choice([0, 0, 1, 2]))
        kernel = (int(self.rng.integers(1, 4)), int(self.rng.integers(1, 4)))
        if any(dilation * (k - 1) + 1 > size + 2 * padding for k, size in zip(kernel, (height, width))): return
        out_channels = groups * int(self.rng.integers(1, 3))
        weight = self._literal((out_channels, channels // groups, *kernel))
        arguments = f"groups={groups}, stride={stride}, dilation={dilation}, padding={padding}"
        self.try_step("conv2d", f"{batched}.conv2d(Tensor({weight}, device=DEVICE), {arguments})",
                      f"F.conv2d({batched}, torch.tensor({weight}), {arguments})")

    def scatter(self) -> None:
        x = self.pick(lambda i: len(self.shape(i)) >= 1 and 0 not in self.shape(i))
        if x is None: return
        shape = self.shape(x)
        dim = int(self.rng.integers(len(shape)))
        # a tensor source is shaped like the index (torch's backward can't take a bigger one)
        source = self.pick(lambda i: self.name(i) == self.name(x) and len(self.shape(i)) == len(shape) and 0 not in self.shape(i)
                           and all(a <= b for a, b in zip(self.shape(i), shape)))
        if source is not None and self.rng.random() < 0.3: source = None
        index_shape = self.shape(source) if source is not None else tuple(int(self.rng.integers(1, s + 1)) for s in shape)
        # distinct targets along dim in every slice (torch leaves the winner of repeated indices unspecified)
        index = np.moveaxis(np.stack([self.rng.permutation(shape[dim])[:index_shape[dim]]
                                      for _ in range(math.prod(index_shape) // index_shape[dim])]).reshape(
                                          *[s for d, s in enumerate(index_shape) if d != dim], index_shape[dim]), -1, dim)
        fusegrad_index = f"Tensor({index.tolist()}, dtype=dtypes.int32, device=DEVICE)"
        torch_index = f"torch.tensor({index.tolist()})"
        if source is None:
            value = "True" if self.name(x) == "bool" else self._scalar(self.name(x))
            self.try_step("scatter", f"v{x}.scatter({dim}, {fusegrad_index}, {value})", f"v{x}.scatter({dim}, {torch_index}, {value})")
        else:
            self.try_step("scatter", f"v{x}.scatter({dim}, {fusegrad_index}, v{source})", f"v{x}.scatter({dim}, {torch_index}, v{source})")

    def setitem(self) -> None:
        x = self.pick(lambda i: len(self.shape(i)) >= 1)
        if x is None: return
        items, shape = [], self.shape(x)
        for size in shape[:int(self.rng.integers(1, len(shape) + 1))]:
            if size > 0 and self.rng.random() < 0.3: items.append(str(int(self.rng.integers(-size, size))))
            else:   # a slice with a positive step (torch has no negative ones)
                start, stop = sorted(int(v) for v in self.rng.integers(-size - 1, size + 2, size=2))
                step = int(self._choice([1, 1, 2]))
                items.append(f"{start}:{stop}" + (f":{step}" if step != 1 else ""))
        index = f"np.s_[{', '.join(items)}]"
        try: region = tuple(self.values[x][eval(index)].shape)
        except (IndexError, RuntimeError, ValueError): return
        name = self.name(x)
        value = self.pick(lambda i: self.name(i) == name and i != x and len(self.shape(i)) <= len(region)
                          and self._fits(self.shape(i), region))
        right = f"v{value}" if value is not None and self.rng.random() < 0.7 else ("False" if name == "bool" else self._scalar(name))
        self.try_step("setitem", f"setitem_copy(v{x}, {index}, {right})")

    @staticmethod
    def _fits(shape: tuple[int, ...], target: tuple[int, ...]) -> bool:
        """Does ``shape`` broadcast to ``target`` (without changing it)?"""
        try: return tuple(torch.broadcast_shapes(shape, target)) == tuple(target)
        except RuntimeError: return False

def generate(seed: int, device: str = "CPU") -> FuzzGraph:
    """The graph of ``seed``: the same graph every time (it depends only on seed and device)."""
    return GraphBuilder(seed, device).build()
