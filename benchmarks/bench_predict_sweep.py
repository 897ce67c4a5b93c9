"""The predict-only sweep the fidelity issue times: 2 policies x 9 models x 12 sizes (2^10
to 2^30 elements), run by the CLI on one worker and on one per CPU, each with a fresh
Inductor cache (what a fresh clone sees), side by side. The ceiling beside them is the
one-worker run's CPU time spread over every CPU: compiling is all the sweep does, so no
number of workers beats it. The two runs' rows must agree.

    python benchmarks/bench_predict_sweep.py [--jobs N]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gxusim.distributed import usable_cpus

MODELS = ["add_relu", "cumsum", "embedding_classifier", "mlp", "mul_relu", "row_sum",
          "tanh_gelu", "transformer_block", "transpose"]
SIZES = ["1K", "4K", "16K", "64K", "256K", "1M", "4M", "16M", "64M", "256M", "512M", "1G"]


def timed_sweep(jobs: int, folder: Path) -> tuple[float, float, list[dict]]:
    """(wall seconds, CPU seconds of the sweep and its workers, rows) of one CLI sweep."""
    out = folder / f"jobs{jobs}.json"
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(folder / f"inductor{jobs}")}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "gxusim", "sweep", *MODELS, "--policies", "seed",
                    "gxu", "--sizes", *SIZES, "--predict-only", "--jobs", str(jobs),
                    "--json", str(out)], env=env, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return wall, cpu, json.loads(out.read_text())


def main() -> int:
    cpus = usable_cpus()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=cpus, help="workers of the parallel run")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        one_wall, one_cpu, one_rows = timed_sweep(1, Path(folder))
        many_wall, _, many_rows = timed_sweep(args.jobs, Path(folder))
    key = [(r["model"], r["scale"], r["policy"], r["predicted_s"], r["error"]) for r in one_rows]
    same = key == [(r["model"], r["scale"], r["policy"], r["predicted_s"], r["error"])
                   for r in many_rows]
    print(f"{len(one_rows)} rows, {cpus} CPUs; rows of the two runs "
          f"{'identical' if same else 'DIFFER'}")
    print(f"{'run':24} {'wall s':>7} {'vs 1 worker':>12}")
    print(f"{'1 worker':24} {one_wall:7.1f} {1.0:12.2f}")
    print(f"{f'{args.jobs} workers':24} {many_wall:7.1f} {many_wall / one_wall:12.2f}")
    print(f"{'ceiling: CPU s / CPUs':24} {one_cpu / cpus:7.1f} {one_cpu / cpus / one_wall:12.2f}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
