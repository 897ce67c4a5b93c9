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
model term (`fit`, below); `write_spec_toml` saves the fitted fields as a spec file
(`base = "<spec>"`) that `load_spec`, `GXUSIM_SPEC` and every command accept.

The calibration programs are deliberately not the model suite's or the ceiling
benchmark's, so those stay held out for checking the fit (`benchmarks/validate_model.py`).
"""
from __future__ import annotations

import dataclasses
import warnings
from typing import Any, Callable, Iterable, Iterator, Optional, Protocol, Sequence

import torch

from ..spec import HardwareSpec
from . import core, evidence, launch_facts
from .fit import Fit, fit


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


def _gather_sum(tokens: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """Sum over each row of `tokens` of the `table` rows they pick: an embedding bag whose
    indices are drawn from float inputs (a program's inputs are all of one dtype)."""
    return table[(tokens.abs() * 1e6).long() % table.shape[0]].sum(1)


# Each kind of work the model times, none of them a kernel of the model suite or of the
# ceiling search (those stay held out, benchmarks/validate_model.py): tanh and sigmoid pin
# the libdevice weights that exp and sin alone cannot; the long-row sum of squares (rows
# 256 KB apart) and the two-pass logsumexp the looped chunk loads, the column amax a chunk
# loop striding across rows, the variance (Welford's three carried accumulators) the
# registers a chunk loop spills; the bf16 fma the 2-byte
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
    Program("var 2048x16384", lambda x: x.var(1), ((2048, 1 << 14),)),
    Program("cumsum 512x8192", lambda x: (2 * x).cumsum(1), ((512, 8192),)),
    Program("permute 64x1024x1024", lambda x: x.permute(0, 2, 1).contiguous(),
            ((64, 1024, 1024),)),
)
# Programs measured on a GPU that the set does not fit, kept so that their stored samples can
# be regenerated and refitted offline (benchmarks/validate_model.py): an earlier set's, and a
# gather from a 1 MB table (each line asked for about 60 times, from L2) whose plans took
# 0.9-20x the model's time, the more so the wider their blocks of table columns
# (benchmarks/results/calibration_gather_h200.json).
OTHER_PROGRAMS: tuple[Program, ...] = (
    Program("exp_sin 64M", _exp_sin, ((1 << 26,),)),
    Program("gather 128x2048 of 4096x64", _gather_sum, ((128, 2048), (4096, 64))),
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
    facts: launch_facts.LaunchFacts
    measured_s: float
    source: str = ""  # the kernel's, as this process's Inductor wrote it

    def as_row(self, spec: HardwareSpec) -> dict:
        return {"program": self.program, "kernel": self.kernel, "torch": torch.__version__,
                "source": self.source, **self.plan,
                "facts": dataclasses.asdict(self.facts), "measured_s": self.measured_s,
                "predicted_s": core.predict_seconds(self.facts, spec)}


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


class Compilable(Protocol):
    """What `captured_launches` compiles: a calibration `Program`, a ceiling case."""
    fn: Callable[..., Any]
    shapes: Sequence[tuple[int, ...]]
    dtype: torch.dtype


def captured_launches(program: Compilable) -> list:
    """Compile a program for gxu on seeded random inputs and run it once: the kernel
    launches it made, each with its kernel and arguments (`launcher.capture`)."""
    from ..compiler import launcher
    torch.manual_seed(0)
    inputs = [torch.randn(shape, device="gxu", dtype=program.dtype) for shape in program.shapes]
    torch._dynamo.reset()
    with launcher.capture() as captured:
        torch.compile(program.fn, dynamic=False)(*inputs)
    return list(captured)


def measure_program(program: Program, spec: HardwareSpec) -> list[Sample]:
    """Compile one program for gxu, then time each of its kernels under sampled plans."""
    from ..compiler.plan import candidate_plans, plan_launch
    from ..compiler.policies import resolve_policy
    from ..target import active
    target, samples = active(), []
    for launch in captured_launches(program):
        kernel, args = launch.kernel, launch.args
        numels = kernel.numels(args)
        moved = kernel.shape.argument_bytes(args)
        plans = _sampled(candidate_plans(kernel.shape, numels, spec),
                         PLANS_PER_PIPELINED_KERNEL if kernel.shape.pipelined else PLANS_PER_KERNEL)
        plans += [plan_launch(kernel.shape, numels, program.dtype, resolve_policy(name), spec)
                  for name in POLICIES]
        kernel.precompile_plans(plans, args)
        for plan in plans:
            launch = kernel._target_launch(plan)
            seconds = target.time_launch(launch, args)
            facts = plan.facts(kernel.shape, numels, moved, spec)
            binary = target.compiled_resources(launch, args)
            if binary is not None:
                facts = evidence.with_binary(facts, spec, binary)
            samples.append(Sample(program.name, kernel.name, {
                "meta": plan.meta, "num_warps": plan.num_warps, "programs": plan.programs,
                "num_stages": plan.num_stages, "numels": numels}, facts, seconds,
                kernel.shape.source))
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
    from ..target import active
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
              ) -> tuple[Fit, list[dict]]:
    """Fit the performance model's terms of `spec` to measurements on this GPU (or on the
    cluster's GPUs, with `mapper`)."""
    if not torch.cuda.is_available():
        raise RuntimeError("gxusim calibrate measures kernels on a CUDA GPU, and torch sees none")
    samples = measure(spec, programs, progress, mapper)
    result = fit(spec, [s.facts for s in samples], [s.measured_s for s in samples],
                 groups=[s.program for s in samples])
    return result, [s.as_row(result.spec) for s in samples]
