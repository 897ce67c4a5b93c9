"""Policies against the capped ceiling, on the GPU (cuda target), one run.

For each case (pointwise, row and column sums, softmax, layernorm, transpose; fp32 and
bf16) it compiles the model for gxu, captures the generated kernels with their arguments,
and times, kernel by kernel (`triton.testing.do_bench`, median, kernels alone):

* the plan each policy picks ("seed", "gxu"; autotune's pick, the fastest candidate, timed a
  second time);
* every legal config of the same generated kernel (`plan.candidate_plans`: blocks, warps,
  pipelining depth, grid <= the spec's cap): the best is the **capped ceiling**.

Beside them: eager CUDA and stock Inductor (uncapped), whole calls. Every candidate's output
is checked against the compiled kernel's, and the compiled output against eager.

    python benchmarks/bench_ceiling.py [--quick] [--json OUT.json] [--cases NAME ...] [--ray [ADDRESS]]
    python benchmarks/bench_ceiling.py --corpus benchmarks/corpus/kernels.jsonl [--part test|fit|all]
        [--count N] [--kinds KIND ...] [--budget SECONDS] [--json OUT.json [--resume]] [--gpus N]
    python benchmarks/bench_ceiling.py --corpus-table OUT.json

With `--corpus`, each corpus kernel (`benchmarks/corpus/README.md`) is timed at every legal
config, under `seed`, `gxu` and gxu's rules alone; the table by kernel kind puts beside them
the model's pick among the configs that fit a thread's registers and autotune's search's
pick, both replayed from the stored times. `--resume` keeps the kernels already in
`--json` and measures the rest (visits to a GPU add up); `--gpus N` runs one process per
GPU, each a shard of the sample, and merges their rows. A kernel that leaves the GPU's
context unusable (a sticky CUDA error, such as a misaligned address) is kept as a
`lost_context` row and ends the run with exit status 3, as every later launch in the
process would fail; `--resume` then continues after it in a new process and does not
retry it (other errors are retried).

With `--corpus --autotune`, each kernel is planned once by autotune as a first max-autotune
call meets it (empty autotune cache): the search's wall time (compiles included), the
configs it timed, and, with `--ceilings` (an exhaustive run on the same kind of GPU), its
pick against that kernel's ceiling.

With `--ray`, each case's search is a Ray task holding one GPU (`gxusim.distributed`): a
machine's or a cluster's GPUs search N cases at once, and the rows are the same.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import time
from pathlib import Path
from typing import Callable, Iterator

import torch
from triton.runtime.errors import OutOfResources

import gxusim
from gxusim import target as targets
from gxusim.compiler import launcher
from gxusim.compiler.autotune import AutotuneHeuristics
from gxusim.compiler.heuristics import GXUHeuristics
from gxusim.compiler.plan import candidate_plans, plan_launch, ranked_plans
from gxusim.compiler.policies import resolve_policy
from gxusim.report import format_table


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    fn: Callable[..., torch.Tensor]
    shapes: tuple[tuple[int, ...], ...]
    dtype: torch.dtype = torch.float32


def _gelu(x: torch.Tensor) -> torch.Tensor:
    return 0.5 * x * (1 + torch.tanh(0.7978845608 * (x + 0.044715 * x ** 3)))


def _layernorm(x: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.layer_norm(x, x.shape[-1:])


def cases(quick: bool) -> list[Case]:
    sizes = (1 << 20, 1 << 24, 100_000_000) + (() if quick else (1 << 30,))
    out = []
    for n in sizes:
        out.append(Case(f"mul_relu {n:.0e}", lambda x: (x * 2).relu(), ((n,),)))
        out.append(Case(f"tanh_gelu {n:.0e}", _gelu, ((n,),)))
        out.append(Case(f"broadcast_add {n:.0e}", torch.add, ((n // 1024, 1024), (1024,))))
    out += [
        Case("row_sum 32768x4096", lambda x: x.sum(1), ((32768, 4096),)),
        Case("row_sum 1Mx128", lambda x: x.sum(1), ((1 << 20, 128),)),
        Case("row_sum 256x1M", lambda x: x.sum(1), ((256, 1 << 20),)),
        Case("col_sum 16384x4096", lambda x: x.sum(0), ((16384, 4096),)),
        Case("softmax 65536x1024", lambda x: x.softmax(-1), ((65536, 1024),)),
        Case("softmax 2048x32768", lambda x: x.softmax(-1), ((2048, 32768),)),
        Case("layernorm 4096x4096", _layernorm, ((4096, 4096),)),
        Case("transpose 8192x8192", lambda x: x.t().contiguous(), ((8192, 8192),)),
    ]
    bf16 = ("mul_relu 1e+08", "row_sum 32768x4096", "softmax 65536x1024", "layernorm 4096x4096")
    out += [dataclasses.replace(c, name=c.name + " bf16", dtype=torch.bfloat16)
            for c in list(out) if c.name in bf16]
    return out


def _bench(fn: Callable[[], object]) -> float:
    import triton.testing
    return triton.testing.do_bench(fn, warmup=3, rep=15, return_mode="median") / 1e3


def _kernel_rows(case: Case, captured: list, spec: gxusim.HardwareSpec, dtype: torch.dtype
                 ) -> dict:
    """Per policy and for the ceiling: the sum over the graph's kernels of their times."""
    target = targets.active()
    totals = {"seed": 0.0, "gxu": 0.0, "autotune": 0.0, "ceiling": 0.0}
    configs, candidates_timed, bytes_moved, samples, refused = [], 0, 0.0, [], []
    sources = {}  # kernel -> its source, as this process's Inductor wrote it
    for launch in captured:
        kernel, args = launch.kernel, launch.args
        sources[kernel.name] = kernel.shape.source
        numels = kernel.numels(args)
        kernel_bytes = kernel.shape.argument_bytes(args)
        bytes_moved += kernel_bytes

        def sample(plan, seconds: float, policy: str) -> dict:
            """One (config, time) pair with the facts the performance model predicts from:
            held-out data for benchmarks/validate_model.py."""
            return {"case": case.name, "kernel": kernel.name, "policy": policy,
                    "numels": numels, "seconds": seconds, "meta": plan.meta,
                    "num_warps": plan.num_warps, "num_stages": plan.num_stages,
                    "programs": plan.programs, "n_tiles": plan.n_tiles,
                    "facts": dataclasses.asdict(plan.facts(kernel.shape, numels, kernel_bytes, spec))}
        reference = [a.clone() for n, a in zip(kernel.shape.runtime_args, args)
                     if n in kernel.written]
        plans = candidate_plans(kernel.shape, numels, spec)
        kernel.precompile_plans(plans, args)
        timed = []
        for plan in plans:
            copies = kernel._target_launch(plan).with_copies_of_written(args)
            try:
                target.execute(kernel._target_launch(plan), copies, spec)
            except OutOfResources:  # the spec's shared memory held it, the GPU's does not
                refused.append(f"{plan.meta} w{plan.num_warps} s{plan.num_stages}")
                continue
            written = [c for n, c in zip(kernel.shape.runtime_args, copies) if n in kernel.written]
            for got, want in zip(written, reference):
                # Configs reduce in different orders: bf16 results may differ by an ulp (2^-7).
                close = 2e-2 if got.dtype == torch.bfloat16 else 1e-3
                torch.testing.assert_close(got, want, rtol=close, atol=close,
                                           msg=lambda m: f"{case.name} {plan}: {m}")
            timed.append((target.time_launch(kernel._target_launch(plan), args), plan))
        best_s, best = min(timed, key=lambda item: item[0])
        # Every (config, time) of the search: held-out data for the performance model.
        samples += [sample(plan, seconds, "candidate") for seconds, plan in timed]
        totals["ceiling"] += best_s
        candidates_timed += len(timed)
        configs.append(f"{best.meta} w{best.num_warps} s{best.num_stages}")
        for policy_name in ("seed", "gxu"):
            plan = plan_launch(kernel.shape, numels, dtype, resolve_policy(policy_name), spec)
            seconds = target.time_launch(kernel._target_launch(plan), args)
            totals[policy_name] += seconds
            samples.append(sample(plan, seconds, policy_name))
        # Autotune walks the same space and keeps the fastest it timed: that pick, timed
        # again, shows how far a measured choice sits from the ceiling (noise).
        totals["autotune"] += target.time_launch(kernel._target_launch(best), args)
    return {**{f"{k}_s": v for k, v in totals.items()}, "ceiling_config": "; ".join(configs),
            "candidates": candidates_timed, "refused": refused, "bytes": bytes_moved,
            "torch": torch.__version__, "sources": sources, "samples": samples}


def run_case(case: Case, spec: gxusim.HardwareSpec) -> dict:
    torch.manual_seed(0)
    inputs = [torch.randn(shape, dtype=case.dtype, device="cuda") for shape in case.shapes]
    eager_s = _bench(lambda: case.fn(*inputs))
    torch._dynamo.reset()
    stock = torch.compile(case.fn)
    expected = stock(*inputs)
    stock_s = _bench(lambda: stock(*inputs))
    gxu_inputs = [t.to("gxu") for t in inputs]
    gxusim.use_heuristics("gxu")
    compiled = torch.compile(case.fn)
    with launcher.capture() as captured:
        got = compiled(*gxu_inputs)
    tolerance = 1e-2 if case.dtype == torch.bfloat16 else 1e-4
    torch.testing.assert_close(got.cpu().float(), expected.cpu().float(), rtol=tolerance,
                               atol=tolerance)
    gxu_call_s = _bench(lambda: compiled(*gxu_inputs))
    row = {"case": case.name, "eager_s": eager_s, "stock_s": stock_s, "gxu_call_s": gxu_call_s,
           **_kernel_rows(case, captured, spec, case.dtype)}
    return row


def _table(rows: list[dict]) -> str:
    def tbps(row: dict, key: str) -> str:
        return f"{row['bytes'] / row[key] / 1e12:.2f}"
    lines = [(r["case"], tbps(r, "eager_s"), tbps(r, "stock_s"), tbps(r, "seed_s"),
              tbps(r, "gxu_s"), tbps(r, "autotune_s"), tbps(r, "ceiling_s"),
              f"{r['ceiling_s'] / r['gxu_s']:.2f}", f"{r['seed_s'] / r['gxu_s']:.2f}",
              f"{r['gxu_call_s'] * 1e6:.0f}", r["ceiling_config"][:60]) for r in rows]
    geomean = math.exp(sum(math.log(r["ceiling_s"] / r["gxu_s"]) for r in rows) / len(rows))
    return format_table(("case", "eager", "stock", "seed", "gxu", "autotune", "ceiling",
                         "gxu/ceil", "gxu/seed", "gxu call us", "ceiling config"), lines) + \
        f"\nTB/s counting every kernel argument once (eager, stock: whole calls; policies and " \
        f"ceiling: kernels alone). gxu/ceiling geometric mean {geomean:.3f}, worst " \
        f"{min(r['ceiling_s'] / r['gxu_s'] for r in rows):.3f}."


def measure_case(case: Case) -> dict:
    """One case's row, measured on this process's GPU under the current spec."""
    start = time.perf_counter()
    torch.cuda.empty_cache()  # the last case's tensors are gone: give their memory back
    row = run_case(case, gxusim.current_spec())
    return {**row, "search_s": time.perf_counter() - start}


def measured(chosen: list[Case], ray: str | None) -> Iterator[tuple[Case, dict | Exception]]:
    """(case, its row or the error it failed with), in this process, or on the Ray cluster
    at `ray` ("local": one started here), one GPU per case, as cases finish."""
    if ray is None:
        for case in chosen:
            try:
                yield case, measure_case(case)
            except Exception as error:  # one failed case is reported, the rest still run
                yield case, error
        return
    from gxusim import distributed
    distributed.connect(None if ray == "local" else ray)
    yield from distributed.map_on_ray(measure_case, chosen, uses_gpu=True,
                                      desc="ceiling on ray", unit="case")


# --- the corpus: every legal config of each kernel, timed once, kept whole -------------------

class _Rules(GXUHeuristics):
    """The gxu policy's rules alone (what it answers for a kernel without traits)."""
    name = "rules"
    SEES_KERNEL = False


def write_rows(path: str | Path, rows: list[dict], indent: int | None = None) -> None:
    """`rows` as JSON at `path`, whole or not at all: written beside it, then moved over it,
    so a run killed mid-write (a timeout) keeps the rows of its last complete write."""
    partial = Path(f"{path}.partial")
    partial.write_text(json.dumps(rows, indent=indent))
    os.replace(partial, path)


def _plan_row(plan, seconds: float | None, error: str = "", fits: bool | None = None) -> dict:
    return {"meta": plan.meta, "num_warps": plan.num_warps, "num_stages": plan.num_stages,
            "programs": plan.programs, "seconds": seconds, "predicted_s": plan.predicted_s,
            **({"fits": fits} if fits is not None else {}), **({"error": error} if error else {})}


def _fits(kernel, plan, spec) -> bool | None:
    """Whether gxu's register estimate keeps the plan's tile within a thread's register
    budget (None: no traits)."""
    from gxusim.compiler.heuristics import LaunchConfig
    if kernel.shape.traits is None:
        return None
    config = LaunchConfig(plan.meta, plan.num_warps, plan.num_stages)
    estimate = GXUHeuristics().registers_per_thread(kernel.shape.traits, config, spec,
                                                    kernel.shape.static_blocks)
    return estimate <= spec.register_budget(plan.num_warps)


def _time_quickly(target, launch, args) -> float:
    """A candidate's median kernel time, with less warm-up than a case's plans get: the
    corpus times thousands of configs."""
    import triton.testing
    copies = launch.with_copies_of_written(args)
    return triton.testing.do_bench(lambda: targets.launch_triton(launch, copies), warmup=2,
                                   rep=8, return_mode="median") / 1e3


_worker_kernels: dict[str, object] = {}


def _compile_in_worker(entry: dict, plans: list) -> None:
    """In a worker process: compile `plans` of the entry's kernel into Triton's on-disk
    cache. A binary depends on argument dtypes and alignments, not sizes, so a few elements
    at the same storage offset stand in for each tensor."""
    from gxusim import corpus
    kernel = _worker_kernels.get(entry["id"])
    if kernel is None:
        kernel = _worker_kernels[entry["id"]] = corpus.load_kernel(entry)
    args = [a["value"] if "dtype" not in a else
            torch.empty(a["offset"] + 1, dtype=corpus.DTYPES[a["dtype"]], device="cuda")[a["offset"]:]
            for a in entry["args"]]
    for plan in plans:
        try:
            launch = kernel._target_launch(plan)
            launch.fn.warmup(*args, grid=launch.grid, **launch.options())
        except Exception:  # noqa: BLE001 - the measuring process meets and records the error
            pass


class CompilePool:
    """Worker processes, one CUDA context each, that compile a corpus kernel's configs in
    parallel before the measuring process loads them from Triton's cache: Triton's front end
    holds the GIL, so threads compile one config at a time."""

    def __init__(self, workers: int):
        import concurrent.futures
        import multiprocessing
        self.workers = workers
        self.pool = concurrent.futures.ProcessPoolExecutor(
            workers, mp_context=multiprocessing.get_context("spawn"))

    def compile(self, entry: dict, plans: list) -> None:
        shares = [plans[k::self.workers] for k in range(self.workers)]
        for future in [self.pool.submit(_compile_in_worker, entry, share) for share in shares if share]:
            future.result()


def measure_corpus_entry(entry: dict, spec: gxusim.HardwareSpec,
                         compile_pool: CompilePool | None = None) -> dict:
    """One corpus kernel: every candidate config, and the seed's and gxu's plans, timed on
    this GPU, each candidate's outputs checked against the gxu plan's."""
    from gxusim import corpus
    start = time.perf_counter()
    target = targets.active()
    kernel = corpus.load_kernel(entry)
    args = corpus.make_arguments(entry, "cuda")
    numels = kernel.numels(args)
    written = [i for i, name in enumerate(kernel.shape.runtime_args) if name in kernel.written]
    moved = kernel.shape.argument_bytes(args)
    policies = {name: kernel.plan(args, numels, policy, spec)
                for name, policy in (("seed", resolve_policy("seed")),
                                     ("gxu", resolve_policy("gxu")), ("rules", _Rules()))}
    reference = kernel._target_launch(policies["gxu"]).with_copies_of_written(args)
    target.execute(kernel._target_launch(policies["gxu"]), reference, spec)
    plans = ranked_plans(kernel.shape, numels, spec, moved)
    phases = {"setup": time.perf_counter() - start, "compile": 0.0, "check": 0.0, "time": 0.0}
    clock = time.perf_counter()

    def phase(name: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        phases[name] += now - clock
        clock = now
    if compile_pool is not None:
        compile_pool.compile(entry, plans + list(policies.values()))
    kernel.precompile_plans(plans + list(policies.values()), args)
    phase("compile")
    rows = []
    for plan in plans:
        launch = kernel._target_launch(plan)
        copies = launch.with_copies_of_written(args)
        try:
            # launched directly: the target's first execute of a launch also disassembles
            # its binary for the model (a second or so each, thousands of configs)
            targets.launch_triton(launch, copies)
            for i in written:
                close = 2e-2 if copies[i].dtype == torch.bfloat16 else 1e-3
                torch.testing.assert_close(copies[i], reference[i], rtol=close, atol=close,
                                           equal_nan=True)
            phase("check")
            rows.append(_plan_row(plan, _time_quickly(target, launch, args),
                                  fits=_fits(kernel, plan, spec)))
        except Exception as error:  # noqa: BLE001 - a config that fails is kept, named
            rows.append(_plan_row(plan, None, f"{type(error).__name__}: {str(error)[:200]}"))
        phase("time")
    chosen = {name: _plan_row(plan, _time_quickly(target, kernel._target_launch(plan), args))
              for name, plan in policies.items()}
    phase("time")
    return {"id": entry["id"], "part": entry["part"], "kind": entry["kind"],
            "dtype": entry["dtype"], "kernel": entry["kernel"], "numels": numels,
            "bytes": moved, "candidates": rows, **chosen,
            "compile_s": phases["compile"], "search_s": time.perf_counter() - start,
            "phases_s": {name: round(seconds, 2) for name, seconds in phases.items()},
            "torch": torch.__version__, "device": torch.cuda.get_device_name()}


class _CountingAutotune(AutotuneHeuristics):
    """Autotune, counting the configs its search times."""

    def search(self, candidates, time_plan, key, start=None):  # noqa: ANN001, ANN201
        self.timed = 0

        def counted(plan):  # noqa: ANN001, ANN202
            self.timed += 1
            return time_plan(plan)
        return super().search(candidates, time_plan and dataclasses.replace(time_plan, time=counted),
                              key, start)


def search_corpus_entry(entry: dict, spec: gxusim.HardwareSpec,
                        ceiling_s: float | None = None) -> dict:
    """Autotune's search on one corpus kernel as a first `max-autotune` call meets it (an
    empty autotune cache, nothing compiled): its wall time, the configs it timed, its pick's
    time and, given the kernel's exhaustive `ceiling_s` measured on this kind of GPU, the
    ceiling over it."""
    from gxusim import corpus
    kernel = corpus.load_kernel(entry)
    args = corpus.make_arguments(entry, "cuda")
    numels = kernel.numels(args)
    policy = _CountingAutotune()
    start = time.perf_counter()
    plan = kernel.plan(args, numels, policy, spec)
    search_s = time.perf_counter() - start
    seconds = _time_quickly(targets.active(), kernel._target_launch(plan), args)
    return {"id": entry["id"], "part": entry["part"], "kind": entry["kind"],
            "kernel": entry["kernel"], "search_s": search_s, "timed": policy.timed,
            "pick": _plan_row(plan, seconds), "ceiling_s": ceiling_s,
            "torch": torch.__version__, "device": torch.cuda.get_device_name()}


def search_corpus(path: str, part: str, count: int, out: str | None, budget_s: float,
                  ceilings: str | None, kinds: tuple[str, ...] = ()) -> list[dict]:
    """`search_corpus_entry` over the sample (a fresh autotune cache for the run); with
    `ceilings` (an exhaustive `--corpus --json` run on the same kind of GPU) only its
    kernels, each with its ceiling."""
    import statistics
    import tempfile
    from gxusim import corpus
    os.environ["GXUSIM_CACHE_DIR"] = tempfile.mkdtemp(prefix="gxusim-autotune-")
    spec = gxusim.current_spec()
    known = {r["id"]: corpus.ceiling(r) for r in corpus.measured_rows(
        json.loads(Path(ceilings).read_text()))} if ceilings else {}
    entries = [e for e in corpus.load(path) if not known or e["id"] in known]
    rows, start = [], time.perf_counter()
    for entry in corpus_sample(entries, part, count, kinds):
        if time.perf_counter() - start > budget_s:
            print(f"time budget of {budget_s:.0f} s spent: {len(rows)} kernels searched")
            break
        try:
            row = search_corpus_entry(entry, spec, known.get(entry["id"]))
        except Exception as error:  # noqa: BLE001 - one kernel that cannot run leaves the rest
            print(f"{entry['id']} {entry['kind']}: {type(error).__name__}: {str(error)[:200]}")
            continue
        rows.append(row)
        share = f"; ceiling/pick {row['ceiling_s'] / row['pick']['seconds']:.2f}" \
            if row["ceiling_s"] else ""
        print(f"{row['id']} {row['kind']:<20} searched {row['search_s']:.1f} s, "
              f"{row['timed']} configs timed{share}", flush=True)
        if out:
            write_rows(out, rows)
    if rows:
        searched = [r["search_s"] for r in rows]
        shares = [r["ceiling_s"] / r["pick"]["seconds"] for r in rows if r["ceiling_s"]]
        print(f"\nautotune on {len(rows)} kernels ({rows[0]['device']}): search median "
              f"{statistics.median(searched):.1f} s, most {max(searched):.1f} s; configs timed "
              f"median {statistics.median(r['timed'] for r in rows):.0f}, most "
              f"{max(r['timed'] for r in rows)}" + (
                  f"; ceiling/pick geomean {math.exp(sum(map(math.log, shares)) / len(shares)):.3f}"
                  f", worst {min(shares):.2f}, within 1% on {sum(s >= 0.99 for s in shares)} of "
                  f"{len(shares)}" if shares else ""))
    return rows


def _taking_turns(groups: list[list[dict]]) -> list[dict]:
    """The groups' entries, one from each group in turn."""
    queues, out = [iter(group) for group in groups], []
    while queues:
        for queue in list(queues):
            item = next(queue, None)
            if item is None:
                queues.remove(queue)
            else:
                out.append(item)
    return out


def corpus_sample(entries: list[dict], part: str, count: int,
                  kinds: tuple[str, ...] = ()) -> list[dict]:
    """Up to `count` entries of `part` ("all": the two parts in turn) and of `kinds` (all when
    empty), the kinds taken in turn so a short run covers each, in id order within a kind
    (the same sample on every machine)."""
    entries = [e for e in entries if not kinds or e["kind"] in kinds]
    def by_kind(chosen: list[dict]) -> list[dict]:
        groups: dict[str, list[dict]] = {}
        for entry in sorted(chosen, key=lambda e: e["id"]):
            groups.setdefault(entry["kind"], []).append(entry)
        return _taking_turns([group for _, group in sorted(groups.items())])
    parts = ("test", "fit") if part == "all" else (part,)
    return _taking_turns([by_kind([e for e in entries if e["part"] == p]) for p in parts])[:count]


def measure_corpus(path: str, part: str, count: int, out: str | None, budget_s: float,
                   resume: bool = False, shard: tuple[int, int] = (0, 1),
                   kinds: tuple[str, ...] = (), workers: int = 1) -> list[dict]:
    """Measure the sample's kernels one by one, writing `out` after each. `resume`: keep
    the rows already in `out` and measure only kernels it lacks (GPU visits add up);
    `shard` (k, n): only every n-th kernel of the sample from the k-th; `workers` > 1:
    compile each kernel's configs in that many processes first."""
    from gxusim import corpus
    spec = gxusim.current_spec()
    kept = json.loads(Path(out).read_text()) if resume and out and Path(out).exists() else []
    done = {row["id"] for row in kept if "candidates" in row or row.get("lost_context")}
    rows, start = [row for row in kept if row["id"] in done], time.perf_counter()
    entries = corpus.load(path)
    unknown = sorted(set(kinds) - {e["kind"] for e in entries})
    if unknown:
        raise SystemExit(f"--kinds {' '.join(unknown)}: no such kind in {path} "
                         f"(its kinds: {' '.join(sorted({e['kind'] for e in entries}))})")
    sample = [e for e in corpus_sample(entries, part, count, kinds) if e["id"] not in done]
    compile_pool = CompilePool(workers) if workers > 1 else None
    for entry in sample[shard[0]::shard[1]]:
        if time.perf_counter() - start > budget_s:
            print(f"time budget of {budget_s:.0f} s spent: {len(rows)} kernels measured")
            break
        try:
            row = measure_corpus_entry(entry, spec, compile_pool)
        except Exception as error:  # noqa: BLE001 - one kernel that cannot run leaves the rest
            row = {"id": entry["id"], "part": entry["part"], "kind": entry["kind"],
                   "error": f"{type(error).__name__}: {str(error)[:300]}"}
            if context_lost():
                row["lost_context"] = True
        rows.append(row)
        timed = [c["seconds"] for c in row.get("candidates", []) if c["seconds"]]
        print(f"{entry['id']} {entry['kind']:<20} {entry['kernel'][:50]:<50} " +
              (f"{len(timed)} configs in {row['search_s']:.0f} s; gxu/ceiling "
               f"{min(timed) / row['gxu']['seconds']:.2f} seed/ceiling "
               f"{min(timed) / row['seed']['seconds']:.2f} ({row['phases_s']})" if timed
               else row.get("error", "")[:120]),
              flush=True)
        if out:
            write_rows(out, rows)
        if row.get("lost_context"):
            break
    print_corpus_tables(rows, spec.name)
    if rows and rows[-1].get("lost_context"):
        print(f"the GPU's context was lost at kernel {rows[-1]['id']} ({rows[-1]['error'][:80]}"
              f"); the rest need a new process: run again with --resume", flush=True)
        raise SystemExit(3)
    return rows


def context_lost() -> bool:
    """Whether the GPU's context can no longer run anything: after a sticky error (a
    misaligned address, an illegal access) every later call fails with it."""
    import torch
    try:
        torch.cuda.synchronize()
        torch.ones(1, device="cuda").add_(1).item()
    except Exception:  # noqa: BLE001 - whatever the error, the context is unusable
        return True
    return False


def print_corpus_tables(rows: list[dict], spec_name: str) -> None:
    from gxusim import corpus
    for part in ("test", "fit"):
        chosen = [r for r in rows if r["part"] == part]
        if chosen:
            print(f"\n{part} part, {len(chosen)} kernels, spec {spec_name}:\n{format_table(*corpus.measured_summary(chosen))}")


def measure_corpus_on_gpus(gpus: int, out: str) -> None:
    """This command again, one process per GPU (`CUDA_VISIBLE_DEVICES`), each measuring one
    shard of the sample into its own file; then the shards' rows merged into `out`."""
    import subprocess
    import sys
    argv, rest = [], iter(sys.argv[1:])
    for arg in rest:  # this command without --gpus N (each shard is one process)
        if arg == "--gpus":
            next(rest, None)
        elif not arg.startswith("--gpus="):
            argv.append(arg)
    shards = [f"{out}.shard{k}" for k in range(gpus)]
    if "--resume" in argv and Path(out).exists():
        for shard in shards:  # each shard resumes from the merged rows
            Path(shard).write_text(Path(out).read_text())
    running = [subprocess.Popen([sys.executable, __file__, *argv, "--shard", f"{k}/{gpus}",
                                 "--json", shards[k]],
                                env={**os.environ, "CUDA_VISIBLE_DEVICES": str(k)})
               for k in range(gpus)]
    failed = [k for k, process in enumerate(running) if process.wait() != 0]
    rows = {row["id"]: row for shard in shards if Path(shard).exists()
            for row in json.loads(Path(shard).read_text())}
    write_rows(out, list(rows.values()))
    print_corpus_tables(list(rows.values()), gxusim.current_spec().name)
    if failed:
        raise SystemExit(f"corpus shards {failed} failed; their measured rows are kept in {out}")


def _shard(text: str) -> tuple[int, int]:
    k, _, n = text.partition("/")
    if not (k.isdigit() and n.isdigit() and int(k) < int(n)):
        raise argparse.ArgumentTypeError(f"--shard {text!r}: expected K/N with 0 <= K < N")
    return int(k), int(n)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="skip the 1G-element cases")
    parser.add_argument("--corpus", metavar="KERNELS.jsonl",
                        help="time every legal config of the corpus's kernels instead of the cases")
    parser.add_argument("--corpus-table", metavar="ROWS.json",
                        help="print the tables of a stored --corpus run (no GPU needed)")
    parser.add_argument("--part", default="test", choices=("test", "fit", "all"),
                        help="the corpus part to measure (default: test)")
    parser.add_argument("--count", type=int, default=1000, help="at most this many corpus kernels")
    parser.add_argument("--kinds", nargs="+", default=(), metavar="KIND",
                        help="corpus: only kernels of these kinds (looped_reduction, pointwise, ...)")
    parser.add_argument("--budget", type=float, default=1e9, metavar="SECONDS",
                        help="start no corpus kernel after this long")
    parser.add_argument("--resume", action="store_true",
                        help="corpus: keep the kernels already in --json, measure the rest")
    parser.add_argument("--gpus", type=int, default=1,
                        help="corpus: one process per GPU, each a shard of the sample")
    parser.add_argument("--compile-workers", type=int, default=max(1, (os.cpu_count() or 2) - 2),
                        metavar="N", help="corpus: compile each kernel's configs in N processes "
                                          "(default: the cores less two; 1: in this process)")
    parser.add_argument("--autotune", action="store_true",
                        help="corpus: time autotune's search on each kernel instead of every "
                             "config (with --ceilings, against an exhaustive run's ceilings)")
    parser.add_argument("--ceilings", metavar="ROWS.json",
                        help="--autotune: only these measured kernels, each against its ceiling")
    parser.add_argument("--shard", type=_shard, default=(0, 1), metavar="K/N",
                        help="corpus: measure only every N-th kernel of the sample from the K-th")
    parser.add_argument("--cases", nargs="*", help="substrings of case names to run")
    parser.add_argument("--json", help="write the rows here")
    parser.add_argument("--ray", nargs="?", const="local", metavar="ADDRESS",
                        help="search each case as a Ray task holding a GPU, on a local "
                             "cluster or the one at ADDRESS (needs pip install 'gxusim[ray]')")
    args = parser.parse_args()
    if args.corpus_table:
        with open(args.corpus_table) as f:
            print_corpus_tables(json.load(f), gxusim.current_spec().name)
        return
    if gxusim.current_target() != "cuda":
        raise SystemExit("bench_ceiling times kernels on a GPU: it needs the cuda target")
    if args.corpus and args.gpus > 1:
        if not args.json:
            raise SystemExit("--gpus needs --json: the shards' rows are merged there")
        measure_corpus_on_gpus(args.gpus, args.json)
        return
    if args.corpus and args.autotune:
        search_corpus(args.corpus, args.part, args.count, args.json, args.budget, args.ceilings,
                      tuple(args.kinds))
        return
    if args.corpus:
        measure_corpus(args.corpus, args.part, args.count, args.json, args.budget, args.resume,
                       args.shard, tuple(args.kinds), args.compile_workers)
        return
    chosen = [c for c in cases(args.quick) if not args.cases or any(s in c.name for s in args.cases)]
    rows = []
    for case, row in measured(chosen, args.ray):
        if isinstance(row, Exception):
            print(f"{case.name}: FAILED {type(row).__name__}: {str(row)[:300]}", flush=True)
            continue
        rows.append(row)
        refused = f" ({len(row['refused'])} refused for resources)" if row["refused"] else ""
        print(f"{case.name}: {row['candidates']} configs{refused} in {row['search_s']:.0f} s; "
              f"TB/s seed {row['bytes'] / row['seed_s'] / 1e12:.2f} gxu "
              f"{row['bytes'] / row['gxu_s'] / 1e12:.2f} ceiling "
              f"{row['bytes'] / row['ceiling_s'] / 1e12:.2f} ({row['ceiling_config'][:50]})",
              flush=True)
        rows.sort(key=lambda r: [c.name for c in chosen].index(r["case"]))
        if args.json:  # after every case: a run cut short keeps what it measured
            write_rows(args.json, rows, indent=1)
    print(_table(rows))


if __name__ == "__main__":
    main()
