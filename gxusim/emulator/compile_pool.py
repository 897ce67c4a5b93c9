"""Compiling ahead: numba compiles generated modules in worker processes, in parallel.

A compiled graph's first call on the emulator is mostly numba compiling one module per kernel
structure, one after another (numba holds a process-wide compile lock, so threads do not
help). When a graph's launches are collected before its first call
(`graph_runtime.compiling_ahead`), each collected launch is specialised (its module written
to the module cache) and `submit`ted: a worker process compiles its `_program` for the exact
argument types, which leaves the machine code in numba's disk cache beside the module. At the
launch's first call here, `wait_for` waits for that compile, and numba then loads the code
from the cache; a compile no worker has started yet is taken back and done here, so this
process compiles too.

Workers are `python -c` processes running `worker_main`, fed jobs through a pipe, not
`multiprocessing`'s, which would import the user's main script again in each; they import
numba and the emulator's runtime, not torch.
`GXUSIM_COMPILE_WORKERS` sets how many (default: the cores less one, at most 8; 0: off).
"""
from __future__ import annotations

import os
import pickle
import queue
import subprocess
import sys
import threading
from pathlib import Path
from typing import Optional


from .. import environment

counts = {"ahead": 0, "here": 0}  # launches compiled by a worker / taken back (tests, benchmarks)


def workers() -> int:
    return environment.integer("GXUSIM_COMPILE_WORKERS")


class _Job:
    """One module's `_program` to compile for one signature: waiting, then taken by a
    worker or back by the launching process."""

    def __init__(self, path: str, signature: tuple):
        self.request = (path, signature)
        self.taken_by: Optional[str] = None  # "worker" or "here", under _lock
        self.done = threading.Event()


_lock = threading.Lock()
_jobs: "queue.Queue[_Job]" = queue.Queue()
_pending: dict[str, _Job] = {}
_started = 0  # worker threads serving a live worker process
processes: list[subprocess.Popen] = []  # the worker processes started, live or not


def _serve() -> None:
    """A thread that owns one worker process and feeds it jobs until the process ends; then
    the next `submit` starts another in its place."""
    global _started
    process = subprocess.Popen([sys.executable, "-c", _worker_code()],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    processes.append(process)
    while True:
        job = _jobs.get()
        with _lock:
            if job.taken_by is not None:
                continue
            job.taken_by = "worker"
        try:
            pickle.dump(job.request, process.stdin)
            process.stdin.flush()
            pickle.load(process.stdout)
        except Exception:  # noqa: BLE001 - a dead worker: its launch compiles where it runs
            with _lock:
                _started -= 1
            job.done.set()
            return
        job.done.set()


def _worker_code() -> str:
    """A worker's program. It imports only what compiling a module needs (numba, the
    emulator's runtime): `gxusim` and `gxusim.emulator` stand in it as bare packages, so
    their `__init__`s (torch, Dynamo and Inductor) do not run: a worker is ready in 0.4 s
    with 100 MB, where importing gxusim took 5.6 s and 460 MB (the 2-core machine)."""
    packages = [("gxusim", str(Path(environment.__file__).parent)),
                ("gxusim.emulator", str(Path(__file__).parent))]
    return ("import sys, types\n"
            f"for name, path in {packages!r}:\n"
            "    package = sys.modules[name] = types.ModuleType(name)\n"
            "    package.__path__ = [path]\n"
            f"import {__name__} as pool\n"
            "pool.worker_main()\n")


def submit(module_path: Path, signature: tuple) -> None:
    """Have a worker compile a module's `_program` for this signature
    (`execution.program_signature`), unless it is compiling it already."""
    global _started
    key = str(module_path)
    if _compiled_before(module_path):
        return
    with _lock:
        if key in _pending:
            return
        _pending[key] = job = _Job(key, signature)
        if _started < workers():
            _started += 1
            threading.Thread(target=_serve, daemon=True, name="gxusim-compile-ahead").start()
    _jobs.put(job)


def _compiled_before(module_path: Path) -> bool:
    """Whether the module's `_program` has machine code already: in this process, or in
    numba's disk cache beside the module (an index for the function)."""
    from .module_cache import import_module
    if import_module(module_path)._program.signatures:
        return True
    return any((module_path.parent / "__pycache__").glob(f"{module_path.stem}._program-*.nbi"))


def wait_for(module_path: Path) -> None:
    """Before a launch's first call here: compile it here if no worker has taken it; else,
    while a worker compiles it, compile here the launches no worker has taken (the latest
    first: the ones the graph needs last), then wait."""
    with _lock:
        job = _pending.pop(str(module_path), None)
        if job is None or _take_here(job):
            return
    while not job.done.is_set():
        with _lock:
            other = next((j for j in reversed(_pending.values()) if j.taken_by is None), None)
            if other is None or not _take_here(other):
                break
        try:
            _compile(*other.request)
        except Exception:  # noqa: BLE001 - its launch compiles again where it runs, and says why
            pass
    job.done.wait()
    counts["ahead"] += 1


def _take_here(job: _Job) -> bool:
    """Take an untaken job for this process (under `_lock`)."""
    if job.taken_by is not None:
        return False
    job.taken_by = "here"
    counts["here"] += 1
    return True


def _compile(path: str, signature: tuple) -> None:
    """Compile the `_program` of the module at `path` for `signature` (numba's
    `cache=True` writes the machine code beside the module)."""
    from .module_cache import import_module
    import_module(Path(path))._program.compile(signature)


def worker_main() -> None:
    """A worker: read jobs from stdin, compile each, answer on the original stdout (what
    anything prints goes to stderr, not into the answers)."""
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    requests = sys.stdin.buffer
    while True:
        try:
            path, signature = pickle.load(requests)
        except EOFError:
            return
        try:
            _compile(path, signature)
            answer = None
        except Exception as error:  # noqa: BLE001 - the launching process compiles it again
            answer = f"{type(error).__name__}: {error}"
        try:
            pickle.dump(answer, answers)
            answers.flush()
        except OSError:  # the launching process has ended
            return
