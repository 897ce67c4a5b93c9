"""Launching GXU kernels: plan the launch, check it against the spec, run it on the target.

Generated gxu kernel modules import this module in place of Inductor's
`triton_heuristics` (see `inductor_codegen.GXUTritonKernel.gen_common_triton_imports`),
so `@triton_heuristics.pointwise(...)` and friends wrap each `@triton.jit` kernel in a
`GXUKernel`. At every call, `GXUKernel.run`:

1. plans the launch from the real sizes: the active policy picks XBLOCK/RBLOCK/num_warps
   and the grid, `heuristics.resolve_*` clamps or rejects them against the active spec;
2. checks the final launch with `gxusim.findings.check_launch` (raises `GXULimitError`
   before anything runs);
3. executes on the target: Triton for the real GPU (`cuda`), or the numba emulator
   (`emulator`; Triton's interpreter with `GXUSIM_EMULATOR=interpreter` and
   `TRITON_INTERPRET=1`);
4. records a `gxusim.launch.Launch`, with the performance model's predicted time (from the
   emulator's traffic count, or from the argument sizes on the GPU) and, with
   `GXUSIM_TIMING=1` on the GPU, the measured kernel time.

Grids are always 1D: the kernels flatten their tile space and loop over it, so the
number of programs is a free choice between 1 and the tile count.
"""
from __future__ import annotations

import dataclasses
import importlib.util
import inspect
import math
import os
import re
from typing import Any, Callable, Optional, Sequence

import torch

from gxusim import launch as launch_records
from gxusim import perf_model
from gxusim import target as targets
from gxusim.findings import Finding, check_launch
from gxusim.spec import HardwareSpec, current_spec

from . import autotune
from .heuristics import (Heuristics, cdiv, current_heuristics, resolve_block, resolve_grid,
                         resolve_num_warps)

# Names the Inductor kernel signature uses for sizes and block constexprs.
NUMEL_ARGS = ("xnumel", "ynumel", "r0_numel")
BLOCK_PARAMS = {"x": "XBLOCK", "y": "YBLOCK", "r0": "R0_BLOCK"}
# A block size the kernel body fixes itself: persistent reductions' R0_BLOCK, no-x-dim
# reductions' XBLOCK = 1.
_STATIC_BLOCK = re.compile(r"^\s*(XBLOCK|YBLOCK|R0_BLOCK)\s*:\s*tl\.constexpr\s*=\s*(\d+)",
                           re.MULTILINE)


@dataclasses.dataclass(frozen=True)
class LaunchPlan:
    meta: dict[str, int]  # constexprs passed to the kernel (XBLOCK, YBLOCK, R0_BLOCK)
    num_warps: int
    programs: int
    n_tiles: int
    rules: dict[str, str]

    @property
    def grid(self) -> tuple[int, int, int]:
        return (self.programs, 1, 1)

    @property
    def tiles_per_program(self) -> int:
        return cdiv(self.n_tiles, self.programs)


@dataclasses.dataclass(frozen=True)
class KernelShape:
    """What a kernel's signature says about its launch: which sizes and blocks it takes."""
    name: str
    runtime_args: tuple[str, ...]  # positional (non-constexpr) parameters, in order
    block_params: tuple[str, ...]  # constexpr block sizes the launcher must pass
    static_blocks: dict[str, int]  # block sizes fixed in the body, not launch parameters

    @property
    def static_rblock(self) -> Optional[int]:
        return self.static_blocks.get("R0_BLOCK")

    @property
    def is_reduction(self) -> bool:
        return "r0_numel" in self.runtime_args

    @property
    def is_2d(self) -> bool:
        return "YBLOCK" in self.block_params


def kernel_shape(fn: Any, name: str) -> KernelShape:
    """Read a `@triton.jit` kernel's signature (JITFunction or, under TRITON_INTERPRET, its
    InterpretedFunction: both wrap the Python function as `.fn`)."""
    python_fn = fn.fn
    params = inspect.signature(python_fn).parameters.values()
    constexpr = {p.name for p in params if "constexpr" in str(p.annotation)}
    runtime = tuple(p.name for p in params if p.name not in constexpr)
    blocks = tuple(p.name for p in params if p.name in constexpr and p.name in BLOCK_PARAMS.values())
    static = {block: int(size) for block, size in
              _STATIC_BLOCK.findall(inspect.getsource(python_fn))}
    return KernelShape(name, runtime, blocks, static)


def plan_launch(shape: KernelShape, numels: dict[str, int], dtype: torch.dtype,
                policy: Heuristics, spec: HardwareSpec) -> LaunchPlan:
    """Launch parameters for one kernel call: the policy's choice, clamped by the spec."""
    xnumel = numels.get("xnumel", 1)
    rules: dict[str, str] = {}
    meta: dict[str, int] = {}
    if shape.is_reduction:
        rnumel = numels["r0_numel"]
        choice = policy.select_reduction(xnumel, rnumel, dtype)
        meta["XBLOCK"] = shape.static_blocks.get("XBLOCK") or \
            resolve_block(policy, "select_reduction (xblock)", choice.xblock)
        if "R0_BLOCK" in shape.block_params:
            meta["R0_BLOCK"] = resolve_block(policy, "select_reduction (rblock)", choice.rblock)
            rules["R0_BLOCK"] = f"{policy.name}.select_reduction (looped reduction)"
        rules["XBLOCK"] = "fixed by the kernel" if "XBLOCK" in shape.static_blocks else \
            f"{policy.name}.select_reduction"
        requested_warps = choice.num_warps
        n_tiles = cdiv(xnumel, meta["XBLOCK"])
    elif shape.is_2d:
        ynumel = numels["ynumel"]
        xblock, yblock = policy.select_tile_2d(xnumel, ynumel, dtype)
        meta["XBLOCK"] = resolve_block(policy, "select_tile_2d (xblock)", xblock)
        meta["YBLOCK"] = resolve_block(policy, "select_tile_2d (yblock)", yblock)
        rules["XBLOCK"] = rules["YBLOCK"] = f"{policy.name}.select_tile_2d"
        requested_warps = policy.select_num_warps(xblock * yblock)
        n_tiles = cdiv(xnumel, xblock) * cdiv(ynumel, yblock)
    else:
        meta["XBLOCK"] = resolve_block(policy, "select_xblock", policy.select_xblock(xnumel, dtype))
        rules["XBLOCK"] = f"{policy.name}.select_xblock"
        requested_warps = policy.select_num_warps(meta["XBLOCK"])
        n_tiles = cdiv(xnumel, meta["XBLOCK"])
    num_warps, rules["num_warps"] = resolve_num_warps(policy, requested_warps, spec)
    n_tiles = max(1, n_tiles)
    if shape.is_reduction or shape.is_2d:
        requested_grid = policy.get_grid(n_tiles, 1)
    else:
        requested_grid = policy.get_grid(xnumel, meta["XBLOCK"])
    programs, rules["grid"] = resolve_grid(policy, requested_grid, n_tiles, spec)
    return LaunchPlan({k: v for k, v in meta.items() if k in shape.block_params}, num_warps,
                      programs, n_tiles, rules)


def _is_gxu(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.device.type == "gxu"


def _backing_args(args: Sequence[Any]) -> list[Any]:
    from gxusim.device import backing_alias
    return [backing_alias(a) if _is_gxu(a) else a for a in args]


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What an executor learned about one launch (None: it could not tell)."""
    findings: list[Finding]
    traffic_bytes: Optional[float] = None  # the emulator's DRAM sector count
    blocks_per_sm: Optional[int] = None  # the emulator's occupancy (registers, smem included)
    measured_s: Optional[float] = None  # CUDA events, with GXUSIM_TIMING=1


def _timing_enabled() -> bool:
    return os.environ.get("GXUSIM_TIMING", "0") == "1"


def run_triton(kernel: "GXUKernel", plan: LaunchPlan, args: Sequence[Any]) -> Outcome:
    """Compile with Triton and launch on the current CUDA stream (or Triton's interpreter).
    With GXUSIM_TIMING=1 on the GPU, CUDA events time the kernel (this synchronises)."""
    timed = _timing_enabled() and targets.current_target() == "cuda"
    if timed:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
    kernel.fn[plan.grid](*_backing_args(args), **plan.meta, num_warps=plan.num_warps)
    measured = None
    if timed:
        end.record()
        end.synchronize()
        measured = start.elapsed_time(end) / 1e3
    return Outcome([], measured_s=measured)


def run_emulator(kernel: "GXUKernel", plan: LaunchPlan, args: Sequence[Any]) -> Outcome:
    """Run on the numba emulator; error findings raise there (GXUSIM_CHECKS decides)."""
    if os.environ.get("GXUSIM_EMULATOR", "numba") == "interpreter":
        if os.environ.get("TRITON_INTERPRET") != "1":
            raise RuntimeError("GXUSIM_EMULATOR=interpreter needs TRITON_INTERPRET=1 set before "
                               "triton is imported")
        return run_triton(kernel, plan, args)
    from gxusim import emulator
    report = emulator.run_launch(kernel.fn, plan.grid, _backing_args(args), plan.num_warps,
                                 plan.meta, compiler_generated=True,
                                 arg_names=list(kernel.shape.runtime_args), spec=current_spec())
    return Outcome(list(report.findings), report.traffic_bytes, report.occupancy.blocks_per_sm)


EXECUTORS: dict[str, Callable[["GXUKernel", LaunchPlan, Sequence[Any]], Outcome]] = {
    "cuda": run_triton,
    "emulator": run_emulator,
}


def _dtype_of(args: Sequence[Any], names: Sequence[str]) -> torch.dtype:
    """The dtype heuristics size tiles by: the first output's, else the first tensor's."""
    tensors = [(n, a) for n, a in zip(names, args) if isinstance(a, torch.Tensor)]
    for name, tensor in tensors:
        if "out_ptr" in name:
            return tensor.dtype
    return tensors[0][1].dtype if tensors else torch.float32


class GXUKernel:
    """A generated gxu kernel: the `@triton.jit` function plus how to launch it under GXU limits."""

    def __init__(self, fn: Any, kind: str, triton_meta: dict, inductor_meta: dict,
                 filename: Optional[str] = None) -> None:
        self.fn = fn
        self.kind = kind
        self.triton_meta = triton_meta
        self.inductor_meta = inductor_meta
        self.filename = filename
        self.name = fn.__name__
        self.shape = kernel_shape(fn, self.name)
        self._plans: dict[tuple, LaunchPlan] = {}
        self._numel_positions = [(name, position) for position, name
                                 in enumerate(self.shape.runtime_args) if name in NUMEL_ARGS]
        self.autotune_cache_info: Optional[dict] = None  # read by AsyncCompile's compile metrics

    # -- what Inductor's AsyncCompile expects of a compiled kernel object --------------------
    def precompile(self, *args: Any, **kwargs: Any) -> None:
        """Nothing ahead of time: configs depend on the sizes seen at launch (dynamic shapes)."""

    def set_compile_info(self, *args: Any, **kwargs: Any) -> None:
        pass

    def prepare_for_pickle(self) -> None:
        pass

    def restore_after_unpickle(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __getstate__(self) -> dict:
        # Compile workers send kernels back pickled; the JIT function is reloaded from source.
        return {**self.__dict__, "fn": None}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        if self.fn is None:
            spec = importlib.util.spec_from_file_location(f"gxu_kernel_{self.name}", self.filename)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            self.fn = getattr(module, self.name).fn

    # -- launching --------------------------------------------------------------------------
    def _numels(self, args: Sequence[Any]) -> dict[str, int]:
        return {name: int(args[position]) for name, position in self._numel_positions}

    def plan(self, args: Sequence[Any], numels: dict[str, int], policy: Heuristics,
             spec: HardwareSpec) -> LaunchPlan:
        """The launch plan for these sizes, policy and spec (computed once, then cached)."""
        dtype = _dtype_of(args, self.shape.runtime_args)
        key = (tuple(numels.items()), dtype, policy, spec)
        plan = self._plans.get(key)
        if plan is None:
            plan = autotune.lookup(self, args, numels, policy, spec) or \
                plan_launch(self.shape, numels, dtype, policy, spec)
            self._plans[key] = plan
        return plan

    def profile(self, plan: LaunchPlan, numels: dict[str, int], args: Sequence[Any],
                outcome: Outcome) -> perf_model.LaunchProfile:
        """The launch as the performance model sees it. Without the emulator's counts, every
        tensor argument is taken to be read or written once, and warps limit residency."""
        spec = current_spec()
        traffic = outcome.traffic_bytes if outcome.traffic_bytes is not None else sum(
            a.numel() * a.element_size() for a in args if isinstance(a, torch.Tensor))
        blocks = outcome.blocks_per_sm if outcome.blocks_per_sm is not None else \
            perf_model.blocks_per_sm(spec, plan.num_warps)
        # Elements of one tile: its blocks (a persistent reduction's fixed R0_BLOCK included),
        # times the chunks a looped reduction walks through.
        chunks = cdiv(numels["r0_numel"], plan.meta["R0_BLOCK"]) if "R0_BLOCK" in plan.meta else 1
        tile_elements = math.prod({**plan.meta, **self.shape.static_blocks}.values()) * chunks
        return perf_model.LaunchProfile(traffic, plan.programs, plan.tiles_per_program, blocks,
                                        tile_elements / (plan.num_warps * spec.warp_size))

    def run(self, *args: Any, stream: Any = None, **kwargs: Any) -> None:
        if kwargs:
            raise TypeError(f"{self.name}: unexpected launch keywords {sorted(kwargs)}")
        spec, policy = current_spec(), current_heuristics()
        numels = self._numels(args)
        plan = self.plan(args, numels, policy, spec)
        check_launch(spec, plan.grid, plan.num_warps, self.name)
        target = targets.current_target()
        outcome = EXECUTORS[target](self, plan, args)
        predicted = perf_model.predict_seconds(self.profile(plan, numels, args, outcome), spec)
        meta = {**plan.meta, **numels}
        meta.update(self.shape.static_blocks)
        meta.update(tiles=plan.n_tiles, tiles_per_program=plan.tiles_per_program)
        launch_records.record(launch_records.Launch(
            kernel=self.name, grid=plan.grid, num_warps=plan.num_warps, meta=meta, target=target,
            policy=policy.name, findings=outcome.findings, predicted_s=predicted,
            measured_s=outcome.measured_s, rules=plan.rules))


class RecordedExternKernels:
    """Inductor's `extern_kernels` (mm, addmm, bmm, convolution, ...) as seen by gxu graphs:
    each call runs eagerly on the backing device (cuBLAS on cuda, ATen on the emulator
    target) and is recorded as a launch with policy "extern", so the launch records show
    every piece of work a compiled graph did, not only the GXU kernels."""

    def __init__(self, extern_kernels: Any) -> None:
        self._extern_kernels = extern_kernels

    def __getattr__(self, name: str) -> Callable[..., Any]:
        function = getattr(self._extern_kernels, name)

        def recorded(*args: Any, **kwargs: Any) -> Any:
            result = function(*args, **kwargs)
            launch_records.record(launch_records.Launch(
                kernel=f"extern_kernels.{name}", grid=(1, 1, 1), num_warps=0,
                meta={"extern": "eager on the backing device"}, target=targets.current_target(),
                policy="extern"))
            return result
        return recorded


def _decorator(kind: str) -> Callable[..., Callable[[Any], GXUKernel]]:
    def decorator(*args: Any, triton_meta: dict, inductor_meta: Optional[dict] = None,
                  filename: Optional[str] = None, **kwargs: Any) -> Callable[[Any], GXUKernel]:
        return lambda fn: GXUKernel(fn, kind, triton_meta, inductor_meta or {}, filename)
    decorator.__name__ = kind
    return decorator


pointwise = _decorator("pointwise")
reduction = _decorator("reduction")
persistent_reduction = _decorator("persistent_reduction")


def _refuse(kind: str) -> Callable[..., Any]:
    def decorator(*args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(
            f"gxusim: Inductor emitted a {kind} kernel for gxu; this kernel kind picks its own "
            f"program ids and cannot be capped at the spec's grid, so gxu does not support it")
    return decorator


split_scan = _refuse("split_scan")
cooperative_reduction = _refuse("cooperative_reduction")
template = _refuse("template")
foreach = _refuse("foreach (combo)")
user_autotune = _refuse("user-defined Triton")
