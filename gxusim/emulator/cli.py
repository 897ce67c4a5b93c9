"""`gxusim emulate`: run one kernel from a file on random inputs and print its report."""
from __future__ import annotations

import argparse
import ast
import importlib.util
import os
import re
from typing import Optional, Sequence

import torch

from ..errors import InputError, Parser
from .api import EmulationError, run_launch

_ARG = re.compile(r"^(\w+)=(\w+)\[([\d, x]+)\]$")
_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
           "float64": torch.float64, "int32": torch.int32, "int64": torch.int64, "int8": torch.int8,
           "uint8": torch.uint8, "bool": torch.bool}


def _parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="gxusim emulate",
        description="Emulate a @triton.jit kernel on the CPU and check its tiling on the active spec.")
    p.add_argument("kernel", help="FILE.py::KERNEL_NAME")
    p.add_argument("--grid", required=True, type=_grid, help="programs per axis, e.g. 32 or 4,8")
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


def _grid(text: str) -> tuple[int, ...]:
    try:
        grid = tuple(int(g) for g in text.split(","))
    except ValueError:
        grid = ()
    if not 1 <= len(grid) <= 3 or min(grid) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not programs per axis: 1 to 3 positive "
                                         f"integers, e.g. 32 or 4,8")
    return grid


def _load_kernel(target: str):
    path, _, name = target.partition("::")
    if not name:
        raise InputError(f"kernel must be FILE.py::KERNEL_NAME, got {target!r}")
    if not os.path.isfile(path):
        raise InputError(f"kernel file {path!r} does not exist")
    spec = importlib.util.spec_from_file_location("_gxusim_cli_kernel", path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as error:  # the user's file: say which and why, not a traceback
        raise InputError(f"cannot import {path}: {type(error).__name__}: {error}") from error
    kernel = getattr(module, name, None)
    if kernel is None:
        kernels = sorted(n for n, v in vars(module).items() if hasattr(v, "fn") or
                         type(v).__name__ == "JITFunction")
        raise InputError(f"{path} has no kernel {name!r}; kernels there: {kernels or 'none'}")
    return kernel


def _value(flag: str, item: str):
    """--arg or --const NAME=...: a random tensor (--arg NAME=DTYPE[SHAPE]) or a literal."""
    name, equals, text = item.partition("=")
    match = _ARG.match(item)
    if flag == "--arg" and match and match.group(2) in _DTYPES:
        dtype = _DTYPES[match.group(2)]
        shape = [int(s) for s in re.split(r"[, x]+", match.group(3).strip()) if s]
        if dtype.is_floating_point:
            return torch.randn(shape).to(dtype)
        if dtype == torch.bool:
            return torch.rand(shape) < 0.5
        return torch.randint(0, 100, shape, dtype=dtype)
    try:
        if not (equals and name.isidentifier()):
            raise ValueError(item)
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        tensor = f" or NAME=DTYPE[SHAPE], DTYPE one of {sorted(_DTYPES)}" if flag == "--arg" else ""
        raise InputError(f"{flag} {item!r}: give NAME=VALUE (a Python number or literal)"
                         f"{tensor}") from None


def _check_arguments(kernel, name: str, args: list, constexprs: dict) -> None:
    """Every parameter of a @triton.jit kernel given: the constexprs by --const, the others
    by --arg in their order; an InputError naming the missing ones otherwise."""
    params = getattr(kernel, "params", None)
    if params is None:  # not a JITFunction: the emulator binds and checks
        return
    runtime = [p.name for p in params if not p.is_constexpr]
    if len(args) > len(runtime):
        raise InputError(f"kernel {name} takes {len(runtime)} --arg ({', '.join(runtime)}), "
                         f"got {len(args)}")
    given = {*runtime[:len(args)], *constexprs}
    missing = [p.name for p in params if p.name not in given and not p.has_default]
    if missing:
        constants = [p.name for p in params if p.is_constexpr]
        raise InputError(f"kernel {name}: no value for {missing}; give --arg for each of "
                         f"({', '.join(runtime)}) in that order and --const for each of "
                         f"({', '.join(constants)})")


def cli_main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of `gxusim emulate`; returns the exit status (1 on error findings). Bad
    input raises an `InputError`, which `gxusim.cli.main` prints as one line."""
    opts = _parser().parse_args(argv)
    torch.manual_seed(opts.seed)
    kernel = _load_kernel(opts.kernel)
    args = [_value("--arg", item) for item in opts.arg]
    constexprs = {item.partition("=")[0]: _value("--const", item) for item in opts.const}
    _check_arguments(kernel, opts.kernel.partition("::")[2], args, constexprs)
    try:
        report = run_launch(kernel, opts.grid, args, num_warps=opts.num_warps,
                            constexprs=constexprs, compiler_generated=opts.compiler_generated,
                            spec=opts.spec)
    except EmulationError as e:
        report = e.report
    print(report.table())
    return 0 if report.ok else 1
