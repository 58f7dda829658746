"""Every error a user can cause: one line on stderr, exit status 2, no traceback."""

import subprocess
import sys

import pytest

from accelopt_evo.cli.main import main


@pytest.mark.parametrize("argv, needle", [
    ([], "COMMAND"),
    (["fly"], "invalid choice"),
    (["run", "--bogus"], "unrecognized arguments: --bogus"),
    (["run", "--gens", "x"], "--gens"),
    (["run", "--problem", "nope"], "unknown problem 'nope'"),
    (["run", "--config", "missing.toml"], "cannot read config file 'missing.toml'"),
    (["run", "--set", "population.size=big"], "population.size"),
    (["run", "--set", "population.sise=3"], "population.sise"),
    (["run", "--set", "evaluation.workers=0"], "evaluation.workers"),
    (["run", "--preset", "nope"], "unknown preset"),
    (["run", "--set", "run.shape=huge"], "no shape 'huge'"),
    (["run", "--set", "shapes.silu.Q=3"], "no shape parameter 'Q'"),
    (["resume", "no/such/run"], "does not exist"),
    (["eval", "missing_kernel.py", "--problem", "silu"], "cannot read kernel file"),
    (["eval", "k.py"], "--problem"),
    (["report", "no/such/run"], "does not exist"),
    (["model-check", "--measurements", "nope.json"], "does not exist"),
])
def test_user_errors_are_one_line_and_exit_2(argv, needle, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle in err, err


def test_invalid_config_file(tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text("[population]\nsize = 'many'\n")
    assert main(["run", "--config", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "population.size" in err and err.count("\n") == 1


def test_a_folder_without_config_is_not_a_run(tmp_path, capsys):
    assert main(["resume", str(tmp_path)]) == 2
    assert "not a run folder" in capsys.readouterr().err


def test_no_traceback_through_the_module_entry_point(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "accelopt_evo", "run", "--set", "x.y=1"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("flag", [[], ["--no-progress"]])
def test_progress_bars_only_when_wanted(flag, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["run", "--gens", "1", "--run-id", "p", *flag, "--set", "run.shape=tiny", "--set", "population.size=3",
                 "--set", "population.offspring=3", "--set", "evaluation.seeds=[0]",
                 "--set", "evaluation.heldout_seeds=0", "--set", "run.report=false"]) == 0
    out = capsys.readouterr()
    assert ("kernel" in out.err) == (not flag), out.err   # the evaluation bars' unit
    assert "gen   1 silu: best speedup" in out.out + out.err
