"""HTML sweep report: the page, its plots and its numbers, from synthetic rows (CPU only).

The rows are built here: two policies x two models x three sizes, row_sum timed (as on a
GPU), add_relu predict-only, and one failed run. The numbers the page shows are checked
against statistics computed here independently, and a headless browser (when installed)
checks that the page renders and every plot decodes.
"""
from __future__ import annotations

import html
import math
import shutil
import statistics
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from gxusim.html_report import _spearman, write_report

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
SIZES = (1024, 65536, 1 << 24)
FAILURE = "NotImplementedError: tl.dot on <bf16> & friends"
# row_sum, timed: (policy, size) -> (predicted_s, measured_s). At 1024 gxu is predicted
# faster than seed but measured slower: one ratio whose direction the model gets wrong.
TIMED = {
    ("seed", 1024): (1.0e-6, 1.5e-6), ("gxu", 1024): (0.8e-6, 1.6e-6),
    ("seed", 65536): (2.0e-5, 1.9e-5), ("gxu", 65536): (2.2e-5, 2.0e-5),
    ("seed", 1 << 24): (3.0e-3, 3.3e-3), ("gxu", 1 << 24): (2.5e-3, 2.6e-3),
}


def _kernel(policy: str, predicted_s: float, measured_s: float | None) -> dict:
    return {
        "kernel": "triton_red_fused_sum_0",
        "fusion": "[Fusion] triton_red_fused_sum_0 <- aten.sum",
        "programs": 32, "num_warps": 16, "tiles": 4096, "tiles_per_program": 128,
        "meta": {"XBLOCK": 8, "R0_BLOCK": 1024}, "predicted_s": predicted_s,
        "measured_s": measured_s, "blocks_per_sm": 2, "occupancy_limiter": "max_blocks_per_sm",
        "decision": f"[Config] triton_red_fused_sum_0 XBLOCK=8 R0_BLOCK=1024 num_warps=16 "
                    f"grid=(32, 1, 1) policy={policy} target=predict",
    }


def _row(model: str, policy: str, size: int, predicted_s: float,
         measured_s: float | None) -> dict:
    return {"model": model, "policy": policy, "size": size, "spec": "gxu",
            "target": "cuda" if measured_s else "predict", "train": False,
            "predicted_s": predicted_s, "measured_s": measured_s,
            "matches_eager": True if measured_s else None, "within_spec": True, "error": None,
            "kernels": [_kernel(policy, predicted_s, measured_s)]}


def sweep_rows() -> list[dict]:
    rows = [_row("row_sum", policy, size, *TIMED[policy, size])
            for size in SIZES for policy in ("seed", "gxu")]
    rows += [_row("add_relu", policy, size, size * (2e-10 if policy == "seed" else 1.5e-10), None)
             for size in SIZES for policy in ("seed", "gxu")]
    failed = rows[-1]
    failed.update(error=FAILURE, kernels=[], predicted_s=0.0)
    return rows


class Page(HTMLParser):
    """The parts of the page the tests read: images, and per <section> its heading,
    tables (rows of cell texts) and the text inside its <details>."""

    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.images: list[str] = []
        self.sections: dict[str | None, dict] = {None: self._section()}
        self.current: str | None = None
        self.tag_stack: list[str] = []
        self.feed(text)

    @staticmethod
    def _section() -> dict:
        return {"heading": "", "tables": [], "details": ""}

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        section = self.sections[self.current]
        if tag == "section":
            self.current = attrs["id"]
            self.sections[self.current] = self._section()
        elif tag == "table":
            section["tables"].append([])
        elif tag == "tr":
            section["tables"][-1].append([])
        elif tag in ("td", "th"):
            section["tables"][-1][-1].append("")
        elif tag == "img":
            self.images.append(attrs["src"])
        if tag not in ("img", "meta"):  # void elements have no end tag
            self.tag_stack.append(tag)

    def handle_endtag(self, tag):
        self.tag_stack.pop()
        if tag == "section":
            self.current = None

    def handle_data(self, data):
        section = self.sections[self.current]
        if "td" in self.tag_stack or "th" in self.tag_stack:  # cells hold <pre>, no tables
            section["tables"][-1][-1][-1] += data
        if "h2" in self.tag_stack:
            section["heading"] += data
        if "details" in self.tag_stack:
            section["details"] += data

    def section(self, heading: str) -> dict:
        return next(s for s in self.sections.values() if s["heading"] == heading)


def table(section: dict, first_header: str) -> list[list[str]]:
    """The section's table whose first header cell is `first_header`, without that row."""
    return next(t[1:] for t in section["tables"] if t[0][0] == first_header)


def facts(section: dict) -> dict[str, str]:
    """Name -> value of the section's two-column tables (the header, the error summary)."""
    return {row[0]: row[1] for t in section["tables"] for row in t if len(row) == 2}


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    return write_report(sweep_rows(), tmp_path_factory.mktemp("sweep") / "report")


@pytest.fixture(scope="module")
def page(report) -> Page:
    return Page(report.read_text(encoding="utf-8"))


def assert_images_are_pngs_beside(page: Page, index: Path) -> None:
    assert page.images
    for source in page.images:
        assert "/" not in source and ":" not in source  # relative, beside index.html
        assert (index.parent / source).read_bytes()[:8] == PNG_SIGNATURE


def test_page_has_header_plots_and_a_section_per_model(report, page):
    assert report.name == "index.html" and report.is_file()
    assert_images_are_pngs_beside(page, report)
    assert len(page.images) == 4  # per model: time against size, ratio to seed
    header = facts(page.sections[None])
    assert header["spec"] == "gxu" and header["target"] == "cuda, predict"
    assert header["runs"] == "12 (1 failed)" and header["policies"] == "seed, gxu"
    assert header["models"] == "row_sum, add_relu"
    assert header["sizes"] == "1,024, 65,536, 16,777,216"
    for model in ("row_sum", "add_relu"):
        page.section(model)
    text = report.read_text(encoding="utf-8")
    assert "<script" not in text and "http://" not in text and "https://" not in text


def test_kernel_tables_show_fusions_and_decision_logs_are_collapsible(page):
    row_sum = page.section("row_sum")
    kernels = table(row_sum, "size")
    assert len(kernels) == 6  # one kernel per run
    seed_small = kernels[0]
    assert seed_small[:5] == ["1,024", "seed", "triton_red_fused_sum_0",
                              "[Fusion] triton_red_fused_sum_0 <- aten.sum",
                              "XBLOCK=8 R0_BLOCK=1024"]
    assert seed_small[5:] == ["32", "16", "4096", "128", "2", "max_blocks_per_sm", "1.00", "1.50"]
    for policy in ("seed", "gxu"):
        assert f"grid=(32, 1, 1) policy={policy} target=predict" in row_sum["details"]
    assert page.section("add_relu")["details"].count("[Config]") == 5  # the failed run has none


def test_error_table_equals_statistics_computed_from_the_rows(page):
    row_sum = page.section("row_sum")
    per_run = next(t[1:] for t in row_sum["tables"] if t[0][-1] == "predicted/measured")
    ordered = [TIMED[policy, size] for size in SIZES for policy in ("seed", "gxu")]
    assert [float(r[-1]) for r in per_run] == pytest.approx(
        [p / m for p, m in ordered], abs=5e-4)
    errors = [abs(p / m - 1) for p, m in ordered]
    summary = facts(row_sum)
    assert summary["timed runs"] == "6"
    assert float(summary["median |predicted/measured - 1|"].rstrip("%")) == pytest.approx(
        100 * statistics.median(errors), abs=0.05)
    assert float(summary["worst |predicted/measured - 1|"].rstrip("%")) == pytest.approx(
        100 * max(errors), abs=0.05)
    assert summary["worst run"] == "gxu, size 1,024"
    # Spearman without ties: 1 - 6 sum(d^2) / (n (n^2 - 1)) over rank differences d.
    predicted_rank = {v: i for i, v in enumerate(sorted(p for p, _ in ordered))}
    measured_rank = {v: i for i, v in enumerate(sorted(m for _, m in ordered))}
    d2 = sum((predicted_rank[p] - measured_rank[m]) ** 2 for p, m in ordered)
    n = len(ordered)
    assert float(summary["Spearman rank correlation (predicted, measured)"]) == pytest.approx(
        1 - 6 * d2 / (n * (n * n - 1)), abs=5e-4)
    directions = table(row_sum, "policy / seed")
    expected = []
    for size in SIZES:
        (seed_p, seed_m), (gxu_p, gxu_m) = TIMED["seed", size], TIMED["gxu", size]
        agrees = (gxu_p > seed_p) == (gxu_m > seed_m)
        expected.append(["gxu", f"{size:,}", f"{gxu_p / seed_p:.3f}", f"{gxu_m / seed_m:.3f}",
                         "yes" if agrees else "NO"])
    assert directions == expected and expected[0][-1] == "NO"
    assert "timed runs" not in facts(page.section("add_relu"))  # predict-only: no error table


def test_failed_row_is_listed_with_its_escaped_error(report, page):
    assert html.escape(FAILURE) in report.read_text(encoding="utf-8")
    failures = table(page.section("Failed runs"), "model")
    assert failures == [["add_relu", "gxu", "16,777,216", FAILURE]]
    add_relu_runs = table(page.section("add_relu"), "policy")
    assert ["gxu", "16,777,216"] not in [run[:2] for run in add_relu_runs]


@pytest.mark.parametrize("field", ["model", "policy", "predicted_s"])
def test_a_missing_required_field_is_named(field, tmp_path):
    rows = sweep_rows()
    del rows[3][field]
    with pytest.raises(ValueError, match=f"row 3 has no '{field}'"):
        write_report(rows, tmp_path)


def test_one_size_draws_bars_and_a_rerun_replaces_the_report(report, tmp_path):
    out = shutil.copytree(report.parent, tmp_path / "report")
    # An older sweep's row: no size, no kernel details (it saved their number only).
    rows = [{"model": "gpt2 block", "policy": policy, "predicted_s": t, "kernels": 3,
             "measured_s": 1.1 * t} for policy, t in (("seed", 2e-4), ("my.pkg:Policy", 1e-4))]
    index = write_report(rows, out)
    page = Page(index.read_text(encoding="utf-8"))
    assert_images_are_pngs_beside(page, index)
    assert sorted(p.name for p in out.glob("*.png")) == sorted(page.images)  # stale ones gone
    section = page.section("gpt2 block")
    assert facts(section)["Spearman rank correlation (predicted, measured)"] == "1.000"
    assert table(section, "policy / seed") == [["my.pkg:Policy", "—", "0.500", "0.500", "yes"]]


def test_spearman_gives_tied_values_their_average_rank():
    # x ranks (1, 2.5, 2.5, 4), y ranks (1, 3, 2, 4): Pearson of those is 4.5 / sqrt(4.5 * 5).
    assert _spearman([1, 2, 2, 3], [1, 3, 2, 4]) == pytest.approx(4.5 / math.sqrt(22.5))
    assert math.isnan(_spearman([1, 1], [1, 2]))  # a constant side ranks nothing


def _browser() -> str | None:
    return next(filter(None, map(shutil.which, ("chromium", "chromium-browser",
                                                "google-chrome"))), None)


# Runs in the page after load: how many <img> the browser decoded (a broken PNG or a wrong
# path leaves naturalWidth at 0). The report itself has no script; only this copy does.
IMAGE_PROBE = """<script>window.addEventListener("load", () => {
  const images = [...document.images];
  const loaded = images.filter(image => image.complete && image.naturalWidth > 0).length;
  document.body.setAttribute("data-images-loaded", loaded + "/" + images.length);
});</script>"""


def test_page_renders_in_a_headless_browser_with_every_image_loaded(report, tmp_path):
    browser = _browser()
    if browser is None:
        pytest.skip("no headless browser: install one with `apt-get install chromium` "
                    "(Debian; chromium-browser on Ubuntu, or google-chrome)")
    out = shutil.copytree(report.parent, tmp_path / "report")
    probe = out / "probe.html"  # beside index.html, so relative image paths resolve the same
    probe.write_text((out / "index.html").read_text(encoding="utf-8").replace(
        "</body>", IMAGE_PROBE + "</body>"), encoding="utf-8")
    screenshot = tmp_path / "screenshot.png"
    headless = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run(headless + ["--virtual-time-budget=10000", "--dump-dom",
                                     probe.as_uri()],
                         capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    page = Page(dom.stdout)
    assert len(page.images) == 4
    assert 'data-images-loaded="4/4"' in dom.stdout
    shot = subprocess.run(headless + ["--window-size=1280,2400", f"--screenshot={screenshot}",
                                      (out / "index.html").as_uri()],
                          capture_output=True, text=True, timeout=120)
    assert shot.returncode == 0, shot.stderr[-2000:]
    assert screenshot.stat().st_size > 0
    assert screenshot.read_bytes()[:8] == PNG_SIGNATURE
