"""A vendor's own launch policy, plugged in without monkeypatching.

`Wide` asks for one 16K-element tile per program and 32 warps; the GXU spec allows 16
warps, so the launcher clamps it and says so in the decision log:
    python examples/custom_policy.py
"""
import torch

import gxusim
from gxusim.compiler import ReductionConfig


class Wide(gxusim.Heuristics):
    name = "wide"

    def select_xblock(self, numel: int, dtype: torch.dtype) -> int:
        return 16384

    def select_num_warps(self, xblock: int) -> int:
        return 32  # over GXU's max_num_warps = 16: clamped, never launched

    def get_grid(self, numel: int, xblock: int) -> tuple[int, ...]:
        return (-(-numel // xblock),)  # one program per tile: capped at max_grid = 32

    def select_reduction(self, xnumel: int, rnumel: int, dtype: torch.dtype) -> ReductionConfig:
        return ReductionConfig(xblock=1, rblock=1024, num_warps=8)


if __name__ == "__main__":  # imported as a policy (`--policies examples.custom_policy:Wide`): no demo
    gxusim.use_heuristics(Wide())
    x = torch.randn(4_000_000, device="gxu")
    y = torch.compile(lambda t: (t * 2).relu() + t.sum())(x)
    for launch in gxusim.launches():
        print(launch.describe())
    torch.testing.assert_close(y.cpu(), (x.cpu() * 2).relu() + x.cpu().sum(), rtol=1e-4,
                               atol=1e-2)
