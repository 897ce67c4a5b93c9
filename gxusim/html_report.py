"""HTML report of a sweep: one static page with PNG plots beside it, readable with no server.

`write_report` turns a sweep's rows (one per model x policy x size, plain JSON-compatible
dicts) into `index.html`: predicted (and measured) time against size per policy, the ratio
of each policy to the first, the kernels each run launched with the decisions behind them,
how well the performance model predicted measured times, and the runs that failed.
The page has inline CSS only: no JavaScript, fonts or anything else fetched from outside.
"""
from __future__ import annotations

import html
import math
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Optional

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

REQUIRED_FIELDS = ("model", "policy", "predicted_s")
PLOT_PREFIX = "plot-"  # every PNG the report writes; stale ones are removed on a re-run
FIGURE_SIZE = (5.5, 3.4)  # inches; small figures at a low dpi keep rendering fast
FIGURE_DPI = 90
NO_VALUE = "—"

STYLE = """
body { font-family: sans-serif; margin: 1.5em auto; padding: 0 1em; max-width: 78em;
       color: #222; }
h1 { font-size: 1.5em; } h2 { border-bottom: 1px solid #bbb; margin-top: 2em; }
table { border-collapse: collapse; margin: 0.6em 0 1.2em; font-size: 0.88em; }
th, td { border: 1px solid #ccc; padding: 0.2em 0.5em; text-align: left; vertical-align: top; }
th { background: #f0f0f0; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
td.bad { color: #b00; font-weight: bold; }
pre { background: #f7f7f7; padding: 0.5em; overflow-x: auto; font-size: 0.85em; }
.plots img { margin: 0 1em 1em 0; border: 1px solid #ddd; }
.wide { overflow-x: auto; }
details { margin: 0.5em 0 1em; } summary { cursor: pointer; font-weight: bold; }
.note { color: #666; font-size: 0.9em; }
"""


# --- rows -------------------------------------------------------------------------------

def _validate(rows: Sequence[dict]) -> None:
    for index, row in enumerate(rows):
        if not isinstance(row, dict):
            raise ValueError(f"sweep row {index} is a {type(row).__name__}, not a dict")
        for field in REQUIRED_FIELDS:
            if row.get(field) is None:
                raise ValueError(f"sweep row {index} has no {field!r} (required: "
                                 f"{', '.join(REQUIRED_FIELDS)})")


def _ordered(values: Iterable) -> list:
    """Distinct values in order of first appearance: policies keep the sweep's order, so
    the first policy (the baseline of every ratio) is the one the sweep named first."""
    return list(dict.fromkeys(values))


def _section_name(row: dict) -> str:
    # A training step and a forward pass of one model are different workloads.
    return f"{row['model']} (train)" if row.get("train") else str(row["model"])


def _failed(row: dict) -> bool:
    return row.get("error") is not None


def _positive(value: Any) -> bool:
    """A time usable on a log axis and as a divisor."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and \
        0 < value < math.inf


def _kernels(row: dict) -> list[dict]:
    # Older sweeps saved only the number of kernels: those rows have no per-kernel detail.
    kernels = row.get("kernels")
    return [k for k in kernels if isinstance(k, dict)] if isinstance(kernels, list) else []


def _kernel_count(row: dict) -> str:
    kernels = row.get("kernels")
    return str(len(kernels)) if isinstance(kernels, list) else _text(kernels)


def _size_order(size: Optional[int]) -> tuple[bool, int]:
    return (size is None, size or 0)  # sizes ascending, runs without a size last


def _by_policy_and_size(rows: Sequence[dict]) -> dict[tuple[str, Optional[int]], dict]:
    return {(r["policy"], r.get("size")): r for r in rows}


# --- statistics -------------------------------------------------------------------------

def _average_ranks(values: Sequence[float]) -> np.ndarray:
    """1-based ranks; tied values share the average of the ranks they span."""
    values = np.asarray(values, dtype=float)
    order = np.argsort(values, kind="stable")
    ranks = np.empty(len(values))
    _, starts, counts = np.unique(values[order], return_index=True, return_counts=True)
    for start, count in zip(starts, counts):
        ranks[order[start:start + count]] = start + (count + 1) / 2
    return ranks


def _spearman(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Spearman rank correlation (Pearson's on average ranks); nan when a side is constant
    or there are fewer than two pairs, where no ranking can be compared."""
    if len(xs) < 2:
        return math.nan
    x_ranks, y_ranks = _average_ranks(xs), _average_ranks(ys)
    if np.ptp(x_ranks) == 0 or np.ptp(y_ranks) == 0:
        return math.nan
    return float(np.corrcoef(x_ranks, y_ranks)[0, 1])


def _relative_error(row: dict) -> float:
    return abs(row["predicted_s"] / row["measured_s"] - 1)


# --- formatting -------------------------------------------------------------------------

def _text(value: Any) -> str:
    return NO_VALUE if value is None else html.escape(str(value))


def _us(seconds: Optional[float]) -> str:
    return NO_VALUE if seconds is None else f"{seconds * 1e6:.2f}"


def _ratio(value: float) -> str:
    return NO_VALUE if math.isnan(value) else f"{value:.3f}"


def _percent(value: float) -> str:
    return NO_VALUE if math.isnan(value) else f"{value * 100:.1f}%"


def _size(size: Optional[int]) -> str:
    return NO_VALUE if size is None else f"{size:,}"


def _yes_no(flag: Optional[bool], when_none: str) -> str:
    return when_none if flag is None else ("yes" if flag else "NO")


def _table(header: Sequence[str], body: Iterable[Sequence[str]],
           numeric: frozenset[int] = frozenset()) -> str:
    """An HTML table of already-escaped cells; columns in `numeric` align right."""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    lines = []
    for cells in body:
        tds = []
        for column, cell in enumerate(cells):
            classes = [name for name, wanted in (("num", column in numeric),
                                                 ("bad", cell == "NO")) if wanted]
            attribute = f' class="{" ".join(classes)}"' if classes else ""
            tds.append(f"<td{attribute}>{cell}</td>")
        lines.append(f"<tr>{''.join(tds)}</tr>")
    return f"<table><tr>{head}</tr>{''.join(lines)}</table>"


# --- plots ------------------------------------------------------------------------------

def _policy_colours(policies: Sequence[str]) -> dict[str, str]:
    """One colour per policy for the whole report, so a policy looks the same in every plot."""
    return {policy: f"C{i % 10}" for i, policy in enumerate(policies)}


def _save(draw: Callable[[Axes], None], path: Path) -> None:
    figure = Figure(figsize=FIGURE_SIZE)
    FigureCanvasAgg(figure)  # renders with Agg, without touching pyplot's global backend
    axes = figure.subplots()
    draw(axes)
    figure.tight_layout()
    figure.savefig(path, dpi=FIGURE_DPI)


def _legend(axes: Axes) -> None:
    """A legend with each label once (bars of several policies share "predicted")."""
    handles, labels = axes.get_legend_handles_labels()
    unique = dict(zip(labels, handles))
    if unique:
        axes.legend(unique.values(), unique.keys(), fontsize=7)


def _draw_time(axes: Axes, model: str, rows: Sequence[dict], policies: Sequence[str],
               colours: dict[str, str]) -> None:
    sizes = _ordered(sorted((r["size"] for r in rows if r.get("size") is not None)))
    if len(sizes) >= 2:
        for policy in policies:
            runs = sorted((r for r in rows if r["policy"] == policy and r.get("size") is not None),
                          key=lambda r: r["size"])
            predicted = [(r["size"], r["predicted_s"] * 1e6) for r in runs
                         if _positive(r["predicted_s"])]
            measured = [(r["size"], r["measured_s"] * 1e6) for r in runs
                        if _positive(r.get("measured_s"))]
            if predicted:
                axes.plot(*zip(*predicted), "-", color=colours[policy],
                          label=f"{policy} predicted")
            if measured:
                axes.plot(*zip(*measured), "o", color=colours[policy],
                          label=f"{policy} measured")
        axes.set_xscale("log")
        if axes.lines:  # log-log: times grow over decades of sizes
            axes.set_yscale("log")
        axes.set_xlabel("size (elements)")
    else:  # one size (or none): a line needs two points, so one bar per run
        # Runs without a size beside the one size would share a policy's bar: name both.
        one_key = len(_ordered(r.get("size") for r in rows)) == 1
        labels = [r["policy"] if one_key else f"{r['policy']}\n{_size(r.get('size'))}"
                  for r in rows]
        axes.bar(labels, [r["predicted_s"] * 1e6 for r in rows],
                 color=[colours[r["policy"]] for r in rows], label="predicted")
        measured = [(label, r["measured_s"] * 1e6) for label, r in zip(labels, rows)
                    if _positive(r.get("measured_s"))]
        if measured:
            axes.plot(*zip(*measured), "o", color="black", label="measured")
        axes.set_xlabel(f"policy (size {_size(sizes[0] if sizes else None)})")
    axes.set_ylabel("kernel time (us)")
    axes.set_title(f"{model}: time per policy", fontsize=10)
    _legend(axes)


def _ratios(rows: Sequence[dict], policy: str, baseline: str,
            field: str) -> list[tuple[Optional[int], float]]:
    """(size, policy / baseline) of `field` at every size where both have a usable time."""
    runs = _by_policy_and_size(rows)
    pairs = []
    for size in sorted(_ordered(r.get("size") for r in rows), key=_size_order):
        run, base = runs.get((policy, size)), runs.get((baseline, size))
        if run and base and _positive(run.get(field)) and _positive(base.get(field)):
            pairs.append((size, run[field] / base[field]))
    return pairs


def _draw_ratio(axes: Axes, model: str, rows: Sequence[dict], policies: Sequence[str],
                colours: dict[str, str]) -> None:
    baseline = policies[0]
    sizes = [s for s in _ordered(r.get("size") for r in rows) if s is not None]
    if len(sizes) >= 2:
        for policy in policies[1:]:
            predicted = [(s, v) for s, v in _ratios(rows, policy, baseline, "predicted_s")
                         if s is not None]
            measured = [(s, v) for s, v in _ratios(rows, policy, baseline, "measured_s")
                         if s is not None]
            if predicted:
                axes.plot(*zip(*predicted), "-", color=colours[policy],
                          label=f"{policy}/{baseline} predicted")
            if measured:
                axes.plot(*zip(*measured), "o", color=colours[policy],
                          label=f"{policy}/{baseline} measured")
        axes.set_xscale("log")
        axes.set_xlabel("size (elements)")
    else:  # one bar per policy, named on the x axis
        for policy in policies[1:]:
            predicted = _ratios(rows, policy, baseline, "predicted_s")
            measured = _ratios(rows, policy, baseline, "measured_s")
            if predicted:
                axes.bar(policy, predicted[0][1], color=colours[policy], label="predicted")
            if measured:
                axes.plot(policy, measured[0][1], "o", color="black", label="measured")
        axes.set_xlabel(f"policy (size {_size(sizes[0] if sizes else None)})")
    axes.axhline(1.0, color="grey", linestyle="--", linewidth=1)
    axes.set_ylabel(f"time / {baseline} time")
    axes.set_title(f"{model}: ratio to {baseline} (below 1 is faster)", fontsize=10)
    _legend(axes)


def _file_slug(name: str) -> str:
    return "".join(c if (c.isascii() and c.isalnum()) or c in "-_" else "_" for c in name)[:40]


def _write_plots(index: int, model: str, rows: Sequence[dict], policies: Sequence[str],
                 colours: dict[str, str], out_dir: Path) -> list[tuple[str, str]]:
    """The model's plots as PNG files in `out_dir`; returns (file name, description) pairs."""
    # The index keeps names unique when two models' names differ only in odd characters.
    stem = f"{PLOT_PREFIX}{index:02d}-{_file_slug(model)}"
    plots = [(f"{stem}-time.png", f"{model}: time against size per policy")]
    _save(lambda axes: _draw_time(axes, model, rows, policies, colours), out_dir / plots[0][0])
    if len(policies) > 1:
        plots.append((f"{stem}-ratio.png", f"{model}: ratio of each policy to {policies[0]}"))
        _save(lambda axes: _draw_ratio(axes, model, rows, policies, colours),
              out_dir / plots[1][0])
    return plots


# --- page sections ----------------------------------------------------------------------

def _header(rows: Sequence[dict], policies: Sequence[str], models: Sequence[str]) -> str:
    sizes = sorted(_ordered(r.get("size") for r in rows), key=_size_order)
    facts = [
        ("spec", ", ".join(_text(s) for s in _ordered(r.get("spec") for r in rows))),
        ("target", ", ".join(_text(t) for t in _ordered(r.get("target") for r in rows))),
        ("runs", f"{len(rows)} ({sum(map(_failed, rows))} failed)"),
        ("policies", ", ".join(_text(p) for p in policies)),
        ("models", ", ".join(_text(m) for m in models)),
        ("sizes", ", ".join(_size(s) for s in sizes)),
    ]
    body = "".join(f"<tr><th>{name}</th><td>{value}</td></tr>" for name, value in facts)
    return f"<h1>gxusim sweep report</h1><table>{body}</table>"


def _runs_table(rows: Sequence[dict], policies: Sequence[str]) -> str:
    baseline = policies[0]
    runs = _by_policy_and_size(rows)
    body = []
    for row in rows:
        base = runs.get((baseline, row.get("size")))
        ratio = row["predicted_s"] / base["predicted_s"] if base and _positive(
            base["predicted_s"]) else math.nan
        body.append([_text(row["policy"]), _size(row.get("size")), _kernel_count(row),
                     _us(row["predicted_s"]), _ratio(ratio),
                     _yes_no(row.get("matches_eager"), "not run"),
                     _yes_no(row.get("within_spec"), NO_VALUE)])
    return "<h3>Runs</h3>" + _table(
        ["policy", "size", "kernels", "predicted us", f"predicted / {baseline}",
         "matches eager", "within spec"], body, frozenset({1, 2, 3, 4}))


def _kernel_table(rows: Sequence[dict]) -> str:
    body = []
    for row in rows:
        for kernel in _kernels(row):
            meta = kernel.get("meta") or {}
            body.append([
                _size(row.get("size")), _text(row["policy"]), _text(kernel.get("kernel")),
                _text(kernel.get("fusion")),
                _text(" ".join(f"{k}={v}" for k, v in meta.items()) or None),
                _text(kernel.get("programs")), _text(kernel.get("num_warps")),
                _text(kernel.get("tiles")), _text(kernel.get("tiles_per_program")),
                _text(kernel.get("blocks_per_sm")), _text(kernel.get("occupancy_limiter")),
                _us(kernel.get("predicted_s")), _us(kernel.get("measured_s"))])
    if not body:
        return '<h3>Kernels</h3><p class="note">No kernel details in these rows.</p>'
    return '<h3>Kernels</h3><div class="wide">' + _table(
        ["size", "policy", "kernel", "fusion", "config", "programs", "warps", "tiles",
         "tiles/program", "blocks/SM", "occupancy limiter", "predicted us", "measured us"],
        body, frozenset({0, 5, 6, 7, 8, 9, 11, 12})) + "</div>"


def _decision_log(model: str, rows: Sequence[dict]) -> str:
    blocks, count = [], 0
    for row in rows:
        lines = [k["decision"] for k in _kernels(row) if k.get("decision")]
        if lines:
            count += len(lines)
            blocks.append(f"<p>{_text(row['policy'])}, size {_size(row.get('size'))}</p>"
                          f"<pre>{html.escape(chr(10).join(lines))}</pre>")
    if not blocks:
        return ""
    return (f"<details><summary>Decision log of {_text(model)} ({count} lines)</summary>"
            f"{''.join(blocks)}</details>")


def _error_summary(timed: Sequence[dict]) -> str:
    errors = [_relative_error(r) for r in timed]
    worst = max(timed, key=_relative_error)
    rho = _spearman([r["predicted_s"] for r in timed], [r["measured_s"] for r in timed])
    facts = [
        ("timed runs", str(len(timed))),
        ("median |predicted/measured - 1|", _percent(float(np.median(errors)))),
        ("worst |predicted/measured - 1|", _percent(max(errors))),
        ("worst run", f"{_text(worst['policy'])}, size {_size(worst.get('size'))}"),
        ("Spearman rank correlation (predicted, measured)", _ratio(rho)),
    ]
    body = "".join(f'<tr><th>{name}</th><td class="num">{value}</td></tr>'
                   for name, value in facts)
    return f"<table>{body}</table>"


def _direction_table(rows: Sequence[dict], policies: Sequence[str]) -> str:
    """Whether the measured ratio of each policy to the baseline goes the way the
    prediction says: what matters for choosing a policy, even when absolute times are off."""
    baseline = policies[0]
    body = []
    for policy in policies[1:]:
        measured = dict(_ratios(rows, policy, baseline, "measured_s"))
        for size, predicted in _ratios(rows, policy, baseline, "predicted_s"):
            if size in measured:
                agrees = np.sign(predicted - 1) == np.sign(measured[size] - 1)
                body.append([_text(policy), _size(size), _ratio(predicted),
                             _ratio(measured[size]), "yes" if agrees else "NO"])
    if not body:
        return ""
    return _table([f"policy / {baseline}", "size", "predicted ratio", "measured ratio",
                   "same direction"], body, frozenset({1, 2, 3}))


def _error_section(rows: Sequence[dict], policies: Sequence[str]) -> str:
    timed = [r for r in rows if _positive(r.get("measured_s"))]
    if not timed:
        return ""
    per_run = _table(
        ["policy", "size", "predicted us", "measured us", "predicted/measured"],
        ([_text(r["policy"]), _size(r.get("size")), _us(r["predicted_s"]),
          _us(r["measured_s"]), _ratio(r["predicted_s"] / r["measured_s"])] for r in timed),
        frozenset({1, 2, 3, 4}))
    return ("<h3>Predicted against measured</h3>" + per_run + _error_summary(timed) +
            _direction_table(rows, policies))


def _model_section(index: int, model: str, rows: Sequence[dict], all_policies: Sequence[str],
                   colours: dict[str, str], out_dir: Path) -> str:
    ok = sorted((r for r in rows if not _failed(r)),
                key=lambda r: (_size_order(r.get("size")), all_policies.index(r["policy"])))
    failed = len(rows) - len(ok)
    note = f'<p class="note">{failed} failed run(s): see Failed runs.</p>' if failed else ""
    if not ok:
        return f'<section id="model-{index}"><h2>{_text(model)}</h2>{note}</section>'
    policies = [p for p in all_policies if any(r["policy"] == p for r in ok)]
    images = "".join(f'<img src="{html.escape(name)}" alt="{_text(description)}">'
                     for name, description in _write_plots(index, model, ok, policies, colours,
                                                           out_dir))
    return (f'<section id="model-{index}"><h2>{_text(model)}</h2>{note}'
            f'<div class="plots">{images}</div>'
            f"{_runs_table(ok, policies)}{_error_section(ok, policies)}"
            f"{_kernel_table(ok)}{_decision_log(model, ok)}</section>")


def _failures(rows: Sequence[dict]) -> str:
    failed = [r for r in rows if _failed(r)]
    if not failed:
        return ""
    body = ([_text(_section_name(r)), _text(r["policy"]), _size(r.get("size")),
             f"<pre>{_text(r['error'])}</pre>"] for r in failed)
    return ('<section id="failures"><h2>Failed runs</h2>' +
            _table(["model", "policy", "size", "error"], body) + "</section>")


# --- the page ---------------------------------------------------------------------------

def write_report(rows: list[dict], out_dir: Path = Path("gxusim-report")) -> Path:
    """Write `out_dir/index.html` and its PNG plots for a sweep's rows; returns the index path.

    Raises ValueError naming the field when a row lacks model, policy or predicted_s.
    Re-running over an existing report replaces it (plots of models no longer present
    are removed)."""
    _validate(rows)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for stale in out_dir.glob(f"{PLOT_PREFIX}*.png"):
        stale.unlink()
    policies = _ordered(r["policy"] for r in rows)
    models = _ordered(_section_name(r) for r in rows)
    colours = _policy_colours(policies)
    sections = [_model_section(i, model, [r for r in rows if _section_name(r) == model],
                               policies, colours, out_dir) for i, model in enumerate(models)]
    page = (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
            f"<title>gxusim sweep report</title><style>{STYLE}</style></head><body>"
            f"{_header(rows, policies, models)}{_failures(rows)}{''.join(sections)}"
            f"</body></html>\n")
    index = out_dir / "index.html"
    index.write_text(page, encoding="utf-8")
    return index


# --- a measured kernel corpus (benchmarks/bench_ceiling.py --corpus) ----------------------

def _draw_ceiling_shares(axes: Axes, rows: Sequence[dict]) -> None:
    from . import corpus
    for i, policy in enumerate(corpus.POLICIES_MEASURED):
        ratios = sorted(corpus.ceiling_ratios(list(rows), policy))
        shares = [(k + 1) / len(ratios) for k in range(len(ratios))]
        axes.step(ratios, shares, where="post", label=policy, color=f"C{i}")
    axes.set_xlabel("time at the capped ceiling / the policy's time")
    axes.set_ylabel("share of kernels at or below")
    axes.set_xlim(0, 1.05)
    axes.grid(alpha=0.3)
    _legend(axes)


def _corpus_part(part: str, rows: Sequence[dict], out_dir: Path) -> str:
    from . import corpus
    header, lines = corpus.measured_summary(list(rows))
    plot = f"{PLOT_PREFIX}corpus-{_file_slug(part)}.png"
    _save(lambda axes: _draw_ceiling_shares(axes, rows), out_dir / plot)
    per_kernel = sorted(corpus.measured_rows(list(rows)),
                        key=lambda r: corpus.ceiling(r) / r["gxu"]["seconds"])
    kernels = [(html.escape(r["kernel"]), html.escape(r["kind"]), html.escape(r["dtype"]),
                _us(corpus.ceiling(r)),
                *(_ratio(corpus.ceiling_ratios([r], p)[0]) for p in corpus.POLICIES_MEASURED),
                html.escape(str(r["gxu"]["meta"]) + f" {r['gxu']['num_warps']} warps"))
               for r in per_kernel]
    return (f"<h2>{html.escape(part)} part: {len(per_kernel)} kernels</h2>"
            + _table(header, ([html.escape(str(cell)) for cell in line] for line in lines),
                     frozenset(range(1, 9)))
            + f'<div class="plots"><img src="{plot}" alt="ceiling shares, {part} part"></div>'
            + "<details><summary>every kernel, gxu's worst first</summary><div class=wide>"
            + _table(("kernel", "kind", "dtype", "ceiling", *corpus.POLICIES_MEASURED,
                      "gxu's config"), kernels, frozenset(range(3, 9)))
            + "</div></details>")


def write_corpus_report(rows: list[dict], out_dir: Path = Path("gxusim-report")) -> Path:
    """Write `out_dir/index.html` for a measured kernel corpus (rows of
    `benchmarks/bench_ceiling.py --corpus --json`): per part, the grouped table of each
    policy against the capped ceiling, the share of kernels at each fraction of it, and
    every kernel. Raises ValueError where no row was measured."""
    from . import corpus
    if not corpus.measured_rows(rows):
        raise ValueError("no measured corpus kernel in the rows (rows need candidates with "
                         "seconds, as benchmarks/bench_ceiling.py --corpus writes them)")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for stale in out_dir.glob(f"{PLOT_PREFIX}*.png"):
        stale.unlink()
    devices = ", ".join(sorted({r["device"] for r in rows if r.get("device")}))
    parts = [part for part in ("test", "fit") if any(r.get("part") == part for r in rows)]
    page = (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
            f"<title>gxusim kernel corpus</title><style>{STYLE}</style></head><body>"
            f"<h1>Kernel corpus against the capped ceiling</h1><p class=note>"
            f"{len(rows)} kernels on {html.escape(devices or 'an unnamed device')}. The ceiling "
            f"is the fastest legal config timed; each cell is the ceiling's time over the "
            f"policy's (1.00: at the ceiling), geometric mean / worst kernel.</p>"
            + "".join(_corpus_part(part, [r for r in rows if r.get("part") == part], out_dir)
                      for part in parts) + "</body></html>\n")
    index = out_dir / "index.html"
    index.write_text(page, encoding="utf-8")
    return index
