"""Emulator throughput against Triton's interpreter (elements/s), all checks on.

    python benchmarks/bench_emulator.py [--quick]

Each case runs through Triton's interpreter (in a subprocess with TRITON_INTERPRET=1, on
fewer elements: it is slow; the better of two runs) and through the emulator (the best of
three warm runs; the first call is timed apart: its excess over a warm run is the front
end and numba's JIT, or the load of its disk cache). Prints one table row per case, the
ratio, and the geometric mean of the ratios next to the target.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
TARGET_RATIO = 300  # the emulator's goal: this many times the interpreter's throughput
INTERPRETER_RUNS = 2
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]  # this checkout, and its kernel suite


def _pointwise(kernel: str, xblock: int, n: int, inputs: int) -> dict:
    return {"module": "pointwise", "kernel": kernel, "n": n, "grid": (32,), "constexprs": {"XBLOCK": xblock},
            "make": f"pointwise{inputs}"}


def cases(quick: bool) -> list:
    """(label, case at interpreter size, case at emulator size)."""
    big = 1 << (20 if quick else 24)
    rows = 1024 if quick else 8192
    return [
        ("add+relu XBLOCK 1024", _pointwise("add_relu_chunked", 1024, 1 << 18, 2),
         _pointwise("add_relu_chunked", 1024, big, 2)),
        ("add+relu XBLOCK 8192", _pointwise("add_relu_chunked", 8192, 1 << 20, 2),
         _pointwise("add_relu_chunked", 8192, big, 2)),
        ("gelu XBLOCK 1024", _pointwise("gelu_tanh", 1024, 1 << 18, 1), _pointwise("gelu_tanh", 1024, big, 1)),
        ("gelu XBLOCK 8192", _pointwise("gelu_tanh", 8192, 1 << 20, 1), _pointwise("gelu_tanh", 8192, big, 1)),
        ("softmax 1024 cols", {"module": "reductions", "kernel": "softmax", "rows": 64, "cols": 1024,
                               "grid": (32,), "constexprs": {"BLOCK": 1024}, "make": "softmax"},
         {"module": "reductions", "kernel": "softmax", "rows": rows, "cols": 1024, "grid": (32,),
          "constexprs": {"BLOCK": 1024}, "make": "softmax"}),
        ("row sum 1024 cols", {"module": "reductions", "kernel": "row_sum", "rows": 256, "cols": 1024,
                               "grid": (32,), "constexprs": {"XBLOCK": 8, "R0_BLOCK": 128}, "make": "rowsum"},
         {"module": "reductions", "kernel": "row_sum", "rows": rows, "cols": 1024, "grid": (32,),
          "constexprs": {"XBLOCK": 8, "R0_BLOCK": 128}, "make": "rowsum"}),
    ]


def make_args(case: dict) -> tuple[list, int]:
    """Launch arguments and the number of input elements the launch processes."""
    kind = case["make"]
    if kind.startswith("pointwise"):
        n = case["n"]
        inputs = [torch.randn(n) for _ in range(int(kind[-1]))]
        return inputs + [torch.empty(n), n], n
    rows, cols = case["rows"], case["cols"]
    x = torch.randn(rows, cols)
    if kind == "softmax":
        return [torch.empty(rows, cols), x, cols, cols, rows, cols], rows * cols
    return [x, torch.empty(rows), rows, cols], rows * cols


def _kernel(case: dict):
    import importlib
    return getattr(importlib.import_module(f"triton_kernels.{case['module']}"), case["kernel"])


def interpreter_worker(spec_json: str) -> None:
    from triton_kernels.reference import _patch_libdevice
    _patch_libdevice()
    out = []
    for case in json.loads(spec_json):
        args, elems = make_args(case)
        kernel = _kernel(case)
        best = math.inf
        for _ in range(INTERPRETER_RUNS):
            start = time.perf_counter()
            kernel[tuple(case["grid"])](*args, **case["constexprs"])
            best = min(best, time.perf_counter() - start)
        out.append(elems / best)
    print(json.dumps(out))


def interpreter_rates(specs: list) -> list:
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run([sys.executable, __file__, "--interpreter-worker", json.dumps(specs)], env=env,
                          check=True, capture_output=True, text=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def emulator_rate(case: dict) -> tuple[float, float, float]:
    """(elements/s of the best of three warm runs, first-call seconds, warm seconds)."""
    import gxusim.emulator as emu
    kernel = _kernel(case)
    args, elems = make_args(case)
    start = time.perf_counter()
    report = emu.emulate(kernel, case["grid"], *args, **case["constexprs"])
    first = time.perf_counter() - start
    assert report.ok, report.findings
    best = math.inf
    for _ in range(3):
        start = time.perf_counter()
        emu.emulate(kernel, case["grid"], *args, **case["constexprs"])
        best = min(best, time.perf_counter() - start)
    return elems / best, first, best


def main(argv: list | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller emulator sizes")
    parser.add_argument("--interpreter-worker", help=argparse.SUPPRESS)
    opts = parser.parse_args(argv)
    if opts.interpreter_worker:
        interpreter_worker(opts.interpreter_worker)
        return
    table = cases(opts.quick)
    try:
        from tqdm import tqdm
    except ImportError:
        def tqdm(it, **_):
            return it
    interp = interpreter_rates([c[1] for c in table])
    rows = []
    for (label, _, case), irate in tqdm(list(zip(table, interp)), desc="emulator"):
        erate, first, warm = emulator_rate(case)
        rows.append((label, irate, erate, erate / irate, warm, first))
    print(f"\n{'case':<22} {'interpreter el/s':>17} {'emulator el/s':>15} {'ratio':>8} {'warm ms':>9} "
          f"{'first call s':>13} {'JIT/load s':>12}")
    for label, irate, erate, ratio, warm, first in rows:
        print(f"{label:<22} {irate:>17.3g} {erate:>15.3g} {ratio:>7.0f}x {warm * 1e3:>9.1f} "
              f"{first:>13.2f} {first - warm:>12.2f}")
    geo = math.exp(sum(math.log(r[3]) for r in rows) / len(rows))
    verdict = "met" if geo >= TARGET_RATIO else "not met"
    print(f"{'geometric mean':<22} {'':>17} {'':>15} {geo:>7.0f}x   target {TARGET_RATIO}x: {verdict}")


if __name__ == "__main__":
    main()
