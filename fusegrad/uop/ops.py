"""The one IR: ``UOp(op, dtype, src, arg)``, the ``Ops`` enum, patterns and graph rewriting.

UOps are immutable and interned: building a UOp equal to an existing one returns the same object,
so ``a is b`` is equality and common subexpressions are shared for free.

>>> x = UOp.variable("x", 0, 10)
>>> (x + 1) is (x + 1)
True
>>> graph_rewrite(x * 1 + 0, symbolic) is x
True
"""
from __future__ import annotations
import functools, inspect, itertools, math, struct, weakref
from dataclasses import dataclass
from enum import Enum, IntEnum, auto
from typing import Any, Callable, Collection, Iterable, Iterator, Sequence
from fusegrad.dtype import ConstType, DType, PtrDType, dtypes, truncate_float
from fusegrad.helpers import prod, dedup

class FastEnum(IntEnum):
    def __str__(self) -> str: return f"Ops.{self.name}"
    def __repr__(self) -> str: return str(self)

class Ops(FastEnum):
    """Every operation of the IR, grouped by the stage that uses it."""
    # ---- tensor graph: sources of data
    BUFFER = auto(); CONST = auto(); DEVICE = auto(); DEFINE_VAR = auto(); BIND = auto()
    ARANGE = auto()   # the integers 0..n-1 along one axis (arange, eye, one_hot build on it)
    # ---- tensor graph: movement ops (become index arithmetic in the scheduler)
    RESHAPE = auto(); EXPAND = auto(); PERMUTE = auto(); PAD = auto(); SHRINK = auto(); FLIP = auto()
    # ---- tensor graph: everything else
    REDUCE_AXIS = auto(); CONTIGUOUS = auto(); CONTIGUOUS_BACKWARD = auto(); COPY = auto(); ASSIGN = auto()
    DETACH = auto(); MULTI = auto(); CUSTOM = auto()
    # ---- unary ALU
    CAST = auto(); BITCAST = auto(); EXP2 = auto(); LOG2 = auto(); SIN = auto(); SQRT = auto(); RECIPROCAL = auto()
    NEG = auto(); TRUNC = auto()
    COS = auto()   # (arg: None, or a bound B on |x| the builder guarantees; B < 2**15 lets codegen reduce x more cheaply)
    # ---- binary ALU
    ADD = auto(); MUL = auto(); IDIV = auto(); MOD = auto(); MAX = auto(); CMPLT = auto(); CMPNE = auto(); CMPEQ = auto()
    AND = auto(); OR = auto(); XOR = auto(); SHL = auto(); SHR = auto(); SUB = auto(); FDIV = auto(); POW = auto()
    THREEFRY = auto()
    # ---- ternary ALU
    WHERE = auto(); MULACC = auto()
    # ---- kernel level
    SINK = auto(); KERNEL = auto(); PARAM = auto(); DEFINE_LOCAL = auto(); DEFINE_REG = auto(); RANGE = auto()
    END = auto(); INDEX = auto(); LOAD = auto(); STORE = auto(); REDUCE = auto(); SPECIAL = auto(); BARRIER = auto()
    VECTORIZE = auto(); GEP = auto(); WMMA = auto(); IF = auto(); ENDIF = auto(); NOOP = auto()

def _fast_member_reads(enum_class: type) -> None:
    """Make ``enum_class.MEMBER`` a plain class-attribute read.

    Before Python 3.12 the enum metaclass defines ``__getattr__`` (a fallback for members hidden by
    other names), and a metaclass with ``__getattr__`` sends *every* attribute read on its classes
    through a slow generic hook: ``Ops.ADD`` cost ~0.13 us instead of ~0.04 us, and the front end,
    the scheduler and the compiler read Ops members everywhere (an eager ``x + 1`` did hundreds).
    When every member is an entry of the class dict the fallback is never used, so the class gets
    a copy of its metaclass without it (same methods: iteration, ``Ops(n)``, ``Ops["ADD"]``, the
    reassignment guard); only ``isinstance(Ops, EnumType)`` changes."""
    meta = type(enum_class)
    if "__getattr__" not in vars(meta) or any(vars(enum_class).get(m.name) is not m for m in enum_class): return
    methods = {k: v for k, v in vars(meta).items() if k not in ("__getattr__", "__dict__", "__weakref__")} | {"__module__": __name__}
    enum_class.__class__ = type("Fast" + meta.__name__, (type,), methods)
_fast_member_reads(Ops)

class GroupOp:
    Unary = {Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.COS, Ops.SQRT, Ops.RECIPROCAL, Ops.NEG, Ops.TRUNC}
    Binary = {Ops.ADD, Ops.MUL, Ops.IDIV, Ops.MOD, Ops.MAX, Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ, Ops.AND, Ops.OR, Ops.XOR,
              Ops.SHL, Ops.SHR, Ops.SUB, Ops.FDIV, Ops.POW, Ops.THREEFRY}
    Ternary = {Ops.WHERE, Ops.MULACC}
    ALU = Unary | Binary | Ternary
    Elementwise = ALU | {Ops.CAST, Ops.BITCAST}
    Movement = {Ops.RESHAPE, Ops.EXPAND, Ops.PERMUTE, Ops.PAD, Ops.SHRINK, Ops.FLIP}
    Commutative = {Ops.ADD, Ops.MUL, Ops.MAX, Ops.CMPNE, Ops.CMPEQ, Ops.XOR, Ops.AND, Ops.OR}
    Associative = {Ops.ADD, Ops.MUL, Ops.AND, Ops.OR, Ops.MAX}
    Comparison = {Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ}
    # ops where f(0) != 0, so a padded region can't be computed as zeros: the scheduler gates them
    UnsafePad = {Ops.RECIPROCAL, Ops.LOG2, Ops.EXP2, Ops.COS, Ops.IDIV, Ops.FDIV, Ops.POW, Ops.CMPLT, Ops.CMPEQ}

class AxisType(Enum):
    """The kind of a RANGE (a loop index). The optimizer changes kinds; renderers place them."""
    GLOBAL = auto(); THREAD = auto(); LOCAL = auto(); LOOP = auto(); GROUP_REDUCE = auto(); REDUCE = auto()
    UPCAST = auto(); UNROLL = auto()
    STAGE = auto()   # a loop that fills a staged copy of a small input (OptOps.STAGE); not an optimizable axis
    WARP = auto()    # the lanes of a warp tensor core (OptOps.TC on CUDA): local dim x, not an optimizable axis
    def __repr__(self) -> str: return f"AxisType.{self.name}"

AXIS_COLORS = {AxisType.GLOBAL: "blue", AxisType.THREAD: "BLUE", AxisType.LOCAL: "cyan", AxisType.LOOP: "WHITE",
               AxisType.GROUP_REDUCE: "green", AxisType.REDUCE: "red", AxisType.UPCAST: "yellow", AxisType.UNROLL: "magenta",
               AxisType.STAGE: "GREEN", AxisType.WARP: "CYAN"}

class memoized_property:
    """A property computed once per object and then stored in its ``__dict__`` (where later reads find
    it without calling anything). ``functools.cached_property`` does the same but, on Python 3.11, takes
    a lock on every first computation; UOps compute several of these each (an eager op builds a few new
    nodes per call), so the lock showed in the per-op overhead. A race only computes a pure value twice."""
    def __init__(self, func: Callable[[Any], Any]):
        self.func, self.name, self.__doc__ = func, func.__name__, func.__doc__
    def __set_name__(self, owner: type, name: str) -> None: self.name = name
    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if obj is None: return self
        value = obj.__dict__[self.name] = self.func(obj)
        return value

# ---------------------------------------------------------------- interning

def _arg_key(arg: Any) -> Any:
    """A hashable key that tells 0.0 from -0.0, True from 1 and NaN from itself consistently."""
    # every UOp built goes through here: ints, strings, None and tuples of those (shapes, a BUFFER's
    # (id, device, size)) are their own key, found without the isinstance chain or a generator
    kind = type(arg)
    if kind is int or kind is str or arg is None: return arg
    if kind is tuple:
        for a in arg:
            if (item_kind := type(a)) is int or item_kind is str: continue
            # (a pair of ints: a SHRINK's or PAD's bounds for one dim)
            if item_kind is tuple and len(a) == 2 and type(a[0]) is int and type(a[1]) is int: continue
            break
        else: return arg
    if isinstance(arg, float): return (float, struct.pack("<d", arg))
    if isinstance(arg, bool): return (bool, arg)
    if isinstance(arg, tuple): return tuple(_arg_key(a) for a in arg)
    return arg

class UOpMetaClass(type):
    cache: dict[tuple, weakref.ReferenceType] = {}
    def __call__(cls, op: Ops, dtype: DType = dtypes.void, src: tuple[UOp, ...] = tuple(), arg: Any = None):
        # every UOp built comes here (a few per eager op), so: an int, str or None arg is its own key without a
        # call, the cache is a local, and a new node's fields are set here rather than through type.__call__,
        # super() and __init__ (UOp.__init__ sets the same four fields; no subclass of UOp exists)
        cache = _UOP_CACHE
        kind = type(arg)
        key = (op, dtype, src, arg if kind is int or kind is str or arg is None else _arg_key(arg))
        if (ref := cache.get(key)) is not None and (existing := ref()) is not None: return existing
        created = object.__new__(cls)
        created.op, created.dtype, created.src, created.arg = op, dtype, src, arg
        cache[key] = weakref.ref(created, lambda _, key=key: _UOP_CACHE.pop(key, None))
        return created

_UOP_CACHE = UOpMetaClass.cache
sint = "int | UOp"   # a size that may be symbolic

_LOOK_BELOW = object()   # (a leaf function's answer: no value without the sources')

def _bottom_up(roots: "Iterable[UOp]", done: dict, leaf: Callable[["UOp"], Any], build: Callable[["UOp", dict], Any]) -> dict:
    """Fill ``done[node]`` for every node under ``roots`` that is reached, iteratively (deep graphs don't recurse), each
    node once for all roots: ``leaf(node)`` answers without looking at the sources (or returns ``_LOOK_BELOW``), else
    ``build(node, done)`` once every source is done. The shared walk of ``UOp.reaching`` and ``UOp.substitute_many``."""
    for root in roots:
        stack = [(root, False)]
        while stack:
            node, sources_done = stack.pop()
            if node in done: continue
            if sources_done: done[node] = build(node, done)
            elif (value := leaf(node)) is not _LOOK_BELOW: done[node] = value
            else:
                stack.append((node, True))
                stack.extend((s, False) for s in node.src if s not in done)
    return done

class UOp(metaclass=UOpMetaClass):
    """One node of the IR. Build with the helpers (``UOp.const``, ``+``, ``.alu``), not by hand."""
    __slots__ = ("op", "dtype", "src", "arg", "__dict__", "__weakref__")
    def __init__(self, op: Ops, dtype: DType = dtypes.void, src: tuple["UOp", ...] = tuple(), arg: Any = None):
        self.op, self.dtype, self.src, self.arg = op, dtype, src, arg
    def __reduce__(self): return UOp, (self.op, self.dtype, self.src, self.arg)
    def replace(self, **kwargs: Any) -> "UOp":
        fields = {"op": self.op, "dtype": self.dtype, "src": self.src, "arg": self.arg} | kwargs
        return UOp(fields["op"], fields["dtype"], fields["src"], fields["arg"])
    def __repr__(self) -> str: return pretty_print(self)

    # ---------------------------------------------------------------- graph walks
    @memoized_property
    def _ancestors(self) -> dict["UOp", None]:
        """Every UOp this one depends on, sources before users, *without* itself: caching a dict
        that contains the UOp itself would make a reference cycle, and graphs (with their
        buffers) would then wait for the cycle collector instead of being freed at once."""
        order: dict[UOp, None] = {}
        stack: list[tuple[UOp, bool]] = [(s, False) for s in reversed(self.src)]
        while stack:
            node, expanded = stack.pop()
            if node in order: continue
            if expanded: order[node] = None
            elif "_ancestors" in node.__dict__:   # reuse a cached sub-walk
                for x in node._ancestors:
                    if x not in order: order[x] = None
                order[node] = None
            else:
                stack.append((node, True))
                for s in reversed(node.src):
                    if s not in order: stack.append((s, False))
        return order
    @property
    def toposort(self) -> "Toposort":
        """Every UOp this one depends on (itself last), sources before users. Iterative, so deep
        graphs don't hit the recursion limit."""
        return Toposort(self._ancestors, self)
    def sparents(self) -> dict["UOp", None]: return self.toposort
    def reached(self, nodes: "Collection[UOp]") -> list["UOp"]:
        """The ones of ``nodes`` in this graph (itself included), looked up from the smaller side in the cached
        ancestors: after a realize, asking which of many pending graphs read its few nodes (or which of its buffers a
        few graphs read) must not walk every graph.

        >>> x = UOp.const(dtypes.int32, 1); y = x + 2; y.reached([x, UOp.const(dtypes.int32, 5)]) == [x]
        True
        """
        graph = self.toposort
        if len(nodes) < len(graph): return [n for n in nodes if n in graph]
        return [x for x in graph if x in nodes]

    @staticmethod
    def reaching(roots: "Iterable[UOp]", targets: "Collection[UOp]", use_cached: bool = True) -> dict["UOp", bool]:
        """For every node under ``roots`` (roots included): does its graph contain one of ``targets``? One iterative
        walk shared by all roots, so graphs built on top of each other (a layer's lazy tensors) cost their distinct
        nodes once. A node whose ancestry is already cached (``toposort``, ``reached``) answers from it without a
        walk: a graph that stays pending across many realizes (100 lazy draws realized one by one) is walked once,
        when the caller caches it (see ``Tensor._apply_becomes``). ``use_cached=False`` walks every node instead.

        >>> x = UOp.const(dtypes.int32, 1); y = x + 2; z = UOp.const(dtypes.int32, 3) * 4
        >>> [UOp.reaching([y, z], [x])[u] for u in (y, z)]
        [True, False]
        """
        def leaf(node: UOp) -> Any:
            if node in targets: return True
            if use_cached and "_ancestors" in node.__dict__: return bool(node.reached(targets))
            return _LOOK_BELOW
        return _bottom_up(roots, {}, leaf, lambda node, reads: any(reads[s] for s in node.src))

    @staticmethod
    def substitute_many(roots: "Sequence[UOp]", mapping: dict["UOp", "UOp"]) -> list["UOp"]:
        """``[r.substitute(mapping) for r in roots]`` in one walk: only the nodes that reach a key of ``mapping``
        (``reaching``) are rebuilt, each once for all roots; the rest of the graphs is kept as it is.

        >>> x, y = UOp.const(dtypes.int32, 1), UOp.const(dtypes.int32, 5)
        >>> UOp.substitute_many([x + 2, y * 3], {x: y}) == [y + 2, y * 3]
        True
        """
        reads = UOp.reaching(roots, mapping)
        def leaf(node: UOp) -> Any:
            if (new := mapping.get(node)) is not None: return new
            if not reads.get(node, True): return node
            # (below a node that answered from its cached ancestry the first walk went no further: one walk of its
            # whole graph answers for every node under it)
            if any(s not in reads for s in node.src): reads.update(UOp.reaching([node], mapping, use_cached=False))
            return _LOOK_BELOW
        built = _bottom_up(roots, {}, leaf, lambda node, built: node.replace(src=tuple(built[s] for s in node.src)))
        return [built[r] for r in roots]

    # ---------------------------------------------------------------- shapes (tensor graph)
    def _fill_bottom_up(self, attribute: str) -> None:
        """Compute a cached attribute for every ancestor that lacks it, sources before users, so a deep
        graph never recurses deeper than one level. The walk stops at nodes that have it: a new graph
        on top of an old one costs its new nodes only."""
        stack: list[tuple[UOp, bool]] = [(s, False) for s in self.src]
        while stack:
            node, sources_done = stack.pop()
            if attribute in node.__dict__: continue
            if sources_done: getattr(node, attribute)
            else:
                stack.append((node, True))
                stack.extend((s, False) for s in node.src if attribute not in s.__dict__)
    @memoized_property
    def shape(self) -> tuple | None:
        """The shape of a tensor-graph UOp (None for kernel-level UOps). Symbolic sizes are UOps."""
        # (plain loops, no generators: every node a tensor op builds comes here once)
        for source in self.src:
            if "shape" not in source.__dict__:
                self._fill_bottom_up("shape")
                break
        shape = _compute_shape(self)
        if shape is None: return None
        for size in shape:
            if type(size) is not int: return tuple(s.ssimplify() if isinstance(s, UOp) else s for s in shape)
        return shape
    @property
    def size(self) -> Any: return prod(self.shape) if self.shape is not None else 1
    @property
    def ndim(self) -> int: return len(self.shape) if self.shape is not None else 0
    @memoized_property
    def device(self) -> str | tuple[str, ...] | None:
        if self.op is Ops.DEVICE: return self.arg
        if self.op is Ops.BUFFER: return self.arg[1]
        if self.op is Ops.COPY: return self.arg
        for source in self.src:   # (a deep graph whose sources lack theirs: filled bottom-up, not by recursion)
            if "device" not in source.__dict__:
                self._fill_bottom_up("device")
                break
        if self.op is Ops.MULTI:   # the device tuple: one device per shard (one source on a tuple: a reshard of it)
            return self.src[0].device if len(self.src) == 1 and isinstance(self.src[0].device, tuple) else tuple(s.device for s in self.src)
        for s in self.src:
            if (d := s.device) is not None: return d
        return None
    @property
    def axis(self) -> int | None:
        """For a tensor on a device tuple, the axis its shards split (None: replicated on every device),
        as tinygrad's ``t.uop.axis``; None for a single-device tensor."""
        if not isinstance(self.device, tuple): return None
        from fusegrad.schedule.multi import multi_axis   # the multi-device rules own the answer
        return multi_axis(self)
    @property
    def base(self) -> "UOp":
        """The UOp under a stack of movement ops."""
        node = self
        while node.op in GroupOp.Movement: node = node.src[0]
        return node

    # ---------------------------------------------------------------- constructors
    @staticmethod
    def const(dtype: DType, value: Any, device: str | None = None, shape: tuple | None = None) -> "UOp":
        """A constant. With ``device``/``shape`` it is a tensor-graph constant broadcast to ``shape``."""
        if isinstance(value, UOp):  # a symbolic value (bound variables) used as a number
            if device is not None: ret = UOp(Ops.CONST, dtype, (UOp(Ops.DEVICE, arg=device),), value)
            else: ret = value if value.dtype == dtype else value.cast(dtype)
        else:
            value = dtypes.as_const(value, dtype)
            if isinstance(value, float) and dtype.scalar() not in (dtypes.float64, dtypes.weakfloat):
                value = truncate_float(value, dtype.scalar())
            ret = UOp(Ops.CONST, dtype, (UOp(Ops.DEVICE, arg=device),) if device is not None else (), value)
        if shape is not None:
            ret = ret.reshape((1,) * len(shape)).expand(shape) if len(shape) else ret
        return ret
    def const_like(self, value: Any) -> "UOp":
        """A constant of this UOp's dtype (and shape and device, for tensor-graph UOps)."""
        if self.shape is not None and self.device is not None:   # a device tuple makes a replicated multi-device constant
            return UOp.const(self.dtype, value, self.device, self.shape)
        return UOp.const(self.dtype, value)
    @staticmethod
    def variable(name: str, min_val: int, max_val: int, dtype: DType = dtypes.index) -> "UOp":
        """A symbolic integer in [min_val, max_val]: ``UOp.variable("i", 1, 10).bind(3)``."""
        if not isinstance(min_val, int) or not isinstance(max_val, int) or min_val > max_val:
            raise ValueError(f"invalid bounds for variable {name}: [{min_val}, {max_val}]")
        return UOp(Ops.DEFINE_VAR, dtype, arg=(name, min_val, max_val))
    def bind(self, value: int) -> "UOp":
        """Give a variable a value for one use: ``Variable("i", 1, 10).bind(3)``."""
        if self.op is not Ops.DEFINE_VAR: raise TypeError(f"can only bind a variable, not {self.op}")
        if not isinstance(value, int): raise TypeError(f"bind takes an int, got {type(value).__name__}")
        if not self.arg[1] <= value <= self.arg[2]:
            raise ValueError(f"value {value} is out of bounds for {self.arg[0]} in [{self.arg[1]}, {self.arg[2]}]")
        return UOp(Ops.BIND, self.dtype, (self, UOp.const(self.dtype, value)))
    def unbind(self) -> tuple["UOp", int]:
        if self.op is not Ops.BIND: raise TypeError(f"{self.op} is not a bound variable")
        return self.src[0], self.src[1].arg
    @property
    def expr(self) -> str:
        """The name of a variable."""
        node = self.src[0] if self.op is Ops.BIND else self
        return node.arg[0]
    @property
    def val(self) -> int: return self.unbind()[1]
    def vars(self) -> set["UOp"]:
        """Every DEFINE_VAR or BIND under this UOp."""
        return {x for x in self.toposort if x.op in (Ops.DEFINE_VAR, Ops.BIND)}

    # ---------------------------------------------------------------- ALU helpers
    def alu(self, op: Ops, *src: "UOp | ConstType") -> "UOp":
        operands = (self,) + tuple(s if isinstance(s, UOp) else self.const_like(s) for s in src)
        out_dtype = operands[-1].dtype if op is Ops.WHERE else self.dtype
        if op in GroupOp.Comparison: out_dtype = dtypes.bool.vec(self.dtype.count) if self.dtype.count > 1 else dtypes.bool
        return UOp(op, out_dtype, operands)
    def _binop(self, op: Ops, other: Any, reverse: bool) -> "UOp":
        if hasattr(other, "uop"):   # a Tensor on the right of a Variable: tinygrad refuses it too
            raise RuntimeError(f"can't apply {op.name} to a UOp and a {type(other).__name__}: put the tensor first "
                               f"(tensor * variable), or make the variable a tensor with Tensor(variable)")
        other = other if isinstance(other, UOp) else self.const_like(other)
        return other.alu(op, self) if reverse else self.alu(op, other)
    def __add__(self, x): return self._binop(Ops.ADD, x, False)
    def __radd__(self, x): return self._binop(Ops.ADD, x, True)
    def __sub__(self, x): return self._binop(Ops.ADD, -x if isinstance(x, UOp) else -x, False)
    def __rsub__(self, x): return (-self)._binop(Ops.ADD, x, True)
    def __mul__(self, x): return self._binop(Ops.MUL, x, False)
    def __rmul__(self, x): return self._binop(Ops.MUL, x, True)
    def __floordiv__(self, x): return self._binop(Ops.IDIV, x, False)
    def __rfloordiv__(self, x): return self._binop(Ops.IDIV, x, True)
    def __truediv__(self, x): return self._binop(Ops.FDIV, x, False)
    def __mod__(self, x): return self._binop(Ops.MOD, x, False)
    def __rmod__(self, x): return self._binop(Ops.MOD, x, True)
    def __neg__(self): return self.alu(Ops.NEG)
    def __lt__(self, x): return self._binop(Ops.CMPLT, x, False)
    def __gt__(self, x): return self._binop(Ops.CMPLT, x, True)
    def __ge__(self, x): return (self < x).logical_not()
    def __le__(self, x): return (self > x).logical_not()
    def __and__(self, x): return self._binop(Ops.AND, x, False)
    def __rand__(self, x): return self._binop(Ops.AND, x, True)
    def __or__(self, x): return self._binop(Ops.OR, x, False)
    def __ror__(self, x): return self._binop(Ops.OR, x, True)
    def __xor__(self, x): return self._binop(Ops.XOR, x, False)
    def __lshift__(self, x): return self._binop(Ops.SHL, x, False)
    def __rshift__(self, x): return self._binop(Ops.SHR, x, False)
    # equality is identity (UOps are interned) and the hash is object's own: both stay in C, which
    # matters because every graph walk hashes each node several times
    __hash__ = object.__hash__
    __eq__ = object.__eq__
    def __bool__(self) -> bool:
        decided = resolve_bool(self)
        if decided is None: raise ValueError(f"symbolic condition {self.render()} can't be decided")
        return decided
    def ne(self, x: Any) -> "UOp": return self._binop(Ops.CMPNE, x, False)
    def eq(self, x: Any) -> "UOp": return self._binop(Ops.CMPEQ, x, False)
    def maximum(self, x: Any) -> "UOp": return self._binop(Ops.MAX, x, False)
    def minimum(self, x: Any) -> "UOp": return -((-self).maximum(-x if isinstance(x, UOp) else -x))
    def logical_not(self) -> "UOp": return self.ne(True)
    def where(self, x: Any, y: Any) -> "UOp":
        if not isinstance(x, UOp) and not isinstance(y, UOp): raise TypeError("where needs at least one UOp branch")
        x = x if isinstance(x, UOp) else y.const_like(x)
        y = y if isinstance(y, UOp) else x.const_like(y)
        return self.alu(Ops.WHERE, x, y)
    def cast(self, dtype: DType) -> "UOp":
        return self if self.dtype == dtype else UOp(Ops.CAST, dtype, (self,))
    def bitcast(self, dtype: DType) -> "UOp":
        return self if self.dtype == dtype else UOp(Ops.BITCAST, dtype, (self,))
    def sink(self, *srcs: "UOp") -> "UOp": return UOp(Ops.SINK, dtypes.void, (self,) + srcs)
    def index(self, idx: "UOp", gate: "UOp | None" = None) -> "UOp":
        return UOp(Ops.INDEX, self.dtype, (self, idx) + ((gate,) if gate is not None else ()))
    def load(self, *extra: "UOp", dtype: DType | None = None) -> "UOp":
        return UOp(Ops.LOAD, dtype if dtype is not None else self.dtype.base, (self,) + extra)
    def store(self, value: "UOp", *extra: "UOp") -> "UOp":
        return UOp(Ops.STORE, dtypes.void, (self, value) + extra)

    # ---------------------------------------------------------------- movement ops (tensor graph)
    def _mop(self, op: Ops, arg: Any) -> "UOp":
        return UOp(op, self.dtype, (self,), arg)
    def reshape(self, shape: tuple) -> "UOp":
        return self if self.shape == tuple(shape) else self._mop(Ops.RESHAPE, tuple(shape))
    def expand(self, shape: tuple) -> "UOp":
        return self if self.shape == tuple(shape) else self._mop(Ops.EXPAND, tuple(shape))
    def permute(self, order: tuple[int, ...]) -> "UOp":
        return self if tuple(order) == tuple(range(len(order))) else self._mop(Ops.PERMUTE, tuple(order))
    def pad(self, padding: tuple[tuple, ...]) -> "UOp":
        return self if all(p == (0, 0) for p in padding) else self._mop(Ops.PAD, tuple(padding))
    def shrink(self, bounds: tuple[tuple, ...]) -> "UOp":
        return self if all(b == (0, s) for b, s in zip(bounds, self.shape)) else self._mop(Ops.SHRINK, tuple(bounds))
    def flip(self, axes: tuple[bool, ...]) -> "UOp":
        return self if not any(axes) else self._mop(Ops.FLIP, tuple(axes))
    def reduce_axis(self, op: Ops, axes: tuple[int, ...]) -> "UOp":
        axes = tuple(sorted(a for a in axes if self.shape[a] != 1)) if self.shape is not None else tuple(axes)
        if not axes: return self
        return UOp(Ops.REDUCE_AXIS, self.dtype, (self,), (op, axes))

    # ---------------------------------------------------------------- bounds for symbolic math
    @memoized_property
    def vmin_vmax(self) -> tuple[ConstType, ConstType]:
        if any("vmin_vmax" not in s.__dict__ for s in self.src): self._fill_bottom_up("vmin_vmax")
        return _min_max(self)
    @property
    def vmin(self) -> ConstType: return self.vmin_vmax[0]
    @property
    def vmax(self) -> ConstType: return self.vmin_vmax[1]
    def simplify(self) -> "UOp":
        from fusegrad.uop.symbolic import symbolic
        return graph_rewrite(self, symbolic)
    def ssimplify(self) -> "UOp | ConstType":
        """Simplify; return a Python int when the result is a constant."""
        simplified = self.simplify()
        return simplified.arg if simplified.op is Ops.CONST else simplified
    def substitute(self, mapping: dict["UOp", "UOp"]) -> "UOp":
        return graph_rewrite(self, PatternMatcher([]), replace_map=mapping)
    def render(self, simplify: bool = True) -> str:
        """A readable infix form of an index expression: ``(x*4+1)``."""
        node = self.simplify() if simplify else self
        return render_expr(node)

    # ---------------------------------------------------------------- misc
    @property
    def st_arg(self): raise AttributeError("fusegrad has no ShapeTracker; use .shape")
    def key(self) -> bytes:
        import hashlib
        return hashlib.sha256(pretty_print(self).encode()).digest()

class Toposort:
    """A read-only ordered view of a graph: the cached ancestors, then the node itself."""
    __slots__ = ("ancestors", "node")
    def __init__(self, ancestors: dict[UOp, None], node: UOp): self.ancestors, self.node = ancestors, node
    def __iter__(self) -> Iterator[UOp]:
        yield from self.ancestors
        yield self.node
    def __contains__(self, x: object) -> bool: return x is self.node or x in self.ancestors
    def __len__(self) -> int: return len(self.ancestors) + 1
    def __reversed__(self) -> Iterator[UOp]:
        yield self.node
        yield from reversed(self.ancestors)

# ---------------------------------------------------------------- shape inference

def _compute_shape(u: UOp) -> tuple | None:
    op = u.op
    if op is Ops.BUFFER: return (u.arg[2],)
    if op is Ops.ARANGE: return (u.arg,)
    if op is Ops.CONST: return () if u.src else None
    if op in (Ops.DEFINE_VAR, Ops.BIND): return None
    if op is Ops.RESHAPE or op is Ops.EXPAND: return u.arg
    if op is Ops.PERMUTE: return tuple(u.src[0].shape[i] for i in u.arg)
    if op is Ops.PAD: return tuple(s + b + a for s, (b, a) in zip(u.src[0].shape, u.arg))
    if op is Ops.SHRINK: return tuple(e - b for b, e in u.arg)
    if op is Ops.FLIP: return u.src[0].shape
    if op is Ops.REDUCE_AXIS: return tuple(1 if i in u.arg[1] else s for i, s in enumerate(u.src[0].shape))
    if op in (Ops.SINK, Ops.KERNEL, Ops.DEVICE): return None
    if op is Ops.MULTI:
        shape = list(u.src[0].shape)
        if u.arg is not None: shape[u.arg] = sum(s.shape[u.arg] for s in u.src)
        return tuple(shape)
    for s in u.src:
        if s.op is not Ops.DEVICE and (shape := s.shape) is not None: return shape
    return None

# ---------------------------------------------------------------- bounds

def _min_max(u: UOp) -> tuple[ConstType, ConstType]:
    """Bounds of an integer/bool value. Bounds outside the dtype's range mean the value may wrap,
    so they widen to the whole range (this also keeps the Python ints small)."""
    lo, hi = _raw_min_max(u)
    if dtypes.is_int(u.dtype) and isinstance(lo, int) and isinstance(hi, int):
        dtype = u.dtype.scalar()
        low, high = (-(2**63), 2**63 - 1) if dtype in (dtypes.index, dtypes.weakint) else (dtypes.min(dtype), dtypes.max(dtype))
        if lo < low or hi > high:
            # unsigned math is modular: bounds within one period of 2**bits wrap together (x - 1 is x + 0xFFFFFFFF in uint32)
            if dtypes.is_unsigned(dtype) and lo // (high + 1) == hi // (high + 1): return lo % (high + 1), hi % (high + 1)
            return low, high
    return lo, hi

def _raw_min_max(u: UOp) -> tuple[ConstType, ConstType]:
    if u.op is Ops.CONST:
        return (u.arg, u.arg) if not isinstance(u.arg, tuple) else (min(u.arg), max(u.arg))
    if u.op is Ops.DEFINE_VAR: return u.arg[1], u.arg[2]
    if u.op is Ops.BIND: return u.src[0].vmin_vmax
    if u.op is Ops.RANGE: return 0, (u.src[0].vmax - 1 if isinstance(u.src[0].vmax, int) else dtypes.max(u.dtype))
    if u.op is Ops.SPECIAL: return 0, u.src[0].vmax - 1
    if u.dtype == dtypes.bool or u.op in GroupOp.Comparison:
        decided = _decide_bool(u)
        return (decided, decided) if decided is not None else (False, True)
    if dtypes.is_int(u.dtype) and u.src:
        s0 = u.src[0]
        if u.op is Ops.ADD:
            # a - b is built as a + (-b): bound it as the difference (-b alone of an unsigned b spans the whole range)
            for a, b in (u.src, u.src[::-1]):
                if b.op is Ops.NEG: return a.vmin - b.src[0].vmax, a.vmax - b.src[0].vmin
            return s0.vmin + u.src[1].vmin, s0.vmax + u.src[1].vmax
        if u.op is Ops.SUB: return s0.vmin - u.src[1].vmax, s0.vmax - u.src[1].vmin
        if u.op is Ops.NEG: return -s0.vmax, -s0.vmin
        if u.op is Ops.MUL:
            corners = [a * b for a in (s0.vmin, s0.vmax) for b in (u.src[1].vmin, u.src[1].vmax)]
            return min(corners), max(corners)
        if u.op is Ops.MAX: return max(s0.vmin, u.src[1].vmin), max(s0.vmax, u.src[1].vmax)
        if u.op is Ops.WHERE:
            cond, a, b = u.src
            # where(a < b, a, b) is min(a, b) and where(b < a, a, b) max(a, b): a clamp keeps its bounds
            if cond.op is Ops.CMPLT and a is not b and set(cond.src) == {a, b}:
                pick = min if cond.src[0] is a else max
                return pick(a.vmin, b.vmin), pick(a.vmax, b.vmax)
            return min(a.vmin, b.vmin), max(a.vmax, b.vmax)
        if u.op is Ops.IDIV and u.src[1].op is Ops.CONST and u.src[1].arg != 0:
            c = u.src[1].arg
            corners = [_cdiv(s0.vmin, c), _cdiv(s0.vmax, c)]
            return min(corners), max(corners)
        if u.op is Ops.MOD and u.src[1].op is Ops.CONST and u.src[1].arg > 0:
            c = u.src[1].arg
            if s0.vmin >= 0: return (s0.vmin, s0.vmax) if s0.vmax < c else (0, min(c - 1, s0.vmax))
            return max(-(c - 1), s0.vmin), min(c - 1, max(s0.vmax, 0))
        # (amounts in [0, 64) only: past the width the results are 0 or wide enough to widen, and Python ints stay small;
        # a negative amount shifts everything out too, see alu.py)
        if u.op in (Ops.SHL, Ops.SHR) and s0.vmin >= 0 and 0 <= (amount := u.src[1]).vmin and amount.vmax < 64:
            if u.op is Ops.SHL: return s0.vmin << amount.vmin, s0.vmax << amount.vmax
            return s0.vmin >> amount.vmax, s0.vmax >> amount.vmin
        # (a non-negative mask clears the sign bit: the result is in [0, mask] whatever the sign of the other side)
        if u.op is Ops.AND and u.src[1].op is Ops.CONST and u.src[1].arg >= 0:
            return 0, min(s0.vmax, u.src[1].arg) if s0.vmin >= 0 else u.src[1].arg
        if u.op is Ops.CAST and dtypes.is_int(s0.dtype) or (u.op is Ops.CAST and s0.dtype == dtypes.bool):
            lo, hi = dtypes.min(u.dtype), dtypes.max(u.dtype)
            if u.dtype in (dtypes.index, dtypes.weakint) or (lo <= s0.vmin and s0.vmax <= hi): return int(s0.vmin), int(s0.vmax)
    if u.dtype in (dtypes.index, dtypes.weakint): return -(2**63), 2**63 - 1
    return dtypes.min(u.dtype), dtypes.max(u.dtype)

def _cdiv(a: int, b: int) -> int:
    """C-style division (truncates toward zero), the semantics of Ops.IDIV."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q

def _cmod(a: int, b: int) -> int:
    """C-style remainder (sign of the dividend), the semantics of Ops.MOD."""
    return a - _cdiv(a, b) * b

def _decide_bool(u: UOp) -> bool | None:
    if u.op is Ops.CONST: return bool(u.arg)
    if len(u.src) < 2 or not all(dtypes.is_int(s.dtype) or s.dtype == dtypes.bool for s in u.src[:2]): return None
    a, b = u.src[0], u.src[1]
    if u.op is Ops.CMPLT:
        if a.vmax < b.vmin: return True
        if a.vmin >= b.vmax: return False
    if u.op is Ops.CMPNE or u.op is Ops.CMPEQ:
        if a.vmax < b.vmin or a.vmin > b.vmax: return u.op is Ops.CMPNE
        if a.vmin == a.vmax == b.vmin == b.vmax: return u.op is Ops.CMPEQ
    if u.op is Ops.AND and u.dtype == dtypes.bool:
        if a.vmax is False or b.vmax is False or a.vmax == 0 or b.vmax == 0: return False
    return None

def resolve_bool(u: UOp) -> bool | None:
    if u.op is Ops.CONST: return bool(u.arg)
    simplified = u.simplify()
    if simplified.op is Ops.CONST: return bool(simplified.arg)
    lo, hi = simplified.vmin_vmax
    return bool(lo) if lo == hi else None

def resolve(x: Any, default: bool = True) -> bool:
    """Turn a possibly symbolic condition into a bool, using ``default`` when it can't be decided."""
    if not isinstance(x, UOp): return bool(x)
    decided = resolve_bool(x)
    return default if decided is None else decided

def sint_to_uop(x: Any, dtype: DType = dtypes.index) -> UOp:
    return x if isinstance(x, UOp) else UOp.const(dtype, x)

def smax(*xs: Any) -> Any:
    xs = tuple(x for x in (xs[0] if len(xs) == 1 and isinstance(xs[0], (tuple, list)) else xs))
    if all(isinstance(x, int) for x in xs): return max(xs)
    result = sint_to_uop(xs[0])
    for x in xs[1:]: result = result.maximum(sint_to_uop(x))
    return result.ssimplify()

def ssimplify(x: Any) -> Any: return x.ssimplify() if isinstance(x, UOp) else x

def sym_infer(x: Any, var_vals: dict[UOp, int]) -> int:
    """Evaluate a symbolic size with values for its variables."""
    if isinstance(x, int): return x
    mapping = {v: UOp.const(v.dtype, val) for v, val in var_vals.items()}
    result = x.substitute(mapping).simplify()
    if result.op is not Ops.CONST: raise ValueError(f"can't infer {x.render()} from {var_vals}")
    return int(result.arg)

# ---------------------------------------------------------------- printing

def render_expr(u: UOp) -> str:
    """Infix form of an integer expression, used in error messages and kernel names."""
    infix = {Ops.ADD: "+", Ops.SUB: "-", Ops.MUL: "*", Ops.IDIV: "//", Ops.MOD: "%", Ops.CMPLT: "<", Ops.CMPNE: "!=",
             Ops.CMPEQ: "==", Ops.AND: "&", Ops.OR: "|", Ops.XOR: "^", Ops.SHL: "<<", Ops.SHR: ">>", Ops.FDIV: "/"}
    if u.op is Ops.CONST: return str(u.arg)
    if u.op is Ops.DEFINE_VAR: return u.arg[0]
    if u.op is Ops.BIND: return f"{u.src[0].arg[0]}={u.src[1].arg}"
    if u.op is Ops.RANGE: return f"r{u.arg[0]}"
    if u.op is Ops.SPECIAL: return u.arg
    if u.op in infix: return f"({render_expr(u.src[0])}{infix[u.op]}{render_expr(u.src[1])})"
    if u.op is Ops.NEG: return f"(-{render_expr(u.src[0])})"
    if u.op is Ops.MAX: return f"max({render_expr(u.src[0])}, {render_expr(u.src[1])})"
    if u.op is Ops.WHERE: return f"({render_expr(u.src[0])}?{render_expr(u.src[1])}:{render_expr(u.src[2])})"
    if u.op is Ops.CAST: return render_expr(u.src[0])
    return f"{u.op.name}({', '.join(render_expr(s) for s in u.src)})"

def pretty_print(u: UOp, max_nodes: int = 200) -> str:
    """A multi-line listing of a UOp graph, each node once, numbered (variables print as code)."""
    if u.op is Ops.DEFINE_VAR: return f"Variable({u.arg[0]!r}, {u.arg[1]}, {u.arg[2]})"
    if u.op is Ops.BIND and u.src[0].op is Ops.DEFINE_VAR: return f"{pretty_print(u.src[0])}.bind({u.src[1].arg})"
    if u.dtype == dtypes.index and u.op in (Ops.ADD, Ops.MUL, Ops.IDIV, Ops.MOD, Ops.MAX):
        return f"<{render_expr(u)}>"
    nodes = list(u.toposort)
    if len(nodes) > max_nodes: return f"UOp({u.op}, {u.dtype!r}, <{len(nodes)} nodes>, arg={u.arg!r})"
    if len(nodes) == 1: return f"UOp({u.op}, {u.dtype!r}, arg={u.arg!r})"
    index = {n: i for i, n in enumerate(nodes)}
    lines = [f"  %{index[n]} = {n.op.name} {n.dtype!r} [{', '.join('%'+str(index[s]) for s in n.src)}] {n.arg!r}" for n in nodes]
    return "UOp graph:\n" + "\n".join(lines)

# ---------------------------------------------------------------- patterns

class UPat:
    """A pattern over UOps. ``src`` as a tuple matches in order, as a list matches any order of the
    sources (for commutative ops), and a single UPat matches every source.

    >>> UPat(Ops.ADD, src=[UPat.var("x"), UPat.cvar("c")])      # x + c in either order
    """
    __slots__ = ("ops", "dtypes_", "src", "arg", "name", "allow_any_len", "_any_order")
    def __init__(self, op: Ops | tuple[Ops, ...] | set[Ops] | None = None, dtype: DType | tuple[DType, ...] | None = None,
                 src: "tuple[UPat, ...] | list[UPat] | UPat | None" = None, arg: Any = None, name: str | None = None,
                 allow_any_len: bool = False):
        self.ops = (op,) if isinstance(op, Ops) else (tuple(op) if op is not None else None)
        self.dtypes_ = (dtype,) if isinstance(dtype, DType) else (tuple(dtype) if dtype is not None else None)
        self._any_order = isinstance(src, list)
        self.src = tuple(src) if isinstance(src, (list, tuple)) else src
        self.arg, self.name, self.allow_any_len = arg, name, allow_any_len

    @staticmethod
    def var(name: str | None = None, dtype: DType | tuple[DType, ...] | None = None) -> "UPat":
        return UPat(dtype=dtype, name=name)
    @staticmethod
    def cvar(name: str | None = None, dtype: DType | tuple[DType, ...] | None = None) -> "UPat":
        return UPat(Ops.CONST, dtype, name=name)
    @staticmethod
    def const(dtype: DType | tuple[DType, ...] | None, value: Any) -> "UPat":
        return UPat(Ops.CONST, dtype, arg=value)
    def named(self, name: str) -> "UPat":
        copy = UPat(self.ops, self.dtypes_, list(self.src) if self._any_order else self.src, self.arg, name, self.allow_any_len)
        return copy

    def _binop(self, op: Ops, other: Any, commutative: bool) -> "UPat":
        other = other if isinstance(other, UPat) else UPat.const(None, other)
        return UPat(op, src=[self, other] if commutative else (self, other))
    def __add__(self, x): return self._binop(Ops.ADD, x, True)
    def __radd__(self, x): return self._binop(Ops.ADD, x, True)
    def __mul__(self, x): return self._binop(Ops.MUL, x, True)
    def __rmul__(self, x): return self._binop(Ops.MUL, x, True)
    def __floordiv__(self, x): return self._binop(Ops.IDIV, x, False)
    def __mod__(self, x): return self._binop(Ops.MOD, x, False)
    def __lt__(self, x): return self._binop(Ops.CMPLT, x, False)
    def ne(self, x): return self._binop(Ops.CMPNE, x, True)
    def maximum(self, x): return self._binop(Ops.MAX, x, True)
    def __neg__(self): return UPat(Ops.NEG, src=(self,))
    def cast(self, dtype: DType | None = None): return UPat(Ops.CAST, dtype, (self,))
    def where(self, x, y): return UPat(Ops.WHERE, src=(self, x, y))

    def match(self, u: UOp, captures: dict[str, UOp]) -> list[dict[str, UOp]]:
        """All the ways ``u`` matches this pattern, each as a dict of named captures."""
        if self.ops is not None and u.op not in self.ops: return []
        if self.dtypes_ is not None and u.dtype not in self.dtypes_ and u.dtype.scalar() not in self.dtypes_: return []
        if self.arg is not None and u.arg != self.arg: return []
        if self.name is not None:
            if self.name in captures and captures[self.name] is not u: return []
            captures = {**captures, self.name: u}
        if self.src is None: return [captures]
        if isinstance(self.src, UPat):
            results = [captures]
            for s in u.src: results = [r2 for r in results for r2 in self.src.match(s, r)]
            return results
        if len(u.src) != len(self.src) and not (self.allow_any_len and len(u.src) >= len(self.src)): return []
        orders = itertools.permutations(self.src) if self._any_order else [self.src]
        results: list[dict[str, UOp]] = []
        for order in orders:
            partial = [captures]
            for pat, s in zip(order, u.src): partial = [r2 for r in partial for r2 in pat.match(s, r)]
            results.extend(partial)
        return results
    def __repr__(self) -> str: return f"UPat({self.ops}, name={self.name}, arg={self.arg})"

class PatternMatcher:
    """An ordered list of (pattern, rewrite function) rules, indexed by op for speed.

    A rewrite function gets the named captures as keyword arguments (plus ``ctx`` if it asks for
    it) and returns a replacement UOp, or None when the rule doesn't apply after all.
    """
    def __init__(self, rules: Sequence[tuple[UPat, Callable]]):
        self.rules = list(rules)
        by_op: dict[Ops, list[tuple[int, tuple[UPat, Callable, bool]]]] = {}
        wildcard: list[tuple[int, tuple[UPat, Callable, bool]]] = []
        for position, (pat, fn) in enumerate(self.rules):
            entry = (pat, fn, "ctx" in inspect.signature(fn).parameters)
            if pat.ops is None: wildcard.append((position, entry))
            else:
                for op in pat.ops: by_op.setdefault(op, []).append((position, entry))
        # rules for an op plus the rules for any op, in the order they were written
        self.by_op: dict[Ops, list[tuple[UPat, Callable, bool]]] = {
            op: [entry for _, entry in sorted(by_op.get(op, []) + wildcard, key=lambda e: e[0])] for op in Ops}
    def __add__(self, other: "PatternMatcher") -> "PatternMatcher":
        return PatternMatcher(self.rules + other.rules)
    def rewrite(self, u: UOp, ctx: Any = None) -> UOp | None:
        for pat, fn, wants_ctx in self.by_op[u.op]:
            for captures in pat.match(u, {}):
                result = fn(ctx=ctx, **captures) if wants_ctx else fn(**captures)
                if result is not None and result is not u: return result
        return None

def graph_rewrite(root: UOp, pm: PatternMatcher, ctx: Any = None, replace_map: dict[UOp, UOp] | None = None) -> UOp:
    """Rewrite ``root`` bottom-up to a fixed point: sources first, then the node, again and again
    until no rule applies. Memoized, and iterative (no recursion limit on deep graphs).
    ``replace_map`` substitutes nodes before any rule runs."""
    return graph_rewrite_memo(root, pm, ctx, replace_map)[root]

def graph_rewrite_memo(root: UOp, pm: PatternMatcher, ctx: Any = None, replace_map: dict[UOp, UOp] | None = None,
                       memo: dict[UOp, UOp] | None = None) -> dict[UOp, UOp]:
    """Like graph_rewrite, but returns what every node of the graph was rewritten to. ``memo``, if
    given, is that map from earlier rewrites with the same rules: it is used and extended in place,
    so repeated rewrites of growing expressions (index math) don't walk the old parts again."""
    done: dict[UOp, UOp] = memo if memo is not None else dict(replace_map) if replace_map else {}
    stack: list[tuple[UOp, int, UOp | None]] = [(root, 0, None)]
    while stack:
        node, stage, pending = stack.pop()
        if node in done: continue
        if stage == 0:
            stack.append((node, 1, None))
            for s in reversed(node.src):
                if s not in done: stack.append((s, 0, None))
        elif stage == 1:
            new_src = tuple(done[s] for s in node.src)
            rebuilt = node if new_src == node.src else node.replace(src=new_src)
            result = pm.rewrite(rebuilt, ctx)
            if result is None:
                done[node] = rebuilt
            elif result in done:
                done[node] = done[result]
            else:
                stack.append((node, 2, result))
                stack.append((result, 0, None))
        else:
            assert pending is not None
            done[node] = done[pending]
    return done

def graph_rewrite_map(roots: Sequence[UOp], pm: PatternMatcher, ctx: Any = None) -> list[UOp]:
    """Rewrite several roots with one memo (shared subgraphs are rewritten once)."""
    sink = graph_rewrite(UOp(Ops.SINK, dtypes.void, tuple(roots)), pm, ctx)
    return list(sink.src)

Variable = UOp.variable
