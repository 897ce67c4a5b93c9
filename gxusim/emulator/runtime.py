"""Numba helpers that generated kernels call: exact narrow-float rounding, C-style integer
division, NaN-propagating min/max, math libm lacks (access tracking lives in `tracking`).

Generated kernel modules do `from gxusim.emulator.runtime import *`; every helper here is
small and inlined into the kernel by LLVM.
"""
from __future__ import annotations

import math

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic, overload

__all__ = ["_rf16", "_rbf16", "_f2h", "_h2f", "_f2bf", "_bf2f", "_idiv", "_irem", "_ffloordiv",
           "_maxp", "_minp", "_tanh", "_tanh_fast", "_tanh_unsure", "_fclamp", "_rint", "_f32_bits",
           "_bits_f32", "_f64_bits", "_bits_f64", "_erfinv", "_erfcx", "_bessel_i", "_ilogb",
           "_philox", "_uniform", "_normal", "math", "np"]


def _bitcast(src: types.Type, dst: types.Type, llvm_dst: ir.Type):
    @intrinsic
    def cast(typingctx, x):
        def codegen(context, builder, signature, args):
            return builder.bitcast(args[0], llvm_dst)
        return dst(src), codegen
    return cast


_f32_bits = _bitcast(types.float32, types.uint32, ir.IntType(32))
_bits_f32 = _bitcast(types.uint32, types.float32, ir.FloatType())
_f64_bits = _bitcast(types.float64, types.int64, ir.IntType(64))
_bits_f64 = _bitcast(types.int64, types.float64, ir.DoubleType())


@njit(inline="always")
def _f2h(x):
    """float32 -> fp16 bit pattern, round to nearest even (IEEE conversion)."""
    u = _f32_bits(np.float32(x))
    sign = (u >> np.uint32(16)) & np.uint32(0x8000)
    u = u & np.uint32(0x7FFFFFFF)
    if u >= np.uint32(0x7F800000):  # inf or nan
        nan = np.uint32(0x200) if u > np.uint32(0x7F800000) else np.uint32(0)
        return np.uint16(sign | np.uint32(0x7C00) | nan)
    if u >= np.uint32(0x477FF000):  # >= 65520 rounds to inf
        return np.uint16(sign | np.uint32(0x7C00))
    if u < np.uint32(0x38800000):  # fp16 subnormal: quantum 2**-24, exact scaling
        scaled = _bits_f32(u) * np.float32(16777216.0)
        return np.uint16(sign | np.uint32(round(scaled)))
    u = u - np.uint32(0x38000000)  # rebias exponent 127 -> 15
    u = u + np.uint32(0xFFF) + ((u >> np.uint32(13)) & np.uint32(1))
    return np.uint16(sign | (u >> np.uint32(13)))


@njit(inline="always")
def _h2f(h):
    """fp16 bit pattern -> float32 (exact)."""
    h = np.uint32(h)
    sign = (h & np.uint32(0x8000)) << np.uint32(16)
    e = (h >> np.uint32(10)) & np.uint32(0x1F)
    m = h & np.uint32(0x3FF)
    if e == 0:
        v = np.float32(m) * np.float32(5.960464477539063e-08)
        return -v if sign else v
    if e == 31:
        return _bits_f32(sign | np.uint32(0x7F800000) | (m << np.uint32(13)))
    return _bits_f32(sign | ((e + np.uint32(112)) << np.uint32(23)) | (m << np.uint32(13)))


@njit(inline="always")
def _f2bf(x):
    """float32 -> bf16 bit pattern, round to nearest even."""
    u = _f32_bits(np.float32(x))
    if (u & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000):
        return np.uint16((u >> np.uint32(16)) | np.uint32(0x40))
    u = u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))
    return np.uint16(u >> np.uint32(16))


@njit(inline="always")
def _bf2f(b):
    return _bits_f32(np.uint32(b) << np.uint32(16))


@njit(inline="always")
def _rf16(x):
    return _h2f(_f2h(x))


@njit(inline="always")
def _rbf16(x):
    return _bf2f(_f2bf(x))


@njit(inline="always")
def _idiv(a, b):
    # Triton integer `//` is LLVM sdiv/udiv: truncation toward zero. Division by zero is
    # undefined on the GPU; the emulator returns 0 instead of trapping.
    if b == 0:
        return a - a
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


@njit(inline="always")
def _irem(a, b):
    if b == 0:
        return a - a
    return a - b * _idiv(a, b)


@njit(inline="always")
def _ffloordiv(a, b):
    return math.floor(a / b)


@njit(inline="always")
def _maxp(a, b):
    # NaN-propagating maximum (the interpreter's np.maximum; Inductor's triton_helpers.maximum)
    return a if (a > b or a != a) else b


@njit(inline="always")
def _minp(a, b):
    return a if (a < b or a != a) else b


@njit(inline="always")
def _tanh_f64(x):
    # via expm1 in float64: 3x faster than libm tanhf here and correctly rounded for fp32
    v = np.float64(x)
    em1 = math.expm1(-2.0 * abs(v))
    t = -em1 / (2.0 + em1)
    return t if v >= 0 else -t


ROUND_MAGIC = 6755399441055744.0  # 1.5 * 2**52: adding it rounds a smaller double to an integer
LN2_HI, LN2_LO = 0.6931471803691238, 1.9082149292705877e-10  # ln 2 = LN2_HI + LN2_LO, LN2_HI short


@njit(inline="always")
def _exp_nonpositive(y):
    """e**y for -30 <= y <= 0 to a relative 1e-15, in arithmetic only (no libm call and no
    branch, so loops around it vectorise): y = k ln 2 + r with |r| <= ln 2 / 2, e**r by
    its Taylor polynomial of degree 13 (Estrin's scheme: short dependency chains), 2**k
    from the exponent bits."""
    kf = y * 1.4426950408889634 + ROUND_MAGIC
    k = kf - ROUND_MAGIC
    r = (y - k * LN2_HI) - k * LN2_LO
    r2 = r * r
    r4 = r2 * r2
    low = (1.0 + r) + (0.5 + 0.16666666666666666 * r) * r2 + \
        ((0.041666666666666664 + 0.008333333333333333 * r) +
         (0.001388888888888889 + 0.0001984126984126984 * r) * r2) * r4
    high = (2.48015873015873e-05 + 2.755731922398589e-06 * r) + \
        (2.7557319223985893e-07 + 2.505210838544172e-08 * r) * r2 + \
        ((2.08767569878681e-09 + 1.6059043836821613e-10 * r) * r4)
    scale = _bits_f64((_f64_bits(kf) - _f64_bits(ROUND_MAGIC) + 1023) << 52)
    return (low + high * (r4 * r4)) * scale


TANH_SERIES_BELOW = 0.0625  # |x| under which tanh's odd series is used (1 - e**-2|x| cancels)
TANH_ROUNDING_MARGIN = 1e-14  # relative error of `_tanh_estimate` (< 2e-15), with room


@njit(inline="always")
def _tanh_estimate(x):
    """tanh(|x|) in float64 to a relative 2e-15, branch-free: the odd series to x**11 for
    small |x|, else (1 - e) / (1 + e) with e = e**-2|x| (|x| clamped at 10, where tanh
    rounds to 1 in float32)."""
    a = min(abs(np.float64(x)), 10.0)
    a2 = a * a
    series = a + a * a2 * (-0.3333333333333333 + a2 * (0.13333333333333333 + a2 * (
        -0.05396825396825397 + a2 * (0.021869488536155203 + a2 * -0.008863235529902197))))
    e = _exp_nonpositive(-2.0 * a)
    return series if a < TANH_SERIES_BELOW else (1.0 - e) / (1.0 + e)


@njit(inline="always")
def _tanh_fast(x):
    """float32(_tanh_f64(x)) for a float32 x unless `_tanh_unsure(x)`; vectorises."""
    rounded = np.float32(_tanh_estimate(x))
    return rounded if x >= 0 else -rounded


@njit(inline="always")
def _tanh_unsure(x):
    """Whether `_tanh_fast(x)` may differ from float32(_tanh_f64(x)): x is NaN, or a value
    within the estimate's error bound of it rounds to another float32 (a few x in a
    million). Checked, with `_tanh_fast`, on every float32 input."""
    t = _tanh_estimate(x)
    margin = t * TANH_ROUNDING_MARGIN
    return (x != x) | (np.float32(t - margin) != np.float32(t + margin))


@njit(inline="always")
def _tanh_f32(x):
    """float32(_tanh_f64(x)) for a float32 x, bit for bit: the estimate where it is sure
    (a little cheaper than `_tanh_f64` in scalar code; the dense loop's vectorised
    `_tanh_fast` is where the estimate pays)."""
    if _tanh_unsure(x):
        return np.float32(_tanh_f64(x))
    return _tanh_fast(x)


def _tanh(x):
    """tanh as the emulator computes it: `_tanh_f64`, or `_tanh_f32` on a float32 (whose
    result the generated code rounds to float32 anyway)."""
    return _tanh_f64(x)


@overload(_tanh)
def _tanh_by_type(x):
    if x == types.float32:
        return lambda x: _tanh_f32(x)
    return lambda x: _tanh_f64(x)


@njit(inline="always")
def _fclamp(x, lo, hi):
    # float -> int conversion saturates on the GPU (cvt.rzi); NaN gives 0
    if x != x:
        return 0.0
    return lo if x < lo else hi if x > hi else x


@njit(inline="always")
def _rint(x):
    return np.float64(round(x)) if abs(x) < 4.5e15 else x


@njit(inline="always")
def _erfinv(y):
    """The inverse error function in float64: Giles' single-precision approximation
    ("Approximating the erfinv function", GPU Computing Gems Jade, 2011) refined by two
    Newton steps, each of which squares its relative error: rounded to float32, none of 2.2
    million inputs tried differs from the correctly rounded result. The steps' residual
    is taken through erfc where |y| >= 0.5, which keeps it exact next to +-1."""
    a = abs(np.float64(y))
    if not a < 1.0:
        return math.copysign(math.inf, y) if a == 1.0 else math.nan
    w = -math.log((1.0 - a) * (1.0 + a))
    if w < 5.0:
        w -= 2.5
        p = 2.81022636e-08
        for c in (3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087,
                  -0.00125372503, -0.00417768164, 0.246640727, 1.50140941):
            p = c + p * w
    else:
        w = math.sqrt(w) - 3.0
        p = -0.000200214257
        for c in (0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773,
                  -0.0076224613, 0.00943887047, 1.00167406, 2.83297682):
            p = c + p * w
    x = p * a
    for _ in range(2):
        residual = math.erf(x) - a if a < 0.5 else (1.0 - a) - math.erfc(x)
        x -= residual / (1.1283791670955126 * math.exp(-x * x))
    return math.copysign(x, y)


ERFCX_SERIES_FROM = 25.0  # erfc(25) ~ 1e-273: a direct product still has every digit below


@njit(inline="always")
def _erfcx(x):
    """exp(x**2) erfc(x) in float64: the direct product below ERFCX_SERIES_FROM, the
    asymptotic series 1/(x sqrt(pi)) sum (-1)**n (2n-1)!! / (2x**2)**n above (its eighth
    term is under 1e-17 there)."""
    v = np.float64(x)
    if not v >= ERFCX_SERIES_FROM:  # NaN too
        return math.exp(v * v) * math.erfc(v)
    inverse = 1.0 / (2.0 * v * v)
    term, total = 1.0, 1.0
    for n in range(1, 8):
        term *= -(2 * n - 1) * inverse
        total += term
    return total / (v * 1.7724538509055159)


@njit(inline="always")
def _bessel_i(x, order):
    """The modified Bessel function of the first kind of order 0 or 1 in float64, by its
    power series (x/2)**order sum (x**2/4)**k / (k! (k + order)!): every term has the
    same sign, so nothing cancels; summed until a term no longer changes the total."""
    v = np.float64(x)
    quarter = 0.25 * v * v
    term = 1.0 if order == 0 else 0.5 * v
    total = term
    k = 1
    while abs(term) > 1e-17 * abs(total):  # ends at once on NaN and infinities
        term *= quarter / (k * (k + order))
        total += term
        k += 1
    return total


@njit(inline="always")
def _ilogb(x):
    """The unbiased exponent of x as an int32 (CUDA's ilogb: INT_MIN for 0 and NaN,
    INT_MAX for infinities)."""
    if x == 0 or x != x:
        return np.int32(-2147483648)
    if math.isinf(x):
        return np.int32(2147483647)
    return np.int32(math.frexp(np.float64(x))[1] - 1)


# Triton's Philox-4x32 (triton/language/random.py, `philox_impl` on uint32 counters): the
# round multipliers and the key's per-round increments (the golden ratio and sqrt(3) - 1).
PHILOX_ROUND_A = np.uint64(0xD2511F53)
PHILOX_ROUND_B = np.uint64(0xCD9E8D57)
PHILOX_KEY_A = np.uint64(0x9E3779B9)
PHILOX_KEY_B = np.uint64(0xBB67AE85)
_LOW_32 = np.uint64(0xFFFFFFFF)
_32 = np.uint64(32)


@njit(inline="always")
def _philox(seed, low, high, word, rounds):
    """Word `word` (0-3) of `tl.randint4x(seed, offset)`: Philox-4x32 of `rounds` rounds on
    the counter (offset's low 32 bits, its high 32 bits, 0, 0) keyed by the seed's low and
    high 32 bits, as Triton computes it (64-bit products give umulhi and the wrapped
    product; every value is kept to 32 bits)."""
    bits = np.uint64(seed)
    k0, k1 = bits & _LOW_32, (bits >> _32) & _LOW_32
    c0, c1 = np.uint64(low) & _LOW_32, np.uint64(high) & _LOW_32
    c2, c3 = np.uint64(0), np.uint64(0)
    for _ in range(rounds):
        product_b, product_a = PHILOX_ROUND_B * c2, PHILOX_ROUND_A * c0
        c0, c2 = (product_b >> _32) ^ c1 ^ k0, (product_a >> _32) ^ c3 ^ k1
        c1, c3 = product_b & _LOW_32, product_a & _LOW_32
        k0, k1 = (k0 + PHILOX_KEY_A) & _LOW_32, (k1 + PHILOX_KEY_B) & _LOW_32
    return np.uint32(c0 if word == 0 else c1 if word == 1 else c2 if word == 2 else c3)


@njit(inline="always")
def _uniform(x):
    """Triton's `uint_to_uniform_float` of a uint32: its bits as an int32, negatives
    complemented, times the largest scale that keeps the result below 1, in float32."""
    v = np.int32(x)
    if v < 0:
        v = ~v
    return np.float32(v) * np.float32(4.6566127342e-10)


@njit(inline="always")
def _normal(x, y):
    """Triton's `randn` from two uint32 words: Box-Muller in float32 (its first output)."""
    u1 = max(np.float32(1.0e-7), _uniform(x))
    theta = np.float32(6.283185307179586) * _uniform(y)
    radius = np.float32(math.sqrt(np.float32(np.float32(-2.0) * np.float32(math.log(u1)))))
    return radius * np.float32(math.cos(theta))
