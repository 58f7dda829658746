"""The trainium backend's profile against the fake toolchain: the counters of fitness/measures/counters.py
under the simulator's names (the profiler's other summary fields left out), the simulator's
bottleneck line derived from them and labelled as measured, and the series' figures."""

from __future__ import annotations

import pytest

from fitness.backends import trainium
from fitness.measures.counters import NAMES
from nkibench.registry import load, make_spec
from operators.base import Parent
from operators.llm import prompts

SERIES = {"min_ms", "max_ms", "rel_diffs", "series_spreads", "device_core", "sdk_path"}
NOISE = {"total_time", "total_exec_time", "total_active_time", "mfu_estimated_percent", "vector_engine_active_time",
         "dma_active_time"}


@pytest.mark.parametrize("dialect,target,versions", [("", "trn1", {"compiler": "2.21.18"}),
                                                     ("current", "trn2", {"compiler": "2.21.18", "nki": "0.6.0"})])
def test_the_measured_profile_is_the_curated_counters_and_a_measured_bottleneck(
        tmp_path, monkeypatch, fake_toolchain, dialect, target, versions):
    chain = fake_toolchain(**versions)
    problem = load(make_spec("silu", "small", dialect=dialect))
    args = problem.to_kernel_inputs(problem.make_inputs(0))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    for k, v in trainium.core_env(0, target).items():
        monkeypatch.setenv(k, v)
    runner = trainium.TrainiumRunner(target, {})
    runner.run(problem.baseline_source, args)
    chain.set_latencies([1.0])
    latency, profile = runner.measure(problem.baseline_source, args, None)

    # Neuron Explorer (the current path's profiler) also gives its Parquet tables' schema version;
    # the fake kernel ran no instructions there, so it has no hot lines (test_explorer_parquet.py)
    tables = {"profile_schema_version"} if dialect == "current" else set()
    assert set(profile) == set(NAMES) | SERIES | {"bottleneck", "target"} | tables and not NOISE & set(profile)
    assert [k for k in profile if k in NAMES] == list(NAMES)          # the declared order
    assert profile["latency_ms"] == latency == pytest.approx(1.0) and profile["target"] == target
    assert profile["vector_engine_active_time_percent"] == 0.42 and profile["dma_active_time_percent"] == 0.63
    assert profile["mm_arithmetic_intensity"] == 0.0 and profile["hfu_estimated_percent"] == 0.0
    assert profile["bottleneck"] == (f"Latency-bound (measured on {target} hardware: dependency stalls and fixed "
                                     f"overheads): busiest is VectorE at 42%, then ScalarE 11%")

    lines = prompts.format_profile(Parent("k", problem.baseline_source, 1.0, latency, None, profile)).splitlines()
    assert lines[1] == f"- bottleneck: {profile['bottleneck']}"
    assert [line.split(":")[0][2:] for line in lines[2:]] == list(NAMES)
    assert "- vector_engine_active_time_percent: 42.0%" in lines and "- hbm_read_bytes: 1,048,576 bytes" in lines
