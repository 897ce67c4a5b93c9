"""Launching GXU kernels: plan the launch, check it against the spec, run it on the target.

Generated gxu kernel modules import this module in place of Inductor's
`triton_heuristics` (see `inductor_codegen.GXUTritonKernel.gen_common_triton_imports`),
so `@triton_heuristics.pointwise(...)` and friends wrap each `@triton.jit` kernel in a
`GXUKernel`. At every call, `GXUKernel.run`:

1. plans the launch from the real sizes (`plan.plan_launch`: the active policy's answers,
   or its search, clamped or rejected against the active spec), once per size signature;
2. checks the final launch with `gxusim.findings.check_launch` (raises `GXULimitError`
   before anything runs);
3. executes it on the active target (`gxusim.target`: the GPU, or the emulator), unless
   inside `predict_only()`, where nothing executes (the arguments may be fake tensors);
4. records a `gxusim.launch.Launch` (and, under `torch.profiler`, a trace event named after
   the kernel with its grid, warps, tiles per program, policy and predicted time) with the
   performance model's prediction from the
   target's counted facts (the emulator) or the plan's (the GPU), and any measured time.

Grids are always 1D: the kernels flatten their tile space and loop over it, so the
number of programs is a free choice between 1 and the tile count.
"""
from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import importlib.util
import logging
import os
from typing import Any, Callable, Iterator, Optional, Sequence

import torch
from torch.autograd import profiler as autograd_profiler

from gxusim import launch as launch_records
from gxusim.model import core, evidence, launch_facts, residency
from gxusim import target as targets
from gxusim.device import to_backing
from gxusim.findings import check_launch
from gxusim.kernel_args import is_output
from gxusim.spec import HardwareSpec, current_spec
from gxusim.traits import KernelTraits
from gxusim.triton_launch import cross_compiled_resources

from .autotune import AutotuneHeuristics
from .heuristics import GXUHeuristics, Heuristics
from .plan import LaunchPlan, PlanTimer, kernel_shape, plan_launch, sized_key
from .policies import current_heuristics


def _dtype_of(args: Sequence[Any], names: Sequence[str]) -> torch.dtype:
    """The dtype heuristics size tiles by: the first output's, else the first tensor's."""
    tensors = [(n, a) for n, a in zip(names, args) if isinstance(a, torch.Tensor)]
    for name, tensor in tensors:
        if is_output(name):
            return tensor.dtype
    return tensors[0][1].dtype if tensors else torch.float32


@dataclasses.dataclass(frozen=True)
class CapturedLaunch:
    """A launch as `capture` saw it: the kernel, its plan and its arguments (gxu tensors)."""
    kernel: "GXUKernel"
    plan: LaunchPlan
    args: tuple[Any, ...]


_captured: list[list[CapturedLaunch]] = []  # open `capture` blocks, innermost last


@contextlib.contextmanager
def capture() -> Iterator[list[CapturedLaunch]]:
    """Collect every gxu kernel launch made inside the block, with its arguments, so tools
    (the ceiling search, the model checks) can launch the same kernel again; inside
    `predict_only()` the arguments are the fake tensors it was planned for."""
    launches: list[CapturedLaunch] = []
    _captured.append(launches)
    try:
        yield launches
    finally:
        _captured.remove(launches)


@dataclasses.dataclass(frozen=True)
class KernelWatcher:
    """Callbacks for tools that follow a compile (`gxusim run`'s progress bar): `created`
    when Inductor loads a gxu kernel, `first_run` when that kernel's first launch returns
    (on the emulator, after its module is built and compiled)."""
    created: Callable[[str], None]
    first_run: Callable[[str], None]


_watchers: list[KernelWatcher] = []


@contextlib.contextmanager
def watching_kernels(watcher: KernelWatcher) -> Iterator[None]:
    """Inside the block, `watcher` hears of every gxu kernel created and first run."""
    _watchers.append(watcher)
    try:
        yield
    finally:
        _watchers.remove(watcher)


_predicting = contextvars.ContextVar("gxusim_predict_only", default=False)


@contextlib.contextmanager
def predict_only() -> Iterator[None]:
    """Inside the block, gxu kernels are planned, checked and recorded with the performance
    model's prediction (target "predict"), but not executed: with FakeTensor arguments a
    model is "run" at any size without memory or time (`gxusim.predict`)."""
    token = _predicting.set(True)
    try:
        yield
    finally:
        _predicting.reset(token)


def predicting() -> bool:
    """Whether the caller is inside `predict_only()`."""
    return _predicting.get()


_reinterpret_fast = torch._C._dynamo.guards._reinterpret_tensor


def reinterpret_tensor(tensor: torch.Tensor, size: Sequence[int], stride: Sequence[int],
                       offset: int) -> torch.Tensor:
    """The gxu wrapper's `reinterpret_tensor`: Inductor's C fast path, except in
    `predict_only`, where arguments are FakeTensors and the fast path (which skips
    dispatch) would hand back the fake's meta storage instead of a fake view."""
    if _predicting.get():  # `offset` is relative to the tensor's own storage offset
        return tensor.as_strided(size, stride, tensor.storage_offset() + offset)
    return _reinterpret_fast(tensor, size, stride, offset)


_AUTOTUNE = AutotuneHeuristics()


def max_autotune_policy(policy: Heuristics) -> Heuristics:
    """The policy a kernel compiled with mode="max-autotune" is planned by: autotune, in
    place of the default `gxu` policy, where the target can time kernels (as Inductor
    autotunes on CUDA); a policy the user chose, and targets that cannot time, keep theirs."""
    if type(policy) is GXUHeuristics and targets.active().can_time and not _predicting.get():
        return _AUTOTUNE
    return policy


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
        self.shape = dataclasses.replace(
            kernel_shape(fn, self.name),
            traits=KernelTraits.from_dict(inductor_meta.get("gxu_traits")))
        self.written = frozenset(inductor_meta.get("mutated_arg_names", ())) | {
            name for name in self.shape.runtime_args if is_output(name)}
        self._prepared: dict[tuple, _Prepared] = {}
        self._binaries: dict[tuple, Optional[targets.Resources]] = {}  # compiled here
        self._numel_positions = tuple(position for _, position in self.shape.numel_args)
        self.autotune_cache_info: Optional[dict] = None  # read by AsyncCompile's compile metrics
        self.fusion = tuple(inductor_meta.get("original_aten", ()))
        # torch.compile(mode="max-autotune") marks its kernels so: they are autotuned.
        self.max_autotune = bool(inductor_meta.get("max_autotune")
                                 or inductor_meta.get("max_autotune_pointwise"))
        if launch_records.log.isEnabledFor(logging.INFO):
            launch_records.log.info(launch_records.fusion_line(self.name, self.fusion))
        self._ran = False
        for watcher in _watchers:
            watcher.created(self.name)

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
        return {**self.__dict__, "fn": None, "_prepared": {}}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        if self.fn is None:
            spec = importlib.util.spec_from_file_location(f"gxu_kernel_{self.name}", self.filename)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            self.fn = getattr(module, self.name).fn

    # -- launching --------------------------------------------------------------------------
    def numels(self, args: Sequence[Any]) -> dict[str, int]:
        return {name: int(args[position]) for name, position in self.shape.numel_args}

    def plan(self, args: Sequence[Any], numels: dict[str, int], policy: Heuristics,
             spec: HardwareSpec) -> LaunchPlan:
        """The launch plan for these sizes, policy and spec (a policy that measures times its
        candidates on the active target, when the target can)."""
        dtype = _dtype_of(args, self.shape.runtime_args)
        target = targets.active()
        timer = None
        if target.can_time and not _predicting.get():
            kernel_args = args if target.accepts_gxu_tensors else to_backing(args)
            timer = PlanTimer(
                lambda candidate: target.time_launch(self._target_launch(candidate), kernel_args),
                lambda candidates: self.precompile_plans(candidates, kernel_args)
                if target.has_triton_driver else None)
        return plan_launch(self.shape, numels, dtype, policy, spec, timer,
                           sized_key(self.shape.source, numels, dtype, spec),
                           self.shape.argument_bytes(args),
                           lambda constexprs, warps, stages:
                               self.spilled_words(constexprs, warps, stages, spec),
                           lambda constexprs, warps, stages:
                               self.shared_bytes(constexprs, warps, stages, spec))

    def shared_bytes(self, constexprs: dict[str, int], num_warps: int,
                     num_stages: Optional[int], spec: HardwareSpec) -> Optional[int]:
        """Bytes of shared memory a program takes when the kernel is called with these
        constexprs and launch options, in the binary Triton makes for the spec's
        `ptxas_capability` (compiled here, on any machine); None where it cannot compile."""
        binary = self._binary(constexprs, num_warps, num_stages, spec)
        return None if binary is None else binary.smem_per_block

    def spilled_words(self, constexprs: dict[str, int], num_warps: int,
                      num_stages: Optional[int], spec: HardwareSpec) -> Optional[int]:
        """4-byte words a thread spills when the kernel is called with these constexprs
        (blocks, and a pipelined kernel's NUM_STAGES) and launch options, in the binary
        ptxas makes of it for the spec's `ptxas_capability` (compiled here, on any machine,
        the same on every target so that the emulator plans what the GPU runs): its stack
        frame beyond the frame of its narrowest tile (every block 1, one warp), which holds
        what no tile changes (libdevice's trigonometric slow path keeps a local array there
        on some Triton versions). None where Triton cannot compile it here."""
        frame = self._frame_words(constexprs, num_warps, num_stages, spec)
        if not frame:  # no binary, or no frame at all
            return frame
        narrowest = {name: 1 if name in self.shape.block_params else value
                     for name, value in constexprs.items()}
        return max(0, frame - (self._frame_words(narrowest, 1, num_stages, spec) or 0))

    def _frame_words(self, constexprs: dict[str, int], num_warps: int,
                     num_stages: Optional[int], spec: HardwareSpec) -> Optional[int]:
        """4-byte words of a thread's stack frame in the binary for these constexprs and
        launch options (None: no binary here)."""
        binary = self._binary(constexprs, num_warps, num_stages, spec)
        return None if binary is None else binary.spills

    def spec_binary(self, plan: LaunchPlan, spec: HardwareSpec) -> Optional[targets.Resources]:
        """The binary of `plan` for the spec's `ptxas_capability`, compiled on this machine
        (no GPU needed), with its machine code: what the performance model reads of a
        launch no target ran (predict-only), as it reads the binary the cuda target
        launches. None where Triton cannot compile it here."""
        return self._binary(plan.kernel_meta(self.shape), plan.num_warps, plan.num_stages, spec,
                            machine_code=True)

    def _binary(self, constexprs: dict[str, int], num_warps: int, num_stages: Optional[int],
                spec: HardwareSpec, machine_code: bool = False) -> Optional[targets.Resources]:
        key = (tuple(sorted(constexprs.items())), num_warps, num_stages, spec.ptxas_capability,
               machine_code)
        if key not in self._binaries:
            options = {"num_warps": num_warps,
                       **({} if num_stages is None else {"num_stages": num_stages})}
            try:
                self._binaries[key] = cross_compiled_resources(
                    self.fn, self.triton_meta["signature"], self.triton_meta["configs"][0],
                    constexprs, options, spec.ptxas_capability, machine_code)
            except Exception as error:  # noqa: BLE001 - no binary: estimates stand in for it
                launch_records.log.debug("gxusim: %s not compiled for sm_%d: %s", self.name,
                                         spec.ptxas_capability, error)
                self._binaries[key] = None
        return self._binaries[key]

    def precompile_plans(self, plans: Sequence[LaunchPlan], args: Sequence[Any]) -> None:
        """Compile the kernel for each plan in parallel threads, before tools time them one
        by one (Triton's compile is the slow part; the grid is not compiled in). A plan that
        does not compile is left for its launch to meet and report."""
        import concurrent.futures

        def warm(plan: LaunchPlan) -> None:
            launch = self._target_launch(plan)
            try:
                launch.fn.warmup(*args, grid=launch.grid, **launch.options())
            except Exception:  # noqa: BLE001 - raised again, with its launch, when timed
                pass
        if len(plans) < 2:
            return
        with concurrent.futures.ThreadPoolExecutor(
                min(32, len(plans), os.cpu_count() or 8)) as pool:
            list(pool.map(warm, plans))

    def _target_launch(self, plan: LaunchPlan) -> targets.KernelLaunch:
        return targets.KernelLaunch(self.fn, self.name, plan.grid, plan.num_warps,
                                    plan.num_stages, plan.kernel_meta(self.shape),
                                    self.shape.runtime_args, self.written)

    def _prepare(self, args: Sequence[Any], policy: Heuristics, spec: HardwareSpec) -> "_Prepared":
        """Everything about a launch that depends only on sizes, policy and spec: worked out
        on the first call with a new size signature, then reused by every call."""
        numels = self.numels(args)
        plan = self.plan(args, numels, policy, spec)
        check_launch(spec, plan.grid, plan.num_warps, self.name)
        static_facts = plan.facts(self.shape, numels, self.shape.argument_bytes(args), spec)
        meta = {**plan.kernel_meta(self.shape), **numels, **self.shape.static_blocks,
                "tiles": plan.n_tiles, "tiles_per_program": plan.tiles_per_program}
        return _Prepared(plan, self._target_launch(plan), meta, policy, spec, static_facts,
                         core.predict_seconds(static_facts, spec), self.fusion,
                         self.shape.source, self.shape.traits,
                         functools.partial(self.spec_binary, plan, spec))

    def run(self, *args: Any, stream: Any = None, **kwargs: Any) -> None:
        if kwargs:
            raise TypeError(f"{self.name}: unexpected launch keywords {sorted(kwargs)}")
        spec, policy = current_spec(), current_heuristics()
        if self.max_autotune:
            policy = max_autotune_policy(policy)
        # Keyed by identity: hashing a spec on every launch costs more than the lookup.
        key = (tuple([args[position] for position in self._numel_positions]), id(policy), id(spec))
        prepared = self._prepared.get(key)
        if prepared is None or prepared.policy is not policy or prepared.spec is not spec:
            prepared = self._prepared[key] = self._prepare(args, policy, spec)
        if _predicting.get():
            if _captured:  # fake arguments: what a corpus keeps of a launch (no data)
                _captured[-1].append(CapturedLaunch(self, prepared.plan, args))
            launch_records.record_lazily(prepared.predicted_record)
            return
        target = targets.active()
        kernel_args = args if target.accepts_gxu_tensors else to_backing(args)
        if targets.collecting():  # a graph's launches gathered before its first call
            target.collect(prepared.launch, kernel_args, spec)
            return
        if autograd_profiler._is_profiler_enabled:
            # An event under the kernel's name in the profiler's trace, carrying the launch
            # (on the cuda target, the CUDA kernel it launches is correlated with it).
            with torch._C._profiler._RecordFunctionFast(self.name, args,
                                                        prepared.profiler_args(target.name)):
                outcome = target.execute(prepared.launch, kernel_args, spec, stream)
        else:
            outcome = target.execute(prepared.launch, kernel_args, spec, stream)
        if _captured:
            _captured[-1].append(CapturedLaunch(self, prepared.plan, args))
        launch_records.record_lazily(prepared.record, target.name, outcome)
        if not self._ran:
            self._ran = True
            for watcher in _watchers:
                watcher.first_run(self.name)


@dataclasses.dataclass(frozen=True)
class _Prepared:
    """One size signature of a kernel under one policy and spec, ready to launch again."""
    plan: LaunchPlan
    launch: targets.KernelLaunch
    meta: dict[str, int]  # what the launch record shows
    policy: Heuristics
    spec: HardwareSpec
    facts: launch_facts.LaunchFacts  # from the plan, for targets that count nothing themselves
    predicted_s: float  # ... and what the model makes of them
    fusion: tuple[str, ...]
    source: str  # the kernel's (launch records carry it)
    traits: Optional[KernelTraits]  # ... and what code generation recorded of it
    spec_binary: Callable[[], Optional[targets.Resources]]  # compiled here, for predict-only
    # The plan's facts with what a compiled binary told (its spills, the programs its
    # registers and shared memory let reside on an SM), their prediction and the binary's
    # occupancy line: made once, so warm launches share them as they share the plan's.
    compiled: dict[targets.Resources, tuple[launch_facts.LaunchFacts, float, str, str]] = \
        dataclasses.field(default_factory=dict)

    def _facts(self, outcome: targets.Outcome, origin: str = "compiled binary"
               ) -> tuple[launch_facts.LaunchFacts, float, str, Optional[str]]:
        """The launch's facts (counted by the target, or the plan's refined by its compiled
        binary), their predicted time, and what limits the programs resident per SM (with
        its occupancy line where the target tells one, or the binary's, ending in `origin`)."""
        if outcome.facts is not None:
            return (outcome.facts, core.predict_seconds(outcome.facts, self.spec),
                    outcome.occupancy_limiter or
                    residency.residency_limiter(self.spec, self.plan.num_warps),
                    outcome.occupancy)
        binary = outcome.compiled
        if binary is None:
            return (self.facts, self.predicted_s,
                    residency.residency_limiter(self.spec, self.plan.num_warps), None)
        if binary not in self.compiled:
            facts = evidence.with_binary(self.facts, self.spec, binary)
            limiter = residency.residency(self.spec, facts.num_warps, binary.regs_per_thread,
                                           binary.smem_per_block)[1]
            waits = [f"{phase.round_trips:.2g}" for phase in facts.phases if phase.round_trips]
            line = (f"{facts.blocks_per_sm} blocks/SM (limited by {limiter}), "
                    f"{binary.regs_per_thread} regs/thread, {binary.spills} spilled, "
                    f"{binary.smem_per_block} B shared memory" +
                    (f", {'/'.join(waits)} memory waits a chunk" if waits else "") +
                    f" ({origin})")
            self.compiled[binary] = (facts, core.predict_seconds(facts, self.spec),
                                     limiter, line)
        return self.compiled[binary]

    def profiler_args(self, target: str) -> dict[str, Any]:
        """What the profiler's trace shows of this launch (the plan's predicted time)."""
        plan = self.plan
        return {"kernel_backend": "gxu", "target": target, "policy": self.policy.name,
                "grid": str(plan.grid), "num_warps": plan.num_warps,
                "tiles_per_program": plan.tiles_per_program,
                "meta": ", ".join(f"{k}={v}" for k, v in self.launch.meta.items()),
                "predicted_us": round(self.predicted_s * 1e6, 3)}

    def predicted_record(self) -> launch_records.Launch:
        """The launch record of a launch that predict-only did not run: the plan's facts as
        the binary compiled here for the spec reads them (the plan's alone where Triton
        cannot compile here)."""
        return self.record("predict", targets.Outcome([], compiled=self.spec_binary()),
                           f"compiled here for sm_{self.spec.ptxas_capability}")

    def record(self, target: str, outcome: targets.Outcome,
               origin: str = "compiled binary") -> launch_records.Launch:
        """The launch record of one launch of this plan."""
        plan = self.plan
        facts, predicted_s, limiter, occupancy = self._facts(outcome, origin)
        return launch_records.Launch(
            kernel=self.launch.name, grid=plan.grid, num_warps=plan.num_warps,
            meta=dict(self.meta), target=target, policy=self.policy.name,
            findings=list(outcome.findings), predicted_s=predicted_s,
            measured_s=outcome.measured_s, rules=plan.rules, fusion=self.fusion, facts=facts,
            occupancy_limiter=limiter, occupancy=occupancy, source=self.source,
            traits=self.traits)


class RecordedExternKernels:
    """Inductor's `extern_kernels` (mm, addmm, bmm, convolution, ...) as seen by gxu graphs:
    each call runs eagerly on the backing device (cuBLAS on cuda, ATen on the emulator
    target) and is recorded as a launch with policy "extern", so the launch records show
    every piece of work a compiled graph did, not only the GXU kernels."""

    def __init__(self, extern_kernels: Any) -> None:
        self._extern_kernels = extern_kernels

    def __getattr__(self, name: str) -> Callable[..., Any]:
        function = getattr(self._extern_kernels, name)
        kernel = f"extern_kernels.{name}"

        def recorded(*args: Any, **kwargs: Any) -> Any:
            result = function(*args, **kwargs)
            launch_records.record_lazily(
                _extern_record, kernel, "predict" if _predicting.get() else targets.current_target())
            return result
        setattr(self, name, recorded)  # later calls find it without __getattr__
        return recorded


def _extern_record(kernel: str, target: str) -> launch_records.Launch:
    return launch_records.Launch(kernel=kernel, grid=(1, 1, 1), num_warps=0,
                                 meta={"extern": "eager on the backing device"}, target=target,
                                 policy="extern")


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
