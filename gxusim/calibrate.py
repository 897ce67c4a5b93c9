"""Calibration: time compiled GXU kernels on a real GPU and fit the performance model.

`measure(spec)` compiles a calibration set of small programs for gxu on the cuda target
(pointwise arithmetic in fp32 and bf16, transcendentals (exp, sin, tanh, sigmoid), row
reductions looped over chunks (one pass and two) and persistent, a scan, a 3D permute:
every term of the model is exercised), captures each generated kernel with its arguments,
and times it under a sample of the legal launch plans (`plan.candidate_plans`, spread
evenly from the smallest tiles to the largest at 16 warps, every other one also on a
quarter grid) and the plans the seed and gxu policies pick, with `triton.testing.do_bench`
(events around the launches alone: the kernel's time, not the host's). Each sample is the
plan's `LaunchFacts` (phases included) and its measured time. `calibrate(spec)` fits every
model term (`perf_model.fit`); `write_spec_toml` saves the fitted fields as a spec file
(`base = "<spec>"`) that `load_spec`, `GXUSIM_SPEC` and every command accept.

The calibration programs are deliberately not the model suite's or the ceiling
benchmark's, so those stay held out for checking the fit (`benchmarks/validate_model.py`).
"""
from __future__ import annotations

import dataclasses
import warnings
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Optional, Sequence

import torch

from . import perf_model
from .spec import HardwareSpec


@dataclasses.dataclass(frozen=True)
class Program:
    name: str
    fn: Callable[..., torch.Tensor]
    shapes: tuple[tuple[int, ...], ...]
    dtype: torch.dtype = torch.float32


def _fma3(x: torch.Tensor, y: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    return x * y + z


def _exp_sin(x: torch.Tensor) -> torch.Tensor:
    return torch.exp(-x.abs()) * torch.sin(x)


# Each kind of work the model times, none of them a kernel of the model suite or of the
# ceiling search (those stay held out, benchmarks/validate_model.py): tanh and sigmoid pin
# the libdevice weights that exp and sin alone cannot; the long-row sum of squares (rows
# 256 KB apart) and the two-pass logsumexp the looped chunk loads, the column amax a chunk
# loop striding across rows; the bf16 fma the 2-byte
# loads; the row centering a persistent reduction with a per-element store; fma3 64K the
# launch overhead (the suite's small kernels take 4-10 us, the 2026-11-29 set's smallest 16).
PROGRAMS: tuple[Program, ...] = (
    Program("fma3 64K", _fma3, ((1 << 16,),) * 3),  # a few microseconds: pins launch_overhead_s
    Program("fma3 1M", _fma3, ((1 << 20,),) * 3),
    Program("fma3 64M", _fma3, ((1 << 26,),) * 3),
    Program("fma3 bf16 16M", _fma3, ((1 << 24,),) * 3, torch.bfloat16),
    Program("exp_sin 4M", _exp_sin, ((1 << 22,),)),
    Program("tanh 16M", lambda x: torch.tanh(x) * 0.5, ((1 << 24,),)),
    Program("silu 16M", torch.nn.functional.silu, ((1 << 24,),)),
    Program("amax 8192x2048", lambda x: x.amax(1), ((8192, 2048),)),
    Program("amax 1Mx64", lambda x: x.amax(1), ((1 << 20, 64),)),
    Program("sumsq 1024x65536", lambda x: (x * x).sum(1), ((1024, 1 << 16),)),
    Program("logsumexp 2048x16384", lambda x: x.logsumexp(1), ((2048, 1 << 14),)),
    Program("center 65536x512", lambda x: x - x.mean(1, keepdim=True), ((1 << 16, 512),)),
    Program("column amax 4096x8192", lambda x: x.amax(0), ((4096, 8192),)),
    Program("cumsum 512x8192", lambda x: (2 * x).cumsum(1), ((512, 8192),)),
    Program("permute 64x1024x1024", lambda x: x.permute(0, 2, 1).contiguous(),
            ((64, 1024, 1024),)),
)
# Programs earlier calibration runs measured and the set no longer does: kept so that their
# stored samples can be regenerated and refitted offline (benchmarks/validate_model.py).
EARLIER_PROGRAMS: tuple[Program, ...] = (
    Program("exp_sin 64M", _exp_sin, ((1 << 26,),)),
)
PLANS_PER_KERNEL = 10  # spread evenly over the legal plans, every other also at a quarter grid
# A pipelined chunk loop's time turns on three choices at once (chunk size, warps, depth),
# and its legal plans are ten times as many: sampled three times as densely.
PLANS_PER_PIPELINED_KERNEL = 32
POLICIES = ("seed", "gxu")  # their picks are timed too: the plans the suite really runs


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
    """`count` plans spread evenly over the whole list, first to last (all of them when
    there are fewer): candidate plans run from the smallest tiles on few warps to the
    largest on 16, and the model must see both ends. Every other one is also timed on a
    quarter of its grid: the waves and tile-loop terms need grids that differ too."""
    if len(plans) <= count:
        chosen = list(plans)
    else:
        chosen = [plans[round(i * (len(plans) - 1) / (count - 1))] for i in range(count)]
    smaller = [dataclasses.replace(p, programs=max(1, p.programs // 4)) for p in chosen[::2]
               if p.programs >= 4]
    return chosen + smaller


def measure_program(program: Program, spec: HardwareSpec) -> list[Sample]:
    """Compile one program for gxu, then time each of its kernels under sampled plans."""
    from .compiler import launcher
    from .compiler.plan import candidate_plans, plan_launch
    from .compiler.policies import resolve_policy
    from .target import active
    torch.manual_seed(0)
    inputs = [torch.randn(shape, device="gxu", dtype=program.dtype) for shape in program.shapes]
    torch._dynamo.reset()
    with launcher.capture() as captured:
        torch.compile(program.fn, dynamic=False)(*inputs)
    target, samples = active(), []
    for launch in captured:
        kernel, args = launch.kernel, launch.args
        numels = kernel.numels(args)
        moved = sum(a.numel() * a.element_size() for a in args if isinstance(a, torch.Tensor))
        plans = _sampled(candidate_plans(kernel.shape, numels, spec),
                         PLANS_PER_PIPELINED_KERNEL if kernel.shape.pipelined else PLANS_PER_KERNEL)
        plans += [plan_launch(kernel.shape, numels, program.dtype, resolve_policy(name), spec)
                  for name in POLICIES]
        kernel.precompile_plans(plans, args)
        for plan in plans:
            seconds = target.time_launch(kernel._target_launch(plan), args)
            samples.append(Sample(program.name, kernel.name, {
                "meta": plan.meta, "num_warps": plan.num_warps, "programs": plan.programs,
                "num_stages": plan.num_stages, "numels": numels},
                plan.facts(kernel.shape, numels, moved, spec), seconds))
    return samples


# How programs are measured: (program, its samples or the error it failed with) for each.
Mapper = Callable[[Callable[..., list[Sample]], Sequence[Program], HardwareSpec],
                  Iterable[tuple[Program, Any]]]


def in_process(function: Callable[..., list[Sample]], programs: Sequence[Program],
               spec: HardwareSpec) -> Iterator[tuple[Program, list[Sample]]]:
    """The default `Mapper`: every program measured here, one after another."""
    return ((program, function(program, spec)) for program in programs)


def measure(spec: HardwareSpec, programs: Sequence[Program] = PROGRAMS,
            progress: Optional[Callable[[int, int], None]] = None,
            mapper: Mapper = in_process) -> list[Sample]:
    """Samples of every calibration program on the GPU (cuda target): in this process, or
    as `mapper` spreads them (`gxusim.distributed.map_on_ray`: one GPU per program). A
    program that failed there is left out with a warning naming it and its error."""
    from .target import active
    if not active().can_time:
        raise RuntimeError("gxusim calibrate times kernels on a GPU: it needs the cuda target "
                           f"(the active target is {active().name!r})")
    samples = []
    results = mapper(measure_program, programs, spec)
    try:
        for done, (program, result) in enumerate(results):
            if isinstance(result, BaseException):
                warnings.warn(f"calibration program {program.name!r} failed "
                              f"({type(result).__name__}: {result}); fitting without it")
            else:
                samples += result
            if progress is not None:
                progress(done + 1, len(programs))
    finally:  # an interrupted run on Ray cancels the programs still queued
        getattr(results, "close", lambda: None)()
    if not samples:
        raise RuntimeError("no calibration program could be measured")
    return samples


def calibrate(spec: HardwareSpec, progress: Optional[Callable[[int, int], None]] = None,
              programs: Sequence[Program] = PROGRAMS, mapper: Mapper = in_process
              ) -> tuple[perf_model.Fit, list[dict]]:
    """Fit the performance model's terms of `spec` to measurements on this GPU (or on the
    cluster's GPUs, with `mapper`)."""
    if not torch.cuda.is_available():
        raise RuntimeError("gxusim calibrate measures kernels on a CUDA GPU, and torch sees none")
    samples = measure(spec, programs, progress, mapper)
    result = perf_model.fit(spec, [s.facts for s in samples], [s.measured_s for s in samples],
                            groups=[s.program for s in samples])
    return result, [s.as_row(result.spec) for s in samples]


def write_spec_toml(spec: HardwareSpec, base: str, path: Path, note: str) -> None:
    """A spec file: `base` plus the model's fitted coefficients."""
    fields = [term.field for term in perf_model.TERMS]
    lines = [f"# {note}", "[spec]", f'base = "{base}"', f'name = "{spec.name}-calibrated"']
    lines += [f"{field} = {getattr(spec, field):.6g}" for field in fields]
    path.write_text("\n".join(lines) + "\n")
