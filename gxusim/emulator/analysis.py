"""Analysis: what an emulated launch's records say. Findings (out of bounds, conflicts,
races, coverage, imbalance), coalescing per access site, occupancy, and the
`LaunchFacts` from which the performance model predicts the launch's time."""
from __future__ import annotations

import functools
import math
from typing import Optional

import numpy as np

from ..findings import Finding
from ..model import core, launch_facts
from ..spec import HardwareSpec
from . import checks, occupancy
from . import dtypes as D
from .arguments import LaunchArguments
from .execution import LaunchRecords
from .report import EmulationReport
from .specialisation import Specialisation


def analyse(report: EmulationReport, compiled: Specialisation, arguments: LaunchArguments,
            records: LaunchRecords, spec: HardwareSpec, compiler_generated: bool,
            n_regs: Optional[int]) -> None:
    """Fill `report` from the records of a finished launch."""
    report.tiles_per_program = [int(t) for t in records.outputs["tiles"]]
    report.findings += find_problems(report, compiled, arguments, records, compiler_generated)
    measure_performance(report, compiled, arguments, records, spec, n_regs)


def find_problems(report: EmulationReport, compiled: Specialisation, arguments: LaunchArguments,
                  records: LaunchRecords, compiler_generated: bool) -> list:
    """Out-of-bounds lanes always; the rest only when accesses were recorded."""
    kir, buffers, name = compiled.kir, arguments.buffers, report.kernel
    found = checks.out_of_bounds(name, records.outputs["oob"], kir.sites, buffers)
    if not compiled.emitter.layout.checks:
        return found
    for rec in records.tracking.values():
        rec.merge()
    stored = [n for n in kir.arg_names if n in kir.stored]
    found += checks.conflicts_and_races(name, records.tracking, buffers, stored)
    found += checks.uncovered(name, records.tracking, buffers, stored, compiler_generated,
                              [n for n in kir.arg_names if n in kir.pointers],
                              checks.written_in_part(kir))
    imbalance = checks.load_imbalance(name, report.tiles_per_program)
    if imbalance is not None:
        found.append(imbalance)
    return found


def sector_traffic(report: EmulationReport, compiled: Specialisation, arguments: LaunchArguments,
                   records: LaunchRecords, spec: HardwareSpec) -> float:
    """DRAM bytes in 32-byte sectors: each site's moved bytes / its coalescing efficiency
    (measured on a sample execution; efficiencies go to `report.coalescing`)."""
    outputs, num_warps = records.outputs, report.num_warps
    traffic = 0.0
    counts = (outputs["lanes"] - outputs["oob"][:, :, 0]).sum(axis=0)  # lanes that moved data
    for k, site in enumerate(compiled.kir.sites):
        eb = D.itemsize(site.elem)
        eff = 1.0
        if outputs["samp_flag"][k]:
            numel = math.prod(site.shape)
            eff = occupancy.sector_efficiency(outputs["samp_off"][k, :numel],
                                              outputs["samp_mask"][k, :numel], site.shape,
                                              arguments.buffers[site.base].base, eb, num_warps,
                                              spec)
            report.coalescing[f"{site.kind} {site.base} ({site.where.split(':')[0]})"] = eff
        traffic += float(counts[k]) * eb / eff
    return traffic


def tile_elements(site_runs: np.ndarray, sites: list, tiles: np.ndarray) -> float:
    """Block elements one tile issues: per access site, the elements its busiest program
    issued (executions x block size, masked lanes included) per tile of that program;
    the largest over sites (a looped reduction's load counts every chunk)."""
    best = 0.0
    for k, site in enumerate(sites):
        issued = site_runs[:, k] * math.prod(site.shape)
        if issued.size == 0:
            continue
        busiest = int(np.argmax(issued))
        best = max(best, float(issued[busiest]) / max(1, int(tiles[busiest])))
    return best


def _constants(arguments: LaunchArguments) -> dict:
    return {name: value for name, (kind, value) in arguments.spec_args.items() if kind == "const"}


def _blocks(arguments: LaunchArguments) -> dict[str, int]:
    """The launch's block sizes, and its chunk loop's pipelining depth (`NUM_STAGES`)."""
    constants = _constants(arguments)
    return {name: int(constants[name]) for name in ("XBLOCK", "YBLOCK", "R0_BLOCK", "NUM_STAGES")
            if isinstance(constants.get(name), int)}


def _element_bytes(arguments: LaunchArguments) -> dict[str, int]:
    return {name: buffer.array.itemsize for name, buffer in arguments.buffers.items()}


def _chunks(arguments: LaunchArguments, blocks: dict) -> int:
    """Reduction chunks one tile walks through (1 unless the reduction is looped)."""
    reduced = arguments.scalars.get("r0_numel", _constants(arguments).get("r0_numel"))
    return max(1, math.ceil(int(reduced) / blocks["R0_BLOCK"])) \
        if reduced is not None and "R0_BLOCK" in blocks else 1


def tile_phases(compiled: Specialisation, arguments: LaunchArguments,
                spec: HardwareSpec) -> tuple:
    """The tile's phases as `launch_facts.launch_phases` reads them from the kernel's source,
    at the block sizes and element sizes of this launch (the same phases the launcher's plan
    gives the cuda target, so both targets are timed by one formula)."""
    blocks = _blocks(arguments)
    return _phases(_source(compiled), tuple(sorted(blocks.items())), _chunks(arguments, blocks),
                   tuple(sorted(_element_bytes(arguments).items())),
                   blocks.get("NUM_STAGES", 1), spec)


@functools.lru_cache(maxsize=1024)
def _phases(source: str, blocks: tuple, chunks: int, element_bytes: tuple, stages: int,
            spec: HardwareSpec) -> tuple:
    """`launch_phases`, memoised: it reads the kernel's source, which each launch of the
    kernel would otherwise parse again."""
    return launch_facts.launch_phases(source, dict(blocks), chunks, dict(element_bytes), stages,
                                      spec)


def _source(compiled: Specialisation) -> str:
    """The kernel's source, then every function it inlined (a scan's combine function), as
    `plan.kernel_source` gives the cuda target's plan."""
    return "\n\n".join(dict.fromkeys(compiled.kir.sources))


def pipeline_buffer_bytes(compiled: Specialisation, arguments: LaunchArguments) -> int:
    """Shared memory a pipelined chunk loop buffers its loads in: num_stages - 1 chunks
    ahead (Triton's async copies), the same bytes the plan sizes depths by; none for a loop
    of one chunk, which Triton does not pipeline (`launch_facts.pipelined`)."""
    blocks = _blocks(arguments)
    stages = blocks.get("NUM_STAGES", 1)
    if not launch_facts.pipelined(stages, _chunks(arguments, blocks)):
        return 0
    return (stages - 1) * launch_facts.chunk_load_bytes(
        _source(compiled), blocks, _element_bytes(arguments))


def measure_performance(report: EmulationReport, compiled: Specialisation,
                        arguments: LaunchArguments, records: LaunchRecords, spec: HardwareSpec,
                        n_regs: Optional[int]) -> None:
    """Traffic, occupancy, `report.facts` and the predicted time."""
    kir, units, num_warps = compiled.kir, compiled.emitter.units, report.num_warps
    programs = math.prod(report.grid)
    report.traffic_bytes = sector_traffic(report, compiled, arguments, records, spec)
    block = max((s.shape for s in kir.sites), key=math.prod, default=())
    regs = occupancy.estimate_registers(occupancy.live_words(units), num_warps, spec, n_regs)
    phases = tile_phases(compiled, arguments, spec)
    smem = occupancy.smem_bytes(units, num_warps) + pipeline_buffer_bytes(compiled, arguments)
    report.occupancy = occupancy.occupancy(spec, num_warps, programs, regs, smem, block)
    if smem > spec.program_smem:  # the GPU would refuse to load it (Triton: OutOfResources)
        report.findings.append(Finding(
            "shared_memory", "error",
            f"a program takes {smem} B of shared memory (its chunks buffered ahead and block "
            f"reductions' scratch); spec {spec.name!r} gives a program {spec.program_smem} B: "
            f"lower num_stages or the blocks", kernel=report.kernel))
    report.facts = launch_facts.LaunchFacts(
        programs=programs, num_warps=num_warps,
        tiles_per_program=max(report.tiles_per_program, default=1),
        tile_elements=tile_elements(records.outputs["site_runs"], kir.sites, records.outputs["tiles"]),
        bytes_moved=report.traffic_bytes, blocks_per_sm=report.occupancy.blocks_per_sm,
        phases=phases, footprint_bytes=sum(buffer.tensor.numel() * buffer.tensor.element_size()
                                           for buffer in arguments.buffers.values()))
    report.predicted_s = core.predict_seconds(report.facts, spec)
