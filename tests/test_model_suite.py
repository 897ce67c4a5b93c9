"""The model suite compiled for gxu on the session's target (emulator on a CPU machine,
cuda on a GPU machine): outputs and gradients equal eager on the backing device, and every
launch stays within the gxu spec."""
import pytest
import torch

import gxusim
from gxusim.models import CASES, SUITE
from gxusim.report import run_case


@pytest.fixture(autouse=True)
def _fresh_compiles():
    with torch._inductor.config.patch(force_disable_caches=True):
        yield
    gxusim.use_heuristics("gxu")


def _check(result) -> None:
    assert result.launches, f"{result.name}: no gxu kernel was launched"
    assert not result.violations, result.violations
    assert all(launch.target == gxusim.current_target() for launch in result.launches)
    assert all(not launch.findings for launch in result.launches), \
        [f for launch in result.launches for f in launch.findings]
    assert result.matches_eager, f"{result.name}: max relative error {result.max_error}"


@pytest.mark.parametrize("policy", ["gxu", "seed"])
@pytest.mark.parametrize("case", SUITE, ids=lambda c: c.name)
def test_forward_matches_eager(case, policy):
    gxusim.use_heuristics(policy)
    _check(run_case(case, "cpu", torch.float32))


@pytest.mark.parametrize("case", [c for c in SUITE if c.trainable], ids=lambda c: c.name)
def test_training_step_matches_eager(case):
    _check(run_case(case, "cpu", torch.float32, train=True))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("name", ["tanh_gelu", "row_sum", "transformer_block"])
def test_low_precision(name, dtype):
    _check(run_case(CASES[name], "cpu", dtype))


def test_dynamic_shapes_reuse_one_graph_with_new_launch_plans():
    model, _ = CASES["tanh_gelu"].build("gxu")
    compiled = torch.compile(model, dynamic=True)
    for n in (1000, 5000, 123457):
        gxusim.clear_launches()
        x = torch.randn(n, device="gxu")
        torch.testing.assert_close(compiled(x).cpu(), model(x.cpu()), atol=1e-4, rtol=1e-4)
        (launch,) = gxusim.launches()
        assert launch.meta["xnumel"] == n and launch.grid[0] <= 32


def test_extern_matmuls_are_recorded_as_launches():
    result = run_case(CASES["mlp"], "cpu")
    externs = [launch for launch in result.launches if launch.policy == "extern"]
    # inference: the first layer's bias joins its GELU kernel, the second's stays an addmm
    assert [launch.kernel for launch in externs] == ["extern_kernels.mm", "extern_kernels.addmm"]
    assert any(launch.policy == "gxu" for launch in result.launches)  # the fused GELU kernel
