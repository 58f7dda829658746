"""Calibrating the performance model on a user's measurements: `calibrate` fits with the
project's procedure (a quick fit on three measured Mamba variants checks the wiring), writes a
calibration file, `evaluation.calibration` (a path, or the per-user file with "auto") makes the
simulator use it, figures made with it say so, and `model-check` checks it. The slow test
refits the 14 trn1 baselines and compares with the shipped parameters."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from accelopt_evo.cli import main as cli
from fitness.service import Evaluator
from fitness.settings import EvalSettings
from fitness.simulator.perf import calibrate, calibrated, calibration
from fitness.simulator.perf.hardware import hardware
from fitness.simulator.perf.params import DOCUMENTED
from nkibench.registry import load, make_spec

SHARED = Path(__file__).resolve().parents[2].parent / "shared"
VARIANTS = SHARED / "trn1-variants"
NKIBENCH = SHARED / "nkibench"
NKI_SILU = Path(__file__).resolve().parents[2] / "nkibench" / "baselines" / "nki" / "silu.py"


@pytest.fixture(scope="module")
def measured(tmp_path_factory) -> Path:
    """Three measured Mamba variants at sequence 512 (../shared/trn1-variants), kernels by path."""
    if not (VARIANTS / "measurements.json").is_file() or not (NKIBENCH / "summary.json").is_file():
        pytest.skip("the trn1 variants or the NKIBench folder are absent from ../shared")
    data = json.loads((VARIANTS / "measurements.json").read_text())
    points = [{**p, "kernel": str(VARIANTS / p["kernel"])} for p in data["points"]
              if p["shape"]["M"] == 512 and p["kernel"] != "mamba_v3.py"]
    path = tmp_path_factory.mktemp("measured") / "measurements.json"
    path.write_text(json.dumps({"target": "trn1", "points": points}))
    return path


@pytest.fixture(scope="module")
def fitted(measured, tmp_path_factory, trace_cache) -> Path:
    out = tmp_path_factory.mktemp("cal") / "cal-trn2.json"
    code = cli.main(["calibrate", "--target", "trn2", "--measurements", str(measured), "--suite-dir", str(NKIBENCH),
                     "--out", str(out), "--quick", "--trace-cache", str(trace_cache)])
    assert code == 0
    return out


def test_latencies_from_forked_workers_are_the_serial_ones(measured):
    """The procedure schedules the cases in worker processes; its figures must not change."""
    hw = hardware("trn1")
    data = calibrate.load([str(measured)], str(NKIBENCH), None, hw, lambda s: None)
    serial = calibrate.serial_latencies(hw)
    with calibrate.parallel_latencies(data, hw, 2) as parallel:
        for params in (DOCUMENTED, DOCUMENTED.replace(max_buffers=2, semaphore_ns=150.0)):
            for cases in (data, data[1:], data[::-1]):
                assert parallel(cases, params) == serial(cases, params)
    assert calibrate._FORKED is None


def test_calibrate_writes_a_calibration_file_of_the_fitted_parameters(fitted, measured):
    cal = calibration.read(fitted)
    assert cal.target == "trn2" and set(cal.params) == set(calibrate.FITTED)
    for name, (lo, hi) in calibrate.GLUE_RANGES.items():
        assert lo <= cal.params[name] <= hi
    assert len(cal.trained_on) == 3 and cal.folds == {}     # one family: nothing to hold out
    assert cal.summary["figures"] == "in-sample" and cal.sources == (str(measured),)
    assert cal.label == "user-calibrated (cal-trn2.json)"


def test_the_simulator_uses_a_calibration_and_says_so(tmp_path, capsys):
    shipped = calibrate.fitted_values(DOCUMENTED.replace(**calibrated.TRN1))
    # the shipped trn1 values with a launch overhead 100 us longer: every latency grows by 0.1 ms
    slow = calibration.write(tmp_path / "slow.json", calibration.Calibration(
        "trn1", {**shipped, "launch_us": shipped["launch_us"] + 100.0}))
    spec = make_spec("silu", "small")
    source = load(spec).baseline_source
    latencies, labels = [], []
    for setting in ("shipped", slow.path):
        with Evaluator(EvalSettings(target="trn1", calibration=setting, workers=1),
                       run_dir=tmp_path / "run") as ev:   # one run folder: one cache for both
            result = ev.evaluate(spec, source)
        assert result.ok, result.error
        latencies.append(result.latency_ms)
        labels.append(result.calibration)
    assert latencies[1] - latencies[0] == pytest.approx(0.1, rel=1e-6)      # not served from the other's cache
    assert labels == ["", "user-calibrated (slow.json)"]
    assert "user-calibrated (slow.json)" in result.profile["bottleneck"]
    kernel = tmp_path / "k.py"
    kernel.write_text(source)
    assert cli.main(["eval", str(kernel), "--problem", "silu", "--shape", "small",
                     "--set", f"evaluation.calibration={slow.path}"]) == 0
    assert "(simulated estimate for trn1, user-calibrated (slow.json))" in capsys.readouterr().out


def test_auto_takes_the_per_user_file_of_the_target(fitted, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    assert calibration.default_path("trn2") == tmp_path / "accelopt-evo" / "calibration-trn2.json"
    assert calibration.resolve("auto", "trn2") is None          # none there yet: the shipped parameters
    calibration.write(calibration.default_path("trn2"), calibration.read(fitted))
    assert calibration.resolve("auto", "trn2").label == "user-calibrated (calibration-trn2.json)"
    assert calibration.resolve("auto", "trn1") is None          # another target's file is not used
    assert calibration.resolve("shipped", "trn2") is None
    spec = make_spec("silu", "small", dialect="current")
    with Evaluator(EvalSettings(target="trn2", workers=1)) as ev:
        result = ev.evaluate(spec, NKI_SILU.read_text())
    assert result.ok and result.calibration == "user-calibrated (calibration-trn2.json)"


@pytest.mark.parametrize("content, needle", [
    (None, "cannot read calibration file"),
    ("{", "is not JSON"),
    ('{"schema": 9, "target": "trn1", "params": {"launch_us": 1}}', "has schema 9"),
    ('{"schema": 1, "target": "trn1", "params": {"warp_speed": 1}}', "unknown model parameter 'warp_speed'"),
    ('{"schema": 1, "target": "trn2", "params": {"launch_us": 1}}', "is for trn2, not for the run's target trn1"),
])
def test_an_unusable_calibration_is_one_line_and_exit_2(content, needle, tmp_path, capsys):
    path = tmp_path / "cal.json"
    if content is not None:
        path.write_text(content)
    kernel = tmp_path / "k.py"
    kernel.write_text(load(make_spec("silu", "small")).baseline_source)
    assert cli.main(["eval", str(kernel), "--problem", "silu", "--shape", "small",
                     "--set", f"evaluation.calibration={path}"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle in err, err


def test_model_check_reports_a_user_calibration(fitted, measured, capsys):
    assert cli.main(["model-check", "--measurements", str(measured), "--suite-dir", str(NKIBENCH),
                     "--target", "trn2", "--calibration", str(fitted), "--trace-cache",
                     str(fitted.parent / "traces")]) == 0
    out = capsys.readouterr().out
    assert "trn2 estimate vs measurement (in-sample figures, 3 cases, user-calibrated (cal-trn2.json))" in out
    assert cli.main(["model-check", "--measurements", str(measured), "--calibration", str(fitted)]) == 2
    assert "is for trn2, not --target trn1" in capsys.readouterr().err


def test_calibrate_refuses_missing_files_in_one_line(capsys):
    assert cli.main(["calibrate", "--target", "trn1", "--measurements", "no/such.json"]) == 2
    assert capsys.readouterr().err == "error: measurements file 'no/such.json' does not exist\n"


@pytest.mark.slow
def test_the_shipped_trn1_parameters_are_where_the_fit_settles(trace_cache):
    """The fit's steps 2 and 3 (one round, its last and finest sweep) started from the shipped
    parameters on all 14 baselines leave each within that sweep's step (10%), and step 1 picks
    the shipped hoisting budget: the shipped values are a fixed point of the procedure. (The
    whole procedure from the documented values takes 4-8 minutes on two cores; `python -m
    fitness.simulator.perf.calibrate` runs it.) Reads calibrated.py, so a recalibration moves
    the expectation with it."""
    measurements = NKIBENCH / "trn1_measurements.json"
    if not measurements.is_file():
        pytest.skip("../shared/nkibench/trn1_measurements.json is absent")
    shipped = DOCUMENTED.replace(**calibrated.TRN1)
    result = calibrate.run_fit([str(measurements)], "trn1", None, str(trace_cache), loo=False,
                               sweeps=calibrate.SWEEPS[-1:], rounds=1, start=shipped)
    assert calibrate.fit_budget(result.data) == calibrated.TRN1["hoist_budget_fraction"]
    refit = calibrate.fitted_values(result.full)
    for name, value in calibrated.TRN1.items():
        if name in calibrate.GLUE_CHOICES or name == "hoist_budget_fraction":
            assert refit[name] == value, name
        else:
            assert refit[name] == pytest.approx(value, rel=0.1), name
