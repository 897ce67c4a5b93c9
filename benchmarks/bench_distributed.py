"""A sweep run locally against the same sweep on a local Ray cluster: of 1 and of 2 CPU
workers, or (`--gpus N`, cuda target) of 1 and of N GPUs.

    python benchmarks/bench_distributed.py [--models M ...] [--policies P ...] [--sizes N ...]
    python benchmarks/bench_distributed.py --predict-only --sizes 1M 16M 256M [--repeat 3]
    GXUSIM_TARGET=cuda python benchmarks/bench_distributed.py --gpus 2 --sizes 64K 1M ...

Each variant runs in a fresh process with empty cache folders (`GXUSIM_CACHE_DIR`, and
Triton's), so every variant compiles every kernel, as a sweep of new models or sizes does:
the same work in one process, on one worker or on several. (A warm folder would not be
fair: the emulator numbers IR values with a process-wide counter, so a worker that ran
other runs first generates other source for the same kernel and misses the cache.)

"startup" is `ray.init` plus starting the workers: for CPU work, a worker per CPU importing
torch and gxusim (once per cluster, not per sweep); for GPU work, a worker per GPU that has
compiled and run a small model (`distributed.gpu_workers()`, which keeps them for every sweep
of a block; `gxusim sweep --ray` alone starts them within its sweep). "sweep" is
`sweep.sweep` itself. With `--repeat N` the variants take turns N times and each keeps its
best time (other jobs on the machine only ever add time; the first variant of a run on a
just-started machine also pays cold disk caches). Prints both with each variant's ratio to the local sweep and its speed-up over the
first Ray variant (throughput: same runs), also counted from the first row back (what is
left once a worker has started and compiled its first run), and checks that all gave the
same rows.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time

from gxusim.cli import _size
from gxusim.report import format_table

TIMING = ("measured_s",)


def variants(gpus: int | None) -> dict[str, dict | None]:
    """Variant name -> the resources of its local Ray cluster (None: no Ray)."""
    if gpus:  # what the GPUs add, not Ray against one process: no local variant
        return {"ray, 1 GPU": {"num_gpus": 1}, f"ray, {gpus} GPUs": {"num_gpus": gpus}}
    return {"local": None, "ray, 1 worker": {"num_cpus": 1}, "ray, 2 workers": {"num_cpus": 2}}


def _idle(run, policies, predict_only):
    """Holds a worker for a moment, so that warming up starts every worker at once."""
    time.sleep(3)
    return []


def _start_cluster(resources: dict, workers: contextlib.ExitStack) -> None:
    """A local cluster with `resources`, and its workers started: with CPUs only, a worker
    on each has imported gxusim; with GPUs, a worker per GPU, kept until `workers` closes."""
    import ray

    from gxusim import distributed, sweep
    ray.init(log_to_driver=False, **resources)
    if "num_gpus" in resources:
        workers.enter_context(distributed.gpu_workers())
    else:
        list(distributed.ray_runner(None, execute=_idle)(
            [sweep.Run("add_relu", "cpu")] * resources["num_cpus"], [], False))


def variant(args: argparse.Namespace) -> dict:
    """One variant's timings and rows, in this process."""
    from gxusim import distributed, sweep
    with contextlib.ExitStack() as workers:
        started = time.perf_counter()
        runner = None
        if args.ray_resources:
            _start_cluster(json.loads(args.ray_resources), workers)
            runner = distributed.ray_runner(None)
        ready = time.perf_counter()
        row_at: list[float] = []  # when each row came back
        rows = sweep.sweep(args.models, args.policies, args.sizes or ["cpu"],
                           predict_only=args.predict_only, runner=runner,
                           on_row=lambda row: row_at.append(time.perf_counter() - ready))
        finished = time.perf_counter()
    return {"startup_s": ready - started, "sweep_s": finished - ready,
            "first_row_s": row_at[0] if row_at else 0.0, "rows": [_untimed(row) for row in rows]}


def _untimed(row: dict) -> dict:
    return {**{k: v for k, v in row.items() if k not in TIMING},
            "kernels": [{k: v for k, v in kernel.items() if k not in TIMING}
                        for kernel in row["kernels"]]}


def _run_variant(argv: list[str], resources: dict | None) -> dict:
    command = [sys.executable, __file__, *argv, "--variant",
               *([f"--ray-resources={json.dumps(resources)}"] if resources else [])]
    with tempfile.TemporaryDirectory(prefix="gxusim-bench-cache-") as cache:
        done = subprocess.run(command, capture_output=True, text=True,
                              env={**os.environ, "GXUSIM_CACHE_DIR": cache,
                                   "TRITON_CACHE_DIR": os.path.join(cache, "triton")})
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def compare(args: argparse.Namespace, argv: list[str]) -> str:
    """Run every variant, and the side-by-side table."""
    tries: dict[str, list[dict]] = {name: [] for name in variants(args.gpus)}
    for turn in range(args.repeat):  # in turns, so that a busy spell hits every variant
        for name, resources in variants(args.gpus).items():
            result = _run_variant(argv, resources)
            tries[name].append(result)
            print(f"{name} ({turn + 1}/{args.repeat}): startup {result['startup_s']:.1f} s, "
                  f"sweep {result['sweep_s']:.1f} s", file=sys.stderr, flush=True)
    best = {name: {key: min(t[key] for t in results)
                   for key in ("startup_s", "sweep_s", "first_row_s")}
            for name, results in tries.items()}
    first_rows = next(iter(tries.values()))[0]["rows"]
    differing = sorted({name for name, results in tries.items() for t in results
                        if t["rows"] != first_rows})
    first = next(iter(tries))
    return "\n".join([_heading(args, first_rows), _table(best),
                      f"ROWS DIFFER from the {first} sweep's: {differing}" if differing
                      else f"every variant gave the {first} sweep's rows"])


def _heading(args: argparse.Namespace, rows: list[dict]) -> str:
    sizes = "sizes " + " ".join(map(str, args.sizes)) if args.sizes else "scale cpu"
    return (f"{len(args.models)} models x {len(args.policies)} policies at {sizes}"
            f"{' (predict only)' if args.predict_only else ''}, target {rows[0]['target']}: "
            f"{len(rows)} rows, {sum(1 for row in rows if row['error'])} failed; "
            f"{os.cpu_count()} cores; best of {args.repeat}")


def _table(best: dict[str, dict]) -> str:
    local = best.get("local")
    first_ray = next(t for name, t in best.items() if name != "local")

    def to_local(seconds: float, local_seconds: float) -> str:
        return f"{seconds / local_seconds:.2f}" if local else ""
    def after_first(t: dict) -> float:
        return t["sweep_s"] - t["first_row_s"]
    return format_table(
        ("variant", "startup s", "first row s", "sweep s", "sweep / local",
         "startup + sweep / local", "speed-up over the first ray variant",
         "the same, after the first row"),
        [(name, f"{t['startup_s']:.1f}", f"{t['first_row_s']:.1f}", f"{t['sweep_s']:.1f}",
          to_local(t["sweep_s"], local and local["sweep_s"]),
          to_local(t["startup_s"] + t["sweep_s"], local and local["startup_s"] + local["sweep_s"]),
          "" if name == "local" else f"{first_ray['sweep_s'] / t['sweep_s']:.2f}",
          "" if name == "local" else f"{after_first(first_ray) / after_first(t):.2f}")
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
    root.add_argument("--gpus", type=int, help="compare Ray clusters of 1 and of N GPUs "
                                               "(cuda target) instead of 1 and 2 CPUs")
    root.add_argument("--variant", action="store_true", help=argparse.SUPPRESS)
    root.add_argument("--ray-resources", help=argparse.SUPPRESS)
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
