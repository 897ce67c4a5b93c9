"""Check the performance model against kernel times measured on a GPU, without a GPU.

Takes a sweep saved on the GPU with timing on (`GXUSIM_TIMING=1 gxusim sweep --json ...`),
re-runs the same models, policies, spec and sizes on the emulator target (whose sector
counts feed the model), and prints predicted against measured per row, and each policy's
ratio to the first as predicted and as measured (what a sweep is used to decide).

    python benchmarks/validate_model.py benchmarks/results/sweep_gxu_on_h200.json
"""
import argparse
import sys
from pathlib import Path

import gxusim
from gxusim import sweep
from gxusim.report import format_table


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("measured", type=Path, help="sweep JSON with measured_s (from a GPU)")
    args = parser.parse_args()
    measured_rows = [r for r in sweep.load(args.measured) if r.get("measured_s")]
    if not measured_rows:
        print(f"{args.measured} has no measured times (sweep with GXUSIM_TIMING=1 on a GPU)",
              file=sys.stderr)
        return 2
    first = measured_rows[0]
    spec_name = first["spec"].removesuffix("-calibrated")
    gxusim.set_target("emulator")
    gxusim.use_spec(spec_name)
    models = list(dict.fromkeys(r["model"] for r in measured_rows))
    policies = list(dict.fromkeys(r["policy"] for r in measured_rows))
    predicted = {(r["model"], r["policy"]): r["predicted_s"]
                 for r in sweep.sweep(models, policies, scale=first.get("scale", "cpu"))}
    measured = {(r["model"], r["policy"]): r["measured_s"] for r in measured_rows}
    print(f"spec {spec_name}, predicted on the emulator target, measured in {args.measured}\n")
    print(format_table(("model", "policy", "predicted us", "measured us", "predicted/measured"),
                       [(m, p, f"{predicted[m, p] * 1e6:.1f}", f"{measured[m, p] * 1e6:.1f}",
                         f"{predicted[m, p] / measured[m, p]:.2f}") for m, p in measured]))
    base = policies[0]
    print()
    print(format_table(("model", "policy", f"predicted /{base}", f"measured /{base}"),
                       [(m, p, f"{predicted[m, p] / predicted[m, base]:.2f}",
                         f"{measured[m, p] / measured[m, base]:.2f}")
                        for m, p in measured if p != base]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
