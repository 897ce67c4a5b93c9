"""Reductions on the emulator: the block elements a looped reduction's tile issues (the
performance model's `tile_elements`), argmax/argmin tie rules, and refused constructs."""
import pytest
import torch

import gxusim
from gxusim.model import core
from gxusim.emulator import EmulationError
from triton_kernels.pointwise import add_relu_chunked, int_isnan
from triton_kernels.reductions import row_arg_extremes, row_sum, row_sums_walking_pointers


@pytest.mark.parametrize("cols", [4096, 4000])  # 4000: the last chunk is partly masked
def test_looped_reduction_counts_every_chunk(cols: int) -> None:
    rows, xblock, rblock, programs = 64, 2, 1024, 8
    chunks = -(-cols // rblock)
    x, out = torch.randn(rows, cols), torch.empty(rows)
    spec = gxusim.load_spec("gxu")
    report = gxusim.emulate(row_sum, (programs,), x, out, rows, cols, XBLOCK=xblock,
                            R0_BLOCK=rblock, spec=spec)
    assert report.ok, report.findings
    torch.testing.assert_close(out, x.sum(1), rtol=1e-4, atol=1e-4)
    facts = report.facts
    assert facts.tile_elements == xblock * rblock * chunks  # 8192: all chunks, masked or not
    assert facts.tiles_per_program == rows // xblock // programs
    assert facts.programs == programs and facts.num_warps == report.num_warps
    assert facts.bytes_moved == report.traffic_bytes
    assert facts.blocks_per_sm == report.occupancy.blocks_per_sm
    assert report.predicted_s == core.predict_seconds(facts, spec)


def test_pointwise_tile_issues_its_block() -> None:
    n = 5000
    x, y, out = torch.randn(n), torch.randn(n), torch.empty(n)
    report = gxusim.emulate(add_relu_chunked, (32,), x, y, out, n, XBLOCK=128)
    assert report.facts.tile_elements == 128
    assert report.facts.tiles_per_program == max(report.tiles_per_program)


def test_argmax_argmin_tie_break_rules() -> None:
    rows, cols = 37, 16
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 3, (rows, cols), generator=g).float()  # many ties per row
    x[5] = 1.0  # a row of equal values
    outs = [torch.empty(rows, dtype=torch.int32) for _ in range(5)]
    report = gxusim.emulate(row_arg_extremes, (10,), x, *outs, rows, R0_BLOCK=cols, XBLOCK=4)
    assert report.ok, report.findings
    last = cols - 1

    def last_index(t: torch.Tensor, fn) -> torch.Tensor:
        return last - fn(t.flip(1), 1)

    # tie_break_left=True: the smallest index among equal values (torch's rule too)
    assert torch.equal(outs[0].long(), x.argmax(1))
    assert torch.equal(outs[2].long(), x.argmin(1))
    # tie_break_left=False: Triton leaves it open; the emulator's fold keeps the last one
    assert torch.equal(outs[1].long(), last_index(x, torch.argmax))
    assert torch.equal(outs[3].long(), last_index(x, torch.argmin))
    assert torch.equal(outs[4].long(), last_index(x, torch.argmax))
    assert outs[0][5] == 0 and outs[1][5] == last


def test_isnan_of_an_integer_is_refused() -> None:
    n = 100
    x, out = torch.arange(n, dtype=torch.int32), torch.empty(n, dtype=torch.int8)
    with pytest.raises(EmulationError, match=r"isnan of an integer \(int32\).*int_isnan line"):
        gxusim.emulate(int_isnan, (1,), x, out, n, XBLOCK=128)


def test_a_pointer_advanced_in_a_loop_is_carried_to_the_next_iteration() -> None:
    """`at += BLOCK` inside a runtime loop moves the pointer for the next iteration (each
    chunk is read once, the tail masked); moving it to another buffer is refused."""
    x, out = torch.randn(5, 300), torch.empty(5)
    report = gxusim.emulate(row_sums_walking_pointers, (5,), x, out, 5, 300, BLOCK=128,
                            OTHER_BUFFER=False)
    assert report.ok, report.findings
    torch.testing.assert_close(out, x.sum(1), rtol=1e-5, atol=1e-5)
    with pytest.raises(EmulationError, match="loop-carried pointer 'at' is set to another buffer"):
        gxusim.emulate(row_sums_walking_pointers, (5,), x, out, 5, 300, BLOCK=128,
                       OTHER_BUFFER=True)
