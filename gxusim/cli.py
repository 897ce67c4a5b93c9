"""Command line: `gxusim demo | run | emulate | sweep | report | calibrate | spec show NAME`.

Bad input (a flag, file, environment variable or value: an `InputError`, or a flag that
does not parse) is one line on stderr naming it and what is accepted, exit status 2; a
traceback means a bug of gxusim's, or `gxusim --debug`.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Iterator, Sequence

from .errors import InputError, Parser

SAVE_EVERY_S = 5.0  # a running sweep's --json file is rewritten at most this often


def _demo(args: argparse.Namespace) -> int:
    import torch

    import gxusim
    from gxusim.models import CASES
    from gxusim.report import case_table, kernel_table, run_case
    _setup(args)
    gxusim.use_heuristics(args.policy)
    torch._inductor.config.force_disable_caches = True  # show every kernel being generated
    spec = gxusim.current_spec()
    print(f"gxusim demo: target={gxusim.current_target()} spec={spec.name} "
          f"(max_grid={spec.max_grid}, max_num_warps={spec.max_num_warps}, "
          f"{spec.max_blocks_per_sm} blocks/SM) policy={args.policy}\n")
    results = []
    for name in args.models:
        try:
            result = run_case(CASES[name], "cpu", torch.float32)
        except Exception as error:  # keep going: the table says which model failed and why
            print(f"{name}: FAILED: {type(error).__name__}: {str(error).splitlines()[0][:300]}\n")
            continue
        results.append(result)
        print(f"== {name}: {len(result.launches)} kernel launch(es)")
        for launch in result.launches:
            if launch.policy != "extern":
                print(launch.fusion_line())
        print(kernel_table(result.launches) + "\n")
    policies_ok = _demo_policies(CASES["mul_relu"], 1 << 22)
    print(case_table(results))
    ok = len(results) == len(args.models) and all(r.matches_eager and not r.violations
                                                   for r in results)
    return 0 if ok and policies_ok else 1


def _run(args: argparse.Namespace) -> int:
    import torch

    import gxusim
    from gxusim import zoo
    from gxusim.report import case_table, kernel_table, run_case
    if args.target:
        gxusim.set_target(args.target)
    gxusim.use_heuristics(args.policy)
    wrap = zoo.Autocast if args.amp else None if args.train else zoo.FORWARD_WRAP.get(args.model)
    mode = ("AMP " if args.amp else "") + ("training step" if args.train else "forward")
    case = zoo.case(args.model, train=args.train, wrap=wrap)
    print(f"gxusim run: {args.model} {mode}, target={gxusim.current_target()} "
          f"spec={gxusim.current_spec().name} policy={args.policy}")
    with torch._inductor.config.patch(force_disable_caches=args.fresh), _kernel_progress() as stages:
        result = run_case(case, "cpu", train=args.train)
    print(kernel_table(result.launches) + "\n")
    print(case_table([result]))
    print(f"first call {result.compile_s:.1f} s: Dynamo and Inductor until the last kernel "
          f"was generated {stages['generated_s']:.1f} s, then the kernels' first runs "
          f"{result.compile_s - stages['generated_s']:.1f} s (on the emulator: building and "
          f"JIT-compiling each kernel's module)")
    return 0 if result.matches_eager and not result.violations else 1


@contextlib.contextmanager
def _kernel_progress() -> Iterator[dict]:
    """A progress bar over the gxu kernels of a compile: its total grows as Inductor
    generates them and it advances as each one's first launch returns. Yields a dict
    that holds, afterwards, the seconds until the last kernel was generated."""
    from tqdm import tqdm

    from gxusim.compiler.launcher import KernelWatcher, watching_kernels
    stages = {"generated_s": 0.0}
    start = time.perf_counter()
    with tqdm(total=0, desc="kernels run", unit="kernel") as bar:
        def created(name: str) -> None:
            stages["generated_s"] = time.perf_counter() - start
            bar.total += 1
            bar.refresh()

        def first_run(name: str) -> None:
            bar.set_postfix_str(name.removeprefix("triton_")[:48], refresh=False)
            bar.update(1)
        with watching_kernels(KernelWatcher(created, first_run)):
            yield stages


def _demo_policies(case, size: int) -> bool:
    """One kernel under "seed" and "gxu" side by side at a size where every program loops
    over many tiles: the plans, the predicted times and the occupancy of each."""
    import torch

    import gxusim
    from gxusim.report import format_table, run_case
    print(f"== policies side by side: {case.name} at {size:,} elements, "
          f"{gxusim.current_spec().max_grid} programs at most")
    rows, ok = [], True
    for policy in ("seed", "gxu"):
        gxusim.use_heuristics(policy)
        result = run_case(case, size, torch.float32)
        ok = ok and result.matches_eager and not result.violations
        for launch in (l for l in result.launches if l.policy != "extern"):
            blocks = " ".join(f"{k}={v}" for k, v in launch.meta.items() if k.endswith("BLOCK"))
            rows.append((policy, launch.kernel, blocks, launch.num_warps, launch.grid[0],
                         launch.meta.get("tiles"), launch.meta.get("tiles_per_program"),
                         f"{launch.predicted_s * 1e6:.1f}",
                         launch.occupancy or launch.occupancy_limiter or "",
                         "yes" if result.matches_eager else "NO"))
    print(format_table(("policy", "kernel", "blocks", "warps", "programs", "tiles",
                        "tiles/program", "predicted us", "occupancy", "matches eager"), rows))
    seed_s, gxu_s = (float(r[7]) for r in rows[:2])
    print(f"predicted gxu/seed: {gxu_s / seed_s:.2f}\n")
    return ok


def _spec_show(args: argparse.Namespace) -> int:
    from gxusim.spec import load_spec
    for field, value in load_spec(args.name).as_dict().items():
        print(f"{field:22} {value}")
    return 0


def _sweep(args: argparse.Namespace) -> int:
    from gxusim import sweep
    _setup(args)
    if args.resume and not args.json:
        raise InputError("--resume keeps the rows saved in --json FILE: give --json too")
    scales = args.sizes or [args.scale]
    for line in sweep.resized(args.models, scales):
        print(f"gxusim sweep: {line}", file=sys.stderr)
    json_path = Path(args.json) if args.json else None
    done = sweep.load(json_path) if args.resume and json_path and json_path.exists() else []
    saved, last_save = list(done), time.monotonic()

    def save_progress(row: dict) -> None:  # an interrupted sweep keeps what it finished
        nonlocal last_save
        saved.append(row)
        # Every few seconds, not every row: rewriting a long sweep's file per row costs
        # seconds of the CPU its runs need. Ctrl-C saves them all (below).
        if json_path is not None and time.monotonic() - last_save > SAVE_EVERY_S:
            sweep.save(saved, json_path)
            last_save = time.monotonic()

    try:
        rows = sweep.sweep(args.models, args.policies, scales, train=args.train,
                           predict_only=args.predict_only, done=done, on_row=save_progress,
                           runner=_runner(args))
    finally:
        if json_path is not None and len(saved) > len(done):
            sweep.save(saved, json_path)
    return _show(rows, args)


def _is_measured_corpus(path: Path) -> bool:
    """Whether `path` holds `benchmarks/bench_ceiling.py --corpus --json` rows."""
    try:
        rows = json.loads(path.read_text())
    except (OSError, ValueError):
        return False  # sweep.load names what is wrong with it
    return isinstance(rows, list) and bool(rows) and isinstance(rows[0], dict) and \
        "candidates" in rows[0]


def _runner(args: argparse.Namespace):
    from gxusim import distributed
    if args.ray is not None:
        if args.jobs is not None:
            raise InputError("--jobs and --ray: choose one (--jobs runs on this machine's "
                             "cores, --ray on the cluster's)")
        return distributed.ray_runner(None if args.ray == "local" else args.ray)
    jobs = args.jobs if args.jobs is not None else \
        distributed.usable_cpus() if args.predict_only else 1
    return distributed.local_runner(jobs) if jobs != 1 else None


def _report(args: argparse.Namespace) -> int:
    from gxusim import html_report, sweep
    if _is_measured_corpus(Path(args.results)):
        index = html_report.write_corpus_report(json.loads(Path(args.results).read_text()),
                                                Path(args.out))
        print(f"HTML report of the measured corpus written to {index}")
        return 0
    rows = sweep.load(Path(args.results))
    status = _show(rows, args)
    index = html_report.write_report(rows, Path(args.out))
    print(f"HTML report written to {index}")
    return status


def _show(rows: list, args: argparse.Namespace) -> int:
    from gxusim import sweep
    print(sweep.table(rows))
    check = sweep.measured_vs_predicted(rows)
    if check:
        print("\n" + check)
    failed = [r for r in rows if r.get("error")]
    for row in failed:
        print(f"FAILED {row['model']} size={row.get('size')} policy={row['policy']}: {row['error']}")
    if getattr(args, "json", None):
        sweep.save(rows, Path(args.json))
        print(f"\nrows written to {args.json}")
    if args.plot:
        sweep.plot(rows, Path(args.plot))
        print(f"plot written to {args.plot}")
    return 0 if all(r["matches_eager"] is not False and r["within_spec"] for r in rows) else 1


def _calibrate(args: argparse.Namespace) -> int:
    import json

    import torch

    import gxusim
    from gxusim.model import calibrate
    from gxusim.model.fit import write_spec_toml
    from gxusim.model.terms import TERMS
    from gxusim.report import format_table
    from gxusim.spec import load_spec
    if not torch.cuda.is_available():
        raise InputError("it times kernels on a CUDA GPU, and torch sees none")
    spec = load_spec(args.spec)
    gxusim.use_spec(spec)  # kernels are planned and checked against the spec being fitted

    def progress(done: int, total: int) -> None:
        print(f"\r  measured {done}/{total} calibration programs", end="", file=sys.stderr,
              flush=True)

    mapper = calibrate.in_process
    if args.ray is not None:  # one GPU per calibration program, on the cluster's GPUs
        import functools

        from gxusim import distributed
        distributed.connect(None if args.ray == "local" else args.ray)
        mapper = functools.partial(distributed.map_on_ray, uses_gpu=True,
                                   desc="calibration on ray", unit="program")
    fit, rows = calibrate.calibrate(spec, progress, mapper=mapper)
    print(file=sys.stderr)
    print(format_table(("program", "kernel", "blocks", "warps", "programs", "measured us",
                        "predicted us"),
                       [(r["program"], r["kernel"][:40], r["meta"], r["num_warps"], r["programs"],
                         f"{r['measured_s'] * 1e6:.1f}", f"{r['predicted_s'] * 1e6:.1f}")
                        for r in rows]))
    fitted = ", ".join(f"{term.field} {getattr(fit.spec, term.field):.3g}" for term in TERMS)
    print(f"\nfitted on {torch.cuda.get_device_name()}: {fitted}; error median "
          f"{fit.median_error:.1%}, max {fit.max_error:.1%} over {len(rows)} launches")
    if args.out:
        write_spec_toml(fit.spec, args.spec, Path(args.out),
                        f"calibrated on {torch.cuda.get_device_name()} by gxusim calibrate")
        print(f"spec written to {args.out} (use it with --spec, GXUSIM_SPEC or load_spec)")
    if args.samples:
        Path(args.samples).write_text(json.dumps(rows, indent=1))
        print(f"samples written to {args.samples}")
    return 0


def _setup(args: argparse.Namespace) -> None:
    """Check the model names, then apply --target and --spec."""
    import gxusim
    from gxusim.models import require_models
    require_models(args.models)
    if args.target:
        gxusim.set_target(args.target)
    if getattr(args, "spec", None):
        gxusim.use_spec(args.spec)
    return True


_SUFFIXES = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def _size(text: str) -> int:
    """A size argument: 1024, 1M, 16M, 1G (binary multiples) or 2**20."""
    try:
        if "**" in text:
            base, exponent = text.split("**")
            value = int(base) ** int(exponent)
        elif text[-1:].upper() in _SUFFIXES:
            value = int(text[:-1]) * _SUFFIXES[text[-1].upper()]
        else:
            value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"size {text!r} is not a number of elements "
                                         f"(e.g. 1024, 16M, 1G, 2**30)") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"size {text!r} must be at least 1 element")
    return value


def _output_file(text: str) -> str:
    """A file to write: checked before a command runs, not when it has results to save."""
    folder = os.path.dirname(text) or "."
    if not os.path.isdir(folder):
        raise argparse.ArgumentTypeError(f"{text!r}: folder {folder!r} does not exist")
    if os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"{text!r} is a folder; give a file name")
    return text


def _output_folder(text: str) -> str:
    """A folder to write into (made if missing)."""
    if os.path.exists(text) and not os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"{text!r} is a file; give a folder")
    return text


def parser() -> argparse.ArgumentParser:
    from gxusim.models import CASES
    root = Parser(prog="gxusim", description=__doc__,
                  formatter_class=argparse.RawDescriptionHelpFormatter)
    root.add_argument("--debug", action="store_true",
                      help="bad input raises with its traceback, not one line")
    commands = root.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="compile the model suite for gxu, run it on the "
                                            "current target, compare with eager")
    demo.add_argument("models", nargs="*", default=["add_relu", "tanh_gelu", "transpose",
                                                    "row_sum", "mlp"],
                      metavar="MODEL", help=f"from {sorted(CASES)}")
    demo.add_argument("--policy", default="gxu", choices=("gxu", "seed", "autotune"))
    demo.add_argument("--target", choices=("auto", "cuda", "emulator"))
    demo.set_defaults(run=_demo)
    run = commands.add_parser("run", help="compile a real model (a zoo model: random weights, "
                                          "no download) for gxu, run it on the current target "
                                          "with a progress bar over its kernels, compare with eager")
    run.add_argument("model", help="resnet18, mobilenet_v3_small, gpt2, bert, llama or "
                     "encoder_layer")
    run.add_argument("--train", action="store_true",
                     help="a training step (loss and every gradient), not a forward")
    run.add_argument("--amp", action="store_true", help="under torch.autocast(bfloat16)")
    run.add_argument("--policy", default="gxu", choices=("gxu", "seed", "autotune"))
    run.add_argument("--target", choices=("auto", "cuda", "emulator"))
    run.add_argument("--fresh", action="store_true",
                     help="compile every kernel again (Inductor's caches off)")
    run.set_defaults(run=_run)
    spec = commands.add_parser("spec", help="hardware specs").add_subparsers(dest="action",
                                                                             required=True)
    show = spec.add_parser("show", help="print a spec (preset name or TOML path)")
    show.add_argument("name")
    show.set_defaults(run=_spec_show)
    # `gxusim emulate ...` is handed whole to the emulator's own parser (see main).
    commands.add_parser("emulate", help="run a Triton kernel file on the emulator "
                                        "(gxusim emulate --help)")
    sweep = commands.add_parser("sweep", help="compare launch policies across models and "
                                              "sizes with the performance model")
    sweep.add_argument("models", nargs="*", default=["add_relu", "tanh_gelu", "transpose",
                                                     "row_sum", "cumsum", "mlp"],
                       metavar="MODEL", help=f"from {sorted(CASES)}")
    sweep.add_argument("--policies", nargs="+", default=["seed", "gxu"], metavar="POLICY",
                       help="seed, gxu, autotune, or a vendor policy 'pkg.module:Class'")
    sweep.add_argument("--sizes", nargs="+", type=_size, metavar="N",
                       help="elements of each model's main input (e.g. 1024 1M 2**30); "
                            "default: the --scale preset")
    sweep.add_argument("--predict-only", action="store_true",
                       help="plan and predict every launch without running or allocating "
                            "anything (FakeTensors): any size, seconds per run")
    sweep.add_argument("--spec", help="preset name or TOML file (e.g. from gxusim calibrate)")
    sweep.add_argument("--target", choices=("auto", "cuda", "emulator"))
    sweep.add_argument("--train", action="store_true", help="a training step, not forward")
    sweep.add_argument("--scale", default="cpu", choices=("cpu", "gpu"),
                       help="model sizes without --sizes: small (cpu) or the seed's (gpu)")
    sweep.add_argument("--json", type=_output_file,
                       help="save the rows as they finish (for gxusim report)")
    sweep.add_argument("--resume", action="store_true",
                       help="keep the rows already in --json and skip their runs")
    sweep.add_argument("--ray", nargs="?", const="local", metavar="ADDRESS",
                       help="run each (model, size) as a Ray task: on a local cluster, or "
                            "on the cluster at ADDRESS (needs pip install 'gxusim[ray]')")
    sweep.add_argument("--jobs", type=int, metavar="N",
                       help="predict-only: runs at once, each in a process of this machine "
                            "(default: one per CPU; compiling is all a run does)")
    sweep.add_argument("--plot", type=_output_file, help="save a bar chart (PNG)")
    sweep.set_defaults(run=_sweep)
    report = commands.add_parser("report", help="tables, plots and an HTML report of a "
                                                "saved sweep")
    report.add_argument("results", help="JSON written by gxusim sweep --json, or by "
                        "benchmarks/bench_ceiling.py --corpus --json (a measured corpus)")
    report.add_argument("--out", default="gxusim-report", type=_output_folder,
                        help="folder for index.html and its plots (default: gxusim-report)")
    report.add_argument("--plot", type=_output_file, help="also save a bar chart (PNG)")
    report.set_defaults(run=_report)
    calibrate = commands.add_parser("calibrate", help="fit the performance model on this GPU")
    calibrate.add_argument("--spec", default="h200", help="spec whose model parameters to fit")
    calibrate.add_argument("--out", type=_output_file, help="write the fitted spec as a TOML file")
    calibrate.add_argument("--samples", type=_output_file,
                           help="write every measured launch (JSON) for "
                                "benchmarks/validate_model.py")
    calibrate.add_argument("--ray", nargs="?", const="local", metavar="ADDRESS",
                           help="measure each program as a Ray task holding one GPU, on a local "
                                "cluster or the one at ADDRESS (needs pip install 'gxusim[ray]')")
    calibrate.set_defaults(run=_calibrate)
    return root


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; its exit status (2: bad input, printed as one line)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = argv[:1] == ["--debug"]  # before the command, as `gxusim --help` lists it
    command = argv[1:] if debug else argv
    prog = " ".join(["gxusim", *command[:1]])
    try:
        if command[:1] == ["emulate"]:  # handed whole to the emulator's own parser
            from gxusim import emulator
            return emulator.cli_main(command[1:])
        args = parser().parse_args(argv)
        return args.run(args)
    except InputError as error:
        if debug:
            raise
        print(f"{prog}: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
