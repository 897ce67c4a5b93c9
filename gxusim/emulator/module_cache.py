"""The module cache: generated numba source -> the loaded module's `launch` function.

Modules are keyed by the hash of their source, kept in memory, and written to the cache
dir (`$GXUSIM_CACHE_DIR/emulator` or `~/.cache/gxusim/emulator`) and imported from there,
so numba's `cache=True` keeps their machine code next to them and a second process does
not pay the JIT. `runtime_hash` names the code generated modules depend on.
"""
from __future__ import annotations

import hashlib
import importlib.util
import pickle
import pickletools
import sys
import threading
from pathlib import Path
from typing import Any

from ..cache import cache_dir, write_atomic

RUNTIME_FILES = ("runtime.py", "tracking.py", "emitter.py", "module_frame.py", "planner.py",
                 "dtypes.py")


def runtime_hash() -> str:
    """Hash of the emulator files a generated module's behaviour depends on."""
    here = Path(__file__).parent
    h = hashlib.sha256()
    for name in RUNTIME_FILES:
        h.update((here / name).read_bytes())
    return h.hexdigest()[:12]


def _readable(numba_file: Path) -> bool:
    """Whether numba can read one of its cache files (an index: a version pickle, then the
    index pickle; data: one pickle). Numba itself raises on a truncated one. Data pickles
    name the generated module, so they are walked opcode by opcode, not loaded."""
    try:
        with open(numba_file, "rb") as f:
            if numba_file.suffix == ".nbi":
                pickle.load(f)
                pickle.loads(f.read())
            else:
                opcodes = list(pickletools.genops(f.read()))
                if not opcodes or opcodes[-1][0].name != "STOP":
                    return False
        return True
    except Exception:  # any damage: truncation, garbage, a half-written file
        return False


def _drop_damaged_machine_code(module_path: Path) -> None:
    """Delete a module's numba cache files if any is damaged: they are compiled again."""
    files = list((module_path.parent / "__pycache__").glob(f"{module_path.stem}.*.nb[ic]"))
    if not all(_readable(f) for f in files):
        for f in files:
            f.unlink(missing_ok=True)


_modules: dict[str, Any] = {}
_lock = threading.Lock()


def load(source: str) -> tuple[Any, Path]:
    """The `_program` of a generated module (memory cache, then disk, then write), and
    the module's file."""
    key = hashlib.sha256(source.encode()).hexdigest()[:24]
    with _lock:
        if key in _modules:
            return _modules[key]
        path = cache_dir("emulator") / f"k_{key}.py"
        if not path.exists() or path.read_text() != source:
            write_atomic(path, source)  # a truncated or stale file is replaced whole
        _drop_damaged_machine_code(path)
        _modules[key] = import_module(path)._program, path
        return _modules[key]


def import_module(path: Path) -> Any:
    """Import a generated module file, under the name numba's cache records for its code
    (the same in every process)."""
    name = f"gxusim_emulated_{path.stem.removeprefix('k_')}"
    module = sys.modules.get(name)
    if module is None:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return module
