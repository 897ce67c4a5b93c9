"""Compiled argmax/argmin/max-with-indices on gxu tensors against eager CPU (on the emulator
target where there is no GPU: Inductor's triton_helpers run through the emulator)."""
import pytest
import torch

import gxusim  # noqa: F401  (registers the gxu device)
from gxusim.emulator import EmulationError


def _inputs() -> dict:
    g = torch.Generator().manual_seed(0)
    ties = torch.randint(0, 4, (37, 300), generator=g).float()
    nans = torch.randn(37, 300, generator=g)
    nans[3, 17] = float("nan")
    return {"randn": torch.randn(37, 300, generator=g), "ties": ties, "nan": nans,
            "int": torch.randint(-5, 5, (37, 300), generator=g)}


OPS = {
    "argmax": lambda a: a.argmax(-1),
    "argmin": lambda a: a.argmin(-1),
    "max": lambda a: tuple(a.max(-1)),
    "min": lambda a: tuple(a.min(-1)),
}


@pytest.mark.parametrize("data", ["randn", "ties", "nan", "int"])
@pytest.mark.parametrize("op", sorted(OPS))
def test_compiled_matches_eager(op: str, data: str) -> None:
    torch._dynamo.reset()
    x = _inputs()[data]
    fn = OPS[op]
    got = torch.compile(fn)(x.to("gxu"))
    expected = fn(x)
    got = got if isinstance(got, tuple) else (got,)
    expected = expected if isinstance(expected, tuple) else (expected,)
    for g, e in zip(got, expected):
        torch.testing.assert_close(g.cpu(), e, equal_nan=True, rtol=0, atol=0)


def test_compiled_sort_is_refused_by_name() -> None:
    torch._dynamo.reset()
    x = torch.randn(37, 300)
    try:
        values, indices = torch.compile(lambda a: torch.sort(a, -1))(x.to("gxu"))
    except EmulationError as e:
        assert "tl.sort" in str(e)
    else:  # a fallback that really sorts is fine too; a wrong answer is not
        assert torch.equal(values.cpu(), x.sort(-1).values)
        # an unstable sort (CUDA's) may order tied values either way: the indices must be a
        # permutation of each row that gives the sorted values
        assert torch.equal(indices.cpu().sort(-1).values, torch.arange(300).expand(37, 300))
        assert torch.equal(x.gather(-1, indices.cpu()), values.cpu())
