"""Launch-parameter heuristics as pluggable policies, and the spec clamp every choice passes.

A policy answers the seed's four questions (`select_xblock`, `select_num_warps`,
`get_grid`, `select_reduction`) plus `select_tile_2d` for 2D tilings. A policy that wants
to see the kernel answers instead one question per kernel kind (`choose_pointwise`,
`choose_tile_2d`, `choose_reduction`), which receives a `KernelQuestion`: the kernel's
traits (`gxusim.traits`), its sizes, the legal configs and the performance model's time
for any of them; answering None falls back to the four questions. Policies shipped:

* `"seed"`: the seed's GXU formulas (chapter 10, section 8), reproduced faithfully,
  including its hard-coded 32-program grid and [128, 1024] XBLOCK clamp.
* `"gxu"` (default): spec-driven rules sized from the H200's capped ceiling, read against
  the kernel's traits: where the rules' tile would hold more registers a thread than fit
  (a kernel of many streams and live values), the legal config the performance model
  predicts fastest among those that fit.

Policies only answer questions; `plan.py` turns the answers into a launch plan and passes
each through the spec clamp. A policy that chooses by measuring (autotune, `autotune.py`)
overrides `search`. The registry of names is `policies.py`.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Callable, Optional, Sequence, TypeVar

import torch

from gxusim.spec import HardwareSpec, current_spec
from gxusim.traits import KernelTraits


def next_power_of_2(n: int) -> int:
    return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclasses.dataclass(frozen=True)
class ReductionConfig:
    xblock: int  # rows per tile
    rblock: int  # reduction chunk (ignored by persistent reductions, whose RBLOCK is static)
    num_warps: int
    num_stages: int = 1  # chunks in flight in a looped reduction's chunk loop (1: one at a time)


@dataclasses.dataclass(frozen=True)
class LaunchConfig:
    """A policy's answer for one kernel: its block sizes (those the kernel takes as
    parameters: XBLOCK, YBLOCK, R0_BLOCK), warps, and chunk-loop pipelining depth (None:
    Triton's default; only kernels with pipelined chunk loops take one)."""
    blocks: dict[str, int]
    num_warps: int
    num_stages: Optional[int] = None


@dataclasses.dataclass(frozen=True)
class KernelQuestion:
    """What a per-kind question receives: the kernel as code generation described it."""
    name: str
    kind: str  # pointwise, pointwise_2d, persistent_reduction, looped_reduction,
    #            column_reduction, gather_reduction, scan
    traits: Optional[KernelTraits]  # None for a hand-written kernel
    numels: dict[str, int]
    dtype: torch.dtype
    spec: HardwareSpec
    candidates: Callable[[], Sequence[LaunchConfig]]  # every legal config (autotune's space)
    predict: Callable[[LaunchConfig], float]  # the performance model's seconds for one
    rules: Callable[[], Optional[LaunchConfig]] = lambda: None  # its four answers' config
    static_blocks: dict[str, int] = dataclasses.field(default_factory=dict)  # fixed in its
    #   code (a persistent reduction's R0_BLOCK): a tile is these times the config's blocks
    spills: Callable[[LaunchConfig], Optional[int]] = lambda config: None  # 4-byte words a
    #   thread spills at a config as ptxas compiles it for the spec (None: not compiled here)


Plan = TypeVar("Plan")


class Heuristics:
    """Base class for launch policies. Subclass and pass an instance to `gxusim.use_heuristics`.

    `spec` is the active hardware spec at the time of the call, for policies that use it.
    For 2D and reduction kernels the tile space is flattened: `get_grid(n_tiles, 1)`.
    """

    name = "custom"

    def search(self, candidates: Callable[[], Sequence[Plan]],
               time_plan: Optional[Callable[[Plan], float]], key: str,
               start: Optional[Callable[[], Plan]] = None) -> Optional[Plan]:
        """A plan chosen by measuring `candidates()` with `time_plan` (a `plan.PlanTimer`:
        `time_plan(plan)` seconds, `time_plan.compile_ahead(plans)` to build a batch at
        once), or None to plan from the four answers. `key` names the kernel, sizes, dtype
        and spec, for caching; `start()` is the plan this policy's answers give (where a
        search may begin)."""
        return None

    def __init__(self, spec: HardwareSpec | None = None) -> None:
        self.spec = spec

    # -- questions that see the kernel: None falls back to the seed's questions below ----
    def choose_pointwise(self, kernel: KernelQuestion) -> Optional[LaunchConfig]:
        """A 1D pointwise kernel's config."""
        return None

    def choose_tile_2d(self, kernel: KernelQuestion) -> Optional[LaunchConfig]:
        """A pointwise kernel tiled in x and y (a transpose)."""
        return None

    def choose_reduction(self, kernel: KernelQuestion) -> Optional[LaunchConfig]:
        """A reduction or scan (`kernel.kind` says which)."""
        return None

    # -- the seed's questions -------------------------------------------------------------
    def select_xblock(self, numel: int, dtype: torch.dtype) -> int:
        raise NotImplementedError

    def select_num_warps(self, xblock: int) -> int:
        raise NotImplementedError

    def get_grid(self, numel: int, xblock: int) -> tuple[int, ...]:
        raise NotImplementedError

    def select_reduction(self, xnumel: int, rnumel: int, dtype: torch.dtype) -> ReductionConfig:
        raise NotImplementedError

    def select_column_reduction(self, xnumel: int, rnumel: int, dtype: torch.dtype
                                ) -> ReductionConfig:
        """A reduction whose loads are contiguous along x, across the rows of a tile, not
        along the reduced axis (a sum over dim 0 of a row-major tensor): coalescing needs
        wide tiles in x. By default the same answer as `select_reduction`."""
        return self.select_reduction(xnumel, rnumel, dtype)

    def select_one_pass_reduction(self, xnumel: int, rnumel: int, dtype: torch.dtype
                                  ) -> ReductionConfig:
        """A looped reduction that reads each row once, in one chunk loop (a sum, a max, a
        mean; not softmax or layernorm, whose later loops re-read the rows): its chunks can
        stream back to back, so deep pipelining (`ReductionConfig.num_stages`) pays. By
        default the same answer as `select_reduction`."""
        return self.select_reduction(xnumel, rnumel, dtype)

    def select_gather_reduction(self, xnumel: int, rnumel: int, dtype: torch.dtype
                                ) -> ReductionConfig:
        """A one-pass reduction of gathered rows (an embedding bag: each chunk loads indices,
        then the table rows they name, along another axis). By default the same answer as
        `select_one_pass_reduction`."""
        return self.select_one_pass_reduction(xnumel, rnumel, dtype)

    def select_tile_2d(self, xnumel: int, ynumel: int, dtype: torch.dtype) -> tuple[int, int]:
        """(XBLOCK, YBLOCK) for 2D pointwise kernels: a square-ish split of select_xblock's tile."""
        tile = self.select_xblock(xnumel * ynumel, dtype)
        xblock = min(next_power_of_2(xnumel), max(1, next_power_of_2(math.isqrt(tile))))
        yblock = min(next_power_of_2(ynumel), max(1, tile // xblock))
        return xblock, yblock


class SeedHeuristics(Heuristics):
    """The seed's `GXUTritonHeuristics`, constant for constant."""

    name = "seed"
    MAX_GRID_SIZE = 32
    MAX_NUM_WARPS = 16
    REDUCTION_BLOCKS = (128, 256, 512)  # seed 6.1: reductions favour small blocks

    def select_xblock(self, numel: int, dtype: torch.dtype) -> int:
        min_xblock = (numel + 31) // 32
        xblock = 2 ** math.ceil(math.log2(max(min_xblock, 128)))
        return max(min(xblock, 1024), 128)

    def select_num_warps(self, xblock: int) -> int:
        min_warps = (xblock + 31) // 32
        num_warps = 2 ** math.ceil(math.log2(min_warps))
        return min(num_warps, self.MAX_NUM_WARPS)

    def get_grid(self, numel: int, xblock: int) -> tuple[int, ...]:
        total_tiles = (numel + xblock - 1) // xblock
        return (min(total_tiles, self.MAX_GRID_SIZE),)

    def select_reduction(self, xnumel: int, rnumel: int, dtype: torch.dtype) -> ReductionConfig:
        # The seed gives reductions only "blocks of 128-512, at least 4 warps" (6.1, 3):
        # the largest candidate the row can fill, one row per tile.
        rblock = max([b for b in self.REDUCTION_BLOCKS if b <= next_power_of_2(rnumel)]
                     or [self.REDUCTION_BLOCKS[0]])
        return ReductionConfig(1, rblock, max(4, self.select_num_warps(rblock)))


def _distance(config: LaunchConfig, other: LaunchConfig) -> float:
    """How far apart two configs' blocks and warps are, in doublings."""
    pairs = [(config.blocks.get(name, 1), other.blocks.get(name, 1))
             for name in set(config.blocks) | set(other.blocks)]
    pairs.append((config.num_warps, other.num_warps))
    return sum(abs(math.log2(a / b)) for a, b in pairs)


class GXUHeuristics(Heuristics):
    """gxusim's default: big tiles under a capped grid, everything derived from the spec.

    The sizes come from the capped-ceiling search on an H200 (`benchmarks/bench_ceiling.py`,
    docs/gpu-measurements.md): with 32 programs each program must keep a lot of memory in
    flight, so the fastest legal configs were the largest tiles with 16 warps: 32K-element
    pointwise tiles, 128x128 transpose tiles, 16 whole rows for 1024-wide softmax rows
    (whole rows want 32K-element tiles, at most MAX_ROWS rows).

    Looped reductions depend on how often they read a row:

    * once, in one chunk loop (sums, max; `select_one_pass_reduction`, and column sums): the
      loop is pipelined CHUNK_STAGES deep (Triton keeps 3 chunks' loads in flight) with
      64 KB chunks of as many rows as a tile may hold. Unpipelined, the same kernels'
      configs were erratic (row sum 32768 x 4096 fp32: 0.4-0.6 of the best for most, a few
      isolated ones at 0.87-1.0); pipelined, time falls smoothly with the chunk, and 128 x
      128 fp32 (128 x 256 bf16) is 0.99-1.00 of the ceiling, 3.25 TB/s;
    * several times (softmax, layernorm: later loops re-read the rows from L2): not
      pipelined (3-4 stages made them 20-60% slower), MULTI_PASS_TILE-element tiles of
      MULTI_PASS_ROW_BYTES of each row (layernorm 4096 x 4096: 32 x 128 fp32 and 16 x 256
      bf16 at 0.99-1.00 of the ceiling, in two runs; their neighbours 0.8-0.9).

    Rows of 32K elements and more are walked one row per tile in 8K-element chunks, one
    long contiguous stream (2048 x 32768 softmax: 441 us against 529 us for 64 x 256); where
    a program has only a few rows (at most 8), they share its tile side by side, so the
    programs finish together.
    Column reductions (loads contiguous along x) take 128 columns per tile.

    A one-pass reduction pipelines its chunk loop only where each row has at least twice
    as many chunks as stages (`_stages`), and no reduction pipelines where a load that moves
    along the reduced axis has no unit stride (`_may_pipeline`, from the traits).

    The rules are read against the kernel's traits (`choose_*`): where the rules' tile would
    spill, holding more registers a thread than the spec's `register_budget` at its warps
    (each element's loaded words and a looped reduction's accumulators, estimated by
    `registers_per_thread` and, where the estimate is close to the budget, counted in the
    binary ptxas makes of it), the legal config the performance model predicts fastest
    among those that do not spill (and that the pipelining rules allow) is taken instead.

    A 2D tile (a transpose) is sized by its loads first: halved until what they stream
    fits a share of the L1 a program has (`_within_l1`).

    Where the tiles leave more than a tenth of the programs idle in their last round (4608
    rows in 128-row tiles on 32 programs: a second round of 4 tiles), the model weighs the
    tile against its halvings (`_balanced`).

    Gathers reduced in one pass (embedding bags) are not pipelined: a pipelined chunk loop
    reads its indices from their copies in the copies' layout, so each thread loads the
    table element its own index names, where unpipelined Triton first rearranges the index
    block to the rows' layout and reads them whole (embedding sum of 4096 x 256 token ids,
    H200: 280 us at GATHER_ROWS rows of GATHER_CHUNK on GATHER_WARPS warps, the best of 34
    plans sampled, against 833 us pipelined 128 x 128 on 16 warps; 1.9x on a table too big
    for L2, 3-4.6x on 16 SMs).
    """

    name = "gxu"
    MAX_TILE_ELEMENTS = 32 * 1024  # pointwise: the best capped tile measured, fp32 and bf16
    MAX_TILE_2D = 128 * 128  # 2D tiles: larger ones spill (128 elements per thread at 16 warps)
    MIN_XBLOCK = 128
    TILES_PER_PROGRAM = 2
    ELEMENTS_PER_WARP = 256  # 8 elements per lane: wide vector loads, 16 warps at 4096+
    # Reductions: rows up to this short are whole in one chunk (Inductor makes them
    # persistent, R0_BLOCK fixed in the kernel); a tile of them holds this many elements.
    WHOLE_ROW = 1024
    WHOLE_ROW_TILE = 32 * 1024
    # Longer rows are walked in chunks, a tile of up to MAX_ROWS rows.
    MAX_ROWS = 128
    MIN_CHUNK = 64
    # Multi-pass: MULTI_PASS_ROW_BYTES of each row a chunk, MULTI_PASS_TILE elements a tile.
    MULTI_PASS_ROW_BYTES = 512
    MULTI_PASS_TILE = 4 * 1024
    # One pass (and column reductions): chunks of up to STREAM_CHUNK_BYTES, CHUNK_STAGES deep,
    # so that the CHUNK_STAGES - 1 chunks in flight fit in a program's share of the SM's
    # shared memory (`_stream_chunk_elements`).
    STREAM_CHUNK_BYTES = 64 * 1024
    CHUNK_STAGES = 4
    # Rows at least this long: one row per tile, in LONG_ROW_CHUNK-element chunks.
    LONG_ROW = 32 * 1024
    LONG_ROW_CHUNK = 8 * 1024
    LONG_ROW_MIN_RUN = 1024  # elements of each row a long-row chunk reads at least
    # Column reductions: up to COLUMNS columns per tile, COLUMN_ELEMENTS_PER_THREAD elements a
    # thread (128 x 128 fp32: 8 warps 1.00 of the ceiling, 16 warps 0.95).
    COLUMNS = 128
    COLUMN_ELEMENTS_PER_THREAD = 64
    # Gathers: up to GATHER_ROWS rows of GATHER_CHUNK indices a tile, unpipelined.
    GATHER_ROWS = 128
    GATHER_CHUNK = 64
    GATHER_WARPS = 4

    # A 2D tile's streamed loads take at most this share of the L1 a program has (`_within_l1`).
    TILE_2D_L1_SHARE = 0.4
    MIN_TILE_2D = 1024  # elements: smaller tiles leave a capped grid waiting on memory
    MIN_TILE_2D_SIDE = 16

    # Tiles that fill less than this share of the programs' last round let the model weigh
    # smaller ones (`_balanced`).
    FULL_WAVES = 0.9
    PARALLEL_BLOCKS = {"XBLOCK": "xnumel", "YBLOCK": "ynumel"}

    # Kinds whose pipelining the rules decide from measurements (row reductions: one pass
    # over enough chunks, `_stages`; several passes never) and the register fallback keeps:
    # the model ranks their tiles and warps better than their pipelining (corpus fit part,
    # H100, row reductions: 0.824 of the ceiling at the rules' stages, 0.815 with the
    # model's choice of stages at the rules' tile; two fallbacks' pipelined picks 0.53 and
    # 0.56, their best unpipelined ones 0.82 and 1.00).
    RULES_PIPELINING = ("looped_reduction",)

    SEES_KERNEL = True  # False: the rules alone, traits or not (what the rules would pick)
    # What a tile loop's indexing, masks and loop state take of a thread's registers besides
    # its elements' values.
    REGISTERS_FOR_INDEXING = 24
    # The traits' estimate is 0.9 to 2.3 times the registers ptxas needs (10th and 90th
    # percentiles over the corpus fit part, `benchmarks/corpus/registers.py`): below
    # SURE_FIT times the budget the tile fits, above SURE_SPILL times it spills, and between
    # the binary decides (at most MAX_BINARIES compiles a kernel; then the estimate alone).
    SURE_FIT = 0.9
    SURE_SPILL = 2.5
    MAX_BINARIES = 8

    def _spec(self) -> HardwareSpec:
        return self.spec or current_spec()

    def registers_per_thread(self, traits: KernelTraits, config: LaunchConfig,
                             spec: HardwareSpec, static_blocks: Optional[dict[str, int]] = None
                             ) -> int:
        """An estimate of one thread's registers at `config` (with the kernel's
        `static_blocks`, the tile's sizes its code fixes): what it keeps for each of its
        elements (`KernelTraits.registers_per_element`), one element's temporaries, and
        the tile loop's indexing."""
        elements = math.prod({**(static_blocks or {}), **config.blocks}.values())
        per_thread = max(1, elements // (config.num_warps * spec.warp_size))
        return self.REGISTERS_FOR_INDEXING + traits.registers_per_element * per_thread + \
            traits.live_values

    def _within_registers(self, kernel: KernelQuestion, rules: Optional[LaunchConfig],
                          changed: Optional[LaunchConfig] = None) -> Optional[LaunchConfig]:
        """`changed` (the rules' config as read against the traits; None: the rules' as
        they are, which the four answers give) where it does not spill; else the config the
        performance model predicts fastest among those that do not (ties: the one nearest
        the rules' tile; all configs, where none fits). In the kinds of RULES_PIPELINING
        the model weighs only configs pipelined as the rules' is (or both unpipelined)."""
        chosen = changed or rules
        compiles = [0]
        if chosen is None or self._fits(kernel, chosen, compiles):
            return changed
        pipelined = (chosen.num_stages or 1) > 1
        configs = sorted((c for c in kernel.candidates()
                          if ((c.num_stages or 1) == 1 or self._may_pipeline(kernel, c)) and
                          (kernel.kind not in self.RULES_PIPELINING or
                           ((c.num_stages or 1) > 1) == pipelined)),
                         key=lambda c: (kernel.predict(c), _distance(c, chosen)))
        return next((c for c in configs if self._fits(kernel, c, compiles)),
                    configs[0] if configs else None)

    def _may_pipeline(self, kernel: KernelQuestion, config: LaunchConfig) -> bool:
        """Whether `config` may pipeline the kernel's chunk loop: not where a load that
        moves along the reduced axis is not coalesced along a tile axis (a layout permuted
        against the tile: a pipelined stage copies such a chunk to shared memory element by
        element, each from its own sector, and the copies cost more than the latency they
        hide; a flipped run, read backwards, still fills its sectors and pipelines: a
        logcumsumexp of flipped rows, 4096 x 1024, 0.51 of the ceiling at its best
        unpipelined config, 1.00 at 3 stages), nor where a one-pass row reduction's rows
        have fewer than twice as many chunks as stages (`_stages`), nor where a full pipeline's
        chunks do not fit a program's shared memory (`_chunks_fit_shared_memory`)."""
        if any(a.along_reduction and not a.coalesced for a in kernel.traits.loads):
            return False
        if not self._chunks_fit_shared_memory(kernel, config):
            return False
        rblock = config.blocks.get("R0_BLOCK")
        if kernel.kind == "looped_reduction" and kernel.traits.chunk_loops == 1 and rblock:
            return self._stages(kernel.numels["r0_numel"], rblock) > 1
        return True

    def _chunks_fit_shared_memory(self, kernel: KernelQuestion, config: LaunchConfig) -> bool:
        """Whether the CHUNK_STAGES - 1 chunks a full pipeline keeps in flight, of every
        load that moves along the reduced axis (`KernelTraits.chunk_load_bytes`), fit the
        shared memory a program has beside the others a full grid puts on its SM. The rules
        size a chunk for one load; with several, the plan would lower the pipelining to the
        stages that fit, and a shallow pipeline of big chunks is slower than none (corpus
        fit part, H100, the four reductions whose chunks fit no full pipeline: 0.20-0.73 of
        the ceiling at 2-3 stages, 1.00 unpipelined)."""
        elements = math.prod({**(kernel.static_blocks or {}), **config.blocks}.values())
        share = kernel.spec.program_smem // self._programs_per_sm(kernel.spec)
        return (self.CHUNK_STAGES - 1) * elements * kernel.traits.chunk_load_bytes <= share

    def _read_against_traits(self, kernel: KernelQuestion,
                             rules: Optional[LaunchConfig]) -> Optional[LaunchConfig]:
        """The rules' config, unpipelined where the traits say it may not pipeline
        (`_may_pipeline`); None: the rules' config as it is."""
        if rules is None or (rules.num_stages or 1) == 1 or self._may_pipeline(kernel, rules):
            return None
        return dataclasses.replace(rules, num_stages=1)

    def _fits(self, kernel: KernelQuestion, config: LaunchConfig, compiles: list[int]) -> bool:
        """Whether `config` keeps a thread within the spec's register budget: the traits'
        estimate where it is clear, else ptxas's binary (`compiles[0]` counts them)."""
        budget = kernel.spec.register_budget(config.num_warps)
        estimate = self.registers_per_thread(kernel.traits, config, kernel.spec,
                                             kernel.static_blocks)
        if estimate <= self.SURE_FIT * budget or estimate > self.SURE_SPILL * budget:
            return estimate <= budget
        spilled = None
        if compiles[0] < self.MAX_BINARIES:
            compiles[0] += 1
            spilled = kernel.spills(config)
        return estimate <= budget if spilled is None else spilled == 0

    def _sees(self, kernel: KernelQuestion) -> bool:
        return kernel.traits is not None and self.SEES_KERNEL

    def _balanced(self, kernel: KernelQuestion, config: Optional[LaunchConfig]
                  ) -> Optional[LaunchConfig]:
        """`config`; or, where its tiles leave more than 1 - FULL_WAVES of the spec's
        programs idle in the last round of tiles (or in the only one), the one the
        performance model predicts fastest of it and the legal configs with one parallel
        block (XBLOCK, YBLOCK) halved or quartered: more, smaller tiles keep the programs
        busy to the end but pay each tile's fixed cost more often, a trade the rules cannot
        weigh and the model can (corpus fit part, H100: rows of 196-2048 over 1.1-1.5
        rounds of tiles, 0.42-0.91 of the ceiling at the rules' tile, 0.90-1.00 at the
        model's)."""
        if config is None:
            return None
        tiles = math.prod(cdiv(kernel.numels[numel], config.blocks[block])
                          for block, numel in self.PARALLEL_BLOCKS.items()
                          if block in config.blocks)
        programs = kernel.spec.max_grid
        if tiles >= self.FULL_WAVES * programs * cdiv(tiles, programs):
            return config
        legal = {(tuple(sorted(c.blocks.items())), c.num_warps, c.num_stages)
                 for c in kernel.candidates()}
        smaller = [dataclasses.replace(config,
                                       blocks={**config.blocks, block: config.blocks[block] // f})
                   for block in self.PARALLEL_BLOCKS if block in config.blocks for f in (2, 4)]
        options = [config] + [c for c in smaller if
                              (tuple(sorted(c.blocks.items())), c.num_warps, c.num_stages) in legal]
        return min(options, key=kernel.predict)

    def _settled(self, kernel: KernelQuestion, rules: Optional[LaunchConfig],
                 changed: Optional[LaunchConfig] = None) -> Optional[LaunchConfig]:
        """The rules' config (`changed`: as read against the traits) within the register
        budget (`_within_registers`), then balanced over the programs (`_balanced`); None:
        the rules' config as the four answers give it."""
        chosen = self._within_registers(kernel, rules, changed)
        balanced = self._balanced(kernel, chosen or rules)
        return chosen if balanced == (chosen or rules) else balanced

    def choose_pointwise(self, kernel: KernelQuestion) -> Optional[LaunchConfig]:
        return self._settled(kernel, kernel.rules()) if self._sees(kernel) else None

    def choose_tile_2d(self, kernel: KernelQuestion) -> Optional[LaunchConfig]:
        if not self._sees(kernel):
            return None
        rules = kernel.rules()
        return self._settled(kernel, rules, self._within_l1(kernel, rules))

    def _within_l1(self, kernel: KernelQuestion, rules: Optional[LaunchConfig]
                   ) -> Optional[LaunchConfig]:
        """The rules' 2D tile, its YBLOCK (then, at MIN_TILE_2D_SIDE, its XBLOCK) halved
        (down to MIN_TILE_2D elements) until what its loads stream
        (`KernelTraits.streamed_load_bytes` of the elements it covers) takes at most
        TILE_2D_L1_SHARE of the L1 a program has; None where the rules' tile already
        does, or the spec models no L1.

        A 2D tile transposes: its loads run along different axes, and those that do not
        run along the layout's fast axis (x) read each line over several warps, so the L1
        must hold the tile's lines until the last warp has read them. Corpus fit part,
        H100: a 3x3 max pool's nine loads at 128x16 fp32 (72 KB) and 128x32 bf16 (72 KB),
        0.19 and 0.27 of the ceiling at the rules' 16K-element tiles; three loads at 8192
        elements (96 KB), two at 8192 (64 KB) 7-23% faster than at 16384 (128 KB); one
        load at 16384 (64 KB) the best. YBLOCK goes first: the layout's warps run along
        x, where they keep their runs long."""
        if rules is None or not kernel.spec.l1_bytes:
            return None
        l1 = kernel.spec.l1_bytes / self._programs_per_sm(kernel.spec)
        blocks = dict(rules.blocks)

        def streamed() -> int:
            covered = math.prod(min(blocks[block], kernel.numels[numel])
                                for block, numel in self.PARALLEL_BLOCKS.items())
            return covered * kernel.traits.streamed_load_bytes

        while streamed() > self.TILE_2D_L1_SHARE * l1 and \
                blocks["XBLOCK"] * blocks["YBLOCK"] >= 2 * self.MIN_TILE_2D:
            block = "YBLOCK" if blocks["YBLOCK"] > self.MIN_TILE_2D_SIDE else "XBLOCK"
            blocks[block] //= 2
        return None if blocks == rules.blocks else dataclasses.replace(rules, blocks=blocks)

    def choose_reduction(self, kernel: KernelQuestion) -> Optional[LaunchConfig]:
        if not self._sees(kernel):
            return None
        rules = kernel.rules()  # the four answers' plan: worked out once
        return self._settled(kernel, rules, self._read_against_traits(kernel, rules))

    def select_xblock(self, numel: int, dtype: torch.dtype) -> int:
        # At least TILES_PER_PROGRAM tiles per program where tiles stay MIN_XBLOCK or more:
        # a program then loads its next tile while the last one's loads finish (1M-element
        # mul+relu and GELU: 16K tiles, two per program, 6-12% faster than one 32K tile).
        wanted = next_power_of_2(cdiv(numel, self._spec().max_grid * self.TILES_PER_PROGRAM))
        return max(self.MIN_XBLOCK, min(wanted, self.MAX_TILE_ELEMENTS))

    def select_num_warps(self, xblock: int) -> int:
        warps = next_power_of_2(max(1, xblock // self.ELEMENTS_PER_WARP))
        return max(1, min(warps, self._spec().max_num_warps))

    def get_grid(self, numel: int, xblock: int) -> tuple[int, ...]:
        return (max(1, min(cdiv(numel, xblock), self._spec().max_grid)),)

    def select_tile_2d(self, xnumel: int, ynumel: int, dtype: torch.dtype) -> tuple[int, int]:
        tile = min(self.select_xblock(xnumel * ynumel, dtype), self.MAX_TILE_2D)
        xblock = min(next_power_of_2(xnumel), max(1, next_power_of_2(math.isqrt(tile))))
        return xblock, min(next_power_of_2(ynumel), max(1, tile // xblock))

    def select_reduction(self, xnumel: int, rnumel: int, dtype: torch.dtype) -> ReductionConfig:
        # Each program should get at least one tile: never more rows per tile than that.
        rows_per_program = next_power_of_2(cdiv(xnumel, self._spec().max_grid))
        row = next_power_of_2(rnumel)
        if row <= self.WHOLE_ROW:
            rows = min(rows_per_program, self.MAX_ROWS, max(1, self.WHOLE_ROW_TILE // row))
            rblock = row
        elif row >= self.LONG_ROW:
            # A program with a few rows to reduce takes them side by side in one tile, so
            # that every program's share is one tile and none finishes a row alone after the
            # rest (40 rows on 32 programs: 20 tiles of 2 rows, not 8 programs taking a
            # second row); with more, one row a tile (the tail is a small part of the work).
            side_by_side = rows_per_program <= self.LONG_ROW_CHUNK // self.LONG_ROW_MIN_RUN
            rows = rows_per_program if side_by_side else 1
            rblock = self.LONG_ROW_CHUNK // rows
        else:
            rblock = min(row, max(self.MIN_CHUNK, self.MULTI_PASS_ROW_BYTES // dtype.itemsize))
            rows = min(rows_per_program, self.MAX_ROWS, max(1, self.MULTI_PASS_TILE // rblock))
            # fewer rows than a tile holds (80 rows on 32 programs): longer chunks of
            # each, so a program still has a tile's loads in flight
            rblock = min(row, max(rblock, self.MULTI_PASS_TILE // rows))
        return ReductionConfig(rows, rblock, max(2, self.select_num_warps(rows * rblock)))

    @staticmethod
    def _programs_per_sm(spec: HardwareSpec) -> int:
        """Programs a full grid puts on one SM (the GXU: 2; the H200 capped at 32: 1)."""
        return max(1, min(spec.max_blocks_per_sm, cdiv(spec.max_grid, spec.sm_count)))

    def _stream_chunk_elements(self, dtype: torch.dtype) -> int:
        """Elements of a pipelined chunk: STREAM_CHUNK_BYTES, or less where the programs a
        full grid puts on one SM could not each buffer CHUNK_STAGES - 1 of them (the GXU:
        2 programs per SM, 128 KB: 16 KB chunks; the H200 capped at 32 programs: 64 KB)."""
        spec = self._spec()
        fitting = spec.program_smem // self._programs_per_sm(spec) // (self.CHUNK_STAGES - 1)
        chunk = min(self.STREAM_CHUNK_BYTES, 1 << max(0, fitting.bit_length() - 1))
        return max(self.MIN_CHUNK, chunk // dtype.itemsize)

    def select_one_pass_reduction(self, xnumel: int, rnumel: int, dtype: torch.dtype
                                  ) -> ReductionConfig:
        tile = self._stream_chunk_elements(dtype)
        rows_per_program = next_power_of_2(cdiv(xnumel, self._spec().max_grid))
        rows = min(rows_per_program, self.MAX_ROWS, max(1, tile // self.MIN_CHUNK))
        rblock = min(next_power_of_2(rnumel), max(self.MIN_CHUNK, tile // rows))
        return ReductionConfig(rows, rblock, max(2, self.select_num_warps(rows * rblock)),
                               self._stages(rnumel, rblock))

    def _stages(self, rnumel: int, rblock: int) -> int:
        """CHUNK_STAGES where a row has at least twice as many chunks, else 1: the
        pipeline fills again at every tile, and over a few chunks its fill is most of the
        loop (corpus fit part, H100: rows of 196 in 128-element chunks, 1 stage 0.7-1.0 of
        the ceiling, 2 to 4 stages 0.2-0.6)."""
        return self.CHUNK_STAGES if cdiv(rnumel, rblock) >= 2 * self.CHUNK_STAGES else 1

    def select_gather_reduction(self, xnumel: int, rnumel: int, dtype: torch.dtype
                                ) -> ReductionConfig:
        # Fewer rows than GATHER_ROWS a program (a loss over a few rows of many tokens): the
        # tile keeps its measured size in longer chunks, on more warps, so each program
        # still has a tile's loads in flight.
        rows = min(next_power_of_2(cdiv(xnumel, self._spec().max_grid)), self.GATHER_ROWS)
        scale = self.GATHER_ROWS // rows
        return ReductionConfig(rows, min(next_power_of_2(rnumel), self.GATHER_CHUNK * scale),
                               min(self.GATHER_WARPS * scale, self._spec().max_num_warps), 1)

    def select_column_reduction(self, xnumel: int, rnumel: int, dtype: torch.dtype
                                ) -> ReductionConfig:
        columns = min(self.COLUMNS, next_power_of_2(cdiv(xnumel, self._spec().max_grid)))
        tile = self._stream_chunk_elements(dtype)
        rblock = min(next_power_of_2(rnumel), max(self.MIN_CHUNK, tile // columns))
        spec = self._spec()
        threads = cdiv(columns * rblock, self.COLUMN_ELEMENTS_PER_THREAD)
        warps = max(2, min(spec.max_num_warps, next_power_of_2(cdiv(threads, spec.warp_size))))
        return ReductionConfig(columns, rblock, warps, self.CHUNK_STAGES)
