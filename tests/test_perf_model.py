"""The performance model: its shape against H200 measurements, and the calibration fit."""
import math

import pytest

import gxusim
from gxusim.perf_model import LaunchFacts, blocks_per_sm, fit, predict_seconds

N = 100_000_000  # the seed's fp32 out = x + y: 12 bytes per element

# Measured on an H200 (docs/gpu-measurements.md):
# (XBLOCK, num_warps, programs, milliseconds)
H200_CAPPED = [(1024, 4, 32, 1.70), (2048, 8, 32, 0.94), (4096, 16, 32, 0.55),
               (8192, 16, 32, 0.50), (1024, 4, 97657, 0.281), (4096, 16, 132, 0.29)]


def _profile(spec, xblock, warps, programs, numel=N):
    tiles = math.ceil(numel / xblock)
    return LaunchFacts(programs, warps, math.ceil(tiles / programs), xblock, 12 * numel,
                       blocks_per_sm(spec, warps))


@pytest.mark.parametrize("preset", ["h200", "gxu-on-h200"])
def test_h200_presets_predict_the_measured_capped_grid_within_40_percent(preset):
    spec = gxusim.load_spec(preset)
    for xblock, warps, programs, measured_ms in H200_CAPPED:
        predicted_ms = predict_seconds(_profile(spec, xblock, warps, programs), spec) * 1e3
        assert abs(predicted_ms - measured_ms) / measured_ms < 0.4, (xblock, warps, programs)


def test_under_a_32_program_cap_bigger_tiles_are_predicted_faster():
    spec = gxusim.load_spec("gxu")
    times = [predict_seconds(_profile(spec, x, 16, 32), spec) for x in (1024, 2048, 4096, 8192)]
    assert times == sorted(times, reverse=True)


def test_fit_recovers_the_parameters_that_generated_the_times():
    truth = gxusim.load_spec("h200").replace(mem_bandwidth=3.0e12, memory_latency_s=7e-7,
                                             launch_overhead_s=3e-6, element_issue_s=2e-8)
    profiles = [_profile(truth, x, w, g, n) for x in (1024, 4096) for w in (4, 16)
                for g in (32, 132, 10_000) for n in (1 << 20, N)]
    result = fit(gxusim.load_spec("h200"), profiles, [predict_seconds(p, truth) for p in profiles])
    assert result.spec.mem_bandwidth == pytest.approx(3.0e12, rel=1e-6)
    assert result.spec.memory_latency_s == pytest.approx(7e-7, rel=1e-6)
    assert result.spec.launch_overhead_s == pytest.approx(3e-6, rel=1e-6)
    assert result.spec.element_issue_s == pytest.approx(2e-8, rel=1e-6)
    assert result.max_error < 1e-6


def test_fit_refuses_too_few_samples():
    spec = gxusim.load_spec("h200")
    with pytest.raises(ValueError, match="at least 4"):
        fit(spec, [_profile(spec, 1024, 4, 32)], [1e-3])


def test_a_program_that_cannot_be_resident_never_finishes():
    assert predict_seconds(LaunchFacts(32, 4, 4, 1024, 1e6, 0), gxusim.load_spec("gxu")) == math.inf


def test_negative_memory_latency_is_a_spec_error():
    with pytest.raises(gxusim.SpecError, match="memory_latency_s"):
        gxusim.load_spec("gxu").replace(memory_latency_s=-1e-7)
