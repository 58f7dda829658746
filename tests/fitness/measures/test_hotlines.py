"""Hot lines (fitness/measures/hotlines.py): per-line engine time, its record in the profile,
and the simulator's, read from the performance model's schedule without changing the estimate."""

from __future__ import annotations

import pytest

from fitness.backends.simulator import SimulatorRunner
from fitness.measures import hotlines
from fitness.measures.hotlines import HotLine
from fitness.simulator.perf import estimate
from nkibench.registry import load, make_spec


def test_a_lines_time_is_the_union_of_its_intervals_per_engine():
    rows = [(3, "DMA", 0, 4), (3, "DMA", 1, 5), (3, "DMA", 7, 8), (5, "VectorE", 0, 2), (5, "VectorE", 2, 3),
            (5, "ScalarE", 0, 1), (0, "VectorE", 0, 100), (6, "VectorE", 4, 4)]
    assert hotlines.line_times(rows) == {(3, "DMA"): 6, (5, "VectorE"): 3, (5, "ScalarE"): 1}
    top = hotlines.top(hotlines.line_times(rows), latency_ns=10, n=2)
    assert top == [HotLine(3, "DMA", 6, 0.6), HotLine(5, "VectorE", 3, 0.3)]
    assert hotlines.top({(1, "DMA"): 5}, latency_ns=0) == []


def test_the_profile_record_round_trips_and_is_checked():
    lines = [HotLine(12, "VectorE", 1234.56, 0.41234), HotLine(3, "DMA", 10.0, 0.0)]
    text = hotlines.encode(lines)
    assert isinstance(text, str) and hotlines.decode(text) == [HotLine(12, "VectorE", 1234.6, 0.41234),
                                                               HotLine(3, "DMA", 10.0, 0.0)]
    assert hotlines.decode("") == [] and hotlines.decode(None) == []
    for bad in ("{", "{}", "[[0, \"DMA\", 1, 0.1]]", "[[2, \"DMA\", -1, 0.1]]", "[[2, 3, 1, 0.1]]", "[[2, \"DMA\", 1]]"):
        with pytest.raises(ValueError, match="^hot_lines: "):
            hotlines.decode(bad)


def test_the_text_form_quotes_each_line_and_names_the_figures():
    source = "def kernel(x):\n    y = nl.load(x)\n    return y\n"
    text = hotlines.format_lines([HotLine(2, "DMA", 2.5e5, 0.5), HotLine(9, "ScalarE", 800.0, 0.01)], source,
                                 "simulated trn1")
    assert text == ["hot lines (simulated trn1): share of the kernel's latency each line keeps an engine busy",
                    "line 2, DMA: 50.0% (0.250 ms): `y = nl.load(x)`", "line 9, ScalarE: 1.0% (0.8 us)"]
    assert hotlines.label_of({"bottleneck": "DMA-bound (measured on trn2 hardware): ..."}) == "measured on trn2 hardware"
    assert hotlines.label_of({"bottleneck": "Latency-bound (simulated trn2, uncalibrated: dependency stalls"
                                            " and fixed overheads)"}) == "simulated trn2, uncalibrated"
    assert hotlines.device_engine("Vector") == "VectorE" and hotlines.device_engine("tensor") == "TensorE"


def test_the_simulators_hot_lines_come_from_its_schedule_and_change_no_figure():
    problem = load(make_spec("silu", "small"))
    args = problem.to_kernel_inputs(problem.make_inputs(0))
    runner = SimulatorRunner("trn1")
    trace = runner.trace(problem.baseline_source, args)
    latency, profile = runner.measure(problem.baseline_source, args, trace)
    plain = estimate(trace, "trn1")
    assert latency == plain.latency_ms and {k: v for k, v in profile.items() if k not in ("bottleneck", "hot_lines")} \
        == plain.profile
    hot = hotlines.decode(profile["hot_lines"])
    code = problem.baseline_source.splitlines()
    assert 0 < len(hot) <= hotlines.TOP and hot == sorted(hot, key=lambda h: -h.time_ns)
    assert all(0 < h.share <= 1 for h in hot)
    by_engine = {}
    for h in hot:
        by_engine.setdefault(h.engine, []).append(h)
    # a compute engine runs one instruction at a time: its lines' shares add up to its activity at most
    assert sum(h.share for h in by_engine["VectorE"]) <= profile["vector_engine_active_time_percent"] + 1e-4   # shares are kept to 5 digits
    assert any("nl.load" in code[h.line - 1] for h in by_engine["DMA"])
    assert any("activation" in code[h.line - 1] for h in by_engine["ScalarE"])
