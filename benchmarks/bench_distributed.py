"""A sweep run locally against the same sweep on a local Ray cluster of 1 and of 2 workers.

    python benchmarks/bench_distributed.py [--models M ...] [--policies P ...] [--sizes N ...]
    python benchmarks/bench_distributed.py --predict-only --sizes 1M 16M 256M [--repeat 3]

Each variant runs in a fresh process with an empty cache folder (`GXUSIM_CACHE_DIR`), so
every variant compiles every kernel, as a sweep of new models or sizes does: the same work
in one process, one worker or two. (A warm folder would not be fair: the emulator numbers
IR values with a process-wide counter, so a worker that ran other runs first generates
other source for the same kernel and misses the cache.)

"startup" is `ray.init` plus the workers importing torch and gxusim (once per cluster, not
per sweep); "sweep" is `sweep.sweep` itself. With `--repeat N` the variants take turns N
times and each keeps its best time (other jobs on the machine only ever add time). Prints
both with each variant's ratio to the local sweep, and checks that all gave the same rows.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from gxusim.cli import _size
from gxusim.report import format_table

VARIANTS = {"local": None, "ray, 1 worker": 1, "ray, 2 workers": 2}  # name -> Ray CPUs
TIMING = ("measured_s",)


def _idle(run, policies, predict_only):
    """Holds a worker for a moment, so that warming up starts every worker at once."""
    time.sleep(3)
    return []


def _start_cluster(cpus: int) -> None:
    """A local cluster of `cpus` CPUs, with a worker on each that has imported gxusim."""
    import ray

    from gxusim import distributed, sweep
    ray.init(num_cpus=cpus, log_to_driver=False)
    list(distributed.ray_runner(None, execute=_idle)([sweep.Run("add_relu", "cpu")] * cpus,
                                                     [], False))


def variant(args: argparse.Namespace) -> dict:
    """One variant's timings and rows, in this process."""
    from gxusim import distributed, sweep
    started = time.perf_counter()
    runner = None
    if args.ray_cpus:
        _start_cluster(args.ray_cpus)
        runner = distributed.ray_runner(None)
    ready = time.perf_counter()
    rows = sweep.sweep(args.models, args.policies, args.sizes or ["cpu"],
                       predict_only=args.predict_only, runner=runner)
    return {"startup_s": ready - started, "sweep_s": time.perf_counter() - ready,
            "rows": [_untimed(row) for row in rows]}


def _untimed(row: dict) -> dict:
    return {**{k: v for k, v in row.items() if k not in TIMING},
            "kernels": [{k: v for k, v in kernel.items() if k not in TIMING}
                        for kernel in row["kernels"]]}


def _run_variant(argv: list[str], cpus: int | None) -> dict:
    command = [sys.executable, __file__, *argv, "--variant",
               *([f"--ray-cpus={cpus}"] if cpus else [])]
    with tempfile.TemporaryDirectory(prefix="gxusim-bench-cache-") as cache:
        done = subprocess.run(command, capture_output=True, text=True,
                              env={**os.environ, "GXUSIM_CACHE_DIR": cache})
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def compare(args: argparse.Namespace, argv: list[str]) -> str:
    """Run every variant, and the side-by-side table."""
    tries: dict[str, list[dict]] = {name: [] for name in VARIANTS}
    for turn in range(args.repeat):  # in turns, so that a busy spell hits every variant
        for name, cpus in VARIANTS.items():
            result = _run_variant(argv, cpus)
            tries[name].append(result)
            print(f"{name} ({turn + 1}/{args.repeat}): startup {result['startup_s']:.1f} s, "
                  f"sweep {result['sweep_s']:.1f} s", file=sys.stderr, flush=True)
    best = {name: {"startup_s": min(t["startup_s"] for t in results),
                   "sweep_s": min(t["sweep_s"] for t in results)}
            for name, results in tries.items()}
    local_rows = tries["local"][0]["rows"]
    differing = sorted({name for name, results in tries.items() for t in results
                        if t["rows"] != local_rows})
    return "\n".join([_heading(args, local_rows), _table(best),
                      f"ROWS DIFFER from the local sweep: {differing}" if differing
                      else "every variant gave the local rows"])


def _heading(args: argparse.Namespace, rows: list[dict]) -> str:
    sizes = "sizes " + " ".join(map(str, args.sizes)) if args.sizes else "scale cpu"
    return (f"{len(args.models)} models x {len(args.policies)} policies at {sizes}"
            f"{' (predict only)' if args.predict_only else ''}, target {rows[0]['target']}: "
            f"{len(rows)} rows, {sum(1 for row in rows if row['error'])} failed; "
            f"{os.cpu_count()} cores; best of {args.repeat}")


def _table(best: dict[str, dict]) -> str:
    local = best["local"]
    return format_table(
        ("variant", "startup s", "sweep s", "sweep / local", "startup + sweep / local"),
        [(name, f"{t['startup_s']:.1f}", f"{t['sweep_s']:.1f}",
          f"{t['sweep_s'] / local['sweep_s']:.2f}",
          f"{(t['startup_s'] + t['sweep_s']) / (local['startup_s'] + local['sweep_s']):.2f}")
         for name, t in best.items()])


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    root.add_argument("--models", nargs="+", default=["add_relu", "tanh_gelu", "transpose",
                                                      "row_sum", "cumsum", "mlp"])
    root.add_argument("--policies", nargs="+", default=["seed", "gxu"])
    root.add_argument("--predict-only", action="store_true")
    root.add_argument("--sizes", nargs="+", type=_size, help="elements (e.g. 1M 2**24); "
                                                             "default: the cpu scale")
    root.add_argument("--repeat", type=int, default=1, help="turns per variant (best kept)")
    root.add_argument("--variant", action="store_true", help=argparse.SUPPRESS)
    root.add_argument("--ray-cpus", type=int, help=argparse.SUPPRESS)
    return root


def main() -> None:
    argv = sys.argv[1:]
    args = parser().parse_args(argv)
    if args.variant:
        print(json.dumps(variant(args)))
    else:
        print(compare(args, argv))


if __name__ == "__main__":
    main()
