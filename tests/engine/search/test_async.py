"""Asynchronous evolution (`run.mode = "async"`): generations counted every
`population.offspring` settled children, mu + 1 replacement with elitism, a bounded number of
requests in flight, checkpoints, resume from the caches, budgets, the progress display."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter

import pytest

from accelopt_evo import runner
from accelopt_evo.run import config as cfgmod
from accelopt_evo.run.folder import RunFolder
from accelopt_evo.runner import resume_run, start_run
from operators.tuning import TuningOperators

from fakes import Gauge, KnobEvaluator

API_KEY = "sk-async-not-a-real-key"


def make_cfg(out, gens, *sets):
    return cfgmod.resolve(sets=[f"run.gens={gens}", f"run.out={json.dumps(str(out))}", "run.shape=tiny",
                                "population.size=6", "population.offspring=6", "run.report=false",
                                'run.mode="async"', "run.max_in_flight=3", *sets])


def llm_cfg(out, url, gens, *sets):
    return make_cfg(out, gens, "population.size=4", "population.offspring=4", "evaluation.seeds=[0, 1]",
                    "evaluation.heldout_seeds=1", "evaluation.heldout=derived", f"llm.base_url={json.dumps(url)}",
                    "llm.model=test-model", "llm.api_key_env=ACCELOPT_ASYNC_KEY", "llm.max_retries=1",
                    "llm.timeout_s=5", *sets)


@pytest.fixture(autouse=True)
def api_key(monkeypatch):
    monkeypatch.setenv("ACCELOPT_ASYNC_KEY", API_KEY)


def quiet(_msg):
    pass


def fake(delay_s=0.0, gauge=None):
    return lambda cfg, folder: KnobEvaluator(delay_s=delay_s, gauge=gauge)


def checkpoints(folder: RunFolder) -> list[dict]:
    return [json.loads(path.read_text()) for _, path in folder.checkpoint_files()]


def evaluation_lines(folder: RunFolder) -> list[dict]:
    return [json.loads(line) for line in folder.evaluations.read_text().splitlines()]


def test_async_run_counts_generations_and_writes_checkpoints_and_a_report(tmp_path):
    cfg = make_cfg(tmp_path, 3, 'run.problems=["silu", "swiglu"]', "run.report=true")
    outcome = start_run(cfg, "r", progress=False, log=quiet, evaluator_factory=fake(0.01))
    folder = outcome.folder
    assert [g for g, _ in folder.checkpoint_files()] == [0, 1, 2, 3]
    assert outcome.report_path and outcome.report_path.is_file()
    last = checkpoints(folder)[-1]
    lines = evaluation_lines(folder)
    for problem in ("silu", "swiglu"):   # the slots are shared by both problems
        log = last["logbook"][problem]
        assert [e["gen"] for e in log] == [0, 1, 2, 3]
        for e in log[1:]:
            # every generation counts population.offspring settled children: evaluated (fresh or
            # reused), duplicates and operator failures; the knob operators repair nothing
            assert e["offspring"] == cfg.population.offspring
            assert e["evals"] + e["reused"] + e["duplicates"] + e["failed_ops"] == e["offspring"]
            logged = [x for x in lines if x["problem"].startswith(problem) and x["generation"] == e["gen"]]
            assert len(logged) == e["evals"] + e["reused"]
        # every kernel of the checkpoint's population is stored
        assert all(folder.kernel_path(m["id"]).is_file() for m in last["population"][problem])
    assert outcome.best["silu"]["speedup"] > 1.0


def test_elitism_holds_and_invalid_kernels_never_enter(tmp_path):
    outcome = start_run(make_cfg(tmp_path, 4, "population.elitism=1"), "r", progress=False, log=quiet,
                        evaluator_factory=fake())
    best_before = 0.0
    for ck in checkpoints(outcome.folder):
        pop = ck["population"]["silu"]
        assert len(pop) <= 6 and all(m["result"]["status"] == "ok" for m in pop)
        best = max(m["result"]["speedup"] for m in pop)
        assert best >= best_before, "the best kernel left the population"
        assert ck["hall_of_fame"]["silu"][0]["id"] in {m["id"] for m in pop}
        best_before = best


def test_latency_first_in_async_mode_judges_only_children_whose_verdict_decides(tmp_path):
    from fakes import TracingKnobEvaluator

    evaluators: list = []

    def tracing(cfg, folder):
        evaluators.append(TracingKnobEvaluator())
        return evaluators[-1]

    outcome = start_run(make_cfg(tmp_path, 6, "population.elitism=1"), "r", progress=False, log=quiet,
                        evaluator_factory=tracing)
    lines = [e for e in evaluation_lines(outcome.folder) if not e["reused"] and e["operator"] != "baseline"]
    statuses = {e["status"] for e in lines}
    assert "not_judged" in statuses and "ok" in statuses
    for ck in checkpoints(outcome.folder):   # only judged, valid kernels enter
        assert all(m["result"]["status"] == "ok" for m in ck["population"]["silu"] + ck["hall_of_fame"]["silu"])
    valid = {e["kernel_id"] for e in lines if e["status"] == "ok"}
    memory = checkpoints(outcome.folder)[-1]["memory"]
    assert all(m["child_id"] in valid for m in memory if m["child_id"] in {e["kernel_id"] for e in lines})


class SlowTuning(TuningOperators):
    """Knob tuning that takes a while and reports to a gauge while it works."""

    def __init__(self, gauge: Gauge, delay_s: float) -> None:
        super().__init__()
        self.gauge, self.delay_s = gauge, delay_s

    def vary(self, requests, ctx):
        with self.gauge.held("vary"):
            time.sleep(self.delay_s)
            return super().vary(requests, ctx)

    def repair(self, failed, ctx):
        with self.gauge.held("repair"):
            return super().repair(failed, ctx)


def test_no_more_than_max_in_flight_requests_and_evaluations_at_once(tmp_path, monkeypatch):
    gauge = Gauge()
    monkeypatch.setattr(runner, "choose_operators", lambda cfg, run_dir, check=True, preflight=(): (SlowTuning(gauge, 0.03), "slow"))
    start_run(make_cfg(tmp_path, 3, "run.max_in_flight=3"), "r", progress=False, log=quiet,
              evaluator_factory=fake(0.03, gauge))
    assert 2 <= gauge.peak <= 3   # variation and evaluation overlap, within the bound


def test_progress_shows_work_in_flight_and_no_progress_silences_it(tmp_path, capsys):
    start_run(make_cfg(tmp_path, 2), "shown", progress=True, log=quiet, evaluator_factory=fake(0.05))
    err = capsys.readouterr().err
    assert "tuning " in err and "silu mutation" in err and "eval " in err and " on slot " in err
    start_run(make_cfg(tmp_path, 2), "quiet", progress=False, log=quiet, evaluator_factory=fake(0.05))
    assert capsys.readouterr().err == ""


def test_a_budget_stops_an_async_run(tmp_path, llm_server):
    cfg = llm_cfg(tmp_path, llm_server.url, 5, "budget.max_llm_calls=10")
    outcome = start_run(cfg, "r", progress=False, log=quiet, evaluator_factory=fake())
    assert llm_server.totals()["calls"] <= 10
    assert outcome.stop_reason and "max_llm_calls" in outcome.stop_reason
    last = max(g for g, _ in outcome.folder.checkpoint_files())
    assert last < 5
    assert json.loads(outcome.folder.checkpoint_path(last).read_text())["generation"] == last


def test_an_interrupted_async_run_resumes_from_its_checkpoint_and_the_caches(tmp_path, llm_server):
    """The real evaluator and the LLM server; the interruption after generation 1 is made by
    removing the later checkpoints (their replies and evaluations stay in the caches)."""
    outcome = start_run(llm_cfg(tmp_path, llm_server.url, 3), "r", progress=False, log=quiet)
    folder = outcome.folder
    first = {x["kernel_id"] for x in evaluation_lines(folder) if not x["reused"]}
    calls = len(folder.llm_calls.read_text().splitlines())
    for gen in (2, 3):
        folder.checkpoint_path(gen).unlink()

    resume_run(folder.root, None, progress=False, log=quiet)
    ck = json.loads(folder.checkpoint_path(3).read_text())
    log = ck["logbook"]["silu"]
    assert [e["gen"] for e in log] == [0, 1, 2, 3]
    assert all(e["offspring"] == 4 for e in log[1:])
    # the first requests after checkpoint 1 are asked again, and answered by the cache
    resumed = [json.loads(line) for line in folder.llm_calls.read_text().splitlines()[calls:]]
    assert any(r["cached"] and r["generation"] == 2 for r in resumed)
    # kernels evaluated before the interruption are not evaluated again
    lines = evaluation_lines(folder)
    assert sorted(Counter(x["generation"] for x in lines)) == [0, 1, 2, 3]
    again = [x for x in lines if x["generation"] >= 2 and not x["reused"] and x["kernel_id"] in first]
    assert all(x["cached"] for x in again)


def test_an_async_run_killed_mid_run_resumes_and_completes(tmp_path):
    """The real CLI, evaluator and simulator: SIGKILL once generation 1 is checkpointed, then
    `resume` finishes the run; nothing half-written, every generation counted in full."""
    flags = ["--no-progress", "--set", "run.shape=tiny", "--set", "population.size=4", "--set",
             "population.offspring=4", "--set", "evaluation.seeds=[0]", "--set", "evaluation.heldout_seeds=1",
             "--set", "run.report=false", "--set", 'run.mode="async"', "--set", "run.max_in_flight=3"]
    victim = subprocess.Popen([sys.executable, "-m", "accelopt_evo", "run", "--gens", "4", "--run-id", "k", *flags],
                              cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              start_new_session=True)
    folder = RunFolder(tmp_path / "runs" / "k")
    deadline = time.monotonic() + 300
    while not folder.checkpoint_path(1).exists():
        assert victim.poll() is None, victim.stdout.read()
        assert time.monotonic() < deadline
        time.sleep(0.005)
    os.killpg(victim.pid, signal.SIGKILL)
    victim.wait(timeout=30)
    assert not folder.checkpoint_path(4).exists(), "the run ended before it could be killed"
    for _, path in folder.checkpoint_files():
        json.loads(path.read_text())

    resumed = subprocess.run([sys.executable, "-m", "accelopt_evo", "resume", str(folder.root), "--no-progress"],
                             cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    log = json.loads(folder.checkpoint_path(4).read_text())["logbook"]["silu"]
    assert [e["gen"] for e in log] == [0, 1, 2, 3, 4]
    assert all(e["offspring"] == 4 for e in log[1:])
    lines = evaluation_lines(folder)
    for e in log:   # the log holds each generation's evaluations once
        assert sum(x["generation"] == e["gen"] for x in lines) == e["evals"] + e["reused"]
