"""Where a warm call of a compiled gxu graph spends host time (cProfile, top functions).

    python benchmarks/profile_launch.py [--calls 300]
"""
import argparse
import cProfile
import pstats

import torch

import gxusim
from gxusim.models import CASES


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--model", default="add_relu")
    args = parser.parse_args()
    model, inputs = CASES[args.model].build("gxu")
    compiled = torch.compile(model)
    with torch.no_grad():
        for _ in range(5):
            compiled(*inputs)
        torch.gxu.synchronize()
        profile = cProfile.Profile()
        profile.enable()
        for _ in range(args.calls):
            compiled(*inputs)
        torch.gxu.synchronize()
        profile.disable()
    stats = pstats.Stats(profile)
    print(f"{stats.total_tt / args.calls * 1e6:.0f} us of host time per call "
          f"(target {gxusim.current_target()})")
    stats.sort_stats("tottime").print_stats(18)


if __name__ == "__main__":
    main()
