"""The emulator's intermediate representation: typed block values and the statements
(stores, loop-carried updates, `for` and `while` loops, ifs, returns, reductions) of one
kernel specialisation.

The builder produces it, the tile-loop pass annotates it, the planner and emitter turn it
into numba code, and the checks read its access sites.
"""
from __future__ import annotations

import dataclasses
import itertools
from typing import Any, Iterator, Optional


class Unsupported(Exception):
    """A construct the emulator cannot run exactly; names it and the kernel source line."""

    def __init__(self, what: str, where: str = ""):
        self.what = what
        self.where = where
        super().__init__(f"{what}" + (f" at {where}" if where else ""))


_ids = itertools.count()


@dataclasses.dataclass(eq=False)
class Val:
    """A runtime value: scalar (shape ()) or block. `op` says how it is produced."""
    op: str  # arg pid nprog const arange view ew load phi loopvar param red
    shape: tuple
    dtype: str
    args: tuple = ()
    attrs: dict = dataclasses.field(default_factory=dict)
    deps: frozenset = frozenset()  # 'pid' and loop-variable ids it depends on (tile-loop detection)
    id: int = dataclasses.field(default_factory=lambda: next(_ids))

    def __repr__(self) -> str:
        return f"Val#{self.id}({self.op}, {self.shape}, {self.dtype})"


@dataclasses.dataclass(eq=False)
class Store:
    """tl.store (or tl.atomic_add) of a block to `base` + offsets where `mask` holds."""
    base: str
    elem: str
    offset: Val
    value: Val
    mask: Optional[Val]
    shape: tuple
    site: int
    atomic_add: bool = False  # tl.atomic_add: read-modify-write, exempt from conflict checks


@dataclasses.dataclass(eq=False)
class PhiSet:
    """Assign `src` to a loop-carried or branch-merged value `phi`."""
    phi: Val
    src: Val


@dataclasses.dataclass(eq=False)
class Loop:
    """A runtime `for var in range(start, stop, step)`; `counts_tiles`: a tile loop."""
    var: Val
    start: Val
    stop: Val
    step: Val
    body: list
    counts_tiles: bool = False
    name: str = ""


@dataclasses.dataclass(eq=False)
class While:
    """A runtime `while`: `test` computes the scalar `cond` before every iteration."""
    test: list
    cond: Val
    body: list
    counts_tiles: bool = False


@dataclasses.dataclass(eq=False)
class If:
    """A runtime `if` on a scalar condition."""
    cond: Val
    then: list
    orelse: list


@dataclasses.dataclass(eq=False)
class Return:
    """`return` from the kernel (inside a runtime `if`)."""


@dataclasses.dataclass(eq=False)
class Reduce:
    """A reduction (or scan) of `inputs` along `axes` with a scalar combine body."""
    inputs: list
    axes: tuple
    params: list  # accumulator params then incoming params, shape ()
    body: list  # combine statements on the params
    results: list  # combine results (shape ())
    outputs: list  # Val('red') per input
    scan: bool = False  # associative scan: outputs keep the input's shape (one prefix each)
    reverse: bool = False  # scan from the last element of the axis to the first


@dataclasses.dataclass
class Site:
    """One tl.load / tl.store in the source: where findings and traffic are reported."""
    kind: str  # "load" | "store"
    base: str
    elem: str
    shape: tuple
    where: str


@dataclasses.dataclass
class KernelIR:
    """One kernel specialisation: its statements, arguments and access sites."""
    name: str
    body: list
    arg_names: list
    pointers: dict  # arg name -> element dtype
    scalars: dict  # arg name -> dtype
    sites: list
    stored: set
    loaded: set
    atomic: set  # bases written by tl.atomic_add (accumulated, so coverage is not required)
    sources: list  # source texts of the kernel and everything inlined (for cache keys)
    mutated: frozenset  # arguments the kernel's decorator declares it updates in place


@dataclasses.dataclass(frozen=True)
class Ptr:
    """A pointer argument plus an element offset (a scalar or block `Val`, or 0)."""
    base: str
    elem: str
    offset: Any  # Val or 0


def walk(stmts: list) -> Iterator[Any]:
    """All statements, depth first, including loop/if/reduce bodies."""
    for s in stmts:
        yield s
        if isinstance(s, Loop):
            yield from walk(s.body)
        elif isinstance(s, While):
            yield from walk(s.test)
            yield from walk(s.body)
        elif isinstance(s, If):
            yield from walk(s.then)
            yield from walk(s.orelse)
        elif isinstance(s, Reduce):
            yield from walk(s.body)
