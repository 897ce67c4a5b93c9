"""What only a GPU can show: the seed's 100M-element case, autotune (timed on the GPU), and
stock CUDA compilation left intact. The model suite itself is tests/test_model_suite.py,
which runs on whichever target the session has."""
import pytest
import torch

pytestmark = pytest.mark.cuda

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

import gxusim  # noqa: E402
from gxusim.report import run_case  # noqa: E402

gxusim.set_target("cuda")


@pytest.fixture(autouse=True)
def _every_kernel_generated():
    with torch._inductor.config.patch(force_disable_caches=True):
        yield


def _check(result) -> None:
    assert result.launches and not result.violations, result.violations
    assert all(launch.target == "cuda" for launch in result.launches)
    assert result.matches_eager, f"{result.name}: max relative error {result.max_error}"


def test_seed_sized_add_relu_100m_capped_at_32_programs():
    from gxusim.models import CASES
    result = run_case(CASES["add_relu"], "gpu")
    _check(result)
    (launch,) = result.launches
    assert launch.grid == (32, 1, 1) and launch.meta["tiles_per_program"] > 1


def test_autotune_times_only_valid_configs_and_caches_on_disk(tmp_path, monkeypatch):
    import json
    from gxusim.models import CASES
    monkeypatch.setenv("GXUSIM_CACHE_DIR", str(tmp_path))
    gxusim.use_heuristics("autotune")
    try:
        model, _ = CASES["mul_relu"].build("gxu")
        compiled = torch.compile(model, dynamic=True)
        for n in (4096, 8192):
            gxusim.clear_launches()
            x = torch.randn(n, device="gxu")
            torch.testing.assert_close(compiled(x).cpu(), model(x.cpu()))
            (launch,) = gxusim.launches()
            assert launch.grid[0] <= 32 and launch.num_warps <= 16
            assert "autotune" in launch.rules["all"]
        files = list((tmp_path / "autotune").glob("*.json"))
        assert len(files) == 2  # one per size signature
        for path in files:
            entry = json.loads(path.read_text())
            assert entry["plan"]["num_warps"] <= 16 and entry["timed"] > 1
    finally:
        gxusim.use_heuristics("gxu")


def test_stock_cuda_compilation_is_unchanged_by_gxusim():
    gxusim.clear_launches()
    x, y = torch.randn(1000, device="cuda"), torch.randn(1000, device="cuda")
    compiled = torch.compile(lambda a, b: (a + b).relu())
    torch.testing.assert_close(compiled(x, y), (x + y).relu())
    assert gxusim.launches() == [], "a plain CUDA graph went through the gxu launcher"


def test_launch_records_carry_the_binarys_spills_and_calibration_samples_too():
    """The cuda target reads ptxas's spills off each binary it launched: the launch
    records' facts carry them, and the prediction uses them instead of the estimate."""
    from gxusim.model import calibrate, core
    from gxusim.models import CASES
    result = run_case(CASES["row_sum"], "gpu")
    _check(result)
    for launch in result.launches:
        assert isinstance(launch.facts.compiled_spills, int) and launch.facts.compiled_spills >= 0
        assert launch.predicted_s == pytest.approx(
            core.predict_seconds(launch.facts, gxusim.current_spec()))
    spec = gxusim.load_spec("gxu-on-h200")
    (program,) = [p for p in calibrate.PROGRAMS if p.name == "var 2048x16384"]
    samples = calibrate.measure_program(program, spec)
    spills = [s.facts.compiled_spills for s in samples]
    assert all(isinstance(n, int) for n in spills)
    # the sampled plans include some of 32-64 elements a thread, which ptxas spills
    assert max(spills) > 0


def test_a_chunk_loops_waits_and_spills_come_from_its_machine_code():
    """The cuda target disassembles each binary it launches: the seed's unpipelined row sum
    gets the memory waits and spilled words its SASS has per chunk, and is predicted from
    them (the GXU-shaped row sum: 16384 rows of 8192, 16 chunks a row)."""
    from gxusim.model import core
    from gxusim.models import CASES
    gxusim.use_heuristics("seed")
    try:
        result = run_case(CASES["row_sum"], "gpu")
    finally:
        gxusim.use_heuristics("gxu")
    _check(result)
    (launch,) = result.launches
    (loop,) = [phase for phase in launch.facts.phases if phase.looped]
    assert loop.pipeline_stages == 1 and loop.iterations == 16
    assert loop.round_trips > 0 and loop.spilled_words is not None
    # a chunk's loads, 16-byte vectors of a thread, waited for in fewer waves than loads
    threads = launch.num_warps * 32
    assert loop.round_trips <= loop.load_accesses / threads
    assert launch.predicted_s == core.predict_seconds(launch.facts, gxusim.current_spec())
    assert "memory waits a chunk" in launch.occupancy
