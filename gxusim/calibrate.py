"""Calibration: measure capped-grid kernels on a real GPU and fit the performance model.

`calibrate(spec)` times a grid-stride `out = relu(x + y)` kernel (the seed's example) over
a grid of XBLOCK x num_warps x programs x sizes with `triton.testing.do_bench`, fits
`perf_model.fit`, and returns the fitted spec with a table of measured against predicted
times. `write_spec_toml` saves it as a spec file (`base = "<spec>"` plus the fitted
fields) that `gxusim.load_spec`, `GXUSIM_SPEC` and every command accept.
"""
from __future__ import annotations

import itertools
from pathlib import Path
from typing import Callable, Optional

import torch
import triton
import triton.language as tl

from . import perf_model
from .spec import HardwareSpec

XBLOCKS = (512, 1024, 2048, 4096, 8192)
WARPS = (2, 4, 8, 16)
SIZES = (1 << 20, 1 << 24, 100_000_000)


@triton.jit
def _capped_add_relu(x_ptr, y_ptr, out_ptr, numel, XBLOCK: tl.constexpr):
    for tile in range(tl.program_id(0), tl.cdiv(numel, XBLOCK), tl.num_programs(0)):
        index = tile * XBLOCK + tl.arange(0, XBLOCK)
        mask = index < numel
        value = tl.load(x_ptr + index, mask) + tl.load(y_ptr + index, mask)
        tl.store(out_ptr + index, tl.maximum(value, 0.0), mask)


def _grids(tiles: int, spec: HardwareSpec) -> list[int]:
    """Programs to try: the GXU-like cap, one and four per SM, and one per tile."""
    return sorted({min(tiles, g) for g in (32, spec.sm_count, 4 * spec.sm_count, tiles)})


def measure(spec: HardwareSpec, progress: Optional[Callable[[int, int], None]] = None
            ) -> list[tuple[dict, perf_model.LaunchFacts, float]]:
    """(config, profile, measured seconds) for every configuration, on the current GPU."""
    samples = []
    configs = [(n, x, w) for n, x, w in itertools.product(SIZES, XBLOCKS, WARPS)
               if w * spec.warp_size <= x and w <= spec.max_num_warps]
    for done, (numel, xblock, warps) in enumerate(configs):
        x, y = torch.randn(numel, device="cuda"), torch.randn(numel, device="cuda")
        out = torch.empty_like(x)
        tiles = triton.cdiv(numel, xblock)
        for programs in _grids(tiles, spec):
            seconds = triton.testing.do_bench(
                lambda: _capped_add_relu[(programs,)](x, y, out, numel, XBLOCK=xblock,
                                                      num_warps=warps),
                warmup=5, rep=25) / 1e3
            profile = perf_model.LaunchFacts(programs, warps, triton.cdiv(tiles, programs),
                                             xblock, 12.0 * numel,
                                             perf_model.blocks_per_sm(spec, warps))
            config = {"numel": numel, "XBLOCK": xblock, "num_warps": warps, "programs": programs}
            samples.append((config, profile, seconds))
        if progress is not None:
            progress(done + 1, len(configs))
    return samples


def calibrate(spec: HardwareSpec, progress: Optional[Callable[[int, int], None]] = None
              ) -> tuple[perf_model.Fit, list[dict]]:
    """Fit the performance model's parameters of `spec` to measurements on this GPU."""
    if not torch.cuda.is_available():
        raise RuntimeError("gxusim calibrate measures kernels on a CUDA GPU, and torch sees none")
    samples = measure(spec, progress)
    result = perf_model.fit(spec, [p for _, p, _ in samples], [s for *_, s in samples])
    rows = [{**config, "measured_us": seconds * 1e6,
             "predicted_us": perf_model.predict_seconds(profile, result.spec) * 1e6}
            for config, profile, seconds in samples]
    return result, rows


def write_spec_toml(spec: HardwareSpec, base: str, path: Path, note: str) -> None:
    lines = [f"# {note}", "[spec]", f'base = "{base}"', f'name = "{spec.name}-calibrated"',
             f"mem_bandwidth = {spec.mem_bandwidth:.6g}",
             f"memory_latency_s = {spec.memory_latency_s:.6g}",
             f"launch_overhead_s = {spec.launch_overhead_s:.6g}",
             f"element_issue_s = {spec.element_issue_s:.6g}"]
    path.write_text("\n".join(lines) + "\n")
