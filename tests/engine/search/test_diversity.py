"""Diversity in the search (README "Diversity"): islands with migration, the MAP-Elites archive
over behaviour descriptors, novelty rejection, and resume equality under each strategy."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from accelopt_evo.errors import UserError
from accelopt_evo.report import markdown as report
from accelopt_evo.run import config as cfgmod
from accelopt_evo.run.config import COMPLETE, RING
from accelopt_evo.run.folder import RunFolder
from accelopt_evo.run.records import Checkpoint, read_evaluations
from accelopt_evo.runner import resume_run, start_run
from accelopt_evo.search import archive, islands
from accelopt_evo.search.descriptors import descriptors
from accelopt_evo.search.individual import new_kernel
from accelopt_evo.search.novelty import NoveltyIndex, distance, shape
from fitness.result import OK, EvalResult

from checkpoint_diff import comparable
from fakes import ProfilingEvaluator, engine_profile

REPO = Path(__file__).resolve().parents[3]


def kernel(i: int, speedup: float, prof: dict | None = None):
    return new_kernel(f"x = {i}\n", f"k{i:03d}", result=EvalResult(OK, latency_ms=1.0 / speedup, speedup=speedup,
                                                                    profile=prof or {}))


def speed(ind) -> float:
    return ind.result.speedup


# --------------------------------------------------------------------------------------------
# Descriptors


def test_descriptors_are_read_from_the_profile():
    d = descriptors(EvalResult(OK, profile={**engine_profile(vector=0.5, dma=0.25, tensor=0.25), "hardware_flops": 400,
                                            "spill_save_bytes": 20}))
    assert d == {"engine": "vector", "dma_share": 0.25, "spill_share": 0.1, "flops_per_byte": 2.0}
    assert descriptors(EvalResult(OK, profile={"bottleneck": "fake"})) == {}
    assert descriptors(None) == {}
    assert descriptors(EvalResult(OK, profile=engine_profile(0.0, 0.0)))["engine"] == "none"


# --------------------------------------------------------------------------------------------
# Islands


def test_shares_split_the_offspring_and_rotate_the_remainder():
    assert islands.shares(8, 4, 0) == [2, 2, 2, 2]
    assert islands.shares(6, 4, 0) == [2, 2, 1, 1]
    assert islands.shares(6, 4, 1) == [1, 2, 2, 1]
    assert sum(islands.shares(7, 3, 5)) == 7


def test_migration_ring_sends_each_islands_best_to_the_next_replacing_its_slowest():
    groups = [[kernel(0, 1.0), kernel(1, 3.0)], [kernel(2, 2.0), kernel(3, 1.5)], [kernel(4, 1.2), kernel(5, 0.9)]]
    before = [[k.id for k in g] for g in groups]
    out, moved = islands.migrate(groups, 1, RING, 2, speed)
    assert [[k.id for k in g] for g in out] == [["k001", "k004"], ["k002", "k001"], ["k004", "k002"]]
    assert moved == 3
    assert [[k.id for k in g] for g in groups] == before          # pure


def test_migration_complete_and_no_duplicate_arrivals():
    a, b, c = kernel(0, 2.0), kernel(1, 1.0), kernel(2, 3.0)
    out, moved = islands.migrate([[a], [b], [c, a]], 1, COMPLETE, 3, speed)
    assert [sorted(k.id for k in g) for g in out] == [["k000", "k001", "k002"], ["k000", "k001", "k002"],
                                                      ["k000", "k001", "k002"]]
    assert moved == 5                       # a is already on the third island: it does not come twice
    assert islands.union(out) == [a, b, c]


# --------------------------------------------------------------------------------------------
# MAP-Elites archive


def test_archive_insertion_fills_empty_cells_and_replaces_slower_elites_only():
    elite = kernel(0, 1.0, engine_profile(vector=0.8, dma=0.2))                  # (vector, bin 0)
    grid = archive.archive_of([elite], 4, speed)
    assert list(grid) == [("vector", 0)]
    faster = kernel(1, 2.0, engine_profile(vector=0.85, dma=0.15))                 # same cell, faster
    slower = kernel(2, 0.5, engine_profile(vector=0.9, dma=0.1))                 # same cell, slower
    other = kernel(3, 0.3, engine_profile(vector=0.2, dma=0.8))                  # (dma, bin 3): a new cell
    asked = []

    def valid(ind):
        asked.append(ind.id)
        return True

    new, placed = archive.insert(grid, [slower, other, faster], 4, valid, speed)
    assert placed == 2 and new[("vector", 0)] is faster and new[("dma", 3)] is other
    assert "k002" not in asked                                            # a slower child decides nothing
    assert grid == {("vector", 0): elite}                                 # the old archive is left as it was
    assert [k.id for k in archive.elites(new)] == ["k001", "k003"]        # cell order: vector before dma


def test_archive_keeps_its_elite_when_the_faster_child_is_invalid():
    elite = kernel(0, 1.0, engine_profile(vector=0.8, dma=0.2))
    bad = kernel(1, 2.0, engine_profile(vector=0.8, dma=0.2))
    new, placed = archive.insert(archive.archive_of([elite], 4, speed), [bad], 4, lambda ind: False, speed)
    assert placed == 0 and archive.elites(new) == [elite]


def test_archive_parents_are_drawn_uniformly_over_cells():
    a, b = kernel(0, 1.0, engine_profile(0.8, 0.2)), kernel(1, 5.0, engine_profile(0.2, 0.8))
    picks = archive.parents(archive.archive_of([a, b], 4, speed), 2000, random.Random(0))
    assert 900 < sum(p is a for p in picks) < 1100


# --------------------------------------------------------------------------------------------
# Novelty


def test_novelty_distance_is_small_for_a_knob_move_and_large_for_new_structure():
    base = (REPO / "nkibench" / "baselines" / "silu.py").read_text()
    knob = base.replace("LOAD_N = 512", "LOAD_N = 1024")
    reformatted = base.replace("LOAD_N = 512", "LOAD_N  =  512  # a comment")
    assert distance(shape(base), shape(reformatted)) == 0.0
    assert 0.0 < distance(shape(base), shape(knob)) < 0.02
    assert distance(shape(base), shape("def kernel(x):\n    return x\n")) > 0.5
    index = NoveltyIndex()
    index.add("base", base)
    assert index.nearest("knob", knob, 0.05) == "base"
    assert index.nearest("knob", knob, 0.001) is None
    assert index.nearest("base", base, 0.05) is None                      # itself: dedupe's business


# --------------------------------------------------------------------------------------------
# Runs on the fake evaluator


def _run(tmp_path, gens: int, *sets: str, evaluators: list | None = None):
    evaluators = [] if evaluators is None else evaluators

    def make(cfg, folder):
        evaluators.append(ProfilingEvaluator())
        return evaluators[-1]

    cfg = cfgmod.resolve(sets=[f"run.gens={gens}", f"run.out={json.dumps(str(tmp_path))}", "run.shape=tiny",
                               "population.size=4", "population.offspring=6", "run.report=false", *sets])
    start_run(cfg, "r", progress=False, log=lambda msg: None, evaluator_factory=make)
    return tmp_path / "r", make


STRATEGIES = {
    "mu_plus_lambda+novelty": ("variation.novelty=0.01",),
    "islands": ("selection.strategy=\"islands\"", "selection.islands=2", "selection.migration_interval=2"),
    "map_elites": ("selection.strategy=\"map_elites\"", "selection.dma_bins=8"),
}


# One slot at a time: an async run whose work finishes in the order it was asked for, so that
# its resume can be compared with a run straight through (README "Asynchronous evolution").
ASYNC_ONE_SLOT = ("run.mode=\"async\"", "run.max_in_flight=1")
ASYNC_SLOTS = ("run.mode=\"async\"", "run.max_in_flight=3")


@pytest.mark.parametrize("mode", [(), ASYNC_ONE_SLOT], ids=["generational", "async"])
@pytest.mark.parametrize("name", list(STRATEGIES))
def test_a_run_resumed_equals_one_run_straight(tmp_path, name, mode):
    straight, make = _run(tmp_path / "a", 4, *STRATEGIES[name], *mode)
    split, _ = _run(tmp_path / "b", 3, *STRATEGIES[name], *mode)
    resume_run(split, 4, progress=False, log=lambda msg: None, evaluator_factory=make)
    for gen in range(5):
        assert comparable(RunFolder(straight).checkpoint_path(gen)) == comparable(RunFolder(split).checkpoint_path(gen))
    a = [e.to_json() for e in read_evaluations(straight / "evaluations.jsonl").records]
    b = [e.to_json() for e in read_evaluations(split / "evaluations.jsonl").records]
    assert [(e["kernel_id"], e["descriptors"]) for e in a] == [(e["kernel_id"], e["descriptors"]) for e in b]


def _decisions(folder):
    out = []
    for path in sorted((folder / "checkpoints").glob("gen-*.json")):
        ck = json.loads(path.read_text())
        out.append(({n: [m["id"] for m in v] for n, v in ck["population"].items()}, ck.get("islands"),
                    {n: [m["id"] for m in v] for n, v in ck["hall_of_fame"].items()}, ck["random_state"]))
    return out


@pytest.mark.parametrize("name", ["islands", "map_elites"])
def test_latency_first_decides_as_a_full_judgement_does(tmp_path, name):
    first, _ = _run(tmp_path / "a", 3, *STRATEGIES[name])
    full, _ = _run(tmp_path / "b", 3, *STRATEGIES[name], "evaluation.cascade=\"full\"")
    assert _decisions(first) == _decisions(full)


@pytest.mark.parametrize("mode", [(), ASYNC_SLOTS], ids=["generational", "async"])
def test_islands_keep_their_members_migrate_and_checkpoint(tmp_path, mode):
    folder, _ = _run(tmp_path, 4, *STRATEGIES["islands"], *mode)
    data = json.loads(RunFolder(folder).checkpoint_path(4).read_text())
    groups = data["islands"]["silu"]
    assert len(groups) == 2 and all(1 <= len(g) <= 4 for g in groups)
    assert {i for g in groups for i in g} == {m["id"] for m in data["population"]["silu"]}
    assert all(m["result"]["status"] == "ok" for m in data["population"]["silu"])
    log = data["logbook"]["silu"]
    assert [len(e["islands_best"]) for e in log] == [2] * 5
    assert [e["gen"] for e in log if e["migrated"]]
    if not mode:    # every migration_interval generations; async: every 2 x 6 evaluations
        assert all(e["gen"] in (2, 4) for e in log if e["migrated"])
    else:
        assert all(e["offspring"] == 6 for e in log[1:])
    assert Checkpoint.from_json(data).islands["silu"] == groups


@pytest.mark.parametrize("mode", [(), ASYNC_SLOTS], ids=["generational", "async"])
def test_map_elites_population_is_one_elite_per_cell_and_descriptors_are_logged(tmp_path, mode):
    folder, _ = _run(tmp_path, 3, *STRATEGIES["map_elites"], *mode)
    data = json.loads(RunFolder(folder).checkpoint_path(3).read_text())
    assert "islands" not in data
    lines = read_evaluations(folder / "evaluations.jsonl").records
    assert lines and all(line.descriptors.get("engine") in ("vector", "dma") for line in lines)
    cells = {line.kernel_id: (line.descriptors["engine"], min(7, int(line.descriptors["dma_share"] * 8)))
             for line in lines}
    population = [m["id"] for m in data["population"]["silu"]]
    assert all(m["result"]["status"] == "ok" for m in data["population"]["silu"])
    assert len({cells[i] for i in population}) == len(population) == data["logbook"]["silu"][-1]["archive_cells"]
    assert len(population) > 1


@pytest.mark.parametrize("mode", [(), ASYNC_ONE_SLOT], ids=["generational", "async"])
def test_novelty_sends_near_duplicates_back_and_counts_them(tmp_path, mode):
    evaluators: list = []
    folder, _ = _run(tmp_path, 3, "variation.novelty=0.5", *mode, evaluators=evaluators)
    log = json.loads(RunFolder(folder).checkpoint_path(3).read_text())["logbook"]["silu"]
    rejected = sum(e.get("novelty_rejected", 0) for e in log)
    assert rejected > 0
    if mode:   # a child dropped by novelty still counts: every generation closes
        assert all(e["offspring"] == 6 for e in log[1:])
    evaluated = {i for ev in evaluators for i in ev.judged}
    index = NoveltyIndex()
    for line in read_evaluations(folder / "evaluations.jsonl").records:   # no evaluated child is near an earlier one
        source = RunFolder(folder).read_kernel(line.kernel_id)
        if not line.reused and line.kernel_id in evaluated and line.operator != "baseline" and "repair" not in line.operator:
            assert index.nearest(line.kernel_id, source, 0.5) is None
        index.add(line.kernel_id, source)


@pytest.mark.parametrize("sets, message", [
    (("selection.strategy=\"rings\"",), "selection.strategy"),
    (("selection.strategy=\"islands\"", "selection.survivors=\"beam_per_plan\""), "selection.survivors"),
    (("selection.islands=1",), "selection.islands"),
    (("selection.topology=\"star\"",), "selection.topology"),
    (("variation.novelty=1.5",), "variation.novelty"),
])
def test_bad_settings_are_one_line_errors(sets, message):
    with pytest.raises(UserError, match=message):
        cfgmod.resolve(sets=list(sets))


def test_default_settings_leave_the_configuration_hash_alone():
    plain = cfgmod.resolve()
    data = cfgmod.tomllib.loads(cfgmod.to_toml(plain))      # as a run folder of an earlier release wrote it, less the new keys
    for section, keys in (("selection", ("strategy", "islands", "migration_interval", "migrants", "topology",
                                         "dma_bins")), ("variation", ("novelty",))):
        for key in keys:
            data[section].pop(key)
    assert cfgmod.from_saved(data).hash() == plain.hash()
    assert cfgmod.resolve(sets=["selection.strategy=\"islands\""]).hash() != plain.hash()


def test_the_report_shows_the_strategy_and_novelty(tmp_path):
    folder, _ = _run(tmp_path, 2, *STRATEGIES["islands"], "variation.novelty=0.5")
    text = "\n".join(report._diversity(report.collect(RunFolder(folder))))
    assert "## Diversity" in text and "2 islands, best speedups" in text and "sent back" in text
    plain, _ = _run(tmp_path / "plain", 1)
    assert report._diversity(report.collect(RunFolder(plain))) == []
