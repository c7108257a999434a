"""EXP2, LOG2 and SIN as plain arithmetic, so C compilers can vectorize loops that use them.

A libm call (``exp2f``, ``log2f``, ``sinf``) is an opaque scalar function call: gcc won't vectorize
a loop around it, and an elementwise ``exp`` runs far below memory bandwidth. The functions here
build the same math as a UOp graph of float ADD/NEG/MUL (and one FDIV in log2), comparisons, WHERE,
BITCAST and integer ADD/AND/OR/XOR/SHL/SHR, which every renderer already knows and gcc vectorizes.

    xexp2(x)  2**x   x = n + f, |f| <= 1/2; 2**f by a polynomial; 2**n from exponent bits, in two steps
    xexp(x)   e**x   for the pattern EXP2(x * log2 e) (Tensor.exp): x = n*ln2 + r by Cody-Waite, e**r by a
                     polynomial, 2**n as in xexp2; on every renderer, native transcendentals or not
    xlog2(x)  log2 x exponent and mantissa from the bits; ln of the mantissa by an atanh series, * 1/ln 2
    xsin(x)   sin x  reduction by pi/2 (float64: Cody-Waite; float32: none up to pi/4, then Payne-Hanek in uint32 lanes),
                     sin/cos polynomials on [-pi/4, pi/4], quadrant select; xsin(x, 1) is cos x

float32 and float64 are computed natively; float16 (and bfloat16) are widened to float32, computed
there and rounded back once. Accuracy, measured by test/codegen/test_transcendental.py (and with
more samples while writing it) against numpy's float64 (for float32) and numpy's long double (for
float64) rounded to the dtype, as the distance in ulps to that correctly rounded reference:

    float32: exp2 <= 1 ulp on [-150, 130] (subnormal results too), exp <= 1 ulp on every float (0.65 from the
             exact value for normal results), log2 <= 1 ulp on all positive
             floats (subnormals too), sin and cos <= 1 ulp (measured 0.8) on every finite float,
             including the floats nearest to the multiples of pi/2.
    float64: exp2 <= 1 ulp on [-1080, 1030], exp <= 1 ulp, log2 <= 1 ulp, sin <= 1 ulp on [-1e9, 1e9].
    float16: exp2 and log2 correctly rounded in the tests, sin <= 1 ulp.

Special values follow C99 Annex F: exp2(+inf) = +inf, exp2(-inf) = 0, exp2 overflows to +inf and
underflows through the subnormals to 0; log2(+-0) = -inf, log2(x<0) = NaN, log2(+inf) = +inf;
sin(+-inf) = NaN, sin(-0.0) = -0.0; NaN gives NaN everywhere.

float32 sin for |x| > pi/4 uses Payne-Hanek (_payne_hanek_f32) in 32-bit integer lanes, computed
on every lane, and x itself where |x| <= pi/4 (a branch would stop vectorization). One reduction, not
Cody-Waite for the common range plus Payne-Hanek for huge x: both would run on every lane.
Why integers and not float64: fusegrad's vectorizer (codegen/vectorize.py) computes only in 32-bit
(and float16) lanes; a float64 Payne-Hanek was 18x slower. Why not float Dekker products: the bits of 2/pi needed depend on
the exponent, which integer shifts select directly. Measured cost: see docs/decisions.md.

float64 sin has Cody-Waite only: it multiplies the quadrant number q = round(x*2/pi) by pieces of
pi/2 short enough for q*piece to be exact while q < 2**30, i.e. |x| < ~1.6e9. Beyond that the
absolute error grows about linearly with |x| (measured without FMA, max abs error 1e-6 at 1e10,
6e-5 at 1e12, 0.1 at 1e15, meaningless beyond). The reduced argument is clamped, so the result
stays finite and in [-1, 1] for every finite x.

How it is used: ``fusegrad.codegen.get_program`` runs it over the kernel AST before lowering the
reduces: ``decompose_transcendentals(ast)`` (= graph_rewrite(ast, pm_transcendental)) for renderers
without native transcendentals (or TRANSCENDENTAL>=2), ``decompose_transcendentals(ast, exp_only=True)``
(= pm_exp) for the others (the PYTHON device: numpy's exp2 is exact enough, but EXP2 of a rounded
x * log2 e is not e**x). Why one arithmetic graph for e**x everywhere, and not EXP2(n) * poly(r) on
native renderers or an interpreter that spots the pattern: the graph is what makes e**x accurate, so
CPU and PYTHON then compute the same bits (float32's MULACC is a true fma on both), the interpreter keeps executing
each uop as defined, and the scale by 2**n needs exponent bits in two steps anyway (a single 2**n
overflows while e**x is still finite, e.g. x = 88.7).

Running ``symbolic`` afterwards is fine (the tests check it changes no result bit). Only scalar
dtypes are rewritten (a vector dtype, ``dtype.count > 1``, keeps its EXP2/LOG2/SIN).

What the graphs contain: constants of the float dtype and of the same-width int (int32 / int64);
float ADD, NEG, MUL, MULACC (the polynomials' Horner steps, float32/float64), FDIV (log2 only), CMPLT, CMPNE, CMPEQ,
WHERE; bool AND/OR; BITCAST float <->
same-width int; int ADD, MUL, NEG, AND, OR, XOR, SHL, SHR; CAST only float16/bfloat16 <-> float32 (no
float <-> int conversion at all). Every shift sees a non-negative value and an amount below the
width, no signed int op overflows (uint32 ops in Payne-Hanek wrap, as C defines), so nothing relies
on undefined or implementation-defined C behavior. Compilers fuse nothing on their own (-ffp-contract=off): the
polynomials' MULACCs are the only fused multiply-adds, and every product that matters is exact either way.

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
    """c0 + c1*x + c2*x**2 + ... by Horner's rule (coefficients lowest order first). In float32 and float64 each
    step is one fused multiply-add (MULACC): compilers don't contract on their own (codegen/lowering.py), so this is
    the one place a polynomial gets its FMAs, the same on every device and CPU."""
    acc = _c(x.dtype, coeffs[-1])
    fused = x.dtype.scalar() in (dtypes.float32, dtypes.float64)
    for c in reversed(coeffs[:-1]): acc = UOp(Ops.MULACC, x.dtype, (acc, x, _c(x.dtype, c))) if fused else acc * x + _c(x.dtype, c)
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

# ---------------------------------------------------------------- exp

# The front end builds e**x as EXP2(x * log2(e)) (Tensor.exp); xexp computes that pattern as e**x
# itself. log2(e) as each dtype's constant holds it (the pattern matches exactly this value):
_LOG2E = {dtypes.float32: 1.4426950216293335, dtypes.float64: 1.4426950408889634}
# ln 2 = hi + lo (Cody-Waite): hi has 15 (float32) / 32 (float64) significant bits, so n*hi is exact
# for every n in range (|n| <= 160 / 1100: 8 / 11 bits); lo is the rest rounded to the dtype, leaving
# 5.5e-14 / 1.2e-26 (times |n|: far below an ulp of r).
_LN2_F32 = (0.693145751953125, 1.428606765330187e-06)
_LN2_F64 = (0.6931471803691238, 1.9082149292705877e-10)
# e**r = 1 + r + r*r*Q(r), Q(r) = (e**r - 1 - r)/r**2 on [-0.36, 0.36] (|r| <= ln2/2 plus the
# rounding of x*log2 e). Worst relative error of the rounded Q (it enters the result scaled by
# r*r*Q/e**r < 0.1): float32, degree 5: 1.1e-8 -> < 0.02 ulp; float64, degree 10: 1.3e-17 -> < 0.02 ulp.
_EXPM1_F32 = (0.5, 0.1666666716337204, 0.041666433215141296, 0.008333307690918446, 0.0013937181793153286,
              0.00019894912838935852)
_EXPM1_F64 = (0.5, 0.16666666666666674, 0.04166666666666667, 0.008333333333323584, 0.0013888888888881927,
              0.0001984126988339433, 2.4801587331670256e-05, 2.7557244942221745e-06, 2.7557266175047446e-07,
              2.5109404672957823e-08, 2.091767738180507e-09)

def xexp(x: UOp) -> UOp:
    """e**x for a float32 or float64 UOp, to <= 1 ulp (EXP2(x * log2 e) would round x*log2 e first:
    |x|*2**-24 relative, 52 ulp at x = 70).

    x is clamped to [lo, hi] first (below lo e**x rounds to 0, above hi it overflows). n =
    round(x*log2 e) (see _round; x*log2 e may round, which only moves r a little past ln2/2), r_hi =
    x - n*hi(ln 2) is exact (n*hi is exact, and Sterbenz's lemma holds for the difference), r_lo =
    -n*lo(ln 2). e**r = 1 + r + r*r*Q(r): 1 + r_hi is summed with its rounding error recovered
    (Fast2Sum, |r_hi| < 1), so the result rounds about once (measured <= 0.65 ulp from the exact
    value; a plain Horner polynomial in r = r_hi + r_lo costs 6 fewer flops but reaches 1.1 ulp
    without FMA). 2**n is applied in two halves exactly as in xexp2 (subnormal results round once
    more, overflow gives +inf). Products that matter are exact with or without FMA contraction."""
    dt = x.dtype
    idt = _BITS[dt][0]
    f32 = dt == dtypes.float32
    lo, hi = (-110.0, 90.0) if f32 else (-760.0, 720.0)
    (ln2_hi, ln2_lo), coeffs = (_LN2_F32, _EXPM1_F32) if f32 else (_LN2_F64, _EXPM1_F64)
    # clamped twice: NaN fails every comparison, so `clamped` keeps it (and r, p and the result become
    # NaN by arithmetic) while `finite` turns it into hi, so the integer work on n never sees NaN bits
    low = _where(x < _c(dt, lo), lo, x)
    clamped = _where(_c(dt, hi) < low, hi, low)
    finite = _where(low < _c(dt, hi), low, hi)
    _, nf, n = _round(finite * _c(dt, _LOG2E[dt]))
    r_hi = clamped - nf * _c(dt, ln2_hi)
    r_lo = nf * _c(dt, -ln2_lo)
    r = r_hi + r_lo
    one_plus = _c(dt, 1.0) + r_hi
    tail = ((_c(dt, 1.0) - one_plus) + r_hi) + (r_lo + r * r * _poly(r, coeffs))   # Fast2Sum's error, then the rest
    p = one_plus + tail
    n1 = ((n + 2048) >> _c(idt, 1)) - 1024      # floor(n/2), shifting a non-negative number (see xexp2)
    return p * _pow2(n1, dt) * _pow2(n - n1, dt)

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

def _fast_two_sum(a: UOp, b: UOp) -> tuple[UOp, UOp]:
    """(a+b rounded, its rounding error) exactly when a is 0 or |a| >= |b| (Dekker's Fast2Sum)."""
    s = a + b
    return s, b - (s - a)

# Payne-Hanek for float32 |x| >= 2**-16 (used from pi/4 on), in 32-bit integer lanes (no float64, no
# 64-bit product). 2/pi as a bit string, 40 zero bits first, then the bits of weight 2**-1, 2**-2, ...
# (216 of them), in 32-bit words, most significant first: bit j of the string has weight 2**-(j-40).
_TWO_OVER_PI_WORDS = (0, 0x517cc1, 0xb727220a, 0x94fe13ab, 0xe8fa9a6e, 0xe06db14a, 0xcc9e21c8, 0x20ff28b1)
_PH_MIN_EXPONENT = 111        # biased exponent of 2**-16: Payne-Hanek lanes have |x| >= 2**-16
_PIO4_F32_BITS = 0x3F490FDB   # pi/4 rounded to float32: below it a lane needs no reduction at all
# pi/2 rounded to float32 = hi + lo with hi of 12 significant bits (so a 12-bit times hi is exact),
# and the rounding error of that float32, pi/2 - (hi + lo)
_PIO2_F32_HI, _PIO2_F32_LO, _PIO2_F32_RES = 1.5703125, 0.0004838705062866211, -4.3711390001862426e-08

def _u32(value: int) -> UOp: return _c(dtypes.uint32, value)

def _small_uint_to_float(v: UOp) -> UOp:
    """A uint32 v < 2**23 as float32, exactly, without a conversion op (OR into 2**23's mantissa)."""
    return (v | _u32(0x4B000000)).bitcast(dtypes.float32) - _c(dtypes.float32, 8388608.0)

def _window_of_two_over_pi(exponent: UOp) -> tuple[UOp, UOp, UOp]:
    """Bits j0 .. j0+95 of _TWO_OVER_PI_WORDS as three uint32 words (most significant first), for
    j0 = exponent - 111 in [0, 143]. The words come from a select between constants (j0 // 32 is
    0..4) and a funnel shift by j0 % 32 (the shift right is split in two so no shift is by 32)."""
    j0 = exponent - _u32(_PH_MIN_EXPONENT)
    word, shift = j0 >> _u32(5), j0 & _u32(31)
    def table(t: int) -> UOp:   # _TWO_OVER_PI_WORDS[word + t]
        acc = _u32(_TWO_OVER_PI_WORDS[t + 4])
        for k in (3, 2, 1, 0): acc = _where(word.eq(_u32(k)), _TWO_OVER_PI_WORDS[t + k], acc)
        return acc
    g = [table(t) for t in range(4)]
    return tuple((g[t] << shift) | ((g[t + 1] >> _u32(1)) >> (_u32(31) - shift)) for t in range(3))

def _payne_hanek_f32(magnitude_bits: UOp) -> tuple[UOp, UOp, UOp]:
    """(quadrant as uint32 0..3, r_hi, r_lo) with |x| = quadrant*pi/2 + r_hi + r_lo (mod 2*pi),
    |r_hi| <= pi/4, for |x| >= 2**-16 given as its float32 bits (smaller |x| give defined garbage).

    |x| = m * 2**(e-150) with the 24-bit integer mantissa m. Bit i of 2/pi (weight 2**-i) adds
    m * 2**(e-150-i) to |x|*2/pi: a multiple of 4 for i <= e-152, so only bits from i0 = e-151 on
    matter mod 4. With W the 96 bits i0 .. i0+95 of 2/pi as an integer, |x|*2/pi = m*W*2**-94
    (mod 4) up to the bits after the window (< m*2**-94 < 2**-70). P = m*W mod 2**96 is computed
    exactly: its low 64 bits in 16-bit columns (m = mh*2**12 + ml, W's 16-bit digits d, every partial
    product < 2**28), its top 32 bits as the low word of m * (W's top word) plus the carry from below
    (uint32 arithmetic wraps mod 2**32, which is all that is needed there). P's top two bits after adding a half (rounding to the nearest quadrant) are the
    quadrant; the rest is the signed fraction v in [-1/2, 1/2) of a quarter turn, summed into a
    float32 pair from exact 16-bit pieces with TwoSum, then r = v*pi/2 with Dekker's product (the
    halves come from masking bits, not from a Veltkamp split, so FMA contraction changes nothing).
    A float32 comes no closer than ~2**-30 (relative) to a multiple of pi/2, so the ~2**-70
    absolute error of v leaves r accurate to far below an ulp."""
    u32, f32 = dtypes.uint32, dtypes.float32
    # (below 2**-16 the window index wraps around: any word, any shift in 0..31, a defined garbage
    # result that the caller doesn't use)
    exponent = magnitude_bits >> _u32(23)
    mantissa = (magnitude_bits & _u32(0x7FFFFF)) | _u32(0x800000)
    w0, w1, w2 = _window_of_two_over_pi(exponent)
    digits = [w2 & _u32(0xFFFF), w2 >> _u32(16), w1 & _u32(0xFFFF), w1 >> _u32(16)]
    m_hi, m_lo = mantissa >> _u32(12), mantissa & _u32(0xFFF)
    high = [m_hi * d for d in digits]          # each weighs 2**(16j + 12): 4 bits in column j, the rest in j+1
    p, carry = [], _u32(0)
    for j, d in enumerate(digits):
        column = m_lo * d + ((high[j] & _u32(15)) << _u32(12)) + carry
        if j: column = column + (high[j - 1] >> _u32(4))
        p.append(column & _u32(0xFFFF))
        carry = column >> _u32(16)
    top32 = mantissa * w0 + carry + (high[3] >> _u32(4))   # bits 64..95 of P (mod 2**32)
    p.extend([top32 & _u32(0xFFFF), top32 >> _u32(16)])
    top = (p[5] + _u32(0x2000)) & _u32(0xFFFF)           # + half a quadrant (2**93 of P)
    quadrant = top >> _u32(14)
    # v = (top % 2**14 - 2**13) * 2**-14 + p4 * 2**-30 + p3 * 2**-46 + p2 * 2**-62 (p1, p0: < 2**-78),
    # regrouped into 23-bit integers a (top's 14 bits, p4's high 9), b (p4's low 7, p3) and p2, each
    # exact as a float32; a nonzero part outweighs every later one, so Fast2Sum (3 ops) is exact
    a = ((top & _u32(0x3FFF)) << _u32(9)) | (p[4] >> _u32(7))
    b = ((p[4] & _u32(127)) << _u32(16)) | p[3]
    coarse = ((a | _u32(0x4B000000)).bitcast(f32) - _c(f32, 12582912.0)) * _c(f32, 2.0 ** -23)   # (a - 2**22) * 2**-23
    s1, e1 = _fast_two_sum(coarse, _small_uint_to_float(b) * _c(f32, 2.0 ** -46))
    v_hi, e2 = _fast_two_sum(s1, _small_uint_to_float(p[2]) * _c(f32, 2.0 ** -62))
    v_lo = e1 + e2
    r_hi = v_hi * _c(f32, _PIO2_F32_HI + _PIO2_F32_LO)
    a1 = (v_hi.bitcast(u32) & _u32(0xFFFFF000)).bitcast(f32)     # v_hi's top 12 significant bits
    a2 = v_hi - a1
    product_error = ((a1 * _c(f32, _PIO2_F32_HI) - r_hi) + a1 * _c(f32, _PIO2_F32_LO) + a2 * _c(f32, _PIO2_F32_HI)) + \
        a2 * _c(f32, _PIO2_F32_LO)
    r_lo = product_error + (v_hi * _c(f32, _PIO2_F32_RES) + v_lo * _c(f32, _PIO2_F32_HI + _PIO2_F32_LO))
    return quadrant, r_hi, r_lo

def _blend(cond: UOp, a: UOp, b: UOp) -> UOp:
    """cond ? a : b for computed floats a, b, on the bits (a select between two computed floats would
    stop gcc from vectorizing, see the module docstring)."""
    idt = _BITS[a.dtype][0]
    a_bits, b_bits = a.bitcast(idt), b.bitcast(idt)
    return (b_bits ^ ((a_bits ^ b_bits) & _where(cond, -1, 0, idt))).bitcast(a.dtype)

def _reduce_cody_waite(xs: UOp) -> tuple[UOp, UOp, UOp]:
    """(quadrant as an int 0..3, r, r_lo), x = quadrant*pi/2 + r + r_lo (mod 2*pi), by Cody-Waite:
    exact while q < 2**16 (float32) / 2**30 (float64), see _PIO2_*."""
    dt = xs.dtype
    idt = _BITS[dt][0]
    pio2 = _PIO2_F32 if dt == dtypes.float32 else _PIO2_F64
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
    return quadrant, r, r_lo

def _reduce_f32(magnitude: UOp) -> tuple[UOp, UOp, UOp]:
    """(quadrant, r, r_lo) for every finite float32 ``magnitude`` >= 0 (xsin passes |x| and applies the
    sign at the end): none up to pi/4 (r = the magnitude), Payne-Hanek from there. Payne-Hanek runs on
    every lane (a branch would stop vectorization), so there is no Cody-Waite for the middle range as
    well: two reductions per lane cost a fifth more than this one."""
    magnitude_bits = magnitude.bitcast(dtypes.uint32)
    q_ph, r_ph, r_lo_ph = _payne_hanek_f32(magnitude_bits)
    small = magnitude_bits < _u32(_PIO4_F32_BITS + 1)      # |x| <= pi/4: quadrant 0, r = |x| exactly
    keep = _where(small, 0, -1, dtypes.int32)
    return q_ph.bitcast(dtypes.int32) & keep, _blend(small, magnitude, r_ph), (r_lo_ph.bitcast(dtypes.int32) & keep).bitcast(dtypes.float32)

def xsin(x: UOp, quarter_turns: int = 0, bounded: bool = False) -> UOp:
    """sin(x + quarter_turns*pi/2) for a float32 or float64 UOp: sin(x), and cos(x) with
    quarter_turns=1, whose reduction is the same graph (built twice, shared by hash-consing).

    x = quadrant*pi/2 + r + r_lo (float32: see _reduce_f32, exact for every finite x; float64:
    Cody-Waite, exact for |x| < ~1.6e9), then by the quadrant mod 4 (two's complement low bits, so
    negative quadrants work too): sin(r), cos(r), -sin(r), -cos(r), with r_lo entering to first order
    (sin(r+r_lo) ~ sin(r) + r_lo*cos(r), cos(r+r_lo) ~ cos(r) - r_lo*r). Infinite and NaN x are
    computed as 0 and give NaN; sin(+-0) returns x. Works on kernel and tensor graphs alike (the
    constants carry no device or shape): Tensor.cos and Tensor.tan call it directly.

    ``bounded``: the caller knows |x| < 2**15 (randn's angles are in [0, 2 pi)), so float32 reduces by Cody-Waite
    too, exact there, instead of Payne-Hanek (about 60 ops per lane fewer)."""
    dt = x.dtype
    idt = _BITS[dt][0]
    f32 = dt == dtypes.float32
    sc, cc, rmax = (_SIN_F32, _COS_F32, 0.9) if f32 else (_SIN_F64, _COS_F64, 0.8)
    bad = _isnan(x) | x.eq(_c(dt, math.inf)) | x.eq(_c(dt, -math.inf))
    xs = _where(bad, 0.0, x)
    sign_bit = -(2 ** (idt.itemsize * 8 - 1))
    # float32 reduces |x|: sin(x + k*pi/2) is odd in x for even k and even for odd k (cos)
    magnitude_only = f32 and not bounded
    if magnitude_only: quadrant, r, r_lo = _reduce_f32((xs.bitcast(idt) & _c(idt, ~sign_bit)).bitcast(dt))
    else: quadrant, r, r_lo = _reduce_cody_waite(xs)
    if quarter_turns: quadrant = quadrant + _c(idt, quarter_turns)
    # In range |r| <= rmax and |r_lo| is a few ulp of r (+ q*last piece, tiny). Only float64 |x| far
    # outside the exact range (where r is inaccurate anyway) breaks that: clamp both to keep sin in
    # [-1, 1]. float32's reduction is exact everywhere (|r| <= pi/4), so it skips the 8 ops.
    if not f32:
        lo_max = 2.0 ** -49
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
    bits = sin_b ^ ((sin_b ^ cos_b) & _where((quadrant & _c(idt, 1)).ne(_c(idt, 0)), -1, 0, idt))
    bits = bits ^ _where((quadrant & _c(idt, 2)).ne(_c(idt, 0)), sign_bit, 0, idt)
    if magnitude_only and quarter_turns % 2 == 0: bits = bits ^ (x.bitcast(idt) & _c(idt, sign_bit))   # (and sin(-0) = -0)
    elif quarter_turns == 0:
        zero = x.eq(_c(dt, 0.0))
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

def _exp(u: UOp, x: UOp, log2e: UOp) -> UOp | None:
    """EXP2(x * log2 e), the front end's e**x, as xexp(x) (see pm_exp)."""
    if u.dtype.count != 1 or x.dtype != u.dtype or log2e.arg != _LOG2E[u.dtype]: return None
    return xexp(x)

# e**x: EXP2(x * log2 e), with log2 e exactly as the dtype holds it (Tensor.exp builds that), in
# float32/float64 (Tensor.exp widens float16/bfloat16 to float32 first).
pm_exp = PatternMatcher([
    (UPat(Ops.EXP2, dtype=_NATIVE, src=(UPat(Ops.MUL, src=[UPat.var("x"), UPat.cvar("log2e")]),), name="u"), _exp)])

def _cos(u: UOp, x: UOp) -> UOp | None:
    """COS(x) as sin(x + pi/2): SIN's own range reduction with the quadrant advanced by one (not SIN(pi/2 - x),
    which rounds pi/2 - x first). A COS whose arg bounds |x| below 2**15 (randn's angles, below 2 pi) reduces by
    Cody-Waite, exact there and ~60 ops per lane cheaper than float32's general reduction."""
    bounded = u.arg is not None and u.arg < 2 ** 15
    return _decompose(lambda v: xsin(v, 1, bounded=bounded))(u, x)

pm_transcendental = pm_exp + PatternMatcher([
    (UPat(op, dtype=_NATIVE + _WIDENED, src=(UPat.var("x"),), name="u"), _decompose(fn))
    for op, fn in ((Ops.EXP2, xexp2), (Ops.LOG2, xlog2), (Ops.SIN, xsin))]) + PatternMatcher([
    (UPat(Ops.COS, dtype=_NATIVE + _WIDENED, src=(UPat.var("x"),), name="u"), _cos)])

def decompose_transcendentals(sink: UOp, exp_only: bool = False) -> UOp:
    """Rewrite every scalar float EXP2/LOG2/SIN/COS under ``sink`` into arithmetic (see the module
    docstring), recognizing EXP2(x * log2 e) as e**x (xexp). ``exp_only``: for renderers with native
    transcendentals, rewrite only that e**x pattern (native exp2 can't recover the rounding of
    x * log2 e); their EXP2/LOG2/SIN/COS stay native."""
    return graph_rewrite(sink, pm_exp if exp_only else pm_transcendental)
