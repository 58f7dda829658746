"""MixedOperators dispatch and the operators.kind choice."""

from __future__ import annotations

import numpy as np
import pytest

from llm_support import baseline_parent, context
from operators.base import CROSSOVER, MUTATION, Child, Request
from operators.llm import MixedOperators, resolve_kind


class Recorder:
    """A stand-in operator set that tags its children with its name."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.seen: list[int] = []
        self.repaired: list[str] = []

    def vary(self, requests, ctx):
        self.seen.append(len(requests))
        return [[Child(f"# {self.name}", f"{self.name}_mutation", tuple(p.id for p in r.parents))] for r in requests]

    def repair(self, failed, ctx):
        self.repaired.extend(c.operator for c, _ in failed)
        return [Child(f"# fixed by {self.name}", f"{self.name}_repair", c.parent_ids) for c, _ in failed]

    def summarize(self, pairs, ctx):
        return [f"{self.name} rationale" for _ in pairs]

    def stop_reason(self):
        return None

    def close(self):
        pass


def requests(n):
    p = baseline_parent()
    return [Request(MUTATION if i % 2 else CROSSOVER, (p, p)) for i in range(n)]


def test_each_request_goes_to_one_side_by_the_context_rng_and_order_is_kept():
    llm, tune = Recorder("llm"), Recorder("tune")
    mixed = MixedOperators(llm, tune, 0.5)
    out = mixed.vary(requests(200), context(rng=np.random.default_rng(7)))
    expected = np.random.default_rng(7).random(200) < 0.5
    assert [cs[0].operator.startswith("llm") for cs in out] == list(expected)
    assert 60 < sum(expected) < 140 and llm.seen == [int(sum(expected))]


@pytest.mark.parametrize("fraction, side", [(1.0, "llm"), (0.0, "tune")])
def test_pure_fractions_do_not_touch_the_rng(fraction, side):
    rng = np.random.default_rng(3)
    state = rng.bit_generator.state
    out = MixedOperators(Recorder("llm"), Recorder("tune"), fraction).vary(requests(5), context(rng=rng))
    assert all(cs[0].operator.startswith(side) for cs in out)
    assert rng.bit_generator.state == state


def test_repairs_go_back_to_the_kind_that_made_the_child_and_rationales_to_the_llm():
    llm, tune = Recorder("llm"), Recorder("tune")
    mixed = MixedOperators(llm, tune, 0.5)
    failed = [(Child("a", "llm_mutation", ("p",)), "e"), (Child("b", "tune_mutation", ("p",)), "e"),
              (Child("c", "llm_crossover", ("p", "q")), "e")]
    fixed = mixed.repair(failed, context())
    assert [f.operator for f in fixed] == ["llm_repair", "tune_repair", "llm_repair"]
    assert llm.repaired == ["llm_mutation", "llm_crossover"] and tune.repaired == ["tune_mutation"]
    assert mixed.summarize([(baseline_parent(), baseline_parent(), 1.1)], context()) == ["llm rationale"]


def test_fraction_out_of_range_is_refused():
    with pytest.raises(ValueError):
        MixedOperators(Recorder("llm"), Recorder("tune"), 1.5)


def test_resolve_kind_states_its_choice():
    assert resolve_kind("auto", "http://127.0.0.1:8000/v1")[0] == "llm"
    kind, why = resolve_kind("auto", "")
    assert kind == "tuning" and "no llm.base_url" in why
    assert resolve_kind("llm", "")[0] == "llm" and resolve_kind("tuning", "http://x")[0] == "tuning"
    with pytest.raises(ValueError):
        resolve_kind("magic", "")


class Sized(Recorder):
    """A stand-in that expects `per` children of each request and has spent `calls` calls."""

    def __init__(self, name: str, per: int, calls: int) -> None:
        super().__init__(name)
        self.per, self.calls = per, calls

    def children_per_request(self, kind, ctx):
        return self.per

    def spent(self):
        return {"calls": self.calls}


def test_the_expected_children_of_a_request_are_those_of_the_side_its_draw_sends_it_to():
    mixed = MixedOperators(Sized("llm", 24, 3), Sized("tune", 1, 0), 0.5)
    ctx = context(rng=np.random.default_rng(7))
    counts = [mixed.children_per_request(MUTATION, ctx) for _ in range(50)]
    out = mixed.vary(requests(50), ctx)
    assert counts == [24 if x else 1 for x in np.random.default_rng(7).random(50) < 0.5]
    assert [c == 24 for c in counts] == [cs[0].operator.startswith("llm") for cs in out]
    assert mixed.spent() == {"calls": 3}   # the spend is the LLM side's
