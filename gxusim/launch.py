"""Launch records and the decision log: what ran, with which parameters, and why.

Every gxu kernel launch appends a `Launch` (docs/api.md) to a process-wide history that
`gxusim.launches()` returns. The history is a ring: it keeps the latest
`GXUSIM_LAUNCH_HISTORY` records (default 10,000; `set_launch_history` changes it), so a
training loop of millions of steps does not grow without bound. (With a ring of 100,000,
100,000 warm calls of a small model on the emulator target grew RSS about 0.7 kB a call
after the ring was full, though tracemalloc saw no Python objects accumulate; with 10,000
RSS stayed flat: benchmarks/bench_long_run.py.) With
`GXUSIM_LOG=decisions` each launch also prints a line in the seed's style
(`[Config] kernel XBLOCK=... num_warps=... grid=(...)`), and each compiled kernel its fusion
decision (`[Fusion] kernel <- aten.add + aten.relu`), through the `gxusim.decisions` logger.
"""
from __future__ import annotations

import collections
import contextlib
import dataclasses
import logging
import sys
import threading
from typing import Any, Callable, Iterator, Optional, Sequence

from . import environment
from .findings import Finding
from .model.launch_facts import LaunchFacts
from .traits import KernelTraits

log = logging.getLogger("gxusim.decisions")


@dataclasses.dataclass
class Launch:
    kernel: str
    grid: tuple[int, int, int]
    num_warps: int
    meta: dict[str, Any]  # XBLOCK, RBLOCK/R0_BLOCK, YBLOCK, numels, tiles, tiles_per_program
    target: str  # "cuda" | "emulator"
    policy: str
    findings: list[Finding] = dataclasses.field(default_factory=list)
    predicted_s: Optional[float] = None
    measured_s: Optional[float] = None
    rules: dict[str, str] = dataclasses.field(default_factory=dict)  # parameter -> what decided it
    fusion: tuple[str, ...] = ()  # aten operators fused into the kernel, in graph order
    facts: Optional[LaunchFacts] = None  # what the prediction was made from
    occupancy_limiter: Optional[str] = None  # what caps resident programs per SM
    occupancy: Optional[str] = None  # the emulator's occupancy line (blocks/SM, regs, waves)
    # The kernel's source as this process's Inductor wrote it (versions write different
    # ones): stored with measurements, the model's facts can be recomputed from it anywhere.
    source: str = ""
    traits: Optional[KernelTraits] = None  # what the kernel does (`gxusim.traits`)

    def fusion_line(self) -> str:
        """The fusion decision in the seed's style: which aten ops became this kernel."""
        return fusion_line(self.kernel, self.fusion)

    def describe(self) -> str:
        params = " ".join(f"{k}={v}" for k, v in self.meta.items())
        rules = "; ".join(f"{k}: {v}" for k, v in self.rules.items())
        return (f"[Config] {self.kernel} {params} num_warps={self.num_warps} grid={self.grid} "
                f"policy={self.policy} target={self.target}" + (f" ({rules})" if rules else ""))


def fusion_line(kernel: str, operators: Sequence[str]) -> str:
    return f"[Fusion] {kernel} <- {' + '.join(operators) if operators else '(no aten ops recorded)'}"


_lock = threading.Lock()
_launches: collections.deque[Launch | tuple] = collections.deque(maxlen=environment.integer("GXUSIM_LAUNCH_HISTORY"))


def set_launch_history(size: int) -> None:
    """Keep at most the latest `size` launch records (0 keeps none)."""
    global _launches
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise ValueError(f"launch history size must be a non-negative int, not {size!r}")
    with _lock:
        _launches = collections.deque(_launches, maxlen=size)


if "decisions" in environment.flags("GXUSIM_LOG") and not log.handlers:
    _handler = logging.StreamHandler(sys.stderr)
    _handler.setFormatter(logging.Formatter("%(message)s"))
    log.addHandler(_handler)
    log.setLevel(logging.INFO)


_collecting: list[list] = []  # the lists of `collecting()` blocks, innermost last


def record(launch: Launch) -> None:
    with _lock:
        (_collecting[-1] if _collecting else _launches).append(launch)
    if log.isEnabledFor(logging.INFO):
        log.info(launch.describe())


def record_lazily(make: Callable[..., Launch], *args: Any) -> None:
    """Record the launch `make(*args)` describes, building it only when someone reads the
    records: a launch on the hot path pays for a tuple, not a dataclass."""
    if log.isEnabledFor(logging.INFO):
        record(make(*args))
        return
    with _lock:
        (_collecting[-1] if _collecting else _launches).append((make, args))


@contextlib.contextmanager
def collecting() -> Iterator[list]:
    """Inside the block, what is recorded goes to the list given instead of the records, to
    be recorded with `record_again` (the launches of a captured CUDA graph, at each replay)."""
    entries: list = []
    with _lock:
        _collecting.append(entries)
    try:
        yield entries
    finally:
        with _lock:
            _collecting.remove(entries)


def record_again(entries: list) -> None:
    """Record the launches `collecting()` kept, as they were (again at each call)."""
    if log.isEnabledFor(logging.INFO):
        for entry in entries:
            record(_built(entry))
        return
    with _lock:
        _launches.extend(entries)


def _built(entry: Launch | tuple) -> Launch:
    return entry if isinstance(entry, Launch) else entry[0](*entry[1])


def launches() -> list[Launch]:
    """Launch records since the last `clear_launches()` (a copy)."""
    with _lock:
        built = [_built(entry) for entry in _launches]
        _launches.clear()
        _launches.extend(built)
        return built


def clear_launches() -> None:
    with _lock:
        _launches.clear()


def restore(records: list[Launch]) -> None:
    """Put back launch records taken earlier with `launches()` (tools that record their own)."""
    with _lock:
        _launches.clear()
        _launches.extend(records)
