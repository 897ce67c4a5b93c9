"""The `GXUSIM_*` environment variables: one table of what each accepts, read in one place.

A bad value is an error naming the variable, the value and what it accepts, raised by
`import gxusim` (`check`) and again where the setting is used (a value changed since);
nothing falls back to a default silently. `GXUSIM_SPEC` (a preset name or TOML path) is
read by `gxusim.spec`, `GXUSIM_CACHE_DIR` (a folder) by `gxusim.cache`.
"""
from __future__ import annotations

import os

from .errors import InputError

CHOICES: dict[str, tuple[tuple[str, ...], str]] = {  # name -> (accepted values, default)
    "GXUSIM_TARGET": (("auto", "cuda", "emulator"), "auto"),
    "GXUSIM_CHECKS": (("raise", "warn", "off"), "raise"),
    "GXUSIM_TIMING": (("0", "1"), "0"),
    "GXUSIM_EMULATOR": (("numba", "interpreter"), "numba"),
    "GXUSIM_AUTOLOAD": (("0", "1"), "0"),  # read by gxusim_autoload, checked here
}
FLAGS = {"GXUSIM_LOG": ("decisions",)}  # comma-separated subsets
INTEGERS = {"GXUSIM_LAUNCH_HISTORY": 10_000,  # non-negative
            # each worker is an interpreter holding torch (a few hundred MB): at most 8
            "GXUSIM_COMPILE_WORKERS": min(8, max(0, (os.cpu_count() or 1) - 1))}


class SettingError(InputError):
    """A `GXUSIM_*` variable holds a value gxusim does not accept."""


def choice(name: str) -> str:
    accepted, default = CHOICES[name]
    value = os.environ.get(name, default).strip().lower() or default
    if value not in accepted:
        raise SettingError(f"{name}={os.environ[name]!r} is not accepted; use one of {accepted}")
    return value


def flags(name: str) -> frozenset[str]:
    given = {f.strip() for f in os.environ.get(name, "").split(",") if f.strip()}
    unknown = sorted(given - set(FLAGS[name]))
    if unknown:
        raise SettingError(f"{name}: unknown value(s) {unknown}; accepted: {FLAGS[name]}")
    return frozenset(given)


def integer(name: str) -> int:
    text = os.environ.get(name)
    if text is None:
        return INTEGERS[name]
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise SettingError(f"{name}={text!r} is not accepted; use a non-negative integer")
    return value


def check() -> None:
    """Read every variable of the tables above: a bad value fails here, naming it."""
    for name in CHOICES:
        choice(name)
    for name in FLAGS:
        flags(name)
    for name in INTEGERS:
        integer(name)
