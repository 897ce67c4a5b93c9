"""Runtime helpers against their exact definitions: the float32 tanh (the fast estimate
where it is sure, the exact value always) bit for bit, on a dense sample of float32 bit
patterns and the edge cases (all 2**32 inputs were checked the same way once; that takes
minutes), a kernel whose dense loop is unsure of some lanes and runs again exactly, and the
launch of a grid's programs over threads."""
from __future__ import annotations

import threading

import numpy as np
import pytest
import torch
import triton
import triton.language as tl
from numba import njit, prange
from triton.language.extra import libdevice

import gxusim.emulator as emu
from gxusim.emulator import execution
from gxusim.emulator.runtime import _bits_f32, _f32_bits, _tanh_f32, _tanh_f64, _tanh_fast, _tanh_unsure


@njit(parallel=True)
def check_tanh(patterns):
    """Per bit pattern: 1 if `_tanh_f32` differs from float32(`_tanh_f64`), 2 if
    `_tanh_fast` does where `_tanh_unsure` is false; and whether it is unsure."""
    wrong = np.zeros(patterns.size, np.int8)
    unsure = np.zeros(patterns.size, np.bool_)
    for k in prange(patterns.size):
        x = _bits_f32(np.uint32(patterns[k]))
        exact = _f32_bits(np.float32(_tanh_f64(x)))
        unsure[k] = _tanh_unsure(x)
        fast_wrong = not unsure[k] and _f32_bits(_tanh_fast(x)) != exact
        wrong[k] = (_f32_bits(_tanh_f32(x)) != exact) + 2 * fast_wrong
    return wrong, unsure


def test_float32_tanh_is_exact() -> None:
    rng = np.random.default_rng(0)
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1.17549435e-38, 1e-3, 0.0625,
                         0.0624999, 9.0, 9.02, 10.0, 10.5, 3.4e38], np.float32).view(np.uint32)
    # every pattern of a slice of each binade where the estimate changes method, plus random ones
    around = np.concatenate([np.arange(b - 2 ** 16, b + 2 ** 16, dtype=np.int64)
                             for b in np.array([0.0625, 1.0, 9.0, 1e-3], np.float32).view(np.uint32)])
    patterns = np.concatenate([specials, around, rng.integers(0, 2 ** 32, 2 ** 22)]).astype(np.int64)
    patterns = np.concatenate([patterns, patterns | 0x80000000])  # both signs
    wrong, unsure = check_tanh(patterns)
    assert not wrong.any(), patterns[wrong != 0][:8]
    numbers = ~np.isnan(patterns.astype(np.uint32).view(np.float32))
    assert unsure[numbers].mean() < 1e-4  # the estimate decides nearly everywhere (NaN: never)


@triton.jit
def tanh_kernel(in_ptr0, out_ptr0, n, XBLOCK: tl.constexpr):
    i = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    m = i < n
    tl.store(out_ptr0 + i, libdevice.tanh(tl.load(in_ptr0 + i, m)), m)


@njit
def exact_tanh(x):
    out = np.empty_like(x)
    for k in range(x.size):
        out[k] = np.float32(_tanh_f64(x[k]))
    return out


def test_unsure_lanes_rerun_exactly() -> None:
    rng = np.random.default_rng(1)
    candidates = rng.integers(0x3c000000, 0x40800000, 2 ** 22).astype(np.int64)
    wrong, unsure = check_tanh(candidates)
    x = (rng.standard_normal(8 * 1024) * 3).astype(np.float32)
    x[[5, 1500, 4100]] = candidates[unsure][:3].astype(np.uint32).view(np.float32)  # 3 of 8 tiles
    x[7000] = np.nan
    out = torch.empty(x.size)
    report = emu.emulate(tanh_kernel, (8,), torch.from_numpy(x), out, x.size, XBLOCK=1024)
    assert report.ok and not report.findings
    assert np.array_equal(out.numpy().view(np.uint32), exact_tanh(x).view(np.uint32))


@pytest.mark.parametrize("threads", [1, 3, 7])
def test_launch_runs_each_program_once_with_its_ids_and_its_threads_values(threads: int) -> None:
    """`execution.launch` splits a (4, 3, 2) grid into contiguous shares, one per thread:
    every program runs once, with its pids decomposed x-fastest and the grid beside them,
    and with the values of the thread whose share it is."""
    grid = (4, 3, 2)
    ran: list[tuple] = []
    lock = threading.Lock()

    def program(p, pid0, pid1, pid2, np0, np1, np2, rows):  # noqa: ANN001, ANN202
        with lock:
            ran.append((p, (pid0, pid1, pid2), (np0, np1, np2), rows))

    per_thread = [[f"rows of thread {c}"] for c in range(threads)]
    execution.launch(program, grid, per_thread)
    assert sorted(p for p, *_ in ran) == list(range(24))
    for p, pids, sizes, rows in ran:
        assert pids == (p % 4, (p // 4) % 3, p // 12) and sizes == grid
        share = next(c for c in range(threads) if c * 24 // threads <= p < (c + 1) * 24 // threads)
        assert rows == f"rows of thread {share}"
