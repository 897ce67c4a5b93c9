"""Pointwise kernels: the seed's capped add+relu (both tile orders), tanh-GELU the way
Inductor writes it, narrow-float casts, a 2D transpose, an embedding gather and reshapes
that regroup a block."""
import triton
import triton.language as tl
from torch._inductor.runtime import triton_helpers
from triton.language.extra import libdevice


@triton.jit
def add_relu_chunked(in_ptr0, in_ptr1, out_ptr0, xnumel, XBLOCK: tl.constexpr):
    # the seed's GXU form: program pid handles the contiguous tiles pid * tiles_per_pid + i
    pid = tl.program_id(0)
    n_tiles = tl.cdiv(xnumel, XBLOCK)
    tiles_per_pid = tl.cdiv(n_tiles, tl.num_programs(0))
    for i in range(tiles_per_pid):
        xoffset = (pid * tiles_per_pid + i) * XBLOCK
        xindex = xoffset + tl.arange(0, XBLOCK)
        xmask = xindex < xnumel
        tmp0 = tl.load(in_ptr0 + xindex, xmask)
        tmp1 = tl.load(in_ptr1 + xindex, xmask)
        tmp2 = tmp0 + tmp1
        tmp3 = tl.maximum(tmp2, 0.0)
        tl.store(out_ptr0 + xindex, tmp3, xmask)


@triton.jit
def add_relu_gridstride(in_ptr0, in_ptr1, out_ptr0, xnumel, XBLOCK: tl.constexpr):
    pid = tl.program_id(0)
    num_programs = tl.num_programs(0)
    n_tiles = tl.cdiv(xnumel, XBLOCK)
    for tile in range(pid, n_tiles, num_programs):
        xoffset = tile * XBLOCK
        xindex = xoffset + tl.arange(0, XBLOCK)[:]
        xmask = xindex < xnumel
        x0 = xindex
        tmp0 = tl.load(in_ptr0 + (x0), xmask, eviction_policy='evict_first')
        tmp1 = tl.load(in_ptr1 + (x0), xmask)
        tmp2 = tmp0 + tmp1
        tmp3 = tl.full([1], 0, tl.int32)
        tmp4 = triton_helpers.maximum(tmp3, tmp2)
        tl.store(out_ptr0 + (x0), tmp4, xmask)


@triton.jit
def gelu_tanh(in_ptr0, out_ptr0, xnumel, XBLOCK: tl.constexpr):
    pid = tl.program_id(0)
    num_programs = tl.num_programs(0)
    n_tiles = tl.cdiv(xnumel, XBLOCK)
    for tile in range(pid, n_tiles, num_programs):
        xoffset = tile * XBLOCK
        xindex = xoffset + tl.arange(0, XBLOCK)[:]
        xmask = xindex < xnumel
        x0 = xindex
        tmp0 = tl.load(in_ptr0 + (x0), xmask).to(tl.float32)
        tmp1 = 0.5
        tmp2 = tmp0 * tmp1
        tmp3 = tmp0 * tmp0
        tmp4 = tmp3 * tmp0
        tmp5 = 0.044715
        tmp6 = tmp4 * tmp5
        tmp7 = tmp0 + tmp6
        tmp8 = 0.7978845608028654
        tmp9 = tmp7 * tmp8
        tmp10 = libdevice.tanh(tmp9)
        tmp11 = 1.0
        tmp12 = tmp10 + tmp11
        tmp13 = tmp2 * tmp12
        tl.store(out_ptr0 + (x0), tmp13, xmask)


@triton.jit
def narrow_casts(in_ptr0, out_ptr0, out_ptr1, out_ptr2, xnumel, XBLOCK: tl.constexpr):
    # fp32 -> fp16 / bf16 (round to nearest even), fp16 arithmetic, -> int64 (truncation)
    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    xmask = xindex < xnumel
    tmp0 = tl.load(in_ptr0 + xindex, xmask, other=0.0)
    tmp1 = tmp0.to(tl.float16)
    tmp2 = tmp1 * tmp1 + tmp1
    tl.store(out_ptr0 + xindex, tmp2, xmask)
    tmp3 = (tmp0 * 3.0).to(tl.bfloat16)
    tl.store(out_ptr1 + xindex, tmp3, xmask)
    tmp4 = (tmp0 * 100.0).to(tl.int64)
    tl.store(out_ptr2 + xindex, tmp4, xmask)


@triton.jit
def bitcasts(f32_ptr, f16_ptr, bf16_ptr, f64_ptr, i32_ptr, i16_ptr, j16_ptr, i64_ptr, back_ptr,
             xnumel, XBLOCK: tl.constexpr):
    # `.to(..., bitcast=True)` both ways, at every width (Inductor's `tensor.view(dtype)`)
    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    xmask = xindex < xnumel
    tmp0 = tl.load(f32_ptr + xindex, xmask)
    tl.store(i32_ptr + xindex, tmp0.to(tl.int32, bitcast=True) ^ 1, xmask)
    tl.store(back_ptr + xindex, (tmp0.to(tl.int32, bitcast=True) + 1).to(tl.float32, bitcast=True),
             xmask)
    tl.store(i16_ptr + xindex, tl.load(f16_ptr + xindex, xmask).to(tl.int16, bitcast=True), xmask)
    tl.store(j16_ptr + xindex, tl.load(bf16_ptr + xindex, xmask).to(tl.int16, bitcast=True), xmask)
    tl.store(i64_ptr + xindex, tl.load(f64_ptr + xindex, xmask).to(tl.int64, bitcast=True), xmask)


@triton.jit
def bitcast_to_narrower(in_ptr0, out_ptr0, xnumel, XBLOCK: tl.constexpr):
    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    tl.store(out_ptr0 + xindex, tl.load(in_ptr0 + xindex).to(tl.int16, bitcast=True))


@triton.jit
def transpose_2d(in_ptr, out_ptr, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    # out[N, M] = in[M, N]^T, one BLOCK_M x BLOCK_N tile per program (2D grid)
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    tile = tl.load(in_ptr + rm[:, None] * N + rn[None, :], mask=mask)
    tl.store(out_ptr + rn[None, :] * M + rm[:, None], tile, mask=mask)


@triton.jit
def transpose_flat(in_ptr0, out_ptr0, xnumel, M, N, XBLOCK: tl.constexpr):
    # the seed's flattened transpose: x0 = xindex % N (column), x1 = xindex // N (row)
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:]
    xmask = xindex < xnumel
    x0 = xindex % M
    x1 = xindex // M
    tmp0 = tl.load(in_ptr0 + (x1 + N * x0), xmask)
    tl.store(out_ptr0 + (xindex), tmp0, xmask)


@triton.jit
def embedding(in_ptr0, in_ptr1, out_ptr0, xnumel, DIM: tl.constexpr, XBLOCK: tl.constexpr):
    # Inductor's embedding: out[i, d] = weight[idx[i], d] (indirect load)
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:]
    xmask = xindex < xnumel
    x1 = xindex // DIM
    x0 = xindex % DIM
    tmp0 = tl.load(in_ptr0 + (x1), xmask, eviction_policy='evict_last')
    tl.device_assert(((0 <= tmp0) & (tmp0 < 64)) | ~(xmask), "index out of bounds: 0 <= tmp0 < 64")
    tmp1 = tl.load(in_ptr1 + (x0 + DIM * tmp0), xmask)
    tl.store(out_ptr0 + (xindex), tmp1, xmask)


@triton.jit
def int_isnan(in_ptr0, out_ptr0, xnumel, XBLOCK: tl.constexpr):
    # libdevice.isnan has fp32/fp64 versions only: Triton cannot compile it on integers
    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    xmask = xindex < xnumel
    x = tl.load(in_ptr0 + xindex, xmask)
    tl.store(out_ptr0 + xindex, libdevice.isnan(x).to(tl.int8), xmask)


@triton.jit
def float_mod(in_ptr0, out_ptr0, xnumel, XBLOCK: tl.constexpr):
    # float % is LLVM frem: C fmod, the result takes the dividend's sign
    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    xmask = xindex < xnumel
    x = tl.load(in_ptr0 + xindex, xmask)
    tl.store(out_ptr0 + xindex, x % 3.0, xmask)


@triton.jit
def negate(in_ptr0, out_ptr0, xnumel, XBLOCK: tl.constexpr):
    # Inductor writes `-tmp0` for aten.neg: the sign of a zero result depends on the Triton
    # version (0 - x before triton-lang/triton#10270, a true negation after it)
    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    xmask = xindex < xnumel
    tl.store(out_ptr0 + xindex, -tl.load(in_ptr0 + xindex, xmask), xmask)


HALF = tl.constexpr(0.5)


@triton.jit
def _scaled(x, factor: tl.constexpr = HALF):
    """A default that names a global of this module (inlined into another kernel)."""
    return x * factor


@triton.jit
def reshaped_sums(x, rows_out, pairs_out, R: tl.constexpr, C: tl.constexpr, LOG: tl.constexpr):
    """Reshapes that regroup elements (row-major), sizes computed at compile time from the
    block's shape (`2**LOG`, `v.shape[:-1]`)."""
    v = tl.load(x + tl.arange(0, R)[:, None] * C + tl.arange(0, C)[None, :])
    regrouped = tl.reshape(v, [2**LOG, (R * C) // 2**LOG])
    tl.store(rows_out + tl.arange(0, 2**LOG), _scaled(tl.sum(regrouped, axis=1)))
    pairs = tl.sum(tl.reshape(v, v.shape[:-1] + [C // 2, 2]), axis=2)
    tl.store(pairs_out + tl.arange(0, R)[:, None] * (C // 2) + tl.arange(0, C // 2)[None, :], pairs)


# Two kernels as Inductor writes one pointwise kernel at two sizes: the sizes and the modulus
# of a broadcast input are literals in the body, and the names differ.
@triton.jit
def triton_poi_fused_scale_bias_3(in_ptr0, in_ptr1, out_ptr0, xnumel, XBLOCK: tl.constexpr):
    xnumel = 1000
    for xtile in range(tl.program_id(0), tl.cdiv(xnumel, XBLOCK), tl.num_programs(0)):
        xindex = xtile * XBLOCK + tl.arange(0, XBLOCK)
        xmask = xindex < xnumel
        x0 = xindex % 250
        tmp0 = tl.load(in_ptr0 + xindex, xmask)
        tmp1 = tl.load(in_ptr1 + x0, xmask, eviction_policy='evict_last')
        tl.store(out_ptr0 + xindex, tmp0 * 2.625 + tmp1, xmask)


@triton.jit
def triton_poi_fused_scale_bias_7(in_ptr0, in_ptr1, out_ptr0, xnumel, XBLOCK: tl.constexpr):
    xnumel = 1100
    for xtile in range(tl.program_id(0), tl.cdiv(xnumel, XBLOCK), tl.num_programs(0)):
        xindex = xtile * XBLOCK + tl.arange(0, XBLOCK)
        xmask = xindex < xnumel
        x0 = xindex % 275
        tmp0 = tl.load(in_ptr0 + xindex, xmask)
        tmp1 = tl.load(in_ptr1 + x0, xmask, eviction_policy='evict_last')
        tl.store(out_ptr0 + xindex, tmp0 * 2.625 + tmp1, xmask)
