"""Residency: how many programs one SM holds at once, and what limits it.

The spec's limits (blocks and warps per SM) always; where known, what one program takes of
the SM's register file and shared memory. The plan knows warps only, the emulator's
occupancy model estimates registers from the kernel's live values, and the cuda target
reads them off the compiled binary (`gxusim.compiled.with_binary`). The performance model
takes the result as `LaunchFacts.blocks_per_sm`: it sets how many programs share an SM and
in how many waves a launch's programs run.
"""
from __future__ import annotations

from .spec import HardwareSpec


def residency(spec: HardwareSpec, num_warps: int, regs_per_thread: int = 0,
              smem_per_block: int = 0) -> tuple[int, str]:
    """Programs resident per SM and the limit that sets it: the spec's blocks per SM, its
    warps, and, where known (non-zero), the registers and shared memory one program takes.
    The emulator's occupancy model and the cuda target (the compiled binary's own counts)
    both ask this; the plan, which knows neither, is limited by warps alone."""
    threads = num_warps * spec.warp_size
    limits = [("max_blocks_per_sm", spec.max_blocks_per_sm),
              ("max_warps_per_sm", spec.max_warps_per_sm // max(1, num_warps))]
    if regs_per_thread:
        limits.append(("registers", spec.regs_per_sm // (regs_per_thread * threads)))
    if smem_per_block:
        limits.append(("shared_memory", spec.smem_per_sm // smem_per_block))
    limiter, blocks = min(limits, key=lambda limit: limit[1])
    return blocks, limiter


def blocks_per_sm(spec: HardwareSpec, num_warps: int) -> int:
    """Resident programs per SM when warps, not registers or shared memory, limit them."""
    return residency(spec, num_warps)[0]


def residency_limiter(spec: HardwareSpec, num_warps: int) -> str:
    """What `blocks_per_sm` is limited by, in the occupancy model's words."""
    return residency(spec, num_warps)[1]
