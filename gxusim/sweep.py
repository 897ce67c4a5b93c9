"""Sweeps: compare launch policies across the model suite, before silicon.

`sweep` compiles each model under each policy on the current target and sums, per model,
the performance model's predicted time of its GXU kernels (and, on a GPU with
GXUSIM_TIMING=1, their measured time). `table` pivots the rows into one line per model
with the ratio of each policy to the first; `plot` draws the same as grouped bars.
Rows are plain dicts, so a sweep saved as JSON can be reported again later.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Iterable, Optional, Sequence

import torch
from tqdm import tqdm

from . import launch as launch_records
from .compiler import current_heuristics, use_heuristics
from .models import CASES
from .report import format_table, run_case
from .spec import current_spec
from .target import current_target


def _progress(items: list, description: str) -> Iterable:
    return tqdm(items, desc=description, unit="run")


def sweep(models: Sequence[str], policies: Sequence[str], train: bool = False,
          scale: str = "cpu") -> list[dict]:
    """One row per (model, policy): predicted and measured kernel time, correctness."""
    rows = []
    runs = [(m, p) for m in models for p in policies]
    caller_policy, caller_launches = current_heuristics(), launch_records.launches()
    try:
        with torch._inductor.config.patch(force_disable_caches=True):
            for model, policy in _progress(runs, "sweep"):
                use_heuristics(policy)
                # One warm call after the first: its kernels are timed without compilation.
                result = run_case(CASES[model], scale, torch.float32, train=train, warm_runs=1)
                kernels = [launch for launch in result.launches if launch.policy != "extern"]
                measured = [launch.measured_s for launch in kernels]
                rows.append({
                    "model": model, "policy": policy, "spec": current_spec().name, "scale": scale,
                    "target": current_target(), "kernels": len(kernels),
                    "predicted_s": sum(launch.predicted_s or 0.0 for launch in kernels),
                    "measured_s": sum(measured) if measured and None not in measured else None,
                    "max_warps": max((launch.num_warps for launch in kernels), default=0),
                    "max_grid": max((launch.grid[0] for launch in kernels), default=0),
                    "matches_eager": result.matches_eager, "within_spec": not result.violations,
                })
    finally:  # the caller's policy and launch records, as they were
        use_heuristics(caller_policy)
        launch_records.restore(caller_launches)
    return rows


def table(rows: Sequence[dict]) -> str:
    """Models down, policies across: predicted microseconds and the ratio to the first policy."""
    policies = list(dict.fromkeys(r["policy"] for r in rows))
    by_key = {(r["model"], r["policy"]): r for r in rows}
    header = ["model"] + [f"{p} us" for p in policies] + \
        [f"{p}/{policies[0]}" for p in policies[1:]] + ["measured us", "correct"]
    lines = []
    for model in dict.fromkeys(r["model"] for r in rows):
        cells = [by_key.get((model, p)) for p in policies]
        times = [c["predicted_s"] * 1e6 if c else math.nan for c in cells]
        measured = " / ".join(f"{c['measured_s'] * 1e6:.1f}" for c in cells
                              if c and c["measured_s"] is not None)
        correct = all(c and c["matches_eager"] and c["within_spec"] for c in cells)
        lines.append([model] + [f"{t:.1f}" for t in times] +
                     [f"{t / times[0]:.2f}" for t in times[1:]] + [measured,
                                                                   "yes" if correct else "NO"])
    return format_table(header, lines)


def plot(rows: Sequence[dict], path: Path) -> None:
    """Grouped bars of predicted time per model and policy, with measured times as marks
    where the sweep timed its kernels (needs matplotlib)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise RuntimeError("plots need matplotlib: pip install 'gxusim[plot]'") from None
    policies = list(dict.fromkeys(r["policy"] for r in rows))
    models = list(dict.fromkeys(r["model"] for r in rows))
    by_key = {(r["model"], r["policy"]): r["predicted_s"] * 1e6 for r in rows}
    figure, axes = plt.subplots(figsize=(1.2 * len(models) + 3, 4))
    width = 0.8 / len(policies)
    measured = {(r["model"], r["policy"]): r["measured_s"] * 1e6 for r in rows
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


def save(rows: Sequence[dict], path: Path) -> None:
    path.write_text(json.dumps(list(rows), indent=1))


def load(path: Path) -> list[dict]:
    try:
        rows = json.loads(Path(path).read_text())
    except (OSError, ValueError) as error:
        raise ValueError(f"cannot read sweep results from {path}: {error}") from None
    if not isinstance(rows, list) or not all(isinstance(r, dict) and {"model", "policy",
                                             "predicted_s"} <= set(r) for r in rows):
        raise ValueError(f"{path} is not a gxusim sweep (rows need model, policy, predicted_s)")
    return rows


def measured_vs_predicted(rows: Sequence[dict]) -> Optional[str]:
    """Per-row check of the model where kernels were timed: predicted / measured."""
    timed = [r for r in rows if r.get("measured_s")]
    if not timed:
        return None
    return format_table(("model", "policy", "predicted us", "measured us", "predicted/measured"),
                  [(r["model"], r["policy"], f"{r['predicted_s'] * 1e6:.1f}",
                    f"{r['measured_s'] * 1e6:.1f}", f"{r['predicted_s'] / r['measured_s']:.2f}")
                   for r in timed])
