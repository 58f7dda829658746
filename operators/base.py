"""What every set of variation operators receives and returns.

The engine asks for a whole generation's offspring at once (`Operators.vary`), so that an
implementation can run its work concurrently (LLM calls) or sequentially (knob tuning).
Operators see parents as plain values and never evaluate anything themselves.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

MUTATION = "mutation"
CROSSOVER = "crossover"


@dataclass(frozen=True)
class Parent:
    """A correct kernel as the operators see it."""

    id: str
    source: str
    speedup: float | None = None
    latency_ms: float | None = None
    percent_of_peak: float | None = None
    profile: dict[str, Any] = field(default_factory=dict)
    note: str = ""                       # what the operator that made it did (Child.note)
    parent_ids: tuple[str, ...] = ()


@dataclass(frozen=True)
class Request:
    """One request for offspring: a mutation of one parent or a crossover of two."""

    kind: str                     # MUTATION or CROSSOVER
    parents: tuple[Parent, ...]


@dataclass
class Child:
    """A kernel an operator produced, or the record of an operator failure (source None)."""

    source: str | None
    operator: str                 # e.g. "tune_mutation", "llm_mutation", "llm_crossover"
    parent_ids: tuple[str, ...]
    note: str = ""                # what the operator did (a plan, the knob it moved)
    error: str = ""               # why no source came back (operator failure)
    # The plan this child implements, unique within one `vary` call (LLM mutation: the parent id,
    # the request and the plan's index), so that survivor selection can keep one child per plan;
    # "" when the operator has no plans (each such child is a plan of its own).
    plan: str = ""


@dataclass(frozen=True)
class Lesson:
    """One entry of the optimization memory as prompts show it."""

    problem: str
    kind: str                     # "improvement" or "regression"
    speedup: float
    rationale: str
    diff: str


@dataclass(frozen=True)
class Machine:
    """The documented figures of the run's target that prompts show (filled by the engine from
    the performance model's hardware table, so that no number is written twice)."""

    target: str                   # "trn1", "trn2", "trn3"
    core: str                     # "NeuronCore-v2", ...
    partitions: int
    sbuf_bytes: int               # per partition
    sbuf_usable_bytes: int        # per partition
    psum_bytes: int               # per partition
    psum_banks: int
    dma_engines: int              # per core
    hbm_bytes_per_s: float        # per core
    clocks_hz: tuple[tuple[str, float], ...]   # (engine, Hz): TensorE, VectorE, ScalarE, GpSimdE


@dataclass
class Context:
    """What operators may know about the problem at hand."""

    problem: str                  # problem name
    reference_source: str         # the NumPy reference, as text (shown in prompts)
    generation: int
    rng: np.random.Generator      # the only source of randomness operators may use
    lessons: Sequence[Lesson] = ()
    baseline_source: str = ""
    inputs: str = ""              # the kernel's arguments for prompts, e.g. "x: float32[4096, 7168]"
    # The narrowest float type a kernel may compute in (the problem's inputs and baseline decide;
    # fitness.correctness.precision): prompts state the rule with it.
    precision: str = "float32"
    tolerance: float = 2e-5       # the L2 relative tolerance of the problem's outputs (prompts quote it)
    machine: Machine | None = None  # the target's figures (None: prompts name no numbers)
    # The dimensions of the kernel's array arguments (offline operators draw tile sizes from them).
    dims: frozenset[int] = frozenset()
    # The ids (fitness.correctness.normalize.kernel_id) of the problem's kernels evaluated so far in the run:
    # offline operators draw moves that give a kernel not tried yet where there is one.
    known: frozenset[str] = frozenset()
    # Offline tuning operators take part (they vary `# tune:` knobs): only then do prompts ask
    # to keep the knob convention and every listed value correct.
    tuning: bool = True
    # The prompt roles that show `lessons` (e.g. ("planner",): AccelOpt gives the memory to the
    # planner only); None: every role.
    lesson_roles: tuple[str, ...] | None = None

    def shows_lessons(self, role: str) -> bool:
        """Whether the prompts of `role` show the optimization memory."""
        return self.lesson_roles is None or role in self.lesson_roles


class Operators(abc.ABC):
    """A set of variation operators (offline tuning, LLM, or a mix): the one contract the engine
    calls. `vary` and `summarize` are each kind's own; the rest default to what fits a set that
    spends nothing and cannot repair."""

    name: str = "operators"

    def children_per_request(self, kind: str, ctx: Context) -> int:
        """How many children `vary` returns for the next request of this kind when every call
        works. The engine asks once per request, in request order, right before `vary` of those
        requests, so a set that routes requests may make its routing draw here."""
        return 1

    @abc.abstractmethod
    def vary(self, requests: Sequence[Request], ctx: Context) -> list[list[Child]]:
        """Children for each request (same order); an empty list or a Child with `error`
        when the operator could not produce one."""

    def repair(self, failed: Sequence[tuple[Child, str]], ctx: Context) -> list[Child | None]:
        """A fixed version of each failed child given its error message, or None."""
        return [None for _ in failed]

    @abc.abstractmethod
    def summarize(self, pairs: Sequence[tuple[Parent, Parent, float]], ctx: Context) -> list[str]:
        """A rationale for each (parent, child, speedup ratio) pair for the memory ("" for none)."""

    def spent(self) -> dict[str, Any]:
        """Billed use so far (calls, tokens, dollars), for checkpoints and reports; {} for none."""
        return {}

    def stop_reason(self) -> str | None:
        """Why the run must stop (a budget cap reached), or None; asked after each generation."""
        return None

    def close(self) -> None:
        """Release connections and threads; the set is not used afterwards."""
