"""Held-out input families: every built-in baseline is right on every family of its problem
(the families are valid for the math), and a family really leaves the standard distribution."""

from __future__ import annotations

import numpy as np
import pytest

from fitness.correctness.gate import check_outputs
from fitness.simulator import run_kernel
from nkibench import families
from nkibench.registry import builtin_names, load, make_spec


@pytest.mark.parametrize("name", builtin_names())
def test_each_baseline_is_right_on_every_family(name):
    problem = load(make_spec(name, "small"))
    assert len(problem.families) >= 2, "each problem names at least two held-out families"
    for family in problem.family_names():
        inputs = problem.inputs(1234, family)
        with np.errstate(over="ignore"):   # exp(-x) overflows to inf for x << 0: silu is still -0
            expected = problem.reference(*inputs)
        assert all(np.isfinite(e).all() for e in expected), f"{family}: the reference is not finite"
        run = run_kernel(problem.baseline_source, problem.to_kernel_inputs(inputs))
        outs = problem.from_kernel_outputs(run.outputs, expected)
        failure = check_outputs(outs, expected, problem.tolerance, f"{name} {family}")
        assert failure is None, failure


def test_families_change_the_inputs_and_keep_their_layout():
    problem = load(make_spec("silu", "tiny"))
    standard = problem.inputs(7)
    for family in problem.families:
        drawn = problem.inputs(7, family.name)
        assert drawn[0].shape == standard[0].shape and drawn[0].dtype == standard[0].dtype
        assert not np.array_equal(drawn[0], standard[0])
        np.testing.assert_array_equal(drawn[0], problem.inputs(7, family.name)[0])   # deterministic
    assert np.abs(problem.inputs(7, "large")[0]).max() > 8 * np.abs(standard[0]).max()
    with pytest.raises(ValueError, match="no input family 'bogus'"):
        problem.inputs(7, "bogus")


def test_scalars_pass_through_a_family_unchanged():
    fam = families.scaled("big", [10.0, 10.0], "test")
    out = families.apply(fam, 3, [np.ones(4, np.float32), 1e-5, np.ones(2, np.float32)])
    assert out[1] == 1e-5 and type(out[1]) is float
    np.testing.assert_array_equal(out[0], np.full(4, 10, np.float32))
    with pytest.raises(ValueError, match="changed the number, shapes or dtypes"):
        families.apply(families.Family("bad", "", lambda rng, xs: [x[:1] for x in xs]), 3, [np.ones(4, np.float32)])
