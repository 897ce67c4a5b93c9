"""What a kernel's compiled binary tells the performance model about one launch.

The plan's facts come from the kernel's source, its block sizes and the spec. Where the
kernel was compiled (the cuda target launches it; calibration compiles each sampled config;
predict-only compiles it on the machine at hand for the spec's `ptxas_capability`), the
binary settles what the source cannot:

* ptxas's spilled registers (`LaunchFacts.compiled_spills`);
* how many programs fit on an SM beside each other with its registers and shared memory
  (`LaunchFacts.blocks_per_sm`, by `gxusim.residency`);
* how many memory waits a chunk of each unpipelined chunk loop, or a tile of a kernel
  without chunk loops, costs a thread (`PhaseFacts.round_trips`, `late_round_trips`), how
  many words a chunk of any chunk loop (a persistent reduction: a tile) spills to local
  memory and reloads (`PhaseFacts.spilled_words`), and how many instructions a warp issues
  a chunk, or a tile (`PhaseFacts.issued`), all read from its SASS by `gxusim.machine_code`.
"""
from __future__ import annotations

import dataclasses

from .machine_code import ChunkLoop, chunk_code
from .launch_facts import LaunchFacts, PhaseFacts
from .perf_model import estimated_instructions
from .residency import residency
from .spec import HardwareSpec
from .triton_launch import Resources


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
