"""Launch arguments: binds a launch's arguments to the kernel's parameters and sorts them
into buffers (tensors as flat host arrays of their whole storage), runtime scalars, and
the specialisation key the builder takes."""
from __future__ import annotations

import dataclasses
import functools
import inspect
from typing import Any, Callable, Optional, Sequence

import numpy as np
import torch
from triton.runtime.jit import JITFunction

from . import dtypes as D
from .checks import Buffer
from .ir import Unsupported
from .ops import LAUNCH_OPTIONS
from .source import kernel_source


@dataclasses.dataclass
class LaunchArguments:
    """A bound launch's arguments, sorted by what the emulator does with them."""
    spec_args: dict  # arg -> ('ptr', elem dtype) | ('scalar', dtype) | ('const', value)
    buffers: dict  # pointer arg -> Buffer
    scalars: dict  # runtime scalar arg -> numpy value of its dtype

    def alias_classes(self) -> dict:
        """Pointer arg -> alias class (arguments sharing storage and dtype share one)."""
        return {name: buf.alias for name, buf in self.buffers.items()}


def jit_function(kernel: Any) -> Any:
    """The JITFunction behind an autotuner or heuristics wrapper (or the kernel itself)."""
    while not isinstance(kernel, JITFunction) and hasattr(kernel, "fn"):
        kernel = kernel.fn
    return kernel


def bind_arguments(kernel: Any, args: Sequence, constexprs: dict,
                   arg_names: Optional[list]) -> dict:
    """Parameter name -> value, in the kernel's parameter order (defaults filled in;
    launch options such as num_warps among `constexprs` are left out)."""
    pyfn = kernel_source(kernel)[1]
    sig = _signature(pyfn)
    names = list(arg_names or sig.parameters)
    bound: dict = dict(zip(names, args))
    for name, value in constexprs.items():
        if name not in LAUNCH_OPTIONS:
            bound[name] = value
    for name, param in sig.parameters.items():
        if name not in bound and param.default is not inspect.Parameter.empty:
            bound[name] = param.default
    missing = [n for n in sig.parameters if n not in bound]
    if missing:
        raise TypeError(f"kernel {pyfn.__name__}: missing argument(s) {missing}")
    return {n: bound[n] for n in sig.parameters}


@functools.lru_cache(maxsize=1024)
def _signature(pyfn: Callable) -> inspect.Signature:
    return inspect.signature(pyfn)


def sort_arguments(kernel: Any, bound: dict) -> LaunchArguments:
    """Tensors become buffers, numbers runtime scalars, constexprs and other values
    constants; raises `Unsupported` for a tensor of a dtype Triton has no name for."""
    const_names = {p.name for p in kernel.params if p.is_constexpr} \
        if isinstance(kernel, JITFunction) else set()
    sorted_args = LaunchArguments({}, {}, {})
    alias_keys: dict = {}
    for arg, value in bound.items():
        if isinstance(value, torch.Tensor):
            t = host_tensor(value)
            dt = D.TORCH_TO_TL.get(t.dtype)
            if dt is None:
                raise Unsupported(f"tensor argument {arg} of dtype {t.dtype}")
            alias = alias_keys.setdefault((t.untyped_storage().data_ptr(), dt), len(alias_keys))
            sorted_args.buffers[arg] = Buffer(arg, t, storage_array(t, dt), t.storage_offset(), alias)
            sorted_args.spec_args[arg] = ("ptr", dt)
        elif arg in const_names or value is None or isinstance(value, (str, type)) or \
                not isinstance(value, (bool, int, float, np.number)):
            sorted_args.spec_args[arg] = ("const", value)
        else:
            dt = D.python_scalar_dtype(value)
            sorted_args.spec_args[arg] = ("scalar", dt)
            sorted_args.scalars[arg] = D.COMPUTE_NP[dt](value)
    return sorted_args


# How tensors of other devices reach host memory, by device type. The gxu device registers
# its backing alias here (gxusim/__init__.py), so the emulator never imports the device.
HOST_VIEWS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {}


def host_tensor(t: torch.Tensor) -> torch.Tensor:
    """The CPU tensor holding `t`'s memory (a gxu tensor's backing alias on the emulator)."""
    if t.device.type == "cpu":
        return t
    view = HOST_VIEWS.get(t.device.type)
    if view is not None:
        alias = view(t)
        if alias.device.type == "cpu":
            return alias
    raise ValueError(f"the emulator runs on host memory; got a tensor on {t.device} "
                     f"(use CPU tensors or gxu tensors on the emulator target)")


def storage_array(t: torch.Tensor, dt: str) -> np.ndarray:
    """The tensor's whole storage as a flat numpy array (fp16/bf16 as raw uint16 bits)."""
    n = t.untyped_storage().nbytes() // t.element_size()
    flat = torch.empty(0, dtype=t.dtype, device="cpu").set_(t.untyped_storage(), 0, (n,), (1,))
    if dt in ("fp16", "bf16"):
        return flat.view(torch.int16).numpy().view(np.uint16)
    return flat.numpy()
