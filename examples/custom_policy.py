"""A vendor's own launch policy, plugged in without monkeypatching.

`Wide` asks for one 16K-element tile per program and 32 warps; the GXU spec allows 16
warps, so the launcher clamps it and says so in the decision log. `StreamAware` sees each
kernel (its traits, recorded by code generation): a pointwise kernel that moves many
streams gets fewer elements a thread, and it asks the performance model otherwise:
    python examples/custom_policy.py
"""
from typing import Optional

import torch

import gxusim
from gxusim.compiler import ReductionConfig
from gxusim.compiler.heuristics import GXUHeuristics, KernelQuestion, LaunchConfig


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


class StreamAware(GXUHeuristics):
    """gxu's answers, but a pointwise kernel of four or more streams takes the model's
    fastest config of at most 16 elements a thread."""
    name = "stream-aware"

    def choose_pointwise(self, kernel: KernelQuestion) -> Optional[LaunchConfig]:
        if kernel.traits is None or kernel.traits.streams < 4:
            return super().choose_pointwise(kernel)
        threads = lambda c: c.num_warps * kernel.spec.warp_size  # noqa: E731
        lean = [c for c in kernel.candidates() if c.blocks["XBLOCK"] <= 16 * threads(c)]
        return min(lean, key=kernel.predict) if lean else None


if __name__ == "__main__":  # imported as a policy (`--policies examples.custom_policy:Wide`): no demo
    gxusim.use_heuristics(Wide())
    x = torch.randn(4_000_000, device="gxu")
    y = torch.compile(lambda t: (t * 2).relu() + t.sum())(x)
    for launch in gxusim.launches():
        print(launch.describe())
    torch.testing.assert_close(y.cpu(), (x.cpu() * 2).relu() + x.cpu().sum(), rtol=1e-4,
                               atol=1e-2)
    gxusim.use_heuristics(StreamAware())
    a, b, c = (torch.randn(1_000_000, device="gxu") for _ in range(3))
    z = torch.compile(lambda p, q, r: p * q + r.exp())(a, b, c)
    print(gxusim.launches()[-1].describe())
    print(gxusim.launches()[-1].traits)
    torch.testing.assert_close(z.cpu(), a.cpu() * b.cpu() + c.cpu().exp())
