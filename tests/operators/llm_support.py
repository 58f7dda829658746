"""Helpers of the LLM operator tests: settings built through the real config dataclasses, a
silu context and parents, and a small stand-in engine loop.

The stand-in engine (`MiniEngine`) does what the real engine does around the operators
(select parents, vary, evaluate, repair, pick memory candidates, summarize, keep survivors)
with a cheap analytic latency of the silu baseline's two knobs instead of the simulator, so
these tests exercise the operators, the cache, the ledger and the memory without the fitness
stack.
"""

from __future__ import annotations

import copy
import hashlib
import inspect
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from accelopt_evo.config import Config
from accelopt_evo.memory import Candidate, OptimizationMemory
from llm_server import set_knob
from nkibench.problems import silu
from operators.base import CROSSOVER, MUTATION, Child, Context, Parent, Request
from operators.llm import BudgetSettings, LLMSettings, make_diff

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
            rng: np.random.Generator | None = None) -> Context:
    return Context("silu", REFERENCE, generation, rng or np.random.default_rng(0), tuple(lessons),
                   inputs=f"x: float32[{shape[0]}, {shape[1]}]")


# ---------------------------------------------------------------------------------------------
# A stand-in engine.


def fake_latency(source: str, shape: tuple[int, int]) -> tuple[float | None, str]:
    """An analytic latency (ms) of a silu kernel from its two knobs, or None and an error when
    the knobs make the baseline's loop structure compute nothing."""
    knobs = {m.group(1): int(m.group(2)) for m in KNOB_VALUE_RE.finditer(source)}
    if set(knobs) != {"LOAD_N", "COMPUTE_N"} or "def kernel" not in source:
        return None, "compile_error: kernel lost its LOAD_N / COMPUTE_N knobs"
    load, comp = knobs["LOAD_N"], knobs["COMPUTE_N"]
    if comp > load:
        return None, (f"incorrect: output 0 differs from the reference (relative L2 error 1.0); "
                      f"LOAD_N // COMPUTE_N == 0 with LOAD_N={load}, COMPUTE_N={comp}")
    m, n = shape
    loads = -(-m // 128) * -(-n // load)
    instructions = loads * (load // comp) * 4
    return 0.002 * loads + 0.0005 * instructions + 0.01, ""


@dataclass
class EngineState:
    generation: int
    population: list[Parent]
    memory: list[dict[str, Any]]
    rng_state: dict[str, Any]


@dataclass
class GenerationLog:
    generation: int
    children: list[tuple[str, str | None, str]]      # (operator, source, error)
    repaired: list[str | None]
    rationales: list[str]
    memory_size: int


@dataclass
class MiniEngine:
    """Around-the-operators logic of one problem, deterministic for a seed and the replies."""

    shape: tuple[int, int] = (256, 1024)
    offspring: int = 8
    survivors: int = 8
    crossover_prob: float = 0.3
    memory: OptimizationMemory = field(default_factory=OptimizationMemory)
    state: EngineState | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        if self.state is None:
            base = baseline_parent()
            latency, _ = fake_latency(BASELINE, self.shape)
            base = Parent(base.id, base.source, 1.0, latency, None, {"latency_ms": latency})
            self.state = EngineState(0, [base], [], np.random.default_rng(self.seed).bit_generator.state)
        self.memory.load_entries(copy.deepcopy(self.state.memory))
        self.baseline_latency = fake_latency(BASELINE, self.shape)[0]

    def checkpoint(self) -> EngineState:
        return copy.deepcopy(self.state)

    def _evaluate(self, source: str) -> tuple[Parent | None, str]:
        latency, error = fake_latency(source, self.shape)
        if latency is None:
            return None, error
        return Parent(kernel_id(source), source, self.baseline_latency / latency, latency, None,
                      {"latency_ms": latency, "dma_transfers": int(latency * 1000)}), ""

    def step(self, ops: Any) -> GenerationLog:
        st = self.state
        rng = np.random.default_rng()
        rng.bit_generator.state = st.rng_state
        gen = st.generation + 1
        ctx = Context("silu", REFERENCE, gen, rng, tuple(self.memory.lessons()),
                      inputs=f"x: float32[{self.shape[0]}, {self.shape[1]}]")
        pop = st.population
        requests = []
        for _ in range(self.offspring):
            if len(pop) >= 2 and rng.random() < self.crossover_prob:
                i, j = rng.choice(len(pop), size=2, replace=False)
                requests.append(Request(CROSSOVER, (pop[i], pop[j])))
            else:
                k = min(rng.choice(len(pop), size=min(3, len(pop)), replace=False))  # tournament on rank
                requests.append(Request(MUTATION, (pop[k],)))
        by_id = {p.id: p for p in pop}
        children = [c for cs in ops.vary(requests, ctx) for c in cs]
        evaluated: list[tuple[Child, Parent]] = []
        failed: list[tuple[Child, str]] = []
        for child in children:
            if child.source is None:
                continue
            result, error = self._evaluate(child.source)
            if result is None:
                failed.append((child, error))
            else:
                evaluated.append((child, result))
        repaired = ops.repair(failed, ctx) if failed else []
        for fixed in repaired:
            if fixed is not None and fixed.source:
                result, _ = self._evaluate(fixed.source)
                if result is not None:
                    evaluated.append((fixed, result))
        candidates, pairs_by_child = [], {}
        for child, result in evaluated:
            parent = by_id.get(child.parent_ids[0])
            if parent is None or parent.id == result.id:
                continue
            candidates.append(Candidate("silu", parent.id, result.id, result.speedup / parent.speedup, child.operator))
            pairs_by_child[result.id] = (parent, result)
        selected = self.memory.select(candidates)
        pairs = [(pairs_by_child[c.child_id][0], pairs_by_child[c.child_id][1], c.speedup) for c in selected]
        rationales = ops.summarize(pairs, ctx) if pairs else []
        for cand, (p, c, _), text in zip(selected, pairs, rationales):
            if text:
                self.memory.add(cand, text, make_diff(p.source, c.source), gen)
        merged = {p.id: p for p in pop}
        for _, result in evaluated:
            merged.setdefault(result.id, result)
        survivors = sorted(merged.values(), key=lambda p: (-(p.speedup or 0.0), p.id))[: self.survivors]
        self.state = EngineState(gen, survivors, self.memory.to_json(), rng.bit_generator.state)
        return GenerationLog(gen, [(c.operator, c.source, c.error) for c in children],
                             [None if r is None else r.source for r in repaired], rationales, len(self.memory.entries))
