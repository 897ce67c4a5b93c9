"""The model's terms: each coefficient a spec field, and how competing bounds combine.

A term charges time to one spec field (`TERMS`); a kernel's predicted time is a sum of
such charges where the GPU serialises work and a smooth max (`smooth_max`, the p-norm of
the spec's `overlap_norm`) where it overlaps. `smooth_max_by_field` keeps the charges
summing to the time, so a breakdown says which field each second came from.
"""
from __future__ import annotations

import dataclasses
from typing import Mapping

from ..spec import HardwareSpec
from .launch_facts import PhaseFacts


@dataclasses.dataclass(frozen=True)
class Term:
    """One coefficient of the model: a spec field, and what it is the time of."""
    field: str
    meaning: str
    rate: bool = False  # the field is a rate (bytes/s), its time goes as 1 / field
    # False: measured directly (the device copy ceiling), which `fit.fit` keeps
    fitted: bool = True


TERMS: tuple[Term, ...] = (
    Term("launch_overhead_s", "one launch"),
    Term("memory_latency_s", "one memory round trip of a tile (or a chunk loop's first)"),
    Term("loads_in_flight", "16-byte loads a thread keeps in flight per round trip, with "
         "max_regs_per_thread registers (fewer in proportion to a smaller register budget)"),
    Term("sm_bandwidth", "bytes per second through one SM", rate=True),
    Term("loop_round_trip_s", "an unpipelined chunk loop: one memory wait of a thread (the "
         "binary's, else round_trips_per_load per load instruction: a 16-byte "
         "vector where its contiguous run allows)"),
    Term("pipeline_latency_s", "a pipelined chunk loop's round trip (shared by the chunks "
         "in flight)"),
    Term("l2_latency_s", "a chunk loop's round trip for what L2 holds of its loads (rows "
         "an earlier loop read, what every tile loads alike) and the L1 does not"),
    Term("l2_hit_share", "a round trip whose line another tile left in L2, as a share of "
         "a DRAM one (`reused_share` of the launch's round trips)"),
    Term("flop_issue_s", "per element per thread: one dependent arithmetic step (a word "
         "moved: word_issue_steps)"),
    Term("transcendental_issue_s", "per element per thread: one expf-equivalent call"),
    Term("warp_instruction_s", "a chunk loop: per instruction of one warp, issued one after "
         "another (what the warp's own dependences leave unhidden)"),
    Term("sm_flop_s", "per thread-instruction on one SM, at its issue rate (a chunk's "
         "instructions: its binary's, else the loop_*instructions estimate)"),
    Term("layout_convert_s", "per tile element: a layout conversion through shared memory"),
    Term("layout_sync_s", "one layout conversion's barriers, per tile"),
    Term("reduction_s", "one block reduction, per (1 + log2 warps)"),
    Term("row_reduction_s", "one block reduction: per row a warp reduces (its lanes' shuffles)"),
    Term("scan_chunk_s", "one serial scan chunk"),
    Term("spill_miss_s", "a chunk: per 4-byte word a thread spills and reloads, for the "
         "share of its frame the L1 cannot hold (`spill_miss_share`): an L2 round trip; "
         "measured by benchmarks/spill_frames.py, not fitted", fitted=False),
    Term("spill_bandwidth", "bytes per second of those words, every thread's on the SM, "
         "through its L1 while it holds them: the L1's bytes a clock, not fitted", rate=True,
         fitted=False),
    Term("run_issue_s", "a chunk: per contiguous run shorter than an L1 line its loads "
         "touch, on one SM (a pipelined chunk's narrow runs: narrow_run_s)"),
    Term("narrow_run_s", "a pipelined chunk: per run narrower than a 16-byte vector (its "
         "own copy through the L1), on one SM; measured by benchmarks/narrow_runs.py, not "
         "fitted", fitted=False),
    Term("narrow_line_s", "a pipelined chunk: how long a run narrower than a vector holds "
         "the L1 line it is copied through, its sector from DRAM (`narrow_line_hold`); "
         "measured by benchmarks/narrow_lines.py, not fitted", fitted=False),
    Term("async_copy_bandwidth", "bytes per second one SM's pipelined chunk loops stream "
         "(asynchronous copies through shared memory)", rate=True),
    Term("mem_bandwidth", "DRAM bytes per second (device-wide bound): the measured copy "
         "ceiling, not fitted", rate=True, fitted=False),
)


def smooth_max(power: float, *values: float) -> float:
    """The `power`-norm of `values`: their sum at 1, the largest alone as it grows."""
    peak = max(values)
    if peak <= 0:
        return 0.0
    return peak * sum((v / peak) ** power for v in values) ** (1 / power)


def smooth_max_by_field(spec: HardwareSpec, *bounds: Mapping[str, float]) -> dict[str, float]:
    """The smooth max (`spec.overlap_norm`) of competing bounds (each the sum of its
    fields' seconds), shared among the fields in proportion to each bound's pull on it, so
    a breakdown still sums to the time."""
    power = spec.overlap_norm
    sizes = [sum(bound.values()) for bound in bounds]
    total = smooth_max(power, *sizes)
    weight = sum(size ** power for size in sizes)
    shares: dict[str, float] = {}
    for bound, size in zip(bounds, sizes):
        if size <= 0:
            continue
        for field, seconds in bound.items():
            share = total * size ** power / weight * seconds / size
            shares[field] = shares.get(field, 0.0) + share
    return shares


def round_trips(field: str, seconds: float, reused: float,
                spec: HardwareSpec) -> dict[str, float]:
    """`seconds` of DRAM round trips charged to `field`, the `reused` share of them
    answered by L2 in `l2_hit_share` of the time."""
    return {field: seconds * (1 - reused), "l2_hit_share": seconds * reused * spec.l2_hit_share}


def seconds_at(rate: float, size: float) -> float:
    return size / rate if rate > 0 else 0.0


def sm_bytes(phase: PhaseFacts, sharing: int) -> float:
    """Bytes a phase moves through the SM a tile (or a chunk loop's every chunk), the
    `sharing` programs resident there alike."""
    return sharing * (phase.sector_bytes or phase.load_bytes + phase.store_bytes)


def first_round_trip(phase: PhaseFacts, reused: float, spec: HardwareSpec) -> dict[str, float]:
    """A tile's first wait for memory, by field: one round trip per level of its loads (a
    gather: its index's, then its row's)."""
    return round_trips("memory_latency_s", spec.memory_latency_s * phase.load_depth, reused, spec)
