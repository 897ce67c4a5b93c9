"""Kernels in the shape of Triton's tutorials, written for these tests: vector add, a row
softmax whose programs stride over rows in a pipelined `tl.range`, layer norm forward and a
backward that keeps partial weight gradients per program (a second kernel sums them), and
a fused attention forward (online softmax over key blocks, two `tl.dot`s per block)."""
import triton
import triton.language as tl


@triton.jit
def vector_add(x, y, out, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out + offsets, tl.load(x + offsets, mask=mask) + tl.load(y + offsets, mask=mask), mask=mask)


@triton.jit
def softmax_rows(out, x, x_row_stride, out_row_stride, n_rows, n_cols,
                 BLOCK: tl.constexpr, STAGES: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    for row in tl.range(tl.program_id(0), n_rows, tl.num_programs(0), num_stages=STAGES):
        values = tl.load(x + row * x_row_stride + cols, mask=cols < n_cols, other=-float("inf"))
        shifted = values - tl.max(values, axis=0)
        e = tl.exp(shifted)
        tl.store(out + row * out_row_stride + cols, e / tl.sum(e, axis=0), mask=cols < n_cols)


@triton.jit
def layer_norm_forward(x, y, weight, bias, mean_out, rstd_out, stride, n, eps, BLOCK: tl.constexpr):
    """One row per program, walked in BLOCK chunks three times (mean, variance, output)."""
    row = tl.program_id(0)
    x += row * stride
    y += row * stride
    total = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        total += tl.load(x + cols, mask=cols < n, other=0.0).to(tl.float32)
    mean = tl.sum(total, axis=0) / n
    squares = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        centred = tl.where(cols < n, tl.load(x + cols, mask=cols < n, other=0.0).to(tl.float32) - mean, 0.0)
        squares += centred * centred
    rstd = 1 / tl.sqrt(tl.sum(squares, axis=0) / n + eps)
    tl.store(mean_out + row, mean)
    tl.store(rstd_out + row, rstd)
    for start in range(0, n, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < n
        normed = (tl.load(x + cols, mask=mask, other=0.0).to(tl.float32) - mean) * rstd
        tl.store(y + cols, normed * tl.load(weight + cols, mask=mask) + tl.load(bias + cols, mask=mask),
                 mask=mask)


@triton.jit
def layer_norm_backward_dx(x, dy, dx, weight, mean, rstd, partial_dw, partial_db, stride, n_rows, n,
                           BLOCK: tl.constexpr):
    """dx row by row; each program also sums its rows' dw and db terms into its own row of
    `partial_dw`/`partial_db` (no lock: the tutorial's second stage reads them all)."""
    cols = tl.arange(0, BLOCK)
    mask = cols < n
    w = tl.load(weight + cols, mask=mask, other=0.0)
    dw_sum = tl.zeros([BLOCK], dtype=tl.float32)
    db_sum = tl.zeros([BLOCK], dtype=tl.float32)
    for row in range(tl.program_id(0), n_rows, tl.num_programs(0)):
        xs = tl.load(x + row * stride + cols, mask=mask, other=0.0)
        g = tl.load(dy + row * stride + cols, mask=mask, other=0.0)
        r = tl.load(rstd + row)
        xhat = tl.where(mask, (xs - tl.load(mean + row)) * r, 0.0)
        wg = tl.where(mask, w * g, 0.0)
        c1 = tl.sum(xhat * wg, axis=0) / n
        c2 = tl.sum(wg, axis=0) / n
        tl.store(dx + row * stride + cols, (wg - (xhat * c1 + c2)) * r, mask=mask)
        dw_sum += g * xhat
        db_sum += g
    tl.store(partial_dw + tl.program_id(0) * n + cols, dw_sum, mask=mask)
    tl.store(partial_db + tl.program_id(0) * n + cols, db_sum, mask=mask)


@triton.jit
def sum_partials(partial_dw, partial_db, dw, db, parts, n, BLOCK_P: tl.constexpr, BLOCK_N: tl.constexpr):
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    dw_sum = tl.zeros([BLOCK_N], dtype=tl.float32)
    db_sum = tl.zeros([BLOCK_N], dtype=tl.float32)
    for start in range(0, parts, BLOCK_P):
        rows = start + tl.arange(0, BLOCK_P)
        mask = (rows[:, None] < parts) & (cols[None, :] < n)
        at = rows[:, None] * n + cols[None, :]
        dw_sum += tl.sum(tl.load(partial_dw + at, mask=mask, other=0.0), axis=0)
        db_sum += tl.sum(tl.load(partial_db + at, mask=mask, other=0.0), axis=0)
    tl.store(dw + cols, dw_sum, mask=cols < n)
    tl.store(db + cols, db_sum, mask=cols < n)


@triton.jit
def attention_forward(q, k, v, out, seq, scale, HEAD: tl.constexpr, BLOCK_M: tl.constexpr,
                      BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    """Program (query block, batch x head): softmax(q k^T * scale) v over key blocks with a
    running maximum and normaliser; rows past `seq` and, when CAUSAL, keys past the query
    are masked. q, k, v, out: [batch x heads, seq, HEAD], contiguous."""
    block = tl.program_id(0)
    base = tl.program_id(1) * seq * HEAD
    rows = block * BLOCK_M + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, HEAD)
    queries = tl.load(q + base + rows[:, None] * HEAD + dims[None, :], mask=rows[:, None] < seq, other=0.0)
    running_max = tl.full([BLOCK_M], -float("inf"), dtype=tl.float32)
    normaliser = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD], dtype=tl.float32)
    end = tl.minimum((block + 1) * BLOCK_M, seq) if CAUSAL else seq
    for start in range(0, end, BLOCK_N):
        keys_at = start + tl.arange(0, BLOCK_N)
        keys = tl.load(k + base + keys_at[:, None] * HEAD + dims[None, :], mask=keys_at[:, None] < seq, other=0.0)
        scores = tl.dot(queries, tl.trans(keys)) * scale
        allowed = keys_at[None, :] < seq
        if CAUSAL:
            allowed = allowed & (keys_at[None, :] <= rows[:, None])
        scores = tl.where(allowed, scores, -float("inf"))
        new_max = tl.maximum(running_max, tl.max(scores, axis=1))
        p = tl.exp(scores - new_max[:, None])
        alpha = tl.exp(running_max - new_max)
        normaliser = normaliser * alpha + tl.sum(p, axis=1)
        values = tl.load(v + base + keys_at[:, None] * HEAD + dims[None, :], mask=keys_at[:, None] < seq, other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(values.dtype), values)
        running_max = new_max
    tl.store(out + base + rows[:, None] * HEAD + dims[None, :], (acc / normaliser[:, None]).to(out.dtype.element_ty),
             mask=rows[:, None] < seq)
