"""How long a narrow copy holds its L1 line, on the GPU (cuda target): narrow_line_s.

A column tile of one or two columns copies each element of its chunk on its own
(`cp.async.ca`: through the L1, a line held until the copy lands). The model bounds such a
chunk by the L1's lines: runs x hold / lines (`pipelined.narrow_line_hold`). This
benchmark times one binary per plan at every shared-memory carveout its ring allows
(`cuFuncSetAttribute(PREFERRED_SHARED_MEMORY_CARVEOUT)`), so the L1 left runs from 28 KiB
to 224 KiB, on 1-16 warps, and prints ns a run measured beside the model's.

Two matrices with as many elements: a contiguous one, whose 8 neighbouring columns share
a sector that 8 programs on 8 SMs read at about the same time, and every 8th column of a
wider one, whose sectors no other program reads. Neither is a held-out shape
(`benchmarks/bench_ceiling.py` sums 16384 x 4096). The spec's narrow_line_s and
narrow_spread_per_doubling are the pair (on a grid) that minimises the model's squared
log error over these runs; every 8th column two at a time is left out (its two runs share
a line, which the facts, counting runs, charge twice).

    python benchmarks/narrow_lines.py [--json OUT.json]
"""
from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import math
import statistics

import torch

import gxusim
from gxusim.model import caches, core, launch_facts
from gxusim import target as targets
from gxusim.model.calibrate import Program, captured_launches
from gxusim.compiler.plan import candidate_plans
from gxusim.report import format_table
from l1_carveout import PERCENT_FOR_CARVEOUT, compiled_plan, set_carveout

PROGRAMS = 32
ROWS = 4096
CHUNK = 2048  # R0_BLOCK: a 3-stage ring of 16 or 32 KiB
WARPS = (1, 2, 4, 8, 16)


def column_sum(x: torch.Tensor) -> torch.Tensor:
    return x.sum(0)


def every_8th_column_sum(x: torch.Tensor) -> torch.Tensor:
    return x[:, ::8].sum(0)


CONTIGUOUS = f"column sum {ROWS}x8192"
PROGRAMS_PROBED = (Program(CONTIGUOUS, column_sum, ((ROWS, 8192),)),
                   Program(f"column sum of every 8th column, {ROWS}x65536",
                           every_8th_column_sum, ((ROWS, 65536),)))


def probed(plan: object) -> bool:
    return plan.programs == PROGRAMS and plan.num_stages == 3 and \
        plan.num_warps in WARPS and plan.meta.get("XBLOCK") in (1, 2) and \
        plan.meta.get("R0_BLOCK") == CHUNK


def measure(spec: gxusim.HardwareSpec) -> list[dict]:
    rows = []
    for program in PROGRAMS_PROBED:
        (launch,) = captured_launches(program)
        kernel, args = launch.kernel, launch.args
        numels = kernel.numels(args)
        runs = ROWS * numels["xnumel"] / PROGRAMS  # one program's elements: a run each
        for plan in filter(probed, candidate_plans(kernel.shape, numels, spec)):
            target_launch, binary, found, facts = compiled_plan(kernel, args, plan, spec)
            ring = caches.ring_bytes(facts) + spec.smem_reserved_per_block
            for carveout, percent in PERCENT_FOR_CARVEOUT.items():
                if carveout < ring:
                    continue
                set_carveout(binary, percent)
                seconds = targets.active().time_launch(target_launch, args)
                row = {"program": program.name, "meta": plan.meta, "warps": plan.num_warps,
                       "carveout": carveout, "runs": runs,
                       "l1_kib": (spec.l1_bytes - carveout) // 1024, "spilled": found.spills,
                       "facts": dataclasses.asdict(facts),
                       "measured_ns_a_run": seconds / runs * 1e9}
                row["model_ns_a_run"] = model_seconds(row, spec) / runs * 1e9
                rows.append(row)
                print(program.name, plan.meta, plan.num_warps, row["l1_kib"],
                      f"{row['measured_ns_a_run']:.2f}", f"{row['model_ns_a_run']:.2f}",
                      flush=True)
            set_carveout(binary, -1)
    return rows


def model_seconds(row: dict, spec: gxusim.HardwareSpec) -> float:
    """The model's time for a row: an SM whose shared memory is the row's carveout and
    nothing else (whatever the kernel asks of the driver), and one resident program (32
    programs on more SMs than that)."""
    facts = dataclasses.replace(launch_facts.facts_from_dict(row["facts"]), blocks_per_sm=1)
    return core.predict_seconds(facts, spec.replace(smem_carveouts=(row["carveout"],),
                                                          smem_per_sm=row["carveout"]))


def fit_hold(rows: list[dict], spec: gxusim.HardwareSpec) -> tuple[float, float, float]:
    """(narrow_line_s, narrow_spread_per_doubling, rms log error) on a grid of 25 ns and
    0.025, over the rows whose runs each have a line of their own."""
    fitted = [r for r in rows if r["meta"]["XBLOCK"] == 1 or r["program"] == CONTIGUOUS]

    def error(hold_ns: int, spread: float) -> float:
        changed = spec.replace(narrow_line_s=hold_ns * 1e-9, narrow_spread_per_doubling=spread)
        return math.sqrt(statistics.fmean(
            math.log(model_seconds(r, changed) * 1e9 / r["runs"] / r["measured_ns_a_run"]) ** 2
            for r in fitted))
    grid = itertools.product(range(400, 901, 25), (i * 0.025 for i in range(17)))
    rms, hold_ns, spread = min((error(h, k), h, k) for h, k in grid)
    return hold_ns * 1e-9, spread, rms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write the rows and the fit here")
    options = parser.parse_args()
    spec = gxusim.load_spec("gxu-on-h200")
    gxusim.use_spec(spec)
    gxusim.set_target("cuda")
    rows = measure(spec)
    for program in PROGRAMS_PROBED:
        for xblock in (1, 2):
            group = [r for r in rows if r["program"] == program.name and
                     r["meta"]["XBLOCK"] == xblock]
            sizes = sorted({r["l1_kib"] for r in group})
            cell = {(r["warps"], r["l1_kib"]): r for r in group}
            print(f"\n{program.name}, {xblock} column(s) a tile: ns a run, measured / model, "
                  f"by KiB of L1 left")
            print(format_table(("warps", *sizes), [
                (w, *(f"{cell[w, s]['measured_ns_a_run']:.2f} / "
                      f"{cell[w, s]['model_ns_a_run']:.2f}" if (w, s) in cell else "-"
                      for s in sizes)) for w in WARPS]))
    hold, spread, rms = fit_hold(rows, spec)
    print(f"\nnarrow_line_s = {hold:.3g}, narrow_spread_per_doubling = {spread:.3g} "
          f"(rms log error {rms:.3f}; the spec's: {spec.narrow_line_s:.3g}, "
          f"{spec.narrow_spread_per_doubling:.3g})")
    if options.json:
        with open(options.json, "w") as file:
            json.dump({"rows": rows, "narrow_line_s": hold,
                       "narrow_spread_per_doubling": spread}, file, indent=1)


if __name__ == "__main__":
    main()
