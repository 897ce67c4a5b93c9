"""The module cache: generated numba source -> the loaded module's `launch` function.

Modules are keyed by the hash of their source, kept in memory, and written to the cache
dir (`$GXUSIM_CACHE_DIR/emulator` or `~/.cache/gxusim/emulator`) and imported from there,
so numba's `cache=True` keeps their machine code next to them and a second process does
not pay the JIT. `runtime_hash` names the code generated modules depend on.
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import threading
from pathlib import Path
from typing import Any

RUNTIME_FILES = ("runtime.py", "emitter.py", "planner.py", "dtypes.py")


def runtime_hash() -> str:
    """Hash of the emulator files a generated module's behaviour depends on."""
    here = Path(__file__).parent
    h = hashlib.sha256()
    for name in RUNTIME_FILES:
        h.update((here / name).read_bytes())
    return h.hexdigest()[:12]


def cache_dir() -> Path:
    root = os.environ.get("GXUSIM_CACHE_DIR")
    path = Path(root) / "emulator" if root else Path.home() / ".cache" / "gxusim" / "emulator"
    path.mkdir(parents=True, exist_ok=True)
    return path


_modules: dict[str, Any] = {}
_lock = threading.Lock()


def load(source: str) -> Any:
    """The compiled `launch` of a generated module (memory cache, then disk, then write)."""
    key = hashlib.sha256(source.encode()).hexdigest()[:24]
    with _lock:
        if key in _modules:
            return _modules[key]
        path = cache_dir() / f"k_{key}.py"
        if not path.exists() or path.read_text() != source:
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(source)
            os.replace(tmp, path)  # atomic: concurrent processes see a whole file
        name = f"gxusim_emulated_{key}"
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        _modules[key] = module.launch
        return module.launch
