"""The gxu policy's register estimate against ptxas, on corpus kernels, without a GPU.

For each kernel of a corpus part this compiles the gxu policy's config and a few other
legal configs (a seeded sample) for the spec's `ptxas_capability` with Triton and its bundled
ptxas, reads the registers and stack frame each thread got (cuobjdump), and sets them
beside `GXUHeuristics.registers_per_thread`. The table gives, per kernel kind, the
estimate's ratio to what ptxas needed (registers plus spilled words; 10th, 50th and 90th
percentile) and how the guard's bands would have decided each config against what ptxas
did (`SURE_FIT`, `SURE_SPILL`: sure fit / sure spill / left to the binary):

    python benchmarks/corpus/registers.py [--part fit] [--count N] [--jobs 2] [--json OUT]

Compiles only: about a second a config on one core. Tune the bands on the fit part.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import json
import random
import sys
from pathlib import Path

import numpy as np
import torch

import gxusim
from gxusim import corpus
from gxusim.compiler.heuristics import GXUHeuristics, LaunchConfig
from gxusim.compiler.plan import candidate_plans
from gxusim.compiler.policies import resolve_policy
from gxusim.report import format_table
from gxusim.triton_launch import cross_compiled_resources

KERNELS = Path(__file__).resolve().parent / "kernels.jsonl"
SAMPLED_CONFIGS = 3  # besides gxu's own, per kernel


def compile_entry(entry: dict, spec_name: str) -> list[dict]:
    """One row per compiled config of one corpus kernel."""
    spec = gxusim.load_spec(spec_name)
    kernel = corpus.load_kernel(entry)
    args = corpus.meta_arguments(entry)
    numels = kernel.numels(args)
    with gxusim.use_spec(spec):
        chosen = kernel.plan(args, numels, resolve_policy("gxu"), spec)
    others = candidate_plans(kernel.shape, numels, spec)
    plans = [chosen] + random.Random(entry["id"]).sample(others, min(SAMPLED_CONFIGS, len(others)))
    gxu, rows = GXUHeuristics(spec), []
    for position, plan in enumerate(plans):
        config = LaunchConfig(plan.meta, plan.num_warps, plan.num_stages)
        options = {"num_warps": plan.num_warps,
                   **({} if plan.num_stages is None else {"num_stages": plan.num_stages})}
        resources = cross_compiled_resources(
            kernel.fn, kernel.triton_meta["signature"], kernel.triton_meta["configs"][0],
            plan.kernel_meta(kernel.shape), options, spec.ptxas_capability)
        if resources is None:
            continue
        rows.append({"id": entry["id"], "kind": entry["kind"], "gxu": position == 0,
                     "meta": plan.meta, "num_warps": plan.num_warps,
                     "num_stages": plan.num_stages,
                     "estimate": gxu.registers_per_thread(kernel.shape.traits, config, spec,
                                                          kernel.shape.static_blocks),
                     "budget": spec.register_budget(plan.num_warps),
                     "registers": resources.regs_per_thread, "spilled": resources.spills})
    return rows


def _band(row: dict) -> str:
    gxu = GXUHeuristics
    if row["estimate"] <= gxu.SURE_FIT * row["budget"]:
        return "sure fit"
    return "sure spill" if row["estimate"] > gxu.SURE_SPILL * row["budget"] else "binary"


def table(rows: list[dict]) -> str:
    groups: dict[str, list[dict]] = {}
    for row in rows:
        groups.setdefault(row["kind"], []).append(row)
    lines = []
    for kind, group in sorted(groups.items()) + [("all", rows)]:
        ratio = np.array([r["estimate"] / (r["registers"] + r["spilled"]) for r in group])
        bands = {band: [r for r in group if _band(r) == band]
                 for band in ("sure fit", "binary", "sure spill")}
        lines.append((kind, len(group), *(f"{q:.2f}" for q in np.percentile(ratio, [10, 50, 90])),
                      f"{sum(r['spilled'] > 0 for r in bands['sure fit'])} of {len(bands['sure fit'])}",
                      len(bands["binary"]),
                      f"{sum(r['spilled'] == 0 for r in bands['sure spill'])} of "
                      f"{len(bands['sure spill'])}",
                      sum(r["spilled"] > 0 for r in group if r["gxu"])))
    return format_table(("kind", "configs", "estimate / ptxas p10", "p50", "p90",
                         "sure fit, spilled", "left to the binary", "sure spill, no spill",
                         "gxu's config spills"), lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", default=str(KERNELS))
    parser.add_argument("--part", default="fit", choices=("fit", "test", "all"))
    parser.add_argument("--count", type=int, default=None, help="kernels (default: all)")
    parser.add_argument("--spec", default="gxu-on-h200")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--json", default=None, metavar="OUT")
    args = parser.parse_args()
    entries = [e for e in corpus.load(args.corpus) if args.part in ("all", e["part"])]
    entries = sorted(entries, key=lambda e: e["id"])[:args.count]
    rows: list[dict] = []
    with concurrent.futures.ProcessPoolExecutor(args.jobs) as pool:
        futures = {pool.submit(compile_entry, entry, args.spec): entry for entry in entries}
        for done, future in enumerate(concurrent.futures.as_completed(futures), 1):
            try:
                rows += future.result()
            except Exception as error:  # noqa: BLE001 - one kernel that cannot compile
                print(f"{futures[future]['id']}: {type(error).__name__}: {error}"[:200])
            print(f"\r{done}/{len(entries)} kernels compiled", end="", file=sys.stderr)
    print(file=sys.stderr)
    if args.json:
        Path(args.json).write_text(json.dumps(rows))
    print(f"{args.part} part, {len(entries)} kernels, spec {args.spec}, "
          f"sm_{gxusim.load_spec(args.spec).ptxas_capability}:\n{table(rows)}")


if __name__ == "__main__":
    main()
