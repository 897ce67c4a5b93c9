"""On-disk caches (the emulator's compiled modules, autotune results): one place, one policy.

Root: `$GXUSIM_CACHE_DIR`, else `~/.cache/gxusim`; each user gets a subfolder. Writes are
atomic (a temporary file in the same folder, then `os.replace`), so a second process reading
while the first writes sees the old file or the new one, never half of one; a file that
does not parse is treated as absent and rewritten by the next write.
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from .environment import SettingError


def cache_dir(kind: str) -> Path:
    """The folder of one cache ("emulator", "autotune"), created if missing."""
    root = os.environ.get("GXUSIM_CACHE_DIR")
    path = (Path(root) if root else Path.home() / ".cache" / "gxusim") / kind
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as error:  # a file there, or no permission: say which variable moves it
        raise SettingError(f"GXUSIM_CACHE_DIR={root!r}: cannot create the cache folder {path} "
                           f"({error.strerror}); set it to a folder gxusim may write") from None
    return path


def write_atomic(path: Path, text: str) -> None:
    """Replace `path` with `text` in one step."""
    with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, suffix=".tmp",
                                     prefix=path.name + ".") as f:
        f.write(text)
    os.replace(f.name, path)


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object from `path`; {} when it is missing, unreadable or not an object."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def write_json(path: Path, data: dict[str, Any]) -> None:
    write_atomic(path, json.dumps(data, indent=1, sort_keys=True))
