"""Reference data: computed once per (problem, seed) in another process, read-only files."""

from __future__ import annotations

import os

import numpy as np
import pytest

from fitness import references
from fitness.references import ReferenceError, ReferenceStore
from nkibench.problem import ProblemSpec
from nkibench.registry import load, make_spec

SPEC = make_spec("silu", "tiny")


def test_inputs_and_expected_outputs_match_the_problem(tmp_path):
    store = ReferenceStore(tmp_path)
    data = store.ensure(SPEC, [0, 42])
    problem = load(SPEC)
    for d in data:
        inputs = [np.load(p) for p in d.inputs]
        expected = [np.load(p) for p in d.expected]
        for a, b in zip(inputs, problem.make_inputs(d.seed)):
            np.testing.assert_array_equal(a, b)
        for a, b in zip(expected, problem.reference(*problem.make_inputs(d.seed))):
            np.testing.assert_array_equal(a, b)
        assert all(oct(os.stat(p).st_mode)[-3:] == "444" for p in d.inputs + d.expected)
    assert not any("seed-42" in path or "seed-0/" in path for d in data for path in d.inputs + d.expected)


def test_computed_once_then_read_back(tmp_path, monkeypatch):
    store = ReferenceStore(tmp_path)
    first = store.ensure(SPEC, [0, 21])
    monkeypatch.setattr(references.subprocess, "run", lambda *a, **k: pytest.fail("recomputed"))
    assert store.ensure(SPEC, [21, 0]) == first[::-1]
    assert len(list(tmp_path.glob("*/seed-*"))) == 2 and not list(tmp_path.glob(".work-*"))


def test_a_broken_reference_is_an_error_of_the_problem(tmp_path):
    bad = ProblemSpec.make("no_such_problem", {"M": 1})
    with pytest.raises(ReferenceError, match="no_such_problem"):
        ReferenceStore(tmp_path).ensure(bad, [0])
