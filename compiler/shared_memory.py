"""What a launch plan takes of a program's shared memory: the chunks a pipelined chunk loop
buffers ahead, a block reduction's cross-warp scratch, an unpipelined gather's index block,
and, where the estimate is close to the limit, what the binary compiled for the spec takes.
The plan (`plan.py`) sizes pipelining depths and rules out blocks by these."""
from __future__ import annotations

import dataclasses
import math
from typing import Callable, Optional, Protocol, TypeVar

from gxusim.model import launch_facts
from gxusim.spec import HardwareSpec


class KernelShape(Protocol):
    """What these sizes read of a kernel (`plan.KernelShape`, which imports this module)."""
    @property
    def source(self) -> str: ...
    @property
    def gathers(self) -> bool: ...
    @property
    def pipelined(self) -> bool: ...


LaunchPlan = TypeVar("LaunchPlan")  # a `plan.LaunchPlan`

# (the constexprs a kernel is called with, num_warps, num_stages) -> bytes of shared memory
# a program of its binary takes
SharedBytes = Callable[[dict[str, int], int, Optional[int]], Optional[int]]


def reduction_scratch(meta: dict[str, int], num_warps: int) -> int:
    """A block reduction's cross-warp scratch: a 32-bit word per warp and row, as the
    emulator's occupancy model counts it."""
    return meta.get("XBLOCK", 1) * num_warps * 4


def deepest_fitting_stages(chunk_bytes: int, meta: dict[str, int], num_warps: int,
                           spec: HardwareSpec) -> int:
    """The most pipelining stages whose buffered chunks (num_stages - 1 of `chunk_bytes`)
    fit in the shared memory a program may take (`HardwareSpec.program_smem`) beside the
    block reduction's cross-warp scratch."""
    scratch = reduction_scratch(meta, num_warps)
    return 1 + max(0, spec.program_smem - scratch) // chunk_bytes if chunk_bytes else 1 << 30


# Bytes of an index as Inductor's indirect indexing computes it (int64, whatever was loaded).
INDEX_BYTES = 8


def gather_conversion_bytes(source: str, blocks: dict[str, int]) -> int:
    """Shared memory an unpipelined gather rearranges its index block through: where a
    gather's indices run along one axis of the block and the rows they name along another
    (an embedding's token ids along the reduced axis, its table rows along x), Triton
    converts the indices (int64s, loaded or computed) to the rows' layout through shared
    memory, the whole block at once. An embedding sum's 128 x 256 block asked the H200 for
    256 KB, over its 227 KB; a gather computing its indices from fp32 loads asked for 256 KB
    too, where 4-byte indices would have taken 128 KB (a pipelined loop reads them from its
    copies' buffers instead)."""
    phases, size = launch_facts.sized_phases(source, blocks, None)
    return max((math.prod(size[axis] for axis in phase.axes) * INDEX_BYTES
                for phase in phases if phase.gathers_across), default=0)


def unpipelined_overflow(shape: KernelShape, meta: dict[str, int], num_warps: int,
                         spec: HardwareSpec) -> int:
    """Bytes by which these blocks, unpipelined, overflow a program's shared memory
    (`HardwareSpec.program_smem`): a gather's
    index block converted through shared memory (`gather_conversion_bytes`)
    beside the reduction scratch; 0 when they fit."""
    needed = gather_conversion_bytes(shape.source, meta) if shape.gathers else 0
    return max(0, needed + reduction_scratch(meta, num_warps) - spec.program_smem) \
        if needed else 0


def within_shared_memory(shape: KernelShape, plan: LaunchPlan, spec: HardwareSpec,
                         shared_bytes: Optional[SharedBytes]) -> LaunchPlan:
    """`plan`, its chunk loop's pipelining lowered until its binary fits the shared memory a
    program may take. Depths are sized by the chunks buffered ahead (`deepest_fitting_stages`);
    beside them Triton may convert a value's layout through shared memory, up to one chunk
    more (a Welford chunk, an operand broadcast to the tile), which only the binary shows: where
    one more chunk would not fit, the binary compiled for the spec (`shared_bytes`) decides."""
    stages = plan.num_stages or 1
    if shared_bytes is None or stages == 1 or not shape.pipelined:
        return plan
    chunk = launch_facts.chunk_load_bytes(shape.source, plan.meta)
    if stages * chunk + reduction_scratch(plan.meta, plan.num_warps) <= spec.program_smem:
        return plan
    lowered, needed = stages, None
    while lowered > 1:
        taken = shared_bytes(dataclasses.replace(plan, num_stages=lowered).kernel_meta(shape),
                             plan.num_warps, lowered)
        if taken is None or taken <= spec.program_smem:
            break
        needed = needed or taken
        lowered -= 1
    if lowered == stages:
        return plan
    rule = (f"{plan.rules.get('num_stages', 'chosen')}: {stages} stages, lowered to {lowered}: "
            f"the binary takes {needed} B of shared memory, over the {spec.program_smem} B a "
            f"program has on spec {spec.name}")
    return dataclasses.replace(plan, num_stages=lowered, rules={**plan.rules, "num_stages": rule})
