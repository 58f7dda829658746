"""`problems` listing rows and table."""

from __future__ import annotations

import json

import pytest

from accelopt_evo.cli.listing import format_problem_table, problem_rows
from nkibench.registry import DIALECT_NAMES, baseline_dialects, builtin_names

KEYS = {"name", "params", "baseline_path", "bound", "peak_latency_ms", "baseline_latency_ms", "percent_of_peak",
        "paper_baseline_percent", "tolerance", "target"}


def test_builtin_rows():
    all_rows = problem_rows()
    assert sorted({(r["name"], r["dialect"]) for r in all_rows}) == sorted(
        (n, DIALECT_NAMES[d]) for n in builtin_names() for d in baseline_dialects(n))
    rows = problem_rows(dialects=("legacy",))
    assert [r["name"] for r in rows] == builtin_names()
    for r in all_rows:
        assert KEYS <= set(r)
        assert r["peak_latency_ms"] > 0 and r["bound"] in ("mm", "vec", "memory")
        folder = "baselines/nki" if r["dialect"] == "nki" else "baselines"
        assert r["baseline_path"].endswith(f"{folder}/{r['name']}.py")
        assert r["baseline_latency_ms"] is None and r["percent_of_peak"] is None
    by_name = {r["name"]: r for r in rows}
    assert by_name["matmul"]["params"] == {"M": 4096, "N": 12288, "K": 5120}
    assert by_name["matmul"]["peak_latency_ms"] == pytest.approx(21.701, rel=1e-3)
    assert by_name["rope_single_freq_apply"]["bound"] == "memory"
    json.dumps(rows)  # `problems --json` prints them as they are
    table = format_problem_table(rows)
    assert all(name in table for name in builtin_names())


def test_official_rows_carry_hardware_measurements(nkibench_dir):
    rows = {r["name"]: r for r in problem_rows(str(nkibench_dir))}
    assert sorted(rows) == builtin_names()
    assert rows["swiglu"]["measured_baseline_ms"] == pytest.approx(4.2218, rel=1e-3)
    assert rows["swiglu"]["peak_latency_ms"] == pytest.approx(3.255, rel=1e-3)
    assert rows["swiglu"]["measured_percent_of_peak"] == pytest.approx(77.1, abs=0.1)  # the paper: 77
    assert "trn1 ms" in format_problem_table(list(rows.values()))


def test_unknown_operator_has_unknown_peak(tmp_path, make_suite):
    (row,) = problem_rows(str(make_suite(tmp_path)))
    assert row["name"] == "scale" and row["bound"] is None and row["peak_latency_ms"] is None
    assert row["measured_baseline_ms"] is None and row["measured_percent_of_peak"] is None
    line = format_problem_table([row]).splitlines()[1]
    assert line.split()[:4] == ["scale", "legacy", "M=4,N=8", "?"]


def test_simulated_baseline_of_a_small_shape():
    from accelopt_evo.cli.listing import simulate_baseline
    from nkibench.registry import load, make_spec

    small = simulate_baseline(load(make_spec("matmul", "small")))
    larger = simulate_baseline(load(make_spec("matmul", "small", {"M": 1024})))
    assert 0 < small < larger  # twice the rows cost more time


@pytest.mark.slow
def test_simulated_rows_at_paper_shapes():
    # the legacy baselines (the current dialect's take the same path; both dialects' baselines
    # are held to their roofline bound in tests/fitness/measures/test_roofline_bound.py)
    rows = problem_rows(simulate=True, dialects=("legacy",))
    assert rows and {r["dialect"] for r in rows} == {"legacy"}
    for r in rows:
        assert r["baseline_latency_ms"] > 0
        assert 0 < r["percent_of_peak"] <= 100, r  # a baseline cannot beat the roofline
    assert "% of peak" in format_problem_table(rows)


def test_every_case_of_a_suite_is_listed(tmp_path, make_suite):
    suite = make_suite(tmp_path)
    summary = json.loads((suite / "summary.json").read_text())
    case = summary["scale"]["cases"]["0"]
    summary["scale"]["cases"]["1"] = {**case, "values": {"M": 2, "N": 8}}
    (suite / "summary.json").write_text(json.dumps(summary))
    assert [r["params"] for r in problem_rows(str(suite))] == [{"M": 4, "N": 8}, {"M": 2, "N": 8}]


def test_the_table_names_the_sdk_example_problems_apart(capsys):
    from accelopt_evo.cli.main import main
    from nkibench.registry import example_names

    assert main(["problems"]) == 0
    out = capsys.readouterr().out
    last = out.strip().splitlines()[-1]
    assert last.startswith("NKI SDK example problems (current nki dialect") and "fused_mamba" in last
    assert all(name in last for name in example_names()) and not set(example_names()) & set(builtin_names())
