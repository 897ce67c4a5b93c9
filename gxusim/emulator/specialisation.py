"""Specialisations: a kernel, its argument kinds and the runtime layout -> its IR, its
generated module and its compiled program, built once per process and cached."""
from __future__ import annotations

import dataclasses
import threading
import time
from pathlib import Path
from typing import Any, Callable

from . import module_cache
from .arguments import LaunchArguments
from .builder import build_ir
from .emitter import Emitter, Layout, generate
from .ir import KernelIR
from .source import kernel_source, source_hash


@dataclasses.dataclass
class Specialisation:
    """A compiled specialisation and what a launch needs to call it."""
    kir: KernelIR
    emitter: Emitter
    program: Callable  # the generated module's `_program` (numba compiles it on first call)
    module_path: Path  # the generated module in the module cache
    jit_s: float  # front end + code generation (numba compiles on the first call)


_cache: dict = {}
_cache_lock = threading.Lock()


def program_dtype(programs: int) -> str:
    """The smallest signed integer type holding every program id (tracking arrays)."""
    return "int8" if programs < 127 else "int16" if programs < 32767 else "int32"


def specialise(kernel: Any, arguments: LaunchArguments, checking: bool,
               programs: int) -> Specialisation:
    """The compiled specialisation of `kernel` for these arguments (raises `Unsupported`).

    With checking on, loads of storages the kernel also stores to are recorded (races);
    which those are depends on the IR, so the IR is built (and cached) first."""
    kir = _cached_ir(kernel, arguments.spec_args)
    buffers = arguments.buffers
    stored_classes = {buffers[n].alias for n in kir.stored}
    track_reads = frozenset(n for n in kir.loaded if buffers[n].alias in stored_classes) \
        if checking else frozenset()
    layout = Layout(track_reads, checking, program_dtype(programs))
    return _compiled(kernel, arguments.spec_args, layout, arguments.alias_classes())


def _spec_key(kernel: Any, spec_args: dict) -> tuple:
    return (source_hash([kernel_source(kernel)[0]]), id(kernel),
            tuple(sorted((k, repr(v)) for k, v in spec_args.items())))


def _cached_ir(kernel: Any, spec_args: dict) -> KernelIR:
    key = ("ir",) + _spec_key(kernel, spec_args)
    with _cache_lock:
        hit = _cache.get(key)
    if hit is None:
        hit = build_ir(kernel, spec_args)
        with _cache_lock:
            _cache[key] = hit
    return hit


def _compiled(kernel: Any, spec_args: dict, layout: Layout, alias: dict) -> Specialisation:
    key = _spec_key(kernel, spec_args) + (layout, tuple(sorted(alias.items())))
    with _cache_lock:
        hit = _cache.get(key)
    if hit is not None:
        return dataclasses.replace(hit, jit_s=0.0)
    start = time.perf_counter()
    kir = build_ir(kernel, spec_args)  # a fresh IR: the planner rewrites statement lists
    emitter = generate(kir, layout, alias)
    program, path = module_cache.load(emitter.source)
    made = Specialisation(kir, emitter, program, path, 0.0)
    made.jit_s = time.perf_counter() - start
    with _cache_lock:
        _cache[key] = made
    return made
