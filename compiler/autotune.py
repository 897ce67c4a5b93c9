"""Autotune: a policy that plans by timing legal configs on the target, cached on disk.

`gxusim.use_heuristics("autotune")` selects it, and so does `torch.compile(mode=
"max-autotune")` on gxu. It is a planning strategy like any policy: the planner hands it the
candidate plans (`plan.candidate_plans`, the space the capped ceiling is searched over too)
ranked by the performance model, fastest predicted first, and a way to time one plan, which
the active target provides (only targets that can time kernels do: `cuda`). It times them in
that order and stops once the next is predicted `STOP_RATIO` times slower than the fastest
measured so far: the model would have to be that far off for it to win. The fastest plan is
stored in the "autotune" cache (`gxusim.cache`), one JSON file per kernel source, sizes,
dtype and spec; a corrupted file is ignored and rewritten.
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
    MIN_TIMED = 3  # the model's first picks timed whatever it predicts of the rest
    STOP_RATIO = 1.5

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
        ranked = list(candidates())
        timed = self.time_ranked(ranked, time_plan)
        seconds, best = min(timed, key=lambda item: item[0])
        cache.write_json(path, {"key": key, "plan": best.as_dict(), "seconds": seconds,
                                "timed": len(timed)})
        return dataclasses.replace(best, rules={
            "all": f"autotune: fastest of {len(timed)} of {len(ranked)} configs timed in the "
                   f"model's order ({seconds * 1e6:.1f} us)"})

    def time_ranked(self, ranked: Sequence[LaunchPlan], time_plan: Callable[[LaunchPlan], float]
                    ) -> list[tuple[float, LaunchPlan]]:
        """(seconds, plan) of the plans timed, in `ranked`'s order, until the next one's
        predicted time is STOP_RATIO times the best measured (plans without a prediction
        are all timed)."""
        timed: list[tuple[float, LaunchPlan]] = []
        for plan in ranked:
            if len(timed) >= self.MIN_TIMED and plan.predicted_s is not None and \
                    plan.predicted_s > self.STOP_RATIO * min(s for s, _ in timed):
                break
            timed.append((time_plan(plan), plan))
        return timed
