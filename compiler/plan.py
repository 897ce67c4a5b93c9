"""Launch planning: from a kernel's shape, its sizes and a policy to a launch plan within the spec.

A leaf of the compiler: it knows kernels only through `KernelShape` (read from the
`@triton.jit` signature) and policies only through the `Heuristics` interface.

* `plan_launch`: the policy's answers (or, for a policy that measures, its `search` over
  `candidate_plans`), each passed through the spec clamp `resolve_*`: non-powers of two are
  rejected, warps and grid are clamped to the active spec, and every parameter carries the
  rule that decided it (the decision log). Grid-capped kernels loop over tiles, so any
  grid from 1 to the tile count computes the whole output.
* `candidate_plans`: every legal config of a kernel worth trying; autotune and the
  capped-ceiling benchmark search the same space.
* `LaunchPlan.facts`: what the plan alone tells the performance model.
"""
from __future__ import annotations

import ast
import dataclasses
import inspect
import math
import textwrap
from typing import Any, Callable, Optional, Sequence

import torch
from triton.runtime.errors import OutOfResources

from gxusim import python_ast
from gxusim.model import core, launch_facts, residency
from gxusim.kernel_args import NUMEL_ARGS
from gxusim.model.kernel_work import KernelWork, kernel_work
from gxusim.model.phases import kernel_phases, load_unit_stride_axes, static_blocks
from gxusim.spec import HardwareSpec
from gxusim.traits import KernelTraits

from .heuristics import Heuristics, KernelQuestion, LaunchConfig, cdiv
from .shared_memory import (SharedBytes, deepest_fitting_stages, unpipelined_overflow,
                            within_shared_memory)

# Names the Inductor kernel signature uses for block constexprs (sizes: NUMEL_ARGS).
BLOCK_PARAMS = {"x": "XBLOCK", "y": "YBLOCK", "r0": "R0_BLOCK"}
# The constexpr a pipelined chunk loop takes its depth from (`inductor_codegen`): the
# plan's num_stages, passed as a kernel parameter.
PIPELINE_PARAM = "NUM_STAGES"
MAX_BLOCK_ELEMENTS = 1 << 20


@dataclasses.dataclass(frozen=True)
class KernelShape:
    """What a kernel's signature says about its launch: which sizes and blocks it takes."""
    name: str
    runtime_args: tuple[str, ...]  # positional (non-constexpr) parameters, in order
    block_params: tuple[str, ...]  # constexpr block sizes the launcher must pass
    static_blocks: dict[str, int]  # block sizes fixed in the body, not launch parameters
    source: str = ""  # the kernel's Python source (names it in search caches)
    work: KernelWork = KernelWork()  # operations per element, counted from the source
    pipelined: bool = False  # its chunk loops take their pipelining depth (PIPELINE_PARAM)
    chunk_loops: int = 0  # a looped reduction's passes over its rows (a sum 1, softmax 3)
    traits: Optional[KernelTraits] = None  # recorded by code generation (None: hand-written)

    @property
    def numel_args(self) -> tuple[tuple[str, int], ...]:
        """(name, position) of each size argument."""
        return tuple((name, position) for position, name in enumerate(self.runtime_args)
                     if name in NUMEL_ARGS)

    @property
    def is_reduction(self) -> bool:
        return "r0_numel" in self.runtime_args

    @property
    def column_reduction(self) -> bool:
        """A reduction whose 2D loads are contiguous along x, not along the reduced axis (a
        sum over dim 0 of a row-major tensor)."""
        return self.is_reduction and bool(self.source) and \
            load_unit_stride_axes(self.source) == frozenset("x")

    @property
    def is_2d(self) -> bool:
        return "YBLOCK" in self.block_params

    @property
    def gathers(self) -> bool:
        """The kernel loads rows named by indices it loaded, along another axis than them
        (an embedding's table rows along x, its token ids along the reduced axis)."""
        return bool(self.source) and any(phase.gathers_across
                                         for phase in kernel_phases(self.source))

    @staticmethod
    def argument_bytes(args: Sequence[Any]) -> int:
        """Bytes of a launch's tensor arguments: what `LaunchPlan.facts` takes as moved."""
        return sum(arg.numel() * arg.element_size() for arg in args
                   if isinstance(arg, torch.Tensor))


def kernel_shape(fn: Any, name: str) -> KernelShape:
    """Read a `@triton.jit` kernel's signature (JITFunction or, under TRITON_INTERPRET, its
    InterpretedFunction: both wrap the Python function as `.fn`)."""
    return kernel_shape_from_source(kernel_source(fn), name)


def kernel_source(fn: Any) -> str:
    """A `@triton.jit` kernel's source, then that of each Triton function it names (a
    scan's combine function, whose work the performance model counts per element)."""
    source = inspect.getsource(fn.fn)
    names = {node.id for node in ast.walk(python_ast.parse(textwrap.dedent(source)))
             if isinstance(node, ast.Name)}
    called = [value for name, value in sorted(fn.fn.__globals__.items())
              if name in names and inspect.isfunction(getattr(value, "fn", None))]
    return "\n\n".join([source] + [textwrap.dedent(inspect.getsource(f.fn)) for f in called])


def kernel_shape_from_source(source: str, name: str) -> KernelShape:
    """The `KernelShape` of a kernel's source (as `kernel_shape` reads it, decorators and
    all): what a stored measurement's kernel was, whichever torch wrote it."""
    tree = python_ast.parse(textwrap.dedent(source))
    function = next((node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)
                     and node.name == name), None)
    if function is None:
        raise ValueError(f"no kernel {name!r} in the source given")
    params = [(arg.arg, ast.unparse(arg.annotation) if arg.annotation else "")
              for arg in function.args.args]
    constexpr = {param for param, annotation in params if "constexpr" in annotation}
    runtime = tuple(param for param, _ in params if param not in constexpr)
    blocks = tuple(param for param, _ in params
                   if param in constexpr and param in BLOCK_PARAMS.values())
    try:
        chunk_loops = sum(phase.looped for phase in kernel_phases(source))
    except Exception:  # noqa: BLE001 - not a generated kernel (a hand-written one, a test's)
        chunk_loops = 0
    return KernelShape(name, runtime, blocks, static_blocks(source), source, kernel_work(source),
                       PIPELINE_PARAM in constexpr, chunk_loops)


def kernel_kind(shape: KernelShape) -> str:
    """The kernel's kind: pointwise, pointwise_2d, scan, column_reduction,
    gather_reduction, persistent_reduction or looped_reduction."""
    if shape.work.scans:
        return "scan"
    if shape.is_reduction:
        if shape.column_reduction:
            return "column_reduction"
        if shape.gathers:
            return "gather_reduction"
        return "looped_reduction" if "R0_BLOCK" in shape.block_params else "persistent_reduction"
    return "pointwise_2d" if shape.is_2d else "pointwise"


def reduction_question(shape: KernelShape) -> str:
    """The policy question a reduction kernel's blocks come from: column reductions (loads
    contiguous across rows), gathers reduced in one chunk loop (an embedding bag), other
    reductions that read each row once in one chunk loop (a sum, a max: nothing to re-read,
    chunks can stream back to back), and the rest."""
    if shape.column_reduction:
        return "select_column_reduction"
    if shape.chunk_loops == 1 and "R0_BLOCK" in shape.block_params:
        return "select_gather_reduction" if shape.gathers else "select_one_pass_reduction"
    return "select_reduction"


def chunk_load_bytes(shape: KernelShape, meta: dict[str, int]) -> int:
    """What each stage of the kernel's pipelined chunk loop buffers in shared memory at these
    blocks (`launch_facts.chunk_load_bytes`; 0 for a kernel without one)."""
    return launch_facts.chunk_load_bytes(shape.source, meta) if shape.pipelined else 0


@dataclasses.dataclass(frozen=True)
class LaunchPlan:
    meta: dict[str, int]  # constexprs passed to the kernel (XBLOCK, YBLOCK, R0_BLOCK)
    num_warps: int
    programs: int
    n_tiles: int
    rules: dict[str, str]
    # Software-pipelining depth of the chunk loops (chunks in flight: 1 none, N: N - 1 ahead);
    # None: Triton's default, which pipelines nothing in these kernels.
    num_stages: Optional[int] = None
    predicted_s: Optional[float] = None  # the performance model's time, where a search ranked it

    @property
    def grid(self) -> tuple[int, int, int]:
        return (self.programs, 1, 1)

    @property
    def tiles_per_program(self) -> int:
        return cdiv(self.n_tiles, self.programs)

    def tile_elements(self, shape: KernelShape, numels: dict[str, int]) -> int:
        """Block elements one tile issues: its blocks (a persistent reduction's fixed R0_BLOCK
        included) times the chunks a looped reduction walks through."""
        blocks = {**self.meta, **shape.static_blocks}
        return math.prod(blocks.values()) * self.chunks(numels)

    def chunks(self, numels: dict[str, int]) -> int:
        """Reduction chunks one tile walks through (1 unless the reduction is looped)."""
        return _chunks(numels, self.meta)

    def facts(self, shape: KernelShape, numels: dict[str, int], bytes_moved: float,
              spec: HardwareSpec) -> launch_facts.LaunchFacts:
        """The launch as the performance model sees it without running it: `bytes_moved`
        from the arguments' sizes (`KernelShape.argument_bytes`), warps alone limiting
        residency, arithmetic counted from the kernel's source, and the tile's phases
        (loads, stores and dependency chains at tile level and per reduction chunk,
        `launch_facts.launch_phases`) at this plan's block sizes."""
        work = shape.work
        chunks = self.chunks(numels)
        return launch_facts.LaunchFacts(
            self.programs, self.num_warps, self.tiles_per_program,
            self.tile_elements(shape, numels), bytes_moved,
            residency.blocks_per_sm(spec, self.num_warps), work.flops, work.transcendentals,
            work.scans * chunks,
            launch_facts.launch_phases(shape.source, self.meta, chunks,
                                     stages=self.pipeline_stages(shape), spec=spec),
            footprint_bytes=bytes_moved)

    def pipeline_stages(self, shape: KernelShape) -> int:
        """The depth the kernel's chunk loops run at (1: not pipelined)."""
        return (self.num_stages or 1) if shape.pipelined else 1

    def kernel_meta(self, shape: KernelShape) -> dict[str, int]:
        """The constexprs the kernel is called with: the blocks, and the chunk loops' depth
        where the kernel takes it."""
        if not shape.pipelined:
            return self.meta
        return {**self.meta, PIPELINE_PARAM: self.pipeline_stages(shape)}

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# --- the spec clamp: every policy's answer passes through here -----------------------------

class PolicyError(ValueError):
    """A policy returned something no launch can use (names the policy, method and value)."""


def _block(policy: Heuristics, method: str, value: object, limit: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1 or value & (value - 1):
        raise PolicyError(f"policy {policy.name!r}: {method} returned {value!r}; block sizes must "
                          f"be positive powers of two (tl.arange needs them)")
    if value > limit:
        raise PolicyError(f"policy {policy.name!r}: {method} returned {value}, over Triton's "
                          f"largest block of {limit} elements")
    return value


def resolve_block(policy: Heuristics, method: str, value: object) -> int:
    return _block(policy, method, value, MAX_BLOCK_ELEMENTS)


def resolve_num_warps(policy: Heuristics, value: object, spec: HardwareSpec) -> tuple[int, str]:
    """(num_warps, rule): power of two required; clamped to spec.max_num_warps."""
    warps = _block(policy, "num_warps", value, 1 << 10)
    if warps > spec.max_num_warps:
        return spec.max_num_warps, (f"{policy.name} chose {warps}, clamped to max_num_warps="
                                    f"{spec.max_num_warps} of spec {spec.name}")
    return warps, f"{policy.name}"


def resolve_grid(policy: Heuristics, value: object, n_tiles: int, spec: HardwareSpec
                 ) -> tuple[int, str]:
    """(programs, rule): a 1D grid of at least one program, clamped to spec.max_grid and to
    the tile count (extra programs would have no tile to work on)."""
    dims = (value,) if isinstance(value, int) else tuple(value)  # type: ignore[arg-type]
    if not dims or any(not isinstance(d, int) or d < 1 for d in dims):
        raise PolicyError(f"policy {policy.name!r}: get_grid returned {value!r}; expected a tuple "
                          f"of positive ints")
    programs = math.prod(dims)
    rule = policy.name
    if programs > spec.max_grid:
        rule = f"{policy.name} chose {programs}, clamped to max_grid={spec.max_grid} of spec {spec.name}"
        programs = spec.max_grid
    if programs > n_tiles:
        rule = f"{policy.name} chose {programs}, clamped to the {n_tiles} tiles"
        programs = n_tiles
    return max(1, programs), rule


def resolve_num_stages(policy: Heuristics, method: str, value: object, fitting: int,
                       spec: HardwareSpec) -> tuple[int, str]:
    """(num_stages, rule): a positive int, lowered to `fitting` (`deepest_fitting_stages`)
    where the chunks it buffers ahead would not fit in shared memory."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise PolicyError(f"policy {policy.name!r}: {method} returned num_stages={value!r}; "
                          f"expected a positive int (1: no pipelining)")
    if value > fitting:
        return fitting, (f"{policy.name} chose {value}, lowered to {fitting}: {value - 1} "
                         f"chunks ahead exceed {spec.program_smem} B of shared memory of spec "
                         f"{spec.name}")
    return value, f"{policy.name}.{method}"


def _policy_call(policy: Heuristics, method: str, *args: Any) -> Any:
    """A policy method's answer; an exception inside the policy is reported as the policy's."""
    try:
        return getattr(policy, method)(*args)
    except PolicyError:
        raise
    except Exception as error:
        raise PolicyError(f"policy {policy.name!r}: {method}{args} raised "
                          f"{type(error).__name__}: {error}") from error


# --- planning ------------------------------------------------------------------------------

def _chunks(numels: dict[str, int], blocks: dict[str, int]) -> int:
    return cdiv(numels["r0_numel"], blocks["R0_BLOCK"]) if "R0_BLOCK" in blocks else 1


def _tiles(shape: KernelShape, numels: dict[str, int], blocks: dict[str, int]) -> int:
    tiles = cdiv(numels.get("xnumel", 1), blocks["XBLOCK"])
    if shape.is_2d:
        tiles *= cdiv(numels["ynumel"], blocks["YBLOCK"])
    return max(1, tiles)


def config_plan(shape: KernelShape, numels: dict[str, int], config: LaunchConfig,
                spec: HardwareSpec) -> LaunchPlan:
    """The plan of a config with one program per tile up to the spec's cap."""
    tiles = _tiles(shape, numels, {**config.blocks, **shape.static_blocks})
    return LaunchPlan(dict(config.blocks), config.num_warps, min(tiles, spec.max_grid), tiles,
                      {"all": "candidate config"}, config.num_stages)


def predicted_seconds(shape: KernelShape, numels: dict[str, int], plan: LaunchPlan,
                      bytes_moved: float, spec: HardwareSpec) -> float:
    """The performance model's time for a plan, from the plan's facts alone."""
    return core.predict_seconds(plan.facts(shape, numels, bytes_moved, spec), spec)


def kernel_question(shape: KernelShape, numels: dict[str, int], dtype: torch.dtype,
                    spec: HardwareSpec, bytes_moved: float,
                    answers: Optional[Callable[[], LaunchPlan]] = None,
                    spills: Optional[SpilledWords] = None) -> KernelQuestion:
    """What a policy's per-kind question receives about this kernel at these sizes;
    `answers` plans from the policy's four answers (`answers_plan`), `spills` counts a
    config's spilled words in its binary (the launcher compiles it)."""
    def candidates() -> list[LaunchConfig]:
        return [LaunchConfig(plan.meta, plan.num_warps, plan.num_stages)
                for plan in candidate_plans(shape, numels, spec)]

    def predict(config: LaunchConfig) -> float:
        return predicted_seconds(shape, numels, config_plan(shape, numels, config, spec),
                                 bytes_moved, spec)

    def rules() -> Optional[LaunchConfig]:
        if answers is None:
            return None
        plan = answers()
        return LaunchConfig(plan.meta, plan.num_warps, plan.num_stages)

    def spilled(config: LaunchConfig) -> Optional[int]:
        if spills is None:
            return None
        plan = config_plan(shape, numels, config, spec)
        return spills(plan.kernel_meta(shape), plan.num_warps, plan.num_stages)
    return KernelQuestion(shape.name, kernel_kind(shape), shape.traits, dict(numels), dtype,
                          spec, candidates, predict, rules, dict(shape.static_blocks), spilled)


def _chosen_plan(shape: KernelShape, numels: dict[str, int], policy: Heuristics,
                 method: str, config: object, spec: HardwareSpec) -> LaunchPlan:
    """A per-kind answer, through the same spec clamp as the seed's questions."""
    if not isinstance(config, LaunchConfig):
        raise PolicyError(f"policy {policy.name!r}: {method} returned {config!r}; expected a "
                          f"gxusim.compiler.heuristics.LaunchConfig or None")
    if set(config.blocks) != set(shape.block_params):
        raise PolicyError(f"policy {policy.name!r}: {method} gave blocks {sorted(config.blocks)}; "
                          f"kernel {shape.name} takes {sorted(shape.block_params)}")
    meta = {name: resolve_block(policy, f"{method} ({name})", value)
            for name, value in config.blocks.items()}
    rules = {name: f"{policy.name}.{method}" for name in meta}
    num_warps, rules["num_warps"] = resolve_num_warps(policy, config.num_warps, spec)
    num_stages = None
    if shape.is_reduction and shape.pipelined:
        fitting = deepest_fitting_stages(chunk_load_bytes(shape, meta), meta, num_warps, spec)
        num_stages, rules["num_stages"] = resolve_num_stages(policy, method,
                                                             config.num_stages or 1, fitting, spec)
    blocks = {**meta, **shape.static_blocks}
    if not launch_facts.pipelined(num_stages or 1, _chunks(numels, blocks)) and \
            unpipelined_overflow(shape, blocks, num_warps, spec):
        raise PolicyError(f"policy {policy.name!r}: {method} chose {meta} on {num_warps} warps, "
                          f"whose gathered indices do not fit in shared memory unpipelined")
    n_tiles = _tiles(shape, numels, blocks)
    programs, rules["grid"] = resolve_grid(policy, _policy_call(policy, "get_grid", n_tiles, 1),
                                           n_tiles, spec)
    return LaunchPlan(meta, num_warps, programs, n_tiles, rules, num_stages)


KIND_QUESTIONS = {"pointwise": "choose_pointwise", "pointwise_2d": "choose_tile_2d"}


def rule_plan(shape: KernelShape, numels: dict[str, int], dtype: torch.dtype,
              policy: Heuristics, spec: HardwareSpec, bytes_moved: float = 0.0,
              spills: Optional[SpilledWords] = None) -> LaunchPlan:
    """The policy's answer for this kind of kernel (`choose_*`), or its four answers,
    clamped by the spec. `bytes_moved` (the arguments' bytes) is what the performance model
    the per-kind question offers takes as moved; `spills` what it offers of the binary."""
    if shape.is_reduction and shape.is_2d:
        raise NotImplementedError(
            f"gxusim: kernel {shape.name} is a reduction tiled over two grid axes (XBLOCK and "
            f"YBLOCK); gxu plans reductions over rows only, so it cannot be launched")
    question = kernel_question(shape, numels, dtype, spec, bytes_moved,
                               lambda: answers_plan(shape, numels, dtype, policy, spec), spills)
    method = KIND_QUESTIONS.get(question.kind, "choose_reduction")
    config = _policy_call(policy, method, question)
    if config is not None:
        return _chosen_plan(shape, numels, policy, method, config, spec)
    return answers_plan(shape, numels, dtype, policy, spec)


def answers_plan(shape: KernelShape, numels: dict[str, int], dtype: torch.dtype,
                 policy: Heuristics, spec: HardwareSpec) -> LaunchPlan:
    """The policy's four answers (the seed's questions), clamped by the spec."""
    xnumel = numels.get("xnumel", 1)
    rules: dict[str, str] = {}
    meta: dict[str, int] = {}
    num_stages = None
    if shape.is_reduction:
        question = reduction_question(shape)
        choice = _policy_call(policy, question, xnumel, numels["r0_numel"], dtype)
        meta["XBLOCK"] = shape.static_blocks.get("XBLOCK") or \
            resolve_block(policy, f"{question} (xblock)", choice.xblock)
        if "R0_BLOCK" in shape.block_params:
            meta["R0_BLOCK"] = resolve_block(policy, f"{question} (rblock)", choice.rblock)
            rules["R0_BLOCK"] = f"{policy.name}.{question} (looped reduction)"
        rules["XBLOCK"] = "fixed by the kernel" if "XBLOCK" in shape.static_blocks else \
            f"{policy.name}.{question}"
        requested_warps = choice.num_warps
    elif shape.is_2d:
        xblock, yblock = _policy_call(policy, "select_tile_2d", xnumel, numels["ynumel"], dtype)
        meta["XBLOCK"] = resolve_block(policy, "select_tile_2d (xblock)", xblock)
        meta["YBLOCK"] = resolve_block(policy, "select_tile_2d (yblock)", yblock)
        rules["XBLOCK"] = rules["YBLOCK"] = f"{policy.name}.select_tile_2d"
        requested_warps = _policy_call(policy, "select_num_warps", meta["XBLOCK"] * meta["YBLOCK"])
    else:
        meta["XBLOCK"] = resolve_block(policy, "select_xblock",
                                       _policy_call(policy, "select_xblock", xnumel, dtype))
        rules["XBLOCK"] = f"{policy.name}.select_xblock"
        requested_warps = _policy_call(policy, "select_num_warps", meta["XBLOCK"])
    num_warps, rules["num_warps"] = resolve_num_warps(policy, requested_warps, spec)
    if shape.is_reduction and shape.pipelined:
        fitting = deepest_fitting_stages(chunk_load_bytes(shape, meta), meta, num_warps, spec)
        num_stages, rules["num_stages"] = resolve_num_stages(policy, question, choice.num_stages,
                                                             fitting, spec)
        if num_stages > 1 and not launch_facts.pipelined(num_stages, _chunks(numels, meta)):
            num_stages, rules["num_stages"] = 1, (
                f"{policy.name} chose {choice.num_stages}; one chunk a tile: Triton does not "
                f"pipeline a loop of one trip")
    overflow = 0 if launch_facts.pipelined(num_stages or 1, _chunks(numels, meta)) else \
        unpipelined_overflow(shape, meta, num_warps, spec)
    if overflow:
        raise PolicyError(f"policy {policy.name!r}: blocks {meta} on {num_warps} warps, "
                          f"unpipelined, need {overflow} B more shared memory than "
                          f"the {spec.program_smem} B a program has on spec {spec.name} to convert "
                          f"{shape.name}'s gathered indices; choose smaller blocks, or "
                          f"num_stages > 1 on more than one chunk a tile (Triton does not "
                          f"pipeline a loop of one)")
    n_tiles = _tiles(shape, numels, meta)
    if shape.is_reduction or shape.is_2d:
        requested_grid = _policy_call(policy, "get_grid", n_tiles, 1)
    else:
        requested_grid = _policy_call(policy, "get_grid", xnumel, meta["XBLOCK"])
    programs, rules["grid"] = resolve_grid(policy, requested_grid, n_tiles, spec)
    return LaunchPlan({k: v for k, v in meta.items() if k in shape.block_params}, num_warps,
                      programs, n_tiles, rules, num_stages)


# The space every search walks (autotune, the capped ceiling): tiles of 1K to 32K elements
# (smaller ones leave a capped grid's programs mostly waiting on memory; the H200 sweeps in
# docs/gpu-measurements.md never found the best below 1K), warps while each thread keeps
# 4 to 64 elements, and, for kernels with pipelined chunk loops, depths 1 (none) to 4 that
# fit in shared memory (other kernels have nothing for Triton to pipeline: one depth).
POINTWISE_BLOCKS = tuple(1 << k for k in range(8, 16))  # 256 .. 32768
ROWS_PER_TILE = tuple(1 << k for k in range(0, 8))  # 1 .. 128
REDUCTION_CHUNKS = tuple(1 << k for k in range(6, 14))  # 64 .. 8192
TILE_2D = (16, 32, 64, 128)
NUM_STAGES = (1, 2, 3, 4)
MIN_TILE_ELEMENTS, MAX_TILE_ELEMENTS = 1 << 10, 1 << 15
ELEMENTS_PER_THREAD = (4, 64)


def _block_choices(shape: KernelShape, numels: dict[str, int]) -> list[dict[str, int]]:
    """Block sizes worth trying, without blocks much larger than the data."""
    xnumel = numels.get("xnumel", 1)
    if shape.is_reduction:
        rnumel = shape.static_blocks.get("R0_BLOCK") or numels["r0_numel"]
        chunks = [r for r in REDUCTION_CHUNKS if r < 2 * rnumel] or [REDUCTION_CHUNKS[0]]
        if "R0_BLOCK" not in shape.block_params:
            chunks = [shape.static_blocks.get("R0_BLOCK", 1)]
        rows = [x for x in ROWS_PER_TILE if x < 2 * xnumel]
        if "XBLOCK" not in shape.block_params:
            rows = [shape.static_blocks.get("XBLOCK", 1)]
        smallest = min(MIN_TILE_ELEMENTS, max(rows) * max(chunks))
        return [{"XBLOCK": x, "R0_BLOCK": r} for x in rows for r in chunks
                if smallest <= x * r <= MAX_TILE_ELEMENTS]
    if shape.is_2d:
        return [{"XBLOCK": x, "YBLOCK": y} for x in TILE_2D for y in TILE_2D
                if x < 2 * xnumel and y < 2 * numels["ynumel"]] or [{"XBLOCK": 16, "YBLOCK": 16}]
    return [{"XBLOCK": x} for x in POINTWISE_BLOCKS if x < 2 * xnumel] or \
        [{"XBLOCK": POINTWISE_BLOCKS[0]}]


def _depths(shape: KernelShape, chunks: int, chunk_bytes: int, blocks: dict[str, int],
            num_warps: int, spec: HardwareSpec) -> list[Optional[int]]:
    """The pipelining depths worth timing: none for a kernel without a chunk loop to
    pipeline, 1 alone for a loop of one chunk (it compiles alike at every depth,
    `launch_facts.pipelined`), else each depth whose buffers fit in shared memory."""
    if not shape.pipelined:
        return [None]
    if not launch_facts.pipelined(max(NUM_STAGES), chunks):
        return [1]
    fitting = deepest_fitting_stages(chunk_bytes, blocks, num_warps, spec)
    return [stages for stages in NUM_STAGES if stages <= fitting]


def candidate_plans(shape: KernelShape, numels: dict[str, int], spec: HardwareSpec
                    ) -> list[LaunchPlan]:
    """Every launch config worth timing that the spec allows (autotune's and the capped
    ceiling's search space): one program per tile up to `max_grid`, each block choice with
    each warp count in ELEMENTS_PER_THREAD, each pipelining depth."""
    plans = {}
    warps = [w for w in (1, 2, 4, 8, 16, 32) if w <= spec.max_num_warps]
    for meta in _block_choices(shape, numels):
        blocks = {**meta, **shape.static_blocks}  # the kernel's own block sizes win
        tiles = _tiles(shape, numels, blocks)
        elements = math.prod(blocks.values())
        parameters = {k: v for k, v in meta.items() if k in shape.block_params}
        low, high = ELEMENTS_PER_THREAD
        fitting = [w for w in warps if low <= elements / (w * spec.warp_size) <= high] or \
            [warps[0] if elements < low * warps[0] * spec.warp_size else warps[-1]]
        chunk_bytes, chunks = chunk_load_bytes(shape, parameters), _chunks(numels, blocks)
        for num_warps in fitting:
            for stages in _depths(shape, chunks, chunk_bytes, blocks, num_warps, spec):
                if not launch_facts.pipelined(stages or 1, chunks) and \
                        unpipelined_overflow(shape, blocks, num_warps, spec):
                    continue  # Triton could not fit its layout conversion
                key = (tuple(parameters.items()), num_warps, stages)
                plans[key] = LaunchPlan(parameters, num_warps, min(tiles, spec.max_grid), tiles,
                                        {"all": "candidate config"}, stages)
    return list(plans.values())


@dataclasses.dataclass(frozen=True)
class PlanTimer:
    """How a measuring policy times plans on the active target: `timer(plan)` is the plan's
    kernel time in seconds; `timer.compile_ahead(plans)` builds several plans' binaries at
    once (in parallel, where the target compiles) so that the timings which follow find them
    built: compiling, not timing, is most of a search's wall time."""
    time: Callable[[LaunchPlan], float]
    compile_ahead: Callable[[Sequence[LaunchPlan]], None] = lambda plans: None

    def __call__(self, plan: LaunchPlan) -> float:
        """Seconds; infinite for a plan whose binary the GPU cannot load (more shared memory
        than it has: the estimate `deepest_fitting_stages` sizes depths by may fall short of
        what Triton adds), so that a search passes over it."""
        try:
            return self.time(plan)
        except OutOfResources:
            return math.inf


# (the constexprs a kernel is called with, num_warps, num_stages) -> words a thread spills
SpilledWords = Callable[[dict[str, int], int, Optional[int]], Optional[int]]


def ranked_plans(shape: KernelShape, numels: dict[str, int], spec: HardwareSpec,
                 bytes_moved: float) -> list[LaunchPlan]:
    """`candidate_plans`, each with its predicted time, fastest predicted first."""
    plans = [dataclasses.replace(plan, predicted_s=predicted_seconds(shape, numels, plan,
                                                                     bytes_moved, spec))
             for plan in candidate_plans(shape, numels, spec)]
    return sorted(plans, key=lambda plan: plan.predicted_s)


def plan_launch(shape: KernelShape, numels: dict[str, int], dtype: torch.dtype,
                policy: Heuristics, spec: HardwareSpec, time_plan: Optional[PlanTimer] = None,
                key: str = "", bytes_moved: float = 0.0,
                spills: Optional[SpilledWords] = None,
                shared_bytes: Optional[SharedBytes] = None) -> LaunchPlan:
    """The launch plan for one kernel call: found by the policy's `search` (if it measures:
    it gets the legal plans ranked by the performance model, fastest predicted first, and
    its own answers' plan), else from its answers; within the spec either way, its
    pipelining within the shared memory its binary takes (`within_shared_memory`)."""
    def answers() -> LaunchPlan:
        return within_shared_memory(
            shape, rule_plan(shape, numels, dtype, policy, spec, bytes_moved, spills), spec,
            shared_bytes)
    found = policy.search(lambda: ranked_plans(shape, numels, spec, bytes_moved), time_plan, key,
                          answers)
    if found is None:
        return answers()
    if not isinstance(found, LaunchPlan) or found.programs > spec.max_grid or \
            found.num_warps > spec.max_num_warps:
        raise PolicyError(f"policy {policy.name!r}: search returned {found!r}, which is not a "
                          f"LaunchPlan within spec {spec.name!r}")
    return within_shared_memory(shape, found, spec, shared_bytes)


def sized_key(kernel_source: str, numels: dict[str, int], dtype: torch.dtype,
              spec: HardwareSpec) -> str:
    """A stable name for one kernel at one size signature on one spec (search caches)."""
    return repr((kernel_source, sorted(numels.items()), str(dtype), sorted(spec.as_dict().items())))
