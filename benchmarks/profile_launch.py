"""Where a warm call of a compiled gxu graph spends host time: each piece of the hot path
timed alone, beside the whole call and stock Inductor's (cuda target), then cProfile's top.

    python benchmarks/profile_launch.py [--calls 300] [--model add_relu | --elements 1000]

Without `--model`, the graph is `(x + y).relu()` on `--elements` elements (the host-cost
probe of bench_compile.py). The pieces, each timed on warm objects (best of 7 repeats):
the graph boundary (`GraphBoundary.enter` of the inputs, `leave` of one output), a buffer
allocation, `GXUKernel.run` (plan lookup, launch, record), the binary launcher alone, and
the stream lookup. They overlap the whole call only in part: Dynamo's guards and
AOTAutograd's wrappers are the rest, the same as stock's.
"""
import argparse
import cProfile
import pstats
import timeit

import torch

import gxusim
from gxusim.compiler import launcher
from gxusim.compiler.graph_runtime import empty_strided
from gxusim.device.ops import GraphBoundary
from gxusim.models import CASES
from gxusim.report import format_table


def _per_call_us(fn, number: int) -> float:
    return min(timeit.repeat(fn, number=number, repeat=7)) / number * 1e6


def _graph(args: argparse.Namespace, device: str):
    if args.model:
        model, inputs = CASES[args.model].build(device)
        return model, inputs
    inputs = tuple(torch.randn(args.elements, device=device) for _ in range(2))
    return (lambda x, y: (x + y).relu()), inputs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--model", help="a suite model instead of the add+relu probe")
    parser.add_argument("--elements", type=int, default=1000)
    args = parser.parse_args()
    target = gxusim.current_target()
    fn, inputs = _graph(args, "gxu")
    compiled = torch.compile(fn)
    with torch.no_grad(), launcher.capture() as captured:
        for _ in range(5):
            compiled(*inputs)
    torch.gxu.synchronize()
    kernel_launch = captured[-1]
    kernel, kernel_args = kernel_launch.kernel, kernel_launch.args
    boundary = GraphBoundary()
    aliases = boundary.enter(inputs)
    output = torch.empty_like(aliases[0])
    rows = []

    def timed(name: str, fn) -> None:
        rows.append((name, f"{_per_call_us(fn, args.calls):.1f}"))
    with torch.no_grad():
        timed("whole gxu call", lambda: compiled(*inputs))
        if target == "cuda":
            stock_fn, stock_inputs = _graph(args, "cuda")
            stock = torch.compile(stock_fn)
            for _ in range(5):
                stock(*stock_inputs)
            timed("whole stock Inductor call (cuda)", lambda: stock(*stock_inputs))
    timed(f"GraphBoundary.enter ({len(inputs)} inputs)", lambda: GraphBoundary().enter(inputs))
    timed("GraphBoundary.leave (1 output)", lambda: boundary.leave((output,), (True,)))
    size, stride = tuple(output.size()), output.stride()  # as generated wrappers pass them
    timed("empty_strided (a gxu buffer)", lambda: empty_strided(
        size, stride, device="gxu", dtype=output.dtype))
    active = gxusim.target.active()
    stream = active.raw_stream()
    timed(f"GXUKernel.run ({kernel.name})", lambda: kernel.run(*kernel_args, stream=stream))
    timed("raw stream lookup", active.raw_stream)
    if target == "cuda":
        prepared = next(iter(kernel._prepared.values()))
        binary = active._launchers[prepared.launch]
        timed("BinaryLauncher alone", lambda: binary(prepared.launch.grid, kernel_args, stream))
    torch.gxu.synchronize()
    gxusim.clear_launches()
    print(format_table(("piece of the warm call", "us per call"), rows))
    print(f"target {target}; pieces are timed alone and overlap the whole call only in part")

    profile = cProfile.Profile()
    with torch.no_grad():
        profile.enable()
        for _ in range(args.calls):
            compiled(*inputs)
        torch.gxu.synchronize()
        profile.disable()
    pstats.Stats(profile).sort_stats("tottime").print_stats(15)


if __name__ == "__main__":
    main()
