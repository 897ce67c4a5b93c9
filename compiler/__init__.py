"""GXU compilation: TorchInductor lowering and fusion, ending in grid-capped GXU kernels.

Stages, one module each: `inductor_registration` (device and backend hooks),
`inductor_codegen` (kernel code generation with a tile loop), `heuristics` (launch
policies and the spec clamp), `launcher` (plan, check, run on the target, record),
`autotune` (timed configs cached on disk).
"""
from .heuristics import (GXUHeuristics, Heuristics, ReductionConfig, SeedHeuristics,
                         current_heuristics, use_heuristics)
from .inductor_registration import register

__all__ = ["GXUHeuristics", "Heuristics", "ReductionConfig", "SeedHeuristics",
           "current_heuristics", "register", "use_heuristics"]
