"""LLM variation operators over any OpenAI-compatible endpoint.

Public API:
  LLMSettings, BudgetSettings, Settings      typed settings from the [llm] / [budget] config
  LLMOperators(llm, budget, run_dir)         mutation (planner + implementer), crossover,
                                             repair, summarizer; stop_reason(), spent(), close()
  MixedOperators(llm, tuning, llm_fraction)  LLM and tuning operators in one population
  resolve_kind(kind, base_url)               'llm' or 'tuning' for operators.kind, with a reason
  check_endpoint(settings)                   raises EndpointError (one line) if nothing answers
  preflight(settings, roles)                 one minimal call per endpoint, model and parameters;
                                             raises PreflightError naming a refused parameter
  extract_kernel(reply), make_diff(a, b)     helpers the engine may reuse

The names load on first use, so that reading the settings types (the run configuration does)
does not import the HTTP client.
"""

from __future__ import annotations

import importlib
from typing import Any

_HOMES = {
    "EndpointError": "client", "check_endpoint": "client", "extract_kernel": "extract",
    "PreflightError": "client", "preflight": "client",
    "MixedOperators": "mixing", "resolve_kind": "mixing", "CROSSOVER_OP": "operators", "MUTATION_OP": "operators",
    "REPAIR_OP": "operators", "LLMOperators": "operators", "make_diff": "prompts",
    "BudgetSettings": "settings", "LLMSettings": "settings", "Settings": "settings",
}

__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_HOMES[name]}", __name__), name)
