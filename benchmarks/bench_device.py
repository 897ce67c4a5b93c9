"""Per-op overhead of eager gxu ops against the same op on the backing device.

Run: `python benchmarks/bench_device.py [--number N] [--repeat R]`. Small tensors (16
elements, 16x16 for matmul), so the numbers are almost pure overhead: one table, the
backing device's time per call, gxu's, and their ratio.

Where the time goes: allocations (`empty`, `empty_strided`) and the view primitives
(`view`, `as_strided`, `_reshape_alias`, which every composite view ends in) are C++ kernels
(`device/csrc/memory.cpp`), as cheap as the backing device's own. Every other op is one trip
through the Python boxed fallback (`gxusim.device.ops`): the dispatcher's boxing and the
Python trampoline (~3-4 us), mapping the arguments to backing aliases (one C++ call each),
the backing kernel through its OpOverload, and the result wrapped as a gxu tensor (one C++
call); cProfile of `a + b` on the emulator target shows no single step above a quarter.
"""
from __future__ import annotations

import argparse
import timeit
from typing import Callable

import torch

import gxusim
from gxusim import target


def _cases(device: torch.device | str) -> dict[str, Callable[[], object]]:
    """The benchmarked calls, each closed over small inputs made on `device`."""
    a = torch.randn(16, device=device)
    b = torch.randn(16, device=device)
    m = torch.randn(16, 16, device=device)
    return {
        "add": lambda: a + b,
        "mul": lambda: a * b,
        "relu": lambda: a.relu(),
        "matmul 16x16": lambda: m @ m,
        "sum": lambda: a.sum(),
        "view": lambda: a.view(4, 4),
        "add_ (in place)": lambda: a.add_(b),
        "alloc+free empty(16)": lambda: torch.empty(16, device=device),
    }


def _per_call_us(fn: Callable[[], object], number: int, repeat: int) -> float:
    fn()  # warm-up: first-call caches (op plans, dispatcher) are not overhead per op
    return min(timeit.repeat(fn, number=number, repeat=repeat)) / number * 1e6


def measure(number: int = 2000, repeat: int = 5) -> list[tuple[str, float, float]]:
    """(case, backing-device us per call, gxu us per call) for every case."""
    backing = _cases(target.backing_device())
    gxu = _cases("gxu")
    return [(name, _per_call_us(backing[name], number, repeat),
             _per_call_us(gxu[name], number, repeat)) for name in backing]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--number", type=int, default=2000, help="calls per timing")
    parser.add_argument("--repeat", type=int, default=5, help="timings per case (best is kept)")
    options = parser.parse_args()
    rows = measure(options.number, options.repeat)
    backing = str(target.backing_device())
    print(f"gxusim {gxusim.current_target()} target, torch {torch.__version__}; "
          f"best of {options.repeat} x {options.number} calls")
    print(f"{'op':<22}{backing + ' us':>12}{'gxu us':>12}{'ratio':>9}")
    for name, base, gxu in rows:
        print(f"{name:<22}{base:>12.2f}{gxu:>12.2f}{gxu / base:>8.1f}x")


if __name__ == "__main__":
    main()
