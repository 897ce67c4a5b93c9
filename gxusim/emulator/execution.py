"""Execution: allocates the per-launch record arrays, calls the compiled `_program` for
every program of the grid (in shares over threads), and times it (the first call of a
specialisation includes numba's compile)."""
from __future__ import annotations

import concurrent.futures
import dataclasses
import math
import threading
import time
from typing import Callable, Optional

import numba
import numpy as np

from . import compile_pool
from . import dtypes as D
from .arguments import LaunchArguments
from .module_frame import TRACKING_PARAMS, parameters
from .specialisation import Specialisation
from .tracking import Tracking


SERIAL_BELOW_ELEMENTS = 1 << 16  # elements of all of a launch's buffers together


@dataclasses.dataclass
class LaunchRecords:
    """What the generated code writes while it runs (see `module_frame.RECORD_PARAMS`)."""
    threads: int
    tracking: dict  # alias class -> Tracking (checks on only)
    outputs: dict  # record name -> array: tiles, oob, lanes, site_runs, samp_*


def allocate_records(compiled: Specialisation, arguments: LaunchArguments,
                     programs: int) -> LaunchRecords:
    """Record arrays for one launch. Atomic adds from concurrent threads would lose
    updates, so launches with atomics run on one thread; so do small launches, where
    waking threads costs more than it saves."""
    kir, layout, buffers = compiled.kir, compiled.emitter.layout, arguments.buffers
    elements = sum(buffer.array.shape[0] for buffer in buffers.values())
    serial = kir.atomic or elements < SERIAL_BELOW_ELEMENTS
    threads = 1 if serial else max(1, min(numba.get_num_threads(), programs))
    pdt = D.COMPUTE_NP[layout.program_dtype]
    tracking: dict = {}
    if layout.checks:
        for n in kir.stored:
            alias = buffers[n].alias
            if alias not in tracking:
                reads = any(buffers[m].alias == alias for m in layout.track_reads)
                tracking[alias] = Tracking.allocate(threads, buffers[n].array.shape[0], reads, pdt)
    nsites = max(1, len(kir.sites))
    max_block = max((math.prod(s.shape) for s in kir.sites), default=1)
    outputs = {
        "tiles": np.zeros(programs, np.int64),
        "oob": np.zeros((programs, nsites, 2), np.int64),
        "lanes": np.zeros((programs, nsites), np.int64),
        "site_runs": np.zeros((programs, nsites), np.int64),
        "samp_off": np.zeros((nsites, max_block), np.int64),
        "samp_mask": np.zeros((nsites, max_block), np.bool_),
        "samp_flag": np.zeros(nsites, np.uint8),
    }
    return LaunchRecords(threads, tracking, outputs)


def thread_values(compiled: Specialisation, arguments: LaunchArguments,
                  records: LaunchRecords) -> list[list]:
    """Per thread, the values of `_program`'s parameters after the program ids: the same
    buffers, constants and records for every thread, and each thread its own rows of the
    tracking arrays."""
    buffers, params = arguments.buffers, parameters(compiled.emitter)
    shared: list = []
    for kind, name in params:
        if kind == "buf":
            shared.append(buffers[name].array)
        elif kind == "base":
            shared.append(np.int64(buffers[name].base))
        elif kind == "size":
            shared.append(np.int64(buffers[name].array.shape[0]))
        elif kind == "scalar":
            shared.append(arguments.scalars[name])
        elif kind == "consts":
            shared.append(np.array(compiled.emitter.constant_values(), np.int64))
        elif kind in TRACKING_PARAMS:
            shared.append(getattr(records.tracking[buffers[name].alias], kind))
        else:
            shared.append(records.outputs[kind])
    tracked = [kind in TRACKING_PARAMS for kind, _ in params]
    return [[value[thread] if rows else value for value, rows in zip(shared, tracked)]
            for thread in range(records.threads)]


def program_signature(values: list) -> tuple:
    """The numba types `_program` is called with: the program ids (int64), then `values`
    (one thread's, `thread_values`)."""
    return (numba.int64,) * 7 + tuple(numba.typeof(v) for v in values)


def _run_share(program: Callable, grid: tuple, first: int, last: int, values: list) -> None:
    """Programs first..last-1 of the grid, in order, on this thread."""
    g0, g1, _ = grid
    for p in range(first, last):
        program(p, p % g0, (p // g0) % g1, p // (g0 * g1), *grid, *values)


_pool: Optional[concurrent.futures.ThreadPoolExecutor] = None
_pool_lock = threading.Lock()


def _threads_pool() -> concurrent.futures.ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = concurrent.futures.ThreadPoolExecutor(numba.config.NUMBA_NUM_THREADS,
                                                          thread_name_prefix="gxusim-programs")
        return _pool


def launch(program: Callable, grid: tuple, per_thread: list[list]) -> None:
    """Every program of the grid, in contiguous shares, one per thread. `_program` releases
    the GIL, so Python threads run the shares at once; calling it from Python costs a few
    microseconds a program and saves compiling a launch loop for each module."""
    programs, threads = math.prod(grid), len(per_thread)
    shares = [(c * programs // threads, (c + 1) * programs // threads) for c in range(threads)]
    if threads == 1:
        _run_share(program, grid, *shares[0], per_thread[0])
        return
    pool = _threads_pool()
    for done in [pool.submit(_run_share, program, grid, *share, values)
                 for share, values in zip(shares, per_thread)]:
        done.result()


def run_programs(compiled: Specialisation, grid: tuple, arguments: LaunchArguments,
                 records: LaunchRecords) -> tuple[float, float]:
    """Run every program of the grid; returns (compile seconds, run seconds)."""
    per_thread = thread_values(compiled, arguments, records)
    first_call = compiled.program.signatures == []
    start = time.perf_counter()
    if first_call:  # compiled ahead by a worker: numba then loads it from its disk cache
        compile_pool.wait_for(compiled.module_path)
    launch(compiled.program, tuple(int(g) for g in grid), per_thread)
    elapsed = time.perf_counter() - start
    if first_call:
        return compiled.jit_s + elapsed, 0.0
    return compiled.jit_s, elapsed
