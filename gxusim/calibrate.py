"""Calibration: time compiled GXU kernels on a real GPU and fit the performance model.

`measure(spec)` compiles a calibration set of small programs for gxu on the cuda target
(pointwise arithmetic, transcendentals, row reductions, a scan, a 3D permute: every term of
the model is exercised), captures each generated kernel with its arguments, and times it
under a sample of the legal launch plans (`plan.candidate_plans`, plus smaller grids) with
`triton.testing.do_bench` (events around the launches alone: the kernel's time, not the
host's). Each sample is the plan's `LaunchFacts` and its measured time. `calibrate(spec)`
fits every model term (`perf_model.fit`); `write_spec_toml` saves the fitted fields as a
spec file (`base = "<spec>"`) that `load_spec`, `GXUSIM_SPEC` and every command accept.

The calibration programs are deliberately not the model suite's or the ceiling
benchmark's, so those stay held out for checking the fit (`benchmarks/validate_model.py`).
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Callable, Optional, Sequence

import torch

from . import perf_model
from .spec import HardwareSpec


@dataclasses.dataclass(frozen=True)
class Program:
    name: str
    fn: Callable[..., torch.Tensor]
    shapes: tuple[tuple[int, ...], ...]


def _fma3(x: torch.Tensor, y: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    return x * y + z


def _exp_sin(x: torch.Tensor) -> torch.Tensor:
    return torch.exp(-x.abs()) * torch.sin(x)


PROGRAMS: tuple[Program, ...] = (
    Program("fma3 1M", _fma3, ((1 << 20,),) * 3),
    Program("fma3 64M", _fma3, ((1 << 26,),) * 3),
    Program("exp_sin 4M", _exp_sin, ((1 << 22,),)),
    Program("exp_sin 64M", _exp_sin, ((1 << 26,),)),
    Program("amax 8192x2048", lambda x: x.amax(1), ((8192, 2048),)),
    Program("amax 1Mx64", lambda x: x.amax(1), ((1 << 20, 64),)),
    Program("cumsum 512x8192", lambda x: (2 * x).cumsum(1), ((512, 8192),)),
    Program("permute 64x1024x1024", lambda x: x.permute(0, 2, 1).contiguous(),
            ((64, 1024, 1024),)),
)
PLANS_PER_KERNEL = 10  # sampled evenly from the legal plans, each also at a quarter grid


@dataclasses.dataclass(frozen=True)
class Sample:
    program: str
    kernel: str
    plan: dict
    facts: perf_model.LaunchFacts
    measured_s: float

    def as_row(self, spec: HardwareSpec) -> dict:
        return {"program": self.program, "kernel": self.kernel, **self.plan,
                "facts": dataclasses.asdict(self.facts), "measured_s": self.measured_s,
                "predicted_s": perf_model.predict_seconds(self.facts, spec)}


def _sampled(plans: list, count: int) -> list:
    """`count` plans spread evenly over the list (all of them when there are fewer), each
    also on a quarter of its grid: the model's waves and tile-loop terms need grids that
    differ, not only blocks and warps."""
    step = max(1, len(plans) // count)
    chosen = plans[::step][:count]
    smaller = [dataclasses.replace(p, programs=max(1, p.programs // 4)) for p in chosen
               if p.programs >= 4]
    return chosen + smaller


def measure_program(program: Program, spec: HardwareSpec) -> list[Sample]:
    """Compile one program for gxu, then time each of its kernels under sampled plans."""
    from .compiler import launcher
    from .compiler.plan import candidate_plans
    from .target import active
    torch.manual_seed(0)
    inputs = [torch.randn(shape, device="gxu") for shape in program.shapes]
    torch._dynamo.reset()
    with launcher.capture() as captured:
        torch.compile(program.fn, dynamic=False)(*inputs)
    target, samples = active(), []
    for launch in captured:
        kernel, args = launch.kernel, launch.args
        numels = kernel.numels(args)
        moved = sum(a.numel() * a.element_size() for a in args if isinstance(a, torch.Tensor))
        plans = _sampled(candidate_plans(kernel.shape, numels, spec), PLANS_PER_KERNEL)
        kernel.precompile_plans(plans, args)
        for plan in plans:
            seconds = target.time_launch(kernel._target_launch(plan), args)
            samples.append(Sample(program.name, kernel.name, {
                "meta": plan.meta, "num_warps": plan.num_warps, "programs": plan.programs,
                "num_stages": plan.num_stages, "numels": numels},
                plan.facts(kernel.shape, numels, moved, spec), seconds))
    return samples


def measure(spec: HardwareSpec, programs: Sequence[Program] = PROGRAMS,
            progress: Optional[Callable[[int, int], None]] = None) -> list[Sample]:
    """Samples of every calibration program on the current GPU (cuda target)."""
    from .target import active
    if not active().can_time:
        raise RuntimeError("gxusim calibrate times kernels on a GPU: it needs the cuda target "
                           f"(the active target is {active().name!r})")
    samples = []
    for done, program in enumerate(programs):
        samples += measure_program(program, spec)
        if progress is not None:
            progress(done + 1, len(programs))
    return samples


def calibrate(spec: HardwareSpec, progress: Optional[Callable[[int, int], None]] = None,
              programs: Sequence[Program] = PROGRAMS) -> tuple[perf_model.Fit, list[dict]]:
    """Fit the performance model's terms of `spec` to measurements on this GPU."""
    if not torch.cuda.is_available():
        raise RuntimeError("gxusim calibrate measures kernels on a CUDA GPU, and torch sees none")
    samples = measure(spec, programs, progress)
    result = perf_model.fit(spec, [s.facts for s in samples], [s.measured_s for s in samples])
    return result, [s.as_row(result.spec) for s in samples]


def write_spec_toml(spec: HardwareSpec, base: str, path: Path, note: str) -> None:
    """A spec file: `base` plus the model's fitted coefficients."""
    fields = [term.field for term in perf_model.TERMS]
    lines = [f"# {note}", "[spec]", f'base = "{base}"', f'name = "{spec.name}-calibrated"']
    lines += [f"{field} = {getattr(spec, field):.6g}" for field in fields]
    path.write_text("\n".join(lines) + "\n")
