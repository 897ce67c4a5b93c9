"""A pipelined chunk loop's memory time: S - 1 chunks' copies in flight.

Each chunk after a tile's first takes the slowest of a share of (round trip + its transfer
+ its arithmetic), its transfer at the SM's copy rate, its arithmetic, its narrow copies'
turns at the L1 (`narrow_run_s`) and their wait for the L1 lines shared memory leaves
(`narrow_line_hold`); a tile's first chunk issues its narrow copies, then waits for the
round trip and the prologue's S - 1 chunks. Runs of whole vectors shorter than a line pay
`run_issue_s` besides.
"""
from __future__ import annotations

import math
from typing import Mapping

from ..spec import HardwareSpec
from .caches import CachedRows, l1_cache_bytes
from .launch_facts import LaunchFacts, PhaseFacts
from .terms import round_trips, seconds_at, sm_bytes, smooth_max_by_field


def narrow_line_hold(phase: PhaseFacts, facts: LaunchFacts,
                     spec: HardwareSpec) -> dict[str, float]:
    """Seconds a narrow run's copy holds its L1 line, by field: narrow_line_s while its
    sector comes from DRAM, l2_latency_s for the share L2 answers.

    benchmarks/narrow_lines.py (column sums at 28-224 KiB of L1, 1-16 warps): one-column
    tiles hold a line 650-710 ns on 1-2 warps, 355 ns on 16. The neighbouring columns of
    a sector are other programs' tiles, which read it at about the same time. With one or
    two warps a program, every SM issues its rows in the same order, the sector's readers
    ask together and all wait for DRAM; more warps interleave a program's rows, and
    readers that ask later find the sector in L2. Every 8th column alone (no neighbours
    reading its sector) holds 740 ns on one warp, 575 on 16. ncu reads L2 hit rates of
    84% for both warp counts of the first: the hits counted on 1-2 warps are on sectors
    still in flight."""
    doublings = math.log2(max(1, facts.num_warps) / 2)
    spread = min(1.0, max(0.0, doublings * spec.narrow_spread_per_doubling))
    hit = phase.narrow_shared_share * spread
    return {"narrow_line_s": (1 - hit) * spec.narrow_line_s,
            "l2_latency_s": hit * spec.l2_latency_s}


def memory_terms(phase: PhaseFacts, facts: LaunchFacts, spec: HardwareSpec, sharing: int,
                 cached: CachedRows, reused: float,
                 arithmetic: Mapping[str, float]) -> dict[str, float]:
    """Seconds of a pipelined chunk loop's memory traffic a tile, by field, its
    `arithmetic` a tile included: it runs while later chunks' copies are in flight
    (other arguments as `tile.memory_terms`)."""
    moved = sm_bytes(phase, sharing)
    steps = phase.iterations
    # stages - 1 chunks in flight: each chunk after the first takes a share of (round
    # trip + its transfer + its arithmetic), or the transfer alone where the SM's copy
    # rate binds, or its arithmetic alone. What a cache holds (`cached_rows`) comes
    # back in its round trip.
    ahead = phase.pipeline_stages - 1
    hits = cached.bytes / phase.load_bytes if phase.load_bytes else 0.0
    trip = {**round_trips("pipeline_latency_s", (1 - hits) * spec.pipeline_latency_s,
                          reused, spec),
            "l2_latency_s": hits * cached.wait_s} if phase.load_depth else {}
    # The copies land in shared memory and are read back from it: their own rate.
    copy = seconds_at(spec.async_copy_bandwidth, moved)
    # A run narrower than a 16-byte vector is copied through L1 (cp.async.ca), holding
    # a line until it lands: the L1 that shared memory leaves bounds the runs in flight.
    lines = l1_cache_bytes(facts, spec) / spec.l1_line_bytes
    narrow = {field: sharing * phase.narrow_runs * seconds / max(1.0, lines)
              for field, seconds in narrow_line_hold(phase, facts, spec).items()} \
        if phase.narrow_runs and lines < math.inf else {}
    # Each such copy also takes the SM's L1 a turn (0.6 ns on the H200, whatever the
    # op or the row stride: benchmarks/narrow_runs.py): a bound of its own, which the
    # lines bound meets where little L1 is left. A run of whole vectors pays
    # run_issue_s on top of its copy.
    issue = {"narrow_run_s": sharing * phase.narrow_runs * spec.narrow_run_s} \
        if phase.narrow_runs else {}
    vector_runs = {"run_issue_s": steps * sharing * (phase.short_runs - phase.narrow_runs) *
                   spec.run_issue_s}
    work = {f: t / steps for f, t in (arithmetic or {}).items()}  # a chunk's
    first = {**trip, "async_copy_bandwidth": copy, **work}
    overlapped = smooth_max_by_field(spec, {f: t / ahead for f, t in first.items()},
                                     {"async_copy_bandwidth": copy}, work, narrow,
                                     issue)
    # A tile's first chunk lands with the prologue's S - 1 (issued at once, served
    # interleaved): it waits for their data too (a narrow run's other sectors: L2
    # hits). Row sum 32768 x 4096, 64 KB chunks S = 4: 2.4 us a tile + 0.6 a chunk.
    # Its narrow copies are issued before it waits: a column tile costs ~0.9 us more
    # than its runs (benchmarks/narrow_runs.py).
    prologue = (min(ahead, steps) - 1) * seconds_at(spec.async_copy_bandwidth,
                                                     sharing * phase.load_bytes)
    start = smooth_max_by_field(spec, {**first, "async_copy_bandwidth": copy + prologue,
                                 **issue}, narrow)
    terms = {f: start.get(f, 0.0) + (steps - 1) * overlapped.get(f, 0.0)
             for f in {**start, **overlapped}}
    terms.update(vector_runs)
    # A gather's dependent load waits for the index it reads: not pipelined.
    index_trips = round_trips("memory_latency_s", steps * spec.memory_latency_s *
                              max(0, phase.load_depth - 1), reused, spec)
    return {field: terms.get(field, 0.0) + index_trips.get(field, 0.0)
            for field in {**terms, **index_trips}}
