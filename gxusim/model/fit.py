"""Fitting the performance model's terms to measured launches.

`fit` takes launches' facts and their measured times and sets the spec fields of the
model's fitted terms (`terms.TERMS`) by Levenberg-Marquardt on the log of predicted over
measured time, each sample's pull capped beyond HUBER (a robust fit: a few launches the
model cannot explain do not drag every term). A field no sample exercises keeps its value;
one whose share of every sample's time stays negligible goes to zero. `write_spec_toml`
saves the fitted fields as a spec file based on the one that was fitted.
"""
from __future__ import annotations

import collections
import dataclasses
from pathlib import Path
from typing import Sequence

import numpy as np

from ..spec import HardwareSpec
from . import core, launch_facts, terms

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
