"""The optimization memory the LLM prompts draw their lessons from: admission per generation,
eviction, persistence."""

from __future__ import annotations

import json

import pytest

from accelopt_evo.memory import IMPROVEMENT, REGRESSION, Candidate, OptimizationMemory


def cand(child: str, speedup: float, parent: str = "p", problem: str = "silu") -> Candidate:
    return Candidate(problem, parent, child, speedup, "llm_mutation")


def test_select_takes_improvements_best_first_then_regressions_worst_first():
    mem = OptimizationMemory(per_generation=4, improve_threshold=1.04, regress_threshold=1.15)
    picked = mem.select([cand("a", 1.02), cand("b", 1.5), cand("c", 0.5), cand("d", 1.1), cand("e", 0.8),
                         cand("f", 0.9), cand("g", 1.04)])
    # 1.02 and 0.9 are inside the band (1/1.15 ~ 0.87 .. 1.04): not informative enough; the
    # balanced policy gives improvements half of the slots and regressions the rest.
    assert [c.child_id for c in picked] == ["b", "d", "c", "e"]


def test_select_skips_pairs_already_in_memory():
    mem = OptimizationMemory()
    mem.add(cand("a", 1.5), "r", "d", 1)
    assert [c.child_id for c in mem.select([cand("a", 1.5), cand("b", 1.2)])] == ["b"]


def test_add_labels_improvements_and_regressions():
    mem = OptimizationMemory()
    assert mem.add(cand("a", 1.3), "faster", "d", 1).kind == IMPROVEMENT
    assert mem.add(cand("b", 0.5), "slower", "d", 1).kind == REGRESSION
    lessons = mem.lessons()
    assert [(x.kind, x.rationale) for x in lessons] == [(IMPROVEMENT, "faster"), (REGRESSION, "slower")]


def test_eviction_keeps_the_generations_lessons_and_drops_the_least_informative_of_a_kind():
    # Balanced policy (tests/engine/test_memory_policy.py has the rest): beyond capacity, drop
    # from the kind over its share the entry with the smallest |log speedup|, never one of the
    # generation being admitted.
    mem = OptimizationMemory(capacity=3)
    mem.add(cand("a", 1.2), "a", "", 1)
    mem.add(cand("b", 2.0), "b", "", 1)
    mem.add(cand("c", 1 / 1.2), "c", "", 2)
    mem.add(cand("d", 0.25), "d", "", 2)        # two regressions of this generation: held over capacity
    assert [e.child_id for e in mem.entries] == ["a", "b", "c", "d"]
    mem.add(cand("e", 1.1), "e", "", 3)          # weaker than everything held, yet it stays
    assert [e.child_id for e in mem.entries] == ["b", "d", "e"]


def test_memory_round_trips_through_json_and_a_file(tmp_path):
    mem = OptimizationMemory(capacity=4)
    ids = [f"{i}" * 16 for i in range(3)]       # a memory file holds kernel ids (16 hex digits)
    for i, s in enumerate([1.3, 0.6, 1.8]):
        mem.add(cand(ids[i], s, parent="f" * 16, problem=["silu", "rmsnorm", "silu"][i]), f"lesson {i}", f"diff {i}", i)
    path = tmp_path / "memory.json"
    path.write_text(json.dumps({"entries": mem.to_json()}))
    loaded = OptimizationMemory(capacity=2)
    loaded.start_from(OptimizationMemory.read_file(path))
    assert [e.child_id for e in loaded.entries] == ids[1:]          # the new capacity applies
    assert loaded.entries[0].problem == "rmsnorm"
    loaded.load_entries(OptimizationMemory.read_file(path))          # a checkpoint: restored as is
    assert [e.to_json() for e in loaded.entries] == mem.to_json()


def test_read_file_reports_unusable_files(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{nope")
    with pytest.raises(ValueError, match="cannot read memory file"):
        OptimizationMemory.read_file(bad)
    bad.write_text('{"entries": 3}')
    with pytest.raises(ValueError, match="no list of entries"):
        OptimizationMemory.read_file(bad)
