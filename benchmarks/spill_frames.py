"""What a spilled word costs when the L1 cannot hold the spill frame, on the GPU (cuda target).

A thread's spilled registers live in local memory, which goes through the SM's L1: while
every resident warp's frame (ptxas's local words x 4 bytes x threads) fits in the L1 that
shared memory leaves, a spilled word is stored and reloaded there; once it does not, the
reloads go to L2. This benchmark times one binary per plan at every shared-memory carveout
its ring allows (`cuFuncSetAttribute(PREFERRED_SHARED_MEMORY_CARVEOUT)`, the percentages
ncu read for each carveout: `l1_carveout.PERCENT_FOR_CARVEOUT`), so the frame runs from a
fraction of the L1 to several times it, on 1, 2 and 4 warps.

The kernels are layernorms with weight and bias of shapes the held-out set does not have
(8192 x 2048 and 2048 x 8192, fp32): 32 programs, 64 elements a thread, chunks of 128 or
2048, 1-4 pipeline stages. Each row keeps the plan's facts with its binary's
(`gxusim.model.evidence.with_binary`), so a changed model can be checked against the
times without a GPU: `--rows` reads a stored run instead of measuring. The spec's spill_miss_s,
spill_miss_from and spill_miss_all are the triple (on a grid) that minimises the model's
squared log error over what the L1 changes: each run's time over its plan's at the largest
L1 (`caches.spill_miss_share`).

    python benchmarks/spill_frames.py [--json OUT.json] [--rows STORED.json]
"""
from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import math
import statistics
from pathlib import Path

import gxusim
from gxusim.model import evidence, launch_facts
from gxusim import target as targets
from gxusim.report import format_table
from l1_carveout import PERCENT_FOR_CARVEOUT, PlanChoice, layernorm_plans, set_carveout
from narrow_lines import model_seconds

# 1-4 warps, 64 elements a thread, any pipelining depth.
PROBED = PlanChoice(warps=(1, 2, 4), per_thread=(64,))


def spilled_words(facts: launch_facts.LaunchFacts, spec: gxusim.HardwareSpec) -> float:
    """Words one thread spills and reloads over the launch (its binary's, a chunk)."""
    return facts.tiles_per_program * sum(
        phase.iterations * evidence.spilled_registers(phase, facts, spec)
        for phase in facts.phases)


def measure(spec: gxusim.HardwareSpec) -> list[dict]:
    rows = []
    for shape, plan, args, target_launch, binary, found, facts in layernorm_plans(spec, PROBED):
        ring = found.smem_per_block + spec.smem_reserved_per_block
        for carveout, percent in PERCENT_FOR_CARVEOUT.items():
            if carveout < ring:
                continue
            set_carveout(binary, percent)
            seconds = targets.active().time_launch(target_launch, args)
            row = {"shape": shape, "meta": plan.meta,
                   "warps": plan.num_warps, "stages": plan.num_stages or 1,
                   "carveout": carveout, "l1_kib": (spec.l1_bytes - carveout) // 1024,
                   "spilled": found.spills, "registers": found.regs_per_thread,
                   "frame_kib": found.spills * 4 * plan.num_warps * 32 / 1024,
                   "facts": dataclasses.asdict(facts), "measured_us": seconds * 1e6}
            rows.append(row)
            print(row["shape"], plan.meta, plan.num_warps, row["stages"], row["l1_kib"],
                  f"frame {row['frame_kib']:.0f} KiB", f"{row['measured_us']:.0f} us",
                  flush=True)
        set_carveout(binary, -1)
    return rows


def by_plan(rows: list[dict]) -> list[list[dict]]:
    """The spilling plans' rows, each plan's from its largest L1 down."""
    plans: dict[tuple, list[dict]] = {}
    for row in rows:
        if row["spilled"]:
            key = (row["shape"], json.dumps(row["meta"]), row["warps"], row["stages"])
            plans.setdefault(key, []).append(row)
    return [sorted(group, key=lambda r: -r["l1_kib"]) for group in plans.values()]


def change_errors(rows: list[dict], spec: gxusim.HardwareSpec) -> list[float]:
    """log(model / measured) of each run's time over its plan's at the largest L1: what the
    L1 changes, apart from what the model misses of the plan at any L1."""
    return [math.log(model_seconds(row, spec) / model_seconds(group[0], spec) /
                     (row["measured_us"] / group[0]["measured_us"]))
            for group in by_plan(rows) for row in group[1:]]


def never_missing(spec: gxusim.HardwareSpec) -> gxusim.HardwareSpec:
    """`spec` with an L1 that holds every spill frame (the model before misses)."""
    return spec.replace(spill_miss_from=1e9, spill_miss_all=2e9)


def rms(errors: list[float]) -> float:
    return math.sqrt(statistics.fmean(e * e for e in errors))


def fit_miss(rows: list[dict], spec: gxusim.HardwareSpec) -> tuple[float, float, float, float]:
    """(spill_miss_s, spill_miss_from, spill_miss_all, rms log error of the changes) on a
    grid of 0.5 ns, 0.025 and 0.05."""
    grid = itertools.product((n * 0.5e-9 for n in range(4, 25)),
                             (0.8 + n * 0.025 for n in range(9)), (n * 0.05 for n in range(1, 9)))
    return min(((seconds, start, start + span, rms(change_errors(rows, spec.replace(
        spill_miss_s=seconds, spill_miss_from=start, spill_miss_all=start + span))))
        for seconds, start, span in grid), key=lambda fit: fit[3])


def table(rows: list[dict], spec: gxusim.HardwareSpec) -> str:
    """Per spilling plan and L1 size: measured / model us, and what each spilled word costs
    more than at the plan's largest L1 (ns a thread's word)."""
    lines = []
    for group in by_plan(rows):
        words = spilled_words(launch_facts.facts_from_dict(group[0]["facts"]), spec)
        for row in group:
            model = model_seconds(row, spec) * 1e6
            extra = (row["measured_us"] - group[0]["measured_us"]) * 1e3 / words \
                if words else 0.0
            lines.append((row["shape"], " x ".join(map(str, row["meta"].values())),
                          row["warps"], row["stages"], f"{row['frame_kib']:.0f}", row["l1_kib"],
                          f"{row['frame_kib'] / row['l1_kib']:.2f}",
                          f"{row['measured_us']:.0f}", f"{model:.0f}",
                          f"{model / row['measured_us'] - 1:+.0%}", f"{extra:.2f}"))
    return format_table(("shape", "tile", "warps", "stages", "frame KiB", "L1 KiB",
                         "frame / L1", "measured us", "model us", "error",
                         "ns a word more"), lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write the rows here")
    parser.add_argument("--rows", type=Path, help="a stored run's JSON: no GPU needed")
    options = parser.parse_args()
    spec = gxusim.load_spec("gxu-on-h200")
    gxusim.use_spec(spec)
    if options.rows:
        rows = json.loads(options.rows.read_text())["rows"]
    else:
        gxusim.set_target("cuda")
        rows = measure(spec)
    print(f"\nspilling plans at each L1 size ({sum(1 for r in rows if r['spilled'])} runs)")
    print(table(rows, spec))
    seconds, start, end, fitted = fit_miss(rows, spec)
    print(f"\nspill_miss_s = {seconds:.3g}, spill_miss_from = {start:.3g}, spill_miss_all = "
          f"{end:.3g}: rms log error of the changes with the L1 {fitted:.3f} (every word "
          f"held by the L1: {rms(change_errors(rows, never_missing(spec))):.3f}; the spec's: "
          f"{spec.spill_miss_s:.3g}, {spec.spill_miss_from:.3g}, {spec.spill_miss_all:.3g})")
    if options.json:
        with open(options.json, "w") as file:
            json.dump({"rows": rows, "spill_miss_s": seconds, "spill_miss_from": start,
                       "spill_miss_all": end}, file, indent=1)


if __name__ == "__main__":
    main()
