"""Performance model: predicted kernel time from the hardware spec, calibrated on a real GPU.

    time = launch_overhead_s + bytes / mem_bandwidth
           + serial_tiles * (memory_latency_s
                             + elements_per_thread * (element_issue_s
                                                      + flops * flop_issue_s
                                                      + transcendentals * transcendental_issue_s)
                             + scan_chunks * scan_chunk_s)

`serial_tiles` is the number of tile iterations one program slot runs in sequence:
waves x tiles_per_program, with waves = ceil(programs / resident programs) and resident
programs = sm_count x blocks per SM (the occupancy model's, so residency limits show up as
waves). Why this shape: a program's loop iteration issues its loads and then waits about
one memory round trip before it can store and move on (a plain loop over tiles is not
software-pipelined; a looped reduction's inner `tl.range` over chunks is, so its chunks add
elements, not round trips: on the H200 charging a round trip per chunk over-predicted a
16-chunk row sum 5x); each thread then works through its share of the tile's elements (all
chunks) one after another, paying an issue cost per element plus the kernel's arithmetic
per element (`flops` and `transcendentals`, counted from the kernel's source by
`gxusim.kernel_work`); a scan's chunks are serial (each waits for the previous chunk's
carry and a cross-warp exchange), so they cost a fixed step each; and the whole launch is
bounded by DRAM bandwidth. Under a 32-program cap the per-tile terms dominate, which is why
bigger tiles spread over more warps win; with one tile per program the bandwidth term does.

Every coefficient is a spec field (`TERMS`), so the same model predicts a GPU (calibrated:
`fit` on measured launches, `gxusim calibrate`) and the GXU (the vendor's numbers).
"""
from __future__ import annotations

import dataclasses
import itertools
import math
from typing import Callable, Sequence

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
    flops_per_element: float = 0.0  # arithmetic per tile element (gxusim.kernel_work)
    transcendentals_per_element: float = 0.0
    scan_chunks: int = 0  # serial scan chunks per tile (0: no scan)

    def elements_per_thread(self, spec: HardwareSpec) -> float:
        return self.tile_elements / (self.num_warps * spec.warp_size)


def serial_tiles(facts: LaunchFacts, spec: HardwareSpec) -> int:
    resident = max(1, min(facts.programs, facts.blocks_per_sm * spec.sm_count))
    return math.ceil(facts.programs / resident) * max(1, facts.tiles_per_program)


@dataclasses.dataclass(frozen=True)
class Term:
    """One additive term of the model: a spec field times what the launch needs of it."""
    field: str  # the spec field holding the coefficient
    amount: Callable[[LaunchFacts, HardwareSpec], float]  # what the coefficient multiplies
    inverse: bool = False  # the field holds a rate (bytes/s): the coefficient is 1 / field

    def coefficient(self, spec: HardwareSpec) -> float:
        value = getattr(spec, self.field)
        return 1.0 / value if self.inverse else value

    def with_coefficient(self, spec: HardwareSpec, coefficient: float) -> HardwareSpec:
        if self.inverse and coefficient <= 0:
            return spec  # a rate the data cannot pin down stays as the spec had it
        return spec.replace(**{self.field: 1.0 / coefficient if self.inverse else coefficient})


def _thread_elements(facts: LaunchFacts, spec: HardwareSpec) -> float:
    return serial_tiles(facts, spec) * facts.elements_per_thread(spec)


TERMS: tuple[Term, ...] = (
    Term("launch_overhead_s", lambda facts, spec: 1.0),
    Term("mem_bandwidth", lambda facts, spec: facts.bytes_moved, inverse=True),
    Term("memory_latency_s", lambda facts, spec: float(serial_tiles(facts, spec))),
    Term("element_issue_s", _thread_elements),
    Term("flop_issue_s", lambda facts, spec: _thread_elements(facts, spec) * facts.flops_per_element),
    Term("transcendental_issue_s",
         lambda facts, spec: _thread_elements(facts, spec) * facts.transcendentals_per_element),
    Term("scan_chunk_s", lambda facts, spec: float(serial_tiles(facts, spec) * facts.scan_chunks)),
)


def predict_seconds(facts: LaunchFacts, spec: HardwareSpec) -> float:
    """The model's time for one launch on `spec` (the formula in this module's docstring)."""
    if facts.blocks_per_sm <= 0:
        return math.inf  # the program cannot be resident at all
    return sum(term.coefficient(spec) * term.amount(facts, spec) for term in TERMS)


def breakdown(facts: LaunchFacts, spec: HardwareSpec) -> dict[str, float]:
    """Seconds per term (keyed by spec field): where the predicted time goes."""
    return {term.field: term.coefficient(spec) * term.amount(facts, spec) for term in TERMS}


def blocks_per_sm(spec: HardwareSpec, num_warps: int) -> int:
    """Resident programs per SM when warps, not registers or shared memory, limit them."""
    return min(spec.max_blocks_per_sm, spec.max_warps_per_sm // max(1, num_warps))


def residency_limiter(spec: HardwareSpec, num_warps: int) -> str:
    """What `blocks_per_sm` is limited by, in the occupancy model's words."""
    by_warps = spec.max_warps_per_sm // max(1, num_warps)
    return "max_warps_per_sm" if by_warps < spec.max_blocks_per_sm else "max_blocks_per_sm"


@dataclasses.dataclass(frozen=True)
class Fit:
    spec: HardwareSpec  # the input spec with the fitted parameters
    median_error: float  # |predicted - measured| / measured over the samples
    max_error: float
    fitted: tuple[str, ...] = ()  # the spec fields the samples could pin down


def _nonnegative_least_squares(columns: np.ndarray, times: np.ndarray,
                                weights: np.ndarray) -> np.ndarray:
    """Weighted least squares over non-negative coefficients: the best column subset whose
    unconstrained solution is non-negative (few columns: exhaustive search is cheap, exact)."""
    best = None
    count = columns.shape[1]
    for size in range(count, 0, -1):
        for subset in itertools.combinations(range(count), size):
            a = columns[:, subset] * weights[:, None]
            solution, *_ = np.linalg.lstsq(a, times * weights, rcond=None)
            if (solution < 0).any():
                continue
            coefficients = np.zeros(count)
            coefficients[list(subset)] = solution
            residual = float(np.sum(((columns @ coefficients - times) * weights) ** 2))
            if best is None or residual < best[0]:
                best = (residual, coefficients)
    return best[1]


def fit(spec: HardwareSpec, profiles: Sequence[LaunchFacts], measured_s: Sequence[float]) -> Fit:
    """Fit every term's coefficient that the samples exercise (a term whose amount is zero in
    every sample, e.g. scans when no scan was measured, keeps the spec's value)."""
    if len(profiles) < 4 or len(profiles) != len(measured_s):
        raise ValueError("fit needs at least 4 (profile, measured time) pairs, one time each")
    times = np.asarray(measured_s, dtype=float)
    amounts = np.array([[term.amount(p, spec) for term in TERMS] for p in profiles])
    exercised = [i for i in range(len(TERMS)) if np.any(amounts[:, i] != 0)]
    # What the unexercised terms contribute stays fixed: fit the rest to what is left.
    fixed = amounts[:, [i for i in range(len(TERMS)) if i not in exercised]] @ np.array(
        [TERMS[i].coefficient(spec) for i in range(len(TERMS)) if i not in exercised])
    # Weighted by 1/measured: the relative error counts, so short and long launches count alike.
    coefficients = _nonnegative_least_squares(amounts[:, exercised], times - fixed, 1.0 / times)
    fitted = spec
    for i, coefficient in zip(exercised, coefficients):
        fitted = TERMS[i].with_coefficient(fitted, float(coefficient))
    errors = np.abs(np.array([predict_seconds(p, fitted) for p in profiles]) - times) / times
    return Fit(fitted, float(np.median(errors)), float(errors.max()),
               tuple(TERMS[i].field for i in exercised))
