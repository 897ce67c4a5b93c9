"""The fusion planner: splits the IR's statement lists into fused groups.

A group is a run of elementwise ops, loads, stores and loop-carried updates of one block
shape that the emitter writes as one scalar loop over the block's elements. A new group
starts where the shape changes or fusing would be wrong (a value read through a view in
the group that defines it, a load after a store to the same storage, or the reverse).
Values read outside their group, by a reduction or through a view are materialised in
arrays (`Planner.materialize`).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Iterator, Optional

from .ir import If, Loop, PhiSet, Reduce, Store, Val, While


@dataclasses.dataclass
class Group:
    """One fused loop: its block shape, its items, and what it defines, reads and accesses."""
    shape: tuple
    items: list = dataclasses.field(default_factory=list)
    pre: list = dataclasses.field(default_factory=list)
    defined: set = dataclasses.field(default_factory=set)  # Val ids computed here
    view_reads: set = dataclasses.field(default_factory=set)  # Val ids read through a view
    phis_set: set = dataclasses.field(default_factory=set)
    loads: set = dataclasses.field(default_factory=set)  # alias classes loaded
    stores: set = dataclasses.field(default_factory=set)


def item_shape(s: Any) -> tuple:
    """Block shape of a groupable statement."""
    if isinstance(s, Store):
        return s.shape
    if isinstance(s, PhiSet):
        return s.phi.shape
    return s.shape


def operands(s: Any) -> list:
    """The values a groupable statement reads."""
    if isinstance(s, Store):
        return [s.offset, s.value] + ([s.mask] if s.mask is not None else [])
    if isinstance(s, PhiSet):
        return [s.src]
    return [a for a in s.args if a is not None]


def base_reads(v: Val, via_view: bool = False) -> Iterator[tuple[Val, bool]]:
    """(Val, read through a view?) for the value behind each operand."""
    if v.op in ("view", "reshape"):
        yield from base_reads(v.args[0], True)
    else:
        yield v, via_view


class Planner:
    """Splits statement lists into fused groups and decides which values need arrays."""

    def __init__(self, alias: dict):
        self.alias = alias  # pointer arg -> alias class
        self.def_group: dict = {}
        self.materialize: set = set()

    def plan(self, stmts: list) -> list:
        units, cur = [], None
        for s in stmts:
            if isinstance(s, (Store, PhiSet)) or (isinstance(s, Val) and s.op in ("ew", "load")):
                shape = item_shape(s)
                if shape == () and cur is not None and cur.shape != () and \
                        isinstance(s, Val) and s.op == "ew":
                    cur.pre.append(s)  # a pure scalar op: hoist it out of the block loop
                    self.def_group[s.id] = None
                    continue
                if cur is None or cur.shape != shape or self.hazard(cur, s):
                    cur = Group(shape)
                    units.append(cur)
                self.add(cur, s)
            else:
                cur = None
                if isinstance(s, Loop):
                    s.body = self.plan(s.body)
                elif isinstance(s, While):
                    s.test, s.body = self.plan(s.test), self.plan(s.body)
                elif isinstance(s, If):
                    s.then, s.orelse = self.plan(s.then), self.plan(s.orelse)
                elif isinstance(s, Reduce):
                    s.body = self.plan(s.body)
                    for v in s.inputs:
                        for b, _ in base_reads(v):
                            self.need_array(b, None)
                units.append(s)
        return units

    def hazard(self, g: Group, s: Any) -> bool:
        for op in operands(s):
            for b, via_view in base_reads(op):
                if via_view and (b.id in g.defined or b.id in g.phis_set):
                    return True
        if isinstance(s, PhiSet) and s.phi.id in g.view_reads:
            return True
        if isinstance(s, Val) and s.op == "load" and self.alias[s.attrs["base"]] in g.stores:
            return True
        return isinstance(s, Store) and self.alias[s.base] in g.loads

    def add(self, g: Group, s: Any) -> None:
        g.items.append(s)
        for op in operands(s):
            for b, via_view in base_reads(op):
                if via_view:
                    g.view_reads.add(b.id)
                if b.id not in g.defined:
                    self.need_array(b, g)
        if isinstance(s, Val):
            g.defined.add(s.id)
            self.def_group[s.id] = g
            if s.op == "load":
                g.loads.add(self.alias[s.attrs["base"]])
        elif isinstance(s, Store):
            g.stores.add(self.alias[s.base])
        else:
            g.phis_set.add(s.phi.id)

    def need_array(self, v: Val, reader: Optional[Group]) -> None:
        if v.shape != () and v.op in ("ew", "load"):
            if reader is None or self.def_group.get(v.id) is not reader:
                self.materialize.add(v.id)

