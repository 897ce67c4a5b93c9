"""A tile-level phase's memory time: a pointwise tile, a persistent reduction's rows.

After the tile's first round trip the rest of its loads and stores stream at the slower of
its threads' in-flight limit (`in_flight_vectors`: each further round trip charged to
`loads_in_flight`) and the SM's bandwidth (Little's law either way). Where the binary was
read, its waits a tile replace the in-flight estimate.
"""
from __future__ import annotations

from ..spec import HardwareSpec
from .caches import CachedRows
from .evidence import register_budget
from .launch_facts import LaunchFacts, PhaseFacts
from .terms import first_round_trip, round_trips, seconds_at, sm_bytes, smooth_max_by_field


def in_flight_vectors(facts: LaunchFacts, spec: HardwareSpec) -> float:
    """16-byte accesses a thread keeps in flight per round trip: loads_in_flight with all
    max_regs_per_thread registers, fewer in proportion to a smaller `register_budget` (a
    load in flight holds its destination registers)."""
    return spec.loads_in_flight * register_budget(facts, spec) / spec.max_regs_per_thread


def memory_terms(phase: PhaseFacts, facts: LaunchFacts, spec: HardwareSpec, sharing: int,
                 cached: CachedRows, reused: float) -> dict[str, float]:
    """Seconds of a tile-level phase's memory traffic a tile, by field; `sharing`: the
    programs resident on the SM, `cached`: what L2 kept of its loads (`cached_rows`),
    `reused`: the share of round trips L2 answers (`reused_share`)."""
    bandwidth = seconds_at(spec.sm_bandwidth, sm_bytes(phase, sharing))
    threads = facts.num_warps * spec.warp_size
    latency = first_round_trip(phase, reused, spec)
    accesses = (phase.load_bytes + phase.store_bytes) / (spec.vector_bytes * threads)
    slots = in_flight_vectors(facts, spec)
    if cached.bytes:  # lines L2 kept (`cached_rows`): each round trip is L2's
        hits = min(1.0, cached.bytes / phase.load_bytes)
        latency = {**round_trips("memory_latency_s", (1 - hits) * phase.load_depth *
                                 spec.memory_latency_s, reused, spec),
                   "l2_latency_s": hits * phase.load_depth * cached.wait_s}
    # The binary's waits a tile where it was read (a gather's are its index's and its own).
    # A wait across a block barrier is spent mostly reducing, unless it is the tile's
    # first: nothing ran before that one (a transpose's load, waited for after the barrier
    # guarding its shared memory, is all of its tile's waits).
    waits = phase.round_trips + phase.late_round_trips
    late = min(phase.late_round_trips, max(0.0, waits - 1))
    if waits:
        trips = max(1.0, (waits - late) / max(1, phase.load_depth))
    else:
        trips = max(1.0, accesses / slots) if slots > 0 else 1.0
    further = sum(latency.values()) * (trips - 1)
    latency["l2_latency_s"] = latency.get("l2_latency_s", 0.0) + late * spec.l2_latency_s
    return {**latency,
            **smooth_max_by_field(spec, {"loads_in_flight": further}, {"sm_bandwidth": bandwidth})}
