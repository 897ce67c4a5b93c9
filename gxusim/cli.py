"""Command line: `gxusim demo | emulate | sweep | report | calibrate | spec show NAME`."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence


def _demo(args: argparse.Namespace) -> int:
    import torch

    import gxusim
    from gxusim.models import CASES
    from gxusim.report import case_table, kernel_table, run_case
    if not _setup(args, "demo"):
        return 2
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
        print(kernel_table(result.launches) + "\n")
    print(case_table(results))
    ok = len(results) == len(args.models) and all(r.matches_eager and not r.violations
                                                   for r in results)
    return 0 if ok else 1


def _spec_show(args: argparse.Namespace) -> int:
    from gxusim.spec import load_spec
    for field, value in load_spec(args.name).as_dict().items():
        print(f"{field:22} {value}")
    return 0


def _sweep(args: argparse.Namespace) -> int:
    from gxusim import sweep
    if not _setup(args, "sweep"):
        return 2
    rows = sweep.sweep(args.models, args.policies, train=args.train, scale=args.scale)
    return _show(rows, args)


def _report(args: argparse.Namespace) -> int:
    from gxusim import sweep
    return _show(sweep.load(Path(args.results)), args)


def _show(rows: list, args: argparse.Namespace) -> int:
    from gxusim import sweep
    print(sweep.table(rows))
    check = sweep.measured_vs_predicted(rows)
    if check:
        print("\n" + check)
    if getattr(args, "json", None):
        sweep.save(rows, Path(args.json))
        print(f"\nrows written to {args.json}")
    if args.plot:
        sweep.plot(rows, Path(args.plot))
        print(f"plot written to {args.plot}")
    return 0 if all(r["matches_eager"] and r["within_spec"] for r in rows) else 1


def _calibrate(args: argparse.Namespace) -> int:
    import torch

    from gxusim import calibrate
    from gxusim.report import format_table
    from gxusim.spec import load_spec
    spec = load_spec(args.spec)

    def progress(done: int, total: int) -> None:
        print(f"\r  measured {done}/{total} configurations", end="", file=sys.stderr, flush=True)

    fit, rows = calibrate.calibrate(spec, progress)
    print(file=sys.stderr)
    print(format_table(("numel", "XBLOCK", "warps", "programs", "measured us", "predicted us"),
                 [(r["numel"], r["XBLOCK"], r["num_warps"], r["programs"],
                   f"{r['measured_us']:.1f}", f"{r['predicted_us']:.1f}") for r in rows]))
    fitted = fit.spec
    print(f"\nfitted on {torch.cuda.get_device_name()}: mem_bandwidth "
          f"{fitted.mem_bandwidth / 1e12:.2f} TB/s, memory_latency_s {fitted.memory_latency_s:.3g}, "
          f"element_issue_s {fitted.element_issue_s:.3g}, launch_overhead_s "
          f"{fitted.launch_overhead_s:.3g}; error median {fit.median_error:.1%}, "
          f"max {fit.max_error:.1%} over {len(rows)} launches")
    if args.out:
        calibrate.write_spec_toml(fitted, args.spec, Path(args.out),
                                  f"calibrated on {torch.cuda.get_device_name()} by gxusim calibrate")
        print(f"spec written to {args.out} (use it with --spec, GXUSIM_SPEC or load_spec)")
    return 0


def _setup(args: argparse.Namespace, command: str) -> bool:
    """Check the model names, then apply --target and --spec; False (and a message naming
    the bad models) when a name is unknown."""
    import gxusim
    from gxusim.models import CASES
    unknown = sorted(set(args.models) - set(CASES))
    if unknown:
        print(f"gxusim {command}: unknown model(s) {unknown}; choose from {sorted(CASES)}",
              file=sys.stderr)
        return False
    if args.target:
        gxusim.set_target(args.target)
    if getattr(args, "spec", None):
        gxusim.use_spec(args.spec)
    return True


def parser() -> argparse.ArgumentParser:
    from gxusim.models import CASES
    root = argparse.ArgumentParser(prog="gxusim", description=__doc__)
    commands = root.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="compile the model suite for gxu, run it on the "
                                            "current target, compare with eager")
    demo.add_argument("models", nargs="*", default=["add_relu", "tanh_gelu", "transpose",
                                                    "row_sum", "mlp"],
                      metavar="MODEL", help=f"from {sorted(CASES)}")
    demo.add_argument("--policy", default="gxu", choices=("gxu", "seed", "autotune"))
    demo.add_argument("--target", choices=("auto", "cuda", "emulator"))
    demo.set_defaults(run=_demo)
    spec = commands.add_parser("spec", help="hardware specs").add_subparsers(dest="action",
                                                                             required=True)
    show = spec.add_parser("show", help="print a spec (preset name or TOML path)")
    show.add_argument("name")
    show.set_defaults(run=_spec_show)
    # `gxusim emulate ...` is handed whole to the emulator's own parser (see main).
    commands.add_parser("emulate", help="run a Triton kernel file on the emulator "
                                        "(gxusim emulate --help)")
    sweep = commands.add_parser("sweep", help="compare launch policies across the model suite "
                                              "with the performance model")
    sweep.add_argument("models", nargs="*", default=["add_relu", "tanh_gelu", "transpose",
                                                     "row_sum", "cumsum", "mlp"],
                       metavar="MODEL", help=f"from {sorted(CASES)}")
    sweep.add_argument("--policies", nargs="+", default=["seed", "gxu"],
                       choices=("seed", "gxu", "autotune"))
    sweep.add_argument("--spec", help="preset name or TOML file (e.g. from gxusim calibrate)")
    sweep.add_argument("--target", choices=("auto", "cuda", "emulator"))
    sweep.add_argument("--train", action="store_true", help="a training step, not forward")
    sweep.add_argument("--scale", default="cpu", choices=("cpu", "gpu"),
                       help="model sizes: small (cpu) or the seed's (gpu: 100M-element vectors)")
    sweep.add_argument("--json", help="save the rows (for gxusim report)")
    sweep.add_argument("--plot", help="save a bar chart (PNG; needs matplotlib)")
    sweep.set_defaults(run=_sweep)
    report = commands.add_parser("report", help="tables and plots of a saved sweep")
    report.add_argument("results", help="JSON written by gxusim sweep --json")
    report.add_argument("--plot", help="save a bar chart (PNG; needs matplotlib)")
    report.set_defaults(run=_report)
    calibrate = commands.add_parser("calibrate", help="fit the performance model on this GPU")
    calibrate.add_argument("--spec", default="h200", help="spec whose model parameters to fit")
    calibrate.add_argument("--out", help="write the fitted spec as a TOML file")
    calibrate.set_defaults(run=_calibrate)
    return root


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["emulate"]:
        from gxusim import emulator
        return emulator.cli_main(argv[1:])
    args = parser().parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
