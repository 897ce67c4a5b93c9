"""How many lines loaded `evict_last` L2 keeps from one launch to the next, on the GPU.

Timing flushes L2 before each run (`triton.testing.do_bench`, as the cuda target's
`time_launch` does) by writing 256 MB: normal lines. A load marked evict_last is kept over
them, so a kernel whose loads are all so marked finds its data in L2 at the next run, if
the lines fit (`caches.kept_share`; spec fields `l2_kept_bytes`, `l2_kept_none_bytes`).
Inductor marks a load evict_last when its value is read again, or (torch 2.11) read
uncoalesced: the transformer's k transpose.

A copy of N MB on 32 programs of 16 warps (4096 elements a tile, a tile loop as GXU
kernels have), timed three ways: its load unmarked, marked evict_last, and marked
evict_last then read again evict_first (Inductor's last read of a value). Beside the
measured evict_last/unmarked ratio stands the model's, from the spec (`kept_share`).
It measures before importing gxusim, each size's buffers alive until the next size's are
allocated: a first version, which imported gxusim first and freed each size's buffers
before the next, timed the unmarked copies 4-6 us faster from 8 MB up in its one run on
the H200 (evict_last's as here); which of the two did it is not known.

    python benchmarks/l2_kept.py [--mb 2 4 8 ...] [--json OUT.json]
"""
from __future__ import annotations

import argparse
import dataclasses
import json

import torch
import triton
import triton.language as tl
import triton.testing


PROGRAMS, WARPS, XBLOCK = 32, 16, 4096


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


def copy_facts(numel: int):
    """The copy with its load marked evict_last, as the model sees it (LaunchFacts)."""
    from gxusim.model.launch_facts import LaunchFacts, PhaseFacts
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


def measure(sizes_mb: list[int]) -> list[dict]:
    """Each size's three times. Each size's buffers stay allocated until the next size's
    are: the caching allocator cannot hand the next size memory the last one's lines
    still mark; its last run, read again evict_first, leaves no line marked."""
    rows, buffers = [], None
    for megabytes in sizes_mb:
        numel = megabytes * (1 << 20) // 4
        buffers = torch.randn(numel, device="cuda"), torch.empty(numel, device="cuda")

        def launch(evict_last: bool, read_again: bool, source=buffers[0], out=buffers[1],
                   numel=numel):
            return lambda: copy_kernel[(PROGRAMS,)](source, out, numel, XBLOCK, evict_last,
                                                    read_again, num_warps=WARPS)
        rows.append({"megabytes": megabytes, "unmarked_us": flushed_us(launch(False, False)),
                     "evict_last_us": flushed_us(launch(True, False)),
                     "evict_last_then_first_us": flushed_us(launch(True, True))})
    return rows


def with_model(row: dict, spec) -> dict:
    """The row with the model's times for both copies on `spec`."""
    from gxusim.model import caches, core
    facts = copy_facts(row["megabytes"] * (1 << 20) // 4)
    unmarked = dataclasses.replace(facts, phases=tuple(
        dataclasses.replace(p, evict_last_bytes=0.0) for p in facts.phases))
    return {**row, "model_kept_share": caches.kept_share(facts, spec),
            "model_unmarked_us": core.predict_seconds(unmarked, spec) * 1e6,
            "model_evict_last_us": core.predict_seconds(facts, spec) * 1e6}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, nargs="+",
                        default=[1, 2, 4, 6, 8, 9, 10, 11, 12, 13, 14, 16, 20, 32, 64])
    parser.add_argument("--spec", default="h200")
    parser.add_argument("--json", help="write the rows here")
    args = parser.parse_args()
    rows = measure(args.mb)  # before gxusim is imported: the GPU as a plain Triton user has it
    import gxusim
    spec = gxusim.load_spec(args.spec)
    rows = [with_model(row, spec) for row in rows]
    from gxusim.report import format_table
    print(format_table(["MB read", "unmarked us", "evict_last us", "then evict_first us",
                        "evict_last / unmarked", f"model ({args.spec})", "model kept share"],
                       [[r["megabytes"], f"{r['unmarked_us']:.1f}", f"{r['evict_last_us']:.1f}",
                         f"{r['evict_last_then_first_us']:.1f}",
                         f"{r['evict_last_us'] / r['unmarked_us']:.2f}",
                         f"{r['model_evict_last_us'] / r['model_unmarked_us']:.2f}",
                         f"{r['model_kept_share']:.2f}"] for r in rows]))
    if args.json:
        with open(args.json, "w") as file:
            json.dump(rows, file, indent=1)


if __name__ == "__main__":
    main()
