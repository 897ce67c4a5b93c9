"""A long run: many warm calls of a compiled model keep memory flat (process RSS, gxu memory,
launch records bounded by their ring).

    python benchmarks/bench_long_run.py [--calls 100000] [--model mlp]
"""
from __future__ import annotations

import argparse
import gc
import resource
import time

import torch
from tqdm import tqdm

import gxusim
from gxusim.models import CASES


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=100_000)
    parser.add_argument("--model", default="mlp")
    args = parser.parse_args()
    model, inputs = CASES[args.model].build("gxu")
    compiled = torch.compile(model)
    checkpoints = sorted({args.calls // 10, args.calls // 2, args.calls})
    rows = []
    with torch.no_grad():
        for _ in range(100):  # warm: compile, caches, allocator pools
            compiled(*inputs)
        torch.gxu.synchronize()
        gc.collect()
        base = (_rss_mb(), torch.gxu.memory_allocated(), len(gxusim.launches()))
        start = time.perf_counter()
        for call in tqdm(range(1, args.calls + 1), desc="calls", unit="call", mininterval=2):
            compiled(*inputs)
            if call in checkpoints:
                torch.gxu.synchronize()
                gc.collect()
                rows.append((call, _rss_mb(), torch.gxu.memory_allocated(),
                             len(gxusim.launches())))
        elapsed = time.perf_counter() - start
    print(f"{args.model} on {gxusim.current_target()}: {args.calls} warm calls in {elapsed:.1f} s "
          f"({elapsed / args.calls * 1e6:.0f} us per call)")
    print(f"{'calls':>8} {'RSS MB':>10} {'d RSS MB':>10} {'gxu bytes':>12} {'records':>9}")
    print(f"{0:>8} {base[0]:>10.1f} {0.0:>10.1f} {base[1]:>12} {base[2]:>9}")
    for call, rss, allocated, records in rows:
        print(f"{call:>8} {rss:>10.1f} {rss - base[0]:>10.1f} {allocated:>12} {records:>9}")


if __name__ == "__main__":
    main()
