"""Eager ops on gxu: every aten op runs on the backing device's kernels over gxu memory.

One boxed fallback serves all ops: gxu tensors (and storages, and `device="gxu"`) are
replaced by zero-copy aliases on the backing device, the op runs there, and results are
mapped back by the op's schema:

* a mutated argument (`Tensor(a!)`: in-place and `out=`) returns the caller's gxu tensor;
* a result sharing memory with a gxu input (views) becomes a gxu view of that storage;
* a fresh result becomes a gxu tensor owning the backing memory (no copy);
* a result the op was asked to put elsewhere (`device="cpu"`) is returned as it is.

`out=` tensors are sized first by running the op on meta tensors, since the aliases'
storages cannot grow. Random ops (tagged `nondeterministic_seeded`) run with the gxu
generator's state swapped into the backing device's default generator, so gxu has its
own reproducible random stream whatever the op's signature.
Three ops need their own kernels: `_copy_from` (cross-device copies), `resize_` (gxu
storages grow by reallocation) and `set_` (metadata only).
"""
from __future__ import annotations

import threading
from typing import Any, Callable

import torch

from gxusim import target

from . import memory

_generator: torch.Generator | None = None
# The swap below briefly replaces a process-wide generator's state; serialise it so that
# concurrent random ops neither interleave their streams nor restore the wrong state.
_rng_lock = threading.Lock()


def generator() -> torch.Generator:
    """The gxu random stream: a backing-device generator, seeded by torch.gxu."""
    global _generator
    device = target.backing_device()
    if _generator is None or _generator.device != device:
        _generator = torch.Generator(device=device)
        _generator.manual_seed(torch.initial_seed())
    return _generator


def _default_generator(device: torch.device) -> torch.Generator:
    if device.type == "cuda":
        return torch.cuda.default_generators[device.index]
    return torch.default_generator


def _run_seeded(op: torch._ops.OpOverload, args: tuple, kwargs: dict) -> Any:
    """Run a random op on the backing device drawing from the gxu stream, not the device's."""
    gxu = generator()
    default = _default_generator(gxu.device)
    with _rng_lock:
        saved = default.get_state()
        default.set_state(gxu.get_state())
        try:
            return op(*args, **kwargs)
        finally:
            gxu.set_state(default.get_state())
            default.set_state(saved)


def _is_gxu(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.device.type == "gxu"


def _map(value: Any, fn: Callable[[Any], Any]) -> Any:
    if isinstance(value, (list, tuple)):
        return type(value)(_map(v, fn) for v in value)
    return fn(value)


class _Aliaser:
    """Replaces gxu values by backing-device aliases, remembering which storages it saw."""

    def __init__(self) -> None:
        self.storages: dict[int, torch.UntypedStorage] = {}

    def __call__(self, value: Any) -> Any:
        if _is_gxu(value):
            alias = memory.backing_alias(value)
            self.storages[alias.untyped_storage().data_ptr()] = value.untyped_storage()
            return alias
        if isinstance(value, torch.device) and value.type == "gxu":
            return target.freeze()
        if isinstance(value, torch.UntypedStorage) and value.device.type == "gxu":
            return torch._C._construct_storage_from_data_pointer(
                value.data_ptr(), target.backing_device(), value.nbytes())
        return value


def _meta(value: Any) -> Any:
    if _is_gxu(value):
        return torch.empty_strided(value.size(), value.stride(), dtype=value.dtype, device="meta")
    return value


def _size_out_arguments(op: torch._ops.OpOverload, args: tuple, kwargs: dict) -> None:
    """Resize `out=` gxu tensors to what the op will produce (learned from its meta kernel)."""
    meta_args = _map(args, _meta)
    meta_kwargs = {k: _map(v, _meta) for k, v in kwargs.items()}
    try:
        op(*meta_args, **meta_kwargs)
    except (NotImplementedError, RuntimeError):
        return  # no meta kernel: the op itself reports any size problem
    for name, value in kwargs.items():
        if _is_gxu(value) and meta_kwargs[name].shape != value.shape:
            resize_(value, meta_kwargs[name].shape)


def _mutated_argument(schema: torch._C.FunctionSchema, ret: torch._C.Argument,
                      args: tuple, kwargs: dict) -> Any:
    for position, argument in enumerate(schema.arguments):
        info = argument.alias_info
        if info is not None and info.is_write and info.before_set == ret.alias_info.before_set:
            return kwargs[argument.name] if argument.name in kwargs else args[position]
    return None


def fallback(keyset: torch._C.DispatchKeySet, op: torch._ops.OpOverload, *args: Any,
             **kwargs: Any) -> Any:
    schema = op._schema
    if any(a.kwarg_only and a.alias_info is not None and a.alias_info.is_write
           for a in schema.arguments):
        _size_out_arguments(op, args, kwargs)
    aliaser = _Aliaser()
    backing_args = _map(args, aliaser)
    backing_kwargs = {k: _map(v, aliaser) for k, v in kwargs.items()}
    if torch.Tag.nondeterministic_seeded in op.tags:
        result = _run_seeded(op, backing_args, backing_kwargs)
    else:
        result = op(*backing_args, **backing_kwargs)

    wanted = kwargs.get("device")
    stays_put = wanted is not None and torch.device(wanted).type != "gxu"

    def to_gxu(value: Any, ret: torch._C.Argument | None) -> Any:
        if not isinstance(value, torch.Tensor):
            return value
        if ret is not None and ret.alias_info is not None and ret.alias_info.is_write:
            original = _mutated_argument(schema, ret, args, kwargs)
            if original is not None:
                return original
        if stays_put or value.device != target.backing_device():
            return value
        owner = aliaser.storages.get(value.untyped_storage().data_ptr())
        if owner is not None:
            return memory.gxu_view(owner, value.dtype, value.storage_offset(),
                                   value.size(), value.stride())
        return memory.from_backing(value)

    returns = schema.returns
    if isinstance(result, tuple):
        return tuple(_map(v, lambda t: to_gxu(t, None)) if isinstance(v, list) else to_gxu(v, r)
                     for v, r in zip(result, returns))
    if isinstance(result, list):
        return [to_gxu(v, None) for v in result]
    return to_gxu(result, returns[0] if returns else None)


def _default_strides(size: tuple[int, ...], memory_format: torch.memory_format | None) -> tuple:
    probe = torch.empty(size, device="meta", memory_format=memory_format or torch.contiguous_format)
    return probe.stride()


def resize_(tensor: torch.Tensor, size: Any, memory_format: torch.memory_format | None = None
            ) -> torch.Tensor:
    """Resize in place; a gxu storage that is too small is replaced by a larger one (copied)."""
    size = tuple(size)
    stride = _default_strides(size, memory_format)
    numel = 1
    for d in size:
        numel *= d
    needed = (tensor.storage_offset() + numel) * tensor.element_size()
    storage = tensor.untyped_storage()
    if needed > storage.nbytes():
        grown = memory.allocate_bytes(needed)
        if storage.nbytes():
            old = torch.empty(0, dtype=torch.uint8, device=target.backing_device())
            old.set_(torch._C._construct_storage_from_data_pointer(
                storage.data_ptr(), target.backing_device(), storage.nbytes()))
            new = memory.backing_alias(memory.gxu_view(grown, torch.uint8, 0, (needed,), (1,)))
            new[: storage.nbytes()].copy_(old)
        storage = grown
    return memory.set_storage(tensor, storage, tensor.storage_offset(), size, stride)


def _backing(value: torch.Tensor) -> torch.Tensor:
    return memory.backing_alias(value) if _is_gxu(value) else value


def copy_from(src: torch.Tensor, dst: torch.Tensor, non_blocking: bool = False) -> torch.Tensor:
    """`aten::_copy_from`: copies between gxu and any other device, on the backing device."""
    _backing(dst).copy_(_backing(src), non_blocking)
    return dst


def _set_metadata(op: torch._ops.OpOverload) -> Callable[..., torch.Tensor]:
    def kernel(*args: Any, **kwargs: Any) -> torch.Tensor:
        return op.redispatch(torch._C.DispatchKeySet(torch._C.DispatchKey.CPU), *args, **kwargs)
    return kernel


_libraries: list[torch.library.Library] = []


def register() -> None:
    """Install the fallback and the three dedicated kernels for the PrivateUse1 key."""
    if _libraries:
        return
    fallback_library = torch.library.Library("_", "IMPL")
    fallback_library.fallback(fallback, "PrivateUse1", with_keyset=True)
    aten = torch.library.Library("aten", "IMPL")
    aten.impl("_copy_from", copy_from, "PrivateUse1")
    aten.impl("resize_", resize_, "PrivateUse1")
    for overload in ("source_Storage", "source_Storage_storage_offset"):
        aten.impl(f"set_.{overload}", _set_metadata(getattr(torch.ops.aten.set_, overload)),
                  "PrivateUse1")
    _libraries.extend([fallback_library, aten])
