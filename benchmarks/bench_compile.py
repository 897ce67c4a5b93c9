"""Compile time and warm per-call time of the model suite on gxu (cuda target) against stock
Inductor on plain CUDA tensors, both in the default mode and with mode="reduce-overhead"
(CUDA graphs: Inductor's cudagraph trees for CUDA tensors, `compiler/graph_replay.py` for gxu),
the four variants of a model timed in turns (best of 7 rounds of 50 calls each), and the
bandwidth of the seed's 100M-element cases under
the "seed", "gxu" and "autotune" policies. Needs a CUDA GPU.

    python benchmarks/bench_compile.py [--json OUT.json]
"""
from __future__ import annotations

import argparse
import json
import math
import time

import torch

import gxusim
from gxusim.models import CASES, SUITE
from gxusim.report import format_table


def _timed_calls(fn, inputs, calls: int = 20, repeats: int = 5) -> float:
    """Seconds per call: `calls` back-to-back calls between synchronisations (so host work
    overlaps the GPU, as in a training loop), best of `repeats`, after warm-up."""
    return _timed_alternately({"": (fn, inputs)}, calls, repeats)[""]


def _timed_alternately(variants: dict, calls: int = 50, rounds: int = 7) -> dict[str, float]:
    """Seconds per call of each variant (name -> (fn, inputs)): `calls` back-to-back calls
    between synchronisations, the variants taking turns for `rounds` rounds so that a slow
    spell of a shared machine hits every one of them; each keeps its best round."""
    best = dict.fromkeys(variants, math.inf)
    with torch.no_grad():
        for fn, inputs in variants.values():
            for _ in range(3):
                fn(*inputs)
        torch.cuda.synchronize()
        for _ in range(rounds):
            for name, (fn, inputs) in variants.items():
                start = time.perf_counter()
                for _ in range(calls):
                    fn(*inputs)
                torch.cuda.synchronize()
                best[name] = min(best[name], (time.perf_counter() - start) / calls)
    return best


_VARIANTS = (("gxu", None), ("cuda", None), ("gxu", "reduce-overhead"), ("cuda", "reduce-overhead"))


def _compiled(build, device: str, mode: str | None) -> tuple[float, tuple]:
    """Compile time (first call) and (compiled fn, inputs)."""
    model, inputs = build(device)
    compiled = torch.compile(model, mode=mode)
    start = time.perf_counter()
    with torch.no_grad():
        compiled(*inputs)
        torch.cuda.synchronize()
    return time.perf_counter() - start, (compiled, inputs)


def _row(name: str, build, calls: int) -> dict:
    """One model: compiled on gxu and on CUDA, in both modes, then timed in turns."""
    torch._dynamo.reset()
    compiles, variants = {}, {}
    for device, mode in _VARIANTS:
        compiles[device, mode], variants[device, mode] = _compiled(build, device, mode)
    calls_s = _timed_alternately(variants, calls)
    return dict(model=name, gxu_compile_s=compiles["gxu", None],
                cuda_compile_s=compiles["cuda", None],
                gxu_call_ms=calls_s["gxu", None] * 1e3, cuda_call_ms=calls_s["cuda", None] * 1e3,
                gxu_graphed_call_ms=calls_s["gxu", "reduce-overhead"] * 1e3,
                cuda_graphed_call_ms=calls_s["cuda", "reduce-overhead"] * 1e3)


def suite_rows(scale: str) -> list[dict]:
    rows = []
    for case in SUITE:
        try:
            rows.append(_row(case.name, lambda device: case.build(device, scale), calls=50))
        except Exception as error:  # report the model as failed, keep benchmarking the rest
            print(f"{case.name}: failed: {type(error).__name__}: {error}"[:400])
    return rows


def small_add_relu_row() -> dict:
    """The host-cost probe: a 1,000-element add+relu, compiled, called back to back."""
    def fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return (x + y).relu()
    row = _row("add_relu 1000 elements", lambda device: (fn, (
        torch.randn(1000, device=device), torch.randn(1000, device=device))), calls=200)
    return {**row, "gxu_compile_s": math.nan, "cuda_compile_s": math.nan}


def bandwidth_rows() -> list[dict]:
    rows = []
    for name, tensors in (("add_relu", 3), ("mul_relu", 2)):
        case = CASES[name]
        nbytes = tensors * 4 * 100_000_000
        model, inputs = case.build("cuda", "gpu")
        torch._dynamo.reset()
        stock = torch.compile(model)
        with torch.no_grad():
            seconds = _timed_calls(stock, inputs)
        row = dict(case=name, stock_cuda_GBps=nbytes / seconds / 1e9)
        del inputs
        for policy in ("seed", "gxu", "autotune"):
            gxusim.use_heuristics(policy)
            torch._dynamo.reset()
            model, inputs = case.build("gxu", "gpu")
            compiled = torch.compile(model)
            gxusim.clear_launches()
            with torch.no_grad():
                seconds = _timed_calls(compiled, inputs)
            launch = gxusim.launches()[-1]
            row[f"{policy}_GBps"] = nbytes / seconds / 1e9
            row[f"{policy}_config"] = (f"X{launch.meta['XBLOCK']}/w{launch.num_warps}/"
                                       f"g{launch.grid[0]}")
            del inputs
        gxusim.use_heuristics("gxu")
        rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--scale", default="cpu", choices=("cpu", "gpu"),
                        help="model sizes for the compile/per-call table")
    args = parser.parse_args()
    gxusim.set_target("cuda")
    torch._inductor.config.force_disable_caches = True
    suite = suite_rows(args.scale)
    bandwidth = bandwidth_rows()
    small = small_add_relu_row()
    print(format_table(("model", "compile gxu s", "compile cuda s", "ratio", "call gxu ms",
                  "call cuda ms", "ratio", "graphed gxu ms", "graphed cuda ms", "ratio"),
                 [(r["model"], f"{r['gxu_compile_s']:.2f}", f"{r['cuda_compile_s']:.2f}",
                   f"{r['gxu_compile_s'] / r['cuda_compile_s']:.2f}", f"{r['gxu_call_ms']:.3f}",
                   f"{r['cuda_call_ms']:.3f}", f"{r['gxu_call_ms'] / r['cuda_call_ms']:.2f}",
                   f"{r['gxu_graphed_call_ms']:.3f}", f"{r['cuda_graphed_call_ms']:.3f}",
                   f"{r['gxu_graphed_call_ms'] / r['cuda_graphed_call_ms']:.2f}")
                  for r in suite + [small]]))
    for mode, gxu, cuda in (("default mode", "gxu_call_ms", "cuda_call_ms"),
                            ("reduce-overhead", "gxu_graphed_call_ms", "cuda_graphed_call_ms")):
        ratios = [r[gxu] / r[cuda] for r in suite]
        print(f"per-call gxu/stock, {mode}: geometric mean "
              f"{math.exp(sum(map(math.log, ratios)) / len(ratios)):.2f}, worst {max(ratios):.2f}; "
              f"1,000-element add+relu {small[gxu] * 1e3:.1f} us per call (stock "
              f"{small[cuda] * 1e3:.1f} us)")
    print()
    print(format_table(("case (100M fp32)", "stock cuda GB/s", "seed GB/s", "gxu GB/s", "autotune GB/s",
                  "seed cfg", "gxu cfg", "autotune cfg"),
                 [(r["case"], f"{r['stock_cuda_GBps']:.0f}", f"{r['seed_GBps']:.0f}",
                   f"{r['gxu_GBps']:.0f}", f"{r['autotune_GBps']:.0f}", r["seed_config"],
                   r["gxu_config"], r["autotune_config"]) for r in bandwidth]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"suite": suite, "bandwidth": bandwidth}, f, indent=1)


if __name__ == "__main__":
    main()
