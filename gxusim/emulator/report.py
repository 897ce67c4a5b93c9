"""What one emulated launch reports: `EmulationReport` (findings, tiling, occupancy, the
facts the performance model takes and its time) and `EmulationError`, raised when the
report has error-level findings and checks are in `raise` mode."""
from __future__ import annotations

import dataclasses
from typing import Optional

from ..findings import Finding
from ..model.launch_facts import LaunchFacts
from .occupancy import Occupancy


class EmulationError(RuntimeError):
    """An emulated launch produced error-level findings; `.report` has all of them."""

    def __init__(self, report: "EmulationReport"):
        self.report = report
        errors = [str(f) for f in report.findings if f.severity == "error"]
        super().__init__(f"kernel {report.kernel}: " + "; ".join(errors))


@dataclasses.dataclass
class EmulationReport:
    """One emulated launch: what was found and what the performance model makes of it."""
    kernel: str
    grid: tuple
    num_warps: int
    ok: bool
    findings: list
    occupancy: Optional[Occupancy]
    tiles_per_program: list  # iterations of the outermost tile loop that stores, per program
    predicted_s: Optional[float]
    traffic_bytes: float = 0.0  # DRAM sector bytes the launch moves (layout model)
    coalescing: dict = dataclasses.field(default_factory=dict)  # site "kind base @line" -> efficiency
    jit_s: float = 0.0  # front end + numba compile (0 when cached)
    run_s: float = 0.0
    facts: Optional[LaunchFacts] = None  # what the performance model takes (predicted_s)

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "error"]

    def table(self) -> str:
        rows = [("kernel", self.kernel), ("grid", str(self.grid)), ("num_warps", str(self.num_warps)),
                ("ok", str(self.ok))]
        if self.occupancy is not None:
            rows.append(("occupancy", str(self.occupancy)))
        if self.tiles_per_program:
            t = self.tiles_per_program
            rows.append(("tiles/program", f"min {min(t)}, max {max(t)}, mean {sum(t) / len(t):.2f}"))
        if self.predicted_s is not None:
            per_tile = f", {self.facts.tile_elements:g} elements/tile" if self.facts else ""
            rows.append(("predicted", f"{self.predicted_s * 1e6:.2f} us "
                                      f"({self.traffic_bytes / 1e6:.3f} MB{per_tile})"))
        for site, eff in self.coalescing.items():
            rows.append(("coalescing", f"{site}: {eff:.0%}"))
        rows.append(("emulated in", f"{self.run_s * 1e3:.1f} ms (+{self.jit_s:.2f} s compile)"))
        width = max(len(k) for k, _ in rows)
        lines = [f"{k:<{width}}  {v}" for k, v in rows]
        lines += [f"  {f}" for f in self.findings] or ["  no findings"]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()
