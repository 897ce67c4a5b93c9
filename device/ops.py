"""Eager ops on gxu: every aten op runs on the backing device's kernels over gxu memory.

One boxed fallback serves all ops: gxu tensors (and storages, and `device="gxu"`) are
replaced by zero-copy aliases on the backing device, the op runs there, and results are
mapped back by the op's schema:

* a mutated argument (`Tensor(a!)`: in-place and `out=`) returns the caller's gxu tensor;
* a result sharing memory with a gxu input (views) becomes a gxu view of that storage;
* a fresh result becomes a gxu tensor owning the backing memory (no copy);
* a result the op was asked to put elsewhere (`device="cpu"`) is returned as it is.

Aliases' storages cannot grow: when an op needs a larger `out=`, the backing kernel
fails before writing, and the op runs again with growable backing outputs that the gxu
tensors then take over; any other metadata change to a written alias (a shrunk `out=`,
`t_`) is copied back to the gxu tensor. Random ops (tagged `nondeterministic_seeded`) run
with the gxu generator's state swapped into the backing device's default generator, so gxu
has its own reproducible random stream whatever the op's signature; a gxu `torch.Generator`
passed to an op is the backing-device generator it draws from.
The fallback is also registered as the gxu kernel of every structured op (and of
convolution), so those run as one backing-device kernel instead of decomposing on gxu.
Three ops need their own kernels: `_copy_from` (cross-device copies), `resize_` (gxu
storages grow by reallocation) and `set_` (metadata only, or a new empty gxu storage). The
allocations (`empty`, `empty_strided`) and the view primitives (`view`, `as_strided`,
`_reshape_alias`) have C++ kernels in `csrc/memory.cpp`, registered when it loads: they are
the hottest ops.
"""
from __future__ import annotations

import functools
import threading
from typing import Any, Callable, NamedTuple

import torch
from torch.utils._pytree import tree_map

from gxusim import target

from . import memory
from .native import native

# The swap below briefly replaces a process-wide generator's state; serialise it so that
# concurrent random ops neither interleave their streams nor restore the wrong state.
_rng_lock = threading.Lock()


def generator() -> torch.Generator:
    """The backing-device generator that gxu's default generator draws from."""
    return native.backing_generator(torch.gxu.default_generators[0])


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


def _map(value: Any, fn: Callable[[Any], Any]) -> Any:
    if isinstance(value, (list, tuple)):
        return type(value)(_map(v, fn) for v in value)
    return fn(value)


class _Plan(NamedTuple):
    """What the fallback needs from an op's schema, read once per op."""

    seeded: bool  # draws random numbers: runs on the gxu generator
    mapped: tuple[tuple[int, str], ...]  # (position, name) of arguments that may hold gxu values
    tensors: frozenset[str]  # names of the plain `Tensor` arguments
    written: tuple[tuple[int, str], ...]  # (position, name) of each argument the op writes
    returns_written: tuple[int | None, ...]  # per return: index into `written` it is, or None


# Argument types that can carry a gxu tensor, storage, device or generator; the rest (ints,
# int lists, scalars, dtypes) pass through untouched, which keeps the common path short.
_MAPPED_TYPES = ("Tensor", "Device", "Storage", "Generator")


_plans: dict[int, _Plan] = {}  # id(op) -> plan; OpOverloads live for the whole process


def _plan(op: torch._ops.OpOverload) -> _Plan:
    """The op's plan, made on its first call. Keyed by id: hashing an OpOverload is a
    Python-level call, which every op would pay."""
    plan = _plans.get(id(op))
    if plan is None:
        plan = _plans[id(op)] = _make_plan(op)
    return plan


def _make_plan(op: torch._ops.OpOverload) -> _Plan:
    arguments = list(enumerate(op._schema.arguments))
    mapped = tuple((position, argument.name) for position, argument in arguments
                   if any(kind in str(argument.type) for kind in _MAPPED_TYPES))
    written = [(position, argument.name, argument.alias_info.before_set)
               for position, argument in arguments
               if argument.alias_info is not None and argument.alias_info.is_write]
    returns_written = []
    for ret in op._schema.returns:
        info = ret.alias_info
        match = [i for i, (_, _, sets) in enumerate(written)
                 if info is not None and info.is_write and sets == info.before_set]
        returns_written.append(match[0] if match else None)
    tensors = frozenset(argument.name for _, argument in arguments
                        if str(argument.type) == "Tensor")
    return _Plan(torch.Tag.nondeterministic_seeded in op.tags, mapped, tensors,
                 tuple((position, name) for position, name, _ in written), tuple(returns_written))


def _argument(args: tuple, kwargs: dict, position: int, name: str) -> Any:
    """An argument as the boxed fallback passes it: keyword-only ones by name, others by place."""
    return kwargs[name] if name in kwargs else args[position]


def _backing_arguments(plan: _Plan, device: torch.device, args: tuple, kwargs: dict
                       ) -> tuple[list, dict]:
    """The op's arguments for its backing kernel: gxu tensors and storages (also in lists)
    as aliases, the gxu device as the backing device (C++: every op pays this)."""
    return native.backing_arguments(args, kwargs, plan.mapped, plan.tensors, device, device)


def _sync_geometry(original: Any, alias: Any) -> None:
    """Carry a metadata change the op made to a written alias (an `out=` shrunk, `t_`,
    `squeeze_`) over to the gxu tensor the caller holds."""
    if memory.is_gxu(original) and (alias.size() != original.size()
                                or alias.stride() != original.stride()
                                or alias.storage_offset() != original.storage_offset()):
        memory.set_storage(original, original.untyped_storage(), alias.storage_offset(),
                           alias.size(), alias.stride())


def _run_on_backing(op: torch._ops.OpOverload, plan: _Plan, device: torch.device, args: tuple,
                    kwargs: dict) -> Any:
    backing_args, backing_kwargs = _backing_arguments(plan, device, args, kwargs)
    result = _run(op, plan, backing_args, backing_kwargs)
    for position, name in plan.written:
        _map_pairs(_argument(args, kwargs, position, name),
                   _argument(backing_args, backing_kwargs, position, name), _sync_geometry)
    return result


def _run(op: torch._ops.OpOverload, plan: _Plan, args: list, kwargs: dict) -> Any:
    return _run_seeded(op, args, kwargs) if plan.seeded else op(*args, **kwargs)


def _run_growing(op: torch._ops.OpOverload, plan: _Plan, device: torch.device, args: tuple,
                 kwargs: dict) -> Any:
    """Run an op that must grow a written gxu tensor, which an alias cannot: the written
    arguments run as ordinary (growable) backing tensors, then each gxu tensor takes over
    its grown backing memory (no copy), as a gxu storage that grows is replaced."""
    backing_args, backing_kwargs = _backing_arguments(plan, device, args, kwargs)
    written = []
    for position, name in plan.written:
        growable = _map(_argument(backing_args, backing_kwargs, position, name),
                        lambda t: t.clone() if isinstance(t, torch.Tensor) else t)
        if name in backing_kwargs:
            backing_kwargs[name] = growable
        else:
            backing_args[position] = growable
        written.append((_argument(args, kwargs, position, name), growable))
    result = _run(op, plan, backing_args, backing_kwargs)
    for original, grown in written:
        _map_pairs(original, grown, _adopt)
    return result


def _adopt(original: Any, grown: Any) -> None:
    if memory.is_gxu(original):
        owner = memory.from_backing(grown).untyped_storage()
        memory.set_storage(original, owner, grown.storage_offset(), grown.size(), grown.stride())


def _map_pairs(original: Any, backing: Any, fn: Callable[[Any, Any], None]) -> None:
    if isinstance(original, (list, tuple)):
        for o, b in zip(original, backing):
            _map_pairs(o, b, fn)
    else:
        fn(original, backing)


# The backing device's message when a kernel tries to grow a storage it does not own.
_NOT_RESIZABLE = "not resizable"


def fallback(op: torch._ops.OpOverload, *args: Any, **kwargs: Any) -> Any:
    """The PrivateUse1 fallback (registered without the keyset, which it would not use and
    which costs a Python object per call)."""
    return _fallback(op, args, kwargs)


def _fallback(op: torch._ops.OpOverload, args: tuple, kwargs: dict) -> Any:
    plan = _plan(op)
    device = target.freeze()  # a factory op (device="gxu") may be the first gxu allocation
    try:
        result = _run_on_backing(op, plan, device, args, kwargs)
    except RuntimeError as error:
        # An `out=` (or `resize_as_`) needing more memory than its alias has fails before
        # writing anything; only then is the op run again with growable outputs, which keeps
        # the common path (outputs of the right size) free of extra work.
        if not plan.written or _NOT_RESIZABLE not in str(error):
            raise
        result = _run_growing(op, plan, device, args, kwargs)

    wanted = kwargs.get("device")
    if wanted is not None and torch.device(wanted).type != "gxu":
        device = None  # results stay where the op was asked to put them

    def to_gxu(value: Any, written: int | None) -> Any:
        if written is not None:
            return _argument(args, kwargs, *plan.written[written])
        return _to_gxu(value, device)

    if isinstance(result, torch.Tensor):  # the common case, first
        return to_gxu(result, plan.returns_written[0] if plan.returns_written else None)
    if isinstance(result, tuple):
        return tuple(_map(v, lambda t: to_gxu(t, None)) if isinstance(v, list) else to_gxu(v, w)
                     for v, w in zip(result, plan.returns_written))
    if isinstance(result, list):
        return [to_gxu(v, None) for v in result]
    return result


_ON_GXU = (True,)


def _to_gxu(value: Any, device: torch.device | None) -> Any:
    """A result on the backing device as gxu: a view of the gxu storage it aliases (a view
    of a gxu argument), else a fresh gxu storage owning its memory."""
    return value if device is None else native.leave((value,), _ON_GXU, device)[0]


class GraphBoundary:
    """Where a compiled graph that runs on the backing device meets gxu tensors
    (`gxusim.compiler.graph_runtime`): its gxu inputs enter as backing-device aliases (no
    copy), and its gxu outputs leave as gxu tensors: views of an input's gxu storage where
    they alias one, else owners of their backing memory (two outputs over one buffer share
    one owner)."""

    __slots__ = ("device",)

    def __init__(self) -> None:
        self.device = target.backing_device()

    def enter(self, values: tuple) -> tuple:
        return native.to_backing(values, self.device, self.device)

    def leave(self, values: tuple, on_gxu: tuple[bool, ...]) -> tuple:
        return native.leave(values, on_gxu, self.device)


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
            old.set_(memory.alias_storage(storage))
            new = memory.backing_alias(memory.gxu_view(grown, torch.uint8, 0, (needed,), (1,)))
            new[: storage.nbytes()].copy_(old)
        storage = grown
    return memory.set_storage(tensor, storage, tensor.storage_offset(), size, stride)


def set_empty(tensor: torch.Tensor) -> torch.Tensor:
    """`aten::set_()`: the tensor over a new, empty gxu storage (the CPU kernel would give it
    a CPU one)."""
    return memory.set_storage(tensor, memory.allocate_bytes(0), 0, (0,), (1,))


def _backing(value: torch.Tensor) -> torch.Tensor:
    return memory.backing_alias(value) if memory.is_gxu(value) else value


def copy_from(src: torch.Tensor, dst: torch.Tensor, non_blocking: bool = False) -> torch.Tensor:
    """`aten::_copy_from`: copies between gxu and any other device, on the backing device."""
    _backing(dst).copy_(_backing(src), non_blocking)
    return dst


_CPU_KEYS = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)


def _metadata_only(op: torch._ops.OpOverload) -> Callable[..., torch.Tensor]:
    """A kernel running `op`'s CPU kernel on gxu tensors as they are: for ops that only
    touch metadata (sizes, strides, storage), which those kernels do for any device."""
    handle = op._handle

    def kernel(*args: Any, **kwargs: Any) -> torch.Tensor:
        return handle.redispatch_boxed(_CPU_KEYS, *args, **kwargs)
    return kernel


def fallback_for(name: str) -> Callable[..., Any]:
    """The fallback as a kernel of one op ("aten::add.Tensor"), which an `impl` is not told."""
    packet, _, overload = name[len("aten::"):].partition(".")
    op = getattr(getattr(torch.ops.aten, packet), overload or "default")

    def kernel(*args: Any, **kwargs: Any) -> Any:
        return _fallback(op, args, kwargs)
    return kernel


# Ops that run for real on gxu while a TorchDispatchMode (e.g. FakeTensorMode) is active,
# as when torch.tensor(..., device="gxu") builds its data under Inductor's pattern init.
# A Python-registered *fallback* cannot serve them then: PythonKernelHolder trampolines
# through the per-op registry, which only holds `impl` registrations, and asserts
# (python_dispatch.cpp "func != nullptr", torch 2.11 and 2.13). So they get explicit impls.
# The allocations have C++ kernels (csrc/memory.cpp).
MODE_SAFE_OPS = ("_to_copy", "copy_")


_CONVOLUTIONS = ("aten::convolution", "aten::_convolution", "aten::convolution_backward")
_libraries: list[torch.library.Library] = []


def _signature(value: Any) -> Any:
    """What a layout promise depends on: tensors by size, stride and dtype; lists as tuples."""
    if isinstance(value, torch.Tensor):
        return _TensorLayout(tuple(value.size()), tuple(value.stride()), value.dtype)
    if isinstance(value, (list, tuple)):
        return tuple(_signature(v) for v in value)
    return value


class _TensorLayout(NamedTuple):
    size: tuple
    stride: tuple
    dtype: torch.dtype


@functools.lru_cache(maxsize=1024)
def _promised(op: torch._ops.OpOverload, args: tuple, kwargs: tuple) -> Any:
    """The op's results' layouts as torch lays out fake gxu tensors: what Inductor traced
    with and asserts on (the meta device's answer differs: it follows the inputs' layout),
    for arguments given by `_signature`."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    def fake(value: Any) -> Any:
        if isinstance(value, _TensorLayout):
            return torch.empty_strided(value.size, value.stride, dtype=value.dtype, device="gxu")
        return list(map(fake, value)) if isinstance(value, tuple) else value
    with FakeTensorMode():
        result = op(*map(fake, args), **{k: fake(v) for k, v in kwargs})
    return tree_map(lambda r: tuple(r.stride()) if isinstance(r, torch.Tensor) else None, result)


def in_promised_layout(op: torch._ops.OpOverload, args: tuple, kwargs: dict, result: Any) -> Any:
    """`result` of `op` (a tensor or a tuple of them, on any device) in the layout torch
    promises for gxu: the backing kernels (cuDNN, oneDNN) may choose another one, and
    Inductor's compiled code asserts on, and indexes by, the promised one."""
    promised = _promised(op, _signature(args), tuple(sorted(
        (k, _signature(v)) for k, v in kwargs.items())))
    if isinstance(result, tuple):
        return tuple(_in_layout(r, stride) for r, stride in zip(result, promised))
    return _in_layout(result, promised)


def _in_layout(result: Any, stride: tuple | None) -> Any:
    if not isinstance(result, torch.Tensor) or stride is None or result.stride() == stride:
        return result
    laid_out = torch.empty_strided(result.size(), stride, dtype=result.dtype, device=result.device)
    return laid_out.copy_(result)


def _convolution_kernel(name: str) -> Callable[..., Any]:
    """The fallback for a convolution op, its results in the layout torch promises for gxu."""
    packet, _, overload = name[len("aten::"):].partition(".")
    op = getattr(getattr(torch.ops.aten, packet), overload or "default")
    run = fallback_for(name)

    def kernel(*args: Any, **kwargs: Any) -> Any:
        return in_promised_layout(op, args, kwargs, run(*args, **kwargs))
    return kernel


def register() -> None:
    """Install the fallback and the dedicated kernels for the PrivateUse1 key."""
    if _libraries:
        return
    fallback_library = torch.library.Library("_", "IMPL")
    fallback_library.fallback(fallback, "PrivateUse1")
    aten = torch.library.Library("aten", "IMPL")
    # A structured op without a gxu kernel runs its CompositeExplicitAutogradNonFunctional
    # kernel: an allocation and then its out= variant, two trips through the fallback.
    # Sending such ops straight to the fallback runs the backing device's structured kernel
    # in one trip: same result, half the overhead. Convolution's composite kernel would
    # pick `convolution_overrideable` for PrivateUse1 (a hook for C++ backends, with no
    # kernel anywhere), so it too must reach the backing device's own kernel.
    for name in torch._C._dispatch_get_all_op_names():
        if name.startswith("aten::") and not torch._C._dispatch_has_kernel_for_dispatch_key(
                name, "PrivateUse1") and (
                name.partition(".")[0] in _CONVOLUTIONS
                or torch._C._dispatch_has_kernel_for_dispatch_key(
                    name, "CompositeExplicitAutogradNonFunctional")):
            convolution = name.partition(".")[0] in _CONVOLUTIONS
            aten.impl(name[len("aten::"):], (_convolution_kernel if convolution
                                             else fallback_for)(name), "PrivateUse1")
    aten.impl("_copy_from", copy_from, "PrivateUse1")
    aten.impl("resize_", resize_, "PrivateUse1")
    for overload in ("source_Storage", "source_Storage_storage_offset", "source_Tensor"):
        aten.impl(f"set_.{overload}", _metadata_only(getattr(torch.ops.aten.set_, overload)),
                  "PrivateUse1")
    aten.impl("set_", set_empty, "PrivateUse1")
    for name in MODE_SAFE_OPS:
        aten.impl(name, fallback_for(f"aten::{name}"), "PrivateUse1")
    _libraries.extend([fallback_library, aten])
