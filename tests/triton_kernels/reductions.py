"""Reduction kernels: a tutorial softmax, Inductor's row sum with an RBLOCK loop inside the
GXU tile loop, and Inductor's layernorm with Welford."""
import triton
import triton.language as tl
from torch._inductor.runtime import triton_helpers
from triton.language.extra import libdevice
from torch._inductor.runtime.triton_helpers import math as tl_math


@triton.jit
def softmax(out_ptr, in_ptr, in_row_stride, out_row_stride, n_rows, n_cols, BLOCK: tl.constexpr):
    # Triton tutorial 02: grid-stride over rows, one row per iteration
    row_start = tl.program_id(0)
    row_step = tl.num_programs(0)
    for row in tl.range(row_start, n_rows, row_step, num_stages=2):
        cols = tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(in_ptr + row * in_row_stride + cols, mask=mask, other=-float("inf"))
        x = x - tl.max(x, axis=0)
        num = tl.exp(x)
        den = tl.sum(num, axis=0)
        tl.store(out_ptr + row * out_row_stride + cols, num / den, mask=mask)


@triton.jit
def row_sum(in_ptr0, out_ptr0, xnumel, r0_numel, XBLOCK: tl.constexpr, R0_BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    num_programs = tl.num_programs(0)
    n_tiles = tl.cdiv(xnumel, XBLOCK)
    for tile in range(pid, n_tiles, num_programs):
        xoffset = tile * XBLOCK
        xindex = xoffset + tl.arange(0, XBLOCK)[:, None]
        xmask = xindex < xnumel
        r0_base = tl.arange(0, R0_BLOCK)[None, :]
        x0 = xindex
        _tmp2 = tl.full([XBLOCK, R0_BLOCK], 0, tl.float32)
        for r0_offset in range(0, r0_numel, R0_BLOCK):
            r0_index = r0_offset + r0_base
            r0_mask = r0_index < r0_numel
            r0_1 = r0_index
            tmp0 = tl.load(in_ptr0 + (r0_1 + r0_numel * x0), r0_mask & xmask, eviction_policy='evict_first', other=0.0)
            tmp1 = tl.broadcast_to(tmp0, [XBLOCK, R0_BLOCK])
            tmp3 = _tmp2 + tmp1
            _tmp2 = tl.where(r0_mask & xmask, tmp3, _tmp2)
        tmp2 = tl.sum(_tmp2, 1)[:, None]
        tl.store(out_ptr0 + (x0), tmp2, xmask)


@triton.jit
def row_max_softmax_inductor(in_ptr0, out_ptr2, xnumel, r0_numel, XBLOCK: tl.constexpr, R0_BLOCK: tl.constexpr):
    # Inductor's persistent softmax (whole row in one R0_BLOCK)
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:, None]
    xmask = xindex < xnumel
    r0_index = tl.arange(0, R0_BLOCK)[None, :]
    roffset = 0
    r0_mask = r0_index < r0_numel
    r0_1 = r0_index
    x0 = xindex
    tmp0 = tl.load(in_ptr0 + (r0_1 + r0_numel * x0), r0_mask & xmask, other=0.0)
    tmp1 = tl.broadcast_to(tmp0, [XBLOCK, R0_BLOCK])
    tmp3 = tl.where(r0_mask & xmask, tmp1, float("-inf"))
    tmp4 = triton_helpers.max2(tmp3, 1)[:, None]
    tmp5 = tmp0 - tmp4
    tmp6 = tl_math.exp(tmp5)
    tmp7 = tl.broadcast_to(tmp6, [XBLOCK, R0_BLOCK])
    tmp9 = tl.where(r0_mask & xmask, tmp7, 0)
    tmp10 = tl.sum(tmp9, 1)[:, None]
    tmp11 = tmp6 / tmp10
    tl.store(out_ptr2 + (r0_1 + r0_numel * x0), tmp11, r0_mask & xmask)


@triton.jit
def layernorm_welford(in_out_ptr0, in_ptr0, in_ptr1, in_ptr2, out_ptr0, xnumel, r0_numel,
                      XBLOCK: tl.constexpr, R0_BLOCK: tl.constexpr):
    # Inductor's layer_norm forward (looped reduction, Welford), mean/rstd then normalise
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:, None]
    xmask = xindex < xnumel
    r0_base = tl.arange(0, R0_BLOCK)[None, :]
    x0 = xindex
    tmp2_mean = tl.zeros([XBLOCK, R0_BLOCK], tl.float32)
    tmp2_m2 = tl.zeros([XBLOCK, R0_BLOCK], tl.float32)
    tmp2_weight = tl.zeros([XBLOCK, R0_BLOCK], tl.float32)
    for r0_offset in range(0, r0_numel, R0_BLOCK):
        r0_index = r0_offset + r0_base
        r0_mask = r0_index < r0_numel
        r0_1 = r0_index
        tmp0 = tl.load(in_ptr0 + (r0_1 + r0_numel * x0), r0_mask & xmask, eviction_policy='evict_last', other=0.0)
        tmp1 = tl.broadcast_to(tmp0, [XBLOCK, R0_BLOCK])
        tmp2_mean_next, tmp2_m2_next, tmp2_weight_next = triton_helpers.welford_reduce(
            tmp1, tmp2_mean, tmp2_m2, tmp2_weight, r0_offset == 0
        )
        tmp2_mean = tl.where(r0_mask & xmask, tmp2_mean_next, tmp2_mean)
        tmp2_m2 = tl.where(r0_mask & xmask, tmp2_m2_next, tmp2_m2)
        tmp2_weight = tl.where(r0_mask & xmask, tmp2_weight_next, tmp2_weight)
    tmp5, tmp6, tmp7 = triton_helpers.welford(tmp2_mean, tmp2_m2, tmp2_weight, 1)
    tmp2 = tmp5[:, None]
    tmp3 = tmp6[:, None]
    tmp8 = 1.0 * r0_numel
    tmp9 = tmp3 / tmp8
    tmp10 = 1e-05
    tmp11 = tmp9 + tmp10
    tmp12 = libdevice.rsqrt(tmp11)
    tl.debug_barrier()
    tl.store(in_out_ptr0 + (x0), tmp12, xmask)
    for r0_offset in range(0, r0_numel, R0_BLOCK):
        r0_index = r0_offset + r0_base
        r0_mask = r0_index < r0_numel
        r0_1 = r0_index
        tmp13 = tl.load(in_ptr0 + (r0_1 + r0_numel * x0), r0_mask & xmask, eviction_policy='evict_first', other=0.0)
        tmp17 = tl.load(in_ptr1 + (r0_1), r0_mask, eviction_policy='evict_last', other=0.0)
        tmp19 = tl.load(in_ptr2 + (r0_1), r0_mask, eviction_policy='evict_last', other=0.0)
        tmp14 = tmp13 - tmp2
        tmp15 = tmp14 * tmp12
        tmp18 = tmp15 * tmp17
        tmp20 = tmp18 + tmp19
        tl.store(out_ptr0 + (r0_1 + r0_numel * x0), tmp20, r0_mask & xmask)


@triton.jit
def row_cumsum(in_ptr0, out_ptr0, xnumel, rnumel, XBLOCK: tl.constexpr, RBLOCK: tl.constexpr):
    """A prefix sum per row (rows of at most RBLOCK elements), grid-stride over row tiles."""
    for xtile in range(tl.program_id(0), tl.cdiv(xnumel, XBLOCK), tl.num_programs(0)):
        rows = xtile * XBLOCK + tl.arange(0, XBLOCK)[:, None]
        cols = tl.arange(0, RBLOCK)[None, :]
        mask = (rows < xnumel) & (cols < rnumel)
        x = tl.load(in_ptr0 + rows * rnumel + cols, mask, other=0.0)
        tl.store(out_ptr0 + rows * rnumel + cols, tl.cumsum(x, 1), mask)


@triton.jit
def _mul(a, b):
    return a * b


@triton.jit
def row_reverse_cumprod(in_ptr0, out_ptr0, xnumel, rnumel, XBLOCK: tl.constexpr,
                        RBLOCK: tl.constexpr):
    """Suffix products through tl.associative_scan with a user combine function."""
    for xtile in range(tl.program_id(0), tl.cdiv(xnumel, XBLOCK), tl.num_programs(0)):
        rows = xtile * XBLOCK + tl.arange(0, XBLOCK)[:, None]
        cols = tl.arange(0, RBLOCK)[None, :]
        mask = (rows < xnumel) & (cols < rnumel)
        x = tl.load(in_ptr0 + rows * rnumel + cols, mask, other=1.0)
        tl.store(out_ptr0 + rows * rnumel + cols, tl.associative_scan(x, 1, _mul, reverse=True),
                 mask)


@triton.jit
def row_arg_extremes(in_ptr0, out_ptr0, out_ptr1, out_ptr2, out_ptr3, out_ptr4, xnumel,
                     R0_BLOCK: tl.constexpr, XBLOCK: tl.constexpr):
    # one tile of XBLOCK whole rows (R0_BLOCK = row length): argmax/argmin with both tie rules
    xs = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    xmask = xs < xnumel
    r0 = tl.arange(0, R0_BLOCK)[None, :]
    x = tl.load(in_ptr0 + (r0 + R0_BLOCK * xs[:, None]), xmask[:, None], other=0.0)
    tl.store(out_ptr0 + xs, tl.argmax(x, 1), xmask)
    tl.store(out_ptr1 + xs, tl.argmax(x, 1, tie_break_left=False), xmask)
    tl.store(out_ptr2 + xs, tl.argmin(x, 1), xmask)
    tl.store(out_ptr3 + xs, tl.argmin(x, 1, tie_break_left=False), xmask)
    _, index = tl.max(x, 1, return_indices=True, return_indices_tie_break_left=False)
    tl.store(out_ptr4 + xs, index, xmask)


@triton.jit
def row_sums_walking_pointers(x, out, rows, cols, BLOCK: tl.constexpr, OTHER_BUFFER: tl.constexpr):
    """Row sums in the hand-written style: a block of pointers advanced by BLOCK each
    iteration (loop-carried pointers), the last chunk masked by what is left. With
    OTHER_BUFFER the pointer is moved to `out` inside the loop, which the emulator refuses."""
    row = tl.program_id(0)
    r = tl.arange(0, BLOCK)
    at = x + row * cols + r
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for k in range(0, tl.cdiv(cols, BLOCK)):
        acc += tl.load(at, mask=r < cols - k * BLOCK, other=0.0)
        at += BLOCK
        if OTHER_BUFFER:
            at = out + r
    tl.store(out + row, tl.sum(acc, 0))
