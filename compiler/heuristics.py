"""Launch-parameter heuristics as pluggable policies, and the spec clamp every choice passes.

A policy answers the seed's four questions (`select_xblock`, `select_num_warps`,
`get_grid`, `select_reduction`) plus `select_tile_2d` for 2D tilings. Policies shipped:

* `"seed"`: the seed's GXU formulas (chapter 10, section 8), reproduced faithfully,
  including its hard-coded 32-program grid and [128, 1024] XBLOCK clamp.
* `"gxu"` (default): spec-driven and informed by the H200 measurements under a
  32-program cap (docs/gpu-measurements.md): XBLOCK 1024/4 warps reached 0.70 TB/s,
  8192/16 warps 2.38 TB/s, so tiles are large (up to 32 KiB) and warps scale with them.

Policies only answer questions; `plan.py` turns the answers into a launch plan and passes
each through the spec clamp. A policy that chooses by measuring (autotune, `autotune.py`)
overrides `search`. The registry of names is `policies.py`.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Callable, Optional, Sequence, TypeVar

import torch

from gxusim.spec import HardwareSpec, current_spec


def next_power_of_2(n: int) -> int:
    return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclasses.dataclass(frozen=True)
class ReductionConfig:
    xblock: int  # rows per tile
    rblock: int  # reduction chunk (ignored by persistent reductions, whose RBLOCK is static)
    num_warps: int


Plan = TypeVar("Plan")


class Heuristics:
    """Base class for launch policies. Subclass and pass an instance to `gxusim.use_heuristics`.

    `spec` is the active hardware spec at the time of the call, for policies that use it.
    For 2D and reduction kernels the tile space is flattened: `get_grid(n_tiles, 1)`.
    """

    name = "custom"

    def search(self, candidates: Callable[[], Sequence[Plan]],
               time_plan: Optional[Callable[[Plan], float]], key: str) -> Optional[Plan]:
        """A plan chosen by measuring `candidates()` with `time_plan` (seconds), or None to
        plan from the four answers. `key` names the kernel, sizes, dtype and spec, for caching."""
        return None

    def __init__(self, spec: HardwareSpec | None = None) -> None:
        self.spec = spec

    def select_xblock(self, numel: int, dtype: torch.dtype) -> int:
        raise NotImplementedError

    def select_num_warps(self, xblock: int) -> int:
        raise NotImplementedError

    def get_grid(self, numel: int, xblock: int) -> tuple[int, ...]:
        raise NotImplementedError

    def select_reduction(self, xnumel: int, rnumel: int, dtype: torch.dtype) -> ReductionConfig:
        raise NotImplementedError

    def select_tile_2d(self, xnumel: int, ynumel: int, dtype: torch.dtype) -> tuple[int, int]:
        """(XBLOCK, YBLOCK) for 2D pointwise kernels: a square-ish split of select_xblock's tile."""
        tile = self.select_xblock(xnumel * ynumel, dtype)
        xblock = min(next_power_of_2(xnumel), max(1, next_power_of_2(math.isqrt(tile))))
        yblock = min(next_power_of_2(ynumel), max(1, tile // xblock))
        return xblock, yblock


class SeedHeuristics(Heuristics):
    """The seed's `GXUTritonHeuristics`, constant for constant."""

    name = "seed"
    MAX_GRID_SIZE = 32
    MAX_NUM_WARPS = 16
    REDUCTION_BLOCKS = (128, 256, 512)  # seed 6.1: reductions favour small blocks

    def select_xblock(self, numel: int, dtype: torch.dtype) -> int:
        min_xblock = (numel + 31) // 32
        xblock = 2 ** math.ceil(math.log2(max(min_xblock, 128)))
        return max(min(xblock, 1024), 128)

    def select_num_warps(self, xblock: int) -> int:
        min_warps = (xblock + 31) // 32
        num_warps = 2 ** math.ceil(math.log2(min_warps))
        return min(num_warps, self.MAX_NUM_WARPS)

    def get_grid(self, numel: int, xblock: int) -> tuple[int, ...]:
        total_tiles = (numel + xblock - 1) // xblock
        return (min(total_tiles, self.MAX_GRID_SIZE),)

    def select_reduction(self, xnumel: int, rnumel: int, dtype: torch.dtype) -> ReductionConfig:
        # The seed gives reductions only "blocks of 128-512, at least 4 warps" (6.1, 3):
        # the largest candidate the row can fill, one row per tile.
        rblock = max([b for b in self.REDUCTION_BLOCKS if b <= next_power_of_2(rnumel)]
                     or [self.REDUCTION_BLOCKS[0]])
        return ReductionConfig(1, rblock, max(4, self.select_num_warps(rblock)))


class GXUHeuristics(Heuristics):
    """gxusim's default: big tiles under a capped grid, everything derived from the spec."""

    name = "gxu"
    TILE_BYTES = 32 * 1024  # largest tile: 8192 fp32 elements, the fastest capped shape measured
    MIN_XBLOCK = 128
    ELEMENTS_PER_WARP = 256  # 8 elements per lane: wide vector loads, 16 warps at 4096+
    REDUCTION_TILE_ELEMENTS = 4096

    def _spec(self) -> HardwareSpec:
        return self.spec or current_spec()

    def select_xblock(self, numel: int, dtype: torch.dtype) -> int:
        largest = max(self.MIN_XBLOCK, self.TILE_BYTES // dtype.itemsize)
        wanted = next_power_of_2(cdiv(numel, self._spec().max_grid))
        return max(self.MIN_XBLOCK, min(wanted, largest))

    def select_num_warps(self, xblock: int) -> int:
        warps = next_power_of_2(max(1, xblock // self.ELEMENTS_PER_WARP))
        return max(1, min(warps, self._spec().max_num_warps))

    def get_grid(self, numel: int, xblock: int) -> tuple[int, ...]:
        return (max(1, min(cdiv(numel, xblock), self._spec().max_grid)),)

    def select_reduction(self, xnumel: int, rnumel: int, dtype: torch.dtype) -> ReductionConfig:
        rblock = min(next_power_of_2(rnumel), self.REDUCTION_TILE_ELEMENTS)
        # Several short rows per tile so a program's tile is not mostly idle lanes, but keep
        # at least one tile per program when there are rows enough.
        rows_per_tile = max(1, self.REDUCTION_TILE_ELEMENTS // rblock)
        rows_per_program = max(1, cdiv(xnumel, self._spec().max_grid))
        xblock = min(next_power_of_2(rows_per_tile), next_power_of_2(rows_per_program))
        num_warps = self.select_num_warps(xblock * rblock)
        return ReductionConfig(xblock, rblock, max(2, num_warps))
