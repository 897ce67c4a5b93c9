"""What a pipelined chunk pays per run narrower than a vector, on the GPU (cuda target).

A column reduction of one or two columns a tile copies each element of its chunk on its
own (a run of 4 or 8 bytes: `cp.async.ca` through the L1, a line each). Timed on plans
whose L1 is not the limit (1 column, chunks of 1024, 4 and 8 warps, 3 and 4 stages, 32
programs), a column tile costs so much a run plus so much a tile: its first chunk's round
trip, its reduction and its store. Fitting `seconds per run = a + b / rows` over matrices
of 4096 and 8192 rows gives `a`, the chunk's price per narrow run once the tile is under
way: the spec's `narrow_run_s` (measured here, not fitted by `gxusim calibrate`, whose
column amax of 4096 rows cannot tell the two apart). The held-out column sums (16384 rows,
`benchmarks/bench_ceiling.py`) are not used.

    python benchmarks/narrow_runs.py [--json OUT.json]
"""
from __future__ import annotations

import argparse
import json
import statistics

import gxusim
from gxusim import target as targets
from gxusim.model.calibrate import Program, captured_launches
from gxusim.compiler.plan import candidate_plans
from gxusim.report import format_table

PROGRAMS = 32
# (rows, columns): rows 32 KiB apart in both; 4096 and 8192 rows a column tile walks.
SHAPES = ((4096, 8192), (8192, 8192))
OPS = {"sum": lambda x: x.sum(0), "amax": lambda x: x.amax(0)}
PLANS = ((4, 3), (8, 4))  # (warps, stages) at XBLOCK 1, R0_BLOCK 1024


def run_seconds(op: str, rows: int, columns: int, warps: int, stages: int,
                spec: gxusim.HardwareSpec) -> float:
    """Seconds per narrow run of one program (the launch's time over a program's runs)."""
    launch = captured_launches(Program(f"{op} {rows}x{columns}", OPS[op], ((rows, columns),)))
    if len(launch) != 1:
        raise ValueError(f"{op} {rows}x{columns}: {len(launch)} kernels, not one")
    kernel, args = launch[0].kernel, launch[0].args
    plan = next(p for p in candidate_plans(kernel.shape, kernel.numels(args), spec)
                if p.programs == PROGRAMS and p.num_warps == warps and
                (p.num_stages or 1) == stages and p.meta.get("XBLOCK") == 1 and
                p.meta.get("R0_BLOCK") == 1024)
    kernel.precompile_plans([plan], args)
    seconds = min(targets.active().time_launch(kernel._target_launch(plan), args)
                  for _ in range(3))
    return seconds / (rows * columns / PROGRAMS)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write the rows and the fit here")
    args = parser.parse_args()
    spec = gxusim.load_spec("gxu-on-h200")
    gxusim.use_spec(spec)
    gxusim.set_target("cuda")
    rows = [{"op": op, "rows": r, "columns": c, "warps": w, "stages": s,
             "run_ns": run_seconds(op, r, c, w, s, spec) * 1e9}
            for op in OPS for r, c in SHAPES for w, s in PLANS]
    # a + b / rows from each (op, plan)'s two shapes; the spec takes their median `a`
    fits = []
    for op in OPS:
        for w, s in PLANS:
            (few, t_few), (many, t_many) = sorted(
                (r["rows"], r["run_ns"]) for r in rows
                if (r["op"], r["warps"], r["stages"]) == (op, w, s))
            per_tile = (t_few - t_many) / (1 / few - 1 / many)
            fits.append({"op": op, "warps": w, "stages": s, "run_ns": t_many - per_tile / many,
                         "tile_us": per_tile / 1e3})
    print(format_table(("op", "rows x columns", "warps", "stages", "ns a run"),
                       [(r["op"], f"{r['rows']}x{r['columns']}", r["warps"], r["stages"],
                         f"{r['run_ns']:.3f}") for r in rows]))
    print(format_table(("op", "warps", "stages", "ns a run (a)", "us a tile (b)"),
                       [(f["op"], f["warps"], f["stages"], f"{f['run_ns']:.3f}",
                         f"{f['tile_us']:.2f}") for f in fits]))
    narrow = statistics.median(f["run_ns"] for f in fits)
    print(f"narrow_run_s = {narrow * 1e-9:.3g}  (median a over {len(fits)} fits)")
    if args.json:
        with open(args.json, "w") as file:
            json.dump({"rows": rows, "fits": fits, "narrow_run_s": narrow * 1e-9}, file,
                      indent=1)


if __name__ == "__main__":
    main()
