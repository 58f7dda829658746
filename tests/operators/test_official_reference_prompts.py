"""Official NKIBench problems show the LLM their whole reference module: `forward`, the input
generation and the transforms (their kernels are compiler-generated and name none of it)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from llm_support import baseline_parent
from nkibench.official import SuiteError, read_summary
from nkibench.registry import load, make_spec
from operators.base import Context
from operators.llm import prompts


def test_every_official_planner_prompt_shows_its_reference_module(nkibench_dir):
    names = sorted(read_summary(nkibench_dir))
    assert len(names) == 14
    for name in names:
        problem = load(make_spec(name, suite_dir=str(nkibench_dir)))
        ctx = Context(name, problem.reference_source, 1, np.random.default_rng(0),
                      baseline_source=problem.baseline_source)
        _, user = prompts.planner_messages(baseline_parent(), ctx)
        text = user["content"]
        assert "def forward(" in text and "def get_inputs(" in text, name
        assert problem.reference_path.read_text().strip() in text, name


def test_an_unreadable_reference_module_is_one_line(nkibench_dir, tmp_path):
    name = sorted(read_summary(nkibench_dir))[0]
    problem = load(make_spec(name, suite_dir=str(nkibench_dir)))
    moved = dataclasses.replace(problem, reference_path=tmp_path / "gone.py")
    with pytest.raises(SuiteError, match="gone.py: cannot be read"):
        moved.reference_source
