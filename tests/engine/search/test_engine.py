"""The evolutionary loop, checkpoints and resume, on a deterministic fake evaluator."""

import json

import pytest

from accelopt_evo.run import config as cfgmod
from accelopt_evo.run.folder import RunFolder
from accelopt_evo.runner import resume_run, start_run

from checkpoint_diff import comparable
from fakes import KnobEvaluator

REQUIRED_KEYS = {"generation", "population", "hall_of_fame", "logbook", "memory", "random_state",
                 "numpy_state", "config_hash"}


def make_cfg(tmp_path, gens, *sets):
    return cfgmod.resolve(sets=[f"run.gens={gens}", f"run.out={json.dumps(str(tmp_path))}", "run.shape=tiny",
                                "population.size=6", "population.offspring=6", "run.report=false", *sets])


def quiet(msg):
    pass


def factory(evaluators):
    def make(cfg, folder):
        ev = KnobEvaluator()
        evaluators.append(ev)
        return ev
    return make


def test_run_writes_the_run_folder_and_improves(tmp_path):
    evs = []
    outcome = start_run(make_cfg(tmp_path, 4), "r1", progress=False, log=quiet, evaluator_factory=factory(evs))
    folder = RunFolder(tmp_path / "r1")
    assert folder.config.is_file() and folder.memory.is_file()
    assert [g for g, _ in folder.checkpoint_files()] == [0, 1, 2, 3, 4]
    ck = json.loads(folder.checkpoint_path(4).read_text())
    assert REQUIRED_KEYS <= set(ck)
    assert outcome.best["silu"]["speedup"] > 1.0
    assert (folder.best / "silu.py").read_text() == folder.read_kernel(outcome.best["silu"]["kernel_id"])
    # every kernel ever produced is stored, every evaluation is logged, nothing evaluated twice
    lines = [json.loads(l) for l in folder.evaluations.read_text().splitlines()]
    assert all(folder.kernel_path(l["kernel_id"]).is_file() for l in lines)
    assert len(evs[0].evaluated) == len(set(evs[0].evaluated))
    assert sum(1 for l in lines if not l["reused"]) == len(evs[0].evaluated)
    # no temporary files are left behind
    assert not [p for p in folder.root.rglob("*") if p.name.endswith(".tmp")]


def test_invalid_kernels_never_survive(tmp_path):
    start_run(make_cfg(tmp_path, 5), "r", progress=False, log=quiet, evaluator_factory=factory([]))
    folder = RunFolder(tmp_path / "r")
    lines = [json.loads(l) for l in folder.evaluations.read_text().splitlines()]
    assert any(l["status"] == "incorrect" for l in lines), "the search space has invalid kernels"
    for _, path in folder.checkpoint_files():
        ck = json.loads(path.read_text())
        assert all(m["result"]["status"] == "ok" for m in ck["population"]["silu"])
        assert all(m["result"]["status"] == "ok" for m in ck["hall_of_fame"]["silu"])


def test_three_generations_plus_resume_equal_five_straight(tmp_path):
    straight, split = tmp_path / "a", tmp_path / "b"
    start_run(make_cfg(straight, 5), "r", progress=False, log=quiet, evaluator_factory=factory([]))
    start_run(make_cfg(split, 3), "r", progress=False, log=quiet, evaluator_factory=factory([]))
    resume_run(split / "r", 5, progress=False, log=quiet, evaluator_factory=factory([]))
    for gen in range(6):
        a = comparable(RunFolder(straight / "r").checkpoint_path(gen))
        b = comparable(RunFolder(split / "r").checkpoint_path(gen))
        assert a == b, f"generation {gen} differs"


def test_resume_after_losing_the_last_checkpoint_redoes_that_generation(tmp_path):
    start_run(make_cfg(tmp_path / "a", 3), "r", progress=False, log=quiet, evaluator_factory=factory([]))
    start_run(make_cfg(tmp_path / "b", 3), "r", progress=False, log=quiet, evaluator_factory=factory([]))
    folder = RunFolder(tmp_path / "b" / "r")
    folder.checkpoint_path(3).unlink()
    resume_run(folder.root, None, progress=False, log=quiet, evaluator_factory=factory([]))
    assert comparable(folder.checkpoint_path(3)) == comparable(RunFolder(tmp_path / "a" / "r").checkpoint_path(3))
    # the evaluations of the redone generation are logged once, not twice
    a = (tmp_path / "a" / "r" / "evaluations.jsonl").read_text().count('"generation": 3')
    b = folder.evaluations.read_text().count('"generation": 3')
    assert a == b


def test_memory_records_improvements_with_rationales(tmp_path):
    start_run(make_cfg(tmp_path, 4, "memory.per_generation=2", "memory.capacity=3", "memory.improve_threshold=1.01",
                       "memory.regress_threshold=1.01"), "r",
              progress=False, log=quiet, evaluator_factory=factory([]))
    entries = json.loads(RunFolder(tmp_path / "r").memory.read_text())["entries"]
    # at most capacity, or more while the last generation's own admissions (never evicted) exceed
    # their kind's share (memory.py): then only those are above it
    last = max(e["generation"] for e in entries)
    assert 0 < len(entries) <= 3 + 2 and len([e for e in entries if e["generation"] != last]) <= 3
    for e in entries:
        assert e["kind"] in ("improvement", "regression") and e["rationale"] and e["diff"].startswith("---")
        assert (e["speedup"] >= 1.01) if e["kind"] == "improvement" else (e["speedup"] <= 1 / 1.01)


def test_resume_rejects_a_changed_config(tmp_path):
    start_run(make_cfg(tmp_path, 1), "r", progress=False, log=quiet, evaluator_factory=factory([]))
    folder = RunFolder(tmp_path / "r")
    folder.config.write_text(folder.config.read_text().replace("size = 6", "size = 7"))
    with pytest.raises(cfgmod.UserError, match="another configuration"):
        resume_run(folder.root, 2, progress=False, log=quiet, evaluator_factory=factory([]))


def test_existing_run_folder_is_not_overwritten(tmp_path):
    start_run(make_cfg(tmp_path, 0), "r", progress=False, log=quiet, evaluator_factory=factory([]))
    with pytest.raises(cfgmod.UserError, match="already exists"):
        start_run(make_cfg(tmp_path, 0), "r", progress=False, log=quiet, evaluator_factory=factory([]))
