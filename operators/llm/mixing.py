"""Mixing LLM and offline tuning operators in one population, and choosing between them.

`MixedOperators` sends each request to the LLM operators with probability `llm_fraction`
(one draw of ctx.rng per request, in order, and no draw at all when the fraction is 0 or 1),
else to the tuning operators; repairs go back to whichever kind produced the child; rationales
always come from the LLM.
"""

from __future__ import annotations

from typing import Any, Sequence

from ..base import Child, Context, Operators, Parent, Request

LLM_PREFIX = "llm_"


class MixedOperators:
    name = "mixed"

    def __init__(self, llm: Any, tuning: Operators, llm_fraction: float) -> None:
        if not 0.0 <= llm_fraction <= 1.0:
            raise ValueError(f"llm_fraction must be in [0, 1], got {llm_fraction}")
        self.llm = llm
        self.tuning = tuning
        self.llm_fraction = llm_fraction

    def _to_llm(self, ctx: Context) -> bool:
        if self.llm_fraction >= 1.0:
            return True
        if self.llm_fraction <= 0.0:
            return False
        return bool(ctx.rng.random() < self.llm_fraction)

    def vary(self, requests: Sequence[Request], ctx: Context) -> list[list[Child]]:
        to_llm = [self._to_llm(ctx) for _ in requests]
        llm_idx = [i for i, x in enumerate(to_llm) if x]
        tune_idx = [i for i, x in enumerate(to_llm) if not x]
        out: list[list[Child]] = [[] for _ in requests]
        if tune_idx:
            for i, children in zip(tune_idx, self.tuning.vary([requests[i] for i in tune_idx], ctx)):
                out[i] = children
        if llm_idx:
            for i, children in zip(llm_idx, self.llm.vary([requests[i] for i in llm_idx], ctx)):
                out[i] = children
        return out

    def repair(self, failed: Sequence[tuple[Child, str]], ctx: Context) -> list[Child | None]:
        out: list[Child | None] = [None] * len(failed)
        llm_idx = [i for i, (c, _) in enumerate(failed) if c.operator.startswith(LLM_PREFIX)]
        tune_idx = [i for i, (c, _) in enumerate(failed) if not c.operator.startswith(LLM_PREFIX)]
        if tune_idx:
            for i, fixed in zip(tune_idx, self.tuning.repair([failed[i] for i in tune_idx], ctx)):
                out[i] = fixed
        if llm_idx:
            for i, fixed in zip(llm_idx, self.llm.repair([failed[i] for i in llm_idx], ctx)):
                out[i] = fixed
        return out

    def summarize(self, pairs: Sequence[tuple[Parent, Parent, float]], ctx: Context) -> list[str]:
        return self.llm.summarize(pairs, ctx)

    def stop_reason(self) -> str | None:
        return self.llm.stop_reason()

    def close(self) -> None:
        self.llm.close()


def resolve_kind(kind: str, base_url: str) -> tuple[str, str]:
    """The operator kind a run uses ('llm' or 'tuning') and a sentence saying why."""
    if kind == "llm":
        return "llm", "LLM operators (operators.kind = llm)"
    if kind == "tuning":
        return "tuning", "offline knob-tuning operators (operators.kind = tuning)"
    if kind != "auto":
        raise ValueError(f"unknown operators.kind '{kind}' (known: auto, llm, tuning)")
    if base_url:
        return "llm", f"LLM operators (operators.kind = auto and llm.base_url = {base_url})"
    return "tuning", "offline knob-tuning operators (operators.kind = auto and no llm.base_url)"
