"""Kernels that draw Triton's random numbers (Philox) at offsets, for the emulator against
Triton's interpreter (or the GPU)."""
import triton
import triton.language as tl


@triton.jit
def draws(seed, ints, uniforms, normals, n, XBLOCK: tl.constexpr):
    offsets = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    mask = offsets < n
    tl.store(ints + offsets, tl.randint(seed, offsets), mask=mask)
    tl.store(uniforms + offsets, tl.rand(seed, offsets), mask=mask)
    tl.store(normals + offsets, tl.randn(seed, offsets), mask=mask)


@triton.jit
def four_words_at_wide_offsets(seed, words, n, base, XBLOCK: tl.constexpr):
    """randint4x at int64 offsets past 2**32 (the counter's high word is used), in one
    int32 buffer of four rows."""
    index = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    mask = index < n
    a, b, c, d = tl.randint4x(seed, index.to(tl.int64) + base)
    tl.store(words + index, a, mask=mask)
    tl.store(words + n + index, b, mask=mask)
    tl.store(words + 2 * n + index, c, mask=mask)
    tl.store(words + 3 * n + index, d, mask=mask)
