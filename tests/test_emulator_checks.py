"""Planted-bug suite: each tiling mistake is caught with the right kind and location, and
the corrected kernel reports nothing at error level. Also occupancy, modes and targets."""
from __future__ import annotations

import os
import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch
import triton
import triton.language as tl

import gxusim
import gxusim.emulator as emu
from gxusim.emulator.occupancy import blocked_layout
from triton_kernels import planted

XBLOCK = 128


def _run(kernel, grid, *args, compiler_generated=False, num_warps=4, spec="gxu", **kw):
    return emu.run_launch(kernel, grid, args, num_warps=num_warps, constexprs={"XBLOCK": XBLOCK, **kw},
                          compiler_generated=compiler_generated, spec=spec)


def _only(report, kind):
    found = [f for f in report.findings if f.kind == kind]
    assert len(found) >= 1, report.findings
    return found


@pytest.fixture(autouse=True)
def _warn_mode(monkeypatch):
    monkeypatch.setenv("GXUSIM_CHECKS", "warn")
    warnings.simplefilter("ignore", RuntimeWarning)


def test_missing_tail_mask_is_out_of_bounds_and_guarded() -> None:
    n = 1000  # 8 tiles of 128, the last one 24 elements short
    x = torch.randn(n)
    out = torch.full((n,), 7.0)
    report = _run(planted.missing_tail_mask, (8,), x, out, n)
    oob = _only(report, "out_of_bounds")
    assert [(f.program, f.buffer, f.offset) for f in oob] == [(7, "in_ptr0", 1000), (7, "out_ptr0", 1000)]
    assert "24 lane(s) in 1 program(s)" in oob[0].message and "tl.load" in oob[0].message
    assert torch.equal(out, x.relu())  # in-bounds lanes ran, bad lanes touched nothing
    fixed = _run(planted.masked_chunked, (8,), x, torch.empty(n), n, compiler_generated=True)
    assert fixed.ok and not fixed.errors


def test_gridstride_off_by_one_leaves_tile_uncovered() -> None:
    n = 1000
    x, out = torch.randn(n), torch.zeros(n)
    report = _run(planted.gridstride_off_by_one, (4,), x, out, n, compiler_generated=True)
    (f,) = _only(report, "uncovered")
    assert (f.severity, f.buffer, f.offset) == ("error", "out_ptr0", 0)
    assert "128 of 1000" in f.message
    hand = _run(planted.gridstride_off_by_one, (4,), x, out, n)
    (w,) = _only(hand, "uncovered")
    assert w.severity == "warning" and hand.ok


def test_gridstride_short_step_is_write_conflict() -> None:
    n = 1000  # tiles 0..7 over 4 programs stepping by 3: programs 0 and 3 both write tile 3
    report = _run(planted.gridstride_short_step, (4,), torch.randn(n), torch.empty(n), n)
    (f,) = _only(report, "write_conflict")
    assert (f.program, f.buffer, f.offset) == (3, "out_ptr0", 3 * XBLOCK)
    assert "programs 0 and 3" in f.message
    assert not report.ok


def test_two_programs_on_one_tile() -> None:
    n = 8 * XBLOCK
    report = _run(planted.two_programs_one_tile, (8,), torch.randn(n), torch.empty(n), n,
                  compiler_generated=True)
    (c,) = _only(report, "write_conflict")
    assert (c.program, c.buffer, c.offset) == (5, "out_ptr0", 4 * XBLOCK)
    (u,) = _only(report, "uncovered")
    assert (u.buffer, u.offset) == ("out_ptr0", 5 * XBLOCK)
    fixed = _run(planted.one_tile_per_program, (8,), torch.randn(n), torch.empty(n), n,
                 compiler_generated=True)
    assert fixed.ok and not fixed.findings


def test_skipped_tile_is_uncovered() -> None:
    n = 8 * XBLOCK  # 4 programs x 2 tiles; each skips its second
    report = _run(planted.skipped_tile, (4,), torch.randn(n), torch.empty(n), n, compiler_generated=True)
    (f,) = _only(report, "uncovered")
    assert (f.buffer, f.offset) == ("out_ptr0", XBLOCK)
    assert f"{4 * XBLOCK} of {n}" in f.message


def test_grid_and_warp_caps_are_reported_and_kernel_still_runs() -> None:
    n = 64 * XBLOCK
    x, out = torch.randn(n), torch.empty(n)
    report = _run(planted.one_tile_per_program, (64,), x, out, n)
    (g,) = _only(report, "grid_cap")
    assert "64" in g.message and "max_grid = 32" in g.message
    assert torch.equal(out, x.relu())
    report = _run(planted.one_tile_per_program, (64,), x, out, n, num_warps=32)
    assert {f.kind for f in report.errors} == {"grid_cap", "warp_cap"}
    assert not _run(planted.one_tile_per_program, (64,), x, out, n, spec="h200").findings


def test_reading_another_programs_output_is_a_race() -> None:
    n = 4 * XBLOCK
    buf = torch.randn(n)
    report = _run(planted.reads_neighbour_output, (4,), buf, n)
    (f,) = _only(report, "read_write_race")
    assert (f.program, f.buffer, f.offset) == (0, "in_out_ptr0", XBLOCK)
    assert "program 1 stores" in f.message
    buf = torch.randn(n)
    expected = buf.relu()
    fixed = _run(planted.inplace_relu, (4,), buf, n, compiler_generated=True)
    assert fixed.ok and not fixed.findings and torch.equal(buf, expected)


def test_tiles_per_program_and_load_imbalance() -> None:
    from triton_kernels import pointwise
    n = 40 * XBLOCK
    args = (torch.randn(n), torch.randn(n), torch.empty(n), n)
    chunked = _run(pointwise.add_relu_chunked, (32,), *args)
    assert chunked.tiles_per_program == [2] * 32  # cdiv(40, 32) iterations each
    stride = _run(pointwise.add_relu_gridstride, (32,), *args)
    assert stride.tiles_per_program == [2] * 8 + [1] * 24
    assert not [f for f in stride.findings if f.kind == "load_imbalance"]
    n = 16 * XBLOCK
    uneven = _run(planted.uneven_chunks, (4,), torch.randn(n), torch.empty(n), n, compiler_generated=True)
    assert uneven.tiles_per_program == [8, 3, 3, 2]
    (f,) = _only(uneven, "load_imbalance")
    assert f.severity == "warning" and f.program == 0 and uneven.ok


def test_unsupported_construct_is_named_with_its_line(monkeypatch) -> None:
    monkeypatch.setenv("GXUSIM_CHECKS", "raise")
    out = torch.zeros(XBLOCK)
    with pytest.raises(emu.EmulationError) as info:
        _run(planted.uses_bessel, (1,), torch.randn(XBLOCK), out)
    (f,) = info.value.report.findings
    assert f.kind == "unsupported" and "math function j0" in f.message
    assert "libdevice.j0(tl.load" in f.message
    assert torch.equal(out, torch.zeros(XBLOCK))  # nothing ran


def test_check_modes(monkeypatch) -> None:
    n = 1000
    args = (torch.randn(n), torch.empty(n), n)
    monkeypatch.setenv("GXUSIM_CHECKS", "raise")
    with pytest.raises(emu.EmulationError) as info:
        _run(planted.gridstride_short_step, (4,), *args)
    assert info.value.report.errors[0].kind == "write_conflict"
    monkeypatch.setenv("GXUSIM_CHECKS", "warn")
    with pytest.warns(RuntimeWarning, match="write_conflict"):
        _run(planted.gridstride_short_step, (4,), *args)
    monkeypatch.setenv("GXUSIM_CHECKS", "off")
    report = _run(planted.gridstride_short_step, (4,), *args)
    assert report.ok and not report.findings


def test_occupancy_on_gxu_spec() -> None:
    n = 32 * 1024
    args = (torch.randn(n), torch.empty(n), n)
    report = emu.run_launch(planted.masked_chunked, (32,), args, num_warps=16, constexprs={"XBLOCK": 1024},
                            spec="gxu")
    occ = report.occupancy
    assert (occ.blocks_per_sm, occ.warps_per_sm, occ.limiter) == (2, 32, "max_blocks_per_sm")
    assert occ.waves == 1 and occ.threads_per_block == 512
    spec = gxusim.load_spec("gxu").replace(regs_per_sm=8192)  # one 128-thread block of 64 regs
    report = emu.run_launch(planted.masked_chunked, (32,), args, num_warps=4, constexprs={"XBLOCK": 1024},
                            spec=spec, n_regs=64)
    assert (report.occupancy.blocks_per_sm, report.occupancy.limiter) == (1, "registers")
    assert report.occupancy.waves == 2
    small = emu.run_launch(planted.masked_chunked, (32,), args, num_warps=4, constexprs={"XBLOCK": 64},
                           spec="gxu")
    assert small.occupancy.idle_lane_fraction == pytest.approx(0.5)
    assert report.predicted_s > gxusim.load_spec("gxu").launch_overhead_s


def test_blocked_layout_and_coalescing() -> None:
    lay = blocked_layout((1024,), 4, 32, 4)
    assert (lay.size_per_thread, lay.threads_per_warp, lay.warps_per_cta) == ((4,), (32,), (4,))
    lay2 = blocked_layout((16, 64), 4, 32, 4)
    assert lay2.threads_per_warp == (2, 16) and lay2.warps_per_cta == (4, 1)
    from triton_kernels import pointwise
    rows, cols = 64, 64
    report = emu.run_launch(pointwise.transpose_2d, (2, 2), (torch.randn(rows, cols), torch.empty(cols, rows),
                            rows, cols), constexprs={"BLOCK_M": 32, "BLOCK_N": 32}, spec="gxu")
    eff = list(report.coalescing.values())
    # row-major load is fully coalesced; the transposed store puts each warp's 4 rows x 32
    # columns into 32 sectors of which 16 bytes are used
    assert eff == [pytest.approx(1.0), pytest.approx(0.5)]


def test_a_sampled_tile_that_takes_the_dense_loop_records_its_consecutive_offsets() -> None:
    """Program 0's first tile is the sampled one; a whole in-bounds tile takes the dense
    loop, which records its lanes' offsets after it: consecutive, so each contiguous
    access is fully coalesced, as the general loop's sample says of it."""
    from triton_kernels import pointwise
    n = 64 * 1024
    report = emu.run_launch(pointwise.add_relu_gridstride, (8,),
                            (torch.randn(n), torch.randn(n), torch.empty(n), n),
                            constexprs={"XBLOCK": 1024}, spec="gxu")
    assert list(report.coalescing.values()) == [pytest.approx(1.0)] * 3


def test_coalescing_memo_tells_samples_apart() -> None:
    """Samples that share a memo entry only when their offsets and masks are the same: even
    progressions (keyed by first offset and step) and any other sample (keyed by a digest),
    each efficiency as counting sectors afresh gives it, asked twice in turns."""
    from gxusim.emulator import occupancy
    spec = gxusim.load_spec("gxu")
    lanes = np.arange(1024, dtype=np.int64)
    every, half = np.ones(1024, bool), np.arange(1024) % 2 == 0
    samples = [(lanes, every), (2 * lanes, every), (lanes + 3, every), (lanes, half),
               (lanes[::-1].copy(), every), (np.random.default_rng(0).permutation(lanes), every)]
    expected = [occupancy._count_sector_efficiency(o, m, (1024,), 0, 4, 4, spec.warp_size,
                                                   spec.vector_bytes, spec.sector_bytes)
                for o, m in samples]
    assert expected[1] == pytest.approx(0.5) and expected[5] < 0.5  # the samples differ
    for _ in range(2):
        assert [occupancy.sector_efficiency(o, m, (1024,), 0, 4, 4, spec) for o, m in samples] \
            == expected


@pytest.mark.skipif(gxusim.current_target() != "emulator", reason="gxu memory is host memory only on the "
                    "emulator target")
def test_gxu_tensors_are_written_in_place() -> None:
    from triton_kernels import pointwise
    n = 3000
    x, y = torch.randn(n), torch.randn(n)
    out = torch.empty(n, device="gxu")
    report = emu.emulate(pointwise.add_relu_chunked, (32,), x.to("gxu"), y.to("gxu"), out, n, XBLOCK=128)
    assert report.ok
    assert torch.equal(out.cpu(), (x + y).relu())


def test_second_process_uses_the_disk_cache(tmp_path) -> None:
    script = (
        "import sys, torch; sys.path.insert(0, %r)\n"
        "import gxusim.emulator as emu\n"
        "from triton_kernels import planted\n"
        "n = 999\n"
        "r = emu.emulate(planted.masked_chunked, (4,), torch.randn(n), torch.empty(n), n, XBLOCK=32)\n"
        "print(r.jit_s)\n" % os.path.dirname(__file__))
    # numba keeps its machine code next to the module (a NUMBA_CACHE_DIR would move it)
    env = {**{k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"},
           "GXUSIM_CACHE_DIR": str(tmp_path)}

    def run_and_list_cache() -> dict[str, int]:
        subprocess.run([sys.executable, "-c", script], env=env, check=True, capture_output=True)
        return {str(path): path.stat().st_mtime_ns for path in tmp_path.rglob("*") if path.is_file()}
    first = run_and_list_cache()
    assert list(tmp_path.glob("emulator/k_*.py"))
    assert [path for path in first if path.endswith(".nbc")], "numba saved no machine code"
    # A second process that compiled again would rewrite the module and numba's index and
    # machine code; one served from the cache only reads them (a timing would be noisy).
    assert run_and_list_cache() == first


def test_callable_grid_and_cli(capsys) -> None:
    from triton_kernels import pointwise
    n = 1000
    x, y, out = torch.randn(n), torch.randn(n), torch.empty(n)
    report = emu.emulate(pointwise.add_relu_chunked, lambda meta: (triton_cdiv(meta["xnumel"], meta["XBLOCK"]),),
                         x, y, out, n, XBLOCK=128)
    assert report.grid == (8, 1, 1) and torch.equal(out, (x + y).relu())
    path = os.path.join(os.path.dirname(__file__), "triton_kernels", "planted.py")
    status = emu.cli_main([f"{path}::gridstride_short_step", "--grid", "4", "--arg", "x=float32[1000]",
                           "--arg", "o=float32[1000]", "--arg", "n=1000", "--const", "XBLOCK=128",
                           "--spec", "gxu"])
    text = capsys.readouterr().out
    assert status == 1 and "write_conflict" in text and "occupancy" in text


def triton_cdiv(a: int, b: int) -> int:
    return -(-a // b)


@triton.jit
def _reads_in_out_only(in_out_ptr0, out_ptr0, n, XBLOCK: tl.constexpr):
    for tile in range(tl.program_id(0), tl.cdiv(n, XBLOCK), tl.num_programs(0)):
        index = tile * XBLOCK + tl.arange(0, XBLOCK)
        mask = index < n
        tl.store(out_ptr0 + index, tl.load(in_out_ptr0 + index, mask) * 2, mask)


def test_an_in_out_buffer_the_kernel_never_stores_to_is_not_uncovered() -> None:
    # Inductor keeps the in_out_ptr name for a buffer reused in place even when the fused
    # kernel has nothing to store there (seen in resnet18's batchnorm backward).
    n = 1000
    x, out = torch.randn(n), torch.empty(n)
    report = emu.run_launch(_reads_in_out_only, (8,), [x, out, n], constexprs={"XBLOCK": 64},
                            compiler_generated=True)
    assert report.ok and not [f for f in report.findings if f.kind == "uncovered"]
    assert torch.equal(out, x * 2)
