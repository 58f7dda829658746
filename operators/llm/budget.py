"""Caps on billed LLM use (`budget.max_usd`, `max_tokens`, `max_llm_calls`) with in-flight
reservation.

A call must reserve its estimated cost before it starts; it is refused when what has been
spent plus what is reserved by calls in flight plus its own estimate would pass a cap. The
call count is exact (one per call); tokens and dollars are estimated before the call (prompt
characters / 4 plus the expected completion) and settled with the server's usage afterwards,
so those two caps can be passed by at most the estimation error of the calls in flight. Once a
call has been refused, or a cap is reached, `stop_reason()` says which cap stopped the run.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from .settings import BudgetSettings


@dataclass(frozen=True)
class Totals:
    """Billed use: completed, non-cached calls and the usage the server reported. Completion
    tokens include the reasoning tokens (so `budget.max_tokens` counts them); `reasoning_tokens`
    says how many of them were reasoning."""

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    reasoning_tokens: int = 0

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def plus(self, other: "Totals") -> "Totals":
        return Totals(self.calls + other.calls, self.prompt_tokens + other.prompt_tokens,
                      self.completion_tokens + other.completion_tokens, self.cost_usd + other.cost_usd,
                      self.reasoning_tokens + other.reasoning_tokens)


@dataclass(frozen=True)
class Reservation:
    tokens: int
    usd: float


class Budget:
    """Thread-safe spent totals, reservations and the stop decision."""

    def __init__(self, caps: BudgetSettings, spent: Totals = Totals()) -> None:
        self.caps = caps
        self._spent = spent
        self._calls_in_flight = 0
        self._tokens_in_flight = 0
        self._usd_in_flight = 0.0
        self._refused: str | None = None
        self._lock = threading.Lock()

    @property
    def spent(self) -> Totals:
        with self._lock:
            return self._spent

    def reserve(self, est_tokens: int, est_usd: float) -> Reservation | None:
        """Hold room for one call, or None (and remember the cap) when it does not fit."""
        c = self.caps
        with self._lock:
            s = self._spent
            cap = None
            if c.max_llm_calls and s.calls + self._calls_in_flight + 1 > c.max_llm_calls:
                cap = "max_llm_calls"
            elif c.max_tokens and s.tokens + self._tokens_in_flight + est_tokens > c.max_tokens:
                cap = "max_tokens"
            elif c.max_usd and s.cost_usd + self._usd_in_flight + est_usd > c.max_usd:
                cap = "max_usd"
            if cap is not None:
                self._refused = self._refused or cap
                return None
            self._calls_in_flight += 1
            self._tokens_in_flight += est_tokens
            self._usd_in_flight += est_usd
            return Reservation(est_tokens, est_usd)

    def settle(self, reservation: Reservation, used: Totals) -> None:
        """Release a reservation and add what the call actually cost (zero if it failed)."""
        with self._lock:
            self._calls_in_flight -= 1
            self._tokens_in_flight -= reservation.tokens
            self._usd_in_flight -= reservation.usd
            self._spent = self._spent.plus(used)

    def expected_completion_tokens(self, default: int = 1024) -> int:
        """The mean completion length so far (the estimate for a call without a length cap)."""
        s = self.spent
        return max(1, round(s.completion_tokens / s.calls)) if s.calls else default

    def stop_reason(self) -> str | None:
        """Which cap ends the run, in words, or None while every cap has room."""
        c = self.caps
        with self._lock:
            s = self._spent
            cap = self._refused
            if cap is None:
                if c.max_llm_calls and s.calls >= c.max_llm_calls:
                    cap = "max_llm_calls"
                elif c.max_tokens and s.tokens >= c.max_tokens:
                    cap = "max_tokens"
                elif c.max_usd and s.cost_usd >= c.max_usd:
                    cap = "max_usd"
        if cap is None:
            return None
        used = {"max_llm_calls": f"{s.calls} billed calls",
                "max_tokens": f"{s.tokens} tokens used",
                "max_usd": f"${s.cost_usd:.4f} spent"}[cap]
        limit = getattr(c, cap)
        limit_text = f"{limit:g}" if isinstance(limit, float) else str(limit)
        return f"budget.{cap}={limit_text} reached ({used}; no further LLM call is started)"
