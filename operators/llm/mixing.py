"""Mixing LLM and offline operators in one population, and choosing between them.

`MixedOperators` sends each request to the LLM operators with probability `llm_fraction`
(one draw of ctx.rng per request, in order, and no draw at all when the fraction is 0 or 1),
else to the tuning operators. The draw is made when the engine asks how many children a
request will give (`children_per_request`), so the engine plans a generation's requests with
the count of the side each one goes to, and `vary` then sends them there; requests `vary` was
not asked about are drawn for on arrival. Repairs go back to whichever kind produced the
child; rationales always come from the LLM, and spending and stopping are the LLM's.
"""

from __future__ import annotations

from typing import Any, Sequence

from ..base import Child, Context, Operators, Parent, Request

LLM_PREFIX = "llm_"


class MixedOperators(Operators):
    name = "mixed"

    def __init__(self, llm: Operators, tuning: Operators, llm_fraction: float) -> None:
        if not 0.0 <= llm_fraction <= 1.0:
            raise ValueError(f"llm_fraction must be in [0, 1], got {llm_fraction}")
        self.llm = llm
        self.tuning = tuning
        self.llm_fraction = llm_fraction
        self._routes: list[bool] = []    # drawn by children_per_request, used by the next vary

    def _to_llm(self, ctx: Context) -> bool:
        if self.llm_fraction >= 1.0:
            return True
        if self.llm_fraction <= 0.0:
            return False
        return bool(ctx.rng.random() < self.llm_fraction)

    def children_per_request(self, kind: str, ctx: Context) -> int:
        to_llm = self._to_llm(ctx)
        self._routes.append(to_llm)
        return (self.llm if to_llm else self.tuning).children_per_request(kind, ctx)

    def vary(self, requests: Sequence[Request], ctx: Context) -> list[list[Child]]:
        drawn, self._routes = self._routes[: len(requests)], []
        to_llm = drawn + [self._to_llm(ctx) for _ in requests[len(drawn):]]
        out: list[list[Child]] = [[] for _ in requests]
        for side, wanted in ((self.tuning, False), (self.llm, True)):
            idx = [i for i, x in enumerate(to_llm) if x is wanted]
            if idx:
                for i, children in zip(idx, side.vary([requests[i] for i in idx], ctx)):
                    out[i] = children
        return out

    def repair(self, failed: Sequence[tuple[Child, str]], ctx: Context) -> list[Child | None]:
        out: list[Child | None] = [None] * len(failed)
        for side, wanted in ((self.tuning, False), (self.llm, True)):
            idx = [i for i, (c, _) in enumerate(failed) if c.operator.startswith(LLM_PREFIX) is wanted]
            if idx:
                for i, fixed in zip(idx, side.repair([failed[i] for i in idx], ctx)):
                    out[i] = fixed
        return out

    def summarize(self, pairs: Sequence[tuple[Parent, Parent, float]], ctx: Context) -> list[str]:
        return self.llm.summarize(pairs, ctx)

    def spent(self) -> dict[str, Any]:
        return self.llm.spent()

    def stop_reason(self) -> str | None:
        return self.llm.stop_reason()

    def close(self) -> None:
        self.llm.close()


def resolve_kind(kind: str, base_url: str) -> tuple[str, str]:
    """The operator kind a run uses ('llm' or 'tuning') and a sentence saying why."""
    if kind == "llm":
        return "llm", "LLM operators (operators.kind = llm)"
    if kind == "tuning":
        return "tuning", "offline operators (operators.kind = tuning)"
    if kind != "auto":
        raise ValueError(f"unknown operators.kind '{kind}' (known: auto, llm, tuning)")
    if base_url:
        return "llm", f"LLM operators (operators.kind = auto and llm.base_url = {base_url})"
    return "tuning", "offline operators (operators.kind = auto and no llm.base_url)"
