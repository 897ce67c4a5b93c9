"""Emulator outputs against the reference (the GPU, else Triton's interpreter) on the kernel suite."""
from __future__ import annotations

import math

import pytest
import torch

import gxusim.emulator as emu
from triton_kernels import planted, pointwise, reductions
from triton_kernels.reference import run_reference


def _cases() -> dict:
    g = torch.Generator().manual_seed(0)

    def randn(*shape):
        return torch.randn(*shape, generator=g)

    n = 5000  # not a multiple of any block: exercises tail masks
    rows, cols = 37, 100
    xs = randn(n) * 3
    cases = {
        "add_relu_chunked": ("pointwise", "add_relu_chunked", (32,), [randn(n), randn(n), torch.empty(n), n],
                             {"XBLOCK": 128}, 0.0),
        "add_relu_gridstride": ("pointwise", "add_relu_gridstride", (32,),
                                [randn(n), randn(n), torch.empty(n), n], {"XBLOCK": 64}, 0.0),
        "gelu_tanh": ("pointwise", "gelu_tanh", (32,), [xs, torch.empty(n), n], {"XBLOCK": 256}, 1e-6),
        "negate": ("pointwise", "negate", (2,), [torch.tensor([0.0, -0.0, 1.5, -2.0] * 16),
                   torch.empty(64), 64], {"XBLOCK": 32}, 0.0),
        "transpose_2d": ("pointwise", "transpose_2d", (3, 4), [randn(rows, cols), torch.empty(cols, rows),
                         rows, cols], {"BLOCK_M": 16, "BLOCK_N": 32}, 0.0),
        "transpose_flat": ("pointwise", "transpose_flat", (math.ceil(rows * cols / 256),),
                           [randn(rows, cols), torch.empty(cols, rows), rows * cols, rows, cols],
                           {"XBLOCK": 256}, 0.0),
        "embedding": ("pointwise", "embedding", (math.ceil(50 * 16 / 128),),
                      [torch.randint(0, 64, (50,), generator=g), randn(64, 16), torch.empty(50, 16), 50 * 16],
                      {"DIM": 16, "XBLOCK": 128}, 0.0),
        "softmax": ("reductions", "softmax", (8,), [torch.empty(rows, cols), randn(rows, cols), cols, cols,
                    rows, cols], {"BLOCK": 128}, 1e-6),
        "row_sum": ("reductions", "row_sum", (4,), [randn(rows, cols), torch.empty(rows), rows, cols],
                    {"XBLOCK": 8, "R0_BLOCK": 32}, 1e-5),
        "softmax_inductor": ("reductions", "row_max_softmax_inductor", (math.ceil(rows / 4),),
                             [randn(rows, cols), torch.empty(rows, cols), rows, cols],
                             {"XBLOCK": 4, "R0_BLOCK": 128}, 1e-6),
        "layernorm_welford": ("reductions", "layernorm_welford", (math.ceil(rows / 4),),
                              [torch.empty(rows), randn(rows, cols), randn(cols), randn(cols),
                               torch.empty(rows, cols), rows, cols], {"XBLOCK": 4, "R0_BLOCK": 32}, 1e-5),
    }
    return {k: dict(module=m, kernel=kn, grid=gr, args=a, constexprs=c, atol=t)
            for k, (m, kn, gr, a, c, t) in cases.items()}


CASES = _cases()
MODULES = {"pointwise": pointwise, "reductions": reductions, "planted": planted}


def _bits(tensor: torch.Tensor) -> torch.Tensor:
    integer = {2: torch.int16, 4: torch.int32, 8: torch.int64}.get(tensor.element_size())
    return tensor.view(integer) if tensor.is_floating_point() and integer else tensor


@pytest.fixture(scope="session")
def reference() -> dict:
    names = list(CASES)
    cases = [{k: v for k, v in CASES[n].items() if k != "atol"} for n in names]
    for c in cases:
        c["args"] = [a.clone() if isinstance(a, torch.Tensor) else a for a in c["args"]]
    return dict(zip(names, run_reference(cases)))


@pytest.mark.parametrize("name", list(CASES))
def test_matches_interpreter(name: str, reference: dict) -> None:
    case = CASES[name]
    args = [a.clone() if isinstance(a, torch.Tensor) else a for a in case["args"]]
    kernel = getattr(MODULES[case["module"]], case["kernel"])
    report = emu.emulate(kernel, case["grid"], *args, **case["constexprs"])
    assert report.ok, report.findings
    assert not [f for f in report.findings if f.kind == "unsupported"]
    got = [a for a in args if isinstance(a, torch.Tensor)]
    for mine, ref in zip(got, reference[name]):
        if case["atol"] == 0.0:  # bit for bit: the signs of zeros count
            assert torch.equal(_bits(mine), _bits(ref)), (name, (mine.float() - ref.float()).abs().max())
        else:
            torch.testing.assert_close(mine, ref, atol=case["atol"], rtol=case["atol"])


def test_narrow_casts_round_to_nearest_even() -> None:
    # Compared with torch, not the interpreter: Triton's CPU interpreter truncates fp32 ->
    # bf16, while the GPU (cvt.rn) and torch round to nearest even.
    g = torch.Generator().manual_seed(1)
    n = 3000
    x = torch.randn(n, generator=g) * 3
    x[:4] = torch.tensor([1.0009765625 * 1.5, 65519.0, 70000.0, 1e-7])  # ties, overflow, subnormal
    o16, obf = torch.empty(n, dtype=torch.float16), torch.empty(n, dtype=torch.bfloat16)
    oint = torch.empty(n, dtype=torch.int64)
    report = emu.emulate(pointwise.narrow_casts, (math.ceil(n / 512),), x, o16, obf, oint, n, XBLOCK=512)
    assert report.ok
    h = x.to(torch.float16)
    assert torch.equal(o16, h * h + h)
    assert torch.equal(obf, (x * 3).to(torch.bfloat16))
    assert torch.equal(oint, (x * 100).to(torch.int64))


def test_bitcasts_reinterpret_the_bits_at_every_width() -> None:
    g = torch.Generator().manual_seed(2)
    n = 1000
    f32, f64 = torch.randn(n, generator=g), torch.randn(n, generator=g, dtype=torch.float64)
    f16, bf16 = (torch.randn(n, generator=g).to(t) for t in (torch.float16, torch.bfloat16))
    f16[:3] = torch.tensor([float("inf"), -0.0, 6e-8])  # infinity, negative zero, subnormal
    outs = [torch.empty(n, dtype=t) for t in (torch.int32, torch.int16, torch.int16,
                                                torch.int64, torch.float32)]
    report = emu.emulate(pointwise.bitcasts, (math.ceil(n / 256),), f32, f16, bf16, f64, *outs, n,
                         XBLOCK=256)
    assert report.ok, report.findings
    i32, i16, j16, i64, back = outs
    assert torch.equal(i32, f32.view(torch.int32) ^ 1)
    assert torch.equal(back.view(torch.int32), f32.view(torch.int32) + 1)
    assert torch.equal(i16, f16.view(torch.int16)) and torch.equal(j16, bf16.view(torch.int16))
    assert torch.equal(i64, f64.view(torch.int64))


def test_a_bitcast_between_widths_is_refused_by_name() -> None:
    x = torch.randn(64)
    with pytest.raises(emu.EmulationError, match="bitcast of fp32 to int16"):
        emu.emulate(pointwise.bitcast_to_narrower, (1,), x, torch.empty(64, dtype=torch.int16),
                    64, XBLOCK=64)


def test_float_remainder_is_fmod() -> None:
    x = torch.linspace(-10, 10, 301)
    out = torch.empty_like(x)
    report = emu.emulate(pointwise.float_mod, (3,), x, out, x.numel(), XBLOCK=128)
    assert report.ok, report.findings
    torch.testing.assert_close(out, torch.fmod(x, 3.0), rtol=0, atol=1e-6)


def test_random_numbers_are_tritons_philox_bit_for_bit() -> None:
    """tl.randint, tl.rand and randint4x (int64 offsets past 2**32 too) give the reference's
    bits for the same seed and offsets (Triton's interpreter here, the GPU on a GPU
    machine); tl.randn's Box-Muller goes through libdevice's log and cos there, so it is
    compared to within float32 rounding."""
    from triton_kernels import random_numbers
    n, seed = 3000, 20261206
    draws = [seed, torch.empty(n, dtype=torch.int32), torch.empty(n), torch.empty(n), n]
    words = [-7, torch.empty(4 * n, dtype=torch.int32), n, 3 << 32]
    cases = [dict(module="random_numbers", kernel="draws", grid=(math.ceil(n / 256),),
                  args=draws, constexprs={"XBLOCK": 256}),
             dict(module="random_numbers", kernel="four_words_at_wide_offsets",
                  grid=(math.ceil(n / 512),), args=words, constexprs={"XBLOCK": 512})]
    expected = run_reference([{**c, "args": [a.clone() if isinstance(a, torch.Tensor) else a
                                             for a in c["args"]]} for c in cases])
    for case, reference in zip(cases, expected):
        report = emu.emulate(getattr(random_numbers, case["kernel"]), case["grid"], *case["args"],
                             **case["constexprs"])
        assert report.ok, report.findings
        got = [a for a in case["args"] if isinstance(a, torch.Tensor)]
        if case["kernel"] == "draws":
            ints, uniforms, normals = got
            assert torch.equal(ints, reference[0]) and torch.equal(_bits(uniforms), _bits(reference[1]))
            assert 0 <= uniforms.min() and uniforms.max() < 1 and len(ints.unique()) == n
            torch.testing.assert_close(normals, reference[2], rtol=2e-6, atol=2e-6)
        else:
            assert torch.equal(got[0], reference[0])


def test_reshapes_regroup_a_block_in_row_major_order() -> None:
    """tl.reshape to shapes that are not the source's plus or minus unit axes (sizes from
    compile-time `**` and a slice of `.shape`), and an inlined helper whose default names a
    global of its own module; against Triton's interpreter (the GPU on a GPU machine)."""
    x = torch.randn(8, 32)
    case = dict(module="pointwise", kernel="reshaped_sums", grid=(1,),
                args=[x, torch.empty(16), torch.empty(8, 16)], constexprs=dict(R=8, C=32, LOG=4))
    (reference,) = run_reference([case])
    rows, pairs = torch.empty(16), torch.empty(8, 16)
    report = emu.emulate(pointwise.reshaped_sums, (1,), x, rows, pairs, R=8, C=32, LOG=4)
    assert report.ok, report.findings
    torch.testing.assert_close(rows, x.reshape(16, 16).sum(1) * 0.5)
    torch.testing.assert_close(pairs, x.reshape(8, 16, 2).sum(2))
    torch.testing.assert_close(rows, reference[1])
    torch.testing.assert_close(pairs, reference[2])


def test_sorts_and_permutations_give_the_references_blocks() -> None:
    """tl.sort both ways (ties included), topk, flip along each axis, gather along rows and a
    masked histogram with values outside its bins: the same blocks as Triton's interpreter
    (the GPU on a GPU machine) and as torch."""
    R, C, K, BINS = 4, 16, 4, 8
    g = torch.Generator().manual_seed(5)
    x = torch.randint(-20, 20, (R, C), generator=g).float()  # repeated values: ties
    index = torch.randint(0, C, (R, C), generator=g, dtype=torch.int32)
    values = torch.randint(-2, BINS + 2, (C,), generator=g, dtype=torch.int32)
    outputs = [torch.empty(R, C), torch.empty(R, C), torch.empty(R, K), torch.empty(R, C),
               torch.empty(R, C), torch.empty(R, C), torch.empty(BINS, dtype=torch.int32)]
    case = dict(module="permutations", kernel="permutations", grid=(1,),
                args=[x, index, values, *outputs], constexprs=dict(R=R, C=C, K=K, BINS=BINS))
    (reference,) = run_reference([case])
    from triton_kernels import permutations
    report = emu.emulate(permutations.permutations, (1,), x, index, values, *outputs,
                         R=R, C=C, K=K, BINS=BINS)
    assert report.ok, report.findings
    kept = values[:-1]
    expected = [x.sort(1).values, x.sort(1, descending=True).values, x.topk(K, 1).values,
                x.flip(0), x.flip(1), x.gather(1, index.long()),
                torch.bincount(kept[(kept >= 0) & (kept < BINS)], minlength=BINS).int()]
    for got, want, ref in zip(outputs, expected, reference[3:]):
        assert torch.equal(got, want) and torch.equal(got, ref)


def test_a_sort_puts_nan_above_every_number() -> None:
    from triton_kernels import permutations
    R, C = 4, 16
    x = torch.randn(R, C)
    x[0, 3] = x[2, 0] = x[2, 9] = float("nan")
    outputs = [torch.empty(R, C), torch.empty(R, C), torch.empty(R, 4), torch.empty(R, C),
               torch.empty(R, C), torch.empty(R, C), torch.empty(8, dtype=torch.int32)]
    index = torch.zeros(R, C, dtype=torch.int32)
    emu.emulate(permutations.permutations, (1,), x, index, torch.zeros(C, dtype=torch.int32),
                *outputs, R=R, C=C, K=4, BINS=8)
    torch.testing.assert_close(outputs[0], x.sort(1).values, equal_nan=True)
    torch.testing.assert_close(outputs[1], x.sort(1, descending=True).values, equal_nan=True)


def test_kernels_that_differ_only_in_names_and_sizes_share_one_compiled_module() -> None:
    """Inductor writes a kernel's sizes into its body and names each kernel anew: two such
    kernels are one structure, emulated by one generated module (one JIT compile), and each
    still computes with its own sizes."""
    from gxusim.emulator import module_cache
    before = set(module_cache._modules)
    for kernel, n, period in ((pointwise.triton_poi_fused_scale_bias_3, 1000, 250),
                              (pointwise.triton_poi_fused_scale_bias_7, 1100, 275)):
        x, bias, out = torch.randn(n), torch.randn(period), torch.full((n,), math.nan)
        report = emu.emulate(kernel, (4,), x, bias, out, n, XBLOCK=128)
        assert report.ok, report.findings
        torch.testing.assert_close(out, x * 2.625 + bias.repeat(n // period))
    assert len(set(module_cache._modules) - before) == 1
