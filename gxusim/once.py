"""`once`: run a registration function at most once per process, thread-safely."""
from __future__ import annotations

import functools
import threading
from typing import Callable


def once(fn: Callable[[], None]) -> Callable[[], None]:
    """Decorate a no-argument function so that only its first successful call runs.

    A call that raises leaves it unrun, so the error shows again on the next call.
    """
    lock = threading.Lock()
    done = False

    @functools.wraps(fn)
    def run_once() -> None:
        nonlocal done
        with lock:
            if not done:
                fn()
                done = True
    return run_once
