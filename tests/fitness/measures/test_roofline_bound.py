"""No honest kernel is estimated below its problem's roofline bound (`fitness.measures.roofline.lower_bound`,
every term of the roofline: at most 100% of peak):
the baselines of every problem in each of their dialects on every target that takes it, and the
honest kernels of the evaluation tests. A kernel below it would be recorded as a model error, so
this is what keeps that status for mispriced kernels only. (The paper-shape kernels, official
ones and Mamba variants included, are checked by `benchmarks/latency_snapshot.py`.)"""

from __future__ import annotations

import pytest

from fitness.measures.roofline import lower_bound
from fitness.simulator import placeholders, run_kernel
from fitness.simulator.dialect import detect
from fitness.simulator.perf import estimate
from fitness.simulator.perf.hardware import hardware
from nkibench.registry import baseline_dialects, builtin_names, example_names, load, make_spec, shape_names

import adversarial_prices as adv
import eval_kernels

TARGETS = ("trn1", "trn2", "trn3")


def _shape(name: str) -> str:
    """A shape large enough for the bound to matter, small enough for a test: the problem's
    "small" one, else its "paper" one (the SDK examples run at the example's own, small, size)."""
    return "small" if "small" in shape_names(name) else "paper"


def _cases() -> list[tuple[str, object, str]]:
    """(label, spec, source) of every kernel checked."""
    out = []
    for name in builtin_names() + example_names():
        for dialect in baseline_dialects(name):
            spec = make_spec(name, _shape(name), dialect=dialect)
            out.append((f"{name}/{dialect}", spec, load(spec).baseline_source))
    silu = make_spec("silu", "tiny")
    out.append(("silu/eval_kernels.SILU", silu, eval_kernels.SILU))
    split = make_spec("split_columns", "paper")
    for what in ("D2D_STRIDED", "D2D_STRIDED_LEGACY"):
        out.append((f"split_columns/{what}", split, getattr(adv, what)))
    out.append(("transpose2d/D2D_TRANSPOSING", make_spec("transpose2d", "small"), adv.D2D_TRANSPOSING))
    return out


CASES = _cases()


@pytest.mark.parametrize("label,spec,source", CASES, ids=[c[0] for c in CASES])
def test_no_kernel_is_estimated_below_its_roofline_bound(label, spec, source):
    problem = load(spec)
    args = placeholders(problem.to_kernel_inputs(problem.make_inputs(0)))
    trace = run_kernel(source, args, shape_only=True).trace
    dialect = detect(source)
    checked = 0
    for target in TARGETS:
        if dialect not in hardware(target).dialects:
            continue
        est = estimate(trace, target)
        own = est.profile["hbm_read_bytes"] + est.profile["hbm_write_bytes"]
        bound = lower_bound(problem.counts, own, target)
        assert est.latency_ms >= bound.latency_ms, (target, est.latency_ms, bound)
        checked += 1
    assert checked
