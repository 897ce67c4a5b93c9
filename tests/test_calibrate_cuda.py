"""Calibration on the GPU: compiled gxu kernels timed under sampled plans, fitted, written."""
import pytest
import torch

pytestmark = pytest.mark.cuda

import gxusim  # noqa: E402
from gxusim.model import calibrate, terms  # noqa: E402
from gxusim.model.fit import write_spec_toml  # noqa: E402


def test_calibration_fits_measured_launches_and_writes_a_loadable_spec(tmp_path):
    spec = gxusim.load_spec("gxu-on-h200")
    programs = [p for p in calibrate.PROGRAMS if p.name in ("fma3 1M", "exp_sin 4M", "amax 1Mx64")]
    fit, rows = calibrate.calibrate(spec, programs=programs)
    assert len(rows) >= 20 and all(r["measured_s"] > 0 for r in rows)
    assert all(r["programs"] <= spec.max_grid and r["num_warps"] <= spec.max_num_warps
               for r in rows)
    assert fit.median_error < 0.3, fit
    assert "transcendental_issue_s" in fit.fitted  # exp and sin were measured
    path = tmp_path / "calibrated.toml"
    write_spec_toml(fit.spec, "gxu-on-h200", path, "test")
    loaded = gxusim.load_spec(str(path))
    for term in terms.TERMS:
        assert getattr(loaded, term.field) == pytest.approx(getattr(fit.spec, term.field), rel=1e-5)
    assert loaded.sm_count == torch.cuda.get_device_properties().multi_processor_count
