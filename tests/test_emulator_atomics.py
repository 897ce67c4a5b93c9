"""Atomic adds on the emulator: exact accumulation across programs, no false conflicts."""
import pytest
import torch

import gxusim
from gxusim.emulator import EmulationError
from triton_kernels.atomics import histogram, histogram_plain_store


def _values(n: int = 10_000, bins: int = 7) -> torch.Tensor:
    return torch.randint(0, bins, (n,), generator=torch.Generator().manual_seed(0), dtype=torch.int32)


def test_atomic_histogram_is_exact_and_reports_no_conflict():
    values = _values()
    bins = torch.zeros(7)
    report = gxusim.emulate(histogram, (32,), values, bins, values.numel(), XBLOCK=128)
    assert report.ok, report.findings
    assert not [f for f in report.findings if f.kind in ("write_conflict", "uncovered")]
    assert torch.equal(bins, torch.bincount(values.long(), minlength=7).float())


def test_plain_store_into_shared_bins_is_a_write_conflict(monkeypatch):
    monkeypatch.setenv("GXUSIM_CHECKS", "raise")
    values = _values()
    with pytest.raises(EmulationError) as error:
        gxusim.emulate(histogram_plain_store, (32,), values, torch.zeros(7), values.numel(),
                       XBLOCK=128)
    assert any(f.kind == "write_conflict" and f.buffer == "bins_ptr"
               for f in error.value.report.findings)
