import numpy as np

from operators.base import CROSSOVER, MUTATION, Context, Parent, Request
from operators.knobs import find_knobs, set_knobs
from operators.tuning import TuningOperators, knob_changes, tune_crossover, tune_mutation

SRC = """import x
A = 4  # tune: 2, 4, 8
B = 16  # tune: 16, 32
C = 3
  D = 5  # tune: 5, 6
def f():
    return A * B
"""


def test_find_knobs_only_annotated_module_level_ints():
    knobs = find_knobs(SRC)
    assert list(knobs) == ["A", "B"]
    assert knobs["A"].choices == (2, 4, 8) and knobs["A"].value == 4


def test_set_knobs_changes_only_the_value():
    out = set_knobs(SRC, {"A": 8})
    assert "A = 8  # tune: 2, 4, 8" in out
    assert out.replace("A = 8", "A = 4") == SRC


def test_mutation_moves_exactly_one_knob_to_another_listed_value():
    rng = np.random.default_rng(1)
    for _ in range(50):
        child, note = tune_mutation(SRC, rng)
        before, after = find_knobs(SRC), find_knobs(child)
        changed = [n for n in before if before[n].value != after[n].value]
        assert len(changed) == 1
        n = changed[0]
        assert after[n].value in before[n].choices and after[n].value != before[n].value
        assert n in note


def test_mutation_without_knobs_gives_none():
    assert tune_mutation("X = 1\n", np.random.default_rng(0)) is None


def test_crossover_takes_shared_knobs_from_either_parent():
    other = set_knobs(SRC, {"A": 2, "B": 32})
    rng = np.random.default_rng(3)
    seen = set()
    for _ in range(40):
        child, _ = tune_crossover(SRC, other, rng)
        k = find_knobs(child)
        seen.add((k["A"].value, k["B"].value))
    assert seen == {(4, 16), (2, 16), (4, 32), (2, 32)}
    assert tune_crossover(SRC, "Z = 1  # tune: 1, 2\n", rng) is None


def test_operator_set_reports_failures_and_summarizes():
    ops = TuningOperators()
    ctx = Context("silu", "", 1, np.random.default_rng(0))
    p = Parent("p", SRC)
    bare = Parent("q", "X = 1\n")
    other = Parent("o", set_knobs(SRC, {"A": 2}).replace("C = 3", "C = 9"))
    out = ops.vary([Request(MUTATION, (p,)), Request(MUTATION, (bare,)), Request(CROSSOVER, (p, other)),
                    Request(CROSSOVER, (p, p))], ctx)
    assert out[0][0].source and out[0][0].operator == "tune_mutation"
    assert out[1][0].source is None and "knob" in out[1][0].error
    assert out[2][0].operator == "tune_crossover" and "differing regions" in out[2][0].note
    assert out[3][0].operator == "tune_mutation"       # parents alike: a mutation instead
    child = Parent("c", out[0][0].source, note=out[0][0].note, parent_ids=("p",))
    (text,) = ops.summarize([(p, child, 1.25)], ctx)
    assert text.startswith(out[0][0].note) and "1.25x" in text
    (undo,) = ops.summarize([(child, p, 1.25)], ctx)
    assert undo.startswith(f"Undoing ({out[0][0].note})")
    (text,) = ops.summarize([(p, Parent("x", child.source), 1.25)], ctx)
    assert knob_changes(SRC, child.source)[0] in text
    assert ops.repair([(out[0][0], "boom")], ctx) == [None]


def test_knob_tuning_works_on_a_current_dialect_kernel():
    """The knob operators read and rewrite `# tune:` constants whatever the dialect."""
    from fitness.sandbox import policy
    from nkibench.registry import NKI_BASELINES
    from operators.knobs import find_knobs, set_knobs

    source = (NKI_BASELINES / "silu.py").read_text()
    knobs = find_knobs(source)
    assert set(knobs) >= {"LOAD_N", "COMPUTE_N"}
    child = set_knobs(source, {"LOAD_N": 1024})
    assert find_knobs(child)["LOAD_N"].value == 1024 and child != source
    assert policy.review(child) == policy.Review("current", [])
