"""Execution: allocates the per-launch record arrays, calls the compiled `launch` over
the grid, and times it (the first call of a specialisation includes numba's compile)."""
from __future__ import annotations

import dataclasses
import math
import time

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
    waking threads costs more than it saves (and compiling the parallel loop more still)."""
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


def parameter_values(compiled: Specialisation, arguments: LaunchArguments,
                     records: LaunchRecords) -> list:
    """The values of the generated `launch`'s parameters after the grid, in order."""
    buffers = arguments.buffers
    values = []
    for kind, name in parameters(compiled.emitter):
        if kind == "buf":
            values.append(buffers[name].array)
        elif kind == "base":
            values.append(np.int64(buffers[name].base))
        elif kind == "size":
            values.append(np.int64(buffers[name].array.shape[0]))
        elif kind == "scalar":
            values.append(arguments.scalars[name])
        elif kind == "consts":
            values.append(np.array(compiled.emitter.constant_values(), np.int64))
        elif kind in TRACKING_PARAMS:
            values.append(getattr(records.tracking[buffers[name].alias], kind))
        else:
            values.append(records.outputs[kind])
    return values


def launch_values(compiled: Specialisation, grid: tuple, arguments: LaunchArguments,
                  records: LaunchRecords) -> list:
    """Every argument of the generated `launch`: the grid, the threads, the parameters."""
    return [*(np.int64(g) for g in grid), np.int64(records.threads),
            *parameter_values(compiled, arguments, records)]


def run_programs(compiled: Specialisation, grid: tuple, arguments: LaunchArguments,
                 records: LaunchRecords) -> tuple[float, float]:
    """Run every program of the grid; returns (compile seconds, run seconds)."""
    values = launch_values(compiled, grid, arguments, records)
    launch = compiled.launch_for(records.threads)
    first_call = launch.signatures == []
    start = time.perf_counter()
    if first_call:  # compiled ahead by a worker: numba then loads it from its disk cache
        compile_pool.wait_for(compiled.module_path, records.threads)
    launch(*values)
    elapsed = time.perf_counter() - start
    if first_call:
        return compiled.jit_s + elapsed, 0.0
    return compiled.jit_s, elapsed
