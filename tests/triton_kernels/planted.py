"""Planted-bug kernels: each differs from a correct capped add+relu by one tiling mistake
the emulator must catch and locate (see tests/test_emulator_checks.py)."""
import triton
import triton.language as tl
from triton.language.extra import libdevice


@triton.jit
def missing_tail_mask(in_ptr0, out_ptr0, xnumel, XBLOCK: tl.constexpr):
    # the mask is forgotten: the last tile reads and writes past the end
    pid = tl.program_id(0)
    n_tiles = tl.cdiv(xnumel, XBLOCK)
    tiles_per_pid = tl.cdiv(n_tiles, tl.num_programs(0))
    for i in range(tiles_per_pid):
        xindex = (pid * tiles_per_pid + i) * XBLOCK + tl.arange(0, XBLOCK)
        tmp0 = tl.load(in_ptr0 + xindex)
        tl.store(out_ptr0 + xindex, tl.maximum(tmp0, 0.0))


@triton.jit
def masked_chunked(in_ptr0, out_ptr0, xnumel, XBLOCK: tl.constexpr):
    # the corrected kernel of the suite
    pid = tl.program_id(0)
    n_tiles = tl.cdiv(xnumel, XBLOCK)
    tiles_per_pid = tl.cdiv(n_tiles, tl.num_programs(0))
    for i in range(tiles_per_pid):
        xindex = (pid * tiles_per_pid + i) * XBLOCK + tl.arange(0, XBLOCK)
        xmask = xindex < xnumel
        tmp0 = tl.load(in_ptr0 + xindex, xmask)
        tl.store(out_ptr0 + xindex, tl.maximum(tmp0, 0.0), xmask)


@triton.jit
def gridstride_off_by_one(in_ptr0, out_ptr0, xnumel, XBLOCK: tl.constexpr):
    # starts at pid + 1: tile 0 is never written
    pid = tl.program_id(0)
    n_tiles = tl.cdiv(xnumel, XBLOCK)
    for tile in range(pid + 1, n_tiles, tl.num_programs(0)):
        xindex = tile * XBLOCK + tl.arange(0, XBLOCK)
        xmask = xindex < xnumel
        tmp0 = tl.load(in_ptr0 + xindex, xmask)
        tl.store(out_ptr0 + xindex, tl.maximum(tmp0, 0.0), xmask)


@triton.jit
def gridstride_short_step(in_ptr0, out_ptr0, xnumel, XBLOCK: tl.constexpr):
    # steps by num_programs - 1: programs revisit each other's tiles
    pid = tl.program_id(0)
    n_tiles = tl.cdiv(xnumel, XBLOCK)
    for tile in range(pid, n_tiles, tl.num_programs(0) - 1):
        xindex = tile * XBLOCK + tl.arange(0, XBLOCK)
        xmask = xindex < xnumel
        tmp0 = tl.load(in_ptr0 + xindex, xmask)
        tl.store(out_ptr0 + xindex, tl.maximum(tmp0, 0.0), xmask)


@triton.jit
def two_programs_one_tile(in_ptr0, out_ptr0, xnumel, XBLOCK: tl.constexpr):
    # program 5 computes its tile index as 4: programs 4 and 5 write tile 4, tile 5 is lost
    pid = tl.program_id(0)
    tile = tl.where(pid == 5, 4, pid)
    xindex = tile * XBLOCK + tl.arange(0, XBLOCK)
    xmask = xindex < xnumel
    tmp0 = tl.load(in_ptr0 + xindex, xmask)
    tl.store(out_ptr0 + xindex, tl.maximum(tmp0, 0.0), xmask)


@triton.jit
def one_tile_per_program(in_ptr0, out_ptr0, xnumel, XBLOCK: tl.constexpr):
    pid = tl.program_id(0)
    xindex = pid * XBLOCK + tl.arange(0, XBLOCK)
    xmask = xindex < xnumel
    tmp0 = tl.load(in_ptr0 + xindex, xmask)
    tl.store(out_ptr0 + xindex, tl.maximum(tmp0, 0.0), xmask)


@triton.jit
def skipped_tile(in_ptr0, out_ptr0, xnumel, XBLOCK: tl.constexpr):
    # the contiguous-chunk loop stops one tile early: each program's last tile is skipped
    pid = tl.program_id(0)
    n_tiles = tl.cdiv(xnumel, XBLOCK)
    tiles_per_pid = tl.cdiv(n_tiles, tl.num_programs(0))
    for i in range(tiles_per_pid - 1):
        xindex = (pid * tiles_per_pid + i) * XBLOCK + tl.arange(0, XBLOCK)
        xmask = xindex < xnumel
        tmp0 = tl.load(in_ptr0 + xindex, xmask)
        tl.store(out_ptr0 + xindex, tl.maximum(tmp0, 0.0), xmask)


@triton.jit
def reads_neighbour_output(in_out_ptr0, xnumel, XBLOCK: tl.constexpr):
    # in-place kernel that reads the element after its tile: the next program writes it
    pid = tl.program_id(0)
    xindex = pid * XBLOCK + tl.arange(0, XBLOCK)
    xmask = xindex < xnumel
    tmp0 = tl.load(in_out_ptr0 + xindex, xmask)
    tmp1 = tl.load(in_out_ptr0 + xindex + 1, (xindex + 1) < xnumel, other=0.0)
    tl.store(in_out_ptr0 + xindex, tmp0 + tmp1, xmask)


@triton.jit
def inplace_relu(in_out_ptr0, xnumel, XBLOCK: tl.constexpr):
    # corrected in-place kernel: each program reads only what it writes
    pid = tl.program_id(0)
    xindex = pid * XBLOCK + tl.arange(0, XBLOCK)
    xmask = xindex < xnumel
    tmp0 = tl.load(in_out_ptr0 + xindex, xmask)
    tl.store(in_out_ptr0 + xindex, tl.maximum(tmp0, 0.0), xmask)


@triton.jit
def uneven_chunks(in_ptr0, out_ptr0, xnumel, XBLOCK: tl.constexpr):
    # correct but lopsided: program 0 takes half of all tiles, the rest share the other half
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    n_tiles = tl.cdiv(xnumel, XBLOCK)
    half = n_tiles // 2
    if pid == 0:
        for tile in range(0, half):
            xindex = tile * XBLOCK + tl.arange(0, XBLOCK)
            xmask = xindex < xnumel
            tl.store(out_ptr0 + xindex, tl.load(in_ptr0 + xindex, xmask), xmask)
    else:
        for tile in range(half + pid - 1, n_tiles, nprog - 1):
            xindex = tile * XBLOCK + tl.arange(0, XBLOCK)
            xmask = xindex < xnumel
            tl.store(out_ptr0 + xindex, tl.load(in_ptr0 + xindex, xmask), xmask)


@triton.jit
def uses_bessel(in_ptr0, out_ptr0, XBLOCK: tl.constexpr):
    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    tl.store(out_ptr0 + xindex, libdevice.j0(tl.load(in_ptr0 + xindex)))
