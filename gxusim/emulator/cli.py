"""`gxusim emulate`: run one kernel from a file on random inputs and print its report."""
from __future__ import annotations

import argparse
import ast
import importlib.util
import os
import re
import sys
from typing import Optional, Sequence

import torch

from .api import EmulationError, run_launch

_ARG = re.compile(r"^(\w+)=(\w+)\[([\d, x]+)\]$")
_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
           "float64": torch.float64, "int32": torch.int32, "int64": torch.int64, "int8": torch.int8,
           "uint8": torch.uint8, "bool": torch.bool}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="gxusim emulate",
        description="Emulate a @triton.jit kernel on the CPU and check its tiling on the active spec.")
    p.add_argument("kernel", help="FILE.py::KERNEL_NAME")
    p.add_argument("--grid", required=True, help="programs per axis, e.g. 32 or 4,8")
    p.add_argument("--num-warps", type=int, default=4)
    p.add_argument("--arg", action="append", default=[],
                   help="NAME=DTYPE[N] (random tensor, e.g. x=float32[1000000] or w=float32[64,128]) "
                        "or NAME=VALUE (scalar); in the kernel's argument order")
    p.add_argument("--const", action="append", default=[], help="NAME=VALUE constexpr")
    p.add_argument("--spec", default=None, help="spec preset or TOML file (default: active spec)")
    p.add_argument("--compiler-generated", action="store_true",
                   help="treat out_ptr*/in_out_ptr* as outputs that must be fully written")
    p.add_argument("--seed", type=int, default=0)
    return p


def _load_kernel(target: str):
    path, _, name = target.partition("::")
    if not name:
        raise SystemExit(f"gxusim emulate: kernel must be FILE.py::KERNEL_NAME, got {target!r}")
    if not os.path.isfile(path):
        raise SystemExit(f"gxusim emulate: kernel file {path!r} does not exist")
    spec = importlib.util.spec_from_file_location("_gxusim_cli_kernel", path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as error:  # the user's file: say which and why, not a traceback
        raise SystemExit(f"gxusim emulate: cannot import {path}: "
                         f"{type(error).__name__}: {error}") from None
    kernel = getattr(module, name, None)
    if kernel is None:
        kernels = sorted(n for n, v in vars(module).items() if hasattr(v, "fn") or
                         type(v).__name__ == "JITFunction")
        raise SystemExit(f"gxusim emulate: {path} has no kernel {name!r}; kernels there: "
                         f"{kernels or 'none'}")
    return kernel


def _value(text: str, name: str):
    match = _ARG.match(f"{name}={text}")
    if match:
        dtype = _DTYPES[match.group(2)]
        shape = [int(s) for s in re.split(r"[, x]+", match.group(3).strip()) if s]
        if dtype.is_floating_point:
            return torch.randn(shape).to(dtype)
        if dtype == torch.bool:
            return torch.rand(shape) < 0.5
        return torch.randint(0, 100, shape, dtype=dtype)
    return ast.literal_eval(text)


def cli_main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of `gxusim emulate`; returns the exit status (1 on error findings)."""
    opts = _parser().parse_args(argv)
    torch.manual_seed(opts.seed)
    kernel = _load_kernel(opts.kernel)
    args = []
    for item in opts.arg:
        name, _, text = item.partition("=")
        args.append(_value(text, name))
    constexprs = {}
    for item in opts.const:
        name, _, text = item.partition("=")
        constexprs[name] = ast.literal_eval(text)
    grid = tuple(int(g) for g in opts.grid.split(","))
    try:
        report = run_launch(kernel, grid, args, num_warps=opts.num_warps, constexprs=constexprs,
                            compiler_generated=opts.compiler_generated, spec=opts.spec)
    except EmulationError as e:
        report = e.report
    print(report.table())
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(cli_main())
