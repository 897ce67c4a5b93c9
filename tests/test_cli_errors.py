"""Bad input to the command line is one line naming it, exit status 2, no traceback
(issue #40); `gxusim --debug` shows the traceback; bad `GXUSIM_*` values fail `import gxusim`."""
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gxusim import cache, environment, sweep
from gxusim.cli import main
from gxusim.compiler.policies import resolve_policy
from gxusim.errors import InputError

KERNEL = f"{Path(__file__).parent}/triton_kernels/pointwise.py::gelu_tanh"  # (in, out, xnumel, XBLOCK)
EMULATE = ["emulate", KERNEL, "--grid", "4", "--arg", "x=float32[1000]", "--arg",
           "out=float32[1000]", "--arg", "n=1000", "--const", "XBLOCK=128"]


def _error_line(argv: list[str], capsys: pytest.CaptureFixture) -> str:
    """The one line that `gxusim argv` prints to stderr, exiting with status 2."""
    try:
        status = main(argv)
    except SystemExit as done:  # argparse's exit, after printing its one line
        status = done.code
    err = capsys.readouterr().err
    assert status == 2, err
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    return err.strip()


@pytest.fixture
def files(tmp_path: Path) -> Path:
    """Bad inputs as a user would have them: spec files, JSON files, a plain file."""
    (tmp_path / "broken.toml").write_text("[spec\nname = \n")
    (tmp_path / "zero.toml").write_text('[spec]\nbase = "gxu"\nsm_count = 0\n')
    (tmp_path / "typo.toml").write_text('[spec]\nbase = "gxu"\nmax_gird = 4\n')
    (tmp_path / "no-base.toml").write_text('[spec]\nbase = "b200"\n')
    (tmp_path / "notes.json").write_text("not json\n")
    (tmp_path / "other.json").write_text('{"model": "mlp"}\n')
    (tmp_path / "partial.json").write_text('[{"model": "mlp", "policy": "gxu", "predicted_s": 1}]')
    (tmp_path / "a-file").write_text("")
    return tmp_path


COMMANDS = ("spec", "sweep", "demo", "report", "emulate", "frobnicate")


@pytest.mark.parametrize("argv, named", [
    (["spec", "show", "{d}/missing.toml"], ["missing.toml", "does not exist", "'gxu'"]),
    (["spec", "show", "{d}/broken.toml"], ["broken.toml", "not valid TOML"]),
    (["spec", "show", "{d}/zero.toml"], ["zero.toml", "sm_count = 0", "must be positive"]),
    (["spec", "show", "{d}/typo.toml"], ["typo.toml", "unknown spec field(s) ['max_gird']"]),
    (["spec", "show", "{d}/no-base.toml"], ["no-base.toml", "unknown spec preset 'b200'"]),
    (["spec", "show", "{d}"], ["spec file {d}", "cannot be read"]),
    (["spec", "show", "b200"], ["unknown spec preset 'b200'", "'gxu'", ".toml"]),
    (["sweep", "--spec", "{d}/broken.toml", "mlp"], ["broken.toml", "not valid TOML"]),
    (["sweep", "--spec", "{d}/zero.toml", "mlp"], ["zero.toml", "sm_count = 0"]),
    (["sweep", "--sizes", "abc"], ["--sizes", "'abc'", "16M"]),
    (["sweep", "no_such_model"], ["'no_such_model'", "mlp"]),
    (["demo", "no_such_model"], ["'no_such_model'", "mlp"]),
    (["demo", "--policy", "fastest"], ["--policy", "'fastest'", "'gxu'"]),
    (["sweep", "--policies", "fastest", "mlp"], ["'fastest'", "'gxu'", "module:Class"]),
    (["sweep", "--policies", "no_such_vendor.policies:Wide", "mlp"],
     ["'no_such_vendor.policies:Wide'", "cannot import", "No module named 'no_such_vendor'"]),
    (["sweep", "--policies", "os:getcwd", "mlp"], ["'os:getcwd'", "not a gxusim.Heuristics"]),
    (["sweep", "--train", "add_relu"], ["['add_relu']", "no parameters", "mlp"]),
    (["sweep", "--resume", "mlp"], ["--resume", "--json"]),
    (["sweep", "--json", "{d}/no-folder/rows.json", "mlp"], ["--json", "no-folder", "does not exist"]),
    (["sweep", "--json", "{d}", "mlp"], ["--json", "is a folder"]),
    (["sweep", "--predict-only", "--jobs", "0", "mlp"], ["--jobs", "at least 1"]),
    (["sweep", "--jobs", "2", "--ray", "mlp"], ["--jobs and --ray"]),
    (["report", "{d}/missing.json"], ["missing.json", "No such file"]),
    (["report", "{d}/notes.json"], ["notes.json", "not JSON", "gxusim sweep --json"]),
    (["report", "{d}/other.json"], ["other.json", "not a gxusim sweep", "gxusim sweep --json"]),
    (["report", "{d}/partial.json"], ["partial.json", "matches_eager"]),
    (["report", "{d}/other.json", "--out", "{d}/a-file"], ["--out", "a-file", "give a folder"]),
    (["frobnicate"], ["'frobnicate'", "'sweep'"]),
    ([*EMULATE, "--spec", "{d}/broken.toml"], ["broken.toml", "not valid TOML"]),
    ([*EMULATE[:-2], "--const", "XBLOCK=abc"], ["--const 'XBLOCK=abc'", "NAME=VALUE"]),
    ([*EMULATE[:-2]], ["no value for ['XBLOCK']", "--const"]),
    ([*EMULATE[:-4], "--arg", "n=abc", *EMULATE[-2:]], ["--arg 'n=abc'", "DTYPE[SHAPE]", "float32"]),
    ([*EMULATE[:-4], *EMULATE[-2:]], ["no value for ['xnumel']", "in_ptr0, out_ptr0, xnumel"]),
    ([*EMULATE, "--arg", "m=1"], ["takes 3 --arg", "got 4"]),
    (["emulate", KERNEL, "--grid", "abc", *EMULATE[4:]], ["--grid", "'abc'", "4,8"]),
    (["emulate", KERNEL, *EMULATE[4:]], ["--grid", "required"]),
    (["emulate", "{d}/missing.py::k", "--grid", "1"], ["missing.py", "does not exist"]),
], ids=lambda v: " ".join(v).replace("{d}/", "").replace(KERNEL, "K") if v[0] in COMMANDS else "")
def test_bad_input_is_one_line_naming_it(argv, named, files, capsys):
    line = _error_line([arg.format(d=files) for arg in argv], capsys)
    command = argv[0] if argv[0] != "frobnicate" else ""
    assert line.startswith(f"gxusim {command}".strip() + ": "), line
    for text in named:
        assert text.format(d=files) in line, line


def test_debug_shows_the_traceback(files):
    with pytest.raises(InputError, match="missing.json"):
        main(["--debug", "report", str(files / "missing.json")])


@pytest.mark.parametrize("name, value, accepted", [
    ("GXUSIM_SPEC", "nonexistent", ["presets: ['gxu'", ".toml path"]),
    ("GXUSIM_CHECKS", "maybe", ["('raise', 'warn', 'off')"]),
])
def test_a_bad_variable_fails_the_import_naming_it(name, value, accepted):
    """Not the first compile, deep in an InductorError: `import gxusim` itself."""
    done = subprocess.run([sys.executable, "-c", "import gxusim"], capture_output=True,
                          text=True, timeout=600, env={**os.environ, name: value})
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert f"{name}={value!r} is not accepted" in last, done.stderr[-2000:]
    for text in accepted:
        assert text in last, last


@pytest.mark.parametrize("started_as", ["module", "console_script"])
def test_a_bad_variable_stops_the_command_in_one_line(started_as, tmp_path):
    """`python -m gxusim`, and the console script pip writes (a file named `gxusim` that
    imports gxusim.cli and calls main)."""
    script = tmp_path / "gxusim"
    script.write_text("from gxusim.cli import main\nraise SystemExit(main())\n")
    start = ["-m", "gxusim"] if started_as == "module" else [str(script)]
    done = subprocess.run([sys.executable, *start, "spec", "show", "gxu"], capture_output=True,
                          text=True, timeout=600, env={**os.environ, "GXUSIM_SPEC": "nonexistent"})
    assert done.returncode == 2, done.stderr[-2000:]
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
    assert "GXUSIM_SPEC='nonexistent' is not accepted" in done.stderr


def test_every_table_variable_is_checked(monkeypatch):
    monkeypatch.setenv("GXUSIM_TIMING", "yes")
    with pytest.raises(environment.SettingError, match="GXUSIM_TIMING='yes'"):
        environment.check()


def test_a_cache_folder_that_cannot_be_made_names_the_variable(files, monkeypatch):
    monkeypatch.setenv("GXUSIM_CACHE_DIR", str(files / "a-file"))
    with pytest.raises(environment.SettingError, match="GXUSIM_CACHE_DIR=.*a-file"):
        cache.cache_dir("autotune")


POLICY = textwrap.dedent("""
    import gxusim

    class Wide(gxusim.compiler.GXUHeuristics):
        name = "wide"
""")


@pytest.fixture
def cwd_policy(tmp_path, monkeypatch):
    """A vendor policy module in the current directory, which is not on `sys.path` (as in
    the `gxusim` console script); the module is forgotten afterwards."""
    (tmp_path / "cwd_vendor_policy.py").write_text(POLICY)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    yield "cwd_vendor_policy:Wide"
    sys.modules.pop("cwd_vendor_policy", None)


def test_a_policy_import_path_is_found_in_the_current_directory(cwd_policy):
    path_before = list(sys.path)
    assert resolve_policy(cwd_policy).name == "wide"
    assert sys.path == path_before


def test_sweep_runs_a_policy_of_the_current_directory_and_says_when_a_size_changes(
        cwd_policy, capsys):
    assert main(["sweep", "mlp", "--predict-only", "--jobs", "1", "--sizes", "1000",
                 "--policies", "gxu", cwd_policy]) == 0
    out, err = capsys.readouterr()
    assert "gxusim sweep: mlp: size 1,000 runs as 960 elements, input (15, 64)" in err
    assert f"{cwd_policy} us" in out and "mlp @960" in out


def test_a_size_below_a_models_smallest_says_what_runs_instead():
    assert sweep.resized(["transformer_block", "mlp"], [1 << 10, "cpu"]) == [
        "transformer_block: size 1,024 runs as 4,096 elements, input (1, 64, 64): the "
        "smallest it takes"]
