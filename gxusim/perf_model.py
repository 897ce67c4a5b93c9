"""Performance model: predicted kernel time from the hardware spec, calibrated on a real GPU.

A GXU kernel is grid-capped: each of its programs loops over tiles, so a launch takes

    time = launch_overhead_s + max(serial_tiles * tile_time, bytes_moved / mem_bandwidth)

(`serial_tiles`: waves x tiles_per_program). A tile is timed per SM by walking its phases
(`gxusim.kernel_work.kernel_phases`), each a sum of terms where the GPU serialises and a
smooth max (`_smooth_max`, the 4-norm) where it overlaps:

* a tile-level phase (a pointwise tile, a persistent reduction's rows): its first round
  trip, then the slower of its threads' in-flight limit and the SM's bandwidth, plus its
  dependency chain or the SM's issue rate, a layout conversion where it transposes;
* an unpipelined chunk loop: its memory waits (the binary's, else estimated), its bytes
  through the SM, then each chunk's arithmetic (a warp's instructions one after another,
  or the SM's issue rate), and each contiguous run through the L1;
* a pipelined chunk loop (`num_stages` > 1 and more than one chunk, `pipelined`): S - 1
  chunks' copies in flight, each chunk the slowest of its transfer, its arithmetic, its
  narrow copies' turns at the L1 (`narrow_run_s`), their wait for the L1 lines shared
  memory leaves (`l1_cache_bytes`) and its share of a round trip with the transfer and
  arithmetic, plus its runs of whole vectors; a tile's first chunk issues its narrow
  copies, then waits for the round trip and the prologue's S - 1 chunks' bytes;
* register spills (the binary's words, else ptxas's count, else estimated), block
  reductions, rows reduced per warp and scan chunks;
* round trips for lines other tiles asked for before (a small table gathered over and
  over) answered by L2 in `l2_hit_share` of the time (`reused_share`).

Every coefficient is a spec field (`TERMS`): the model predicts a GPU (calibrated by
`gxusim calibrate`) and the GXU (the vendor's numbers). The plan and the emulator read the
same phases from the kernel's source. Each term's form, the measurements that decided it
and what is not modelled: docs/performance-model.md.
"""
from __future__ import annotations

import dataclasses
import itertools
import math
from typing import Mapping, Sequence

from .launch_facts import (L1_LINE_BYTES, VECTOR_BYTES, LaunchFacts, PhaseFacts, legacy_phase,
                           pipelined)
from .residency import l1_left
from .spec import HardwareSpec

SMOOTH_MAX_POWER = 4.0
# Issue work of one 4-byte word a thread loads or stores (its address, mask and memory
# instruction), in dependent arithmetic steps: a prior, as kernel_work's libdevice weights
# are; flop_issue_s, fitted, times them. The calibration fits best from 8 steps on.
WORD_STEPS = 8.0
# Registers per element a chunk loop's carried value takes, with its update's temporaries:
# ptxas's counts (n_regs + n_spills, benchmarks/registers.py) for the Welford loops (three
# carried values) of 1,394 H200 plans: 7-8 registers per element of a thread's chunk share.
LIVE_PER_CARRIED = 2.5
# Memory waits per 16-byte load instruction of an unpipelined chunk loop, where no binary
# says (predict-only, the emulator), per W/(W+1) (one warp's loads queue behind no other's):
# the median over 1,311 such loops of ptxas's binaries for the H200 (the calibration's and
# the ceiling search's plans, benchmarks/registers.py; 10th-90th percentile 0.14-1.06, by
# how far ptxas unrolled the loop and how many loads its registers kept in flight).
ROUND_TRIPS_PER_LOAD = 0.375
# Instructions a warp issues per chunk of a chunk loop where no binary says: so many a
# chunk, and per element of a thread so many, per dependent arithmetic step and per
# expf-equivalent call; per 16-byte load a thread copies asynchronously (a pipelined loop's
# copy, its wait and its read back from shared memory), per 16-byte store, and per run
# narrower than a vector (a scalar copy each). Fitted (relative least squares) to the chunk
# loops of 5,270 plans' H200 binaries (calibration, ceiling search and suite; Triton 3.6):
# estimate over binary, median 0.90, 10th-90th percentile 0.38-1.29 (one rate per element
# and step: 0.41-1.98). What is left is ptxas's: how far it unrolls a loop.
LOOP_INSTRUCTIONS = {"chunk": 2.95, "element": 1.11, "step": 0.54, "expf": 7.6,
                     "copied_load": 4.3, "store": 8.3, "narrow_run": 1.45}
# Instructions a warp issues a tile of a tile-level phase where no binary says: so many a
# tile, and per element of a thread so many, and so many per expf-equivalent call and per
# division on its chain (a call's chain weight and its instruction count go together:
# tanhf 6.7 expf's, 24 instructions). Fitted (relative least squares) to the tile bodies of
# 560 plans' H200 binaries (calibration, ceiling search and suite; Triton 3.6), whose
# counts ncu's executed counts match (16 launches, 1.00-1.04x): estimate over binary,
# median 0.97, 10th-90th percentile 0.56-1.22 (a per-step rule like the
# chunk loops' old one: 0.34-2.6; 7x too many for x * y + z, a third of tanh's).
TILE_INSTRUCTIONS = {"tile": 8.9, "element": 3.4, "expf": 3.9, "division": 12.4}


def serial_tiles(facts: LaunchFacts, spec: HardwareSpec) -> int:
    resident = max(1, min(facts.programs, facts.blocks_per_sm * spec.sm_count))
    return math.ceil(facts.programs / resident) * max(1, facts.tiles_per_program)


def programs_per_sm(facts: LaunchFacts, spec: HardwareSpec) -> int:
    """Programs sharing one SM's bandwidth at a time (1 when the grid leaves SMs idle)."""
    resident = max(1, min(facts.programs, facts.blocks_per_sm * spec.sm_count))
    return math.ceil(resident / spec.sm_count)


@dataclasses.dataclass(frozen=True)
class Term:
    """One coefficient of the model: a spec field, and what it is the time of."""
    field: str
    meaning: str
    rate: bool = False  # the field is a rate (bytes/s), its time goes as 1 / field
    # False: measured directly (the device copy ceiling), which `calibrate.fit` keeps
    fitted: bool = True


TERMS: tuple[Term, ...] = (
    Term("launch_overhead_s", "one launch"),
    Term("memory_latency_s", "one memory round trip of a tile (or a chunk loop's first)"),
    Term("loads_in_flight", "16-byte loads a thread keeps in flight per round trip, with "
         "max_regs_per_thread registers (fewer in proportion to a smaller register budget)"),
    Term("sm_bandwidth", "bytes per second through one SM", rate=True),
    Term("loop_round_trip_s", "an unpipelined chunk loop: one memory wait of a thread (the "
         "binary's, else ROUND_TRIPS_PER_LOAD per load instruction: a 16-byte "
         "vector where its contiguous run allows)"),
    Term("pipeline_latency_s", "a pipelined chunk loop's round trip (shared by the chunks "
         "in flight)"),
    Term("l2_latency_s", "a chunk loop's round trip for what L2 holds of its loads (rows "
         "an earlier loop read, what every tile loads alike) and the L1 does not"),
    Term("l2_hit_share", "a round trip whose line another tile left in L2, as a share of "
         "a DRAM one (`reused_share` of the launch's round trips)"),
    Term("flop_issue_s", "per element per thread: one dependent arithmetic step (a word "
         "moved: WORD_STEPS)"),
    Term("transcendental_issue_s", "per element per thread: one expf-equivalent call"),
    Term("warp_instruction_s", "a chunk loop: per instruction of one warp, issued one after "
         "another (what the warp's own dependences leave unhidden)"),
    Term("sm_flop_s", "per thread-instruction on one SM, at its issue rate (a chunk's "
         "instructions: its binary's, else LOOP_INSTRUCTIONS' estimate)"),
    Term("sm_transcendental_s", "per element on one SM: one expf-equivalent call, at the "
         "SM's issue rate"),
    Term("layout_convert_s", "per tile element: a layout conversion through shared memory"),
    Term("layout_sync_s", "one layout conversion's barriers, per tile"),
    Term("reduction_s", "one block reduction, per (1 + log2 warps)"),
    Term("row_reduction_s", "one block reduction: per row a warp reduces (its lanes' shuffles)"),
    Term("scan_chunk_s", "one serial scan chunk"),
    Term("spill_s", "a chunk (a persistent reduction: a tile): per 4-byte word a thread "
         "spills and reloads (the binary's local-memory words, else its spilled registers, "
         "stored and reloaded each chunk or around a tile's reductions)"),
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


def _smooth_max(*values: float) -> float:
    peak = max(values)
    if peak <= 0:
        return 0.0
    return peak * sum((v / peak) ** SMOOTH_MAX_POWER for v in values) ** (1 / SMOOTH_MAX_POWER)


def _smooth_max_by_field(*bounds: Mapping[str, float]) -> dict[str, float]:
    """The smooth max of competing bounds (each the sum of its fields' seconds), shared
    among the fields in proportion to each bound's pull on it, so a breakdown still sums to
    the time."""
    sizes = [sum(bound.values()) for bound in bounds]
    total = _smooth_max(*sizes)
    weight = sum(size ** SMOOTH_MAX_POWER for size in sizes)
    shares: dict[str, float] = {}
    for bound, size in zip(bounds, sizes):
        if size <= 0:
            continue
        for field, seconds in bound.items():
            share = total * size ** SMOOTH_MAX_POWER / weight * seconds / size
            shares[field] = shares.get(field, 0.0) + share
    return shares


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


def _round_trips(field: str, seconds: float, reused: float,
                 spec: HardwareSpec) -> dict[str, float]:
    """`seconds` of DRAM round trips charged to `field`, the `reused` share of them
    answered by L2 in `l2_hit_share` of the time."""
    return {field: seconds * (1 - reused), "l2_hit_share": seconds * reused * spec.l2_hit_share}


def register_budget(facts: LaunchFacts, spec: HardwareSpec) -> int:
    """32-bit registers one thread of the launch may hold (`HardwareSpec.register_budget`).
    As in the emulator's occupancy model, the register allocator sizes a thread for one
    resident program; more programs per SM are resident only if their registers fit besides."""
    return spec.register_budget(facts.num_warps)


def spilled_registers(phase: PhaseFacts, facts: LaunchFacts, spec: HardwareSpec) -> float:
    """Registers (4-byte words) per thread a phase spills, stored and reloaded once an
    iteration (a chunk loop's chunk, a tile-level phase's tile).

    A chunk loop: the words its machine code moves a chunk (`PhaseFacts.spilled_words`),
    else what ptxas spilled where the kernel was compiled (`compiled_spills`), else an
    estimate: each value the loop carries from chunk to chunk is a register per element of
    the thread's share of the chunk, LIVE_PER_CARRIED of them with the update's
    temporaries, and what exceeds the thread's `register_budget` spills. A loop that runs
    once carries nothing (the compiler folds its first-chunk case).

    A persistent reduction's tile (a tile-level phase with block reductions) holds its
    values across its reductions: what ptxas spilled is stored before them and reloaded
    after, as many words a tile as the tile loop's machine code moves (else ptxas's count).
    The transformer block's inference softmax under the gxu policy (128 rows of 256 a tile
    on 16 warps, 80 registers spilled, two reductions) took 88 us, predicted 58 without its
    spills, 69 with 80 words a tile, 77 with the 133 its tile loop moves. A pointwise tile's
    spills cost nothing measurable (the same block's GELU, 36 spilled, within 7% without
    them); where nothing was compiled, a tile's spills are not estimated.

    The estimate misses the compiler's own decisions: ptxas unrolls layernorm's loop of four
    chunks and spills nothing at 64 elements a thread where every other plan of that share
    spills 86-230 registers."""
    if not phase.looped:  # a looped kernel's spills are its chunk loop's
        if not phase.reductions or any(p.looped for p in facts.phases):
            return 0.0
        return phase.spilled_words if phase.spilled_words is not None else \
            float(facts.compiled_spills or 0)
    if phase.spilled_words is not None:
        return phase.spilled_words
    if not phase.carried or phase.iterations <= 1:
        return 0.0
    if facts.compiled_spills is not None:
        return float(facts.compiled_spills)
    per_thread = phase.elements / (facts.num_warps * spec.warp_size)
    return max(0.0, per_thread * phase.carried * LIVE_PER_CARRIED - register_budget(facts, spec))


def in_flight_vectors(facts: LaunchFacts, spec: HardwareSpec) -> float:
    """16-byte accesses a thread keeps in flight per round trip: loads_in_flight with all
    max_regs_per_thread registers, fewer in proportion to a smaller `register_budget` (a
    load in flight holds its destination registers)."""
    return spec.loads_in_flight * register_budget(facts, spec) / spec.max_regs_per_thread


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


def _seconds_at(rate: float, size: float) -> float:
    return size / rate if rate > 0 else 0.0


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


def _memory_terms(phase: PhaseFacts, facts: LaunchFacts, spec: HardwareSpec,
                  sharing: int, cached: CachedRows, reused: float,
                  arithmetic: Mapping[str, float] | None = None) -> dict[str, float]:
    """Seconds of a phase's memory traffic per tile, by field (docs/performance-model.md);
    `sharing`: the programs resident on the SM, whose traffic goes through it alike;
    `reused`: the share of round trips L2 answers (`reused_share`); `arithmetic`: a
    pipelined chunk loop's arithmetic per tile, which runs while its copies are in flight
    (the result includes it)."""
    moved = sharing * (phase.sector_bytes or phase.load_bytes + phase.store_bytes)
    bandwidth = _seconds_at(spec.sm_bandwidth, moved)
    threads = facts.num_warps * spec.warp_size
    steps = phase.iterations
    latency = _round_trips("memory_latency_s", spec.memory_latency_s * phase.load_depth,
                           reused, spec)  # a gather: two round trips
    # A chunk's runs shorter than a line go through the SM's L1 one by one, besides its
    # waits or copies (a run of whole lines costs its lines: its bytes). Charged for every
    # run, the gxu row sum's 128 runs of 512 B a chunk were predicted 21% slow.
    runs = {"run_issue_s": steps * sharing * phase.short_runs * spec.run_issue_s}
    if phase.looped and phase.pipeline_stages > 1 and steps > 1:
        # stages - 1 chunks in flight: each chunk after the first takes a share of (round
        # trip + its transfer + its arithmetic), or the transfer alone where the SM's copy
        # rate binds, or its arithmetic alone. What a cache holds (`cached_rows`) comes
        # back in its round trip.
        ahead = phase.pipeline_stages - 1
        hits = cached.bytes / phase.load_bytes if phase.load_bytes else 0.0
        trip = {**_round_trips("pipeline_latency_s", (1 - hits) * spec.pipeline_latency_s,
                               reused, spec),
                "l2_latency_s": hits * cached.wait_s} if phase.load_depth else {}
        # The copies land in shared memory and are read back from it: their own rate.
        copy = _seconds_at(spec.async_copy_bandwidth, moved)
        # A run narrower than a 16-byte vector is copied through L1 (cp.async.ca), holding
        # a line until it lands: the L1 that shared memory leaves bounds the runs in flight.
        lines = l1_cache_bytes(facts, spec) / L1_LINE_BYTES
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
        overlapped = _smooth_max_by_field({f: t / ahead for f, t in first.items()},
                                          {"async_copy_bandwidth": copy}, work, narrow,
                                          issue)
        # A tile's first chunk lands with the prologue's S - 1 (issued at once, served
        # interleaved): it waits for their data too (a narrow run's other sectors: L2
        # hits). Row sum 32768 x 4096, 64 KB chunks S = 4: 2.4 us a tile + 0.6 a chunk.
        # Its narrow copies are issued before it waits: a column tile costs ~0.9 us more
        # than its runs (benchmarks/narrow_runs.py).
        prologue = (min(ahead, steps) - 1) * _seconds_at(spec.async_copy_bandwidth,
                                                          sharing * phase.load_bytes)
        start = _smooth_max_by_field({**first, "async_copy_bandwidth": copy + prologue,
                                      **issue}, narrow)
        terms = {f: start.get(f, 0.0) + (steps - 1) * overlapped.get(f, 0.0)
                 for f in {**start, **overlapped}}
        terms.update(vector_runs)
        # A gather's dependent load waits for the index it reads: not pipelined.
        index_trips = _round_trips("memory_latency_s", steps * spec.memory_latency_s *
                                   max(0, phase.load_depth - 1), reused, spec)
        return {field: terms.get(field, 0.0) + index_trips.get(field, 0.0)
                for field in {**terms, **index_trips}}
    if phase.looped:
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
            waits = phase.round_trips or max(queued * per_thread * ROUND_TRIPS_PER_LOAD,
                                             phase.load_depth if steps == 1 else 0)
            loads = {**_round_trips("loop_round_trip_s",
                                    spec.loop_round_trip_s * steps * waits * uncached, reused,
                                    spec),
                     "l2_latency_s": cached.wait_s * steps * waits * (1 - uncached)}
        return {**_smooth_max_by_field(latency, loads, {"sm_bandwidth": steps * bandwidth}),
                **runs}
    # A tile's stores hold in-flight slots as its loads do. After the first round trip the
    # rest streams at the slower of the threads' in-flight limit (the further round trips,
    # charged to loads_in_flight) and the SM's bandwidth (Little's law either way).
    accesses = (phase.load_bytes + phase.store_bytes) / (VECTOR_BYTES * threads)
    slots = in_flight_vectors(facts, spec)
    if cached.bytes:  # lines L2 kept (`cached_rows`): each round trip is L2's
        hits = min(1.0, cached.bytes / phase.load_bytes)
        latency = {**_round_trips("memory_latency_s", (1 - hits) * phase.load_depth *
                                  spec.memory_latency_s, reused, spec),
                   "l2_latency_s": hits * phase.load_depth * cached.wait_s}
    # The binary's waits a tile where it was read (a gather's are its index's and its own).
    # A wait across a block barrier is spent mostly reducing, unless it is the tile's
    # first: nothing ran before that one (a transpose's load, waited for after the barrier
    # guarding its shared memory, is all of its tile's waits).
    waits = phase.round_trips + phase.late_round_trips
    late = min(phase.late_round_trips, max(0.0, waits - 1))
    if waits:
        round_trips = max(1.0, (waits - late) / max(1, phase.load_depth))
    else:
        round_trips = max(1.0, accesses / slots) if slots > 0 else 1.0
    further = sum(latency.values()) * (round_trips - 1)
    latency["l2_latency_s"] = latency.get("l2_latency_s", 0.0) + late * spec.l2_latency_s
    return {**latency,
            **_smooth_max_by_field({"loads_in_flight": further}, {"sm_bandwidth": bandwidth})}


def _issue_steps(phase: PhaseFacts) -> float:
    """Dependent arithmetic steps per element, WORD_STEPS for each 4-byte word it moves
    (broadcast vectors excluded)."""
    words = (phase.load_bytes + phase.store_bytes) / (4 * phase.elements) if phase.elements \
        else 0.0
    return phase.arithmetic_steps + WORD_STEPS * words


def estimated_instructions(phase: PhaseFacts, facts: LaunchFacts, spec: HardwareSpec) -> float:
    """Instructions a warp issues per iteration of a phase where no binary says: a chunk
    loop's by LOOP_INSTRUCTIONS, a tile's by TILE_INSTRUCTIONS."""
    threads = facts.num_warps * spec.warp_size
    per_thread = phase.elements / threads
    if phase.looped:
        count = LOOP_INSTRUCTIONS
        copied = (phase.load_accesses or phase.load_bytes / 4) \
            if pipelined(phase.pipeline_stages, phase.iterations) else 0.0
        return count["chunk"] + per_thread * (
            count["element"] + count["step"] * phase.arithmetic_steps +
            count["expf"] * phase.transcendental_steps) + (
            count["copied_load"] * copied + count["store"] * phase.store_bytes / VECTOR_BYTES +
            count["narrow_run"] * phase.narrow_runs) / threads
    count = TILE_INSTRUCTIONS
    return count["tile"] + per_thread * (count["element"] + count["expf"] *
                                         phase.transcendental_steps +
                                         count["division"] * phase.divisions)


def _phase_terms(phase: PhaseFacts, facts: LaunchFacts, spec: HardwareSpec,
                 sharing: int, cached: CachedRows = CachedRows(),
                 reused: float = 0.0) -> dict[str, float]:
    """Seconds of one phase per tile, by the spec field that charges them (`cached`: what
    a cache gives back, `cached_rows`, which waits for no DRAM round trip;
    `reused`: the launch's share of round trips L2 answers, `reused_share`)."""
    per_thread = phase.elements / (facts.num_warps * spec.warp_size)
    steps = phase.iterations
    issue_steps = _issue_steps(phase)
    # A thread's chain of dependent steps, or the SM's issue rate over every element of the
    # programs resident on it (binds when several programs share an SM, or many warps
    # leave no latency to hide), whichever is slower. A chunk's elements are independent:
    # a thread's chain is one element's steps, and its warp's instruction stream (below)
    # bounds the rest (a fitted count of chains run side by side fit to ~600 beside it).
    serial = 1.0 if phase.looped else per_thread
    chain = {"flop_issue_s": steps * serial * issue_steps * spec.flop_issue_s,
             "transcendental_issue_s": steps * serial * phase.transcendental_steps *
             spec.transcendental_issue_s}
    # The SM's issue slots: a warp's instructions as the binary's chunk issues them, else
    # an estimate, each one a thread-instruction for every lane; and every element's calls.
    instructions = phase.issued or estimated_instructions(phase, facts, spec)
    threads = facts.num_warps * spec.warp_size
    elements = sharing * steps * phase.elements
    throughput = {"sm_flop_s": sharing * steps * threads * instructions * spec.sm_flop_s,
                  "sm_transcendental_s": elements * (phase.transcendental_steps +
                                                     phase.divisions) * spec.sm_transcendental_s}
    # A chunk loop's warp issues its own instructions one after another, besides the SM's
    # limits. One warp to a scheduler cannot hide its dependences: ncu on a layernorm's
    # one-warp plan (4096x4096 bf16, chunks of 2048, spilling) reads 2.75 cycles an
    # instruction, 807 us, where the SM's issue rate alone gives 47 us.
    stream = {"warp_instruction_s": steps * instructions * spec.warp_instruction_s} \
        if phase.looped else {}
    arithmetic = _smooth_max_by_field(chain, throughput, stream)
    if phase.looped and pipelined(phase.pipeline_stages, steps):
        # A pipelined chunk's arithmetic runs while later chunks' copies are in flight.
        parts = _memory_terms(phase, facts, spec, sharing, cached, reused, arithmetic)
    else:  # a tile's arithmetic waits for its loads, an unpipelined chunk's for its waits
        parts = {**_memory_terms(phase, facts, spec, sharing, cached, reused), **arithmetic}
    spilled = spilled_registers(phase, facts, spec)
    spill: dict[str, float] = {}
    if spilled:
        # Every resident thread's words are stored and reloaded through the L1; those it
        # cannot hold wait for L2 (a round trip each, or the SM's rate from L2).
        miss = spill_miss_share(phase, facts, spec)
        moved = sharing * steps * spilled * facts.num_warps * spec.warp_size * 8
        spill = {"spill_s": steps * spilled * spec.spill_s,
                 "spill_bandwidth": _seconds_at(spec.spill_bandwidth, (1 - miss) * moved),
                 **_smooth_max_by_field(
                     {"spill_miss_s": steps * spilled * miss * spec.spill_miss_s},
                     {"sm_bandwidth": _seconds_at(spec.sm_bandwidth, miss * moved)})}
    terms = dict.fromkeys((t.field for t in TERMS), 0.0)
    for field, seconds in itertools.chain(parts.items(), spill.items()):
        terms[field] += seconds
    if phase.transposed:  # every tile element through the SM's shared memory
        terms["layout_convert_s"] += sharing * steps * phase.elements * spec.layout_convert_s
        terms["layout_sync_s"] += steps * spec.layout_sync_s  # its barriers, once a tile
    terms["reduction_s"] += phase.reductions * spec.reduction_s * (1 + math.log2(facts.num_warps))
    terms["row_reduction_s"] += phase.reductions * spec.row_reduction_s * \
        max(1.0, phase.reduced_rows / facts.num_warps)
    # A block scan's carries cross the warps one halving at a time, as a reduction's do.
    terms["scan_chunk_s"] += steps * phase.scans * spec.scan_chunk_s * \
        (1 + math.log2(facts.num_warps))
    return terms


def tile_breakdown(facts: LaunchFacts, spec: HardwareSpec) -> dict[str, float]:
    """Seconds of one tile by the spec field that charges them."""
    phases = facts.phases or (legacy_phase(facts),)
    sharing = programs_per_sm(facts, spec)
    reused = reused_share(facts, spec)
    total = dict.fromkeys((t.field for t in TERMS), 0.0)
    for index, phase in enumerate(phases):
        cached = cached_rows(phase, phases[:index], facts, spec)
        for field, seconds in _phase_terms(phase, facts, spec, sharing, cached, reused).items():
            total[field] += seconds
    return total


def breakdown(facts: LaunchFacts, spec: HardwareSpec) -> dict[str, float]:
    """Seconds per term (keyed by spec field) of the launch: where the predicted time goes.
    When DRAM bandwidth bounds the launch, it is all charged to `mem_bandwidth`."""
    tiles = serial_tiles(facts, spec)
    per_tile = tile_breakdown(facts, spec)
    loop = tiles * sum(per_tile.values())
    dram = dram_bytes(facts, spec) / spec.mem_bandwidth
    terms = {field: tiles * seconds for field, seconds in per_tile.items()}
    if dram > loop:
        terms = dict.fromkeys(terms, 0.0)
        terms["mem_bandwidth"] = dram
    terms["launch_overhead_s"] = spec.launch_overhead_s
    return terms


def predict_seconds(facts: LaunchFacts, spec: HardwareSpec) -> float:
    """The model's time for one launch on `spec` (the formula in this module's docstring)."""
    if facts.blocks_per_sm <= 0:
        return math.inf  # the program cannot be resident at all
    loop = serial_tiles(facts, spec) * sum(tile_breakdown(facts, spec).values())
    return spec.launch_overhead_s + max(loop, dram_bytes(facts, spec) / spec.mem_bandwidth)
