"""benchmarks/engine_activity.py: trn1's engine-active fractions turned into milliseconds beside
the model's busy time, with the best demo-run profile of the same case."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
NKIBENCH = REPO.parent / "shared" / "nkibench"


def bench():
    spec = importlib.util.spec_from_file_location("engine_activity", REPO / "benchmarks" / "engine_activity.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_engine_milliseconds_are_the_active_fraction_times_the_latency():
    ms = bench().engine_ms({"scalar_engine_active_time_percent": 0.25, "vector_engine_active_time_percent": 0.5},
                           4.0)
    assert ms == {"ScalarE": 1.0, "VectorE": 2.0, "GpSimdE": 0.0}


def test_one_measured_case_beside_the_model_and_its_demo_run(tmp_path, trace_cache):
    source = NKIBENCH / "trn1_measurements.json"
    if not source.is_file():
        pytest.skip("../shared/nkibench is absent")
    data = json.loads(source.read_text())
    name = next(n for n, c in data["cases"].items() if c["problem"] == "rmsnorm_matmul")
    path = tmp_path / "one.json"
    path.write_text(json.dumps({**data, "cases": {name: data["cases"][name]}}))
    module = bench()
    [row] = module.rows(path, str(NKIBENCH), str(trace_cache))
    case = data["cases"][name]
    measured = case["baseline"]
    assert row["engine_ms"]["VectorE"] == pytest.approx(
        measured["vector_engine_active_time_percent"] * measured["latency"])
    demo = case["accelopt_best_demo_run"]["profile"]
    assert row["demo_ms"] == demo["latency"]
    assert row["demo_engine_ms"]["ScalarE"] == pytest.approx(demo["scalar_engine_active_time_percent"] * demo["latency"])
    # the model's side is model-check's busy time: rmsnorm_matmul keeps ScalarE and VectorE busy
    assert row["model_ms"]["ScalarE"] > 0 and row["model_ms"]["VectorE"] > 0
    assert row["model_ms"]["ScalarE"] < row["predicted_ms"]
    assert module.main(["--measurements", str(path), "--suite-dir", str(NKIBENCH),
                        "--trace-cache", str(trace_cache), "--json", str(tmp_path / "out.json")]) == 0
    assert json.loads((tmp_path / "out.json").read_text())[0]["name"] == row["name"]
