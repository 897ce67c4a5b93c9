"""Registers a chunk loop needs, and its memory waits: what ptxas made of every plan, on the GPU.

The performance model charges a looped reduction for the registers its carried values spill
(`evidence.spilled_registers`: the spec's live_per_carried registers per carried value and element of
a thread's chunk share, against the `register_budget`). This compiles every candidate plan
of a case's kernels (cuda target; compiled, not timed) and reads back what ptxas
allocated (`n_regs`) and spilled (`n_spills`, 4-byte words), beside the model's estimate of
the registers needed, and the loops of its machine code (`code`, `gxusim.model.machine_code`: per
pass its loads, memory waits (and the load each is spent on), spilled words, stores and
instructions). `benchmarks/validate_model.py --registers` gives launches
measured before the cuda target recorded these what their plans compile to. One table per
elements a thread holds of a chunk (of a tile, where a kernel has no chunk loop):

    python benchmarks/registers.py [--cases NAME ...] [--json OUT.json]

Cases are any of the ceiling benchmark's cases and the calibration's programs; by default
the reductions (`CASES`). One process per case, each with its inputs and four plans' copies
of them on the GPU: the 1e9-element cases take 12 GB a copy, so run them one at a time.
"""
from __future__ import annotations

import argparse
import collections
import concurrent.futures
import json
import multiprocessing
import sys
import time
from pathlib import Path

import numpy as np
import torch

import gxusim
from gxusim.model import calibrate, evidence
from gxusim.compiler.plan import candidate_plans
from gxusim.report import format_table
from gxusim.triton_launch import resources

sys.path.insert(0, str(Path(__file__).parent))
import bench_ceiling  # noqa: E402  (a sibling script)

CASES = ("layernorm 4096x4096", "layernorm 4096x4096 bf16", "softmax 2048x32768",
         "row_sum 32768x4096", "row_sum 32768x4096 bf16", "row_sum 256x1M",
         "col_sum 16384x4096", "var 2048x16384", "sumsq 1024x65536", "amax 8192x2048",
         "logsumexp 2048x16384", "column amax 4096x8192", "cumsum 512x8192")


def _programs() -> dict:
    found = {c.name: c for c in bench_ceiling.cases(quick=False)}
    found.update({p.name: p for p in calibrate.PROGRAMS})
    return found


def registers(name: str, spec: gxusim.HardwareSpec) -> list[dict]:
    """Compile every candidate plan of the case's kernels; one row per plan."""
    rows = []
    for launch in calibrate.captured_launches(_programs()[name]):
        kernel, args = launch.kernel, launch.args
        numels = kernel.numels(args)

        def compile_plan(plan):
            target = kernel._target_launch(plan)
            copies = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
            binary = target.fn[target.grid](*copies, **target.options())
            facts = plan.facts(kernel.shape, numels, 0.0, spec)
            # What a thread holds: a chunk's share of its chunk loops, else its tile's.
            held = [p for p in facts.phases if p.looped] or facts.phases
            return {"case": name, "kernel": kernel.name, "meta": plan.meta,
                    "num_warps": plan.num_warps, "num_stages": plan.num_stages,
                    "elements_per_thread": max(p.elements for p in held) /
                    (plan.num_warps * spec.warp_size),
                    "n_regs": binary.n_regs, "n_spills": binary.n_spills,
                    "code": resources(binary).code,
                    "budget": evidence.register_budget(facts, spec),
                    "model_spilled": max(evidence.spilled_registers(p, facts, spec)
                                         for p in held)}
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            rows += list(pool.map(compile_plan, candidate_plans(kernel.shape, numels, spec)))
    return rows


def table(rows: list[dict]) -> str:
    groups = collections.defaultdict(list)
    for r in rows:
        groups[(r["case"], int(r["elements_per_thread"]), r["num_warps"])].append(r)
    lines = []
    for (case, share, warps), group in sorted(groups.items()):
        spills = [r["n_spills"] for r in group]
        model = [r["model_spilled"] for r in group]
        lines.append((case, share, warps, len(group), int(np.median([r["n_regs"] for r in group])),
                      f"{np.median(spills):.0f} ({min(spills)}-{max(spills)})",
                      f"{np.median(model):.0f}"))
    return format_table(("case", "elements/thread", "warps", "plans", "ptxas regs (median)",
                         "ptxas spilled (range)", "model spilled"), lines)


def _registers_of(name: str, spec_name: str) -> list[dict]:
    """One case's rows, in a worker process of its own (compiling is CPU-bound)."""
    spec = gxusim.load_spec(spec_name)
    gxusim.use_spec(spec)
    gxusim.set_target("cuda")
    return registers(name, spec)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="+", default=list(CASES), metavar="NAME",
                        help="ceiling cases or calibration programs (default: %(default)s)")
    parser.add_argument("--spec", default="gxu-on-h200")
    parser.add_argument("--json", type=Path, help="write every plan's row here")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("registers.py compiles for the GPU (ptxas's counts): it needs CUDA",
              file=sys.stderr)
        return 2
    rows, start = [], time.time()
    # One process per case: Triton's compile holds the GIL for much of its time.
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(len(args.cases), mp_context=context) as pool:
        futures = {pool.submit(_registers_of, name, args.spec): name for name in args.cases}
        for future in concurrent.futures.as_completed(futures):
            rows += future.result()
            print(f"{futures[future]}: {len(rows)} plans compiled so far, "
                  f"{time.time() - start:.0f} s", file=sys.stderr)
            if args.json:
                args.json.write_text(json.dumps(rows, indent=1))
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
