"""Matrix-product kernels (tl.dot) for the emulator against Triton's interpreter or the GPU:
a tiled matmul in the shape of Triton's tutorial (grouped tile order, pointers advanced along
K, masked edges, an accumulator carried through `acc=`), a batched product of 3-D blocks, and
a product whose K is below what Triton accepts."""
import triton
import triton.language as tl


@triton.jit
def matmul(a, b, c, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
           BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
           GROUP_M: tl.constexpr, PRECISION: tl.constexpr):
    # GROUP_M rows of tiles are walked column by column, so neighbouring programs share
    # A's rows and B's columns in L2.
    pid = tl.program_id(0)
    tiles_m, tiles_n = tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N)
    group = pid // (GROUP_M * tiles_n)
    first_m = group * GROUP_M
    rows_in_group = min(tiles_m - first_m, GROUP_M)
    tile_m = first_m + (pid % (GROUP_M * tiles_n)) % rows_in_group
    tile_n = (pid % (GROUP_M * tiles_n)) // rows_in_group
    rm = tile_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tile_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    a_tile = a + rm[:, None] * stride_am + rk[None, :] * stride_ak
    b_tile = b + rk[:, None] * stride_bk + rn[None, :] * stride_bn
    out_type = tl.int32 if a.dtype.element_ty == tl.int8 else tl.float32
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=out_type)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        left = K - k * BLOCK_K
        x = tl.load(a_tile, mask=(rm[:, None] < M) & (rk[None, :] < left), other=0)
        y = tl.load(b_tile, mask=(rk[:, None] < left) & (rn[None, :] < N), other=0)
        acc = tl.dot(x, y, acc, input_precision=PRECISION, out_dtype=out_type)
        a_tile += BLOCK_K * stride_ak
        b_tile += BLOCK_K * stride_bk
    tl.store(c + rm[:, None] * stride_cm + rn[None, :] * stride_cn,
             acc.to(c.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def batched_dot(a, b, c, B: tl.constexpr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr):
    """One program: c[i] = a[i] @ b[i] for each of B whole matrices, as 3-D blocks."""
    i = tl.arange(0, B)[:, None, None]
    x = tl.load(a + i * M * K + tl.arange(0, M)[None, :, None] * K + tl.arange(0, K)[None, None, :])
    y = tl.load(b + i * K * N + tl.arange(0, K)[None, :, None] * N + tl.arange(0, N)[None, None, :])
    tl.store(c + i * M * N + tl.arange(0, M)[None, :, None] * N + tl.arange(0, N)[None, None, :],
             tl.dot(x, y, input_precision="ieee"))


@triton.jit
def short_k_dot(a, b, c, K: tl.constexpr):
    """16 x K times K x 16 in bf16: Triton's NVIDIA backend needs K >= 16 for 16-bit operands."""
    r = tl.arange(0, 16)
    k = tl.arange(0, K)
    x = tl.load(a + r[:, None] * K + k[None, :])
    y = tl.load(b + k[:, None] * 16 + r[None, :])
    tl.store(c + r[:, None] * 16 + r[None, :], tl.dot(x, y))
