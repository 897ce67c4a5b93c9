"""Checks: turn what an emulated launch recorded into `Finding`s.

Inputs are the raw per-program and per-element records of one launch (out-of-bounds
lanes, first/second writer and reader per storage element, tiles per program); outputs
are findings with kernel, program, buffer (argument name) and element offset (relative
to the argument's pointer), in a deterministic order.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Optional

import numpy as np
import torch

from ..findings import Finding
from .frontend import Site
from .runtime import merge_tracking

_OUTPUT_ARG = re.compile(r"^(in_)?out_ptr\d*$")


@dataclasses.dataclass
class Buffer:
    """One pointer argument as the emulator sees it."""
    name: str
    tensor: torch.Tensor  # CPU tensor (alias of gxu memory where needed)
    array: np.ndarray  # the whole storage, flat, in the kernel's element type
    base: int  # storage offset of the argument's first element
    alias: int  # alias class: arguments sharing storage and dtype


@dataclasses.dataclass
class Tracking:
    """Per alias class: per-thread first/second writers and (if needed) readers."""
    w1: np.ndarray
    w2: np.ndarray
    r1: np.ndarray
    r2: np.ndarray


def out_of_bounds(kernel: str, oob: np.ndarray, sites: list[Site], buffers: dict) -> list[Finding]:
    """One finding per access site: the lowest program with a lane out of bounds there."""
    found = []
    for site_id, site in enumerate(sites):
        progs = np.nonzero(oob[:, site_id, 0])[0]
        if len(progs) == 0:
            continue
        p = int(progs[0])
        offset = int(oob[p, site_id, 1])
        lanes = int(oob[progs, site_id, 0].sum())
        n = buffers[site.base].array.shape[0] - buffers[site.base].base
        found.append(Finding(
            "out_of_bounds", "error",
            f"unmasked {site.kind} of {site.base} at offset {offset} lies outside its storage "
            f"({n} elements from the argument's start); {lanes} lane(s) in {len(progs)} "
            f"program(s); {site.where}",
            program=p, buffer=site.base, offset=offset, kernel=kernel))
    return found


def conflicts_and_races(kernel: str, tracking: dict, buffers: dict, stored: list[str]
                        ) -> list[Finding]:
    found = []
    for alias, rec in sorted(tracking.items()):
        names = [n for n in stored if buffers[n].alias == alias]
        if not names:
            continue
        buf = buffers[names[0]]
        out = merge_tracking(rec.w1, rec.w2, rec.r1, rec.r2)
        if out[0]:
            e = int(out[1]) - buf.base
            found.append(Finding(
                "write_conflict", "error",
                f"programs {int(out[3])} and {int(out[2])} both store {buf.name}[{e}]; "
                f"{int(out[0])} element(s) are stored by more than one program",
                program=int(out[2]), buffer=buf.name, offset=e, kernel=kernel))
        if out[4]:
            e = int(out[5]) - buf.base
            found.append(Finding(
                "read_write_race", "error",
                f"program {int(out[6])} loads {buf.name}[{e}], which program {int(out[7])} stores "
                f"in the same launch (order undefined); {int(out[4])} element(s) affected",
                program=int(out[6]), buffer=buf.name, offset=e, kernel=kernel))
    return found


def _view_positions(t: torch.Tensor) -> np.ndarray | slice:
    """Storage element indices the tensor view addresses (a slice when contiguous)."""
    if t.is_contiguous():
        return slice(t.storage_offset(), t.storage_offset() + t.numel())
    n = t.untyped_storage().nbytes() // t.element_size()
    return torch.arange(n).as_strided(t.size(), t.stride(), t.storage_offset()).reshape(-1).numpy()


def uncovered(kernel: str, tracking: dict, buffers: dict, stored: list[str],
              compiler_generated: bool, pointer_args: list[str]) -> list[Finding]:
    """Output elements no program wrote (error for compiler kernels, warning otherwise)."""
    found = []
    if compiler_generated:
        outputs = [n for n in pointer_args if _OUTPUT_ARG.match(n)]
    else:
        outputs = stored
    for name in outputs:
        buf = buffers[name]
        rec = tracking.get(buf.alias)
        if rec is None:
            written = np.zeros(buf.array.shape[0], dtype=bool)
        else:
            written = (rec.w1 != -1).any(axis=0)
        positions = _view_positions(buf.tensor)
        missing = ~written[positions]
        count = int(missing.sum())
        if count == 0 or (not compiler_generated and count == missing.size):
            continue
        first = int(np.argmax(missing))
        storage_index = positions.start + first if isinstance(positions, slice) else int(positions[first])
        offset = storage_index - buf.base
        severity = "error" if compiler_generated else "warning"
        found.append(Finding(
            "uncovered", severity,
            f"{count} of {missing.size} element(s) of output {name} were written by no program "
            f"(first at offset {offset})", buffer=name, offset=offset, kernel=kernel))
    return found


def load_imbalance(kernel: str, tiles: list[int]) -> Optional[Finding]:
    """Warn when tiles per program are far from even: max > 1.5 x mean and max - min > 1."""
    if not tiles:
        return None
    arr = np.asarray(tiles)
    mean, hi, lo = float(arr.mean()), int(arr.max()), int(arr.min())
    if mean > 0 and hi > 1.5 * mean and hi - lo > 1:
        p = int(arr.argmax())
        return Finding("load_imbalance", "warning",
                       f"program {p} processes {hi} tiles while the mean is {mean:.2f} "
                       f"(min {lo}); the launch takes as long as its busiest program",
                       program=p, kernel=kernel)
    return None
