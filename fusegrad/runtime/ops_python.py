"""The PYTHON device: a numpy interpreter of the linear kernel program (docs/linear_uops.md).

It is the executable definition of the uops. ``PythonRenderer`` serializes the ``list[UOp]``,
``PythonProgram`` runs it. Every thread of the launch (all workgroups x all local threads) is one
numpy *lane* and all lanes run in lockstep: each uop's value is an array with one entry per lane
(or a scalar when it is the same for every lane). RANGE loops are uniform, so they run as a jump in
the instruction list; IF/ENDIF keep a stack of active-lane masks; BARRIER needs no waiting because
every lane finishes an instruction before any lane starts the next. Lockstep would hide a missing
barrier, so local memory remembers which lane last wrote each element and in which barrier epoch:
a lane reading an element that another lane wrote since the last BARRIER raises ``RuntimeError``
(a race on a real GPU). Accesses are bounds checked: an active, ungated access outside the buffer
raises ``IndexError``.

ALU results match ``fusegrad.uop.alu.exec_alu``: integers wrap in their dtype, IDIV/MOD follow C, a shift by any
amount gives numpy's result, transcendental ops and MULACC are computed in float64 and rounded once, like ``exec_alu`` does
(float64 EXP2/LOG2/POW run per element through Python's math, since numpy's can differ by an ulp).
TRUNC follows ``exec_alu`` too: ``trunc(-0.5)`` is ``0.0``, not C's ``-0.0``.

>>> import numpy as np
>>> from fusegrad.dtype import dtypes
>>> from fusegrad.uop.ops import UOp, Ops
>>> out, four, two = UOp(Ops.PARAM, dtypes.int32.ptr(4), arg=0), UOp.const(dtypes.int32, 4), UOp.const(dtypes.int32, 2)
>>> gid = UOp(Ops.SPECIAL, dtypes.int32, (four,), "gidx0")
>>> uops = [out, four, gid, two, gid * two, out.index(gid), out.index(gid).store(gid * two)]
>>> prg = PythonProgram("k", PythonCompiler().compile(PythonRenderer().render("k", uops)))
>>> buf = np.zeros(4, np.int32)
>>> prg(buf, global_size=(4, 1, 1))
>>> buf.tolist()
[0, 2, 4, 6]
"""
from __future__ import annotations
import base64, functools, io, math, pickle, time
from typing import Any, Callable
import numpy as np
from fusegrad.dtype import DType, PtrDType, ImageDType, dtypes, INVERSE_NAMES
from fusegrad.device import Compiled, Compiler, MallocAllocator
from fusegrad.helpers import getenv
from fusegrad.renderer import Renderer, TensorCore
from fusegrad.renderer.cstyle import BF16_TENSOR_CORE
from fusegrad.uop.ops import UOp, Ops, GroupOp
from fusegrad.uop.alu import PYTHON_ALU

# ---------------------------------------------------------------- serialization

# ops the interpreter executes (plus every ALU op but THREEFRY, which codegen expands into uint32 ops before any
# renderer sees it: codegen/threefry.py)
_SUPPORTED = {Ops.PARAM, Ops.DEFINE_VAR, Ops.DEFINE_REG, Ops.DEFINE_LOCAL, Ops.SPECIAL, Ops.RANGE, Ops.END, Ops.CONST,
              Ops.INDEX, Ops.LOAD, Ops.STORE, Ops.CAST, Ops.BITCAST, Ops.VECTORIZE, Ops.GEP, Ops.BARRIER, Ops.IF,
              Ops.ENDIF, Ops.SINK, Ops.NOOP, Ops.WMMA} | (GroupOp.ALU - {Ops.THREEFRY})

def _enc_dtype(dt: DType) -> tuple:
    if isinstance(dt, ImageDType): raise NotImplementedError("the PYTHON device has no image dtypes")
    if isinstance(dt, PtrDType): return ("ptr", _enc_dtype(dt.base), bool(dt.local), int(dt.size))
    return ("dt", INVERSE_NAMES[dt.scalar()], dt.count)

def _dec_dtype(enc: tuple) -> DType:
    if enc[0] == "ptr": return _dec_dtype(enc[1]).ptr(enc[3], enc[2])
    return getattr(dtypes, enc[1]).vec(enc[2])

# what ``PythonRenderer(emulate="CUDA")`` takes from the CUDA renderer: the kernels it makes are CUDA's
_EMULATED_FIELDS = ("tensor_cores", "vector_loops", "gpu_heuristic", "flat_elementwise", "native_transcendentals", "local_max", "local_max_threads",
                    "shared_max", "max_vector_bytes")

class PythonRenderer(Renderer):
    """Serializes the linear program: base64 of a pickle of (op name, dtype, source positions, arg) tuples.
    It declares the CPU's tensor core too, so TC kernels run here exactly as defined (``_wmma``).

    ``emulate="CUDA"`` (the device reads ``EMULATE=CUDA``) takes the CUDA renderer's capabilities instead: its
    warp tensor cores (``mma.sync``, run here by ``_warp_wmma``), its heuristic and limits, so the kernels a GPU
    would run are checked against numpy on a machine without one."""
    device = "PYTHON"
    tensor_cores = [BF16_TENSOR_CORE]
    has_local = True
    has_shared = True
    vector_loops = True   # runs the vector nodes codegen/vectorize.py makes for the CPU, as the executable spec of them
    local_max = (1024,) * 3
    shared_max = 65536
    def __init__(self, emulate: str = ""):
        if emulate not in ("", "CUDA"): raise ValueError(f"the PYTHON device emulates CUDA or nothing, not {emulate!r}")
        self.emulate = emulate
        if emulate == "CUDA":
            from fusegrad.renderer.cuda import CUDARenderer
            cuda = CUDARenderer(arch="sm_80")
            for name in _EMULATED_FIELDS: setattr(self, name, getattr(cuda, name))
    def __reduce__(self): return self.__class__, (self.emulate,)
    def render(self, name: str, uops: list[UOp]) -> str:
        pos: dict[UOp, int] = {}
        prog = []
        for i, u in enumerate(uops):
            if u.op not in _SUPPORTED: raise NotImplementedError(f"the PYTHON device does not support {u.op} (in kernel {name})")
            for s in u.src:
                if s not in pos:
                    raise ValueError(f"kernel {name}: uop {i} ({u.op}) has a source ({s.op}) that is not earlier in the list")
            prog.append((u.op.name, _enc_dtype(u.dtype), tuple(pos[s] for s in u.src), u.arg))
            pos[u] = i
        f = io.BytesIO()
        pickler = pickle.Pickler(f, protocol=4)
        pickler.fast = True  # no memo: equal programs give equal bytes however their objects are shared
        pickler.dump((name, prog))
        return base64.b64encode(f.getvalue()).decode()

class PythonCompiler(Compiler):
    def __init__(self) -> None: super().__init__(None)
    def compile(self, src: str) -> bytes: return src.encode()

# ---------------------------------------------------------------- dtype helpers

def _np(dt: DType) -> np.dtype:
    """The numpy dtype a value of ``dt`` is held in (bfloat16/fp8 as raw bits; index as int64)."""
    s = dt.scalar()
    if s in (dtypes.index, dtypes.weakint): return np.dtype(np.int64)
    if s == dtypes.weakfloat: return np.dtype(np.float32)
    if s == dtypes.bfloat16: return np.dtype(np.uint16)
    if s in dtypes.fp8s: return np.dtype(np.uint8)
    if s.fmt is None: raise TypeError(f"the PYTHON device has no storage for {dt}")
    return np.dtype(s.fmt)

def _is_int(dt: DType) -> bool: return dtypes.is_int(dt)
def _is_float(dt: DType) -> bool: return dtypes.is_float(dt) and dt.scalar() not in (dtypes.bfloat16,) + dtypes.fp8s

def _wrap_int(v: int, npdt: np.dtype) -> int:
    bits = 8 * npdt.itemsize
    v &= (1 << bits) - 1
    if npdt.kind == "i" and v >= 1 << (bits - 1): v -= 1 << bits
    return v

def _float_to_int(x: Any, npdt: np.dtype) -> Any:
    """``dtypes.as_const`` semantics: truncate toward zero, wrap to the width, non-finite gives 0."""
    t = np.trunc(np.asarray(x, np.float64))
    if not np.all(np.abs(t) < 2.0**62):  # NaN fails the comparison too
        t = np.where(np.isfinite(t), t, 0.0)
        t = np.fmod(t, 2.0**64)  # exact
        t = np.where(t >= 2.0**63, t - 2.0**64, t)
        t = np.where(t < -2.0**63, t + 2.0**64, t)
    return t.astype(np.int64).astype(npdt)

def _bf16_to_f32(bits: Any) -> Any:
    return (np.asarray(bits).astype(np.uint32) << np.uint32(16)).view(np.float32)

def _f32_to_bf16(x: Any) -> Any:
    """float32 -> bfloat16 bits, round to nearest even, NaN stays NaN (like ``float_to_bf16_bits``)."""
    f = np.ascontiguousarray(np.asarray(x, np.float32))
    b = f.view(np.uint32).astype(np.uint64)
    r = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16) & 0xFFFF
    return np.where(np.isnan(f), 0x7FC0, r).astype(np.uint16)

def _wmma(tc: TensorCore, xs: list) -> np.ndarray:
    """``c[m*N+n] + sum_k a[m*K+k] * b_k[n]`` (renderer.TensorCore) in float32, k in order; bfloat16
    fragments are bit patterns. Values are (lanes, elements) arrays or, when uniform, (elements,)."""
    n, m, k = tc.dims
    def value(x: Any) -> np.ndarray: return _bf16_to_f32(x) if tc.dtype_in == dtypes.bfloat16 else np.asarray(x, np.float32)
    a, rows, c = value(xs[0]), [value(x) for x in xs[1:1 + k]], np.asarray(xs[-1], np.float32)
    out = c.reshape(c.shape[:-1] + (m, n))
    for l in range(k):
        out = out + a[..., l::k][..., :, None] * rows[l][..., None, :]   # float32: products of bfloat16 are exact
    return out.reshape(out.shape[:-2] + (m * n,)).astype(np.float32)

def _warp_wmma(tc: TensorCore, xs: list, lanes: int, local_size: int, mask: np.ndarray | None) -> np.ndarray:
    """A warp tensor core (``tc.threads`` > 1): each run of ``tc.threads`` consecutive lanes is a warp; its
    fragments are gathered into whole matrices (``tc.layout``), multiplied as ``_wmma`` does (float32, k in
    order) and the sums handed back to the lanes that hold them."""
    n, m, k = tc.dims
    threads = tc.threads
    if local_size % threads: raise RuntimeError(f"{tc.name}: a workgroup of {local_size} threads isn't whole warps of {threads}")
    if mask is not None and not ((warps := mask.reshape(-1, threads)).any(axis=1) == warps.all(axis=1)).all():
        raise RuntimeError(f"{tc.name}: some lanes of a warp skip the instruction (every lane must execute it)")
    def value(x: Any, dtype) -> np.ndarray: return _bf16_to_f32(x) if dtype == dtypes.bfloat16 else np.asarray(x, np.float32)
    matrices = []
    for x, layout, shape, dtype in zip(xs, tc.layout, ((m, k), (k, n), (m, n)), (tc.dtype_in, tc.dtype_in, tc.dtype_out)):
        fragment = np.broadcast_to(value(x, dtype), (lanes, layout.elements)).reshape(-1, threads, layout.elements)
        rows, cols = _fragment_points(layout, threads)
        matrix = np.zeros((fragment.shape[0],) + shape, np.float32)
        matrix[:, rows, cols] = fragment
        matrices.append(matrix)
    a, b, out = matrices
    for l in range(k): out = out + a[:, :, l, None] * b[:, None, l, :]   # float32: products of half/bfloat16 are exact
    rows, cols = _fragment_points(tc.layout[2], threads)
    return out[:, rows, cols].reshape(lanes, -1).astype(np.float32)

@functools.lru_cache(maxsize=None)
def _fragment_points(layout, threads: int) -> tuple[np.ndarray, np.ndarray]:
    """(rows, cols), each (threads, elements): where each lane's fragment elements sit in the matrix (worked out once
    per layout, not on every instruction the interpreter runs)."""
    points = np.array([[layout.coordinates(t, e) for e in range(layout.elements)] for t in range(threads)])
    return points[..., 0], points[..., 1]

def _cast(x: Any, sdt: DType, dt: DType) -> Any:
    ds, dd, onp = sdt.scalar(), dt.scalar(), _np(dt)
    if ds in dtypes.fp8s or dd in dtypes.fp8s: raise NotImplementedError(f"the PYTHON device can't CAST {sdt} to {dt} (fp8)")
    if dd == dtypes.bfloat16: return _f32_to_bf16(_cast(x, sdt, dtypes.float32.vec(dt.count)))
    if ds == dtypes.bfloat16: x, ds = _bf16_to_f32(x), dtypes.float32
    x = np.asarray(x)
    if dd == dtypes.bool: return np.not_equal(x, 0)
    if _is_int(dd) and dtypes.is_float(ds): return _float_to_int(x, onp)
    if dtypes.is_float(dd) and _is_int(ds): return x.astype(np.float64).astype(onp)
    return x.astype(onp)

def _bitcast(x: Any, sdt: DType, dt: DType) -> Any:
    arr = np.ascontiguousarray(np.asarray(x, _np(sdt)))
    if sdt.count == 1: arr = arr[..., None]
    out = arr.view(_np(dt))
    if out.shape[-1] != dt.count: raise TypeError(f"BITCAST from {sdt} to {dt} changes the size")
    return out[..., 0] if dt.count == 1 else out

# ---------------------------------------------------------------- ALU

_FLOAT_ONLY = {Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.COS, Ops.SQRT, Ops.RECIPROCAL, Ops.FDIV, Ops.POW}

def _pow(a: Any, b: Any) -> Any:
    """Python's ``float(a) ** b`` as ``exec_alu`` guards it, in float64."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    r = np.power(a, b)
    r = np.where((a < 0) & (b != np.trunc(b)), np.nan, r)
    r = np.where(np.isinf(r) & np.isfinite(a) & np.isfinite(b), np.inf, r)  # OverflowError / ZeroDivisionError
    return np.where((a < 0) & np.isinf(b), np.inf, r)                       # int(inf) raises OverflowError

def _py_pow(a: float, b: float) -> float:
    try: return PYTHON_ALU[Ops.POW](a, b)
    except ValueError: return math.nan  # (-x) ** nan

# numpy's float64 exp2/log2/pow can be 1 ulp away from libm's (which exec_alu uses): run those per element
_PY_FLOAT64 = {Ops.EXP2: np.frompyfunc(PYTHON_ALU[Ops.EXP2], 1, 1), Ops.LOG2: np.frompyfunc(PYTHON_ALU[Ops.LOG2], 1, 1),
               Ops.POW: np.frompyfunc(_py_pow, 2, 1)}

def _float_alu(op: Ops, xs: list) -> Any:
    """Float-typed ops on float arrays (already in the compute dtype)."""
    if op is Ops.EXP2: return np.exp2(xs[0])
    if op is Ops.LOG2: return np.log2(xs[0])
    if op is Ops.SIN: return np.sin(xs[0])
    if op is Ops.COS: return np.cos(xs[0])
    if op is Ops.SQRT: return np.sqrt(xs[0])
    if op is Ops.RECIPROCAL: return np.reciprocal(xs[0])
    if op is Ops.NEG: return np.negative(xs[0])
    if op is Ops.TRUNC: return np.trunc(xs[0]) + xs[0].dtype.type(0)  # float(math.trunc(x)): -0.0 becomes 0.0
    if op is Ops.ADD: return xs[0] + xs[1]
    if op is Ops.SUB: return xs[0] - xs[1]
    if op is Ops.MUL: return xs[0] * xs[1]
    if op is Ops.FDIV: return np.true_divide(xs[0], xs[1])
    if op is Ops.POW: return _pow(xs[0], xs[1])
    if op is Ops.MULACC: return xs[0] * xs[1] + xs[2]   # (float32's is fma_float32: see _make_alu)
    if op is Ops.MAX:
        a, b = xs
        return np.where((b > a) | np.isnan(b), b, a)  # Python's max(a, b), NaN if either is NaN
    if op is Ops.MOD:   # C's fmod, as the CPU renders a float MOD (exact; NaN for an infinite a or a zero b)
        with np.errstate(invalid="ignore"): return np.fmod(xs[0], xs[1])
    if op is Ops.IDIV:
        a, b = xs
        q = np.floor_divide(np.abs(a), np.abs(b))
        q = np.where((a >= 0) == (b > 0), q, -q)
        return np.where(b == 0, 0.0, q)
    raise NotImplementedError(f"the PYTHON device can't run {op} on floats")

def _int_alu(op: Ops, xs: list, npdt: np.dtype) -> Any:
    """Integer ops, wrapping in ``npdt``."""
    if op is Ops.NEG: return np.negative(xs[0])
    if op is Ops.TRUNC: return xs[0]
    if op is Ops.ADD: return xs[0] + xs[1]
    if op is Ops.SUB: return xs[0] - xs[1]
    if op is Ops.MUL: return xs[0] * xs[1]
    if op is Ops.MULACC: return xs[0] * xs[1] + xs[2]
    if op is Ops.MAX: return np.maximum(xs[0], xs[1])
    if op is Ops.AND: return np.bitwise_and(xs[0], xs[1])
    if op is Ops.OR: return np.bitwise_or(xs[0], xs[1])
    if op is Ops.XOR: return np.bitwise_xor(xs[0], xs[1])
    if op is Ops.SHL or op is Ops.SHR: return _shift(op, xs[0], xs[1])
    if op is Ops.MOD: return np.fmod(xs[0], xs[1])                       # C remainder; x % 0 gives 0
    if op is Ops.IDIV: return np.floor_divide(xs[0] - np.fmod(xs[0], xs[1]), xs[1])  # exact, so it truncates; x // 0 gives 0
    raise NotImplementedError(f"the PYTHON device can't run {op} on integers")

def _shift(op: Ops, x: np.ndarray, amount: np.ndarray) -> np.ndarray:
    """SHL/SHR as ``exec_alu`` defines them for every amount: numpy's shifts already give 0, or the sign fill for a
    signed ``>>``, for an amount outside [0, width) of the value's dtype. The amount comes in its own dtype and is
    clipped to the width (negative ones too) before it takes the value's: an int32 259 cast to int8 would be 3."""
    width = 8 * x.dtype.itemsize
    amount = np.where((amount < 0) | (amount > width), width, amount).astype(x.dtype, copy=False)
    return np.left_shift(x, amount) if op is Ops.SHL else np.right_shift(x, amount)

_BOOL_LOGIC = {Ops.AND: np.logical_and, Ops.OR: np.logical_or, Ops.XOR: np.logical_xor, Ops.MAX: np.logical_or}

def _make_alu(op: Ops, dt: DType, src_dts: list[DType]) -> Callable[[list], Any]:
    """A function from the operand values to the result of ``op`` (all dtype decisions made up front)."""
    onp = _np(dt)
    if op in GroupOp.Comparison:
        cnp = _np(src_dts[0])
        if src_dts[0].scalar() in (dtypes.bfloat16,) + dtypes.fp8s: raise NotImplementedError(f"{op} on {src_dts[0]}")
        fn = {Ops.CMPLT: np.less, Ops.CMPNE: np.not_equal, Ops.CMPEQ: np.equal}[op]
        return lambda xs: fn(np.asarray(xs[0], cnp), np.asarray(xs[1], cnp))
    if op is Ops.WHERE:
        widen = dt.count > 1 and src_dts[0].count == 1
        def where(xs: list) -> Any:
            c = np.asarray(xs[0], np.bool_)
            if widen and c.ndim == 1: c = c[:, None]
            return np.where(c, np.asarray(xs[1], onp), np.asarray(xs[2], onp))
        return where
    scal = dt.scalar()
    if scal in (dtypes.bfloat16,) + dtypes.fp8s:
        raise NotImplementedError(f"{op} on {dt}: bfloat16/fp8 never reach a renderer as ALU operands")
    if scal == dtypes.bool:
        if op in _BOOL_LOGIC: return lambda xs, f=_BOOL_LOGIC[op]: f(xs[0], xs[1])
        if op is Ops.NEG: return lambda xs: np.logical_not(xs[0])
        if op is Ops.TRUNC: return lambda xs: np.asarray(xs[0], np.bool_)
        # arithmetic on bools happens in Python ints/floats, then bool(result)
        if op in _FLOAT_ONLY: return lambda xs: np.not_equal(_float_alu(op, [np.asarray(x, np.float64) for x in xs]), 0)
        i64 = np.dtype(np.int64)
        return lambda xs: np.not_equal(_int_alu(op, [np.asarray(x, i64) for x in xs], i64), 0)
    if _is_int(scal):
        if op in _FLOAT_ONLY: return lambda xs: _float_to_int(_float_alu(op, [np.asarray(x, np.float64) for x in xs]), onp)
        if op is Ops.SHL or op is Ops.SHR:   # (the amount keeps its own dtype: see _shift)
            amount_np = _np(src_dts[1])
            return lambda xs: np.asarray(_shift(op, np.asarray(xs[0]).astype(onp, copy=False), np.asarray(xs[1]).astype(amount_np, copy=False)))
        return lambda xs: np.asarray(_int_alu(op, [np.asarray(x).astype(onp, copy=False) for x in xs], onp)) \
            .astype(onp, copy=False)
    # floats: exec_alu computes in float64 and rounds once; numpy's native float16/float32 ops round
    # correctly too, except for transcendentals and fused ops, which run in float64 here
    if op is Ops.MULACC and onp == np.float32: return lambda xs: fma_float32(*xs)
    cnp = np.dtype(np.float64) if op in (Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.COS, Ops.POW, Ops.MULACC, Ops.IDIV, Ops.MOD) else onp
    if onp == np.float64 and op in _PY_FLOAT64:
        return lambda xs, f=_PY_FLOAT64[op]: np.asarray(f(*[np.asarray(x).astype(cnp, copy=False) for x in xs]), np.float64)
    return lambda xs: np.asarray(_float_alu(op, [np.asarray(x).astype(cnp, copy=False) for x in xs])).astype(onp, copy=False)

def fma_float32(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """``a * b + c`` of float32 values rounded once to float32, as C's fmaf (the CPU's MULACC).

    The product of two float32 values is exact in float64, and the float64 sum ``s = p + c`` has an exact error
    ``e`` (TwoSum). Rounding s to float32 is then a second rounding, which differs from one rounding of the exact
    sum only when s lies exactly halfway between two float32 values while e != 0: the exact sum is then on e's side
    of that midpoint, so s moves one float64 step that way first."""
    a, b, c = (np.asarray(x, np.float64) for x in (a, b, c))
    with np.errstate(all="ignore"):
        p = a * b
        s = p + c
        c_part = s - p
        e = (p - (s - c_part)) + (c - c_part)
        r = s.astype(np.float32)
        toward_s = np.where(s > r, np.float32(np.inf), np.float32(-np.inf))
        midpoint = (r.astype(np.float64) + np.nextafter(r, toward_s).astype(np.float64)) * 0.5
        tie = (s != r) & (s == midpoint) & (e != 0) & np.isfinite(e)
        s = np.where(tie, np.nextafter(s, np.where(e > 0, np.inf, -np.inf)), s)
        return s.astype(np.float32)

def _alu(op: Ops, dt: DType, src_dts: list[DType], xs: list) -> Any:
    """Evaluate one ALU op on lane values (for tests and one-offs)."""
    return _make_alu(op, dt, src_dts)(xs)

# ---------------------------------------------------------------- memory

class _Mem:
    """A buffer the kernel can index: a global buffer (flat), or per-lane registers / per-group locals
    (2D: one row per lane or group). ``k`` scalars make one element (vector base dtypes)."""
    __slots__ = ("arr", "rows", "k", "n", "name", "writer", "epoch")
    def __init__(self, arr: np.ndarray, rows: np.ndarray | None, k: int, name: str, shared: bool = False):
        self.arr, self.rows, self.k, self.name = arr, rows, k, name
        self.n = arr.shape[-1]  # in scalars
        # local memory: the lane that last wrote each scalar, and the barrier epoch it wrote in
        self.writer = np.full(arr.shape, -1, np.int64) if shared else None
        self.epoch = np.full(arr.shape, -1, np.int64) if shared else None

class _Ref:
    """The value of an INDEX: memory, element index (per lane or uniform), an optional gate, and ``k``: the scalars
    one index step moves (the INDEX's pointer dtype: an array of vectors indexed through a scalar pointer moves 1).
    A ``vector_gate`` gates each element of a vector access on its own (a bool vector, not one bool per lane)."""
    __slots__ = ("mem", "idx", "gate", "k", "vector_gate")
    def __init__(self, mem: _Mem, idx: Any, gate: Any, k: int = 1, vector_gate: bool = False):
        self.mem, self.idx, self.gate, self.k, self.vector_gate = mem, idx, gate, k, vector_gate

class _Launch:
    """One chunk of workgroups, run in lockstep."""
    def __init__(self, lanes: int, lsz: int, group_base: int):
        self.lanes, self.lsz, self.group_base = lanes, lsz, group_base
        self.epoch = 0  # BARRIERs passed
        self.lane_ids = np.arange(lanes, dtype=np.int64)
        self.group_ids = self.lane_ids // lsz  # within the chunk

# ---------------------------------------------------------------- the program

class PythonProgram:
    """Runs a rendered linear program with numpy. ``__call__(*bufs, global_size, local_size, vals, wait)``."""
    max_lanes = 1 << 20  # workgroups run in chunks of at most this many lanes (bounds memory)
    def __init__(self, name: str, lib: bytes):
        self.name = name
        kname, prog = pickle.loads(base64.b64decode(lib))
        self.prog: list[tuple[Ops, DType, tuple[int, ...], Any]] = \
            [(Ops[op], _dec_dtype(dt), src, arg) for op, dt, src, arg in prog]
        n = len(self.prog)
        self.npdt = [(_np(dt.base) if isinstance(dt, PtrDType) else _np(dt)) if dt.scalar() != dtypes.void else None
                     for _, dt, _, _ in self.prog]
        # loops and conditionals
        self.range_end: dict[int, int] = {}
        self.if_end: dict[int, int] = {}
        open_ranges: list[int] = []
        open_ifs: list[int] = []
        for i, (op, _, src, _) in enumerate(self.prog):
            if op is Ops.RANGE: open_ranges.append(i)
            elif op is Ops.END:
                if not open_ranges or open_ranges[-1] != src[0]:
                    raise ValueError(f"kernel {kname}: END at {i} does not close the innermost open RANGE")
                self.range_end[open_ranges.pop()] = i
            elif op is Ops.IF: open_ifs.append(i)
            elif op is Ops.ENDIF:
                if not open_ifs or open_ifs[-1] != src[0]:
                    raise ValueError(f"kernel {kname}: ENDIF at {i} does not close the open IF")
                self.if_end[open_ifs.pop()] = i
        if open_ranges: raise ValueError(f"kernel {kname}: RANGE at {open_ranges[-1]} is never ENDed")
        if open_ifs: raise ValueError(f"kernel {kname}: IF at {open_ifs[-1]} has no ENDIF")
        # free each value after its last use; a use inside a loop that the value is defined outside of keeps it to the END
        loops = list(self.range_end.items())
        last = list(range(n))
        for u, (_, _, src, _) in enumerate(self.prog):
            for v in src:
                end = u
                for r, e in loops:
                    if r < u <= e and not (r < v <= e): end = max(end, e)
                last[v] = max(last[v], end)
        self.free_after: list[list[int]] = [[] for _ in range(n)]
        for v, p in enumerate(last): self.free_after[p].append(v)
        # an IF block can be skipped when no lane is active if nothing after it uses a value from inside it
        self.if_skippable = {i: all(not (i < v < e) for u in range(e + 1, n) for v in self.prog[u][2])
                             for i, e in self.if_end.items()}
        # ALU/CAST/BITCAST as functions of the operand values
        self.fns: list[Callable[[list], Any] | None] = [None] * n
        for i, (op, dt, src, _) in enumerate(self.prog):
            sdts = [self.prog[j][1] for j in src]
            if op in GroupOp.ALU: self.fns[i] = _make_alu(op, dt, sdts)
            elif op is Ops.CAST and isinstance(dt, PtrDType): self.fns[i] = lambda xs: xs[0]
            elif op is Ops.CAST: self.fns[i] = lambda xs, s=sdts[0], d=dt: _cast(xs[0], s, d)
            elif op is Ops.BITCAST: self.fns[i] = lambda xs, s=sdts[0], d=dt: _bitcast(xs[0], s, d)
        self.consts = {i: self._const(dt, self.npdt[i], arg) for i, (op, dt, _, arg) in enumerate(self.prog) if op is Ops.CONST}
        self.var_pos = [i for i, (op, _, _, _) in enumerate(self.prog) if op is Ops.DEFINE_VAR]
        self.var_num = {p: k for k, p in enumerate(self.var_pos)}

    def __call__(self, *bufs: Any, global_size: Any = (1, 1, 1), local_size: Any = (1, 1, 1), vals: tuple = (),
                 wait: bool = False) -> float | None:
        st = time.perf_counter()
        gs = [int(x) for x in (global_size if global_size is not None else (1, 1, 1))]
        ls = [int(x) for x in (local_size if local_size is not None else (1, 1, 1))]
        gs, ls = (gs + [1, 1, 1])[:3], (ls + [1, 1, 1])[:3]
        if any(x < 0 for x in gs + ls): raise ValueError(f"kernel {self.name}: bad launch {gs} x {ls}")
        if len(vals) != len(self.var_pos):
            raise ValueError(f"kernel {self.name}: {len(self.var_pos)} DEFINE_VARs but {len(vals)} vals were passed")
        mems = self._params(bufs)
        lsz, ngroups = ls[0] * ls[1] * ls[2], gs[0] * gs[1] * gs[2]
        if lsz and ngroups:
            per_chunk = max(1, self.max_lanes // lsz)
            with np.errstate(all="ignore"):
                for g0 in range(0, ngroups, per_chunk):
                    self._run(mems, _Launch(min(per_chunk, ngroups - g0) * lsz, lsz, g0), gs, ls, vals)
        return time.perf_counter() - st if wait else None

    def _params(self, bufs: tuple) -> dict[int, _Mem]:
        mems: dict[int, _Mem] = {}
        for i, (op, dt, _, slot) in enumerate(self.prog):
            if op is not Ops.PARAM: continue
            if not 0 <= slot < len(bufs):
                raise ValueError(f"kernel {self.name}: PARAM slot {slot} but {len(bufs)} buffers were passed")
            npdt, k = self.npdt[i], dt.base.count
            mv = memoryview(bufs[slot]).cast("B")
            arr = np.frombuffer(mv, dtype=npdt, count=mv.nbytes // npdt.itemsize)
            mems[i] = _Mem(arr, None, k, f"buffer slot {slot}")
        return mems

    # ------------------------------------------------------------ the interpreter loop
    def _run(self, mems: dict[int, _Mem], ln: _Launch, gs: list[int], ls: list[int], vals: tuple) -> None:
        prog, npdt, fns, L = self.prog, self.npdt, self.fns, ln.lanes
        values: list[Any] = [None] * len(prog)
        counters: dict[int, list[int]] = {}
        mask: np.ndarray | None = None  # active lanes, None = all
        mask_stack: list[np.ndarray | None] = []
        pc, n = 0, len(prog)
        while pc < n:
            op, dt, src, arg = prog[pc]
            nxt = pc + 1
            if op is Ops.CONST: values[pc] = self.consts[pc]
            elif (fn := fns[pc]) is not None: values[pc] = fn([values[s] for s in src])
            elif op is Ops.INDEX:
                mem = values[src[0]]
                if not isinstance(mem, _Mem):
                    raise TypeError(f"kernel {self.name}: INDEX at {pc} is not into a PARAM/DEFINE_REG/DEFINE_LOCAL")
                gated = len(src) > 2
                values[pc] = _Ref(mem, values[src[1]], values[src[2]] if gated else None, dt.base.count if isinstance(dt, PtrDType) else mem.k,
                                  gated and prog[src[2]][1].count > 1)
            elif op is Ops.LOAD: values[pc] = self._load(values[src[0]], dt, npdt[pc], ln, mask, pc)
            elif op is Ops.STORE: self._store(values[src[0]], values[src[1]], prog[src[1]][1], ln, mask, pc)
            elif op is Ops.RANGE:
                bound = self._uniform_int(values[src[0]], f"bound of RANGE {pc}")
                if bound <= 0:
                    end = self.range_end[pc]
                    for v in self.free_after[end]: values[v] = None
                    pc = end + 1
                    continue
                counters[pc] = [0, bound]
                values[pc] = npdt[pc].type(0)
            elif op is Ops.END:
                r = src[0]
                c = counters[r]
                c[0] += 1
                if c[0] < c[1]:
                    values[r] = npdt[r].type(c[0])
                    pc = r + 1
                    continue
            elif op is Ops.SPECIAL: values[pc] = self._special(arg, npdt[pc], ln, gs, ls)
            elif op is Ops.VECTORIZE:
                xs = [values[s] for s in src]
                if all(np.ndim(x) == 0 for x in xs): values[pc] = np.array(xs, dtype=npdt[pc])
                else: values[pc] = np.stack([np.broadcast_to(np.asarray(x, npdt[pc]), (L,)) for x in xs], axis=-1)
            elif op is Ops.GEP:
                x, idx = values[src[0]], (arg if isinstance(arg, tuple) else (arg,))
                values[pc] = x[..., idx[0]] if len(idx) == 1 else x[..., list(idx)]
            elif op is Ops.IF:
                cond = values[src[0]]
                mask_stack.append(mask)
                if np.ndim(cond) == 0: new = mask if bool(cond) else np.zeros(L, np.bool_)
                else: new = np.asarray(cond, np.bool_) if mask is None else (mask & cond)
                mask = new
                if mask is not None and self.if_skippable[pc] and not mask.any():
                    pc = self.if_end[pc]
                    continue
            elif op is Ops.ENDIF: mask = mask_stack.pop()
            elif op is Ops.DEFINE_VAR:
                values[pc] = np.array(_wrap_int(int(vals[self.var_num[pc]]), npdt[pc]), npdt[pc])[()]
            elif op is Ops.PARAM: values[pc] = mems[pc]
            elif op is Ops.DEFINE_REG:
                ptr: Any = dt
                values[pc] = _Mem(np.zeros((L, max(ptr.size, 0) * ptr.base.count), npdt[pc]), ln.lane_ids, ptr.base.count,
                                  f"register {arg}")
            elif op is Ops.DEFINE_LOCAL:
                ptr = dt
                values[pc] = _Mem(np.zeros((L // ln.lsz, max(ptr.size, 0) * ptr.base.count), npdt[pc]), ln.group_ids,
                                  ptr.base.count, f"local {arg}", shared=True)
            elif op is Ops.WMMA:
                xs = [values[s] for s in src]
                values[pc] = _warp_wmma(arg, xs, L, ln.lsz, mask) if arg.threads > 1 else _wmma(arg, xs)
            elif op is Ops.NOOP: values[pc] = values[src[0]] if src else None
            elif op is Ops.BARRIER: ln.epoch += 1
            elif op is Ops.SINK: pass
            else: raise NotImplementedError(f"kernel {self.name}: the PYTHON device does not support {op}")
            for v in self.free_after[pc]: values[v] = None
            pc = nxt

    # ------------------------------------------------------------ helpers
    @staticmethod
    def _const(dt: DType, npdt: np.dtype, arg: Any) -> Any:
        def one(x: Any) -> Any:
            if dt.scalar() == dtypes.bfloat16: return _f32_to_bf16(np.float32(x))[()]
            if npdt.kind in "iu": return _wrap_int(int(x), npdt) if not isinstance(x, float) or np.isfinite(x) else 0
            return x
        if dt.count > 1:
            xs = arg if isinstance(arg, tuple) else (arg,) * dt.count
            return np.array([one(x) for x in xs], dtype=npdt)
        return np.array(one(arg), dtype=npdt)[()]

    def _uniform_int(self, v: Any, what: str) -> int:
        a = np.asarray(v)
        if a.ndim and a.size and not (a == a.flat[0]).all():
            raise RuntimeError(f"kernel {self.name}: {what} is not uniform across lanes")
        return int(a.flat[0]) if a.ndim else int(a)

    @staticmethod
    def _special(name: str, npdt: np.dtype, ln: _Launch, gs: list[int], ls: list[int]) -> np.ndarray:
        kind, dim = name[:-1], int(name[-1])
        lid_flat = ln.lane_ids % ln.lsz
        lid = [lid_flat % ls[0], (lid_flat // ls[0]) % ls[1], lid_flat // (ls[0] * ls[1])]
        gid_flat = ln.group_ids + ln.group_base
        gid = [gid_flat % gs[0], (gid_flat // gs[0]) % gs[1], gid_flat // (gs[0] * gs[1])]
        if kind == "gidx": out = gid[dim]
        elif kind == "lidx": out = lid[dim]
        elif kind == "idx": out = gid[dim] * ls[dim] + lid[dim]
        else: raise ValueError(f"unknown SPECIAL {name!r}")
        return out.astype(npdt)

    def _eff_mask(self, mask: np.ndarray | None, gate: Any) -> np.ndarray | None | bool:
        """Lanes that access memory: None = all, False = none, else a bool array."""
        m = mask
        if gate is not None:
            if np.ndim(gate) == 0:
                if not bool(gate): return False
            else: m = np.asarray(gate, np.bool_) if m is None else (m & gate)
        if m is None: return None
        if not m.any(): return False
        return None if m.all() else m

    def _check(self, mem: _Mem, ix: np.ndarray, c: int, lanes: np.ndarray | None, pc: int, k: int) -> None:
        """``ix``: element indexes (int64) of the accessing lanes; each touches scalars [ix*k, ix*k+c)."""
        if ix.size == 0: return
        lo, hi = int(ix.min()), int(ix.max())
        if lo >= 0 and hi * k + c <= mem.n: return
        bad = int(np.flatnonzero((ix < 0) | (ix * k + c > mem.n))[0])
        lane = bad if lanes is None else int(lanes[bad])
        size = mem.n // k
        raise IndexError(f"kernel {self.name}: out of bounds access to {mem.name} at index {int(ix.flat[bad])}"
                         f"{f' (width {c})' if c > k else ''}, valid is [0, {size}) (lane {lane}, uop {pc})")

    def _addresses(self, ref: _Ref, c: int, ln: _Launch, mask: Any, pc: int) -> tuple:
        """(lanes or None, row index or None, flat scalar index) for the accessing lanes."""
        mem = ref.mem
        idx = np.broadcast_to(np.asarray(ref.idx).astype(np.int64, copy=False), (ln.lanes,))
        lanes = None if mask is None else np.flatnonzero(mask)
        ix = idx if lanes is None else idx[lanes]
        self._check(mem, ix, c, lanes, pc, ref.k)
        flat = ix * ref.k if ref.k != 1 else ix
        if c > 1: flat = flat[:, None] + np.arange(c)
        rows = None
        if mem.rows is not None:
            rows = mem.rows if lanes is None else mem.rows[lanes]
            if c > 1: rows = rows[:, None]
        return lanes, rows, flat

    def _gated_elements(self, ref: _Ref, c: int, ln: _Launch, mask: Any, pc: int) -> tuple:
        """(lanes, elements, rows or None, flat scalar index) of the elements a vector access under a per-element
        gate touches: those whose gate bit and lane are on. They must be in bounds; the others may point anywhere."""
        mem = ref.mem
        on = np.broadcast_to(np.asarray(ref.gate, np.bool_), (ln.lanes, c))
        if mask is not None: on = on & np.asarray(mask, np.bool_)[:, None]
        lanes, elements = np.nonzero(on)
        index = np.broadcast_to(np.asarray(ref.idx).astype(np.int64, copy=False), (ln.lanes,))[lanes]
        flat = index * ref.k + elements
        if flat.size and (int(flat.min()) < 0 or int(flat.max()) >= mem.n):
            bad = int(np.flatnonzero((flat < 0) | (flat >= mem.n))[0])
            raise IndexError(f"kernel {self.name}: out of bounds access to {mem.name} at scalar {int(flat[bad])} (element "
                             f"{int(elements[bad])} of a gated vector), valid is [0, {mem.n}) (lane {int(lanes[bad])}, uop {pc})")
        rows = None if mem.rows is None else mem.rows[lanes]
        return lanes, elements, rows, flat

    def _load(self, ref: Any, dt: DType, npdt: np.dtype, ln: _Launch, mask: Any, pc: int) -> Any:
        if not isinstance(ref, _Ref): raise TypeError(f"kernel {self.name}: LOAD at {pc} is not from an INDEX")
        mem, c = ref.mem, dt.count
        tail = (c,) if c > 1 else ()
        if ref.vector_gate:   # each element on its own: off elements read 0 and touch no memory
            lanes, elements, rows, flat = self._gated_elements(ref, c, ln, mask, pc)
            out = np.zeros((ln.lanes, c), npdt)
            out[lanes, elements] = mem.arr[flat] if rows is None else mem.arr[rows, flat]
            return out
        m = self._eff_mask(mask, ref.gate)
        if m is False: return np.zeros(tail, npdt) if c > 1 else npdt.type(0)
        if mem.writer is not None: self._check_race(mem, ref, c, ln, m, pc)
        if m is None and np.ndim(ref.idx) == 0:  # uniform address
            i = int(ref.idx)
            self._check(mem, np.array([i]), c, None, pc, ref.k)
            s = slice(i * ref.k, i * ref.k + c) if c > 1 else i * ref.k
            if mem.rows is None: return np.array(mem.arr[s], npdt) if c > 1 else npdt.type(mem.arr[s])
            if mem.rows is ln.lane_ids: return np.array(mem.arr[:, s], npdt)
            return np.array(mem.arr[mem.rows, s], npdt)
        lanes, rows, flat = self._addresses(ref, c, ln, m, pc)
        got = mem.arr[flat] if rows is None else mem.arr[rows, flat]
        if lanes is None: return got.astype(npdt, copy=False)
        out = np.zeros((ln.lanes,) + tail, npdt)
        out[lanes] = got
        return out

    def _check_race(self, mem: _Mem, ref: _Ref, c: int, ln: _Launch, m: Any, pc: int) -> None:
        """A lane reads local memory another lane wrote since the last BARRIER: raise."""
        if m is False: return
        lanes, rows, flat = self._addresses(ref, c, ln, m, pc)
        lane = ln.lane_ids if lanes is None else lanes
        if c > 1: lane = lane[:, None]
        bad = (mem.epoch[rows, flat] == ln.epoch) & (mem.writer[rows, flat] != lane)
        if bad.any():
            at = np.argwhere(bad)[0]
            reader, elem = int(np.broadcast_to(lane, bad.shape)[tuple(at)]), int(np.asarray(flat)[tuple(at)])
            raise RuntimeError(f"kernel {self.name}: race on {mem.name}: lane {reader} reads element {elem} that lane "
                               f"{int(mem.writer[np.broadcast_to(rows, bad.shape)[tuple(at)], elem])} wrote with no BARRIER in between (uop {pc})")

    def _store(self, ref: Any, val: Any, vdt: DType, ln: _Launch, mask: Any, pc: int) -> None:
        if not isinstance(ref, _Ref): raise TypeError(f"kernel {self.name}: STORE at {pc} is not to an INDEX")
        mem, c = ref.mem, vdt.count
        val = np.asarray(val)
        if val.dtype != mem.arr.dtype: val = val.astype(mem.arr.dtype)
        if ref.vector_gate:   # each element on its own: off elements write nothing
            if mem.writer is not None: raise NotImplementedError(f"kernel {self.name}: gated vector store to local memory (uop {pc})")
            lanes, elements, rows, flat = self._gated_elements(ref, c, ln, mask, pc)
            chosen = np.broadcast_to(val, (ln.lanes, c))[lanes, elements]
            if rows is None: mem.arr[flat] = chosen
            else: mem.arr[rows, flat] = chosen
            return
        m = self._eff_mask(mask, ref.gate)
        if m is False: return
        per_lane = val.ndim > (1 if c > 1 else 0)
        if mem.writer is not None:  # remember who wrote, for the race check of later loads
            lanes, rows, flat = self._addresses(ref, c, ln, m, pc)
            lane = ln.lane_ids if lanes is None else lanes
            mem.writer[rows, flat] = lane[:, None] if c > 1 else lane
            mem.epoch[rows, flat] = ln.epoch
        if m is None and np.ndim(ref.idx) == 0:  # uniform address
            i = int(ref.idx)
            self._check(mem, np.array([i]), c, None, pc, ref.k)
            s = slice(i * ref.k, i * ref.k + c) if c > 1 else i * ref.k
            if mem.rows is None: mem.arr[s] = val[-1] if per_lane else val  # every lane writes here: the last one wins
            elif mem.rows is ln.lane_ids: mem.arr[:, s] = val
            else: mem.arr[mem.rows, s] = val
            return
        lanes, rows, flat = self._addresses(ref, c, ln, m, pc)
        if per_lane and lanes is not None: val = val[lanes]
        elif not per_lane: val = np.broadcast_to(val, flat.shape)
        if rows is None: mem.arr[flat] = val
        else: mem.arr[rows, flat] = val

class PythonDevice(Compiled):
    def __init__(self, device: str):
        super().__init__(device, MallocAllocator(), PythonRenderer(getenv("EMULATE", "")), PythonCompiler(), PythonProgram)
