"""The DEAP individual: a kernel variant with its lineage and last evaluation.

`make_types()` registers the `creator` classes on first use (not at import time):
`creator.KernelFitness` (one objective, speedup, maximized) and `creator.Kernel`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from deap import base, creator

from accelopt_evo.run.records import KernelMeta
from fitness.correctness.normalize import normalize_source
from fitness.result import MODEL_ERROR, NOT_JUDGED, EvalResult


@dataclass(eq=False)
class KernelRecord:
    source: str
    id: str
    parent_ids: tuple[str, ...] = ()
    operator: str = "baseline"
    generation: int = 0
    result: EvalResult | None = None
    note: str = ""

    def __len__(self) -> int:
        """Code length for parsimony pressure: lines of the normalized source."""
        return normalize_source(self.source).count("\n")

    @property
    def valid(self) -> bool:
        return self.result is not None and self.result.ok and self.result.speedup is not None

    @property
    def repairable(self) -> bool:
        """Failed by its own fault: a model error (an estimate below the roofline bound) is the
        performance model's, and a repair has nothing to fix; a kernel not judged has not failed."""
        return not self.valid and (self.result is None or self.result.status not in (MODEL_ERROR, NOT_JUDGED))

    def meta(self) -> KernelMeta:
        """Everything but the source (kept in kernels/<id>.py) for checkpoints."""
        return KernelMeta(self.id, self.parent_ids, self.operator, self.generation, self.note, self.result)


def make_types() -> None:
    if not hasattr(creator, "KernelFitness"):
        creator.create("KernelFitness", base.Fitness, weights=(1.0,))
    if not hasattr(creator, "Kernel"):
        creator.create("Kernel", KernelRecord, fitness=creator.KernelFitness)


def new_kernel(source: str, id: str, **meta: Any) -> Any:
    """A `creator.Kernel` whose fitness is set from its result when the kernel is valid."""
    make_types()
    ind = creator.Kernel(source, id, **meta)
    if ind.valid:
        ind.fitness.values = (float(ind.result.speedup),)
    return ind


def kernel_from_meta(meta: KernelMeta, source: str) -> Any:
    return new_kernel(source, meta.id, parent_ids=meta.parent_ids, operator=meta.operator,
                      generation=meta.generation, result=meta.result, note=meta.note)


@dataclass
class ProblemState:
    """Per-problem evolutionary state: population, hall of fame, logbook and known kernels."""

    spec: Any                                   # nkibench.problem.ProblemSpec
    population: list[Any] = field(default_factory=list)
    hall_of_fame: Any = None                    # deap.tools.HallOfFame
    logbook: Any = None                         # deap.tools.Logbook
    known: dict[str, EvalResult] = field(default_factory=dict)   # every kernel id evaluated
    baseline_id: str = ""
    # selection.strategy "islands": the islands (each kernel of them is in `population` too)
    islands: list[list[Any]] = field(default_factory=list)
