"""gxu memory: owned allocations on the target's backing device, zero-copy aliasing both ways.

A gxu storage *owns* a backing storage (host memory on the emulator target, CUDA memory on
the cuda target): it keeps it alive, and releasing the last gxu view releases it and
updates the allocation counters. The reverse direction, `backing_alias`, views a gxu tensor
as a backing-device tensor without copying (keeping its gxu storage alive), so any aten
kernel of the backing device can run on gxu memory; a backing tensor over an alias's memory
goes back to gxu as a view of the gxu storage it aliases. Neither direction is resizable, so
a backing kernel can never reallocate gxu memory behind a gxu storage's back.

The work is done by the device's C++ part (`csrc/memory.cpp`, built by `native.py`): it
runs on every eager op and at both ends of every compiled graph, where Python cost tens of
microseconds a call. The same C++ part is the gxu allocator, which torch allocates gxu
storages with (`torch.UntypedStorage(n, device="gxu")`, deserialisation, clones) and reads
`torch.accelerator`'s memory statistics from.

Internals used (checked on torch 2.11 and 2.13): redispatching `aten::set_` to the CPU key
(pure metadata).
"""
from __future__ import annotations

import torch
from torch._C import DispatchKey, DispatchKeySet

from gxusim import target

from .native import native

_CPU_KEYS = DispatchKeySet(DispatchKey.CPU)
_SET_STORAGE = torch.ops.aten.set_.source_Storage_storage_offset._handle


def set_storage(tensor: torch.Tensor, storage: torch.UntypedStorage, offset: int,
                size: "tuple[int, ...] | torch.Size", stride: tuple[int, ...]) -> torch.Tensor:
    """Point a tensor at a storage (metadata only, so the CPU kernel serves any device)."""
    return _SET_STORAGE.redispatch_boxed(_CPU_KEYS, tensor, storage, offset, size, stride)


def gxu_view(storage: torch.UntypedStorage, dtype: torch.dtype, offset: int,
             size: "tuple[int, ...] | torch.Size", stride: tuple[int, ...]) -> torch.Tensor:
    """A gxu tensor viewing `storage` (a gxu storage) with the given geometry."""
    return native.view(storage, dtype, offset, size, stride)


def is_gxu(value: object) -> bool:
    """Whether `value` is a tensor on the gxu device."""
    return isinstance(value, torch.Tensor) and value.device.type == "gxu"


def from_backing(tensor: torch.Tensor) -> torch.Tensor:
    """A gxu tensor over `tensor`'s backing-device memory (no copy): a view of the gxu storage
    that `tensor` aliases, else of a new gxu storage owning `tensor`'s storage."""
    return native.own(tensor)


def backing_alias(tensor: torch.Tensor) -> torch.Tensor:
    """A backing-device tensor over a gxu tensor's memory (no copy; keeps its storage alive)."""
    return native.alias(tensor, target.backing_device())


def to_backing(values: tuple) -> tuple:
    """`values` with every gxu tensor (also inside lists) replaced by its backing alias."""
    device = target.backing_device()
    return native.to_backing(values, device, device)


def alias_storage(storage: torch.UntypedStorage) -> torch.UntypedStorage:
    """A backing-device storage over a gxu storage's memory (no copy; keeps it alive)."""
    device = target.backing_device()
    return native.to_backing(storage, device, device)


def allocate_bytes(nbytes: int) -> torch.UntypedStorage:
    """A new gxu storage of `nbytes` bytes (uninitialised), from the gxu allocator."""
    return torch.UntypedStorage(nbytes, device="gxu")


def live_storages() -> int:
    """Number of live gxu storages (for leak checks)."""
    return native.live()
