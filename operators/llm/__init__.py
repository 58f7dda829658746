"""LLM variation operators over any OpenAI-compatible endpoint.

Public API:
  LLMSettings, BudgetSettings, Settings      typed settings from the [llm] / [budget] config
  LLMOperators(llm, budget, run_dir)         mutation (planner + implementer), crossover,
                                             repair, summarizer; stop_reason(), spent(), close()
  MixedOperators(llm, tuning, llm_fraction)  LLM and tuning operators in one population
  resolve_kind(kind, base_url)               'llm' or 'tuning' for operators.kind, with a reason
  check_endpoint(settings)                   raises EndpointError (one line) if nothing answers
  extract_kernel(reply), make_diff(a, b)     helpers the engine may reuse
"""

from .client import EndpointError, check_endpoint
from .extract import extract_kernel
from .mixing import MixedOperators, resolve_kind
from .operators import CROSSOVER_OP, MUTATION_OP, REPAIR_OP, LLMOperators
from .prompts import make_diff
from .settings import BudgetSettings, LLMSettings, Settings

__all__ = [
    "BudgetSettings", "CROSSOVER_OP", "EndpointError", "LLMOperators", "LLMSettings", "MUTATION_OP",
    "MixedOperators", "REPAIR_OP", "Settings", "check_endpoint", "extract_kernel", "make_diff",
    "resolve_kind",
]
