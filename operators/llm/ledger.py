"""The LLM call ledger: one JSON line per call in `llm_calls.jsonl` in the run folder.

Every call the operators issue is appended as it completes (or is answered from the cache,
or is not sent because a budget cap was reached), with the role, model, prompt hash, the
server's token usage, the cost from the configured prices, wall seconds, transport status,
what the operator made of the reply (`outcome`) and the retries it took. Token and cost
fields count billed use only: a cached reply records zeros. `completion_tokens` include the
reasoning tokens, as OpenAI reports them (`usage.completion_tokens_details.reasoning_tokens`
is a part of `completion_tokens`, billed at the output price); `reasoning_tokens` says how
many of them were reasoning, so the cost prices them once, with the completion. (A server
whose `total_tokens` shows them outside `completion_tokens` has them added in by the client.)
A reply cut at its completion budget is recorded as TRUNCATED, billed, never cached. Known
secrets are blanked out of every line before it is written. Each line carries the format's
`schema` (SCHEMA); lines written before it had one read as schema 1, and lines written before
`reasoning_tokens` existed read with 0 (an added field with a default: the schema stays).
"""

from __future__ import annotations

import dataclasses
import json
import math
import threading
import time
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from .budget import Totals

LEDGER_FILE = "llm_calls.jsonl"
SCHEMA = 2

# Transport statuses.
OK = "ok"
RATE_LIMITED = "rate_limited"
SERVER_ERROR = "server_error"
TIMEOUT = "timeout"
CONNECTION_ERROR = "connection_error"
BAD_RESPONSE = "bad_response"     # 200 with a body that is not a chat completion
HTTP_ERROR = "http_error"         # any other refusal (4xx)
NOT_SENT = "not_sent"             # a budget cap was reached before the call could start
TRUNCATED = "truncated"           # 200 with finish_reason "length": cut at the completion budget
BILLED = (OK, TRUNCATED)          # statuses of calls the server answered, and charged for

PREFLIGHT_ROLE = "preflight"      # the minimal call per endpoint, model and parameters before a run


@dataclass
class CallRecord:
    role: str
    model: str
    prompt_hash: str
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float
    seconds: float
    status: str
    cached: bool
    reasoning_tokens: int = 0     # the part of completion_tokens that was reasoning
    outcome: str = ""             # e.g. "kernel", "plan", "rationale", "no_code", "empty"
    error: str = ""
    attempts: int = 0
    retries: list[str] = field(default_factory=list)   # why each earlier attempt failed
    problem: str = ""
    generation: int = -1
    sample: str = ""
    cache_key: str = ""
    time: str = ""

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    @property
    def billed(self) -> bool:
        return self.status in BILLED and not self.cached

    def totals(self) -> Totals:
        if self.cached:
            return Totals()
        return Totals(1 if self.billed else 0, self.prompt_tokens, self.completion_tokens, self.cost_usd,
                      self.reasoning_tokens)

    def to_json(self) -> dict[str, Any]:
        return {"schema": SCHEMA, **dataclasses.asdict(self)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "CallRecord":
        """A record from one ledger line; TypeError when a field is missing or of the wrong type."""
        hints = typing.get_type_hints(cls)
        record = cls(**{k: v for k, v in data.items() if k in hints})
        for name, tp in hints.items():
            value = getattr(record, name)
            kind = list if typing.get_origin(tp) is list else (int, float) if tp is float else tp
            if not isinstance(value, kind) or (isinstance(value, bool) and tp is not bool):
                raise TypeError(f"{name} is {value!r}")
            if tp in (int, float) and not (math.isfinite(value) and value >= (-1 if name == "generation" else 0)):
                raise ValueError(f"{name} is {value!r}")
            if tp == list[str] and not all(isinstance(v, str) for v in value):
                raise TypeError(f"{name} holds a non-string")
        return record


class Ledger:
    """Append-only call log; thread-safe."""

    def __init__(self, path: str | Path, secrets: Iterable[str] = ()) -> None:
        self.path = Path(path)
        self._secrets = [s for s in secrets if s]
        self._lock = threading.Lock()

    def append(self, record: CallRecord) -> None:
        if not record.time:
            record.time = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        line = json.dumps(record.to_json(), ensure_ascii=False)
        for secret in self._secrets:
            line = line.replace(secret, "***")
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8") as f:
                f.write(line + "\n")

    def records(self) -> list[CallRecord]:
        return read_records(self.path)

    def totals(self) -> Totals:
        """Billed use recorded in the file so far (earlier sessions of the run included)."""
        return billed_totals(self.records())


def billed_totals(records: Iterable[CallRecord]) -> Totals:
    """The billed use of some calls, as the budget counts it."""
    total = Totals()
    for r in records:
        total = total.plus(r.totals())
    return total


def read_records(path: str | Path) -> list[CallRecord]:
    """The records of a ledger file; a torn last line (a crash mid-write) is skipped."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    out = []
    for line in text.splitlines():
        try:
            out.append(CallRecord.from_json(json.loads(line)))
        except (json.JSONDecodeError, TypeError):
            continue
    return out
