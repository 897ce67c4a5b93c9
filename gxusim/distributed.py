"""Sweeps on Ray: each run of a sweep (one model at one size) is a Ray task, on a local
cluster's cores or on a remote cluster's machines and GPUs.

`ray_runner(address)` is a `runner` for `gxusim.sweep.sweep` (`gxusim sweep --ray`). A task
runs what a local sweep runs, `sweep.execute`, in a worker that first takes on the driver's
target, spec and `GXUSIM_*` settings; its rows stream back as tasks finish. Cuda runs hold
one GPU each (N GPUs run N at once), emulator and predict-only runs one CPU each. Ray is an
optional extra (`pip install 'gxusim[ray]'`), imported by this module only.

Caches: workers share the cache folder (`gxusim.cache`) rather than get one each. Its files
are named by the hash of what they hold and written atomically (numba's machine code too),
so two workers compiling the same kernel at once each replace the file with the same whole
content; sharing means a kernel is compiled once per machine, not once per worker. Remote
workers use their own node's folder unless the driver sets `GXUSIM_CACHE_DIR`.

Failures: a task whose worker process dies is retried (`MAX_RETRIES`); one that still fails,
or whose worker cannot take on the driver's settings, becomes one error row per policy and
the sweep goes on. Leaving the runner early (Ctrl-C) cancels the tasks still outstanding.
"""
from __future__ import annotations

import os
from typing import Any, Callable, Iterable, Iterator, Optional, Sequence

from tqdm import tqdm

from . import sweep
from .spec import HardwareSpec, current_spec, use_spec
from .target import TARGETS, current_target, set_target

Execute = Callable[[sweep.Run, Sequence[str], bool], list[dict]]
Runner = Callable[[list[sweep.Run], Sequence[str], bool], Iterable[list[dict]]]

MAX_RETRIES = 2  # new attempts after a worker process dies (a crash, the OOM killer, a lost node)


class RayMissingError(ImportError, ValueError):
    """Ray is not installed. Also a ValueError: what `gxusim sweep` reports as a one-line
    error (exit status 2) rather than a traceback."""


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise RayMissingError("sweeps on Ray (--ray) need the 'ray' extra: pip install "
                              "'gxusim[ray]' (pip install -e '.[ray]' in a checkout)") from None
    return ray


def ray_runner(address: Optional[str] = None, execute: Execute = sweep.execute) -> Runner:
    """A sweep runner on the Ray cluster at `address` (None: a local cluster, started here
    unless `$RAY_ADDRESS` names one). A process already connected to Ray keeps its cluster.
    `execute` is what each task calls: `sweep.execute` (tests give one that crashes)."""
    ray = _import_ray()
    if not ray.is_initialized():
        ray.init(address=address)

    def run_on_ray(runs: list[sweep.Run], policies: Sequence[str], predict_only: bool
                   ) -> Iterator[list[dict]]:
        return _stream(ray, execute, runs, list(policies), predict_only)

    return run_on_ray


def _stream(ray: Any, execute: Execute, runs: list[sweep.Run], policies: list[str],
            predict_only: bool) -> Iterator[list[dict]]:
    """Submit every run, then yield each run's rows as its task finishes."""
    target = current_target()  # resolved here: "auto" means the driver's choice for all
    task = ray.remote(max_retries=MAX_RETRIES, runtime_env={"env_vars": _worker_env(target)},
                      **_resources(target, predict_only))(_run_in_worker)
    spec_fields = current_spec().as_dict()  # a spec read from a driver-side file travels too
    pending: dict[Any, sweep.Run] = {}  # task -> its run
    try:
        for run in runs:
            pending[task.remote(execute, run, policies, predict_only, target, spec_fields)] = run
        with tqdm(total=len(runs), desc="sweep on ray", unit="run", disable=not runs) as bar:
            while pending:
                (finished,), _ = ray.wait(list(pending), num_returns=1)
                run = pending.pop(finished)
                bar.update()
                yield _rows(ray, finished, run, policies, "predict" if predict_only else target)
    finally:  # Ctrl-C or a caller that stopped early: nothing of this sweep keeps running
        for outstanding in pending:
            ray.cancel(outstanding, force=True)


def _resources(target: str, predict_only: bool) -> dict[str, int]:
    # A GPU per cuda run, so each measures its kernels alone, in a worker of its own: a
    # process stays on the GPU it first used, whichever GPU Ray gives its next task
    # (max_calls=1; Ray's default for GPU tasks, but only when set in `ray.remote`).
    # Predict-only runs execute nothing, so a CPU suffices whatever the target.
    if TARGETS[target].has_triton_driver and not predict_only:  # kernels run on a GPU
        return {"num_gpus": 1, "max_calls": 1}
    return {"num_cpus": 1}


def _worker_env(target: str) -> dict[str, str]:
    """The driver's `GXUSIM_*` settings, for workers to behave as the driver does. Not
    `GXUSIM_SPEC`: the spec travels as fields (its file may exist on the driver only). Ray
    keeps a separate pool of workers per environment, so no worker sees two targets."""
    env = {name: value for name, value in os.environ.items()
           if name.startswith("GXUSIM_") and name != "GXUSIM_SPEC"}
    if "GXUSIM_CACHE_DIR" in env:  # workers do not start in the driver's folder
        env["GXUSIM_CACHE_DIR"] = os.path.abspath(env["GXUSIM_CACHE_DIR"])
    env["GXUSIM_TARGET"] = target
    # A task holds one CPU: Inductor compiles in the worker itself rather than start a
    # pool of compile processes per worker, each importing torch again on that CPU.
    env["TORCHINDUCTOR_COMPILE_THREADS"] = os.environ.get("TORCHINDUCTOR_COMPILE_THREADS", "1")
    return env


def _rows(ray: Any, finished: Any, run: sweep.Run, policies: Sequence[str], target: str
          ) -> list[dict]:
    """The rows of a finished task; error rows if the task itself failed."""
    try:
        return ray.get(finished)
    except ray.exceptions.RayError as error:  # died MAX_RETRIES + 1 times, or could not set up
        cause = error.cause if isinstance(error, ray.exceptions.RayTaskError) else error
        return [sweep._failed(run, policy, target, cause) for policy in policies]


_worker_target: Optional[str] = None  # what this worker process took on, for good


def _run_in_worker(execute: Execute, run: sweep.Run, policies: list[str], predict_only: bool,
                   target: str, spec_fields: dict[str, Any]) -> list[dict]:
    """A task: the rows of `run` under the driver's target and spec."""
    _take_on_target(target)
    with use_spec(HardwareSpec(**spec_fields)):  # workers are reused: leave no spec behind
        return execute(run, policies, predict_only)


def _take_on_target(target: str) -> None:
    # The target is fixed once a process allocates gxu memory, so a worker keeps its first.
    global _worker_target
    if _worker_target is None:
        set_target(target)
        _worker_target = target
    elif _worker_target != target:
        raise RuntimeError(f"this Ray worker runs the {_worker_target!r} target and cannot "
                           f"switch to {target!r}: a process keeps its first gxusim target")
