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

import collections
import dataclasses
import warnings
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Optional, Protocol, Sequence

import numpy as np
import torch

from . import core, evidence, launch_facts, terms
from ..spec import HardwareSpec


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
# (benchmarks/results/calibration_gather_h200.json; docs/gpu-measurements.md, session 19).
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


# --- the fit ---------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Fit:
    spec: HardwareSpec  # the input spec with the fitted parameters
    median_error: float  # |predicted - measured| / measured over the samples
    max_error: float
    fitted: tuple[str, ...] = ()  # the spec fields the samples could pin down


HUBER = 0.1  # log-ratio beyond which a sample's pull is capped: ~10% off counts fully


def _with(spec: HardwareSpec, fields: Sequence[str], logs: np.ndarray) -> HardwareSpec:
    return spec.replace(**{f: float(np.exp(v)) for f, v in zip(fields, logs)})


def _log_residuals(spec: HardwareSpec, profiles: Sequence[launch_facts.LaunchFacts],
                   log_times: np.ndarray) -> np.ndarray:
    return np.log([core.predict_seconds(p, spec) for p in profiles]) - log_times


def _nonzero_value(spec: HardwareSpec, field: str) -> float:
    """The field's value, or where its term is switched off (a time of 0, a rate a
    thousandfold past its default: no time at all) its `_default_value`: a magnitude the
    term plausibly has, to probe and to start a fit from."""
    value = getattr(spec, field)
    default = _default_value(spec, field)
    rate = any(t.field == field and t.rate for t in terms.TERMS)
    return default if value <= 0 or (rate and value > 1000 * default) else value


def _default_value(spec: HardwareSpec, field: str) -> float:
    """The HardwareSpec default of a field (fields without one: the spec's own value)."""
    default = next(f.default for f in dataclasses.fields(HardwareSpec) if f.name == field)
    if isinstance(default, (int, float)) and default > 0:
        return default
    return getattr(spec, field) or 1e-9


def _exercised(spec: HardwareSpec, profiles: Sequence[launch_facts.LaunchFacts],
               log_times: np.ndarray, fields: Sequence[str]) -> list[str]:
    """The fields whose value moves some sample's prediction (a term no sample exercises,
    e.g. scans when no scan was measured, keeps the spec's value). Each is probed from the
    spec as given, one at a time."""
    out = []
    for field in fields:
        value = _nonzero_value(spec, field)
        base = _log_residuals(spec.replace(**{field: value}), profiles, log_times)
        moved = _log_residuals(spec.replace(**{field: value * 1.5}), profiles, log_times)
        if np.max(np.abs(moved - base)) > 1e-4:
            out.append(field)
    return out


def fit(spec: HardwareSpec, profiles: Sequence[launch_facts.LaunchFacts],
        measured_s: Sequence[float],
        iterations: int = 200, groups: Sequence[str] | None = None) -> Fit:
    """Fit every coefficient the samples exercise: minimise the Huber-weighted squared
    log-ratio of predicted to measured time (relative error: short and long launches count
    alike, a few configs the model cannot explain do not drag the rest) by Levenberg-
    Marquardt over the logarithms of the coefficients (so they stay positive), starting
    from the spec's values. Deterministic; numpy only. With `groups` (one name per sample,
    e.g. its calibration program) each group weighs the same however many samples it has:
    a kernel whose configs were sampled densely does not outvote the rest.

    A term the descent switches off (a time shrunk a thousandfold, a rate grown so) can no
    longer pull back: in log space its gradient vanishes with it. The fit restarts once with
    such terms at their default magnitude and keeps the better of the two."""
    if len(profiles) < 4 or len(profiles) != len(measured_s):
        raise ValueError("fit needs at least 4 (profile, measured time) pairs, one time each")
    if groups is not None and len(groups) != len(profiles):
        raise ValueError(f"fit: {len(groups)} groups for {len(profiles)} samples")
    counts = collections.Counter(groups or ())
    sample_weights = np.array([len(profiles) / (len(counts) * counts[g]) for g in groups]) \
        if groups is not None else np.ones(len(profiles))
    log_times = np.log(np.asarray(measured_s, dtype=float))
    fields = _exercised(spec, profiles, log_times,
                        [t.field for t in terms.TERMS if t.fitted])
    start = spec.replace(**{f: _nonzero_value(spec, f) for f in fields})
    if fields:
        initial = np.log([getattr(start, f) for f in fields])
        logs = _levenberg_marquardt(start, fields, initial, profiles, log_times, iterations,
                                    sample_weights)
        defaults = np.log([_default_value(spec, f) for f in fields])
        # Switched off: a time shrunk a thousandfold, or a rate grown so (from its default:
        # a spec that stored a switched-off rate starts there, and would stay there).
        rates = np.array([any(t.field == f and t.rate for t in terms.TERMS)
                          for f in fields])
        collapsed = np.where(rates, logs > defaults + np.log(1000.0),
                             logs < np.minimum(initial, defaults) - np.log(1000.0))
        if collapsed.any():
            retry = _levenberg_marquardt(start, fields, np.where(collapsed, defaults, logs),
                                         profiles, log_times, iterations, sample_weights)
            if _cost(start, fields, retry, profiles, log_times, sample_weights) < \
                    _cost(start, fields, logs, profiles, log_times, sample_weights):
                logs = retry
        spec = _with(start, fields, logs)
        spec = _negligible_to_zero(spec, fields, profiles)
    errors = np.abs(np.array([core.predict_seconds(p, spec) for p in profiles]) /
                    np.exp(log_times) - 1)
    return Fit(spec, float(np.median(errors)), float(errors.max()), tuple(fields))


def _negligible_to_zero(spec: HardwareSpec, fields: Sequence[str],
                        profiles: Sequence[launch_facts.LaunchFacts]) -> HardwareSpec:
    """A fitted time coefficient that moves no prediction by 0.1% is written as 0 (the
    samples say the term is negligible), not as a meaningless 1e-21."""
    before = np.array([core.predict_seconds(p, spec) for p in profiles])
    for field in fields:
        if any(t.field == field and t.rate for t in terms.TERMS) or field == "loads_in_flight":
            continue
        trial = spec.replace(**{field: 0.0})
        after = np.array([core.predict_seconds(p, trial) for p in profiles])
        if np.max(np.abs(after / before - 1)) < 1e-3:
            spec = trial
    return spec


def _cost(spec: HardwareSpec, fields: Sequence[str], logs: np.ndarray,
          profiles: Sequence[launch_facts.LaunchFacts], log_times: np.ndarray,
          sample_weights: np.ndarray) -> float:
    return _huber_cost(_log_residuals(_with(spec, fields, logs), profiles, log_times),
                       sample_weights)


def _huber_weights(residuals: np.ndarray) -> np.ndarray:
    size = np.abs(residuals)
    return np.where(size <= HUBER, 1.0, HUBER / np.maximum(size, 1e-300))


def _huber_cost(residuals: np.ndarray, sample_weights: np.ndarray) -> float:
    size = np.abs(residuals)
    return float(np.sum(sample_weights *
                        np.where(size <= HUBER, size ** 2, 2 * HUBER * size - HUBER ** 2)))


def _levenberg_marquardt(spec: HardwareSpec, fields: Sequence[str], logs: np.ndarray,
                         profiles: Sequence[launch_facts.LaunchFacts], log_times: np.ndarray,
                         iterations: int, sample_weights: np.ndarray) -> np.ndarray:
    def residuals(point: np.ndarray) -> np.ndarray:
        return _log_residuals(_with(spec, fields, point), profiles, log_times)
    current = residuals(logs)
    cost = _huber_cost(current, sample_weights)
    damping = 1e-2
    for _ in range(iterations):
        jacobian = np.empty((len(current), len(logs)))
        for j in range(len(logs)):  # forward differences in log space: relative steps
            shifted = logs.copy()
            shifted[j] += 1e-4
            jacobian[:, j] = (residuals(shifted) - current) / 1e-4
        weights = _huber_weights(current) * sample_weights
        gradient = jacobian.T @ (weights * current)
        hessian = jacobian.T @ (jacobian * weights[:, None])
        for _ in range(30):
            step = np.linalg.solve(hessian + damping * np.diag(np.diag(hessian) + 1e-12),
                                   -gradient)
            step = np.clip(step, -3.0, 3.0)  # at most a factor e^3 per step
            trial = residuals(logs + step)
            trial_cost = _huber_cost(trial, sample_weights)
            if trial_cost < cost:
                logs, current, cost = logs + step, trial, trial_cost
                damping = max(damping / 3, 1e-9)
                break
            damping *= 4
        else:
            break  # no step improves: converged (or stuck), either way done
        if np.abs(step).max() < 1e-6:
            break
    return logs


def write_spec_toml(spec: HardwareSpec, base: str, path: Path, note: str) -> None:
    """A spec file: `base` plus the model's fitted coefficients."""
    fields = [term.field for term in terms.TERMS]
    lines = [f"# {note}", "[spec]", f'base = "{base}"', f'name = "{spec.name}-calibrated"']
    lines += [f"{field} = {getattr(spec, field):.6g}" for field in fields]
    path.write_text("\n".join(lines) + "\n")
