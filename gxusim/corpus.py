"""The kernel corpus: real GXU kernels kept as data, split once into a fit part and a test part.

An entry is one kernel at one size signature, as Inductor generated it for a workload
(`benchmarks/corpus/build.py` rebuilds them): its module source, sizes, and each argument's
dtype, shape and strides (or integer value). Entries are JSON lines in
`benchmarks/corpus/kernels.jsonl`.

The split is fixed by the kernel alone: `part_of(id)` hashes the entry's id (itself a hash
of the normalised code, sizes and dtypes), so adding workloads never moves a kernel from
one part to the other. Tune on `fit`; measure and report `test`.

`materialize` loads an entry's kernel on the active target and makes arguments for it, so
any tool (the ceiling benchmark, the model's validation) can launch it again.
"""
from __future__ import annotations

import collections
import hashlib
import importlib.util
import json
import math
import re
import tempfile
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence

import torch

from .compiler.plan import kernel_kind
from .kernel_args import is_output

TEST_SHARE = 30  # percent of kernels in the test part
DTYPES = {str(d).removeprefix("torch."): d for d in (
    torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int8, torch.uint8,
    torch.int16, torch.int32, torch.int64, torch.bool)}


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def part_of(entry_id: str) -> str:
    """"test" for TEST_SHARE percent of ids, "fit" for the rest: the first eight hex digits
    of sha256(id), modulo 100, below TEST_SHARE."""
    return "test" if int(hashlib.sha256(entry_id.encode()).hexdigest()[:8], 16) % 100 < TEST_SHARE \
        else "fit"


def normalised_code(module_source: str, kernel_name: str, triton_meta: dict) -> str:
    """What makes two kernels the same code: the function from `def` on, its name replaced,
    and the argument facts Triton compiles in (signature, divisibility)."""
    body = module_source[module_source.index(f"def {kernel_name}("):]
    facts = repr((triton_meta.get("signature"), triton_meta.get("configs")))
    return re.sub(rf"\b{re.escape(kernel_name)}\b", "KERNEL", body) + facts


def structure(code: str) -> str:
    """`code` with its integer literals (sizes, strides, index constants) replaced: kernels
    of one structure at different sizes share it."""
    return re.sub(r"\b\d+\b", "N", code)


def _argument(name: str, value: Any) -> dict:
    if isinstance(value, torch.Tensor):
        extent = 1 + sum((size - 1) * stride for size, stride in zip(value.shape, value.stride())
                         if size > 0)
        return {"name": name, "dtype": str(value.dtype).removeprefix("torch."),
                "shape": list(value.shape), "stride": list(value.stride()),
                "offset": int(value.storage_offset()),
                "storage": int(value.storage_offset() + extent) if value.numel() else 0}
    return {"name": name, "value": int(value) if not isinstance(value, float) else value}


def entry(kernel: Any, args: Sequence[Any]) -> dict:
    """A corpus entry of one launch of a `launcher.GXUKernel` with these (real or fake)
    arguments."""
    module = Path(kernel.filename).read_text()
    code = normalised_code(module, kernel.name, kernel.triton_meta)
    arguments = [_argument(name, value) for name, value in zip(kernel.shape.runtime_args, args)]
    numels = kernel.numels(args)
    dtypes = [a["dtype"] for a in arguments if "dtype" in a]
    entry_id = _sha(code + json.dumps(sorted(numels.items())) + json.dumps(dtypes))
    return {"id": entry_id, "part": part_of(entry_id), "structure": _sha(structure(code)),
            "kernel": kernel.name, "kind": kernel_kind(kernel.shape), "decorator": kernel.kind,
            "numels": numels, "dtype": _main_dtype(arguments), "args": arguments,
            "fusion": list(kernel.fusion), "module": module, "torch": torch.__version__}


def _main_dtype(arguments: list[dict]) -> str:
    """The dtype a policy sizes tiles by: the first output's, else the first tensor's."""
    tensors = [a for a in arguments if "dtype" in a]
    outputs = [a for a in tensors if is_output(a["name"])]
    return (outputs or tensors or [{"dtype": "float32"}])[0]["dtype"]


def elements(entry: dict) -> int:
    return math.prod(entry["numels"].values())


def load(path: str | Path) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def save(entries: Iterable[dict], path: str | Path) -> None:
    with open(path, "w") as f:
        for item in sorted(entries, key=lambda e: e["id"]):
            f.write(json.dumps(item, sort_keys=True) + "\n")


def summary(entries: list[dict]) -> str:
    """Counts by kind, dtype and part, in a few lines."""
    from .report import format_table
    counts = collections.Counter((e["kind"], e["dtype"], e["part"]) for e in entries)
    kinds = sorted({k for k, _, _ in counts})
    dtypes = sorted({d for _, d, _ in counts})
    rows = [(kind, *(f"{counts[kind, d, 'fit']}/{counts[kind, d, 'test']}" for d in dtypes))
            for kind in kinds]
    codes = len({e["structure"] for e in entries})
    return (format_table(("kind (fit/test)", *dtypes), rows) +
            f"\n{len(entries)} kernels ({codes} structures): "
            f"{sum(e['part'] == 'fit' for e in entries)} fit, "
            f"{sum(e['part'] == 'test' for e in entries)} test")


# --- measured entries (benchmarks/bench_ceiling.py --corpus) --------------------------------

def _geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def guided_search(row: dict, start: Optional[dict] = None) -> tuple[float, int]:
    """(seconds of the config autotune's search keeps, configs it times) on a measured
    corpus row, replayed from its stored times: `compiler.autotune.local_search` from
    `start` (by default the gxu plan the row timed) and the model's first picks."""
    from .compiler.autotune import AutotuneHeuristics, config_key, local_search
    ranked = sorted((c for c in row["candidates"] if c["seconds"]),
                    key=lambda c: c["predicted_s"])
    start = start or row["gxu"]
    timed = local_search(ranked, start if start.get("seconds") else None,
                         lambda c: c["seconds"],
                         lambda c: config_key(c["meta"], c["num_warps"], c["num_stages"]),
                         AutotuneHeuristics.MODEL_FIRST)
    return min(seconds for seconds, _ in timed), len(timed)


def model_pick(row: dict) -> float:
    """The measured time of the config the model predicts fastest among those that fit a
    thread's registers (all, where none does)."""
    timed = [c for c in row["candidates"] if c["seconds"]]
    fitting = [c for c in timed if c.get("fits", True)] or timed
    return min(fitting, key=lambda c: c["predicted_s"])["seconds"]


def measured_summary(rows: list[dict]) -> tuple[tuple[str, ...], list[tuple]]:
    """(header, lines) of measured corpus rows (`benchmarks/bench_ceiling.py --corpus`),
    per kernel kind and for all: each policy's time against the capped ceiling (geometric
    mean / worst kernel), how often gxu is at least as fast as seed, and what autotune
    autotune times."""
    measured = measured_rows(rows)
    groups: dict[str, list[dict]] = {}
    for row in measured:
        groups.setdefault(row["kind"], []).append(row)
    lines = []
    for kind, group in sorted(groups.items()) + [("all", measured)]:
        ratios = {name: ceiling_ratios(group, name) for name in POLICIES_MEASURED}
        timed = sorted(guided_search(row)[1] for row in group)
        not_slower = sum(row["gxu"]["seconds"] <= 1.05 * row["seed"]["seconds"] for row in group)
        worst = min(group, key=lambda r: ceiling(r) / r["gxu"]["seconds"])
        lines.append((kind, len(group), *(f"{_geomean(ratios[n]):.3f} / {min(ratios[n]):.2f}"
                                          for n in POLICIES_MEASURED),
                      f"{not_slower / len(group):.0%}", f"{timed[len(timed) // 2]}",
                      worst["kernel"][:40]))
    return (("kind", "kernels", "gxu/ceiling (geomean / worst)", "seed", "gxu rules",
             "model's pick", "guided autotune", "gxu >= seed (5%)", "guided timed (median)",
             "gxu's worst kernel"), lines)


POLICIES_MEASURED = ("gxu", "seed", "rules", "model", "guided")


def measured_rows(rows: list[dict]) -> list[dict]:
    """The rows with at least one candidate timed."""
    return [r for r in rows if r.get("candidates") and any(c["seconds"] for c in r["candidates"])]


def ceiling(row: dict) -> float:
    """The capped ceiling of a measured row: its fastest candidate's seconds."""
    return min(c["seconds"] for c in row["candidates"] if c["seconds"])


def ceiling_ratios(rows: list[dict], policy: str) -> list[float]:
    """Per measured row, the ceiling over `policy`'s seconds (1: at the ceiling); "model"
    is the model's pick, "guided" what autotune's search keeps."""
    def seconds(row: dict) -> float:
        if policy == "model":
            return model_pick(row)
        return guided_search(row)[0] if policy == "guided" else row[policy]["seconds"]
    return [ceiling(row) / seconds(row) for row in measured_rows(rows)]


# --- launching an entry again ---------------------------------------------------------------

_modules_folder: Optional[tempfile.TemporaryDirectory] = None


def load_kernel(entry: dict, folder: str | Path | None = None) -> Any:
    """The entry's kernel as a `launcher.GXUKernel`, its module written to `folder` (by
    default one temporary folder a process, removed at exit) and imported, as Inductor
    imports the modules it writes."""
    global _modules_folder
    if folder is None:
        if _modules_folder is None:
            _modules_folder = tempfile.TemporaryDirectory(prefix="gxusim-corpus-")
        folder = _modules_folder.name
    folder = Path(folder)
    path = folder / f"{entry['kernel']}_{entry['id']}.py"
    path.write_text(entry["module"])
    spec = importlib.util.spec_from_file_location(f"gxusim_corpus_{entry['id']}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, entry["kernel"])


def meta_arguments(entry: dict) -> list[Any]:
    """The entry's arguments as meta tensors (sizes, strides and dtypes, no memory): enough
    to plan its launches on any machine."""
    return [a["value"] if "dtype" not in a else
            torch.empty_strided(a["shape"], a["stride"], dtype=DTYPES[a["dtype"]], device="meta")
            for a in entry["args"]]


def replayed_plan(row: dict, entry: dict, policy: Any, spec: Any) -> tuple[Any, Optional[float]]:
    """(the plan `policy` makes today for a measured row's kernel, the seconds the row stored
    for that config, among its candidates or the policies' plans it timed; None where it
    timed no such config): a policy judged on stored GPU times, with no GPU. Judge changes
    on the fit part's rows; the test part's are reported."""
    from .spec import use_spec
    kernel = load_kernel(entry)
    args = meta_arguments(entry)
    with use_spec(spec):
        plan = kernel.plan(args, kernel.numels(args), policy, spec)
    stored = row["candidates"] + [row[name] for name in ("seed", "gxu", "rules") if name in row]
    timed = (c for c in stored if c["seconds"] and c["meta"] == plan.meta
             and c["num_warps"] == plan.num_warps and c["num_stages"] == plan.num_stages)
    return plan, next((c["seconds"] for c in timed), None)


def make_arguments(entry: dict, device: str | torch.device, seed: int = 0) -> list[Any]:
    """Arguments for the entry's kernel on `device`: floats drawn from a normal
    distribution, integers (token ids, gathered indices) small non-negative values, which
    index every axis, and booleans at random; views with the recorded strides. On a CUDA
    device they are drawn there (a corpus kernel's arguments reach gigabytes)."""
    device = torch.device(device)
    drawn_on = device if device.type == "cuda" else torch.device("cpu")
    generator = torch.Generator(device=drawn_on).manual_seed(seed)
    out: list[Any] = []
    for argument in entry["args"]:
        if "dtype" not in argument:
            out.append(argument["value"])
            continue
        dtype = DTYPES[argument["dtype"]]
        size = max(1, argument["storage"])
        if dtype.is_floating_point:
            storage = torch.randn(size, generator=generator, device=drawn_on).to(dtype)
        elif dtype == torch.bool:
            storage = torch.rand(size, generator=generator, device=drawn_on) < 0.5
        else:
            storage = torch.randint(0, 2, (size,), generator=generator,
                                    device=drawn_on).to(dtype)
        out.append(storage.to(device).as_strided(argument["shape"], argument["stride"],
                                                 argument["offset"]))
    return out
