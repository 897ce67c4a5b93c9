"""Report: run model-suite cases on gxu, compare with eager, and print what was launched.

`run_case` compiles one case for gxu (forward, or a training step), runs it on the
current target, compares outputs (and gradients) with eager on the backing device, and
checks every recorded launch against the active spec. `kernel_table` and `case_table`
render the results as plain-text tables.
"""
from __future__ import annotations

import dataclasses
import math
import time
from typing import Sequence

import torch

from . import launch as launch_records
from .findings import limit_findings
from .launch import Launch
from .models import Case
from .spec import current_spec
from .target import backing_device

TOLERANCE = {torch.float32: 2e-3, torch.bfloat16: 5e-2, torch.float16: 1e-2}


@dataclasses.dataclass
class CaseResult:
    name: str
    dtype: torch.dtype
    train: bool
    matches_eager: bool
    max_error: float
    launches: list[Launch]
    violations: list[str]  # launches outside the spec (must stay empty)
    compile_s: float


def _flat_outputs(model: torch.nn.Module, output: torch.Tensor, train: bool) -> list[torch.Tensor]:
    if not train:
        return [output.detach()]
    output.float().square().mean().backward()
    return [output.detach()] + [p.grad for p in model.parameters() if p.grad is not None]


def _max_error(got: Sequence[torch.Tensor], want: Sequence[torch.Tensor]) -> float:
    errors = [((g.detach().float().cpu() - w.detach().float().cpu()).abs().max() /
               (1 + w.detach().float().cpu().abs().max())).item() for g, w in zip(got, want)]
    return max(errors) if errors else math.inf


def run_case(case: Case, scale: str = "cpu", dtype: torch.dtype = torch.float32,
             train: bool = False, dynamic: bool | None = None, warm_runs: int = 0) -> CaseResult:
    """Compile `case` for gxu, run it once, and compare with eager on the backing device.

    With `warm_runs`, the compiled model runs that many more times and the result keeps the
    launches of the last call: warm kernels, for timing (GXUSIM_TIMING=1).

    Training steps are compared with eager on the CPU: once PrivateUse1 is renamed (to gxu),
    torch takes it as the process's accelerator and autograd on plain CUDA tensors fails
    its stream assert (pytorch/pytorch#161129), so no CUDA reference backward can run here.
    """
    model, inputs = case.build("gxu", scale, dtype)
    reference_device = "cpu" if train else str(backing_device())
    reference_model, reference_inputs = case.build(reference_device, scale, dtype)
    launch_records.clear_launches()
    compiled = torch.compile(model, dynamic=dynamic)
    start = time.perf_counter()
    got = _flat_outputs(model, compiled(*inputs), train)
    torch.gxu.synchronize()
    compile_s = time.perf_counter() - start
    for _ in range(warm_runs):  # launches of the last warm call replace the first call's
        launch_records.clear_launches()
        _flat_outputs(model, compiled(*inputs), train)
    want = _flat_outputs(reference_model, reference_model(*reference_inputs), train)
    error = _max_error(got, want) if len(got) == len(want) else math.inf
    spec = current_spec()
    launches = launch_records.launches()
    violations = [str(f) for launch in launches
                  for f in limit_findings(spec, launch.grid, launch.num_warps, launch.kernel)]
    return CaseResult(case.name, dtype, train, error <= TOLERANCE[dtype], error, launches,
                      violations, compile_s)


def format_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Plain-text table: left-aligned columns, a rule under the header."""
    cells = [list(map(str, header))] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)) for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def kernel_table(launches: Sequence[Launch]) -> str:
    rows = []
    for launch in launches:
        blocks = " ".join(f"{k}={v}" for k, v in launch.meta.items() if k.endswith("BLOCK"))
        numel = " ".join(f"{k}={v}" for k, v in launch.meta.items() if k.endswith("numel"))
        rows.append((launch.kernel, numel, blocks, launch.num_warps, launch.grid[0],
                     launch.meta.get("tiles_per_program", ""), launch.policy, launch.target,
                     len(launch.findings)))
    return format_table(("kernel", "numel", "blocks", "warps", "grid", "tiles/program", "policy",
                   "target", "findings"), rows)


def case_table(results: Sequence[CaseResult]) -> str:
    rows = [(r.name, str(r.dtype).replace("torch.", ""), "train" if r.train else "forward",
             "yes" if r.matches_eager else "NO", f"{r.max_error:.1e}", len(r.launches),
             "yes" if not r.violations else "NO", f"{r.compile_s:.1f}") for r in results]
    return format_table(("model", "dtype", "mode", "matches eager", "max rel err", "launches",
                   "within spec", "first call s"), rows)
