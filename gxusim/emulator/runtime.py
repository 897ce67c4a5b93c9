"""Numba helpers that generated kernels call: exact narrow-float rounding, C-style integer
division, NaN-propagating min/max, and the merge of per-thread access records.

Generated kernel modules do `from gxusim.emulator.runtime import *`; every helper here is
small and inlined into the kernel by LLVM.
"""
from __future__ import annotations

import math

import numpy as np
from llvmlite import ir
from numba import njit, prange, types
from numba.extending import intrinsic

__all__ = ["_rf16", "_rbf16", "_f2h", "_h2f", "_f2bf", "_bf2f", "_idiv", "_irem", "_ffloordiv",
           "_maxp", "_minp", "_tanh", "_fclamp", "_rint", "_f32_bits", "_bits_f32", "math", "np"]


def _bitcast(src: types.Type, dst: types.Type, llvm_dst: ir.Type):
    @intrinsic
    def cast(typingctx, x):
        def codegen(context, builder, signature, args):
            return builder.bitcast(args[0], llvm_dst)
        return dst(src), codegen
    return cast


_f32_bits = _bitcast(types.float32, types.uint32, ir.IntType(32))
_bits_f32 = _bitcast(types.uint32, types.float32, ir.FloatType())


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
def _tanh(x):
    # via expm1 in float64: 3x faster than libm tanhf here and correctly rounded for fp32
    v = np.float64(x)
    em1 = math.expm1(-2.0 * abs(v))
    t = -em1 / (2.0 + em1)
    return t if v >= 0 else -t


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
def _push(first, second, x):
    # Keep the two lowest distinct program ids seen at an element (inputs arrive in
    # program order, so "first two distinct" are the two lowest).
    if x < 0 or x == first or x == second:
        return first, second
    if first < 0:
        return x, second
    if second < 0:
        return first, x
    return first, second


@njit(inline="always")
def _merge_element(w1, w2, r1, r2, e, has_reads, stats):
    """Fold one element's per-thread records into stats (see `merge_tracking`)."""
    threads = w1.shape[0]
    wa, wb = -1, -1
    for c in range(threads):
        wa, wb = _push(wa, wb, np.int64(w1[c, e]))
        if w2[c, e] != -1:
            wa, wb = _push(wa, wb, np.int64(w2[c, e]))
    if wa < 0:
        return
    if wb >= 0:
        if stats[0] == 0:
            stats[1], stats[2], stats[3] = e, wb, wa
        stats[0] += 1
    if has_reads:
        ra, rb = -1, -1
        for c in range(threads):
            ra, rb = _push(ra, rb, np.int64(r1[c, e]))
            if r2[c, e] != -1:
                ra, rb = _push(ra, rb, np.int64(r2[c, e]))
        reader, writer = -1, -1
        if ra >= 0:
            if wb >= 0:
                reader, writer = ra, (wb if ra == wa else wa)
            elif ra != wa:
                reader, writer = ra, wa
            elif rb >= 0:
                reader, writer = rb, wa
        if reader >= 0:
            if stats[4] == 0:
                stats[5], stats[6], stats[7] = e, reader, writer
            stats[4] += 1


@njit(cache=True, parallel=True)
def merge_tracking(w1, w2, r1, r2, written):
    """Combine per-thread access records of one storage into exact conflict/race facts.

    w1/w2 (r1/r2): [threads, elements] first and second distinct program that stored
    (loaded) each element within a thread's contiguous range of programs, -1 for none.
    Fills written[e] and returns int64[8]: conflicts, first conflict element, its second
    writer, its first writer, races, first race element, the racing reader, the writer it
    raced with. Element ranges are merged in parallel; per-range results are combined in
    element order, so the answer does not depend on the thread count.
    """
    n = w1.shape[1]
    has_reads = r1.shape[1] == n
    parts = 16
    stats = np.full((parts, 8), -1, np.int64)
    for k in prange(parts):
        stats[k, 0] = 0
        stats[k, 4] = 0
        for e in range(k * n // parts, (k + 1) * n // parts):
            # fast path: at most one program touched the element
            touched = 0
            for c in range(w1.shape[0]):
                touched += (w1[c, e] != -1) + 2 * (w2[c, e] != -1)
            written[e] = touched > 0
            if touched > 1 or (has_reads and touched == 1):
                _merge_element(w1, w2, r1, r2, e, has_reads, stats[k])
    out = np.full(8, -1, np.int64)
    out[0] = 0
    out[4] = 0
    for k in range(parts):
        for base in (0, 4):
            if stats[k, base] and not out[base]:
                out[base + 1:base + 4] = stats[k, base + 1:base + 4]
            out[base] += stats[k, base]
    return out
