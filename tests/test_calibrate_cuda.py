"""Calibration on the GPU: measured capped-grid launches, fitted model, written spec."""
import pytest
import torch

pytestmark = pytest.mark.cuda

import gxusim  # noqa: E402
from gxusim import calibrate  # noqa: E402


def test_calibration_fits_measured_launches_and_writes_a_loadable_spec(tmp_path, monkeypatch):
    monkeypatch.setattr(calibrate, "SIZES", (1 << 22, 1 << 26))
    monkeypatch.setattr(calibrate, "XBLOCKS", (1024, 4096))
    spec = gxusim.load_spec("h200")
    fit, rows = calibrate.calibrate(spec)
    assert len(rows) >= 12 and all(r["measured_us"] > 0 for r in rows)
    assert fit.median_error < 0.3, fit
    assert 0.5e12 < fit.spec.mem_bandwidth < 10e12
    path = tmp_path / "h200-calibrated.toml"
    calibrate.write_spec_toml(fit.spec, "h200", path, "test")
    loaded = gxusim.load_spec(str(path))
    assert loaded.memory_latency_s == pytest.approx(fit.spec.memory_latency_s, rel=1e-5)
    assert loaded.sm_count == torch.cuda.get_device_properties().multi_processor_count
