"""The reference the emulator is compared with: the real GPU where there is one, else
Triton's interpreter.

On a GPU machine the same kernels are launched by Triton on CUDA (there, Triton 3.6 with
numpy 2.5, the interpreter crashes on capped kernels). Without a GPU they run in a
subprocess with TRITON_INTERPRET=1: interpreter mode is chosen when `triton.jit`
decorates, so it needs a fresh process (in-process `InterpretedFunction` cannot call the
standard library's jit functions). Works on triton 3.6 and 3.9.
"""
import importlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
import triton
import triton.language as tl

TESTS_DIR = Path(__file__).resolve().parent.parent


def run_reference(cases: list) -> list:
    """cases: dicts of module, kernel, grid, args, constexprs; returns each case's tensor args
    (on the CPU) after the launch."""
    if torch.cuda.is_available():
        return _run_on_gpu(cases)
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = Path(tmp) / "cases.pt", Path(tmp) / "out.pt"
        torch.save(cases, src)
        env = {**os.environ, "TRITON_INTERPRET": "1"}
        subprocess.run([sys.executable, __file__, str(src), str(dst)], env=env, check=True)
        return torch.load(dst)


@triton.jit
def _tanh(x):
    e = tl.exp(-2.0 * tl.abs(x))
    t = (1.0 - e) / (1.0 + e)
    return tl.where(x < 0, -t, t)


@triton.jit
def _rsqrt(x):
    return 1.0 / tl.sqrt(x)


def _patch_libdevice() -> None:
    """Triton's CPU interpreter has no libdevice: stand in tl.math formulations."""
    from triton.language.extra import libdevice
    libdevice.tanh = _tanh
    libdevice.rsqrt = _rsqrt


def _launch_all(cases: list, device: str) -> list:
    results = []
    for case in cases:
        kernel = getattr(importlib.import_module(f"triton_kernels.{case['module']}"), case["kernel"])
        args = [a.to(device) if isinstance(a, torch.Tensor) else a for a in case["args"]]
        kernel[tuple(case["grid"])](*args, **case["constexprs"])
        results.append([a.cpu() for a in args if isinstance(a, torch.Tensor)])
    return results


def _run_on_gpu(cases: list) -> list:
    if str(TESTS_DIR) not in sys.path:
        sys.path.insert(0, str(TESTS_DIR))
    return _launch_all(cases, "cuda")


def _main(src: str, dst: str) -> None:
    sys.path.insert(0, str(TESTS_DIR))
    _patch_libdevice()
    torch.save(_launch_all(torch.load(src), "cpu"), dst)


if __name__ == "__main__":
    _main(sys.argv[1], sys.argv[2])
