"""Acceptance (offline): the LLM prompt for a child of the official NKIBench silu baseline names the
child's hottest source lines with their time shares, from the simulator's schedule, in the text the
device profile gives too (tests/fitness/test_explorer_parquet.py has the device side)."""

from __future__ import annotations

import numpy as np

from fitness.backends.simulator import SimulatorRunner
from fitness.measures import hotlines
from nkibench.registry import load, make_spec
from operators.base import Context, Parent
from operators.llm import prompts
from operators.rewrites.fuse import fuse_activation


def test_acceptance_the_planner_prompt_names_the_hot_lines_of_an_official_silu_child(nkibench_dir):
    problem = load(make_spec("silu", suite_dir=str(nkibench_dir)))
    child = next(a for a in fuse_activation(problem.baseline_source) if "activation(silu)" in a.note).source
    runner = SimulatorRunner("trn1")
    args = problem.to_kernel_inputs(problem.make_inputs(0))
    latency, profile = runner.measure(child, args, runner.trace(child, args))
    ctx = Context("silu", problem.reference_source, 1, np.random.default_rng(0), baseline_source=problem.baseline_source)
    _, user = prompts.planner_messages(Parent("child", child, 1.2, latency, 50.0, profile), ctx)
    text = user["content"]

    hot = hotlines.decode(profile["hot_lines"])
    code = child.splitlines()
    assert "- hot lines (simulated trn1): share of the kernel's latency each line keeps an engine busy:" in text
    for h in hot:   # every hot line, with its share, time and code, in the order of its time
        assert f"  - line {h.line}, {h.engine}: {100 * h.share:.1f}% (" in text
        assert code[h.line - 1].strip()[:60] in text
    assert [h.engine for h in hot[:2]] == ["DMA", "DMA"]       # the silu child moves its data: loads, stores
    assert "nl.load(" in code[hot[0].line - 1] and "nl.store(" in code[hot[1].line - 1]
    assert any(h.engine == "ScalarE" and "nisa.activation(op=nl.silu" in code[h.line - 1] for h in hot)
    assert text.index("- hot lines (") > text.index("- dma_bandwidth_utilization_percent")
