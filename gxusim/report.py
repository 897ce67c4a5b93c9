"""Report: run model-suite cases on gxu, compare with eager, and print what was launched.

`run_case` compiles one case for gxu (an inference forward, or a training step), runs it on the
current target, compares outputs (and gradients) with eager, and checks every recorded
launch against the active spec. `kernel_table` and `case_table`
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
from .models import Case, step_mode
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
    eager_error: float | None = None  # training: eager gxu's own error against float64


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
    """Compile `case` for gxu, run it once, and compare with eager.

    With `warm_runs`, the compiled model runs that many more times and the result keeps the
    launches of the last call: warm kernels, for timing (GXUSIM_TIMING=1).

    A forward is compared with eager on the backing device, within the dtype's tolerance.
    A training step (loss and every gradient) is judged as Dynamo's accuracy checker judges
    a compiled model (`torch._dynamo.utils.same` with an fp64 reference): against the same
    step in float64 on the CPU, the compiled step may be off by at most 3x what the step
    run eagerly on gxu is off, plus a tenth of the tolerance. A fixed tolerance would not
    do: a training step amplifies rounding (batch norm over a handful of values, TF32
    convolutions on cuda), so exact code can be far from eager fp32 on another device. (No
    CUDA eager reference here: once PrivateUse1 is renamed, torch takes it as the process's
    accelerator and autograd on plain CUDA tensors fails its stream assert,
    pytorch/pytorch#161129.)
    """
    model, inputs = case.build("gxu", scale, dtype)
    launch_records.clear_launches()
    compiled = torch.compile(model, dynamic=dynamic)
    with step_mode(train):
        start = time.perf_counter()
        got = _flat_outputs(model, compiled(*inputs), train)
        torch.gxu.synchronize()
        compile_s = time.perf_counter() - start
        for _ in range(warm_runs):  # launches of the last warm call replace the first call's
            launch_records.clear_launches()
            _flat_outputs(model, compiled(*inputs), train)
    launches = launch_records.launches()
    eager_error = None
    want = _step(case, "cpu", scale, torch.float64) if train else \
        _step(case, str(backing_device()), scale, dtype, train=False)
    error = _max_error(got, want) if len(got) == len(want) else math.inf
    if train:
        eager_error = _max_error(_step(case, "gxu", scale, dtype), want)
        matches = error <= 3 * eager_error + TOLERANCE[dtype] / 10
    else:
        matches = error <= TOLERANCE[dtype]
    spec = current_spec()
    violations = [str(f) for launch in launches
                  for f in limit_findings(spec, launch.grid, launch.num_warps, launch.kernel)]
    return CaseResult(case.name, dtype, train, matches, error, launches, violations, compile_s,
                      eager_error)


def _step(case: Case, device: str, scale: str, dtype: torch.dtype,
          train: bool = True) -> list[torch.Tensor]:
    """Outputs (and gradients) of `case` run eagerly on `device`."""
    model, inputs = case.build(device, scale, dtype)
    with step_mode(train):
        return _flat_outputs(model, model(*inputs), train)


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
        blocks = " ".join(f"{k}={v}" for k, v in launch.meta.items()
                          if k.endswith("BLOCK") or k == "NUM_STAGES")  # a chunk loop's depth
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
