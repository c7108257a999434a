"""Rewrite rules that simplify scalar and integer index arithmetic.

``symbolic_simple`` holds the always-safe identities and constant folding; ``symbolic`` adds
bounds-based rules (div/mod folding by ``vmin``/``vmax``, congruences, like terms) and a canonical
form for integer sums, so that equal index expressions become the same interned UOp.

>>> x = UOp.variable("x", 0, 7)
>>> graph_rewrite((x * 4 + 3) // 4, symbolic) is x
True

Conventions. IDIV truncates toward zero and MOD takes the dividend's sign (C semantics, see
alu.py), so a rule that only holds for floor division checks the sign of its operands with
``vmin``/``vmax``. The integer-math rules fire on scalar signed integers, ``index`` and ``weakint``
(``_is_sym_int``): there, like a C compiler with signed overflow, they assume no overflow.
Unsigned integers wrap by definition and floats round, so they only get the exact identities.

Canonical integer sums: an ADD chain is flattened to ``sum(coeff * base) + const``, like terms are
merged, the bases are sorted by ``_sort_key`` (deterministic across processes) and it is rebuilt
left-associated with the constant last, for example ``((a*4)+(b*-1))+3``.
"""
from __future__ import annotations
import functools, hashlib, itertools, math, weakref
from enum import Enum
from typing import Any
from fusegrad.dtype import dtypes
from fusegrad.uop.ops import UOp, UPat, Ops, GroupOp, PatternMatcher, graph_rewrite, _cdiv
from fusegrad.uop.alu import exec_alu

def _fold_constants(root: UOp) -> UOp | None:
    """An ALU op whose sources are all kernel-level constants becomes one constant."""
    if not all(s.op is Ops.CONST and not s.src for s in root.src): return None
    if root.dtype.count > 1: return None
    try: value = exec_alu(root.op, root.dtype, tuple(s.arg for s in root.src))
    except (ZeroDivisionError, ValueError, OverflowError): return None
    return UOp.const(root.dtype, value)

def _is_int(u: UOp) -> bool: return dtypes.is_int(u.dtype)

def _const_like(u: UOp, value: Any) -> UOp:
    """A constant of u's dtype. For index math a plain CONST: ``u.const_like`` would compute u's
    (tensor) shape, recursively, which overflows the stack on deep expressions."""
    return UOp.const(u.dtype, value) if _is_kernel_level(u) else u.const_like(value)

def _logical_not(u: UOp) -> UOp: return UOp(Ops.CMPNE, u.dtype, (u, _const_like(u, True)))

def _bounds_const(x: UOp) -> UOp | None:
    """An integer or bool expression whose bounds pin one value is that value."""
    if x.op is Ops.CONST or x.op in (Ops.DEFINE_VAR, Ops.RANGE, Ops.SPECIAL, Ops.BIND): return None
    if not (_is_int(x) or x.dtype == dtypes.bool) or x.dtype.count > 1: return None
    lo, hi = x.vmin_vmax
    return _const_like(x, lo) if lo == hi else None

symbolic_simple = PatternMatcher([
    (UPat(GroupOp.ALU, name="root"), _fold_constants),
    # identities
    (UPat.var("x") + 0, lambda x: x),
    (UPat.var("x") * 1, lambda x: x),
    (UPat.var("x", dtype=dtypes.ints + (dtypes.index, dtypes.weakint)) * 0, lambda x: _const_like(x, 0)),
    (UPat.var("x") // 1, lambda x: x if _is_int(x) else None),
    (UPat.var("x") % 1, lambda x: _const_like(x, 0) if _is_int(x) else None),
    (UPat(Ops.NEG, src=(UPat(Ops.NEG, src=(UPat.var("x"),)),)), lambda x: x),
    (UPat(Ops.WHERE, src=(UPat.cvar("c"), UPat.var("a"), UPat.var("b"))), lambda c, a, b: a if c.arg else b),
    (UPat(Ops.WHERE, src=(UPat.var(), UPat.var("a"), UPat.var("b"))), lambda a, b: a if a is b else None),
    (UPat(Ops.CAST, name="c", src=(UPat.var("x"),)), lambda c, x: x if c.dtype == x.dtype else None),
    (UPat(Ops.CAST, name="c", src=(UPat.cvar("x"),)),
     lambda c, x: UOp.const(c.dtype, x.arg) if not x.src and c.dtype.count == 1 else None),
    (UPat.var("x").maximum(UPat.var("y")), lambda x, y: x if x is y else None),
    (UPat(Ops.AND, dtype=dtypes.bool, src=[UPat.var("x"), UPat.const(dtypes.bool, True)]), lambda x: x),
    (UPat(Ops.OR, dtype=dtypes.bool, src=[UPat.var("x"), UPat.const(dtypes.bool, False)]), lambda x: x),
    (UPat(Ops.AND, dtype=dtypes.bool, src=[UPat.var("x"), UPat.const(dtypes.bool, False)]), lambda x: _const_like(x, False)),
    (UPat(Ops.OR, dtype=dtypes.bool, src=[UPat.var("x"), UPat.const(dtypes.bool, True)]), lambda x: _const_like(x, True)),
    (UPat(Ops.CMPNE, src=(UPat.var("x", dtype=dtypes.bool), UPat.const(dtypes.bool, False))), lambda x: x),
    (UPat(Ops.CMPEQ, src=(UPat.var("x", dtype=dtypes.bool), UPat.const(dtypes.bool, True))), lambda x: x),
])

# ---------------------------------------------------------------- helpers

@functools.cache
def _sym_int_dtype(dtype) -> bool: return dtype.count == 1 and dtypes.is_int(dtype) and not dtypes.is_unsigned(dtype)

def _is_sym_int(u: UOp) -> bool:
    """Scalar signed integer math (int8..int64, index, weakint), where overflow is assumed away."""
    return _sym_int_dtype(u.dtype) and _is_kernel_level(u)

def _is_bool(u: UOp) -> bool: return u.dtype == dtypes.bool

def _cval(u: UOp) -> int | None:
    """The value of a kernel-level integer constant, else None."""
    return u.arg if u.op is Ops.CONST and not u.src and type(u.arg) is int else None

def _is_const(u: UOp) -> bool: return u.op is Ops.CONST and not u.src

_INFO: "weakref.WeakKeyDictionary[UOp, tuple[bytes, bool]]" = weakref.WeakKeyDictionary()
_TENSOR_LEVEL = GroupOp.Movement | {Ops.BUFFER, Ops.DEVICE, Ops.REDUCE_AXIS, Ops.CONTIGUOUS, Ops.CONTIGUOUS_BACKWARD,
                                    Ops.COPY, Ops.ASSIGN, Ops.DETACH, Ops.MULTI}

def _info(root: UOp) -> tuple[bytes, bool]:
    """(structural hash stable across processes, whether the graph is tensor-level), computed
    iteratively and memoized per node."""
    if (known := _INFO.get(root)) is not None: return known
    stack: list[tuple[UOp, bool]] = [(root, False)]
    while stack:
        node, ready = stack.pop()
        if node in _INFO: continue
        if not ready:
            stack.append((node, True))
            stack.extend((s, False) for s in node.src if s not in _INFO)
            continue
        h = hashlib.blake2b(f"{node.op.name}|{node.dtype!r}|{node.arg!r}".encode(), digest_size=8)
        tensor = node.op in _TENSOR_LEVEL
        for s in node.src:
            digest, s_tensor = _INFO[s]
            h.update(digest)
            tensor = tensor or s_tensor
        _INFO[node] = (h.digest(), tensor)
    return _INFO[root]

def _digest(u: UOp) -> bytes: return _info(u)[0]

def _is_kernel_level(u: UOp) -> bool:
    """Index math (no buffers, movement ops or device consts under it): rules may build plain consts."""
    return not _info(u)[1]

def _sortable(arg: Any) -> tuple:
    """An arg as a tuple that compares consistently with any other arg (numbers by value, names by text)."""
    if arg is None: return (0,)
    if isinstance(arg, bool): return (1, int(arg))
    if isinstance(arg, int): return (1, arg)
    if isinstance(arg, str): return (2, arg)
    if isinstance(arg, tuple): return (3, tuple(_sortable(a) for a in arg))
    if isinstance(arg, Enum): return (4, arg.name)
    return (5, repr(arg))

def _sort_key(u: UOp) -> tuple:
    """Order of terms in a canonical sum: by op, then arg (variable names, range numbers), then the
    sources one level down, then a structural hash as the tie break."""
    return (u.op.value, _sortable(u.arg), tuple((s.op.value, _sortable(s.arg)) for s in u.src), _digest(u))

_MAX_FLATTEN = 256   # nodes visited when flattening a sum; larger sums are left as they are

def linear_terms(u: UOp) -> tuple[dict[UOp, int], int] | None:
    """``u`` as ({base: coeff}, const) with u == sum(coeff*base) + const, looking through ADD, SUB,
    NEG and MUL by a constant (so constants distribute over sums)."""
    terms: dict[UOp, int] = {}
    const, visited = 0, 0
    stack: list[tuple[UOp, int]] = [(u, 1)]
    while stack:
        node, k = stack.pop()
        if (visited := visited + 1) > _MAX_FLATTEN: return None
        if (c := _cval(node)) is not None: const += k * c
        elif node.op is Ops.ADD: stack += [(node.src[1], k), (node.src[0], k)]
        elif node.op is Ops.SUB: stack += [(node.src[1], -k), (node.src[0], k)]
        elif node.op is Ops.NEG: stack.append((node.src[0], -k))
        elif node.op is Ops.MUL and (c := _cval(node.src[1])) is not None: stack.append((node.src[0], k * c))
        elif node.op is Ops.MUL and (c := _cval(node.src[0])) is not None: stack.append((node.src[1], k * c))
        else: terms[node] = terms.get(node, 0) + k
    return terms, const

# sums built by _canonical_sum (and their prefixes): known fixed points of it, skipped when seen again
_CANONICAL: "weakref.WeakSet[UOp]" = weakref.WeakSet()

def _build_sum(terms: dict[UOp, int], const: int, dtype, canonical: bool = False) -> UOp:
    """The canonical UOp for sum(coeff*base) + const: sorted bases, left-associated, constant last.
    Coefficients are first wrapped to ``dtype`` (as its constants would be)."""
    wrapped = {b: w for b, k in terms.items() if (w := dtypes.as_const(k, dtype)) != 0}
    out: UOp | None = None
    for base, k in sorted(wrapped.items(), key=lambda bk: _sort_key(bk[0])):
        term = base if k == 1 else base * UOp.const(dtype, k)
        out = term if out is None else out + term
        if canonical: _CANONICAL.update((term, out) if k != 1 else (out,))
    const = dtypes.as_const(const, dtype)
    if out is None: return UOp.const(dtype, const)
    if const != 0:
        out = out + UOp.const(dtype, const)
        if canonical: _CANONICAL.add(out)
    return out

def _recombine_divmod(terms: dict[UOp, int]) -> bool:
    """In place: (x//c)*(k*c) + (x%c)*k -> x*k, and ((x//c1)%c2)*(k*c1) + (x%c1)*k -> (x%(c1*c2))*k.
    Exact for any sign: C guarantees x == (x/c)*c + x%c, and (x/c1)/c2 == x/(c1*c2)."""
    mods = {(b.src[0], c): b for b in terms if b.op is Ops.MOD and (c := _cval(b.src[1])) is not None and c > 0}
    changed = False
    if not mods: return changed
    for a in list(terms):
        if a not in terms or (ka := terms[a]) == 0: continue
        if a.op is Ops.IDIV and (c := _cval(a.src[1])) is not None and c > 0:
            x, replacement = a.src[0], a.src[0]
        elif a.op is Ops.MOD and a.src[0].op is Ops.IDIV and (c2 := _cval(a.src[1])) is not None and c2 > 0 \
                and (c := _cval(a.src[0].src[1])) is not None and c > 0:
            x = a.src[0].src[0]
            replacement = x % UOp.const(x.dtype, c * c2)
        else: continue
        b = mods.get((x, c))
        if b is None or b not in terms or (kb := terms[b]) == 0 or ka != kb * c: continue
        del terms[a], terms[b]
        terms[replacement] = terms.get(replacement, 0) + kb
        changed = True
    return changed

# ---------------------------------------------------------------- sums, products, negation

def _canonical_sum(root: UOp) -> UOp | None:
    """Integer ADD/SUB/NEG/MUL-by-const: flatten, merge like terms (x+x -> x*2, x*c1+x*c2 -> x*(c1+c2),
    (x+c1)+c2 -> x+(c1+c2), (x*c1)*c2 -> x*(c1*c2)), recombine div/mod pairs, sort the terms."""
    if root in _CANONICAL or not _is_sym_int(root) or (flat := linear_terms(root)) is None: return None
    terms, const = flat
    # a recombined x may itself be a sum: the result is flattened again on the next visit
    changed = _recombine_divmod(terms)
    return _build_sum(terms, const, root.dtype, canonical=not changed)

def _hoist_mul_const(x: UOp, y: UOp) -> UOp | None:
    """Integer x*(y*c) -> (x*y)*c: constants move outward so like terms and div/mod rules see them."""
    if not _is_sym_int(x) or _is_const(x) or _is_const(y): return None
    if y.op is Ops.MUL and _cval(y.src[1]) is not None and not _is_const(y.src[0]): return (x * y.src[0]) * y.src[1]
    return None

def _order_commutative(root: UOp) -> UOp | None:
    """a op b == b op a for commutative int/bool ops: constants go right, other operands in _sort_key
    order (integer ADD has its own canonical form, _canonical_sum)."""
    if len(root.src) != 2 or root.dtype.count != 1 or (root.op is Ops.ADD and _is_int(root)): return None
    a, b = root.src
    if not all((_is_int(s) or _is_bool(s)) and s.dtype.count == 1 for s in root.src): return None
    if _is_const(b): return None
    if _is_const(a) or _sort_key(b) < _sort_key(a): return root.replace(src=(b, a))
    return None

# ---------------------------------------------------------------- division and remainder

def _split(terms: dict[UOp, int], const: int, d: int, nonneg: bool) -> tuple[dict[UOp, int], int, dict[UOp, int], int]:
    """sum = d*Q + R, with each remainder coefficient in [0, d) or (-d, 0], picked so that the
    remainder term gets the sign R should have (>= 0 if ``nonneg``, else <= 0) where the base's sign is known."""
    def quot(k: int, up: bool) -> int: return -((-k) // d) if up else k // d   # up: remainder in (-d, 0]
    def rounds_up(b: UOp | None) -> bool:
        base_nonpos = b is not None and b.vmax <= 0 and b.vmin < 0
        return nonneg == base_nonpos
    q_terms = {b: quot(k, rounds_up(b)) for b, k in terms.items()}
    r_terms = {b: k - q_terms[b] * d for b, k in terms.items()}
    q_const = quot(const, rounds_up(None))
    return q_terms, q_const, r_terms, const - q_const * d

def _split_nearest(terms: dict[UOp, int], const: int, d: int, nonneg: bool) -> tuple[dict[UOp, int], int, dict[UOp, int], int]:
    """Like ``_split`` but each term keeps the remainder coefficient nearest zero (795 = 800 - 5
    against d = 800): the congruence that folds index math of flipped or reversed axes, where
    ``(25a + 795b + 799c + 24) // 800`` is ``b + c`` because ``25a - 5b - c + 24`` stays in [0, 800)."""
    q_terms = {b: (k + d // 2) // d for b, k in terms.items()}
    r_terms = {b: k - q_terms[b] * d for b, k in terms.items()}
    q_const = const // d if nonneg else -((-const) // d)
    return q_terms, q_const, r_terms, const - q_const * d

def _sum_gcd(terms: dict[UOp, int], const: int, d: int) -> int:
    return math.gcd(d, const, *terms.values())

def _div_const(x: UOp, c: UOp) -> UOp | None:
    """Integer x // c for a constant c != 0 (C division, truncating toward zero)."""
    if not _is_sym_int(x) or (d := _cval(c)) is None or d == 0 or d == 1: return None
    # x / -d == -(x / d) when division truncates
    if d < 0: return (x // UOp.const(x.dtype, -d)) * UOp.const(x.dtype, -1)
    # quotients are monotonic in x, so equal quotients at both bounds pin the result
    if (lo := _cdiv(x.vmin, d)) == _cdiv(x.vmax, d): return _const_like(x, lo)
    # (x/d1)/d == x/(d1*d) for positive d1, d and any sign of x (both truncate toward zero)
    # (only when d1*d fits the dtype: a wrapped constant would change the meaning and loop)
    if x.op is Ops.IDIV and (d1 := _cval(x.src[1])) is not None and d1 > 0 and d1 * d <= min(dtypes.max(x.dtype), 2**62):
        return x.src[0] // UOp.const(x.dtype, d1 * d)
    if (flat := linear_terms(x)) is None: return None
    terms, const = flat
    # (g*y)/(g*e) == y/e exactly: the rational quotient is unchanged, so is its truncation
    if (g := _sum_gcd(terms, const, d)) > 1:
        return _build_sum({b: k // g for b, k in terms.items()}, const // g, x.dtype) // UOp.const(x.dtype, d // g)
    # (d*Q + R)/d == Q + R/d when x and R have the same sign (then trunc is floor, or ceil, for both)
    signs = ((True,) if x.vmin >= 0 else ()) + ((False,) if x.vmax <= 0 else ())
    for nonneg, split in itertools.product(signs, (_split, _split_nearest)):
        q_terms, q_const, r_terms, r_const = split(terms, const, d, nonneg)
        if q_const == 0 and not any(q_terms.values()): continue
        rem = _build_sum(r_terms, r_const, x.dtype)
        # the nearest split only when it finishes the division (else it and _split undo each other)
        if split is _split_nearest and not -d < rem.vmin <= rem.vmax < d: continue
        if (rem.vmin >= 0) if nonneg else (rem.vmax <= 0):
            return _build_sum(q_terms, q_const, x.dtype) + rem // UOp.const(x.dtype, d)
    return _div_drop_small_terms(terms, const, d, x)

def _div_drop_small_terms(terms: dict[UOp, int], const: int, d: int, x: UOp) -> UOp | None:
    """(g*y + r) // (g*e) == y // e when 0 <= r < g (and x >= 0): r can't carry into a multiple of
    g. ``(20*row + col) // 40`` with col < 20 is ``row // 2``, the index of a 2x2 pool window."""
    if x.vmin < 0: return None
    for g in sorted({math.gcd(d, k) for k in terms.values()} - {1, d}, reverse=True):
        big = {b: k // g for b, k in terms.items() if k % g == 0}
        if not big or len(big) == len(terms) and const % g == 0: continue
        small = _build_sum({b: k for b, k in terms.items() if k % g != 0}, const, x.dtype)
        if 0 <= small.vmin and small.vmax < g and _build_sum(big, 0, x.dtype).vmin >= 0:
            return _build_sum(big, 0, x.dtype) // UOp.const(x.dtype, d // g)
    return None

def _mod_const(x: UOp, c: UOp) -> UOp | None:
    """Integer x % c for a constant c != 0 (C remainder, with the sign of x)."""
    if not _is_sym_int(x) or (d := _cval(c)) is None or d == 0 or d == 1: return None
    # x - (x/-d)*(-d) == x - (x/d)*d: the divisor's sign doesn't matter
    if d < 0: return x % UOp.const(x.dtype, -d)
    # one quotient q over all of x's range: x % d == x - q*d (x itself when q == 0)
    if (q := _cdiv(x.vmin, d)) == _cdiv(x.vmax, d): return x if q == 0 else x + UOp.const(x.dtype, -q * d)
    # (x % d1) % d == x % d when d divides d1: |x| mod d1 mod d == |x| mod d, and the sign is x's
    if x.op is Ops.MOD and (d1 := _cval(x.src[1])) is not None and d1 > 0 and d1 % d == 0:
        return x.src[0] % UOp.const(x.dtype, d)
    if (flat := linear_terms(x)) is None: return None
    terms, const = flat
    # (g*y) % (g*e) == g*(y % e): g*y - g*e*trunc(y/e)
    if (g := _sum_gcd(terms, const, d)) > 1:
        inner = _build_sum({b: k // g for b, k in terms.items()}, const // g, x.dtype)
        return (inner % UOp.const(x.dtype, d // g)) * UOp.const(x.dtype, g)
    # (d*Q + R) % d == R % d when x and R have the same sign (both remainders then agree with floor, or ceil)
    signs = ((True,) if x.vmin >= 0 else ()) + ((False,) if x.vmax <= 0 else ())
    for nonneg, split in itertools.product(signs, (_split, _split_nearest)):
        _, _, r_terms, r_const = split(terms, const, d, nonneg)
        rem = _build_sum(r_terms, r_const, x.dtype)
        if split is _split_nearest and not -d < rem.vmin <= rem.vmax < d: continue
        if rem is not x and ((rem.vmin >= 0) if nonneg else (rem.vmax <= 0)): return rem % UOp.const(x.dtype, d)
    return None

def _div_self(x: UOp) -> UOp | None:
    """Integer x // x == 1 when x can't be zero."""
    return _const_like(x, 1) if _is_sym_int(x) and (x.vmin > 0 or x.vmax < 0) else None

def _zero_if_int(x: UOp) -> UOp | None:
    """Integer x % x == 0, 0 // x == 0, 0 % x == 0 (exec_alu defines division by zero as 0)."""
    return _const_like(x, 0) if _is_sym_int(x) else None

# ---------------------------------------------------------------- comparisons

def _ceil_div(a: int, b: int) -> int: return -((-a) // b)

def _linear_parts(x: UOp) -> tuple[UOp, int, int] | None:
    """Integer x == g*S + k0 with g > 0 the gcd of the coefficients and S's leading sign positive
    where possible: returns (S, g, k0), with g negative when every coefficient was negative."""
    if not _is_sym_int(x) or _is_const(x) or (flat := linear_terms(x)) is None: return None
    terms, const = flat
    terms = {b: k for b, k in terms.items() if k != 0}
    if not terms: return None
    g = math.gcd(*terms.values())
    if all(k < 0 for k in terms.values()): g = -g
    return _build_sum({b: k // g for b, k in terms.items()}, 0, x.dtype), g, const

def _cmplt_const_right(x: UOp, c: UOp) -> UOp | None:
    """Integer g*S + k0 < d  ->  S < ceil((d-k0)/g) for g > 0, (floor((d-k0)/g)) < S for g < 0."""
    if (d := _cval(c)) is None or (parts := _linear_parts(x)) is None: return None
    s, g, k0 = parts
    if g > 0:
        bound = _ceil_div(d - k0, g)
        return outer if (outer := _drop_remainder(s, bound)) is not None else s < UOp.const(s.dtype, bound)
    # -|g|*S < e  <=>  S > -e/|g|  <=>  floor(-e/|g|) < S, with e = d - k0
    return UOp.const(x.dtype, (k0 - d) // -g) < s

def _drop_remainder(x: UOp, d: int) -> UOp | None:
    """Integer c*A + R < d, where every term of A's part has a coefficient divisible by c, 0 <= R < c and c divides
    d: A < d/c. A flat index compared with a multiple of its outermost stride asks only about the outer ranges
    (``r0*262144 + r1*512 + r2*16 + r3 < 262144`` is ``r0 < 1``: a gate that no longer varies along r3's vector lanes)."""
    if (flat := linear_terms(x)) is None or flat[1] != 0 or len(terms := flat[0]) < 2: return None
    for stride in sorted({abs(k) for k in terms.values()}, reverse=True):
        if stride < 2 or d % stride: continue
        outer = {b: k // stride for b, k in terms.items() if k % stride == 0}
        rest = {b: k for b, k in terms.items() if k % stride}
        if not outer or not rest: continue
        remainder = _build_sum(rest, 0, x.dtype)
        low, high = remainder.vmin, remainder.vmax
        if isinstance(low, int) and isinstance(high, int) and 0 <= low and high < stride:
            return _build_sum(outer, 0, x.dtype) < UOp.const(x.dtype, d // stride)
    return None

def _cmplt_const_left(c: UOp, x: UOp) -> UOp | None:
    """Integer d < g*S + k0  ->  floor((d-k0)/g) < S for g > 0, S < ceil((k0-d)/|g|) for g < 0."""
    if (d := _cval(c)) is None or (parts := _linear_parts(x)) is None: return None
    s, g, k0 = parts
    if g > 0: return UOp.const(x.dtype, (d - k0) // g) < s
    return s < UOp.const(s.dtype, _ceil_div(k0 - d, -g))

def _cmp_eq_const(root: UOp, x: UOp, c: UOp) -> UOp | None:
    """Integer g*S + k0 ==/!= d  ->  S ==/!= (d-k0)/g, decided outright when g doesn't divide d-k0."""
    if (d := _cval(c)) is None or (parts := _linear_parts(x)) is None: return None
    s, g, k0 = parts
    if (d - k0) % g != 0: return UOp.const(dtypes.bool, root.op is Ops.CMPNE)
    return UOp(root.op, dtypes.bool, (s, UOp.const(x.dtype, (d - k0) // g)))

def _cmp_self(root: UOp, x: UOp) -> UOp | None:
    """Integer x < x and x != x are False, x == x is True (not for floats: NaN)."""
    if not (_is_int(x) or _is_bool(x)) or x.dtype.count != 1 or not _is_kernel_level(x): return None
    return UOp.const(dtypes.bool, root.op is Ops.CMPEQ)

def _not(inner: UOp) -> UOp | None:
    """Logical not (x != True) of a comparison: !(a<d) -> (d-1)<a, !(d<b) -> b<(d+1) for ints,
    !(a!=b) -> a==b, !(a==b) -> a!=b (exact for floats too: NaN != NaN)."""
    if inner.dtype.count != 1: return None
    if inner.op is Ops.CMPNE: return UOp(Ops.CMPEQ, dtypes.bool, inner.src)
    if inner.op is Ops.CMPEQ: return UOp(Ops.CMPNE, dtypes.bool, inner.src)
    if inner.op is Ops.CMPLT and _is_sym_int(inner.src[0]):
        a, b = inner.src
        if (d := _cval(b)) is not None: return UOp.const(a.dtype, d - 1) < a
        if (d := _cval(a)) is not None: return b < UOp.const(b.dtype, d + 1)
    return None

# ---------------------------------------------------------------- where, max, and/or

def _where_bool(cond: UOp, t: UOp, f: UOp) -> UOp | None:
    """cond ? True : False -> cond, cond ? False : True -> !cond."""
    if not (_is_bool(cond) and _is_bool(t) and _cval_bool(t) is not None and _cval_bool(f) is not None): return None
    if _cval_bool(t) and not _cval_bool(f): return cond
    if not _cval_bool(t) and _cval_bool(f): return _logical_not(cond)
    return None

def _cval_bool(u: UOp) -> bool | None: return u.arg if u.op is Ops.CONST and not u.src and type(u.arg) is bool else None

def _where_not(cond: UOp, t: UOp, f: UOp) -> UOp | None:
    """(!c) ? t : f -> c ? f : t, and (a == b) ? t : f -> (a != b) ? f : t (one canonical form)."""
    if cond.dtype.count != 1: return None
    if cond.op is Ops.CMPNE and _is_bool(cond.src[0]) and _cval_bool(cond.src[1]) is True:
        return cond.src[0].where(f, t)
    if cond.op is Ops.CMPEQ: return UOp(Ops.CMPNE, dtypes.bool, cond.src).where(f, t)
    return None

def _where_nested(cond: UOp, t: UOp, f: UOp) -> UOp | None:
    """c ? (c ? a : b) : e -> c ? a : e, and c ? a : (c ? b : e) -> c ? a : e."""
    if t.op is Ops.WHERE and t.src[0] is cond: return cond.where(t.src[1], f)
    if f.op is Ops.WHERE and f.src[0] is cond: return cond.where(t, f.src[2])
    return None

def _max_by_bounds(x: UOp, y: UOp) -> UOp | None:
    """Integer max(x, y) is x when x >= y everywhere (x.vmin >= y.vmax), and y the other way round."""
    if not _is_sym_int(x): return None
    if x.vmin >= y.vmax: return x
    if y.vmin >= x.vmax: return y
    return None

def _idempotent_bool(x: UOp, y: UOp) -> UOp | None:
    """x & x -> x and x | x -> x for bools and ints."""
    return x if x is y and (_is_bool(x) or _is_int(x)) else None

symbolic = symbolic_simple + PatternMatcher([
    (UPat(GroupOp.ALU, name="x"), _bounds_const),
    (UPat(GroupOp.Commutative, name="root"), _order_commutative),
    # sums and products
    (UPat((Ops.ADD, Ops.SUB, Ops.NEG), name="root"), _canonical_sum),
    (UPat(Ops.MUL, name="root", src=(UPat.var(), UPat.cvar())), _canonical_sum),
    (UPat(Ops.MUL, src=[UPat.var("x"), UPat.var("y")]), _hoist_mul_const),
    # division and remainder
    (UPat.var("x") // UPat.cvar("c"), _div_const),
    (UPat.var("x") % UPat.cvar("c"), _mod_const),
    (UPat(Ops.IDIV, src=(UPat.var("x"), UPat.var("x"))), _div_self),
    (UPat(Ops.MOD, src=(UPat.var("x"), UPat.var("x"))), _zero_if_int),
    (UPat((Ops.IDIV, Ops.MOD), src=(UPat.const(None, 0).named("x"), UPat.var())), _zero_if_int),
    # comparisons
    (UPat(Ops.CMPLT, src=(UPat.var("x"), UPat.cvar("c"))), _cmplt_const_right),
    (UPat(Ops.CMPLT, src=(UPat.cvar("c"), UPat.var("x"))), _cmplt_const_left),
    (UPat((Ops.CMPNE, Ops.CMPEQ), name="root", src=(UPat.var("x"), UPat.cvar("c"))), _cmp_eq_const),
    (UPat((Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ), name="root", src=(UPat.var("x"), UPat.var("x"))), _cmp_self),
    (UPat(Ops.CMPNE, src=(UPat.var("inner", dtype=dtypes.bool), UPat.const(dtypes.bool, True))), _not),
    (UPat(Ops.CMPEQ, src=(UPat.var("x", dtype=dtypes.bool), UPat.const(dtypes.bool, False))), lambda x: _logical_not(x)),
    # where, max, and/or
    (UPat(Ops.WHERE, src=(UPat.var("cond"), UPat.var("t"), UPat.var("f"))), _where_bool),
    (UPat(Ops.WHERE, src=(UPat.var("cond"), UPat.var("t"), UPat.var("f"))), _where_not),
    (UPat(Ops.WHERE, src=(UPat.var("cond"), UPat.var("t"), UPat.var("f"))), _where_nested),
    (UPat(Ops.MAX, src=(UPat.var("x"), UPat.var("y"))), _max_by_bounds),
    (UPat((Ops.AND, Ops.OR), src=(UPat.var("x"), UPat.var("y"))), _idempotent_bool),
])

def simplify(u: UOp) -> UOp:
    """Simplify an expression with the full symbolic rule set."""
    return graph_rewrite(u, symbolic)
