"""Helpers of the LLM operator tests: settings built through the real config dataclasses, and a
silu context and parents. Whole runs with LLM operators are tested on the real engine in
tests/engine/test_llm_run.py."""

from __future__ import annotations

import hashlib
import inspect
import re
from pathlib import Path
from typing import Any

import numpy as np

from accelopt_evo.run.config import Config
from accelopt_evo.search.engine import machine
from nkibench.problems import silu
from operators.base import Context, Parent
from operators.llm import BudgetSettings, LLMSettings

from llm_server import set_knob

REPO = Path(__file__).resolve().parents[2]
BASELINE = (REPO / "nkibench" / "baselines" / "silu.py").read_text()
KNOB_VALUE_RE = re.compile(r"^(LOAD_N|COMPUTE_N)\s*=\s*(\d+)", re.M)


def knob(source: str, name: str) -> int:
    """The value of a silu knob in a kernel source."""
    return {m.group(1): int(m.group(2)) for m in KNOB_VALUE_RE.finditer(source)}[name]


def with_knob(source: str, name: str, value: int) -> str:
    """`source` with the silu knob `name` set to `value`."""
    out, what = set_knob(source, name, value)
    assert what.startswith("set "), what
    return out
REFERENCE = inspect.getsource(silu.reference)
API_KEY = "sk-test-5ecret-do-not-leak-0123456789"


def settings(url: str, **llm: Any) -> LLMSettings:
    """LLMSettings for `url`, built from the real [llm] config dataclass with overrides."""
    cfg = Config()
    cfg.llm.base_url = url
    cfg.llm.model = "test-model"
    cfg.llm.api_key_env = "ACCELOPT_TEST_KEY"
    roles = llm.pop("roles", {})
    for k, v in llm.items():
        setattr(cfg.llm, k, v)
    for role, fields in roles.items():
        for k, v in fields.items():
            setattr(getattr(cfg.llm.roles, role), k, v)
    return LLMSettings.from_section(cfg.llm)


def budget(**caps: Any) -> BudgetSettings:
    cfg = Config()
    for k, v in caps.items():
        setattr(cfg.budget, k, v)
    return BudgetSettings.from_section(cfg.budget)


ENV = {"ACCELOPT_TEST_KEY": API_KEY}


def kernel_id(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()


def baseline_parent() -> Parent:
    return Parent(kernel_id(BASELINE), BASELINE, 1.0, 1.0, 10.0,
                  {"latency_ms": 1.0, "hbm_read_bytes": 4 * 256 * 1024, "bottleneck": "DMA issue bound"})


def context(generation: int = 1, lessons: Any = (), shape: tuple[int, int] = (256, 1024),
            rng: np.random.Generator | None = None, target: str = "trn1") -> Context:
    return Context("silu", REFERENCE, generation, rng or np.random.default_rng(0), tuple(lessons),
                   inputs=f"x: float32[{shape[0]}, {shape[1]}]", machine=machine(target))


# ---------------------------------------------------------------------------------------------
# A stand-in engine.
