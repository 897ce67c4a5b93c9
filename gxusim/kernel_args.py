"""Inductor's naming of kernel arguments, the one rule every stage reads it by.

Generated kernels name their pointers `in_ptrN` (read), `out_ptrN` (written) and
`in_out_ptrN` (read and written), and their sizes `xnumel`, `ynumel`, `r0_numel`.
"""
from __future__ import annotations

import re

_OUTPUT = re.compile(r"^(in_)?out_ptr\d*$")
NUMEL_ARGS = ("xnumel", "ynumel", "r0_numel")


def is_output(name: str) -> bool:
    """Whether a generated kernel writes the argument of this name."""
    return _OUTPUT.match(name) is not None


def is_in_place(name: str) -> bool:
    """Whether the argument is a buffer Inductor reuses in place (`in_out_ptrN`): the
    kernel reads it and overwrites it with its result."""
    return name.startswith("in_out_ptr")
