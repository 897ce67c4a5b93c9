"""The three-way driver (three_way.py) end to end on a small batch. Without a GPU both sides
run on the emulator (plumbing mode); on a GPU machine this is a real three-way run."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch

from .three_way import ROOT, bitwise_diff, generate


def test_generate_is_deterministic_and_distinct():
    a = [json.dumps(p.to_json(), sort_keys=True) for p in generate(6, 3)]
    b = [json.dumps(p.to_json(), sort_keys=True) for p in generate(6, 3)]
    assert a == b and len(set(a)) == 6


def test_bitwise_diff():
    x = torch.tensor([0.0, 1.5, float("nan")])
    assert bitwise_diff(x, x.clone(), "o") is None
    nan2 = torch.tensor([0.0, 1.5, 0.0]).view(torch.int32)
    nan2[2] = 0x7FFFFFFF  # another NaN payload: still equal
    assert bitwise_diff(x, nan2.view(torch.float32), "o") is None
    msg = bitwise_diff(x, torch.tensor([-0.0, 1.5, float("nan")]), "o")
    assert msg and "only the signs of zeros" in msg
    assert "1/2" in bitwise_diff(torch.tensor([1, 2]), torch.tensor([1, 3]), "o")


def _summary(done: subprocess.CompletedProcess) -> tuple[str, dict]:
    """A finished driver's summary table, and its first rows (label -> value)."""
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-5000:]
    summary = out[out.index("three-way fuzz summary"):]
    return summary, dict(line.strip().rsplit(None, 1) for line in summary.splitlines()[1:5])


def test_three_way_driver_end_to_end(tmp_path: Path):
    env = {k: v for k, v in os.environ.items() if k != "GXUSIM_TARGET"}
    done = subprocess.run(
        [sys.executable, "-m", "tests.fuzz.three_way", "--examples", "3", "--seed", "6",
         "--out", str(tmp_path)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    summary, lines = _summary(done)
    assert lines["programs"] == "3", summary
    assert int(lines["ok"]) + int(lines["unsupported"]) == 3, summary
    for side in ("gpu", "emulator"):
        saved = sorted((tmp_path / "results" / side).glob("*.pt"))
        assert len(saved) == 3
        rec = torch.load(saved[0], weights_only=True)
        assert rec["status"] in ("ok", "unsupported") and rec["calls"]
    assert (tmp_path / "failures.jsonl").read_text() == ""
    assert len(json.loads((tmp_path / "programs.json").read_text())) == 3

    # A side cut short (a time limit): --compare judges what both sides have, counts the rest.
    (tmp_path / "results" / "emulator" / "2.pt").unlink()
    done = subprocess.run(
        [sys.executable, "-m", "tests.fuzz.three_way", "--compare", "--programs",
         str(tmp_path / "programs.json"), "--out", str(tmp_path)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    summary, lines = _summary(done)
    assert lines["without a result on both sides (not judged)"] == "1", summary
    assert int(lines["ok"]) + int(lines["unsupported"]) == 2, summary


def test_a_terminated_driver_leaves_no_worker_running(tmp_path: Path):
    # Workers run in sessions of their own (a hung one is killed with its process group), so
    # a driver stopped by `timeout` must stop them itself.
    env = {k: v for k, v in os.environ.items() if k != "GXUSIM_TARGET"}
    driver = subprocess.Popen(
        [sys.executable, "-m", "tests.fuzz.three_way", "--examples", "20", "--seed", "6",
         "--out", str(tmp_path)], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not list((tmp_path / "results").glob("*/current-*")) and time.monotonic() < deadline:
        time.sleep(0.5)  # until a worker has begun a program
    driver.send_signal(signal.SIGTERM)
    assert driver.wait(timeout=60) == 128 + signal.SIGTERM
    workers = subprocess.run(["pgrep", "-f", str(tmp_path)], capture_output=True, text=True)
    assert workers.stdout == "", workers.stdout
