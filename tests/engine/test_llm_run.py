"""Whole runs with LLM operators: the real engine, the real evaluator (silu at its tiny shape)
and a real OpenAI-compatible HTTP server on 127.0.0.1 with scripted replies."""

from __future__ import annotations

import json
import re

import pytest

from accelopt_evo.cli.main import main
from accelopt_evo.errors import UserError
from accelopt_evo.run import config as cfgmod
from accelopt_evo.run.folder import RunFolder
from accelopt_evo.runner import resume_run, start_run

from fakes import KnobEvaluator
from llm_server import Fault

API_KEY = "sk-run-5ecret-never-in-files-42"
MARKER = re.compile(r"LESSON-[0-9a-f]{8}")

pytestmark = pytest.mark.slow


def make_cfg(out, url, gens=3, *sets):
    return cfgmod.resolve(sets=[
        f"run.out={json.dumps(str(out))}", f"run.gens={gens}", "run.shape=tiny", "run.report=false",
        "population.size=4", "population.offspring=4", "evaluation.seeds=[0, 1]", "evaluation.heldout_seeds=1",
        f"llm.base_url={json.dumps(url)}", "llm.model=test-model", "llm.api_key_env=ACCELOPT_RUN_KEY",
        "llm.max_retries=3", "llm.timeout_s=5", "memory.per_generation=2",
        # at the tiny shape knob changes move latency by a few percent: admit small changes
        "memory.improve_threshold=1.001", "memory.regress_threshold=1.01", *sets])


@pytest.fixture(autouse=True)
def api_key(monkeypatch):
    monkeypatch.setenv("ACCELOPT_RUN_KEY", API_KEY)


def quiet(_msg):
    pass


def ledger(folder: RunFolder) -> list[dict]:
    return [json.loads(line) for line in folder.llm_calls.read_text().splitlines()]


def assert_key_nowhere(root):
    for path in root.rglob("*"):
        if path.is_file():
            assert API_KEY.encode() not in path.read_bytes(), f"{path} contains the API key"


def test_memory_lessons_reach_later_prompts_and_the_ledger_matches_the_server(tmp_path, llm_server):
    outcome = start_run(make_cfg(tmp_path, llm_server.url), "r", progress=False, log=quiet)
    folder = outcome.folder
    entries = json.loads(folder.memory.read_text())["entries"]
    assert entries and all(MARKER.search(e["rationale"]) for e in entries)
    # a lesson admitted in generation g appears in the prompts of every later generation
    by_gen = {}
    for ex in llm_server.exchanges:
        by_gen.setdefault(int(ex.request.sample.split("/")[0]), []).append(ex.request.text)
    early = [e for e in entries if e["generation"] < 3]
    assert early, "no lesson early enough to be shown later"
    for e in early:
        marker = MARKER.search(e["rationale"]).group(0)
        later = [t for g, texts in by_gen.items() if g > e["generation"] for t in texts]
        assert later and all(marker in t for t in later)
    # the ledger's token totals equal the usage the server reported
    billed = [r for r in ledger(folder) if r["status"] == "ok" and not r["cached"]]
    totals = llm_server.totals()
    assert len(billed) == totals["calls"]
    assert sum(r["prompt_tokens"] for r in billed) == totals["prompt_tokens"]
    assert sum(r["completion_tokens"] for r in billed) == totals["completion_tokens"]
    assert {r["role"] for r in billed} >= {"planner", "implementer", "summarizer"}
    assert_key_nowhere(folder.root)


def test_faults_are_survived_and_recorded(tmp_path, llm_server):
    llm_server.inject(Fault("status", status=429, retry_after=1, times=1), Fault("status", status=500, times=2),
                      Fault("malformed", times=1), Fault("close", times=1), Fault("slow", delay_s=7, times=1))
    outcome = start_run(make_cfg(tmp_path, llm_server.url, 2), "r", progress=False, log=quiet)
    records = ledger(outcome.folder)
    statuses = {r["status"] for r in records}
    assert "ok" in statuses
    retries = " | ".join(msg for r in records for msg in r["retries"])
    for what in ("rate_limited: HTTP 429", "server_error: HTTP 500", "bad_response", "connection_error", "timeout"):
        assert what in retries, retries
    assert json.loads(outcome.folder.checkpoint_path(2).read_text())["generation"] == 2


def test_replies_without_code_are_operator_failures_in_ledger_and_logbook(tmp_path, make_server):
    server = make_server(lambda request: "I would rather not write code today.")
    outcome = start_run(make_cfg(tmp_path, server.url, 1), "r", progress=False, log=quiet)
    records = ledger(outcome.folder)
    assert any(r.get("outcome") == "no_code" for r in records)
    log = json.loads(outcome.folder.checkpoint_path(1).read_text())["logbook"]["silu"]
    assert log[-1]["failed_ops"] > 0 and log[-1]["valid"] == 0


def test_connection_refused_mid_run_does_not_stop_the_run(tmp_path, llm_server):
    cfg = make_cfg(tmp_path, llm_server.url, 2, "llm.max_retries=1")
    calls = []

    def log(msg):
        calls.append(msg)
        if msg.startswith("gen   0"):
            llm_server.pause()  # the endpoint goes away after the initial population

    outcome = start_run(cfg, "r", progress=False, log=log)
    llm_server.resume()
    records = ledger(outcome.folder)
    assert any(r["status"] == "connection_error" for r in records)
    assert outcome.folder.checkpoint_path(2).is_file()


def test_call_budget_stops_the_run_cleanly(tmp_path, llm_server, capsys):
    cfg = make_cfg(tmp_path, llm_server.url, 5, "budget.max_llm_calls=3")
    outcome = start_run(cfg, "r", progress=False, log=print)
    assert llm_server.totals()["calls"] <= 3
    assert outcome.stop_reason and "max_llm_calls" in outcome.stop_reason
    assert "max_llm_calls" in capsys.readouterr().out
    last = max(g for g, _ in outcome.folder.checkpoint_files())
    assert last < 5


def test_resume_after_deleting_the_last_checkpoint_sends_no_request(tmp_path, llm_server):
    outcome = start_run(make_cfg(tmp_path, llm_server.url, 2), "r", progress=False, log=quiet)
    folder = outcome.folder
    before = json.loads(folder.checkpoint_path(2).read_text())
    sent = len(llm_server.exchanges)
    folder.checkpoint_path(2).unlink()
    resume_run(folder.root, None, progress=False, log=quiet)
    assert len(llm_server.exchanges) == sent, "the resumed generation sent requests"
    after = json.loads(folder.checkpoint_path(2).read_text())
    assert [m["id"] for m in after["population"]["silu"]] == [m["id"] for m in before["population"]["silu"]]
    assert after["memory"] == before["memory"]


def test_unreachable_endpoint_stops_before_anything(tmp_path, llm_server, capsys):
    url = llm_server.url
    llm_server.stop()
    with pytest.raises(UserError, match="no LLM endpoint answers"):
        start_run(make_cfg(tmp_path, url), "r", progress=False, log=quiet)
    assert not (tmp_path / "r").exists()
    assert main(["run", "--out", str(tmp_path), "--set", f"llm.base_url={url}", "--set", "llm.model=m"]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_concurrency_does_not_change_the_run(tmp_path, make_server):
    checkpoints = []
    for conc in (1, 4):
        server = make_server()
        out = start_run(make_cfg(tmp_path / f"c{conc}", server.url, 2, f"llm.max_concurrency={conc}"), "r",
                        progress=False, log=quiet)
        ck = json.loads(out.folder.checkpoint_path(2).read_text())
        checkpoints.append(([m["id"] for m in ck["population"]["silu"]], ck["memory"]))
    assert checkpoints[0] == checkpoints[1]


def test_a_mixed_run_asks_for_about_the_configured_offspring_and_records_its_spend(tmp_path, llm_server):
    """Paper preset (12 plans x 2 samples per mutation request), half the requests to the LLM:
    a generation asks for `population.offspring` children and less than one request's worth
    more, and the checkpoint holds the spend the ledger shows."""
    cfg = cfgmod.resolve(preset="paper", sets=[
        f"run.out={json.dumps(str(tmp_path))}", "run.gens=1", "run.shape=tiny", "run.report=false",
        "operators.llm_fraction=0.5", "evaluation.seeds=[0, 1]", "evaluation.heldout_seeds=1",
        f"llm.base_url={json.dumps(llm_server.url)}", "llm.model=test-model", "llm.api_key_env=ACCELOPT_RUN_KEY",
        "llm.price_input_per_mtok=1.0", "llm.price_output_per_mtok=2.0"])
    per_request = cfg.llm.plans_per_parent * cfg.llm.samples_per_plan
    assert per_request == 24 and cfg.population.offspring == 144
    outcome = start_run(cfg, "r", progress=False, log=quiet,
                        evaluator_factory=lambda _cfg, _folder: KnobEvaluator(backend="simulator"))
    ck = json.loads(outcome.folder.checkpoint_path(1).read_text())
    asked = ck["logbook"]["silu"][-1]["offspring"]
    assert cfg.population.offspring <= asked < cfg.population.offspring + per_request
    records = ledger(outcome.folder)
    planned = sum(r["role"] == "planner" and r["generation"] == 1 for r in records)
    assert 0 < planned < cfg.population.offspring / per_request * cfg.llm.plans_per_parent + cfg.llm.plans_per_parent
    billed = [r for r in records if r["status"] == "ok" and not r["cached"]]
    spent = ck["llm_spent"]
    assert spent["calls"] == len(billed) == llm_server.totals()["calls"] > 0
    assert spent["cost_usd"] == pytest.approx(sum(r["cost_usd"] for r in billed)) and spent["cost_usd"] > 0
