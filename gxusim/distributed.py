"""Sweeps and calibration on Ray: each run of a sweep (one model at one size), or each
calibration program, is a Ray task, on a local cluster's cores or on a remote cluster's
machines and GPUs. Predict-only sweeps also run on this machine's cores without Ray
(`local_runner`, `gxusim sweep --jobs N`).

`map_on_ray(function, items, ...)` is the one mechanism: it calls `function(item, *args)` for
every item as a task, in a worker that first takes on the driver's target, spec and
`GXUSIM_*` settings, and yields the results as tasks finish. Work that runs kernels on a GPU
goes to one long-lived worker per GPU of the cluster (N GPUs run N items at once, each
worker warm after its first), anything else is a task holding one CPU. `gpu_workers()`
keeps that pool of GPU workers, started and warmed up, for every call in a block (several
sweeps, a calibration and a sweep), rather than one pool per call. `ray_runner(address)` is
a `runner` for `gxusim.sweep.sweep` (`gxusim sweep --ray`) on top of it; `gxusim calibrate
--ray` and `benchmarks/bench_ceiling.py --ray` measure their programs and cases with it. Ray
is an optional extra (`pip install 'gxusim[ray]'`), imported by this module only.

Caches: workers share the cache folder (`gxusim.cache`) rather than get one each. Its files
are named by the hash of what they hold and written atomically (numba's machine code too),
so two workers compiling the same kernel at once each replace the file with the same whole
content; sharing means a kernel is compiled once per machine, not once per worker. Remote
workers use their own node's folder unless the driver sets `GXUSIM_CACHE_DIR`.

Failures: a task whose worker process dies is retried (`MAX_RETRIES`); one that still fails,
or whose worker cannot take on the driver's settings, yields its error in place of a result
(a sweep makes it one error row per policy and goes on). Leaving early (Ctrl-C) cancels the
tasks still outstanding and stops the GPU workers.

`local_runner(jobs)`: a predict-only sweep's time is all Inductor compiling, one run per
CPU at a time, so `jobs` worker processes of this machine run `jobs` runs at once. Workers
are forked from the driver on Linux (they start with its imports: no second torch import)
where torch is built without CUDA, and spawned otherwise; each takes on the driver's
target and spec as Ray's workers do. A worker that dies breaks its pool: the runs it left
unfinished are retried one at a time, each in a pool of its own, so only the run that kills
its worker becomes error rows.
"""
from __future__ import annotations

import concurrent.futures
import contextlib
import multiprocessing
import os
import sys
from typing import Any, Callable, Hashable, Iterable, Iterator, Optional, Sequence

from tqdm import tqdm

from . import sweep
from .errors import InputError
from .spec import HardwareSpec, current_spec, use_spec
from .target import TARGETS, current_target, set_target

Execute = Callable[[sweep.Run, Sequence[str], bool], list[dict]]
Runner = Callable[[list[sweep.Run], Sequence[str], bool], Iterable[list[dict]]]

WAIT_S = 0.5  # longest wait for a finished task before Python looks at signals again
MAX_RETRIES = 2  # new attempts after a worker process dies (a crash, the OOM killer, a lost node)


class RayMissingError(ImportError, InputError):
    """Ray is not installed. Also an `InputError`: what the command line reports as a
    one-line error (exit status 2) rather than a traceback."""


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
                             desc="sweep on ray", unit="run", affinity=lambda run: run.model)
        # Closed here, not when collected: a Ctrl-C's traceback keeps this frame, and so the
        # tasks, alive for as long as the caller holds the exception.
        with contextlib.closing(results):
            for run, rows in results:
                if isinstance(rows, BaseException):
                    rows = [sweep._failed(run, policy, target, rows) for policy in policies]
                yield rows

    return run_on_ray


def local_runner(jobs: int, execute: Execute = sweep.execute) -> Runner:
    """A runner for predict-only sweeps on `jobs` worker processes of this machine (see the
    module's docstring); it refuses other sweeps, whose runs execute kernels: the emulator
    already uses every core for one kernel, the cuda target times kernels one at a time on
    its GPU. `execute` is what each worker calls (tests give one that crashes)."""
    if jobs < 1:
        raise InputError(f"--jobs must be at least 1, not {jobs}")

    def run_locally(runs: list[sweep.Run], policies: Sequence[str], predict_only: bool
                    ) -> Iterator[list[dict]]:
        if not predict_only:
            raise InputError(f"--jobs {jobs}: runs in parallel processes are for "
                             "--predict-only sweeps (the emulator already runs each kernel "
                             "on every core, the cuda target times kernels on one GPU); "
                             "use --ray to spread other sweeps")
        call = (execute, list(policies), current_target(), current_spec().as_dict())
        # The first pool forks its workers before the progress bar starts its thread.
        first = _submitted(runs, call, jobs)
        with tqdm(total=len(runs), desc="sweep", unit="run", disable=not runs) as bar:
            unfinished = yield from _finished_rows(*first, policies, bar)
            for run in unfinished:  # a worker died: each of these alone finds the culprit
                if (yield from _finished_rows(*_submitted([run], call, 1), policies, bar)):
                    error = RuntimeError("its worker process died (a crash, or the OOM killer)")
                    bar.update()
                    yield [sweep._failed(run, policy, "predict", error) for policy in policies]

    return run_locally


def usable_cpus() -> int:
    """The CPUs this process may run on (a container's or taskset's share, not the host's):
    `local_runner`'s default number of workers."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _submitted(runs: list[sweep.Run], call: tuple, jobs: int
               ) -> tuple[concurrent.futures.ProcessPoolExecutor, dict]:
    """A pool of `jobs` workers with every run submitted: (the pool, future -> run)."""
    execute, policies, target, spec_fields = call
    method = "fork" if _can_fork() else "spawn"
    pool = concurrent.futures.ProcessPoolExecutor(
        max(1, min(jobs, len(runs))), mp_context=multiprocessing.get_context(method))
    return pool, {pool.submit(_call_in_worker, execute, run, (policies, True), target,
                              spec_fields): run for run in runs}


def _finished_rows(pool: concurrent.futures.ProcessPoolExecutor, futures: dict,
                   policies: Sequence[str], bar: tqdm) -> Iterator[list[dict]]:
    """Yields the rows of each run as the pool finishes it; returns the runs left
    unfinished, in their order, when a worker died (which breaks the pool)."""
    unfinished, completed = [], False
    try:
        for future in _as_completed(futures):
            try:
                rows = future.result()
            except concurrent.futures.process.BrokenProcessPool:
                unfinished.append(futures[future])
                continue
            except Exception as error:  # it raised, or could not take on target or spec
                rows = [sweep._failed(futures[future], policy, "predict", error)
                        for policy in policies]
            bar.update()
            yield rows
        completed = True
    finally:
        if not completed:  # Ctrl-C or a caller that stopped early: stop the runs going on
            _terminate_workers(pool)
        pool.shutdown(cancel_futures=True)
    order = list(futures.values())
    return sorted(unfinished, key=order.index)


def _can_fork() -> bool:
    """Whether workers may be forked: on Linux (elsewhere forking a process that has loaded
    system frameworks is unsafe) with a torch built without CUDA. With CUDA in the build, a
    forked child cannot use it once the driver has so much as counted its GPUs (which the
    cuda target's setup does; `torch.cuda.is_initialized()` still says False then), and
    predict-only on the cuda target asks CUDA for streams and properties."""
    import torch
    return sys.platform == "linux" and not torch.backends.cuda.is_built()


def _as_completed(futures: dict) -> Iterator[concurrent.futures.Future]:
    # Bounded waits, as on Ray: a main thread blocked on a future may not see Ctrl-C.
    pending = set(futures)
    while pending:
        done, pending = concurrent.futures.wait(pending, timeout=WAIT_S,
                                                return_when=concurrent.futures.FIRST_COMPLETED)
        yield from done


def _terminate_workers(pool: concurrent.futures.ProcessPoolExecutor) -> None:
    if hasattr(pool, "terminate_workers"):  # Python 3.14
        pool.terminate_workers()
        return
    # Before 3.14 the executor has no public way to stop a call that is running.
    for process in list((getattr(pool, "_processes", None) or {}).values()):
        process.terminate()


def map_on_ray(function: Callable[..., Any], items: Sequence[Any], *args: Any,
               uses_gpu: bool, desc: str = "ray tasks", unit: str = "task",
               affinity: Optional[Callable[[Any], Hashable]] = None
               ) -> Iterator[tuple[Any, Any]]:
    """(item, `function(item, *args)`) for every item, each computed on the connected
    cluster (`connect`) and yielded as it finishes; an item that failed for good yields its
    exception instead. `uses_gpu`: each call holds a GPU (it runs kernels). `affinity`: items
    with the same key go to the same GPU worker where they can (a sweep's runs of one model,
    whose compiled code and caches that worker already holds)."""
    ray = _import_ray()
    target = current_target()  # resolved here: "auto" means the driver's choice for all
    spec_fields = current_spec().as_dict()  # a spec read from a driver-side file travels too
    kept = _kept_pool(target) if uses_gpu else None
    workers = kept or (_GPUWorkers if uses_gpu else _CPUTasks)(ray, target)
    remaining = _Queue(items, affinity)
    pending: dict[Any, Any] = {}  # object ref -> its item
    try:
        with tqdm(total=len(items), desc=desc, unit=unit, disable=not items) as bar:
            while True:
                while workers.free() and remaining:
                    item = remaining.take(workers.next_key(), workers.busy_keys())
                    pending[workers.submit(function, item, args, target, spec_fields,
                                           key=remaining.key(item))] = item
                if not pending:
                    return
                # A bounded wait: a main thread blocked inside ray.wait may not see Ctrl-C
                # until a task finishes, so it comes back to Python every WAIT_S.
                ready, _ = ray.wait(list(pending), num_returns=1, timeout=WAIT_S)
                if not ready:
                    continue
                finished = ready[0]
                item = pending.pop(finished)
                result = _result(ray, finished)
                workers.release(finished, result)
                bar.update()
                yield item, result
    finally:  # Ctrl-C or a caller that stopped early: nothing of this work keeps running
        if kept:
            kept.stop_busy()
        else:
            workers.stop(list(pending))


class _Queue:
    """Items not yet submitted, in their order, taken with affinity: a worker that last ran
    key k takes the next item of k; a worker without one (or whose key is used up) takes the
    first item of a key no other worker holds, else the first item left."""

    def __init__(self, items: Sequence[Any], affinity: Optional[Callable[[Any], Hashable]]):
        self.items = list(items)
        self.key = affinity or (lambda item: None)

    def __bool__(self) -> bool:
        return bool(self.items)

    def take(self, key: Hashable, held: set) -> Any:
        position = next((i for i, item in enumerate(self.items) if self.key(item) == key),
                        None) if key is not None else None
        if position is None:
            position = next((i for i, item in enumerate(self.items)
                             if self.key(item) not in held), 0)
        return self.items.pop(position)


_kept: list["_GPUWorkers"] = []  # the pools of `gpu_workers()` blocks, innermost last


@contextlib.contextmanager
def gpu_workers(warm_up: Optional[Callable[[Any], Any]] = None) -> Iterator[None]:
    """Within the block, GPU work (`map_on_ray(uses_gpu=True)`) under the current target
    goes to one pool of workers, started here with one worker per GPU of the connected
    cluster, each of which has run `warm_up(None)` (default: compiles and runs a small gxu
    graph, which imports Inductor and Triton and initialises CUDA) before the block starts.
    Without it each call starts its own workers and pays that again. The workers hold their
    GPUs until the block ends; leaving a call early stops only the workers that were busy."""
    ray = _import_ray()
    target = current_target()
    pool = _GPUWorkers(ray, target)
    try:
        pool.run_on_each(warm_up or _warm_up, target, current_spec().as_dict())
        _kept.append(pool)
        yield
    finally:
        if pool in _kept:
            _kept.remove(pool)
        pool.stop([])


def _kept_pool(target: str) -> Optional["_GPUWorkers"]:
    return next((pool for pool in reversed(_kept) if pool.target == target), None)


def _warm_up(_: Any) -> None:
    """A GPU worker's first work: one small model of the suite through the whole pipeline."""
    sweep.execute(sweep.Run("add_relu", 1024), ["gxu"], False)


class _CPUTasks:
    """Every item a task holding one CPU, submitted at once: Ray queues them onto free CPUs,
    and workers are reused from one task to the next."""

    def __init__(self, ray: Any, target: str):
        self.ray = ray
        self.task = ray.remote(num_cpus=1, max_retries=MAX_RETRIES,
                               runtime_env={"env_vars": _worker_env(target)})(_call_in_worker)

    def free(self) -> bool:
        return True

    def next_key(self) -> Hashable:
        return None  # Ray picks the worker: no affinity

    def busy_keys(self) -> set:
        return set()

    def submit(self, *call: Any, key: Hashable = None) -> Any:
        return self.task.remote(*call)

    def release(self, ref: Any, result: Any) -> None:
        pass

    def stop(self, outstanding: list[Any]) -> None:
        for ref in outstanding:
            self.ray.cancel(ref, force=True)


class _GPUWorkers:
    """One long-lived worker (a Ray actor) per GPU of the cluster, fed one item at a time.

    A process keeps the GPU it first used (Ray names it in CUDA_VISIBLE_DEVICES before the
    process starts CUDA), so a GPU's work stays in one process: it imports torch and gxusim
    and warms up Inductor once, not once per item. A worker whose process dies is restarted
    and its item retried (`MAX_RETRIES`); one that died for good is replaced."""

    def __init__(self, ray: Any, target: str):
        gpus = int(ray.cluster_resources().get("GPU", 0))
        if gpus < 1:
            raise RuntimeError(
                f"the Ray cluster has no GPU, and each {target} run needs one: start it on a "
                "machine with GPUs (ray start --num-gpus N) or connect to one that has them")
        self.ray = ray
        self.target = target
        self.actor_class = ray.remote(
            num_gpus=1, max_restarts=MAX_RETRIES, max_task_retries=MAX_RETRIES,
            runtime_env={"env_vars": _worker_env(target)})(_GPUWorker)
        self.idle = [self.actor_class.remote() for _ in range(gpus)]
        self.busy: dict[Any, Any] = {}  # object ref -> the worker computing it
        self.keys: dict[Any, Hashable] = {}  # worker -> the affinity key of its last item

    def free(self) -> bool:
        return bool(self.idle)

    def next_key(self) -> Hashable:
        return self.keys.get(self.idle[-1])

    def busy_keys(self) -> set:
        return {self.keys.get(worker) for worker in self.busy.values()}

    def submit(self, *call: Any, key: Hashable = None) -> Any:
        worker = self.idle.pop()
        ref = worker.call.remote(*call)
        self.busy[ref] = worker
        self.keys[worker] = key
        return ref

    def release(self, ref: Any, result: Any) -> None:
        worker = self.busy.pop(ref)
        if isinstance(result, self.ray.exceptions.RayActorError):  # out of restarts
            self.ray.kill(worker)
            worker = self.actor_class.remote()
        self.idle.append(worker)

    def stop(self, outstanding: list[Any]) -> None:
        for worker in self.idle + list(self.busy.values()):
            self.ray.kill(worker)  # stops what it runs; its GPU returns to the cluster

    def stop_busy(self) -> None:
        """Stops what the busy workers run (killing them: Ray cannot interrupt a running
        call) and puts new ones in their place; idle workers stay as they are."""
        for worker in self.busy.values():
            self.ray.kill(worker)
            self.idle.append(self.actor_class.remote())
        self.busy.clear()

    def run_on_each(self, function: Callable[[Any], Any], target: str,
                    spec_fields: dict[str, Any]) -> None:
        """`function(None)` on every idle worker at once, waiting for all (raising the first
        error)."""
        self.ray.get([worker.call.remote(function, None, (), target, spec_fields)
                      for worker in self.idle])


class _GPUWorker:
    """The process behind one GPU (see `_GPUWorkers`)."""

    def call(self, *call: Any) -> Any:
        return _call_in_worker(*call)


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
