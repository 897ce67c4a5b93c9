"""Kernel sources as TorchInductor generates them for gxu, for tests that read them."""
import textwrap

# An embedding sum as Inductor writes it (256 token ids per row, 64 columns per table row):
# the token ids (int64) run along the reduced axis, the table rows they name along x.
EMBEDDING_SUM = textwrap.dedent("""
    @triton_heuristics.reduction(triton_meta={'signature': {'in_ptr0': '*i64', 'in_ptr1': '*fp32', 'out_ptr0': '*fp32', 'xnumel': 'i32', 'r0_numel': 'i32', 'XBLOCK': 'constexpr', 'R0_BLOCK': 'constexpr'}})
    @triton.jit
    def triton_red_fused_embedding_sum_0(in_ptr0, in_ptr1, out_ptr0, xnumel, r0_numel, XBLOCK : tl.constexpr, R0_BLOCK : tl.constexpr, NUM_STAGES : tl.constexpr):
        xnumel = 262144
        r0_numel = 256
        for xtile in range(tl.program_id(0), tl.cdiv(xnumel, XBLOCK), tl.num_programs(0)):
            xoffset = xtile * XBLOCK
            xindex = xoffset + tl.arange(0, XBLOCK)[:, None]
            r0_base = tl.arange(0, R0_BLOCK)[None, :]
            x1 = xindex // 64
            x0 = (xindex % 64)
            _tmp4 = tl.full([XBLOCK, R0_BLOCK], 0, tl.float32)
            x3 = xindex
            for r0_offset in tl.range(0, r0_numel, R0_BLOCK, num_stages=NUM_STAGES):
                r0_index = r0_offset + r0_base
                r0_mask = r0_index < r0_numel
                r0_2 = r0_index
                tmp0 = tl.load(in_ptr0 + (r0_2 + 256*x1), r0_mask, eviction_policy='evict_last', other=0.0)
                tmp2 = tl.load(in_ptr1 + (x0 + 64*tmp0), r0_mask, eviction_policy='evict_first')
                tmp3 = tl.broadcast_to(tmp2, [XBLOCK, R0_BLOCK])
                tmp5 = _tmp4 + tmp3
                _tmp4 = tl.where(r0_mask, tmp5, _tmp4)
            tmp4 = tl.sum(_tmp4, 1)[:, None]
            tl.store(out_ptr0 + (x3), tmp4, None)
""")

# The transformer block's k transpose (qkv rows of 192, k at columns 64-127, batch 32 x 256
# tokens) as torch 2.11's Inductor writes it: it marks the uncoalesced-looking load of k
# evict_last (torch 2.13 leaves it unmarked).
K_TRANSPOSE = textwrap.dedent("""
    @triton_heuristics.pointwise(triton_meta={'signature': {'in_ptr0': '*fp32', 'in_ptr1': '*fp32', 'out_ptr0': '*fp32', 'ynumel': 'i32', 'xnumel': 'i32', 'YBLOCK': 'constexpr', 'XBLOCK': 'constexpr'}})
    @triton.jit
    def triton_poi_fused_addmm_clone_split_transpose_view_2(in_ptr0, in_ptr1, out_ptr0, ynumel, xnumel, YBLOCK : tl.constexpr, XBLOCK : tl.constexpr):
        ynumel = 2048
        xnumel = 256
        x_tiles = tl.cdiv(xnumel, XBLOCK)
        n_tiles = x_tiles * tl.cdiv(ynumel, YBLOCK)
        for tile in range(tl.program_id(0), n_tiles, tl.num_programs(0)):
            xtile = tile % x_tiles
            ytile = tile // x_tiles
            yoffset = ytile * YBLOCK
            yindex = yoffset + tl.arange(0, YBLOCK)[:, None]
            ymask = tl.full([YBLOCK], True, tl.int1)[:, None]
            xoffset = xtile * XBLOCK
            xindex = xoffset + tl.arange(0, XBLOCK)[None, :]
            xmask = xindex < xnumel
            y0 = (yindex % 64)
            x2 = xindex
            y1 = yindex // 64
            y3 = yindex
            tmp0 = tl.load(in_ptr0 + (64 + y0), None, eviction_policy='evict_last')
            tmp1 = tl.load(in_ptr1 + (64 + y0 + 192*x2 + 49152*y1), xmask, eviction_policy='evict_last')
            tmp2 = tmp0 + tmp1
            tl.store(out_ptr0 + (x2 + 256*y3), tmp2, xmask)
    """)

# A negative log-likelihood over 8 rows of 8192 tokens as Inductor writes it: each token's
# target id (int64, along the reduced axis) names one logit of its row of 1000; the gathered
# load is one element a token, contiguous along no axis (not a table row: no gather layout).
TOKEN_NLL = textwrap.dedent("""
    @triton_heuristics.reduction(triton_meta={'signature': {'in_ptr0': '*i64', 'in_ptr1': '*fp32', 'out_ptr0': '*fp32', 'xnumel': 'i32', 'r0_numel': 'i32', 'XBLOCK': 'constexpr', 'R0_BLOCK': 'constexpr'}})
    @triton.jit
    def triton_red_fused_nll_loss_forward_0(in_ptr0, in_ptr1, out_ptr0, xnumel, r0_numel, XBLOCK : tl.constexpr, R0_BLOCK : tl.constexpr, NUM_STAGES : tl.constexpr):
        xnumel = 8
        r0_numel = 8192
        for xtile in range(tl.program_id(0), tl.cdiv(xnumel, XBLOCK), tl.num_programs(0)):
            xoffset = xtile * XBLOCK
            xindex = xoffset + tl.arange(0, XBLOCK)[:, None]
            xmask = xindex < xnumel
            r0_base = tl.arange(0, R0_BLOCK)[None, :]
            x0 = xindex
            _tmp4 = tl.full([XBLOCK, R0_BLOCK], 0, tl.float32)
            for r0_offset in tl.range(0, r0_numel, R0_BLOCK, num_stages=NUM_STAGES):
                r0_index = r0_offset + r0_base
                r0_mask = r0_index < r0_numel
                r0_1 = r0_index
                tmp0 = tl.load(in_ptr0 + (r0_1 + 8192*x0), r0_mask & xmask, eviction_policy='evict_first', other=0.0)
                tmp2 = tl.load(in_ptr1 + (tmp0 + 1000*r0_1 + 8192000*x0), r0_mask & xmask, eviction_policy='evict_last', other=0.0)
                tmp3 = -tmp2
                tmp5 = _tmp4 + tmp3
                _tmp4 = tl.where(r0_mask & xmask, tmp5, _tmp4)
            tmp4 = tl.sum(_tmp4, 1)[:, None]
            tl.store(out_ptr0 + (x0), tmp4, xmask)
""")

# A batch-norm backward's column sum as Inductor writes it for a split reduction (320
# channels x 13 splits of 121 positions): the per-channel mean is loaded inside the chunk
# loop through `tl.broadcast_to` under the chunk's mask, so its value (and a pipelined
# stage's copy of it) is a whole chunk, not a vector of XBLOCK; the per-channel scale is a
# vector loaded under the rows' mask alone.
CHANNEL_SUM = textwrap.dedent("""
    @triton_heuristics.reduction(triton_meta={'signature': {'in_ptr0': '*fp32', 'in_ptr1': '*fp32', 'in_ptr2': '*fp32', 'out_ptr0': '*fp32', 'xnumel': 'i32', 'r0_numel': 'i32', 'XBLOCK': 'constexpr', 'R0_BLOCK': 'constexpr'}})
    @triton.jit
    def triton_red_fused_native_batch_norm_backward_0(in_ptr0, in_ptr1, in_ptr2, out_ptr0, xnumel, r0_numel, XBLOCK : tl.constexpr, R0_BLOCK : tl.constexpr, NUM_STAGES : tl.constexpr):
        xnumel = 4160
        r0_numel = 121
        for xtile in range(tl.program_id(0), tl.cdiv(xnumel, XBLOCK), tl.num_programs(0)):
            xoffset = xtile * XBLOCK
            xindex = xoffset + tl.arange(0, XBLOCK)[:, None]
            xmask = xindex < xnumel
            r0_base = tl.arange(0, R0_BLOCK)[None, :]
            x1 = xindex // 320
            x0 = (xindex % 320)
            _tmp8 = tl.full([XBLOCK, R0_BLOCK], 0, tl.float32)
            x3 = xindex
            for r0_offset in tl.range(0, r0_numel, R0_BLOCK, num_stages=NUM_STAGES):
                r0_index = r0_offset + r0_base
                r0_mask = r0_index < r0_numel
                r0_2 = r0_index
                tmp0 = (r0_2 + 121*x1).to(tl.int32)
                tmp1 = tmp0 < 1568
                tmp2 = tl.load(in_ptr0 + (x0 + 320*(((r0_2 + 121*x1) % 1568))), r0_mask & tmp1 & xmask, eviction_policy='evict_first', other=0.0)
                tmp3 = tl.load(in_ptr1 + (tl.broadcast_to(x0, [XBLOCK, R0_BLOCK])), r0_mask & tmp1 & xmask, eviction_policy='evict_last', other=0.0)
                tmp4 = tl.load(in_ptr2 + (x0), xmask, eviction_policy='evict_last')
                tmp5 = (tmp2 - tmp3) * tmp4
                tmp6 = tl.where(tmp1, tmp5, 0.0)
                tmp7 = tl.broadcast_to(tmp6, [XBLOCK, R0_BLOCK])
                tmp9 = _tmp8 + tmp7
                _tmp8 = tl.where(r0_mask & xmask, tmp9, _tmp8)
            tmp8 = tl.sum(_tmp8, 1)[:, None]
            tl.store(out_ptr0 + (x3), tmp8, xmask)
""")
