"""Emulator API: `emulate` / `run_launch` run one kernel launch and return an `EmulationReport`.

A launch is a pipeline: bind the arguments, specialise the kernel (builder -> emitter,
cached), allocate the record arrays, run every program, and analyse the records into
findings, occupancy and a time estimate. Error-level findings raise `EmulationError`
unless `GXUSIM_CHECKS` is `warn` (warn instead) or `off` (no recording, no raising). A
launch that does not run (a construct the emulator cannot run, or over the spec's limits
with `run_over_limits=False`) raises in every mode: its outputs hold nothing.
"""
from __future__ import annotations

import math
import warnings
from typing import Any, Callable, Optional, Sequence, Union

from .. import environment
from ..findings import Finding, limit_findings, normalize_grid
from ..spec import HardwareSpec, current_spec, load_spec
from .analysis import analyse
from .arguments import bind_arguments, jit_function, sort_arguments
from . import compile_pool
from .execution import allocate_records, program_signature, run_programs, thread_values
from .ir import Unsupported
from .report import EmulationError, EmulationReport
from .source import kernel_source
from .specialisation import specialise

CHECK_MODES = environment.CHOICES["GXUSIM_CHECKS"][0]

__all__ = ["CHECK_MODES", "EmulationError", "EmulationReport", "check_mode", "compile_ahead",
           "emulate", "run_launch"]


def check_mode() -> str:
    """`GXUSIM_CHECKS`: raise (default), warn or off."""
    return environment.choice("GXUSIM_CHECKS")


def run_launch(kernel: Any, grid: Union[Sequence[int], Callable], args: Sequence,
               num_warps: int = 4, constexprs: Optional[dict] = None,
               compiler_generated: bool = False, arg_names: Optional[list] = None,
               spec: Union[HardwareSpec, str, None] = None, n_regs: Optional[int] = None,
               run_over_limits: bool = True) -> EmulationReport:
    """Emulate one launch. Called by `emulate` and by the compiler's launcher for every
    gxu kernel on the emulator target (`kernel`: JITFunction or autotuner's `.fn`)."""
    spec = current_spec() if spec is None else load_spec(spec)
    mode = check_mode()
    jit = jit_function(kernel)
    bound = bind_arguments(jit, args, dict(constexprs or {}), arg_names)
    if callable(grid):
        grid = grid(dict(bound))
    grid3 = normalize_grid(grid)
    report = _new_report(jit, grid, grid3, num_warps, spec)
    if report.findings and not run_over_limits:
        raise _not_run(report)
    programs = math.prod(grid3)
    try:
        arguments = sort_arguments(jit, bound)
        compiled = specialise(jit, arguments, mode != "off", programs)
    except Unsupported as e:
        report.findings.append(Finding("unsupported", "error", str(e), kernel=report.kernel))
        raise _not_run(report) from e
    records = allocate_records(compiled, arguments, programs)
    report.jit_s, report.run_s = run_programs(compiled, tuple(grid3), arguments, records)
    analyse(report, compiled, arguments, records, spec, compiler_generated, n_regs)
    return _finish(report, mode)


def compile_ahead(kernel: Any, grid: Sequence[int], args: Sequence, num_warps: int = 4,
                  constexprs: Optional[dict] = None, arg_names: Optional[list] = None,
                  spec: Union[HardwareSpec, str, None] = None) -> None:
    """Specialise a launch as `run_launch` would and have a worker process compile its
    module for these arguments (`compile_pool`); nothing runs. A launch the emulator
    cannot run is left for `run_launch` to report."""
    if compile_pool.workers() == 0:
        return
    jit = jit_function(kernel)
    bound = bind_arguments(jit, args, dict(constexprs or {}), arg_names)
    programs = math.prod(normalize_grid(grid))
    try:
        arguments = sort_arguments(jit, bound)
        compiled = specialise(jit, arguments, check_mode() != "off", programs)
    except Unsupported:
        return
    records = allocate_records(compiled, arguments, programs)
    values = thread_values(compiled, arguments, records)[0]
    compile_pool.submit(compiled.module_path, program_signature(values))


def _new_report(jit: Any, grid: Any, grid3: Sequence[int], num_warps: int,
                spec: HardwareSpec) -> EmulationReport:
    """A report holding the launch-limit findings (grid and warps against the spec)."""
    name = kernel_source(jit)[2]
    findings = limit_findings(spec, grid, num_warps, name)
    return EmulationReport(name, tuple(grid3), num_warps, True, findings, None, [], None)


def _not_run(report: EmulationReport) -> EmulationError:
    """The error for a launch that did not run, whatever `GXUSIM_CHECKS` says: that setting
    chooses what the tiling checks' findings do, and a launch skipped under `warn` or `off`
    would hand back outputs nothing wrote."""
    report.ok = False
    return EmulationError(report)


def _finish(report: EmulationReport, mode: str) -> EmulationReport:
    report.ok = not report.errors
    if not report.ok and mode == "raise":
        raise EmulationError(report)
    if not report.ok and mode == "warn":
        warnings.warn(str(EmulationError(report)), RuntimeWarning, stacklevel=3)
    return report


def emulate(kernel: Any, grid: Union[Sequence[int], Callable], *args: Any, num_warps: int = 4,
            spec: Union[HardwareSpec, str, None] = None, **constexprs: Any) -> EmulationReport:
    """Run a @triton.jit kernel on the CPU emulator; outputs land in the given tensors."""
    return run_launch(kernel, grid, args, num_warps=num_warps, constexprs=constexprs, spec=spec)
