"""gxu memory: owned allocations on the target's backing device, zero-copy aliasing both ways.

A gxu storage *owns* a backing tensor (host memory on the emulator target, CUDA memory
on the cuda target). It is made from a DLPack capsule whose device type is kDLExtDev,
which torch maps to PrivateUse1; the capsule's deleter, called when the last gxu view
dies, releases the backing tensor and updates the allocation counters. The reverse
direction, `backing_alias`, views a gxu tensor as a backing-device tensor without
copying, so any aten kernel of the backing device can run on gxu memory.

Internals used (checked on torch 2.11 and 2.13): `torch._C._from_dlpack`,
`torch._C._construct_storage_from_data_pointer`, `torch._C._acc.create_empty_tensor`,
redispatching `aten::set_` to the CPU key (pure metadata).
"""
from __future__ import annotations

import ctypes
import itertools
import threading

import torch
from torch._C import DispatchKey, DispatchKeySet

from gxusim import target

_DL_EXT_DEV = 12  # kDLExtDev: torch maps it to PrivateUse1
_CPU_KEYS = DispatchKeySet(DispatchKey.CPU)


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.c_void_p),  # int64_t*
                ("strides", ctypes.c_void_p), ("byte_offset", ctypes.c_uint64)]


class _DLManagedTensor(ctypes.Structure):
    pass


_Deleter = ctypes.CFUNCTYPE(None, ctypes.POINTER(_DLManagedTensor))
_DLManagedTensor._fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p),
                             ("deleter", _Deleter)]


class _Allocation(ctypes.Structure):
    """One capsule's memory: the managed tensor and the shape it points to (its byte count)."""

    _fields_ = [("managed", _DLManagedTensor), ("nbytes", ctypes.c_int64)]

_new_capsule = ctypes.pythonapi.PyCapsule_New
_new_capsule.restype = ctypes.py_object
_new_capsule.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


class _Allocations:
    """Live gxu storages (handle -> what keeps the memory alive) and byte counters."""

    def __init__(self) -> None:
        self.live: dict[int, tuple] = {}
        self.aliases: dict[int, torch.UntypedStorage] = {}  # data_ptr -> `alias_storage`
        self.handles = itertools.count(1)
        self.allocated = 0
        self.peak = 0
        self.lock = threading.Lock()


_allocations = _Allocations()


@_Deleter
def _release(managed: "ctypes._Pointer[_DLManagedTensor]") -> None:
    entry = _allocations.live.pop(managed.contents.manager_ctx, None)
    if entry is not None:
        _, _, alias, nbytes = entry
        ptr = managed.contents.dl_tensor.data
        # Drop the alias before the memory (held by `entry`) can be reused for another one.
        if _allocations.aliases.get(ptr) is alias:
            del _allocations.aliases[ptr]
        with _allocations.lock:
            _allocations.allocated -= nbytes


def _template() -> bytes:
    """The fields every allocation shares: a 1-d, contiguous (null strides) uint8 tensor on
    kDLExtDev 0, released by `_release`. Copying it is cheaper than setting them one by one."""
    allocation = _Allocation()
    tensor = allocation.managed.dl_tensor
    tensor.device = _DLDevice(_DL_EXT_DEV, 0)
    tensor.ndim = 1
    tensor.dtype = _DLDataType(1, 8, 1)
    allocation.managed.deleter = _release
    return bytes(allocation)


_TEMPLATE = _template()
_SHAPE_OFFSET = _Allocation.nbytes.offset


def _wrap_storage(backing: torch.UntypedStorage) -> torch.UntypedStorage:
    """A gxu storage that owns (keeps alive) the given backing-device storage."""
    nbytes = backing.nbytes()
    ptr = backing.data_ptr()
    allocation = _Allocation.from_buffer_copy(_TEMPLATE)
    address = ctypes.addressof(allocation)
    allocation.nbytes = nbytes
    allocation.managed.dl_tensor.data = ptr
    allocation.managed.dl_tensor.shape = address + _SHAPE_OFFSET
    handle = next(_allocations.handles)
    allocation.managed.manager_ctx = handle
    alias = torch._C._construct_storage_from_data_pointer(ptr, backing.device, nbytes)
    with _allocations.lock:
        _allocations.live[handle] = (allocation, backing, alias, nbytes)
        if nbytes:  # empty storages may all share one (null) pointer: nothing to cache
            _allocations.aliases[ptr] = alias
        _allocations.allocated += nbytes
        _allocations.peak = max(_allocations.peak, _allocations.allocated)
    capsule = _new_capsule(address, b"dltensor", None)
    return torch._C._from_dlpack(capsule).untyped_storage()


def set_storage(tensor: torch.Tensor, storage: torch.UntypedStorage, offset: int,
                size: tuple[int, ...], stride: tuple[int, ...]) -> torch.Tensor:
    """Point a tensor at a storage (metadata only, so the CPU kernel serves any device)."""
    return torch.ops.aten.set_.source_Storage_storage_offset.redispatch(
        _CPU_KEYS, tensor, storage, offset, size, stride)


def gxu_view(storage: torch.UntypedStorage, dtype: torch.dtype, offset: int,
             size: tuple[int, ...], stride: tuple[int, ...]) -> torch.Tensor:
    """A gxu tensor viewing `storage` (a gxu storage) with the given geometry."""
    tensor = torch._C._acc.create_empty_tensor((0,), dtype)
    return set_storage(tensor, storage, offset, tuple(size), tuple(stride))


def is_gxu(value: object) -> bool:
    """Whether `value` is a tensor on the gxu device."""
    return isinstance(value, torch.Tensor) and value.device.type == "gxu"


def from_backing(tensor: torch.Tensor) -> torch.Tensor:
    """A gxu tensor taking over `tensor`'s backing-device storage (no copy)."""
    storage = _wrap_storage(tensor.untyped_storage())
    return gxu_view(storage, tensor.dtype, tensor.storage_offset(), tensor.size(), tensor.stride())


def alias_storage(storage: torch.UntypedStorage) -> torch.UntypedStorage:
    """A backing-device storage over a gxu storage's memory (no copy, does not own it).

    Cached per allocation (made once in `_wrap_storage`, dropped when it is freed), and
    checked against the storage's data pointer and size, so it cannot go stale; a gxu
    storage gxusim did not allocate gets a fresh one. Not resizable, so a backing kernel
    can never reallocate gxu memory behind the gxu storage's back.
    """
    ptr = storage.data_ptr()
    alias = _allocations.aliases.get(ptr)
    if alias is not None and alias.nbytes() == storage.nbytes():
        return alias
    return torch._C._construct_storage_from_data_pointer(ptr, target.backing_device(),
                                                         storage.nbytes())


def alias_with(tensor: torch.Tensor, storage: torch.UntypedStorage,
               device: torch.device) -> torch.Tensor:
    """`backing_alias` for a caller that already holds `tensor.untyped_storage()` and the
    backing device (the fallback, which does this for every gxu argument)."""
    alias = torch.empty(0, dtype=tensor.dtype, device=device)
    return alias.set_(alias_storage(storage), tensor.storage_offset(), tensor.size(),
                      tensor.stride())


def backing_alias(tensor: torch.Tensor) -> torch.Tensor:
    """A backing-device tensor aliasing a gxu tensor's memory (no copy, does not own it)."""
    return alias_with(tensor, tensor.untyped_storage(), target.backing_device())


def allocate_bytes(nbytes: int) -> torch.UntypedStorage:
    """A new gxu storage of `nbytes` bytes (uninitialised) on the target's backing device."""
    device = target.freeze()
    return _wrap_storage(torch.empty(nbytes, dtype=torch.uint8, device=device).untyped_storage())


def copy_of_storage(source: torch.UntypedStorage) -> torch.UntypedStorage:
    """A new gxu storage holding a copy of `source` (any device)."""
    storage = allocate_bytes(source.nbytes())
    if source.nbytes():
        dst = backing_alias(gxu_view(storage, torch.uint8, 0, (source.nbytes(),), (1,)))
        src = torch.empty(0, dtype=torch.uint8, device=source.device).set_(source)
        dst.copy_(src)
    return storage


def _serialization_tag(storage: torch.UntypedStorage) -> str | None:
    return "gxu" if storage.device.type == "gxu" else None


def _deserialize(storage: torch.UntypedStorage, location: str) -> torch.UntypedStorage | None:
    # torch's default route calls torch.UntypedStorage(n, device="gxu"), which needs a C++
    # allocator that a Python backend cannot register; allocate through gxu memory instead.
    if location.startswith("gxu"):
        return copy_of_storage(storage)
    return None


def register_serialization() -> None:
    torch.serialization.register_package(9, _serialization_tag, _deserialize)


def memory_allocated() -> int:
    """Bytes held by live gxu storages."""
    return _allocations.allocated


def max_memory_allocated() -> int:
    """Peak of `memory_allocated()` since start or the last `reset_peak_memory_stats()`."""
    return _allocations.peak


def reset_peak_memory_stats() -> None:
    with _allocations.lock:
        _allocations.peak = _allocations.allocated


def live_storages() -> int:
    """Number of live gxu storages (for leak checks)."""
    return len(_allocations.live)
