"""Sweeps on Ray (gxusim.distributed): the rows of a local sweep, a shared cache, worker
crashes retried, Ctrl-C cancelling, the CLI's --ray, and a clear error without Ray. And
predict-only sweeps on local worker processes (`local_runner`, `--jobs`), which need no Ray.

One local cluster (2 CPUs) serves the module; tests that need Ray skip without it. Tests
that kill workers come last: a new worker costs seconds (it imports torch and gxusim). The
emulator runs are `slow` (numba compiles their kernels); predict-only runs stand in for
them elsewhere.
"""
from __future__ import annotations

import _thread
import os
import signal
import sys
import threading
import time

import pytest

import gxusim
from gxusim import distributed, sweep
from gxusim.cli import main
from gxusim.emulator import module_cache

try:
    import ray
except ImportError:
    ray = None

needs_ray = pytest.mark.skipif(ray is None, reason="needs Ray: pip install -e '.[ray]'")

MODELS, POLICIES, SIZES = ["add_relu", "row_sum"], ["seed", "gxu"], [1024, 1 << 20]
TIMING = ("measured_s",)  # the fields two runs of the same sweep may disagree on


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """The cache folder this process and the workers share: fresh, so workers write it."""
    return tmp_path_factory.mktemp("gxusim-cache")


@pytest.fixture(scope="module")
def cluster(cache):
    """Two CPUs, and a worker on each that has imported torch and gxusim (the seconds each
    new worker costs), having compiled no emulator kernel yet. The GPUs torch sees, or, on a
    machine without one, two logical GPUs for the GPU worker pool's tests."""
    with pytest.MonkeyPatch.context() as environment:
        environment.setenv("GXUSIM_CACHE_DIR", str(cache))
        ray.init(num_cpus=2, num_gpus=distributed.local_gpus()["num_gpus"] or 2)
        list(distributed.ray_runner(None)([sweep.Run("add_relu", 1024)] * 2, ["gxu"], True))
        yield
        ray.shutdown()


@pytest.fixture(scope="module")
def local_predicted():
    return sweep.sweep(MODELS, POLICIES, SIZES, predict_only=True)


def untimed(rows: list[dict]) -> list[dict]:
    return [{**{k: v for k, v in row.items() if k not in TIMING},
             "kernels": [{k: v for k, v in kernel.items() if k not in TIMING}
                         for kernel in row["kernels"]]} for row in rows]


@pytest.fixture(scope="module")
def twice_on_ray(cluster):
    """Each run of the emulator sweep twice at once, on the two workers: no kernel is in
    their memory yet, so both compile the same kernels and write the same cache files at
    the same time. Pairs of results, in the order of MODELS."""
    runs = [sweep.Run(model, "cpu") for model in MODELS for _ in range(2)]
    results = sorted(distributed.ray_runner(None)(runs, POLICIES, False),
                     key=lambda rows: MODELS.index(rows[0]["model"]))
    return list(zip(results[::2], results[1::2]))


@needs_ray
@pytest.mark.slow  # with `twice_on_ray`, 30-60 s here: numba compiles every kernel afresh
@pytest.mark.skipif(gxusim.current_target() != "emulator",
                    reason="the emulator's module cache is what workers share")
def test_workers_compiling_the_same_kernels_at_once_share_the_cache_safely(twice_on_ray,
                                                                           cache):
    for first, second in twice_on_ray:
        assert untimed(first) == untimed(second)
    modules = list((cache / "emulator").glob("k_*.py"))
    machine_code = list((cache / "emulator" / "__pycache__").glob("*.nb[ic]"))
    assert modules and machine_code
    for module in modules:
        compile(module.read_text(), str(module), "exec")  # whole, not half of one
    assert all(module_cache._readable(f) for f in machine_code)
    assert not [f.name for f in cache.rglob("*") if ".tmp" in f.name]  # no write left over


@needs_ray
@pytest.mark.slow  # 20-40 s more: the local sweep compiles every kernel again (see below)
def test_an_emulator_sweep_on_ray_gives_the_local_rows(twice_on_ray):
    rows = [row for first, _ in twice_on_ray for row in first]
    # Not from the workers' cache: the emulator names IR values by a process-wide counter,
    # so this process, with another history, generates other source for the same kernels.
    local_rows = sweep.sweep(MODELS, POLICIES)
    assert untimed(rows) == untimed(local_rows)
    assert all(row["matches_eager"] and not row["error"] for row in rows)
    assert [row["predicted_s"] for row in rows] == [row["predicted_s"] for row in local_rows]


@needs_ray
def test_a_predict_only_sweep_on_ray_gives_the_local_rows(cluster, local_predicted):
    rows = sweep.sweep(MODELS, POLICIES, SIZES, predict_only=True,
                       runner=distributed.ray_runner(None))
    assert untimed(rows) == untimed(local_predicted)
    assert {row["target"] for row in rows} == {"predict"}


@needs_ray
@pytest.mark.cuda
def test_a_cuda_sweep_on_ray_holds_a_gpu_per_run_and_gives_the_local_rows(cluster):
    """On the cuda target each run is a task holding one of the cluster's GPUs, in a worker
    process of its own (see `distributed.map_on_ray`); its rows are the local sweep's."""
    assert ray.cluster_resources().get("GPU", 0) >= 1, ray.cluster_resources()
    local_rows = sweep.sweep(MODELS, POLICIES, SIZES)
    rows = sweep.sweep(MODELS, POLICIES, SIZES, runner=distributed.ray_runner(None))
    assert untimed(rows) == untimed(local_rows)
    assert {row["target"] for row in rows} == {"cuda"}
    assert all(row["matches_eager"] and not row["error"] for row in rows)


@needs_ray
def test_a_spec_reaches_the_workers(cluster):
    spec = gxusim.current_spec().replace(name="slow-dram", mem_bandwidth=1e9)
    with gxusim.use_spec(spec):
        local = sweep.sweep(["add_relu"], ["gxu"], [1 << 20], predict_only=True)
        rows = sweep.sweep(["add_relu"], ["gxu"], [1 << 20], predict_only=True,
                           runner=distributed.ray_runner(None))
    assert rows[0]["spec"] == "slow-dram" and untimed(rows) == untimed(local)


@needs_ray
def test_the_cli_sweeps_on_ray_writes_the_rows_and_resumes(cluster, local_predicted,
                                                            tmp_path, capsys):
    path = tmp_path / "sweep.json"
    args = ["sweep", *MODELS, "--policies", *POLICIES, "--predict-only", "--sizes", "1024",
            "--ray", "--json", str(path)]
    assert main(args) == 0
    expected = untimed([row for row in local_predicted if row["scale"] == 1024])
    assert untimed(sweep.load(path)) == expected
    assert main(args + ["--resume"]) == 0  # nothing left to run: the saved rows again
    assert untimed(sweep.load(path)) == expected
    assert "rows written to" in capsys.readouterr().out


def raising_on(model):
    """An `execute` that fails outside `sweep.execute`'s own per-policy error rows."""
    def execute(run, policies, predict_only):
        if run.model == model:
            raise ValueError(f"no {model} here")
        return sweep.execute(run, policies, predict_only)
    return execute


@needs_ray
def test_a_run_that_raises_in_its_worker_is_error_rows_and_the_sweep_goes_on(
        cluster, local_predicted):
    runner = distributed.ray_runner(None, execute=raising_on("add_relu"))
    rows = sweep.sweep(MODELS, POLICIES, [1024], predict_only=True, runner=runner)
    assert [row["error"] for row in rows[:2]] == ["ValueError: no add_relu here"] * 2
    assert untimed(rows[2:]) == untimed([row for row in local_predicted
                                         if row["model"] == "row_sum" and row["scale"] == 1024])


@needs_ray
def test_map_on_ray_yields_each_result_or_its_error_under_the_drivers_spec(cluster):
    """The one mechanism under sweeps and calibration (which maps programs onto GPUs)."""
    def spec_name_times(factor):  # defined here: workers get it by value, not by module
        if factor < 0:
            raise ValueError(f"negative factor {factor}")
        return factor * len(gxusim.current_spec().name)
    spec = gxusim.current_spec().replace(name="twelve-chars")
    with gxusim.use_spec(spec):
        results = dict(distributed.map_on_ray(spec_name_times, [1, -1, 3], uses_gpu=False))
    assert results[1] == 12 and results[3] == 36
    assert isinstance(results[-1], ValueError) and "negative factor -1" in str(results[-1])


def gpu_and_process():
    """What a GPU worker runs: the GPU Ray gave its process, and the process."""
    def call(item):
        time.sleep(0.5)  # long enough that every worker gets items
        return os.environ.get("CUDA_VISIBLE_DEVICES"), os.getpid()
    return call


@needs_ray
def test_gpu_work_runs_in_one_warm_worker_per_gpu(cluster):
    gpus = int(ray.cluster_resources()["GPU"])
    results = dict(distributed.map_on_ray(gpu_and_process(), list(range(4 * gpus)),
                                          uses_gpu=True))
    assert sorted(results) == list(range(4 * gpus))
    devices_of_process: dict[int, set] = {}
    for device, pid in results.values():
        devices_of_process.setdefault(pid, set()).add(device)
    assert len(devices_of_process) == gpus  # a process per GPU, kept for every item
    assert all(len(devices) == 1 for devices in devices_of_process.values())
    assert len(set.union(*devices_of_process.values())) == gpus  # each on a GPU of its own
    while ray.available_resources().get("GPU", 0) < gpus:  # the workers gave them back
        time.sleep(0.2)


def test_workers_take_items_of_the_key_they_last_ran_then_of_a_key_nobody_holds():
    queue = distributed._Queue([("a", 0), ("a", 1), ("b", 0), ("c", 0), ("b", 1)],
                               affinity=lambda item: item[0])
    assert queue.take(None, held=set()) == ("a", 0)
    assert queue.take(None, held={"a"}) == ("b", 0)  # a is another worker's
    assert queue.take("a", held={"b"}) == ("a", 1)
    assert queue.take("a", held={"b"}) == ("c", 0)  # a is used up: a key nobody holds
    assert queue.take("c", held={"b"}) == ("b", 1)  # nothing unheld left: the first item
    assert not queue


@needs_ray
def test_gpu_work_with_affinity_keeps_each_key_on_one_worker(cluster):
    """Workers started at once (a kept pool), items of equal length: no worker runs out of
    its key's items while another key has some left, so nothing is taken from another key
    (which a worker that started late would otherwise see, by design)."""
    gpus = int(ray.cluster_resources()["GPU"])
    items = [(key, i) for key in range(gpus) for i in range(3)]
    call = gpu_and_process()
    with distributed.gpu_workers(warm_up=lambda _: None):
        results = dict(distributed.map_on_ray(lambda item: call(item), items, uses_gpu=True,
                                              affinity=lambda item: item[0]))
    processes = {key: {results[(key, i)][1] for i in range(3)} for key in range(gpus)}
    assert all(len(pids) == 1 for pids in processes.values()), processes
    assert len(set.union(*processes.values())) == gpus  # each key on a worker of its own


@needs_ray
def test_gpu_workers_kept_for_a_block_serve_every_call_in_it(cluster, tmp_path):
    gpus = int(ray.cluster_resources()["GPU"])
    warmed = tmp_path / "warmed"

    def warm_up(_):
        (warmed / str(os.getpid())).touch()

    def processes():
        results = dict(distributed.map_on_ray(gpu_and_process(), list(range(2 * gpus)),
                                              uses_gpu=True))
        return {pid for _, pid in results.values()}
    warmed.mkdir()
    with distributed.gpu_workers(warm_up):
        assert ray.available_resources().get("GPU", 0) == 0  # held from the start
        first = processes()
        assert first == {int(name) for name in os.listdir(warmed)} and len(first) == gpus
        assert processes() == first  # the next call finds them warm
        slow = distributed.map_on_ray(lambda item: time.sleep(item) or item, [0] + [120] * gpus,
                                      uses_gpu=True)
        assert next(slow) == (0, 0)
        slow.close()  # the workers still busy are stopped and replaced, the others kept
        after = processes()
        assert len(after) == gpus and len(after & first) == 1
    started = time.monotonic()
    while ray.available_resources().get("GPU", 0) < gpus:  # the block gave them back
        assert time.monotonic() - started < 30, f"still held: {ray.available_resources()}"
        time.sleep(0.2)


@needs_ray
def test_a_gpu_worker_that_dies_is_restarted_and_its_item_retried(cluster, tmp_path):
    marker = tmp_path / "died"

    def dying_once_on_two(item):
        if item == 2 and not marker.exists():
            marker.touch()
            os._exit(1)
        return item * 10
    results = dict(distributed.map_on_ray(dying_once_on_two, [1, 2, 3], uses_gpu=True))
    assert marker.exists() and results == {1: 10, 2: 20, 3: 30}


@needs_ray
def test_leaving_gpu_work_early_stops_its_workers(cluster):
    gpus = int(ray.cluster_resources()["GPU"])

    def slow_after_first(item):
        time.sleep(0 if item == 0 else 120)
        return item
    results = distributed.map_on_ray(slow_after_first, list(range(gpus + 2)), uses_gpu=True)
    assert next(results) == (0, 0)
    started = time.monotonic()
    results.close()  # what a Ctrl-C in the caller's loop does
    while ray.available_resources().get("GPU", 0) < gpus:
        assert time.monotonic() - started < 30, f"still held: {ray.available_resources()}"
        time.sleep(0.2)


def test_a_cluster_without_gpus_is_a_clear_error_for_gpu_work(monkeypatch):
    fake_ray = type("Ray", (), {"cluster_resources": staticmethod(lambda: {"CPU": 8.0})})
    with pytest.raises(RuntimeError, match="the Ray cluster has no GPU, and each cuda run"):
        distributed._GPUWorkers(fake_ray, "cuda")


def test_calibration_leaves_out_a_program_that_failed_and_names_it(monkeypatch):
    from gxusim import target
    from gxusim.model import calibrate
    monkeypatch.setattr(target, "active", lambda: type("Timing", (), {"can_time": True})())
    good, bad = calibrate.PROGRAMS[:2]

    def mapper(function, programs, spec):  # what map_on_ray yields for a failed task
        yield good, ["a sample"]
        yield bad, RuntimeError("the worker lost its GPU")
    with pytest.warns(UserWarning, match=f"{bad.name!r} failed .*lost its GPU"):
        samples = calibrate.measure(gxusim.current_spec(), [good, bad], mapper=mapper)
    assert samples == ["a sample"]


def test_a_worker_keeps_its_first_target(monkeypatch):
    monkeypatch.setattr(distributed, "_worker_target", None)  # as in a fresh worker
    first = gxusim.current_target()  # the session's: taking it on changes nothing here
    distributed._take_on_target(first)
    other = "cuda" if first == "emulator" else "emulator"
    with pytest.raises(RuntimeError, match=f"runs the '{first}' target and cannot switch"):
        distributed._take_on_target(other)


def dying_once_on(model, marker):
    """An `execute` whose worker process dies on `model`'s first attempt."""
    def execute(run, policies, predict_only):
        if run.model == model and not marker.exists():
            marker.touch()
            os._exit(1)
        return sweep.execute(run, policies, predict_only)
    return execute


@needs_ray
def test_a_worker_that_dies_is_retried_and_the_rows_come_back(cluster, local_predicted,
                                                              tmp_path):
    marker = tmp_path / "died"
    runner = distributed.ray_runner(None, execute=dying_once_on("row_sum", marker))
    rows = sweep.sweep(MODELS, POLICIES, SIZES, predict_only=True, runner=runner)
    assert marker.exists()  # a worker did die
    assert untimed(rows) == untimed(local_predicted)


def dying_on(model):
    """An `execute` whose worker process dies on every attempt at `model`."""
    def execute(run, policies, predict_only):
        if run.model == model:
            os._exit(1)
        return sweep.execute(run, policies, predict_only)
    return execute


@needs_ray
def test_a_run_whose_worker_always_dies_is_error_rows_and_the_sweep_goes_on(
        cluster, local_predicted):
    runner = distributed.ray_runner(None, execute=dying_on("row_sum"))
    rows = sweep.sweep(MODELS, POLICIES, [1024], predict_only=True, runner=runner)
    add_relu = [row for row in local_predicted if row["model"] == "add_relu"
                and row["scale"] == 1024]
    assert untimed(rows[:2]) == untimed(add_relu)
    assert [(row["model"], row["policy"], row["target"]) for row in rows[2:]] == \
        [("row_sum", policy, "predict") for policy in POLICIES]
    assert all(row["error"].startswith("WorkerCrashedError") for row in rows[2:])


@needs_ray
def test_ctrl_c_cancels_the_outstanding_tasks(cluster):
    def sleeping(run, policies, predict_only):
        time.sleep(120)

    runner = distributed.ray_runner(None, execute=sleeping)
    # interrupt_main does nothing unless Python handles SIGINT: give it the handler a plain
    # Python process has (something earlier in a long session may have replaced it).
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    threading.Timer(5, _thread.interrupt_main).start()  # Ctrl-C while tasks run and wait
    started = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            sweep.sweep(MODELS, POLICIES, SIZES, predict_only=True, runner=runner)
    finally:
        signal.signal(signal.SIGINT, previous)
    while ray.available_resources().get("CPU", 0) < 2:  # every task gave its CPU back
        assert time.monotonic() - started < 60, f"tasks still hold {ray.available_resources()}"
        time.sleep(0.5)


def test_without_ray_a_sweep_runs_and_ray_gives_a_clear_error(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "ray", None)  # any `import ray` raises ImportError
    sweep_args = ["sweep", "add_relu", "--predict-only", "--sizes", "1024"]
    assert main(sweep_args + ["--json", str(tmp_path / "sweep.json")]) == 0
    assert main(sweep_args + ["--ray"]) == 2
    assert "pip install 'gxusim[ray]'" in capsys.readouterr().err


class InWorker:
    """`sweep.execute`, each row saying which process ran it."""

    def __call__(self, run, policies, predict_only):
        return [{**row, "worker_pid": os.getpid()}
                for row in sweep.execute(run, policies, predict_only)]


class RaisingOn:
    """`raising_on` as a module-level class: the local runner pickles what workers call."""

    def __init__(self, model: str, dies: bool = False, sleeps: bool = False):
        self.model, self.dies, self.sleeps = model, dies, sleeps

    def __call__(self, run, policies, predict_only):
        if run.model == self.model:
            if self.sleeps:
                time.sleep(120)
            if self.dies:
                os._exit(1)
            raise ValueError(f"no {self.model} here")
        return sweep.execute(run, policies, predict_only)


@pytest.mark.parametrize("start", ["fork", "spawn"])
def test_a_predict_only_sweep_on_local_workers_gives_the_local_rows(start, local_predicted,
                                                                     monkeypatch):
    """Forked workers where the driver may fork (Linux, torch without CUDA), else spawned
    (macOS, Windows, a CUDA build of torch): the same rows either way."""
    if start == "fork" and not distributed._can_fork():
        pytest.skip("this process cannot fork its workers (not Linux, or torch has CUDA)")
    monkeypatch.setattr(distributed, "_can_fork", lambda: start == "fork")
    rows = sweep.sweep(MODELS, POLICIES, SIZES, predict_only=True,
                       runner=distributed.local_runner(2, execute=InWorker()))
    workers = {row.pop("worker_pid") for row in rows}
    assert workers and os.getpid() not in workers  # every run in a worker process
    assert untimed(rows) == untimed(local_predicted)
    assert {row["target"] for row in rows} == {"predict"}


def test_spawned_workers_import_a_vendor_policy_as_the_driver_does(monkeypatch):
    """A spawned worker imports the vendor's module itself, outside FakeTensorMode (the
    example's module once ran its demo on import, which fails on fake tensors)."""
    monkeypatch.setattr(distributed, "_can_fork", lambda: False)
    policies = ["examples.custom_policy:Wide"]
    local = sweep.sweep(["add_relu"], policies, [4096], predict_only=True)
    rows = sweep.sweep(["add_relu"], policies, [4096], predict_only=True,
                       runner=distributed.local_runner(2))
    assert rows[0]["error"] is None and untimed(rows) == untimed(local)


def test_a_spec_reaches_the_local_workers():
    spec = gxusim.current_spec().replace(name="slow-dram", mem_bandwidth=1e9)
    with gxusim.use_spec(spec):
        local = sweep.sweep(["add_relu"], ["gxu"], [1 << 20], predict_only=True)
        rows = sweep.sweep(["add_relu"], ["gxu"], [1 << 20], predict_only=True,
                           runner=distributed.local_runner(2))
    assert rows[0]["spec"] == "slow-dram" and untimed(rows) == untimed(local)


def test_a_local_run_that_raises_or_whose_worker_dies_is_error_rows_and_the_sweep_goes_on(
        local_predicted):
    """A worker that dies breaks its pool: the runs it left are retried alone, so only the
    run that kills its worker becomes error rows."""
    row_sum = untimed([row for row in local_predicted
                       if row["model"] == "row_sum" and row["scale"] == 1024])
    for execute, error in ((RaisingOn("add_relu"), "ValueError: no add_relu here"),
                           (RaisingOn("add_relu", dies=True), "RuntimeError: its worker process "
                                                              "died (a crash, or the OOM killer)")):
        rows = sweep.sweep(MODELS, POLICIES, [1024], predict_only=True,
                           runner=distributed.local_runner(2, execute=execute))
        assert [row["error"] for row in rows[:2]] == [error] * 2
        assert untimed(rows[2:]) == row_sum


def test_ctrl_c_stops_the_local_workers():
    runner = distributed.local_runner(2, execute=RaisingOn("add_relu", sleeps=True))
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    threading.Timer(3, _thread.interrupt_main).start()
    started = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            sweep.sweep(["add_relu"], POLICIES, SIZES, predict_only=True, runner=runner)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert time.monotonic() - started < 30  # the sleeping runs were stopped, not waited for


def test_local_workers_are_for_predict_only_sweeps_and_the_cli_says_so(capsys):
    with pytest.raises(ValueError, match="--jobs must be at least 1"):
        distributed.local_runner(0)
    sweep_args = ["sweep", "add_relu", "--sizes", "1024"]
    assert main(sweep_args + ["--jobs", "2"]) == 2
    assert "for --predict-only sweeps" in capsys.readouterr().err
    assert main(sweep_args + ["--predict-only", "--jobs", "2", "--ray"]) == 2
    assert "--jobs and --ray: choose one" in capsys.readouterr().err
