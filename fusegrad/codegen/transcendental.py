"""EXP2, LOG2 and SIN as plain arithmetic, so C compilers can vectorize loops that use them.

A libm call (``exp2f``, ``log2f``, ``sinf``) is an opaque scalar function call: gcc won't vectorize
a loop around it, and an elementwise ``exp`` runs far below memory bandwidth. The functions here
build the same math as a UOp graph of float ADD/NEG/MUL (and one FDIV in log2), comparisons, WHERE,
BITCAST and integer ADD/AND/OR/XOR/SHL/SHR, which every renderer already knows and gcc vectorizes.

    xexp2(x)  2**x   x = n + f, |f| <= 1/2; 2**f by a polynomial; 2**n from exponent bits, in two steps
    xlog2(x)  log2 x exponent and mantissa from the bits; ln of the mantissa by an atanh series, * 1/ln 2
    xsin(x)   sin x  Cody-Waite reduction by pi/2, sin/cos polynomials on [-pi/4, pi/4], quadrant select

float32 and float64 are computed natively; float16 (and bfloat16) are widened to float32, computed
there and rounded back once. Accuracy, measured by test/codegen/test_transcendental.py (and with
more samples while writing it) against numpy's float64 (for float32) and numpy's long double (for
float64) rounded to the dtype, as the distance in ulps to that correctly rounded reference:

    float32: exp2 <= 1 ulp on [-150, 130] (subnormal results too), log2 <= 1 ulp on all positive
             floats (subnormals too), sin <= 1 ulp on [-1e5, 1e5], including the floats nearest
             to the multiples of pi/2 there (|x - k*pi/2| down to 4e-9).
    float64: exp2 <= 1 ulp on [-1080, 1030], log2 <= 1 ulp, sin <= 1 ulp on [-1e9, 1e9].
    float16: exp2 and log2 correctly rounded in the tests, sin <= 1 ulp.

Special values follow C99 Annex F: exp2(+inf) = +inf, exp2(-inf) = 0, exp2 overflows to +inf and
underflows through the subnormals to 0; log2(+-0) = -inf, log2(x<0) = NaN, log2(+inf) = +inf;
sin(+-inf) = NaN, sin(-0.0) = -0.0; NaN gives NaN everywhere.

sin outside the Cody-Waite range: the reduction multiplies the quadrant number q = round(x*2/pi)
by pieces of pi/2 short enough for q*piece to be exact while q < 2**16 (float32) or q < 2**30
(float64), i.e. |x| < ~1.0e5 / ~1.6e9. Beyond that the reduction is no longer exact and the
absolute error grows about linearly with |x| (measured without FMA, max abs error: float32 5e-3 at
2e5, 3e-2 at 1e6, meaningless from ~1e7 on; float64 1e-6 at 1e10, 6e-5 at 1e12, 0.1 at 1e15), like
any Cody-Waite scheme without Payne-Hanek (not implemented). The reduced argument is clamped, so
the result stays finite and in [-1, 1] for every finite x.

How to use it (the pipeline does not call it yet): run it over a kernel AST before linearizing, e.g.
in ``fusegrad.codegen.get_program`` right before ``lower_reduces``::

    from fusegrad.codegen.transcendental import decompose_transcendentals
    ast = decompose_transcendentals(ast)      # = graph_rewrite(ast, pm_transcendental)

Running ``symbolic`` afterwards is fine (the tests check it changes no result bit). Only scalar
dtypes are rewritten (a vector dtype, ``dtype.count > 1``, keeps its EXP2/LOG2/SIN).

What the graphs contain: constants of the float dtype and of the same-width int (int32 / int64);
float ADD, NEG, MUL, FDIV (log2 only), CMPLT, CMPNE, CMPEQ, WHERE; bool AND/OR; BITCAST float <->
same-width int; int ADD, NEG, AND, OR, XOR, SHL, SHR; CAST only float16/bfloat16 <-> float32 (no
float <-> int conversion at all). Every shift sees a non-negative value and no int op overflows, so
nothing relies on undefined or implementation-defined C behavior, and nothing depends on whether
``a*b+c`` is fused (gcc's -ffp-contract=fast): every product that matters is exact.

Written for gcc's vectorizer (-O2/-O3 without -ffast-math): under the default -ftrapping-math gcc
won't evaluate a float op or an ordered comparison conditionally-turned-unconditionally, so a select
whose arm holds a computed float (the C renderer inlines single-use values into ?:) or a float ->
int conversion after a select stops the loop from vectorizing ("control flow in loop"). The graphs
therefore only select between constants or values that are used again, and fix special values by
arithmetic (ret * (nan ? NaN : 1), ret + (special ? value : 0)) or on the bits.

The polynomial coefficients were fitted once with ``mpmath.chebyfit`` (Chebyshev interpolation,
near-minimax) at 50 digits, of the function named in each comment, on the interval named there,
then rounded to the target dtype; each comment gives the measured worst relative error of the
rounded polynomial. Reproduce with::

    import mpmath as mp; mp.mp.dps = 50
    coeffs = mp.chebyfit(f, [a, b], degree + 1)[::-1]    # lowest order first
"""
from __future__ import annotations
import math
from fusegrad.dtype import DType, dtypes
from fusegrad.uop.ops import UOp, Ops, UPat, PatternMatcher, graph_rewrite

# ---------------------------------------------------------------- small builders
# UOp.const, not .const_like: const_like computes the (tensor) shape, which recurses through the
# whole graph, and these graphs are deep.

def _c(dtype: DType, value) -> UOp: return UOp.const(dtype, value)

def _where(cond: UOp, a, b, dt: DType | None = None) -> UOp:
    """cond ? a : b, where a or b may be Python numbers (then of the other branch's dtype, or ``dt``)."""
    dt = a.dtype if isinstance(a, UOp) else b.dtype if isinstance(b, UOp) else dt
    return UOp(Ops.WHERE, dt, (cond, a if isinstance(a, UOp) else _c(dt, a), b if isinstance(b, UOp) else _c(dt, b)))

def _poly(x: UOp, coeffs: tuple[float, ...]) -> UOp:
    """c0 + c1*x + c2*x**2 + ... by Horner's rule (coefficients lowest order first)."""
    acc = _c(x.dtype, coeffs[-1])
    for c in reversed(coeffs[:-1]): acc = acc * x + _c(x.dtype, c)
    return acc

def _isnan(x: UOp) -> UOp: return x.ne(x)

# (int dtype of the same width, mantissa bits, exponent bias)
_BITS = {dtypes.float32: (dtypes.int32, 23, 127), dtypes.float64: (dtypes.int64, 52, 1023)}

def _pow2(k: UOp, dtype: DType) -> UOp:
    """2**k as a float of ``dtype`` from an integer k (of the same width) that is a normal exponent of
    ``dtype``: the biased exponent k+bias is in [1, 2*bias] and is shifted into place, mantissa 0."""
    idt, mbits, bias = _BITS[dtype]
    return ((k + bias) << _c(idt, mbits)).bitcast(dtype)

# Rounding to an integer without a float -> int conversion: t = v + 1.5*2**mbits rounds v to the
# nearest integer (ties to even, the IEEE default) when |v| < 2**(mbits-1), t - 1.5*2**mbits is that
# integer exactly, and the low bits of t's bit pattern minus M's are the integer itself.
# (No float -> int CAST on purpose: gcc moves such a conversion into the arms of a preceding
# select, where it could trap, and then refuses to vectorize the loop.)
_MAGIC = {dtypes.float32: (12582912.0, 0x4B400000), dtypes.float64: (6755399441055744.0, 0x4338000000000000)}

def _round(v: UOp) -> tuple[UOp, UOp, UOp]:
    """(v + M, round(v) as a float, round(v) as an int of v's width) for |v| < 2**(mbits-1)."""
    m, m_bits = _MAGIC[v.dtype]
    t = v + _c(v.dtype, m)
    idt = _BITS[v.dtype][0]
    return t, t - _c(v.dtype, m), t.bitcast(idt) - _c(idt, m_bits)

# ---------------------------------------------------------------- exp2

# 2**f = 1 + f*E(f) with E(f) = (2**f - 1)/f on [-0.51, 0.51] (|f| <= 1/2, plus a little margin).
# E(0) = ln 2. Worst relative error of the rounded E:
# float32, degree 5: 2.4e-8 (dominated by rounding ln 2 to float32); it enters the result
#   multiplied by f*E/2**f <= 0.25, so it costs < 0.1 ulp.
_EXP2_F32 = (0.6931471824645996, 0.24022650718688965, 0.05550352856516838, 0.009618078358471394,
             0.0013393183471634984, 0.0001545517152408138)
# float64, degree 10: 7.6e-17 -> < 0.2 ulp of the result.
_EXP2_F64 = (0.6931471805599453, 0.24022650695910105, 0.0555041086648216, 0.009618129107603181,
             0.0013333558146414958, 0.00015403530447840298, 1.525273383308984e-05, 1.3215438941286664e-06,
             1.017806050210123e-07, 7.073300850389992e-09, 4.455341656697629e-10)

def xexp2(x: UOp) -> UOp:
    """2**x for a float32 or float64 UOp.

    x is clamped to [lo, hi] first: below lo the result is 0 even after rounding (the smallest
    subnormal is 2**-149 / 2**-1074, and 2**-150 / 2**-1075 already rounds to 0), above hi it is
    +inf. n = round(x) (see _round), f = x - n is exact (n is an integer next to x), |f| <= 1/2.
    2**n is applied as 2**(n>>1) * 2**(n - (n>>1)): both halves are normal exponents even when
    2**n itself is subnormal or overflows (|n>>1| <= 80 / 550), the first product p*2**(n>>1) is
    exact, and the second rounds once, so subnormal results are rounded once and overflow becomes
    +inf by IEEE arithmetic. NaN is computed as 0 and turned back into NaN at the end."""
    dt = x.dtype
    idt = _BITS[dt][0]
    lo, hi, coeffs = (-160.0, 130.0, _EXP2_F32) if dt == dtypes.float32 else (-1100.0, 1030.0, _EXP2_F64)
    nan = _isnan(x)
    xc = _where(nan, 0.0, x)
    xc = _where(xc < _c(dt, lo), lo, xc)
    xc = _where(_c(dt, hi) < xc, hi, xc)
    _, nf, n = _round(xc)
    f = xc - nf
    p = f * _poly(f, coeffs) + _c(dt, 1.0)
    # n1 = floor(n/2); n + 2048 > 0, so the shift sees a non-negative number (a right shift of a
    # negative int is implementation defined in C)
    n1 = ((n + 2048) >> _c(idt, 1)) - 1024
    n2 = n - n1
    ret = p * _pow2(n1, dt) * _pow2(n2, dt)
    return ret * _where(nan, math.nan, 1.0, dt)

# ---------------------------------------------------------------- log2

# ln(1+u) for 1+u in [sqrt(1/2), sqrt(2)], in the form u - u*u/2 + z*(u*u/2 + R(z*z)) with
# z = u/(2+u): since 2*z = u - z*u and ln(1+u) = 2*atanh(z) = 2z + 2z**3/3 + ..., it holds with
# R(w) = 2*atanh(sqrt w)/sqrt(w) - 2 = 2w/3 + 2w**2/5 + ...; here R(w) = w*K(w).
# |z| <= (sqrt(2)-1)/(sqrt(2)+1), w <= 0.0294373; K fitted on [0, 0.0294373*1.001]. Worst relative
# error of the rounded K (it enters ln(1+u) scaled by z*w*K/ln(1+u) < 0.01, so it hardly counts):
# float32, degree 2 (up to z**7): 3.0e-7 -> 3e-9 of the result, < 0.05 ulp.
_LOG_F32 = (0.6666668653488159, 0.3998875916004181, 0.29580986499786377)
# float64, degree 6 (up to z**15): 4.7e-16 -> 5e-18 of the result, < 0.05 ulp.
_LOG_F64 = (0.666666666666667, 0.3999999999989889, 0.28571428626253836, 0.22222211089379496, 0.1818289243253687,
            0.15331611722055008, 0.14617807153417325)
# 1/ln 2 = hi + lo with hi short enough that hi*h is exact for the short h below: float32 keeps 12
# significant bits of both, float64 32 bits of hi and 21 of h (12+12 <= 24, 32+21 <= 53).
_INVLN2_F32 = (1.4423828125, 0.00031222839606925845)
_INVLN2_F64 = (1.4426950407214463, 1.6751713164886512e-10)

def xlog2(x: UOp) -> UOp:
    """log2(x) for a float32 or float64 UOp.

    Subnormal inputs are multiplied by 2**64 first (exact, and then normal: 2**-149 * 2**64 and
    2**-1074 * 2**64 are normal) and 64 is taken off the exponent. The exponent field gives e, the
    mantissa field with a zero exponent gives m in [1, 2); m > sqrt(2) is halved (e + 1), so that
    u = m - 1 (exact, Sterbenz) is in [sqrt(1/2)-1, sqrt(2)-1] and |log2 m| <= 1/2: e + log2 m then
    never cancels badly. The leading part u - u*u/2 of ln(1+u) is cut to a short h (low mantissa
    bits cleared), h*hi(1/ln 2) is exact, and all the rest (the bits cut off, the series, the low part
    of 1/ln 2) is summed on the side: the result rounds about once, not once per step."""
    dt = x.dtype
    idt, mbits, bias = _BITS[dt]
    kc, (ivhi, ivlo), cut = (_LOG_F32, _INVLN2_F32, 12) if dt == dtypes.float32 else (_LOG_F64, _INVLN2_F64, 32)
    # NaN, +inf, zero and negative x are computed as 1 (giving 0), then their answer is added on
    ok = (_c(dt, 0.0) < x) & (x < _c(dt, math.inf))
    xs = _where(ok, x, 1.0)
    # (ordered comparisons like < may trap on NaN, so gcc won't evaluate one conditionally, inside a
    # select arm, and then won't vectorize: the one here comes first, the inner ones are == / ok)
    special = _where((x < _c(dt, 0.0)) | _isnan(x), math.nan, _where(ok, 0.0, _where(x.eq(_c(dt, 0.0)), -math.inf, math.inf, dt)))
    sub = xs < _c(dt, 2.0 ** (1 - bias))
    xs = xs * _where(sub, 2.0 ** 64, 1.0, dt)
    bits = xs.bitcast(idt)
    # the biased exponent field; the sign bit is dropped before the shift (negative x is answered
    # below): a right shift of a negative int is implementation defined in C
    e_field = (bits & _c(idt, 2 ** (idt.itemsize * 8 - 1) - 1)) >> _c(idt, mbits)
    m = ((bits & _c(idt, (1 << mbits) - 1)) | _c(idt, bias << mbits)).bitcast(dt)
    big = _c(dt, math.sqrt(2.0)) < m
    m = m * _where(big, 0.5, 1.0, dt)
    # e_field as a float without an int -> float conversion: OR it into the mantissa of 2**mbits
    # (exact, as e_field < 2**mbits) and subtract 2**mbits; then the unbiased, adjusted exponent
    two_m = 2.0 ** mbits
    e = ((e_field | _c(idt, int(mbits + bias) << mbits)).bitcast(dt) - _c(dt, two_m + bias)) + \
        (_where(big, 1.0, 0.0, dt) - _where(sub, 64.0, 0.0, dt))
    u = m - _c(dt, 1.0)
    z = u / (u + _c(dt, 2.0))
    w = z * z
    hfsq = _c(dt, 0.5) * u * u
    # h: u - hfsq with the low `cut` mantissa bits cleared (AND with -2**cut keeps sign and exponent)
    h = ((u - hfsq).bitcast(idt) & _c(idt, -(2 ** cut))).bitcast(dt)
    lo = (u - h) - hfsq + z * (hfsq + w * _poly(w, kc))          # ln(1+u) = h + lo; u - h is exact
    ret = (lo + h) * _c(dt, ivlo) + lo * _c(dt, ivhi) + h * _c(dt, ivhi) + e
    return ret + special

# ---------------------------------------------------------------- sin

# Cody-Waite pieces of pi/2. Piece k is the remainder pi/2 - c1 - ... - c(k-1) rounded to a multiple
# of 2**-L(k); the last one is the remainder rounded to the dtype. Every piece but the last has few
# enough significant bits that q*piece is exact for every quadrant number q in range:
# float32: L = 7, 15, 23, 31, 39, 47, each piece <= 8 bits, q < 2**16 (|x| < ~1.0e5).
#   residual |pi/2 - sum| = 1.1e-23, so q*residual < 7e-19 = 2**-60.
_PIO2_F32 = (1.5703125, 0.00048828125, -4.410743713378906e-06, -4.377216100692749e-08, 6.002665031701326e-11,
             7.460698725481052e-13, -1.7151245100058819e-15)
# float64: L = 22, 44, 68, 91, each piece <= 23 bits, q < 2**30 (|x| < ~1.6e9).
#   residual 4.9e-45, q*residual < 6e-36 = 2**-117.
_PIO2_F64 = (1.570796251296997, 7.549789415861596e-08, 5.390304224023659e-15, -1.3658654267100645e-21,
             -1.1351118607522202e-28)
# x - q*c1 - q*c2 - ... : while the running remainder's grid 2**-L(k) holds it in the mantissa
# (|remainder| < 1, so L(k) <= 23 for float32 and <= 52 for float64) each step is exact. Later
# steps may round; they run as TwoSum, which returns the rounding error too, collected in r_lo.
_EXACT_STEPS = {dtypes.float32: 3, dtypes.float64: 2}

# sin(r) = r + r*s*P(s), cos(r) = 1 - s/2 + s*s*Q(s), s = r*r, with
# P(s) = (sin(sqrt s) - sqrt s)/s**1.5 and Q(s) = (cos(sqrt s) - 1 + s/2)/s**2, fitted on [0, rmax**2].
# |r| <= pi/4 plus the rounding of x*2/pi: at |x| = 1e5 in float32 that is < 0.01, so float32 uses
# rmax = 0.9 and float64 (|x|*2/pi is fine to 2**-23 up to 1e9) rmax = 0.8.
# float32, degree 3 (r**3 .. r**9): P 3.2e-8, Q 3.2e-8 relative, i.e. < 0.03 ulp of sin/cos.
_SIN_F32 = (-0.1666666716337204, 0.008333330042660236, -0.00019839234300889075, 2.7154360395797994e-06)
_COS_F32 = (0.0416666679084301, -0.0013888885732740164, 2.4799888706183992e-05, -2.722117642406374e-07)
# float64, degree 6 (r**3 .. r**15, and cos to r**16): P 5.9e-17, Q 5.6e-17 relative (coefficient rounding).
_SIN_F64 = (-0.16666666666666666, 0.008333333333333331, -0.000198412698412641, 2.7557319218602575e-06,
            -2.5052105981350752e-08, 1.6058492556729892e-10, -7.584436884170301e-13)
_COS_F64 = (0.041666666666666664, -0.0013888888888888887, 2.480158730158411e-05, -2.7557319220993294e-07,
            2.0876755651474404e-09, -1.1470439169481705e-11, 4.7446152351836426e-14)

def _two_sum(a: UOp, b: UOp) -> tuple[UOp, UOp]:
    """(a+b rounded, its rounding error) exactly, for any magnitudes (Knuth's TwoSum)."""
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)

def xsin(x: UOp) -> UOp:
    """sin(x) for a float32 or float64 UOp.

    q = round(x * 2/pi) (see _round; y is clamped first so that works for any x), r = x - q*pi/2 =
    r_hi + r_lo by Cody-Waite (see _PIO2_*), then by the quadrant q mod 4 (the low two bits of the
    rounded t, two's complement, so negative q works too): sin(r), cos(r), -sin(r), -cos(r), with
    r_lo entering to first order (sin(r_hi+r_lo) ~ sin(r_hi) + r_lo*cos(r_hi), cos(r_hi+r_lo) ~
    cos(r_hi) - r_lo*r_hi). Infinite and NaN x are computed as 0 and give NaN; +-0 returns x."""
    dt = x.dtype
    idt = _BITS[dt][0]
    f32 = dt == dtypes.float32
    pio2, sc, cc, rmax = (_PIO2_F32, _SIN_F32, _COS_F32, 0.9) if f32 else (_PIO2_F64, _SIN_F64, _COS_F64, 0.8)
    bad = _isnan(x) | x.eq(_c(dt, math.inf)) | x.eq(_c(dt, -math.inf))
    xs = _where(bad, 0.0, x)
    y = xs * _c(dt, 2.0 / math.pi)
    # q = round(y), with y clamped to where _round works (far outside the exact range anyway)
    limit = 2.0 ** (_BITS[dt][1] - 1) - 1.0
    y = _where(y < _c(dt, -limit), -limit, y)
    y = _where(_c(dt, limit) < y, limit, y)
    t, q, _ = _round(y)
    quadrant = t.bitcast(idt) & _c(idt, 3)
    r, r_lo = xs, _c(dt, 0.0)
    for k, c in enumerate(pio2):
        if k < _EXACT_STEPS[dt]: r = r - q * _c(dt, c)
        elif k < len(pio2) - 1:
            r, err = _two_sum(r, -(q * _c(dt, c)))
            r_lo = r_lo + err
        else: r_lo = r_lo - q * _c(dt, c)
    # In range |r| <= rmax and |r_lo| is a few ulp of r (+ q*last piece, tiny). Only |x| far outside
    # the exact range (where r is inaccurate anyway) breaks that: clamp both to keep sin in [-1, 1].
    lo_max = 2.0 ** -20 if f32 else 2.0 ** -49
    r = _where(r < _c(dt, -rmax), -rmax, r)
    r = _where(_c(dt, rmax) < r, rmax, r)
    r_lo = _where(r_lo < _c(dt, -lo_max), -lo_max, r_lo)
    r_lo = _where(_c(dt, lo_max) < r_lo, lo_max, r_lo)
    s = r * r
    # cos: 1 - s/2 is summed with its rounding error recovered ((1 - v) - hs is exact for s/2 <= 1/2)
    hs = _c(dt, 0.5) * s
    v = _c(dt, 1.0) - hs
    cos_r = v + (((_c(dt, 1.0) - v) - hs) + (s * s * _poly(s, cc) - r * r_lo))
    sin_r = r + (r * s * _poly(s, sc) + r_lo * cos_r)
    # pick cos or sin, flip the sign, give +-0 the sign of x: on the bits, so that no select has a
    # computed float in an arm (see the module docstring)
    sin_b, cos_b = sin_r.bitcast(idt), cos_r.bitcast(idt)
    sign_bit, zero = -(2 ** (idt.itemsize * 8 - 1)), x.eq(_c(dt, 0.0))
    bits = sin_b ^ ((sin_b ^ cos_b) & _where((quadrant & _c(idt, 1)).ne(_c(idt, 0)), -1, 0, idt))
    bits = bits ^ _where((quadrant & _c(idt, 2)).ne(_c(idt, 0)), sign_bit, 0, idt)
    bits = (bits & _where(zero, ~sign_bit, -1, idt)) | (x.bitcast(idt) & _where(zero, sign_bit, 0, idt))
    return bits.bitcast(dt) * _where(bad, math.nan, 1.0, dt)

# ---------------------------------------------------------------- the rewrite

_NATIVE = (dtypes.float32, dtypes.float64)
_WIDENED = (dtypes.float16, dtypes.bfloat16)

def _decompose(fn):
    def rewrite(u: UOp, x: UOp) -> UOp | None:
        if u.dtype.count != 1 or x.dtype != u.dtype: return None
        if u.dtype in _NATIVE: return fn(x)
        if u.dtype in _WIDENED: return fn(x.cast(dtypes.float32)).cast(u.dtype)
        return None
    return rewrite

pm_transcendental = PatternMatcher([
    (UPat(op, dtype=_NATIVE + _WIDENED, src=(UPat.var("x"),), name="u"), _decompose(fn))
    for op, fn in ((Ops.EXP2, xexp2), (Ops.LOG2, xlog2), (Ops.SIN, xsin))])

def decompose_transcendentals(sink: UOp) -> UOp:
    """Rewrite every scalar float EXP2/LOG2/SIN under ``sink`` into arithmetic (see the module docstring)."""
    return graph_rewrite(sink, pm_transcendental)
