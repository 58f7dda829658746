"""Typed LLM and budget settings, built from the run configuration's [llm] and [budget] tables.

The constructors read the plain config dataclasses by attribute (duck typing), so the
operators never import the engine package. Per-role settings inherit every unset field from
[llm]; `extra` tables merge, the role's keys winning.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Mapping

ROLES = ("planner", "implementer", "crossover", "repair", "summarizer")


@dataclass(frozen=True)
class RoleSettings:
    """What one role's calls are sent with."""

    role: str
    model: str
    base_url: str
    temperature: float
    extra: Mapping[str, Any] = field(default_factory=dict)   # extra request parameters


@dataclass(frozen=True)
class LLMSettings:
    base_url: str = ""
    model: str = ""
    api_key_env: str = "OPENAI_API_KEY"
    max_concurrency: int = 4
    temperature: float = 0.7
    timeout_s: float = 180.0
    max_retries: int = 4
    price_input_per_mtok: float = 0.0
    price_output_per_mtok: float = 0.0
    plans_per_parent: int = 1
    samples_per_plan: int = 1
    extra: Mapping[str, Any] = field(default_factory=dict)
    roles: Mapping[str, RoleSettings] = field(default_factory=dict)   # resolved, one per role

    @classmethod
    def from_section(cls, llm: Any) -> "LLMSettings":
        """From an object shaped like accelopt_evo.config.LLMSection."""
        extra = dict(getattr(llm, "extra", {}) or {})
        roles: dict[str, RoleSettings] = {}
        role_tables = getattr(llm, "roles", None)
        for name in ROLES:
            r = getattr(role_tables, name, None)
            roles[name] = RoleSettings(
                role=name,
                model=_first(getattr(r, "model", None), llm.model),
                base_url=_first(getattr(r, "base_url", None), llm.base_url),
                temperature=float(_first(getattr(r, "temperature", None), llm.temperature)),
                extra={**extra, **dict(getattr(r, "extra", {}) or {})},
            )
        return cls(
            base_url=llm.base_url, model=llm.model, api_key_env=llm.api_key_env,
            max_concurrency=int(llm.max_concurrency), temperature=float(llm.temperature),
            timeout_s=float(llm.timeout_s), max_retries=int(llm.max_retries),
            price_input_per_mtok=float(llm.price_input_per_mtok),
            price_output_per_mtok=float(llm.price_output_per_mtok),
            plans_per_parent=int(llm.plans_per_parent), samples_per_plan=int(llm.samples_per_plan),
            extra=extra, roles=roles,
        )

    def role(self, name: str) -> RoleSettings:
        """The resolved settings of one role (the [llm] defaults when roles were not given)."""
        if name in self.roles:
            return self.roles[name]
        if name not in ROLES:
            raise KeyError(f"unknown LLM role '{name}' (known: {', '.join(ROLES)})")
        return RoleSettings(name, self.model, self.base_url, self.temperature, dict(self.extra))

    def base_urls(self) -> list[str]:
        """Every distinct endpoint the roles use, in role order."""
        urls = [self.role(r).base_url for r in ROLES]
        return list(dict.fromkeys(u for u in urls if u))

    def api_key(self, environ: Mapping[str, str] | None = None) -> str:
        """The key from the configured environment variable ('' when unset)."""
        env = os.environ if environ is None else environ
        return env.get(self.api_key_env, "") if self.api_key_env else ""

    def cost_usd(self, prompt_tokens: int, completion_tokens: int) -> float:
        return (prompt_tokens * self.price_input_per_mtok + completion_tokens * self.price_output_per_mtok) / 1e6


@dataclass(frozen=True)
class BudgetSettings:
    """Caps on billed LLM use; 0 means no cap."""

    max_usd: float = 0.0
    max_tokens: int = 0
    max_llm_calls: int = 0

    @classmethod
    def from_section(cls, budget: Any) -> "BudgetSettings":
        """From an object shaped like accelopt_evo.config.BudgetSection."""
        return cls(float(budget.max_usd), int(budget.max_tokens), int(budget.max_llm_calls))


@dataclass(frozen=True)
class Settings:
    llm: LLMSettings
    budget: BudgetSettings

    @classmethod
    def from_config(cls, cfg: Any) -> "Settings":
        """From a whole run configuration (anything with `.llm` and `.budget` sections)."""
        return cls(LLMSettings.from_section(cfg.llm), BudgetSettings.from_section(cfg.budget))


def _first(value: Any, default: Any) -> Any:
    return default if value is None else value
