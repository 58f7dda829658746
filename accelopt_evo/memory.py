"""The optimization memory: an elite archive of parent -> child pairs with rationales.

Each generation at most `per_generation` new entries are admitted: improvements whose
speedup ratio (child over parent) is at least `improve_threshold`, best first, then
regressions at or below 1 / `regress_threshold`, worst first. Eviction policy: while the
memory holds more than `capacity` entries, the least informative one (smallest |log ratio|)
is dropped, the oldest first among equals. All problems of a run share one memory, and a
memory file can seed a new run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from operators.base import Lesson

from .records import MemoryEntry, read_memory_file

IMPROVEMENT = "improvement"
REGRESSION = "regression"


@dataclass(frozen=True)
class Candidate:
    """A parent -> child pair that may enter the memory once it has a rationale."""

    problem: str
    parent_id: str
    child_id: str
    speedup: float
    operator: str = ""


@dataclass
class OptimizationMemory:
    capacity: int = 16
    per_generation: int = 4
    improve_threshold: float = 1.04
    regress_threshold: float = 1.15
    entries: list[MemoryEntry] = field(default_factory=list)

    def select(self, candidates: Iterable[Candidate]) -> list[Candidate]:
        """The pairs of one generation worth a rationale, in admission order."""
        known = {(e.parent_id, e.child_id) for e in self.entries}
        fresh = [c for c in candidates if (c.parent_id, c.child_id) not in known]
        better = sorted((c for c in fresh if c.speedup >= self.improve_threshold), key=lambda c: -c.speedup)
        worse = sorted((c for c in fresh if c.speedup <= 1.0 / self.regress_threshold), key=lambda c: c.speedup)
        return (better + worse)[: self.per_generation]

    def add(self, candidate: Candidate, rationale: str, diff: str, generation: int) -> MemoryEntry:
        kind = IMPROVEMENT if candidate.speedup >= 1.0 else REGRESSION
        entry = MemoryEntry(candidate.problem, candidate.parent_id, candidate.child_id, candidate.speedup,
                            rationale, diff, generation, kind, candidate.operator)
        self.entries.append(entry)
        self._evict()
        return entry

    def _evict(self) -> None:
        while len(self.entries) > self.capacity:
            # min() keeps the first (oldest) among equal scores.
            weakest = min(range(len(self.entries)), key=lambda i: abs(math.log(self.entries[i].speedup)))
            del self.entries[weakest]

    def lessons(self) -> list[Lesson]:
        return [Lesson(e.problem, e.kind, e.speedup, e.rationale, e.diff) for e in self.entries]

    # Persistence (the format is records.MemoryEntry's) --------------------------------
    def to_json(self) -> list[dict[str, Any]]:
        return [e.to_json() for e in self.entries]

    def load_entries(self, entries: Iterable[MemoryEntry]) -> None:
        self.entries = list(entries)
        self._evict()

    @staticmethod
    def read_file(path: str | Path) -> list[MemoryEntry]:
        """Entries of a memory file (a run's memory.json); raises ValueError if unusable."""
        return list(read_memory_file(path).entries)
