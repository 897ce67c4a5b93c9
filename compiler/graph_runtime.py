"""What a compiled gxu graph's wrapper calls at run time: the graph runs on the backing device.

Inductor's wrapper for a gxu graph allocates its buffers, calls extern kernels (mm, addmm,
convolution) and launches GXU kernels. On gxu tensors, every allocation and every extern
call would go through the gxu device's eager dispatch, a Python fallback costing tens of
microseconds per op. Instead the graph runs on the backing device (the GPU on the cuda
target, host memory on the emulator), as stock Inductor's wrapper runs on CUDA:

* `enter_graph().enter(inputs)`: gxu inputs become backing-device aliases of the same
  memory (no copy);
* `empty_strided` and `device` (which the wrapper's allocations and device arguments call)
  name the backing device where the graph says gxu;
* `in_traced_layout(op, kernel, *args)` wraps the extern and fallback kernels whose backing
  implementations choose their own output layout (convolutions: cuDNN, oneDNN): Inductor
  traced them as torch lays out gxu tensors, asserts on that layout and indexes by it;
* `GraphBoundary.leave(outputs, on_gxu)`: the graph's gxu outputs go back as gxu tensors,
  views of an input's storage where they alias one, owners of their memory otherwise.

GXU kernels still launch through `launcher.GXUKernel` (planned, checked against the spec,
recorded) on the same memory, and extern calls are still recorded. What the graph keeps
between its kernels is never a gxu tensor, so `torch.gxu.memory_allocated()` counts a
compiled graph's inputs and outputs, not its temporaries (the backing device's allocator
holds those, as it does for stock Inductor).

Under `launcher.predict_only()` the inputs are FakeTensors on gxu and nothing moves: the
graph runs on gxu as traced.
"""
from __future__ import annotations

import contextlib
import logging
from typing import Any, Optional

import torch

from gxusim import environment, target
from gxusim import launch as launch_records
from gxusim.device.ops import GraphBoundary, in_promised_layout

from .launcher import predicting

DEVICE = "gxu"
log = logging.getLogger(__name__)
gxu_one_device = contextlib.nullcontext()  # the wrapper's device guard: one device, no switch


class _Traced:
    """The boundary under `predict_only`: inputs and outputs stay as they are."""

    @staticmethod
    def enter(values: tuple) -> tuple:
        return values

    @staticmethod
    def leave(values: tuple, on_gxu: tuple[bool, ...]) -> tuple:
        return values


TRACED = _Traced()


def enter_graph() -> "GraphBoundary | _Traced":
    """The boundary for one call of a compiled graph."""
    return TRACED if predicting() else GraphBoundary()


def _is_gxu(device: Any) -> bool:
    if isinstance(device, str):
        return device == DEVICE or device.startswith(DEVICE + ":")
    return getattr(device, "type", None) == DEVICE


# torch's C++ allocators that stock Inductor's wrappers call (`empty_strided_cuda`), skipping
# torch.empty_strided's argument parsing; checked on torch 2.11 and 2.13.
_BACKING_ALLOCATORS = {"cuda": torch._C._dynamo.guards._empty_strided_cuda,
                       "cpu": torch._C._dynamo.guards._empty_strided_cpu}


def empty_strided(size: Any, stride: Any, *, device: Any = None, dtype: Optional[torch.dtype] = None,
                  **kwargs: Any) -> torch.Tensor:
    """The wrapper's allocations: a gxu buffer is allocated on the backing device (the
    current CUDA device on the cuda target, as stock wrappers allocate)."""
    if device == DEVICE and type(size) is tuple and type(stride) is tuple and not kwargs \
            and not predicting():  # as wrappers pass them
        return _BACKING_ALLOCATORS[target.backing_device().type](size, stride, dtype)
    if predicting() or not _is_gxu(device):
        return torch.empty_strided(size, stride, device=device, dtype=dtype, **kwargs)
    return torch.empty_strided(size, stride, device=target.backing_device(), dtype=dtype,
                               **kwargs)


def device(type: str, index: Optional[int] = None) -> torch.device:  # noqa: A002 - torch's name
    """`torch.device` as the wrapper's device arguments (`device(type='gxu', index=0)` of a
    fallback op, a constant's placement) call it: gxu names the backing device."""
    if type == DEVICE and not predicting():
        return target.backing_device()
    return torch.device(type, index)


def in_traced_layout(op: torch._ops.OpOverload, kernel: Any, *args: Any, **kwargs: Any) -> Any:
    """`kernel(*args, **kwargs)`, which computes aten `op` on the backing device, with its
    results in the layout torch gives `op` on gxu tensors (copied where the kernel chose
    another)."""
    result = kernel(*args, **kwargs)
    return result if predicting() else in_promised_layout(op, args, kwargs, result)


def compiling_ahead(call: Any, refusal: Optional[str]) -> Any:
    """A compiled graph's `call` that, on a target that compiles ahead (the emulator) and
    for each new signature of its inputs, first runs once with its launches collected, not
    run: their modules compile in worker processes (`gxusim.emulator.compile_pool`) while
    the real call runs and compiles here too. `refusal`, known at code generation, says why
    a graph must not run twice (it mutates its inputs)."""
    seen: set = set()

    def call_compiling_ahead(args: list) -> Any:
        if refusal is None and target.active().compiles_ahead and not predicting() \
                and environment.integer("GXUSIM_COMPILE_WORKERS") > 0 \
                and not torch.autograd.profiler._is_profiler_enabled:  # traces show one call
            signature = tuple((tuple(a.shape), a.stride(), a.dtype)
                              if isinstance(a, torch.Tensor) else a for a in args)
            if signature not in seen:
                seen.add(signature)
                _collect(call, _copies(args))
        return call(args)
    return call_compiling_ahead


def _copies(args: list) -> list:
    """The arguments, each tensor a view of a copy of its storage (its size, strides and
    offset kept, and storages shared between arguments shared between their copies): the
    collecting call writes into what it is given, and a graph may write into its inputs
    without mutating them in the graph's terms (a backward graph reuses the memory of the
    saved activations donated to it: the collected extern kernels' outputs would overwrite
    them before the real call reads them)."""
    storages: dict[int, Any] = {}
    copies = []
    for value in args:
        if isinstance(value, torch.Tensor):
            storage = value.untyped_storage()
            copy = storages.setdefault(storage.data_ptr(), storage.clone())
            value = torch.empty(0, dtype=value.dtype, device=value.device).set_(
                copy, value.storage_offset(), value.size(), value.stride())
        copies.append(value)
    return copies


def _collect(call: Any, args: list) -> None:
    """`call` with its launches collected, not run or recorded, on copies of its arguments
    (`_copies`). The generators' states are restored after it (the real call draws the
    graph's seeds again), and an extern kernel that fails on the buffers no kernel wrote
    ends the collection early: what it collected still compiles."""
    with torch.random.fork_rng(devices=[]), target.collecting_launches(), \
            launch_records.collecting():  # its extern calls are not launch records either
        state = torch.gxu.get_rng_state()
        try:
            call(args)
        except Exception as error:  # noqa: BLE001 - only a head start; the real call follows
            log.debug("collecting a graph's launches ended early: %s: %s",
                      type(error).__name__, error)
        finally:
            torch.gxu.set_rng_state(state)
