"""Performance model: predicted kernel time from the hardware spec, calibrated on a real GPU.

A GXU kernel is grid-capped: each of its programs loops over tiles, so a launch takes

    time = launch_overhead_s + max(serial_tiles * tile_time, bytes_moved / mem_bandwidth)

(`serial_tiles`: waves x tiles_per_program). A tile is timed per SM by walking its phases
(`phases.kernel_phases`), each a sum of terms where the GPU serialises and a
smooth max (`terms.smooth_max`, the spec's `overlap_norm`) where it overlaps:

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
and what is not modelled: docs/performance-model.md.
"""
from __future__ import annotations

import itertools
import math

from ..spec import HardwareSpec
from . import chunk_loop, pipelined, tile
from .caches import CachedRows, cached_rows, dram_bytes, reused_share, spill_miss_share
from .evidence import estimated_instructions, spilled_registers
from .launch_facts import LaunchFacts, PhaseFacts, legacy_phase
from .launch_facts import pipelined as is_pipelined
from .residency import programs_per_sm, serial_tiles
from .terms import TERMS, seconds_at, smooth_max_by_field


def _issue_steps(phase: PhaseFacts, spec: HardwareSpec) -> float:
    """Dependent arithmetic steps per element, `word_issue_steps` for each 4-byte word it
    moves (broadcast vectors excluded)."""
    words = (phase.load_bytes + phase.store_bytes) / (4 * phase.elements) if phase.elements \
        else 0.0
    return phase.arithmetic_steps + spec.word_issue_steps * words


def phase_terms(phase: PhaseFacts, facts: LaunchFacts, spec: HardwareSpec,
                sharing: int, cached: CachedRows = CachedRows(),
                reused: float = 0.0) -> dict[str, float]:
    """Seconds of one phase per tile, by the spec field that charges them (`cached`: what
    a cache gives back, `cached_rows`, which waits for no DRAM round trip;
    `reused`: the launch's share of round trips L2 answers, `reused_share`)."""
    per_thread = phase.elements / (facts.num_warps * spec.warp_size)
    steps = phase.iterations
    issue_steps = _issue_steps(phase, spec)
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
    # an estimate, each one a thread-instruction for every lane (math calls among them).
    instructions = phase.issued or estimated_instructions(phase, facts, spec)
    threads = facts.num_warps * spec.warp_size
    throughput = {"sm_flop_s": sharing * steps * threads * instructions * spec.sm_flop_s}
    # A chunk loop's warp issues its own instructions one after another, besides the SM's
    # limits. One warp to a scheduler cannot hide its dependences: ncu on a layernorm's
    # one-warp plan (4096x4096 bf16, chunks of 2048, spilling) reads 2.75 cycles an
    # instruction, 807 us, where the SM's issue rate alone gives 47 us.
    stream = {"warp_instruction_s": steps * instructions * spec.warp_instruction_s} \
        if phase.looped else {}
    arithmetic = smooth_max_by_field(spec, chain, throughput, stream)
    if phase.looped and is_pipelined(phase.pipeline_stages, steps):
        # A pipelined chunk's arithmetic runs while later chunks' copies are in flight.
        parts = pipelined.memory_terms(phase, facts, spec, sharing, cached, reused, arithmetic)
    else:  # a tile's arithmetic waits for its loads, an unpipelined chunk's for its waits
        kind = chunk_loop if phase.looped else tile
        parts = {**kind.memory_terms(phase, facts, spec, sharing, cached, reused), **arithmetic}
    spilled = spilled_registers(phase, facts, spec)
    spill: dict[str, float] = {}
    if spilled:
        # Every resident thread's words are stored and reloaded through the L1; those it
        # cannot hold wait for L2 (a round trip each, or the SM's rate from L2).
        miss = spill_miss_share(phase, facts, spec)
        moved = sharing * steps * spilled * facts.num_warps * spec.warp_size * 8
        spill = {"spill_bandwidth": seconds_at(spec.spill_bandwidth, (1 - miss) * moved),
                 **smooth_max_by_field(spec,
                     {"spill_miss_s": steps * spilled * miss * spec.spill_miss_s},
                     {"sm_bandwidth": seconds_at(spec.sm_bandwidth, miss * moved)})}
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
        for field, seconds in phase_terms(phase, facts, spec, sharing, cached, reused).items():
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
