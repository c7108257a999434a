"""The Tensor front end: a lazy, PyTorch-like array that builds a UOp graph.

Nothing runs until a value is needed (``numpy()``, ``item()``, ``realize()``); then the pending
graph is scheduled into fused kernels, compiled and run.

>>> from fusegrad import Tensor
>>> (Tensor([1.0, 2.0]) * 3 + 1).tolist()
[4.0, 7.0]
"""
from __future__ import annotations
import dataclasses, functools, hashlib, itertools, math, numbers, struct, weakref
from typing import Any, Callable, Iterable, Sequence
from fusegrad.dtype import (DType, dtypes, least_upper_dtype, least_upper_float, sum_acc_dtype, to_dtype, to_np_dtype,
                            from_np, ConstType)
from fusegrad.helpers import argfix, prod, all_int, DEBUG, TRAINING, ceildiv, flatten, getenv
from fusegrad.uop.ops import UOp, Ops, GroupOp, resolve, smax, sint_to_uop
from fusegrad.device import Device, Buffer, MallocAllocator
from fusegrad.schedule import create_schedule, ScheduleItem
from fusegrad.schedule.tensor_rules import const_value   # (module level: _is_realized_uop runs on every realize)
from fusegrad.buffers import new_buffer_uop, buffer_of, BUFFERS
from fusegrad.engine.realize import run_schedule, capturing, shape_guards, realize_lock
from fusegrad.engine.jit import unbind_variables
from fusegrad.uop.alu import threefry2x32
from fusegrad.gradient import record_origins, split_reduce, anchor_value_origins, origin_of   # (module level: an import inside _apply_becomes cost ~1.4 us per realize)
from fusegrad.mixins.processing import ProcessingMixin
from fusegrad.mixins.functional import FunctionalMixin

all_tensors: "weakref.WeakSet[Tensor]" = weakref.WeakSet()

def _live_tensors() -> list["Tensor"]:
    """Every live Tensor, as ``list(all_tensors)``. That goes through WeakSet's Python iterator and its
    iteration guard (~3 us even for one tensor, on every realize); this copies the set of weak
    references in one C call (no callback can run during it) and dereferences them."""
    return [t for ref in all_tensors.data.copy() if (t := ref()) is not None]

# floats narrower than float32: their sums accumulate in float32 and return in the input's dtype (tinygrad's
# rule), and their math (exp, log, sin ...) computes in float32 and rounds once
_NARROW_FLOATS = (dtypes.float16, dtypes.bfloat16) + dtypes.fp8s

# selu's constants as PyTorch defines them (tinygrad's 1.67326 and 1.0507 are 9 float32 ulp off)
_SELU_ALPHA, _SELU_SCALE = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946

def _fromnp(array: Any, device: str, dtype: DType | None) -> UOp:
    """Copy a numpy array into a new device buffer and return a view of it with the array's shape."""
    import numpy as np
    array = np.ascontiguousarray(array).reshape(np.shape(array))   # (ascontiguousarray makes 0-d arrays 1-d)
    target = dtype if dtype is not None else from_np(array.dtype)
    if target.fmt is None:   # bfloat16 / fp8: numpy can't hold them, so go through float32
        return _fromnp(array.astype(np.float32), device, dtypes.float32).cast(target)
    if array.dtype != to_np_dtype(target): array = array.astype(to_np_dtype(target))
    if array.size == 0: return UOp.const(target, 0, device, array.shape)
    buffer = new_buffer_uop(device, array.size, target)
    if device == "NPY": buffer_of(buffer).allocate(array.reshape(-1).view(np.uint8))   # zero-copy: wrap the array
    else: buffer_of(buffer).allocate().copyin(memoryview(array.reshape(-1).view(np.uint8)))
    return buffer.reshape(array.shape)

def _from_bytes(data: bytes | bytearray | memoryview, device: str, dtype: DType | None) -> UOp:
    """Raw bytes as a 1-d tensor of ``dtype``'s values (uint8 without one): ``len(data) // itemsize`` elements read
    from the bytes as memory holds them, tinygrad's rule (``Tensor(struct.pack("ff", 1, 2), dtype=dtypes.float32)``
    is ``[1.0, 2.0]``; converting each byte to a float gave 8 values). A length that isn't a whole number of items
    raises ValueError. bool reads each nonzero byte as True."""
    import numpy as np
    raw = bytes(data)   # (a memoryview of any format: its bytes; a copy, so the tensor never aliases a bytearray)
    dtype = dtypes.uint8 if dtype is None else dtypes.concrete(dtype)
    if len(raw) % dtype.itemsize:
        raise ValueError(f"can't read {len(raw)} bytes as {dtype}: not a whole number of its {dtype.itemsize}-byte items")
    if dtype == dtypes.bool: return _fromnp(np.frombuffer(raw, dtype=np.uint8) != 0, device, dtype)
    if dtype.fmt is not None: return _fromnp(np.frombuffer(raw, dtype=to_np_dtype(dtype)), device, dtype)
    count = len(raw) // dtype.itemsize   # bfloat16 / fp8 (no numpy type): the bytes go into the buffer as they are
    if count == 0: return UOp.const(dtype, 0, device, (0,))
    buffer = new_buffer_uop(device, count, dtype)
    buffer_of(buffer).allocate().copyin(memoryview(raw))
    return buffer.reshape((count,))

def _infer_list_dtype(data: Any) -> DType:
    flat = list(_flatten_nested(data))
    _refuse_none(flat, data)
    if flat and all(isinstance(x, bool) for x in flat): return dtypes.bool
    if all(isinstance(x, (bool, int)) for x in flat) and flat: return dtypes.default_int
    return dtypes.default_float

def _refuse_none(flat: list, data: Any, error: type[Exception] = RuntimeError) -> None:
    """numpy would read None as NaN in a float list: tinygrad's error instead (RuntimeError, TypeError with a dtype)."""
    if any(x is None for x in flat): raise error(f"can't make a tensor from a list holding None: {data!r:.60}")

def _wrap_ints(data: Any, dtype: DType) -> Any:
    """``data`` (nested lists) with every Python int wrapped into ``dtype`` two's complement style."""
    if isinstance(data, (list, tuple)): return [_wrap_ints(x, dtype) for x in data]
    if isinstance(data, int) and not isinstance(data, bool) and dtypes.is_int(dtype): return dtypes.as_const(data, dtype)
    return data

def _flatten_nested(data: Any) -> Iterable[Any]:
    if isinstance(data, (list, tuple)):
        for x in data: yield from _flatten_nested(x)
    elif hasattr(data, "item") and hasattr(data, "shape"): yield data.item() if data.shape == () else data
    else: yield data

def _broadcast_shape(*shapes: tuple) -> tuple:
    """numpy broadcasting: ``_broadcast_shape((3, 1), (4,)) == (3, 4)``."""
    ndim = max(len(s) for s in shapes)
    padded = [(1,) * (ndim - len(s)) + tuple(s) for s in shapes]
    out = []
    for sizes in zip(*padded):
        non_one = {s for s in sizes if not (isinstance(s, int) and s == 1)}
        # IndexError like tinygrad's (numpy says ValueError, torch RuntimeError)
        if len(non_one) > 1: raise IndexError(f"cannot broadcast shapes {', '.join(str(tuple(s)) for s in shapes)}")
        out.append(non_one.pop() if non_one else 1)
    return tuple(out)

# Series of the composed math functions (Tensor.tanh, sinh, asin/acos, atan, erf), lowest order first,
# fitted with mpmath.chebyfit at 40 digits, like codegen/transcendental.py's (see its docstring), to
# float64 accuracy; float32 and the widened float16 use the same ones. Odd functions are
# f(x) = x + x*z*P(z), z = x*x, with P = (f(sqrt z) - sqrt z)/z**1.5 on [0, zmax]; worst relative error
# of the rounded P (it enters f scaled by z*P/f <= 0.12, so each costs < 0.1 ulp of float64).
_TANH_SERIES = (-0.3333333333333333, 0.13333333333333042, -0.05396825396789699, 0.021869488519008305,   # |x| <= 0.625: 1.7e-16
                -0.008863235103240878, 0.0035921217511549622, -0.0014557754120478055, 0.0005896606577757043,
                -0.0002375906496055562, 9.257116129556769e-05, -3.12011014257974e-05, 6.485163482793113e-06)
_SINH_SERIES = (0.16666666666666666, 0.008333333333333333, 0.00019841269841269773, 2.755731922404034e-06,   # |x| <= 1: 1.4e-16
                2.505210836405804e-08, 1.6059048396350562e-10, 7.646625361656657e-13, 2.8445264169895285e-15)
_ASIN_SERIES = (0.1666666666666665, 0.07500000000020764, 0.044642857103423646, 0.03038194736709848,   # |x| <= 0.5: 1.3e-15
                0.02237204763174451, 0.017355259955786323, 0.013929652902326633, 0.011875494382636922,
                0.0078029494773533175, 0.01603551434914882, -0.010749050339697808, 0.028169218060881414)
_ATAN_SERIES = (-0.3333333333333333, 0.19999999999999804, -0.14285714285659748, 0.11111111105147764,   # |x| <= tan(pi/8): 1.6e-16
                -0.09090908753118594, 0.07692296363979952, -0.066664246872465, 0.05878926715756726,
                -0.052304374642516874, 0.045515165635903104, -0.0345685906686069, 0.01628357235648259)
# erf(x) = x * E(x*x) for |x| <= 1 (1.6e-16); erfcx(x) = erfc(x) * e**(x*x) by a polynomial in x - 1.5
# on [1, 2] (2.2e-16) and as t * F(t), t = 1/x, on [1/6, 1/2] (1.5e-16).
_ERF_SERIES = (1.1283791670955126, -0.37612638903183543, 0.11283791670945006, -0.02686617064323777,
               0.0052239776071164225, -0.0008548325975389692, 0.00012055294904839707, -1.492473690741966e-05,
               1.6447424703317362e-06, -1.6208483801871705e-07, 1.3720064546777686e-08, -7.795898827002142e-10)
_ERFCX_NEAR = (0.3215854164543175, -0.16362291773256007, 0.07615103985547739, -0.032930905299562635,
               0.013377340953068511, -0.005145957547985475, 0.0018861348769562312, -0.0006619300663930904,
               0.00022330994586274217, -7.265892257522832e-05, 2.2864294807967016e-05, -6.974987241686018e-06,
               2.067088490322641e-06, -5.961119446974675e-07, 1.6708703859197203e-07, -4.585146974854072e-08,
               1.329844554951821e-08, -3.4778531023839574e-09)
_ERFCX_FAR = (0.5641896604178288, -4.574009817107136e-06, -0.28196820396941563, -0.0021606758134152817,
              0.448552969659435, -0.21763592848373958, 0.33846378764102497, -6.776967958613981, 28.378373975434865,
              -65.07685395790537, 96.3275011584836, -92.25465648211087, 47.85325397382882, 2.911838728226133,
              -23.503945973391446, 15.288758100815055, -3.5742179745031395)

def _exp_of_float(value: float) -> float:
    """e**value in float64 (inf where it overflows; nan stays nan)."""
    try: return math.exp(value)
    except OverflowError: return math.inf

@dataclasses.dataclass(frozen=True)
class _PowGradient:
    """The gradient rule of ``CUSTOM(value, base)`` (``base ** scalar``, a Python exponent) or ``CUSTOM(value, base,
    exponent)`` (a tensor exponent): PyTorch's formulas, ``e * b**(e-1)`` for the base and ``b**e * log b`` for the
    exponent, 0 where torch masks them (finite wherever torch's are; the chain rule through the value's exp2/log2 form
    is nan at a zero or infinite base). They are built when the gradient is asked for, from the sources themselves
    (not detached copies), so a gradient of the gradient differentiates them again (``x**3``: 3x**2, then 6x). An arg,
    not a closure: equal powers give equal rules, so equal graphs stay equal UOps (the schedule cache keys on them)."""
    scalar: int | float | None   # the Python exponent; None: the exponent is the node's third source
    def __call__(self, ret: UOp, grad: UOp) -> tuple[UOp | None, ...]:
        base = Tensor(ret.src[1])
        if self.scalar is not None:
            coefficient = base._const(0.0) if self.scalar == 0 else self.scalar * base.pow(self.scalar - 1)
            return (grad * coefficient.uop.cast(grad.dtype) if dtypes.is_float(base.dtype) else None,)
        exponent = Tensor(ret.src[2])
        base_grad = (exponent == 0).where(0.0, exponent * base.pow(exponent - 1))
        log_base = (base < 0).where(math.nan, base._float().log())
        exponent_grad = ((base == 0) & (exponent >= 0)).where(0.0, Tensor(ret) * log_base)
        return tuple(grad * c.uop.cast(grad.dtype) if dtypes.is_float(x.dtype) else None
                     for x, c in ((base, base_grad), (exponent, exponent_grad)))

def _tan_gradient(ret: UOp, grad: UOp) -> tuple[UOp]: return (grad + grad * ret * ret,)   # ret: tan x, differentiable

@dataclasses.dataclass(frozen=True)
class _SoftmaxGradient:
    """The gradient rule of ``CUSTOM(value, x)`` for softmax (``log`` False) and log_softmax along ``axis``: PyTorch's
    backward formulas, ``s * (g - sum(g * s))`` and ``g - e**out * sum(g)``. The chain rule through the value's graph
    (x - max, exp, sum, divide) gives the same in exact arithmetic, but its terms only cancel to rounding error: the
    gradient of ``softmax(x).sum()`` came out ~1e-8 instead of 0. (An arg, not a closure: see _PowGradient.)"""
    axis: int
    log: bool
    def __call__(self, ret: UOp, grad: UOp) -> tuple[UOp]:
        out, g = Tensor(ret), Tensor(grad)
        if self.log: return ((g - out.exp() * g.sum(self.axis, keepdim=True)).uop,)
        return ((out * (g - (g * out).sum(self.axis, keepdim=True))).uop,)

def _sinh_gradient(ret: UOp, grad: UOp) -> tuple[UOp]:
    """sinh' = cosh x (PyTorch's formula): inf where cosh overflows (the value's graph gave 0 * inf = NaN there)."""
    return (grad * Tensor(ret.src[1]).cosh().uop,)

def _cosh_gradient(ret: UOp, grad: UOp) -> tuple[UOp]:
    """cosh' = sinh x (PyTorch's formula), +-inf where it overflows."""
    return (grad * Tensor(ret.src[1]).sinh().uop,)

def _acosh_gradient(ret: UOp, grad: UOp) -> tuple[UOp]:
    """acosh' = 1 / sqrt(x*x - 1), PyTorch's formula everywhere: NaN for |x| < 1 (outside the domain), and for
    x <= -1 the formula's value (the value's own graph would give 0 there: it masks x < 1 with a where)."""
    x = Tensor(ret.src[1])
    return (grad * (x * x - 1).rsqrt().uop,)

def _atanh_gradient(ret: UOp, grad: UOp) -> tuple[UOp]:
    """atanh' = 1 / (1 - x*x), PyTorch's formula everywhere: -1/3 at x = 2, inf at +-1."""
    x = Tensor(ret.src[1])
    return (grad / (1 - x * x).uop,)

def _exp_gradient(ret: UOp, grad: UOp) -> tuple[UOp]:
    """exp' = e**x: ret itself (differentiable again), in the dtype of x (ret may be narrower: float16 e**x of float32 x)."""
    x = ret.src[1]
    return ((grad * ret).cast(x.dtype) if x.dtype != ret.dtype else grad * ret,)

def _expm1_gradient(ret: UOp, grad: UOp) -> tuple[UOp]:
    """expm1' = e**x, computed as such: torch's expm1 uses result + 1, which cancels for very negative x (its elu uses
    e**x too)."""
    return (grad * Tensor(ret.src[1]).exp().uop,)

def _no_gradient(ret: UOp, grad: UOp) -> tuple[None, None]: return (None, None)   # floor division: a step function

@dataclasses.dataclass(frozen=True)
class _RemainderGradient:
    """The gradient rule of ``CUSTOM(value, a, b)`` for float ``fmod`` (``rounding`` "trunc") and ``remainder``
    ("floor"), PyTorch's: ``1`` for a, ``-(a / b rounded)`` for b. The value is one Ops.MOD (C's fmod, exact),
    which has no gradient of its own."""
    rounding: str
    def __call__(self, ret: UOp, grad: UOp) -> tuple[UOp, UOp]:
        a, b = Tensor(ret.src[1]), Tensor(ret.src[2])
        return (grad, grad * (-a.div(b, rounding_mode=self.rounding)).uop.cast(grad.dtype))

def cos_uop(x: UOp) -> UOp:
    """cos x of a tensor-graph float UOp: one Ops.COS node (gradient -sin x, in gradient.py), which codegen expands
    into SIN's exact range reduction with the quadrant advanced by one (codegen/transcendental.py) where the renderer
    has no accurate cos of its own. Why not SIN(pi/2 - x), tinygrad's form: that rounds pi/2 - x first (wrong beyond
    ~1e4 in float32). (Expanded here in the front end, as it once was, every cos and every gradient of a sin cost
    ~100 UOps of graph building.) float16/bfloat16 compute in float32."""
    return _in_float32_or_wider(x, Ops.COS)

def _in_float32_or_wider(x: UOp, op: Ops) -> UOp:
    """``op`` on ``x``, float16/bfloat16 computed in float32 and rounded once."""
    if x.dtype in (dtypes.float32, dtypes.float64): return x.alu(op)
    return x.cast(dtypes.float32).alu(op).cast(x.dtype)

def tan_uop(x: UOp) -> UOp:
    """tan x = sin x / cos x (codegen shares their range reduction: the same x builds the same nodes); an Ops.CUSTOM
    node carries the gradient 1 + tan**2, which the quotient's own gradient would give less accurately."""
    return UOp(Ops.CUSTOM, x.dtype, (_in_float32_or_wider(x, Ops.SIN) / cos_uop(x), x), _tan_gradient)

def _horner(x: "Tensor", coefficients: tuple[float, ...]) -> "Tensor":
    """c0 + c1*x + c2*x**2 + ... (coefficients lowest order first)."""
    acc = x * coefficients[-1] + coefficients[-2]
    for c in reversed(coefficients[:-2]): acc = acc * x + c
    return acc

class _TrainingFlag:
    """``Tensor.training`` reads and writes the TRAINING context flag, so ``Context(TRAINING=1)``
    and ``with Tensor.train():`` are the same switch."""
    def __get__(self, obj, owner=None) -> bool: return bool(TRAINING.value)
    def __set__(self, obj, value: bool) -> None: TRAINING.value = int(bool(value))

class _TensorMeta(type):
    training = _TrainingFlag()
    def __setattr__(cls, name: str, value: Any) -> None:
        if name == "training": TRAINING.value = int(bool(value))
        else: super().__setattr__(name, value)

class _TrainMode:
    """``with Tensor.train():`` (or as a decorator) sets training mode for a block."""
    def __init__(self, mode: bool = True): self.mode = mode
    def __enter__(self) -> None:
        self.previous = TRAINING.value
        TRAINING.value = int(self.mode)
    def __exit__(self, *exc: Any) -> None: TRAINING.value = self.previous
    def __call__(self, fn: Callable) -> Callable:
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with _TrainMode(self.mode): return fn(*args, **kwargs)
        return wrapper

_CLONE_IDS = itertools.count()   # makes every clone() a distinct UOp (see Tensor.clone)
# Python numbers recently met as an operand (Tensor._broadcast_scalar): (value or its float bits, dtype, device,
# shape) -> the broadcast constant. Kept alive here, an eager loop's `x + 1` finds its constant's four nodes
# (and their shapes) built instead of building and freeing them on every call; they hold no buffers.
_SCALAR_OPERANDS: dict[tuple, UOp] = {}
_SCALAR_OPERANDS_SIZE = 512

class Tensor(ProcessingMixin, FunctionalMixin, metaclass=_TensorMeta):
    """A lazy multi-dimensional array with autograd. See the module docstring for an example."""
    __slots__ = ("uop", "requires_grad", "grad", "_ctx", "_backward_done", "__weakref__")
    no_grad: bool = False   # older tinygrad's switch (PyTorch's torch.no_grad()): ops made while it is on don't require grad
    _seed: int = 0
    _device_seeds: dict[str, "Tensor"] = {}          # per device: uint32 [stream id, seed], the threefry key
    _device_rng_counters: dict[str, "Tensor"] = {}   # per device: uint32 [low, high] of a 64-bit draw counter

    def __init__(self, data: Any = None, device: str | tuple | None = None, dtype: DType | str | None = None,
                 requires_grad: bool | None = None):
        if type(data) is UOp and dtype is None and device is None and requires_grad is not True and data.shape is not None:
            # the front end's own ops (Tensor(uop)): nothing to convert, place or check
            self.uop, self.requires_grad, self.grad, self._ctx = data, requires_grad, None, None
            all_tensors.add(self)
            return
        dtype = to_dtype(dtype) if dtype is not None else None
        device = _canonical_device(device)
        devices = None
        if isinstance(device, tuple): devices, device = device, device[0]   # built on the first device, then replicated
        if isinstance(data, UOp) and data.shape is None and dtypes.is_int(data.dtype):
            uop = _symbolic_scalar(data, dtype, device)
        elif isinstance(data, UOp):
            uop = data
        elif data is None:
            uop = UOp.const(dtype or dtypes.default_float, 0, device, (0,))
        elif isinstance(data, Tensor):
            uop = data.uop if dtype is None else data.uop.cast(dtype)
        elif isinstance(data, (bool, int, float)):
            uop = UOp.const(dtype or dtypes.from_py(data), data, device, ())
        elif type(data).__module__ == "pathlib" and hasattr(data, "stat"):
            # a file: a uint8 DISK tensor over its bytes (tinygrad's Tensor(pathlib.Path))
            uop = Tensor.empty(data.stat().st_size, dtype=dtype or dtypes.uint8, device=f"disk:{data}").uop
        elif isinstance(data, (bytes, bytearray, memoryview)):
            uop = _from_bytes(data, device, dtype)
        elif isinstance(data, (list, tuple)):
            import numpy as np
            if dtype is not None: _refuse_none(list(_flatten_nested(data)), data, TypeError)
            target = dtype or _infer_list_dtype(data)
            try: array = np.array(data, dtype=to_np_dtype(target) if target.fmt is not None else np.float32)
            except ValueError as e: raise ValueError(f"can't make a tensor from a ragged or invalid list: {e}") from None
            except OverflowError:   # ints the dtype can't hold wrap like C (tinygrad: Tensor([2**40]) is int32 0)
                array = np.array(_wrap_ints(data, target), dtype=to_np_dtype(target))
            uop = _fromnp(array, device, target)
        elif type(data).__module__ == "numpy" or hasattr(data, "__array__"):
            import numpy as np
            array = np.asarray(data)
            if array.dtype == object: raise TypeError(f"can't make a tensor from a numpy array of objects")
            # a 0-d array is a constant, as a Python number is (tinygrad 0.14), except a float one gradient() may target:
            # constants are interned, so Tensor(np.array(0.5)) would be the very node of every literal 0.5 in the graph
            # (x * 0.5, and the 0.5 inside atanh and cosh) and its gradient would add up all of theirs
            target = dtype or from_np(array.dtype)
            if array.shape == () and (requires_grad is False or not dtypes.is_float(target)):
                uop = UOp.const(target, array.item(), device, ())
            else: uop = _fromnp(array, device, dtype)
        else:
            raise RuntimeError(f"can't make a Tensor from {type(data).__name__}: {data!r:.60}")
        if dtype is not None and uop.dtype != dtype: uop = uop.cast(dtype)
        if requires_grad is True and uop.op is Ops.CONST and isinstance(device, str):
            # a leaf needs a node of its own: constants are interned, so two Tensor(0.5, requires_grad=True)
            # would be one node and autograd (keyed by node) would give each the other's gradient too
            uop = _fromnp(uop.arg, device, dtypes.concrete(uop.dtype))
        if devices is not None and uop.device != devices:
            from fusegrad.schedule.multi import shard_uop
            uop = shard_uop(uop, devices, None)
        self.uop: UOp = uop
        self.requires_grad: bool | None = requires_grad
        self.grad: Tensor | None = None
        self._ctx = None
        all_tensors.add(self)

    # ---------------------------------------------------------------- properties
    @property
    def lazydata(self) -> UOp:
        """The tensor's UOp (tinygrad's older name for ``uop``).

        >>> Tensor([1, 2]).lazydata is not None
        True
        """
        return self.uop
    @property
    def shape(self) -> tuple:
        """The size of each dimension.

        >>> Tensor([[1, 2, 3]]).shape
        (1, 3)
        """
        return self.uop.shape
    @property
    def dtype(self) -> DType:
        """The element type.

        >>> Tensor([1.0]).dtype, Tensor([1]).dtype
        (dtypes.float, dtypes.int)
        """
        return self.uop.dtype
    @property
    def device(self) -> str | tuple[str, ...]:
        """The device name (a tuple of names for a sharded tensor).

        >>> Tensor([1], device="PYTHON").device
        'PYTHON'
        """
        return self.uop.device
    @property
    def ndim(self) -> int:
        """Number of dimensions.

        >>> Tensor([[1, 2]]).ndim
        2
        """
        return len(self.shape)
    def numel(self) -> Any:
        """Number of elements: ``Tensor.ones(2, 3).numel() == 6``.

        >>> Tensor([[1, 2, 3]]).numel()
        3
        """
        return prod(self.shape)
    def element_size(self) -> int:
        """Bytes per element.

        >>> Tensor([1.0]).element_size()
        4
        """
        return dtypes.concrete(self.dtype).itemsize
    def nbytes(self) -> int:
        """Total bytes of the tensor's elements.

        >>> Tensor([1.0, 2.0]).nbytes()
        8
        """
        return self.numel() * self.element_size()
    def is_floating_point(self) -> bool:
        """Whether the dtype is a floating-point type.

        >>> Tensor([1.0]).is_floating_point(), Tensor([1]).is_floating_point()
        (True, False)
        """
        return dtypes.is_float(self.dtype)
    def size(self, dim: int | None = None) -> Any:
        """The shape, or one dimension of it: ``Tensor.ones(2, 3).size(-1) == 3``.

        >>> Tensor.ones(2, 3).size(), Tensor.ones(2, 3).size(1)
        ((2, 3), 3)
        """
        return self.shape if dim is None else self.shape[self._resolve_dim(dim)]
    def __len__(self) -> int:
        if not self.shape: raise TypeError("len() of a 0-d tensor")
        return self.shape[0]
    def __repr__(self) -> str:
        return f"<Tensor {self.uop.op.name} on {self.device} with grad {self.grad.uop.op.name if self.grad is not None else None}" \
               f" shape {self.shape} dtype {self.dtype}>"
    def __hash__(self) -> int: return id(self)
    def __reduce__(self) -> tuple:
        """Tensors pickle by value: the data (realized now), dtype, device and requires_grad; a
        sharded tensor keeps its devices and axis. The graph that computed it is not kept.

        >>> import pickle; pickle.loads(pickle.dumps(Tensor([1, 2]) + 1)).tolist()
        [2, 3]
        """
        device = self.device
        if isinstance(device, str) and device.startswith("DISK:"): device = Device.DEFAULT   # the file isn't part of the value
        axis = self.uop.axis
        values = self.detach().numpy() if self.dtype.fmt is not None else self.detach().bitcast(_storage_dtype(self.dtype)).numpy()
        return _tensor_from_pickle, (values, self.dtype, device, axis, self.requires_grad)
    def __bool__(self) -> bool:
        # TypeError like tinygrad's (which refuses bool() of any tensor; a one-element one is allowed here, docs/api_fidelity.md)
        if self.numel() != 1: raise TypeError(f"the truth value of a tensor with {self.numel()} elements is ambiguous")
        return bool(self.item())

    # ---------------------------------------------------------------- realization
    def schedule(self, *others: "Tensor") -> list[ScheduleItem]:
        """The kernels that would compute this tensor (and ``others``); calling it performs the
        scheduling, so the tensors then refer to the scheduled buffers.

        >>> len(Tensor([1, 2]).add(1).schedule())
        1
        """
        return self._schedule(*others)[0]

    def _schedule(self, *others: "Tensor") -> tuple[list[ScheduleItem], list[UOp]]:
        """schedule(), also returning the graphs kept for autograd (see _apply_becomes)."""
        with realize_lock:   # (rebinding the live tensors must not interleave with another thread's realize)
            return self._schedule_locked(*others)

    def _schedule_locked(self, *others: "Tensor") -> tuple[list[ScheduleItem], list[UOp]]:
        if not others:   # (the eager case: one tensor, no list and dict built to find its roots)
            if _is_realized_uop(self.uop): return [], []
            roots = [self.uop]
        else:
            pending = [t for t in (self, *others) if not t._is_realized()]
            if not pending: return [], []
            roots = list(dict.fromkeys(t.uop for t in pending))
        items, becomes = create_schedule(roots)
        return items, _apply_becomes(becomes)

    def realize(self, *others: "Tensor", do_update_stats: bool = True) -> "Tensor":
        """Compute this tensor (and ``others``) now: ``Tensor.realize(a, b)`` or ``a.realize()``.
        Gradients still flow through realized tensors (see _apply_becomes).

        >>> Tensor([1, 2]).add(1).realize().tolist()
        [2, 3]
        """
        # one thread at a time from scheduling to the last kernel: in between, the tensors already point at buffers
        # that aren't written yet (engine/realize.py realize_lock)
        with realize_lock:
            items, origins = self._schedule_locked(*others)
            if len(items) > 1:
                from fusegrad.engine.memory import plan_memory, referenced_buffers
                # buffers read by live tensors or by graphs kept for autograd must get their own memory
                planned = {b for item in items for b in item.buffer_uops}
                keep = referenced_buffers([t.uop for t in _live_tensors()] + origins, planned)
                plan_memory([item.buffer_uops for item in items], keep, BUFFERS)
            run_schedule(items, do_update_stats=do_update_stats)
        return self

    def _is_realized(self) -> bool: return _is_realized_uop(self.uop)

    def _buffer_view(self) -> tuple[Buffer, bool]:
        """The buffer behind a realized tensor and whether the tensor is exactly its contents."""
        base = self.uop.base
        contiguous = _is_reshaped_buffer(self.uop)
        return buffer_of(base), contiguous

    def numpy(self) -> Any:
        """A numpy copy: ``Tensor([1, 2]).numpy()`` is ``array([1, 2], dtype=int32)``.

        >>> Tensor([[1, 2]]).numpy()
        array([[1, 2]], dtype=int32)
        """
        import numpy as np
        from fusegrad.engine.jit import refuse_data_access_in_capture
        refuse_data_access_in_capture(".numpy()/.item()/.tolist()")   # inside a TinyJit capture the value would be baked in
        if isinstance(self.device, str) and self.device.startswith("DISK:"): return self.to("CPU").numpy()
        if dtypes.is_weak(self.dtype): return self.cast(dtypes.concrete(self.dtype)).numpy()
        if self.dtype == dtypes.bfloat16:
            # its 16 bits, widened on the host (a cast to float32 in the kernel would read a product before rounding)
            return (self.bitcast(dtypes.uint16).numpy().astype(np.uint32) << 16).view(np.float32)
        if self.dtype.fmt is None: return self.cast(dtypes.float32).numpy()
        if isinstance(self.device, tuple): return self.to(self.device[0]).numpy()
        with realize_lock:   # (realized and read as one step: another thread's realize may write this buffer)
            return self._realized_numpy()

    def _realized_numpy(self) -> Any:
        """numpy() of a single-device tensor of a numpy dtype, with realize_lock held."""
        import numpy as np
        self.realize()
        from fusegrad.schedule.tensor_rules import const_value
        shape = tuple(s if isinstance(s, int) else _bound_value(s) for s in self.shape)   # a symbolic size: its bound value
        if (value := const_value(self.uop)) is not None:
            return np.full(shape, value, dtype=to_np_dtype(self.dtype))
        if self.uop.base.op is Ops.CONST and isinstance(self.uop.base.arg, UOp):   # the value of bound Variables (Tensor(v))
            return np.full(shape, _bound_value(self.uop.base.arg), dtype=to_np_dtype(self.dtype))
        buffer, contiguous = self._buffer_view()
        if not contiguous: return self.contiguous().numpy()
        values = buffer.numpy()
        return (values if values.size == prod(shape) else values[:prod(shape)].copy()).reshape(shape)

    def data(self) -> memoryview:
        """The values as a memoryview shaped like the tensor.

        >>> Tensor([1, 2]).data().tolist()
        [1, 2]
        """
        array = self.numpy()
        return memoryview(array)   # numpy's buffer export already has the shape (an ND memoryview can't be cast again)

    def tolist(self) -> Any:
        """Nested Python lists: ``Tensor([[1, 2]]).tolist() == [[1, 2]]``.

        >>> Tensor([[1, 2], [3, 4]]).tolist()
        [[1, 2], [3, 4]]
        """
        return self.numpy().tolist()

    def item(self) -> ConstType:
        """The single value of a one-element tensor: ``Tensor([3]).item() == 3``.

        >>> Tensor([[5]]).item()
        5
        """
        if self.numel() != 1: raise RuntimeError(f"item() needs a tensor with one element, this one has shape {self.shape}")
        return self.reshape(()).numpy().item()

    def contiguous(self) -> "Tensor":
        """This tensor laid out densely in memory. A realized tensor that already is a whole
        buffer gives a new tensor reading the same buffer (no copy; use clone() for one). A new tensor, not
        ``self`` (tinygrad's rule): a later ``self.assign(...)`` or ``self += 1`` changes ``self``, and this
        one reads the buffer as it is when realized.

        >>> Tensor([[1, 2], [3, 4]]).T.contiguous().tolist()
        [[1, 3], [2, 4]]
        """
        if _is_plain(self.uop) and self._is_realized(): return Tensor(self.uop, requires_grad=False if self.requires_grad is False else None)
        if self.uop.base.op is Ops.CONST and isinstance(self.device, str) and all_int(self.shape) and self.numel() > 0:
            # equal constants are one interned UOp, so CONTIGUOUS(CONST) made twice would be one graph and,
            # realized together, one buffer: [Tensor.zeros(n).contiguous() for _ in layers] (KV caches, state)
            # would share memory and an assign to one would change all. A fresh buffer written with the
            # constant is storage of its own (tinygrad's Tensor.full makes a buffer for the same reason).
            buffer = new_buffer_uop(self.device, self.numel(), self.dtype).reshape(self.shape)
            return Tensor(UOp(Ops.ASSIGN, self.dtype, (buffer, self.uop)), requires_grad=self.requires_grad)
        return self._apply(Ops.CONTIGUOUS)
    def contiguous_backward(self) -> "Tensor":
        """Identity forward; the gradient flowing back is made contiguous.

        >>> Tensor([1.0, 2.0]).contiguous_backward().tolist()
        [1.0, 2.0]
        """
        return self._apply(Ops.CONTIGUOUS_BACKWARD)
    def detach(self) -> "Tensor":
        """The same values without a gradient connection.

        >>> Tensor([1.0], requires_grad=True).detach().requires_grad
        False
        """
        return Tensor(self.uop.src[0] if self.uop.op is Ops.DETACH else UOp(Ops.DETACH, self.dtype, (self.uop,)), requires_grad=False)
    def clone(self, device: str | tuple | None = None) -> "Tensor":
        """A new tensor with a copy of the values (on ``device`` if given); ``.grad`` is cloned too.

        >>> Tensor([1, 2]).clone().tolist()
        [1, 2]
        """
        source = self if device is None else self.to(device)
        # UOps are interned: a plain CONTIGUOUS would make two clones of one tensor the same node, realized into
        # one shared buffer (a write to one clone changed the other). A fresh arg makes each clone its own copy.
        ret = Tensor(UOp(Ops.CONTIGUOUS, self.dtype, (source.uop,), ("clone", next(_CLONE_IDS))), requires_grad=self.requires_grad)
        if self.grad is not None: ret.grad = self.grad.clone(device=device)
        return ret

    def replace(self, x: "Tensor") -> "Tensor":
        """Make this tensor refer to ``x``'s data (same shape), dropping its own graph.

        >>> a = Tensor([1, 2])
        >>> a.replace(Tensor([3, 4])).tolist()
        [3, 4]
        """
        if x.shape != self.shape: raise ValueError(f"replace shape mismatch: {self.shape} vs {x.shape}")
        self.uop = x.uop
        return self
    def assign(self, x: Any) -> "Tensor":
        """Write ``x`` into this tensor's buffer (lazily): ``a.assign(a + 1)``. A view (a slice, a
        permute, a reshape, ``detach()``) writes into the buffer it views. ``x`` broadcasts to this
        shape; a tensor of another dtype or device is an error (see docs/decisions.md, Mutation).

        >>> a = Tensor([1, 2]).realize()
        >>> a.assign(Tensor([5, 6])).tolist()
        [5, 6]
        """
        if isinstance(self.device, str) and self.device.startswith("DISK:"):
            from fusegrad.runtime.ops_disk import disk_assign
            return disk_assign(self, x)
        from fusegrad.indexing import assign
        return assign(self, x)

    def to(self, device: str | tuple | None) -> "Tensor":
        """The tensor on another device (a copy), keeping dtype and requires_grad.

        >>> Tensor([1, 2]).to("PYTHON").device
        'PYTHON'
        """
        device = _canonical_device(device)
        if device == self.device: return self
        if isinstance(device, tuple): return self.shard(device)
        if isinstance(self.device, tuple):   # gather every shard onto one device
            return Tensor(UOp(Ops.COPY, self.dtype, (self.uop,), device), requires_grad=self.requires_grad)
        source = self.uop
        if source.base.op is Ops.CONST and not isinstance(self.device, tuple):
            from fusegrad.schedule.tensor_rules import const_value
            if (value := const_value(source)) is not None:
                return Tensor(UOp.const(self.dtype, value, device, self.shape), requires_grad=self.requires_grad)
        if isinstance(self.device, str) and self.device.startswith("DISK:") and not _is_plain(self.uop):
            from fusegrad.runtime.ops_disk import disk_view_uop   # a slice/bitcast of a file is a sub-buffer
            return Tensor(disk_view_uop(self.uop), requires_grad=self.requires_grad).to(device)
        copied = Tensor(UOp(Ops.COPY, self.dtype, (self.contiguous().uop if not _is_plain(source) else source,), device),
                        requires_grad=self.requires_grad)
        return copied
    def to_(self, device: str | tuple) -> "Tensor":
        """Move this tensor to ``device`` in place.

        >>> a = Tensor([1, 2])
        >>> _ = a.to_("PYTHON"); a.device
        'PYTHON'
        """
        self.uop = self.to(device).uop
        return self
    def shard(self, devices: tuple | list, axis: int | None = None) -> "Tensor":
        """This tensor split over ``devices`` along ``axis`` (each device holds an equal slice), or
        copied whole onto each of them (``axis=None``). The result's ``.device`` is the device tuple;
        ops on it run on every device at once, a reduce over the split axis is an allreduce, and
        ``.numpy()`` / ``.to(device)`` gather it. See fusegrad/schedule/multi.py.

        >>> t = Tensor([[1, 2], [3, 4]]).shard(("CPU:1", "CPU:2"), axis=0)
        >>> t.device, (t * 10).sum(1).tolist()
        (('CPU:1', 'CPU:2'), [30, 70])
        """
        from fusegrad.schedule.multi import shard_uop, check_divisible
        if isinstance(devices, str) or not isinstance(devices, (tuple, list)):
            raise TypeError(f"shard needs a tuple of device names, got {devices!r}")
        if len(devices) == 0: raise ValueError("shard needs at least one device, got an empty tuple")
        devices = tuple(Device.canonicalize(d) for d in devices)
        if axis is not None:
            if self.ndim == 0: raise ValueError(f"can't split a 0-d tensor along axis {axis}; use axis=None to replicate it")
            check_divisible(self.shape, axis := self._resolve_dim(axis), devices)
        return Tensor(shard_uop(self.uop, devices, axis), requires_grad=self.requires_grad)
    def shard_(self, devices: tuple | list, axis: int | None = None) -> "Tensor":
        """Shard in place: this tensor now refers to the sharded value.

        >>> Tensor([1, 2, 3, 4]).shard_(("CPU:1", "CPU:2"), axis=0).device
        ('CPU:1', 'CPU:2')
        """
        self.uop = self.shard(devices, axis).uop
        return self

    # ---------------------------------------------------------------- autograd
    @staticmethod
    def train(mode: bool = True) -> _TrainMode:
        """``with Tensor.train():`` enables dropout and batch statistics for a block.

        >>> with Tensor.train(): Tensor.training
        True
        """
        return _TrainMode(mode)
    @staticmethod
    def test() -> _TrainMode:
        """``with Tensor.test():`` is training mode off.

        >>> with Tensor.test(): Tensor.training
        False
        """
        return _TrainMode(False)
    def requires_grad_(self, requires_grad: bool = True) -> "Tensor":
        """Mark this tensor as a leaf that gets ``.grad`` on ``backward()``.

        >>> Tensor([1.0]).requires_grad_().requires_grad
        True
        """
        self.requires_grad = requires_grad
        return self

    def gradient(self, *targets: "Tensor", gradient: "Tensor | None" = None, materialize_grads: bool = False) -> list["Tensor"]:
        """Gradients of this (scalar) tensor with respect to ``targets``, without touching ``.grad``:
        ``dx, = loss.gradient(x)``.

        >>> x = Tensor([3.0], requires_grad=True)
        >>> (x * x).gradient(x)[0].tolist()
        [6.0]
        """
        from fusegrad.gradient import compute_gradient
        if gradient is None and self.numel() != 1:
            raise RuntimeError(f"gradient needs a scalar tensor or an explicit gradient; this one has shape {self.shape}")
        for t in targets:
            if not dtypes.is_float(t.dtype): raise RuntimeError(f"can't take a gradient with respect to a {t.dtype} tensor (only floats)")
        if not dtypes.is_float(self.dtype): raise RuntimeError(f"can't differentiate a {self.dtype} tensor (only floats)")
        seed = gradient.uop if gradient is not None else UOp.const(self.dtype, 1.0, self.device, self.shape)
        if gradient is not None and gradient.shape != self.shape:
            raise ValueError(f"gradient shape {gradient.shape} doesn't match tensor shape {self.shape}")
        grads = compute_gradient(self.uop, seed, {t.uop for t in targets})
        results = []
        for t in targets:
            # zeros where every path to the target has zero derivative (floor, comparisons) or there is no path at
            # all (tinygrad 0.14's rule; ``materialize_grads`` is accepted for code written for older tinygrad)
            g = grads.get(t.uop)
            if g is None: g = UOp.const(t.dtype, 0, t.device, t.shape)
            # (requires_grad None, not False: realized, a gradient keeps the graph it was computed from, so a gradient
            # of it (a gradient penalty, a Hessian-vector product) is right whether it was realized first or not)
            results.append(Tensor(_like_sharding(g, t.uop)))
        return results

    def backward(self, gradient: "Tensor | None" = None) -> "Tensor":
        """Accumulate d(self)/d(t) into ``t.grad`` (adding to an existing ``.grad``). Which tensors get it:

        - if a tensor in this graph has ``requires_grad=True`` (set by the user, ``requires_grad_()``,
          or an optimizer, which marks its params), only those (PyTorch's rule): inputs and labels
          reused every step get no ``.grad`` that would grow a graph step after step;
        - otherwise (code written for tinygrad 0.14, which has no requires_grad), every float tensor
          in this graph whose ``requires_grad`` is not False: ``t = Tensor([1., 2.]); t.sum().backward()``
          fills ``t.grad``.

        Realized tensors in the graph are differentiated through the graph they were computed from.
        With requires_grad=True tensors, backward releases the graph (PyTorch's retain_graph=False):
        the tensors computed in it keep no graph when realized afterwards.

        >>> x = Tensor([1.0, 2.0], requires_grad=True)
        >>> (x * x).sum().backward().grad is None, x.grad.tolist()
        (True, [2.0, 4.0])
        """
        if gradient is None and self.numel() != 1:
            raise RuntimeError(f"backward needs a scalar tensor or an explicit gradient; this one has shape {self.shape}")
        if self.requires_grad is False:   # (PyTorch's error: detach(), Tensor.no_grad or requires_grad=False inputs made it)
            raise RuntimeError("backward of a tensor that doesn't require grad (it was computed under Tensor.no_grad, from "
                               "detach(), or only from tensors with requires_grad=False)")
        if not dtypes.is_float(self.dtype): raise RuntimeError(f"only float tensors have a gradient, backward got a {self.dtype} tensor")
        from fusegrad.gradient import compute_gradient, differentiation_order
        in_graph, _ = differentiation_order(self.uop)   # realized tensors included, through their origins
        candidates = [t for t in _live_tensors() if t.uop in in_graph and t is not self and dtypes.is_float(t.dtype)]
        tracked = any(t.requires_grad is True for t in candidates)
        targets = [t for t in candidates if (t.requires_grad is True if tracked else t.requires_grad is not False)]
        if not targets: return self
        seed = gradient.uop if gradient is not None else UOp.const(self.dtype, 1.0, self.device, self.shape)
        grads = compute_gradient(self.uop, seed, {t.uop for t in targets})
        if tracked:
            # like PyTorch freeing the graph after backward: the tensors computed in it (not the leaves)
            # keep no origin when realized later, so a training step's activations aren't pinned for a
            # second backward (and the memory planner can reuse them)
            for t in [self] + [t for t in candidates if t.uop.base.op is not Ops.BUFFER]: t._backward_done = True
        for t in targets:
            if (g := grads.get(t.uop)) is None: continue
            new = Tensor(_like_sharding(g, t.uop), requires_grad=False)
            t.grad = new if t.grad is None else t.grad + new
        return self

    # ---------------------------------------------------------------- creation
    @staticmethod
    def _shape_arg(shape: tuple) -> tuple:
        shape = _int_sizes(argfix(*shape), allow_bool=True)
        for s in shape:
            if isinstance(s, int) and s < 0: raise ValueError(f"invalid shape {shape}: sizes can't be negative")
        return shape
    @staticmethod
    def empty(*shape, device: str | None = None, dtype: DType | str | None = None, **kwargs) -> "Tensor":
        """An uninitialized tensor (its own buffer): ``Tensor.empty(2, 3)``.

        >>> Tensor.empty(2, 3).shape
        (2, 3)
        """
        shape = Tensor._shape_arg(shape)
        dtype = to_dtype(dtype) if dtype is not None else dtypes.default_float
        if isinstance(device, (tuple, list)):   # replicated on every device, as tinygrad
            return Tensor.empty(*shape, dtype=dtype).shard(tuple(device), None).requires_grad_(kwargs.get("requires_grad"))
        device = Device.canonicalize(device)
        if prod(shape) == 0: return Tensor(UOp.const(dtype, 0, device, shape), **kwargs)
        buffer = new_buffer_uop(device, prod(shape), dtype)
        buffer_of(buffer).allocate()
        return Tensor(buffer.reshape(shape), **kwargs)
    @staticmethod
    def full(shape: tuple, fill_value: Any, device: str | None = None, dtype: DType | str | None = None, **kwargs) -> "Tensor":
        """``Tensor.full((2, 2), 7)`` is a 2×2 tensor of sevens (a constant: no memory until needed).

        >>> Tensor.full((2, 2), 7).tolist()
        [[7, 7], [7, 7]]
        """
        shape = Tensor._shape_arg(shape if isinstance(shape, (tuple, list)) else (shape,))
        dtype = to_dtype(dtype) if dtype is not None else fill_value.dtype if isinstance(fill_value, Tensor) else \
            dtypes.default_int if isinstance(fill_value, UOp) else dtypes.concrete(dtypes.from_py(fill_value))   # a Variable: an int
        constant = Tensor(UOp.const(dtype, fill_value, _canonical_device(device), shape), **kwargs)
        # a leaf asked for needs a node of its own: constants are interned, so two Tensor.ones(3) are one
        # node and autograd (keyed by node) would give each the other's gradient too
        if kwargs.get("requires_grad") is True and isinstance(constant.device, str) and all_int(shape) and prod(shape) > 0:
            return Tensor.empty(*shape, dtype=dtype, device=constant.device, requires_grad=True).assign(constant.detach())
        return constant
    @staticmethod
    def zeros(*shape, **kwargs) -> "Tensor":
        """``Tensor.zeros(2, 3)``

        >>> Tensor.zeros(2, 2).tolist()
        [[0.0, 0.0], [0.0, 0.0]]
        """
        return Tensor.full(argfix(*shape), 0.0, **{"dtype": dtypes.default_float, **kwargs})
    @staticmethod
    def ones(*shape, **kwargs) -> "Tensor":
        """``Tensor.ones(2, 3)``

        >>> Tensor.ones(2, 2).tolist()
        [[1.0, 1.0], [1.0, 1.0]]
        """
        return Tensor.full(argfix(*shape), 1.0, **{"dtype": dtypes.default_float, **kwargs})
    def full_like(self, fill_value: Any, **kwargs) -> "Tensor":
        """A tensor shaped (and sharded) like ``self`` filled with ``fill_value``: ``t.full_like(7)``.

        >>> Tensor.full_like(Tensor([1, 2]), 9).tolist()
        [9, 9]
        """
        if isinstance(self.device, tuple):
            dtype = kwargs.pop("dtype", self.dtype)
            return self._multi_like(lambda shape, device: Tensor.full(shape, fill_value, dtype=dtype, device=device), kwargs)
        return Tensor.full(self.shape, fill_value, **{"dtype": self.dtype, "device": self.device, **kwargs})
    def _multi_like(self, make: Callable[[tuple, str | None], "Tensor"], kwargs: dict) -> "Tensor":
        """``make(shape, device)`` for every shard of this multi-device tensor, sharded as it is (tinygrad's
        rule: a replicated tensor's value is made once and copied; a split one gets one per device)."""
        if kwargs.pop("device", None) is not None: raise RuntimeError("cannot specify `device` on `*_like` of a multi device tensor")
        requires_grad = kwargs.pop("requires_grad", None)
        if kwargs: raise TypeError(f"unexpected arguments {sorted(kwargs)}")
        devices, axis = self.device, self.uop.axis
        if axis is None: result = make(self.shape, None).shard(devices, None)
        else:
            shard_shape = tuple(s // len(devices) if i == axis else s for i, s in enumerate(self.shape))
            shards = [make(shard_shape, device).uop for device in devices]
            result = Tensor(UOp(Ops.MULTI, shards[0].dtype, tuple(shards), axis))
        result.requires_grad = requires_grad
        return result
    def shard_like(self, y: "Tensor") -> "Tensor":
        """This tensor on ``y``'s device(s), split along the same axis as ``y``.

        >>> w = Tensor.ones(4, 2).shard(("CPU:1", "CPU:2"), axis=0)
        >>> Tensor.zeros(4, 2).shard_like(w).uop.axis
        0
        """
        if isinstance(y.device, str): return self.to(y.device)
        if isinstance(self.device, tuple) and (self.device, self.uop.axis) == (y.device, y.uop.axis): return self
        return self.shard(y.device, y.uop.axis)
    def zeros_like(self, **kwargs) -> "Tensor":
        """A tensor of zeros with this tensor's shape, dtype and device.

        >>> Tensor.zeros_like(Tensor([[1, 2]])).tolist()
        [[0, 0]]
        """
        return self.full_like(0, **kwargs)
    def ones_like(self, **kwargs) -> "Tensor":
        """A tensor of ones with this tensor's shape, dtype and device.

        >>> Tensor.ones_like(Tensor([[1, 2]])).tolist()
        [[1, 1]]
        """
        return self.full_like(1, **kwargs)

    @staticmethod
    def arange(start: Any, stop: Any = None, step: Any = 1, **kwargs) -> "Tensor":
        """``Tensor.arange(5).tolist() == [0, 1, 2, 3, 4]``; float and negative steps work.

        >>> Tensor.arange(1, 10, 3).tolist()
        [1, 4, 7]
        """
        if stop is None: start, stop = 0, start
        if any(isinstance(x, UOp) for x in (start, stop, step)): return Tensor._symbolic_arange(start, stop, step, **kwargs)
        if step == 0: raise RuntimeError("arange step must not be zero")
        has_float = any(isinstance(x, float) for x in (start, stop, step))
        # the values the range can reach lie in [low, high] (stop itself is excluded)
        low, high = (start, stop - step) if step > 0 else (stop - step, start)
        if "dtype" in kwargs: dtype = to_dtype(kwargs.pop("dtype"))
        elif has_float: dtype = dtypes.default_float
        else:   # as tinygrad: an int range that default_int can't hold is int64
            dtype = dtypes.default_int
            if low < dtypes.min(dtype) or high > dtypes.max(dtype): dtype = dtypes.int64
        if dtypes.is_int(dtype) and (low < dtypes.min(dtype) or high > dtypes.max(dtype)):
            raise OverflowError(f"arange [{start}, {stop}) step {step} doesn't fit in {dtype}")
        # ceil((stop - start) / step), exactly for ints (a float quotient rounds past 2**53)
        count = max(0, math.ceil((stop - start) / step) if has_float else -((start - stop) // step))
        device = _canonical_device(kwargs.pop("device", None))
        if count == 0: return Tensor(UOp.const(dtype, 0, device, (0,)), **kwargs)
        # the element number itself: int32 while it fits, so indexing math stays 32-bit
        index_dtype = dtypes.int32 if count - 1 <= dtypes.max(dtypes.int32) else dtypes.int64
        index = UOp(Ops.ARANGE, index_dtype, (UOp(Ops.DEVICE, arg=device),), count)
        values = Tensor(index).cast(dtype) * Tensor(UOp.const(dtype, step, device, ())) + Tensor(UOp.const(dtype, start, device, ()))
        return Tensor(values.uop, **kwargs)
    @staticmethod
    def _symbolic_arange(start: Any, stop: Any, step: Any, **kwargs) -> "Tensor":
        """``arange`` whose bounds are bound Variables (or expressions of them): a symbolic length
        ceil((stop - start) / step), compiled once for every value."""
        if not isinstance(step, int) or isinstance(step, bool) or step <= 0:
            raise ValueError(f"an arange with symbolic bounds needs a positive int step, got {step!r}")
        if any(isinstance(x, float) for x in (start, stop)): raise TypeError("an arange with symbolic bounds takes int bounds")
        length = sint_to_uop(stop - start)
        if not resolve(length >= 0, False):
            raise ValueError(f"arange [{start}, {stop}) may have a negative length {length.render()}: its bounds can't order it")
        count = ((length + (step - 1)) // step).ssimplify()
        dtype = to_dtype(kwargs.pop("dtype")) if "dtype" in kwargs else dtypes.default_int
        device = _canonical_device(kwargs.pop("device", None))
        largest = count.vmax if isinstance(count, UOp) else count
        index_dtype = dtypes.int32 if largest - 1 <= dtypes.max(dtypes.int32) else dtypes.int64
        index = UOp(Ops.ARANGE, index_dtype, (UOp(Ops.DEVICE, arg=device),), count)
        values = Tensor(index).cast(dtype) * Tensor(UOp.const(dtype, step, device, ())) + Tensor(start, device=device, dtype=dtype)
        return Tensor(values.uop, **kwargs)
    @staticmethod
    def linspace(start: float, stop: float, steps: int, **kwargs) -> "Tensor":
        """``steps`` evenly spaced values from start to stop inclusive.

        >>> Tensor.linspace(0, 1, 5).tolist()
        [0.0, 0.25, 0.5, 0.75, 1.0]
        """
        if steps < 0: raise ValueError("linspace needs a non-negative number of steps")
        dtype = to_dtype(kwargs.pop("dtype", dtypes.default_float))
        if dtype == dtypes.bool: raise ValueError("linspace with a bool dtype is not supported")
        if steps == 1: return Tensor([start], dtype=dtype, **kwargs)
        return (Tensor.arange(steps, **kwargs).cast(dtypes.float32) * ((stop - start) / (steps - 1)) + start).cast(dtype)
    @staticmethod
    def eye(n: int, m: int | None = None, **kwargs) -> "Tensor":
        """The identity matrix: ``Tensor.eye(3)``.

        >>> Tensor.eye(2).tolist()
        [[1.0, 0.0], [0.0, 1.0]]
        """
        m = n if m is None else m
        if n < 0 or m < 0: raise ValueError(f"eye needs non-negative sizes, got {n}, {m}")
        dtype = kwargs.pop("dtype", dtypes.default_float)
        rows = Tensor.arange(n, device=kwargs.get("device")).reshape(n, 1)
        cols = Tensor.arange(m, device=kwargs.get("device")).reshape(1, m)
        return Tensor((rows == cols).cast(dtype).uop, requires_grad=kwargs.get("requires_grad"))

    @staticmethod
    def from_blob(ptr: int, shape: tuple, dtype: DType | str = dtypes.float32, device: str | None = None) -> "Tensor":
        """A tensor over existing host memory at address ``ptr`` (no copy on CPU-memory devices;
        the memory must outlive the tensor): ``Tensor.from_blob(array.ctypes.data, (2, 3))``.

        >>> import ctypes; buf = (ctypes.c_float * 2)(1.0, 2.0)
        >>> Tensor.from_blob(ctypes.addressof(buf), (2,), dtype=dtypes.float32).tolist()
        [1.0, 2.0]
        """
        import ctypes
        dtype, device = to_dtype(dtype), Device.canonicalize(device)
        if not isinstance(ptr, int) or ptr == 0: raise ValueError(f"from_blob needs a non-null integer address, got {ptr!r}")
        count = prod(shape)
        if count == 0: return Tensor(UOp.const(dtype, 0, device, tuple(shape)))
        memory = (ctypes.c_uint8 * (count * dtype.itemsize)).from_address(ptr)
        buffer = new_buffer_uop(device, count, dtype)
        # every device whose buffers are host memory (CPU, LLVM, PYTHON) wraps the caller's memory instead of copying it
        if isinstance(Device[device].allocator, MallocAllocator): buffer_of(buffer).allocate(memory)
        else: buffer_of(buffer).allocate().copyin(memoryview(memory))
        return Tensor(buffer.reshape(tuple(shape)))
    @staticmethod
    def from_url(url: str, gunzip: bool = False, **kwargs) -> "Tensor":
        """A uint8 tensor of a downloaded file (cached on disk): ``Tensor.from_url(url)``.

        >>> url = 'file://' + __import__('os').path.abspath(__import__('tempfile').mkstemp()[1])
        >>> _ = open(url[7:], 'wb').write(bytes([1, 2])); Tensor.from_url(url).tolist()
        [1, 2]
        """
        import gzip
        from fusegrad.helpers import fetch
        data = fetch(url).read_bytes()
        return Tensor(gzip.decompress(data) if gunzip else data, **kwargs)

    # ---------------------------------------------------------------- random numbers (counter-based threefry)
    #
    # The stream is tinygrad 0.14's, bit for bit, so a seeded experiment gives the same numbers on both:
    # - each device gets a key the first time it draws: [low 32 bits of sha256(n), seed], n = how many
    #   devices drew before it (the first device, usually the only one, has n = 0);
    # - each device keeps a 64-bit counter of the uint32 words it handed out; a draw of ``num`` words
    #   first turns (counter, key) into a fresh key with one Threefry-2x32 block, then encrypts the
    #   counters 0..ceil(num/2)-1 (low words) and ceil(num/2).. (high words) under that key;
    # - floats take the top mantissa bits of their own width: ``bits >> (bitsize - mantissa) | 1.0``,
    #   bitcast, minus 1, so values lie in [0, 1) and half/bfloat16 never round up to 1.0.
    @staticmethod
    def manual_seed(seed: int = 0) -> None:
        """Seed every random op: equal seeds give equal numbers (the same as tinygrad's for the same seed).

        >>> Tensor.manual_seed(42); a = Tensor.rand(3).tolist(); Tensor.manual_seed(42); a == Tensor.rand(3).tolist()
        True
        """
        Tensor._seed, Tensor._device_seeds, Tensor._device_rng_counters = int(seed), {}, {}
    @staticmethod
    def _rng_state(device: str) -> tuple["Tensor", "Tensor"]:
        """The device's key (uint32 [2]) and draw counter (uint64 [1]), made at its first draw."""
        if device not in Tensor._device_seeds:
            stream = int.from_bytes(hashlib.sha256(len(Tensor._device_seeds).to_bytes(4, "big")).digest(), "big")
            Tensor._device_seeds[device] = Tensor([stream & 0xFFFFFFFF, Tensor._seed & 0xFFFFFFFF], dtype=dtypes.uint32, device=device)
            Tensor._device_rng_counters[device] = Tensor([0], dtype=dtypes.uint64, device=device)
        return Tensor._device_seeds[device], Tensor._device_rng_counters[device]
    @staticmethod
    def _next_counter(device: str, num: int) -> tuple["Tensor", "Tensor"]:
        """The device's key (uint32 [2]) and its counter before a draw of ``num`` uint32 words (a uint64
        [1]), advancing the counter. The increment is an assign that each draw's graph reads (the value
        before it is ``counter - num``), so it runs with the draw and TinyJit replays advance it too.
        (tinygrad keeps the counter as two uint32 words; one uint64 holds the same number and updates
        in place without reading its other half.)"""
        _, counter = Tensor._rng_state(device)
        counter.assign(counter + num)
        return Tensor._device_seeds[device], Tensor(counter.uop, requires_grad=False) - num
    @staticmethod
    def _draw_keys(device: str, num: int, starts: tuple[int, ...] = (0,)) -> "Tensor":
        """The keys of a draw of ``num`` words, one (low, high) uint32 pair per chunk start: the Threefry cipher of
        the device's counter + start under its key. Computed now (two small kernels: the counter's update and the
        keys), so the draw's big graph reads a realized buffer and not the counter's chain of assigns: a lazy
        draw that read the chain was rewritten whenever an earlier draw was realized, and realizing 100 lazy
        ``randn(128, 128)`` one after another took 7.3 s. TinyJit captures these kernels like any other, so replays
        still advance the counter. Outside a capture, on a device whose buffers are host memory, the host computes
        the same keys instead (``_host_draw_keys``)."""
        if not capturing and (host := Tensor._host_draw_keys(device, num, starts)) is not None: return host
        def keys() -> "Tensor":   # (its intermediate tensors are gone before the realize, which would update them)
            key, counter = Tensor._next_counter(device, num)
            pairs = []
            for start in starts:
                block = counter + start
                low, high = _threefry2x32(block.cast(dtypes.uint32), (block >> 32).cast(dtypes.uint32), key[0:1], key[1:2])
                pairs.append(low.cat(high))
            return Tensor.stack(*pairs)
        return keys().realize()
    @staticmethod
    def _host_draw_keys(device: str, num: int, starts: tuple[int, ...]) -> "Tensor | None":
        """``_draw_keys`` computed by the host, for a device whose buffers are host memory (CPU, LLVM, PYTHON), outside
        TinyJit captures: the counter is read from its buffer, the keys are the same Threefry blocks on Python ints
        (``alu.threefry2x32``) and the counter's buffer is written back advanced. Same keys, same counter, no kernel:
        ~30 us where the two small kernels' graph, schedule and launch took 270-470 us per draw (more with lazy draws
        pending, which every realize looks over). A capture takes the kernels (replays must advance the counter
        themselves), and those replays write the buffer this reads. None (the kernels) when the state isn't in
        plain host buffers (another device; a counter or key assigned lazily)."""
        key, counter = Tensor._rng_state(device)
        if counter.uop.op is not Ops.BUFFER or key.uop.op is not Ops.BUFFER: return None
        key_buffer, counter_buffer = buffer_of(key.uop), buffer_of(counter.uop)
        if not (isinstance(Device[device].allocator, MallocAllocator) and key_buffer.is_allocated() and counter_buffer.is_allocated()):
            return None
        key0, key1 = struct.unpack("=2I", key_buffer.as_buffer())
        (value,) = struct.unpack("=Q", counter_buffer.as_buffer())
        counter_buffer.copyin(memoryview(struct.pack("=Q", (value + num) % 2 ** 64)))
        pairs = []
        for start in starts:
            block = (value + start) % 2 ** 64
            low, high = threefry2x32(block & 0xFFFFFFFF, block >> 32, key0, key1, lambda v: v & 0xFFFFFFFF)
            pairs.append([low, high])
        return Tensor(pairs, dtype=dtypes.uint32, device=device)
    @staticmethod
    def _random_bits(count: int, device: str) -> "Tensor":
        """``count`` random uint32 words of the device's Threefry-2x32 stream (see above)."""
        chunk_max = 0xFFFFFFFF
        starts = tuple(range(0, count, chunk_max))
        keys, chunks = Tensor._draw_keys(device, count, starts), []
        for i, start in enumerate(starts):
            size = min(count - start, chunk_max)
            half = ceildiv(size, 2)
            counts0 = Tensor.arange(half, device=device, dtype=dtypes.uint32)
            words0, words1 = _threefry2x32(counts0, counts0 + half, keys[i, 0], keys[i, 1])
            chunks.append(words0.cat(words1)[:size])
        return chunks[0].cat(*chunks[1:])
    @staticmethod
    def rand(*shape, device: str | None = None, dtype: DType | str | None = None, contiguous: bool = True, **kwargs) -> "Tensor":
        """Uniform samples in [0, 1): ``Tensor.rand(2, 3)``.

        >>> Tensor.manual_seed(0); 0.0 <= Tensor.rand(4).min().item() and Tensor.rand(4).max().item() < 1.0
        True
        """
        shape = Tensor._shape_arg(shape)
        dtype = to_dtype(dtype) if dtype is not None else dtypes.default_float
        if isinstance(device, (tuple, list)):
            raise ValueError(f"rand only supports a single device, got device={device!r}; use rand_like of a sharded tensor")
        device = _canonical_device(device)
        if not dtypes.is_float(dtype): raise ValueError(f"rand needs a float dtype, got {dtype}")
        count = prod(shape)
        if count == 0: return Tensor.zeros(*shape, device=device, dtype=dtype, **kwargs)
        bits = Tensor._random_bits(ceildiv(count * dtype.itemsize, 4), device)
        uniform = _bits_to_unit_interval(bits, count, dtype).reshape(shape)
        return Tensor((uniform.contiguous() if contiguous else uniform).uop, **kwargs)
    def rand_like(self, **kwargs) -> "Tensor":
        """Uniform samples in [0, 1) shaped (and sharded) like ``self``.

        >>> Tensor.manual_seed(0); Tensor.rand_like(Tensor([[1.0, 2.0]])).shape
        (1, 2)
        """
        if isinstance(self.device, tuple):
            dtype, contiguous = kwargs.pop("dtype", self.dtype), kwargs.pop("contiguous", True)
            return self._multi_like(lambda shape, device: Tensor.rand(*shape, dtype=dtype, device=device, contiguous=contiguous), kwargs)
        return Tensor.rand(*self.shape, **{"device": self.device, "dtype": self.dtype, **kwargs})
    @staticmethod
    def randn(*shape, dtype: DType | str | None = None, **kwargs) -> "Tensor":
        """Standard normal samples (Box-Muller): ``Tensor.randn(2, 3)``.

        >>> Tensor.manual_seed(0); Tensor.randn(2, 3).shape
        (2, 3)
        """
        shape = Tensor._shape_arg(shape)
        dtype = to_dtype(dtype) if dtype is not None else dtypes.default_float
        requires_grad, count = kwargs.pop("requires_grad", None), prod(shape)
        if not isinstance(kwargs.get("device"), (tuple, list)) and 0 < count < 0x7FFFFFFF and all(isinstance(s, int) for s in shape):
            device = _canonical_device(kwargs.pop("device", None))
            kwargs.pop("contiguous", None)   # (nothing is stored on the way: the normals are one expression)
            uniform0, uniform1 = Tensor._paired_uniforms(count, device, Tensor._draw_keys(device, 2 * count))
            normal = _box_muller(uniform0, uniform1).reshape(shape)
            return Tensor(normal.cast(dtype).uop, requires_grad=requires_grad, **kwargs)
        src = Tensor.rand(2, *shape, dtype=dtypes.float32, **kwargs)
        return Tensor(_box_muller(src[0], src[1]).cast(dtype).uop, requires_grad=requires_grad)
    @staticmethod
    def _paired_uniforms(count: int, device: str, keys: "Tensor") -> tuple["Tensor", "Tensor"]:
        """The two halves of ``Tensor.rand(2, count)``'s float32 uniforms, unstored: the draw's 2 * count words are
        one Threefry call per counter c < count, whose two output words are words c and c + count (see
        ``_random_bits``). So normal i reads both of its uniforms from one call: randn's kernel runs the cipher once
        per normal, where storing the uniforms first ran it once per word (the two halves of a cat) and wrote and
        read 8 bytes per normal more. Same stream, same numbers. ``keys``: ``Tensor._draw_keys(device, 2 * count)``."""
        counts = Tensor.arange(count, device=device, dtype=dtypes.uint32)
        words0, words1 = _threefry2x32(counts, counts + count, keys[0, 0], keys[0, 1])
        return _bits_to_unit_interval(words0, count, dtypes.float32), _bits_to_unit_interval(words1, count, dtypes.float32)
    def randn_like(self, **kwargs) -> "Tensor":
        """Standard normal samples shaped (and sharded) like ``self``.

        >>> Tensor.manual_seed(0); Tensor.randn_like(Tensor([[1.0, 2.0]])).shape
        (1, 2)
        """
        if isinstance(self.device, tuple):
            dtype = kwargs.pop("dtype", self.dtype)
            return self._multi_like(lambda shape, device: Tensor.randn(*shape, dtype=dtype, device=device), kwargs)
        return Tensor.randn(*self.shape, **{"device": self.device, "dtype": self.dtype, **kwargs})
    @staticmethod
    def randint(*shape, low: int = 0, high: int = 10, dtype: DType | str = dtypes.int32, **kwargs) -> "Tensor":
        """Uniform integers in [low, high).

        >>> Tensor.manual_seed(0); 0 <= Tensor.randint(5, low=0, high=3).min().item() and Tensor.randint(5, high=3).max().item() < 3
        True
        """
        if not isinstance(low, int) or not isinstance(high, int): raise TypeError(f"randint needs int bounds, got low={low!r}, high={high!r}")
        if high <= low: raise ValueError(f"randint needs low < high, got low={low}, high={high}")
        dtype = to_dtype(dtype)
        if not dtypes.is_int(dtype): raise TypeError(f"randint needs an int dtype, got {dtype}")
        return Tensor.uniform(*shape, low=low, high=high, dtype=dtype, **kwargs)
    @staticmethod
    def normal(*shape, mean: float = 0.0, std: float = 1.0, **kwargs) -> "Tensor":
        """Normal samples with ``mean`` and ``std`` (``std >= 0``).

        >>> Tensor.manual_seed(0); Tensor.normal(2, 3, mean=1.0, std=0.1).shape
        (2, 3)
        """
        if std < 0: raise ValueError(f"normal needs std >= 0, got std={std}")
        requires_grad = kwargs.pop("requires_grad", None)
        return Tensor((std * Tensor.randn(*shape, **kwargs) + mean).uop, requires_grad=requires_grad)
    @staticmethod
    def uniform(*shape, low: float = 0.0, high: float = 1.0, **kwargs) -> "Tensor":
        """Uniform samples in [low, high) (``low < high``).

        >>> Tensor.manual_seed(0); (Tensor.uniform(100, low=2, high=3) >= 2).all().item()
        True
        """
        if not low < high: raise ValueError(f"uniform needs low < high, got low={low}, high={high}")
        requires_grad = kwargs.pop("requires_grad", None)
        dtype = kwargs.pop("dtype", None) or dtypes.default_float
        # scaled in float32, cast, then shifted: tinygrad's order of rounding, so seeded values match
        return Tensor(((high - low) * Tensor.rand(*shape, **kwargs)).cast(dtype).add(low).uop, requires_grad=requires_grad)
    @staticmethod
    def scaled_uniform(*shape, **kwargs) -> "Tensor":
        """U(-1, 1) scaled by 1 / sqrt(prod(shape)).

        >>> Tensor.manual_seed(0); Tensor.scaled_uniform(2, 3).shape
        (2, 3)
        """
        return Tensor.uniform(*shape, low=-1.0, high=1.0, **kwargs).mul(prod(argfix(*shape)) ** -0.5)
    @staticmethod
    def glorot_uniform(*shape, **kwargs) -> "Tensor":
        """Xavier/Glorot uniform initialization: U(-a, a) with a = sqrt(6 / (fan_in + fan_out)).

        >>> Tensor.manual_seed(0); Tensor.glorot_uniform(3, 4).shape
        (3, 4)
        """
        shape = argfix(*shape)
        bound = (6 / (shape[0] + prod(shape[1:]))) ** 0.5
        return Tensor.uniform(*shape, low=-bound, high=bound, **kwargs)
    @staticmethod
    def kaiming_uniform(*shape, a: float = 0.01, **kwargs) -> "Tensor":
        """He/Kaiming uniform initialization: U(-b, b), b = gain * sqrt(3 / fan_in), the gain set by the leaky-relu slope ``a``.

        >>> Tensor.manual_seed(0); Tensor.kaiming_uniform(4, 3).shape
        (4, 3)
        """
        shape = argfix(*shape)
        bound = math.sqrt(3.0) * math.sqrt(2.0 / (1 + a ** 2)) / math.sqrt(prod(shape[1:]))
        return Tensor.uniform(*shape, low=-bound, high=bound, **kwargs)
    @staticmethod
    def kaiming_normal(*shape, a: float = 0.01, **kwargs) -> "Tensor":
        """He/Kaiming normal initialization: N(0, gain / sqrt(fan_in)), the gain set by the leaky-relu slope ``a``.

        >>> Tensor.manual_seed(0); Tensor.kaiming_normal(4, 3).shape
        (4, 3)
        """
        shape = argfix(*shape)
        std = math.sqrt(2.0 / (1 + a ** 2)) / math.sqrt(prod(shape[1:]))
        return Tensor.normal(*shape, mean=0.0, std=std, **kwargs)

    # ---------------------------------------------------------------- graph building helpers
    def _apply(self, op: Ops, *srcs: "Tensor", arg: Any = None, dtype: DType | None = None) -> "Tensor":
        uop = UOp(op, dtype or self.uop.dtype, (self.uop, *[s.uop for s in srcs]), arg)
        return Tensor(uop, requires_grad=self._grad_flag(*srcs))
    def _grad_flag(self, *srcs: "Tensor") -> bool | None:
        # True if any operand requires grad, else None if any is undecided, else False (one plain
        # loop: this runs for every op built)
        if Tensor.no_grad: return False
        flag: bool | None = False
        for t in (self, *srcs):
            if (f := t.requires_grad) is True: return True
            if f is None: flag = None
        return flag
    def _const(self, value: Any, dtype: DType | None = None, shape: tuple | None = None) -> "Tensor":
        return Tensor(UOp.const(dtype or self.dtype, value, self.device, self.shape if shape is None else shape), requires_grad=False)
    def _to_tensor(self, x: Any, dtype: DType | None = None) -> "Tensor":
        if isinstance(x, Tensor): return x
        if isinstance(x, UOp):   # a symbolic value (bound variables) used as a number
            return Tensor(UOp.const(dtypes.weakint, x, self.device, ()), requires_grad=False)
        if not isinstance(x, (bool, int, float)): raise RuntimeError(f"unsupported operand type {type(x).__name__}")
        return Tensor(UOp.const(dtype or dtypes.from_py(x), x, self.device, ()), requires_grad=False)
    def _broadcasted(self, y: Any, reverse: bool = False, match_dtype: bool = True) -> tuple["Tensor", "Tensor"]:
        x: Tensor = self
        if type(y) is Tensor:
            xu, yu = x.uop, y.uop
            # the common case (operands of one dtype, device and shape) has nothing to cast, copy or broadcast
            if xu.dtype is yu.dtype and xu.device == yu.device and not dtypes.is_weak(xu.dtype):
                if xu.shape == yu.shape: return (y, x) if reverse else (x, y)
                # (one dtype and device but two shapes, a bias or a mask: nothing to cast, only to broadcast)
                shape = _broadcast_shape(xu.shape, yu.shape)
                x, y = x._broadcast_to(shape), y._broadcast_to(shape)
                return (y, x) if reverse else (x, y)
        if match_dtype and type(y) in (int, float) and (operand := x._broadcast_scalar(y)) is not None:
            scalar = Tensor(operand, requires_grad=False)
            return (scalar, x) if reverse else (x, scalar)
        if not isinstance(y, Tensor):
            y = x._to_tensor(y)
        if x.device != y.device: x, y = _on_common_devices(x, y)
        if match_dtype:
            out_dtype = least_upper_dtype(x.dtype, y.dtype)
            x, y = x.cast(out_dtype), y.cast(out_dtype)
        if reverse: x, y = y, x
        shape = _broadcast_shape(x.shape, y.shape)
        return x._broadcast_to(shape), y._broadcast_to(shape)
    def _broadcast_scalar(self, value: int | float) -> UOp | None:
        """A Python number as the other operand of an op with this tensor, when the number adopts this
        tensor's dtype: the UOp of the same graph the general path builds (_to_tensor, cast, reshape,
        expand), without its four intermediate Tensors, which were most of an eager ``x + 1``'s graph
        building. None when the general path is needed (the dtype changes; a multi-device or DISK tensor)."""
        uop = self.uop
        device, dtype, shape = uop.device, uop.dtype, uop.shape
        # a float by its bits: 0.0 and -0.0 (equal, with one hash) are different constants
        key = (value if type(value) is int else struct.pack("<d", value), dtype, device, shape)
        if (operand := _SCALAR_OPERANDS.get(key)) is None:
            if type(device) is not str or device.startswith("DISK:"): return None
            weak = dtypes.weakfloat if type(value) is float else dtypes.weakint
            # (whether a literal adopts a dtype doesn't depend on the default dtypes, so a cached entry stays valid)
            if least_upper_dtype(dtype, weak) != dtype: return None
            # (the literal's weak constant, then its cast: a weak CONST takes the dtype with the value converted)
            operand = UOp(Ops.CONST, dtype, (UOp(Ops.DEVICE, arg=device),), dtypes.as_const(dtypes.as_const(value, weak), dtype))
            if shape:
                ones = (1,) * len(shape)
                operand = UOp(Ops.RESHAPE, dtype, (operand,), ones)
                if shape != ones: operand = UOp(Ops.EXPAND, dtype, (operand,), shape)
            if len(_SCALAR_OPERANDS) >= _SCALAR_OPERANDS_SIZE: _SCALAR_OPERANDS.pop(next(iter(_SCALAR_OPERANDS)))
            _SCALAR_OPERANDS[key] = operand
        return operand
    def _broadcast_to(self, shape: tuple) -> "Tensor":
        if self.shape == shape: return self
        if self.ndim > len(shape): raise ValueError(f"cannot broadcast {self.shape} to {shape}")
        padded = (1,) * (len(shape) - self.ndim) + self.shape
        for have, want in zip(padded, shape):
            if have != want and not (isinstance(have, int) and have == 1): raise ValueError(f"cannot broadcast {self.shape} to {shape}")
        # (the reshape adds leading 1s and the expand is checked above: the UOps directly, one Tensor)
        uop = self.uop
        if padded != self.shape: uop = UOp(Ops.RESHAPE, uop.dtype, (uop,), padded)
        return Tensor(UOp(Ops.EXPAND, uop.dtype, (uop,), shape) if padded != shape else uop, requires_grad=self.requires_grad)

    def _binary(self, op: Ops, y: Any, reverse: bool = False) -> "Tensor":
        if type(y) in (int, float) and (operand := self._broadcast_scalar(y)) is not None:
            # what the general path below builds (the literal has this tensor's dtype and shape), without a Tensor
            # for the literal: an eager ``x + 1`` builds one Tensor and one UOp
            uop, flag = self.uop, self.requires_grad
            if uop.dtype is dtypes.bool and (op is Ops.ADD or op is Ops.MUL): op = Ops.OR if op is Ops.ADD else Ops.AND
            # (the literal needs no gradient: the result's flag is this tensor's, as _grad_flag gives)
            return Tensor(UOp(op, uop.dtype, (operand, uop) if reverse else (uop, operand)),
                          requires_grad=True if flag is True else None if flag is None else False)
        x, y = self._broadcasted(y, reverse)
        # bool + bool is OR and bool * bool is AND (tinygrad's values): C would count, True + True = 2 in a fused cast
        if x.dtype == dtypes.bool and op in (Ops.ADD, Ops.MUL): op = Ops.OR if op is Ops.ADD else Ops.AND
        return x._apply(op, y)
    def _compare(self, op: Ops, y: Any, reverse: bool = False) -> "Tensor":
        if (exact := self._with_big_int_literal(op.name, y, reverse)) is not None: return exact
        if type(y) in (int, float) and (operand := self._broadcast_scalar(y)) is not None:
            # (as in _binary: the general path's graph without a Tensor for the literal; relu's x <= 0 is two of these)
            uop, flag = self.uop, self.requires_grad
            return Tensor(UOp(op, dtypes.bool, (operand, uop) if reverse else (uop, operand)),
                          requires_grad=True if flag is True else None if flag is None else False)
        x, y = self._broadcasted(y, reverse)
        return x._apply(op, y, dtype=dtypes.bool)
    def _with_big_int_literal(self, op: str, y: Any, reverse: bool = False) -> "Tensor | None":
        """``self OP y`` for a Python int ``y`` that self's int dtype can't hold, with y's exact value, or None
        when y fits (or isn't an int literal). tinygrad keeps a literal's value and folds such ops from the
        tensor's bounds, so ``int32_t < 2**40`` is all True and ``int32_t.maximum(2**40)`` is 2**40 wrapped to
        int32 (0); arithmetic (+, *, &, ...) wraps the literal first, which gives the same result modulo 2**32."""
        dtype = self.dtype
        # (a bool tensor meets an int literal as the default int, like in every binary op)
        if dtype == dtypes.bool and isinstance(y, int) and not isinstance(y, bool): return self.cast(dtypes.default_int)._with_big_int_literal(op, y, reverse)
        if isinstance(y, bool) or not isinstance(y, int) or not dtypes.is_int(dtype) or dtypes.is_weak(dtype): return None
        if dtype.min <= y <= dtype.max: return None   # type: ignore[operator]
        above = y > dtype.max   # type: ignore[operator]
        if op in ("CMPLT", "CMPNE", "CMPEQ"):
            value = {"CMPNE": True, "CMPEQ": False}.get(op, above != reverse)
            return self._const(value, dtypes.bool)
        if reverse: return None   # (a literal on the left of //, % is used wrapped, as tinygrad does)
        wrapped = self._const(y)
        if op == "MAX": return wrapped if above else self
        if op == "MIN": return self if above else wrapped
        if op == "IDIV": return self._const(0)
        # floor division and Python's remainder: |y| exceeds every |x|, so the quotient is 0 or -1
        negative_quotient = (self < 0) if above else (self > 0)
        if op == "FLOORDIV": return negative_quotient.where(-1, 0).cast(dtype)
        if op == "MOD": return negative_quotient.where(self + wrapped, self)
        return None

    # ---------------------------------------------------------------- casts
    def cast(self, dtype: DType | str) -> "Tensor":
        """Convert values: ``Tensor([1.7]).cast(dtypes.int32).tolist() == [1]``.

        >>> Tensor([1.7, -1.7]).cast(dtypes.int32).tolist()
        [1, -1]
        """
        dtype = to_dtype(dtype)
        if self.dtype == dtype: return self
        if isinstance(self.device, str) and self.device.startswith("DISK:"):
            from fusegrad.runtime.ops_disk import DiskCastError, DISK_ONLY_MESSAGE
            raise DiskCastError(f"can't cast a DISK tensor ({self.dtype} -> {dtype}): {DISK_ONLY_MESSAGE}; move it first (.to('CPU'))")
        if self.uop.op is Ops.CONST and dtypes.is_weak(self.dtype) and not isinstance(self.uop.arg, UOp):
            # a Python literal takes the dtype directly: a weak int is only narrowed to default_int
            # when it stays weak, so 2**40 meeting a uint64 tensor must not pass through int32
            return Tensor(self.uop.replace(dtype=dtype, arg=dtypes.as_const(self.uop.arg, dtype)), requires_grad=self.requires_grad)
        return self._apply(Ops.CAST, dtype=dtype)
    def bitcast(self, dtype: DType | str) -> "Tensor":
        """Reinterpret the bits: ``Tensor([1.0]).bitcast(dtypes.uint32).item() == 0x3F800000``.
        A different item size changes the last dimension.

        >>> Tensor([1.0]).bitcast(dtypes.int32).tolist()
        [1065353216]
        """
        dtype = to_dtype(dtype)
        if self.requires_grad: raise RuntimeError("can't bitcast a tensor that requires grad")
        old, new = dtypes.concrete(self.dtype).itemsize, dtype.itemsize
        if old == new: return self if self.dtype == dtype else self._apply(Ops.BITCAST, dtype=dtype)
        if not self.shape or (self.shape[-1] * old) % new != 0:   # a RuntimeError, as in tinygrad
            raise RuntimeError(f"can't bitcast shape {self.shape} of {self.dtype} to {dtype}: the last dimension doesn't divide")
        if isinstance(self.device, str) and self.device.startswith("DISK:"):
            from fusegrad.runtime.ops_disk import disk_view
            return disk_view(self, dtype=dtype)
        from fusegrad.indexing import bitcast_item_size
        return bitcast_item_size(self, dtype)
    def float(self) -> "Tensor":
        """Cast to float32.

        >>> Tensor([1]).float().dtype
        dtypes.float
        """
        return self.cast(dtypes.float32)
    def half(self) -> "Tensor":
        """Cast to float16.

        >>> Tensor([1.0]).half().dtype
        dtypes.half
        """
        return self.cast(dtypes.float16)
    def double(self) -> "Tensor":
        """Cast to float64.

        >>> Tensor([1]).double().dtype
        dtypes.double
        """
        return self.cast(dtypes.float64)
    def int(self) -> "Tensor":
        """Cast to int32 (truncating floats toward zero).

        >>> Tensor([1.9]).int().tolist()
        [1]
        """
        return self.cast(dtypes.int32)
    def long(self) -> "Tensor":
        """Cast to int64.

        >>> Tensor([1.0]).long().dtype
        dtypes.long
        """
        return self.cast(dtypes.int64)
    def short(self) -> "Tensor":
        """Cast to int16.

        >>> Tensor([1]).short().dtype
        dtypes.short
        """
        return self.cast(dtypes.int16)
    def bool(self) -> "Tensor":
        """Cast to bool (nonzero is True).

        >>> Tensor([0, 2]).bool().tolist()
        [False, True]
        """
        return self.cast(dtypes.bool)
    def bfloat16(self) -> "Tensor":
        """Cast to bfloat16.

        >>> Tensor([1.5]).bfloat16().dtype
        dtypes.bfloat16
        """
        return self.cast(dtypes.bfloat16)

    # ---------------------------------------------------------------- movement
    def _resolve_dim(self, dim: int, extra: bool = False) -> int:
        total = self.ndim + int(extra)
        if not isinstance(dim, int): raise TypeError(f"dimension must be an int, got {type(dim).__name__}")
        if not -max(1, total) <= dim < max(1, total):
            raise IndexError(f"dimension {dim} is out of range for a tensor of {self.ndim} dimensions (shape {self.shape})")
        return dim + total if dim < 0 else dim
    def reshape(self, *shape) -> "Tensor":
        """``Tensor.arange(6).reshape(2, -1).shape == (2, 3)``

        >>> Tensor([1, 2, 3, 4]).reshape(2, 2).tolist()
        [[1, 2], [3, 4]]
        """
        shape = argfix(*shape)
        if shape == (current := self.shape): return self   # (expand and broadcasting reshape to the same shape: skip the checks)
        # the common case, concrete sizes on both sides (no -1, None or Variable) with equal products, needs
        # none of the checks below (every op that broadcasts or reduces reshapes: this is on the eager path)
        if all(type(s) is int and s >= 0 for s in shape) and all(type(s) is int for s in current) and prod(shape) == prod(current):
            return self._apply(Ops.RESHAPE, arg=shape)
        if any(s is None for s in shape): shape = tuple(self.shape[i] if s is None else s for i, s in enumerate(shape))
        shape = _int_sizes(shape)
        if shape.count(-1) > 1: raise RuntimeError(f"reshape can infer only one dimension, got {shape}")
        if -1 in shape:
            known = prod(s for s in shape if s != -1)
            if known == 0 or self.numel() % known != 0: raise ValueError(f"can't reshape {self.shape} to {shape}")
            shape = tuple(self.numel() // known if s == -1 else s for s in shape)
        if any(isinstance(s, int) and s < 0 for s in shape): raise ValueError(f"invalid shape {shape}")
        if isinstance(self.numel(), int) and isinstance(prod(shape), UOp):
            raise ValueError(f"can't reshape {self.shape} to the symbolic shape {shape}: a concrete tensor has no symbolic size "
                             f"(shrink or slice it with the Variable instead)")
        if not (_holds(prod(shape), self.numel()) and _holds(self.numel(), prod(shape))):
            raise ValueError(f"can't reshape {self.shape} ({self.numel()} elements) to {shape} ({prod(shape)} elements)")
        return self if tuple(shape) == self.shape else self._apply(Ops.RESHAPE, arg=tuple(shape))
    def view(self, *shape) -> "Tensor":
        """Alias of ``reshape``.

        >>> Tensor([1, 2, 3, 4]).view(2, 2).tolist()
        [[1, 2], [3, 4]]
        """
        return self.reshape(*shape)
    def expand(self, *shape) -> "Tensor":
        """Broadcast size-1 dims: ``Tensor([[1], [2]]).expand(2, 3)``; -1 keeps a dim.

        >>> Tensor([[1], [2]]).expand(2, 3).tolist()
        [[1, 1, 1], [2, 2, 2]]
        """
        shape = _int_sizes(argfix(*shape))
        if len(shape) < self.ndim: raise ValueError(f"expand to {shape} has fewer dimensions than {self.shape}")
        padded = (1,) * (len(shape) - self.ndim) + self.shape
        target = tuple(p if s == -1 else s for p, s in zip(padded, shape))
        for have, want in zip(padded, target):
            if have != want and have != 1: raise ValueError(f"can't expand {self.shape} to {shape}")
        reshaped = self.reshape(padded)
        return reshaped if target == padded else reshaped._apply(Ops.EXPAND, arg=target)
    def permute(self, *order) -> "Tensor":
        """Reorder dimensions: ``Tensor.ones(2, 3).permute(1, 0).shape == (3, 2)``.

        >>> Tensor.ones(2, 3, 4).permute(2, 0, 1).shape
        (4, 2, 3)
        """
        order, ndim = argfix(*order), self.ndim
        # (non-negative ints that are a permutation: nothing to resolve, the common call of transpose and matmul)
        if not (all(type(o) is int and o >= 0 for o in order) and sorted(order) == list(range(ndim))):
            order = tuple(self._resolve_dim(o) for o in order)
            if sorted(order) != list(range(ndim)): raise RuntimeError(f"invalid permutation {order} of a {ndim}-d tensor")
        return self if order == tuple(range(ndim)) else self._apply(Ops.PERMUTE, arg=order)
    def flip(self, *axis) -> "Tensor":
        """Reverse the order along ``axis``: ``Tensor([1, 2, 3]).flip(0).tolist() == [3, 2, 1]``.

        >>> Tensor([1, 2, 3]).flip(0).tolist()
        [3, 2, 1]
        """
        axes = {self._resolve_dim(a) for a in argfix(*axis)}
        if len(axes) != len(argfix(*axis)): raise RuntimeError(f"flip got a repeated axis in {axis}")
        flags = tuple(i in axes and self.shape[i] != 1 for i in range(self.ndim))
        return self._apply(Ops.FLIP, arg=flags) if any(flags) else self
    def shrink(self, arg: Sequence[tuple[int, int] | None]) -> "Tensor":
        """Keep ``[start, end)`` per dim (None keeps all): ``t.shrink(((0, 2), None))``.

        >>> Tensor([[1, 2, 3], [4, 5, 6]]).shrink(((0, 1), (1, 3))).tolist()
        [[2, 3]]
        """
        shape = self.shape
        if len(arg) != len(shape): raise ValueError(f"shrink needs {len(shape)} ranges, got {len(arg)}")
        bounds = tuple((0, s) if b is None else tuple(b) for b, s in zip(arg, shape))
        # the common case, int bounds of int sizes (every slice, split and cache write), needs no symbolic checks
        if all(type(b) is int and type(e) is int and type(s) is int and 0 <= b <= e <= s for (b, e), s in zip(bounds, shape)):
            return self if all(b == 0 and e == s for (b, e), s in zip(bounds, shape)) else self._apply(Ops.SHRINK, arg=bounds)
        for (b, e), s in zip(bounds, self.shape):
            if not (isinstance(b, (int, UOp)) and isinstance(e, (int, UOp))) or isinstance(b, bool) or isinstance(e, bool):
                raise TypeError(f"shrink bounds must be ints or bound Variables, got {bounds}")
            if not (_holds(0, b) and _holds(b, e) and _holds(e, s)): raise ValueError(f"invalid shrink {bounds} for shape {self.shape}")
            # where the variables' ranges can't decide it, their bound values must: a read past the end of a concrete
            # dimension is never what was meant (tinygrad would read out of bounds). (Ints past a symbolic dimension
            # are clamped to its Variable's maximum, tinygrad's rule, and stay allowed.)
            conditions = ((0, b), (b, e)) + (((e, s),) if isinstance(s, int) else ())
            if not all(_holds_now(x, y) for x, y in conditions):
                raise ValueError(f"invalid shrink {bounds} for shape {self.shape}: out of range with the variables' bound values")
            # a TinyJit capturing this shrink checks the bounds again with each replay's values
            if shape_guards: shape_guards[-1].extend(tuple(unbind_variables(v) if isinstance(v, UOp) else v for v in (x, y)) for x, y in conditions if isinstance(x, UOp) or isinstance(y, UOp))
        if all(b == (0, s) for b, s in zip(bounds, self.shape)): return self
        return self._apply(Ops.SHRINK, arg=bounds)
    def pad(self, padding: Sequence, mode: str = "constant", value: float = 0.0) -> "Tensor":
        """Pad with ``value``. ``padding`` is per-dim (before, after) pairs, or a flat torch-style
        tuple (last dim first). Negative padding crops. Modes: constant, reflect, replicate, circular.

        >>> Tensor([1, 2]).pad((1, 2)).tolist()
        [0, 1, 2, 0, 0]
        """
        if mode not in ("constant", "reflect", "replicate", "circular"): raise NotImplementedError(f"pad mode {mode!r} is not supported")
        # the common case, a zero pad by non-negative int pairs, one per dim (every cat): one PAD node, no checks to run
        if mode == "constant" and value == 0 and len(padding) == self.ndim and \
                all(type(p) is tuple and len(p) == 2 and type(p[0]) is int and type(p[1]) is int and p[0] >= 0 and p[1] >= 0 for p in padding):
            return self._apply(Ops.PAD, arg=tuple(padding)) if any(p != (0, 0) for p in padding) else self
        if all(isinstance(p, (int, UOp)) for p in padding):
            if len(padding) % 2 != 0 or len(padding) // 2 > self.ndim: raise ValueError(f"invalid flat padding {padding} for shape {self.shape}")
            pairs = [(0, 0)] * (self.ndim - len(padding) // 2) + [(padding[i], padding[i + 1]) for i in range(len(padding) - 2, -1, -2)]
        else:
            if len(padding) != self.ndim: raise ValueError(f"padding has {len(padding)} pairs for a {self.ndim}-d tensor")
            pairs = [(0, 0) if p is None else tuple(p) for p in padding]
        if mode != "constant": return self._pad_mode(pairs, mode)
        if any(isinstance(p, UOp) and not resolve(p >= 0) for pair in pairs for p in pair):
            raise ValueError(f"symbolic padding {pairs} must be non-negative")
        # negative (int) padding crops; a symbolic amount is a pad (checked non-negative above)
        x = self.shrink(tuple((-min(b, 0) if isinstance(b, int) else 0, s + min(a, 0) if isinstance(a, int) else s)
                              for (b, a), s in zip(pairs, self.shape)))
        positive = tuple(tuple(max(p, 0) if isinstance(p, int) else p for p in pair) for pair in pairs)
        if all(p == (0, 0) for p in positive): return x
        padded = x._apply(Ops.PAD, arg=positive)
        if value == 0: return padded
        inside = Tensor(UOp.const(dtypes.bool, True, x.device, x.shape))._apply(Ops.PAD, arg=positive)
        return inside.where(padded, value)
    def _pad_mode(self, pairs: list, mode: str) -> "Tensor":
        """reflect / replicate / circular padding; a negative amount crops that side. torch's and tinygrad's order:
        reflect and replicate pad from the whole input, then crop ((1, -4) reflects x[1] in, then crops 4);
        circular crops first and wraps around what is left."""
        x = self
        for dim, (before, after) in enumerate(pairs):
            if before < 0 or after < 0:
                if x.shape[dim] + min(before, 0) + min(after, 0) < 0:
                    raise ValueError(f"padding {before, after} crops more than dim {dim} of size {x.shape[dim]} holds")
                positive = [(max(before, 0), max(after, 0)) if i == dim else (0, 0) for i in range(x.ndim)]
                if mode != "circular": x = x._pad_mode(positive, mode)
                size = x.shape[dim]
                x = x.shrink(tuple((-min(before, 0), size + min(after, 0)) if i == dim else None for i in range(x.ndim)))
                if mode == "circular": x = x._pad_mode(positive, mode)
                continue
            if before == 0 and after == 0: continue
            size = x.shape[dim]
            if mode == "reflect" and (before >= size or after >= size):
                raise ValueError(f"reflect padding {before, after} must be smaller than dim {dim} of size {size}")
            if mode == "circular" and (before > size or after > size):
                raise ValueError(f"circular padding {before, after} can't exceed dim {dim} of size {size}")
            if mode == "reflect":
                front = x.shrink(tuple((1, before + 1) if i == dim else None for i in range(x.ndim))).flip(dim) if before else None
                back = x.shrink(tuple((size - after - 1, size - 1) if i == dim else None for i in range(x.ndim))).flip(dim) if after else None
            elif mode == "replicate":
                edge0 = x.shrink(tuple((0, 1) if i == dim else None for i in range(x.ndim)))
                edge1 = x.shrink(tuple((size - 1, size) if i == dim else None for i in range(x.ndim)))
                front = edge0.expand(*[before if i == dim else s for i, s in enumerate(x.shape)]) if before else None
                back = edge1.expand(*[after if i == dim else s for i, s in enumerate(x.shape)]) if after else None
            else:
                front = x.shrink(tuple((size - before, size) if i == dim else None for i in range(x.ndim))) if before else None
                back = x.shrink(tuple((0, after) if i == dim else None for i in range(x.ndim))) if after else None
            x = Tensor.cat(*[p for p in (front, x, back) if p is not None], dim=dim)
        return x
    def pad2d(self, padding: Sequence[int], value: float = 0.0) -> "Tensor":
        """Pad the last two dims: ``padding`` is (left, right, top, bottom).

        >>> Tensor([[1]]).pad2d((1, 0, 0, 1)).tolist()
        [[0, 1], [0, 0]]
        """
        return self.pad(tuple(padding), value=value)
    @property
    def T(self) -> "Tensor":
        """The tensor with its last two dims swapped (``transpose()``).

        >>> Tensor([[1, 2, 3]]).T.shape
        (3, 1)
        """
        return self.transpose()
    def transpose(self, dim0: int = 1, dim1: int = 0) -> "Tensor":
        """Swap two dims (default the first two): ``t.transpose(0, 1)``.

        >>> Tensor([[1, 2, 3]]).transpose().tolist()
        [[1], [2], [3]]
        """
        if self.ndim == 0:   # tinygrad's IndexError (PyTorch returns the scalar); _resolve_dim alone would accept dim 0
            raise IndexError(f"transpose needs a tensor of at least 1 dimension: dimensions {dim0} and {dim1} are out of range "
                             f"for a 0-d tensor")
        order = list(range(self.ndim))
        a, b = self._resolve_dim(dim0), self._resolve_dim(dim1)
        order[a], order[b] = order[b], order[a]
        return self.permute(order)
    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> "Tensor":
        """Merge dims start..end: ``Tensor.ones(2, 3, 4).flatten(1).shape == (2, 12)``.

        >>> Tensor([[1, 2], [3, 4]]).flatten().tolist()
        [1, 2, 3, 4]
        """
        if self.ndim == 0: return self.reshape(1)
        start, end = self._resolve_dim(start_dim), self._resolve_dim(end_dim)
        return self.reshape(self.shape[:start] + (prod(self.shape[start:end + 1]),) + self.shape[end + 1:])
    def unflatten(self, dim: int, sizes: tuple) -> "Tensor":
        """Split dim ``dim`` into the dims ``sizes``.

        >>> Tensor.ones(6).unflatten(0, (2, 3)).shape
        (2, 3)
        """
        dim = self._resolve_dim(dim)
        return self.reshape(self.shape[:dim] + tuple(sizes) + self.shape[dim + 1:])
    def squeeze(self, dim: int | None = None) -> "Tensor":
        """Drop size-1 dims (all, or just ``dim``).

        >>> Tensor.ones(1, 3, 1).squeeze().shape
        (3,)
        """
        if dim is None: return self.reshape(tuple(s for s in self.shape if s != 1))
        dim = self._resolve_dim(dim)
        return self if not self.ndim or self.shape[dim] != 1 else self.reshape(self.shape[:dim] + self.shape[dim + 1:])
    def unsqueeze(self, dim: int) -> "Tensor":
        """Insert a size-1 dim: ``Tensor.ones(3).unsqueeze(0).shape == (1, 3)``.

        >>> Tensor([1, 2]).unsqueeze(0).shape
        (1, 2)
        """
        dim = self._resolve_dim(dim, extra=True)
        return self.reshape(self.shape[:dim] + (1,) + self.shape[dim:])

    def __getitem__(self, indices: Any) -> "Tensor":
        """Basic numpy indexing: ints, slices with steps, None, Ellipsis (views, no copies)."""
        from fusegrad.indexing import getitem
        return getitem(self, indices)
    def __setitem__(self, indices: Any, value: Any) -> None:
        from fusegrad.indexing import setitem
        setitem(self, indices, value)
    def __delitem__(self, indices: Any) -> None:
        raise TypeError("Tensor does not support deleting items (its shape is fixed)")

    def cat(self, *others: "Tensor", dim: int = 0) -> "Tensor":
        """Join along ``dim``: ``Tensor([1]).cat(Tensor([2])).tolist() == [1, 2]``.

        >>> Tensor([1, 2]).cat(Tensor([3])).tolist()
        [1, 2, 3]
        """
        tensors = [self, *others]
        dim = self._resolve_dim(dim)
        for t in tensors:
            if t.ndim != self.ndim or any(a != b for i, (a, b) in enumerate(zip(t.shape, self.shape)) if i != dim):
                raise RuntimeError(f"cat needs matching shapes except in dim {dim}, got {[t.shape for t in tensors]}")
        dtype = least_upper_dtype(*[t.dtype for t in tensors])
        tensors = [t.cast(dtype) for t in tensors if t.shape[dim] != 0] or [self.cast(dtype)]
        total = sum(t.shape[dim] for t in tensors)
        out, offset = None, 0
        for t in tensors:
            padding = [(0, 0)] * t.ndim
            padding[dim] = (offset, total - offset - t.shape[dim])
            piece = t.pad(tuple(padding))
            out = piece if out is None else out + piece
            offset += t.shape[dim]
        return out
    def stack(self, *others: "Tensor", dim: int = 0) -> "Tensor":
        """Join along a new dim: ``Tensor.stack(a, b)``, ``a.stack(b)`` and ``Tensor.stack([a, b])`` are the same.

        >>> Tensor([1, 2]).stack(Tensor([3, 4])).tolist()
        [[1, 2], [3, 4]]
        """
        # a plain method, not a staticmethod: ``a.stack(b)`` must include ``a`` (tinygrad's semantics)
        tensors = argfix(self, *others)
        if not tensors: raise ValueError("stack needs at least one tensor")
        if any(t.shape != tensors[0].shape for t in tensors): raise RuntimeError(f"stack needs equal shapes, got {[t.shape for t in tensors]}")
        dim = tensors[0]._resolve_dim(dim, extra=True)
        return tensors[0].unsqueeze(dim).cat(*[t.unsqueeze(dim) for t in tensors[1:]], dim=dim)

    # ---------------------------------------------------------------- reductions
    def _resolve_axes(self, axis: int | Sequence[int] | None) -> tuple[int, ...]:
        if axis is None: return tuple(range(self.ndim))
        axes = (axis,) if isinstance(axis, int) else tuple(axis)
        if self.ndim == 0:
            for a in axes:
                if a not in (0, -1): raise IndexError(f"dimension {a} is out of range for a 0-d tensor")
            return ()
        resolved = tuple(self._resolve_dim(a) for a in axes)
        if len(set(resolved)) != len(resolved): raise RuntimeError(f"repeated axis in {axis}")
        return resolved
    def _reduce(self, op: Ops, axis: Any = None, keepdim: bool = False) -> "Tensor":
        axes = self._resolve_axes(axis)
        split = split_reduce(self.uop, op, axes) if axes else None   # (two kernels for a big reduce)
        reduced = Tensor(split if split is not None else self.uop.reduce_axis(op, axes), requires_grad=self.requires_grad) if axes else self
        if keepdim: return reduced
        return reduced.reshape(tuple(s for i, s in enumerate(self.shape) if i not in axes))
    def sum(self, axis: Any = None, keepdim: bool = False, acc_dtype: DType | None = None, dtype: DType | None = None) -> "Tensor":
        """Sum over ``axis`` (all by default). Small ints accumulate in int32, halves in float32.

        >>> Tensor([[1, 2], [3, 4]]).sum(axis=1).tolist()
        [3, 7]
        """
        acc = to_dtype(acc_dtype or dtype) if (acc_dtype or dtype) else sum_acc_dtype(self.dtype)
        result = self.cast(acc)._reduce(Ops.ADD, axis, keepdim)
        if dtype is None and acc_dtype is None and self.dtype in _NARROW_FLOATS: return result.cast(self.dtype)
        return result.cast(to_dtype(dtype)) if dtype is not None else result
    def prod(self, axis: Any = None, keepdim: bool = False, acc_dtype: DType | None = None, dtype: DType | None = None) -> "Tensor":
        """Product over ``axis``, in ``self``'s dtype unless ``dtype`` is given (tinygrad 0.14: an int8 product
        wraps in int8, a bool product is ``all``); accumulated in a wider type.

        >>> Tensor([[1, 2], [3, 4]]).prod(axis=1).tolist()
        [2, 12]
        """
        acc = to_dtype(acc_dtype or dtype) if (acc_dtype or dtype) else sum_acc_dtype(self.dtype)
        result = self.cast(acc)._reduce(Ops.MUL, axis, keepdim)
        # (products in a wider int, cast back, wrap as they would in the narrow one: both are modulo 2**bits)
        if dtype is None and acc_dtype is None: return result.cast(self.dtype)
        return result
    def max(self, axis: Any = None, keepdim: bool = False) -> "Tensor":
        """Largest value over ``axis``.

        >>> Tensor([[1, 5], [7, 2]]).max(axis=1).tolist()
        [5, 7]
        """
        # an empty axis gives the identity, the dtype's lowest value (-inf for floats), as in tinygrad 0.14
        # (torch raises); that keeps softmax/log_softmax of an empty axis empty and logsumexp -inf, as torch
        return self._reduce(Ops.MAX, axis, keepdim)
    def _inverse(self) -> "Tensor":
        """An order-reversing map: -x for floats and signed ints, ~x for unsigned, not for bool."""
        if dtypes.is_float(self.dtype): return -self
        if dtypes.is_unsigned(self.dtype): return ~self
        if self.dtype == dtypes.bool: return self.logical_not()
        return ~self
    def min(self, axis: Any = None, keepdim: bool = False) -> "Tensor":
        """Smallest value over ``axis``.

        >>> Tensor([[1, 5], [7, 2]]).min(axis=1).tolist()
        [1, 2]
        """
        return self._inverse().max(axis, keepdim)._inverse()
    def any(self, axis: Any = None, keepdim: bool = False) -> "Tensor":
        """True where any element along ``axis`` is nonzero (all elements when ``axis`` is None).

        >>> Tensor([[True, False], [False, False]]).any(axis=1).tolist()
        [True, False]
        """
        return self.bool()._reduce(Ops.MAX, axis, keepdim)   # not .max(): any() of nothing is False
    def all(self, axis: Any = None, keepdim: bool = False) -> "Tensor":
        """True where every element along ``axis`` is nonzero (all elements when ``axis`` is None).

        >>> Tensor([[True, False], [True, True]]).all(axis=1).tolist()
        [False, True]
        """
        return self.logical_not().any(axis, keepdim).logical_not()
    def mean(self, axis: Any = None, keepdim: bool = False) -> "Tensor":
        """Average over ``axis``; ints give float32.

        >>> Tensor([[1.0, 2.0], [3.0, 4.0]]).mean(axis=0).tolist()
        [2.0, 3.0]
        """
        out_dtype = least_upper_float(self.dtype) if not dtypes.is_weak(self.dtype) else dtypes.default_float
        count = prod(self.shape[a] for a in self._resolve_axes(axis)) if self.ndim else 1
        total = self.cast(out_dtype).sum(axis, keepdim, acc_dtype=sum_acc_dtype(out_dtype) if out_dtype not in _NARROW_FLOATS else dtypes.float32)
        if count == 0: return (total * math.nan).cast(out_dtype)
        return (total / count).cast(out_dtype)
    def var(self, axis: Any = None, keepdim: bool = False, correction: int = 1) -> "Tensor":
        """Variance with Bessel's ``correction`` (1 by default, like torch).

        >>> round(Tensor([1.0, 2.0, 3.0, 4.0]).var().item(), 4)
        1.6667
        """
        squares = (self - self.mean(axis, keepdim=True)).square()
        count = prod(self.shape[a] for a in self._resolve_axes(axis)) if self.ndim else 1
        # a symbolic count is only known when the kernel runs: divide by it there
        if isinstance(count, UOp): return squares.sum(axis, keepdim) / smax(0, count - correction)
        # correction >= N divides by 0 like tinygrad and torch: inf, or nan for a constant input
        return squares.sum(axis, keepdim) / max(0, count - correction)
    def std(self, axis: Any = None, keepdim: bool = False, correction: int = 1) -> "Tensor":
        """Standard deviation along ``axis`` with Bessel's ``correction`` (default 1).

        >>> round(Tensor([1.0, 2.0, 3.0, 4.0]).std().item(), 4)
        1.291
        """
        return self.var(axis, keepdim, correction).sqrt()
    def var_mean(self, axis: Any = None, keepdim: bool = False, correction: int = 1) -> tuple["Tensor", "Tensor"]:
        """``(var, mean)`` along ``axis``.

        >>> [round(t.item(), 4) for t in Tensor([1.0, 2.0, 3.0, 4.0]).var_mean()]
        [1.6667, 2.5]
        """
        return self.var(axis, keepdim, correction), self.mean(axis, keepdim)
    def std_mean(self, axis: Any = None, keepdim: bool = False, correction: int = 1) -> tuple["Tensor", "Tensor"]:
        """``(std, mean)`` along ``axis``.

        >>> [round(t.item(), 4) for t in Tensor([1.0, 2.0, 3.0, 4.0]).std_mean()]
        [1.291, 2.5]
        """
        return self.std(axis, keepdim, correction), self.mean(axis, keepdim)
    def softmax(self, axis: int = -1, dtype: DType | None = None) -> "Tensor":
        """exp(x - max) / sum: numerically stable.

        >>> Tensor([0.0, 0.0]).softmax().tolist()
        [0.5, 0.5]
        """
        x = self.cast(dtype) if dtype is not None else self
        return x._with_gradient(x.detach()._softmax_value(axis), _SoftmaxGradient(axis, log=False))
    def _softmax_value(self, axis: int) -> "Tensor":
        shifted = self - self.max(axis, keepdim=True)
        e = shifted.exp()
        return e / e.sum(axis, keepdim=True)
    def _with_gradient(self, value: "Tensor", rule: Callable[[UOp, UOp], tuple[UOp]]) -> "Tensor":
        """``value`` (computed from self detached) with ``rule(ret, grad)`` as its gradient with respect to self (an
        Ops.CUSTOM node; a tensor that needs no gradient gets the plain value)."""
        if self.requires_grad is False: return value
        return Tensor(UOp(Ops.CUSTOM, value.dtype, (value.uop, self.uop), rule), requires_grad=self.requires_grad)
    def log_softmax(self, axis: int = -1, dtype: DType | None = None) -> "Tensor":
        """log(softmax(x)) along ``axis``, computed stably.

        >>> Tensor([0.0, 0.0]).log_softmax().numpy().round(4)
        array([-0.6931, -0.6931], dtype=float32)
        """
        x = self.cast(dtype) if dtype is not None else self
        shifted = x.detach() - x.detach().max(axis, keepdim=True)
        return x._with_gradient(shifted - shifted.exp().sum(axis, keepdim=True).log(), _SoftmaxGradient(axis, log=True))
    def logsumexp(self, axis: Any = None, keepdim: bool = False) -> "Tensor":
        """log(sum(exp(x))) computed stably.

        >>> round(Tensor([0.0, 0.0]).logsumexp(0).item(), 4)
        0.6931
        """
        m = self.max(axis, keepdim=True)
        m = m.isinf().where(0, m)   # a row of -inf gives log(0) = -inf, a +inf gives +inf (not inf - inf = nan)
        return (self - m).exp().sum(axis, keepdim=True).log().add(m)._squeeze_axes(self._resolve_axes(axis), keepdim)
    def _squeeze_axes(self, axes: tuple[int, ...], keepdim: bool) -> "Tensor":
        if keepdim: return self
        return self.reshape(tuple(s for i, s in enumerate(self.shape) if i not in axes))
    def argmax(self, axis: int | None = None, keepdim: bool = False) -> "Tensor":
        """Index of the first largest value (int32). NaN counts as the largest, as in PyTorch: a
        row with a NaN gives the index of its first NaN (the max of that row is NaN too).

        >>> Tensor([[1, 5, 2], [7, 0, 3]]).argmax(axis=1).tolist()
        [1, 0]
        """
        if axis is None: return self.flatten().argmax(0)
        axis = self._resolve_dim(axis) if self.ndim else 0
        if self.ndim == 0: return Tensor(UOp.const(dtypes.int32, 0, self.device, ()))
        n = self.shape[axis]
        if n == 0: raise RuntimeError("argmax of an empty dimension")
        is_max = self == self.max(axis, keepdim=True)
        # NaN == NaN is false: without this a row with a NaN matches nothing and gives n
        if dtypes.is_float(self.dtype): is_max = is_max | (self != self)
        shape = [1] * self.ndim
        shape[axis] = n
        countdown = Tensor.arange(n, 0, -1, device=self.device, dtype=dtypes.int32).reshape(shape)
        first = (is_max * countdown).max(axis, keepdim=keepdim)
        return (n - first).cast(dtypes.int32)
    def argmin(self, axis: int | None = None, keepdim: bool = False) -> "Tensor":
        """Index of the smallest element along ``axis`` (the first one on ties; flattened when ``axis`` is None).

        >>> Tensor([[1, 5, 2], [7, 0, 3]]).argmin(axis=1).tolist()
        [0, 1]
        """
        return self._inverse().argmax(axis, keepdim)

    # ---------------------------------------------------------------- unary math
    def _unary(self, op: Ops) -> "Tensor":
        x = self.cast(least_upper_float(self.dtype)) if not dtypes.is_float(self.dtype) and op not in (Ops.NEG,) else self
        return x._apply(op)
    def neg(self) -> "Tensor":
        """-x (logical not for bool).

        >>> Tensor([1, -2]).neg().tolist()
        [-1, 2]
        """
        return self.logical_not() if self.dtype == dtypes.bool else self._apply(Ops.NEG)
    def logical_not(self) -> "Tensor":
        """``Tensor([True, False]).logical_not().tolist() == [False, True]``

        >>> Tensor([True, False]).logical_not().tolist()
        [False, True]
        """
        return self._compare(Ops.CMPNE, True) if self.dtype == dtypes.bool else self._compare(Ops.CMPEQ, 0)
    def log2(self) -> "Tensor":
        """Base-2 logarithm, elementwise.

        >>> Tensor([1.0, 8.0]).log2().numpy().round(4)
        array([0., 3.], dtype=float32)
        """
        return self._unary(Ops.LOG2)
    def exp2(self) -> "Tensor":
        """2 ** x, elementwise.

        >>> Tensor([0.0, 3.0]).exp2().tolist()
        [1.0, 8.0]
        """
        return self._unary(Ops.EXP2)
    def log(self) -> "Tensor":
        """Natural log (nan for negatives, -inf at 0); float16/bfloat16 compute in float32.

        >>> Tensor([1.0, 2.718281828]).log().numpy().round(4)
        array([0., 1.], dtype=float32)
        """
        x = self._widened()
        return (x.log2() * math.log(2)).cast(x._narrow_dtype(self))
    def log10(self) -> "Tensor":
        """Base-10 logarithm, elementwise.

        >>> Tensor([1.0, 100.0]).log10().numpy().round(4)
        array([0., 2.], dtype=float32)
        """
        return self.log2() * math.log10(2)
    def exp(self) -> "Tensor":
        """e**x as EXP2(x * log2 e): codegen recognizes that pattern and computes e**x to <= 1 ulp
        (codegen/transcendental.xexp; rounding x * log2 e first would cost 52 ulp at x = 70).
        float16/bfloat16 compute in float32 and round once.

        >>> Tensor([0.0, 1.0]).exp().numpy().round(4)
        array([1.    , 2.7183], dtype=float32)
        """
        x = self._widened()
        constant = x.uop.base
        if constant.op is Ops.CONST and isinstance(constant.arg, float) and x.requires_grad is not True:
            # a constant folds (x * log2 e rounded first) before codegen could see the pattern: fold e**x here
            folded = x.const_like(_exp_of_float(constant.arg), x._narrow_dtype(self))   # rounded once
            if x.requires_grad is False: return folded
            # gradient() may still target the constant (Tensor.full((3,), 0.5) is one): keep the way back to it
            return Tensor(UOp(Ops.CUSTOM, folded.dtype, (folded.uop, x.uop), _exp_gradient), requires_grad=None)
        return (x * (1 / math.log(2))).exp2().cast(x._narrow_dtype(self))
    def _float(self) -> "Tensor": return self if dtypes.is_float(self.dtype) else self.cast(least_upper_float(self.dtype))
    def sqrt(self) -> "Tensor":
        """Square root (nan for negatives).

        >>> Tensor([4.0, 9.0]).sqrt().tolist()
        [2.0, 3.0]
        """
        return self._unary(Ops.SQRT)
    def rsqrt(self) -> "Tensor":
        """1 / sqrt(x), elementwise.

        >>> Tensor([4.0, 16.0]).rsqrt().tolist()
        [0.5, 0.25]
        """
        return self.sqrt().reciprocal()
    def sin(self) -> "Tensor":
        """sin x, elementwise.

        >>> Tensor([0.0, 1.5707964]).sin().numpy().round(4)
        array([0., 1.], dtype=float32)
        """
        return self._unary(Ops.SIN)
    def cos(self) -> "Tensor":
        """cos x, accurate to ~1 ulp for every finite float32 x (see ``cos_uop``).

        >>> Tensor([0.0, 3.1415927]).cos().numpy().round(4)
        array([ 1., -1.], dtype=float32)
        """
        x = self._widened()
        return Tensor(cos_uop(x.uop), requires_grad=x.requires_grad).cast(x._narrow_dtype(self))
    def tan(self) -> "Tensor":
        """tan x = sin x / cos x from one shared range reduction (see ``tan_uop``).

        >>> Tensor([0.0, 0.7853982]).tan().numpy().round(4)
        array([0., 1.], dtype=float32)
        """
        x = self._widened()
        return Tensor(tan_uop(x.uop), requires_grad=x.requires_grad).cast(x._narrow_dtype(self))
    def _widened(self) -> "Tensor":
        """self as a float tensor to compute math in: float16 and bfloat16 widen to float32 (one
        rounding at the end instead of one per step, like torch)."""
        x = self._float()
        return x.cast(dtypes.float32) if x.dtype in _NARROW_FLOATS else x
    def _narrow_dtype(self, original: "Tensor") -> DType:
        """The dtype a result computed on ``original._widened()`` (self) is returned in."""
        return original._float().dtype
    def _signbit(self) -> "Tensor":
        """True where the sign bit is set (-0.0 and NaNs with the sign bit included)."""
        int_dtype = {2: dtypes.int16, 4: dtypes.int32, 8: dtypes.int64}[self.dtype.itemsize]
        return self.detach().bitcast(int_dtype) < 0
    def _odd_series(self, coefficients: tuple[float, ...]) -> "Tensor":
        """x + x * z * P(z), z = x*x, P's coefficients lowest order first: the form of an odd function
        near 0, exact to first order (tiny x gives x, -0.0 gives -0.0)."""
        z = self * self
        # +-0 is returned as is: -0 + (+0) would be +0 when P(0) < 0 (the derivative at 0 is 1 either way)
        return (self == 0).where(self, self + self * z * _horner(z, coefficients))
    def reciprocal(self) -> "Tensor":
        """1/x (ints become floats).

        >>> Tensor([2.0, 4.0]).reciprocal().tolist()
        [0.5, 0.25]
        """
        return self._unary(Ops.RECIPROCAL)
    def trunc(self) -> "Tensor":
        """Round toward zero (ints unchanged).

        >>> Tensor([1.7, -1.7]).trunc().tolist()
        [1.0, -1.0]
        """
        return self if not dtypes.is_float(self.dtype) else self._apply(Ops.TRUNC)
    def floor(self) -> "Tensor":
        """Round down to the nearest integer (keeps the float dtype).

        >>> Tensor([1.7, -1.2]).floor().tolist()
        [1.0, -2.0]
        """
        if not dtypes.is_float(self.dtype): return self
        t = self.trunc()
        return (self < t).where(t - 1, t)
    def ceil(self) -> "Tensor":
        """Round up to the nearest integer (keeps the float dtype).

        >>> Tensor([1.2, -1.2]).ceil().tolist()
        [2.0, -1.0]
        """
        if not dtypes.is_float(self.dtype): return self
        t = self.trunc()
        return (self > t).where(t + 1, t)
    def round(self) -> "Tensor":
        """Round half to even, like numpy and torch.

        >>> Tensor([0.5, 1.5, 2.4]).round().tolist()
        [0.0, 2.0, 2.0]
        """
        if not dtypes.is_float(self.dtype): return self
        floor = self.floor()
        diff = self - floor
        half_even = (floor * 0.5).floor() * 2 == floor   # floor is even
        return (diff > 0.5).where(floor + 1, (diff < 0.5).where(floor, half_even.where(floor, floor + 1)))
    def isinf(self, detect_positive: bool = True, detect_negative: bool = True) -> "Tensor":
        """True where the value is +inf or -inf (select with ``detect_positive``/``detect_negative``).

        >>> Tensor([1.0, float('inf'), float('-inf')]).isinf().tolist()
        [False, True, True]
        """
        return (self == math.inf) * detect_positive + (self == -math.inf) * detect_negative if dtypes.is_float(self.dtype) else self._const(False, dtypes.bool)
    def isnan(self) -> "Tensor":
        """True where the value is NaN.

        >>> Tensor([1.0, float('nan')]).isnan().tolist()
        [False, True]
        """
        return self != self
    def isfinite(self) -> "Tensor":
        """True where the value is neither infinite nor NaN.

        >>> Tensor([1.0, float('inf'), float('nan')]).isfinite().tolist()
        [True, False, False]
        """
        return (self.isinf() | self.isnan()).logical_not()
    def square(self) -> "Tensor":
        """x * x, elementwise.

        >>> Tensor([-3, 2]).square().tolist()
        [9, 4]
        """
        return self * self
    def abs(self) -> "Tensor":
        """|x| (exact at 0).

        >>> Tensor([-2, 0, 3]).abs().tolist()
        [2, 0, 3]
        """
        if dtypes.is_unsigned(self.dtype) or self.dtype == dtypes.bool: return self
        return (self < 0).where(-self, self) if not dtypes.is_float(self.dtype) else self * self.sign()
    def sign(self) -> "Tensor":
        """-1, 0 or 1 (0 at 0; nan stays nan).

        >>> Tensor([-2.0, 0.0, 3.0]).sign().tolist()
        [-1.0, 0.0, 1.0]
        """
        if self.dtype == dtypes.bool: return self
        zero = self._const(0)
        one = self._const(1)
        signs = self.ne(0).where((self < 0).where(-one if not dtypes.is_unsigned(self.dtype) else one, one), zero)
        # nan stays nan (selected, not added as self * 0, which is nan for +-inf too)
        return self.isnan().where(self, signs) if dtypes.is_float(self.dtype) else signs
    def clip(self, min_: Any = None, max_: Any = None) -> "Tensor":
        """Limit values to [min_, max_].

        >>> Tensor([-2, 0, 5]).clip(-1, 3).tolist()
        [-1, 0, 3]
        """
        if min_ is None and max_ is None: raise RuntimeError("clip needs at least one of min_ and max_")
        # a select, not maximum/minimum: a value on the bound keeps gradient 1 (tinygrad's and torch's), not a tie's 0.5
        x = (self < min_).where(min_, self) if min_ is not None else self
        return (x > max_).where(max_, x) if max_ is not None else x
    def clamp(self, min_: Any = None, max_: Any = None) -> "Tensor":
        """Alias of ``clip``: limit values to ``[min_, max_]``.

        >>> Tensor([-2, 0, 5]).clamp(-1, 3).tolist()
        [-1, 0, 3]
        """
        return self.clip(min_, max_)
    def lerp(self, end: "Tensor", weight: Any) -> "Tensor":
        """Linear interpolation ``self + (end - self) * weight``.

        >>> Tensor([0.0, 10.0]).lerp(Tensor([10.0, 20.0]), 0.5).tolist()
        [5.0, 15.0]
        """
        return self + (end - self) * weight

    # ---------------------------------------------------------------- activations
    def relu(self) -> "Tensor":
        """max(x, 0) (nan stays nan).

        >>> Tensor([-1.0, 2.0]).relu().tolist()
        [0.0, 2.0]
        """
        return (self <= 0).where(self._const(0), self) if self.dtype != dtypes.bool else self
    def sigmoid(self) -> "Tensor":
        """1 / (1 + e**-x), computed so neither the value nor the gradient overflows: each side
        of x = 0 uses the form whose exponential is at most 1, so one exponential e = e**-|x| serves
        both (1 / (1 + e) for x >= 0, e / (1 + e) below; -|x| is built with a where so its slope at
        0 is -1, the side 1 / (1 + e) uses there).

        >>> Tensor([0.0]).sigmoid().tolist()
        [0.5]
        """
        x = self._widened()
        positive = x >= 0
        e = positive.where(-x, x).exp()   # e**-x for x >= 0, e**x below: at most 1
        # (one division: the same quotients as where(p, 1 / (1 + e), e / (1 + e)), which divided twice per element)
        return (positive.where(1.0, e) / (1 + e)).cast(x._narrow_dtype(self))
    def logsigmoid(self) -> "Tensor":
        """log(sigmoid(x)), computed stably.

        >>> Tensor([0.0]).logsigmoid().numpy().round(4)
        array([-0.6931], dtype=float32)
        """
        return -(-self).softplus()
    def hardsigmoid(self, alpha: float = 1 / 6, beta: float = 0.5) -> "Tensor":
        """max(0, min(1, alpha * x + beta)): a piecewise-linear sigmoid.

        >>> Tensor([-4.0, 0.0, 4.0]).hardsigmoid().tolist()
        [0.0, 0.5, 1.0]
        """
        x = self._widened()
        # torch's form for its defaults, clamp(x + 3, 0, 6) / 6 (same rounding); a clamp, not relu(y) - relu(y - 1),
        # which cancels to 0 for large x (1e10 gave 0, inf NaN)
        y = (x + 3)._clamp_flat(0, 6) / 6 if (alpha, beta) == (1 / 6, 0.5) else (alpha * x + beta)._clamp_flat(0, 1)
        return y.cast(x._narrow_dtype(self))
    def _clamp_flat(self, low: float, high: float) -> "Tensor":
        """``low`` at or below ``low``, ``high`` at or above ``high``, else x (NaN stays NaN). The gradient is 0 on
        the bounds, torch's rule for hardtanh/relu6/hardsigmoid (``clip`` passes it there, torch's clamp rule)."""
        return (self <= low).where(low, (self >= high).where(high, self))
    def tanh(self) -> "Tensor":
        """tanh: an odd series for |x| < 0.625 (relative accuracy down to tiny x, -0 stays -0),
        (1 - e)/(1 + e) with e = e**-2|x| <= 0.29 (no cancellation) above.

        >>> Tensor([0.0, 1.0]).tanh().numpy().round(4)
        array([0.    , 0.7616], dtype=float32)
        """
        x = self._widened()
        negative, magnitude = x._signbit(), x.abs()
        small = magnitude < 0.625
        series = small.where(x, 0)._odd_series(_TANH_SERIES)   # the unused side gets 0: no inf in the gradient
        e = (magnitude * -2).exp()
        large = (1 - e) / (1 + e)
        return small.where(series, negative.where(-large, large)).cast(x._narrow_dtype(self))
    def sinh(self) -> "Tensor":
        """sinh: an odd series for |x| < 1, else h*(h - h**-3)/2 with h = e**(|x|/2) (no overflow
        before sinh itself overflows, and no rounded |x| - ln 2).

        >>> Tensor([0.0, 1.0]).sinh().numpy().round(4)
        array([0.    , 1.1752], dtype=float32)
        """
        x = self._widened()
        return x._with_gradient(x.detach()._sinh_value(), _sinh_gradient).cast(x._narrow_dtype(self))
    def _sinh_value(self) -> "Tensor":
        negative, magnitude = self._signbit(), self.abs()
        small = magnitude < 1
        series = small.where(self, 0)._odd_series(_SINH_SERIES)
        h = (small.where(1, magnitude) * 0.5).exp()
        large = (h * 0.5) * (h - 1 / (h * h * h))
        return small.where(series, negative.where(-large, large))
    def cosh(self) -> "Tensor":
        """cosh = h*(h + h**-3)/2 with h = e**(|x|/2): finite wherever cosh is.

        >>> Tensor([0.0, 1.0]).cosh().numpy().round(4)
        array([1.    , 1.5431], dtype=float32)
        """
        x = self._widened()
        h = (x.detach().abs() * 0.5).exp()
        return x._with_gradient((h * 0.5) * (h + 1 / (h * h * h)), _cosh_gradient).cast(x._narrow_dtype(self))
    def atanh(self) -> "Tensor":
        """atanh x = sign(x)/2 * log1p(2|x| / (1 - |x|)): no cancellation near 0 (tiny x gives x, -0
        stays -0); +-1 gives +-inf, |x| > 1 nan.

        >>> Tensor([0.0, 0.5]).atanh().numpy().round(4)
        array([0.    , 0.5493], dtype=float32)
        """
        x = self._widened()
        return x._with_gradient(x.detach()._atanh_value(), _atanh_gradient).cast(x._narrow_dtype(self))
    def _atanh_value(self) -> "Tensor":
        negative, magnitude = self._signbit(), self._magnitude()
        one = magnitude == 1
        inside = one.where(0, magnitude)
        result = one.where(math.inf, (2 * inside / (1 - inside))._log1p() * 0.5)
        return negative.where(-result, result)
    def asinh(self) -> "Tensor":
        """asinh x = sign(x) * log1p(|x| + x*x / (1 + sqrt(1 + x*x))) (accurate near 0, -0 stays -0),
        log|x| + ln 2 beyond 2**28 (where sqrt(1 + x*x) = |x| and x*x could overflow); +-inf gives +-inf.

        >>> Tensor([0.0, 1.0]).asinh().numpy().round(4)
        array([0.    , 0.8814], dtype=float32)
        """
        x = self._widened()
        negative, magnitude = x._signbit(), x._magnitude()
        large = magnitude > 2.0 ** 28
        a = large.where(0, magnitude)
        square = a * a
        small_result = (a + square / (1 + (square + 1).sqrt()))._log1p()
        result = large.where(large.where(magnitude, 1).log() + math.log(2), small_result)
        return negative.where(-result, result).cast(x._narrow_dtype(self))
    def acosh(self) -> "Tensor":
        """acosh x = log1p(t + sqrt(t*(2 + t))), t = x - 1 (exact near 1), log x + ln 2 beyond 2**28;
        nan below 1 and for nan.

        >>> Tensor([1.0, 2.0]).acosh().numpy().round(4)
        array([0.   , 1.317], dtype=float32)
        """
        x = self._widened()
        return x._with_gradient(x.detach()._acosh_value(), _acosh_gradient).cast(x._narrow_dtype(self))
    def _acosh_value(self) -> "Tensor":
        large = self > 2.0 ** 28
        t = (large | (self < 1)).where(0, self - 1)
        small_result = (t + (t * (t + 2)).sqrt())._log1p()
        result = large.where(large.where(self, 1).log() + math.log(2), small_result)
        return (self >= 1).where(result, math.nan)
    def _magnitude(self) -> "Tensor":
        """|x| with derivative sign(x), and 1 at +-0 (odd functions have f'(0) = 1-type slopes there)."""
        return self._signbit().where(-self, self)
    def _asin_parts(self) -> tuple["Tensor", "Tensor", "Tensor"]:
        """(signbit, |x| <= 1/2, p) with p = asin(|x|) for |x| <= 1/2, else p = asin(w) with
        w = sqrt((1 - |x|)/2) (exact argument: 1 - |x| is exact there), asin|x| = pi/2 - 2p."""
        negative = self._signbit()
        magnitude = negative.where(-self, self)       # derivative 1 at +-0, so asin'(0) = 1
        small = magnitude <= 0.5
        w = small.where(magnitude, (small.where(0.5, 1 - magnitude) * 0.5).sqrt())   # sqrt of a safe value
        return negative, small, w._odd_series(_ASIN_SERIES)
    def asin(self) -> "Tensor":
        """arcsin (nan outside [-1, 1]); -0 stays -0.

        >>> Tensor([0.0, 1.0]).asin().numpy().round(4)
        array([0.    , 1.5708], dtype=float32)
        """
        x = self._widened()
        negative, small, p = x._asin_parts()
        result = small.where(p, (math.pi / 2) - 2 * p)
        return negative.where(-result, result).cast(x._narrow_dtype(self))
    def acos(self) -> "Tensor":
        """arccos, without the cancellation of pi/2 - asin x next to |x| = 1.

        >>> Tensor([1.0, 0.0]).acos().numpy().round(4)
        array([0.    , 1.5708], dtype=float32)
        """
        x = self._widened()
        negative, small, p = x._asin_parts()
        result = small.where((math.pi / 2) - negative.where(-p, p), negative.where(math.pi - 2 * p, 2 * p))
        return result.cast(x._narrow_dtype(self))
    def atan(self) -> "Tensor":
        """arctan: |x| > 1 maps to 1/|x| (atan = pi/2 - atan(1/|x|), so +-inf gives +-pi/2), above
        tan(pi/8) to (t-1)/(t+1) (+ pi/4), then an odd series; -0 stays -0.

        >>> Tensor([0.0, 1.0]).atan().numpy().round(4)
        array([0.    , 0.7854], dtype=float32)
        """
        x = self._widened()
        negative = x._signbit()
        magnitude = negative.where(-x, x)
        big = magnitude > 1
        t = big.where(1 / big.where(magnitude, 1), magnitude)
        middle = t > 0.41421356237309503
        u = middle.where((t - 1) / (t + 1), t)
        result = middle.where(math.pi / 4, 0) + u._odd_series(_ATAN_SERIES)
        result = big.where((math.pi / 2) - result, result)
        return negative.where(-result, result).cast(x._narrow_dtype(self))
    def _negative_part(self) -> "Tensor":
        """x where x <= 0, else 0: feeds exp() in elu-style ops so the unused side can't overflow."""
        return (self > 0).where(0, self)
    def elu(self, alpha: float = 1.0) -> "Tensor":
        """x for x > 0, alpha * (e**x - 1) otherwise.

        >>> Tensor([-1.0, 1.0]).elu().numpy().round(4)
        array([-0.6321,  1.    ], dtype=float32)
        """
        x = self._widened()
        return (x > 0).where(x, alpha * x._negative_part().expm1()).cast(x._narrow_dtype(self))
    def celu(self, alpha: float = 1.0) -> "Tensor":
        """x for x > 0, alpha * (e**(x/alpha) - 1) otherwise.

        >>> Tensor([-1.0, 1.0]).celu().numpy().round(4)
        array([-0.6321,  1.    ], dtype=float32)
        """
        x = self._widened()
        # torch multiplies by 1/alpha (rounded) rather than dividing
        return (x > 0).where(x, alpha * (x._negative_part() * (1 / alpha)).expm1()).cast(x._narrow_dtype(self))
    def selu(self, alpha: float = _SELU_ALPHA, gamma: float = _SELU_SCALE) -> "Tensor":
        """gamma * elu(x, alpha) with the self-normalizing constants (PyTorch's exact ones by default; tinygrad's
        defaults are 1.67326 and 1.0507). Like torch, x <= 0 gives expm1(x) * (alpha * gamma), that product
        rounded once in the compute dtype.

        >>> Tensor([-1.0, 1.0]).selu().numpy().round(4)
        array([-1.1113,  1.0507], dtype=float32)
        """
        x = self._widened()
        from fusegrad.dtype import truncate_float
        f32 = functools.partial(truncate_float, dtype=dtypes.float32)   # torch's float opmath multiplies float32 values
        negative_scale = alpha * gamma if x.dtype == dtypes.float64 else f32(f32(alpha) * f32(gamma))
        return (x > 0).where(gamma * x, x._negative_part().expm1() * negative_scale).cast(x._narrow_dtype(self))
    def swish(self) -> "Tensor":
        """x * sigmoid(x); float16/bfloat16 compute in float32 and round once.

        >>> Tensor([0.0, 1.0]).swish().numpy().round(4)
        array([0.    , 0.7311], dtype=float32)
        """
        x = self._widened()
        return (x * x.sigmoid()).cast(x._narrow_dtype(self))
    def silu(self) -> "Tensor":
        """x * sigmoid(x) (also called swish).

        >>> Tensor([0.0, 1.0]).silu().numpy().round(4)
        array([0.    , 0.7311], dtype=float32)
        """
        return self.swish()
    def relu6(self) -> "Tensor":
        """min(max(x, 0), 6).

        >>> Tensor([-1.0, 3.0, 8.0]).relu6().tolist()
        [0.0, 3.0, 6.0]
        """
        x = self._widened()
        return x._clamp_flat(0, 6).cast(x._narrow_dtype(self))   # (relu(x) - relu(x - 6) cancelled: 1e8 gave 8)
    def hardswish(self) -> "Tensor":
        """x * relu6(x + 3) / 6, torch's form and rounding (inf gives inf, -inf NaN).

        >>> Tensor([0.0, 1.0, 4.0]).hardswish().numpy().round(4)
        array([0.    , 0.6667, 4.    ], dtype=float32)
        """
        x = self._widened()
        return (x * (x + 3)._clamp_flat(0, 6) / 6).cast(x._narrow_dtype(self))   # (gradient 0 at -3, 1 at 3: torch's)
    def hardtanh(self, min_val: float = -1, max_val: float = 1) -> "Tensor":
        """Clip to ``[min_val, max_val]`` (default [-1, 1]).

        >>> Tensor([-2.0, 0.5, 2.0]).hardtanh().tolist()
        [-1.0, 0.5, 1.0]
        """
        return self.clip(min_val, max_val)
    def erf(self) -> "Tensor":
        """Error function: x*E(x*x) for |x| < 1 (relative accuracy near 0, -0 stays -0), else
        1 - e**(-x*x) * erfcx(|x|) with erfcx by a polynomial in |x| - 1.5 on [1, 2] and in 1/|x| on
        [2, 6] (erf is 1 in float64 beyond 6).

        >>> Tensor([0.0, 1.0]).erf().numpy().round(4)
        array([0.    , 0.8427], dtype=float32)
        """
        x = self._widened()
        negative, magnitude = x._signbit(), x.abs()
        small, middle = magnitude < 1, magnitude < 2
        xs = small.where(x, 0)
        series = xs * _horner(xs * xs, _ERF_SERIES)
        clipped = magnitude.minimum(6.0)
        inverse = 1 / middle.where(2, clipped)
        erfcx = middle.where(_horner(clipped - 1.5, _ERFCX_NEAR), inverse * _horner(inverse, _ERFCX_FAR))
        large = 1 - (-(clipped * clipped)).exp() * erfcx
        return small.where(series, negative.where(-large, large)).cast(x._narrow_dtype(self))
    def gelu(self, approximate: str = "tanh") -> "Tensor":
        """GELU. ``approximate="tanh"`` (tinygrad's default) is the tanh formula; ``"none"`` is the exact
        ``x * Phi(x)`` through erf.

        >>> Tensor([-1.0, 1.0]).gelu().numpy().round(4)
        array([-0.1588,  0.8412], dtype=float32)
        """
        # 0.5*(1 + tanh u) = sigmoid(2u): no cancellation for negative x (1 + tanh u rounds to 0 there)
        if approximate == "tanh":
            x = self._widened()
            return (x * (2 * math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)).sigmoid()).cast(x._narrow_dtype(self))
        if approximate == "none": return 0.5 * self * (1 + (self * (1 / math.sqrt(2))).erf())
        raise RuntimeError(f"gelu: approximate must be 'tanh' or 'none', got {approximate!r}")
    def quick_gelu(self) -> "Tensor":
        """x * sigmoid(1.702 x), a fast GELU approximation.

        >>> Tensor([-1.0, 1.0]).quick_gelu().numpy().round(4)
        array([-0.1542,  0.8458], dtype=float32)
        """
        return self * (self * 1.702).sigmoid()
    def leaky_relu(self, neg_slope: float = 0.01) -> "Tensor":
        """x for x > 0, else ``neg_slope * x``.

        >>> Tensor([-1.0, 2.0]).leaky_relu(0.1).numpy().round(4)
        array([-0.1,  2. ], dtype=float32)
        """
        return (self < 0).where(neg_slope * self, self)
    def leakyrelu(self, neg_slope: float = 0.01) -> "Tensor":
        """Alias of ``leaky_relu``.

        >>> Tensor([-1.0, 2.0]).leakyrelu(0.1).numpy().round(4)
        array([-0.1,  2. ], dtype=float32)
        """
        return self.leaky_relu(neg_slope)
    def mish(self) -> "Tensor":
        """x * tanh(softplus(x)); float16/bfloat16 compute in float32 and round once.

        >>> Tensor([0.0, 1.0]).mish().numpy().round(4)
        array([0.    , 0.8651], dtype=float32)
        """
        x = self._widened()
        return (x * x.softplus().tanh()).cast(x._narrow_dtype(self))
    def softplus(self, beta: float = 1.0) -> "Tensor":
        """log(1 + e**(beta x)) / beta: max(bx, 0) + log1p(e**-|bx|), so large x gives x and very
        negative x gives e**(bx) (not 0).

        >>> Tensor([0.0]).softplus().numpy().round(4)
        array([0.6931], dtype=float32)
        """
        x = self._widened()
        bx = x * beta
        return ((bx.maximum(0) + (-bx.abs()).exp()._log1p()) * (1 / beta)).cast(x._narrow_dtype(self))
    def _log1p(self) -> "Tensor":
        """log(1 + x) for x >= 0, accurate for tiny x: log(u) * x / (u - 1) with u = 1 + x rounded
        corrects the rounding of u (Goldberg); x itself where u rounds to 1."""
        u = self + 1
        exact = u == 1
        return exact.where(self, u.log() * self / exact.where(1, u - 1))
    def expm1(self) -> "Tensor":
        """e**x - 1, accurate near 0 where ``exp(x) - 1`` cancels (1e-8 gives 1e-8, not 0), like ``torch.expm1``.
        float16/bfloat16 compute in float32 and round once. The gradient is e**x (the result + 1), torch's.

        >>> Tensor([0.0, 1e-10]).expm1().tolist()
        [0.0, 1.000000013351432e-10]
        """
        x = self._widened()
        value = x.detach()._expm1_value()
        if x.requires_grad is not False:
            value = Tensor(UOp(Ops.CUSTOM, value.dtype, (value.uop, x.uop), _expm1_gradient), requires_grad=x.requires_grad)
        return value.cast(x._narrow_dtype(self))
    def _expm1_value(self) -> "Tensor":
        """Kahan's expm1: (u - 1) * (x / log u) with u = e**x rounded; the factor x / log u corrects u's rounding
        error (the quotient (u - 1) / log u varies slowly in u). x itself where u rounds to 1 (-0 stays -0), -1 where
        u - 1 rounds to -1 (x = -inf too), inf where u overflows."""
        u = self.exp()
        u_minus_1 = u - 1
        one, minus_one, overflow = u == 1, u_minus_1 == -1, u == math.inf
        safe_log = (one | minus_one | overflow).where(1.0, u).log()
        ratio = (one | minus_one | overflow).where(1.0, self) / (one | minus_one | overflow).where(1.0, safe_log)
        result = one.where(self, minus_one.where(-1.0, u_minus_1 * ratio))
        return overflow.where(math.inf, result)
    def softsign(self) -> "Tensor":
        """x / (1 + |x|).

        >>> Tensor([-1.0, 3.0]).softsign().tolist()
        [-0.5, 0.75]
        """
        return self / (1 + self.abs())

    # ---------------------------------------------------------------- binary math
    def add(self, x: Any, reverse: bool = False) -> "Tensor":
        """x + y with broadcasting and dtype promotion.

        >>> Tensor([1, 2]).add(10).tolist()
        [11, 12]
        """
        return self._binary(Ops.ADD, x, reverse)
    def sub(self, x: Any, reverse: bool = False) -> "Tensor":
        """Elementwise difference (``self - x``), broadcasting.

        >>> Tensor([5, 6]).sub(1).tolist()
        [4, 5]
        """
        a, b = self._broadcasted(x, reverse)
        return a + (-b if b.dtype != dtypes.bool else b.neg())
    def mul(self, x: Any, reverse: bool = False) -> "Tensor":
        """Elementwise product (``self * x``), broadcasting.

        >>> Tensor([1, 2]).mul(3).tolist()
        [3, 6]
        """
        return self._binary(Ops.MUL, x, reverse)
    def div(self, x: Any, reverse: bool = False, rounding_mode: str | None = None) -> "Tensor":
        """True division (ints become floats); ``rounding_mode`` "trunc" or "floor".

        >>> Tensor([7.0, 1.0]).div(2).tolist()
        [3.5, 0.5]
        """
        if rounding_mode in ("trunc", "floor") and \
                (exact := self._with_big_int_literal("IDIV" if rounding_mode == "trunc" else "FLOORDIV", x, reverse)) is not None:
            return exact
        a, b = self._broadcasted(x, reverse)
        if rounding_mode is not None:
            if rounding_mode not in ("trunc", "floor"): raise RuntimeError(f"rounding_mode must be 'trunc' or 'floor', got {rounding_mode!r}")
            if dtypes.is_int(a.dtype):
                if rounding_mode == "trunc": return a._apply(Ops.IDIV, b)
                return a._floordiv_int(b)
            if rounding_mode == "floor": return a._floor_divide_float(b)
            return a._apply(Ops.FDIV, b).trunc()
        return self._true_divide(x, reverse)
    def _true_divide(self, x: Any, reverse: bool) -> "Tensor":
        """``self / x`` (``x / self`` with ``reverse``). The result's float dtype comes from the operands' dtypes (ints
        give the default float), and each operand becomes that float before the division: a Python number or a
        literal's tensor is never first stored in an int tensor's dtype (``uint8 / 256`` wrapped 256 to 0). A float16 or
        bfloat16 tensor divided by a Python number divides in float32 and rounds once (``half / 1e5``: 1e5 has no half)."""
        other_dtype = x.dtype if isinstance(x, Tensor) else dtypes.from_py(x) if isinstance(x, (bool, int, float)) else None
        strong = [d for d in (self.dtype, other_dtype) if d is not None and not dtypes.is_weak(d)]
        float_dtype = least_upper_float(least_upper_dtype(*strong)) if strong else dtypes.default_float
        compute_dtype = dtypes.float32 if float_dtype in (dtypes.float16, dtypes.bfloat16) and not isinstance(x, Tensor) else float_dtype
        other = x.cast(compute_dtype) if isinstance(x, Tensor) else x
        a, b = self.cast(compute_dtype)._broadcasted(other, reverse)
        return a._apply(Ops.FDIV, b).cast(float_dtype)
    def _floor_divide_float(self, b: "Tensor") -> "Tensor":
        """floor(a / b) of broadcast float tensors as PyTorch computes it (not floor of the rounded quotient, which
        is wrong next to integers and gives +-inf for an infinite a): the exact multiple a - fmod(a, b) divided by b,
        one less where the remainder's sign differs from b's, rounded to the nearest integer; a quotient of 0 takes
        the sign of a / b. a / b itself where b is 0, and a where a / b overflows for a finite a. No gradient (a step
        function; torch has none either). float16/bfloat16 round every step to their dtype, as torch does (only the
        exact remainder is computed in float32)."""
        a, d = self.detach(), b.detach()
        quotient = a / d
        remainder = a._widened()._apply(Ops.MOD, d._widened()).cast(a.dtype)
        exact_multiple = (quotient.isinf() & a.isinf().logical_not()).where(a, a - remainder)
        div = exact_multiple / d
        div = (remainder.ne(0) & (remainder < 0).ne(d < 0)).where(div - 1, div)
        floor = div.floor()
        floor = (div - floor > 0.5).where(floor + 1, floor)
        floor = (div == 0).where(quotient._signbit().where(-0.0, 0.0), floor)
        value = (d == 0).where(quotient, floor)
        if self.requires_grad is False and b.requires_grad is False: return value
        return Tensor(UOp(Ops.CUSTOM, value.dtype, (value.uop, self.uop, b.uop), _no_gradient), requires_grad=self._grad_flag(b))
    def _floordiv_int(self, b: "Tensor") -> "Tensor":
        q = self._apply(Ops.IDIV, b)
        adjust = (self._apply(Ops.MOD, b).ne(0)) & ((self < 0).ne(b < 0))
        return adjust.where(q - 1, q)
    def idiv(self, x: Any, reverse: bool = False) -> "Tensor":
        """Integer division truncating toward zero (C semantics).

        >>> Tensor([7, -7]).idiv(2).tolist()
        [3, -3]
        """
        if (exact := self._with_big_int_literal("IDIV", x, reverse)) is not None: return exact
        a, b = self._broadcasted(x, reverse)
        if not dtypes.is_int(a.dtype): raise TypeError(f"idiv needs integer tensors, got {a.dtype}")
        return a._apply(Ops.IDIV, b)
    def mod(self, x: Any, reverse: bool = False) -> "Tensor":
        """Python-style remainder (the sign of the divisor), like torch.remainder.

        >>> Tensor([-7, 7]).mod(3).tolist()
        [2, 1]
        """
        if (exact := self._with_big_int_literal("MOD", x, reverse)) is not None: return exact
        a, b = self._broadcasted(x, reverse)
        if dtypes.is_int(a.dtype):
            r = a._apply(Ops.MOD, b)
            return (r.ne(0) & ((r < 0).ne(b < 0))).where(r + b, r)
        return a._float_remainder(b, "floor")
    def fmod(self, x: Any) -> "Tensor":
        """C-style remainder (the sign of the dividend), like torch.fmod.

        >>> Tensor([-7, 7]).fmod(3).tolist()
        [-1, 1]
        """
        a, b = self._broadcasted(x)
        if dtypes.is_int(a.dtype): return a._apply(Ops.MOD, b)
        return a._float_remainder(b, "trunc")
    def _float_remainder(self, b: "Tensor", rounding: str) -> "Tensor":
        """fmod ("trunc") or torch.remainder ("floor": fmod plus b where the signs differ) of broadcast float
        tensors, exact: one Ops.MOD, which renders as C's fmod (a - b * (a // b) rounded twice: 1e8 % 3 gave 0 and
        x % inf NaN). float16/bfloat16 compute in float32 (the remainder is exact there too). The gradient is
        PyTorch's (_RemainderGradient)."""
        a, d = self.detach()._widened(), b.detach()._widened()
        r = a._apply(Ops.MOD, d)
        if rounding == "floor": r = (r.ne(0) & (r < 0).ne(d < 0)).where(r + d, r)
        value = r.cast(a._narrow_dtype(self))
        if self.requires_grad is False and b.requires_grad is False: return value
        return Tensor(UOp(Ops.CUSTOM, value.dtype, (value.uop, self.uop, b.uop), _RemainderGradient(rounding)),
                      requires_grad=self._grad_flag(b))
    def pow(self, x: Any, reverse: bool = False) -> "Tensor":
        """x ** y. Small integer exponents multiply; otherwise exp2(y * log2|x|) with the sign fixed.

        >>> Tensor([2.0, 3.0]).pow(2).tolist()
        [4.0, 9.0]
        """
        if isinstance(x, int) and not isinstance(x, bool) and x < 0 and not dtypes.is_float(self.dtype):
            # tinygrad's rule: an int result with a negative Python int exponent (or base) would be 1/n, not an int
            raise RuntimeError(f"the base needs to be float for a negative int constant ({x}), got a {self.dtype} tensor; cast it first")
        if not reverse and not isinstance(x, bool) and isinstance(x, (int, float)) and not dtypes.is_float(self.dtype):
            # the literal's kind decides the result's, as in every binary op: an int or bool tensor to a float power is
            # a float (``Tensor([100000]) ** 2.0`` is 1e10, not an int32 that wrapped), a bool tensor to an int power an int
            if isinstance(x, float): return self.cast(dtypes.default_float).pow(x)
            if self.dtype == dtypes.bool: return self.cast(dtypes.default_int).pow(x)
        if not reverse and isinstance(x, (int, float)) and not isinstance(x, bool):
            if not dtypes.is_float(self.dtype) or self.requires_grad is False:
                if (fast := self._pow_scalar(x)) is not None: return fast
            elif (fast := self.detach()._pow_scalar(x)) is not None:
                # products, sqrt and reciprocals give exact values, but their chain-rule gradient is nan at 0 or
                # inf (inf * 0): the gradient is PyTorch's x * self**(x-1) instead (_PowGradient), like the general case below
                return Tensor(UOp(Ops.CUSTOM, fast.dtype, (fast.uop, self.uop), _PowGradient(x)), requires_grad=self.requires_grad)
        if not reverse and self._with_big_int_literal("CMPNE", x) is not None: return self._int_pow_literal(x)
        base, exponent = self._broadcasted(x, reverse)
        if dtypes.is_int(base.dtype) and dtypes.is_int(exponent.dtype): return base._int_pow(exponent)
        if base.requires_grad is False and exponent.requires_grad is False: return base._pow_value(exponent)
        # the value comes from exp2/log2 (with sign and special-case fixes), whose chain-rule gradient is nan
        # at a zero or infinite base; the gradients are PyTorch's formulas instead (_PowGradient)
        value = base.detach()._pow_value(exponent.detach())
        return Tensor(UOp(Ops.CUSTOM, value.dtype, (value.uop, base.uop, exponent.uop), _PowGradient(None)),
                      requires_grad=base._grad_flag(exponent))
    def _pow_scalar(self, x: int | float) -> "Tensor | None":
        """self ** x by multiplication, sqrt or reciprocal for the exponents that have such a form, else None."""
        if x == 0: return self.isfinite().where(self * 0, 0) + 1 if dtypes.is_float(self.dtype) else self._const(1)   # 1 for nan/inf too
        if x in (1, 2, 3): return functools.reduce(lambda a, _: a * self, range(int(x) - 1), self)
        if x == 0.5: return (self == -math.inf).where(math.inf, (self == 0).where(0.0, self.sqrt()))   # pow(-inf, .5) = inf, pow(-0, .5) = +0
        if x == -1: return self.reciprocal()
        if x < 0 and float(x).is_integer() and dtypes.is_float(self.dtype): return self.pow(-x).reciprocal()
        return None
    def _pow_value(self, exponent: "Tensor") -> "Tensor":
        """self ** exponent for broadcast float (or int base, float exponent) tensors, through exp2/log2.

        exp2(y * log2 x) in the result's own dtype is off by up to |y * log2 x| ulps of that product: log2 x rounds
        to 24 bits, and the result's relative error is the product's absolute error (float32 10**30 was 55 ulp off). So
        float32 computes in float64, whose product is exact enough that the result rounds once (within an ulp of the
        correctly rounded value), and float16/bfloat16 compute that float32 pow and round it once, as PyTorch does
        (``Tensor([10.], dtype=half) ** 3.14`` gave 1387, torch 1382). float64 keeps its own exp2/log2."""
        base = self
        base, exponent = base._float(), exponent.cast(least_upper_float(base.dtype))
        wider = {dtypes.float16: dtypes.float32, dtypes.bfloat16: dtypes.float32, dtypes.float32: dtypes.float64}.get(base.dtype)
        if wider is not None: return base.cast(wider)._pow_value(exponent.cast(wider)).cast(base.dtype)
        magnitude = (exponent * base.abs().log2()).exp2()
        is_int = exponent.trunc() == exponent            # true for +-inf too
        is_odd_int = is_int & (exponent.abs().mod(2) == 1)
        # IEEE 754 / C99 pow: an odd integer power keeps the sign of the base (-0 included); a finite
        # negative base with a finite non-integer exponent is nan; x**0, 1**y and (-1)**+-inf are 1
        result = (base._signbit() & is_odd_int).where(-magnitude, magnitude)
        result = ((base < 0) & (base > -math.inf) & is_int.logical_not() & exponent.isfinite()).where(math.nan, result)
        # base 1 with a finite exponent already gives exactly 1 with its gradient: only the nan/inf exponents are overridden
        one = (exponent == 0) | ((base == 1) & exponent.isfinite().logical_not()) | ((base == -1) & exponent.isinf())
        return one.where(1.0, result)
    def _int_pow_literal(self, exponent: int) -> "Tensor":
        """self ** exponent for an int tensor and a positive Python int too big for its dtype: square and
        multiply over the exponent's exact bits (wrapping like every int product), as tinygrad's result is."""
        result, square = self._const(1), self
        for bit in reversed(bin(exponent)[2:]):
            if bit == "1": result = result * square
            square = square * square
        return result
    def _int_pow(self, exponent: "Tensor") -> "Tensor":
        result, base, e = self._const(1), self, exponent
        for _ in range(64 if dtypes.concrete(self.dtype).itemsize == 8 else 32):
            result = (e.mod(2) == 1).where(result * base, result)
            base, e = base * base, e.idiv(2)
        return (exponent < 0).where(0, result)
    def maximum(self, x: Any) -> "Tensor":
        """Elementwise max (nan if either is nan).

        >>> Tensor([1, 5]).maximum(Tensor([3, 2])).tolist()
        [3, 5]
        """
        if (exact := self._with_big_int_literal("MAX", x)) is not None: return exact
        return self._binary(Ops.MAX, x)
    def minimum(self, x: Any) -> "Tensor":
        """Elementwise minimum of two tensors (broadcasting).

        >>> Tensor([1, 5]).minimum(Tensor([3, 2])).tolist()
        [1, 2]
        """
        if (exact := self._with_big_int_literal("MIN", x)) is not None: return exact
        a, b = self._broadcasted(x)
        return a._inverse().maximum(b._inverse())._inverse()
    def where(self, x: Any, y: Any) -> "Tensor":
        """``cond.where(a, b)``: a where cond is true, else b.

        >>> Tensor([True, False]).where(1, 2).tolist()
        [1, 2]
        """
        if self.dtype != dtypes.bool: raise RuntimeError(f"where needs a bool condition, got {self.dtype}")
        cond = self
        if not isinstance(x, Tensor) and not isinstance(y, Tensor):
            x, y = cond._to_tensor(x), cond._to_tensor(y)
        elif not isinstance(x, Tensor): x = y._to_tensor(x)
        elif not isinstance(y, Tensor): y = x._to_tensor(y)
        x, y = x._broadcasted(y)
        if cond.device != x.device:
            cond, x = _on_common_devices(cond, x)
            y = y.to(x.device) if y.device != x.device else y
        shape = _broadcast_shape(cond.shape, x.shape)
        return cond._broadcast_to(shape)._apply(Ops.WHERE, x._broadcast_to(shape), y._broadcast_to(shape), dtype=x.dtype)
    def copysign(self, other: Any) -> "Tensor":
        """The magnitude of this tensor with the sign of ``other``.

        >>> Tensor([1.0, 2.0]).copysign(Tensor([-1.0, 1.0])).tolist()
        [-1.0, 2.0]
        """
        # the sign bit, as torch reads it: -0.0 and a negative NaN count as negative (a Python number's is read here:
        # a NaN constant in a kernel loses its sign)
        if isinstance(other, (int, float)) and not isinstance(other, bool): return -self.abs() if math.copysign(1.0, other) < 0 else self.abs()
        other = other if isinstance(other, Tensor) else self._to_tensor(other)
        negative = other._signbit() if dtypes.is_float(other.dtype) else other < 0
        return negative.where(-self.abs(), self.abs())
    def logaddexp(self, other: Any) -> "Tensor":
        """log(exp(self) + exp(other)), computed stably.

        >>> Tensor([0.0]).logaddexp(Tensor([0.0])).numpy().round(4)
        array([0.6931], dtype=float32)
        """
        a, b = self._broadcasted(other)
        x, y = a._widened(), b._widened()
        # max + log1p(e**-|x - y|): no cancellation (e**-20 isn't lost adding it to 1 first); equal infinities are
        # themselves (their difference is NaN), torch's rule
        result = x.maximum(y) + (-(x - y).abs()).exp()._log1p()
        return ((x == y) & x.isinf()).where(x, result).cast(x._narrow_dtype(a))
    def bitwise_and(self, x: Any, reverse: bool = False) -> "Tensor":
        """Elementwise bitwise AND of integer or bool tensors.

        >>> Tensor([12]).bitwise_and(10).tolist()
        [8]
        """
        return self._bitwise(Ops.AND, x, reverse)
    def bitwise_or(self, x: Any, reverse: bool = False) -> "Tensor":
        """Elementwise bitwise OR of integer or bool tensors.

        >>> Tensor([12]).bitwise_or(3).tolist()
        [15]
        """
        return self._bitwise(Ops.OR, x, reverse)
    def bitwise_xor(self, x: Any, reverse: bool = False) -> "Tensor":
        """Elementwise bitwise XOR of integer or bool tensors.

        >>> Tensor([12]).bitwise_xor(10).tolist()
        [6]
        """
        return self._bitwise(Ops.XOR, x, reverse)
    def _bitwise(self, op: Ops, x: Any, reverse: bool = False) -> "Tensor":
        a, b = self._broadcasted(x, reverse)
        if not (dtypes.is_int(a.dtype) or a.dtype == dtypes.bool): raise RuntimeError(f"bitwise ops need int or bool tensors, got {a.dtype}")
        return a._apply(op, b)
    def bitwise_not(self) -> "Tensor":
        """Elementwise bitwise NOT (logical not for bool).

        >>> Tensor([0, 5]).bitwise_not().tolist()
        [-1, -6]
        """
        if self.dtype == dtypes.bool: return self.logical_not()
        if not dtypes.is_int(self.dtype): raise RuntimeError(f"bitwise_not needs an int or bool tensor, got {self.dtype}")
        return self ^ -1 if not dtypes.is_unsigned(self.dtype) else self ^ dtypes.max(self.dtype)
    def lshift(self, x: Any, reverse: bool = False) -> "Tensor":
        """``self << x``; with ``reverse``, ``x << self``.

        >>> Tensor([1, 3]).lshift(2).tolist()
        [4, 12]
        """
        self._check_shift("<<", x)
        return self._binary(Ops.SHL, x, reverse)
    def rshift(self, x: Any, reverse: bool = False) -> "Tensor":
        """``self >> x``; with ``reverse``, ``x >> self``.

        >>> Tensor([8, 12]).rshift(2).tolist()
        [2, 3]
        """
        self._check_shift(">>", x)
        return self._binary(Ops.SHR, x, reverse)
    def _check_shift(self, op: str, x: Any) -> None:
        """Shifts take ints on both sides (RuntimeError, like tinygrad's)."""
        shift_dtype = x.dtype if isinstance(x, Tensor) else dtypes.from_py(x) if isinstance(x, (bool, int, float)) else None
        for dtype in (self.dtype, shift_dtype):
            if dtype is not None and not dtypes.is_int(dtype): raise RuntimeError(f"{op} needs int operands, got {self.dtype} and {shift_dtype}")
    def ne(self, x: Any) -> "Tensor":
        """Elementwise ``!=`` (returns bool).

        >>> Tensor([1, 2]).ne(Tensor([1, 3])).tolist()
        [False, True]
        """
        return self._compare(Ops.CMPNE, x)
    def eq(self, x: Any) -> "Tensor":
        """Elementwise ``==`` (returns bool).

        >>> Tensor([1, 2]).eq(Tensor([1, 3])).tolist()
        [True, False]
        """
        return self._compare(Ops.CMPEQ, x)
    def isclose(self, other: Any, rtol: float = 1e-5, atol: float = 1e-8, equal_nan: bool = False) -> "Tensor":
        """Elementwise ``|self - other| <= atol + rtol * |other|`` (NaNs equal only with ``equal_nan``).

        >>> Tensor([1.0, 2.0]).isclose(Tensor([1.0, 2.1])).tolist()
        [True, False]
        """
        difference = self - other   # an infinite or nan difference is close only if the values are equal (inf == inf)
        tolerance = atol + rtol * (other.abs() if isinstance(other, Tensor) else abs(other))
        close = (self == other) | ((difference.abs() <= tolerance) & difference.isfinite())
        if equal_nan: close = close | (self.isnan() & (other.isnan() if isinstance(other, Tensor) else (other != other)))
        return close
    def allclose(self, other: Any, rtol: float = 1e-5, atol: float = 1e-8, equal_nan: bool = False) -> "Tensor":
        """A 0-d bool tensor: are all elements close (``isclose``)? Lazy like tinygrad's; ``bool()`` or
        ``.item()`` of it gives the Python answer.

        >>> Tensor([1.0, 2.0]).allclose(Tensor([1.0, 2.0 + 1e-9])).item()
        True
        """
        return self.isclose(other, rtol, atol, equal_nan).all()

    # ---------------------------------------------------------------- operators
    def __neg__(self): return self.neg()
    def __add__(self, x): return self.add(x)
    def __radd__(self, x): return self.add(x, True)
    def __sub__(self, x): return self.sub(x)
    def __rsub__(self, x): return self.sub(x, True)
    def __mul__(self, x): return self.mul(x)
    def __rmul__(self, x): return self.mul(x, True)
    def __truediv__(self, x): return self.div(x)
    def __rtruediv__(self, x): return self.div(x, True)
    def __floordiv__(self, x): return self.div(x, rounding_mode="floor")
    def __rfloordiv__(self, x): return self.div(x, True, rounding_mode="floor")
    def __mod__(self, x): return self.mod(x)
    def __rmod__(self, x): return self.mod(x, True)
    def __pow__(self, x): return self.pow(x)
    def __rpow__(self, x): return self.pow(x, True)
    def __matmul__(self, x): return self.matmul(x)
    def __rmatmul__(self, x): return self.matmul(x, True)
    def __and__(self, x): return self._bitwise(Ops.AND, x)
    def __rand__(self, x): return self._bitwise(Ops.AND, x, True)
    def __or__(self, x): return self._bitwise(Ops.OR, x)
    def __ror__(self, x): return self._bitwise(Ops.OR, x, True)
    def __xor__(self, x): return self._bitwise(Ops.XOR, x)
    def __rxor__(self, x): return self._bitwise(Ops.XOR, x, True)
    def __invert__(self): return self.bitwise_not()
    def __lshift__(self, x): return self.lshift(x)
    def __rshift__(self, x): return self.rshift(x)
    def __rlshift__(self, x): return self.lshift(x, True)
    def __rrshift__(self, x): return self.rshift(x, True)
    def __lt__(self, x): return self._compare(Ops.CMPLT, x)
    def __gt__(self, x): return self._compare(Ops.CMPLT, x, True)
    def __le__(self, x): return self._compare(Ops.CMPLT, x) | self._compare(Ops.CMPEQ, x)
    def __ge__(self, x): return self._compare(Ops.CMPLT, x, True) | self._compare(Ops.CMPEQ, x)
    def __eq__(self, x): return self._compare(Ops.CMPEQ, x)  # type: ignore[override]
    def __ne__(self, x): return self._compare(Ops.CMPNE, x)  # type: ignore[override]
    def __iadd__(self, x): return self.assign(self + x)
    def __isub__(self, x): return self.assign(self - x)
    def __imul__(self, x): return self.assign(self * x)
    def __itruediv__(self, x): return self.assign(self / x)
    def __ipow__(self, x): return self.assign(self ** x)
    def __imatmul__(self, x): return self.assign(self @ x)
    def __iand__(self, x): return self.assign(self & x)
    def __ior__(self, x): return self.assign(self | x)
    def __ixor__(self, x): return self.assign(self ^ x)

    # ---------------------------------------------------------------- linear algebra
    def dot(self, w: "Tensor", acc_dtype: DType | None = None, dtype: DType | None = None) -> "Tensor":
        """Matrix product with numpy broadcasting rules for batches: ``a.dot(b)`` / ``a @ b``.

        >>> Tensor([[1, 2], [3, 4]]).dot(Tensor([1, 1])).tolist()
        [3, 7]
        """
        x = self
        if x.ndim == 0 or w.ndim == 0: raise RuntimeError(f"matmul needs at least 1-d tensors, got shapes {x.shape} and {w.shape}")
        contract_x, contract_w = x.shape[-1], w.shape[-min(w.ndim, 2)]
        if contract_x != contract_w: raise RuntimeError(f"matmul shape mismatch: {x.shape} @ {w.shape} ({contract_x} != {contract_w})")
        x = x.reshape(*x.shape[:-1], *[1] * min(x.ndim - 1, w.ndim - 1, 1), x.shape[-1])
        w = w.reshape(*w.shape[:-2], *[1] * min(x.ndim - 1, w.ndim - 1, 1), *w.shape[-min(w.ndim, 2):]).transpose(-1, -min(w.ndim, 2))
        return (x * w).sum(-1, acc_dtype=acc_dtype, dtype=dtype).cast(least_upper_dtype(x.dtype, w.dtype) if dtype is None else dtype)
    def matmul(self, x: "Tensor", reverse: bool = False, acc_dtype: DType | None = None, dtype: DType | None = None) -> "Tensor":
        """Matrix product with broadcasting over batch dims (``self @ x``).

        >>> Tensor([[1, 2], [3, 4]]).matmul(Tensor([[1], [1]])).tolist()
        [[3], [7]]
        """
        return x.dot(self, acc_dtype=acc_dtype, dtype=dtype) if reverse else self.dot(x, acc_dtype=acc_dtype, dtype=dtype)

    # ---------------------------------------------------------------- tinygrad 0.14 API additions
    def empty_like(self, dtype: DType | str | None = None, device: str | tuple | None = None, **kwargs) -> "Tensor":
        """An uninitialized tensor of ``self``'s shape (and dtype/device unless given).

        >>> Tensor.empty_like(Tensor([[1, 2]])).shape
        (1, 2)
        """
        dtype = to_dtype(dtype) if dtype is not None else dtypes.concrete(self.dtype)
        device = self.device if device is None else device
        # a multi-device empty has no buffer of its own to leave uninitialized: zeros are a valid "empty"
        if isinstance(device, tuple): return Tensor.full(self.shape, 0, dtype=dtype, device=device, **kwargs)
        return Tensor.empty(*self.shape, dtype=dtype, device=device, **kwargs)
    def const_like(self, value: ConstType, dtype: DType | str | None = None) -> "Tensor":
        """A constant tensor of ``self``'s shape and device, in ``self``'s dtype unless ``dtype`` is given.

        >>> Tensor([1, 2]).const_like(7).tolist()
        [7, 7]
        """
        return Tensor.full(self.shape, value, dtype=to_dtype(dtype) if dtype is not None else self.dtype, device=self.device)
    def _target_shape(self, shape: Any, args: tuple, name: str) -> tuple:
        target = argfix(shape, *args)
        if len(target) != self.ndim: raise ValueError(f"{name}: shape {target} has {len(target)} dims, the tensor has {self.ndim} ({self.shape})")
        return target
    def shrink_to(self, shape: Any, *args: Any) -> "Tensor":
        """Keep the first ``shape[i]`` entries of each dim (None keeps a dim whole): ``t.shrink_to(2, None)``.

        >>> Tensor([[1, 2, 3], [4, 5, 6]]).shrink_to(1, 2).tolist()
        [[1, 2]]
        """
        target = self._target_shape(shape, args, "shrink_to")
        return self.shrink(tuple(None if size is None else (0, size) for size in target))
    def pad_to(self, shape: Any, *args: Any, value: ConstType = 0) -> "Tensor":
        """Pad at the end of each dim up to ``shape`` (None keeps a dim) with ``value``: ``t.pad_to(4, None)``.

        >>> Tensor([1, 2]).pad_to(4).tolist()
        [1, 2, 0, 0]
        """
        target = self._target_shape(shape, args, "pad_to")
        for have, want in zip(self.shape, target):
            if want is not None and resolve(want < have): raise ValueError(f"pad_to: target shape {target} is smaller than {self.shape}")
        padding = tuple(None if want is None else (0, want - have) for have, want in zip(self.shape, target))
        return self if all(p is None or p == (0, 0) for p in padding) else self.pad(padding, value=value)
    def normalize(self, p: float = 2.0, dim: int = 1, eps: float = 1e-12) -> "Tensor":
        """Divide by the Lp norm along ``dim``, at least ``eps`` (``torch.nn.functional.normalize``). ``p=0``
        counts the non-zero entries; ``p=inf`` is the largest absolute value.

        >>> Tensor([[3.0, 4.0]]).normalize(dim=1).numpy().round(4)
        array([[0.6, 0.8]], dtype=float32)
        """
        if p == 0: norm = (self != 0).sum(dim, keepdim=True).cast(least_upper_float(self.dtype))
        elif p == math.inf: norm = self.abs().max(dim, keepdim=True)
        else: norm = self.abs().pow(p).sum(dim, keepdim=True).pow(1 / p)
        return self / norm.maximum(eps)
    def softmin(self, axis: int = -1, dtype: DType | None = None) -> "Tensor":
        """``softmax(-x)``: weights that favour the smallest entries.

        >>> Tensor([0.0, 0.0]).softmin().tolist()
        [0.5, 0.5]
        """
        return (-self).softmax(axis, dtype)
    def newton_schulz(self, steps: int, params: tuple, eps: float = 1.0e-7) -> "Tensor":
        """Approximately orthogonalize the last two dims with ``steps`` iterations of the odd polynomial
        ``sum_i params[i] * (G G^T)^i G``, after scaling G to unit Frobenius norm (Muon's update).

        >>> Tensor.manual_seed(0); Tensor.randn(3, 3).newton_schulz(5, (3.4445, -4.775, 2.0315)).shape
        (3, 3)
        """
        if self.ndim < 2: raise ValueError(f"newton_schulz needs at least a 2-d tensor, got shape {self.shape}")
        if not params: raise ValueError("newton_schulz needs at least one polynomial coefficient")
        # work on the wide orientation so the Gram matrix G G^T is the small one
        if resolve(self.shape[-2] > self.shape[-1]): return self.transpose(-2, -1).newton_schulz(steps, params, eps).transpose(-2, -1)
        g = self / (self.square().sum(axis=(-2, -1), keepdim=True).sqrt() + eps)
        for _ in range(steps):
            gram = g @ g.transpose(-2, -1)
            term, total = g, params[0] * g
            for coefficient in params[1:]:
                term = gram @ term
                total = total + coefficient * term
            g = total
        return g

    # ---------------------------------------------------------------- tinygrad 0.14 API, round 3 (issue 36):
    # param marking, invalids, the raw RNG primitives and Keccak hashing
    @property
    def is_param(self) -> bool:
        """tinygrad 0.14's mark of a trainable tensor: an optimizer updates its ``is_param`` tensors and only
        realizes the others (BatchNorm's running statistics). In fusegrad it is ``requires_grad is not False``,
        so both spellings mark the same tensors.

        >>> Tensor([1.0]).is_param, Tensor([1.0], requires_grad=False).is_param
        (True, False)
        """
        return self.requires_grad is not False
    @is_param.setter
    def is_param(self, value: bool) -> None:
        # marking a tensor a param again leaves an explicit requires_grad=True as it is
        if not value: self.requires_grad = False
        elif self.requires_grad is False: self.requires_grad = None
    def is_param_(self, is_param: bool = True) -> "Tensor":
        """Set ``is_param`` in place and return ``self`` (tinygrad's ``Tensor.zeros(3).is_param_(False)``).

        >>> Tensor.zeros(3).is_param_(False).requires_grad
        False
        """
        self.is_param = is_param
        return self
    def as_param(self, slot: int) -> "Tensor":
        """A placeholder shaped like ``self`` (same shape, dtype, device and sharding) for argument ``slot`` of a
        traced function. tinygrad makes a PARAM node that a CALL binds; fusegrad has no CALL nodes, so the
        placeholder is an uninitialized tensor (tinygrad's unbound PARAM has no defined contents either).

        >>> Tensor([[1, 2]]).as_param(0).shape
        (1, 2)
        """
        if not isinstance(slot, int) or isinstance(slot, bool) or slot < 0:
            raise ValueError(f"as_param needs a non-negative int slot, got {slot!r}")
        if isinstance(self.device, tuple):   # sharded like self: each device gets an empty shard
            return Tensor.empty(*self.shape, dtype=self.dtype, device=self.device).shard(self.device, self.uop.axis)
        return Tensor.empty(*self.shape, dtype=self.dtype, device=self.device)
    @staticmethod
    def invalids(*shape, device: str | tuple | None = None, dtype: DType | str | None = None) -> "Tensor":
        """A tensor whose values are Invalid (undefined): an anonymous buffer to be written later, like
        ``Tensor.empty``. As in tinygrad 0.14 the dtype defaults to bool (the dtype of the Invalid constant).

        >>> t = Tensor.invalids(2, 3); t.shape, t.dtype
        ((2, 3), dtypes.bool)
        """
        return Tensor.empty(*Tensor._shape_arg(shape), device=device, dtype=dtypes.bool if dtype is None else to_dtype(dtype))
    def threefry(self, seed: "Tensor") -> "Tensor":
        """The Threefry-2x32 block cipher (20 rounds): each uint64 of ``self`` (high word << 32 | low word) encrypted
        under the uint64 key ``seed`` (broadcast); tinygrad 0.14's Ops.THREEFRY, the same values.

        >>> Tensor([0], dtype=dtypes.uint64).threefry(Tensor(0, dtype=dtypes.uint64)).dtype
        dtypes.ulong
        """
        if not isinstance(seed, Tensor): raise TypeError(f"threefry needs a Tensor seed, got {type(seed).__name__}")
        if self.dtype != dtypes.uint64 or seed.dtype != dtypes.uint64:
            raise RuntimeError(f"threefry works on uint64 blocks and a uint64 key, got {self.dtype} and {seed.dtype}")
        x, key = self._broadcasted(seed)
        return Tensor(UOp(Ops.THREEFRY, dtypes.uint64, (x.uop, key.uop)), requires_grad=False)
    @staticmethod
    def random_bits(key: "Tensor", counter: "Tensor", num: int) -> "Tensor":
        """``num`` random uint32 words of the Threefry stream for ``key`` (uint32 [2]: low, high) at ``counter``
        (uint32 [2]: the low and high words of a 64-bit count). As in tinygrad 0.14, and as ``rand`` draws: each
        chunk of up to 2**32-1 words gets its own key, the cipher of ``counter + chunk start`` under ``key``, and
        its words are the cipher of the counts 0..ceil(n/2)-1 (then the high words of the same blocks).

        >>> Tensor.random_bits(Tensor([1, 2], dtype=dtypes.uint32), Tensor([0, 0], dtype=dtypes.uint32), 3).shape
        (3,)
        """
        if not isinstance(num, int) or num < 0: raise ValueError(f"random_bits needs a non-negative int num, got {num!r}")
        low, high = counter[0:1], counter[1:2]
        chunks, chunk_max = [], 0xFFFFFFFF
        for start in range(0, num, chunk_max):
            size = min(num - start, chunk_max)
            chunk_low = low + (start & 0xFFFFFFFF)
            # the carry of the low word's wrap-around into the high word
            chunk_high = high + (start >> 32) + (chunk_low < low).cast(dtypes.uint32)
            key0, key1 = _threefry2x32(chunk_low, chunk_high, key[0:1], key[1:2])
            half = ceildiv(size, 2)
            counts = Tensor.arange(half, device=key.device, dtype=dtypes.uint32)
            words0, words1 = _threefry2x32(counts, counts + half, key0, key1)
            chunks.append(words0.cat(words1)[:size])
        if not chunks: return counter[0:0]
        return chunks[0].cat(*chunks[1:])
    def keccak(self, cfg: str | tuple[int, int] = "sha3_256") -> "Tensor":
        """The Keccak hash of each row of the last dimension (of its bytes: any dtype is hashed as its memory),
        as tinygrad 0.14 computes it: ``cfg`` is "sha3_256" (default, 32 bytes like hashlib.sha3_256),
        "sha3_224" (28 bytes), "shake_128" (the first 16 bytes of hashlib.shake_128) or (rate, domain byte).
        Returns uint8 of shape ``self.shape[:-1] + (digest bytes,)``.

        >>> bytes(Tensor(b"abc").keccak().tolist()).hex()[:16]
        '3a985da74fe225b2'
        """
        rate, domain = _KECCAK_CONFIGS[cfg] if isinstance(cfg, str) else cfg
        if not 0 < rate < 200 or rate % 8: raise ValueError(f"keccak rate must be a multiple of 8 in (0, 200), got {rate}")
        data = self.bitcast(dtypes.uint8) if self.dtype != dtypes.uint8 else self
        rows = data.reshape(prod(data.shape[:-1]), data.shape[-1])
        digest = _keccak_sponge(rows, rate, domain)[:, :(200 - rate) // 2]
        return digest.reshape(*data.shape[:-1], (200 - rate) // 2)
    def hash(self) -> "Tensor":  # type: ignore[override]
        """tinygrad 0.14's 16-byte tree hash of the tensor's bytes: the bytes are padded with zeros to whole
        1 MiB chunks; each chunk is cut in 4096-byte rows, each row hashed with SHAKE-128 (16 bytes), and the
        4096 bytes of row digests of a chunk hashed again with SHAKE-128; the chunk digests, concatenated, are
        hashed the same way until one chunk is left. (This replaces Python's object hash only when called as
        ``t.hash()``: ``hash(t)`` still uses ``__hash__``.)

        >>> Tensor([1, 2, 3], dtype=dtypes.uint8).hash().shape
        (16,)
        """
        data = self.flatten().bitcast(dtypes.uint8) if self.dtype != dtypes.uint8 else self.flatten()
        if not isinstance(data.shape[0], int): raise RuntimeError("hash needs a concrete shape")
        chunks = ceildiv(data.shape[0], _HASH_CHUNK)
        while chunks > 1:
            data = _hash_chunks(data.pad_to(chunks * _HASH_CHUNK).reshape(chunks, _HASH_CHUNK)).flatten()
            chunks = ceildiv(chunks * 16, _HASH_CHUNK)
        return _hash_chunks(data.pad_to(_HASH_CHUNK).unsqueeze(0)).flatten()[:16]

def _symbolic_scalar(value: UOp, dtype: DType | None, device: str | None) -> UOp:
    """``Tensor(v)``, ``Tensor(v * 4)``: a 0-d tensor holding the value of bound Variables, weak int
    unless ``dtype`` is given. Every Variable in it must be bound: the value is read when it runs."""
    bound = {b.src[0] for b in value.toposort if b.op is Ops.BIND}
    if (unbound := [v.arg[0] for v in value.toposort if v.op is Ops.DEFINE_VAR and v not in bound]):
        raise RuntimeError(f"unbound Variable {unbound[0]!r} used as a tensor value: bind it first (Variable(...).bind(value))")
    return UOp.const(dtypes.weakint, value, device, ()).cast(dtype or dtypes.weakint)

def _holds(small: Any, large: Any) -> bool:
    """``small <= large`` for sizes that may be symbolic: decided from the variables' bounds, and
    assumed to hold when the bounds can't decide it (tinygrad's rule for shape checks)."""
    if isinstance(small, int) and isinstance(large, int): return small <= large
    return resolve(sint_to_uop(large - small) >= 0, True)

def _on_common_devices(x: "Tensor", y: "Tensor") -> tuple["Tensor", "Tensor"]:
    """Operands of one op on different devices: a single-device one is copied to the other's devices when that one
    is multi-device (each shard takes the part it needs); two single-device (or two multi-device) operands on
    different devices are a RuntimeError (tinygrad's type)."""
    if isinstance(x.device, tuple) == isinstance(y.device, tuple):
        raise RuntimeError(f"tensors are on different devices: {x.device} and {y.device}")
    return (x, y.to(x.device)) if isinstance(x.device, tuple) else (x.to(y.device), y)

def _int_sizes(shape: tuple, allow_bool: bool = False) -> tuple:
    """``shape`` with plain int sizes (numpy integers are ints; symbolic sizes stay), or RuntimeError (tinygrad's) for
    a float or bool size, which would fail later, far from its cause. (tinygrad's constructors take a bool as 0 or 1.)"""
    if all(type(s) is int for s in shape): return shape
    for s in shape:
        if (isinstance(s, bool) and not allow_bool) or not isinstance(s, (numbers.Integral, UOp)):
            raise RuntimeError(f"shape must be int, got {s!r} in {shape}")
    return tuple(s if isinstance(s, UOp) else int(s) for s in shape)

def _holds_now(small: Any, large: Any) -> bool:
    """``small <= large`` with every bound variable at its bound value (unbound variables: assumed to hold)."""
    values = [_bound_value(v) if isinstance(v, UOp) and _fully_bound(v) else v for v in (small, large)]
    if all(isinstance(v, int) for v in values): return values[0] <= values[1]
    return True

def _fully_bound(size: UOp) -> bool:
    bound = {x.src[0] for x in size.toposort if x.op is Ops.BIND}
    return all(x in bound for x in size.toposort if x.op is Ops.DEFINE_VAR)

def _bound_value(size: UOp) -> int:
    """The current value of a size made of bound variables."""
    from fusegrad.uop.ops import sym_infer
    binds = {x.src[0]: x.src[1].arg for x in size.toposort if x.op is Ops.BIND}
    return sym_infer(unbind_variables(size), binds)

def _is_realized_uop(u: UOp) -> bool:
    """A view of an allocated buffer or a constant (a multi-device tensor: every shard is)."""
    if u.op is Ops.MULTI: return all(not isinstance(s.device, tuple) and _is_realized_uop(s) for s in u.src)
    if (base := u.base).op is Ops.BUFFER and (buffer := BUFFERS.get(base)) is not None and buffer.is_allocated(): return True
    return const_value(u) is not None and not dtypes.is_weak(u.dtype)

def _like_sharding(grad: UOp, target: UOp) -> UOp:
    """A multi-device target's gradient split the same way as the target."""
    if not isinstance(target.device, tuple): return grad
    from fusegrad.schedule.multi import match_sharding
    return match_sharding(grad, target)

def _canonical_device(device: str | tuple | list | None) -> str | tuple[str, ...]:
    """A canonical device name, or a tuple of them for a multi-device tensor."""
    if isinstance(device, (tuple, list)):
        if len(device) == 0: raise ValueError("a device tuple needs at least one device")
        return tuple(Device.canonicalize(d) for d in device)
    return Device.canonicalize(device)

def _is_plain(u: UOp) -> bool:
    return u.op is Ops.BUFFER or (u.op is Ops.RESHAPE and u.src[0].op is Ops.BUFFER)

def _storage_dtype(dtype: DType) -> DType:
    """The unsigned int with ``dtype``'s bits, for types numpy can't hold (bfloat16, fp8)."""
    return {1: dtypes.uint8, 2: dtypes.uint16, 4: dtypes.uint32, 8: dtypes.uint64}[dtype.itemsize]

def _tensor_from_pickle(values: Any, dtype: DType, device: str | tuple, axis: int | None, requires_grad: bool | None) -> Tensor:
    """Rebuild a tensor pickled by ``Tensor.__reduce__``."""
    stored_dtype = dtype if dtype.fmt is not None else _storage_dtype(dtype)
    single = device[0] if isinstance(device, tuple) else device
    t = Tensor(values, dtype=stored_dtype, device=single)
    if stored_dtype != dtype: t = t.bitcast(dtype)
    if isinstance(device, tuple): t = t.shard(device, axis)
    t = t.realize()
    t.requires_grad = requires_grad
    return t

def _u32_broadcast(u: UOp, shape: tuple) -> UOp:
    """``u`` reshaped with leading 1s and expanded to ``shape`` (Tensor._broadcast_to without the checks)."""
    if u.shape == shape: return u
    return u.reshape((1,) * (len(shape) - len(u.shape)) + u.shape).expand(shape)

def _threefry2x32(x0: Tensor, x1: Tensor, key0: Tensor, key1: Tensor) -> tuple[Tensor, Tensor]:
    """The Threefry-2x32 block cipher (20 rounds) on uint32 tensors: the block (x0, x1) encrypted under the key
    (key0, key1), all uint32 tensors that broadcast; returns the two output words.

    One Ops.THREEFRY node on the uint64 packings of the block and the key (high word << 32 | low word, tinygrad's
    form), and a cast and a shift to read the words back: codegen expands the rounds (codegen/threefry.py), once
    per kernel. (Built as ~100 uint32 UOps per call, a draw spent milliseconds in Python building its graph.)"""
    shape = _broadcast_shape(x0.shape, x1.shape, key0.shape, key1.shape)
    device = x0.device
    thirty_two = _u32_broadcast(UOp.const(dtypes.uint64, 32, device, ()), shape)
    def packed(low: Tensor, high: Tensor) -> UOp:
        low64, high64 = (_u32_broadcast(t.uop, shape).cast(dtypes.uint64) for t in (low, high))
        return UOp(Ops.OR, dtypes.uint64, (UOp(Ops.SHL, dtypes.uint64, (high64, thirty_two)), low64))
    out = UOp(Ops.THREEFRY, dtypes.uint64, (packed(x0, x1), packed(key0, key1)))
    return Tensor(out.cast(dtypes.uint32)), Tensor(UOp(Ops.SHR, dtypes.uint64, (out, thirty_two)).cast(dtypes.uint32))

def _uint32_words_as(words: Tensor, unsigned: DType) -> Tensor:
    """The bytes of a 1-d uint32 tensor read as another unsigned type (little-endian, as a bitcast of the
    memory would): uint16/uint8 split each word, uint64 joins pairs of words."""
    if unsigned == dtypes.uint32: return words
    if unsigned == dtypes.uint64:
        pairs = words.reshape(-1, 2).cast(dtypes.uint64)
        return pairs[:, 0] | (pairs[:, 1] << 32)
    pieces = 4 // unsigned.itemsize
    mask, width = (1 << 8 * unsigned.itemsize) - 1, 8 * unsigned.itemsize
    parts = [(words >> (width * i)) & mask for i in range(pieces)]
    return Tensor.stack(*parts, dim=1).reshape(-1).cast(unsigned)

def _box_muller(uniform0: Tensor, uniform1: Tensor) -> Tensor:
    """Standard normals from two float32 uniforms in [0, 1): cos(2 pi u0) * sqrt(-2 log(1 - u1)), as tinygrad draws
    them (the same stream gives the same normals)."""
    angle = (uniform0 * (2 * math.pi)).uop
    # (a COS whose arg bounds the angle, below 2 pi: codegen reduces it the cheaper way, see transcendental._cos)
    return Tensor(UOp(Ops.COS, dtypes.float32, (angle,), 2 * math.pi)) * ((1 - uniform1).log() * -2).sqrt()

def _bits_to_unit_interval(bits: Tensor, count: int, dtype: DType) -> Tensor:
    """``count`` floats of ``dtype`` in [0, 1) from uint32 random words: each float's top mantissa bits
    are random bits under the exponent of 1.0, so the value is ``1.x - 1`` (uniform on a 2**-mantissa grid)."""
    exponent, mantissa = dtypes.finfo(dtype)
    unsigned = {1: dtypes.uint8, 2: dtypes.uint16, 4: dtypes.uint32, 8: dtypes.uint64}[dtype.itemsize]
    bias = (1 << (exponent - 1)) - (0 if "fnuz" in dtype.name else 1)   # fnuz types have one more
    one_bits = bias << mantissa                                           # 1.0: biased exponent 0, mantissa 0
    words = _uint32_words_as(bits, unsigned)
    return ((words >> (8 * dtype.itemsize - mantissa)) | one_bits).bitcast(dtype)[:count] - 1

def _is_reshaped_buffer(u: UOp) -> bool:
    """Is ``u`` a BUFFER or only RESHAPEs of one (the way a tensor holds a whole buffer)?"""
    while u.op is Ops.RESHAPE: u = u.src[0]
    return u.op is Ops.BUFFER

def _holder_reached(node: UOp, holders: set[UOp]) -> UOp | None:
    """The first of ``holders`` that ``node``'s graph reads other than through a DETACH."""
    stack, seen = [node], set()
    while stack:
        if (u := stack.pop()) in seen: continue
        seen.add(u)
        if u in holders: return u
        if u.op is not Ops.DETACH: stack.extend(u.src)
    return None

def _rebase_on_holder(view: UOp, holder: UOp) -> UOp:
    """``view`` (movement ops over the buffer ``holder`` reshapes) with its whole-buffer part read through ``holder``."""
    if _is_reshaped_buffer(view): return view if view is holder else holder.reshape(view.shape)
    return view.replace(src=(_rebase_on_holder(view.src[0], holder),) + view.src[1:])

def _keep_tensor_views(becomes: dict[UOp, UOp], tensor_uops: list[UOp]) -> dict[UOp, UOp]:
    """``becomes`` with the graphs that simplified to a view of an existing buffer held by a live
    tensor (``x.reshape(6) * 1`` is x's own buffer) reading it through that tensor's uop.

    Why: a tensor that isn't the bare BUFFER (a BUFFER is flat, so 0-d and n-d tensors hold it
    through a RESHAPE) would otherwise lose its place in every graph realized to its buffer, and
    with it the gradient through those graphs: autograd keys leaves by node."""
    # the buffers the schedule mapped a (non-assign) graph to: only their holders matter, and the
    # tensor scan below looks only for those (it runs on every realize, over every live tensor)
    wanted: set[UOp] = set()
    assign_op, buffer_op = Ops.ASSIGN, Ops.BUFFER
    for node, new in becomes.items():
        if node.op is assign_op or (base := new.base).op is not buffer_op: continue
        # a buffer the graph doesn't contain (one this schedule made: an eager op's output) has no holder the graph
        # reaches (_holder_reached below), so it needs no scan of the live tensors. (Asked only where the graph's
        # walk is cached, as it is for every root: walking each realized intermediate here would cost more.)
        if (ancestors := node.__dict__.get("_ancestors")) is not None and base not in ancestors: continue
        wanted.add(base)
    if not wanted: return becomes
    holders: dict[UOp, set[UOp]] = {}    # BUFFER -> the live tensors' reshapes of it
    reshape = Ops.RESHAPE   # (a local: an Ops member lookup is a slow class attribute on Python 3.11)
    for u in tensor_uops:
        if u.op is not reshape: continue
        base = u.src[0]
        while base.op is reshape: base = base.src[0]
        if base in wanted: holders.setdefault(base, set()).add(u)
    if not holders: return becomes
    kept = dict(becomes)
    for node, new in becomes.items():
        if node.op is Ops.ASSIGN or new.base not in holders or new in holders[new.base]: continue
        if not all(v.op in GroupOp.Movement or v is new.base for v in new.toposort): continue
        # the holder the graph read (not through a DETACH: then the value carries no gradient)
        if (holder := _holder_reached(node, holders[new.base])) is not None: kept[node] = _rebase_on_holder(new, holder)
    return kept

def _apply_becomes(becomes: dict[UOp, UOp]) -> list[UOp]:
    """After scheduling, point every live tensor at the buffers (or constants) its graph became.

    A tensor's graph is swapped for a buffer, but autograd must still see how the value was
    computed: for buffers whose float graph depends on a live tensor (one with requires_grad=True,
    or any float tensor, which ``gradient()`` may target), the graph is recorded as the buffer's
    origin (gradient.record_origins), which backward() and gradient() follow. Nothing is recorded
    under ``Tensor.no_grad``, for tensors with requires_grad=False, or for the graphs a backward()
    with requires_grad=True tensors released. Returns the recorded origins."""
    if not becomes: return []
    tensors = _live_tensors()
    old_uops = [t.uop for t in tensors]
    becomes = _keep_tensor_views(becomes, old_uops)
    # This loop runs over every live tensor on every realize (eager code: every op), so the common
    # case, a realized tensor (a buffer, a constant or a view of a buffer), costs a few attribute
    # reads. (Ops members are read into locals: on Python 3.11 each Ops.X is a slow class lookup.)
    buffer_op, const_op, movement = Ops.BUFFER, Ops.CONST, GroupOp.Movement
    pending: list[tuple[Tensor, UOp]] = []
    for t, u in zip(tensors, old_uops):
        if u not in becomes:
            op = u.op
            if op is buffer_op or op is const_op: continue
            if op in movement:
                base = u.src[0]
                while base.op in movement: base = base.src[0]
                if base.op is buffer_op: continue
        pending.append((t, u))
    # which lazy graphs read a realized node, and their new graphs: one walk over all of them (a layer's tensors share
    # most nodes, rebuilt once); an eager op's only pending tensor is the realized one, which needs no walk
    lazy = [u for _, u in pending if u not in becomes]
    rebuilt = dict(zip(lazy, UOp.substitute_many(lazy, becomes))) if lazy else {}
    changed: list[tuple[Tensor, UOp]] = []
    for t, u in pending:
        new = becomes[u] if u in becomes else rebuilt[u]
        t.uop = new
        if new is not u: changed.append((t, u))
        # a graph that stays pending is asked again at the next realize: its ancestry, cached now, answers then
        # without a walk (100 lazy draws realized one by one: each realize would walk every draw still pending)
        else: u.toposort
    if Tensor.no_grad: return []
    changed = [(t, u) for t, u in changed if t.requires_grad is not False and not getattr(t, "_backward_done", False)]
    if not changed: return []
    # the leaves record_origins asks about are nodes of the changed graphs: only those tensors are looked at
    in_graphs: set[UOp] = set()
    for _, u in changed:
        in_graphs.update(u._ancestors)
        in_graphs.add(u)
    grad_leaves, value_tensors = set(), {}
    for t, u in zip(tensors, old_uops):
        if u not in in_graphs: continue
        if t.requires_grad is True: grad_leaves.add(u)
        if dtypes.is_float(t.dtype): value_tensors.setdefault(u, []).append(t)
    recorded = record_origins(becomes, [u for _, u in changed], grad_leaves, set(value_tensors), [t.uop for t, _ in changed])
    if recorded:
        # origins kept only for gradient() hold their inputs only while a tensor they differentiate to lives
        # (gradient.anchor_value_origins): a loop `x = (x + 1).realize()` doesn't keep every step's buffer
        recorded_ids = {id(origin) for origin in recorded}
        buffers = list(dict.fromkeys(new.base for new in becomes.values() if id(origin_of(new.base)) in recorded_ids))
        anchor_value_origins(buffers, grad_leaves, value_tensors, lambda: {t.uop for t in tensors})
        recorded = [origin for b in buffers if (origin := origin_of(b)) is not None]
    return recorded

# ---------------------------------------------------------------- Keccak (Tensor.keccak / Tensor.hash, round 3 of issue 36)
# https://keccak.team/keccak_specs_summary.html. The state is a (rows, 25) uint64 tensor; lane x + 5y is A[x, y].

# name -> (rate in bytes, domain separation byte)
_KECCAK_CONFIGS = {"sha3_224": (144, 0x06), "sha3_256": (136, 0x06), "shake_128": (168, 0x1F)}
_HASH_CHUNK = 2 ** 20   # Tensor.hash's chunk: 256 rows of 4096 bytes

def _keccak_round_constants() -> list[int]:
    """ι's 24 constants from the spec's LFSR rc(t) (x^8 + x^6 + x^5 + x^4 + 1): bit 2^j - 1 of round i is rc(j + 7i)."""
    def rc(t: int) -> int:
        r = 1
        for _ in range(t % 255):
            r <<= 1
            if r & 0x100: r ^= 0x171
        return r & 1
    return [sum(rc(j + 7 * i) << (2 ** j - 1) for j in range(7)) for i in range(24)]

def _keccak_rotations() -> list[int]:
    """ρ's rotation of each lane (index x + 5y): walking (x, y) -> (y, 2x + 3y) from (1, 0), step t rotates by (t+1)(t+2)/2."""
    rotations, x, y = [0] * 25, 1, 0
    for t in range(24):
        rotations[x + 5 * y] = (t + 1) * (t + 2) // 2 % 64
        x, y = y, (2 * x + 3 * y) % 5
    return rotations

def _keccak_pi_sources() -> list[int]:
    """π moves lane (x, y) to (y, 2x + 3y): the source lane of each destination lane."""
    sources = [0] * 25
    for x in range(5):
        for y in range(5): sources[y + 5 * ((2 * x + 3 * y) % 5)] = x + 5 * y
    return sources

_KECCAK_RC, _KECCAK_ROT, _KECCAK_PI = _keccak_round_constants(), _keccak_rotations(), _keccak_pi_sources()

def _rotl64(lanes: Tensor, amounts: Tensor) -> Tensor:
    """uint64 rotate left by per-lane ``amounts`` (0..63); an amount of 0 gives ``x | x`` (no shift by 64)."""
    return (lanes << amounts) | (lanes >> ((64 - amounts) % 64))

def _keccak_f1600(state: Tensor) -> Tensor:
    """The 24-round Keccak-f[1600] permutation of each (25,) uint64 row. Each round is stored (contiguous): fused
    across rounds, every lane would be recomputed from its several reads, growing 5x per round."""
    rows, device = state.shape[0], state.device
    rotations = Tensor(_KECCAK_ROT, dtype=dtypes.uint64, device=device)
    for constant in _KECCAK_RC:
        a = state.reshape(rows, 5, 5)                       # [row, y, x]
        # θ: each lane ^= parity(column x-1) ^ rotl(parity(column x+1), 1)
        parity = a[:, 0] ^ a[:, 1] ^ a[:, 2] ^ a[:, 3] ^ a[:, 4]
        a = a ^ (parity.roll(1, 1) ^ _rotl64(parity.roll(-1, 1), parity.const_like(1))).unsqueeze(1)
        # ρ and π: rotate each lane, then move it
        rotated = _rotl64(a.reshape(rows, 25), rotations)
        b = Tensor.cat(*[rotated[:, s:s + 1] for s in _KECCAK_PI], dim=1).reshape(rows, 5, 5)
        # χ: lane ^= ~next lane & the one after (along x); ι: lane (0, 0) ^= the round constant
        a = b ^ (~b.roll(-1, 2) & b.roll(-2, 2))
        iota = Tensor([constant] + [0] * 24, dtype=dtypes.uint64, device=device)
        state = (a.reshape(rows, 25) ^ iota).contiguous()
    return state

def _keccak_sponge(rows: Tensor, rate: int, domain: int) -> Tensor:
    """Absorb each uint8 row (multi-rate padding: ``domain`` after the message, 0x80 in the block's last byte)
    and return the (rows, 200) uint8 state; the digest is its first bytes (every digest here is shorter than rate)."""
    count, length = rows.shape
    blocks = length // rate + 1
    pad = [0] * (blocks * rate)
    pad[length] ^= domain
    pad[-1] ^= 0x80
    padded = rows.pad_to(count, blocks * rate) ^ Tensor(pad, dtype=dtypes.uint8, device=rows.device)
    # each block as 25 uint64 lanes: its rate bytes, then zeros for the capacity
    lanes = padded.reshape(count, blocks, rate).pad_to(count, blocks, 200).bitcast(dtypes.uint64)
    state = Tensor.zeros(count, 25, dtype=dtypes.uint64, device=rows.device)
    for block in range(blocks): state = _keccak_f1600(state ^ lanes[:, block])
    return state.bitcast(dtypes.uint8)

def _hash_chunks(chunks: Tensor) -> Tensor:
    """Tensor.hash's step: each (2**20,) uint8 chunk -> 16 bytes (SHAKE-128 of its 256 SHAKE-128 row digests)."""
    count = chunks.shape[0]
    return chunks.reshape(-1, 4096).keccak("shake_128").reshape(count, -1).keccak("shake_128")
