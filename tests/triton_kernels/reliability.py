"""Kernels for tests/test_emulator_reliability.py: `while` loops, libdevice calls that Inductor
emits, outputs declared mutated, and a mask Inductor drops that a larger gxu tile needs."""
import triton
import triton.language as tl
from triton.language.extra import libdevice


def heuristics(**meta):
    """Stands for Inductor's heuristics decorator: the emulator reads `inductor_meta` from
    the kernel's source, not from the decorator's result."""
    return lambda fn: fn


@triton.jit
def gridstride_while(in_ptr0, out_ptr0, xnumel, XBLOCK: tl.constexpr):
    # the capped tile loop written as a `while`: tile pid, pid + programs, ...
    tile = tl.program_id(0)
    while tile < tl.cdiv(xnumel, XBLOCK):
        xindex = tile * XBLOCK + tl.arange(0, XBLOCK)
        xmask = xindex < xnumel
        tl.store(out_ptr0 + xindex, tl.load(in_ptr0 + xindex, xmask) * 3.0, xmask)
        tile += tl.num_programs(0)


@triton.jit
def isqrt_bisection(in_ptr0, out_ptr0, xnumel, steps, XBLOCK: tl.constexpr):
    # floor(sqrt(x)) of non-negative ints by bisection, `steps` (a runtime scalar) halvings
    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    xmask = xindex < xnumel
    x = tl.load(in_ptr0 + xindex, xmask, other=0)
    low = tl.zeros([XBLOCK], tl.int32)
    high = tl.full([XBLOCK], 65536, tl.int32)
    left = steps
    while left > 0:
        mid = (low + high) // 2
        above = mid * mid > x
        high = tl.where(above, mid, high)
        low = tl.where(above, low, mid)
        left -= 1
    tl.store(out_ptr0 + xindex, low, xmask)


@triton.jit
def while_on_a_block(in_ptr0, out_ptr0, XBLOCK: tl.constexpr):
    x = tl.load(in_ptr0 + tl.arange(0, XBLOCK))
    while x > 0:
        x = x - 1.0
    tl.store(out_ptr0 + tl.arange(0, XBLOCK), x)


@triton.jit
def libdevice_calls(in_ptr0, in_ptr1, out_ptr0, out_ptr1, out_ptr2, out_ptr3, xnumel,
                    XBLOCK: tl.constexpr):
    # what Inductor emits beside the math the emulator had: llrint (index rounding),
    # ilogb (frexp), mul_rn (addcmul), fast_tanhf (ROCm's tanh)
    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    xmask = xindex < xnumel
    x = tl.load(in_ptr0 + xindex, xmask)
    y = tl.load(in_ptr1 + xindex, xmask)
    tl.store(out_ptr0 + xindex, libdevice.llrint(x), xmask)
    tl.store(out_ptr1 + xindex, libdevice.ilogb(x), xmask)
    tl.store(out_ptr2 + xindex, libdevice.mul_rn(x, y), xmask)
    tl.store(out_ptr3 + xindex, libdevice.fast_tanhf(x), xmask)


@heuristics(inductor_meta={'mutated_arg_names': ['out_ptr0'], 'num_store': 1})
@triton.jit
def column_assign_declared(out_ptr0, xnumel, XBLOCK: tl.constexpr):
    # `x[:, 1] = 0` on an input of 6 columns, as Inductor writes it
    for xtile in range(tl.program_id(0), tl.cdiv(xnumel, XBLOCK), tl.num_programs(0)):
        x0 = xtile * XBLOCK + tl.arange(0, XBLOCK)
        xmask = x0 < xnumel
        tl.store(out_ptr0 + (1 + 6 * x0), tl.zeros([XBLOCK], tl.float32), xmask)


@triton.jit
def column_assign_undeclared(out_ptr0, xnumel, XBLOCK: tl.constexpr):
    # the same kernel without the declaration: its output is an ordinary one
    for xtile in range(tl.program_id(0), tl.cdiv(xnumel, XBLOCK), tl.num_programs(0)):
        x0 = xtile * XBLOCK + tl.arange(0, XBLOCK)
        xmask = x0 < xnumel
        tl.store(out_ptr0 + (1 + 6 * x0), tl.zeros([XBLOCK], tl.float32), xmask)


@heuristics(inductor_meta={'mutated_arg_names': ['in_out_ptr0']})
@triton.jit
def in_place_skips_first_tile(in_out_ptr0, xnumel, XBLOCK: tl.constexpr):
    # a buffer reused in place (declared mutated, as Inductor declares it) whose loop
    # starts a tile late: its first tile keeps the input's values
    for xtile in range(tl.program_id(0) + 1, tl.cdiv(xnumel, XBLOCK), tl.num_programs(0)):
        x0 = xtile * XBLOCK + tl.arange(0, XBLOCK)
        xmask = x0 < xnumel
        tl.store(in_out_ptr0 + x0, tl.load(in_out_ptr0 + x0, xmask) + 1.0, xmask)


@triton.jit
def dropped_mask(in_ptr0, out_ptr0, xnumel, XBLOCK: tl.constexpr):
    # stock Inductor's pointwise kernel for xnumel = 3 x 4096: a multiple of its largest
    # block, so it writes the mask as all true; a gxu tile of 8192 runs past the end
    xnumel = 12288
    for xtile in range(tl.program_id(0), tl.cdiv(xnumel, XBLOCK), tl.num_programs(0)):
        xoffset = xtile * XBLOCK
        xindex = xoffset + tl.arange(0, XBLOCK)[:]
        xmask = tl.full([XBLOCK], True, tl.int1)
        x0 = xindex
        tmp0 = tl.load(in_ptr0 + (x0), xmask)
        tl.store(out_ptr0 + (x0), tmp0 * 2.0, xmask)


@triton.jit
def repeated_subexpressions(out_ptr0, xnumel, XBLOCK: tl.constexpr):
    # Inductor's indexing writes whole subexpressions again and again (a clamp as
    # `a * (a >= b) + b * (b > a)`, nested): each is one value, as in Triton's own CSE
    for xtile in range(tl.program_id(0), tl.cdiv(xnumel, XBLOCK), tl.num_programs(0)):
        x0 = xtile * XBLOCK + tl.arange(0, XBLOCK)
        xmask = x0 < xnumel
        low = (0 * (0 >= (x0 - 1)) + (x0 - 1) * ((x0 - 1) > 0))
        high = (low * (low <= (x0 + 2)) + (x0 + 2) * ((x0 + 2) < low))
        again = (0 * (0 >= (x0 - 1)) + (x0 - 1) * ((x0 - 1) > 0))
        tl.store(out_ptr0 + x0, (high + again) * 1.0, xmask)
