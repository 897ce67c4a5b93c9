"""An unpipelined chunk loop's memory time: each chunk's loads waited for in the loop.

A thread waits for its chunk's loads as often as its machine code says (`PhaseFacts.
round_trips`, from the binary), else the spec's `round_trips_per_load` a load instruction; rows an
earlier loop left in a cache wait for that cache (`cached_rows`). The waits, the first
round trip and the chunk's bytes through the SM overlap (a smooth max); each contiguous run
shorter than an L1 line goes through the SM's L1 on its own besides.
"""
from __future__ import annotations

from ..spec import HardwareSpec
from .caches import CachedRows
from .launch_facts import LaunchFacts, PhaseFacts
from .terms import first_round_trip, round_trips, seconds_at, sm_bytes, smooth_max_by_field


def memory_terms(phase: PhaseFacts, facts: LaunchFacts, spec: HardwareSpec, sharing: int,
                 cached: CachedRows, reused: float) -> dict[str, float]:
    """Seconds of an unpipelined chunk loop's memory traffic a tile, by field (arguments as
    `tile.memory_terms`)."""
    bandwidth = seconds_at(spec.sm_bandwidth, sm_bytes(phase, sharing))
    threads = facts.num_warps * spec.warp_size
    steps = phase.iterations
    latency = first_round_trip(phase, reused, spec)
    # A chunk's runs shorter than a line go through the SM's L1 one by one, besides its
    # waits or copies (a run of whole lines costs its lines: its bytes). Charged for every
    # run, the gxu row sum's 128 runs of 512 B a chunk were predicted 21% slow.
    runs = {"run_issue_s": steps * sharing * phase.short_runs * spec.run_issue_s}
    loads: dict[str, float] = {}  # the waits' seconds, DRAM's and L2's
    if phase.load_depth:
        queued = facts.num_warps / (facts.num_warps + 1)  # 1 warp 1/2, many: ~1
        # A gather's index load is in load_bytes already: its dependent second round
        # trip is latency (above), not more words. Cached bytes wait for their cache.
        per_thread = phase.load_accesses / threads if phase.load_accesses else \
            phase.load_bytes / (4 * threads)  # facts without accesses: 4-byte words
        uncached = 1 - cached.bytes / phase.load_bytes if phase.load_bytes else 1.0
        # A loop that runs once has no later chunk to overlap its waits with: a gather's
        # table load waits for its index, so at least one wait per level of loads.
        waits = phase.round_trips or max(queued * per_thread * spec.round_trips_per_load,
                                         phase.load_depth if steps == 1 else 0)
        loads = {**round_trips("loop_round_trip_s",
                               spec.loop_round_trip_s * steps * waits * uncached, reused,
                               spec),
                 "l2_latency_s": cached.wait_s * steps * waits * (1 - uncached)}
    return {**smooth_max_by_field(spec, latency, loads, {"sm_bandwidth": steps * bandwidth}),
            **runs}
