"""The frame of a generated module around an emitter's program body: its parameters
(pointer arguments, tracking arrays, the kernel's integer constants, the record arrays),
`_program`'s prologue, and value names numbered by rank, so that one kernel structure gives
one source (the module cache's key). Its functions take an `emitter.Emitter` (typed `Any`:
the emitter imports this module)."""
from __future__ import annotations

import math
import re
from typing import Any

from . import dtypes as D
from .module_cache import runtime_hash

# The per-launch record arrays every generated kernel takes last, in this order.
RECORD_PARAMS = ("tiles", "oob", "lanes", "site_runs", "samp_off", "samp_mask", "samp_flag")
# With checks on, per tracked pointer argument: its alias class's `tracking.Tracking`
# arrays, one row per thread.
TRACKING_PARAMS = ("w1", "w2", "r1", "r2", "state", "log")
_VALUE_NAME = re.compile(r"\b[va](\d+)\b")


def parameters(emitter: Any) -> list[tuple[str, str]]:
    """(kind, arg) for each runtime parameter of the emitter's module, in order (the caller
    builds the values: `execution.thread_values`)."""
    kir, layout = emitter.kir, emitter.layout
    out = []
    for name in kir.arg_names:
        kinds = ("buf", "base", "size") if name in kir.pointers else \
            ("scalar",) if name in kir.scalars else ()
        out += [(kind, name) for kind in kinds]
    if layout.checks:
        for name in kir.arg_names:
            if name in kir.stored or name in layout.track_reads:
                out += [(kind, name) for kind in TRACKING_PARAMS]
    return out + [("consts", "")] + [(kind, "") for kind in RECORD_PARAMS]


def param_name(kind: str, arg: str) -> str:
    prefix = {"buf": "b_", "base": "o_", "size": "n_", "scalar": "s_",
              **{k: f"{k}_" for k in TRACKING_PARAMS}}
    return f"{prefix[kind]}{arg}" if kind in prefix else kind


def module_source(emitter: Any) -> str:
    """The whole module: the emitter's program body in its frame."""
    body_start = len(emitter.lines)
    emitter.units_code(emitter.units, 1)
    body = emitter.lines[body_start:]
    emitter.lines = emitter.lines[:body_start]
    names = [param_name(k, a) for k, a in parameters(emitter)]
    head = [
        f"# gxusim emulator module; runtime {runtime_hash()}",
        "from numba import njit",
        "from gxusim.emulator.runtime import *",
        "from gxusim.emulator.tracking import *",
        "", "",
        "@njit(cache=True, error_model='numpy', nogil=True)",
        f"def _program(p, pid0, pid1, pid2, np0, np1, np2, {', '.join(names)}):",
        "    pid0, pid1, pid2 = np.int32(pid0), np.int32(pid1), np.int32(pid2)",
        "    np0, np1, np2 = np.int32(np0), np.int32(np1), np.int32(np2)",
        f"    pp = np.{emitter.layout.program_dtype}(p)",
    ]
    for v in sorted(emitter.arrays.values(), key=lambda v: v.id):
        head.append(f"    a{v.id} = np.empty({math.prod(v.shape)}, {D.COMPUTE[v.dtype]})")
    head += [f"    {line}" for line in emitter.program_locals]
    return _numbered_by_rank("\n".join(head + body) + "\n")


def _numbered_by_rank(source: str) -> str:
    """The source with its values' names (`v<id>`, `a<id>`) numbered by the rank of their
    IR ids, not the ids themselves (which count every value built in the process): kernels
    of the same structure then get the same module, compiled once."""
    ids = sorted({int(number) for number in _VALUE_NAME.findall(source)})
    rank = {str(number): str(position) for position, number in enumerate(ids)}
    return _VALUE_NAME.sub(lambda m: m.group(0)[0] + rank[m.group(1)], source)
