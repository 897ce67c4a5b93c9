"""Kernels with atomic adds: programs accumulating into shared elements by design."""
import triton
import triton.language as tl


@triton.jit
def histogram(values_ptr, bins_ptr, n, XBLOCK: tl.constexpr):
    for tile in range(tl.program_id(0), tl.cdiv(n, XBLOCK), tl.num_programs(0)):
        index = tile * XBLOCK + tl.arange(0, XBLOCK)
        mask = index < n
        bucket = tl.load(values_ptr + index, mask, other=0)
        tl.atomic_add(bins_ptr + bucket, tl.full([XBLOCK], 1.0, tl.float32), mask, sem="relaxed")


@triton.jit
def histogram_plain_store(values_ptr, bins_ptr, n, XBLOCK: tl.constexpr):
    """The same with a plain store: programs overwrite each other's bins."""
    for tile in range(tl.program_id(0), tl.cdiv(n, XBLOCK), tl.num_programs(0)):
        index = tile * XBLOCK + tl.arange(0, XBLOCK)
        mask = index < n
        bucket = tl.load(values_ptr + index, mask, other=0)
        tl.store(bins_ptr + bucket, tl.full([XBLOCK], 1.0, tl.float32), mask)
