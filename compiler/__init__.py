"""GXU compilation: TorchInductor lowering and fusion, ending in grid-capped GXU kernels.

Stages, one module each: `inductor_registration` (device and backend hooks),
`inductor_codegen` (kernel code generation with a tile loop), `heuristics` (launch
policies), `autotune` (a policy that times configs), `policies` (policies by name),
`plan` (kernel shape, launch plan, the spec clamp), `launcher` (plan, check, run on the
target, record).
"""
from .heuristics import GXUHeuristics, Heuristics, ReductionConfig, SeedHeuristics
from .inductor_registration import register
from .policies import current_heuristics, use_heuristics

__all__ = ["GXUHeuristics", "Heuristics", "ReductionConfig", "SeedHeuristics",
           "current_heuristics", "register", "use_heuristics"]
