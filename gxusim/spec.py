"""Hardware spec: the GXU limits as data (stage 1 of the pipeline).

A `HardwareSpec` is a frozen dataclass loaded from a TOML preset shipped in
`gxusim/specs/` or from a user's TOML file. Every other stage (heuristics, launch
checks, emulator, performance model) reads its limits from the *active* spec,
set by `use_spec` or the `GXUSIM_SPEC` environment variable.
"""
from __future__ import annotations

import dataclasses
import os
import threading
import tomllib
from pathlib import Path
from typing import Any, Callable, Union

from .errors import InputError

PRESET_DIR = Path(__file__).parent / "specs"


class SpecError(InputError):
    """An invalid hardware spec: names the field, the value and the rule broken."""


@dataclasses.dataclass(frozen=True)
class HardwareSpec:
    name: str
    sm_count: int
    max_grid: int  # programs per launch, all grid dimensions together
    max_num_warps: int  # warps per program
    max_blocks_per_sm: int  # resident programs per SM
    max_warps_per_sm: int
    warp_size: int
    max_threads_per_block: int
    regs_per_sm: int  # 32-bit registers
    smem_per_sm: int  # bytes
    mem_bandwidth: float  # bytes/s, DRAM
    clock_hz: float
    launch_overhead_s: float
    # The memory system's units: the widest access one thread issues in one instruction
    # (CUDA: ld.global.v4.b32, 16 bytes; a longer run takes several), and the unit DRAM and
    # L2 move (a 32-byte sector: a run narrower than one still moves it whole).
    vector_bytes: int = 16
    sector_bytes: int = 32
    l1_line_bytes: int = 128  # the L1's line: a shorter run still holds one
    # Performance-model coefficients (`terms.TERMS` says what each one times).
    memory_latency_s: float = 6e-7  # one memory round trip of a tile (or a chunk loop's first)
    loop_round_trip_s: float = 5.0e-7  # unpipelined chunk loop: one memory wait of a thread
    pipeline_latency_s: float = 5.0e-7  # a pipelined chunk loop's round trip (async copy)
    l2_latency_s: float = 2.5e-7  # ... of rows an earlier chunk loop left in L2
    l2_hit_share: float = 0.5  # a round trip L2 answers (a line another tile read) / DRAM's
    flop_issue_s: float = 1.0e-9  # per element per thread: one dependent arithmetic step
    transcendental_issue_s: float = 8.0e-9  # ... one expf-equivalent libdevice call
    warp_instruction_s: float = 1.0e-9  # a chunk loop: a warp's instruction after its last
    sm_flop_s: float = 4.0e-12  # per element on one SM: one arithmetic step, all warps issuing
    scan_chunk_s: float = 2.0e-6  # one serial scan chunk (carry + cross-warp exchange)
    loads_in_flight: float = 5.4  # 16-byte loads a thread keeps in flight per round trip
    # (with max_regs_per_thread registers; fewer in proportion to a smaller register budget)
    sm_bandwidth: float = 2.1e11  # bytes/s through one SM (0: no per-SM limit)
    spill_miss_s: float = 7.5e-9  # ... per such word the L1 cannot hold: an L2 round trip
    spill_miss_from: float = 0.925  # resident spill frames / L1 left: reloads begin to miss
    spill_miss_all: float = 1.025  # ... all of them miss
    spill_bandwidth: float = 2.0e11  # bytes/s of spilled words through one SM (0: no limit)
    run_issue_s: float = 4.0e-10  # a chunk: per contiguous run shorter than a line, on one SM
    narrow_run_s: float = 6.1e-10  # a pipelined chunk: per run narrower than a vector, on one SM
    narrow_line_s: float = 6.75e-7  # how long such a run's copy holds its L1 line (DRAM's sector)
    narrow_spread_per_doubling: float = 0.275  # of its sector's other readers, the share that
    # find it in L2, for each doubling of a program's warps past 2
    async_copy_bandwidth: float = 1.0e11  # bytes/s one SM's pipelined copies stream (0: no limit)
    layout_convert_s: float = 1.5e-10  # per tile element: a transpose through shared memory
    reduction_s: float = 6.0e-8  # one block reduction, per (1 + log2 warps)
    row_reduction_s: float = 2.0e-8  # one block reduction: per row a warp reduces
    layout_sync_s: float = 1.0e-7  # one layout conversion's barriers, per tile
    # Estimates: the counts that stand in for a compiled binary's where none was read (a
    # TOML file's [estimates] table). Each fitted to ptxas's binaries of the H200's
    # calibration, ceiling-search and suite plans (Triton 3.6, benchmarks/registers.py).
    word_issue_steps: float = 8.0  # dependent arithmetic steps of one 4-byte word a thread
    #   moves (address, mask, memory op): a prior, which flop_issue_s times
    live_per_carried: float = 2.5  # registers per element of a chunk share a chunk loop's
    #   carried value takes with its update's temporaries (1,394 Welford loops: 7-8 for 3)
    round_trips_per_load: float = 0.375  # memory waits per 16-byte load of an unpipelined
    #   chunk loop, times W/(W+1) for W warps (median of 1,311 loops; 10-90%: 0.14-1.06)
    # Instructions a warp issues a chunk of a chunk loop: so many a chunk, and so many per
    # element of its thread's share, per element and dependent step, per element and
    # expf-equivalent call; per 16-byte load copied asynchronously (a pipelined loop's copy,
    # wait and read back), per 16-byte store, per run narrower than a vector (relative least
    # squares over 5,270 plans' chunk loops: estimate / binary median 0.90, 10-90% 0.38-1.29).
    loop_instructions: float = 2.95
    loop_element_instructions: float = 1.11
    loop_step_instructions: float = 0.54
    loop_expf_instructions: float = 7.6
    loop_copied_load_instructions: float = 4.3
    loop_store_instructions: float = 8.3
    loop_narrow_run_instructions: float = 1.45
    # Instructions a warp issues a tile of a tile-level phase: so many a tile, and so many
    # per element of its thread's share, per element and expf-equivalent call, per element
    # and division on its chain (560 plans' tile bodies, which ncu's executed counts match
    # within 4%: estimate / binary median 0.97, 10-90% 0.56-1.22).
    tile_instructions: float = 8.9
    tile_element_instructions: float = 3.4
    tile_expf_instructions: float = 3.9
    tile_division_instructions: float = 12.4
    # What a math call adds to one element's dependency chain, in expf's (libdevice.exp), as
    # measured on the H200 (benchmarks/transcendentals.py, results/transcendentals_h200.json):
    # Inductor's kernel for each op on one warp, 8 and 64 elements a thread, the time a
    # further element adds to a thread beyond a multiply's (an expf: 10.8 ns), x in [0.05, 4)
    # (tanhf takes both its forms); branchy calls cost what their branches do at such
    # inputs. A TOML [estimates.math_call_weights] table, name = expf's. Calls it does not
    # name weigh unmeasured_call_weight (the measured ones' median).
    math_call_weights: tuple[tuple[str, float], ...] = (
        ("acos", 1.4), ("acosh", 8.5), ("asin", 3.1), ("asinh", 12.1), ("atan", 9.6),
        ("atan2", 12.1), ("atanh", 6.0), ("cos", 8.2), ("cosh", 2.7), ("erf", 4.0),
        ("erfc", 15.1), ("erfinv", 5.5), ("exp", 1.0), ("exp2", 0.31), ("expm1", 4.0),
        ("lgamma", 64.0), ("log", 2.95), ("log10", 3.0), ("log1p", 3.1), ("log2", 3.05),
        ("pow", 12.8), ("rsqrt", 0.31), ("sigmoid", 1.16), ("sin", 8.0), ("sinh", 9.5),
        ("sqrt", 2.4), ("tan", 7.7), ("tanh", 6.7))
    unmeasured_call_weight: float = 4.8
    # An expf as dependent arithmetic steps, to weigh a call against plain ops: its 10.8 ns
    # over the 0.37 ns a step of the measured multiply takes.
    expf_steps: float = 29.0
    # An fp32 division (div.rn.f32), in expf's: a reciprocal on the unit expf's MUFU.EX2
    # issues on, and its Newton steps (measured beside the calls above).
    division_weight: float = 0.82
    welford_steps: float = 10.0  # one element into a Welford accumulator: its FMAs
    # Times a block scan runs its combine function per element: into its thread's running
    # value (a thread scans its own elements in order), then with the carry of the threads
    # before it.
    scan_combines: float = 2.0
    # How bounds that overlap combine into a time: the p of their p-norm (1: they add; the
    # larger, the more the slowest alone decides). The model's one combining rule.
    overlap_norm: float = 4.0
    max_regs_per_thread: int = 255
    # A warp's registers come in units of register_alloc_unit from one of the
    # register_sub_partitions equal parts of the register file (one per warp scheduler).
    register_alloc_unit: int = 256
    register_sub_partitions: int = 4
    l2_bytes: int = 0
    # Lines that loads mark evict_last outlast normal traffic in L2, a cache flush between
    # launches included: all of a launch's such lines up to l2_kept_bytes, none from
    # l2_kept_none_bytes, in proportion between (0: none kept; neither past l2_bytes).
    l2_kept_bytes: int = 0
    l2_kept_none_bytes: int = 0
    # The SM's L1 data cache and shared memory are one array of l1_bytes (0: not modelled),
    # split at one of smem_carveouts (bytes of shared memory, ascending) per kernel: what
    # shared memory leaves is the L1 an asynchronous copy of a narrow run passes through
    # (`caches.l1_cache_bytes`).
    l1_bytes: int = 0
    smem_carveouts: tuple[int, ...] = ()
    # Shared memory the driver keeps of the SM's for each resident block, bytes: a program
    # may take smem_per_sm less this (`program_smem`), and each resident one costs it more.
    smem_reserved_per_block: int = 0
    # Shared memory any kernel may take without opting in, bytes (CUDA: 48 KiB); for one
    # that takes more, Triton's launcher asks the driver to prefer shared memory, and the
    # SM keeps the least L1 it can (`residency.l1_left`).
    smem_opt_in_bytes: int = 48 * 1024
    # cuda target: run kernels on a GPU partition shaped like this spec (a CUDA green
    # context of sm_count SMs) instead of the whole GPU.
    gpu_partition: bool = False
    # The NVIDIA compute capability (90: sm_90) whose ptxas allocates a kernel's registers
    # where gxusim needs the binary's count before any GPU runs it (a policy asking whether
    # a tile spills): a part without a compiler of its own, with this spec's register file.
    ptxas_capability: int = 90
    description: str = ""

    def register_budget(self, num_warps: int) -> int:
        """32-bit registers one thread of a `num_warps`-warp program may hold before its
        compiler spills: the SM's register file over the program's threads, at most
        max_regs_per_thread (H200: 255 up to 8 warps, 128 at 16)."""
        return max(1, min(self.max_regs_per_thread,
                          self.regs_per_sm // (num_warps * self.warp_size)))

    @property
    def program_smem(self) -> int:
        """Bytes of shared memory one program may take: what the driver leaves of the SM's
        (H200: 227 KiB of 228)."""
        return self.smem_per_sm - self.smem_reserved_per_block

    def __post_init__(self) -> None:
        if isinstance(self.smem_carveouts, list):  # as a TOML file gives it
            object.__setattr__(self, "smem_carveouts", tuple(self.smem_carveouts))
        weights = self.math_call_weights
        if isinstance(weights, dict) or (isinstance(weights, (list, tuple)) and all(
                isinstance(pair, (list, tuple)) and len(pair) == 2 for pair in weights)):
            # a TOML table, or pairs as as_dict() and JSON give them back: one sorted form
            object.__setattr__(self, "math_call_weights", tuple(sorted(
                (str(name), weight) for name, weight in dict(weights).items())))
        for rule in _RULES:
            rule(self)

    def replace(self, **changes: Any) -> "HardwareSpec":
        """A copy with some fields changed (validated like any spec)."""
        return dataclasses.replace(self, **changes)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


_POSITIVE_INTS = (
    "sm_count", "max_grid", "max_num_warps", "max_blocks_per_sm", "max_warps_per_sm",
    "warp_size", "max_threads_per_block", "regs_per_sm", "smem_per_sm", "max_regs_per_thread",
    "register_alloc_unit", "register_sub_partitions", "ptxas_capability", "vector_bytes",
    "sector_bytes", "l1_line_bytes",
)
_POSITIVE_FLOATS = ("mem_bandwidth", "clock_hz")
_CACHE_BYTES = ("l2_bytes", "l1_bytes", "l2_kept_bytes", "l2_kept_none_bytes")  # 0: not modelled
# The performance model's coefficients (gxusim/model/terms.py TERMS, bandwidth aside).
_MODEL_TERMS = ("launch_overhead_s", "memory_latency_s", "loop_round_trip_s",
                "pipeline_latency_s", "l2_latency_s", "l2_hit_share", "flop_issue_s", "sm_flop_s",
                "warp_instruction_s", "transcendental_issue_s", "scan_chunk_s",
                "loads_in_flight", "sm_bandwidth", "async_copy_bandwidth", "run_issue_s",
                "narrow_run_s", "narrow_line_s", "narrow_spread_per_doubling", "spill_miss_s",
                "spill_miss_from", "spill_miss_all", "spill_bandwidth", "layout_convert_s",
                "layout_sync_s", "reduction_s", "row_reduction_s")
# What stands in for a binary's counts (a TOML file's [estimates] table).
ESTIMATES = ("word_issue_steps", "live_per_carried", "round_trips_per_load",
             "loop_instructions", "loop_element_instructions", "loop_step_instructions",
             "loop_expf_instructions", "loop_copied_load_instructions",
             "loop_store_instructions", "loop_narrow_run_instructions", "tile_instructions",
             "tile_element_instructions", "tile_expf_instructions",
             "tile_division_instructions", "unmeasured_call_weight", "expf_steps",
             "division_weight", "welford_steps", "scan_combines")
# Tables of the [estimates] table (name = value).
ESTIMATE_TABLES = ("math_call_weights",)


def _fail(spec: HardwareSpec, field: str, rule: str) -> None:
    raise SpecError(f"spec {spec.name!r}: {field} = {getattr(spec, field)!r} is invalid: {rule}")


def _check_types(spec: HardwareSpec) -> None:
    if not isinstance(spec.name, str) or not spec.name:
        raise SpecError(f"spec name = {spec.name!r} is invalid: must be a non-empty string")
    for field in _POSITIVE_INTS + _CACHE_BYTES + ("smem_reserved_per_block",
                                                  "smem_opt_in_bytes"):
        value = getattr(spec, field)
        if not isinstance(value, int) or isinstance(value, bool):
            _fail(spec, field, "must be an integer")
    if not isinstance(spec.smem_carveouts, tuple) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in spec.smem_carveouts):
        _fail(spec, "smem_carveouts", "must be a list of integers (bytes)")
    if not isinstance(spec.gpu_partition, bool):
        _fail(spec, "gpu_partition", "must be true or false")
    if not all(isinstance(pair, tuple) and len(pair) == 2 and isinstance(pair[1], (int, float))
               and not isinstance(pair[1], bool) and pair[1] >= 0
               for pair in spec.math_call_weights):
        _fail(spec, "math_call_weights", "must be a table of call name = expf's (a number >= 0)")
    for field in _POSITIVE_FLOATS + _MODEL_TERMS + ESTIMATES + ("overlap_norm",):
        value = getattr(spec, field)
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            _fail(spec, field, "must be a number")


def _check_positive(spec: HardwareSpec) -> None:
    for field in _POSITIVE_INTS + _POSITIVE_FLOATS:
        if getattr(spec, field) <= 0:
            _fail(spec, field, "must be positive")
    for field in _MODEL_TERMS + ESTIMATES + _CACHE_BYTES:
        if getattr(spec, field) < 0:
            _fail(spec, field, "must not be negative")


def _is_power_of_two(value: int) -> bool:
    return value > 0 and value & (value - 1) == 0


def _check_powers_of_two(spec: HardwareSpec) -> None:
    for field in ("max_num_warps", "warp_size", "vector_bytes", "sector_bytes",
                  "l1_line_bytes"):
        if not _is_power_of_two(getattr(spec, field)):
            _fail(spec, field, "must be a power of two (Triton's num_warps and warp sizes are)")


def _check_consistency(spec: HardwareSpec) -> None:
    # A single program at the warp limit must be launchable and resident on one SM:
    # otherwise the largest legal launch could never run.
    if spec.max_num_warps * spec.warp_size > spec.max_threads_per_block:
        _fail(spec, "max_num_warps",
              f"max_num_warps * warp_size = {spec.max_num_warps * spec.warp_size} exceeds "
              f"max_threads_per_block = {spec.max_threads_per_block}")
    if spec.max_num_warps > spec.max_warps_per_sm:
        _fail(spec, "max_num_warps",
              f"a program of max_num_warps warps must fit on one SM (max_warps_per_sm = "
              f"{spec.max_warps_per_sm})")
    if spec.l1_bytes and spec.l1_bytes < spec.smem_per_sm:
        _fail(spec, "l1_bytes", f"the L1 and shared-memory array must hold smem_per_sm = "
              f"{spec.smem_per_sm} bytes of shared memory")
    if not 0 <= spec.smem_reserved_per_block < spec.smem_per_sm:
        _fail(spec, "smem_reserved_per_block", f"must be within 0..smem_per_sm = "
              f"{spec.smem_per_sm} (exclusive): a program must have some shared memory")
    if spec.smem_opt_in_bytes < 0:
        _fail(spec, "smem_opt_in_bytes", "must not be negative")
    if spec.overlap_norm < 1:
        _fail(spec, "overlap_norm", "must be at least 1 (1: overlapping bounds add)")
    carveouts = spec.smem_carveouts
    if list(carveouts) != sorted(set(carveouts)) or any(
            not 0 <= c <= spec.smem_per_sm for c in carveouts):
        _fail(spec, "smem_carveouts", f"must be distinct, ascending and within 0..smem_per_sm "
              f"= {spec.smem_per_sm}")
    if spec.spill_miss_all <= spec.spill_miss_from:
        _fail(spec, "spill_miss_all", f"must exceed spill_miss_from = {spec.spill_miss_from} "
              f"(the frame / L1 ratio where spilled words begin to miss the L1)")
    if spec.l2_kept_none_bytes and spec.l2_kept_none_bytes <= spec.l2_kept_bytes:
        _fail(spec, "l2_kept_none_bytes", f"must exceed l2_kept_bytes = {spec.l2_kept_bytes} "
              f"(or be 0: L2 keeps no evict_last line)")
    if spec.max_grid < 1:
        _fail(spec, "max_grid", "must allow at least one program (one wave of a single program)")


_RULES = (_check_types, _check_positive, _check_powers_of_two, _check_consistency)
_DEFAULTS = {f.name: f.default for f in dataclasses.fields(HardwareSpec)
             if f.default is not dataclasses.MISSING}


def spec_value(spec: HardwareSpec | None, field: str) -> Any:
    """`spec`'s value of `field`; without a spec, the field's default (the H200's), for
    code that reads a kernel before any spec is chosen."""
    return getattr(spec, field) if spec is not None else _DEFAULTS[field]
FIELDS = tuple(f.name for f in dataclasses.fields(HardwareSpec))


def presets() -> list[str]:
    """Names of the presets shipped with gxusim."""
    return sorted(p.stem for p in PRESET_DIR.glob("*.toml"))


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except tomllib.TOMLDecodeError as e:
        raise SpecError(f"not valid TOML: {e}") from None
    except OSError as e:
        raise SpecError(f"cannot be read: {e.strerror}") from None
    estimates = data.get("estimates", {}) if "spec" in data else {}
    unknown = sorted(set(estimates) - set(ESTIMATES + ESTIMATE_TABLES))
    if unknown:
        raise SpecError(f"unknown [estimates] field(s) {unknown}; known: "
                        f"{list(ESTIMATES + ESTIMATE_TABLES)}")
    data = {**data.get("spec", data), **estimates}
    base = data.pop("base", None)
    if base is not None:
        data = {**load_spec(base).as_dict(), **data}
    return data


# Model terms that were dropped because they did not pay for themselves: each fitted to 0 on
# the H200 and took no share of the corpus's predicted time (docs/performance-model.md).
REMOVED_FIELDS = {
    "sm_transcendental_s": "math calls are charged as the instructions they issue (sm_flop_s) "
                           "and by transcendental_issue_s",
    "spill_s": "spilled words are charged through spill_bandwidth, and spill_miss_s for those "
               "the L1 cannot hold",
}


def spec_from_dict(data: dict[str, Any]) -> HardwareSpec:
    """Build and validate a spec; unknown or missing keys are errors naming the key."""
    removed = sorted(set(data) & set(REMOVED_FIELDS))
    if removed:
        raise SpecError(f"spec field {removed[0]} was removed from the model: "
                        f"{REMOVED_FIELDS[removed[0]]}; delete it from the spec")
    unknown = sorted(set(data) - set(FIELDS))
    if unknown:
        raise SpecError(f"unknown spec field(s) {unknown}; known fields: {list(FIELDS)}")
    required = [f.name for f in dataclasses.fields(HardwareSpec)
                if f.default is dataclasses.MISSING and f.name not in data]
    if required:
        raise SpecError(f"missing spec field(s) {required}")
    return HardwareSpec(**data)


def load_spec(name_or_path: Union[str, os.PathLike, HardwareSpec]) -> HardwareSpec:
    """A preset by name ("gxu", "h200"), or a TOML file (optionally `base = "gxu"` plus overrides)."""
    if isinstance(name_or_path, HardwareSpec):
        return name_or_path
    text = str(name_or_path)
    preset = PRESET_DIR / f"{text}.toml"
    if os.sep not in text and not text.endswith(".toml"):
        if not preset.exists():
            raise SpecError(f"unknown spec preset {text!r}; presets: {presets()}, or give a .toml path")
        path = preset
    else:
        path = Path(text)
        if not path.exists():
            raise SpecError(f"spec file {text!r} does not exist; give an existing .toml path or a "
                            f"preset: {presets()}")
    try:
        return spec_from_dict(_read_toml(path))
    except SpecError as error:  # whatever is wrong in it (its base's too), name the file
        raise SpecError(f"spec file {path}: {error}") from None


_lock = threading.Lock()
_active: HardwareSpec | None = None


def current_spec() -> HardwareSpec:
    """The active spec: set by `use_spec`, else `$GXUSIM_SPEC`, else the "gxu" preset."""
    global _active
    active = _active  # every launch asks: the lock only while there is none yet
    if active is not None:
        return active
    with _lock:
        if _active is None:
            _active = _environment_spec()
        return _active


def _environment_spec() -> HardwareSpec:
    value = os.environ.get("GXUSIM_SPEC", "gxu")
    try:
        return load_spec(value)
    except SpecError as error:
        raise SpecError(f"GXUSIM_SPEC={value!r} is not accepted: {error}") from None


_listeners: list[Callable[[HardwareSpec], None]] = []


def on_spec_change(listener: Callable[[HardwareSpec], None]) -> None:
    """Have `listener(spec)` called whenever another spec becomes active (for what caches
    facts derived from the spec elsewhere, as Inductor does its device properties)."""
    _listeners.append(listener)


def _activate(spec: HardwareSpec) -> None:
    global _active
    with _lock:
        changed, _active = _active is not spec, spec
    if changed:
        for listener in _listeners:
            listener(spec)


class use_spec:
    """Set the active spec; as a context manager, restore the previous one on exit."""

    def __init__(self, spec_or_name: Union[str, os.PathLike, HardwareSpec]):
        new = load_spec(spec_or_name)
        self._previous = current_spec()
        _activate(new)
        self.spec = new

    def __enter__(self) -> HardwareSpec:
        return self.spec

    def __exit__(self, *exc: object) -> None:
        _activate(self._previous)
