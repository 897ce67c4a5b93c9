"""Is a model outlier noise? Re-time some of a ceiling case's plans on the GPU, several
times in shuffled order, beside the time the ceiling search stored for each.

    python benchmarks/retime.py "col_sum 16384x4096" --where XBLOCK=1,2 --pipelined \
        [--repeats 3] [--json OUT.json]

Each plan is timed with the cuda target's `time_launch` (do_bench's median); the table
gives every repeat and the stored time (benchmarks/results/ceiling_h200.json). A plan
whose repeats agree with each other and with the stored time is slow for a reason of its
own (a column sum's 1-2-column pipelined plans: within 0.5% of themselves).
"""
from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

import torch

import gxusim
from gxusim.model.calibrate import captured_launches
from gxusim.compiler.plan import candidate_plans
from gxusim.report import format_table
from gxusim.target import active

sys.path.insert(0, str(Path(__file__).parent))
import bench_ceiling  # noqa: E402  (a sibling script)

RESULTS = Path(__file__).parent / "results"


def _plan_key(meta: dict, num_warps: int, num_stages: int | None) -> tuple:
    return json.dumps(meta, sort_keys=True), num_warps, num_stages or 1


def stored_times(case: str, path: Path) -> dict[tuple, float]:
    """The ceiling search's time of each plan of the case, by plan."""
    return {_plan_key(s["meta"], s["num_warps"], s["num_stages"]): s["seconds"]
            for row in json.loads(path.read_text()) for s in row.get("samples", [])
            if s["case"] == case and s["policy"] == "candidate"}


def _selected(plan, where: dict[str, set[int]], pipelined: bool) -> bool:
    return all(plan.meta.get(name) in values for name, values in where.items()) and \
        (not pipelined or (plan.num_stages or 1) > 1)


def retime(case_name: str, where: dict[str, set[int]], pipelined: bool, repeats: int,
           spec: gxusim.HardwareSpec) -> list[dict]:
    """Every selected plan of the case's kernels, timed `repeats` times in shuffled order."""
    case = {c.name: c for c in bench_ceiling.cases(quick=False)}[case_name]
    target, rows = active(), []
    for launch in captured_launches(case):
        kernel, args = launch.kernel, launch.args
        plans = [p for p in candidate_plans(kernel.shape, kernel.numels(args), spec)
                 if _selected(p, where, pipelined)]
        kernel.precompile_plans(plans, args)
        times: list[list[float]] = [[] for _ in plans]
        for repeat in range(repeats):
            order = list(range(len(plans)))
            random.Random(repeat).shuffle(order)  # drift in time does not follow the plans
            for i in order:
                times[i].append(target.time_launch(kernel._target_launch(plans[i]), args))
        rows += [{"case": case_name, "kernel": kernel.name, "meta": plan.meta,
                  "num_warps": plan.num_warps, "num_stages": plan.num_stages,
                  "seconds": seconds} for plan, seconds in zip(plans, times)]
    return rows


def table(rows: list[dict], stored: dict[tuple, float]) -> str:
    lines = []
    for row in rows:
        seconds = row["seconds"]
        before = stored.get(_plan_key(row["meta"], row["num_warps"], row["num_stages"]))
        lines.append((" ".join(f"{k}={v}" for k, v in row["meta"].items()), row["num_warps"],
                      row["num_stages"] or 1, " ".join(f"{s * 1e6:.0f}" for s in seconds),
                      f"{(max(seconds) / min(seconds) - 1):.1%}",
                      f"{before * 1e6:.0f}" if before else "-",
                      f"{min(seconds) / before - 1:+.1%}" if before else "-"))
    return format_table(("blocks", "warps", "stages", "us, each repeat", "spread",
                         "stored us", "vs stored"), lines)


def _where(text: str) -> tuple[str, set[int]]:
    name, _, values = text.partition("=")
    if not values:
        raise argparse.ArgumentTypeError(f"--where {text!r}: expected NAME=V[,V...]")
    return name, {int(v) for v in values.split(",")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("case", help="a ceiling case (benchmarks/bench_ceiling.py)")
    parser.add_argument("--where", type=_where, action="append", default=[],
                        metavar="BLOCK=V[,V...]", help="keep plans with these block sizes")
    parser.add_argument("--pipelined", action="store_true", help="keep num_stages > 1 only")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--spec", default="gxu-on-h200")
    parser.add_argument("--stored", type=Path, default=RESULTS / "ceiling_h200.json")
    parser.add_argument("--json", type=Path, help="write the rows here")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("retime.py times kernels on the GPU: it needs CUDA", file=sys.stderr)
        return 2
    spec = gxusim.load_spec(args.spec)
    gxusim.use_spec(spec)
    gxusim.set_target("cuda")
    rows = retime(args.case, dict(args.where), args.pipelined, args.repeats, spec)
    print(table(rows, stored_times(args.case, args.stored)))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
