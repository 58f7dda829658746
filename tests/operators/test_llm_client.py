"""The chat client against the real test server: usage, headers, retries, faults, endpoint check."""

from __future__ import annotations

import email.utils
import random
import socket
import time

import pytest

from llm_support import API_KEY, settings
from llm_server import Fault
from operators.llm import ledger as L
from operators.llm.client import ChatCall, ChatClient, EndpointError, check_endpoint, parse_retry_after

MSGS = ({"role": "system", "content": "You write kernels."},
        {"role": "user", "content": "```python\nT = 1  # tune: 1, 2\ndef kernel(x):\n    return x\n```"})


def call(url: str, **kw) -> ChatCall:
    base = dict(role="implementer", model="test-model", base_url=url, messages=MSGS, temperature=0.7,
                extra={}, sample="1/0")
    base.update(kw)
    return ChatCall(**base)


def client(**kw) -> ChatClient:
    base = dict(api_key=API_KEY, timeout_s=5.0, max_retries=3, backoff_base_s=0.01, backoff_max_s=0.05)
    base.update(kw)
    return ChatClient(**base)


def test_reply_usage_headers_and_extra_parameters(llm_server):
    c = client()
    result = c.complete(call(llm_server.url, extra={"max_completion_tokens": 2048, "reasoning_effort": "high"}))
    assert result.status == L.OK and "def kernel" in result.content
    (exchange,) = llm_server.exchanges
    assert (result.prompt_tokens, result.completion_tokens) == (exchange.prompt_tokens, exchange.completion_tokens)
    assert result.attempts == 1 and result.retries == []
    req = exchange.request
    assert req.header("Authorization") == f"Bearer {API_KEY}"
    assert (req.role, req.sample) == ("implementer", "1/0")
    assert req.body["max_completion_tokens"] == 2048 and req.body["reasoning_effort"] == "high"
    assert req.body["temperature"] == 0.7 and req.body["model"] == "test-model"
    c.close()


def test_429_waits_what_retry_after_asks(llm_server):
    llm_server.inject(Fault("status", status=429, retry_after=1))
    result = client().complete(call(llm_server.url))
    assert result.status == L.OK and result.attempts == 2
    first, second = llm_server.exchanges
    assert first.outcome == "status 429"
    assert second.request.arrived - first.request.arrived >= 0.95
    assert result.retries[0].startswith("rate_limited: HTTP 429") and "waited 1.00s" in result.retries[0]


@pytest.mark.parametrize("fault, status", [
    (Fault("status", status=500), "server_error"),
    (Fault("status", status=503, retry_after=0), "server_error"),
    (Fault("malformed"), "bad_response"),
    (Fault("close"), "connection_error"),
    (Fault("slow", delay_s=1.5), "timeout"),
])
def test_transient_faults_are_retried_and_recorded(llm_server, fault, status):
    llm_server.inject(fault)
    result = client(timeout_s=0.5).complete(call(llm_server.url))
    assert result.status == L.OK and result.attempts == 2
    assert result.retries[0].startswith(status)
    assert result.prompt_tokens > 0


def test_retries_give_up_after_max_retries(llm_server):
    llm_server.inject(Fault("status", status=500, times=10))
    result = client(max_retries=2).complete(call(llm_server.url))
    assert result.status == L.SERVER_ERROR and result.attempts == 3 and len(result.retries) == 2
    assert result.content is None and "HTTP 500" in result.error
    assert len(llm_server.exchanges) == 3


def test_a_refusal_that_cannot_pass_is_not_retried_and_the_key_is_redacted(llm_server):
    llm_server.inject(Fault("status", status=400, message=f"unknown parameter; your key {API_KEY} is fine"))
    result = client().complete(call(llm_server.url))
    assert result.status == L.HTTP_ERROR and result.attempts == 1
    assert API_KEY not in result.error and "***" in result.error


def test_connection_refused_then_back(llm_server):
    llm_server.pause()
    c = client(max_retries=1)
    result = c.complete(call(llm_server.url))
    assert result.status == L.CONNECTION_ERROR and result.attempts == 2
    llm_server.resume()
    assert c.complete(call(llm_server.url)).status == L.OK


def test_backoff_is_exponential_with_jitter_and_capped():
    c = ChatClient(api_key="", timeout_s=1, max_retries=5, backoff_base_s=1.0, backoff_max_s=8.0,
                   rng=random.Random(1))
    for attempt, full in [(0, 1.0), (1, 2.0), (2, 4.0), (3, 8.0), (6, 8.0)]:
        waits = [c.backoff_s(attempt) for _ in range(50)]
        assert all(full / 2 <= w <= full for w in waits) and len(set(waits)) > 1


def test_parse_retry_after_forms():
    assert parse_retry_after({"Retry-After": "3"}) == 3.0
    assert parse_retry_after({"retry-after-ms": "250", "Retry-After": "3"}) == 0.25
    now = time.time()
    date = email.utils.formatdate(now + 30, usegmt=True)
    assert 28 <= parse_retry_after({"Retry-After": date}, now=now) <= 31
    assert parse_retry_after({}) is None and parse_retry_after({"Retry-After": "soon"}) is None


def test_check_endpoint_accepts_a_live_server(make_server):
    server = make_server(require_key=API_KEY)
    check_endpoint(settings(server.url), environ={"ACCELOPT_TEST_KEY": API_KEY})


def test_check_endpoint_fails_in_one_line_when_nothing_listens():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]          # free now, and nothing listens on it after the close
    with pytest.raises(EndpointError) as err:
        check_endpoint(settings(f"http://127.0.0.1:{port}/v1"), environ={})
    msg = str(err.value)
    assert msg.startswith(f"no LLM endpoint answers at http://127.0.0.1:{port}/v1 (llm.base_url)")
    assert "\n" not in msg


def test_check_endpoint_names_the_key_variable_on_401(make_server):
    server = make_server(require_key=API_KEY)
    with pytest.raises(EndpointError, match=r"refused the API key from \$ACCELOPT_TEST_KEY: HTTP 401"):
        check_endpoint(settings(server.url), environ={"ACCELOPT_TEST_KEY": "wrong"})


def test_check_endpoint_requires_a_base_url():
    with pytest.raises(EndpointError, match="set llm.base_url"):
        check_endpoint(settings(""), environ={})


def test_check_endpoint_requires_a_model_for_every_role(llm_server):
    with pytest.raises(EndpointError, match=r"role 'planner' \(set llm.model or llm.roles.planner.model\)"):
        check_endpoint(settings(llm_server.url, model=""), environ={})
    check_endpoint(settings(llm_server.url, model="", roles={r: {"model": "m"} for r in
                                                             ("planner", "implementer", "crossover", "repair",
                                                              "summarizer")}), environ={})


def test_a_reply_without_usage_is_kept_and_flagged(llm_server):
    llm_server.inject(Fault("no_usage"))
    result = client().complete(call(llm_server.url))
    assert result.status == L.OK and "def kernel" in result.content
    assert (result.prompt_tokens, result.completion_tokens) == (0, 0)
    assert result.error == "the server reported no token usage"
