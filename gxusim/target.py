"""Execution targets: where gxu memory lives and where kernels run, one class per target.

* `CudaTarget` ("cuda"): gxu memory is CUDA device memory; compiled kernels run on the real
  GPU through Triton, under the GXU limits the launcher enforces.
* `EmulatorTarget` ("emulator"): gxu memory is host memory; kernels run on the numba
  emulator, which also counts what the performance model needs and checks the tiling.

Everything that differs between targets in Python is a method or attribute of these classes
(backing device, synchronisation, capability, how a kernel executes, whether kernels can be
timed), so the device module, the Inductor interface and the launcher ask the active target
object and cannot disagree; streams, events and memory statistics follow the backing
device in the device's C++ part (`gxusim/device/csrc/runtime.cpp`).
`set_target("auto" | "cuda" | "emulator")` chooses it (`auto`: CUDA when a GPU is present); the choice is fixed once the first gxu tensor is
allocated, since memory already handed out cannot move.
"""
from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import os
import threading
import weakref
from typing import Any, ClassVar, Iterator, Optional, Sequence

import torch

from . import environment
from .model import launch_facts
from .errors import InputError
from .findings import Finding
from .spec import HardwareSpec, current_spec
from .triton_launch import BinaryLauncher, Resources, compiled_resources, resources


@dataclasses.dataclass(frozen=True, eq=False)  # compared and hashed by identity: a cache key
class KernelLaunch:
    """One launch in the target's terms: a `@triton.jit` function and its final parameters."""
    fn: Any
    name: str
    grid: tuple[int, int, int]
    num_warps: int
    num_stages: Optional[int]  # None: Triton's default
    meta: dict[str, int]  # constexprs (XBLOCK, YBLOCK, R0_BLOCK)
    arg_names: tuple[str, ...]
    written: frozenset[str] = frozenset()  # arguments the kernel stores to

    def with_copies_of_written(self, args: Sequence[Any]) -> list[Any]:
        """`args` with every written tensor replaced by a copy: timing runs a kernel many
        times, which must not touch the real outputs (in-place kernels would compound)."""
        return [a.clone() if isinstance(a, torch.Tensor) and name in self.written else a
                for name, a in zip(self.arg_names, args)]

    def options(self) -> dict[str, int]:
        extra = {} if self.num_stages is None else {"num_stages": self.num_stages}
        return {**self.meta, "num_warps": self.num_warps, **extra}


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What executing one launch taught us (None: the target could not tell)."""
    findings: Sequence[Finding]
    facts: Optional[launch_facts.LaunchFacts] = None  # counted while running (the emulator)
    measured_s: Optional[float] = None  # kernel time (do_bench, GXUSIM_TIMING=1)
    occupancy_limiter: Optional[str] = None  # from the occupancy model (the emulator)
    occupancy: Optional[str] = None  # ... and its whole line
    compiled: Optional[Resources] = None  # what the binary says (the cuda target)


NOTHING_LEARNED = Outcome(findings=())  # a launch that counted, checked and timed nothing


@functools.cache
def timing_enabled() -> bool:
    """`GXUSIM_TIMING`, read on the first launch: every launch asks, and reading the
    environment costs about as much as the rest of a launch's Python."""
    return environment.choice("GXUSIM_TIMING") == "1"


_collecting = contextvars.ContextVar("gxusim_collecting_launches", default=False)


@contextlib.contextmanager
def collecting_launches() -> Iterator[None]:
    """Within the block, launches are handed to the target's `collect`, not run (a graph's
    first call on a target that compiles ahead: `graph_runtime.compiling_ahead`)."""
    token = _collecting.set(True)
    try:
        yield
    finally:
        _collecting.reset(token)


def collecting() -> bool:
    return _collecting.get()


class Target:
    """What a target must answer. One instance serves the process; what it keeps are caches."""

    name: ClassVar[str]
    has_triton_driver: ClassVar[bool]  # Triton compiles for a real GPU here
    compiles_ahead: ClassVar[bool] = False  # `collect` starts compiling a launch not yet run
    can_time: ClassVar[bool] = False  # `time_launch` measures kernels here
    accepts_gxu_tensors: ClassVar[bool] = False  # kernels take gxu tensors as they are
    captures_cuda_graphs: ClassVar[bool] = False  # launches can be captured in a CUDA graph
    capability_tuple: ClassVar[tuple[int, int]] = (8, 0)

    @classmethod
    def available(cls) -> bool:
        return True

    def backing_device(self) -> torch.device:
        raise NotImplementedError

    def synchronize(self) -> None:
        """Wait for all work queued on gxu."""

    def raw_stream(self) -> int:
        return 0

    def capability(self) -> tuple[int, int]:
        return self.capability_tuple

    def total_memory(self) -> int:
        return 0

    def supports_dtype(self, dtype: torch.dtype) -> bool:
        return True

    def in_bad_fork(self) -> bool:
        """This process is a forked child that cannot use the parent's gxu memory."""
        return False

    def execute(self, launch: KernelLaunch, args: Sequence[Any], spec: HardwareSpec,
                stream: Optional[int] = None) -> Outcome:
        """Run the launch (gxu tensors aliased on the backing device unless
        `accepts_gxu_tensors`), on `stream` (a raw stream handle) where the target has streams."""
        raise NotImplementedError

    def collect(self, launch: KernelLaunch, args: Sequence[Any], spec: HardwareSpec) -> None:
        """Start compiling what `launch` will need, without running it (`compiles_ahead`)."""

    def time_launch(self, launch: KernelLaunch, args: Sequence[Any]) -> float:
        """Median kernel time in seconds (targets with `can_time` only)."""
        raise NotImplementedError(f"gxusim target {self.name!r} cannot time kernels")

    def compiled_resources(self, launch: KernelLaunch, args: Sequence[Any]
                           ) -> Optional[Resources]:
        """The spills, registers and shared memory of the launch's compiled binary; None
        where this target compiles no binary."""
        return None


def launch_triton(launch: KernelLaunch, args: Sequence[Any]) -> None:
    launch.fn[launch.grid](*args, **launch.options())


class CudaTarget(Target):
    name = "cuda"
    has_triton_driver = True
    can_time = True
    accepts_gxu_tensors = True  # gxu memory is CUDA memory: Triton needs only data pointers
    captures_cuda_graphs = True

    def __init__(self) -> None:
        self._launchers: dict[KernelLaunch, BinaryLauncher] = {}
        self._learned: dict[KernelLaunch, Outcome] = {}  # per launch: its binary's counts
        self._partition: Optional[tuple[Optional[int], Any]] = None  # (SMs, green context)

    def _enter_partition(self, spec: HardwareSpec) -> None:
        """With a `gpu_partition` spec, run on a green context of `spec.sm_count` SMs. The
        first launch decides for the whole process: Triton loads each compiled kernel into
        the CUDA context current at its first launch, so kernels cannot move between the
        partition and the whole GPU afterwards."""
        wanted = spec.sm_count if spec.gpu_partition else None
        if self._partition is None:
            context = None
            if wanted is not None:
                from torch.cuda import green_contexts
                if not green_contexts.SUPPORTED:
                    raise RuntimeError(f"spec {spec.name!r} asks for a GPU partition "
                                       f"(gpu_partition), but torch {torch.__version__} was "
                                       f"built without CUDA green contexts")
                try:
                    context = green_contexts.GreenContext.create(
                        num_sms=wanted, device_id=torch.cuda.current_device())
                    context.set_context()
                except RuntimeError as error:
                    raise RuntimeError(f"spec {spec.name!r}: the driver refused a green context "
                                       f"of {wanted} SMs: {error}") from None
            self._partition = (wanted, context)
        elif self._partition[0] != wanted:
            held = f"{self._partition[0]} SMs" if self._partition[0] else "the whole GPU"
            raise RuntimeError(f"spec {spec.name!r} needs {f'{wanted} SMs' if wanted else 'the whole GPU'}, "
                               f"but this process already runs gxu kernels on {held}; use one "
                               f"gpu_partition setting per process")

    def partition_sms(self) -> Optional[int]:
        """SMs of the green context kernels run on (None: the whole GPU, or not decided yet)."""
        return self._partition[0] if self._partition else None

    @classmethod
    def available(cls) -> bool:
        return torch.cuda.is_available()

    def backing_device(self) -> torch.device:
        return torch.device("cuda", torch.cuda.current_device())

    def synchronize(self) -> None:
        torch.cuda.synchronize()

    def raw_stream(self) -> int:
        # what torch.cuda.current_stream().cuda_stream returns, without making a Stream object
        # or torch.cuda.current_device()'s lazy-init check (every wrapper call asks; CUDA is
        # initialised by then: its inputs live there)
        return torch._C._cuda_getCurrentRawStream(torch._C._cuda_getDevice())

    def capability(self) -> tuple[int, int]:
        return torch.cuda.get_device_capability()

    def total_memory(self) -> int:
        return torch.cuda.get_device_properties().total_memory

    def in_bad_fork(self) -> bool:
        return torch.cuda._is_in_bad_fork()  # CUDA's own rule: its driver does not survive fork

    def execute(self, launch: KernelLaunch, args: Sequence[Any], spec: HardwareSpec,
                stream: Optional[int] = None) -> Outcome:
        if self._partition is None or self._partition[0] != (spec.sm_count if spec.gpu_partition else None):
            self._enter_partition(spec)
        launcher = self._launchers.get(launch)
        if launcher is None:
            launcher = self._launchers[launch] = BinaryLauncher(launch.fn, launch.arg_names,
                                                                launch.options())
        binary = launcher(launch.grid, args, self.raw_stream() if stream is None else stream)
        learned = self._learned.get(launch)
        if learned is None:
            # What the binary's loader read off it, the same for every specialization of
            # one launch's options, as far as the model asks.
            learned = self._learned[launch] = Outcome((), compiled=resources(binary))
        if timing_enabled():
            return dataclasses.replace(learned, measured_s=self.time_launch(launch, args))
        return learned

    def time_launch(self, launch: KernelLaunch, args: Sequence[Any]) -> float:
        # do_bench records its events around the launches alone, after warm-up, and takes
        # the median: the kernel's time, not the host's dispatch.
        import triton.testing
        self._enter_partition(current_spec())
        copies = launch.with_copies_of_written(args)
        return triton.testing.do_bench(lambda: launch_triton(launch, copies), warmup=5, rep=20,
                                       return_mode="median") / 1e3

    def compiled_resources(self, launch: KernelLaunch, args: Sequence[Any]) -> Resources:
        return compiled_resources(launch.fn, launch.grid, args, launch.options())


class EmulatorTarget(Target):
    name = "emulator"
    has_triton_driver = False
    compiles_ahead = True

    def __init__(self) -> None:
        # Each launch's last outcome. A warm launch mostly counts the same facts and findings
        # again and then hands back that same object, so the launch records of a long run
        # share one rather than each hold a copy (about a kilobyte a launch: 100 MB for a
        # full record ring).
        self._last_outcome: weakref.WeakKeyDictionary[KernelLaunch, Outcome] = \
            weakref.WeakKeyDictionary()

    def backing_device(self) -> torch.device:
        return torch.device("cpu")

    def total_memory(self) -> int:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")

    def supports_dtype(self, dtype: torch.dtype) -> bool:
        return dtype not in (torch.float64, torch.complex64, torch.complex128)

    def execute(self, launch: KernelLaunch, args: Sequence[Any], spec: HardwareSpec,
                stream: Optional[int] = None) -> Outcome:
        if environment.choice("GXUSIM_EMULATOR") == "interpreter":
            if os.environ.get("TRITON_INTERPRET") != "1":
                raise RuntimeError("GXUSIM_EMULATOR=interpreter needs TRITON_INTERPRET=1 set "
                                   "before triton is imported")
            launch_triton(launch, args)
            return Outcome([])
        from . import emulator
        report = emulator.run_launch(launch.fn, launch.grid, args, launch.num_warps, launch.meta,
                                     compiler_generated=True, arg_names=list(launch.arg_names),
                                     spec=spec)
        occupancy = report.occupancy
        outcome = Outcome(list(report.findings), report.facts, None,
                          occupancy.limiter if occupancy else None,
                          str(occupancy) if occupancy else None)
        last = self._last_outcome.get(launch)
        if last == outcome:
            return last
        self._last_outcome[launch] = outcome
        return outcome

    def collect(self, launch: KernelLaunch, args: Sequence[Any], spec: HardwareSpec) -> None:
        if environment.choice("GXUSIM_EMULATOR") == "numba":
            from . import emulator
            emulator.compile_ahead(launch.fn, launch.grid, args, launch.num_warps, launch.meta,
                                   arg_names=list(launch.arg_names), spec=spec)


TARGETS: dict[str, type[Target]] = {cls.name: cls for cls in (CudaTarget, EmulatorTarget)}
CHOICES = ("auto", *TARGETS)

_lock = threading.Lock()
_active: Optional[Target] = None
_frozen_device: Optional[torch.device] = None  # set by the first gxu allocation


class TargetUnavailableError(InputError, RuntimeError):
    """The target asked for cannot run on this machine (cuda without a GPU)."""


def _resolve(name: str) -> Target:
    if name not in CHOICES:
        raise InputError(f"unknown gxusim target {name!r}; choose one of {CHOICES}")
    if name == "auto":
        name = CudaTarget.name if CudaTarget.available() else EmulatorTarget.name
    cls = TARGETS[name]
    if not cls.available():
        raise TargetUnavailableError(f"gxusim target {name!r} needs a CUDA GPU, and torch "
                                     f"{torch.__version__} sees none; use 'emulator' or 'auto'")
    return cls()


def set_target(name: str) -> None:
    """Choose the execution target ("auto" | "cuda" | "emulator")."""
    global _active
    with _lock:
        resolved = _resolve(name)
        if _frozen_device is not None and _active is not None and resolved.name != _active.name:
            raise RuntimeError(f"gxusim target is already {_active.name!r} and gxu memory has "
                               f"been allocated there; set the target before the first gxu "
                               f"tensor (or with GXUSIM_TARGET)")
        _active = resolved


def active() -> Target:
    """The active target object (resolved from `GXUSIM_TARGET` on first use)."""
    global _active
    if _active is None:
        with _lock:
            if _active is None:
                _active = _resolve(environment.choice("GXUSIM_TARGET"))
    return _active


def current_target() -> str:
    """The active target's name: "cuda" or "emulator"."""
    return active().name


def backing_device() -> torch.device:
    """The torch device whose memory backs gxu tensors on the active target."""
    # Once memory is handed out it stays where it is; this is also every eager op's fast path.
    if _frozen_device is not None:
        return _frozen_device
    return active().backing_device()


def frozen() -> bool:
    """Whether gxu memory has been allocated (the target can no longer change)."""
    return _frozen_device is not None


def freeze() -> torch.device:
    """Called on the first gxu allocation: from then on the target cannot change."""
    global _frozen_device
    if _frozen_device is None:
        device = backing_device()
        with _lock:
            if _frozen_device is None:
                _frozen_device = device
    return _frozen_device
