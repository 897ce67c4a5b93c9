"""Test session setup: one execution target per pytest process, and the `cuda` marker.

The gxusim target is fixed by the first gxu allocation, so it cannot change between tests
of one process. Design: the session's target is `GXUSIM_TARGET` if set, else "auto" (cuda
with a GPU, the emulator without), and it is resolved here, before any test allocates.
So `python -m pytest tests` runs everything on a GPU machine (cuda target) and everything
but the `cuda` tests elsewhere; tests that need the other target start a subprocess with
`GXUSIM_TARGET` set. `cuda`-marked tests are skipped when torch sees no GPU, or when the
session was forced onto the emulator (`GXUSIM_TARGET=emulator`).
"""
from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("GXUSIM_TARGET", "auto")

import gxusim  # noqa: E402  (after the target variable is settled)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not torch.cuda.is_available():
        reason = "needs a CUDA GPU; torch sees none"
    elif gxusim.current_target() != "cuda":
        reason = f"session target is {gxusim.current_target()!r} (GXUSIM_TARGET); cuda tests " \
                 f"need the cuda target"
    else:
        return
    skip = pytest.mark.skip(reason=reason)
    for item in items:
        if item.get_closest_marker("cuda") is not None:
            item.add_marker(skip)
