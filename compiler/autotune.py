"""Autotune: a policy that plans by timing every legal config on the target, cached on disk.

`gxusim.use_heuristics("autotune")` selects it. It is a planning strategy like any policy:
the planner hands it the candidate plans (`plan.candidate_plans`, the space the capped
ceiling is searched over too) and a way to time one plan, which the active target provides
(only targets that can time kernels do: `cuda`). The fastest plan is stored in the
"autotune" cache (`gxusim.cache`), one JSON file per kernel source, sizes, dtype and spec;
a corrupted file is ignored and rewritten.
"""
from __future__ import annotations

import dataclasses
import hashlib
from typing import Callable, Optional, Sequence

from gxusim import cache

from .heuristics import GXUHeuristics
from .plan import LaunchPlan


class AutotuneHeuristics(GXUHeuristics):
    """Times the candidates; falls back on nothing (without a timer it says what it needs)."""

    name = "autotune"

    def search(self, candidates: Callable[[], Sequence[LaunchPlan]],
               time_plan: Optional[Callable[[LaunchPlan], float]], key: str
               ) -> Optional[LaunchPlan]:
        path = cache.cache_dir("autotune") / f"{hashlib.sha256(key.encode()).hexdigest()[:24]}.json"
        entry = cache.read_json(path)
        try:
            return dataclasses.replace(LaunchPlan(**entry["plan"]), rules={
                "all": f"autotune cache {path.name} ({entry['seconds'] * 1e6:.1f} us)"})
        except (KeyError, TypeError, ValueError):
            pass  # missing or unusable: time afresh, the write below replaces it
        if time_plan is None:
            raise RuntimeError("gxusim autotune times kernels and needs a target that can "
                               "(cuda); on the emulator use a policy ('gxu', 'seed') or the "
                               "performance model")
        timed = [(time_plan(plan), plan) for plan in candidates()]
        seconds, best = min(timed, key=lambda item: item[0])
        cache.write_json(path, {"key": key, "plan": best.as_dict(), "seconds": seconds,
                                "timed": len(timed)})
        return dataclasses.replace(best, rules={
            "all": f"autotune: fastest of {len(timed)} configs ({seconds * 1e6:.1f} us)"})
