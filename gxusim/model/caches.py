"""Caches: what L1 and L2 give back, and what a launch keeps in L2 for the next one.

A chunk loop that reads its rows again (softmax's and layernorm's later passes) or what
every tile loads alike finds them in the SM's L1 or in L2 (`cached_rows`); a small table
gathered over and over is answered by L2 (`reused_share`); loads marked `evict_last`
find L2 still holding them at the next launch (`kept_share`). What DRAM moves is the
launch's traffic less what L2 answers (`dram_bytes`). Shared memory takes the L1's room
(`l1_cache_bytes`), and spilled words the L1 cannot hold wait for L2 (`spill_miss_share`).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Sequence

from ..spec import HardwareSpec
from .evidence import spilled_registers
from .launch_facts import LaunchFacts, PhaseFacts, pipelined
from .residency import l1_left, programs_per_sm


@dataclasses.dataclass(frozen=True)
class CachedRows:
    """What a cache gives a chunk loop back per iteration (`cached_rows`): its bytes, and
    the wait for them (`wait_s`: an L2 round trip, or none where the SM's L1 holds
    them)."""
    bytes: float = 0.0
    wait_s: float = 0.0


def evict_last_bytes(facts: LaunchFacts) -> float:
    """The distinct bytes of a launch's `evict_last` loads (`PhaseFacts.evict_last_bytes`)."""
    requested = facts.programs * facts.tiles_per_program * sum(
        phase.iterations * phase.evict_last_bytes for phase in facts.phases)
    return min(requested, facts.footprint_bytes) if facts.footprint_bytes else requested


def kept_share(facts: LaunchFacts, spec: HardwareSpec) -> float:
    """The share of a launch's `evict_last` lines that L2 still holds at its next launch:
    all up to `l2_kept_bytes` of them (distinct bytes), none from `l2_kept_none_bytes`.

    Normal traffic evicts normal lines first, the 256 MB that `do_bench` writes to flush
    L2 before each timed run included. H200 (benchmarks/l2_kept.py, a copy on 32 programs
    of 16 warps): reading 2-11 MB evict_last takes 0.64-0.80 of the unmarked read's time,
    12-14 MB 0.75-0.92, 16 MB and more all of it. The transformer's k transpose (2 MB of a
    6.3 MB qkv buffer) takes 10 us where Inductor marks its load evict_last (torch 2.11)
    and 15 us without the mark (torch 2.13's kernel)."""
    marked = evict_last_bytes(facts)
    if not spec.l2_kept_none_bytes or not marked:
        return 0.0
    none = min(spec.l2_kept_none_bytes, spec.l2_bytes or spec.l2_kept_none_bytes)
    whole = min(spec.l2_kept_bytes, none)  # L2 keeps no more than it holds
    if marked >= none:
        return 0.0
    return 1.0 if marked <= whole else (none - marked) / (none - whole)


def cached_rows(phase: PhaseFacts, earlier: Sequence[PhaseFacts], facts: LaunchFacts,
                spec: HardwareSpec) -> CachedRows:
    """What a phase loads that a cache gives back: where all its loads were marked
    `evict_last`, the share L2 kept of them since the last launch (`kept_share`), a round
    trip to L2 each. A chunk loop's besides: the rows an earlier chunk loop of
    the same tile loaded (softmax's and layernorm's later passes over their rows), where the
    tile's rows fit in the program's share of L2, and what every tile loads alike (a
    layernorm's weight and bias, `PhaseFacts.tile_invariant_bytes`). They come from the
    SM's L1 when they were loaded through it (unpipelined loads cache in L1, where
    pipelined copies of whole vectors land in shared memory past it) and every resident
    program's tile of them fits in the L1 that shared memory leaves; else from L2. An L1
    hit's wait (tens of cycles) is not charged. H200, layernorm bf16 4096x4096 on 8 warps,
    8 rows a tile (64 KB), unpipelined: 80 us, predicted 115 at an L2 round trip a wait,
    89 at none; the pipelined plans of the same tiles were within 15% already."""
    kept = kept_share(facts, spec) if phase.load_bytes and \
        phase.evict_last_bytes >= phase.load_bytes else 0.0
    if kept:
        return CachedRows(kept * phase.load_bytes, spec.l2_latency_s)
    if not phase.looped:
        return CachedRows()
    first = next((p for p in earlier if p.looped and p.load_bytes > 0
                  and p.iterations == phase.iterations), None)
    resident = max(1, min(facts.programs, facts.blocks_per_sm * spec.sm_count))
    rows = first.iterations * first.load_bytes if first else 0.0
    reread = min(phase.load_bytes - phase.tile_invariant_bytes,
                 first.load_bytes - first.tile_invariant_bytes) \
        if first and rows <= spec.l2_bytes / resident else 0.0
    cached = reread + phase.tile_invariant_bytes
    if not cached:
        return CachedRows()
    # The L1 holds the rows and what this pass loads beside them: 8 rows of 32 KB on one
    # warp, 256 KB with 64 KB of weights, gain nothing from a 256 KB L1 (704 us against
    # 714 with 28 KB, benchmarks/l1_carveout.py).
    held = (rows if reread else 0.0) + phase.iterations * (phase.load_bytes - reread)
    through_l1 = not pipelined(phase.pipeline_stages, phase.iterations) and not (
        reread and pipelined(first.pipeline_stages, first.iterations))
    in_l1 = through_l1 and programs_per_sm(facts, spec) * held <= l1_cache_bytes(facts, spec)
    return CachedRows(cached, 0.0 if in_l1 else spec.l2_latency_s)


def reused_share(facts: LaunchFacts, spec: HardwareSpec) -> float:
    """The share of a launch's load requests whose line another tile asked for before:
    one minus its distinct bytes over the bytes its tiles request, where the distinct
    bytes fit in L2 (else lines are evicted before they are asked for again). The seed's
    embedding gather reads a 128 KB table and 128 KB of indices, every line about forty
    times over; a streaming kernel asks for each line once."""
    requested = facts.programs * facts.tiles_per_program * sum(
        phase.iterations * phase.load_bytes for phase in facts.phases)
    if not facts.footprint_bytes or not requested or facts.footprint_bytes > spec.l2_bytes:
        return 0.0
    return max(0.0, 1.0 - facts.footprint_bytes / requested)


def dram_bytes(facts: LaunchFacts, spec: HardwareSpec) -> float:
    """Bytes the launch moves to and from DRAM: its traffic less the lines L2 kept from the
    last launch (`kept_share`), but no more than its distinct bytes where L2 answers the
    lines asked for again (`reused_share`): each comes from DRAM once. The plan's facts
    count each argument once already; the emulator's sector traffic counts every request."""
    moved = max(0.0, facts.bytes_moved - kept_share(facts, spec) * evict_last_bytes(facts))
    if not reused_share(facts, spec):
        return moved
    return min(moved, facts.footprint_bytes)


def ring_bytes(facts: LaunchFacts) -> float:
    """Shared memory one program's pipelined chunk loops buffer: stages - 1 chunks each."""
    return max((phase.load_bytes * (phase.pipeline_stages - 1) for phase in facts.phases),
               default=0.0)


def l1_cache_bytes(facts: LaunchFacts, spec: HardwareSpec) -> float:
    """The L1 an SM keeps beside the shared memory this launch's programs take there
    (`residency.l1_left`; inf: not modelled)."""
    return l1_left(spec, facts.blocks_per_sm, ring_bytes(facts))


def spill_miss_share(phase: PhaseFacts, facts: LaunchFacts, spec: HardwareSpec) -> float:
    """The share of a phase's spilled words the L1 does not hold until they are reloaded:
    none while the spill frames of the SM's resident warps (ptxas's local words, else the
    phase's spilled registers, x 4 bytes x threads) fit in `spill_miss_from` of the L1 that
    shared memory leaves, all of them from `spill_miss_all` of it, in proportion between.
    An unpipelined chunk's loads pass through the same L1 (`ld.global`) and count with the
    frames (as a persistent reduction's tile does), but for those marked to leave it first
    (`evict_first_bytes`: a softmax's last pass over its 128 KB chunks, 136 words spilled a
    chunk on 16 warps, was predicted 41% slow with them counted, 32% without, 30% with no
    miss at all); a pipelined chunk's copies of whole vectors bypass it.

    benchmarks/spill_frames.py (layernorms 8192 x 2048 and 2048 x 8192 on 1-4 warps, each
    binary timed at every carveout): a spilled word costs up to ~6-9 ns more once the
    frames outgrow the L1. One warp falls off a cliff (28 KiB frames: +0.1 ns a word with
    60 KiB of L1, +5.6 with 28); several warps lose it over a wider range, from about 0.8 of
    the L1 to twice it. The fitted ramp is the cliff's (0.925 to 1.025 of the L1 on the
    H200); on several warps the missed bytes at the SM's rate from L2 carry the rest."""
    l1 = l1_cache_bytes(facts, spec)
    if not math.isfinite(l1) or l1 <= 0:
        return 0.0
    words = facts.compiled_spills if facts.compiled_spills is not None else \
        spilled_registers(phase, facts, spec)
    threads = facts.num_warps * spec.warp_size
    unpipelined = 0.0 if pipelined(phase.pipeline_stages, phase.iterations) else \
        phase.load_bytes - phase.evict_first_bytes
    footprint = programs_per_sm(facts, spec) * (words * 4 * threads + unpipelined)
    span = spec.spill_miss_all - spec.spill_miss_from
    return min(1.0, max(0.0, (footprint / l1 - spec.spill_miss_from) / span))
