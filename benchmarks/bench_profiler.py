"""What `torch.profiler` costs a gxu model, against what it costs the same model on CUDA.

Run: `python benchmarks/bench_profiler.py [--calls N] [--repeat R] [--json OUT]` on a quiet
machine. Each model of the suite
named below runs eagerly and compiled, first plainly and then under
`torch.profiler.profile(activities=[CPU, <its device>])`, on gxu and on the backing device
(CUDA on a GPU machine; the CPU elsewhere, as the nearest reference there is); one table:
milliseconds per call plain and profiled, and their ratio (the profiler's overhead) per
device, then gxu's overhead over the reference's, the figure to keep near 1.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Callable

import torch
from torch.profiler import ProfilerActivity, profile

import gxusim
from gxusim import target
from gxusim.models import CASES
from gxusim.report import format_table

MODELS = ("mlp", "transformer_block")


def _ms_per_call(fn: Callable[[], object], calls: int, repeat: int, profiled: bool,
                 device: str) -> float:
    """The median over `repeat` timings of `calls` calls, each timing in a profiler session
    of its own where `profiled` (a first, untimed session starts the profiler up)."""
    activity = {"gxu": ProfilerActivity.PrivateUse1, "cuda": ProfilerActivity.CUDA}.get(device)
    activities = [ProfilerActivity.CPU] + ([activity] if activity else [])
    synchronize = {"gxu": torch.gxu.synchronize, "cuda": torch.cuda.synchronize}.get(
        device, lambda: None)

    def timed() -> float:
        synchronize()
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        synchronize()
        return (time.perf_counter() - start) / calls * 1e3

    def session() -> float:
        if not profiled:
            return timed()
        with profile(activities=activities):
            return timed()
    session()
    return statistics.median(session() for _ in range(repeat))


def measure(calls: int, repeat: int) -> list[dict]:
    rows = []
    reference = target.backing_device().type
    for name in MODELS:
        for compiled in (False, True):
            row = {"model": name, "mode": "compiled" if compiled else "eager"}
            for device in ("gxu", reference):
                torch._dynamo.reset()
                model, inputs = CASES[name].build(device)
                fn = torch.compile(model) if compiled else model
                with torch.no_grad():
                    for _ in range(3):  # compile and warm up
                        fn(*inputs)
                    plain = _ms_per_call(lambda: fn(*inputs), calls, repeat, False, device)
                    profiled = _ms_per_call(lambda: fn(*inputs), calls, repeat, True, device)
                row[device] = {"plain_ms": plain, "profiled_ms": profiled,
                               "overhead": profiled / plain}
            row["gxu_overhead_over_reference"] = row["gxu"]["overhead"] / row[reference]["overhead"]
            rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=50, help="calls per timing")
    parser.add_argument("--repeat", type=int, default=5, help="timings per figure (median)")
    parser.add_argument("--json", help="write the rows here")
    args = parser.parse_args()
    rows = measure(args.calls, args.repeat)
    reference = target.backing_device().type
    print(f"gxusim {gxusim.current_target()} target; reference device: {reference}")
    print(format_table(
        ["model", "mode", "gxu plain ms", "gxu profiled ms", "gxu overhead",
         f"{reference} plain ms", f"{reference} profiled ms", f"{reference} overhead",
         "gxu / reference overhead"],
        [[row["model"], row["mode"], f"{row['gxu']['plain_ms']:.3f}",
          f"{row['gxu']['profiled_ms']:.3f}", f"{row['gxu']['overhead']:.2f}x",
          f"{row[reference]['plain_ms']:.3f}", f"{row[reference]['profiled_ms']:.3f}",
          f"{row[reference]['overhead']:.2f}x", f"{row['gxu_overhead_over_reference']:.2f}"]
         for row in rows]))
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"torch": torch.__version__, "target": gxusim.current_target(),
                       "rows": rows}, handle, indent=1)


if __name__ == "__main__":
    main()
