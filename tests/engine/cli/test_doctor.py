"""`doctor`: what this machine can do, on hosts of every kind (the host is a value here), and
the endpoint check against the local OpenAI-compatible test server."""

from __future__ import annotations

import importlib.util
from importlib.util import find_spec

import pytest

from accelopt_evo.cli import main as cli
from accelopt_evo.cli.doctor import diagnose
from accelopt_evo.run.config import resolve
from fitness import backends
from fitness.backends import NeuronHost

NO_SDK = NeuronHost()
TRN2 = NeuronHost("/opt/neuronxcc", ("/dev/neuron0",), 8, nki="/opt/nki", compiler_version="2.23.1",
                  nki_version="0.6.0", instance_type="trn2.48xlarge", profiler="/opt/bin/neuron-explorer")


def _doctor(monkeypatch, capsys, host, *argv):
    monkeypatch.setattr(backends, "probe_neuron", lambda: host)
    code = cli.main(["doctor", *argv])
    return code, capsys.readouterr().out


def test_a_machine_without_the_sdk_runs_on_the_simulator_for_trn1(monkeypatch, capsys):
    code, out = _doctor(monkeypatch, capsys, NO_SDK)
    assert code == 0
    assert "neuron sdk  none (neither neuronxcc nor nki is importable)" in out
    assert "backend     simulator, target trn1 (shipped parameters, calibrated): auto: no Neuron SDK" in out
    assert "verdict     a run can start" in out and "python      3." in out and "numpy" in out


def test_trainium_requested_without_the_sdk_cannot_start(monkeypatch, capsys):
    code, out = _doctor(monkeypatch, capsys, NO_SDK, "--backend", "trainium")
    assert code == 1
    assert "backend     cannot start: evaluation.backend = trainium, but no Neuron SDK importable" in out


def test_eval_on_trainium_without_the_sdk_is_one_line_and_exit_2(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(backends, "probe_neuron", lambda: NO_SDK)
    kernel = tmp_path / "k.py"
    kernel.write_text("import neuronxcc.nki as nki\n")
    assert cli.main(["eval", str(kernel), "--problem", "silu", "--shape", "small", "--backend", "trainium"]) == 2
    err = capsys.readouterr().err
    assert err == "error: evaluation.backend = trainium, but no Neuron SDK importable (neuronxcc or nki)\n"


@pytest.mark.parametrize("argv,message", [
    (["--backend", "trainium"], "evaluation.backend = trainium, but no Neuron SDK importable (neuronxcc or nki)"),
    (["--set", "evaluation.calibration=missing.json"], "cannot read calibration file 'missing.json'"),
])
def test_a_run_that_cannot_evaluate_here_fails_before_writing_its_folder(monkeypatch, capsys, tmp_path, argv, message):
    monkeypatch.setattr(backends, "probe_neuron", lambda: NO_SDK)
    code = cli.main(["run", "--gens", "1", "--out", str(tmp_path), "--run-id", "r", "--no-progress",
                     "--set", "run.shape=small", *argv])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith(f"error: {message}") and err.count("\n") == 1
    assert not (tmp_path / "r").exists()


def test_a_trn2_host_with_the_current_sdk(monkeypatch, capsys):
    monkeypatch.delenv("NEURON_LOGICAL_NC_CONFIG", raising=False)
    code, out = _doctor(monkeypatch, capsys, TRN2, "--target", "trn2")
    assert code == 0
    assert "neuron sdk  neuronx-cc 2.23.1; nki 0.6.0; NKI dialects it compiles here: current" in out
    assert ("devices     1 (trn2.48xlarge); 8 NeuronCore(s) at logical-core configuration 1 "
            "(runtime default here: 2)") in out
    assert "profiler    /opt/bin/neuron-explorer" in out
    assert "backend     trainium, target trn2: auto: neuronx-cc 2.23.1; nki 0.6.0 and 8 NeuronCore(s)" in out
    # the same host for a trn1 run: the simulator, and why
    code, out = _doctor(monkeypatch, capsys, TRN2)
    assert code == 0 and "this host is trn2 (trn2.48xlarge), but evaluation.target is trn1" in out


def test_an_unanswering_endpoint_stops_a_run_unless_operators_are_offline(llm_server, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-do-not-print")
    cfg = resolve("default", None, [f"llm.base_url={llm_server.url}", "llm.model=m"], {})
    answered = diagnose(cfg, NO_SDK, lambda: "")
    assert f"llm         {llm_server.url} answers" in answered.lines and answered.can_run
    down = diagnose(cfg, NO_SDK, lambda: "no LLM endpoint answers at http://x (llm.base_url): refused")
    assert not down.can_run and down.lines[-1] == "verdict     a run cannot start with this configuration"
    tuning = resolve("default", None, [f"llm.base_url={llm_server.url}", "llm.model=m",
                                       "operators.kind=tuning"], {})
    assert diagnose(tuning, NO_SDK, lambda: "refused").can_run      # offline operators need no endpoint


def test_the_real_endpoint_check_through_the_command(llm_server, monkeypatch, capsys):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-do-not-print")
    code, out = _doctor(monkeypatch, capsys, NO_SDK, "--set", f"llm.base_url={llm_server.url}",
                        "--set", "llm.model=m")
    assert code == 0 and f"{llm_server.url} answers" in out and "sk-do-not-print" not in out


@pytest.mark.parametrize("host", [NO_SDK, TRN2])
def test_every_line_is_labelled(host):
    cfg = resolve("default", None, [], {})
    for line in diagnose(cfg, host, lambda: "").lines:
        assert line[:12].rstrip() in {"python", "packages", "neuron sdk", "devices", "profiler", "backend",
                                      "executor", "llm", "verdict"}, line


def test_the_ray_executor_needs_ray(monkeypatch):
    cfg = resolve("default", None, ["evaluation.executor=ray"], {})
    assert "executor    ray " in "\n".join(diagnose(cfg, NO_SDK, lambda: "").lines)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "ray" else find_spec(name, *a))
    down = diagnose(cfg, NO_SDK, lambda: "")
    assert "executor    ray, but Ray is not installed: pip install -e '.[ray]'" in down.lines and not down.can_run
