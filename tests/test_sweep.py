"""Policy sweeps on the session's target: rows, tables, saved results, plots, the CLI."""
import json
import math

import pytest

from gxusim import sweep
from gxusim.cli import main


@pytest.fixture(scope="module")
def rows():
    return sweep.sweep(["add_relu", "row_sum"], ["seed", "gxu"])


def test_sweep_compiles_every_model_under_every_policy(rows):
    assert [(r["model"], r["policy"]) for r in rows] == [
        ("add_relu", "seed"), ("add_relu", "gxu"), ("row_sum", "seed"), ("row_sum", "gxu")]
    for row in rows:
        assert row["matches_eager"] and row["within_spec"]
        assert 0 < row["predicted_s"] < math.inf
        assert row["kernels"] == 1  # the launches of one (warm) call, not of every call
        assert row["max_grid"] <= 32 and row["max_warps"] <= 16


def test_policies_make_different_choices_the_table_compares(rows):
    text = sweep.table(rows)
    assert "seed us" in text and "gxu us" in text and "gxu/seed" in text
    add_relu = {r["policy"]: r["predicted_s"] for r in rows if r["model"] == "add_relu"}
    assert add_relu["seed"] != add_relu["gxu"]


def test_saved_rows_report_again_and_bad_files_are_named(rows, tmp_path, capsys):
    path = tmp_path / "sweep.json"
    sweep.save(rows, path)
    assert main(["report", str(path)]) == 0
    assert "add_relu" in capsys.readouterr().out
    path.write_text(json.dumps([{"model": "x"}]))
    with pytest.raises(ValueError, match="sweep.json"):
        sweep.load(path)


def test_plot_is_written(rows, tmp_path):
    pytest.importorskip("matplotlib")
    path = tmp_path / "sweep.png"
    sweep.plot(rows, path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
