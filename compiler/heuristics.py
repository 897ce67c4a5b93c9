"""Launch-parameter heuristics as pluggable policies, and the spec clamp every choice passes.

A policy answers the seed's four questions (`select_xblock`, `select_num_warps`,
`get_grid`, `select_reduction`) plus `select_tile_2d` for 2D tilings. Policies shipped:

* `"seed"`: the seed's GXU formulas (chapter 10, section 8), reproduced faithfully,
  including its hard-coded 32-program grid and [128, 1024] XBLOCK clamp.
* `"gxu"` (default): spec-driven and informed by the H200 measurements under a
  32-program cap (../shared/notes/gpu-machine.md): XBLOCK 1024/4 warps reached 0.70 TB/s,
  8192/16 warps 2.38 TB/s, so tiles are large (up to 32 KiB) and warps scale with them.

Whatever a policy returns goes through `resolve_*` below: non-powers of two are
rejected, warps and grid are clamped to the active spec, and each parameter carries the
rule that decided it (for the decision log). Grid-capped kernels loop over tiles, so a
grid smaller than the tile count is always correct.
"""
from __future__ import annotations

import dataclasses
import math
import threading
from typing import Union

import torch

from gxusim.spec import HardwareSpec


def next_power_of_2(n: int) -> int:
    return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclasses.dataclass(frozen=True)
class ReductionConfig:
    xblock: int  # rows per tile
    rblock: int  # reduction chunk (ignored by persistent reductions, whose RBLOCK is static)
    num_warps: int


class Heuristics:
    """Base class for launch policies. Subclass and pass an instance to `gxusim.use_heuristics`.

    `spec` is the active hardware spec at the time of the call, for policies that use it.
    For 2D and reduction kernels the tile space is flattened: `get_grid(n_tiles, 1)`.
    """

    name = "custom"

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
        from gxusim.spec import current_spec
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


class AutotuneHeuristics(GXUHeuristics):
    """Autotune mode (see `autotune.py`): the launcher times spec-valid configs on the GPU."""

    name = "autotune"


POLICIES: dict[str, type[Heuristics]] = {
    "seed": SeedHeuristics, "gxu": GXUHeuristics, "autotune": AutotuneHeuristics}

_lock = threading.Lock()
_active: Heuristics = GXUHeuristics()


def use_heuristics(policy: Union[str, Heuristics]) -> Heuristics:
    """Set the launch policy: "gxu" (default), "seed", "autotune", or a `Heuristics` instance."""
    global _active
    if isinstance(policy, str):
        if policy not in POLICIES:
            raise ValueError(f"unknown heuristics policy {policy!r}; choose one of "
                             f"{sorted(POLICIES)} or pass a gxusim.Heuristics instance")
        policy = POLICIES[policy]()
    if not isinstance(policy, Heuristics):
        raise TypeError(f"use_heuristics takes a policy name or a gxusim.Heuristics instance, "
                        f"not {type(policy).__name__}")
    with _lock:
        _active = policy
    return policy


def current_heuristics() -> Heuristics:
    return _active


# --- the spec clamp: every policy's answer passes through here -----------------------------

class PolicyError(ValueError):
    """A policy returned something no launch can use (names the policy, method and value)."""


def _block(policy: Heuristics, method: str, value: object, limit: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1 or value & (value - 1):
        raise PolicyError(f"policy {policy.name!r}: {method} returned {value!r}; block sizes must "
                          f"be positive powers of two (tl.arange needs them)")
    if value > limit:
        raise PolicyError(f"policy {policy.name!r}: {method} returned {value}, over Triton's "
                          f"largest block of {limit} elements")
    return value


MAX_BLOCK_ELEMENTS = 1 << 20


def resolve_block(policy: Heuristics, method: str, value: object) -> int:
    return _block(policy, method, value, MAX_BLOCK_ELEMENTS)


def resolve_num_warps(policy: Heuristics, value: object, spec: HardwareSpec) -> tuple[int, str]:
    """(num_warps, rule): power of two required; clamped to spec.max_num_warps."""
    warps = _block(policy, "num_warps", value, 1 << 10)
    if warps > spec.max_num_warps:
        return spec.max_num_warps, (f"{policy.name} chose {warps}, clamped to max_num_warps="
                                    f"{spec.max_num_warps} of spec {spec.name}")
    return warps, f"{policy.name}"


def resolve_grid(policy: Heuristics, value: object, n_tiles: int, spec: HardwareSpec
                 ) -> tuple[int, str]:
    """(programs, rule): a 1D grid of at least one program, clamped to spec.max_grid and to
    the tile count (extra programs would have no tile to work on)."""
    dims = (value,) if isinstance(value, int) else tuple(value)  # type: ignore[arg-type]
    if not dims or any(not isinstance(d, int) or d < 1 for d in dims):
        raise PolicyError(f"policy {policy.name!r}: get_grid returned {value!r}; expected a tuple "
                          f"of positive ints")
    programs = math.prod(dims)
    rule = policy.name
    if programs > spec.max_grid:
        rule = f"{policy.name} chose {programs}, clamped to max_grid={spec.max_grid} of spec {spec.name}"
        programs = spec.max_grid
    if programs > n_tiles:
        rule = f"{policy.name} chose {programs}, clamped to the {n_tiles} tiles"
        programs = n_tiles
    return max(1, programs), rule
