"""Checks: turn what an emulated launch recorded into `Finding`s.

Inputs are the raw records of one launch (out-of-bounds lanes per program and site, the
merged `tracking.Tracking` facts per storage, tiles per program); outputs are findings
with kernel, program, buffer (argument name) and element offset (relative to the
argument's pointer), in a deterministic order.
"""
from __future__ import annotations

import dataclasses
from typing import Optional

import numpy as np
import torch

from ..findings import Finding
from ..kernel_args import is_in_place, is_output
from .ir import KernelIR, Site
from .tracking import Tracking


@dataclasses.dataclass
class Buffer:
    """One pointer argument as the emulator sees it."""
    name: str
    tensor: torch.Tensor  # CPU tensor (alias of gxu memory where needed)
    array: np.ndarray  # the whole storage, flat, in the kernel's element type
    base: int  # storage offset of the argument's first element
    alias: int  # alias class: arguments sharing storage and dtype


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
        out = rec.summary
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


def _missing(t: torch.Tensor, rec: Optional[Tracking]) -> tuple[int, int, int]:
    """(unwritten elements of the tensor view, their total, storage index of the first);
    `rec`: the records of its storage, None when nothing stored to it."""
    if t.is_contiguous():
        start, numel = t.storage_offset(), t.numel()
        count, first = rec.unwritten(start, start + numel) if rec is not None else (numel, start)
        return count, numel, first if count else -1
    n = t.untyped_storage().nbytes() // t.element_size()
    written = rec.written if rec is not None else np.zeros(n, np.bool_)
    positions = torch.arange(n, device="cpu").as_strided(  # whatever torch.device is in force
        t.size(), t.stride(), t.storage_offset()).reshape(-1).numpy()
    missing = ~written[positions]
    count = int(missing.sum())
    return count, missing.size, int(positions[np.argmax(missing)]) if count else -1


def written_in_part(kir: KernelIR) -> frozenset:
    """Arguments the kernel writes only in part by design, their other elements keeping
    what was there before: targets of atomic adds (updated where there is something to
    add) and buffers the kernel's decorator declares it updates in place (Inductor's
    `mutated_arg_names`: the target of a scatter, an index_put, a slice assigned into an
    input). Inductor declares an in_out_ptr mutated too, but that is a buffer reused in
    place for the kernel's result, which overwrites all of it."""
    return frozenset(kir.atomic) | {n for n in kir.mutated if not is_in_place(n)}


def uncovered(kernel: str, tracking: dict, buffers: dict, stored: list[str],
              compiler_generated: bool, pointer_args: list[str],
              partial: frozenset = frozenset()) -> list[Finding]:
    """Output elements no program wrote (error for compiler kernels, warning otherwise);
    outputs in `partial` (`written_in_part`) are not expected to be covered."""
    found = []
    # A generated kernel must write all of every out_ptr; an in_out_ptr it never stores to
    # is a buffer updated in place with nothing to change (Inductor keeps the name).
    outputs = [n for n in pointer_args
               if is_output(n) and (n in stored or not is_in_place(n))] \
        if compiler_generated else stored
    outputs = [n for n in outputs if n not in partial]
    for name in outputs:
        buf = buffers[name]
        count, total, first = _missing(buf.tensor, tracking.get(buf.alias))
        if count == 0 or (not compiler_generated and count == total):
            continue
        offset = first - buf.base
        severity = "error" if compiler_generated else "warning"
        found.append(Finding(
            "uncovered", severity,
            f"{count} of {total} element(s) of output {name} were written by no program "
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
