"""LLM and budget settings built from the run configuration's dataclasses."""

from __future__ import annotations

from accelopt_evo.run.config import resolve
from operators.llm.settings import ROLES, BudgetSettings, LLMSettings, Settings


def test_roles_inherit_llm_defaults_and_override_their_own_fields():
    cfg = resolve(sets=[
        "llm.base_url=http://127.0.0.1:9/v1", "llm.model=big", "llm.temperature=0.5",
        'llm.extra={max_completion_tokens = 4096, reasoning_effort = "high"}',
        "llm.roles.summarizer.model=small", "llm.roles.planner.temperature=1.0",
        'llm.roles.implementer.extra={reasoning_effort = "low"}',
        "llm.roles.repair.base_url=http://127.0.0.1:10/v1",
    ])
    s = LLMSettings.from_section(cfg.llm)
    assert set(s.roles) == set(ROLES)
    assert s.role("summarizer").model == "small" and s.role("crossover").model == "big"
    assert s.role("planner").temperature == 1.0 and s.role("crossover").temperature == 0.5
    assert s.role("implementer").extra == {"max_completion_tokens": 4096, "reasoning_effort": "low"}
    assert s.role("planner").extra == {"max_completion_tokens": 4096, "reasoning_effort": "high"}
    assert s.base_urls() == ["http://127.0.0.1:9/v1", "http://127.0.0.1:10/v1"]


def test_api_key_comes_from_the_named_environment_variable():
    s = LLMSettings(api_key_env="MY_KEY")
    assert s.api_key({"MY_KEY": "k1", "OPENAI_API_KEY": "other"}) == "k1"
    assert s.api_key({}) == ""


def test_cost_uses_prices_per_million_tokens():
    s = LLMSettings(price_input_per_mtok=2.0, price_output_per_mtok=10.0)
    assert s.cost_usd(1_000_000, 100_000) == 3.0


def test_settings_from_a_whole_config():
    cfg = resolve(sets=["budget.max_llm_calls=3", "budget.max_usd=1.5", "llm.max_concurrency=2"])
    s = Settings.from_config(cfg)
    assert s.budget == BudgetSettings(max_usd=1.5, max_tokens=0, max_llm_calls=3)
    assert s.llm.max_concurrency == 2
