"""The launch policies by name, and the active one.

`use_heuristics` takes a name ("gxu", "seed", "autotune"), a `module.path:ClassName` of a
vendor's `Heuristics` subclass, or an instance. An import path is found as `python -m`
finds modules: in the current directory first, also from the `gxusim` console script
(whose own folder, not the current one, is what Python puts on `sys.path`).
"""
from __future__ import annotations

import importlib
import os
import sys
import threading
from types import ModuleType
from typing import Union

from gxusim.errors import InputError

from .autotune import AutotuneHeuristics
from .heuristics import GXUHeuristics, Heuristics, SeedHeuristics

POLICIES: dict[str, type[Heuristics]] = {
    "seed": SeedHeuristics, "gxu": GXUHeuristics, "autotune": AutotuneHeuristics}

_lock = threading.Lock()
_active: Heuristics = GXUHeuristics()


class NotAPolicyError(InputError, TypeError):
    """An import path naming something other than a `Heuristics` subclass: bad input (the
    command line's one-line error), and a TypeError as it always was."""


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
        raise InputError(f"unknown heuristics policy {policy!r}; choose one of {sorted(POLICIES)}, "
                         f"a 'package.module:Class' import path, or a gxusim.Heuristics instance")
    try:
        cls = getattr(_import_from_cwd(module_name), class_name)
    except Exception as error:  # the user's module: missing, or failing as it imports
        raise InputError(f"policy {policy!r}: cannot import {class_name!r} from {module_name!r} "
                         f"({type(error).__name__}: {error})") from error
    if not (isinstance(cls, type) and issubclass(cls, Heuristics)):
        raise NotAPolicyError(f"policy {policy!r} is {cls!r}, not a gxusim.Heuristics subclass")
    return cls()


def _import_from_cwd(module_name: str) -> ModuleType:
    """The module, looked for in the current directory first; `sys.path` as it was after."""
    cwd = os.getcwd()
    if "" in sys.path or cwd in sys.path:
        return importlib.import_module(module_name)
    sys.path.insert(0, cwd)
    try:
        return importlib.import_module(module_name)
    finally:
        sys.path.remove(cwd)


def _activate(policy: Heuristics) -> None:
    global _active
    with _lock:
        _active = policy


class use_heuristics:
    """Set the launch policy: "gxu" (default), "seed", "autotune", "pkg.mod:Class" or an
    instance; as a context manager (as `use_spec`), restore the previous one on exit."""

    def __init__(self, policy: Union[str, Heuristics]):
        self.policy = resolve_policy(policy)
        self._previous = current_heuristics()
        _activate(self.policy)

    def __enter__(self) -> Heuristics:
        return self.policy

    def __exit__(self, *exc: object) -> None:
        _activate(self._previous)


def current_heuristics() -> Heuristics:
    return _active
