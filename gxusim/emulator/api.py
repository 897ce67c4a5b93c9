"""Emulator API: `emulate` / `run_launch` run one kernel launch and return an `EmulationReport`.

Binds the launch arguments, specialises the kernel (front end -> back end, cached),
runs it over every program with access recording, and turns the records into findings,
occupancy and a time estimate. Error-level findings raise `EmulationError` unless
`GXUSIM_CHECKS` is `warn` (warn instead) or `off` (no recording, no raising).
"""
from __future__ import annotations

import dataclasses
import inspect
import math
import os
import threading
import time
import warnings
from typing import Any, Callable, Optional, Sequence, Union

import numba
import numpy as np
import torch
from triton.runtime.jit import JITFunction

from ..findings import Finding, limit_findings, normalize_grid
from ..spec import HardwareSpec, current_spec, load_spec
from . import backend, checks, occupancy
from . import dtypes as D
from .frontend import KernelIR, Unsupported, build_ir, kernel_source, source_hash

CHECK_MODES = ("raise", "warn", "off")


class EmulationError(RuntimeError):
    """An emulated launch produced error-level findings; `.report` has all of them."""

    def __init__(self, report: "EmulationReport"):
        self.report = report
        errors = [str(f) for f in report.findings if f.severity == "error"]
        super().__init__(f"kernel {report.kernel}: " + "; ".join(errors))


@dataclasses.dataclass
class EmulationReport:
    kernel: str
    grid: tuple
    num_warps: int
    ok: bool
    findings: list
    occupancy: Optional[occupancy.Occupancy]
    tiles_per_program: list  # iterations of the outermost tile loop that stores, per program
    predicted_s: Optional[float]
    traffic_bytes: float = 0.0  # DRAM sector bytes the launch moves (layout model)
    coalescing: dict = dataclasses.field(default_factory=dict)  # site "kind base @line" -> efficiency
    jit_s: float = 0.0  # front end + numba compile (0 when cached)
    run_s: float = 0.0

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "error"]

    def table(self) -> str:
        rows = [("kernel", self.kernel), ("grid", str(self.grid)), ("num_warps", str(self.num_warps)),
                ("ok", str(self.ok))]
        if self.occupancy is not None:
            rows.append(("occupancy", str(self.occupancy)))
        if self.tiles_per_program:
            t = self.tiles_per_program
            rows.append(("tiles/program", f"min {min(t)}, max {max(t)}, mean {sum(t) / len(t):.2f}"))
        if self.predicted_s is not None:
            rows.append(("predicted", f"{self.predicted_s * 1e6:.2f} us ({self.traffic_bytes / 1e6:.3f} MB)"))
        for site, eff in self.coalescing.items():
            rows.append(("coalescing", f"{site}: {eff:.0%}"))
        rows.append(("emulated in", f"{self.run_s * 1e3:.1f} ms (+{self.jit_s:.2f} s compile)"))
        width = max(len(k) for k, _ in rows)
        lines = [f"{k:<{width}}  {v}" for k, v in rows]
        lines += [f"  {f}" for f in self.findings] or ["  no findings"]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()


def check_mode() -> str:
    mode = os.environ.get("GXUSIM_CHECKS", "raise").lower()
    if mode not in CHECK_MODES:
        raise ValueError(f"GXUSIM_CHECKS={mode!r}; use one of {CHECK_MODES}")
    return mode


def _jit_function(kernel: Any) -> Any:
    while not isinstance(kernel, JITFunction) and hasattr(kernel, "fn"):
        kernel = kernel.fn
    return kernel


def _bind(kernel: Any, args: Sequence, constexprs: dict, arg_names: Optional[list]) -> dict:
    src, pyfn, _ = kernel_source(kernel)
    sig = inspect.signature(pyfn)
    names = list(arg_names or sig.parameters)
    bound: dict = {}
    for name, value in zip(names, args):
        bound[name] = value
    for name, value in constexprs.items():
        if name not in backend_options():
            bound[name] = value
    for name, param in sig.parameters.items():
        if name not in bound and param.default is not inspect.Parameter.empty:
            bound[name] = param.default
    missing = [n for n in sig.parameters if n not in bound]
    if missing:
        raise TypeError(f"kernel {pyfn.__name__}: missing argument(s) {missing}")
    return {n: bound[n] for n in sig.parameters}


def backend_options() -> set:
    from .frontend import _LAUNCH_OPTIONS
    return _LAUNCH_OPTIONS


def _constexpr_names(kernel: Any) -> set:
    if isinstance(kernel, JITFunction):
        return {p.name for p in kernel.params if p.is_constexpr}
    return set()


def _cpu_tensor(t: torch.Tensor) -> torch.Tensor:
    if t.device.type == "cpu":
        return t
    if t.device.type == "gxu":
        from ..device import backing_alias
        alias = backing_alias(t)
        if alias.device.type == "cpu":
            return alias
    raise ValueError(f"the emulator runs on host memory; got a tensor on {t.device} "
                     f"(use CPU tensors or gxu tensors on the emulator target)")


def _storage_array(t: torch.Tensor, dt: str) -> np.ndarray:
    n = t.untyped_storage().nbytes() // t.element_size()
    flat = torch.empty(0, dtype=t.dtype).set_(t.untyped_storage(), 0, (n,), (1,))
    if dt in ("fp16", "bf16"):
        return flat.view(torch.int16).numpy().view(np.uint16)
    return flat.numpy()


@dataclasses.dataclass
class _Spec:
    """A compiled specialisation and what the launch needs to call it."""
    kir: KernelIR
    emitter: backend.Emitter
    launch: Callable
    jit_s: float


_specs: dict = {}
_specs_lock = threading.Lock()


def _specialise(kernel: Any, spec_args: dict, layout: backend.Layout, alias: dict) -> _Spec:
    src = kernel_source(kernel)[0]
    key = (source_hash([src]), id(kernel), tuple(sorted((k, repr(v)) for k, v in spec_args.items())),
           layout, tuple(sorted(alias.items())))
    with _specs_lock:
        hit = _specs.get(key)
    if hit is not None:
        return dataclasses.replace(hit, jit_s=0.0)
    start = time.perf_counter()
    kir = build_ir(kernel, spec_args)
    emitter = backend.generate(kir, layout, alias)
    launch = backend.load(emitter.source)
    made = _Spec(kir, emitter, launch, 0.0)
    made.jit_s = time.perf_counter() - start  # compile happens on first call; added there
    with _specs_lock:
        _specs[key] = made
    return made


def _param_values(params: list, buffers: dict, scalars: dict, tracking: dict, outputs: dict) -> list:
    values = []
    for kind, name in params:
        if kind == "buf":
            values.append(buffers[name].array)
        elif kind == "base":
            values.append(np.int64(buffers[name].base))
        elif kind == "size":
            values.append(np.int64(buffers[name].array.shape[0]))
        elif kind == "scalar":
            values.append(scalars[name])
        elif kind in ("w1", "w2", "r1", "r2"):
            values.append(getattr(tracking[buffers[name].alias], kind))
        else:
            values.append(outputs[kind])
    return values


def _program_dtype(programs: int) -> str:
    return "int8" if programs < 127 else "int16" if programs < 32767 else "int32"


def run_launch(kernel: Any, grid: Union[Sequence[int], Callable], args: Sequence,
               num_warps: int = 4, constexprs: Optional[dict] = None,
               compiler_generated: bool = False, arg_names: Optional[list] = None,
               spec: Union[HardwareSpec, str, None] = None, n_regs: Optional[int] = None,
               run_over_limits: bool = True) -> EmulationReport:
    """Emulate one launch. Called by `emulate` and by the compiler's launcher for every
    gxu kernel on the emulator target (`kernel`: JITFunction or autotuner's `.fn`)."""
    spec = current_spec() if spec is None else load_spec(spec)
    mode = check_mode()
    jit = _jit_function(kernel)
    name = kernel_source(jit)[2]
    bound = _bind(jit, args, dict(constexprs or {}), arg_names)
    if callable(grid):
        grid = grid(dict(bound))
    grid3 = normalize_grid(grid)
    programs = math.prod(grid3)
    findings = limit_findings(spec, grid, num_warps, name)
    report = EmulationReport(name, tuple(grid3), num_warps, True, findings, None, [], None)
    if findings and not run_over_limits:
        return _finish(report, mode)

    const_names = _constexpr_names(jit)
    spec_args, buffers, scalars = {}, {}, {}
    alias_keys: dict = {}
    for arg, value in bound.items():
        if isinstance(value, torch.Tensor):
            t = _cpu_tensor(value)
            dt = D.TORCH_TO_TL.get(t.dtype)
            if dt is None:
                return _unsupported(report, f"tensor argument {arg} of dtype {t.dtype}", mode)
            key = (t.untyped_storage().data_ptr(), dt)
            alias = alias_keys.setdefault(key, len(alias_keys))
            buffers[arg] = checks.Buffer(arg, t, _storage_array(t, dt), t.storage_offset(), alias)
            spec_args[arg] = ("ptr", dt)
        elif arg in const_names or value is None or isinstance(value, (str, type)) or \
                not isinstance(value, (bool, int, float, np.number)):
            spec_args[arg] = ("const", value)
        else:
            dt = D.python_scalar_dtype(value)
            spec_args[arg] = ("scalar", dt)
            scalars[arg] = D.COMPUTE_NP[dt](value)
    checking = mode != "off"
    try:
        kir0 = _cached_ir_facts(jit, spec_args)
        stored_classes = {buffers[n].alias for n in kir0.stored}
        layout = backend.Layout(
            frozenset(n for n in kir0.loaded if buffers[n].alias in stored_classes) if checking
            else frozenset(), checking, _program_dtype(programs))
        compiled = _specialise(jit, spec_args, layout, {n: b.alias for n, b in buffers.items()})
    except Unsupported as e:
        return _unsupported(report, str(e), mode)
    kir, emitter = compiled.kir, compiled.emitter

    # Atomic adds from concurrent threads would lose updates: such launches run serially.
    threads = 1 if kir.atomic else max(1, min(numba.get_num_threads(), programs))
    pdt = D.COMPUTE_NP[layout.program_dtype]
    tracking: dict = {}
    if checking:
        for n in kir.stored:
            alias = buffers[n].alias
            if alias not in tracking:
                size = buffers[n].array.shape[0]
                reads = any(buffers[m].alias == alias for m in layout.track_reads)
                shape_r = (threads, size) if reads else (threads, 0)
                tracking[alias] = checks.Tracking(np.full((threads, size), -1, pdt),
                                                  np.full((threads, size), -1, pdt),
                                                  np.full(shape_r, -1, pdt), np.full(shape_r, -1, pdt))
    nsites = len(kir.sites)
    max_block = max((math.prod(s.shape) for s in kir.sites), default=1)
    outputs = {
        "tiles": np.zeros(programs, np.int64), "oob": np.zeros((programs, max(1, nsites), 2), np.int64),
        "sites": np.zeros((programs, max(1, nsites)), np.int64),
        "samp_off": np.zeros((max(1, nsites), max_block), np.int64),
        "samp_mask": np.zeros((max(1, nsites), max_block), np.bool_),
        "samp_flag": np.zeros(max(1, nsites), np.uint8),
    }
    values = _param_values(emitter.params(), buffers, scalars, tracking, outputs)
    start = time.perf_counter()
    first_call = compiled.launch.signatures == []
    compiled.launch(np.int64(grid3[0]), np.int64(grid3[1]), np.int64(grid3[2]), np.int64(threads),
                    *values)
    elapsed = time.perf_counter() - start
    if first_call:
        report.jit_s = compiled.jit_s + elapsed
        start = time.perf_counter()
        report.run_s = 0.0
    else:
        report.jit_s = compiled.jit_s
        report.run_s = elapsed

    report.tiles_per_program = [int(t) for t in outputs["tiles"]]
    findings = report.findings
    findings += checks.out_of_bounds(name, outputs["oob"], kir.sites, buffers)
    if checking:
        for rec in tracking.values():
            rec.merge()
        stored = [n for n in kir.arg_names if n in kir.stored]
        findings += checks.conflicts_and_races(name, tracking, buffers, stored)
        findings += checks.uncovered(name, tracking, buffers, stored, compiler_generated,
                                     [n for n in kir.arg_names if n in kir.pointers],
                                     frozenset(kir.atomic))
        imbalance = checks.load_imbalance(name, report.tiles_per_program)
        if imbalance is not None:
            findings.append(imbalance)
    _performance(report, kir, emitter, outputs, buffers, spec, num_warps, programs, n_regs)
    return _finish(report, mode)


def _cached_ir_facts(jit: Any, spec_args: dict) -> KernelIR:
    """IR of the specialisation (which args are stored/loaded decides the layout)."""
    key = (id(jit), source_hash([kernel_source(jit)[0]]),
           tuple(sorted((k, repr(v)) for k, v in spec_args.items())))
    with _specs_lock:
        hit = _specs.get(("ir",) + key)
    if hit is None:
        hit = build_ir(jit, spec_args)
        with _specs_lock:
            _specs[("ir",) + key] = hit
    return hit


def _performance(report: EmulationReport, kir: KernelIR, emitter: backend.Emitter, outputs: dict,
                 buffers: dict, spec: HardwareSpec, num_warps: int, programs: int,
                 n_regs: Optional[int]) -> None:
    traffic = 0.0
    counts = outputs["sites"].sum(axis=0)
    for k, site in enumerate(kir.sites):
        eb = D.itemsize(site.elem)
        eff = 1.0
        if outputs["samp_flag"][k]:
            numel = math.prod(site.shape)
            eff = occupancy.sector_efficiency(outputs["samp_off"][k, :numel],
                                              outputs["samp_mask"][k, :numel], site.shape,
                                              buffers[site.base].base, eb, num_warps, spec.warp_size)
            report.coalescing[f"{site.kind} {site.base} ({site.where.split(':')[0]})"] = eff
        traffic += float(counts[k]) * eb / eff
    block = max((s.shape for s in kir.sites), key=math.prod, default=())
    regs = occupancy.estimate_registers(emitter.live_words(), num_warps, spec, n_regs)
    occ = occupancy.occupancy(spec, num_warps, programs, regs, emitter.smem_bytes(num_warps), block)
    report.occupancy = occ
    report.traffic_bytes = traffic
    report.predicted_s = occupancy.predict_seconds(
        traffic, programs, max(report.tiles_per_program, default=1), math.prod(block), num_warps,
        occ, spec)


def _unsupported(report: EmulationReport, message: str, mode: str) -> EmulationReport:
    report.findings.append(Finding("unsupported", "error", message, kernel=report.kernel))
    return _finish(report, mode)


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
