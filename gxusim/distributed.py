"""Sweeps and calibration on Ray: each run of a sweep (one model at one size), or each
calibration program, is a Ray task, on a local cluster's cores or on a remote cluster's
machines and GPUs.

`map_on_ray(function, items, ...)` is the one mechanism: it calls `function(item, *args)` for
every item as a task, in a worker that first takes on the driver's target, spec and
`GXUSIM_*` settings, and yields the results as tasks finish. Work that runs kernels on a GPU
holds one GPU per task (N GPUs run N at once), anything else one CPU. `ray_runner(address)`
is a `runner` for `gxusim.sweep.sweep` (`gxusim sweep --ray`) on top of it; `gxusim calibrate
--ray` measures its programs with it. Ray is an optional extra (`pip install 'gxusim[ray]'`),
imported by this module only.

Caches: workers share the cache folder (`gxusim.cache`) rather than get one each. Its files
are named by the hash of what they hold and written atomically (numba's machine code too),
so two workers compiling the same kernel at once each replace the file with the same whole
content; sharing means a kernel is compiled once per machine, not once per worker. Remote
workers use their own node's folder unless the driver sets `GXUSIM_CACHE_DIR`.

Failures: a task whose worker process dies is retried (`MAX_RETRIES`); one that still fails,
or whose worker cannot take on the driver's settings, yields its error in place of a result
(a sweep makes it one error row per policy and goes on). Leaving early (Ctrl-C) cancels the
tasks still outstanding.
"""
from __future__ import annotations

import contextlib
import os
from typing import Any, Callable, Iterable, Iterator, Optional, Sequence

from tqdm import tqdm

from . import sweep
from .spec import HardwareSpec, current_spec, use_spec
from .target import TARGETS, current_target, set_target

Execute = Callable[[sweep.Run, Sequence[str], bool], list[dict]]
Runner = Callable[[list[sweep.Run], Sequence[str], bool], Iterable[list[dict]]]

WAIT_S = 0.5  # longest wait for a finished task before Python looks at signals again
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


def connect(address: Optional[str] = None) -> Any:
    """Ray, connected to the cluster at `address` (None: a local cluster, started here
    unless `$RAY_ADDRESS` names one). A process already connected keeps its cluster."""
    ray = _import_ray()
    if not ray.is_initialized():
        ray.init(address=address, **local_gpus(address))
    return ray


def local_gpus(address: Optional[str] = None) -> dict[str, int]:
    """`ray.init`'s GPU count for a cluster started here: the GPUs torch sees, which are
    the ones the cuda target runs on (Ray counts them its own way, through NVML); nothing
    for a cluster that exists already (`address`, `$RAY_ADDRESS`)."""
    if address or os.environ.get("RAY_ADDRESS"):
        return {}
    import torch
    return {"num_gpus": torch.cuda.device_count()}


def ray_runner(address: Optional[str] = None, execute: Execute = sweep.execute) -> Runner:
    """A sweep runner on the Ray cluster at `address` (see `connect`). `execute` is what each
    task calls: `sweep.execute` (tests give one that crashes)."""
    connect(address)

    def run_on_ray(runs: list[sweep.Run], policies: Sequence[str], predict_only: bool
                   ) -> Iterator[list[dict]]:
        target = "predict" if predict_only else current_target()
        results = map_on_ray(execute, runs, list(policies), predict_only,
                             uses_gpu=_runs_kernels(current_target(), predict_only),
                             desc="sweep on ray", unit="run")
        # Closed here, not when collected: a Ctrl-C's traceback keeps this frame, and so the
        # tasks, alive for as long as the caller holds the exception.
        with contextlib.closing(results):
            for run, rows in results:
                if isinstance(rows, BaseException):
                    rows = [sweep._failed(run, policy, target, rows) for policy in policies]
                yield rows

    return run_on_ray


def map_on_ray(function: Callable[..., Any], items: Sequence[Any], *args: Any,
               uses_gpu: bool, desc: str = "ray tasks", unit: str = "task"
               ) -> Iterator[tuple[Any, Any]]:
    """(item, `function(item, *args)`) for every item, each computed as a task on the
    connected cluster (`connect`) and yielded as it finishes; a task that failed for good
    yields its exception instead. `uses_gpu`: each task holds a GPU (it runs kernels)."""
    ray = _import_ray()
    target = current_target()  # resolved here: "auto" means the driver's choice for all
    # A GPU task runs in a worker of its own: a process stays on the GPU it first used,
    # whichever GPU Ray gives its next task (max_calls=1: Ray's default for GPU tasks, but
    # only when set in `ray.remote`).
    resources = {"num_gpus": 1, "max_calls": 1} if uses_gpu else {"num_cpus": 1}
    task = ray.remote(max_retries=MAX_RETRIES, runtime_env={"env_vars": _worker_env(target)},
                      **resources)(_call_in_worker)
    spec_fields = current_spec().as_dict()  # a spec read from a driver-side file travels too
    pending: dict[Any, Any] = {}  # task -> its item
    try:
        for item in items:
            pending[task.remote(function, item, args, target, spec_fields)] = item
        with tqdm(total=len(items), desc=desc, unit=unit, disable=not items) as bar:
            while pending:
                # A bounded wait: a main thread blocked inside ray.wait may not see Ctrl-C
                # until a task finishes, so it comes back to Python every WAIT_S.
                ready, _ = ray.wait(list(pending), num_returns=1, timeout=WAIT_S)
                if not ready:
                    continue
                finished = ready[0]
                item = pending.pop(finished)
                bar.update()
                yield item, _result(ray, finished)
    finally:  # Ctrl-C or a caller that stopped early: nothing of this work keeps running
        for outstanding in pending:
            ray.cancel(outstanding, force=True)


def _runs_kernels(target: str, predict_only: bool) -> bool:
    # A GPU per cuda run, so each measures its kernels alone. Predict-only runs execute
    # nothing, so a CPU suffices whatever the target.
    return TARGETS[target].has_triton_driver and not predict_only


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


def _result(ray: Any, finished: Any) -> Any:
    """A finished task's result, or the error it failed with for good."""
    try:
        return ray.get(finished)
    except ray.exceptions.RayError as error:  # died MAX_RETRIES + 1 times, or could not set up
        return error.cause if isinstance(error, ray.exceptions.RayTaskError) else error


_worker_target: Optional[str] = None  # what this worker process took on, for good


def _call_in_worker(function: Callable[..., Any], item: Any, args: tuple, target: str,
                    spec_fields: dict[str, Any]) -> Any:
    """A task: `function(item, *args)` under the driver's target and spec."""
    _take_on_target(target)
    with use_spec(HardwareSpec(**spec_fields)):  # workers are reused: leave no spec behind
        return function(item, *args)


def _take_on_target(target: str) -> None:
    # The target is fixed once a process allocates gxu memory, so a worker keeps its first.
    global _worker_target
    if _worker_target is None:
        set_target(target)
        _worker_target = target
    elif _worker_target != target:
        raise RuntimeError(f"this Ray worker runs the {_worker_target!r} target and cannot "
                           f"switch to {target!r}: a process keeps its first gxusim target")
