"""The response cache, the call ledger and the budget with in-flight reservation."""

from __future__ import annotations

import json
import threading

from operators.llm.budget import Budget, Totals
from operators.llm.cache import CachedReply, ResponseCache, cache_key
from operators.llm.ledger import NOT_SENT, OK, TIMEOUT, CallRecord, Ledger, read_records
from operators.llm.settings import BudgetSettings

MSGS = ({"role": "system", "content": "s"}, {"role": "user", "content": "u"})


def test_cache_key_depends_on_model_messages_parameters_and_sample():
    base = cache_key("m", MSGS, {"temperature": 0.7}, "1/0")
    assert base == cache_key("m", list(MSGS), {"temperature": 0.7}, "1/0")
    assert base != cache_key("m2", MSGS, {"temperature": 0.7}, "1/0")
    assert base != cache_key("m", MSGS[:1], {"temperature": 0.7}, "1/0")
    assert base != cache_key("m", MSGS, {"temperature": 0.8}, "1/0")
    assert base != cache_key("m", MSGS, {"temperature": 0.7, "reasoning_effort": "low"}, "1/0")
    assert base != cache_key("m", MSGS, {"temperature": 0.7}, "1/1")


def test_cache_round_trip_is_atomic_and_tolerates_damage(tmp_path):
    cache = ResponseCache(tmp_path / "c")
    key = cache_key("m", MSGS, {}, "0/0")
    assert cache.get(key) is None
    reply = CachedReply("hello", 10, 2, "stop", "m", "planner")
    cache.put(key, reply)
    assert cache.get(key) == reply and len(cache) == 1
    assert not list((tmp_path / "c").rglob(".tmp-*"))
    (tmp_path / "c" / key[:2] / f"{key}.json").write_text("{torn")
    assert cache.get(key) is None


def _record(**kw):
    base = dict(role="planner", model="m", prompt_hash="h", prompt_tokens=0, completion_tokens=0, cost_usd=0.0,
                seconds=0.1, status=OK, cached=False)
    base.update(kw)
    return CallRecord(**base)


def test_ledger_totals_count_billed_calls_only_and_redact_secrets(tmp_path):
    path = tmp_path / "llm_calls.jsonl"
    ledger = Ledger(path, secrets=["sk-SECRET"])
    ledger.append(_record(prompt_tokens=100, completion_tokens=20, cost_usd=0.5))
    ledger.append(_record(prompt_tokens=100, completion_tokens=20, cached=True))      # replayed: not billed
    ledger.append(_record(status=TIMEOUT, error="timed out", retries=["timeout: x; waited 1s"]))
    ledger.append(_record(status=NOT_SENT, error="budget"))
    ledger.append(_record(status="http_error", error="HTTP 400: bad key sk-SECRET"))
    with path.open("a") as f:
        f.write('{"role": "torn')                                                     # a crash mid-write
    assert ledger.totals() == Totals(1, 100, 20, 0.5)
    records = read_records(path)
    assert len(records) == 5 and records[0].time
    assert "sk-SECRET" not in path.read_text() and "bad key ***" in path.read_text()
    for line in path.read_text().splitlines()[:5]:
        assert {"role", "model", "prompt_hash", "prompt_tokens", "completion_tokens", "cost_usd", "seconds",
                "status", "cached"} <= set(json.loads(line))


def test_call_cap_counts_calls_in_flight():
    budget = Budget(BudgetSettings(max_llm_calls=3))
    held = [budget.reserve(10, 0.0) for _ in range(3)]
    assert all(held)
    assert budget.reserve(10, 0.0) is None            # three are in flight: a fourth would pass the cap
    assert budget.stop_reason().startswith("budget.max_llm_calls=3 reached")
    budget.settle(held[0], Totals())                   # a failed call is not billed...
    budget.settle(held[1], Totals(1, 5, 5, 0.0))
    budget.settle(held[2], Totals(1, 5, 5, 0.0))
    assert budget.spent == Totals(2, 10, 10, 0.0)
    assert "(2 billed calls;" in budget.stop_reason()  # ...and the reason says what was spent


def test_no_stop_reason_while_every_cap_has_room():
    budget = Budget(BudgetSettings(max_llm_calls=5, max_tokens=1000, max_usd=1.0))
    r = budget.reserve(100, 0.1)
    budget.settle(r, Totals(1, 60, 40, 0.1))
    assert budget.stop_reason() is None
    assert budget.expected_completion_tokens() == 40


def test_token_cap_refuses_a_call_whose_estimate_does_not_fit():
    budget = Budget(BudgetSettings(max_tokens=1000), spent=Totals(2, 600, 100, 0.0))
    assert budget.reserve(200, 0.0) is not None        # 700 spent + 200
    assert budget.reserve(200, 0.0) is None            # 700 + 200 in flight + 200 > 1000
    assert budget.stop_reason() == "budget.max_tokens=1000 reached (700 tokens used; no further LLM call is started)"


def test_usd_cap_is_reached_by_spending():
    budget = Budget(BudgetSettings(max_usd=0.01))
    r = budget.reserve(10, 0.001)
    budget.settle(r, Totals(1, 1000, 1000, 0.012))
    assert budget.stop_reason().startswith("budget.max_usd=0.01 reached ($0.0120 spent")
    assert budget.reserve(10, 0.001) is None


def test_reservations_are_thread_safe():
    budget = Budget(BudgetSettings(max_llm_calls=50))
    got = []

    def grab():
        for _ in range(20):
            r = budget.reserve(1, 0.0)
            if r is not None:
                got.append(r)

    threads = [threading.Thread(target=grab) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 50
