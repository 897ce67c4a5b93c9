"""Parsing Python source safely while other threads parse too.

CPython 3.11 keeps the AST converter's recursion-depth counter in interpreter-wide state
(CPython gh-106905 and its follow-ups; fixed in later releases): when one thread's
`ast.parse` is interrupted mid-conversion (a garbage collection runs a finalizer, the GIL
passes on) and another thread parses meanwhile, the first fails with "SystemError: AST
constructor recursion depth mismatch". gxusim parses every generated kernel's source, at
compile time and, on the emulator, at a kernel's first launch, while other threads may be
compiling or launching. `parse` pauses collection for the conversion, so that it runs
without yielding the GIL: one of gxusim's parses is never the one interrupted.

It takes no lock: Inductor unpickles compiled kernels (and so plans them) on its compile
pool's reader thread while the compiling thread waits, holding Dynamo's compile lock.
"""
from __future__ import annotations

import ast
import gc


def parse(text: str) -> ast.Module:
    """`ast.parse(text)`, never interrupted by another thread's parse."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        return ast.parse(text)
    finally:
        if collecting:
            gc.enable()
