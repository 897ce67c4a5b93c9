"""`torch.gxu`: the device module, plus PrivateUse1 registration.

One gxu device (index 0; any other index is torch's "out of range" error, as CUDA's is).
Its properties are the active hardware spec beside the fields `torch.cuda` reports; its
memory, streams and events are the execution target's (`gxusim.target`): the device's C++
part (`csrc/runtime.cpp`) serves torch's generic `torch.Stream`, `torch.Event`,
`torch.Generator` and `torch.accelerator` for gxu, and this module is `torch.cuda`'s API on
top of them.

Internals used (checked on torch 2.11 and 2.13): `torch._C._get_privateuse1_backend_name`,
`torch._register_device_module`.
"""
from __future__ import annotations

import contextlib
import dataclasses
import types
from typing import Any, Iterable, Optional

import torch

from gxusim import target
from gxusim.once import once
from gxusim.spec import HardwareSpec, current_spec

from . import autocast, cells, ops
from .native import native

DEVICE_NAME = "gxu"
_DEVICE_COUNT = 1

Device = "int | str | torch.device | None"


def is_available() -> bool:
    return True


def device_count() -> int:
    return _DEVICE_COUNT


def current_device() -> int:
    return 0


def _check_index(device: Device) -> int:
    """The device's index (0), or torch's error for an index gxu does not have."""
    if device == 0:  # what compiled graphs pass, twice a call
        return 0
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != DEVICE_NAME:
            raise ValueError(f"expected a gxu device, got {device}")
        device = device.index
    if device not in (None, -1, 0):
        raise RuntimeError(f"gxu device index {device} is invalid: The device index is out of "
                           f"range (torch.gxu.device_count() is {_DEVICE_COUNT}, so the only "
                           f"gxu device is gxu:0)")
    return 0


def set_device(device: Device) -> None:
    _check_index(device)


class device:
    """Context manager selecting a gxu device; there is one, so it only checks the index."""

    def __init__(self, device: Device) -> None:
        _check_index(device)

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def init() -> None:
    """Initialise gxu now rather than at its first use: fixes the execution target."""
    if _is_in_bad_fork():
        raise RuntimeError("Cannot re-initialize GXU in forked subprocess. To use GXU with "
                           "multiprocessing, you must use the 'spawn' start method (gxu memory "
                           "is CUDA memory here, which a forked child cannot use)")
    target.freeze()


def is_initialized() -> bool:
    return target.frozen()


def _is_in_bad_fork() -> bool:
    """A forked child of a process whose gxu memory the child cannot use (CUDA memory: the
    emulator's host memory forks as any memory does)."""
    return target.frozen() and target.active().in_bad_fork()


def synchronize(device: Device = None) -> None:
    """Wait for all work on gxu (the CUDA device on the cuda target; nothing on the emulator)."""
    _check_index(device)
    target.active().synchronize()


# -- streams and events: torch's generic classes, on gxu ----------------------------------

_PRIVATEUSE1 = torch._C._autograd.DeviceType.PrivateUse1


class Stream(torch.Stream):
    """A gxu stream (a CUDA stream on the cuda target; ordering nothing on the emulator,
    where each kernel finishes as it is launched)."""

    def __new__(cls, device: Device = None, priority: int = 0, **kwargs: Any) -> "Stream":
        if kwargs:  # torch.Stream's own (stream_id, device_index, device_type)
            return super().__new__(cls, **kwargs)
        _check_index(device)
        return super().__new__(cls, device=torch.device(DEVICE_NAME, 0), priority=priority)


def _as_gxu_stream(stream: torch.Stream) -> Stream:
    return Stream(stream_id=stream.stream_id, device_index=0, device_type=stream.device_type)


def current_stream(device: Device = None) -> Stream:
    """The stream gxu work is queued on."""
    _check_index(device)
    return _as_gxu_stream(torch._C._accelerator_getStream(0))


def default_stream(device: Device = None) -> Stream:
    _check_index(device)
    # Stream id 0 is the default stream on CUDA (and on the emulator).
    return Stream(stream_id=0, device_index=0, device_type=_PRIVATEUSE1.value)


def set_stream(stream: Optional[torch.Stream]) -> None:
    if stream is not None:
        torch._C._accelerator_setStream(stream)


def stream(stream: Optional[torch.Stream]) -> contextlib.AbstractContextManager:
    """Context manager making `stream` the current gxu stream (None: no change)."""
    return contextlib.nullcontext() if stream is None else _StreamContext(stream)


class _StreamContext:
    def __init__(self, stream: torch.Stream) -> None:
        self.stream = stream
        self.previous: list[torch.Stream] = []

    def __enter__(self) -> torch.Stream:
        self.previous.append(current_stream())
        set_stream(self.stream)
        return self.stream

    def __exit__(self, *exc: object) -> None:
        set_stream(self.previous.pop())


def Event(enable_timing: bool = False, blocking: bool = False, interprocess: bool = False
          ) -> torch.Event:
    """A gxu event (a CUDA event on the cuda target; a host timestamp on the emulator): a
    plain `torch.Event`, since torch's `elapsed_time` takes no subclass of it."""
    return torch.Event(device=DEVICE_NAME, enable_timing=enable_timing, blocking=blocking,
                       interprocess=interprocess)


# -- random numbers: one default generator, drawing from one of the backing device ------

default_generators: tuple[torch.Generator, ...] = (native.default_generator(),)


def _generator(device: Device = None) -> torch.Generator:
    return default_generators[_check_index(device)]


def manual_seed(seed: int) -> None:
    _generator().manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    for generator in default_generators:
        generator.manual_seed(int(seed))


def seed() -> None:
    _generator().seed()


def seed_all() -> None:
    for generator in default_generators:
        generator.seed()


def initial_seed() -> int:
    return _generator().initial_seed()


def get_rng_state(device: Device = "gxu") -> torch.Tensor:
    return _generator(device).get_state()


def set_rng_state(new_state: torch.Tensor, device: Device = "gxu") -> None:
    _generator(device).set_state(new_state)


def get_rng_state_all() -> list[torch.Tensor]:
    return [generator.get_state() for generator in default_generators]


def set_rng_state_all(new_states: Iterable[torch.Tensor]) -> None:
    for generator, state in zip(default_generators, new_states):
        generator.set_state(state)


# -- properties -------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class DeviceProperties:
    """What `torch.cuda.get_device_properties` reports, for gxu: the spec's numbers under
    CUDA's names, the target's memory and capability, and the spec itself (its fields also
    read as attributes: `props.max_grid`)."""
    spec: HardwareSpec
    name: str
    major: int
    minor: int
    total_memory: int
    multi_processor_count: int
    max_threads_per_multi_processor: int
    max_threads_per_block: int
    regs_per_multiprocessor: int
    warp_size: int
    shared_memory_per_block: int
    shared_memory_per_multiprocessor: int
    L2_cache_size: int
    type: str = DEVICE_NAME

    def __getattr__(self, name: str) -> Any:
        if name == "spec":  # not yet set (unpickling, copying)
            raise AttributeError(name)
        return getattr(self.spec, name)


def get_device_properties(device: Device = None) -> DeviceProperties:
    """The active hardware spec, as the device's properties."""
    _check_index(device)
    spec = current_spec()
    major, minor = target.active().capability()
    return DeviceProperties(
        spec, spec.name, major, minor, target.active().total_memory(), spec.sm_count,
        spec.max_warps_per_sm * spec.warp_size, spec.max_threads_per_block, spec.regs_per_sm,
        spec.warp_size, spec.program_smem, spec.smem_per_sm, spec.l2_bytes)


def get_device_name(device: Device = None) -> str:
    return get_device_properties(device).name


def get_device_capability(device: Device = None) -> tuple[int, int]:
    _check_index(device)
    return target.active().capability()


def get_amp_supported_dtype() -> list[torch.dtype]:
    """Dtypes `torch.autocast("gxu", dtype=...)` accepts."""
    return [torch.float16, torch.bfloat16]


def is_bf16_supported(including_emulation: bool = True) -> bool:
    return True


# -- memory: the gxu allocator's statistics (torch.accelerator's) --------------------------

def memory_stats(device: Device = None) -> dict[str, Any]:
    """The allocator's statistics under `torch.cuda.memory_stats`' names."""
    return dict(torch.accelerator.memory_stats(_check_index(device)))


def memory_allocated(device: Device = None) -> int:
    """Bytes held by live gxu storages."""
    _check_index(device)
    return native.allocated()


def max_memory_allocated(device: Device = None) -> int:
    _check_index(device)
    return native.peak()


def memory_reserved(device: Device = None) -> int:
    """Bytes the target's allocator holds (the CUDA caching allocator's on the cuda target)."""
    return memory_stats(device).get("reserved_bytes.all.current", 0)


def max_memory_reserved(device: Device = None) -> int:
    return memory_stats(device).get("reserved_bytes.all.peak", 0)


def reset_peak_memory_stats(device: Device = None) -> None:
    torch.accelerator.reset_peak_memory_stats(_check_index(device))


def reset_accumulated_memory_stats(device: Device = None) -> None:
    torch.accelerator.reset_accumulated_memory_stats(_check_index(device))


def memory_summary(device: Device = None, abbreviated: bool = False) -> str:
    """A table of the allocator's statistics, as `torch.cuda.memory_summary` prints one."""
    stats = memory_stats(device)
    rows = [("Allocated memory", "allocated_bytes"), ("Active memory", "active_bytes"),
            ("Requested memory", "requested_bytes"), ("Reserved memory", "reserved_bytes"),
            ("Allocations", "allocation"), ("Active allocs", "active")]
    header = f"{'Metric':<18} " + " ".join(f"{column:>14}" for column in (
        "Cur Usage", "Peak Usage", "Tot Alloc", "Tot Freed"))
    lines = [f"gxu memory summary, device 0 ({target.current_target()} target)", header]
    for label, key in rows:
        values = [stats.get(f"{key}.all.{kind}", 0)
                  for kind in ("current", "peak", "allocated", "freed")]
        lines.append(f"{label:<18} " + " ".join(f"{value:>14,}" for value in values))
    return "\n".join(lines)


def mem_get_info(device: Device = None) -> tuple[int, int]:
    """(free, total) bytes of the memory gxu tensors live in."""
    return torch.accelerator.get_memory_info(_check_index(device))


def empty_cache() -> None:
    """Release cached memory no gxu tensor uses (the CUDA caching allocator's)."""
    torch.accelerator.empty_cache()


_PUBLIC = (
    "is_available", "is_initialized", "init", "_is_in_bad_fork", "device_count",
    "current_device", "set_device", "device", "synchronize", "Stream", "Event",
    "current_stream", "default_stream", "set_stream", "stream", "default_generators",
    "manual_seed", "manual_seed_all", "seed", "seed_all", "initial_seed", "get_rng_state",
    "set_rng_state", "get_rng_state_all", "set_rng_state_all", "get_device_properties",
    "get_device_name", "get_device_capability", "get_amp_supported_dtype", "is_bf16_supported",
    "memory_stats", "memory_allocated", "max_memory_allocated", "memory_reserved",
    "max_memory_reserved", "reset_peak_memory_stats", "reset_accumulated_memory_stats",
    "memory_summary", "mem_get_info", "empty_cache",
)


def _build_module() -> types.ModuleType:
    module = types.ModuleType("torch.gxu", "The gxu device (gxusim): see gxusim.device.module.")
    for name in _PUBLIC:
        setattr(module, name, globals()[name])
    return module


@once
def register() -> None:
    """Register the gxu device once per process (idempotent, thread-safe)."""
    name = torch._C._get_privateuse1_backend_name()
    if name not in ("privateuseone", DEVICE_NAME):
        raise RuntimeError(
            f"gxusim needs the PrivateUse1 backend to be named {DEVICE_NAME!r}, but it was "
            f"already renamed to {name!r} in this process (torch allows one rename per "
            f"process); import gxusim before the other backend, or in another process")
    if name == "privateuseone":
        torch.utils.rename_privateuse1_backend(DEVICE_NAME)
    if not hasattr(torch.Tensor, "is_gxu"):
        torch.utils.generate_methods_for_privateuse1_backend(for_storage=True)
    if not hasattr(torch, DEVICE_NAME):
        torch._register_device_module(DEVICE_NAME, _build_module())
    native.register_runtime()
    ops.register()
    cells.register()
    autocast.register()
