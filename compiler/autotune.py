"""Autotune mode: time every spec-valid launch config on the CUDA target, cache the winner on disk.

`gxusim.use_heuristics("autotune")` turns it on. Candidates come from `candidate_plans`
(only configs within the active spec: warps <= max_num_warps, grid <= max_grid), each is
timed with `triton.testing.do_bench` on copies of the arguments the kernel mutates, and the
fastest is stored in `$GXUSIM_CACHE_DIR/autotune/` (default `~/.cache/gxusim`), one JSON
file per kernel source and spec, keyed by the kernel's sizes. A corrupted cache file is
ignored and rewritten.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Sequence

import torch

from gxusim import target as targets
from gxusim.spec import HardwareSpec

from .heuristics import AutotuneHeuristics, Heuristics, cdiv

if TYPE_CHECKING:
    from .launcher import GXUKernel, LaunchPlan


def cache_dir() -> Path:
    root = Path(os.environ.get("GXUSIM_CACHE_DIR", Path.home() / ".cache" / "gxusim"))
    return root / "autotune"


def _cache_file(kernel: "GXUKernel", spec: HardwareSpec) -> Path:
    digest = hashlib.sha256((kernel.fn.src + repr(sorted(spec.as_dict().items()))).encode())
    return cache_dir() / f"{kernel.name}-{spec.name}-{digest.hexdigest()[:16]}.json"


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}  # missing or corrupted: start afresh, the next write replaces it


def _write(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, suffix=".tmp") as f:
        json.dump(data, f, indent=1, sort_keys=True)
    os.replace(f.name, path)


def candidate_plans(kernel: "GXUKernel", numels: dict[str, int], spec: HardwareSpec
                    ) -> list["LaunchPlan"]:
    """Every launch config worth timing that the spec allows."""
    from .launcher import LaunchPlan
    xnumel = numels.get("xnumel", 1)
    shape = kernel.shape
    warps = [w for w in (1, 2, 4, 8, 16, 32) if w <= spec.max_num_warps]
    metas: list[dict[str, int]] = []
    if shape.is_reduction:
        rblocks = [r for r in (64, 256, 1024, 4096) if r <= max(64, 2 * numels["r0_numel"])]
        metas = [{"XBLOCK": x, "R0_BLOCK": r} for r in rblocks for x in (1, 2, 4, 8, 16, 32, 64)
                 if x * r <= 16384 and x <= max(1, 2 * xnumel)]
    elif shape.is_2d:
        metas = [{"XBLOCK": x, "YBLOCK": y} for x in (16, 32, 64, 128) for y in (16, 32, 64, 128)
                 if x * y <= 16384]
    else:
        metas = [{"XBLOCK": x} for x in (256, 512, 1024, 2048, 4096, 8192, 16384)
                 if x <= max(256, 2 * xnumel)]
    plans = {}
    for meta in metas:
        blocks = {**meta, **shape.static_blocks}  # the kernel's own block sizes win
        tiles = cdiv(xnumel, blocks["XBLOCK"])
        if shape.is_2d:
            tiles *= cdiv(numels["ynumel"], blocks["YBLOCK"])
        parameters = {k: v for k, v in meta.items() if k in shape.block_params}
        for num_warps in warps:
            key = (tuple(parameters.items()), num_warps)
            plans[key] = LaunchPlan(parameters, num_warps, max(1, min(tiles, spec.max_grid)),
                                    max(1, tiles), {"all": "autotune (timed on cuda)"})
    return list(plans.values())


def _time(kernel: "GXUKernel", plan: "LaunchPlan", args: Sequence[Any]) -> float:
    import triton.testing

    from .launcher import run_triton
    mutated = set(kernel.inductor_meta.get("mutated_arg_names", ())) | {
        n for n in kernel.shape.runtime_args if "out_ptr" in n}
    copies = [a.clone() if isinstance(a, torch.Tensor) and n in mutated else a
              for n, a in zip(kernel.shape.runtime_args, args)]
    return triton.testing.do_bench(lambda: run_triton(kernel, plan, copies), warmup=5, rep=20)


def lookup(kernel: "GXUKernel", args: Sequence[Any], numels: dict[str, int],
           policy: Heuristics, spec: HardwareSpec) -> Optional["LaunchPlan"]:
    """The cached or freshly timed best plan in autotune mode; None in any other mode."""
    from .launcher import LaunchPlan
    if not isinstance(policy, AutotuneHeuristics):
        return None
    if targets.current_target() != "cuda":
        raise RuntimeError("gxusim autotune times kernels on the GPU and needs the 'cuda' target; "
                           "on the emulator use a policy ('gxu', 'seed') or the performance model")
    path = _cache_file(kernel, spec)
    cache = _read(path)
    key = json.dumps(sorted(numels.items()))
    entry = cache.get(key)
    if isinstance(entry, dict) and {"meta", "num_warps", "programs", "n_tiles"} <= set(entry):
        return LaunchPlan(entry["meta"], entry["num_warps"], entry["programs"], entry["n_tiles"],
                          {"all": f"autotune cache {path.name}"})
    timed = [(_time(kernel, plan, args), plan) for plan in candidate_plans(kernel, numels, spec)]
    best_ms, best = min(timed, key=lambda t: t[0])
    cache[key] = {"meta": best.meta, "num_warps": best.num_warps, "programs": best.programs,
                  "n_tiles": best.n_tiles, "ms": best_ms}
    _write(path, cache)
    return best
