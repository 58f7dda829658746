"""LLMOperators against the real test server: mutation, crossover, repair, summarizer,
concurrency, cache, ledger, budget, faults, and the key staying out of the run folder."""

from __future__ import annotations

import json

import pytest

from llm_support import API_KEY, BASELINE, ENV, baseline_parent, budget, context, settings, with_knob
from llm_server import Fault, knob_responder
from operators.base import CROSSOVER, MUTATION, Child, Parent, Request
from operators.llm import CROSSOVER_OP, MUTATION_OP, REPAIR_OP, LLMOperators
from operators.llm.ledger import read_records

OTHER = Parent("b" * 64, with_knob(BASELINE, "COMPUTE_N", 256), 1.1, 0.9, 11.0, {"latency_ms": 0.9})


def make_ops(url, run_dir, caps=None, **llm):
    return LLMOperators(settings(url, **llm), caps or budget(), run_dir, environ=ENV)


def test_mutation_gives_plans_times_samples_children_and_crossover_one(llm_server, run_dir):
    with make_ops(llm_server.url, run_dir, plans_per_parent=2, samples_per_plan=3) as ops:
        p = baseline_parent()
        out = ops.vary([Request(MUTATION, (p,)), Request(CROSSOVER, (p, OTHER))], context())
        ctx = context()
        assert ops.children_per_request(MUTATION, ctx) == 6 and ops.children_per_request(CROSSOVER, ctx) == 1
    mutants, (crossed,) = out
    assert len(mutants) == 6 and all(c.source and c.operator == MUTATION_OP and c.parent_ids == (p.id,)
                                     for c in mutants)
    assert all(c.note.startswith("Plan: set ") for c in mutants)
    # Each plan's children implement that plan: the knob the plan names has the planned value.
    for c in mutants:
        knob, value = c.note.split("set ")[1].split(" from ")[0], c.note.split(" to ")[1].split(".")[0]
        assert f"{knob} = {value}  # tune:" in c.source
    assert crossed.operator == CROSSOVER_OP and crossed.parent_ids == (p.id, OTHER.id) and crossed.source
    roles = sorted(e.request.role for e in llm_server.exchanges)
    assert roles == ["crossover"] + ["implementer"] * 6 + ["planner"] * 2
    records = read_records(run_dir / "llm_calls.jsonl")
    assert sorted(r.outcome for r in records) == ["kernel"] * 7 + ["plan"] * 2


def test_a_reply_without_code_is_an_operator_failure_in_the_ledger(make_server, run_dir):
    def prose(request):
        return "Plan: tile more." if request.role == "planner" else "I would make the tiles bigger."

    server = make_server(prose)
    with make_ops(server.url, run_dir) as ops:
        (children,) = ops.vary([Request(MUTATION, (baseline_parent(),))], context())
    (child,) = children
    assert child.source is None and child.error.startswith("implementer: reply has no usable kernel")
    impl = [r for r in read_records(run_dir / "llm_calls.jsonl") if r.role == "implementer"]
    assert [(r.status, r.outcome) for r in impl] == [("ok", "no_code")]
    assert impl[0].completion_tokens > 0          # billed all the same


def test_repair_sends_the_exact_error_and_returns_a_fixed_child(llm_server, run_dir):
    broken = Child(with_knob(BASELINE, "COMPUTE_N", 2048), MUTATION_OP, ("p",), "plan")
    error = "incorrect: output 0 differs from the reference (relative L2 error 1.0)"
    with make_ops(llm_server.url, run_dir) as ops:
        fixed = ops.repair([(broken, error), (Child(None, MUTATION_OP, ("q",), error="x"), "x")], context())
    assert fixed[1] is None
    assert fixed[0].operator == REPAIR_OP and fixed[0].parent_ids == ("p",) and "def kernel" in fixed[0].source
    (exchange,) = llm_server.exchanges
    assert exchange.request.role == "repair" and error in exchange.request.text


def test_summaries_come_back_in_order_and_failures_are_empty(llm_server, run_dir):
    p, c = baseline_parent(), OTHER
    llm_server.inject(Fault("status", status=400, role="summarizer"))
    with make_ops(llm_server.url, run_dir) as ops:
        texts = ops.summarize([(p, c, 1.2), (c, p, 0.8)], context())
    assert sorted(bool(t) for t in texts) == [False, True]
    assert all(t == "" or "LESSON-" in t for t in texts)


def test_concurrency_is_bounded(make_server, run_dir):
    server = make_server(delay_s=0.15)
    with make_ops(server.url, run_dir, max_concurrency=2, plans_per_parent=6) as ops:
        ops.vary([Request(MUTATION, (baseline_parent(),))], context())
    assert server.max_in_flight == 2


def test_concurrency_does_not_change_which_reply_goes_where(make_server, tmp_path):
    results = []
    for conc in (1, 4):
        server = make_server(delay_s=0.02)
        with make_ops(server.url, tmp_path / f"run{conc}", max_concurrency=conc, plans_per_parent=3,
                      samples_per_plan=2) as ops:
            p = baseline_parent()
            out = ops.vary([Request(MUTATION, (p,)), Request(MUTATION, (p,)), Request(CROSSOVER, (p, OTHER))],
                           context())
        results.append([[(c.source, c.note, c.error) for c in cs] for cs in out])
    assert results[0] == results[1]
    # The same parent drawn twice still gets independent replies (distinct sample numbers).
    assert results[0][0] != results[0][1]


def test_vary_from_several_threads_gives_each_request_its_own_sample_numbers(make_server, run_dir):
    """The asynchronous engine calls vary with one request from several threads at once."""
    from concurrent.futures import ThreadPoolExecutor

    server = make_server(delay_s=0.05)
    p = baseline_parent()
    with make_ops(server.url, run_dir, max_concurrency=4) as ops, ThreadPoolExecutor(6) as pool:
        outs = list(pool.map(lambda _: ops.vary([Request(MUTATION, (p,))], context(generation=2)), range(6)))
    assert all(len(out) == 1 and out[0][0].source for out in outs)
    # six identical planner requests: six distinct sample numbers, so six independent replies
    samples = sorted(r.sample for r in read_records(run_dir / "llm_calls.jsonl") if r.role == "planner")
    assert samples == [f"2/{n}" for n in range(6)]
    assert server.max_in_flight <= 4


def test_a_repeated_generation_is_answered_from_the_cache(llm_server, run_dir):
    reqs = [Request(MUTATION, (baseline_parent(),)), Request(CROSSOVER, (baseline_parent(), OTHER))]
    with make_ops(llm_server.url, run_dir, plans_per_parent=2) as ops:
        first = ops.vary(reqs, context(generation=3))
    sent = len(llm_server.exchanges)
    with make_ops(llm_server.url, run_dir, plans_per_parent=2) as ops:
        second = ops.vary(reqs, context(generation=3))
        assert ops.spent()["calls"] == sent            # earlier spending is read back from the ledger
    assert len(llm_server.exchanges) == sent
    assert [[c.source for c in cs] for cs in first] == [[c.source for c in cs] for cs in second]
    records = read_records(run_dir / "llm_calls.jsonl")
    cached = [r for r in records if r.cached]
    assert len(cached) == sent and all(r.prompt_tokens == 0 and r.cost_usd == 0 for r in cached)


def test_cost_comes_from_configured_prices(llm_server, run_dir):
    with make_ops(llm_server.url, run_dir, price_input_per_mtok=3.0, price_output_per_mtok=15.0) as ops:
        ops.vary([Request(MUTATION, (baseline_parent(),))], context())
        spent = ops.spent()
    for r in read_records(run_dir / "llm_calls.jsonl"):
        assert r.cost_usd == pytest.approx((3.0 * r.prompt_tokens + 15.0 * r.completion_tokens) / 1e6)
    totals = llm_server.totals()
    expected = (3.0 * totals["prompt_tokens"] + 15.0 * totals["completion_tokens"]) / 1e6
    assert spent["cost_usd"] == pytest.approx(expected)


def test_call_cap_stops_new_calls_and_says_why(llm_server, run_dir):
    reqs = [Request(MUTATION, (baseline_parent(),)) for _ in range(4)]
    with make_ops(llm_server.url, run_dir, budget(max_llm_calls=3)) as ops:
        out = ops.vary(reqs, context())
        reason = ops.stop_reason()
    assert len(llm_server.answered) == 3 and len(llm_server.exchanges) == 3
    assert reason.startswith("budget.max_llm_calls=3 reached (3 billed calls")
    errors = [c.error for cs in out for c in cs if c.source is None]
    assert errors and all("not sent: budget.max_llm_calls=3" in e for e in errors)
    statuses = [r.status for r in read_records(run_dir / "llm_calls.jsonl")]
    assert statuses.count("ok") == 3 and "not_sent" in statuses


def test_token_cap_stops_the_run(llm_server, run_dir):
    with make_ops(llm_server.url, run_dir, budget(max_tokens=8000),
                  extra={"max_completion_tokens": 1000}) as ops:
        ops.vary([Request(MUTATION, (baseline_parent(),)) for _ in range(4)], context())
        reason = ops.stop_reason()
        spent = ops.spent()
    assert reason.startswith("budget.max_tokens=8000 reached")
    assert spent["prompt_tokens"] + spent["completion_tokens"] <= 8000
    assert 0 < len(llm_server.answered) < 8


def test_faults_mid_run_are_survived_and_recorded(llm_server, run_dir):
    llm_server.inject(Fault("status", status=429, retry_after=0.2, role="planner"),
                      Fault("status", status=500, role="planner"),
                      Fault("slow", delay_s=1.2, role="implementer"),
                      Fault("malformed", role="implementer"),
                      Fault("close", role="crossover"))
    reqs = [Request(MUTATION, (baseline_parent(),)), Request(MUTATION, (OTHER,)),
            Request(CROSSOVER, (baseline_parent(), OTHER))]
    with make_ops(llm_server.url, run_dir, timeout_s=0.6, max_retries=3) as ops:
        ops.client.backoff_base_s = 0.01
        out = ops.vary(reqs, context())
        assert all(c.source for cs in out for c in cs)
        # Connection refused: the endpoint goes away for a whole generation.
        llm_server.pause()
        ops.client.max_retries = 1
        down = ops.vary(reqs[:1], context(generation=2))
        llm_server.resume()
        back = ops.vary(reqs[:1], context(generation=3))
    assert down[0][0].source is None and down[0][0].error.startswith("planner: connection_error")
    assert back[0][0].source
    records = read_records(run_dir / "llm_calls.jsonl")
    retried = " | ".join(x for r in records for x in r.retries)
    for what in ("rate_limited: HTTP 429", "server_error: HTTP 500", "timeout", "bad_response: reply is not JSON",
                 "connection_error"):
        assert what in retried
    assert [r.status for r in records if r.generation == 2] == ["connection_error"]
    ok = [r for r in records if r.status == "ok" and not r.cached]
    totals = llm_server.totals()
    assert sum(r.prompt_tokens for r in ok) == totals["prompt_tokens"]
    assert sum(r.completion_tokens for r in ok) == totals["completion_tokens"]


def test_no_file_in_the_run_folder_contains_the_api_key(make_server, run_dir):
    server = make_server(require_key=API_KEY)
    server.inject(Fault("status", status=400, message=f"rejected request from key {API_KEY}", role="crossover"))
    with make_ops(server.url, run_dir) as ops:
        out = ops.vary([Request(MUTATION, (baseline_parent(),)), Request(CROSSOVER, (baseline_parent(), OTHER))],
                       context())
        ops.summarize([(baseline_parent(), OTHER, 1.1)], context())
    assert out[0][0].source and "***" in out[1][0].error and API_KEY not in out[1][0].error
    assert all(e.request.header("Authorization") == f"Bearer {API_KEY}" for e in server.exchanges)
    files = [p for p in run_dir.rglob("*") if p.is_file()]
    assert len(files) > 3
    for path in files:
        assert API_KEY not in path.read_text(errors="replace"), path


def test_unknown_or_short_requests_are_failures_not_crashes(llm_server, run_dir):
    with make_ops(llm_server.url, run_dir) as ops:
        out = ops.vary([Request(CROSSOVER, (baseline_parent(),))], context())
    assert out[0][0].source is None and "1 parent" in out[0][0].error
    assert llm_server.exchanges == []


def test_ledger_lines_have_the_required_fields(llm_server, run_dir):
    with make_ops(llm_server.url, run_dir) as ops:
        ops.vary([Request(MUTATION, (baseline_parent(),))], context(generation=7))
    for line in (run_dir / "llm_calls.jsonl").read_text().splitlines():
        rec = json.loads(line)
        for key in ("role", "model", "prompt_hash", "prompt_tokens", "completion_tokens", "cost_usd", "seconds",
                    "status", "cached"):
            assert key in rec
        assert rec["generation"] == 7 and rec["problem"] == "silu" and rec["sample"].startswith("7/")


def test_knob_responder_keeps_the_kernel_parseable():
    import ast

    from llm_server import ChatRequest

    req = ChatRequest({"messages": [{"role": "user", "content": f"```python\n{BASELINE}```"}]}, {}, "crossover",
                      "1/0", 0.0)
    reply = knob_responder(req)
    ast.parse(reply.split("```python\n")[1].split("```")[0])
