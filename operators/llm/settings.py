"""Typed LLM and budget settings: the one declaration of the run configuration's [llm],
[llm.roles.<role>] and [budget] tables (accelopt_evo.run.config generates its sections from them).

The constructors read the config sections by attribute (duck typing), so the operators never
import the engine package. Per-role settings inherit every unset field from [llm]; `extra`
tables merge, the role's keys winning. A request carries only what is configured: an unset
temperature, completion budget or reasoning effort is not sent, so each model uses its own
default (reasoning models refuse any temperature but theirs).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from typing import Any, Mapping

ROLES = ("planner", "implementer", "crossover", "repair", "summarizer")

# The request parameter each typed setting is sent as (unset settings are not sent).
# `max_tokens` goes out as `max_completion_tokens`, the name OpenAI's reasoning models require
# and vLLM, SGLang and Anthropic's OpenAI-compatible endpoint accept.
REQUEST_PARAMS = {"temperature": "temperature", "max_tokens": "max_completion_tokens",
                  "reasoning_effort": "reasoning_effort"}


@dataclass(frozen=True)
class RequestSettings:
    """What one role's calls are sent with: the fields [llm] and each [llm.roles.<role>] table
    share (a role's unset field takes the [llm] value)."""

    base_url: str = ""                   # an OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1
    model: str = ""
    # Sampling temperature; unset: not sent (the model's default). OpenAI's reasoning models
    # accept only their default (1); Claude with thinking needs 1.
    temperature: float | None = None
    # Completion budget per call, reasoning tokens included (sent as max_completion_tokens);
    # unset: not sent (the server's limit).
    max_tokens: int | None = None
    # The larger budget of the one retry a reply cut at the budget (finish_reason "length")
    # gets; unset: no retry, the operator gets no child from that call.
    max_tokens_retry: int | None = None
    # "low" | "medium" | "high" (OpenAI reasoning models, gpt-oss on vLLM/SGLang); unset: not sent.
    reasoning_effort: str | None = None
    timeout_s: float = 600.0             # per call attempt (long enough for a reasoning model)
    # Sent as the request's extra_body, e.g. {chat_template_kwargs = {enable_thinking = true}}
    # (vLLM/SGLang) or {thinking = {type = "enabled", budget_tokens = 8000}} (Claude); its keys
    # win over the typed settings' parameters.
    extra: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RoleSettings(RequestSettings):
    """One role's resolved settings; the run configuration's [llm.roles.<role>] tables have
    these fields but `role`, each optional (unset: the [llm] value)."""

    role: str = ""


# Settings added after run folders first recorded [llm]: a configuration hash leaves them out
# while unset, so that run folders of earlier releases keep their hash (and resume).
_LATER = ("max_tokens", "max_tokens_retry", "reasoning_effort")
LATER_DEFAULTS: dict[str, Any] = {
    **{f"llm.{name}": None for name in _LATER},
    **{f"llm.roles.{role}.{name}": None for role in ROLES for name in (*_LATER, "timeout_s")},
}


@dataclass(frozen=True)
class LLMSettings(RequestSettings):
    """The [llm] table of the run configuration (which is generated from these fields)."""

    api_key_env: str = "OPENAI_API_KEY"  # the key is read from this variable, never stored
    max_concurrency: int = 4             # calls in flight at once
    max_retries: int = 4                 # 429 (honouring Retry-After), 5xx, timeouts, dropped connections
    price_input_per_mtok: float = 0.0    # USD per million prompt tokens
    # USD per million completion tokens; reasoning tokens are completion tokens (OpenAI bills
    # them at this price) and are priced once (see ledger.py).
    price_output_per_mtok: float = 0.0
    plans_per_parent: int = 1            # planner calls per mutation request
    samples_per_plan: int = 1            # implementer calls per plan
    roles: Mapping[str, RoleSettings] = field(default_factory=dict)   # resolved, one per role

    @classmethod
    def from_section(cls, llm: Any) -> "LLMSettings":
        """From an object shaped like the configuration's [llm] section: every field by name,
        and each role's settings with its unset fields taken from [llm] (`extra` merged, the
        role's keys winning)."""
        values = {f.name: getattr(llm, f.name) for f in fields(cls) if f.name != "roles"}
        values["extra"] = dict(values["extra"] or {})
        defaults = cls(**values)
        role_tables = getattr(llm, "roles", None)
        return cls(**values, roles={name: defaults._resolve(name, getattr(role_tables, name, None))
                                    for name in ROLES})

    def _resolve(self, name: str, table: Any) -> RoleSettings:
        """Role `name` with the fields `table` sets (None: unset) over these [llm] values."""
        own = {f.name: _first(getattr(table, f.name, None), getattr(self, f.name))
               for f in fields(RequestSettings) if f.name != "extra"}
        return RoleSettings(role=name, **own, extra={**self.extra, **dict(getattr(table, "extra", None) or {})})

    def role(self, name: str) -> RoleSettings:
        """The resolved settings of one role (the [llm] defaults when roles were not given)."""
        if name in self.roles:
            return self.roles[name]
        if name not in ROLES:
            raise KeyError(f"unknown LLM role '{name}' (known: {', '.join(ROLES)})")
        return self._resolve(name, None)

    def config_key(self, role: str, param: str) -> str:
        """The configuration key that set request parameter `param` of `role`'s calls: the
        role's own table when its value differs from [llm], else [llm]; `extra` keys as
        `llm.extra.<key>`; '' for a parameter no setting sends."""
        r = self.role(role)
        name = next((n for n, p in REQUEST_PARAMS.items() if p == param and getattr(r, n) is not None), None)
        if param in r.extra:    # extra's keys win over the typed settings
            name, own = f"extra.{param}", r.extra[param] != self.extra.get(param, object())
        elif name is not None:
            own = getattr(r, name) != getattr(self, name)
        else:
            return ""
        return f"llm.roles.{role}.{name}" if own else f"llm.{name}"

    def base_urls(self) -> list[str]:
        """Every distinct endpoint the roles use, in role order."""
        urls = [self.role(r).base_url for r in ROLES]
        return list(dict.fromkeys(u for u in urls if u))

    def api_key(self, environ: Mapping[str, str] | None = None) -> str:
        """The key from the configured environment variable ('' when unset)."""
        env = os.environ if environ is None else environ
        return env.get(self.api_key_env, "") if self.api_key_env else ""

    def cost_usd(self, prompt_tokens: int, completion_tokens: int) -> float:
        """USD of a call's usage; `completion_tokens` include its reasoning tokens."""
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


def problems(llm: Any) -> list[tuple[str, str]]:
    """What is out of range in an object shaped like the [llm] section and its role tables, as
    (config key, what is wrong); the configuration checks report the first."""
    out: list[tuple[str, str]] = []
    tables = [("llm", llm)] + [(f"llm.roles.{r}", getattr(getattr(llm, "roles", None), r, None)) for r in ROLES]
    for prefix, table in tables:
        timeout = getattr(table, "timeout_s", None)
        if timeout is not None and timeout <= 0:
            out.append((f"{prefix}.timeout_s", "must be > 0"))
        for name in ("max_tokens", "max_tokens_retry"):
            value = getattr(table, name, None)
            if value is not None and value < 1:
                out.append((f"{prefix}.{name}", "must be >= 1 (unset: not sent)"))
    resolved = LLMSettings.from_section(llm)
    for role in ROLES:
        r = resolved.role(role)
        if r.max_tokens and r.max_tokens_retry and r.max_tokens_retry <= r.max_tokens:
            key = "llm" if r.max_tokens_retry == llm.max_tokens_retry else f"llm.roles.{role}"
            out.append((f"{key}.max_tokens_retry", f"must be larger than max_tokens ({r.max_tokens}) of role {role}"))
    return out


def _first(value: Any, default: Any) -> Any:
    return default if value is None else value
