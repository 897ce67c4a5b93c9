"""Sweeps: compare launch policies across models and sizes, before silicon.

A sweep is a list of runs, one per (model, size); each run compiles the model once per
policy on the current target (or, with `predict_only`, once for all policies: nothing
executes, see `gxusim.predict`) and gives one row per policy: the performance model's
predicted time of its GXU kernels (and, on a GPU with GXUSIM_TIMING=1, their measured
time), correctness against eager, and a per-kernel breakdown (plan, tiles per program,
occupancy and its limiter, the fusion and decision log lines). `table` pivots rows into one
line per model and size with each policy's ratio to the first; `plot` draws grouped bars;
`gxusim report` renders a saved sweep as HTML. Rows are plain dicts (JSON), so a sweep can
be saved, resumed and reported again later; a run that fails is a row with its error.
"""
from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Callable, Iterable, Optional, Sequence

import torch
from tqdm import tqdm

from . import launch as launch_records
from .compiler import current_heuristics, use_heuristics
from .compiler.policies import resolve_policy
from .errors import InputError
from .findings import limit_findings
from .kernel_args import NUMEL_ARGS
from .launch import Launch
from .models import CASES, Scale, require_models
from .report import format_table, run_case
from .spec import current_spec
from .target import current_target


@dataclasses.dataclass(frozen=True)
class Run:
    """One model at one size: the unit a sweep executes (locally or as a remote task)."""
    model: str
    scale: Scale  # "cpu", "gpu" or elements of the model's main input
    train: bool = False

    def key(self, policy: str) -> tuple:
        """What identifies a row of this run (for resuming a saved sweep)."""
        return (self.model, self.scale, self.train, policy)


def row_key(row: dict) -> tuple:
    return (row["model"], row.get("scale"), row.get("train", False), row["policy"])


def plan_runs(models: Sequence[str], scales: Sequence[Scale], train: bool = False) -> list[Run]:
    """Every (model, size), refusing unknown models and training steps of models without
    parameters by name."""
    require_models(models)
    if train:
        untrainable = [m for m in models if not CASES[m].trainable]
        if untrainable:
            raise InputError(f"model(s) {untrainable} have no parameters: a training step is "
                             f"meaningless; drop --train or choose from "
                             f"{sorted(c.name for c in CASES.values() if c.trainable)}")
    return [Run(model, scale, train) for model in models for scale in scales]


def _kernel_row(launch: Launch) -> dict:
    facts = launch.facts
    return {
        "kernel": launch.kernel, "fusion": launch.fusion_line(), "aten": list(launch.fusion),
        "programs": launch.grid[0], "num_warps": launch.num_warps,
        "num_stages": launch.meta.get("NUM_STAGES"),  # a pipelined chunk loop's depth
        "tiles": launch.meta.get("tiles"), "tiles_per_program": launch.meta.get("tiles_per_program"),
        "meta": {k: v for k, v in launch.meta.items() if k.endswith("BLOCK")},
        "predicted_s": launch.predicted_s, "measured_s": launch.measured_s,
        "blocks_per_sm": facts.blocks_per_sm if facts else None,
        "occupancy_limiter": launch.occupancy_limiter, "decision": launch.describe(),
        "facts": dataclasses.asdict(facts) if facts else None,  # to refit the model offline
        # ... from the kernel that ran, whichever torch regenerates it (benchmarks/validate_model.py)
        "numels": {k: v for k, v in launch.meta.items() if k in NUMEL_ARGS},
        "source": launch.source,
    }


def _row(run: Run, policy: str, launches: Sequence[Launch], target: str,
         matches_eager: Optional[bool], error: Optional[str] = None) -> dict:
    spec = current_spec()
    kernels = [launch for launch in launches if launch.policy != "extern"]
    measured = [launch.measured_s for launch in kernels]
    outside = [f for launch in launches
               for f in limit_findings(spec, launch.grid, launch.num_warps, launch.kernel)]
    return {
        "model": run.model, "policy": policy, "scale": run.scale,
        "size": CASES[run.model].size(run.scale), "spec": spec.name, "target": target,
        "train": run.train, "dtype": "float32",
        "torch": torch.__version__,  # its Inductor wrote the kernels (they differ by version)
        "predicted_s": sum(launch.predicted_s or 0.0 for launch in kernels),
        "measured_s": sum(measured) if measured and None not in measured else None,
        "matches_eager": matches_eager, "within_spec": not outside and error is None,
        "error": error, "kernels": [_kernel_row(launch) for launch in kernels],
    }


def _failed(run: Run, policy: str, target: str, error: BaseException) -> dict:
    message = f"{type(error).__name__}: {str(error).strip().splitlines()[0][:500] if str(error).strip() else ''}"
    return _row(run, policy, [], target, None, message)


def execute(run: Run, policies: Sequence[str], predict_only: bool = False) -> list[dict]:
    """The rows of one run, one per policy, on the current target and spec. Predict-only
    compiles once and plans the same graph under each policy; otherwise each policy compiles
    and runs the model (one warm call after the first: kernels timed without compilation)."""
    if predict_only:
        return _predicted(run, policies)
    rows = []
    caller_policy, caller_launches = current_heuristics(), launch_records.launches()
    try:
        with torch._inductor.config.patch(force_disable_caches=True):
            for policy in policies:
                try:
                    use_heuristics(policy)
                    result = run_case(CASES[run.model], run.scale, torch.float32,
                                      train=run.train, warm_runs=1)
                    rows.append(_row(run, policy, result.launches, current_target(),
                                     result.matches_eager))
                except Exception as error:  # a failed run is a row: the sweep goes on
                    rows.append(_failed(run, policy, current_target(), error))
    finally:  # the caller's policy and launch records, as they were
        use_heuristics(caller_policy)
        launch_records.restore(caller_launches)
    return rows


def _predicted(run: Run, policies: Sequence[str]) -> list[dict]:
    from .predict import predict_case
    try:
        results = predict_case(CASES[run.model], run.scale, policies, train=run.train)
    except Exception as error:  # the model did not compile: every policy's row says why
        results = [error] * len(policies)
    return [_failed(run, policy, "predict", result) if isinstance(result, Exception)
            else _row(run, policy, result, "predict", None)
            for policy, result in zip(policies, results)]


def sweep(models: Sequence[str], policies: Sequence[str], scales: Sequence[Scale] = ("cpu",),
          train: bool = False, predict_only: bool = False, done: Sequence[dict] = (),
          on_row: Optional[Callable[[dict], None]] = None,
          runner: Optional[Callable[[list[Run], Sequence[str], bool], Iterable[list[dict]]]] = None
          ) -> list[dict]:
    """Rows for every (model, size, policy), in that order. Rows in `done` (a saved sweep
    being resumed) are kept and their runs skipped; `on_row` sees each new row as it
    arrives (to save progress); `runner` executes the runs elsewhere (`gxusim.distributed`)
    and yields each run's rows, in any order."""
    for policy in policies:
        resolve_policy(policy)  # an unknown policy is named before anything runs
    finished = {row_key(row): row for row in done}
    runs = [run for run in plan_runs(models, scales, train)
            if any(run.key(p) not in finished for p in policies)]
    # Sizes that give a model the same input shapes (batches rounded up to one) would
    # compile and run the same graph: it runs once, and each of those sizes gets its rows.
    alike: dict[tuple, list[Run]] = {}
    for run in runs:
        alike.setdefault(_shapes_key(run), []).append(run)
    results = (runner or _local_runner)([same[0] for same in alike.values()], policies,
                                        predict_only)
    try:
        for rows in results:
            for run in alike[_shapes_key(Run(rows[0]["model"], rows[0]["scale"],
                                             rows[0]["train"]))]:
                for row in rows:
                    row = {**row, "scale": run.scale}
                    finished[row_key(row)] = row
                    if on_row is not None:
                        on_row(row)
    finally:  # interrupted (Ctrl-C): a runner elsewhere cancels the runs still queued
        getattr(results, "close", lambda: None)()
    order = [run.key(p) for run in plan_runs(models, scales, train) for p in policies]
    return [finished[key] for key in order if key in finished]


def resized(models: Sequence[str], scales: Sequence[Scale]) -> list[str]:
    """A line for each model and size (elements) that its inputs cannot have exactly: the
    size asked, the size that runs and why. Such a size runs at the shapes the model's
    `Case.scaled` gives for it (its rows keep both: `scale` asked, `size` run)."""
    lines = []
    for model in models:
        case = CASES[model]
        for scale in scales:
            if isinstance(scale, int) and case.size(scale) != scale:
                why = ("the smallest it takes" if case.size(scale) == case.size(1) > scale
                       else "the model's shape for that size")
                lines.append(f"{model}: size {scale:,} runs as {case.size(scale):,} elements, "
                             f"input {case.shapes(scale)[0]}: {why}")
    return lines


def _shapes_key(run: Run) -> tuple:
    return run.model, CASES[run.model].shapes(run.scale), run.train


def _local_runner(runs: list[Run], policies: Sequence[str], predict_only: bool
                  ) -> Iterable[list[dict]]:
    for run in tqdm(runs, desc="sweep", unit="run", disable=not runs):
        yield execute(run, policies, predict_only)


def _case_label(row: dict) -> str:
    size = row.get("size")
    return row["model"] + (f" @{size:,}" if size else "") + (" (train)" if row.get("train") else "")


def table(rows: Sequence[dict]) -> str:
    """Models and sizes down, policies across: predicted microseconds and each policy's
    ratio to the first."""
    policies = list(dict.fromkeys(r["policy"] for r in rows))
    by_key = {(_case_label(r), r["policy"]): r for r in rows}
    header = ["model"] + [f"{p} us" for p in policies] + \
        [f"{p}/{policies[0]}" for p in policies[1:]] + ["measured us", "correct"]
    lines = []
    for label in dict.fromkeys(_case_label(r) for r in rows):
        cells = [by_key.get((label, p)) for p in policies]
        times = [c["predicted_s"] * 1e6 if c and not c.get("error") else math.nan for c in cells]
        measured = " / ".join(f"{c['measured_s'] * 1e6:.1f}" for c in cells
                              if c and c.get("measured_s") is not None)
        correct = ("FAILED" if any(c is None or c.get("error") for c in cells) else
                   "NO" if any(c["matches_eager"] is False or not c["within_spec"] for c in cells)
                   else "yes" if all(c["matches_eager"] for c in cells) else "not run")
        lines.append([label] + [f"{t:.1f}" for t in times] +
                     [f"{t / times[0]:.2f}" for t in times[1:]] + [measured, correct])
    return format_table(header, lines)


def plot(rows: Sequence[dict], path: Path) -> None:
    """Grouped bars of predicted time per model and policy, with measured times as marks
    where the sweep timed its kernels."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    policies = list(dict.fromkeys(r["policy"] for r in rows))
    models = list(dict.fromkeys(_case_label(r) for r in rows))
    by_key = {(_case_label(r), r["policy"]): r["predicted_s"] * 1e6 for r in rows}
    figure, axes = plt.subplots(figsize=(1.2 * len(models) + 3, 4))
    width = 0.8 / len(policies)
    measured = {(_case_label(r), r["policy"]): r["measured_s"] * 1e6 for r in rows
                if r.get("measured_s")}
    for i, policy in enumerate(policies):
        positions = [m + i * width for m in range(len(models))]
        axes.bar(positions, [by_key.get((model, policy), 0.0) for model in models], width,
                 label=f"{policy} (predicted)")
        timed = [(x, measured[(model, policy)]) for x, model in zip(positions, models)
                 if (model, policy) in measured]
        if timed:
            axes.scatter(*zip(*timed), marker="_", s=400, color="black", zorder=3,
                         label="measured" if i == 0 else None)
    axes.set_xticks([m + width * (len(policies) - 1) / 2 for m in range(len(models))], models,
                    rotation=30, ha="right")
    axes.set_ylabel("kernel time (us)")
    times = [t for t in [*by_key.values(), *measured.values()] if 0 < t < math.inf]
    if times and max(times) > 20 * min(times):
        axes.set_yscale("log")
    spec = rows[0]["spec"] if rows else ""
    axes.set_title(f"GXU policies on spec {spec}: predicted (bars), measured (marks)")
    axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


# What every row has, which `table` and `gxusim report` read.
ROW_FIELDS = ("model", "policy", "predicted_s", "matches_eager", "within_spec")


def save(rows: Sequence[dict], path: Path) -> None:
    """Write the rows as JSON, atomically: an interrupted save leaves the old file whole."""
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(list(rows), indent=1))
    partial.replace(path)


def load(path: Path) -> list[dict]:
    """The rows of a saved sweep; a file that is none is an `InputError` naming it."""
    try:
        rows = json.loads(Path(path).read_text())
    except OSError as error:
        raise InputError(f"cannot read sweep results from {path}: {error.strerror}") from None
    except ValueError as error:
        raise InputError(f"{path} is not JSON ({error}); give a file written by gxusim sweep "
                         f"--json") from None
    if not isinstance(rows, list) or not all(isinstance(r, dict) and set(ROW_FIELDS) <= set(r)
                                             for r in rows):
        raise InputError(f"{path} is not a gxusim sweep (rows need {', '.join(ROW_FIELDS)}); "
                         f"give a file written by gxusim sweep --json")
    return rows


def measured_vs_predicted(rows: Sequence[dict]) -> Optional[str]:
    """Per-row check of the model where kernels were timed: predicted / measured."""
    timed = [r for r in rows if r.get("measured_s")]
    if not timed:
        return None
    return format_table(("model", "policy", "predicted us", "measured us", "predicted/measured"),
                  [(_case_label(r), r["policy"], f"{r['predicted_s'] * 1e6:.1f}",
                    f"{r['measured_s'] * 1e6:.1f}", f"{r['predicted_s'] / r['measured_s']:.2f}")
                   for r in timed])
