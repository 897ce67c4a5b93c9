"""Access tracking against a brute-force reference: scatters and in-place gathers whose
index patterns exercise every tracking path (interval logs, a run breaking into element
rows, a full log, overlapping intervals merged element by element, holes, duplicates),
and tiles at computed offsets that take the dense loop where they can, on one thread and
on several; conflict, race and coverage findings must match exactly."""
from __future__ import annotations

import warnings

import numba
import numpy as np
import pytest
import torch
import triton
import triton.language as tl

import gxusim.emulator as emu
from gxusim.emulator import execution
from gxusim.emulator.emitter import DENSE_MIN_LANES

PROGRAMS = 6


@triton.jit
def scatter(dst_ptr, out_ptr0, n, XBLOCK: tl.constexpr):
    pid = tl.program_id(0)
    for tile in range(pid, tl.cdiv(n, XBLOCK), tl.num_programs(0)):
        i = tile * XBLOCK + tl.arange(0, XBLOCK)
        m = i < n
        d = tl.load(dst_ptr + i, m, other=-1)
        tl.store(out_ptr0 + d, i.to(tl.float32), m & (d >= 0))


@triton.jit
def gather_scatter_inplace(src_ptr, dst_ptr, in_out_ptr0, n, XBLOCK: tl.constexpr):
    pid = tl.program_id(0)
    for tile in range(pid, tl.cdiv(n, XBLOCK), tl.num_programs(0)):
        i = tile * XBLOCK + tl.arange(0, XBLOCK)
        m = i < n
        s = tl.load(src_ptr + i, m, other=-1)
        d = tl.load(dst_ptr + i, m, other=-1)
        v = tl.load(in_out_ptr0 + s, m & (s >= 0), other=0.0)
        tl.store(in_out_ptr0 + d, v + 1.0, m & (d >= 0))


@triton.jit
def stepped_tiles(out_ptr0, n, step, width, XBLOCK: tl.constexpr):
    # tile t covers [t * step, t * step + width): dense where whole and inside, else general
    pid = tl.program_id(0)
    for tile in range(pid, tl.cdiv(n, step), tl.num_programs(0)):
        lane = tl.arange(0, XBLOCK)
        idx = tile * step + lane
        tl.store(out_ptr0 + idx, lane.to(tl.float32), (lane < width) & (idx < n))


def _programs_per_element(index: np.ndarray, size: int, block: int) -> list[list[int]]:
    """Sorted distinct programs touching each element (tile t runs in program t % PROGRAMS)."""
    touched: list[set] = [set() for _ in range(size)]
    for i, e in enumerate(index):
        if e >= 0:
            touched[e].add((i // block) % PROGRAMS)
    return [sorted(s) for s in touched]


def _expected(writers: list, readers: list) -> dict:
    """The findings' facts as the exact merge defines them (two lowest programs per element)."""
    conflicts = [(e, w[0], w[1]) for e, w in enumerate(writers) if len(w) > 1]
    races = []
    for e, (w, r) in enumerate(zip(writers, readers)):
        if not w or not r:
            continue
        if len(w) > 1:
            races.append((e, r[0], w[1] if r[0] == w[0] else w[0]))
        elif r[0] != w[0]:
            races.append((e, r[0], w[0]))
        elif len(r) > 1:
            races.append((e, r[1], w[0]))
    missing = [e for e, w in enumerate(writers) if not w]
    out = {}
    if conflicts:
        e, first, second = conflicts[0]
        out["write_conflict"] = (second, e, f"programs {first} and {second}", f"; {len(conflicts)} element")
    if races:
        e, reader, writer = races[0]
        out["read_write_race"] = (reader, e, f"program {writer} stores", f"; {len(races)} element")
    if missing:
        out["uncovered"] = (None, missing[0], f"{len(missing)} of {len(writers)}", "")
    return out


def _found(report) -> dict:
    kinds = ("write_conflict", "read_write_race", "uncovered")
    return {f.kind: f for f in report.findings if f.kind in kinds}


def _assert_matches(report, expected: dict) -> None:
    found = _found(report)
    assert set(found) == set(expected), report.findings
    for kind, (program, offset, *texts) in expected.items():
        f = found[kind]
        assert (f.program, f.offset) == (program, offset), (kind, f)
        for text in texts:
            assert text in f.message, (kind, f.message)


def _patterns(n: int, block: int, rng: np.random.Generator) -> dict:
    tiles = np.arange(n)
    holes = tiles.copy()
    holes[(tiles % block) >= block - 3] = -1  # every tile's tail masked off
    holes[5 * block + 2] = -1  # and one hole inside a run
    shifted = tiles - 2 * (tiles // block)  # consecutive runs, neighbours overlapping
    mixed = tiles.copy()
    tail = slice(n // 2, n)
    mixed[tail] = rng.permutation(mixed[tail])
    return {
        "tiles": (tiles, n),
        "tail_holes": (holes, n),
        "permuted": (rng.permutation(n), n),
        "reversed": (n - 1 - tiles, n),
        "overlapping_runs": (shifted, n),
        "intervals_then_elements": (mixed, n),
        "duplicates": (rng.integers(0, n // 2, n), n // 2),
        "one_conflict": (np.where(tiles == 7 * block + 1, 2 * block, tiles), n),
    }


@pytest.fixture(autouse=True)
def _warn_mode(monkeypatch):
    monkeypatch.setenv("GXUSIM_CHECKS", "warn")
    warnings.simplefilter("ignore", RuntimeWarning)


@pytest.fixture(params=[1, 2], ids=["1thread", "2threads"])
def threads(request, monkeypatch):
    if request.param > numba.config.NUMBA_NUM_THREADS:
        pytest.skip("numba has fewer threads")
    # launches this small run serial unless told otherwise: here they take every thread
    monkeypatch.setattr(execution, "SERIAL_BELOW_ELEMENTS", 0)
    before = numba.get_num_threads()
    numba.set_num_threads(request.param)
    yield request.param
    numba.set_num_threads(before)


@pytest.mark.parametrize("block,n", [(32, 1000), (2, 1200)], ids=["runs", "full_log"])
def test_scatter_findings_match_reference(threads, block: int, n: int) -> None:
    rng = np.random.default_rng(0)
    for name, (dst, size) in _patterns(n, block, rng).items():
        out = torch.full((size,), -5.0)
        report = emu.run_launch(scatter, (PROGRAMS,), (torch.from_numpy(dst.astype(np.int32)), out, n),
                                constexprs={"XBLOCK": block}, compiler_generated=True, spec="h200")
        writers = _programs_per_element(dst, size, block)
        _assert_matches(report, _expected(writers, [[] for _ in writers]))
        if "write_conflict" not in _found(report):
            stored = dst >= 0
            assert torch.equal(out[dst[stored]], torch.arange(n, dtype=torch.float32)[stored]), name


@pytest.mark.parametrize("block,n", [(32, 1000), (2, 1200)], ids=["runs", "full_log"])
def test_inplace_races_match_reference(threads, block: int, n: int) -> None:
    n -= n % (2 * block)  # whole pairs of tiles: tile t ^ 1 exists
    rng = np.random.default_rng(1)
    patterns = _patterns(n, block, rng)
    tiles = np.arange(n)
    cases = {
        "own_tiles": (tiles, tiles),
        "neighbour_tile": (tiles ^ block, tiles),  # tile t reads tile t ^ 1: intervals
        "reads_permuted": (rng.permutation(n), tiles),
        "writes_overlapping": (tiles, patterns["overlapping_runs"][0]),
        "both_mixed": (patterns["intervals_then_elements"][0], patterns["tail_holes"][0]),
    }
    for name, (src, dst) in cases.items():
        buf = torch.zeros(n)
        args = (torch.from_numpy(src.astype(np.int32)), torch.from_numpy(dst.astype(np.int32)), buf, n)
        report = emu.run_launch(gather_scatter_inplace, (PROGRAMS,), args, constexprs={"XBLOCK": block},
                                compiler_generated=True, spec="h200")
        expected = _expected(_programs_per_element(dst, n, block), _programs_per_element(src, n, block))
        _assert_matches(report, expected)


@pytest.mark.parametrize("step,width", [(256, 256), (192, 256), (320, 256), (256, 160)],
                         ids=["abutting", "overlapping", "gaps", "narrow"])
def test_dense_and_general_tiles_match_reference(threads, step: int, width: int) -> None:
    n, block = 8000, DENSE_MIN_LANES  # tiles large enough to have a dense loop
    index = np.array([t * step + lane for t in range(-(-n // step)) for lane in range(block)])
    index[(np.arange(index.size) % block >= width) | (index >= n)] = -1
    out = torch.zeros(n)
    report = emu.run_launch(stepped_tiles, (PROGRAMS,), (out, n, step, width), constexprs={"XBLOCK": block},
                            compiler_generated=True, spec="h200")
    _assert_matches(report, _expected(_programs_per_element(index, n, block), [[] for _ in range(n)]))


def test_small_launches_run_on_one_thread_and_large_ones_on_every_thread(monkeypatch):
    if numba.get_num_threads() < 2:
        pytest.skip("numba has one thread")
    from gxusim.emulator import api
    threads_used = []

    def allocate(*args):
        records = execution.allocate_records(*args)
        threads_used.append(records.threads)
        return records
    monkeypatch.setattr(api, "allocate_records", allocate)
    for n in (1000, 2 * execution.SERIAL_BELOW_ELEMENTS):
        out = torch.full((n,), -1.0)
        report = emu.run_launch(stepped_tiles, (PROGRAMS,), (out, n, 32, 32),
                                constexprs={"XBLOCK": 32}, compiler_generated=True, spec="h200")
        assert report.ok and torch.equal(out, (torch.arange(n) % 32).float())
    assert threads_used == [1, min(numba.get_num_threads(), PROGRAMS)]
