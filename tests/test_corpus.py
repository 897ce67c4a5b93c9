"""The kernel corpus: entries made from compiled kernels, the fixed split, and the kept file."""
import ast
import collections
import json
import importlib.util
import sys
from pathlib import Path

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import gxusim
from gxusim import corpus
from gxusim import target as targets
from gxusim.compiler import launcher
from gxusim.compiler.inductor_registration import kernels_loaded_in_this_process
from gxusim.compiler.plan import candidate_plans, plan_launch
from gxusim.compiler.policies import resolve_policy

KERNELS = Path(__file__).resolve().parent.parent / "benchmarks" / "corpus" / "kernels.jsonl"


def _entries(fn, *shapes, dtype=torch.float32) -> list[dict]:
    """Corpus entries of every kernel `fn` compiles to, planned on fake tensors."""
    torch._dynamo.reset()
    with FakeTensorMode(allow_non_fake_inputs=False), torch.device("gxu"), \
            launcher.predict_only(), kernels_loaded_in_this_process(), \
            launcher.capture() as captured:
        torch.compile(fn)(*[torch.empty(s, dtype=dtype) for s in shapes])
    torch._dynamo.reset()
    return [corpus.entry(c.kernel, c.args) for c in captured]


def test_an_entry_keeps_what_launching_the_kernel_again_needs():
    (entry,) = _entries(lambda t, b: (t + b).relu(), (300, 257), (257,))
    assert entry["numels"] == {"xnumel": 300 * 257} and entry["kind"] == "pointwise"
    assert entry["dtype"] == "float32" and entry["fusion"] == ["aten.add", "aten.relu"]
    bias = next(a for a in entry["args"] if a.get("shape") == [257])
    assert bias == {"name": bias["name"], "dtype": "float32", "shape": [257], "stride": [1],
                    "offset": 0, "storage": 257}
    assert entry["part"] == corpus.part_of(entry["id"])
    assert "gxu_traits" in entry["module"]


def test_a_reloaded_entry_computes_what_the_compiled_kernel_computes():
    (entry,) = _entries(lambda t: t.softmax(-1) * 2, (50, 300))
    kernel = corpus.load_kernel(entry)
    args = corpus.make_arguments(entry, "gxu", seed=3)
    spec = gxusim.current_spec()
    plan = plan_launch(kernel.shape, kernel.numels(args), torch.float32,
                       resolve_policy("seed"), spec)
    launch = kernel._target_launch(plan)
    targets.active().execute(launch, args, spec)
    x = args[0].cpu()
    torch.testing.assert_close(args[1].cpu(), x.softmax(-1) * 2)
    assert kernel.shape.traits is not None and kernel.shape.traits.reductions == ("max", "sum")


def test_the_same_code_at_the_same_sizes_is_one_entry_and_sizes_share_a_structure():
    first = _entries(lambda t: t.sigmoid() * 3, (4096,))[0]
    again = _entries(lambda u: u.sigmoid() * 3, (4096,))[0]
    other = _entries(lambda t: t.sigmoid() * 3, (8192,))[0]
    assert first["id"] == again["id"] != other["id"]
    assert first["structure"] == other["structure"]


def test_the_split_is_a_hash_of_the_id_about_thirty_in_a_hundred_in_the_test_part():
    ids = [f"{n:016x}" for n in range(2000)]
    parts = collections.Counter(corpus.part_of(i) for i in ids)
    assert 0.25 < parts["test"] / len(ids) < 0.35
    assert [corpus.part_of(i) for i in ids] == [corpus.part_of(i) for i in ids]


def _build_module():
    return _script("corpus_build", KERNELS.parent / "build.py")


def _script(name: str, path: Path):
    """A benchmark script imported as a module (once a process)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)  # its dataclasses look their module up
    spec.loader.exec_module(sys.modules[spec.name])
    return sys.modules[spec.name]


def test_thinning_keeps_the_smallest_and_largest_sizes_of_a_structure():
    build = _build_module()
    entries = [{"id": f"{n:02d}", "structure": "s", "numels": {"xnumel": n}} for n in range(1, 11)]
    kept = build.thin_sizes(entries + [{"id": "z", "structure": "t", "numels": {"xnumel": 5}}],
                            keep=4)
    sizes = sorted(e["numels"]["xnumel"] for e in kept if e["structure"] == "s")
    assert sizes[0] == 1 and sizes[-1] == 10 and len(sizes) == 4
    assert any(e["id"] == "z" for e in kept)


def test_refreshing_counts_rewrites_only_the_traits_counts_of_a_kept_entry():
    build = _build_module()
    entry = _entries(lambda t: torch.tanh(t) * t + 1, (1000,))[0]
    traits = build._traits_literal(entry["module"])
    stale = entry["module"].replace("'transcendentals': 1", "'transcendentals': 7", 1)
    stale = stale.replace("'live_values': ", "'live_values': 9", 1)  # a 9 before its digits
    assert "'transcendentals': 7" in stale and stale != entry["module"]
    refreshed = build.refresh_counts({**entry, "module": stale})
    assert refreshed["module"] == entry["module"] and refreshed["id"] == entry["id"]
    assert ast.literal_eval(traits)["transcendentals"] == 1
    with pytest.raises(ValueError, match="no gxu_traits"):
        build.refresh_counts({**entry, "module": "x = 1\n"})


def test_the_kept_corpus_is_broad_split_as_written_and_unique():
    entries = corpus.load(KERNELS)
    assert len(entries) >= 300
    assert len({e["id"] for e in entries}) == len(entries)
    assert all(e["part"] == corpus.part_of(e["id"]) for e in entries)
    kinds = collections.Counter(e["kind"] for e in entries)
    for kind in ("pointwise", "pointwise_2d", "persistent_reduction", "looped_reduction",
                 "column_reduction", "scan"):
        assert kinds[kind] >= 5, kinds
    assert {"float32", "bfloat16"} <= {e["dtype"] for e in entries}
    parts = collections.Counter(e["part"] for e in entries)
    assert parts["test"] >= 90 and parts["fit"] >= 200


@pytest.mark.parametrize("index", range(3))
def test_kept_entries_load_with_their_traits(index):
    entries = sorted(corpus.load(KERNELS), key=lambda e: e["id"])
    entry = entries[index * len(entries) // 3]
    kernel = corpus.load_kernel(entry)
    assert kernel.shape.traits is not None and kernel.name == entry["kernel"]
    args = corpus.make_arguments(entry, "cpu")
    assert kernel.numels(args) == entry["numels"]


def _measured(kernel: str, kind: str, ceiling_s: float, gxu_s: float, seed_s: float) -> dict:
    """A row as `bench_ceiling.py --corpus` writes it: the model ranks the ceiling's config
    second, and gxu's plan is two doublings of XBLOCK from it."""
    def plan(seconds, predicted=None, blocks=1024):
        return {"meta": {"XBLOCK": blocks}, "num_warps": 4, "num_stages": None, "programs": 32,
                "seconds": seconds, "predicted_s": predicted, "fits": True}
    return {"id": kernel, "part": "test", "kind": kind, "dtype": "float32", "kernel": kernel,
            "candidates": [plan(2 * ceiling_s, 1e-6, 512), plan(ceiling_s, 2e-6),
                           plan(None, 3e-6, 64)],
            "gxu": plan(gxu_s, blocks=256), "seed": plan(seed_s), "rules": plan(gxu_s),
            "device": "a GPU"}


def test_the_measured_summary_gives_each_policy_against_the_ceiling_by_kind():
    rows = [_measured("k1", "pointwise", 1e-5, 1e-5, 4e-5),
            _measured("k2", "pointwise", 1e-5, 2e-5, 1e-5),
            _measured("k3", "looped_reduction", 3e-5, 6e-5, 9e-5)]
    header, lines = corpus.measured_summary(rows)
    table = {line[0]: dict(zip(header, line)) for line in lines}
    assert table["pointwise"]["kernels"] == 2
    assert table["pointwise"]["gxu/ceiling (geomean / worst)"] == f"{0.5 ** 0.5:.3f} / 0.50"
    assert table["pointwise"]["seed"] == f"{0.25 ** 0.5:.3f} / 0.25"
    assert table["pointwise"]["gxu >= seed (5%)"] == "50%"
    assert table["all"]["kernels"] == 3 and table["looped_reduction"]["gxu's worst kernel"] == "k3"
    # autotune's climb from gxu's plan times it and its neighbours (the ceiling's config
    # and the model's first), moves to the ceiling's and stops: three timed
    assert corpus.guided_search(rows[1]) == (1e-5, 3)
    assert corpus.model_pick(rows[0]) == 2e-5  # the model's first choice, not the ceiling


def test_a_policy_replayed_on_a_measured_row_gets_the_stored_time_of_the_config_it_picks():
    """Replaying plans the kernel again on meta tensors and reads the time the row stored
    for that exact config; a config the row never timed has no time, not a neighbour's."""
    (entry,) = _entries(lambda t: t.softmax(-1) * 2, (2000, 3000))
    spec = gxusim.current_spec()
    kernel = corpus.load_kernel(entry)
    args = corpus.meta_arguments(entry)
    candidates = candidate_plans(kernel.shape, kernel.numels(args), spec)
    row = {"id": entry["id"], "candidates": [
        {"meta": p.meta, "num_warps": p.num_warps, "num_stages": p.num_stages,
         "seconds": 1e-6 * (i + 1)} for i, p in enumerate(candidates)]}
    plan, seconds = corpus.replayed_plan(row, entry, resolve_policy("gxu"), spec)
    index = next(i for i, p in enumerate(candidates) if (p.meta, p.num_warps, p.num_stages)
                 == (plan.meta, plan.num_warps, plan.num_stages))
    assert seconds == 1e-6 * (index + 1)
    del row["candidates"][index]
    assert corpus.replayed_plan(row, entry, resolve_policy("gxu"), spec)[1] is None
    row["gxu"] = {"meta": plan.meta, "num_warps": plan.num_warps,
                  "num_stages": plan.num_stages, "seconds": 7e-6}
    assert corpus.replayed_plan(row, entry, resolve_policy("gxu"), spec)[1] == 7e-6


def test_gxusim_report_writes_a_page_for_a_measured_corpus(tmp_path):
    from gxusim.cli import main
    results = tmp_path / "corpus.json"
    results.write_text(json.dumps([_measured("k1", "pointwise", 1e-5, 2e-5, 4e-5)]))
    assert main(["report", str(results), "--out", str(tmp_path / "report")]) == 0
    page = (tmp_path / "report" / "index.html").read_text()
    assert "test part: 1 kernels" in page and "k1" in page and "0.500 / 0.50" in page
    assert list((tmp_path / "report").glob("plot-corpus-test.png"))


def test_a_kernel_that_loses_the_gpu_context_ends_the_run_and_resume_goes_past_it(
        tmp_path, monkeypatch):
    """After a sticky CUDA error every later launch in the process fails: the corpus run
    keeps that kernel as `lost_context`, stops with exit status 3 instead of recording the
    rest as failures, and `--resume` continues after it without retrying it."""
    bench = _script("bench_ceiling", KERNELS.parents[1] / "bench_ceiling.py")
    sample = bench.corpus_sample(corpus.load(KERNELS), "test", 3)
    poisoned = sample[1]["id"]
    measured = []

    def measure(entry, spec, pool):
        measured.append(entry["id"])
        if entry["id"] == poisoned:
            raise RuntimeError("CUDA error: misaligned address")
        return {"id": entry["id"], "part": entry["part"], "kind": entry["kind"],
                "candidates": []}
    monkeypatch.setattr(bench, "measure_corpus_entry", measure)
    monkeypatch.setattr(bench, "context_lost", lambda: True)
    monkeypatch.setattr(bench, "print_corpus_tables", lambda rows, name: None)
    out = tmp_path / "rows.json"
    with pytest.raises(SystemExit) as stopped:
        bench.measure_corpus(str(KERNELS), "test", 3, str(out), 1e9)
    assert stopped.value.code == 3 and measured == [sample[0]["id"], poisoned]
    rows = json.loads(out.read_text())
    assert [r["id"] for r in rows] == measured and rows[1]["lost_context"]
    rows = bench.measure_corpus(str(KERNELS), "test", 3, str(out), 1e9, resume=True)
    assert measured[2:] == [sample[2]["id"]]
    assert [r["id"] for r in rows] == [e["id"] for e in sample]


def test_a_corpus_run_cut_short_while_writing_keeps_its_last_complete_rows(tmp_path):
    """A run killed by a timeout may be killed while it writes its rows: the file then
    holds the rows of the last complete write, never a truncated one that --resume cannot
    read (a GPU visit lost 28 kernels' rows that way)."""
    bench = _script("bench_ceiling", KERNELS.parents[1] / "bench_ceiling.py")
    out = tmp_path / "rows.json"
    bench.write_rows(out, [{"id": "k1"}])
    with pytest.raises(TypeError):  # fails part way through serialising, as a kill would
        bench.write_rows(out, [{"id": "k1"}, {"id": "k2", "seconds": object()}])
    assert json.loads(out.read_text()) == [{"id": "k1"}]
