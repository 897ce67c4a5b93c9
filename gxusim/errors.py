"""The one error type for bad input: a flag, file, environment variable or value a user gave.

Its message names the input and what is accepted, so the command line prints it as one
line (exit status 2, `gxusim.cli.main`); any other exception is gxusim's own bug and keeps
its traceback. A `ValueError`, so code catching those keeps working.
"""


class InputError(ValueError):
    """A user's input that gxusim does not accept; the message names it and what is."""
