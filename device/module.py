"""`torch.gxu`: the device module, plus PrivateUse1 registration (hooks, guard, methods).

One gxu device (index 0). Its properties are the active hardware spec; its memory and
streams are those of the execution target (see `gxusim.target`).

Internals used (checked on torch 2.11 and 2.13): `torch._C._get_privateuse1_backend_name`,
`torch._C._acc` hooks and device guard, `torch._register_device_module`.
"""
from __future__ import annotations

import types
from typing import Any

import torch

from gxusim import target
from gxusim.once import once
from gxusim.spec import HardwareSpec, current_spec

from . import autocast, memory, ops

DEVICE_NAME = "gxu"


def is_available() -> bool:
    return True


def is_initialized() -> bool:
    return True


def _is_in_bad_fork() -> bool:
    return False


def device_count() -> int:
    return 1


def current_device() -> int:
    return 0


def _check_index(device: "int | str | torch.device | None") -> int:
    if device == 0:  # what compiled graphs pass, twice a call
        return 0
    index = torch.device(device).index if isinstance(device, (str, torch.device)) else device
    if index not in (None, 0):
        raise ValueError(f"gxu has one device (index 0); got device index {index}")
    return 0


def set_device(device: "int | str | torch.device") -> None:
    _check_index(device)


class device:
    """Context manager selecting a gxu device; there is one, so it only checks the index."""

    def __init__(self, device: "int | str | torch.device | None") -> None:
        _check_index(device)

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def synchronize(device: "int | str | torch.device | None" = None) -> None:
    """Wait for all work on gxu (the CUDA stream on the cuda target; nothing on the emulator)."""
    _check_index(device)
    target.active().synchronize()


def manual_seed(seed: int) -> None:
    ops.generator().manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    manual_seed(seed)


def seed() -> None:
    ops.generator().seed()


def initial_seed() -> int:
    return ops.generator().initial_seed()


def get_rng_state(device: "int | str | torch.device" = "gxu") -> torch.Tensor:
    return ops.generator().get_state()


def set_rng_state(new_state: torch.Tensor, device: "int | str | torch.device" = "gxu") -> None:
    ops.generator().set_state(new_state)


def get_device_properties(device: "int | str | torch.device | None" = None) -> HardwareSpec:
    """The active hardware spec (what the device is, as far as gxusim is concerned)."""
    _check_index(device)
    return current_spec()


def get_device_name(device: "int | str | torch.device | None" = None) -> str:
    return get_device_properties(device).name


def get_device_capability(device: "int | str | torch.device | None" = None) -> tuple[int, int]:
    _check_index(device)
    return target.active().capability()


def current_stream(device: "int | str | torch.device | None" = None) -> Any:
    """The stream gxu work is queued on (a CUDA stream on the cuda target)."""
    _check_index(device)
    return target.active().current_stream()


def default_stream(device: "int | str | torch.device | None" = None) -> Any:
    _check_index(device)
    return target.active().default_stream()


def Stream(device: "int | str | torch.device | None" = None, priority: int = 0) -> Any:
    """A new stream (torch.cuda.Stream on the cuda target; host-synchronous on the emulator)."""
    _check_index(device)
    return target.active().Stream(priority=priority)


def Event(enable_timing: bool = False, blocking: bool = False, interprocess: bool = False) -> Any:
    """A new event (torch.cuda.Event on the cuda target; host-clock stamps on the emulator)."""
    return target.active().Event(enable_timing=enable_timing, blocking=blocking,
                                 interprocess=interprocess)


def stream(stream: Any) -> Any:
    """Context manager making `stream` the current gxu stream."""
    return target.active().stream(stream)


def get_amp_supported_dtype() -> list[torch.dtype]:
    """Dtypes `torch.autocast("gxu", dtype=...)` accepts."""
    return [torch.float16, torch.bfloat16]


def is_bf16_supported(including_emulation: bool = True) -> bool:
    return True


def memory_allocated(device: "int | str | torch.device | None" = None) -> int:
    """Bytes held by live gxu tensors."""
    _check_index(device)
    return memory.memory_allocated()


def max_memory_allocated(device: "int | str | torch.device | None" = None) -> int:
    _check_index(device)
    return memory.max_memory_allocated()


def reset_peak_memory_stats(device: "int | str | torch.device | None" = None) -> None:
    _check_index(device)
    memory.reset_peak_memory_stats()


def memory_reserved(device: "int | str | torch.device | None" = None) -> int:
    """Bytes the target's allocator holds (the CUDA caching allocator's on the cuda target)."""
    _check_index(device)
    return target.active().memory_reserved(memory.memory_allocated())


def mem_get_info(device: "int | str | torch.device | None" = None) -> tuple[int, int]:
    """(free, total) bytes of the memory gxu tensors live in."""
    _check_index(device)
    return target.active().mem_get_info()


def empty_cache() -> None:
    """Release cached memory no gxu tensor uses (the CUDA caching allocator's)."""
    target.active().empty_cache()


def _build_module() -> types.ModuleType:
    module = types.ModuleType("torch.gxu", "The gxu device (gxusim): see gxusim.device.module.")
    for name in ("is_available", "is_initialized", "_is_in_bad_fork", "device_count",
                 "current_device", "set_device", "device", "synchronize", "manual_seed", "manual_seed_all",
                 "seed", "initial_seed", "get_rng_state", "set_rng_state", "get_device_properties",
                 "get_device_name", "get_device_capability", "current_stream", "default_stream",
                 "Stream", "Event", "stream", "get_amp_supported_dtype", "is_bf16_supported",
                 "memory_allocated", "max_memory_allocated", "reset_peak_memory_stats",
                 "memory_reserved", "mem_get_info", "empty_cache"):
        setattr(module, name, globals()[name])
    return module


class _Hooks(torch._C._acc.PrivateUse1Hooks):
    def is_available(self) -> bool:
        return True

    def has_primary_context(self, device_index: int) -> bool:
        return True

    def is_built(self) -> bool:
        return True


# A module constant, not the enum looked up in `type_`: Dynamo traces `type_` (the current
# stream, asked inside compiled frames) and cannot trace an attribute of that pybind enum
# class, which cost every compile a failed frame (half a small model's predict-only time).
_PRIVATEUSE1 = torch._C._autograd.DeviceType.PrivateUse1


class _DeviceGuard(torch._C._acc.DeviceGuard):
    def type_(self):
        return _PRIVATEUSE1


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
    torch._C._acc.register_python_privateuseone_hook(_Hooks())
    torch._C._acc.register_python_privateuseone_device_guard(_DeviceGuard())
    ops.register()
    autocast.register()
    memory.register_serialization()
