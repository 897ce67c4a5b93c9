"""The GXU-shaped GPU: a spec with gpu_partition runs kernels on a green context of its SMs."""
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.cuda

PROGRAM = textwrap.dedent("""
    import torch, gxusim
    from gxusim import target
    x = torch.randn(1 << 24, device="cuda")
    got = torch.compile(lambda t: (t * 2).relu())(x.to("gxu"))
    torch.testing.assert_close(got.cpu(), (x * 2).relu().cpu())
    launch = gxusim.launches()[-1]
    assert launch.grid[0] <= 32 and launch.num_warps <= 16, launch
    print("partition", target.active().partition_sms())
""")


def _on_the_partition(program: str) -> str:
    """What `program` prints, run in a process of its own on the cuda target under the
    partition spec (a green context is entered once per process); skips where the driver
    refuses green contexts."""
    pytest.importorskip("torch.cuda.green_contexts")
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                            env={**__import__("os").environ, "GXUSIM_TARGET": "cuda",
                                 "GXUSIM_SPEC": "gxu-partition-on-h200"}, timeout=600)
    if "refused a green context" in result.stderr or "without CUDA green contexts" in result.stderr:
        pytest.skip(result.stderr.strip().splitlines()[-1])
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def test_a_partition_spec_runs_compiled_kernels_on_its_sms():
    assert "partition 16" in _on_the_partition(PROGRAM)


RESIDENCY = textwrap.dedent("""
    import dataclasses, torch, gxusim
    from gxusim.model import core, residency
    spec = gxusim.current_spec()
    gelu = lambda t: 0.5 * t * (1 + torch.tanh(0.79788 * (t + 0.044715 * t ** 3)))
    x = torch.randn(1 << 24, device="cuda")
    torch.testing.assert_close(torch.compile(gelu)(x.to("gxu")).cpu(), gelu(x).cpu(),
                               atol=1e-4, rtol=1e-4)
    (launch,) = gxusim.launches()
    regs = int(launch.occupancy.split(" regs/thread")[0].rsplit(" ", 1)[1])
    assert launch.facts.blocks_per_sm == residency.residency(spec, launch.num_warps, regs)[0]
    two = dataclasses.replace(launch.facts, blocks_per_sm=2)
    print("residency", launch.num_warps, regs, launch.facts.blocks_per_sm,
          launch.occupancy_limiter, launch.predicted_s, core.predict_seconds(two, spec))
""")


def test_a_binarys_registers_set_the_programs_sharing_an_sm():
    """Two programs per SM by the spec, but the gxu policy's GELU (32K-element tiles on 16
    warps) takes more than half the register file: one program resides per SM, the launch
    record says so (facts, occupancy line) and the prediction follows (slower than with two
    programs sharing each SM)."""
    output = _on_the_partition(RESIDENCY)
    warps, regs, blocks, limiter, predicted, with_two = output.split("residency")[1].split()
    assert (warps, blocks, limiter) == ("16", "1", "registers"), output
    assert int(regs) * 16 * 32 > 65536 // 2
    assert float(predicted) > float(with_two)
