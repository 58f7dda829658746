"""Chat completions over any OpenAI-compatible endpoint, with retries the ledger can report.

Built on the `openai` package with its own retries switched off: this module retries 429
(waiting what Retry-After asks), 5xx, 408/409, timeouts, dropped connections and malformed
replies, with exponential backoff and jitter, and returns one `ChatResult` that records every
failed attempt. Replies are parsed from the raw body, so a broken reply is a status, never an
exception; only the message's `content` is returned (a reasoning model's `reasoning_content`
or `reasoning` is never taken for the answer). A reply cut at its completion budget
(finish_reason "length") is TRUNCATED, sent once more with the role's `max_tokens_retry` when
it has one. A request carries only the parameters that are configured. `preflight` sends one
minimal call per distinct endpoint, model and parameters before a run spends anything, and
turns a refused parameter into one line naming the configuration key that set it. The API
key is sent as the bearer token and appears in no result or error text.
"""

from __future__ import annotations

import dataclasses
import email.utils
import json
import random
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

import openai

from . import ledger
from .budget import Totals
from .cache import cache_key, prompt_hash
from .settings import REQUEST_PARAMS, ROLES, LLMSettings, RequestSettings, RoleSettings

ROLE_HEADER = "X-Accelopt-Role"
SAMPLE_HEADER = "X-Accelopt-Sample"
# Some local servers (vLLM, SGLang) accept any key; the client library insists on one.
PLACEHOLDER_KEY = "EMPTY"
# Request parameters that set the completion budget (a retry replaces both).
BUDGET_PARAMS = ("max_completion_tokens", "max_tokens")
# The preflight's one short message, the same for every endpoint.
PREFLIGHT_MESSAGES: tuple[Mapping[str, str], ...] = ({"role": "user", "content": "Reply with the word OK."},)
# Its sample index: before generation 0 (the ledger's generation -1), the only one of its kind.
PREFLIGHT_SAMPLE = "-1/0"
MAX_REASON_CHARS = 300      # of a server's error text in a preflight's one line


class EndpointError(Exception):
    """No usable LLM endpoint; the message is one line naming the URL and the setting."""


@dataclass(frozen=True)
class ChatCall:
    """One chat request as the operators describe it; unset (None) settings are not sent."""

    role: str
    model: str
    base_url: str
    messages: tuple[Mapping[str, str], ...]
    temperature: float | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)   # sent as extra_body; its keys win
    sample: str = ""
    max_tokens: int | None = None            # sent as max_completion_tokens
    max_tokens_retry: int | None = None      # the budget of the one retry after finish_reason "length"
    reasoning_effort: str | None = None
    timeout_s: float | None = None           # per attempt; None: the client's

    @classmethod
    def for_role(cls, settings: RoleSettings, messages: Iterable[Mapping[str, str]], sample: str = "") -> "ChatCall":
        """A call of `settings.role` with that role's resolved request settings."""
        values = {f.name: getattr(settings, f.name) for f in dataclasses.fields(RequestSettings)}
        return cls(role=settings.role, messages=tuple(messages), sample=sample,
                   **{**values, "extra": dict(settings.extra)})

    def params(self) -> dict[str, Any]:
        """The request's parameters besides model and messages: the typed settings that are set,
        under their request names, then `extra`. With model, messages and sample they key the
        cache (so a call of an earlier release, which always sent its temperature, keeps its key)."""
        typed = {param: getattr(self, name) for name, param in REQUEST_PARAMS.items() if getattr(self, name) is not None}
        return {**typed, **dict(self.extra)}

    def completion_cap(self) -> int | None:
        """The completion budget the request carries (None: the server's)."""
        params = self.params()
        cap = next((params[k] for k in BUDGET_PARAMS if k in params), None)
        return int(cap) if isinstance(cap, (int, float)) and cap > 0 else None

    def with_budget(self, max_tokens: int) -> "ChatCall":
        """This call with completion budget `max_tokens` (replacing one in `extra`) and no further retry."""
        extra = {k: v for k, v in self.extra.items() if k not in BUDGET_PARAMS}
        return dataclasses.replace(self, max_tokens=max_tokens, max_tokens_retry=None, extra=extra)


@dataclass
class ChatResult:
    status: str                      # ledger.OK, ledger.TRUNCATED or a failure status
    content: str | None = None       # the message's content only, never its reasoning
    prompt_tokens: int = 0
    completion_tokens: int = 0       # reasoning tokens included
    finish_reason: str = ""
    served_model: str = ""
    error: str = ""                  # why it failed; on success, a remark (e.g. usage missing)
    attempts: int = 0
    retries: list[str] = field(default_factory=list)
    seconds: float = 0.0
    reasoning_tokens: int = 0        # the part of completion_tokens that was reasoning
    param: str = ""                  # the request parameter a refusal names, as the server said

    def spent(self, settings: LLMSettings) -> Totals:
        """What this call cost (nothing unless the server answered)."""
        billed = self.status in ledger.BILLED
        return Totals(1 if billed else 0, self.prompt_tokens, self.completion_tokens,
                      settings.cost_usd(self.prompt_tokens, self.completion_tokens), self.reasoning_tokens)

    def after(self, earlier: "ChatResult", note: str) -> "ChatResult":
        """This result of a call sent again after `earlier` (both billed), which `note` says why."""
        return dataclasses.replace(
            self, prompt_tokens=earlier.prompt_tokens + self.prompt_tokens,
            completion_tokens=earlier.completion_tokens + self.completion_tokens,
            reasoning_tokens=earlier.reasoning_tokens + self.reasoning_tokens,
            attempts=earlier.attempts + self.attempts, retries=[*earlier.retries, note, *self.retries])


@dataclass(frozen=True)
class Reply:
    """What a chat completion body says."""

    content: str | None
    prompt_tokens: int | None        # None: the server reported no usage
    completion_tokens: int | None    # reasoning tokens included
    reasoning_tokens: int
    finish_reason: str
    model: str


@dataclass(frozen=True)
class _Failure:
    status: str
    message: str
    retryable: bool
    wait_s: float | None = None      # what the server asked for (Retry-After)
    param: str = ""                  # the request parameter a refusal names


def parse_retry_after(headers: Mapping[str, str], now: float | None = None) -> float | None:
    """Seconds to wait from `retry-after-ms` or `Retry-After` (seconds or an HTTP date)."""
    lower = {k.lower(): v for k, v in headers.items()}
    ms = lower.get("retry-after-ms")
    if ms is not None:
        try:
            return max(0.0, float(ms) / 1000.0)
        except ValueError:
            pass
    value = lower.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError):
        return None
    return max(0.0, when - (time.time() if now is None else now))


def parse_completion(body: str) -> Reply:
    """The Reply of a chat completion body; raises ValueError when it is not one. Reasoning
    tokens come from `usage.completion_tokens_details.reasoning_tokens` (absent: 0) and are
    counted inside the completion tokens, as OpenAI reports them; a server whose
    `total_tokens` shows them outside `completion_tokens` has them added, so either way they
    are priced once, at the output price."""
    try:
        data = json.loads(body)
    except json.JSONDecodeError as exc:
        raise ValueError(f"reply is not JSON ({exc.msg} at char {exc.pos})") from None
    if not isinstance(data, dict) or not isinstance(data.get("choices"), list) or not data["choices"]:
        raise ValueError("reply has no choices")
    choice = data["choices"][0]
    message = choice.get("message") if isinstance(choice, dict) else None
    if not isinstance(message, dict):
        raise ValueError("reply has no message")
    content = message.get("content")
    if content is not None and not isinstance(content, str):
        raise ValueError("reply content is not text")
    usage = data.get("usage")
    p_tok: int | None = None
    c_tok: int | None = None
    r_tok = 0
    if isinstance(usage, dict) and "prompt_tokens" in usage:
        p_tok, c_tok = int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)
        details = usage.get("completion_tokens_details")
        r_tok = int(details.get("reasoning_tokens") or 0) if isinstance(details, dict) else 0
        if r_tok and usage.get("total_tokens") == p_tok + c_tok + r_tok:
            c_tok += r_tok       # reported beside the completion, not inside it
    return Reply(content, p_tok, c_tok, r_tok, str(choice.get("finish_reason") or ""), str(data.get("model") or ""))


def _cause(exc: BaseException) -> str:
    cause = exc.__cause__ or exc.__context__
    text = str(cause) if cause is not None else ""
    return f"{exc} ({text})" if text and text not in str(exc) else str(exc)


def classify(exc: BaseException) -> _Failure:
    """What a failed attempt means: status, message, whether to try again."""
    if isinstance(exc, openai.APITimeoutError):
        return _Failure(ledger.TIMEOUT, "request timed out", True)
    if isinstance(exc, openai.APIConnectionError):
        return _Failure(ledger.CONNECTION_ERROR, _cause(exc), True)
    if isinstance(exc, openai.APIStatusError):
        code = exc.status_code
        wait = parse_retry_after(dict(exc.response.headers))
        message = f"HTTP {code}: {exc.message}"
        if code == 429:
            return _Failure(ledger.RATE_LIMITED, message, True, wait)
        if code >= 500:
            return _Failure(ledger.SERVER_ERROR, message, True, wait)
        if code in (408, 409):
            return _Failure(ledger.HTTP_ERROR, message, True, wait)
        return _Failure(ledger.HTTP_ERROR, message, False, param=str(exc.param or ""))
    return _Failure(ledger.CONNECTION_ERROR, f"{type(exc).__name__}: {exc}", True)


class ChatClient:
    """Sends ChatCalls; one `openai.OpenAI` client per base URL; safe across threads."""

    def __init__(self, *, api_key: str, timeout_s: float, max_retries: int,
                 backoff_base_s: float = 1.0, backoff_max_s: float = 60.0, retry_after_max_s: float = 600.0,
                 rng: random.Random | None = None, sleep: Callable[[float], None] = time.sleep) -> None:
        self._api_key = api_key
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.backoff_base_s = backoff_base_s
        self.backoff_max_s = backoff_max_s
        self.retry_after_max_s = retry_after_max_s
        # Jitter only spreads retries in time; it never changes what is asked or answered.
        self._rng = rng or random.Random(0)
        self._sleep = sleep
        self._clients: dict[str, openai.OpenAI] = {}
        self._lock = threading.Lock()

    @classmethod
    def from_settings(cls, settings: LLMSettings, environ: Mapping[str, str] | None = None,
                      **kwargs: Any) -> "ChatClient":
        return cls(api_key=settings.api_key(environ), timeout_s=settings.timeout_s,
                   max_retries=settings.max_retries, **kwargs)

    def _client(self, base_url: str) -> openai.OpenAI:
        with self._lock:
            client = self._clients.get(base_url)
            if client is None:
                client = openai.OpenAI(base_url=base_url, api_key=self._api_key or PLACEHOLDER_KEY,
                                       timeout=self.timeout_s, max_retries=0)
                self._clients[base_url] = client
            return client

    def redact(self, text: str) -> str:
        return text.replace(self._api_key, "***") if self._api_key else text

    def backoff_s(self, attempt: int) -> float:
        """Exponential backoff with jitter: half fixed, half random."""
        base = min(self.backoff_max_s, self.backoff_base_s * (2 ** attempt))
        with self._lock:
            u = self._rng.random()
        return base * (0.5 + 0.5 * u)

    def complete(self, call: ChatCall) -> ChatResult:
        """Send one call, retrying transient failures up to max_retries times; a reply cut at
        its completion budget is sent once more with the call's `max_tokens_retry` when it has
        one (the result then carries the usage of both)."""
        start = time.monotonic()
        result = self._attempts(call)
        if result.status == ledger.TRUNCATED and call.max_tokens_retry:
            note = f"{ledger.TRUNCATED}: {result.error}; sent again with max_tokens {call.max_tokens_retry}"
            result = self._attempts(call.with_budget(call.max_tokens_retry)).after(result, note)
        result.seconds = time.monotonic() - start
        return result

    def _attempts(self, call: ChatCall) -> ChatResult:
        """Send `call` until it is answered, refused, or out of retries (seconds not set)."""
        client = self._client(call.base_url)
        retries: list[str] = []
        failure = _Failure(ledger.CONNECTION_ERROR, "not attempted", False)
        timeout = {} if call.timeout_s is None else {"timeout": call.timeout_s}
        for attempt in range(self.max_retries + 1):
            try:
                raw = client.chat.completions.with_raw_response.create(
                    model=call.model, messages=list(call.messages), extra_body=call.params() or None,
                    extra_headers={ROLE_HEADER: call.role, SAMPLE_HEADER: call.sample}, **timeout,
                )
                try:
                    reply = parse_completion(raw.http_response.text)
                except ValueError as exc:
                    failure = _Failure(ledger.BAD_RESPONSE, str(exc), True)
                else:
                    return _answered(call, reply, attempt + 1, retries)
            except openai.OpenAIError as exc:
                failure = classify(exc)
            except Exception as exc:  # the HTTP stack's own errors must not end the run
                failure = _Failure(ledger.CONNECTION_ERROR, f"{type(exc).__name__}: {exc}", True)
            message = self.redact(failure.message)
            if not failure.retryable or attempt == self.max_retries:
                return ChatResult(failure.status, error=message, attempts=attempt + 1, retries=retries,
                                  param=failure.param)
            if failure.wait_s is not None:
                wait = min(failure.wait_s, self.retry_after_max_s)
            else:
                wait = self.backoff_s(attempt)
            retries.append(f"{failure.status}: {message}; waited {wait:.2f}s")
            self._sleep(wait)
        raise AssertionError("unreachable")

    def close(self) -> None:
        with self._lock:
            clients, self._clients = list(self._clients.values()), {}
        for c in clients:
            c.close()


def _answered(call: ChatCall, reply: Reply, attempts: int, retries: list[str]) -> ChatResult:
    """The result of a reply: OK, or TRUNCATED when it was cut at its completion budget."""
    status, note = ledger.OK, "" if reply.prompt_tokens is not None else "the server reported no token usage"
    if reply.finish_reason == "length":
        cap = call.completion_cap()
        budget = f"max_tokens {cap}" if cap else "the server's limit"
        status, note = ledger.TRUNCATED, f"reply cut at its completion budget ({budget}; finish_reason length)"
    return ChatResult(status, reply.content, reply.prompt_tokens or 0, reply.completion_tokens or 0,
                      reply.finish_reason, reply.model, note, attempts, retries, reasoning_tokens=reply.reasoning_tokens)


def check_endpoint(settings: LLMSettings, environ: Mapping[str, str] | None = None,
                   timeout_s: float = 10.0) -> None:
    """Raise EndpointError (one line) unless every configured endpoint answers GET /models.

    An endpoint that answers but has no /models route (404/405) counts as reachable; a
    refused key (401/403) is an error, naming the environment variable the key came from.
    """
    if not settings.base_url:
        raise EndpointError("no LLM endpoint configured (set llm.base_url)")
    for role in ROLES:
        if not settings.role(role).model:
            raise EndpointError(f"no model configured for the LLM role '{role}' (set llm.model or "
                                f"llm.roles.{role}.model)")
    key = settings.api_key(environ)
    for url in settings.base_urls():
        client = openai.OpenAI(base_url=url, api_key=key or PLACEHOLDER_KEY,
                               timeout=min(timeout_s, settings.timeout_s), max_retries=0)
        try:
            client.models.list()
        except openai.APIStatusError as exc:
            if exc.status_code in (404, 405):
                continue
            if exc.status_code in (401, 403):
                where = f"${settings.api_key_env}" + ("" if key else " (unset)")
                raise EndpointError(f"LLM endpoint {url} refused the API key from {where}: "
                                    f"HTTP {exc.status_code}") from None
            raise EndpointError(f"LLM endpoint {url} answered HTTP {exc.status_code} to GET /models "
                                f"(llm.base_url)") from None
        except openai.APITimeoutError:
            raise EndpointError(f"no LLM endpoint answers at {url} (llm.base_url): timed out") from None
        except openai.APIConnectionError as exc:
            reason = " ".join(_cause(exc).split())
            reason = reason.replace(key, "***") if key else reason
            raise EndpointError(f"no LLM endpoint answers at {url} (llm.base_url): {reason}") from None
        finally:
            client.close()


class PreflightError(EndpointError):
    """A preflight call was refused or not answered; `records` are the calls it made."""

    def __init__(self, message: str, records: Sequence[ledger.CallRecord]) -> None:
        super().__init__(message)
        self.records = list(records)


@dataclass(frozen=True)
class Probe:
    """The preflight of one distinct (endpoint, model, request parameters): its minimal call
    and the roles whose calls carry them."""

    call: ChatCall
    roles: tuple[str, ...]

    @property
    def key(self) -> str:
        """How the ledger knows this probe (its `cache_key`): model, parameters and endpoint."""
        c = self.call
        return cache_key(c.model, c.messages, c.params(), c.base_url)


def probes(settings: LLMSettings, roles: Sequence[str]) -> list[Probe]:
    """One probe per distinct (endpoint, model, parameters) among `roles`, in role order."""
    found: dict[str, Probe] = {}
    for role in roles:
        call = dataclasses.replace(ChatCall.for_role(settings.role(role), PREFLIGHT_MESSAGES, PREFLIGHT_SAMPLE),
                                   role=ledger.PREFLIGHT_ROLE, max_tokens_retry=None)
        probe = Probe(call, (role,))
        if probe.key in found:
            probe = Probe(found[probe.key].call, found[probe.key].roles + (role,))
        found[probe.key] = probe
    return list(found.values())


def preflight(settings: LLMSettings, roles: Sequence[str], *, done: Iterable[ledger.CallRecord] = (),
              environ: Mapping[str, str] | None = None, client: ChatClient | None = None) -> list[ledger.CallRecord]:
    """Send one minimal real completion per distinct (endpoint, model, parameters) of `roles`
    that the ledger records `done` do not show answered already (a resumed run), and return
    their ledger records (role PREFLIGHT_ROLE, billed like any call). Raises PreflightError,
    one line, when one is refused: naming the parameter and the configuration key that set
    it when the server's answer names one; as check_endpoint does when nothing answers."""
    answered = {r.cache_key for r in done if r.role == ledger.PREFLIGHT_ROLE and r.status in ledger.BILLED}
    own = client is None
    client = client or ChatClient.from_settings(settings, environ)
    records: list[ledger.CallRecord] = []
    try:
        for probe in probes(settings, roles):
            if probe.key in answered:
                continue
            result = client.complete(probe.call)
            records.append(_preflight_record(settings, probe, result))
            if result.status not in ledger.BILLED:
                raise PreflightError(_refusal(settings, probe, result), records)
    finally:
        if own:
            client.close()
    return records


def _preflight_record(settings: LLMSettings, probe: Probe, result: ChatResult) -> ledger.CallRecord:
    c, spent = probe.call, result.spent(settings)
    return ledger.CallRecord(
        role=c.role, model=c.model, prompt_hash=prompt_hash(c.messages), prompt_tokens=spent.prompt_tokens,
        completion_tokens=spent.completion_tokens, reasoning_tokens=spent.reasoning_tokens, cost_usd=spent.cost_usd,
        seconds=round(result.seconds, 4), status=result.status, cached=False,
        outcome="accepted" if spent.calls else "", error=result.error, attempts=result.attempts,
        retries=list(result.retries), sample=c.sample, cache_key=probe.key)


def _refusal(settings: LLMSettings, probe: Probe, result: ChatResult) -> str:
    """The one line saying why a probe failed, naming the configuration key to change."""
    c = probe.call
    why = " ".join(result.error.split())[:MAX_REASON_CHARS]
    if result.status in (ledger.CONNECTION_ERROR, ledger.TIMEOUT):
        return f"no LLM endpoint answers at {c.base_url} (llm.base_url): {result.status}: {why}"
    params = c.params()
    param = named_param(result, params) if result.status == ledger.HTTP_ERROR else ""
    if not param:
        verb = "refused" if result.status == ledger.HTTP_ERROR else f"failed ({result.status})"
        return (f"LLM endpoint {c.base_url} {verb} a minimal request to model '{c.model}' "
                f"(roles {', '.join(probe.roles)}): {why}")
    keys = ", ".join(dict.fromkeys(settings.config_key(r, param) for r in probe.roles))
    value = json.dumps(params[param], separators=(",", ":"))[:80]
    return (f"LLM endpoint {c.base_url} refused {param}={value} for model '{c.model}' (set by {keys}; "
            f"change or unset it): {why}")


def named_param(result: ChatResult, params: Mapping[str, Any]) -> str:
    """The parameter of `params` a refusal is about: the one the server names in its `param`
    field, else the longest one its message mentions; '' when none."""
    mentioned = sorted((p for p in params if re.search(rf"\b{re.escape(p)}\b", result.error)), key=len, reverse=True)
    for name in [result.param, *mentioned]:
        if name in params:
            return name
        if name == "max_tokens" and "max_completion_tokens" in params:   # vLLM's name for either
            return "max_completion_tokens"
    return ""


def message_chars(messages: Sequence[Mapping[str, str]]) -> int:
    return sum(len(str(m.get("content", ""))) for m in messages)
