"""Execution target: where gxu memory lives and where kernels run.

`cuda`: gxu memory is CUDA device memory and compiled kernels run on the real GPU.
`emulator`: gxu memory is host memory and kernels run on the CPU emulator.
`auto` (default): CUDA when a CUDA GPU is present, else the emulator.
The target is fixed once the first gxu tensor is allocated: memory already handed
out cannot move, so changing it afterwards is an error.
"""
from __future__ import annotations

import os
import threading

import torch

TARGETS = ("auto", "cuda", "emulator")

_lock = threading.Lock()
_requested: str | None = None
_resolved: str | None = None
_frozen_device: torch.device | None = None  # set by the first gxu allocation


def _validate(name: str) -> str:
    if name not in TARGETS:
        raise ValueError(f"unknown gxusim target {name!r}; choose one of {TARGETS}")
    return name


def _resolve(name: str) -> str:
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "emulator"
    if name == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("gxusim target 'cuda' needs a CUDA GPU, and torch sees none "
                           f"(torch {torch.__version__}); use 'emulator' or 'auto'")
    return name


def set_target(name: str) -> None:
    """Choose the execution target ("auto" | "cuda" | "emulator")."""
    global _requested, _resolved
    name = _validate(name)
    with _lock:
        resolved = _resolve(name)
        if _frozen_device is not None and resolved != _resolved:
            raise RuntimeError(f"gxusim target is already {_resolved!r} and gxu memory has been "
                               f"allocated there; set the target before the first gxu tensor "
                               f"(or with GXUSIM_TARGET)")
        _requested, _resolved = name, resolved


def current_target() -> str:
    """The resolved target: "cuda" or "emulator"."""
    global _requested, _resolved
    with _lock:
        if _resolved is None:
            _requested = _validate(os.environ.get("GXUSIM_TARGET", "auto"))
            _resolved = _resolve(_requested)
        return _resolved


def backing_device() -> torch.device:
    """The torch device whose memory backs gxu tensors on the current target."""
    # Once memory is handed out it stays where it is; this is also every eager op's fast path.
    if _frozen_device is not None:
        return _frozen_device
    return torch.device("cuda", torch.cuda.current_device()) if current_target() == "cuda" \
        else torch.device("cpu")


def freeze() -> torch.device:
    """Called on the first gxu allocation: from then on the target cannot change."""
    global _frozen_device
    if _frozen_device is None:
        device = backing_device()
        with _lock:
            if _frozen_device is None:
                _frozen_device = device
    return _frozen_device
