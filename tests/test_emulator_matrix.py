"""tl.dot on the emulator: Triton's products, accumulators, precisions and shape rules,
against Triton's interpreter on the CPU (the GPU on a GPU machine)."""
from __future__ import annotations

import pytest
import torch

import gxusim.emulator as emu
from triton_kernels import matrix
from triton_kernels.reference import run_reference

M, N, K = 100, 72, 90  # edges in every axis: masked tiles


def _matmul_case(a: torch.Tensor, b: torch.Tensor, out_dtype: torch.dtype, precision: str) -> dict:
    c = torch.empty(M, N, dtype=out_dtype)
    return dict(module="matrix", kernel="matmul", grid=(4 * 3,),
                args=[a, b, c, M, N, K, *a.stride(), *b.stride(), *c.stride()],
                constexprs=dict(BLOCK_M=32, BLOCK_N=32, BLOCK_K=32, GROUP_M=2, PRECISION=precision))


def _emulated(case: dict) -> torch.Tensor:
    args = [a.clone() if isinstance(a, torch.Tensor) else a for a in case["args"]]
    report = emu.emulate(getattr(matrix, case["kernel"]), case["grid"], *args, **case["constexprs"])
    assert report.ok, report.findings
    return args[2]


def _tf32(x: torch.Tensor) -> torch.Tensor:
    """fp32 values with the 13 low mantissa bits dropped, as TF32 tensor cores read them."""
    return (x.view(torch.int32) & -8192).view(torch.float32)


def test_a_tiled_matmul_gives_the_references_product_in_each_dtype() -> None:
    """bf16 and fp16 operands multiply exactly and sum in fp32; int8 sums exactly in int32;
    fp32 at ieee precision is a float32 product; B is read transposed through its strides."""
    g = torch.Generator().manual_seed(0)
    bt = torch.randn(N, K, generator=g)
    cases = {
        "bf16": _matmul_case(torch.randn(M, K, generator=g).bfloat16(), torch.randn(K, N, generator=g).bfloat16(),
                             torch.float32, "ieee"),
        "fp16": _matmul_case(torch.randn(M, K, generator=g).half(), torch.randn(K, N, generator=g).half(),
                             torch.float16, "ieee"),
        "int8": _matmul_case(torch.randint(-100, 100, (M, K), generator=g, dtype=torch.int8),
                             torch.randint(-100, 100, (K, N), generator=g, dtype=torch.int8),
                             torch.int32, "ieee"),
        "fp32 ieee, B transposed": _matmul_case(torch.randn(M, K, generator=g), bt.t(), torch.float32, "ieee"),
    }
    references = run_reference(list(cases.values()))
    for (name, case), reference in zip(cases.items(), references):
        got = _emulated(case)
        a, b = case["args"][:2]
        exact = a.double() @ b.double()
        if name == "int8":
            assert torch.equal(got, exact.to(torch.int32)) and torch.equal(got, reference[2]), name
        else:
            close = 2e-3 if name == "fp16" else 2e-5  # fp16: the output's own rounding
            torch.testing.assert_close(got.double(), exact, rtol=close, atol=close, msg=name)
            if name != "bf16" or torch.cuda.is_available():  # Triton's interpreter multiplies
                # bf16 operands as their raw 16-bit patterns (numpy has no bfloat16); a GPU
                # sums the products in another order
                close = max(close, 1e-4)
                torch.testing.assert_close(got, reference[2], rtol=close, atol=close, msg=name)


def test_fp32_operands_are_tf32_by_default_and_three_pass_precisions_recover_fp32() -> None:
    """Triton's default for fp32 operands is tf32: the emulator drops what TF32 drops (its
    product is the float64 product of the truncated operands, far from the fp32 one), while
    tf32x3 and bf16x3 split each operand into terms and come back to near fp32."""
    g = torch.Generator().manual_seed(1)
    a, b = torch.randn(M, K, generator=g), torch.randn(K, N, generator=g)
    exact = a.double() @ b.double()
    tf32 = _emulated(_matmul_case(a, b, torch.float32, "tf32"))
    torch.testing.assert_close(tf32.double(), _tf32(a).double() @ _tf32(b).double(), rtol=1e-5, atol=2e-5)
    assert (tf32.double() - exact).abs().max() > 1e-3
    for precision, close in (("tf32x3", 5e-5), ("bf16x3", 2e-3)):
        got = _emulated(_matmul_case(a, b, torch.float32, precision))
        torch.testing.assert_close(got.double(), exact, rtol=close, atol=close, msg=precision)
    (reference,) = run_reference([_matmul_case(a, b, torch.float32, "tf32")])
    torch.testing.assert_close(tf32, reference[2], rtol=0.05, atol=0.05)  # the interpreter ignores tf32


def test_batched_3d_blocks_multiply_matrix_by_matrix() -> None:
    g = torch.Generator().manual_seed(2)
    a, b = torch.randn(2, 16, 32, generator=g), torch.randn(2, 32, 16, generator=g)
    c = torch.empty(2, 16, 16)
    report = emu.emulate(matrix.batched_dot, (1,), a, b, c, B=2, M=16, N=16, K=32)
    assert report.ok, report.findings
    torch.testing.assert_close(c.double(), a.double() @ b.double(), rtol=2e-5, atol=2e-5)


def test_a_product_triton_would_refuse_is_refused_naming_the_rule() -> None:
    a, b, c = torch.randn(16, 8).bfloat16(), torch.randn(8, 16).bfloat16(), torch.empty(16, 16)
    with pytest.raises(emu.EmulationError, match=r"K = 8: Triton needs K >= 16 for bf16"):
        emu.emulate(matrix.short_k_dot, (1,), a, b, c, K=8)
