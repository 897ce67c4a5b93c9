"""Residency: how many programs one SM holds at once, and what limits it.

The spec's limits (blocks and warps per SM) always; where known, what one program takes of
the SM's register file and shared memory. The plan knows warps only, the emulator's
occupancy model estimates registers from the kernel's live values, and the cuda target
reads them off the compiled binary (`gxusim.model.evidence.with_binary`). The performance model
takes the result as `LaunchFacts.blocks_per_sm`: it sets how many programs share an SM and
in how many waves a launch's programs run. The shared memory they take also sets the L1
the SM keeps beside it (`l1_left`).
"""
from __future__ import annotations

import math

from ..spec import HardwareSpec
from .launch_facts import LaunchFacts

def residency(spec: HardwareSpec, num_warps: int, regs_per_thread: int = 0,
              smem_per_block: int = 0) -> tuple[int, str]:
    """Programs resident per SM and the limit that sets it: the spec's blocks per SM, its
    warps, and, where known (non-zero), the registers and shared memory one program takes.
    The emulator's occupancy model and the cuda target (the compiled binary's own counts)
    both ask this; the plan, which knows neither, is limited by warps alone."""
    limits = [("max_blocks_per_sm", spec.max_blocks_per_sm),
              ("max_warps_per_sm", spec.max_warps_per_sm // max(1, num_warps))]
    if regs_per_thread:
        limits.append(("registers", register_warps(spec, regs_per_thread) // max(1, num_warps)))
    if smem_per_block:
        limits.append(("shared_memory",
                       spec.smem_per_sm // (smem_per_block + spec.smem_reserved_per_block)))
    limiter, blocks = min(limits, key=lambda limit: limit[1])
    return blocks, limiter


def register_warps(spec: HardwareSpec, regs_per_thread: int) -> int:
    """Warps an SM's register file holds at `regs_per_thread`, as NVIDIA's occupancy
    calculator counts them (cuda_occupancy.h): a warp is given registers in units of
    `register_alloc_unit`, from one of the `register_sub_partitions` quarters of the file
    its scheduler owns, and no warp spans two. ncu on the H200: a 2-warp column sum of 65
    registers a thread holds 14 programs (launch__occupancy_limit_registers), not the 15
    its registers alone would give, and the driver sizes its carveout for 14: 132 KiB,
    124 KiB of L1 left (1,454 us, as its 124 KiB sibling's 1,442), where 15 would have
    needed 164 KiB (92 KiB left, and a model 47% slow)."""
    per_warp = -(-regs_per_thread * spec.warp_size // spec.register_alloc_unit) * \
        spec.register_alloc_unit
    per_partition = spec.regs_per_sm // spec.register_sub_partitions
    return per_partition // per_warp * spec.register_sub_partitions


def blocks_per_sm(spec: HardwareSpec, num_warps: int) -> int:
    """Resident programs per SM when warps, not registers or shared memory, limit them."""
    return residency(spec, num_warps)[0]


def residency_limiter(spec: HardwareSpec, num_warps: int) -> str:
    """What `blocks_per_sm` is limited by, in the occupancy model's words."""
    return residency(spec, num_warps)[1]


def l1_left(spec: HardwareSpec, blocks_per_sm: int, smem_per_block: float) -> float:
    """Bytes of L1 an SM keeps beside the shared memory it is configured for, running
    `blocks_per_sm` programs of `smem_per_block` each (inf where the spec has no l1_bytes).

    The driver picks the smallest of the spec's carveouts that holds the resident programs'
    shared memory (6 of the 11 such kernels ncu read on the H200; the rest got a size or two
    more, leaving 124 KiB of L1 or more); a kernel past the spec's `smem_opt_in_bytes`
    gets the largest: Triton's launcher then asks the driver to prefer shared memory. ncu
    on the H200, column sums of 16384x4096 on 32 programs: 16 warps with 32 KiB rings, carveout 132 KiB,
    805 us; with 64 KiB rings, 228 KiB (28 KiB of L1 left), 1,726-1,782 us; one warp with
    16 KiB rings (9 blocks by its registers), 164 KiB, 1.9 ms; with 24 KiB, 228 KiB, 6.2 ms."""
    if not spec.l1_bytes:
        return math.inf
    needed = max(1, blocks_per_sm) * (smem_per_block + spec.smem_reserved_per_block) \
        if smem_per_block else 0.0
    carveout = spec.smem_per_sm if smem_per_block > spec.smem_opt_in_bytes else min(
        (c for c in spec.smem_carveouts if c >= needed), default=min(needed, spec.smem_per_sm))
    return spec.l1_bytes - carveout


def serial_tiles(facts: LaunchFacts, spec: HardwareSpec) -> int:
    """Tiles one program runs one after another: its waves of programs times its tiles."""
    resident = max(1, min(facts.programs, facts.blocks_per_sm * spec.sm_count))
    return math.ceil(facts.programs / resident) * max(1, facts.tiles_per_program)


def programs_per_sm(facts: LaunchFacts, spec: HardwareSpec) -> int:
    """Programs sharing one SM's bandwidth at a time (1 when the grid leaves SMs idle)."""
    resident = max(1, min(facts.programs, facts.blocks_per_sm * spec.sm_count))
    return math.ceil(resident / spec.sm_count)
