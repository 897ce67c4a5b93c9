"""Kernels in the shape of Triton's tutorials run on the emulator, checks on, within the
tolerances the tutorials use against torch. They launch one program per block as the
tutorials do, so they run under the `h200` spec (a GPU's limits, not the GXU's 32-program
cap)."""
from __future__ import annotations

import math

import pytest
import torch

import gxusim.emulator as emu
from triton_kernels import tutorials


def _emulate(kernel, grid, *args, **constexprs) -> None:
    report = emu.emulate(kernel, grid, *args, spec="h200", **constexprs)
    assert report.ok, report.findings


def test_vector_add() -> None:
    x, y, out = torch.randn(98_432), torch.randn(98_432), torch.empty(98_432)
    _emulate(tutorials.vector_add, (math.ceil(98_432 / 1024),), x, y, out, 98_432, BLOCK=1024)
    assert torch.equal(out, x + y)


def test_softmax_with_programs_striding_over_rows() -> None:
    x = torch.randn(123, 781)
    out = torch.empty_like(x)
    _emulate(tutorials.softmax_rows, (8,), out, x, x.stride(0), out.stride(0), 123, 781,
             BLOCK=1024, STAGES=3)
    torch.testing.assert_close(out, torch.softmax(x, dim=1))


def test_layer_norm_forward_and_backward() -> None:
    rows, n, eps = 61, 300, 1e-5
    g = torch.Generator().manual_seed(0)
    x = torch.randn(rows, n, generator=g, dtype=torch.float64).requires_grad_()
    weight = torch.rand(n, generator=g, dtype=torch.float64).requires_grad_()
    bias = torch.rand(n, generator=g, dtype=torch.float64).requires_grad_()
    dy = 0.1 * torch.randn(rows, n, generator=g, dtype=torch.float64)
    expected = torch.nn.functional.layer_norm(x, (n,), weight, bias, eps)
    expected.backward(dy)

    x32, w32, b32, dy32 = (t.detach().float() for t in (x, weight, bias, dy))
    y, mean, rstd = torch.empty(rows, n), torch.empty(rows), torch.empty(rows)
    _emulate(tutorials.layer_norm_forward, (rows,), x32, y, w32, b32, mean, rstd, n, n, eps, BLOCK=128)
    torch.testing.assert_close(y, expected.detach().float(), rtol=1e-5, atol=1e-5)

    programs = 8
    dx, partial_dw, partial_db = torch.empty(rows, n), torch.empty(programs, n), torch.empty(programs, n)
    _emulate(tutorials.layer_norm_backward_dx, (programs,), x32, dy32, dx, w32, mean, rstd,
             partial_dw, partial_db, n, rows, n, BLOCK=512)
    dw, db = torch.empty(n), torch.empty(n)
    _emulate(tutorials.sum_partials, (math.ceil(n / 128),), partial_dw, partial_db, dw, db,
             programs, n, BLOCK_P=4, BLOCK_N=128)
    for got, want in ((dx, x.grad), (dw, weight.grad), (db, bias.grad)):
        torch.testing.assert_close(got, want.float(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("causal", [False, True])
def test_fused_attention_forward(causal: bool) -> None:
    """fp16 q, k, v as the tutorial runs them; 200 keys: the last block is partly masked."""
    heads, seq, head = 3, 200, 64
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(heads, seq, head, generator=g).half() for _ in range(3))
    out = torch.empty_like(q)
    scale = head ** -0.5
    _emulate(tutorials.attention_forward, (math.ceil(seq / 64), heads), q, k, v, out, seq, scale,
             HEAD=head, BLOCK_M=64, BLOCK_N=32, CAUSAL=causal)
    expected = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(),
                                                                is_causal=causal)
    torch.testing.assert_close(out.float(), expected, rtol=0, atol=1e-2)
