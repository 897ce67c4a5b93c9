"""gxu tiles are larger than Inductor's largest block: every mask Inductor would drop stays.

Inductor leaves out a tree's mask where the element count is a multiple of the largest block
it would launch (4096 along x). A gxu plan may take tiles of up to 32768 elements, so such a
kernel's last tile would read and write past its buffers (the emulator reports it; the GPU
would run it unchecked).
"""
import re

import pytest
import torch
import torch.nn.functional as F

import gxusim
from gxusim.compiler.heuristics import GXUHeuristics
from gxusim.compiler.policies import current_heuristics


class WidestTiles(GXUHeuristics):
    """gxu's widest pointwise tile at every size: one that divides none of the cases."""
    name = "widest-tiles"
    SEES_KERNEL = False

    def select_xblock(self, numel: int, dtype: torch.dtype) -> int:
        return self.MAX_TILE_ELEMENTS


def _store_masks() -> set[str]:
    """The mask argument of every store in the latest generated kernels."""
    return set(re.findall(r"tl\.store\(.*, (\w+)\)$", gxusim.last_generated_code(), re.MULTILINE))


CASES = [
    ("add_one", 4096 * 65, lambda t: t + 1),
    ("gelu", 4096 * 300, lambda t: F.gelu(t, approximate="tanh")),
    ("two_inputs", 4096 * 129, lambda t: t * t.sin() + t.roll(1)),
]


@pytest.fixture(autouse=True)
def _every_kernel_generated():
    with torch._inductor.config.patch(force_disable_caches=True):
        yield


@pytest.fixture
def widest_tiles():
    before = current_heuristics()
    gxusim.use_heuristics(WidestTiles())
    try:
        yield
    finally:
        gxusim.use_heuristics(before)


@pytest.mark.parametrize("name,numel,fn", CASES, ids=[c[0] for c in CASES])
def test_multiples_of_inductors_block_keep_their_mask(name, numel, fn, widest_tiles):
    x = torch.randn(numel, device="gxu")
    gxusim.clear_launches()
    torch._dynamo.reset()
    got = torch.compile(fn)(x)
    torch.testing.assert_close(got.cpu(), fn(x.cpu()), rtol=1e-5, atol=1e-5)
    kernels = [launch for launch in gxusim.launches() if launch.policy != "extern"]
    assert kernels and all(not launch.findings for launch in kernels)
    # the case this file is about: a tile that does not divide the elements
    assert any(numel % launch.meta["XBLOCK"] for launch in kernels), \
        [launch.meta for launch in kernels]
    assert _store_masks() == {"xmask"}


def test_a_size_no_gxu_tile_overruns_still_drops_its_mask():
    x = torch.randn(1 << 20, device="gxu")
    torch._dynamo.reset()
    got = torch.compile(lambda t: t + 1)(x)
    torch.testing.assert_close(got.cpu(), x.cpu() + 1)
    assert _store_masks() == {"None"}
