"""What the L1 beside shared memory is worth to a chunk loop, on the GPU (cuda target).

One binary, one plan, timed twice: with the driver asked for the smallest shared-memory
carveout (`cuFuncSetAttribute(PREFERRED_SHARED_MEMORY_CARVEOUT, 0)`: unpipelined plans take
no shared memory, so the whole 256 KiB is L1) and for the largest (100: 28 KiB of L1 left
on the H200). Layernorms of shapes the held-out set does not have (8192 x 2048 and
2048 x 8192, fp32), unpipelined, 32 programs, 1-8 warps, 32 or 64 elements a thread:
their normalising pass re-reads the rows the first pass loaded, from L1 while it holds
them (`caches.cached_rows`), from L2 when it does not. The model's time is printed
beside each measurement at both sizes (the largest carveout: a spec whose driver offers
only that one), with the binary's facts (`evidence.with_binary`), which the JSON keeps so
that a changed model can be checked against these times without a GPU.

Spilled registers also go through the L1 (local memory): plans that spill are timed and
shown apart, since the model charges their words the same at any L1 size.

    python benchmarks/l1_carveout.py [--json OUT.json]
"""
from __future__ import annotations

import argparse
import ctypes
import dataclasses
import json
import statistics
from typing import Callable, Iterator

import torch
import torch.nn.functional as F

import gxusim
from gxusim.model import core, evidence
from gxusim import target as targets
from gxusim.model.calibrate import Program, captured_launches
from gxusim.compiler.plan import candidate_plans
from gxusim.report import format_table
from gxusim.triton_launch import resources

PROGRAMS = 32
SHAPES = ((8192, 2048), (2048, 8192))
CARVEOUT_ATTRIBUTE = 9  # CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT (cuda.h)
CARVEOUTS = {"L1 256 KiB": 0, "L1 28 KiB": 100}  # percent of the shared-memory maximum

# The carveout percentage that gets each carveout on the H200 (driver 580): read with ncu's
# launch__shared_mem_config_size over 0-100%. The driver rounds a percentage up in steps of
# about 1/7: 43% gets 132 KiB, not 100.
PERCENT_FOR_CARVEOUT = {32768: 14, 65536: 28, 102400: 42, 135168: 56, 167936: 70,
                        200704: 84, 233472: 100}


def layernorm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return F.layer_norm(x, (x.shape[1],), weight, bias)


@dataclasses.dataclass(frozen=True)
class PlanChoice:
    """Which of a layernorm's candidate plans a benchmark times: 32 programs, chunks of 128
    or 2048, these warps and elements a thread, and these pipelining depths (None: any)."""
    warps: tuple[int, ...]
    per_thread: tuple[int, ...]
    stages: tuple[int, ...] | None = None

    def __call__(self, plan: object) -> bool:
        chunk = plan.meta.get("R0_BLOCK")
        per_thread = plan.meta.get("XBLOCK", 1) * (chunk or 0) / (32 * plan.num_warps)
        return plan.programs == PROGRAMS and chunk in (128, 2048) and \
            plan.num_warps in self.warps and per_thread in self.per_thread and \
            (self.stages is None or (plan.num_stages or 1) in self.stages)


# Unpipelined plans of 1-8 warps, 32 or 64 elements a thread.
PROBED = PlanChoice(warps=(1, 2, 4, 8), per_thread=(32, 64), stages=(1,))


def set_carveout(binary: object, percent: int) -> None:
    driver = ctypes.CDLL("libcuda.so.1")
    status = driver.cuFuncSetAttribute(ctypes.c_void_p(binary.function),
                                       ctypes.c_int(CARVEOUT_ATTRIBUTE), ctypes.c_int(percent))
    if status:
        raise RuntimeError(f"cuFuncSetAttribute(carveout {percent}%) failed: CUresult {status}")


def compiled_plan(kernel: object, args: list, plan: object,
                  spec: gxusim.HardwareSpec) -> tuple[object, object, object, object]:
    """(target launch, binary, its resources, the plan's facts with the binary's) of one
    plan of a captured kernel, compiled for the cuda target."""
    numels = kernel.numels(args)
    kernel.precompile_plans([plan], args)
    target_launch = kernel._target_launch(plan)
    binary = target_launch.fn.warmup(*args, grid=target_launch.grid, **target_launch.options())
    binary._init_handles()
    found = resources(binary)
    facts = evidence.with_binary(plan.facts(kernel.shape, numels,
                                            kernel.shape.argument_bytes(args), spec),
                                 spec, found)
    return target_launch, binary, found, facts


def layernorm_plans(spec: gxusim.HardwareSpec, chosen: Callable[[object], bool]
                    ) -> Iterator[tuple[str, object, list, object, object, object, object]]:
    """(shape, plan, arguments, target launch, binary, its resources, the plan's facts with
    the binary's) for each `chosen` plan of the layernorm of each of SHAPES, compiled for
    the cuda target."""
    for height, width in SHAPES:
        program = Program(f"layernorm {height}x{width}", layernorm,
                          ((height, width), (width,), (width,)))
        (launch,) = captured_launches(program)
        kernel, args = launch.kernel, launch.args
        for plan in filter(chosen, candidate_plans(kernel.shape, kernel.numels(args), spec)):
            yield (f"{height}x{width}", plan, args, *compiled_plan(kernel, args, plan, spec))


def measure(spec: gxusim.HardwareSpec) -> list[dict]:
    # The model's view of the largest carveout: a driver that offers no other.
    largest = spec.replace(smem_carveouts=(spec.smem_per_sm,))
    rows = []
    for shape, plan, args, target_launch, binary, found, facts in layernorm_plans(spec, PROBED):
        measured = {}
        for name, percent in CARVEOUTS.items():
            set_carveout(binary, percent)
            measured[name] = targets.active().time_launch(target_launch, args)
        set_carveout(binary, -1)  # the driver's own choice again
        rows.append({
            "shape": shape, "meta": plan.meta, "warps": plan.num_warps,
            "spilled": found.spills, "facts": dataclasses.asdict(facts),
            "measured_us": {k: v * 1e6 for k, v in measured.items()},
            "model_us": {"L1 256 KiB": core.predict_seconds(facts, spec) * 1e6,
                         "L1 28 KiB": core.predict_seconds(facts, largest) * 1e6}})
        print(f"{rows[-1]['shape']} {plan.meta} {plan.num_warps} warps: measured "
              f"{rows[-1]['measured_us']}, model {rows[-1]['model_us']}", flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write the rows here")
    options = parser.parse_args()
    spec = gxusim.load_spec("gxu-on-h200")
    gxusim.use_spec(spec)
    gxusim.set_target("cuda")
    rows = measure(spec)
    big, small = CARVEOUTS

    def line(row: dict) -> tuple:
        meas, model = row["measured_us"], row["model_us"]
        blocks = " x ".join(str(v) for v in row["meta"].values())
        return (row["shape"], blocks, row["warps"], row["spilled"],
                f"{meas[big]:.0f}", f"{meas[small]:.0f}", f"{meas[small] - meas[big]:+.0f}",
                f"{model[big]:.0f}", f"{model[small]:.0f}", f"{model[small] - model[big]:+.0f}")
    header = ("shape", "tile", "warps", "spilled words", f"measured {big}", small, "change",
              f"model {big}", small, "change")
    for title, group in (("no spills: the later pass's rows in L1 or not",
                          [r for r in rows if not r["spilled"]]),
                         ("spilling (the model charges spills alike at any L1)",
                          [r for r in rows if r["spilled"]])):
        print(f"\n{title} (us)")
        print(format_table(header, [line(r) for r in group]))
    clean = [r for r in rows if not r["spilled"]]
    measured_change = [r["measured_us"][small] - r["measured_us"][big] for r in clean]
    model_change = [r["model_us"][small] - r["model_us"][big] for r in clean]
    if clean:
        print(f"\nwithout spills, {len(clean)} plans: the smaller L1 adds "
              f"{sum(measured_change):.0f} us measured, {sum(model_change):.0f} us in the "
              f"model (median per plan {statistics.median(measured_change):.0f} and "
              f"{statistics.median(model_change):.0f})")
    if options.json:
        with open(options.json, "w") as file:
            json.dump({"rows": rows}, file, indent=1)


if __name__ == "__main__":
    main()
