"""A kernel's NKI dialect through every entry point: the service records it, a source importing
both is rejected with a recorded status, the trainium backend refuses the current dialect in
one line, the kernel process gets the emulator's NKI packages only, `eval` prints it."""

from __future__ import annotations

import json

import pytest

from accelopt_evo.cli.main import main
from fitness import backends, service as service_mod
from fitness.result import EvalResult
from fitness.sandbox import worker
from fitness.service import Evaluator
from fitness.settings import EvalSettings
from nkibench.registry import load, make_spec

SILU = make_spec("silu", "tiny")
SETTINGS = EvalSettings(backend="simulator", seeds=(0,), heldout_seeds=(), timeout_s=60.0, memory_limit_mb=2048,
                        workers=2)


def _silu_baseline() -> str:
    return load(SILU).baseline_source


def _mixed(source: str) -> str:
    return source.replace("import neuronxcc.nki.isa as nisa\n", "import neuronxcc.nki.isa as nisa\nimport nki.language as nlc\n", 1)


def test_the_service_records_the_dialect_and_rejects_a_mixed_source(tmp_path):
    legacy = _silu_baseline()
    mixed = _mixed(legacy)
    assert mixed != legacy
    with Evaluator(SETTINGS, run_dir=tmp_path) as ev:
        ok, refused = ev.evaluate_many(SILU, [legacy, mixed])
    assert ok.ok and ok.dialect == "legacy", ok.error
    assert refused.status == "rejected" and refused.dialect is None
    assert refused.error.startswith("policy: line ") and "imports both NKI dialects" in refused.error
    assert "\n" not in refused.error
    # the record round-trips, and records written before the field read as undecided
    assert EvalResult.from_dict(json.loads(json.dumps(ok.to_dict()))).dialect == "legacy"
    assert EvalResult.from_dict({"status": "rejected"}).dialect is None and "dialect" not in refused.to_dict()


def test_trainium_refuses_current_dialect_kernels_in_one_line(tmp_path, monkeypatch):
    host = backends.NeuronHost("/opt/sdk/neuronxcc", ("/dev/neuron0",), 1, compiler_version="2.21.18",
                               instance_type="trn1.2xlarge")
    monkeypatch.setattr(service_mod.backends, "probe_neuron", lambda: host)
    spec = make_spec("tensor_add", "tiny")
    current = load(spec).baseline_source
    with Evaluator(SETTINGS.__class__(**{**SETTINGS.__dict__, "backend": "trainium"}), run_dir=tmp_path) as ev:
        result = ev.evaluate(spec, current)
    assert result.status == "compile_error" and result.dialect == "current" and result.backend == "trainium"
    assert result.error == backends.dialect_refusal("trainium", "current", host)
    assert "\n" not in result.error and result.error == (
        "the installed Neuron SDK (neuronx-cc 2.21.18) does not compile current-dialect kernels (import nki)")
    assert (result.sdk_version, result.instance_type) == ("neuronx-cc 2.21.18", "trn1.2xlarge")
    assert backends.dialect_refusal("trainium", "legacy", host) == ""
    assert backends.dialect_refusal("simulator", "current") == ""


def test_the_kernel_process_takes_nki_modules_from_the_emulator_only():
    assert set(worker._emulated_roots("simulator")) == {"neuronxcc", "nki"}
    assert worker._emulated_roots("trainium") == ()


def test_eval_prints_the_dialect(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mixed.py").write_text(_mixed(_silu_baseline()))
    assert main(["eval", "mixed.py", "--problem", "silu", "--shape", "tiny", "--backend", "simulator"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("rejected: policy: line ") and "imports both NKI dialects" in out
    (tmp_path / "legacy.py").write_text(_silu_baseline())
    assert main(["eval", "legacy.py", "--problem", "silu", "--shape", "tiny", "--backend", "simulator",
                 "--set", "evaluation.seeds=[0]", "--set", "evaluation.heldout_seeds=0"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("dialect: legacy (import neuronxcc.nki)\nok: "), out


@pytest.mark.parametrize("argv, needle", [
    (["--kernel", "nope"], "defines no function 'nope' (its functions: kernel)"),
    (["--shape", "huge"], "no shape 'huge'"),
])
def test_eval_flag_errors_are_one_line(argv, needle, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "k.py").write_text(_silu_baseline())
    assert main(["eval", "k.py", "--problem", "silu"] + argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle in err, err
