"""Latency first (accelopt_evo/search/cascade.py): decisions that ask for a child's correctness only
where it decides give what full knowledge gives, and ask less."""

from __future__ import annotations

import importlib.util
import json
import random
from pathlib import Path

import pytest
from deap import tools

from accelopt_evo.memory import Candidate, OptimizationMemory
from accelopt_evo.run import config as cfgmod
from accelopt_evo.run.config import SelectionSection
from accelopt_evo.run.folder import RunFolder
from accelopt_evo.runner import resume_run, start_run
from accelopt_evo.search.cascade import Verdicts, quickness, undecided
from accelopt_evo.search.individual import new_kernel
from accelopt_evo.search.selection import (
    HallOfFame,
    Plans,
    select_distinct,
    selection_operator,
    survivors,
    update_hall_of_fame,
)
from fitness.result import INCORRECT, NOT_JUDGED, OK, EvalResult

from checkpoint_diff import comparable
from fakes import TracingKnobEvaluator

REPO = Path(__file__).resolve().parents[3]


def kernel(i: int, speedup: float, status: str = OK):
    return new_kernel(f"x = {i}\n", f"k{i:03d}", result=EvalResult(status, latency_ms=1.0 / speedup, speedup=speedup))


def generation(rng: random.Random, parents: int = 8, children: int = 8, invalid: float = 0.3):
    """Valid parents, and children of random speed of which a random share fails correctness:
    (population, children as known after a full judgement, the same children not judged)."""
    population = [kernel(i, rng.uniform(0.8, 1.6)) for i in range(parents)]
    speeds = [rng.uniform(0.5, 2.0) for _ in range(children)]
    bad = [rng.random() < invalid for _ in range(children)]
    known = [kernel(100 + j, s, INCORRECT if b else OK) for j, (s, b) in enumerate(zip(speeds, bad))]
    for k, b in zip(known, bad):   # an incorrect child has a latency, no speedup
        if b:
            k.result.speedup = None
    timed = [kernel(100 + j, s, NOT_JUDGED) for j, s in enumerate(speeds)]
    verdict = {k.id: (not b) for k, b in zip(known, bad)}
    return population, known, timed, verdict


def on_demand(timed, verdict):
    """Verdicts whose judge gives each asked child its known verdict; the judged ids."""
    judged: list[str] = []

    def judge(kernels):
        for k in kernels:
            judged.append(k.id)
            k.result = EvalResult(OK if verdict[k.id] else INCORRECT, latency_ms=k.result.latency_ms,
                                  speedup=k.result.speedup if verdict[k.id] else None)
            if verdict[k.id]:
                k.fitness.values = (k.result.speedup,)
    return Verdicts(judge, timed, width=1), judged


def known_valid(ind) -> bool:
    return ind.valid


@pytest.mark.parametrize("method", ["tournament", "best"])
def test_survivors_with_every_kernel_valid_are_deaps_draw_for_draw(method):
    for seed in range(20):
        pool = [kernel(i, random.Random(seed * 100 + i).uniform(0.5, 2)) for i in range(16)]
        ours = survivors(pool, 8, 1, method, 3, random.Random(seed), known_valid, quickness)
        rng = random.Random(seed)
        elites = tools.selBest(pool, 1)
        rest = [ind for ind in pool if ind is not elites[0]]
        select = selection_operator(SelectionSection(method=method, tournament_size=3), rng)
        theirs = elites + select_distinct(select, rest, 7)
        assert [k.id for k in ours] == [k.id for k in theirs]


@pytest.mark.parametrize("method", ["tournament", "best"])
def test_survivors_asking_on_demand_equal_those_of_full_knowledge(method):
    asked_less = 0
    for seed in range(40):
        population, known, timed, verdict = generation(random.Random(seed))
        full = survivors(population + known, 8, 1, method, 3, random.Random(seed), known_valid, quickness)
        verdicts, judged = on_demand(timed, verdict)
        lazy = survivors(population + timed, 8, 1, method, 3, random.Random(seed), verdicts.valid, quickness)
        assert [k.id for k in lazy] == [k.id for k in full]
        assert all(k.valid for k in lazy)
        asked_less += len(judged) < len(timed)
    assert asked_less > 10   # the point: most generations judge fewer than all their children


def test_a_tournament_of_invalid_entrants_is_drawn_again_without_them():
    pool = [kernel(0, 1.0)] + [kernel(i, 5.0, INCORRECT) for i in range(1, 4)]
    chosen = survivors(pool, 2, 0, "tournament", 3, random.Random(0), known_valid, quickness)
    assert [k.id for k in chosen] == ["k000"]   # the only valid one, once


def test_hall_of_fame_on_demand_equals_updating_with_the_valid_kernels():
    for seed in range(30):
        population, known, timed, verdict = generation(random.Random(seed), children=12)
        full = HallOfFame(10)
        full.update(population[:4])
        lazy = HallOfFame(10)
        lazy.update(population[:4])
        full.update([k for k in population + known if k.valid])
        verdicts, judged = on_demand(timed, verdict)
        update_hall_of_fame(lazy, population + timed, verdicts.valid, quickness)
        assert [k.id for k in lazy] == [k.id for k in full]


def test_beam_on_demand_equals_the_beam_of_full_knowledge():
    for seed in range(30):
        rng = random.Random(seed)
        population, known, timed, verdict = generation(rng, parents=4, children=12)
        def beam(children, valid):
            plans = Plans()
            for j, child in enumerate(children):   # three plans per parent, of one to two samples
                plans.add(f"plan {j // 2}", population[(j // 2) % 4].id, child.id)
            kernels = {k.id: k for k in population + children}
            return plans.beam(population, kernels, 4, valid, quickness)
        verdicts, judged = on_demand(timed, verdict)
        assert [k.id for k in beam(timed, verdicts.valid)] == [k.id for k in beam(known, known_valid)]


def test_memory_selection_on_demand_equals_selecting_among_valid_children():
    for seed in range(30):
        population, known, timed, verdict = generation(random.Random(seed), children=12, invalid=0.4)
        parent = population[0]

        def candidates(children):
            return [Candidate("p", parent.id, c.id, c.result.latency_ms ** -1 / parent.result.speedup)
                    for c in children]

        memory = OptimizationMemory(capacity=16, per_generation=4)
        full = memory.select([c for c in candidates(known) if verdict[c.child_id]])
        verdicts, judged = on_demand(timed, verdict)
        by_id = {k.id: k for k in timed}
        lazy = memory.select(candidates(timed), lambda c: verdicts.valid(by_id[c.child_id]))
        assert lazy == full


def test_foresee_judges_what_a_rehearsal_asks_in_one_batch():
    timed = [kernel(i, 1.0 + i, NOT_JUDGED) for i in range(6)]
    batches: list[list[str]] = []

    def judge(kernels):
        batches.append([k.id for k in kernels])
        for k in kernels:
            k.result = EvalResult(OK, latency_ms=k.result.latency_ms, speedup=k.result.speedup)
    verdicts = Verdicts(judge, timed, width=2)
    verdicts.foresee(lambda valid: [valid(k) for k in timed[3:]])
    assert batches == [["k005", "k004", "k003"]]          # fastest first, at once
    assert [undecided(k) for k in timed] == [True] * 3 + [False] * 3
    assert verdicts.valid(timed[0]) and batches[-1] == ["k000", "k002"]   # a miss takes the next fastest along


def _tracing(evaluators: list):
    def make(cfg, folder):
        evaluators.append(TracingKnobEvaluator())
        return evaluators[-1]
    return make


def _run(tmp_path, cascade: str, gens: int = 6, *sets: str):
    evaluators: list = []
    cfg = cfgmod.resolve(sets=[f"run.gens={gens}", f"run.out={json.dumps(str(tmp_path))}", "run.shape=tiny",
                               "population.size=6", "population.offspring=8", "run.report=false",
                               f"evaluation.cascade={json.dumps(cascade)}", *sets])
    start_run(cfg, "r", progress=False, log=lambda msg: None, evaluator_factory=_tracing(evaluators))
    return tmp_path / "r", evaluators[0]


def test_a_latency_first_run_resumed_equals_one_run_straight(tmp_path):
    straight, _ = _run(tmp_path / "a", "latency_first", 4)
    split, _ = _run(tmp_path / "b", "latency_first", 2)
    resume_run(split, 4, progress=False, log=lambda msg: None, evaluator_factory=_tracing([]))
    for gen in range(5):
        assert comparable(RunFolder(straight).checkpoint_path(gen)) == comparable(RunFolder(split).checkpoint_path(gen))


def _decisions(folder):
    out = []
    for path in sorted((folder / "checkpoints").glob("gen-*.json")):
        ck = json.loads(path.read_text())
        out.append(({n: [m["id"] for m in v] for n, v in ck["population"].items()},
                    {n: [m["id"] for m in v] for n, v in ck["hall_of_fame"].items()},
                    [(m["parent_id"], m["child_id"], m["rationale"]) for m in ck["memory"]], ck["random_state"]))
    return out


BEAM = "selection.survivors=\"beam_per_plan\""


@pytest.mark.parametrize("sets", [(), (BEAM,), ("selection.method=\"best\"",)])
def test_latency_first_decides_every_generation_as_a_full_judgement_does(tmp_path, sets):
    first, lazy = _run(tmp_path / "latency_first", "latency_first", 4, *sets)
    full, eager = _run(tmp_path / "full", "full", 4, *sets)
    assert _decisions(first) == _decisions(full)
    not_judged = sum('"not_judged"' in line for line in (first / "evaluations.jsonl").read_text().splitlines())
    if BEAM in sets:   # one single-sample plan per beam kernel: every plan's verdict decides
        assert not_judged == 0
    else:
        assert not_judged > 0 and len(set(lazy.judged)) < len(set(eager.judged))


@pytest.mark.slow
def test_the_benchmark_runs_both_settings_side_by_side(tmp_path):
    """benchmarks/cascade.py --jobs 2 (a built-in problem at its small shape, one generation):
    both searches run, each with its own log, and decide alike."""
    spec = importlib.util.spec_from_file_location("cascade_bench", REPO / "benchmarks" / "cascade.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = tmp_path / "bench"
    code = bench.main(["--problems", "silu", "--gens", "1", "--suite-dir", "", "--shape", "small", "--out", str(out),
                       "--jobs", "2", "--set", "evaluation.seeds=[0]", "--set", "evaluation.workers=1",
                       "--json", str(tmp_path / "figures.json")])
    assert code == 0
    for cascade in ("latency_first", "full"):
        assert (out / "silu" / cascade / "checkpoints" / "gen-0001.json").is_file()
        assert "gen   1 silu" in (out / "silu" / f"{cascade}.log").read_text()
    row, = json.loads((tmp_path / "figures.json").read_text())
    assert row["identical_decisions"] and row["full"]["not_judged"] == 0
