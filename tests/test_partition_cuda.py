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


def test_a_partition_spec_runs_compiled_kernels_on_its_sms():
    pytest.importorskip("torch.cuda.green_contexts")
    result = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True,
                            env={**__import__("os").environ, "GXUSIM_TARGET": "cuda",
                                 "GXUSIM_SPEC": "gxu-partition-on-h200"}, timeout=600)
    if "refused a green context" in result.stderr or "without CUDA green contexts" in result.stderr:
        pytest.skip(result.stderr.strip().splitlines()[-1])
    assert result.returncode == 0, result.stderr[-3000:]
    assert "partition 16" in result.stdout
