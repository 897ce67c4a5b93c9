"""Check the performance model against kernel times measured on a GPU, without a GPU.

Every measured launch saved by the GPU runs carries its plan and the facts the model
predicts from (`launch_facts.LaunchFacts`), so the model can be refitted and judged here:

* `--calibration`: samples from `gxusim calibrate --samples` (the calibration programs);
  the model is fitted on them (`gxusim.model.calibrate.fit`; without it, the `--spec` as it stands is
  judged);
* held out, never used for fitting: `--ceiling` (every config `bench_ceiling.py` timed, per
  kernel) and `--sweep` (the model suite at GPU scale under each policy,
  `GXUSIM_TIMING=1 gxusim sweep --scale gpu --json`).

Facts are recomputed first: each calibration program, ceiling case and suite model is
compiled here for gxu on FakeTensors (predict-only, nothing runs), and every launch's facts
are `LaunchPlan.facts` of its stored plan on the regenerated kernel, so files measured
before the model gained a fact (phases) are judged by the current model. A kernel this
machine's Inductor generates differently (another name or sizes) keeps its stored facts;
`--stored-facts` keeps them all. Inductor's kernels differ between torch versions in ways
that keep their names and sizes (2.11 marks the transformer's k load evict_last, which L2
keeps across the timing's flush, and 2.13 does not): launches measured from 2026-12-02 on
keep their kernel's source and sizes, and their facts come from those; older ones need
the torch that timed them (the stored H200 files: torch 2.11, the GPU machine's; a virtual
environment holds it beside another). The first line printed says which is which.

`--registers` (the output of `benchmarks/registers.py`) gives the launches that were timed
before the cuda target recorded what their binaries say (ptxas's spills,
`LaunchFacts.compiled_spills`; the memory waits of their chunk loops' machine code,
`PhaseFacts.round_trips`) what ptxas made of their plans; without it the model estimates
them.

Prints the error per held-out kernel (median and worst |predicted/measured - 1|), the
Spearman rank correlation between predicted and measured times over each kernel's configs
(what choosing a config needs), each suite model's gxu/seed ratio, predicted against
measured, and the fidelity targets (median <= 10%, worst <= 40%, Spearman >= 0.9 per kernel,
gxu/seed ratios within 15% and in the right direction). `--json` keeps the tables.

    python benchmarks/validate_model.py --spec gxu-on-h200 \\
        --calibration benchmarks/results/calibration_spills_h200.json \\
        --ceiling benchmarks/results/ceiling_h200.json --sweep benchmarks/results/sweep_gpu_h200.json \\
        --registers benchmarks/results/registers_h200.json

`--corpus ROWS.json ...` judges the model on measured corpus rows instead: ten timed configs
of each kernel (`--configs`), with the facts predict-only gives them today (the plan's, read
against the binary compiled here for the spec; `--no-binary`: the plan's alone), the fit and
test parts side by side, and each kernel's gxu/seed ratio predicted against measured;
`--terms` adds what each term earns: its share of the time and the error without it.

    python benchmarks/validate_model.py --corpus benchmarks/results/corpus_fit_h100.json \
        benchmarks/results/corpus_test_h200.json [--kernels] [--configs N] [--no-binary] [--terms]
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import dataclasses
import functools
import json
import math
import sys
import warnings
from pathlib import Path

import numpy as np
import torch

import gxusim
from gxusim.model import caches, calibrate, core, launch_facts, terms
from gxusim.model.evidence import MACHINE_CODE_FIELDS, with_machine_code
from gxusim.model.machine_code import MachineCode
from gxusim.triton_launch import Resources
from gxusim.report import format_table
from gxusim.model.residency import residency


def spearman(x: list[float], y: list[float]) -> float:
    """Rank correlation (average ranks for ties)."""
    def ranks(values: list[float]) -> np.ndarray:
        order = np.argsort(values, kind="stable")
        result = np.empty(len(values))
        sorted_values = np.asarray(values)[order]
        start = 0
        while start < len(values):
            end = start
            while end + 1 < len(values) and sorted_values[end + 1] == sorted_values[start]:
                end += 1
            result[order[start:end + 1]] = (start + end) / 2
            start = end + 1
        return result
    rx, ry = ranks(x), ranks(y)
    if rx.std() == 0 or ry.std() == 0:
        return math.nan
    return float(np.corrcoef(rx, ry)[0, 1])


def held_out_samples(ceiling: Path | None, sweep: Path | None) -> list[dict]:
    """(group, kernel, facts, measured) from the ceiling search and the suite sweep."""
    samples = []
    if ceiling:
        for row in json.loads(ceiling.read_text()):
            for s in row.get("samples", []):
                if s.get("facts"):
                    samples.append({"group": f"ceiling {s['case']}", "kernel": s["kernel"],
                                    "source": row.get("sources", {}).get(s["kernel"]),
                                    "policy": s.get("policy", "candidate"),
                                    "plan": {k: s.get(k) for k in PLAN_KEYS},
                                    "n_tiles": s.get("n_tiles"), "numels": s.get("numels"),
                                    "facts": s["facts"], "measured_s": s["seconds"]})
    if sweep:
        for row in json.loads(sweep.read_text()):
            for k in row.get("kernels") or []:
                if k.get("facts") and k.get("measured_s"):
                    samples.append({"group": f"suite {row['model']}", "kernel": k["kernel"],
                                    "policy": row["policy"], "model": row["model"],
                                    "plan": {"meta": _launch_meta(k), "num_warps": k["num_warps"],
                                             "programs": k["programs"],
                                             "num_stages": _sweep_stages(k)},
                                    "n_tiles": k.get("tiles"), "numels": k.get("numels"),
                                    "source": k.get("source"),
                                    "facts": k["facts"], "measured_s": k["measured_s"]})
    return samples


def _sweep_stages(kernel_row: dict) -> int | None:
    """A suite launch's chunk-loop depth: recorded by the sweep, or (files from before it
    was) read back from the stored facts of its chunk loops."""
    if "num_stages" in kernel_row:
        return kernel_row["num_stages"]
    looped = [p["pipeline_stages"] for p in kernel_row["facts"].get("phases", [])
              if p.get("looped") and "pipeline_stages" in p]
    return max(looped) if looped and max(looped) > 1 else None


def calibration_samples(path: Path) -> list[dict]:
    return [{"group": f"calibration {r['program']}", "kernel": r["kernel"],
             "policy": "candidate", "plan": {k: r.get(k) for k in PLAN_KEYS}, "n_tiles": None,
             "numels": r.get("numels"), "source": r.get("source"), "facts": r["facts"],
             "measured_s": r["measured_s"]}
            for r in json.loads(path.read_text())]


PLAN_KEYS = ("meta", "num_warps", "programs", "num_stages")


def _minor(version: str) -> str:
    return ".".join(version.split("+")[0].split(".")[:2])


def torch_check(paths: list[Path]) -> str:
    """A line on whether this torch generates the kernels the files timed: Inductor's
    differ between versions (torch 2.11 marks the transformer's k load evict_last, which
    L2 keeps across the timing's flush; 2.13 leaves it unmarked), and facts are recomputed
    from the kernels regenerated here. Rows say which torch ran them (files from before
    2026-12-02 do not: the H200 ones are torch 2.11's, the GPU machine's)."""
    measured = {_minor(row["torch"]) for path in paths for row in json.loads(path.read_text())
                if isinstance(row, dict) and row.get("torch")}
    here = _minor(torch.__version__)
    if not measured:
        return (f"kernels regenerated with torch {here}; the files do not say which torch "
                f"generated theirs (regenerate with that one: kernels differ by version)")
    if measured != {here}:
        return (f"WARNING: kernels regenerated with torch {here}, but the files were timed "
                f"with torch {', '.join(sorted(measured))}: their kernels may differ (eviction "
                f"hints, tiling); regenerate with the torch that ran them")
    return f"kernels regenerated with torch {here}, as the files were timed"


def _launch_meta(kernel_row: dict) -> dict:
    """A sweep row's meta lists every block size, the kernel's static ones too."""
    return dict(kernel_row.get("meta") or {})


# --- facts from the kernels' sources ---------------------------------------------------------

@contextlib.contextmanager
def _recording_kernels(found: list):
    """Record (shape, numels) of every gxu kernel launched in the block (predict-only runs
    launch nothing, so `launcher.capture` sees nothing): wraps `GXUKernel.run` meanwhile."""
    from gxusim.compiler.launcher import GXUKernel
    original = GXUKernel.run

    def run(self, *args, **kwargs):
        found.append((self.name, self.shape, self.numels(args)))
        return original(self, *args, **kwargs)
    GXUKernel.run = run
    try:
        yield
    finally:
        GXUKernel.run = original


def _compile_fake(fn, shapes, dtype=torch.float32) -> list:
    """Compile `fn` for gxu on FakeTensors of these shapes (predict-only: nothing runs, no
    memory): the kernels' shapes and sizes, exactly as a GPU run generates them."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from gxusim.compiler.launcher import predict_only
    found: list = []
    torch._dynamo.reset()
    with _recording_kernels(found), FakeTensorMode(allow_non_fake_inputs=False), \
            torch.device("gxu"), warnings.catch_warnings(), predict_only():
        warnings.filterwarnings("ignore")
        inputs = [torch.empty(shape, dtype=dtype) for shape in shapes]
        torch.compile(fn, dynamic=False)(*inputs)
    torch._dynamo.reset()
    return found


def kernel_shapes(groups: set) -> dict:
    """(group, kernel name) -> [(KernelShape, numels)] for the calibration programs, the
    ceiling cases and the suite models named in `groups`, regenerated on this machine."""
    sys.path.insert(0, str(Path(__file__).parent))
    import bench_ceiling
    from gxusim import models
    from gxusim.predict import predict_case
    shapes: dict = collections.defaultdict(list)

    def add(group: str, found: list) -> None:
        for name, shape, numels in found:
            shapes[(group, name)].append((shape, numels))
    gxusim.use_heuristics("gxu")
    for program in calibrate.PROGRAMS + calibrate.OTHER_PROGRAMS:
        if f"calibration {program.name}" in groups:
            add(f"calibration {program.name}",
                _compile_fake(program.fn, program.shapes, program.dtype))
    for case in bench_ceiling.cases(quick=False):
        if f"ceiling {case.name}" in groups:
            add(f"ceiling {case.name}", _compile_fake(case.fn, case.shapes, case.dtype))
    for name, case in models.CASES.items():
        if f"suite {name}" in groups:
            found: list = []
            with _recording_kernels(found):
                predict_case(case, "gpu", ["gxu"])
            add(f"suite {name}", found)
    return shapes


def _recorded(sample: dict) -> bool:
    """Whether the measurement kept its kernel's source and sizes (files from 2026-12-02 on)."""
    return bool(sample.get("source") and sample.get("numels"))


@functools.lru_cache(maxsize=None)
def _shape_of(source: str, kernel: str):
    from gxusim.compiler.plan import kernel_shape_from_source
    return kernel_shape_from_source(source, kernel)


def recompute_facts(samples: list[dict], spec: gxusim.HardwareSpec, binary: bool = True) -> int:
    """Replace each sample's stored facts by `LaunchPlan.facts` of its plan on its kernel's
    source (the one the measurement kept, else regenerated here; phases included), with
    what the GPU run's binary said unless
    `binary` is False (predict-only: the plan, the source and the spec alone); returns how
    many kept their stored facts (no matching kernel: a kernel the GPU run generated
    differently)."""
    from gxusim.compiler.plan import LaunchPlan
    shapes = kernel_shapes({s["group"] for s in samples if not _recorded(s)})
    kept = 0
    for sample in samples:
        stored = sample["facts"]
        if _recorded(sample):  # the kernel that ran, whichever torch is here
            match = [(_shape_of(sample["source"], sample["kernel"]), sample["numels"])]
        else:
            candidates = shapes.get((sample["group"], sample["kernel"]), [])
            match = [(shape, numels) for shape, numels in candidates
                     if sample["numels"] is None or numels == sample["numels"]]
        if not match:
            kept += 1
            continue
        shape, numels = match[0]
        plan = sample["plan"]
        meta = {k: v for k, v in plan["meta"].items() if k in shape.block_params}
        n_tiles = sample["n_tiles"] or stored["tiles_per_program"] * plan["programs"]
        launch = LaunchPlan(meta, plan["num_warps"], plan["programs"], n_tiles, {},
                            plan.get("num_stages"))
        facts = launch.facts(shape, numels, stored["bytes_moved"], spec)
        if facts.tiles_per_program != stored["tiles_per_program"] or \
                facts.tile_elements != stored["tile_elements"]:
            kept += 1  # not the kernel that was timed
            continue
        if not binary:
            sample["facts"] = dataclasses.asdict(facts)
            continue
        # What the compiled binary told the GPU run (ptxas's spills, the programs its
        # registers let reside on an SM) no source can say.
        sample["facts"] = {**dataclasses.asdict(facts),
                           "compiled_spills": stored.get("compiled_spills"),
                           "blocks_per_sm": stored["blocks_per_sm"]}
        code = [{k: p.get(k) for k in MACHINE_CODE_FIELDS if k in p}
                for p in stored.get("phases", [])]
        if len(code) == len(facts.phases) and any(
                c.get("spilled_words") is not None or c.get("issued") is not None or
                c.get("round_trips") for c in code):
            sample["facts"]["phases"] = [{**dataclasses.asdict(p), **c}
                                         for p, c in zip(facts.phases, code)]
    return kept


def attach_compiled(samples: list[dict], registers: Path, spec: gxusim.HardwareSpec) -> int:
    """Give each launch what its plan's binary says in `registers` (rows of
    benchmarks/registers.py) where its stored facts lack it: ptxas's spills, and the memory
    waits of its unpipelined chunk loops (`PhaseFacts.round_trips`, from the binary's machine
    code). Returns how many launches got either."""
    rows = {(r["case"], r["kernel"], json.dumps(r["meta"], sort_keys=True), r["num_warps"],
             r["num_stages"] or 1): r for r in json.loads(registers.read_text())}
    attached = 0
    for sample in samples:
        plan = sample["plan"]
        meta = {k: v for k, v in plan["meta"].items() if k.endswith("BLOCK")}
        row = rows.get((sample["group"].split(" ", 1)[1], sample["kernel"],
                        json.dumps(meta, sort_keys=True), plan["num_warps"],
                        plan.get("num_stages") or 1))
        if row is None:
            continue
        facts = launch_facts.facts_from_dict(sample["facts"])
        # As `evidence.with_binary` does: the binary's registers (and the rings its
        # pipelined loops take in shared memory) limit the programs an SM holds.
        facts = dataclasses.replace(facts, blocks_per_sm=residency(
            spec, facts.num_warps, row["n_regs"], int(caches.ring_bytes(facts)))[0])
        if facts.compiled_spills is None:
            facts = dataclasses.replace(facts, compiled_spills=row["n_spills"])
        if row.get("code") and all(p.spilled_words is None for p in facts.phases):
            binary = Resources(row["n_spills"], row["n_regs"], 0, MachineCode.from_json(row["code"]))
            facts = dataclasses.replace(facts, phases=with_machine_code(facts, spec, binary))
        sample["facts"] = dataclasses.asdict(facts)
        attached += 1
    return attached


def predict(sample: dict, spec: gxusim.HardwareSpec) -> float:
    return core.predict_seconds(launch_facts.facts_from_dict(sample["facts"]), spec)


def error_table(samples: list[dict], spec: gxusim.HardwareSpec) -> tuple[str, dict]:
    by_kernel = collections.defaultdict(list)
    for s in samples:
        by_kernel[(s["group"], s["kernel"])].append(s)
    lines, errors, correlations = [], [], []
    for (group, kernel), rows in by_kernel.items():
        predicted = [predict(r, spec) for r in rows]
        measured = [r["measured_s"] for r in rows]
        kernel_errors = [abs(p / m - 1) for p, m in zip(predicted, measured)]
        errors += kernel_errors
        rho = spearman(predicted, measured) if len(rows) >= 4 else math.nan
        if not math.isnan(rho):
            correlations.append(rho)
        lines.append((group, kernel[:44], len(rows), f"{np.median(kernel_errors):.1%}",
                      f"{max(kernel_errors):.1%}", "" if math.isnan(rho) else f"{rho:.2f}"))
    summary = {"launches": len(errors), "median_error": float(np.median(errors)),
               "p90_error": float(np.percentile(errors, 90)),
               # how far the worst-launch target is: how many launches miss it
               "beyond_worst_target": int(sum(e > TARGETS["worst_error"] for e in errors)),
               "worst_error": float(max(errors)),
               "spearman_min": min(correlations, default=math.nan),
               "spearman_median": float(np.median(correlations)) if correlations else math.nan}
    text = format_table(("held out", "kernel", "configs", "median err", "worst err", "spearman"),
                        lines)
    text += (f"\nall {summary['launches']} held-out launches: median |predicted/measured - 1| "
             f"{summary['median_error']:.1%}, 90th percentile {summary['p90_error']:.1%}, worst "
             f"{summary['worst_error']:.1%} ({summary['beyond_worst_target']} beyond "
             f"{TARGETS['worst_error']:.0%}); Spearman per kernel: median "
             f"{summary['spearman_median']:.2f}, lowest {summary['spearman_min']:.2f}")
    return text, summary


def ratio_table(samples: list[dict], spec: gxusim.HardwareSpec) -> tuple[str, list[dict]]:
    """Per suite model: the gxu/seed ratio of summed kernel times, predicted and measured."""
    totals = collections.defaultdict(lambda: [0.0, 0.0])
    for s in samples:
        if "model" in s:
            totals[(s["model"], s["policy"])][0] += predict(s, spec)
            totals[(s["model"], s["policy"])][1] += s["measured_s"]
    rows = []
    for model in dict.fromkeys(m for m, _ in totals):
        if (model, "gxu") in totals and (model, "seed") in totals:
            gxu, seed = totals[(model, "gxu")], totals[(model, "seed")]
            predicted, measured = gxu[0] / seed[0], gxu[1] / seed[1]
            rows.append({"model": model, "predicted": predicted, "measured": measured,
                         "error": abs(predicted / measured - 1),
                         "direction": (predicted < 1) == (measured < 1) or
                         abs(measured - 1) < 0.05})
    text = format_table(("model", "gxu/seed predicted", "gxu/seed measured", "error", "direction"),
                        [(r["model"], f"{r['predicted']:.2f}", f"{r['measured']:.2f}",
                          f"{r['error']:.1%}", "right" if r["direction"] else "WRONG")
                         for r in rows])
    return text, rows


def corpus_samples(paths: list[Path], spec: gxusim.HardwareSpec, configs: int = 10,
                   binary: bool = True) -> list[dict]:
    """Timed configs of measured corpus rows (`bench_ceiling.py --corpus --json`) with the
    facts today's predict-only gives their plans: the corpus kernel planned on meta
    tensors, read against the binary Triton compiles here for the spec (`binary`; else the
    plan's facts alone). Per kernel, `configs` candidates spread evenly over the measured
    order, fastest to slowest (0: every one; compiling is most of the time), and the rows'
    gxu and seed plans, marked; grouped by part and kind."""
    import numpy as np
    from tqdm import tqdm
    from gxusim import corpus
    from gxusim.model import evidence
    from gxusim.compiler.heuristics import LaunchConfig
    from gxusim.compiler.plan import config_plan
    kernels = Path(__file__).resolve().parent / "corpus" / "kernels.jsonl"
    entries = {e["id"]: e for e in corpus.load(kernels)}
    samples = []
    rows = corpus.measured_rows([r for p in paths for r in json.loads(p.read_text())])
    for row in tqdm(rows, desc="corpus kernels", unit="kernel"):
        kernel = corpus.load_kernel(entries[row["id"]])
        args = corpus.meta_arguments(entries[row["id"]])
        numels, moved = kernel.numels(args), kernel.shape.argument_bytes(args)
        timed = sorted((c for c in row["candidates"] if c.get("seconds")),
                       key=lambda c: c["seconds"])
        if configs and len(timed) > configs:
            timed = [timed[int(i)] for i in np.linspace(0, len(timed) - 1, configs)]
        chosen = [("candidate", c) for c in timed] + \
            [(name, row[name]) for name in ("gxu", "seed") if (row.get(name) or {}).get("seconds")]
        for policy, c in chosen:
            plan = config_plan(kernel.shape, numels,
                               LaunchConfig(c["meta"], c["num_warps"], c["num_stages"]), spec)
            facts = plan.facts(kernel.shape, numels, moved, spec)
            found = kernel.spec_binary(plan, spec) if binary else None
            if found is not None:
                facts = evidence.with_binary(facts, spec, found)
            samples.append({"group": f"corpus {row['part']} {row['kind']}", "part": row["part"],
                            "kernel": f"{row['id']} {row['kernel']}", "policy": policy,
                            "facts": dataclasses.asdict(facts), "measured_s": c["seconds"]})
    return samples


def corpus_report(samples: list[dict], spec: gxusim.HardwareSpec, kernels: bool) -> dict:
    """The error table per part (fit, test) side by side, and per kernel the predicted
    gxu/seed ratio against the measured one."""
    summaries = {}
    for part in ("fit", "test"):
        chosen = [s for s in samples if s["part"] == part and s["policy"] == "candidate"]
        if not chosen:
            continue
        text, summaries[part] = error_table(chosen, spec)
        print(f"\n{part} part:\n" + (text if kernels else text.splitlines()[-1]))
        ratio_errors = []
        by_kernel = collections.defaultdict(dict)
        for s in samples:
            if s["part"] == part and s["policy"] in ("gxu", "seed"):
                by_kernel[s["kernel"]][s["policy"]] = (predict(s, spec), s["measured_s"])
        for pair in by_kernel.values():
            if len(pair) == 2:
                predicted = pair["gxu"][0] / pair["seed"][0]
                measured = pair["gxu"][1] / pair["seed"][1]
                ratio_errors.append(abs(predicted / measured - 1))
        if ratio_errors:
            summaries[part]["ratio_error_median"] = float(np.median(ratio_errors))
            summaries[part]["ratio_error_worst"] = float(max(ratio_errors))
            print(f"gxu/seed time ratio per kernel, predicted against measured ({len(ratio_errors)} "
                  f"kernels): median error {np.median(ratio_errors):.1%}, worst "
                  f"{max(ratio_errors):.1%}")
    return summaries


def term_table(samples: list[dict], spec: gxusim.HardwareSpec) -> str:
    """Per model term, fit and test part side by side: its share of the predicted time
    (mean over the timed configs) and the median |predicted/measured - 1| with the term
    switched off (a time of 0, a rate without limit) against all terms on: what the term
    earns on kernels it was not fitted to."""
    chosen = {part: [(launch_facts.facts_from_dict(s["facts"]), s["measured_s"])
                     for s in samples if s["part"] == part and s["policy"] == "candidate"]
              for part in ("fit", "test")}
    chosen = {part: rows for part, rows in chosen.items() if rows}

    def median_error(rows: list, judged: gxusim.HardwareSpec) -> float:
        return float(np.median([abs(core.predict_seconds(f, judged) / t - 1) for f, t in rows]))
    breakdowns = {part: [core.breakdown(f, spec) for f, _ in rows] for part, rows in chosen.items()}
    base = {part: median_error(rows, spec) for part, rows in chosen.items()}
    lines = []
    for term in terms.TERMS:
        off = spec.replace(**{term.field: 1e30 if term.field == "mem_bandwidth" else 0.0})
        without = {part: median_error(rows, off) for part, rows in chosen.items()}
        cells = [term.field, "fitted" if term.fitted else "measured"]
        cells += [f"{np.mean([b[term.field] / sum(b.values()) for b in breakdowns[part]]):.1%}"
                  for part in chosen]
        cells += [f"{without[part]:.1%} ({without[part] - base[part]:+.1%})" for part in chosen]
        lines.append(tuple(cells))
    header = ("term", "how set", *(f"share of time, {p}" for p in chosen),
              *(f"median error without it, {p} (all on: {base[p]:.1%})" for p in chosen))
    return format_table(header, lines)


TARGETS = {"median_error": 0.10, "worst_error": 0.40, "spearman_min": 0.9, "ratio_error": 0.15}


def targets_line(summary: dict, ratios: list[dict]) -> str:
    worst_ratio = max((r["error"] for r in ratios), default=0.0)
    wrong = sum(not r["direction"] for r in ratios)
    checks = [
        ("median", summary["median_error"], TARGETS["median_error"], summary["median_error"] <=
         TARGETS["median_error"]),
        ("worst", summary["worst_error"], TARGETS["worst_error"], summary["worst_error"] <=
         TARGETS["worst_error"]),
        ("lowest Spearman", summary["spearman_min"], TARGETS["spearman_min"],
         summary["spearman_min"] >= TARGETS["spearman_min"]),
    ]
    if ratios:  # only a --sweep has both policies' measurements to compare
        checks.append(("worst gxu/seed ratio error", worst_ratio, TARGETS["ratio_error"],
                       worst_ratio <= TARGETS["ratio_error"] and not wrong))
    return "targets: " + "; ".join(
        f"{name} {value:.2f} (target {target:.2f}) {'met' if ok else 'MISSED'}"
        for name, value, target, ok in checks) + (f"; {wrong} ratio(s) in the wrong direction"
                                                  if wrong else "")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", default="gxu-on-h200", help="spec to judge (or to fit from)")
    parser.add_argument("--calibration", type=Path, help="gxusim calibrate --samples JSON")
    parser.add_argument("--ceiling", type=Path, help="bench_ceiling.py --json output")
    parser.add_argument("--sweep", type=Path, help="GXUSIM_TIMING=1 gxusim sweep --json output")
    parser.add_argument("--registers", type=Path,
                        help="benchmarks/registers.py --json output: ptxas's spills per plan")
    parser.add_argument("--json", type=Path, help="write the summary here")
    parser.add_argument("--predict-only", action="store_true",
                        help="judge the held-out launches as predict-only sees them: facts "
                             "from the plan, the kernel's source and the spec, no binary "
                             "(the calibration keeps its binaries)")
    parser.add_argument("--stored-facts", action="store_true",
                        help="use the facts stored with each launch instead of recomputing "
                             "them from the regenerated kernels (older files lack phases)")
    parser.add_argument("--corpus", type=Path, nargs="+", metavar="ROWS.json",
                        help="judge the model on measured corpus rows instead (bench_ceiling.py "
                             "--corpus --json): each part's error, predict-only facts")
    parser.add_argument("--kernels", action="store_true", help="--corpus: a line per kernel")
    parser.add_argument("--configs", type=int, default=10, metavar="N",
                        help="--corpus: N candidates a kernel, spread over its measured order "
                             "(0: all)")
    parser.add_argument("--terms", action="store_true",
                        help="--corpus: each term's share of the time and the error without it")
    parser.add_argument("--no-binary", action="store_true",
                        help="--corpus: the plans' facts alone, not read against the binary "
                             "compiled here for the spec")
    args = parser.parse_args()
    spec = gxusim.load_spec(args.spec)
    gxusim.use_spec(spec)
    if args.corpus:
        samples = corpus_samples(args.corpus, spec, args.configs, not args.no_binary)
        summaries = corpus_report(samples, spec, args.kernels)
        if args.terms:
            print("\n" + term_table(samples, spec))
        if args.json:
            args.json.write_text(json.dumps(summaries, indent=1))
        return 0
    calibration = calibration_samples(args.calibration) if args.calibration else []
    samples = held_out_samples(args.ceiling, args.sweep)
    if not samples:
        print("no held-out launches with facts and measured times (see --ceiling, --sweep)",
              file=sys.stderr)
        return 2
    if args.predict_only and args.stored_facts:
        parser.error("--predict-only recomputes the facts: drop --stored-facts")
    if not args.stored_facts:
        recorded = sum(map(_recorded, calibration + samples))
        print(f"{recorded} of {len(calibration) + len(samples)} launches kept their kernel's "
              f"source (facts from it); the rest are regenerated here: "
              + torch_check([p for p in (args.calibration, args.ceiling, args.sweep) if p]))
        kept = recompute_facts(calibration, spec) + \
            recompute_facts(samples, spec, binary=not args.predict_only)
        print(f"facts recomputed by LaunchPlan.facts from the regenerated kernels "
              f"({kept} of {len(calibration) + len(samples)} launches kept their stored "
              f"facts: kernel not regenerated identically)"
              + ("; held out without their binaries" if args.predict_only else ""))
    if args.registers:
        compiled = calibration if args.predict_only else calibration + samples
        attached = attach_compiled(compiled, args.registers, spec)
        print(f"what ptxas made of their plans (spills, chunk loops' memory waits) from "
              f"{args.registers.name} for {attached} launches")
    if calibration:
        fit = calibrate.fit(spec, [launch_facts.facts_from_dict(r["facts"]) for r in calibration],
                             [r["measured_s"] for r in calibration],
                             groups=[r["group"] for r in calibration])
        spec = fit.spec
        print(f"fitted on {len(calibration)} calibration launches: median error "
              f"{fit.median_error:.1%}, max {fit.max_error:.1%}")
        print("  " + ", ".join(f"{t.field} = {getattr(spec, t.field):.4g}"
                               for t in terms.TERMS) + "\n")
    text, summary = error_table(samples, spec)
    print(text)
    ratios_text, ratios = ratio_table(samples, spec)
    if ratios:
        print("\n" + ratios_text)
    print("\n" + targets_line(summary, ratios))
    if args.json:
        args.json.write_text(json.dumps({"spec": {t.field: getattr(spec, t.field)
                                                  for t in terms.TERMS},
                                         "summary": summary, "ratios": ratios}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
