"""Policies judged on stored GPU times, without a GPU.

A measured corpus run (`benchmarks/bench_ceiling.py --corpus ... --json ROWS.json`) keeps the
time of every legal config of each kernel. This plans each of those kernels again with
today's policies (on meta tensors: no memory, no GPU; the register guard compiles for the
spec's `ptxas_capability` here) and looks up the stored time of the config each one picks,
so a change to a policy is judged against the exhaustive ceiling in seconds:

    python benchmarks/corpus/replay.py benchmarks/results/corpus_fit_h100.json [--policies gxu seed]
        [--part fit] [--spec gxu-on-h200] [--kernels]

Tune on the fit part's rows only. `--part test` is for reporting a policy once it is chosen:
a test row consulted while choosing stops being held out.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import gxusim
from gxusim import corpus
from gxusim.compiler.policies import resolve_policy
from gxusim.errors import InputError
from gxusim.report import format_table

KERNELS = Path(__file__).resolve().parent / "kernels.jsonl"


def replay(rows: list[dict], entries: dict[str, dict], policies: list[str], spec_name: str
           ) -> list[dict]:
    """One record per measured row: its kernel, ceiling, and per policy the config picked
    today and its stored seconds (None: a config the row did not time)."""
    spec = gxusim.load_spec(spec_name)
    out = []
    for done, row in enumerate(corpus.measured_rows(rows), 1):
        record = {"id": row["id"], "kind": row["kind"], "kernel": row["kernel"],
                  "numels": row["numels"], "ceiling": corpus.ceiling(row), "picks": {}}
        for name in policies:
            plan, seconds = corpus.replayed_plan(row, entries[row["id"]], resolve_policy(name), spec)
            record["picks"][name] = {"meta": plan.meta, "num_warps": plan.num_warps,
                                     "num_stages": plan.num_stages, "seconds": seconds}
        gxu = record["picks"].get("gxu")
        if gxu and gxu["seconds"]:  # autotune's search, from today's gxu plan
            record["guided"], record["guided_timed"] = corpus.guided_search(row, gxu)
        out.append(record)
        print(f"\r{done} kernels planned", end="", file=sys.stderr)
    print(file=sys.stderr)
    return out


def _summary(records: list[dict], name: str) -> str:
    ratios = [r["ceiling"] / r["picks"][name]["seconds"] for r in records
              if r["picks"][name]["seconds"]]
    untimed = len(records) - len(ratios)
    if not ratios:
        return f"- ({untimed} not timed)"
    geomean = math.exp(sum(map(math.log, ratios)) / len(ratios))
    return f"{geomean:.3f} / {min(ratios):.2f}" + (f" ({untimed} not timed)" if untimed else "")


def table(records: list[dict], policies: list[str]) -> str:
    groups: dict[str, list[dict]] = {}
    for record in records:
        groups.setdefault(record["kind"], []).append(record)
    def guided(group: list[dict]) -> str:
        searched = [r for r in group if "guided" in r]
        if not searched:
            return "-"
        ratios = [r["ceiling"] / r["guided"] for r in searched]
        timed = sorted(r["guided_timed"] for r in searched)
        return f"{math.exp(sum(map(math.log, ratios)) / len(ratios)):.3f} / {min(ratios):.2f}, " \
               f"{timed[len(timed) // 2]} / {timed[-1]} timed"
    lines = [(kind, len(group), *(_summary(group, name) for name in policies), guided(group))
             for kind, group in sorted(groups.items()) + [("all", records)]]
    return format_table(("kind", "kernels", *(f"{n} / ceiling (geomean / worst)" for n in policies),
                         "autotune from gxu (geomean / worst, median / most timed)"), lines)


def kernel_lines(records: list[dict], policies: list[str]) -> str:
    def pick(p: dict) -> str:
        blocks = " ".join(f"{k}={v}" for k, v in p["meta"].items())
        share = f"{ceiling / p['seconds']:.2f}" if p["seconds"] else "not timed"
        return f"{share} ({blocks}, {p['num_warps']}w, {p['num_stages'] or '-'}s)"
    lines = []
    for r in records:
        ceiling = r["ceiling"]
        lines.append((r["id"], r["kind"], r["kernel"][:40], " ".join(f"{v}" for v in r["numels"].values()),
                      *(pick(r["picks"][n]) for n in policies)))
    return format_table(("id", "kind", "kernel", "sizes", *policies), lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rows", nargs="+", help="measured corpus runs (bench_ceiling.py --corpus --json)")
    parser.add_argument("--policies", nargs="+", default=["gxu", "seed"])
    parser.add_argument("--part", default="fit", choices=("fit", "test"))
    parser.add_argument("--spec", default="gxu-on-h200", help="the spec the rows were measured under")
    parser.add_argument("--corpus", default=str(KERNELS))
    parser.add_argument("--kernels", action="store_true", help="one line per kernel too")
    parser.add_argument("--json", metavar="OUT", help="write the records here")
    args = parser.parse_args()
    rows = [row for path in args.rows for row in json.loads(Path(path).read_text())
            if row.get("part") == args.part]
    if not rows:
        raise SystemExit(f"no {args.part}-part rows in {' '.join(args.rows)}")
    if args.part == "test":
        print("test part: a report of chosen policies; tune on the fit part", file=sys.stderr)
    try:
        for name in args.policies:
            resolve_policy(name)
    except InputError as error:
        raise SystemExit(f"--policies: {error}") from None
    entries = {e["id"]: e for e in corpus.load(args.corpus)}
    missing = sorted({row["id"] for row in rows} - set(entries))
    if missing:
        raise SystemExit(f"{len(missing)} measured kernel(s) not in {args.corpus}: {', '.join(missing[:3])}")
    records = replay(rows, entries, args.policies, args.spec)
    if args.json:
        Path(args.json).write_text(json.dumps(records))
    print(f"{args.part} part, {len(records)} kernels, spec {args.spec}, policies as they are now:")
    print(table(records, args.policies))
    if args.kernels:
        print(kernel_lines(records, args.policies))


if __name__ == "__main__":
    main()
