"""Launch facts: what one launch does, in the terms the performance model reads.

`LaunchFacts` hold a launch's grid, residency and traffic; its `PhaseFacts` say what one
tile does phase by phase (`gxusim.model.phases.kernel_phases` read off the kernel's source,
sized at the plan's block sizes by `launch_phases`). The launcher derives them from the plan
(cuda target, predict-only), the emulator from what it counted; `gxusim.model.core` turns
them into time. Sweep rows, calibration samples and ceiling results store them as JSON
(`facts_from_dict` reads them back).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Iterable, Mapping, Optional, Sequence

from .phases import ChainWeights, Phase, kernel_phases, static_blocks
from ..spec import HardwareSpec, spec_value


@dataclasses.dataclass(frozen=True)
class PhaseFacts:
    """One phase of one launch's tile (docs/performance-model.md)."""
    iterations: int  # times the phase runs per tile: a looped reduction's chunks, else 1
    elements: float  # block elements one iteration works on
    load_bytes: float  # bytes one iteration loads (broadcast vectors excluded: cached)
    store_bytes: float  # bytes one iteration stores
    load_depth: int  # loads in a dependent row (0: no loads, 1: plain, 2: a gather)
    arithmetic_steps: float = 0.0  # per element, along the longest dependency chain
    transcendental_steps: float = 0.0  # libdevice calls on that chain, in expf's
    reductions: int = 0  # block reductions per tile (cross-warp exchanges)
    scans: int = 0  # block scans per iteration
    # accesses disagree on the contiguous axis (loads and stores: a transpose; a gather's
    # table rows and its indices): Triton converts the block's layout in shared memory
    transposed: bool = False
    looped: bool = False  # a chunk loop (loads serialised per chunk) rather than tile level
    pipeline_stages: int = 1  # a chunk loop's software-pipelining depth (stages - 1 ahead)
    sector_bytes: float = 0.0  # load + store bytes in whole 32-byte sectors (0: unknown, as moved)
    load_accesses: float = 0.0  # load instructions of all threads (16-byte vectors where the
    # layout allows, narrower where the contiguous run is shorter; 0: unknown, as 4-byte words)
    # Contiguous runs the loads touch (a column chunk: one per row) shorter than an L1 line
    # (each a line partly used), and those shorter than a 16-byte vector (copied through L1)
    short_runs: float = 0.0
    narrow_runs: float = 0.0
    # Of a narrow run's 32-byte sector, the share that neighbouring tiles' runs read (a run
    # along a tile axis: a one-column chunk's row is continued by the next columns' tiles,
    # which other programs run at about the same time); 0 where the runs lie apart
    narrow_shared_share: float = 0.0
    carried: int = 0  # block values a chunk loop carries across chunks (its accumulators)
    divisions: float = 0.0  # divisions per element on the chain (MUFU reciprocals)
    reduced_rows: int = 1  # rows a block reduction reduces side by side (XBLOCK x YBLOCK)
    # What a chunk costs in the compiled machine code (`gxusim.model.machine_code`), where a
    # binary was read: an unpipelined loop's memory waits, or a tile's in a kernel without
    # chunk loops (0: estimated), and the 4-byte words a chunk spills to local memory and
    # reloads (None: from ptxas's spill count).
    round_trips: float = 0.0
    # Besides them, a tile's waits for loads in flight across a block reduction
    # (layernorm's weight, issued amid the row's reduction): what the reduction leaves of
    # the round trip, charged as an L2 one
    late_round_trips: float = 0.0
    spilled_words: Optional[float] = None
    issued: Optional[float] = None  # instructions a warp issues per chunk (None: estimated)
    # Of load_bytes, what every tile loads alike (indexed by no tile axis: a layernorm's
    # weight and bias, read again for every row): a cache's after the first tile
    tile_invariant_bytes: float = 0.0
    # Of load_bytes, what the loads ask the L1 to give up first (`evict_first`: a value's
    # last read), which leaves the lines it holds for others (spilled words)
    evict_first_bytes: float = 0.0
    # ... and what they ask L2 to keep (`evict_last`, of buffers the kernel reads no later
    # evict_first): lines that outlast normal traffic, a cache flush between launches too
    evict_last_bytes: float = 0.0


class Phases(list):
    """A tile's phases: a list, so that facts written to JSON and read back (sweep rows,
    calibration samples) compare equal to the facts they were made from, but read-only and
    hashable, as frozen facts need."""

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(tuple(self))

    def __reduce__(self) -> tuple:
        return (Phases, (list(self),))

    def _read_only(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("LaunchFacts.phases is read-only")

    append = extend = insert = remove = pop = clear = sort = reverse = _read_only  # type: ignore
    __setitem__ = __delitem__ = __iadd__ = __imul__ = _read_only  # type: ignore


@dataclasses.dataclass(frozen=True)
class LaunchFacts:
    """What the model needs to know about one launch, whoever found it out.

    The launcher derives them from the launch plan, the argument sizes and the kernel's
    source (cuda target, predict-only; `LaunchPlan.facts`); the emulator counts them while
    it runs the kernel (its sector traffic, its occupancy with registers and shared memory,
    the block elements each tile really issued). Either way `predict_seconds` is the one
    function that turns them into time. `phases` (from `launch_phases`) say how a tile
    spends it; facts without them are timed from the per-element counts alone.
    """
    programs: int
    num_warps: int
    tiles_per_program: int  # tile-loop iterations of the busiest program
    tile_elements: float  # block elements one tile issues, all of a looped reduction's chunks
    bytes_moved: float  # DRAM traffic (the emulator's 32-byte sectors; else tensor sizes)
    blocks_per_sm: int  # resident programs per SM (occupancy)
    flops_per_element: float = 0.0  # arithmetic per tile element (gxusim.model.kernel_work)
    transcendentals_per_element: float = 0.0
    scan_chunks: int = 0  # serial scan chunks per tile (0: no scan)
    phases: Sequence = ()  # PhaseFacts of one tile, in program order (a `Phases`)
    # 4-byte words per thread the compiled kernel keeps in local memory (ptxas's spills,
    # read off the binary the cuda target launched); None where nothing was compiled (the
    # emulator, predict-only): the model then estimates them (`spilled_registers`).
    compiled_spills: Optional[float] = None
    # Bytes of the distinct data the launch's arguments hold (0: unknown): with its loads'
    # requests it says how often a line is asked for again (`reused_share`).
    footprint_bytes: float = 0.0

    def __post_init__(self) -> None:
        # Facts read back from JSON carry their phases as lists of dicts.
        object.__setattr__(self, "phases", Phases(
            p if isinstance(p, PhaseFacts) else PhaseFacts(**p) for p in self.phases or ()))

    def elements_per_thread(self, spec: HardwareSpec) -> float:
        return self.tile_elements / (self.num_warps * spec.warp_size)


def launch_phases(source: str, blocks: Mapping[str, int], chunks: int,
                  pointer_bytes: Mapping[str, int] | None = None, stages: int = 1,
                  spec: HardwareSpec | None = None) -> tuple:
    """The `PhaseFacts` of one tile of a kernel launched with these block sizes (the plan's
    meta; block sizes the kernel's body fixes win), reduction chunks per tile (1 unless
    looped) and chunk-loop pipelining depth, its chains weighed by the spec's estimates
    (`ChainWeights`) and its accesses cut into the spec's vectors, sectors and lines
    (without a spec: the fields' defaults, the H200's).
    Element sizes come from the signature in the source's decorator, or `pointer_bytes`
    (pointer argument name -> bytes per element) when given (the emulator knows them)."""
    phases, size = sized_phases(source, blocks, pointer_bytes, ChainWeights.of(spec))
    block = math.prod(size.values())
    # A buffer the kernel reads again evict_first (Inductor's last read of a value read
    # twice) loses its evict_last lines' hold: on the H200 an evict_first read of 1-64 MB
    # read evict_last before leaves nothing for the next launch (benchmarks/l2_kept.py).
    released = frozenset(a.pointer for phase in phases for a in phase.accesses
                         if a.eviction == "evict_first")
    units = MemoryUnits(*(spec_value(spec, name)
                          for name in ("vector_bytes", "sector_bytes", "l1_line_bytes")))
    return tuple(_phase_facts(phase, size, block, chunks, stages, units, released)
                 for phase in phases)


@dataclasses.dataclass(frozen=True)
class MemoryUnits:
    """The spec's units an access is cut into: vectors (one thread's widest access),
    sectors (what DRAM and L2 move) and L1 lines, in bytes."""
    vector: int
    sector: int
    l1_line: int


def pipelined(stages: int, chunks: int) -> bool:
    """Whether a chunk loop of `chunks` chunks a tile at this depth is software pipelined:
    Triton folds a one-trip loop before its pipeliner runs (a row sum's one 4096-column chunk
    compiles alike at num_stages 4 and 1; timed as pipelined: 35-67% fast on 2-4 warps)."""
    return stages > 1 and chunks > 1


def chunk_load_bytes(source: str, blocks: Mapping[str, int],
                     pointer_bytes: Mapping[str, int] | None = None) -> int:
    """Bytes one chunk of the kernel's largest chunk loop loads, each load at the shape of
    the value it gives (`Access.value_axes`: a broadcast vector loaded under the chunk's mask
    is a whole chunk): what each stage of a pipelined chunk loop buffers in shared memory
    (0 without a chunk loop). The plan sizes pipelining depths by it, the emulator's
    occupancy counts it."""
    phases, size = sized_phases(source, blocks, pointer_bytes)
    return max((sum(math.prod(size[axis] for axis in access.value_axes) * access.element_bytes
                    for access in phase.accesses if not access.store)
                for phase in phases if phase.looped), default=0)


def sized_phases(source: str, blocks: Mapping[str, int],
                 pointer_bytes: Mapping[str, int] | None,
                 weights: ChainWeights = ChainWeights.of()) -> tuple[tuple, dict[str, int]]:
    """The kernel's phases (with the given element sizes) and its block size per tile axis
    (block sizes the kernel's body fixes win); no phases for a source that is not a
    generated kernel's (a hand-written kernel, a test's)."""
    blocks = {**blocks, **static_blocks(source)}
    size = {"x": blocks.get("XBLOCK", 1), "y": blocks.get("YBLOCK", 1),
            "r": blocks.get("R0_BLOCK", 1)}
    try:
        phases = kernel_phases(source, weights)
    except Exception:  # noqa: BLE001 - timed from the per-element counts alone
        return (), size
    if pointer_bytes:
        phases = tuple(dataclasses.replace(phase, accesses=tuple(
            dataclasses.replace(a, element_bytes=pointer_bytes.get(a.pointer, a.element_bytes))
            for a in phase.accesses)) for phase in phases)
    return phases, size


def _phase_facts(phase: Phase, size: Mapping[str, int], block: int, chunks: int,
                 stages: int, units: MemoryUnits, released: frozenset = frozenset()
                 ) -> PhaseFacts:
    def elements(axes: Iterable[str]) -> int:
        return math.prod(size[a] for a in axes)

    def moved(access: Any) -> float:  # its distinct addresses' bytes (neighbours may share)
        return elements(access.axes) * access.element_bytes / math.prod(
            min(size[axis], n) for axis, n in access.repeats)
    streamed = [a for a in phase.accesses if not a.broadcast]
    loads = [a for a in streamed if not a.store]

    def run(access: Any) -> int:
        """Bytes of one contiguous run of the access (along its unit-stride axes; a single
        element where none is known)."""
        return math.prod(size[a] for a in access.unit_axes & access.axes) * access.element_bytes

    def accesses(access: Any) -> float:
        """Load instructions of the whole block: each run in vectors of at most a vector."""
        return moved(access) / min(units.vector, run(access))

    def sectors(access: Any) -> float:
        """Bytes of the sectors an access touches: each run rounded up to whole sectors
        (an access without a known unit-stride axis: as many bytes as it moves)."""
        length = run(access)
        whole = math.ceil(length / units.sector) * units.sector if access.unit_axes else length
        return moved(access) * whole / length

    def shared_share(access: Any) -> float:
        """The share of the access's sectors beside its run, where tiles continue it."""
        along_tiles = access.unit_axes & access.axes & {"x", "y"}
        return max(0.0, 1 - run(access) / units.sector) if along_tiles else 0.0

    narrow = [(a, moved(a) / run(a)) for a in loads if run(a) < units.vector]
    # A gather whose table rows run along another axis than its indices reads them
    # vectorised along that axis, where the block has more than one element on it: the
    # indices are converted to its layout in shared memory. The gxu embedding mean (128
    # x 64 int64 ids a chunk): 64 KB of shared memory, 64 stores and 16 loads a thread,
    # 8 barriers (H200 binary); the seed's, one table column a tile, converts nothing.
    gather_converts = phase.gathers_across and any(
        size[axis] > 1 for a in loads if a.depth > 1 for axis in a.unit_axes & a.axes)
    return PhaseFacts(
        iterations=chunks if phase.looped else 1,
        elements=block if phase.looped else elements(phase.axes),
        load_bytes=float(sum(moved(a) for a in loads)),
        store_bytes=float(sum(moved(a) for a in streamed if a.store)),
        load_depth=max([a.depth for a in phase.accesses if not a.store], default=0),
        arithmetic_steps=phase.arithmetic_steps, transcendental_steps=phase.transcendental_steps,
        reductions=phase.reductions, scans=phase.scans,
        transposed=phase.transposed or gather_converts,
        reduced_rows=size["x"] * size["y"] if phase.reductions else 1,
        looped=phase.looped, pipeline_stages=stages if phase.looped and pipelined(
            stages, chunks) else 1,
        carried=phase.carried, divisions=phase.divisions,
        sector_bytes=float(sum(sectors(a) for a in streamed)),
        load_accesses=float(sum(accesses(a) for a in loads)),
        short_runs=float(sum(moved(a) / run(a) for a in loads if run(a) < units.l1_line)),
        narrow_runs=float(sum(runs for _, runs in narrow)),
        narrow_shared_share=sum(runs * shared_share(a) for a, runs in narrow) /
        max(1.0, sum(runs for _, runs in narrow)),
        tile_invariant_bytes=float(sum(moved(a) for a in loads if not a.axes & {"x", "y"})),
        evict_first_bytes=float(sum(moved(a) for a in loads if a.eviction == "evict_first")),
        evict_last_bytes=float(sum(moved(a) for a in loads if a.eviction == "evict_last"
                                   and a.pointer not in released)))


def legacy_phase(facts: LaunchFacts) -> PhaseFacts:
    """Facts without phases (stored before phases existed, or the emulator's counts): one
    tile-level phase over the whole tile, its traffic the launch's share per tile, every
    operation on the chain (an upper bound)."""
    tiles = max(1, facts.programs * max(1, facts.tiles_per_program))
    per_tile = facts.bytes_moved / tiles
    return PhaseFacts(1, facts.tile_elements, per_tile / 2, per_tile / 2,
                      1 if facts.bytes_moved else 0, facts.flops_per_element,
                      facts.transcendentals_per_element, 0, facts.scan_chunks)


def facts_from_dict(data: Mapping[str, Any]) -> LaunchFacts:
    """A `LaunchFacts` from its `dataclasses.asdict` form (sweep, calibration and ceiling
    JSON); unknown keys are ignored, so older files still load."""
    known = {f.name for f in dataclasses.fields(LaunchFacts)}
    return LaunchFacts(**{k: v for k, v in data.items() if k in known})
