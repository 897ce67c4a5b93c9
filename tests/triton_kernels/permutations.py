"""Sorts and permutations of blocks (tl.sort, tl.topk, tl.flip, tl.gather, tl.histogram), for
the emulator against Triton's interpreter (or the GPU)."""
import triton
import triton.language as tl


@triton.jit
def permutations(x, index, values, ascending, descending, top, flipped_rows, flipped_cols,
                 gathered, counts, R: tl.constexpr, C: tl.constexpr, K: tl.constexpr,
                 BINS: tl.constexpr):
    """x, index: R x C (index: column numbers); values: C small integers."""
    r = tl.arange(0, R)[:, None]
    c = tl.arange(0, C)[None, :]
    block = tl.load(x + r * C + c)
    tl.store(ascending + r * C + c, tl.sort(block))
    tl.store(descending + r * C + c, tl.sort(block, descending=True))
    tl.store(top + r * K + tl.arange(0, K)[None, :], tl.topk(block, K))
    tl.store(flipped_rows + r * C + c, tl.flip(block, 0))
    tl.store(flipped_cols + r * C + c, block.flip(1))
    tl.store(gathered + r * C + c, tl.gather(block, tl.load(index + r * C + c), 1))
    v = tl.load(values + tl.arange(0, C))
    tl.store(counts + tl.arange(0, BINS), tl.histogram(v, BINS, mask=tl.arange(0, C) < C - 1))
