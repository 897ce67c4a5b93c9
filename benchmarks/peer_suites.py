"""PyTorch's own test suites against gxu, each result classified (`--help` for the options).

* openreg: torch_openreg's Python tests renamed for gxu (`openreg` -> `gxu`, `torch_openreg` ->
  `gxusim`) in a temporary folder, each file under pytest in its own process; a test that runs
  past `--timeout` or kills the process is recorded and the rest of its file runs on.
* inductor: a seeded sample of test_torchinductor.py's `CommonTemplate` tests, each alone in a
  worker process as `test_<name>_gxu` of the file's GPU class (the file loaded with
  `GPU_TYPE = "gxu"`); each failure runs again as `test_<name>_cpu` on stock Inductor (gxusim not
  imported): passing there makes it gxu's, failing there too makes it not gxu's.

Outcomes: pass, wrong answer, crash, refusal, false alarm, timeout, other error, skipped; written
to `openreg.json` / `inductor.json` under `--out`, with a summary table printed per suite.
"""
from __future__ import annotations

import argparse
import collections
import concurrent.futures
import functools
import importlib.util
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import unittest
from pathlib import Path
from typing import Any, Callable, Optional

from tqdm import tqdm

OPENREG_TESTS = Path("test/cpp_extensions/open_registration_extension/torch_openreg/tests")
INDUCTOR_FILE = Path("test/inductor/test_torchinductor.py")
OUTCOMES = ["pass", "wrong answer", "crash", "refusal", "false alarm", "timeout", "other error", "skipped"]
FALSE_ALARM_KINDS = ("out_of_bounds", "uncovered", "write_conflict", "read_write_race")
REPO = Path(__file__).resolve().parent.parent
MARK = "PEER_RESULT "
# CommonTemplate tests that need an API this torch lacks: _load_inductor stubs it so the file imports.
SKIP_NEWER_API = {"test_complex_memory_overlap": "torch._inductor.compile_fx.complex_memory_overlap"}


def _chain(exc: BaseException) -> list[BaseException]:
    """`exc` and the exceptions it wraps (cause, context, Inductor's inner_exception)."""
    seen: list[BaseException] = []
    todo: list[Optional[BaseException]] = [exc]
    while todo:
        e = todo.pop(0)
        if e is None or any(e is s for s in seen):
            continue
        seen.append(e)
        todo += [getattr(e, "inner_exception", None), e.__cause__, e.__context__]
    return seen


def _raised_by_gxusim(exc: BaseException) -> bool:
    frames = traceback.extract_tb(exc.__traceback__)
    return bool(frames) and frames[-1].filename.startswith(str(REPO))


def classify(exc: BaseException) -> tuple[str, str]:
    """(outcome, first error line) of a test that raised `exc`."""
    chain = _chain(exc)
    def line(e: BaseException) -> str:
        return f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0]}"[:300]
    for e in chain:
        if type(e).__name__ == "EmulationError":
            return ("false alarm" if any(k in str(e) for k in FALSE_ALARM_KINDS) else "refusal"), line(e)
    for e in chain:
        if type(e).__name__ == "GXULimitError" or (isinstance(e, NotImplementedError) and _raised_by_gxusim(e)):
            return "refusal", line(e)
    if isinstance(exc, AssertionError):
        return "wrong answer", line(exc)
    root = exc  # what a compiler error wraps: its inner exception or cause
    while (inner := getattr(root, "inner_exception", None) or root.__cause__) is not None:
        root = inner
    return "other error", line(root)


def _run(cmd: list[str], env: dict[str, str], timeout: float, cwd: Path,
         too_long: Callable[[], bool] = lambda: False) -> tuple[int, str, bool]:
    """Run `cmd` in its own process group; (returncode, output, timed out)."""
    proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    out_file = tempfile.TemporaryFile("w+")
    start = time.monotonic()
    pump = threading.Thread(target=lambda: shutil.copyfileobj(proc.stdout, out_file), daemon=True)
    pump.start()
    timed_out = False
    while proc.poll() is None:
        if time.monotonic() - start > timeout or too_long():
            timed_out = True
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            break
        time.sleep(0.5)
    pump.join(5)
    out_file.seek(0)
    return proc.returncode, out_file.read(), timed_out


def _env(target: str) -> dict[str, str]:
    return {**os.environ, "GXUSIM_TARGET": target, "TORCHINDUCTOR_COMPILE_THREADS": "1",
            "PYTHONPATH": os.pathsep.join([str(REPO / "benchmarks"), os.environ.get("PYTHONPATH", "")])}


def _tree(src: Path, rel: Path) -> Path:
    """`rel` inside `src`, a PyTorch checkout or the folder above one."""
    for base in (src, src / "pytorch"):
        if (base / rel).exists():
            return base / rel
    raise SystemExit(f"{rel} not found under {src} or {src / 'pytorch'}")


def rename_for_gxu(text: str) -> str:
    """openreg's test source as gxu's: the device, its module and its Python package renamed."""
    text = re.sub(r"^import torch_openreg\b", "import gxusim", text, flags=re.M)
    def rename(line: str) -> str:  # bytes literals (serialized archives) keep their lengths
        return line if line.lstrip().startswith('b"') else re.sub(
            r"openreg", lambda m: "gxu" if m.group(0).islower() else "GXU", line, flags=re.I)
    return "".join(map(rename, text.splitlines(keepends=True)))


CONFTEST = '''"""Written by benchmarks/peer_suites.py: gxu imported (openreg loads by autoload), outcomes logged."""
import json, os, time
import pytest
import gxusim  # noqa: F401
from peer_suites import classify

def _log(record):
    with open(os.environ["PEER_LOG"], "a") as f:
        f.write(json.dumps(record) + "\\n")

def pytest_runtest_logstart(nodeid, location):
    _log({"start": nodeid, "t": time.time()})

def pytest_unconfigure(config):
    _log({"end": True, "t": time.time()})

@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    report = (yield).get_result()
    if report.when == "call" or not report.passed:
        if report.skipped:
            outcome, error = "skipped", str(call.excinfo.value)[:300] if call.excinfo else ""
        elif report.passed:
            outcome, error = "pass", ""
        else:
            outcome, error = classify(call.excinfo.value)
        _log({"nodeid": item.nodeid, "outcome": outcome, "error": error, "t": time.time()})
'''


def run_openreg(src: Path, target: str, timeout: float, work: Path) -> list[dict[str, Any]]:
    """Every openreg test file, renamed, under pytest; one record per test."""
    folder = work / "openreg_gxu"
    folder.mkdir()
    files = sorted(_tree(src, OPENREG_TESTS).glob("test_*.py"))
    for f in files:
        (folder / f.name.replace("openreg", "gxu")).write_text(rename_for_gxu(f.read_text()))
    (folder / "conftest.py").write_text(CONFTEST)
    results: list[dict[str, Any]] = []
    for f in tqdm(files, desc="openreg", unit="file"):
        name, log, done = f.name.replace("openreg", "gxu"), work / f"{f.stem}.jsonl", {}
        while True:
            log.write_text("")
            begun = time.time()
            def running() -> tuple[Optional[str], float, bool]:
                """The test under way (None if none), when the log last moved, whether pytest ended."""
                started, t, ended = None, begun, False
                for r in map(json.loads, log.read_text().splitlines()):
                    started, t, ended = r.get("start"), r["t"], "end" in r
                return started, t, ended
            def too_long() -> bool:  # a test past the timeout, or a process that will not exit
                _, t, ended = running()
                return time.time() - t > (30 if ended else timeout)
            cmd = [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", name,
                   *[a for n in done for a in ("--deselect", n)]]
            # openreg registers itself whenever torch is imported (its autoload): gxu does when
            # asked, which spawned processes of a test need too
            env = {**_env(target), "PEER_LOG": str(log), "GXUSIM_AUTOLOAD": "1"}
            rc, out, timed_out = _run(cmd, env, 1e9, folder, too_long)
            for r in (r for r in map(json.loads, log.read_text().splitlines()) if "nodeid" in r):
                done[r["nodeid"]] = {"suite": "openreg", "name": r["nodeid"], "outcome": r["outcome"], "error": r["error"]}
            started = running()[0]
            if started is None:
                if not done:  # nothing ran: the module skipped itself or failed to import
                    lines = out.splitlines()
                    skip = next((l for l in lines if l.startswith("SKIPPED")), None)
                    err = skip or next((l[1:].strip() for l in lines if l.startswith("E ")), out[-300:])
                    done[name] = {"suite": "openreg", "name": name, "error": err[:300],
                                  "outcome": "skipped" if skip and rc in (0, 5) else "other error"}
                break
            outcome = "timeout" if timed_out else "crash"
            error = f"over {timeout:.0f} s" if timed_out else f"process ended, return code {rc}"
            done[started] = {"suite": "openreg", "name": started, "outcome": outcome, "error": error}
        results += done.values()
    return results


def _absent(api: str, *args: Any, **kwargs: Any) -> Any:
    raise NotImplementedError(f"{api} is not in this torch")


def _cuda_named_file(path: Path, device: str) -> Path:
    """A test_torchinductor.py from before Inductor's device-generic tests (torch 2.1 and older:
    no GPU_TYPE, the GPU class is CUDA's) made loadable here: the module paths it names that have
    moved since are aliased, HAS_CUDA (gone from inductor_utils) is defined, and for gxu the
    file is copied with the device renamed (`"cuda"`, `torch.cuda`, `x.cuda()` -> gxu)."""
    import torch._inductor.runtime.triton_heuristics as triton_heuristics
    from torch.testing._internal import inductor_utils
    sys.modules.setdefault("torch._inductor.triton_heuristics", triton_heuristics)
    inductor_utils.HAS_CUDA = device == "gxu"
    if device != "gxu":
        return path
    renamed = Path(tempfile.mkdtemp(prefix="inductor_gxu_")) / path.name
    renamed.write_text(re.sub(r"\bcuda\b", "gxu", path.read_text()))
    return renamed


def _load_inductor(path: Path, device: str) -> Any:
    """test_torchinductor.py as a module, its GPU class built for gxu when `device` is gxu."""
    tests_dir = path.parent
    if "GPU_TYPE" not in path.read_text():
        path = _cuda_named_file(path, device)
    if device == "gxu":
        import gxusim  # noqa: F401
        from torch.testing._internal import inductor_utils
        for name, value in {"GPU_TYPE": "gxu", "HAS_GPU": True, "RUN_GPU": True, "HAS_GPU_AND_TRITON": True,
                            "requires_gpu": functools.partial(unittest.skipIf, False, "")}.items():
            setattr(inductor_utils, name, value)
    import torch._inductor.compile_fx as compile_fx
    for name, api in SKIP_NEWER_API.items():  # the import must succeed; the test itself is skipped
        attr = api.rsplit(".", 1)[1]
        if not hasattr(compile_fx, attr):
            setattr(compile_fx, attr, functools.partial(_absent, api))
    sys.path[:0] = [str(tests_dir), str(tests_dir.parent)]
    spec = importlib.util.spec_from_file_location("test_torchinductor", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["test_torchinductor"] = module
    spec.loader.exec_module(module)
    return module


def _test_class(module: Any, device: str, method: Optional[str] = None) -> type:
    for obj in vars(module).values():
        if (isinstance(obj, type) and issubclass(obj, unittest.TestCase) and getattr(obj, "device", None) == device
                and (method is None or hasattr(obj, method)) and any(n.endswith(f"_{device}") for n in dir(obj))):
            return obj
    raise LookupError(f"no {device} test class" + (f" with {method}" if method else ""))


class _Result(unittest.TestResult):
    """The first outcome of one test, with the exception itself."""
    outcome: tuple[str, str] = ("pass", "")

    def _set(self, value: tuple[str, str]) -> None:
        if self.outcome[0] == "pass":
            self.outcome = value

    def addError(self, test: Any, err: Any) -> None: self._set(classify(err[1]))
    def addFailure(self, test: Any, err: Any) -> None: self._set(classify(err[1]))
    def addSkip(self, test: Any, reason: str) -> None: self._set(("skipped", reason[:300]))
    def addExpectedFailure(self, test: Any, err: Any) -> None: self._set(("skipped", "expected failure"))
    def addSubTest(self, test: Any, subtest: Any, err: Any) -> None:
        if err is not None:
            self._set(classify(err[1]))


def inductor_worker(path: Path, device: str, test: str) -> None:
    """Run one test of the file (or list them when `test` is empty); print the result and exit."""
    module = _load_inductor(path, device)
    if not test:
        names = [n for n in dir(module.CommonTemplate) if n.startswith("test_")]
        cls = _test_class(module, device)
        print(MARK + json.dumps([n for n in names if hasattr(cls, f"{n}_{device}")]), flush=True)
    else:
        method = f"{test}_{device}"
        result = _Result()
        unittest.TestSuite([_test_class(module, device, method)(method)]).run(result)  # with setUpClass
        outcome, error = result.outcome
        print(MARK + json.dumps({"outcome": outcome, "error": error}), flush=True)
    os._exit(0)  # compile workers and their threads need not be waited for


def _inductor_call(path: Path, device: str, test: str, target: str, timeout: float) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--worker", str(path), device, test]
    rc, out, timed_out = _run(cmd, _env(target), timeout, REPO)
    line = next((l for l in reversed(out.splitlines()) if l.startswith(MARK)), None)
    if line:
        return json.loads(line[len(MARK):]) if test else {"names": json.loads(line[len(MARK):])}
    if timed_out:
        return {"outcome": "timeout", "error": f"over {timeout:.0f} s"}
    if rc < 0:
        return {"outcome": "crash", "error": f"killed by {signal.Signals(-rc).name}"}
    return {"outcome": "other error", "error": (out.strip().splitlines() or [""])[-1][:300]}


_progress_lock = threading.Lock()


def run_inductor(src: Path, target: str, sample: int, seed: int, timeout: float,
                 jobs: int = 1, progress: Optional[Path] = None) -> list[dict[str, Any]]:
    """A seeded sample of CommonTemplate tests on gxu, `jobs` worker processes at a time;
    failures run again on stock CPU Inductor. Each result is also appended to `progress` (JSON
    lines) as it comes, so a run stopped early keeps what it measured."""
    path = _tree(src, INDUCTOR_FILE)
    listed = _inductor_call(path, "gxu", "", target, 1800)
    if "names" not in listed:
        raise SystemExit(f"could not list the gxu tests: {listed}")
    names = random.Random(seed).sample(sorted(listed["names"]), min(sample, len(listed["names"])))

    def run(name: str) -> dict[str, Any]:
        if name in SKIP_NEWER_API:
            r = {"outcome": "skipped", "error": f"needs {SKIP_NEWER_API[name]}, absent from this torch"}
        else:
            r = _inductor_call(path, "gxu", name, target, timeout)
        record = {"suite": "inductor", "name": f"{name}_gxu", **r}
        if r["outcome"] not in ("pass", "skipped"):
            cpu = _inductor_call(path, "cpu", name, target, timeout)
            owner = {"pass": "gxu", "skipped": "unknown (skipped on cpu)"}.get(cpu["outcome"], "not gxu")
            record.update(cpu_outcome=cpu["outcome"], cpu_error=cpu["error"], owner=owner)
        if progress:
            with _progress_lock, open(progress, "a") as log:
                log.write(json.dumps(record) + "\n")
        return record
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:  # each test is its own process
        return list(tqdm(pool.map(run, names), total=len(names), desc="inductor", unit="test"))


def summary(suite: str, results: list[dict[str, Any]]) -> str:
    """One row per outcome; for inductor, failures split by whose they are."""
    counts = collections.Counter(r["outcome"] for r in results)
    owners = collections.Counter((r["outcome"], r.get("owner")) for r in results)
    split = suite == "inductor"
    rows = [f"{suite}: {len(results)} tests", f"  {'outcome':<14}{'tests':>6}" + ("  gxu's  not gxu's  unknown" * split)]
    for o in (o for o in OUTCOMES if counts[o]):
        by = [owners[o, "gxu"], owners[o, "not gxu"], counts[o] - owners[o, "gxu"] - owners[o, "not gxu"]]
        extra = "  {:>5}  {:>9}  {:>7}".format(*by) if split and o not in ("pass", "skipped") else ""
        rows.append(f"  {o:<14}{counts[o]:>6}{extra}")
    return "\n".join(rows)


def main() -> None:
    if len(sys.argv) == 5 and sys.argv[1] == "--worker":
        return inductor_worker(Path(sys.argv[2]), sys.argv[3], sys.argv[4])
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pytorch-src", type=Path, required=True, help="a PyTorch checkout, or the folder above one")
    parser.add_argument("--suites", nargs="+", choices=["openreg", "inductor"], default=["openreg", "inductor"])
    parser.add_argument("--target", choices=["emulator", "cuda"], default="emulator", help="GXUSIM_TARGET for every run")
    parser.add_argument("--inductor-sample", type=int, default=200, help="CommonTemplate tests sampled")
    parser.add_argument("--seed", type=int, default=0, help="seed of the sample")
    parser.add_argument("--timeout", type=float, default=300, help="seconds one test may run")
    parser.add_argument("--jobs", type=int, default=1, help="Inductor tests run at a time")
    parser.add_argument("--out", type=Path, default=Path("peer_results"), help="folder for the JSON files")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="peer_suites_") as work:
        for suite in args.suites:
            if suite == "openreg":
                results = run_openreg(args.pytorch_src, args.target, args.timeout, Path(work))
            else:
                results = run_inductor(args.pytorch_src, args.target, args.inductor_sample,
                                       args.seed, args.timeout, args.jobs,
                                       args.out / "inductor.progress.jsonl")
            (args.out / f"{suite}.json").write_text(json.dumps(
                {"suite": suite, "target": args.target, "seed": args.seed, "tests": results}, indent=1))
            print(summary(suite, results), flush=True)


if __name__ == "__main__":
    main()
