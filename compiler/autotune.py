"""Autotune: a policy that plans by timing legal configs on the target, cached on disk.

`gxusim.use_heuristics("autotune")` selects it, and so does `torch.compile(mode=
"max-autotune")` on gxu. It is a planning strategy like any policy: the planner hands it the
candidate plans (`plan.candidate_plans`, the space the capped ceiling is searched over too)
ranked by the performance model, fastest predicted first, the plan gxu's rules give, and a
`PlanTimer` that times a plan and compiles a batch of plans at once, which the active target
provides (only targets that can time kernels do: `cuda`). `local_search` climbs from the
rules' plan and from each of the model's first few: it times the neighbours of where it
stands (one block or the warps one or two doublings away, a block and the warps doubled or
halved together, two blocks traded against each other, or any other pipelining depth) and
moves to the fastest while that is faster; each
config is timed once, and each round's configs are compiled together before it. Where
every config the climbs timed failed to load (a GPU with less shared memory than the
model's first picks need), the model's order is walked to the first that loads; where
none does, the search says so and caches nothing. The
fastest plan is stored in the "autotune" cache (`gxusim.cache`), one JSON file per kernel
source, sizes, dtype and spec; a corrupted file is ignored and rewritten.
"""
from __future__ import annotations

import dataclasses
import hashlib
import math
from typing import Callable, Hashable, Optional, Sequence, TypeVar

from gxusim import cache

from .heuristics import GXUHeuristics
from .plan import NUM_STAGES, LaunchPlan, PlanTimer

Config = TypeVar("Config")

# Steps to a neighbour: a block or the warps times one of these, or two blocks traded.
_FACTORS = (2, 4, 1 / 2, 1 / 4)


def config_key(meta: dict[str, int], num_warps: int, num_stages: Optional[int]) -> Hashable:
    return tuple(sorted(meta.items())), num_warps, num_stages


def _neighbours(key: Hashable) -> list[Hashable]:
    blocks, warps, stages = key
    meta = dict(blocks)
    out = []
    for name in meta:
        out += [config_key({**meta, name: int(meta[name] * f)}, warps, stages) for f in _FACTORS]
        out += [config_key({**meta, name: meta[name] * 2, other: meta[other] // 2}, warps, stages)
                for other in meta if other != name]
        # the tile resized with its warps, each thread keeping its elements: a step the
        # two single moves only make where each of them alone is faster
        out += [config_key({**meta, name: int(meta[name] * f)}, int(warps * f), stages)
                for f in (2, 1 / 2)]
    out += [config_key(meta, int(warps * f), stages) for f in _FACTORS]
    if stages is not None:  # every depth: pipelined or not is no doubling away from another
        out += [config_key(meta, warps, depth) for depth in NUM_STAGES if depth != stages]
    return out


def local_search(ranked: Sequence[Config], start: Optional[Config],
                 time: Callable[[Config], float], key: Callable[[Config], Hashable],
                 first: int,
                 compile_ahead: Callable[[Sequence[Config]], None] = lambda configs: None
                 ) -> list[tuple[float, Config]]:
    """(seconds, config) of each config timed (once each): from `start` and from each of the
    `first` of `ranked` (the model's order) in turn, a climb that times the untimed
    neighbours among `ranked` of where it stands and moves to the fastest of them while that
    is faster. Several starts keep one wrong start (the rules', or the model's) from
    stopping the search on a local best. Before each round of timings `compile_ahead` gets
    every config the round will time (the first round: all starts and their neighbours, all
    of which their first steps time), so a target can build them at once."""
    by_key = {key(config): config for config in ranked}
    if start is not None:
        by_key.setdefault(key(start), start)
    timed: dict[Hashable, tuple[float, Config]] = {}

    def seconds(k: Hashable) -> float:
        if k not in timed:
            timed[k] = (time(by_key[k]), by_key[k])
        return timed[k][0]

    def around(here: Hashable) -> list[Hashable]:
        return [here] + [k for k in _neighbours(here) if k in by_key]

    built: set[Hashable] = set()

    def build(keys: Sequence[Hashable]) -> None:
        fresh = [k for k in dict.fromkeys(keys) if k not in built]
        built.update(fresh)
        if fresh:
            compile_ahead([by_key[k] for k in fresh])
    starts = [key(config)
              for config in ([start] if start is not None else []) + list(ranked[:first])]
    build([k for here in starts for k in around(here)])
    for here in starts:
        while True:
            step = around(here)
            build(step)
            best = min(step, key=seconds)
            if seconds(best) >= seconds(here):  # ties stay: a climb that ends
                break
            here = best
    return list(timed.values())


def first_that_runs(ranked: Sequence[LaunchPlan], time: Callable[[LaunchPlan], float],
                    skip: set[Hashable]) -> tuple[float, Optional[LaunchPlan], int]:
    """(seconds, config, configs timed) of the first of `ranked` not in `skip` whose time is
    finite (a config that cannot be loaded times as infinite); (inf, None, n) if none."""
    tried = 0
    for config in ranked:
        if plan_key(config) in skip:
            continue
        tried += 1
        seconds = time(config)
        if math.isfinite(seconds):
            return seconds, config, tried
    return math.inf, None, tried


def plan_key(plan: LaunchPlan) -> Hashable:
    return config_key(plan.meta, plan.num_warps, plan.num_stages)


class AutotuneHeuristics(GXUHeuristics):
    """Times the candidates; falls back on nothing (without a timer it says what it needs)."""

    name = "autotune"
    MODEL_FIRST = 3  # the model's first picks, timed beside the rules' plan

    def search(self, candidates: Callable[[], Sequence[LaunchPlan]],
               time_plan: Optional[PlanTimer], key: str,
               start: Optional[Callable[[], LaunchPlan]] = None) -> Optional[LaunchPlan]:
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
        timed = local_search(ranked, start() if start else None, time_plan, plan_key,
                             self.MODEL_FIRST, time_plan.compile_ahead)
        seconds, best = min(timed, key=lambda item: item[0])
        if not math.isfinite(seconds):  # every config climbed through failed to load
            climbed = {plan_key(plan) for _, plan in timed}
            seconds, best, tried = first_that_runs(ranked, time_plan, climbed)
            if best is None:
                raise RuntimeError(
                    f"gxusim autotune: none of the {len(ranked)} legal configs of {key} can be "
                    f"loaded on this GPU ({len(timed) + tried} tried: each needs more "
                    "resources, such as shared memory, than it has)")
            timed += [(seconds, best)]
        cache.write_json(path, {"key": key, "plan": best.as_dict(), "seconds": seconds,
                                "timed": len(timed)})
        return dataclasses.replace(best, rules={
            "all": f"autotune: fastest of {len(timed)} of {len(ranked)} configs timed, from "
                   f"gxu's plan and the model's first ({seconds * 1e6:.1f} us)"})
