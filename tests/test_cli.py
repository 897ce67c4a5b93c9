"""The gxusim command line: every command documents itself; bad input is named."""
import pytest
import torch

from gxusim.cli import main


@pytest.mark.parametrize("command", [["demo"], ["spec", "show"], ["emulate"], ["sweep"],
                                     ["report"], ["calibrate"]], ids=" ".join)
def test_every_command_has_help(command, capsys):
    with pytest.raises(SystemExit) as done:
        main(command + ["--help"])
    assert done.value.code == 0
    assert f"usage: gxusim {command[0]}" in capsys.readouterr().out


def test_spec_show_prints_the_limits(capsys):
    assert main(["spec", "show", "gxu"]) == 0
    out = capsys.readouterr().out
    assert "max_grid" in out and "32" in out and "max_num_warps" in out


@pytest.mark.parametrize("command", ["demo", "sweep"])
def test_unknown_model_is_named(command, capsys):
    assert main([command, "no_such_model"]) == 2
    assert "no_such_model" in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is there: calibration would run")
def test_calibrate_without_a_gpu_says_so_in_one_line(capsys):
    assert main(["calibrate", "--ray"]) == 2  # before starting any Ray cluster
    assert capsys.readouterr().err.strip() == \
        "gxusim calibrate: it times kernels on a CUDA GPU, and torch sees none"
