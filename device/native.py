"""The gxu device's C++ part (`csrc/*.cpp`), built on first use and loaded.

Its files are compiled in parallel, with the C++ compiler that torch's own extensions and
Inductor's CPU backend use (`$CXX`, else `c++`), against the installed torch's headers, and
linked into one module, once per source, torch and Python version: about 30 s the first
time on a laptop, a file open after that. It lives in
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

SOURCES = sorted(Path(__file__).with_name("csrc").glob("*.cpp"))
HEADERS = sorted(Path(__file__).with_name("csrc").glob("*.h"))
NAME = "_gxusim_native"


def _key() -> str:
    digest = hashlib.sha256()
    for path in (*SOURCES, *HEADERS):
        digest.update(path.name.encode() + path.read_bytes())
    # The torch installation, not the interpreter's path: `python` and `python3` are one.
    digest.update(f"{torch.__version__} {sys.version} {os.path.realpath(torch.__file__)}".encode())
    return digest.hexdigest()[:16]


def _compiler() -> list[str]:
    return shlex.split(os.environ.get("CXX", "c++"))


def _compile_command(source: Path, output: Path) -> list[str]:
    from torch.utils import cpp_extension
    includes = [*cpp_extension.include_paths(), sysconfig.get_paths()["include"]]
    return [*_compiler(), "-O2", "-std=c++20", "-fPIC", "-w", "-c",
            f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
            f"-DTORCH_EXTENSION_NAME={NAME}", "-DTORCH_API_INCLUDE_EXTENSION_H",
            *(f"-I{path}" for path in includes), str(source), "-o", str(output)]


def _link_command(objects: list[Path], output: Path) -> list[str]:
    from torch.utils import cpp_extension
    libraries = cpp_extension.library_paths()
    return [*_compiler(), "-shared", *map(str, objects), "-o", str(output),
            *(f"-L{path}" for path in libraries), *(f"-Wl,-rpath,{path}" for path in libraries),
            "-lc10", "-ltorch", "-ltorch_cpu", "-ltorch_python"]


def _run(commands: list[list[str]]) -> None:
    """Run the commands at once; the first failure raises with the compiler's message."""
    running = [subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                text=True) for command in commands]
    failures = [(command, process.communicate()[1]) for command, process in zip(commands, running)
                if process.wait() != 0]
    if failures:
        command, stderr = failures[0]
        raise RuntimeError(f"gxusim could not build the gxu device's C++ part with "
                           f"`{command[0]}`; set CXX to a C++20 compiler. Compiler output:\n"
                           f"{stderr[-4000:]}")


def _build(target: Path) -> None:
    partial = target.with_suffix(f".{os.getpid()}.tmp")
    objects = [target.with_suffix(f".{source.stem}.{os.getpid()}.o") for source in SOURCES]
    print(f"gxusim: building the gxu device's C++ part (once per torch version) into "
          f"{target.parent}", file=sys.stderr)
    try:
        _run([_compile_command(source, obj) for source, obj in zip(SOURCES, objects)])
        _run([_link_command(objects, partial)])
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)
        for obj in objects:
            obj.unlink(missing_ok=True)


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
