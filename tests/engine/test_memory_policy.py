"""The optimization memory's policies on scripted outcome sequences: the balanced default keeps
half of the memory for improvements once it has them and shares it between problems; the
accelopt policy follows AccelOpt's rules; neither evicts a lesson in the generation that paid
for its rationale; a resumed memory goes on as the uninterrupted one."""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterator

import pytest

from accelopt_evo.errors import UserError
from accelopt_evo.memory import ACCELOPT, BALANCED, IMPROVEMENT, REGRESSION, Candidate, OptimizationMemory
from accelopt_evo.run import config as cfgmod
from accelopt_evo.run.records import MemoryEntry
from accelopt_evo.runner import new_memory

CAPACITY, PER_GENERATION, CHILDREN, GENERATIONS = 16, 4, 8, 15     # the run defaults


def cand(child: str, speedup: float, problem: str = "silu", parent: str = "p") -> Candidate:
    return Candidate(problem, parent, child, speedup, "llm_mutation")


def run_sequence(seed: int) -> Iterator[tuple[int, list[Candidate]]]:
    """A run of 15 generations of 8 children, 15% of them 1.04-1.3x faster than their
    parent, the rest 0.2-0.95x."""
    rng = random.Random(seed)
    for gen in range(1, GENERATIONS + 1):
        yield gen, [cand(hex_id(f"g{gen}c{i}"), rng.uniform(1.04, 1.3) if rng.random() < 0.15 else rng.uniform(0.2, 0.95),
                         parent=hex_id(f"g{gen}p")) for i in range(CHILDREN)]


def hex_id(name: str) -> str:
    """A kernel id (16 hex digits, as records hold them) named after `name`."""
    return hashlib.sha256(name.encode()).hexdigest()[:16]


def memory(policy: str, seed: int = 0, **kw) -> OptimizationMemory:
    settings = {"capacity": CAPACITY, "per_generation": PER_GENERATION} | kw
    return OptimizationMemory(**settings, policy=policy, seed=seed)


def generation(mem: OptimizationMemory, gen: int, candidates: list[Candidate]) -> list[Candidate]:
    """One generation's memory update; checks after every admission that none of this
    generation's entries was evicted (each rationale was paid for)."""
    admitted = []
    for c in mem.select(candidates):
        mem.add(c, f"why {c.child_id}", "diff", gen)
        admitted.append(c.child_id)
        assert set(admitted) <= {e.child_id for e in mem.entries}
    return [c for c in candidates if c.child_id in admitted]


def improvements(mem: OptimizationMemory) -> int:
    return sum(e.kind == IMPROVEMENT for e in mem.entries)


# ---------------------------------------------------------------------------------------
# That run's sequence.


@pytest.mark.parametrize("seed", range(5))
def test_balanced_keeps_half_of_the_memory_for_improvements_once_it_has_them(seed):
    mem, admitted = memory(BALANCED), 0
    for gen, candidates in run_sequence(seed):
        admitted += sum(c.speedup >= 1.0 for c in generation(mem, gen, candidates))
        assert len(mem.entries) <= CAPACITY
        assert improvements(mem) >= min(admitted, CAPACITY // 2)      # a win keeps its place
        if admitted >= CAPACITY / 2:
            assert improvements(mem) >= len(mem.entries) / 2, (gen, [e.speedup for e in mem.entries])
    assert admitted >= CAPACITY / 2            # the sequence does test the rule
    # the old policy held 16 regressions of 16 from generation 5 or 6 on with these seeds
    assert improvements(mem) == CAPACITY // 2 and len(mem.entries) == CAPACITY


def test_the_old_failure_does_not_happen_at_any_generation_with_the_default():
    mem = new_memory(cfgmod.resolve())
    assert mem.policy == BALANCED
    shares = []
    for gen, candidates in run_sequence(1):   # the old policy held 16 regressions from gen 6 on
        generation(mem, gen, candidates)
        shares.append(improvements(mem))
    assert shares == [2, 4, 5, 6, 7, 7, 8, 8, 8, 8, 8, 8, 8, 8, 8]


@pytest.mark.parametrize("policy", [BALANCED, ACCELOPT])
def test_a_weak_improvement_outlives_its_generation_among_strong_regressions(policy):
    mem = memory(policy, capacity=4)
    generation(mem, 1, [cand(f"r{i}", 0.2 + i / 100) for i in range(4)])
    generation(mem, 2, [cand("weak", 1.05)])    # the old policy evicted it at once
    assert "weak" in {e.child_id for e in mem.entries} and len(mem.entries) == 4


@pytest.mark.parametrize("policy", [BALANCED, ACCELOPT])
def test_nothing_is_evicted_in_the_generation_that_paid_for_it(policy):
    mem = memory(policy, capacity=6, per_generation=6)
    for gen, candidates in run_sequence(3):
        kept = generation(mem, gen, candidates)
        assert {c.child_id for c in kept} <= {e.child_id for e in mem.entries}


# ---------------------------------------------------------------------------------------
# The balanced policy's rules.


def test_balanced_admission_takes_half_improvements_then_gives_unused_slots_back():
    mem = memory(BALANCED)
    many = [cand(f"i{i}", 1.1 + i / 10) for i in range(5)] + [cand("r", 0.5), cand("band", 0.9)]
    assert [c.child_id for c in mem.select(many)] == ["i4", "i3", "i2", "r"]     # regressions fill
    only = [cand(f"r{i}", 0.5 - i / 10) for i in range(5)]
    assert [c.child_id for c in mem.select(only)] == ["r4", "r3", "r2", "r1"]
    assert [c.child_id for c in mem.select(many[:2] + [cand("r", 0.5)])] == ["i1", "i0", "r"]
    assert [c.child_id for c in mem.select([cand("edge", 1.04), cand("low", 1 / 1.15)])] == ["edge", "low"]
    assert [c.child_id for c in memory(BALANCED, per_generation=3).select(many + only)] == ["i4", "i3", "r4"]
    assert memory(BALANCED, capacity=0).select(many) == []        # no rationale paid for nothing


def test_balanced_evicts_regressions_beyond_their_half_first_and_holds_a_generation_over_capacity():
    mem = memory(BALANCED, capacity=4)
    generation(mem, 1, [cand(f"a{i}", 0.3) for i in range(4)])                     # no win yet: all slots
    generation(mem, 2, [cand("w1", 1.5), cand("w2", 1.2), cand("b1", 0.4), cand("b2", 0.3)])
    assert sorted(e.child_id for e in mem.entries) == ["b1", "b2", "w1", "w2"]
    generation(mem, 3, [cand("w3", 1.3), cand("c1", 0.4), cand("c2", 0.4), cand("c3", 0.4)])
    # three regressions of generation 3 exceed their half (2): the weaker old win goes, and the
    # memory holds 5 until the next generation instead of evicting a lesson just paid for
    assert sorted(e.child_id for e in mem.entries) == ["c1", "c2", "c3", "w1", "w3"]
    generation(mem, 4, [])
    assert len(mem.entries) == 5                # no admission, no eviction
    generation(mem, 5, [cand("w4", 1.1)])       # the oldest of equal regressions, the weaker old win
    assert sorted(e.child_id for e in mem.entries) == ["c2", "c3", "w1", "w4"]


def test_balanced_drops_the_least_informative_of_a_kind_oldest_first():
    mem = memory(BALANCED, capacity=2)
    generation(mem, 1, [cand("a", 1.2)])
    generation(mem, 2, [cand("b", 1.2)])
    generation(mem, 3, [cand("c", 1.1)])
    assert [e.child_id for e in mem.entries] == ["b", "c"]      # equal |log|: the older goes
    generation(mem, 4, [cand("d", 1.5)])
    assert [e.child_id for e in mem.entries] == ["b", "d"]      # the weakest goes


def test_balanced_shares_the_memory_between_problems():
    mem = memory(BALANCED, capacity=4)
    generation(mem, 1, [cand(f"a{i}", 2.0 + i, problem="silu") for i in range(4)])
    generation(mem, 2, [cand("b0", 1.1, problem="rmsnorm"), cand("b1", 1.2, problem="rmsnorm")])
    # silu held more: its weakest go, although rmsnorm's lessons are weaker
    assert sorted(e.child_id for e in mem.entries) == ["a2", "a3", "b0", "b1"]
    generation(mem, 3, [cand("a9", 9.0, problem="silu")])
    assert sorted(e.child_id for e in mem.entries) == ["a3", "a9", "b0", "b1"]


def test_seeding_from_a_file_applies_this_capacity_and_a_checkpoint_is_restored_exactly():
    older = [MemoryEntry("silu", "p", f"k{i}", s, "r", "d", 7, REGRESSION if s < 1 else IMPROVEMENT)
             for i, s in enumerate([0.3, 0.2, 0.25, 1.1, 1.2])]
    seeded = memory(BALANCED, capacity=4)
    seeded.start_from(older)
    assert [e.child_id for e in seeded.entries] == ["k1", "k2", "k3", "k4"]
    restored = memory(BALANCED, capacity=4)
    restored.load_entries(older)          # a checkpoint of a generation that held 5
    assert len(restored.entries) == 5


# ---------------------------------------------------------------------------------------
# The accelopt policy's rules.


def test_accelopt_admission_takes_at_most_half_improvements_above_strict_thresholds():
    mem = memory(ACCELOPT, per_generation=4)
    many = [cand(f"i{i}", 1.1 + i / 10) for i in range(5)] + [cand("r", 0.5)]
    assert [c.child_id for c in mem.select(many)] == ["i4", "i3", "r"]        # no backfill
    only = [cand(f"r{i}", 0.5 - i / 10) for i in range(5)]
    assert [c.child_id for c in mem.select(only)] == ["r4", "r3", "r2", "r1"]
    assert mem.select([cand("edge", 1.04), cand("low", 1 / 1.15)]) == []       # > 1.04x, < 1/1.15
    assert [c.child_id for c in memory(ACCELOPT, per_generation=3).select(many)] == ["i4", "r"]


def accelopt_run(seed: int, per_generation: int = 8) -> list[list[MemoryEntry]]:
    mem, states = memory(ACCELOPT, seed=seed, per_generation=per_generation), []
    for gen, candidates in run_sequence(seed):
        before = list(mem.entries)
        kept = generation(mem, gen, candidates)
        wins = sum(c.speedup > 1.04 for c in kept)
        losses = sum(c.speedup < 1 / 1.15 for c in kept)
        assert wins + losses == len(kept)
        assert wins == min(per_generation // 2, sum(c.speedup > 1.04 for c in candidates))
        assert losses == min(per_generation - wins, sum(c.speedup < 1 / 1.15 for c in candidates))
        assert len(mem.entries) <= CAPACITY
        new = {c.child_id for c in kept}
        older = [e for e in mem.entries if e.child_id not in new]
        assert all(any(e is b for b in before) for e in older)              # a sample of the old
        assert len(older) == min(len(before), CAPACITY - len(new))          # filling the memory
        states.append(list(mem.entries))
    return states


def test_accelopt_keeps_a_sample_of_older_entries_reproducible_from_the_seed():
    first = accelopt_run(4)
    assert first == accelopt_run(4)
    other_seed = memory(ACCELOPT, seed=5)
    other_seed.load_entries(first[-2])
    this_seed = memory(ACCELOPT, seed=4)
    this_seed.load_entries(first[-2])
    for mem in (other_seed, this_seed):
        generation(mem, GENERATIONS, [cand(f"n{i}", 0.3) for i in range(PER_GENERATION)])
    assert [e.child_id for e in this_seed.entries] != [e.child_id for e in other_seed.entries]


def test_accelopt_sample_does_not_depend_on_how_a_generation_is_split():
    entries = [MemoryEntry("silu", "p", f"k{i}", 0.5, "r", "d", 1, REGRESSION) for i in range(16)]
    whole, split = memory(ACCELOPT, seed=1), memory(ACCELOPT, seed=1)
    whole.load_entries(entries)
    split.load_entries(entries)
    news = [cand(f"n{i}", 2.0, problem=p) for i, p in enumerate(["silu", "silu", "rmsnorm", "rmsnorm"])]
    for c in news:
        whole.add(c, "r", "d", 2)
    for c in reversed(news):
        split.add(c, "r", "d", 2)
    assert sorted(e.child_id for e in whole.entries) == sorted(e.child_id for e in split.entries)


# ---------------------------------------------------------------------------------------
# Resume: a memory restored from its checkpoint goes on as the uninterrupted one.


@pytest.mark.parametrize("policy", [BALANCED, ACCELOPT])
def test_a_restored_memory_continues_like_the_uninterrupted_one(policy):
    straight, resumed = memory(policy, seed=2, per_generation=8), None
    for gen, candidates in run_sequence(2):
        if gen == 8:
            resumed = memory(policy, seed=2, per_generation=8)
            resumed.load_entries(MemoryEntry.from_json(e) for e in straight.to_json())
        for mem in (straight, resumed) if resumed else (straight,):
            generation(mem, gen, candidates)
    assert resumed is not None and resumed.to_json() == straight.to_json()


# ---------------------------------------------------------------------------------------
# The setting.


def test_the_policy_setting_defaults_to_balanced_and_the_paper_preset_uses_accelopt():
    assert cfgmod.resolve().memory.policy == BALANCED
    cfg = cfgmod.resolve(preset="paper")
    assert cfg.memory.policy == ACCELOPT
    built = new_memory(cfgmod.resolve(preset="paper", sets=["run.seed=9"]))
    assert (built.policy, built.seed, built.capacity, built.per_generation) == (ACCELOPT, 9, 16, 8)
    assert cfgmod.resolve(sets=['memory.policy="accelopt"']).memory.policy == ACCELOPT


def test_an_unknown_policy_is_a_one_line_error_naming_the_key_and_the_choices():
    with pytest.raises(UserError) as err:
        cfgmod.resolve(sets=["memory.policy=lru"])
    text = str(err.value)
    assert "memory.policy" in text and "balanced" in text and "accelopt" in text and "\n" not in text
    with pytest.raises(ValueError, match="lru"):
        OptimizationMemory(policy="lru")


def test_the_default_policy_keeps_the_configuration_hash_of_earlier_releases():
    # run folders written before the setting existed hash without it, and resume under the default
    assert cfgmod.LATER_DEFAULTS["memory.policy"] == BALANCED
    assert cfgmod.resolve(sets=['memory.policy="accelopt"']).hash() != cfgmod.resolve().hash()
