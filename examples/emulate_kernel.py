"""Check a hand-written Triton kernel's tiling on the emulator, without a GPU.

The seed's contiguous-chunk kernel with its tail mask forgotten: the emulator runs it,
guards the stray lanes, and reports each out-of-bounds access with program, buffer and
offset; the corrected kernel reports nothing.   python examples/emulate_kernel.py
"""
import os

import torch
import triton
import triton.language as tl

import gxusim

os.environ.setdefault("GXUSIM_CHECKS", "warn")  # report findings instead of raising


@triton.jit
def mul_relu(in_ptr, out_ptr, numel, XBLOCK: tl.constexpr, MASKED: tl.constexpr):
    pid = tl.program_id(0)
    tiles_per_program = tl.cdiv(tl.cdiv(numel, XBLOCK), tl.num_programs(0))
    for i in range(tiles_per_program):
        index = (pid * tiles_per_program + i) * XBLOCK + tl.arange(0, XBLOCK)
        mask = index < numel if MASKED else None
        x = tl.load(in_ptr + index, mask)
        tl.store(out_ptr + index, tl.maximum(x * 2.0, 0.0), mask)


x = torch.randn(100_003)
for masked in (False, True):
    out = torch.empty_like(x)
    report = gxusim.emulate(mul_relu, (32,), x, out, x.numel(), num_warps=16, XBLOCK=1024,
                            MASKED=masked)
    print(f"MASKED={masked}: ok={report.ok}, tiles per program {set(report.tiles_per_program)}, "
          f"occupancy {report.occupancy}")
    for finding in report.findings:
        print("  ", finding)
print("correct result:", torch.equal(out, (x * 2).relu()))
