"""How many lines loaded `evict_last` L2 keeps from one launch to the next, on the GPU.

Timing flushes L2 before each run (`triton.testing.do_bench`, as the cuda target's
`time_launch` does) by writing 256 MB: normal lines. A load marked evict_last is kept over
them, so a kernel whose loads are all so marked finds its data in L2 at the next run, if
the lines fit (`perf_model.kept_share`; spec fields `l2_kept_bytes`, `l2_kept_none_bytes`).
Inductor marks a load evict_last when its value is read again, or (torch 2.11) read
uncoalesced: the transformer's k transpose.

A copy of N MB on 32 programs of 16 warps (4096 elements a tile, a tile loop as GXU
kernels have), timed four ways: its load unmarked, marked evict_last, marked evict_last and
read again evict_first (Inductor's last read of a value), and with L2 warm (replayed in a
CUDA graph, no flush between runs). The kept share is (unmarked - evict_last) / (unmarked -
warm); the model's share from the spec stands beside it.

    python benchmarks/l2_kept.py [--mb 2 4 8 ...] [--json OUT.json]
"""
from __future__ import annotations

import argparse
import json

import torch
import triton
import triton.language as tl
import triton.testing

import gxusim
from gxusim import perf_model
from gxusim.launch_facts import LaunchFacts, PhaseFacts
from gxusim.report import format_table

PROGRAMS, WARPS, XBLOCK = 32, 16, 4096
REPLAYS = 20


@triton.jit
def copy_kernel(in_ptr, out_ptr, numel: tl.constexpr, XBLOCK: tl.constexpr,
                EVICT_LAST: tl.constexpr, READ_AGAIN: tl.constexpr):
    tiles = tl.cdiv(numel, XBLOCK)
    for tile in range(tl.program_id(0), tiles, tl.num_programs(0)):
        index = tile * XBLOCK + tl.arange(0, XBLOCK)
        mask = index < numel
        if EVICT_LAST:
            value = tl.load(in_ptr + index, mask, eviction_policy="evict_last")
        else:
            value = tl.load(in_ptr + index, mask)
        tl.store(out_ptr + index, value, mask)
    if READ_AGAIN:  # the value's last read, as Inductor marks it
        for tile in range(tl.program_id(0), tiles, tl.num_programs(0)):
            index = tile * XBLOCK + tl.arange(0, XBLOCK)
            mask = index < numel
            value = tl.load(in_ptr + index, mask, eviction_policy="evict_first")
            tl.store(out_ptr + index, value * 2, mask)


def copy_facts(numel: int) -> LaunchFacts:
    """The copy with its load marked evict_last, as the model sees it."""
    tiles = -(-numel // XBLOCK)
    tile_bytes = XBLOCK * 4.0
    phase = PhaseFacts(iterations=1, elements=XBLOCK, load_bytes=tile_bytes,
                       store_bytes=tile_bytes, load_depth=1, evict_last_bytes=tile_bytes)
    return LaunchFacts(programs=PROGRAMS, num_warps=WARPS,
                       tiles_per_program=-(-tiles // PROGRAMS), tile_elements=XBLOCK,
                       bytes_moved=2.0 * numel * 4, blocks_per_sm=1, phases=(phase,),
                       footprint_bytes=2.0 * numel * 4)


def flushed_us(launch) -> float:
    launch()
    return triton.testing.do_bench(launch, warmup=5, rep=40, return_mode="median") * 1e3


def warm_us(launch) -> float:
    launch()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(REPLAYS):
            launch()
    graph.replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1e3 / REPLAYS


def measure(megabytes: int, spec: gxusim.HardwareSpec) -> dict:
    numel = megabytes * (1 << 20) // 4
    source = torch.randn(numel, device="cuda")
    out = torch.empty_like(source)

    def launch(evict_last: bool, read_again: bool):
        return lambda: copy_kernel[(PROGRAMS,)](source, out, numel, XBLOCK, evict_last,
                                                read_again, num_warps=WARPS)
    unmarked = flushed_us(launch(False, False))
    marked = flushed_us(launch(True, False))
    released = flushed_us(launch(True, True))
    warm = warm_us(launch(False, False))
    measured = (unmarked - marked) / (unmarked - warm) if unmarked > warm else 0.0
    return {"megabytes": megabytes, "unmarked_us": unmarked, "evict_last_us": marked,
            "evict_last_then_first_us": released, "warm_us": warm,
            "kept_share": min(1.0, max(0.0, measured)),
            "model_kept_share": perf_model.kept_share(copy_facts(numel), spec)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, nargs="+",
                        default=[2, 4, 6, 8, 10, 11, 12, 13, 14, 16, 20, 32, 64])
    parser.add_argument("--spec", default="h200")
    parser.add_argument("--json", help="write the rows here")
    args = parser.parse_args()
    spec = gxusim.load_spec(args.spec)
    copy_kernel[(1,)](torch.zeros(1, device="cuda"), torch.zeros(1, device="cuda"), 1,
                      XBLOCK, False, False, num_warps=WARPS)  # compile and clock up first
    rows = [measure(mb, spec) for mb in args.mb]
    print(format_table(["MB read", "unmarked us", "evict_last us", "then evict_first us",
                        "L2 warm us", "kept share", f"model ({args.spec})"],
                       [[r["megabytes"], f"{r['unmarked_us']:.1f}", f"{r['evict_last_us']:.1f}",
                         f"{r['evict_last_then_first_us']:.1f}", f"{r['warm_us']:.1f}",
                         f"{r['kept_share']:.2f}", f"{r['model_kept_share']:.2f}"]
                        for r in rows]))
    if args.json:
        with open(args.json, "w") as file:
            json.dump(rows, file, indent=1)


if __name__ == "__main__":
    main()
