"""Parsing Python source safely while other threads compile.

CPython 3.11 keeps the AST converter's recursion-depth counter in interpreter-wide state
(CPython gh-106905 and its follow-ups; fixed in later releases): when one thread's
`ast.parse` is interrupted mid-conversion (a garbage collection runs a finalizer, the GIL
passes on) and another thread parses meanwhile, the first fails with "SystemError: AST
constructor recursion depth mismatch". gxusim parses kernel sources at compile time and,
on the emulator, at a kernel's first launch, while another thread may be compiling (Dynamo,
Inductor and Triton parse source too). `parse` makes gxusim's parses neither victims nor
culprits: collection is paused for the conversion, so it runs without yielding the GIL, and
it runs under Dynamo's compile lock, so it never lands inside a compile's own parse.

Torch internal used: `torch._dynamo.convert_frame.compile_lock` (a re-entrant lock held
around each frame's compilation), checked against torch 2.11 and 2.13. Only read when Dynamo
is already imported: without it nothing is compiling.
"""
from __future__ import annotations

import ast
import gc
import sys
import threading

_own_lock = threading.RLock()  # where Dynamo is not loaded, or names its lock differently


def _compile_lock() -> threading.RLock:
    convert_frame = sys.modules.get("torch._dynamo.convert_frame")
    return getattr(convert_frame, "compile_lock", None) or _own_lock


def parse(text: str) -> ast.Module:
    """`ast.parse(text)`, atomic with respect to the other threads' AST conversions."""
    with _compile_lock():
        collecting = gc.isenabled()
        gc.disable()
        try:
            return ast.parse(text)
        finally:
            if collecting:
                gc.enable()
