"""The one error type for bad input: a flag, file, environment variable or value a user gave.

Its message names the input and what is accepted, so the command line prints it as one
line (exit status 2, `gxusim.cli.main`); any other exception is gxusim's own bug and keeps
its traceback. A `ValueError`, so code catching those keeps working.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import NoReturn


class InputError(ValueError):
    """A user's input that gxusim does not accept; the message names it and what is."""


class Parser(argparse.ArgumentParser):
    """A flag that does not parse is one line naming it (and where the usage is), not the
    usage text and then the error."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def exit_if_command(error: InputError) -> None:
    """Bad input met while the `gxusim` command (or `python -m gxusim`) imports the package
    (a GXUSIM_* setting) is one line and exit status 2, as all of the command's bad input
    is (`--debug` keeps the traceback); a program importing gxusim gets the exception."""
    command = Path(sys.argv[0]).name == "gxusim" or sys.orig_argv[1:3] == ["-m", "gxusim"]
    if command and "--debug" not in sys.argv:
        print(f"gxusim: {error}", file=sys.stderr)
        raise SystemExit(2)
