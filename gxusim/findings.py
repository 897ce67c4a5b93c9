"""Findings: what a check found wrong with a launch or a kernel's tiling.

One vocabulary for every checker: the launcher's spec limits (`grid_cap`,
`warp_cap`) and the emulator's tiling checks (`out_of_bounds`, `uncovered`,
`write_conflict`, `read_write_race`, `load_imbalance`, `unsupported`).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Optional, Sequence

from .spec import HardwareSpec

KINDS = (
    "grid_cap", "warp_cap", "out_of_bounds", "uncovered", "write_conflict",
    "read_write_race", "load_imbalance", "unsupported", "shared_memory",
)


@dataclasses.dataclass(frozen=True)
class Finding:
    kind: str
    severity: str  # "error" | "warning"
    message: str
    program: Optional[int] = None  # linear program id
    buffer: Optional[str] = None  # kernel argument name
    offset: Optional[int] = None  # element offset into the buffer
    kernel: Optional[str] = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown finding kind {self.kind!r}; kinds: {KINDS}")
        if self.severity not in ("error", "warning"):
            raise ValueError(f"finding severity must be 'error' or 'warning', not {self.severity!r}")

    def __str__(self) -> str:
        where = ", ".join(f"{k}={v}" for k, v in (("kernel", self.kernel), ("program", self.program),
                                                  ("buffer", self.buffer), ("offset", self.offset))
                          if v is not None)
        return f"[{self.severity}] {self.kind}: {self.message}" + (f" ({where})" if where else "")


class GXULimitError(RuntimeError):
    """A launch would break a limit of the active hardware spec; raised before launching."""

    def __init__(self, findings: Sequence[Finding]):
        self.findings = list(findings)
        super().__init__("; ".join(str(f) for f in self.findings))


def normalize_grid(grid: Sequence[int] | int) -> tuple[int, int, int]:
    dims = (grid,) if isinstance(grid, int) else tuple(int(g) for g in grid)
    if not 1 <= len(dims) <= 3:
        raise ValueError(f"grid must have 1 to 3 dimensions, got {grid!r}")
    return tuple(dims) + (1,) * (3 - len(dims))  # type: ignore[return-value]


def limit_findings(spec: HardwareSpec, grid: Sequence[int] | int, num_warps: int,
                   kernel: Optional[str] = None) -> list[Finding]:
    """Spec-limit violations of one launch: programs over `max_grid`, warps over `max_num_warps`."""
    found = []
    grid = normalize_grid(grid)
    programs = math.prod(grid)
    if programs > spec.max_grid:
        found.append(Finding("grid_cap", "error",
                             f"grid {grid} launches {programs} programs; spec {spec.name!r} "
                             f"allows max_grid = {spec.max_grid}", kernel=kernel))
    if num_warps > spec.max_num_warps:
        found.append(Finding("warp_cap", "error",
                             f"num_warps = {num_warps}; spec {spec.name!r} allows "
                             f"max_num_warps = {spec.max_num_warps}", kernel=kernel))
    return found


def check_launch(spec: HardwareSpec, grid: Sequence[int] | int, num_warps: int, kernel: str) -> None:
    """Raise `GXULimitError` naming kernel, limit and value if the launch breaks the spec."""
    found = limit_findings(spec, grid, num_warps, kernel)
    if found:
        raise GXULimitError(found)
