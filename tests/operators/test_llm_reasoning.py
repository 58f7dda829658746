"""Strong reasoning models: requests carry only what is configured, replies cut at their budget
are never cached and get one retry with the larger budget, reasoning tokens are counted and
priced once, and a preflight call turns a refused parameter into one line naming its config key
before a run spends anything. Against the test server's reasoning-model mode (tests/llm_server.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from accelopt_evo.cli.main import main
from accelopt_evo.errors import UserError
from accelopt_evo.run import config as cfgmod
from accelopt_evo.run.folder import RunFolder
from accelopt_evo.runner import check_operators, choose_operators, llm_roles_in_use, newest_checkpoint, start_run
from operators.base import MUTATION, Request
from operators.llm import LLMOperators, PreflightError, ledger as L, preflight
from operators.llm.cache import CACHE_DIR, CachedReply, ResponseCache, cache_key
from operators.llm.client import ChatCall, ChatClient, parse_completion, probes
from operators.llm.ledger import read_records
from operators.llm.settings import LLMSettings

from llm_server import DECOY, PREFLIGHT_ROLE, Fault, ReasoningModel, ScriptedLLMServer
from llm_support import API_KEY, ENV, baseline_parent, budget, context, settings

DATA = Path(__file__).resolve().parents[1] / "data"
SHORT = 64      # below ReasoningModel().min_budget: all spent on reasoning, finish_reason "length"
LONG = 4096


@pytest.fixture
def reasoning_server():
    with ScriptedLLMServer(reasoning=ReasoningModel()) as server:
        yield server


def make_ops(url: str, run_dir: Path, **llm) -> LLMOperators:
    return LLMOperators(settings(url, **llm), budget(), run_dir, environ=ENV)


def mutate(ops: LLMOperators) -> list:
    (children,) = ops.vary([Request(MUTATION, (baseline_parent(),))], context())
    return children


def bodies(server: ScriptedLLMServer, role: str) -> list[dict]:
    return [e.request.body for e in server.exchanges if e.request.role == role]


# Requests -----------------------------------------------------------------------------------


def test_requests_carry_only_what_is_configured(llm_server, make_server, run_dir):
    with make_ops(llm_server.url, run_dir) as ops:
        assert all(c.source for c in mutate(ops))
    for body in bodies(llm_server, "planner") + bodies(llm_server, "implementer"):
        assert set(body) == {"model", "messages"}, body

    configured = make_server()
    with make_ops(configured.url, run_dir / "b", temperature=0.3, max_tokens=2000, reasoning_effort="high",
                  extra={"chat_template_kwargs": {"enable_thinking": True}},
                  roles={"implementer": {"max_tokens": 8000, "reasoning_effort": "low"}}) as ops:
        mutate(ops)
    (planner,) = bodies(configured, "planner")
    (implementer,) = bodies(configured, "implementer")
    assert planner["temperature"] == 0.3 and planner["max_completion_tokens"] == 2000
    assert planner["reasoning_effort"] == "high" and planner["chat_template_kwargs"] == {"enable_thinking": True}
    assert "max_tokens" not in planner
    assert (implementer["max_completion_tokens"], implementer["reasoning_effort"]) == (8000, "low")


def test_defaults_fit_reasoning_models():
    s = LLMSettings.from_section(cfgmod.Config().llm)
    for role in ("planner", "implementer", "summarizer"):
        r = s.role(role)
        assert (r.temperature, r.max_tokens, r.max_tokens_retry, r.reasoning_effort) == (None, None, None, None)
        assert r.timeout_s >= 600
    call = ChatCall.for_role(s.role("planner"), [{"role": "user", "content": "x"}])
    assert call.params() == {}


def test_a_role_timeout_overrides_the_llm_one(llm_server):
    s = settings(llm_server.url, timeout_s=30.0, roles={"implementer": {"timeout_s": 0.5}})
    llm_server.inject(Fault("slow", delay_s=1.5, role="implementer"))
    client = ChatClient.from_settings(s, ENV, backoff_base_s=0.01, backoff_max_s=0.05)
    msgs = [{"role": "user", "content": "hi"}]
    result = client.complete(ChatCall.for_role(s.role("implementer"), msgs))
    assert result.status == L.OK and result.retries[0].startswith("timeout")
    assert ChatCall.for_role(s.role("planner"), msgs).timeout_s == 30.0
    client.close()


def test_reasoning_content_is_not_the_answer(reasoning_server, run_dir):
    client = ChatClient(api_key=API_KEY, timeout_s=5.0, max_retries=0)
    s = settings(reasoning_server.url)
    result = client.complete(ChatCall.for_role(s.role("summarizer"), [{"role": "user", "content": "why?"}]))
    assert result.status == L.OK and result.content and DECOY not in result.content
    client.close()
    with make_ops(reasoning_server.url, run_dir) as ops:
        children = mutate(ops)
    assert children and all(c.source and DECOY not in c.source and "# tune:" in c.source for c in children)


# Truncated replies --------------------------------------------------------------------------


def test_a_truncated_reply_is_retried_once_with_the_larger_budget_and_only_the_whole_reply_cached(
        reasoning_server, run_dir):
    with make_ops(reasoning_server.url, run_dir, max_tokens=SHORT, max_tokens_retry=LONG) as ops:
        children = mutate(ops)
    assert len(children) == 1 and children[0].source
    sent = [(e.request.role, e.request.body.get("max_completion_tokens"), e.outcome) for e in reasoning_server.exchanges]
    assert sent == [("planner", SHORT, "length"), ("planner", LONG, "ok"),
                    ("implementer", SHORT, "length"), ("implementer", LONG, "ok")]
    records = read_records(run_dir / L.LEDGER_FILE)
    assert [r.status for r in records] == [L.OK, L.OK]
    for r in records:
        assert r.attempts == 2 and r.retries[0].startswith("truncated: reply cut at its completion budget")
        both = [e for e in reasoning_server.exchanges if e.request.role == r.role]
        assert r.completion_tokens == sum(e.completion_tokens for e in both)   # both answers are billed
        assert r.reasoning_tokens == sum(e.reasoning_tokens for e in both)
    cache = ResponseCache(run_dir / CACHE_DIR)
    stored = [json.loads(p.read_text()) for p in (run_dir / CACHE_DIR).rglob("*.json")]
    assert len(cache) == 2 and {s["finish_reason"] for s in stored} == {"stop"}
    assert all(s["content"] and DECOY not in s["content"] for s in stored)


def test_without_a_retry_budget_a_truncated_reply_is_billed_recorded_and_never_cached(reasoning_server, run_dir):
    s = settings(reasoning_server.url, max_tokens=SHORT, price_input_per_mtok=1.0, price_output_per_mtok=10.0)
    with LLMOperators(s, budget(), run_dir, environ=ENV) as ops:
        (child,) = mutate(ops)
        spent = ops.spent()
    assert child.source is None and child.error.startswith("planner: truncated: reply cut at its completion budget")
    (record,) = read_records(run_dir / L.LEDGER_FILE)
    (exchange,) = reasoning_server.exchanges
    assert (record.status, record.attempts, record.retries) == (L.TRUNCATED, 1, [])
    assert (record.completion_tokens, record.reasoning_tokens) == (SHORT, SHORT) == (exchange.completion_tokens,
                                                                                    exchange.reasoning_tokens)
    assert record.cost_usd == pytest.approx(s.cost_usd(exchange.prompt_tokens, SHORT)) and record.cost_usd > 0
    assert record.billed and spent["calls"] == 1 and spent["cost_usd"] == pytest.approx(record.cost_usd)
    assert len(ResponseCache(run_dir / CACHE_DIR)) == 0
    with LLMOperators(s, budget(), run_dir, environ=ENV) as again:   # a resumed run asks again
        mutate(again)
        assert again.budget.spent.calls == 2
    assert len(reasoning_server.exchanges) == 2


# Reasoning tokens ---------------------------------------------------------------------------


def test_the_ledger_counts_reasoning_tokens_and_prices_them_once(reasoning_server, run_dir):
    s = settings(reasoning_server.url, price_input_per_mtok=2.0, price_output_per_mtok=8.0)
    with LLMOperators(s, budget(), run_dir, environ=ENV) as ops:
        mutate(ops)
        spent = ops.spent()
    records = read_records(run_dir / L.LEDGER_FILE)
    totals = reasoning_server.totals()
    assert totals["reasoning_tokens"] == 2 * ReasoningModel().reasoning_tokens
    assert sum(r.reasoning_tokens for r in records) == totals["reasoning_tokens"] == spent["reasoning_tokens"]
    assert sum(r.completion_tokens for r in records) == totals["completion_tokens"]   # reasoning inside
    assert sum(r.cost_usd for r in records) == pytest.approx(
        (2.0 * totals["prompt_tokens"] + 8.0 * totals["completion_tokens"]) / 1e6)
    assert L.Ledger(run_dir / L.LEDGER_FILE).totals().reasoning_tokens == totals["reasoning_tokens"]


def _body(usage: dict) -> str:
    return json.dumps({"choices": [{"finish_reason": "stop", "message": {"content": "x", "reasoning_content": "y"}}],
                       "usage": usage})


def test_reasoning_tokens_reported_beside_the_completion_are_added_once():
    inside = parse_completion(_body({"prompt_tokens": 10, "completion_tokens": 50, "total_tokens": 60,
                                     "completion_tokens_details": {"reasoning_tokens": 40}}))
    beside = parse_completion(_body({"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 60,
                                     "completion_tokens_details": {"reasoning_tokens": 40}}))
    plain = parse_completion(_body({"prompt_tokens": 10, "completion_tokens": 5}))
    assert (inside.completion_tokens, inside.reasoning_tokens) == (50, 40)
    assert (beside.completion_tokens, beside.reasoning_tokens) == (50, 40)
    assert (plain.completion_tokens, plain.reasoning_tokens, plain.content) == (5, 0, "x")


def test_ledger_lines_without_reasoning_tokens_still_read(tmp_path):
    path = tmp_path / L.LEDGER_FILE
    shutil.copy(DATA / "run-v1-llm" / L.LEDGER_FILE, path)
    records = read_records(path)
    assert records and all(r.reasoning_tokens == 0 for r in records)
    assert L.Ledger(path).totals().calls == sum(r.status == "ok" and not r.cached for r in records)


# Preflight ----------------------------------------------------------------------------------


def test_preflight_names_the_refused_parameter_and_the_key_that_set_it(reasoning_server):
    with pytest.raises(PreflightError) as err:
        preflight(settings(reasoning_server.url, temperature=0.7), ("planner", "summarizer"), environ=ENV)
    msg = str(err.value)
    assert "\n" not in msg and "temperature=0.7" in msg and "(set by llm.temperature;" in msg
    assert "Only the default (1) value is supported" in msg
    assert [r.status for r in err.value.records] == [L.HTTP_ERROR]

    s = settings(reasoning_server.url, roles={"summarizer": {"temperature": 0.2}})
    with pytest.raises(PreflightError, match=r"temperature=0\.2 .*set by llm\.roles\.summarizer\.temperature;"):
        preflight(s, ("planner", "summarizer"), environ=ENV)
    (planner_probe, summarizer_probe) = [e.request for e in reasoning_server.exchanges[-2:]]
    assert "temperature" not in planner_probe.body and summarizer_probe.body["temperature"] == 0.2


def test_preflight_sends_one_call_per_distinct_endpoint_model_and_parameters(reasoning_server):
    s = settings(reasoning_server.url, roles={"implementer": {"reasoning_effort": "high"},
                                              "repair": {"reasoning_effort": "high"}})
    assert [p.roles for p in probes(s, ("planner", "implementer", "crossover", "repair"))] == [
        ("planner", "crossover"), ("implementer", "repair")]
    records = preflight(s, ("planner", "implementer", "crossover", "repair"), environ=ENV)
    assert [r.status for r in records] == [L.OK, L.OK] and all(r.role == PREFLIGHT_ROLE for r in records)
    assert all(r.reasoning_tokens > 0 and r.completion_tokens > r.reasoning_tokens for r in records)
    assert len(reasoning_server.exchanges) == 2
    assert preflight(s, ("planner", "implementer"), done=records, environ=ENV) == []   # a resume: known
    assert len(reasoning_server.exchanges) == 2


def test_preflight_failures_keep_the_one_line_of_an_unreachable_endpoint(llm_server):
    s = settings(llm_server.url, max_retries=0)
    llm_server.inject(Fault("close", role=PREFLIGHT_ROLE))
    with pytest.raises(PreflightError, match=rf"^no LLM endpoint answers at {llm_server.url} \(llm.base_url\): "):
        preflight(s, ("planner",), environ=ENV)
    llm_server.inject(Fault("status", status=404, message="The model `test-model` does not exist", role=PREFLIGHT_ROLE))
    with pytest.raises(PreflightError, match=r"refused a minimal request to model 'test-model' \(roles planner\)"):
        preflight(s, ("planner",), environ=ENV)


# Whole runs ---------------------------------------------------------------------------------


def run_cfg(out: Path, url: str, *sets: str) -> cfgmod.Config:
    return cfgmod.resolve(sets=[
        f"run.out={json.dumps(str(out))}", "run.gens=1", "run.shape=tiny", "run.report=false",
        "population.size=4", "population.offspring=4", "evaluation.seeds=[0, 1]", "evaluation.heldout_seeds=1",
        f"llm.base_url={json.dumps(url)}", "llm.model=test-model", "llm.api_key_env=ACCELOPT_RUN_KEY",
        "llm.max_retries=1", "llm.price_input_per_mtok=1.0", "llm.price_output_per_mtok=4.0", *sets])


@pytest.mark.slow
def test_a_run_with_default_settings_against_a_reasoning_model_produces_children(tmp_path, reasoning_server,
                                                                                monkeypatch):
    monkeypatch.setenv("ACCELOPT_RUN_KEY", API_KEY)
    outcome = start_run(run_cfg(tmp_path, reasoning_server.url), "r", progress=False, log=lambda _m: None)
    folder = outcome.folder
    log = json.loads(folder.checkpoint_path(1).read_text())["logbook"]["silu"]
    assert log[-1]["valid"] > 0
    records = [json.loads(line) for line in folder.llm_calls.read_text().splitlines()]
    assert records[0]["role"] == PREFLIGHT_ROLE and records[0]["status"] == "ok"
    assert sum(r["role"] == PREFLIGHT_ROLE for r in records) == 1
    totals = reasoning_server.totals()
    assert sum(r["reasoning_tokens"] for r in records) == totals["reasoning_tokens"] > 0
    assert sum(r["completion_tokens"] for r in records) == totals["completion_tokens"]
    assert json.loads(folder.checkpoint_path(1).read_text())["llm_spent"]["calls"] == totals["calls"]
    for exchange in reasoning_server.exchanges:
        assert "temperature" not in exchange.request.body


@pytest.mark.slow
def test_a_temperature_the_model_refuses_ends_the_run_before_generation_0(tmp_path, reasoning_server, monkeypatch,
                                                                          capsys):
    monkeypatch.setenv("ACCELOPT_RUN_KEY", API_KEY)
    with pytest.raises(UserError, match=r"refused temperature=0\.7 .*set by llm\.temperature;") as err:
        start_run(run_cfg(tmp_path, reasoning_server.url, "llm.temperature=0.7"), "r", progress=False,
                  log=lambda _m: None)
    assert "\n" not in str(err.value)
    assert not (tmp_path / "r").exists()
    assert [e.request.role for e in reasoning_server.exchanges] == [PREFLIGHT_ROLE]   # nothing else sent
    assert main(["run", "--out", str(tmp_path), "--set", f"llm.base_url={reasoning_server.url}",
                 "--set", "llm.model=test-model", "--set", "llm.temperature=0.7", "--no-progress"]) == 2
    err_text = capsys.readouterr().err
    assert err_text.count("\n") == 1 and "llm.temperature" in err_text
    assert len(reasoning_server.exchanges) == 2


def test_roles_in_use_follow_the_operators_switched_on():
    assert llm_roles_in_use(cfgmod.resolve()) == ("planner", "implementer", "crossover", "repair", "summarizer")
    cfg = cfgmod.resolve(sets=["variation.crossover_prob=0", "variation.repair_attempts=0", "memory.capacity=0"])
    assert llm_roles_in_use(cfg) == ("planner", "implementer")


def test_a_resumed_run_records_the_start_preflight_once_and_sends_no_other(tmp_path, llm_server, monkeypatch):
    """start_run checks before its folder exists; the choose_operators call that follows writes those
    preflight records into the new folder's ledger, and a resume finds them there."""
    monkeypatch.setenv("ACCELOPT_RUN_KEY", API_KEY)
    cfg = run_cfg(tmp_path, llm_server.url)
    preflight = check_operators(cfg)
    folder = tmp_path / "f"
    folder.mkdir()
    ops, _ = choose_operators(cfg, folder, check=False, preflight=preflight)
    ops.close()
    (record,) = read_records(folder / L.LEDGER_FILE)
    assert record.role == PREFLIGHT_ROLE and record.billed and record.generation == -1
    ops, _ = choose_operators(cfg, folder)          # a resume: the preflight is in the ledger
    ops.close()
    assert len(read_records(folder / L.LEDGER_FILE)) == 1 and len(llm_server.exchanges) == 1


# Old run folders ----------------------------------------------------------------------------


def test_an_old_llm_run_folder_keeps_its_cache_keys_and_configuration_hash(tmp_path):
    shutil.copytree(DATA / "run-v1-llm", tmp_path / "old")
    folder = RunFolder(tmp_path / "old")
    cfg = cfgmod.from_saved(cfgmod.load_file(folder.config))
    newest_checkpoint(folder, cfg)                  # raises when the configuration hash changed
    s = LLMSettings.from_section(cfg.llm)
    msgs = ({"role": "user", "content": "k"},)
    for role in ("planner", "implementer", "summarizer"):
        call = ChatCall.for_role(s.role(role), msgs, "0/0")
        # what that release keyed its replies by: the temperature it always sent, and `extra`
        assert call.params() == {"temperature": 0.7}
        assert cache_key(call.model, call.messages, call.params(), call.sample) == cache_key(
            "test-model", msgs, {"temperature": 0.7}, "0/0")


# Configuration ------------------------------------------------------------------------------


@pytest.mark.parametrize("assignment, key", [
    ("llm.max_tokens=0", "llm.max_tokens"),
    ("llm.roles.planner.timeout_s=0", "llm.roles.planner.timeout_s"),
    ("llm.roles.repair.max_tokens_retry=100", "llm.roles.repair.max_tokens_retry"),
])
def test_budgets_and_timeouts_are_checked_per_role(assignment, key):
    with pytest.raises(UserError, match=rf"config key '{key}' must"):
        cfgmod.resolve(sets=["llm.max_tokens=1000", assignment])


def test_a_new_configuration_round_trips_with_unset_parameters():
    cfg = cfgmod.resolve(sets=["llm.roles.implementer.max_tokens=9000", "llm.reasoning_effort=\"high\""])
    again = cfgmod.from_dict(cfgmod.tomllib.loads(cfgmod.to_toml(cfg)))
    assert again == cfg and again.hash() == cfg.hash() and again.llm.temperature is None
    assert cfg.hash() != cfgmod.resolve().hash()


def test_the_cache_never_stores_a_reply_cut_at_its_budget(tmp_path):
    cache = ResponseCache(tmp_path / CACHE_DIR)
    key = cache_key("m", ({"role": "user", "content": "u"},), {}, "0/0")
    cache.put(key, CachedReply("", 10, 64, "length", "m", "planner"))
    assert cache.get(key) is None and len(cache) == 0
