"""Three-way differential fuzzing for the GPU machine: eager CUDA, gxu on the cuda target and
gxu on the emulator target, on the same random programs (see the package docstring for the
programs and the two-way comparison with eager on the CPU).

    python3 -m tests.fuzz.three_way --examples 500 --seed 1 --jobs 4 --out /tmp/three-way

(run from the repository root). The driver

1. draws N distinct programs from `programs.programs()` with hypothesis, deterministically
   for a given --seed (written to OUT/programs.json; `--programs FILE` replays such a list);
2. runs them in worker processes, one target per process (the target is fixed per process):
   GXUSIM_TARGET=<gpu target> (compiled gxu, plus eager CUDA on `.to("cuda")` inputs when
   that target is cuda; forward only) and GXUSIM_TARGET=emulator. Each worker saves every
   program's outputs (CPU tensors, per call) or its error to OUT/results/<side>/<i>.pt. A
   worker that dies or hangs (--timeout per program) is restarted after that program, which
   counts as a crash;
3. compares, per program and call: gxu-cuda vs eager CUDA and vs eager CPU, gxu-emulator vs
   eager CPU (all with `programs.compare`: exact outputs bit for bit, others against the
   float64 reference), and gxu-emulator vs gxu-cuda: bitwise (NaNs of any payload count as
   equal; signed zeros do not) for int/bool outputs and exact float outputs, otherwise within
   the same tolerance, with gxu-cuda as the expected side. A clear "unsupported" error must
   happen on both targets (then the program counts as unsupported); on one only, it is a
   failure;
4. prints a table (programs, ok, unsupported, failures by kind, time) and writes one JSON
   line per failing program (program, description, input recipe, per-target errors, output
   diffs) to OUT/failures.jsonl. Exit status 1 when anything failed. The comparison runs
   once both sides have a result for every program; `--compare` runs it alone, on results
   the two sides saved in OUT (say, each on its own machine or in its own process).

`--gpu-target auto` (the default) uses cuda when torch sees a GPU; without one, the "gpu"
side runs on the emulator as well and eager CUDA is skipped, which tests the plumbing end to
end (and that the emulator is deterministic).
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path
from typing import Any, Optional

import torch

from .programs import (F64, FLOATS, Mismatch, Program, _to64, compare, follows_stock_inductor,
                       programs, tolerance_dtype, unsupported_reason, value_scale)

ROOT = Path(__file__).resolve().parents[2]
SIDES = ("gpu", "emulator")  # gpu: GXUSIM_TARGET=<--gpu-target>; emulator: GXUSIM_TARGET=emulator

KINDS = {  # failure kind -> table label
    "cuda-vs-eager-cuda": "gxu-cuda vs eager CUDA",
    "cuda-vs-eager-cpu": "gxu-cuda vs eager CPU",
    "emulator-vs-eager-cpu": "gxu-emulator vs eager CPU",
    "emulator-vs-cuda-bitwise": "gxu-emulator vs gxu-cuda, bitwise",
    "emulator-vs-cuda-tolerance": "gxu-emulator vs gxu-cuda, tolerance",
    "crash-cuda": "crash, gxu-cuda",
    "crash-emulator": "crash, gxu-emulator",
    "launch-spec": "launch outside the spec / bad output",
    "unsupported-one-side": "unsupported on one target only",
    "eager-cpu-rejects": "eager CPU rejects the program",
}


# ----------------------------------------------------------------------------- generating

STRATEGIES = {
    "random": lambda: programs(),
    "reductions": lambda: _reduction_programs(),
}


def _reduction_programs():
    from .programs import op_binary, op_index, op_reduce, op_scan, op_unary_float, op_view
    return programs(max_steps=4, ops=[(op_reduce, 4), (op_scan, 1), (op_view, 2),
                                      (op_unary_float, 1), (op_binary, 1), (op_index, 1)])


def generate(n: int, seed: int, strategy: str = "random") -> list[Program]:
    """N distinct programs, the same ones for the same (n, seed, strategy, hypothesis version)."""
    from hypothesis import HealthCheck, Phase, configuration, given, settings
    from hypothesis import seed as hseed
    configuration.set_hypothesis_home_dir(os.path.join(tempfile.gettempdir(),
                                                       "gxusim-fuzz-hypothesis"))
    strat = STRATEGIES[strategy]()
    out: list[Program] = []
    seen: set[str] = set()
    for round_ in range(50):
        if len(out) >= n:
            break

        @hseed(seed * 1_000_003 + round_)
        @settings(max_examples=2 * (n - len(out)) + 10, database=None, derandomize=False,
                  deadline=None, phases=[Phase.generate], suppress_health_check=list(HealthCheck))
        @given(strat)
        def collect(prog):
            key = json.dumps(prog.to_json(), sort_keys=True)
            if len(out) < n and key not in seen:
                seen.add(key)
                out.append(prog)

        collect()
    return out


# ----------------------------------------------------------------------------- worker

def _cpu(t: Any) -> Any:
    return t.detach().cpu().clone() if isinstance(t, torch.Tensor) else t


def run_one(prog: Program, eager_cuda: bool) -> dict:
    """Compile and run `prog` on this process's target; outputs per call as CPU tensors."""
    import gxusim
    from .programs import check_launches
    rec: dict[str, Any] = {"status": "ok", "reason": "", "error": "", "traceback": "",
                           "calls": []}
    start = time.perf_counter()
    torch._dynamo.reset()
    fn = prog.fn()
    compiled = torch.compile(fn, dynamic=prog.dynamic, fullgraph=True)
    for call in range(prog.calls):
        c: dict[str, Any] = {"gxu": None, "eager_cuda": None, "eager_cuda_error": "",
                             "launches": 0}
        rec["calls"].append(c)
        if eager_cuda:  # forward only: no autograd on plain CUDA tensors with gxusim loaded
            try:
                with torch.no_grad():
                    c["eager_cuda"] = [_cpu(t) for t in fn(*prog.make_inputs(call, "cuda"))]
            except Exception as e:
                c["eager_cuda_error"] = f"{type(e).__name__}: {e}"[:2000]
        gxusim.clear_launches()
        try:
            actual = compiled(*prog.make_inputs(call, "gxu"))
            for k, t in enumerate(actual):
                if not isinstance(t, torch.Tensor):
                    raise Mismatch(f"call {call} output {k}: compiled returned {type(t).__name__}")
                if t.device.type != "gxu":
                    raise Mismatch(f"call {call} output {k}: compiled result on {t.device}, not gxu")
            c["gxu"] = [_cpu(t) for t in actual]
            c["launches"] = check_launches(f"call {call}")
        except Exception as e:
            reason = unsupported_reason(e)
            if reason is not None:
                rec["status"], rec["reason"] = "unsupported", reason
            else:
                rec["status"] = "spec" if isinstance(e, Mismatch) else "crash"
                rec["error"] = f"call {call}: {type(e).__name__}: {e}"[:4000]
                rec["traceback"] = "".join(traceback.format_exception(e))[-4000:]
            break
    rec["seconds"] = time.perf_counter() - start
    return rec


def _save(rec: dict, path: Path) -> None:
    tmp = path.with_suffix(".tmp")
    torch.save(rec, tmp)
    os.replace(tmp, path)


def worker_main(args: argparse.Namespace) -> int:
    import gxusim
    torch._inductor.config.force_disable_caches = True
    warnings.simplefilter("ignore")  # var() with too few elements, etc.
    progs = [Program.from_json(d) for d in json.loads(Path(args.programs).read_text())]
    results = Path(args.results)
    target = gxusim.current_target()
    eager_cuda = target == "cuda"
    print(f"[worker {args.worker}] target {target}, eager CUDA {eager_cuda}", flush=True)
    current = results / f"current-{args.worker}"
    for i in (int(s) for s in args.indices.split(",") if s):
        path = results / f"{i}.pt"
        if path.exists():  # done before a restart
            continue
        current.write_text(f"{i} {time.time()}")
        rec = run_one(progs[i], eager_cuda)
        rec["target"] = target
        _save(rec, path)
        print(f"[worker {args.worker}] {i}: {rec['status']} {rec['seconds']:.1f} s "
              f"{(rec['reason'] or rec['error'])[:150]}", flush=True)
    current.unlink(missing_ok=True)
    return 0


# ----------------------------------------------------------------------------- running

class Shard:
    """One worker process for a list of programs on one side, restarted past a crash."""

    def __init__(self, side: str, target: str, wid: str, indices: list[int], out: Path,
                 timeout: float):
        self.side, self.target, self.wid, self.indices = side, target, wid, indices
        self.results = out / "results" / side
        self.log = out / "logs" / f"{wid}.log"
        self.timeout = timeout
        self.proc: Optional[subprocess.Popen] = None
        self.restarts = 0

    def missing(self) -> list[int]:
        return [i for i in self.indices if not (self.results / f"{i}.pt").exists()]

    def start(self, programs_file: Path) -> None:
        env = {**os.environ, "GXUSIM_TARGET": self.target}
        cmd = [sys.executable, "-m", "tests.fuzz.three_way", "--worker", self.wid,
               "--programs", str(programs_file), "--results", str(self.results),
               "--indices", ",".join(map(str, self.indices))]
        with open(self.log, "a") as log:
            self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True)

    def stop(self) -> None:
        """Kill the worker (its whole process group) if it still runs."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def current(self) -> Optional[tuple[int, float]]:
        try:
            i, t = (self.results / f"current-{self.wid}").read_text().split()
            return int(i), float(t)
        except (OSError, ValueError):
            return None

    def crash(self, i: int, why: str) -> None:
        tail = self.log.read_text(errors="replace")[-3000:] if self.log.exists() else ""
        _save({"status": "crash", "reason": "", "error": why, "traceback": tail, "calls": [],
               "seconds": 0.0, "target": self.target}, self.results / f"{i}.pt")

    def poll(self, programs_file: Path) -> bool:
        """Advance; True when every program of this shard has a result."""
        assert self.proc is not None
        rc = self.proc.poll()
        cur = self.current()
        if rc is None:
            if cur and not (self.results / f"{cur[0]}.pt").exists() \
                    and time.time() - cur[1] > self.timeout:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
                self.crash(cur[0], f"worker timed out after {self.timeout:.0f} s on this program")
                self._restart(programs_file)
            return False
        missing = self.missing()
        if not missing:
            return True
        # died: blame the program it was running (or the first missing one)
        i = cur[0] if cur and cur[0] in missing else missing[0]
        self.crash(i, f"worker process exited with status {rc} while running this program")
        self._restart(programs_file)
        return False

    def _restart(self, programs_file: Path) -> None:
        self.restarts += 1
        if self.restarts > max(3, len(self.indices) // 4):
            for i in self.missing():
                self.crash(i, "not run: the worker kept dying")
            return
        if self.missing():
            self.start(programs_file)


def run_all(progs: list[Program], out: Path, gpu_target: str, jobs: int, timeout: float,
            sides: tuple[str, ...] = SIDES) -> dict:
    programs_file = out / "programs.json"
    targets = {"gpu": gpu_target, "emulator": "emulator"}
    (out / "logs").mkdir(parents=True, exist_ok=True)
    shards = []
    for side in sides:
        (out / "results" / side).mkdir(parents=True, exist_ok=True)
        for j in range(jobs):
            idx = list(range(j, len(progs), jobs))
            if idx:
                shards.append(Shard(side, targets[side], f"{side}-{j}", idx, out, timeout))
    start = time.perf_counter()
    for s in shards:
        s.start(programs_file)
    done_at: dict[str, float] = {}
    last = 0.0
    pending = list(shards)
    try:
        while pending:
            time.sleep(0.5)
            pending = [s for s in pending if not s.poll(programs_file)]
            for side in sides:
                if side not in done_at and not any(s.side == side for s in pending):
                    done_at[side] = time.perf_counter() - start
            if time.perf_counter() - last > 30:
                last = time.perf_counter()
                counts = {side: sum(len(s.indices) - len(s.missing()) for s in shards
                                    if s.side == side) for side in sides}
                print(f"[three-way] {time.perf_counter() - start:.0f} s: done {counts} of "
                      f"{len(progs)}", flush=True)
    finally:  # stopped early (Ctrl-C, SIGTERM from `timeout`): workers run in sessions of
        for shard in pending:  # their own, so nothing else would stop them
            shard.stop()
    return done_at


# ----------------------------------------------------------------------------- comparing

_INT_VIEW = {2: torch.int16, 4: torch.int32, 8: torch.int64}


def bitwise_diff(actual: torch.Tensor, expected: torch.Tensor, what: str) -> Optional[str]:
    """None when equal bit for bit (any NaN equals any NaN), else a description."""
    if actual.shape != expected.shape or actual.dtype != expected.dtype:
        return (f"{what}: {tuple(actual.shape)} {actual.dtype} vs {tuple(expected.shape)} "
                f"{expected.dtype}")
    a, e = actual.contiguous(), expected.contiguous()
    if a.is_floating_point():
        iv = _INT_VIEW[a.element_size()]
        ab, eb = a.reshape(-1).view(iv), e.reshape(-1).view(iv)
        diff = (ab != eb) & ~(a.reshape(-1).isnan() & e.reshape(-1).isnan())
    else:
        ab, eb = a.reshape(-1), e.reshape(-1)
        diff = ab != eb
    if not diff.any():
        return None
    where = diff.nonzero().reshape(-1)
    fa, fe = a.reshape(-1), e.reshape(-1)
    only_zero = a.is_floating_point() and bool((fa[where] == fe[where]).all())
    mask = (1 << (8 * a.element_size())) - 1
    ex = []
    for j in where[:4].tolist():
        idx = list(torch.unravel_index(torch.tensor(j), a.shape)) if a.dim() else []
        item = f"[{', '.join(str(int(t)) for t in idx)}]: {fa[j].item()!r} vs {fe[j].item()!r}"
        if a.is_floating_point():
            item += f" (0x{int(ab[j]) & mask:x} vs 0x{int(eb[j]) & mask:x})"
        ex.append(item)
    return (f"{what}: {int(diff.sum())}/{diff.numel()} elements differ bitwise"
            f"{' (only the signs of zeros)' if only_zero else ''}: {'; '.join(ex)}")


def _expected(prog: Program) -> list[tuple[list, list, float]]:
    fn, fn64 = prog.fn(), prog.fn({dt: F64 for dt in FLOATS})
    calls = []
    for call in range(prog.calls):
        cpu_inputs = prog.make_inputs(call, "cpu")
        expected = fn(*cpu_inputs)
        ref64 = fn64(*[_to64(t) for t in cpu_inputs])
        calls.append((list(expected), list(ref64), value_scale(cpu_inputs, ref64)))
    return calls


def judge(prog: Program, res: dict[str, dict], gpu_is_cuda: bool,
          stats: collections.Counter) -> tuple[str, list[dict]]:
    """("ok" | "unsupported" | "failure", failure details) for one program."""
    fails: list[dict] = []

    def fail(kind: str, message: str, call: Optional[int] = None) -> None:
        fails.append({"kind": kind, "call": call, "message": message[:3000]})

    g, e = res["gpu"], res["emulator"]
    unsup = [s for s in SIDES if res[s]["status"] == "unsupported"]
    if len(unsup) == 1:
        other = SIDES[1 - SIDES.index(unsup[0])]
        fail("unsupported-one-side", f"unsupported on {unsup[0]} only ({res[unsup[0]]['reason']}); "
             f"{other}: {res[other]['status']} {res[other]['error'][:500]}")
    for side, kind in (("gpu", "crash-cuda"), ("emulator", "crash-emulator")):
        if res[side]["status"] == "crash":
            fail(kind, f"{side} ({res[side]['target']}): {res[side]['error']}")
        elif res[side]["status"] == "spec":
            fail("launch-spec", f"{side} ({res[side]['target']}): {res[side]['error']}")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            calls = _expected(prog)
    except Exception as ex:
        fail("eager-cpu-rejects", f"{type(ex).__name__}: {ex}")
        return "failure", fails
    tol = tolerance_dtype(prog)
    stock: dict = {}  # stock Inductor's outputs per call, made only when eager disagrees

    def check(kind: str, actual: list, expected: list, ref64: list, scale: float, call: int,
              label: str, bitwise: bool = False) -> None:
        what = f"call {call} ({'A' if call == 0 else 'B'} sizes) {label}"
        if len(actual) != len(expected):
            fail(kind, f"{what}: {len(actual)} outputs vs {len(expected)}", call)
            return
        for k, (a, x, r) in enumerate(zip(actual, expected, ref64)):
            exact = prog.exact_outputs[k] or not x.is_floating_point()
            try:
                if bitwise and exact:
                    msg = bitwise_diff(a, x, f"{what} output {k}")
                    if msg:
                        raise Mismatch(msg)
                else:
                    compare(a, x, r, prog.exact_outputs[k], tol, scale, f"{what} output {k}",
                            device=None)
                    if bitwise:
                        stats["inexact outputs"] += 1
                        stats["inexact outputs bitwise equal"] += bitwise_diff(a, x, "") is None
            except Mismatch as m:
                if not bitwise and follows_stock_inductor(a, prog, call, k, stock):
                    stats["exact outputs that follow stock Inductor, not eager"] += 1
                    continue
                fail(kind if not bitwise or exact else "emulator-vs-cuda-tolerance", str(m), call)

    for call, (expected, ref64, scale) in enumerate(calls):
        gc = g["calls"][call] if call < len(g["calls"]) else {}
        ec = e["calls"][call] if call < len(e["calls"]) else {}
        go, eo = gc.get("gxu"), ec.get("gxu")
        if gpu_is_cuda and gc:
            if gc.get("eager_cuda") is not None:
                if go is not None:
                    check("cuda-vs-eager-cuda", go, gc["eager_cuda"], ref64, scale, call,
                          "gxu-cuda vs eager CUDA")
            elif gc.get("eager_cuda_error"):
                stats["eager CUDA errors (not failures)"] += 1
        if go is not None:
            check("cuda-vs-eager-cpu", go, expected, ref64, scale, call, "gxu-cuda vs eager CPU")
        if eo is not None:
            check("emulator-vs-eager-cpu", eo, expected, ref64, scale, call,
                  "gxu-emulator vs eager CPU")
        if go is not None and eo is not None:
            check("emulator-vs-cuda-bitwise", eo, go, ref64, scale, call,
                  "gxu-emulator vs gxu-cuda", bitwise=True)
    if fails:
        return "failure", fails
    return ("unsupported" if unsup else "ok"), fails


# ----------------------------------------------------------------------------- main

def _table(rows: list[tuple[str, Any]]) -> str:
    w = max(len(k) for k, _ in rows)
    return "\n".join(f"  {k:<{w}}  {v}" for k, v in rows)


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m tests.fuzz.three_way", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--examples", type=int,
                    help="number of programs (default 20; with --programs: all of them)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--strategy", choices=sorted(STRATEGIES), default="random",
                    help="random: test_random_programs' strategy; reductions: "
                         "test_reductions_and_views'")
    ap.add_argument("--programs", help="replay a programs.json written by an earlier run "
                                       "instead of generating")
    ap.add_argument("--out", help="output folder (default: a new temporary folder)")
    ap.add_argument("--gpu-target", choices=("auto", "cuda", "emulator"), default="auto",
                    help="target of the 'gpu' side; auto: cuda when torch sees a GPU")
    ap.add_argument("--jobs", type=int, default=1, help="worker processes per side (default 1)")
    ap.add_argument("--timeout", type=float, default=600,
                    help="seconds one program may take in a worker before it counts as a crash")
    ap.add_argument("--sides", choices=("both", "gpu", "emulator"), default="both",
                    help="run one side only: 'gpu' on the GPU machine (saves its results), "
                         "then 'emulator' elsewhere with --programs OUT/programs.json --out OUT "
                         "(the emulator is the slow side: it can run on CPU machines)")
    ap.add_argument("--compare", action="store_true",
                    help="run nothing: compare the results both sides saved in --out "
                         "(with --programs OUT/programs.json)")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--results", help=argparse.SUPPRESS)
    ap.add_argument("--indices", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        return worker_main(args)
    # SIGTERM (`timeout`, a job scheduler) unwinds like Ctrl-C, so the workers are stopped.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))

    start = time.perf_counter()
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="gxusim-three-way-"))
    out.mkdir(parents=True, exist_ok=True)
    sides = () if args.compare else SIDES if args.sides == "both" else (args.sides,)
    if args.compare and not (args.out and args.programs):
        ap.error("--compare needs --out (the folder both sides saved into) and --programs")
    # A previous run's outputs in the same folder, except the other side's saved results.
    for stale in ["logs", "failures.jsonl"] + [f"results/{side}" for side in sides]:
        p = out / stale
        shutil.rmtree(p) if p.is_dir() else p.unlink(missing_ok=True)
    gpu_target = args.gpu_target
    if gpu_target == "auto":
        gpu_target = "cuda" if torch.cuda.is_available() else "emulator"
    if gpu_target == "cuda" and not torch.cuda.is_available():
        ap.error("--gpu-target cuda needs a CUDA GPU, and torch sees none")

    if args.programs:
        progs = [Program.from_json(d) for d in json.loads(Path(args.programs).read_text())]
        if args.examples is not None:
            progs = progs[:args.examples]
    else:
        progs = generate(20 if args.examples is None else args.examples, args.seed,
                         args.strategy)
    (out / "programs.json").write_text(json.dumps([p.to_json() for p in progs]))
    gen_s = time.perf_counter() - start
    if args.compare:
        print(f"[three-way] comparing the saved results of {len(progs)} programs in {out}")
    else:
        print(f"[three-way] {len(progs)} programs ({gen_s:.0f} s to draw); gpu side: "
              f"{gpu_target}"
              f"{'' if gpu_target == 'cuda' else ' (no GPU: plumbing mode, eager CUDA skipped)'}"
              f"; output in {out}", flush=True)

    side_s = run_all(progs, out, gpu_target, max(1, args.jobs), args.timeout, sides)
    # A side is done when every program has its result; the other side may still be running.
    # --compare judges what both sides have (a run cut short by a time limit) and counts the rest.
    has_results = [all((out / "results" / side / f"{i}.pt").exists() for side in SIDES)
                   for i in range(len(progs))]
    missing = [side for side in SIDES
               if not all((out / "results" / side / f"{i}.pt").exists() for i in range(len(progs)))]
    if missing and not args.compare:
        print(f"[three-way] {', '.join(sides)} side done in {max(side_s.values(), default=0):.0f} s; results in {out}/results. "
              f"Compare once the {' and '.join(missing)} side has run (its run compares at "
              f"the end; if it is running elsewhere, copy its results here and add --compare): "
              f"python3 -m tests.fuzz.three_way --sides {missing[0]} --programs "
              f"{out}/programs.json --out {out}", flush=True)
        return 0

    outcomes: collections.Counter = collections.Counter()
    by_kind: collections.Counter = collections.Counter()
    stats: collections.Counter = collections.Counter()
    unsupported: collections.Counter = collections.Counter()
    with open(out / "failures.jsonl", "w") as fj:
        for i, prog in enumerate(progs):
            if not has_results[i]:
                continue
            res = {side: torch.load(out / "results" / side / f"{i}.pt", weights_only=True)
                   for side in SIDES}
            try:
                outcome, fails = judge(prog, res, res["gpu"].get("target") == "cuda", stats)
            except Exception as ex:  # a bug of the comparison itself: report, don't hide
                outcome, fails = "failure", [{"kind": "compare",
                                              "call": None, "message": "".join(
                                                  traceback.format_exception(ex))[-3000:]}]
            outcomes[outcome] += 1
            if outcome == "unsupported":
                unsupported[res["gpu"]["reason"]] += 1
            for kind in sorted({f["kind"] for f in fails}):
                by_kind[kind] += 1
            if fails:
                fj.write(json.dumps({
                    "index": i, "kinds": sorted({f["kind"] for f in fails}),
                    "describe": prog.describe(), "program": prog.to_json(), "details": fails,
                    "targets": {side: {k: res[side][k] for k in
                                       ("target", "status", "reason", "error", "traceback")}
                                for side in SIDES}}) + "\n")
                print(f"\nFAILURE program {i} ({', '.join(sorted({f['kind'] for f in fails}))}):"
                      f"\n{prog.describe()}\n  " + "\n  ".join(f["message"][:400] for f in fails))

    for reason, n in unsupported.most_common():
        print(f"  unsupported x{n}: {reason}")
    total = time.perf_counter() - start
    rows: list[tuple[str, Any]] = [
        ("programs", len(progs)),
        ("  without a result on both sides (not judged)", has_results.count(False)),
        ("ok", outcomes["ok"]), ("unsupported", outcomes["unsupported"]),
        ("failures (programs)", outcomes["failure"])]
    rows += [(f"  {label}", by_kind[kind]) for kind, label in KINDS.items()]
    if by_kind["compare"]:
        rows.append(("  comparison crashed", by_kind["compare"]))
    rows += [(k, v) for k, v in sorted(stats.items())]
    if True in has_results:  # the side that ran the "gpu" results, maybe on another machine
        gpu_target = torch.load(out / "results" / "gpu" / f"{has_results.index(True)}.pt",
                                weights_only=True).get("target", gpu_target)
    rows += [("gpu side target", gpu_target + ("" if gpu_target == "cuda" else
                                               " (plumbing mode: no eager CUDA)")),
             ("time", f"{total:.0f} s (draw {gen_s:.0f} s, gpu side {side_s.get('gpu', 0):.0f} s, "
                      f"emulator side {side_s.get('emulator', 0):.0f} s)"),
             ("failures written to", str(out / "failures.jsonl"))]
    print("\nthree-way fuzz summary\n" + _table(rows), flush=True)
    return 1 if outcomes["failure"] else 0


if __name__ == "__main__":
    sys.exit(main())
