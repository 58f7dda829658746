"""Chat completions over any OpenAI-compatible endpoint, with retries the ledger can report.

Built on the `openai` package with its own retries switched off: this module retries 429
(waiting what Retry-After asks), 5xx, 408/409, timeouts, dropped connections and malformed
replies, with exponential backoff and jitter, and returns one `ChatResult` that records every
failed attempt. Replies are parsed from the raw body, so a broken reply is a status, never an
exception. The API key is sent as the bearer token and appears in no result or error text.
"""

from __future__ import annotations

import email.utils
import json
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import openai

from . import ledger
from .settings import ROLES, LLMSettings

ROLE_HEADER = "X-Accelopt-Role"
SAMPLE_HEADER = "X-Accelopt-Sample"
# Some local servers (vLLM, SGLang) accept any key; the client library insists on one.
PLACEHOLDER_KEY = "EMPTY"


class EndpointError(Exception):
    """No usable LLM endpoint; the message is one line naming the URL and the setting."""


@dataclass(frozen=True)
class ChatCall:
    """One chat request as the operators describe it."""

    role: str
    model: str
    base_url: str
    messages: tuple[Mapping[str, str], ...]
    temperature: float
    extra: Mapping[str, Any]
    sample: str = ""

    def params(self) -> dict[str, Any]:
        """The sampling parameters that, with model, messages and sample, key the cache."""
        return {"temperature": self.temperature, **dict(self.extra)}


@dataclass
class ChatResult:
    status: str                      # ledger.OK or a failure status
    content: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: str = ""
    served_model: str = ""
    error: str = ""                  # why it failed; on success, a remark (e.g. usage missing)
    attempts: int = 0
    retries: list[str] = field(default_factory=list)
    seconds: float = 0.0


@dataclass(frozen=True)
class _Failure:
    status: str
    message: str
    retryable: bool
    wait_s: float | None = None      # what the server asked for (Retry-After)


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


def parse_completion(body: str) -> tuple[str | None, int | None, int | None, str, str]:
    """(content, prompt_tokens, completion_tokens, finish_reason, model) of a chat completion
    body, the token counts None when the server reported no usage; raises ValueError when the
    body is not a chat completion."""
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
    if isinstance(usage, dict) and "prompt_tokens" in usage:
        p_tok, c_tok = int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)
    else:
        p_tok = c_tok = None
    return content, p_tok, c_tok, str(choice.get("finish_reason") or ""), str(data.get("model") or "")


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
        return _Failure(ledger.HTTP_ERROR, message, False)
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
        """Send one call, retrying transient failures up to max_retries times."""
        start = time.monotonic()
        client = self._client(call.base_url)
        retries: list[str] = []
        failure = _Failure(ledger.CONNECTION_ERROR, "not attempted", False)
        for attempt in range(self.max_retries + 1):
            try:
                raw = client.chat.completions.with_raw_response.create(
                    model=call.model, messages=list(call.messages), temperature=call.temperature,
                    extra_body=dict(call.extra) or None,
                    extra_headers={ROLE_HEADER: call.role, SAMPLE_HEADER: call.sample},
                )
                try:
                    content, p_tok, c_tok, finish, served = parse_completion(raw.http_response.text)
                except ValueError as exc:
                    failure = _Failure(ledger.BAD_RESPONSE, str(exc), True)
                else:
                    note = "" if p_tok is not None else "the server reported no token usage"
                    return ChatResult(ledger.OK, content, p_tok or 0, c_tok or 0, finish, served, note,
                                      attempt + 1, retries, time.monotonic() - start)
            except openai.OpenAIError as exc:
                failure = classify(exc)
            except Exception as exc:  # the HTTP stack's own errors must not end the run
                failure = _Failure(ledger.CONNECTION_ERROR, f"{type(exc).__name__}: {exc}", True)
            message = self.redact(failure.message)
            if not failure.retryable or attempt == self.max_retries:
                return ChatResult(failure.status, error=message, attempts=attempt + 1, retries=retries,
                                  seconds=time.monotonic() - start)
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


def message_chars(messages: Sequence[Mapping[str, str]]) -> int:
    return sum(len(str(m.get("content", ""))) for m in messages)
