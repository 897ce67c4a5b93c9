"""Performance model: predicted kernel time from the hardware spec, calibrated on a real GPU.

    time = launch_overhead_s + bytes / mem_bandwidth
           + serial_tiles * (memory_latency_s + elements_per_thread * element_issue_s)

`serial_tiles` is the number of tile iterations one program slot runs in sequence:
waves x tiles_per_program, with waves = ceil(programs / resident programs) and resident
programs = sm_count x blocks per SM. Why this shape: a program's loop iteration issues
its loads and then waits about one memory round trip before it can store and move on (a
plain loop over tiles is not software-pipelined; a looped reduction's inner `tl.range`
over chunks is, so its chunks add elements, not round trips: on the H200 charging a round
trip per chunk over-predicted a 16-chunk row sum 5x), each thread works through its share
of the tile's elements (all chunks) one after another,
and the whole launch is bounded by DRAM bandwidth. Under a 32-program cap the per-tile
terms dominate, which is why bigger tiles spread over more warps win; with one tile per
program the bandwidth term does.

All four parameters are spec fields, so the same model predicts a GPU (calibrated: `fit`
on measured launches, `gxusim calibrate`) and the GXU (the vendor's numbers).
"""
from __future__ import annotations

import dataclasses
import itertools
import math
from typing import Sequence

import numpy as np

from .spec import HardwareSpec


@dataclasses.dataclass(frozen=True)
class LaunchFacts:
    """What the model needs to know about one launch, whoever found it out.

    The launcher derives them from the launch plan and the argument sizes (cuda target,
    predict-only); the emulator counts them while it runs the kernel (its sector traffic,
    its occupancy with registers and shared memory, the block elements each tile really
    issued). Either way `predict_seconds` is the one function that turns them into time.
    """
    programs: int
    num_warps: int
    tiles_per_program: int  # tile-loop iterations of the busiest program
    tile_elements: float  # block elements one tile issues, all of a looped reduction's chunks
    bytes_moved: float  # DRAM traffic (the emulator's 32-byte sectors; else tensor sizes)
    blocks_per_sm: int  # resident programs per SM (occupancy)

    def elements_per_thread(self, spec: HardwareSpec) -> float:
        return self.tile_elements / (self.num_warps * spec.warp_size)


def serial_tiles(facts: LaunchFacts, spec: HardwareSpec) -> int:
    resident = max(1, min(facts.programs, facts.blocks_per_sm * spec.sm_count))
    return math.ceil(facts.programs / resident) * max(1, facts.tiles_per_program)


def predict_seconds(facts: LaunchFacts, spec: HardwareSpec) -> float:
    """The model's time for one launch on `spec` (the formula in this module's docstring)."""
    if facts.blocks_per_sm <= 0:
        return math.inf  # the program cannot be resident at all
    per_tile = spec.memory_latency_s + facts.elements_per_thread(spec) * spec.element_issue_s
    return (spec.launch_overhead_s + facts.bytes_moved / spec.mem_bandwidth
            + serial_tiles(facts, spec) * per_tile)


def blocks_per_sm(spec: HardwareSpec, num_warps: int) -> int:
    """Resident programs per SM when warps, not registers or shared memory, limit them."""
    return min(spec.max_blocks_per_sm, spec.max_warps_per_sm // max(1, num_warps))


@dataclasses.dataclass(frozen=True)
class Fit:
    spec: HardwareSpec  # the input spec with the four fitted parameters
    median_error: float  # |predicted - measured| / measured over the samples
    max_error: float


def _columns(samples: Sequence[LaunchFacts], spec: HardwareSpec) -> np.ndarray:
    return np.array([[1.0, f.bytes_moved, serial_tiles(f, spec),
                      serial_tiles(f, spec) * f.elements_per_thread(spec)] for f in samples])


def fit(spec: HardwareSpec, profiles: Sequence[LaunchFacts], measured_s: Sequence[float]) -> Fit:
    """Least-squares launch overhead, 1/bandwidth, memory latency and element issue time
    (all non-negative), weighted by 1/measured so short and long launches count alike."""
    if len(profiles) < 4 or len(profiles) != len(measured_s):
        raise ValueError("fit needs at least 4 (profile, measured time) pairs, one time each")
    columns = _columns(profiles, spec)
    times = np.asarray(measured_s, dtype=float)
    weights = 1.0 / times
    best = None
    # Non-negative least squares over four unknowns: the best of the 15 column subsets
    # whose unconstrained solution is non-negative.
    for size in (4, 3, 2, 1):
        for subset in itertools.combinations(range(4), size):
            a = columns[:, subset] * weights[:, None]
            solution, *_ = np.linalg.lstsq(a, times * weights, rcond=None)
            if (solution < 0).any():
                continue
            coefficients = np.zeros(4)
            coefficients[list(subset)] = solution
            residual = float(np.sum(((columns @ coefficients - times) * weights) ** 2))
            if best is None or residual < best[0]:
                best = (residual, coefficients)
    overhead, inverse_bandwidth, latency, issue = best[1]
    fitted = spec.replace(launch_overhead_s=float(overhead),
                          mem_bandwidth=float(1.0 / inverse_bandwidth) if inverse_bandwidth > 0
                          else spec.mem_bandwidth,
                          memory_latency_s=float(latency), element_issue_s=float(issue))
    errors = np.abs(np.array([predict_seconds(p, fitted) for p in profiles]) - times) / times
    return Fit(fitted, float(np.median(errors)), float(errors.max()))
