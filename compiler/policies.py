"""The launch policies by name, and the active one.

`use_heuristics` takes a name ("gxu", "seed", "autotune"), a `module.path:ClassName` of a
vendor's `Heuristics` subclass, or an instance.
"""
from __future__ import annotations

import importlib
import threading
from typing import Union

from .autotune import AutotuneHeuristics
from .heuristics import GXUHeuristics, Heuristics, SeedHeuristics

POLICIES: dict[str, type[Heuristics]] = {
    "seed": SeedHeuristics, "gxu": GXUHeuristics, "autotune": AutotuneHeuristics}

_lock = threading.Lock()
_active: Heuristics = GXUHeuristics()


def resolve_policy(policy: Union[str, Heuristics]) -> Heuristics:
    """A policy instance from a name, an import path ("pkg.module:Class") or an instance."""
    if isinstance(policy, Heuristics):
        return policy
    if not isinstance(policy, str):
        raise TypeError(f"use_heuristics takes a policy name or a gxusim.Heuristics instance, "
                        f"not {type(policy).__name__}")
    if policy in POLICIES:
        return POLICIES[policy]()
    module_name, colon, class_name = policy.partition(":")
    if not colon:
        raise ValueError(f"unknown heuristics policy {policy!r}; choose one of {sorted(POLICIES)}, "
                         f"a 'package.module:Class' import path, or a gxusim.Heuristics instance")
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError) as error:
        raise ValueError(f"policy {policy!r}: cannot import {class_name!r} from {module_name!r} "
                         f"({type(error).__name__}: {error})") from None
    if not (isinstance(cls, type) and issubclass(cls, Heuristics)):
        raise TypeError(f"policy {policy!r} is {cls!r}, not a gxusim.Heuristics subclass")
    return cls()


def use_heuristics(policy: Union[str, Heuristics]) -> Heuristics:
    """Set the launch policy: "gxu" (default), "seed", "autotune", "pkg.mod:Class" or an instance."""
    global _active
    resolved = resolve_policy(policy)
    with _lock:
        _active = resolved
    return resolved


def current_heuristics() -> Heuristics:
    return _active
