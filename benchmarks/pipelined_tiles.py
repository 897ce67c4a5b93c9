"""What a pipelined row sum's tile costs besides its chunks, on the GPU (cuda target).

Times one row sum (32768 x 4096 fp32, 16 warps, 32 programs) at chunk shapes from 128 rows
of 128 to 8 rows of 2048 (64 KB a chunk: 32 down to 2 chunks a tile), four deep and
unpipelined, at row strides of 4096 floats and padded ones, and fits each stride's
pipelined times to `tiles x (start + (chunks - 1) x chunk)`.

On the H200 (session 22) the rates were the same at every stride: not a DRAM address
effect. What a tile of few chunks loses is its start (2.3-2.9 us, where a further chunk
takes 0.59 us): the first chunk lands with the prologue's other copies
(`gxusim.model.pipelined.memory_terms`).

    python benchmarks/pipelined_tiles.py [--strides 4096 4160 5120]
"""
from __future__ import annotations

import argparse

import numpy as np
import torch

import gxusim
from gxusim import target as targets
from gxusim.compiler import launcher
from gxusim.compiler.plan import candidate_plans
from gxusim.report import format_table

ROWS, COLS, WARPS, PROGRAMS = 32768, 4096, 16, 32
CHUNKS = [(128, 128), (64, 256), (32, 512), (16, 1024), (8, 2048)]


def time_plans(stride: int, spec: gxusim.HardwareSpec) -> list[tuple[int, int, int, float]]:
    """(rows a chunk, columns a chunk, stages, seconds) for each chunk shape, 4 deep and 1."""
    x = torch.randn(ROWS, stride, device="gxu")[:, :COLS]
    torch._dynamo.reset()
    with launcher.capture() as captured:
        got = torch.compile(lambda t: t.sum(1), dynamic=False)(x)
    torch.testing.assert_close(got.cpu(), x.cpu().sum(1), rtol=1e-3, atol=1e-2)
    kernel, args = captured[0].kernel, captured[0].args
    plans = [p for p in candidate_plans(kernel.shape, kernel.numels(args), spec)
             if (p.meta.get("XBLOCK"), p.meta.get("R0_BLOCK")) in CHUNKS
             and p.num_warps == WARPS and p.num_stages in (1, 4) and p.programs == PROGRAMS]
    kernel.precompile_plans(plans, args)
    target = targets.active()
    return [(p.meta["XBLOCK"], p.meta["R0_BLOCK"], p.num_stages,
             min(target.time_launch(kernel._target_launch(p), args) for _ in range(3)))
            for p in sorted(plans, key=lambda p: (p.num_stages, -p.meta["XBLOCK"]))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--strides", nargs="+", type=int, default=[4096, 4128, 4160, 5120])
    args = parser.parse_args()
    spec = gxusim.load_spec("gxu-on-h200")
    gxusim.use_spec(spec)
    gxusim.use_heuristics("gxu")
    rows, fits = [], []
    for stride in args.strides:
        timed = time_plans(stride, spec)
        for xblock, rblock, stages, seconds in timed:
            rate = ROWS * COLS * 4 / seconds / PROGRAMS / 1e9
            rows.append((stride, f"{xblock} x {rblock}", COLS // rblock, stages,
                         f"{seconds * 1e6:.1f}", f"{rate:.1f}"))
        # per tile: start + (chunks - 1) x chunk, least squares over the pipelined shapes
        piped = [(COLS // r, s / (ROWS // (x * PROGRAMS))) for x, r, st, s in timed if st == 4]
        if len(piped) >= 2:
            design = np.array([[1.0, chunks - 1] for chunks, _ in piped])
            (start, chunk), *_ = np.linalg.lstsq(design, np.array([t for _, t in piped]),
                                                rcond=None)
            fits.append((stride, f"{start * 1e6:.2f}", f"{chunk * 1e6:.3f}",
                         f"{65536 / chunk / 1e9:.0f}"))
    print(format_table(("stride", "chunk rows x cols", "chunks a tile", "stages", "us",
                        "GB/s an SM"), rows))
    print()
    print(format_table(("stride", "tile start us", "further chunk us", "chunk GB/s"), fits))


if __name__ == "__main__":
    main()
