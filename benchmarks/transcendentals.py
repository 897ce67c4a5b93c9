"""What one element's math call costs along a thread's chain, on the GPU (cuda target).

The performance model charges a thread's elements of a tile-level phase one after another,
each its dependency chain: arithmetic steps, and libdevice calls weighed in expf's
(the spec's `math_call_weights`; the model fits one time per expf). This times
the kernel Inductor generates for `op(x)` (x: 16M fp32 in [0.05, 4): tanhf takes both its
polynomial and its exp form) on 1 warp at 8 and at 64 elements a thread (32 programs, one
to an SM), takes the time each further element adds to a thread, less a multiply's, and
gives it in expf's: the weight the model's table should hold.

    python benchmarks/transcendentals.py [--ops exp tanh ...] [--json OUT.json]
"""
from __future__ import annotations

import argparse
import json
import re
from typing import Callable

import torch

import gxusim
from gxusim import target as targets
from gxusim.compiler import launcher
from gxusim.compiler.plan import candidate_plans
from gxusim.report import format_table

N = 1 << 24
PROGRAMS, WARPS = 32, 1
FEW, MANY = 256, 2048  # XBLOCK: 8 and 64 elements a thread of one warp
# Each op as Inductor sees it; `mul` is the baseline every other op is measured against.
OPS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "mul": lambda x: x * 3.0, "exp": torch.exp, "exp2": torch.exp2, "expm1": torch.expm1,
    "log": torch.log, "log2": torch.log2, "log10": torch.log10, "log1p": torch.log1p,
    "tanh": torch.tanh, "sin": torch.sin, "cos": torch.cos, "tan": torch.tan,
    "asin": lambda x: torch.asin(x / 4.0), "acos": lambda x: torch.acos(x / 4.0),
    "atan": torch.atan, "atan2": lambda x: torch.atan2(x, 2.0 - x), "sinh": torch.sinh,
    "cosh": torch.cosh, "asinh": torch.asinh, "acosh": lambda x: torch.acosh(x + 1.0),
    "atanh": lambda x: torch.atanh(x / 4.0), "sqrt": torch.sqrt, "rsqrt": torch.rsqrt,
    "erf": torch.erf, "erfc": torch.erfc, "erfinv": lambda x: torch.erfinv(x / 4.0),
    "lgamma": torch.lgamma, "sigmoid": torch.sigmoid, "pow": lambda x: torch.pow(x, 2.5),
    "div": lambda x: x / (x + 1.0), "reciprocal": torch.reciprocal,
}


def chain_seconds(op: Callable, spec: gxusim.HardwareSpec) -> tuple[float, float, str]:
    """(seconds a further element adds to a thread, tile seconds at 64 elements, the call
    the kernel makes) for one op."""
    x = (torch.rand(N, generator=torch.Generator().manual_seed(0)) * 3.95 + 0.05).to("gxu")
    torch._dynamo.reset()
    with launcher.capture() as captured:
        got = torch.compile(op, dynamic=False)(x)
    torch.testing.assert_close(got.cpu(), op(x.cpu()), rtol=1e-4, atol=1e-5)  # libdevice's ulps
    if len(captured) != 1:
        raise ValueError(f"{len(captured)} kernels, not one")
    kernel, args = captured[0].kernel, captured[0].args
    plans = {p.meta["XBLOCK"]: p for p in candidate_plans(kernel.shape, kernel.numels(args), spec)
             if p.num_warps == WARPS and p.programs == PROGRAMS and
             p.meta.get("XBLOCK") in (FEW, MANY)}
    kernel.precompile_plans(list(plans.values()), args)
    target = targets.active()
    seconds = {xblock: min(target.time_launch(kernel._target_launch(plan), args)
                           for _ in range(3)) for xblock, plan in plans.items()}
    # A tile's time at 64 and at 8 elements a thread: what it pays once (its round trip)
    # cancels in the difference, the rest is the chain of the further elements.
    tile = {xblock: seconds[xblock] / (N / xblock / PROGRAMS) for xblock in plans}
    per_thread = {xblock: xblock / (WARPS * spec.warp_size) for xblock in plans}
    further = (tile[MANY] - tile[FEW]) / (per_thread[MANY] - per_thread[FEW])
    calls = sorted(set(re.findall(r"\b(?:libdevice|tl_math)\.\w+|tl\.sigmoid| / ",
                                  kernel.shape.source)))
    return further, tile[MANY], " ".join(c.strip() for c in calls)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", nargs="+", default=list(OPS), choices=list(OPS))
    parser.add_argument("--json", help="write the rows here")
    args = parser.parse_args()
    spec = gxusim.load_spec("gxu-on-h200")
    gxusim.use_spec(spec)
    gxusim.use_heuristics("gxu")
    timed = {}
    for name in dict.fromkeys(["mul", "exp", *args.ops]):
        try:
            timed[name] = chain_seconds(OPS[name], spec)
        except Exception as error:  # noqa: BLE001 - an op Inductor does not lower alone
            if name in ("mul", "exp"):
                raise  # the baseline and the unit
            print(f"{name}: not timed ({type(error).__name__}: {str(error)[:120]})")
    base, unit = timed["mul"][0], timed["exp"][0] - timed["mul"][0]
    rows = [{"op": name, "calls": calls, "element_ns": further * 1e9, "tile_us": tile * 1e6,
             "expf": (further - base) / unit} for name, (further, tile, calls) in timed.items()]
    print(format_table(("op", "calls", "ns an element", "tile us (64 a thread)", "in expf's"),
                       [(r["op"], r["calls"], f"{r['element_ns']:.1f}", f"{r['tile_us']:.2f}",
                         f"{r['expf']:.2f}") for r in rows]))
    if args.json:
        with open(args.json, "w") as file:
            json.dump(rows, file, indent=1)


if __name__ == "__main__":
    main()
