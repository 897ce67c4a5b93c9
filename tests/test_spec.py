"""Hardware specs: presets, TOML files with `base =` overrides, GXUSIM_SPEC, use_spec, and
every validation rule's error naming the field."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import gxusim
from gxusim import HardwareSpec, SpecError, current_spec, load_spec, use_spec


def test_presets() -> None:
    gxu = load_spec("gxu")
    assert (gxu.name, gxu.max_grid, gxu.max_num_warps, gxu.max_blocks_per_sm) == ("gxu", 32, 16, 2)
    h200 = load_spec("h200")
    assert h200.name == "h200" and h200.sm_count == 132
    assert isinstance(gxu, HardwareSpec)


def test_toml_file_with_base_and_overrides(tmp_path: Path) -> None:
    path = tmp_path / "small.toml"
    path.write_text('[spec]\nbase = "gxu"\nname = "small"\nmax_grid = 8\n')
    spec = load_spec(path)
    assert (spec.name, spec.max_grid) == ("small", 8)
    assert spec.max_num_warps == load_spec("gxu").max_num_warps  # inherited from the base


def test_use_spec_as_context_manager_restores_previous() -> None:
    before = current_spec()
    with use_spec("h200") as spec:
        assert spec.name == "h200" and current_spec() is spec
        assert torch.gxu.get_device_properties().name == "h200"
    assert current_spec() is before


def test_gxusim_spec_environment_variable(tmp_path: Path) -> None:
    path = tmp_path / "env.toml"
    path.write_text('base = "gxu"\nname = "from-env"\n')
    for value, name in (("h200", "h200"), (str(path), "from-env")):
        result = subprocess.run(
            [sys.executable, "-c", "import gxusim; print(gxusim.current_spec().name)"],
            capture_output=True, text=True, timeout=120, env={**os.environ, "GXUSIM_SPEC": value})
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == name


def _spec_file(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "bad.toml"
    path.write_text(f'[spec]\nbase = "gxu"\n{body}\n')
    return path


@pytest.mark.parametrize("body, field, rule", [
    ("sm_count = 0", "sm_count", "must be positive"),
    ("clock_hz = -1.0", "clock_hz", "must be positive"),
    ("launch_overhead_s = -1e-6", "launch_overhead_s", "must not be negative"),
    ("max_num_warps = 12", "max_num_warps", "power of two"),
    ("warp_size = 24\nmax_threads_per_block = 1024", "warp_size", "power of two"),
    ("max_threads_per_block = 256", "max_num_warps", "exceeds max_threads_per_block"),
    ("max_warps_per_sm = 8", "max_num_warps", "max_warps_per_sm"),
    ('max_grid = "32"', "max_grid", "must be an integer"),
    ("sm_count = 1.5", "sm_count", "must be an integer"),
    ("regs_per_sm = true", "regs_per_sm", "must be an integer"),
    ('mem_bandwidth = "fast"', "mem_bandwidth", "must be a number"),
    ('name = ""', "name", "non-empty string"),
    ("l1_bytes = 65536", "l1_bytes", "must hold smem_per_sm"),
    ("smem_carveouts = [0, 65536, 32768]", "smem_carveouts", "ascending"),
    ("smem_carveouts = [0, 262144]", "smem_carveouts", "within 0..smem_per_sm"),
    ('smem_carveouts = ["all"]', "smem_carveouts", "list of integers"),
    ("spill_miss_all = 0.5", "spill_miss_all", "must exceed spill_miss_from"),
    ("register_alloc_unit = 0", "register_alloc_unit", "must be positive"),
    ("l2_bytes = 8388608\nl2_kept_bytes = 4194304\nl2_kept_none_bytes = 2097152",
     "l2_kept_none_bytes", "must exceed l2_kept_bytes"),
    ("l2_kept_bytes = -1", "l2_kept_bytes", "must not be negative"),
], ids=lambda v: v if isinstance(v, str) and "=" not in v else None)
def test_validation_errors_name_the_field(tmp_path: Path, body: str, field: str, rule: str) -> None:
    with pytest.raises(SpecError) as error:
        load_spec(_spec_file(tmp_path, body))
    message = str(error.value)
    assert field in message and rule in message


def test_unknown_and_missing_keys_are_named(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=r"unknown spec field\(s\) \['max_gird'\]"):
        load_spec(_spec_file(tmp_path, "max_gird = 4"))
    path = tmp_path / "partial.toml"
    path.write_text('[spec]\nname = "partial"\nsm_count = 4\n')
    with pytest.raises(SpecError, match="missing spec field.*max_grid"):
        load_spec(path)


def test_a_field_removed_from_the_model_is_named_with_what_charges_its_time_now(
        tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=r"spill_s was removed from the model: spilled words "
                                        r"are charged through spill_bandwidth"):
        load_spec(_spec_file(tmp_path, "spill_s = 3.6e-9"))
    with pytest.raises(SpecError, match="sm_transcendental_s was removed"):
        load_spec(_spec_file(tmp_path, "sm_transcendental_s = 0"))


def test_an_estimates_table_sets_what_stands_in_for_a_binary(tmp_path: Path) -> None:
    """The [estimates] table overrides the counts that stand in for a compiled binary; a
    name it does not know, or a bad value, is refused with the field named."""
    path = tmp_path / "estimates.toml"
    path.write_text('[spec]\nbase = "gxu"\n[estimates]\nloop_instructions = 30.0\n'
                    'round_trips_per_load = 0.5\n')
    base, changed = load_spec("gxu"), load_spec(path)
    assert (changed.loop_instructions, changed.round_trips_per_load) == (30.0, 0.5)
    assert changed.replace(loop_instructions=base.loop_instructions,
                           round_trips_per_load=base.round_trips_per_load) == base
    path.write_text('[spec]\nbase = "gxu"\n[estimates]\nloop_instrs = 3.0\n')
    with pytest.raises(SpecError, match=r"unknown \[estimates\] field\(s\) \['loop_instrs'\]"):
        load_spec(path)
    path.write_text('[spec]\nbase = "gxu"\n[estimates]\ntile_instructions = -1.0\n')
    with pytest.raises(SpecError, match="tile_instructions.*must not be negative"):
        load_spec(path)


def test_bad_toml_and_unknown_names(tmp_path: Path) -> None:
    path = tmp_path / "broken.toml"
    path.write_text("[spec\nname = \n")
    with pytest.raises(SpecError, match="not valid TOML"):
        load_spec(path)
    with pytest.raises(SpecError, match="unknown spec preset 'b200'"):
        load_spec("b200")
    with pytest.raises(SpecError, match="does not exist"):
        load_spec(tmp_path / "missing.toml")


def test_replace_is_validated() -> None:
    with pytest.raises(SpecError, match="max_num_warps"):
        load_spec("gxu").replace(max_num_warps=64)
    assert load_spec("gxu").replace(max_grid=64).max_grid == 64


def test_invalid_spec_errors_are_value_errors() -> None:
    assert issubclass(gxusim.SpecError, ValueError)
