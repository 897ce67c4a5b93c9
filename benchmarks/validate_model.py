"""Check the performance model against kernel times measured on a GPU, without a GPU.

Every measured launch saved by the GPU runs carries the facts the model predicts from
(`perf_model.LaunchFacts`), so the model can be refitted and judged here:

* `--calibration`: samples from `gxusim calibrate --samples` (the calibration programs);
  the model is fitted on them (or, without it, the `--spec` as it stands is judged);
* held out, never used for fitting: `--ceiling` (every config `bench_ceiling.py` timed, per
  kernel) and `--sweep` (the model suite at GPU scale under each policy,
  `GXUSIM_TIMING=1 gxusim sweep --scale gpu --json`).

Prints the error per held-out kernel (median and worst |predicted/measured - 1|), the
Spearman rank correlation between predicted and measured times over each kernel's configs
(what choosing a config needs), and each suite model's gxu/seed ratio, predicted against
measured. `--json` keeps the tables.

    python benchmarks/validate_model.py --spec gxu-on-h200 \\
        --calibration benchmarks/results/calibration_h200.json \\
        --ceiling benchmarks/results/ceiling_h200.json --sweep benchmarks/results/sweep_gpu_h200.json
"""
from __future__ import annotations

import argparse
import collections
import json
import math
import sys
from pathlib import Path

import numpy as np

import gxusim
from gxusim import perf_model
from gxusim.perf_model import LaunchFacts
from gxusim.report import format_table


def spearman(x: list[float], y: list[float]) -> float:
    """Rank correlation (average ranks for ties)."""
    def ranks(values: list[float]) -> np.ndarray:
        order = np.argsort(values, kind="stable")
        result = np.empty(len(values))
        sorted_values = np.asarray(values)[order]
        start = 0
        while start < len(values):
            end = start
            while end + 1 < len(values) and sorted_values[end + 1] == sorted_values[start]:
                end += 1
            result[order[start:end + 1]] = (start + end) / 2
            start = end + 1
        return result
    rx, ry = ranks(x), ranks(y)
    if rx.std() == 0 or ry.std() == 0:
        return math.nan
    return float(np.corrcoef(rx, ry)[0, 1])


def held_out_samples(ceiling: Path | None, sweep: Path | None) -> list[dict]:
    """(group, kernel, facts, measured) from the ceiling search and the suite sweep."""
    samples = []
    if ceiling:
        for row in json.loads(ceiling.read_text()):
            for s in row.get("samples", []):
                if s.get("facts"):
                    samples.append({"group": f"ceiling {s['case']}", "kernel": s["kernel"],
                                    "policy": s.get("policy", "candidate"),
                                    "facts": s["facts"], "measured_s": s["seconds"]})
    if sweep:
        for row in json.loads(sweep.read_text()):
            for k in row.get("kernels") or []:
                if k.get("facts") and k.get("measured_s"):
                    samples.append({"group": f"suite {row['model']}", "kernel": k["kernel"],
                                    "policy": row["policy"], "model": row["model"],
                                    "facts": k["facts"], "measured_s": k["measured_s"]})
    return samples


def predict(sample: dict, spec: gxusim.HardwareSpec) -> float:
    return perf_model.predict_seconds(LaunchFacts(**sample["facts"]), spec)


def error_table(samples: list[dict], spec: gxusim.HardwareSpec) -> tuple[str, dict]:
    by_kernel = collections.defaultdict(list)
    for s in samples:
        by_kernel[(s["group"], s["kernel"])].append(s)
    lines, errors, correlations = [], [], []
    for (group, kernel), rows in by_kernel.items():
        predicted = [predict(r, spec) for r in rows]
        measured = [r["measured_s"] for r in rows]
        kernel_errors = [abs(p / m - 1) for p, m in zip(predicted, measured)]
        errors += kernel_errors
        rho = spearman(predicted, measured) if len(rows) >= 4 else math.nan
        if not math.isnan(rho):
            correlations.append(rho)
        lines.append((group, kernel[:44], len(rows), f"{np.median(kernel_errors):.1%}",
                      f"{max(kernel_errors):.1%}", "" if math.isnan(rho) else f"{rho:.2f}"))
    summary = {"launches": len(errors), "median_error": float(np.median(errors)),
               "worst_error": float(max(errors)),
               "spearman_min": min(correlations, default=math.nan),
               "spearman_median": float(np.median(correlations)) if correlations else math.nan}
    text = format_table(("held out", "kernel", "configs", "median err", "worst err", "spearman"),
                        lines)
    text += (f"\nall {summary['launches']} held-out launches: median |predicted/measured - 1| "
             f"{summary['median_error']:.1%}, worst {summary['worst_error']:.1%}; Spearman per "
             f"kernel: median {summary['spearman_median']:.2f}, lowest {summary['spearman_min']:.2f}")
    return text, summary


def ratio_table(samples: list[dict], spec: gxusim.HardwareSpec) -> tuple[str, list[dict]]:
    """Per suite model: the gxu/seed ratio of summed kernel times, predicted and measured."""
    totals = collections.defaultdict(lambda: [0.0, 0.0])
    for s in samples:
        if "model" in s:
            totals[(s["model"], s["policy"])][0] += predict(s, spec)
            totals[(s["model"], s["policy"])][1] += s["measured_s"]
    rows = []
    for model in dict.fromkeys(m for m, _ in totals):
        if (model, "gxu") in totals and (model, "seed") in totals:
            gxu, seed = totals[(model, "gxu")], totals[(model, "seed")]
            predicted, measured = gxu[0] / seed[0], gxu[1] / seed[1]
            rows.append({"model": model, "predicted": predicted, "measured": measured,
                         "error": abs(predicted / measured - 1),
                         "direction": (predicted < 1) == (measured < 1) or
                         abs(measured - 1) < 0.05})
    text = format_table(("model", "gxu/seed predicted", "gxu/seed measured", "error", "direction"),
                        [(r["model"], f"{r['predicted']:.2f}", f"{r['measured']:.2f}",
                          f"{r['error']:.1%}", "right" if r["direction"] else "WRONG")
                         for r in rows])
    return text, rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", default="gxu-on-h200", help="spec to judge (or to fit from)")
    parser.add_argument("--calibration", type=Path, help="gxusim calibrate --samples JSON")
    parser.add_argument("--ceiling", type=Path, help="bench_ceiling.py --json output")
    parser.add_argument("--sweep", type=Path, help="GXUSIM_TIMING=1 gxusim sweep --json output")
    parser.add_argument("--json", type=Path, help="write the summary here")
    args = parser.parse_args()
    spec = gxusim.load_spec(args.spec)
    if args.calibration:
        calibration = json.loads(args.calibration.read_text())
        fit = perf_model.fit(spec, [LaunchFacts(**r["facts"]) for r in calibration],
                             [r["measured_s"] for r in calibration])
        spec = fit.spec
        print(f"fitted on {len(calibration)} calibration launches: median error "
              f"{fit.median_error:.1%}, max {fit.max_error:.1%}")
        print("  " + ", ".join(f"{t.field} = {getattr(spec, t.field):.4g}"
                               for t in perf_model.TERMS) + "\n")
    samples = held_out_samples(args.ceiling, args.sweep)
    if not samples:
        print("no held-out launches with facts and measured times (see --ceiling, --sweep)",
              file=sys.stderr)
        return 2
    text, summary = error_table(samples, spec)
    print(text)
    ratios_text, ratios = ratio_table(samples, spec)
    if ratios:
        print("\n" + ratios_text)
    if args.json:
        args.json.write_text(json.dumps({"spec": {t.field: getattr(spec, t.field)
                                                  for t in perf_model.TERMS},
                                         "summary": summary, "ratios": ratios}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
