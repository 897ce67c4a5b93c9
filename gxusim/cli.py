"""Command line: `gxusim demo | emulate | sweep | report | calibrate | spec show NAME`."""
from __future__ import annotations

import argparse
import sys
from typing import Sequence


def _demo(args: argparse.Namespace) -> int:
    import torch

    import gxusim
    from gxusim.models import CASES
    from gxusim.report import case_table, kernel_table, run_case
    unknown = sorted(set(args.models) - set(CASES))
    if unknown:
        print(f"gxusim demo: unknown model(s) {unknown}; choose from {sorted(CASES)}",
              file=sys.stderr)
        return 2
    if args.target:
        gxusim.set_target(args.target)
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


def _emulate(args: argparse.Namespace) -> int:
    from gxusim import emulator
    return emulator.cli_main(args.rest)


def _not_yet(name: str):
    def run(args: argparse.Namespace) -> int:
        print(f"gxusim {name}: not implemented yet (needs the calibrated performance model)",
              file=sys.stderr)
        return 2
    return run


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
    emulate = commands.add_parser("emulate", help="run a Triton kernel file on the emulator",
                                  add_help=False)
    emulate.add_argument("rest", nargs=argparse.REMAINDER)
    emulate.set_defaults(run=_emulate)
    for name, help_text in (("sweep", "compare heuristic policies across models"),
                            ("report", "tables and plots of a sweep"),
                            ("calibrate", "fit the performance model on a GPU")):
        commands.add_parser(name, help=help_text).set_defaults(run=_not_yet(name))
    return root


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
