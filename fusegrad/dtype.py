"""Data types, the promotion lattice and the accumulation rules.

A ``DType`` is a small frozen record (priority, itemsize, name, struct format, vector count).
Promotion follows tinygrad: ``least_upper_dtype`` finds the lowest common ancestor in a lattice
(bool → int8 → ... → float64). Python literals get *weak* dtypes (``weakint``, ``weakfloat``)
that adopt the other operand's dtype and become ``default_int`` / ``default_float`` on their own.

>>> least_upper_dtype(dtypes.int8, dtypes.uint8)
dtypes.short
>>> least_upper_dtype(dtypes.int32, dtypes.weakfloat) == dtypes.default_float
True
"""
from __future__ import annotations
import functools, math, struct, threading, weakref
import dataclasses
from dataclasses import dataclass
from typing import Any, Final

ConstType = float | int | bool

# fields -> the live dtype with them (weak: a dtype nothing uses any more, such as a pointer of a one-off size, goes)
_INTERNED_DTYPES: "weakref.WeakValueDictionary[tuple, DType]" = weakref.WeakValueDictionary()
_INTERN_LOCK = threading.Lock()

class _InternedDType(type):
    """Constructing a DType (or PtrDType, ImageDType) returns the existing instance with the same fields, if one is
    alive. Equal dtypes are then one object, so DType keeps object's identity ``==`` and ``hash``: both are C slots,
    where a Python ``__hash__`` ran on every UOp built (its interning key holds the dtype) and every dict lookup."""
    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        created = super().__call__(*args, **kwargs)
        # (locked: two threads building the same dtype must get one object, or they would compare unequal)
        with _INTERN_LOCK: return _INTERNED_DTYPES.setdefault(created._fields(), created)

@dataclass(frozen=True, eq=False)
class DType(metaclass=_InternedDType):
    """One scalar or vector type. ``dtypes.float32.vec(4)`` is a float4 used by vectorized code.

    Instances are interned (``_InternedDType``): ``==`` and ``hash`` are identity, which is field equality."""
    priority: int
    itemsize: int
    name: str
    fmt: str | None
    count: int = 1
    _scalar: "DType | None" = None

    # the interning key: every field, and the class (a PtrDType never equals the DType it points to)
    def _fields(self) -> tuple: return (type(self).__name__, self.priority, self.itemsize, self.name, self.fmt, self.count, self._scalar)
    def __reduce__(self):
        # rebuild through the constructor: it returns the live (interned) dtype of the loading process
        return type(self), tuple(getattr(self, f.name) for f in dataclasses.fields(self))

    def __repr__(self) -> str:
        # tinygrad 0.14's spelling: the C-style alias where there is one (dtypes.float, dtypes.half, dtypes.int ...)
        if self.count > 1: return f"{self.scalar()!r}.vec({self.count})"
        return f"dtypes.{INVERSE_NAMES.get(self, self.name)}"
    def __lt__(self, other: "DType") -> bool:
        return (self.priority, self.itemsize, self.name, self.count) < (other.priority, other.itemsize, other.name, other.count)
    @property
    def base(self) -> "DType": return self
    @property
    def vcount(self) -> int: return self.count
    @functools.cache
    def vec(self, size: int) -> "DType":
        """The vector type with ``size`` lanes of this scalar type."""
        assert self.count == 1, f"can't vectorize {self} with size {size}"
        if size == 1: return self
        return DType(self.priority, self.itemsize * size, f"{self.name}{size}", None, size, self)
    def scalar(self) -> "DType": return self._scalar if self._scalar is not None else self
    def ptr(self, size: int = -1, local: bool = False) -> "PtrDType":
        return PtrDType(self.priority, self.itemsize, self.name, self.fmt, self.count, None, self, local, size)
    @property
    def nbytes(self) -> int: raise RuntimeError("use .itemsize for a DType")

    # tinygrad 0.14's DType API: bounds and bit width as properties, ``const`` and ``new``
    @property
    def bitsize(self) -> int:
        """Bits per element: ``dtypes.half.bitsize == 16``; a bool is 1 bit (stored in a byte)."""
        return 1 if self == dtypes.bool else 8 * self.itemsize
    @property
    def min(self) -> ConstType:
        """Smallest value: ``dtypes.int8.min == -128``, ``-inf`` for floats, False for bool."""
        return dtypes.min(self)
    @property
    def max(self) -> ConstType:
        """Largest value: ``dtypes.uint8.max == 255``, ``inf`` for floats, True for bool."""
        return dtypes.max(self)
    def const(self, value: Any) -> ConstType:
        """``value`` as a constant of this dtype holds it (ints wrap like C, floats become float)."""
        return dtypes.as_const(value, self)
    @staticmethod
    def new(priority: int, bitsize: int, name: str, fmt: str | None) -> "DType":
        """A scalar dtype from its bit width (tinygrad's constructor; ``DType(...)`` takes bytes)."""
        return DType(priority, (bitsize + 7) // 8, name, fmt)

@dataclass(frozen=True, eq=False)
class PtrDType(DType):
    """A pointer to a buffer of ``_base`` in global (or local, shared) memory with ``size`` elements."""
    _base: DType = None  # type: ignore[assignment]
    local: bool = False
    size: int = -1
    def _fields(self) -> tuple: return super()._fields() + (self._base, self.local, self.size)
    @property
    def base(self) -> DType: return self._base
    def __repr__(self) -> str: return f"{self._base!r}.ptr({self.size}{', local=True' if self.local else ''})"

@dataclass(frozen=True, eq=False)
class ImageDType(PtrDType):
    """An OpenCL image (kept for API compatibility; fusegrad's CPU backends never create one)."""
    shape: tuple[int, ...] = ()
    def _fields(self) -> tuple: return super()._fields() + (self.shape,)

@functools.cache
def _default_dtype(value: "DType | str", kind: str) -> "DType":
    """The dtype a DEFAULT_FLOAT / DEFAULT_INT setting names ("" is float32 / int32), checked to be of its kind."""
    if isinstance(value, str) and value == "": return dtypes.float32 if kind == "float" else dtypes.int32
    dtype = value if isinstance(value, DType) else to_dtype(value)
    if not (dtypes.is_float(dtype) if kind == "float" else dtypes.is_int(dtype)) or dtypes.is_weak(dtype) or dtype == dtypes.index:
        raise ValueError(f"DEFAULT_{kind.upper()}={value} is not a usable {kind} dtype")
    return dtype

def _default_dtype_property(kind: str) -> property:
    """``dtypes.default_<kind>``: reads the DEFAULT_<KIND> context variable; assigning sets it (checked by _default_dtype)."""
    def variable():
        import fusegrad.helpers   # imported when used: this module loads no other fusegrad module
        return getattr(fusegrad.helpers, f"DEFAULT_{kind.upper()}")
    def getter(cls) -> "DType": return _default_dtype(variable().value, kind)
    def setter(cls, dtype: "DType | str") -> None: variable().value = _default_dtype(dtype, kind)
    return property(getter, setter)

class _DefaultDtypes(type):
    """``dtypes.default_float`` / ``dtypes.default_int`` read the DEFAULT_FLOAT / DEFAULT_INT context variables (their
    environment variables, or ``Context(DEFAULT_FLOAT="float16")``), like tinygrad's. Assigning them sets the
    variable, for code written for older tinygrad (``dtypes.default_float = dtypes.half``)."""
    default_float = _default_dtype_property("float")
    default_int = _default_dtype_property("int")
    def __dir__(cls) -> list[str]: return sorted(set(super().__dir__()) | {"default_float", "default_int"})

class dtypes(metaclass=_DefaultDtypes):
    """Every dtype fusegrad knows, plus helpers (``is_float``, ``min``, ``max``, ``finfo`` ...)."""
    void: Final = DType(-1, 0, "void", None)
    bool: Final = DType(0, 1, "bool", "?")
    int8: Final = DType(1, 1, "signed char", "b")
    uint8: Final = DType(2, 1, "unsigned char", "B")
    int16: Final = DType(3, 2, "short", "h")
    uint16: Final = DType(4, 2, "unsigned short", "H")
    int32: Final = DType(5, 4, "int", "i")
    uint32: Final = DType(6, 4, "unsigned int", "I")
    int64: Final = DType(7, 8, "long", "q")
    uint64: Final = DType(8, 8, "unsigned long", "Q")
    fp8e4m3: Final = DType(9, 1, "float8_e4m3", None)
    fp8e5m2: Final = DType(10, 1, "float8_e5m2", None)
    fp8e4m3fnuz: Final = DType(9, 1, "float8_e4m3fnuz", None)
    fp8e5m2fnuz: Final = DType(10, 1, "float8_e5m2fnuz", None)
    float16: Final = DType(11, 2, "half", "e")
    bfloat16: Final = DType(12, 2, "__bf16", None)
    float32: Final = DType(13, 4, "float", "f")
    float64: Final = DType(14, 8, "double", "d")
    # weak dtypes of Python literals: they take the other operand's dtype
    weakint: Final = DType(5, 4, "weakint", "i")
    weakfloat: Final = DType(13, 4, "weakfloat", "f")
    # index arithmetic inside kernels (narrowed to int32 when bounds allow)
    index: Final = DType(-2, 8, "index", "q")

    # aliases
    half = float16; float = float32; double = float64
    uchar = uint8; ushort = uint16; uint = uint32; ulong = uint64
    char = int8; short = int16; int = int32; long = int64
    fp8e4m3fn = fp8e4m3

    fp8s: Final = (fp8e4m3, fp8e5m2, fp8e4m3fnuz, fp8e5m2fnuz)
    floats: Final = fp8s + (float16, bfloat16, float32, float64)
    uints: Final = (uint8, uint16, uint32, uint64)
    sints: Final = (int8, int16, int32, int64)
    ints: Final = uints + sints
    # tinygrad's groupings, for code that iterates over them
    fp8_ocp: Final = (fp8e4m3, fp8e5m2)
    fp8_fnuz: Final = (fp8e4m3fnuz, fp8e5m2fnuz)
    int8s: Final = (uint8, int8)
    int16s: Final = (uint16, int16)
    int32s: Final = (uint32, int32)
    int64s: Final = (uint64, int64)
    weaks: Final = (weakint, weakfloat)
    all: Final = (bool,) + ints + floats

    @staticmethod
    def is_float(x: DType) -> bool:
        """``dtypes.is_float(dtypes.half) is True``"""
        return x.scalar() in _FLOAT_SET
    @staticmethod
    def is_int(x: DType) -> bool:
        """``dtypes.is_int(dtypes.uint8) is True`` (bool is not an int)."""
        return x.scalar() in _INT_SET
    @staticmethod
    def is_unsigned(x: DType) -> bool:
        return x.scalar() in _UINT_SET
    @staticmethod
    def is_bool(x: DType) -> bool:
        return x.scalar() == dtypes.bool
    @staticmethod
    def is_weak(x: DType) -> bool:
        return x.scalar() in (dtypes.weakint, dtypes.weakfloat)
    @staticmethod
    def concrete(x: DType) -> DType:
        """The dtype a value is stored in: weak dtypes become the current defaults."""
        if x == dtypes.weakint: return dtypes.default_int
        if x == dtypes.weakfloat: return dtypes.default_float
        return x
    @staticmethod
    def from_py(x: Any) -> DType:
        """The weak dtype of a Python value: ``dtypes.from_py(1.5) == dtypes.weakfloat``."""
        if isinstance(x, bool): return dtypes.bool
        if isinstance(x, float): return dtypes.weakfloat
        if isinstance(x, int): return dtypes.weakint
        if isinstance(x, (list, tuple)):
            return max((dtypes.from_py(e) for e in x), default=dtypes.default_float, key=lambda d: d.priority)
        raise RuntimeError(f"cannot infer a dtype from {x!r} of type {type(x).__name__}")   # tinygrad's type
    @staticmethod
    def as_const(val: Any, dtype: DType) -> ConstType:
        """Convert a Python value to what a constant of ``dtype`` holds (wrapping ints like C)."""
        dtype = dtype.scalar()
        if isinstance(val, tuple): return tuple(dtypes.as_const(v, dtype) for v in val)  # type: ignore[return-value]
        if dtypes.is_int(dtype):
            if isinstance(val, float) and not math.isfinite(val): return 0
            ival = int(val)
            if dtype in (dtypes.weakint, dtypes.index): return ival
            bits = 8 * dtype.itemsize
            ival &= (1 << bits) - 1
            if not dtypes.is_unsigned(dtype) and ival >= 1 << (bits - 1): ival -= 1 << bits
            return ival
        if dtype == dtypes.bool: return bool(val)
        return float(val)
    @staticmethod
    def min(dtype: DType) -> ConstType:
        """Smallest value: ``dtypes.min(dtypes.int8) == -128``; ``-inf`` for floats."""
        dtype = dtypes.concrete(dtype.scalar())
        if dtypes.is_int(dtype): return 0 if dtypes.is_unsigned(dtype) else -2**(dtype.itemsize*8-1)
        return -math.inf if dtypes.is_float(dtype) else False
    @staticmethod
    def max(dtype: DType) -> ConstType:
        """Largest value: ``dtypes.max(dtypes.uint8) == 255``; ``inf`` for floats."""
        dtype = dtypes.concrete(dtype.scalar())
        if dtypes.is_int(dtype): return 2**(dtype.itemsize*8) - 1 + dtypes.min(dtype)  # type: ignore[operator]
        return math.inf if dtypes.is_float(dtype) else True
    @staticmethod
    def finfo(dtype: DType) -> tuple[int, int]:
        """(exponent bits, mantissa bits) of a float dtype: ``dtypes.finfo(dtypes.half) == (5, 10)``."""
        dtype = dtypes.concrete(dtype)
        if not dtypes.is_float(dtype): raise TypeError(f"{dtype} is not a float dtype")
        return FINFO[dtype]
    @staticmethod
    def fields() -> dict[str, DType]: return dict(DTYPES_DICT)

_FLOAT_SET = frozenset(dtypes.floats + (dtypes.weakfloat,))
_INT_SET = frozenset(dtypes.ints + (dtypes.weakint, dtypes.index))
_UINT_SET = frozenset(dtypes.uints)

FINFO = {dtypes.float16: (5, 10), dtypes.bfloat16: (8, 7), dtypes.float32: (8, 23), dtypes.float64: (11, 52),
         dtypes.fp8e4m3: (4, 3), dtypes.fp8e5m2: (5, 2), dtypes.fp8e4m3fnuz: (4, 3), dtypes.fp8e5m2fnuz: (5, 2)}

DTYPES_DICT: dict[str, DType] = {k: v for k, v in dtypes.__dict__.items()
                                 if isinstance(v, DType) and not k.startswith(("default", "void", "index", "weak"))
                                 and k not in ("half", "float", "double", "uchar", "ushort", "uint", "ulong", "char",
                                               "short", "int", "long", "fp8e4m3fn")}
# how repr/str spell a dtype: as tinygrad 0.14 does, a type with a C-style alias is printed by the alias
# (``dtypes.float`` for float32, ``dtypes.half``, ``dtypes.uchar``); fp8, bfloat16, bool and the weak types by their name
_ALIAS_SPELLING: dict[DType, str] = {
    dtypes.float16: "half", dtypes.float32: "float", dtypes.float64: "double", dtypes.int8: "char", dtypes.int16: "short",
    dtypes.int32: "int", dtypes.int64: "long", dtypes.uint8: "uchar", dtypes.uint16: "ushort", dtypes.uint32: "uint",
    dtypes.uint64: "ulong"}
INVERSE_NAMES: dict[DType, str] = {v: k for k, v in DTYPES_DICT.items()} | _ALIAS_SPELLING | {
    dtypes.weakint: "weakint", dtypes.weakfloat: "weakfloat", dtypes.index: "index", dtypes.void: "void"}
# C type name -> the dtypes attribute repr uses (tinygrad's INVERSE_DTYPES_DICT: "float" -> "float", "__bf16" -> "bfloat16")
INVERSE_DTYPES_DICT = {v.name: INVERSE_NAMES[v] for v in INVERSE_NAMES}

def to_dtype(x: "DType | str") -> DType:
    """Accept a DType or its name (``"float32"``, ``"half"``)."""
    if isinstance(x, DType): return x
    if isinstance(x, str) and hasattr(dtypes, x) and isinstance(getattr(dtypes, x), DType): return getattr(dtypes, x)
    # an unknown name is an AttributeError like tinygrad's (it looks the name up on dtypes)
    if isinstance(x, str): raise AttributeError(f"unknown dtype {x!r}")
    raise TypeError(f"unknown dtype {x!r}")

# ---------------------------------------------------------------- promotion lattice
# Each dtype lists the dtypes directly above it (tinygrad 0.14's lattice, after JAX's). No integer
# type holds both int64 and uint64, so the two meet at the *weak* float: the result is the default
# float (or the other operand's float type), never an fp8 type that nobody asked for. Weak dtypes
# sit in the lattice where a Python literal would: bool < weakint < every int, every int <
# weakfloat < every float.
PROMO_LATTICE: dict[DType, tuple[DType, ...]] = {
    dtypes.bool: (dtypes.weakint,), dtypes.weakint: (dtypes.int8, dtypes.uint8),
    dtypes.int8: (dtypes.int16,), dtypes.int16: (dtypes.int32,), dtypes.int32: (dtypes.int64,),
    dtypes.int64: (dtypes.weakfloat,),
    dtypes.uint8: (dtypes.int16, dtypes.uint16), dtypes.uint16: (dtypes.int32, dtypes.uint32),
    dtypes.uint32: (dtypes.int64, dtypes.uint64), dtypes.uint64: (dtypes.weakfloat,),
    dtypes.weakfloat: dtypes.fp8s,
    dtypes.fp8e4m3: (dtypes.float16, dtypes.bfloat16), dtypes.fp8e5m2: (dtypes.float16, dtypes.bfloat16),
    dtypes.fp8e4m3fnuz: (dtypes.float16, dtypes.bfloat16), dtypes.fp8e5m2fnuz: (dtypes.float16, dtypes.bfloat16),
    dtypes.float16: (dtypes.float32,), dtypes.bfloat16: (dtypes.float32,), dtypes.float32: (dtypes.float64,),
    dtypes.float64: (),
}
# Where several common upper bounds are not ordered (fp8e4m3 and fp8e5m2 meet at float16 and
# bfloat16) the first in this order wins, as in tinygrad (float16 before bfloat16). The order is
# explicit because the weak dtypes' priorities don't say where they sit in the lattice.
_PROMOTION_ORDER: tuple[DType, ...] = (
    dtypes.bool, dtypes.weakint, dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.int32, dtypes.uint32,
    dtypes.int64, dtypes.uint64, dtypes.weakfloat, dtypes.fp8e4m3, dtypes.fp8e4m3fnuz, dtypes.fp8e5m2, dtypes.fp8e5m2fnuz,
    dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64)
_PROMOTION_RANK: dict[DType, int] = {d: i for i, d in enumerate(_PROMOTION_ORDER)}

@functools.cache
def _get_recursive_parents(dtype: DType) -> frozenset[DType]:
    """``dtype`` and every dtype above it in the lattice."""
    if dtype not in PROMO_LATTICE: raise TypeError(f"{dtype} takes no part in type promotion")
    return frozenset({dtype}).union(*(_get_recursive_parents(d) for d in PROMO_LATTICE[dtype]))

@functools.cache
def _lattice_join(*ds: DType) -> DType:
    """The lowest dtype above all of ``ds`` in the lattice."""
    common = frozenset.intersection(*(_get_recursive_parents(d.scalar()) for d in ds))
    return min(common, key=_PROMOTION_RANK.__getitem__)

def least_upper_dtype(*ds: DType) -> DType:
    """The dtype that every input promotes to.

    Strong dtypes meet in the lattice above (``int8`` and ``uint64`` give ``weakfloat``, which
    becomes the default float when stored). Weak (literal) dtypes adopt the strong dtype: an int
    literal keeps any dtype but bool, a float literal turns non-float results into the default
    float. Unlike tinygrad, meeting a literal never makes a strong dtype weak: ``int8 + 1.5`` is
    ``default_float`` here, ``weakfloat`` (stored as default_float) there."""
    if not ds: raise TypeError("least_upper_dtype needs at least one dtype")
    strong = [d for d in ds if not dtypes.is_weak(d)]
    has_weak_float = any(d == dtypes.weakfloat for d in ds)
    if not strong: return dtypes.weakfloat if has_weak_float else dtypes.weakint
    result = _lattice_join(*strong)
    if has_weak_float and not dtypes.is_float(result): return dtypes.default_float
    if any(d == dtypes.weakint for d in ds) and result == dtypes.bool: return dtypes.default_int
    return result

def least_upper_float(dtype: DType) -> DType:
    """``dtype`` itself if it is a float, otherwise the default float (int / 2 gives a float)."""
    if dtypes.is_float(dtype): return dtype
    return least_upper_dtype(dtype, dtypes.default_float) if not dtypes.is_weak(dtype) else dtypes.weakfloat

def sum_acc_dtype(dtype: DType) -> DType:
    """The dtype a sum accumulates in: unsigned → at least uint32, ints and bool → at least int32,
    floats → at least float32."""
    if dtypes.is_weak(dtype): return dtype
    if dtypes.is_unsigned(dtype): return least_upper_dtype(dtype, dtypes.uint32)
    if dtypes.is_int(dtype) or dtype == dtypes.bool: return least_upper_dtype(dtype, dtypes.int32)
    return least_upper_dtype(dtype, dtypes.float32)

# ---------------------------------------------------------------- numpy interop

def to_np_dtype(dtype: DType) -> Any:
    """The numpy dtype that holds ``dtype`` (bfloat16 and fp8 have none: they travel as raw bits)."""
    import numpy as np
    dtype = dtypes.concrete(dtype)
    if dtype.fmt is None: raise TypeError(f"numpy has no dtype for {dtype}")
    return np.dtype(dtype.fmt)

def from_np(np_dtype: Any) -> DType:
    """``from_np(np.float32) == dtypes.float32``"""
    import numpy as np
    np_dtype = np.dtype(np_dtype)
    for d in (dtypes.bool, dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.int32, dtypes.uint32,
              dtypes.int64, dtypes.uint64, dtypes.float16, dtypes.float32, dtypes.float64):
        if np.dtype(d.fmt) == np_dtype: return d
    raise TypeError(f"numpy dtype {np_dtype} is not supported")

def truncate_float(x: float, dtype: DType) -> float:
    """Round a Python float to the precision of ``dtype`` (so constant folding matches kernels)."""
    if not math.isfinite(x): return x
    if dtype == dtypes.float32:
        try: return struct.unpack("f", struct.pack("f", x))[0]
        except OverflowError: return math.copysign(math.inf, x)
    if dtype == dtypes.float16:
        try: return struct.unpack("e", struct.pack("e", x))[0]
        except OverflowError: return math.copysign(math.inf, x)
    if dtype == dtypes.bfloat16: return bits_to_bf16(float_to_bf16_bits(x))
    if dtype in FP8_FORMATS: return fp8_bits_to_float(float_to_fp8_bits(x, dtype), dtype)
    return x

def float_to_bf16_bits(x: float) -> int:
    """float → bfloat16 bits, rounding to nearest even (NaN stays NaN)."""
    if math.isnan(x): return 0x7FC0
    try: bits = struct.unpack("I", struct.pack("f", x))[0]
    except OverflowError: return 0x7F80 if x > 0 else 0xFF80
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF

def bits_to_bf16(bits: int) -> float:
    return struct.unpack("f", struct.pack("I", (bits & 0xFFFF) << 16))[0]

# ---------------------------------------------------------------- fp8

@dataclass(frozen=True)
class Fp8Format:
    """How an 8-bit float lays out its bits: 1 sign bit, ``exponent`` bits with ``bias``, ``mantissa`` bits.

    OCP e4m3 ("fn": finite) has no infinity and one NaN code per sign (all ones); OCP e5m2 is IEEE-like
    (infinities and NaNs at the top exponent). The "fnuz" types (finite, no negative zero) have a bias one
    higher, no infinity, and a single NaN, 0x80 (the code that would be -0). Out of range finite values
    saturate to the largest finite code (``max_code``), as tinygrad's (and CUDA's satfinite) conversion does."""
    exponent: int
    mantissa: int
    bias: int
    fnuz: bool
    has_inf: bool
    max_code: int    # the largest finite magnitude's bits (0x7E for e4m3: 0x7F is NaN)

FP8_FORMATS: dict[DType, Fp8Format] = {
    dtypes.fp8e4m3: Fp8Format(4, 3, 7, False, False, 0x7E), dtypes.fp8e5m2: Fp8Format(5, 2, 15, False, True, 0x7B),
    dtypes.fp8e4m3fnuz: Fp8Format(4, 3, 8, True, False, 0x7F), dtypes.fp8e5m2fnuz: Fp8Format(5, 2, 16, True, False, 0x7F)}

def _round_shift(value: int, shift: int) -> int:
    """``value / 2**shift`` rounded to the nearest integer, ties to even (value >= 0, shift >= 1)."""
    quotient, remainder, half = value >> shift, value & ((1 << shift) - 1), 1 << (shift - 1)
    return quotient + (remainder > half or (remainder == half and quotient & 1))

def float_to_fp8_bits(x: float, dtype: DType) -> int:
    """The fp8 code nearest to ``x`` (ties to even). Finite values past the largest finite fp8 saturate to it;
    infinities become NaN in types without infinity; NaN of either sign is the positive NaN code.

    >>> hex(float_to_fp8_bits(1.0, dtypes.fp8e4m3)), hex(float_to_fp8_bits(1000.0, dtypes.fp8e4m3))
    ('0x38', '0x7e')
    """
    fmt = FP8_FORMATS[dtype]
    sign = 0x80 if math.copysign(1.0, x) < 0 else 0
    # NaN (either sign) is the positive NaN code: tinygrad's PYTHON device writes 0x7F for -NaN and, in e4m3, -inf
    if math.isnan(x) or (math.isinf(x) and not fmt.has_inf): return 0x80 if fmt.fnuz else 0x7F
    if math.isinf(x): return sign | 0x7C
    code = 0
    if x != 0:
        # |x| = n * 2**(exp2 - 53) exactly (n a 53-bit integer). Counted in ulps of its binade (subnormals share
        # the smallest normal binade), |x| rounds to ``units``; the code is the units plus the binade's
        # exponent field, which also covers a rounding that carries into the next binade.
        significand, exp2 = math.frexp(abs(x))
        min_exp = 1 - fmt.bias
        binade = max(exp2 - 1, min_exp)
        n, shift = int(significand * 2**53), 53 + (binade - fmt.mantissa) - exp2
        units = _round_shift(n, shift) if shift > 0 else n << -shift
        code = min(units + ((binade - min_exp) << fmt.mantissa), fmt.max_code)
    if fmt.fnuz and code == 0: return 0               # fnuz has no negative zero
    return sign | code

def fp8_bits_to_float(bits: int, dtype: DType) -> float:
    """The value of the fp8 code ``bits``.

    >>> fp8_bits_to_float(0x38, dtypes.fp8e4m3), fp8_bits_to_float(0x7E, dtypes.fp8e4m3)
    (1.0, 448.0)
    """
    fmt = FP8_FORMATS[dtype]
    sign = -1.0 if bits & 0x80 else 1.0
    magnitude = bits & 0x7F
    exponent, mantissa = magnitude >> fmt.mantissa, magnitude & ((1 << fmt.mantissa) - 1)
    top_exponent = (1 << fmt.exponent) - 1
    if fmt.fnuz and bits == 0x80: return math.nan
    if not fmt.fnuz and not fmt.has_inf and magnitude == 0x7F: return math.nan
    if fmt.has_inf and exponent == top_exponent: return math.copysign(math.nan, sign) if mantissa else sign * math.inf
    if exponent == 0: return sign * mantissa * 2.0 ** (1 - fmt.bias - fmt.mantissa)
    return sign * (1 + mantissa / (1 << fmt.mantissa)) * 2.0 ** (exponent - fmt.bias)
