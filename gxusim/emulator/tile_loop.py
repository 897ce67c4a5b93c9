"""The tile-loop pass: which loops iterate over a program's tiles.

A program's tiles are the iterations of its outermost loop (`for` or `while`) that stores
and either mixes `program_id` with its variable or is not one of Inductor's reduction
loops (`roffset`, `r0_offset`, ...). The emitter counts those iterations per program
(`tiles_per_program`).
"""
from __future__ import annotations

import re

from .ir import If, Loop, Store, Val, While, walk


def mixes_pid(body: list, var_id: int) -> bool:
    """A loop is a tile loop if some scalar in its body combines program_id with its variable."""
    for stmt in walk(body):
        if isinstance(stmt, Val) and stmt.shape == () and "pid" in stmt.deps and var_id in stmt.deps:
            return True
    return False


_REDUCTION_LOOP = re.compile(r"^r\d*_?offset$")


def mark_tile_loop(body: list) -> None:
    """Keep `counts_tiles` only on the outermost tile loops: loops containing a store that
    mix program_id with their variable, or that are not Inductor reduction loops
    (`roffset`, `r0_offset`, ...)."""
    for s in body:
        if isinstance(s, (Loop, While)):
            has_store = any(isinstance(x, Store) for x in walk(s.body))
            reduction = isinstance(s, Loop) and _REDUCTION_LOOP.match(s.name)
            if has_store and (s.counts_tiles or not reduction):
                s.counts_tiles = True
                for inner in walk(s.body):
                    if isinstance(inner, (Loop, While)):
                        inner.counts_tiles = False
                continue
            s.counts_tiles = False
            mark_tile_loop(s.body)
        elif isinstance(s, If):
            mark_tile_loop(s.then)
            mark_tile_loop(s.orelse)

