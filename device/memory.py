"""gxu memory: owned allocations on the target's backing device, zero-copy aliasing both ways.

A gxu storage *owns* a backing tensor (host memory on the emulator target, CUDA memory
on the cuda target). It is made from a DLPack capsule whose device type is kDLExtDev,
which torch maps to PrivateUse1; the capsule's deleter, called when the last gxu view
dies, releases the backing tensor and updates the allocation counters. A tensor that spans
its whole backing storage (fresh results, `empty`) travels in the capsule with its own
dtype and geometry, so `_from_dlpack` returns it ready; capsule memory is pooled. The reverse
direction, `backing_alias`, views a gxu tensor as a backing-device tensor without
copying, so any aten kernel of the backing device can run on gxu memory.

Internals used (checked on torch 2.11 and 2.13): `torch._C._from_dlpack`,
`torch._C._construct_storage_from_data_pointer`, `torch._C._acc.create_empty_tensor`,
redispatching `aten::set_` to the CPU key (pure metadata).
"""
from __future__ import annotations

import ctypes
import struct
import threading

import torch
from torch._C import DispatchKey, DispatchKeySet

from gxusim import target

_DL_EXT_DEV = 12  # kDLExtDev: torch maps it to PrivateUse1
_CPU_KEYS = DispatchKeySet(DispatchKey.CPU)
_SET_STORAGE = torch.ops.aten.set_.source_Storage_storage_offset._handle

# DLPack (code, bits, lanes) of the dtypes a capsule can carry as they are; a tensor of
# any other dtype is wrapped as bytes and viewed (the slower, general route).
_DL_DTYPES: dict[torch.dtype, tuple[int, int, int]] = {
    torch.bool: (6, 8, 1), torch.uint8: (1, 8, 1), torch.int8: (0, 8, 1),
    torch.int16: (0, 16, 1), torch.int32: (0, 32, 1), torch.int64: (0, 64, 1),
    torch.float16: (2, 16, 1), torch.bfloat16: (4, 16, 1), torch.float32: (2, 32, 1),
    torch.float64: (2, 64, 1), torch.complex64: (5, 64, 1), torch.complex128: (5, 128, 1),
}
_MAX_DIMS = 8  # a slot's shape and strides arrays; more dimensions take the general route
# One slot: a DLManagedTensor (DLTensor: data, device {type, id}, ndim, dtype {code, bits,
# lanes}, shape*, strides*, byte_offset; then manager_ctx, deleter), 64 bytes on 64-bit
# platforms, followed by the shape and strides arrays it points to.
_HEADER = "=QiiiBBHQQQQQ"
_SHAPE_OFFSET = struct.calcsize(_HEADER)
_STRIDES_OFFSET = _SHAPE_OFFSET + 8 * _MAX_DIMS
_SLOT_BYTES = _STRIDES_OFFSET + 8 * _MAX_DIMS
# Filling a slot is one `pack_into` of a format per rank (ctypes field sets cost far more).
_SLOT_FORMATS = [struct.Struct(f"{_HEADER}{n}q{8 * (_MAX_DIMS - n)}x{n}q")
                 for n in range(_MAX_DIMS + 1)]
assert _SHAPE_OFFSET == 64 and ctypes.sizeof(ctypes.c_void_p) == 8, "64-bit platform needed"

_Deleter = ctypes.CFUNCTYPE(None, ctypes.c_void_p)  # called with the slot's address
_new_capsule = ctypes.pythonapi.PyCapsule_New
_new_capsule.restype = ctypes.py_object
_new_capsule.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


class _Slot:
    """Memory for one capsule's DLManagedTensor; reused once its storage is released."""

    __slots__ = ("buffer", "address", "view")

    def __init__(self) -> None:
        self.buffer = (ctypes.c_char * _SLOT_BYTES)()
        self.address = ctypes.addressof(self.buffer)
        self.view = memoryview(self.buffer).cast("B")


class _Allocations:
    """Live gxu storages (slot address -> what keeps the memory alive), byte counters, and
    the backing-device alias of each allocation's memory (data_ptr -> `alias_storage`)."""

    def __init__(self) -> None:
        self.live: dict[int, tuple[_Slot, torch.UntypedStorage, int]] = {}
        self.aliases: dict[int, torch.UntypedStorage] = {}
        self.free_slots: list[_Slot] = []
        self.allocated = 0
        self.peak = 0
        self.lock = threading.Lock()


_allocations = _Allocations()


@_Deleter
def _release(address: int) -> None:
    entry = _allocations.live.pop(address, None)
    if entry is not None:
        slot, backing, nbytes = entry
        # Drop the alias before the memory (held by `backing`) can be reused for another one.
        _allocations.aliases.pop(backing.data_ptr(), None)
        with _allocations.lock:
            _allocations.allocated -= nbytes
            _allocations.free_slots.append(slot)


_RELEASE = ctypes.cast(_release, ctypes.c_void_p).value


def _own(backing: torch.UntypedStorage, data: int, dl_dtype: tuple[int, int, int],
         size: "tuple[int, ...] | torch.Size", stride: tuple[int, ...]) -> torch.Tensor:
    """A gxu tensor (data at `data`, the given dtype and geometry) over a new gxu storage
    that owns `backing`: the capsule's deleter releases it when the last gxu view dies."""
    nbytes = backing.nbytes()
    with _allocations.lock:
        slot = _allocations.free_slots.pop() if _allocations.free_slots else _Slot()
        _allocations.allocated += nbytes
        _allocations.peak = max(_allocations.peak, _allocations.allocated)
    address = slot.address
    _allocations.live[address] = (slot, backing, nbytes)
    ndim = len(size)
    _SLOT_FORMATS[ndim].pack_into(
        slot.view, 0, data, _DL_EXT_DEV, 0, ndim, *dl_dtype, address + _SHAPE_OFFSET,
        address + _STRIDES_OFFSET, 0, address, _RELEASE, *size, *stride)
    return torch._C._from_dlpack(_new_capsule(address, b"dltensor", None))


def _wrap_storage(backing: torch.UntypedStorage) -> torch.UntypedStorage:
    """A gxu storage that owns (keeps alive) the given backing-device storage."""
    nbytes = backing.nbytes()
    return _own(backing, backing.data_ptr(), _DL_DTYPES[torch.uint8], (nbytes,), (1,)
                ).untyped_storage()


def set_storage(tensor: torch.Tensor, storage: torch.UntypedStorage, offset: int,
                size: "tuple[int, ...] | torch.Size", stride: tuple[int, ...]) -> torch.Tensor:
    """Point a tensor at a storage (metadata only, so the CPU kernel serves any device)."""
    return _SET_STORAGE.redispatch_boxed(_CPU_KEYS, tensor, storage, offset, size, stride)


def gxu_view(storage: torch.UntypedStorage, dtype: torch.dtype, offset: int,
             size: "tuple[int, ...] | torch.Size", stride: tuple[int, ...]) -> torch.Tensor:
    """A gxu tensor viewing `storage` (a gxu storage) with the given geometry."""
    tensor = torch._C._acc.create_empty_tensor((0,), dtype)
    return set_storage(tensor, storage, offset, size, stride)


def is_gxu(value: object) -> bool:
    """Whether `value` is a tensor on the gxu device."""
    return isinstance(value, torch.Tensor) and value.device.type == "gxu"


def from_backing(tensor: torch.Tensor, exact: bool = False) -> torch.Tensor:
    """A gxu tensor taking over `tensor`'s backing-device storage (no copy).

    When the tensor spans its whole storage from its start (`exact`: the caller knows it, as
    for a fresh `empty`), one capsule carries its dtype and geometry and is the result; any
    other tensor is wrapped as a byte storage and then viewed, which costs a redispatch more.
    """
    storage = tensor.untyped_storage()
    dl_dtype = _DL_DTYPES.get(tensor.dtype)
    if dl_dtype is not None and tensor.dim() <= _MAX_DIMS and (exact or (
            tensor.storage_offset() == 0 and tensor.is_contiguous()
            and tensor.nbytes == storage.nbytes())):
        return _own(storage, storage.data_ptr(), dl_dtype, tensor.size(), tensor.stride())
    return gxu_view(_wrap_storage(storage), tensor.dtype, tensor.storage_offset(), tensor.size(),
                    tensor.stride())


_MAX_CACHED_ALIASES = 1 << 16  # only storages gxusim did not allocate can pile up here


def alias_storage(storage: torch.UntypedStorage) -> torch.UntypedStorage:
    """A backing-device storage over a gxu storage's memory (no copy, does not own it).

    Cached by data pointer and checked against the storage's size, so it cannot go stale
    (it owns nothing: the same pointer and size is the same memory); dropped when gxusim
    frees the allocation. Not resizable, so a backing kernel can never reallocate gxu
    memory behind the gxu storage's back.
    """
    ptr = storage.data_ptr()
    nbytes = storage.nbytes()
    alias = _allocations.aliases.get(ptr)
    if alias is not None and alias.nbytes() == nbytes:
        return alias
    alias = torch._C._construct_storage_from_data_pointer(ptr, target.backing_device(), nbytes)
    if nbytes:  # empty storages may all share one (null) pointer: nothing to cache
        if len(_allocations.aliases) >= _MAX_CACHED_ALIASES:
            _allocations.aliases.clear()
        _allocations.aliases[ptr] = alias
    return alias


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
