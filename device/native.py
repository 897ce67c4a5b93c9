"""The gxu device's C++ part (`native.cpp`), built on first use and loaded.

It is compiled with the C++ compiler that torch's own extensions and Inductor's CPU backend
use (`$CXX`, else `c++`), against the installed torch's headers, once per source, torch and
Python version: about 20 s the first time on a laptop, a file open after that. It lives in
`$GXUSIM_NATIVE_DIR`, else `~/.cache/gxusim/native`, and not in `$GXUSIM_CACHE_DIR`: it belongs
to the installation, and a fresh kernel cache (tests and benchmarks start cold ones) must not
rebuild the device. Builders in parallel processes (test workers, Ray workers) take a file
lock; the module lands with an atomic rename; a damaged one is rebuilt. A failed build
raises with the compiler's message: the device cannot run without it.

Internals used (checked on torch 2.11 and 2.13): `torch.utils.cpp_extension.include_paths`,
`library_paths`, `torch._C._GLIBCXX_USE_CXX11_ABI`.
"""
from __future__ import annotations

import fcntl
import hashlib
import importlib.machinery
import importlib.util
import os
import shlex
import subprocess
import sys
import sysconfig
from pathlib import Path
from types import ModuleType

import torch

SOURCE = Path(__file__).with_name("native.cpp")
NAME = "_gxusim_native"


def _key() -> str:
    digest = hashlib.sha256(SOURCE.read_bytes())
    # The torch installation, not the interpreter's path: `python` and `python3` are one.
    digest.update(f"{torch.__version__} {sys.version} {os.path.realpath(torch.__file__)}".encode())
    return digest.hexdigest()[:16]


def _command(output: Path) -> list[str]:
    from torch.utils import cpp_extension
    includes = [*cpp_extension.include_paths(), sysconfig.get_paths()["include"]]
    libraries = cpp_extension.library_paths()
    return [*shlex.split(os.environ.get("CXX", "c++")), "-O2", "-std=c++20", "-shared", "-fPIC",
            "-w", f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
            f"-DTORCH_EXTENSION_NAME={NAME}", "-DTORCH_API_INCLUDE_EXTENSION_H",
            *(f"-I{path}" for path in includes), str(SOURCE), "-o", str(output),
            *(f"-L{path}" for path in libraries), *(f"-Wl,-rpath,{path}" for path in libraries),
            "-lc10", "-ltorch", "-ltorch_cpu", "-ltorch_python"]


def _build(target: Path) -> None:
    partial = target.with_suffix(f".{os.getpid()}.tmp")
    print(f"gxusim: building the gxu device's C++ part (once per torch version) into "
          f"{target.parent}", file=sys.stderr)
    done = subprocess.run(_command(partial), capture_output=True, text=True)
    if done.returncode != 0:
        partial.unlink(missing_ok=True)
        raise RuntimeError(f"gxusim could not build {SOURCE.name} (the gxu device's C++ part) "
                           f"with `{shlex.join(_command(partial)[:1])}`; set CXX to a C++20 "
                           f"compiler. Compiler output:\n{done.stderr[-4000:]}")
    os.replace(partial, target)


def _folder() -> Path:
    root = os.environ.get("GXUSIM_NATIVE_DIR")
    path = Path(root) if root else Path.home() / ".cache" / "gxusim" / "native"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _import(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        NAME, path, loader=importlib.machinery.ExtensionFileLoader(NAME, str(path)))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load() -> ModuleType:
    """The compiled module, built first if this torch and Python have none yet (or only a
    damaged one)."""
    folder = _folder()
    target = folder / f"{NAME}_{_key()}.so"
    with open(folder / ".lock", "w") as lock:
        if not target.exists():
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not target.exists():
                _build(target)
        try:
            return _import(target)
        except ImportError:  # truncated or foreign: build it again, once
            fcntl.flock(lock, fcntl.LOCK_EX)
            _build(target)
            return _import(target)


native = load()
