"""Typed LLM and budget settings: the one declaration of the run configuration's [llm],
[llm.roles.<role>] and [budget] tables (accelopt_evo.config generates its sections from them).

The constructors read the config sections by attribute (duck typing), so the operators never
import the engine package. Per-role settings inherit every unset field from [llm]; `extra`
tables merge, the role's keys winning.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from typing import Any, Mapping

ROLES = ("planner", "implementer", "crossover", "repair", "summarizer")


@dataclass(frozen=True)
class RoleSettings:
    """What one role's calls are sent with; the run configuration's [llm.roles.<role>] tables
    have these fields but `role`, each optional (unset: the [llm] value)."""

    role: str
    model: str
    base_url: str
    temperature: float
    extra: Mapping[str, Any] = field(default_factory=dict)   # extra request parameters


@dataclass(frozen=True)
class LLMSettings:
    """The [llm] table of the run configuration (which is generated from these fields)."""

    base_url: str = ""                   # an OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1
    model: str = ""
    api_key_env: str = "OPENAI_API_KEY"  # the key is read from this variable, never stored
    max_concurrency: int = 4             # calls in flight at once
    temperature: float = 0.7
    timeout_s: float = 180.0             # per call attempt
    max_retries: int = 4                 # 429 (honouring Retry-After), 5xx, timeouts, dropped connections
    price_input_per_mtok: float = 0.0    # USD per million prompt tokens
    price_output_per_mtok: float = 0.0   # USD per million completion tokens
    plans_per_parent: int = 1            # planner calls per mutation request
    samples_per_plan: int = 1            # implementer calls per plan
    extra: Mapping[str, Any] = field(default_factory=dict)            # extra request parameters
    roles: Mapping[str, RoleSettings] = field(default_factory=dict)   # resolved, one per role

    @classmethod
    def from_section(cls, llm: Any) -> "LLMSettings":
        """From an object shaped like the configuration's [llm] section: every field by name,
        and each role's settings with its unset fields taken from [llm] (`extra` merged, the
        role's keys winning)."""
        values = {f.name: getattr(llm, f.name) for f in fields(cls) if f.name != "roles"}
        values["extra"] = dict(values["extra"] or {})
        role_tables = getattr(llm, "roles", None)
        roles: dict[str, RoleSettings] = {}
        for name in ROLES:
            table = getattr(role_tables, name, None)
            own = {f.name: _first(getattr(table, f.name, None), values[f.name])
                   for f in fields(RoleSettings) if f.name not in ("role", "extra")}
            roles[name] = RoleSettings(role=name, **own,
                                       extra={**values["extra"], **dict(getattr(table, "extra", {}) or {})})
        return cls(**values, roles=roles)

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
        """From an object shaped like the configuration's [budget] section (same field names)."""
        return cls(**{f.name: getattr(budget, f.name) for f in fields(cls)})


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
