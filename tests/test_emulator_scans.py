"""Scans on the emulator: tl.cumsum and tl.associative_scan (reverse, user combine)."""
import torch

import gxusim
from triton_kernels.reductions import row_cumsum, row_reverse_cumprod


def test_row_cumsum_matches_torch():
    x = torch.randn(37, 50)
    out = torch.empty_like(x)
    report = gxusim.emulate(row_cumsum, (8,), x, out, 37, 50, XBLOCK=4, RBLOCK=64)
    assert report.ok, report.findings
    torch.testing.assert_close(out, x.cumsum(1), rtol=1e-5, atol=1e-5)


def test_reverse_associative_scan_with_user_combine():
    x = torch.rand(9, 20) + 0.5
    out = torch.empty_like(x)
    report = gxusim.emulate(row_reverse_cumprod, (4,), x, out, 9, 20, XBLOCK=2, RBLOCK=32)
    assert report.ok, report.findings
    expected = x.flip(1).cumprod(1).flip(1)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-6)
