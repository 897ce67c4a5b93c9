"""The gxusim command line: every command documents itself; bad input is named."""
import pytest
import torch

from gxusim.cli import main


@pytest.mark.parametrize("command", [["demo"], ["run"], ["spec", "show"], ["emulate"], ["sweep"],
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


@pytest.mark.parametrize("command", ["demo", "run", "sweep"])
def test_unknown_model_is_named(command, capsys):
    assert main([command, "no_such_model"]) == 2
    assert "no_such_model" in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is there: calibration would run")
def test_calibrate_without_a_gpu_says_so_in_one_line(capsys):
    assert main(["calibrate", "--ray"]) == 2  # before starting any Ray cluster
    assert capsys.readouterr().err.strip() == \
        "gxusim calibrate: it times kernels on a CUDA GPU, and torch sees none"


def test_a_run_counts_each_kernel_once_as_generated_and_once_as_first_run():
    """`gxusim run`'s progress bar follows the compile: every gxu kernel Inductor generates
    is heard of once when it is created and once when its first launch returns, however
    often the compiled function runs."""
    from gxusim.compiler.launcher import KernelWatcher, watching_kernels
    created, ran = [], []
    torch._dynamo.reset()
    with torch._inductor.config.patch(force_disable_caches=True), \
            watching_kernels(KernelWatcher(created.append, ran.append)):
        step = torch.compile(lambda t: (t - t.sum(dim=1, keepdim=True)).relu())
        x = torch.randn(64, 96, device="gxu")
        for _ in range(3):
            got = step(x)
    torch._dynamo.reset()
    torch.testing.assert_close(got.cpu(), (x.cpu() - x.cpu().sum(dim=1, keepdim=True)).relu())
    assert created and sorted(created) == sorted(ran) and len(set(created)) == len(created)
    assert all(name.startswith("triton_") for name in created)


@pytest.mark.slow
def test_run_compiles_a_zoo_model_and_says_it_matches(capsys):
    assert main(["run", "encoder_layer", "--fresh"]) == 0
    out = capsys.readouterr().out
    assert "encoder_layer" in out and "yes" in out and "kernels' first runs" in out
