"""What a kernel's compiled binary tells the performance model about one launch.

The plan's facts come from the kernel's source, its block sizes and the spec. Where the
kernel was compiled (the cuda target launches it; calibration compiles each sampled config;
predict-only compiles it on the machine at hand for the spec's `ptxas_capability`), the
binary settles what the source cannot:

* ptxas's spilled registers (`LaunchFacts.compiled_spills`);
* how many programs fit on an SM beside each other with its registers and shared memory
  (`LaunchFacts.blocks_per_sm`, by `gxusim.model.residency`);
* how many memory waits a chunk of each unpipelined chunk loop, or a tile of a kernel
  without chunk loops, costs a thread (`PhaseFacts.round_trips`, `late_round_trips`), how
  many words a chunk of any chunk loop (a persistent reduction: a tile) spills to local
  memory and reloads (`PhaseFacts.spilled_words`), and how many instructions a warp issues
  a chunk, or a tile (`PhaseFacts.issued`), all read from its SASS by `gxusim.model.machine_code`.
"""
from __future__ import annotations

import dataclasses

from ..spec import HardwareSpec
from ..triton_launch import Resources
from .launch_facts import LaunchFacts, PhaseFacts, pipelined
from .machine_code import ChunkLoop, chunk_code
from .residency import residency

# The phase fields `with_machine_code` sets from a binary (the rest come from the source).
MACHINE_CODE_FIELDS = ("round_trips", "late_round_trips", "spilled_words", "issued")


def with_binary(facts: LaunchFacts, spec: HardwareSpec, binary: Resources) -> LaunchFacts:
    """A plan's facts refined by what its compiled binary says (see the module docstring).

    Residency: on the 16-SM partition the gxu policy's 16-warp kernels of many elements a
    thread take more than half the register file, so one program is resident per SM, not
    the spec's two: tanh_gelu 1,483 us measured, 1,187 predicted with two programs sharing
    each SM, 1,496 with one (and the mul_relu, transpose, mlp and softmax kernels alike)."""
    blocks = residency(spec, facts.num_warps, binary.regs_per_thread, binary.smem_per_block)[0]
    return dataclasses.replace(facts, compiled_spills=binary.spills, blocks_per_sm=blocks,
                               phases=with_machine_code(facts, spec, binary))


def with_machine_code(facts: LaunchFacts, spec: HardwareSpec, binary: Resources) -> tuple:
    """The facts' phases, each chunk loop with loads given what a chunk costs in its
    machine code: its memory waits (unpipelined loops: a pipelined loop's copies are not
    waited for one by one) and its spilled words; in a kernel without chunk loops, the
    loading phase given the tile loop's waits, and a persistent reduction's phase the words
    its tile loop spills (phases as they were where the binary was not disassembled, or a
    loop was not found in it)."""
    looped = [i for i, phase in enumerate(facts.phases) if phase.looped and phase.load_bytes]
    if binary.code is None:
        return tuple(facts.phases)
    if not any(phase.looped for phase in facts.phases):
        # A persistent reduction spills around its reductions: the tile loop's own words.
        # A tile's loads wait as often as the tile loop's body waits: ptxas issues them in
        # as many batches as its registers hold (row_sum 1M x 128 on 2 warps, 16 rows a
        # warp: 5 waits, 2.4 us a tile; 8 rows a warp: 1 wait, 0.57 us). A wait for a load
        # in flight across a block reduction is mostly spent reducing (`late_round_trips`).
        # The tile's instructions are the body's: the softmax 65536x1024 on 16 warps, 32
        # rows a tile, issues 1,860 a warp (ncu: 29,780 a tile), 3.4x the estimate.
        body = binary.code.tile_body
        late = body.waits_across_barrier
        alone = sum(1 for phase in facts.phases if phase.load_bytes) == 1

        def refined(phase: PhaseFacts) -> PhaseFacts:
            if phase.reductions:
                phase = dataclasses.replace(phase, spilled_words=body.local_words)
            if alone and phase.load_bytes:
                phase = dataclasses.replace(phase, round_trips=body.round_trips - late,
                                            late_round_trips=late,
                                            issued=body.instructions or None)
            return phase
        return tuple(map(refined, facts.phases))
    if not looped:
        return tuple(facts.phases)
    threads = facts.num_warps * spec.warp_size
    found = chunk_code(binary.code, [
        ChunkLoop(facts.phases[i].load_accesses / threads, facts.phases[i].iterations,
                  facts.phases[i].store_bytes > 0,
                  estimated_instructions(facts.phases[i], facts, spec)) for i in looped])
    phases = list(facts.phases)
    for i, chunk in zip(looped, found):
        if chunk is not None:
            waits = chunk.round_trips if phases[i].pipeline_stages == 1 else 0.0
            phases[i] = dataclasses.replace(phases[i], round_trips=waits,
                                            spilled_words=chunk.local_words,
                                            issued=chunk.instructions or None)
    return tuple(phases)


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
    the thread's share of the chunk, spec.live_per_carried of them with the update's
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
    return max(0.0, per_thread * phase.carried * spec.live_per_carried -
               register_budget(facts, spec))


def estimated_instructions(phase: PhaseFacts, facts: LaunchFacts, spec: HardwareSpec) -> float:
    """Instructions a warp issues per iteration of a phase where no binary says, by the
    spec's estimates: a chunk loop's (`loop_*instructions`), a tile's
    (`tile_*instructions`)."""
    threads = facts.num_warps * spec.warp_size
    per_thread = phase.elements / threads
    if phase.looped:
        copied = (phase.load_accesses or phase.load_bytes / 4) \
            if pipelined(phase.pipeline_stages, phase.iterations) else 0.0
        return spec.loop_instructions + per_thread * (
            spec.loop_element_instructions +
            spec.loop_step_instructions * phase.arithmetic_steps +
            spec.loop_expf_instructions * phase.transcendental_steps) + (
            spec.loop_copied_load_instructions * copied +
            spec.loop_store_instructions * phase.store_bytes / spec.vector_bytes +
            spec.loop_narrow_run_instructions * phase.narrow_runs) / threads
    return spec.tile_instructions + per_thread * (
        spec.tile_element_instructions +
        spec.tile_expf_instructions * phase.transcendental_steps +
        spec.tile_division_instructions * phase.divisions)
