"""The optimization memory: an elite archive of parent -> child pairs with rationales.

Pairs are chosen per problem and generation (`select`), go to the summarizer, and enter with
their rationales (`add`). `memory.policy` decides which pairs a generation admits and which
entries are dropped when the memory holds more than `capacity`:

balanced (the default): a generation admits at most `per_generation` pairs: improvements
(speedup child/parent >= `improve_threshold`), best first, at most ceil(per_generation / 2)
of them; regressions (<= 1 / `regress_threshold`), worst first, in the remaining slots; slots
that regressions leave free go to further improvements. Eviction never drops an entry of the
generation being admitted (the `generation` passed to `add`: its rationale was just paid
for; an async run's problems each close their own generations). Of the older entries it
drops one at a time, while the memory holds more than `capacity`:
  1. a regression while regressions hold more than floor(capacity / 2) entries, else an
     improvement while improvements hold more than ceil(capacity / 2): improvements keep half
     of the memory once they have it, and neither kind's unused share is wasted;
  2. within that kind, an entry of the problem that holds the most entries of that kind
     (among the problems with a droppable one), so that the problems of a run, and those of
     a seeding memory file, share the memory without crowding out one another;
  3. within that problem, the least informative entry (smallest |log speedup|), the oldest
     among equals.
When every entry of the over-share kind was admitted in the current generation (a generation,
over all problems, admitted more of one kind than its share), the memory holds more than
`capacity` until the next generation's admissions.

accelopt (AccelOpt's rules): a generation admits at most per_generation // 2 improvements
(speedup > `improve_threshold`, best first) and regressions (< 1 / `regress_threshold`, worst
first) in the rest of its `per_generation` slots (AccelOpt's TopK). Every admitted pair stays;
of the older entries a random sample is kept so that the memory holds at most `capacity`
(ExpN), or more while one generation's admissions (over all problems) alone exceed it. The
sample derives from the run's seed, the generation and each entry's pair, so a resumed run
draws the same one without any state in the checkpoint, and the sample does not depend on how
a generation's admissions are split between problems and calls. AccelOpt presents every lesson
slow -> fast, as something to do: a regression is summarized as the improvement of undoing it
(child -> parent; the entry keeps its parent -> child ids, speedup and diff, and is marked
`reversed`) and shown as what worked. And only the planner's prompts show the memory.

All problems of a run share one memory. A checkpoint's entries are restored as they were
(`load_entries`); a memory file of an earlier run seeds a new one (`start_from`), evicted down
to this capacity as if all its entries were older.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import operator
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from accelopt_evo.run.config import ACCELOPT, BALANCED, MEMORY_POLICIES
from accelopt_evo.run.records import IMPROVEMENT, REGRESSION, MemoryEntry, read_memory_file
from operators.base import Lesson


@dataclass(frozen=True)
class Candidate:
    """A parent -> child pair that may enter the memory once it has a rationale."""

    problem: str
    parent_id: str
    child_id: str
    speedup: float
    operator: str = ""


@dataclass(frozen=True)
class Admission:
    """How a policy fills one generation's `per_generation` slots."""

    strict: bool      # thresholds exclusive (AccelOpt: > 1.04x, < 1/1.15), else inclusive
    round_up: bool    # improvements may take ceil(k / 2) of k slots, else k // 2
    backfill: bool    # slots that regressions leave free go to further improvements


ADMISSION = {BALANCED: Admission(strict=False, round_up=True, backfill=True),
             ACCELOPT: Admission(strict=True, round_up=False, backfill=False)}


@dataclass(frozen=True)
class Presentation:
    """How a policy's lessons reach the prompts."""

    roles: tuple[str, ...] | None   # the prompt roles that show the memory (None: every role)
    slow_to_fast: bool              # regressions summarized and shown reversed, as improvements


PRESENTATION = {BALANCED: Presentation(roles=None, slow_to_fast=False),
                ACCELOPT: Presentation(roles=("planner",), slow_to_fast=True)}


def ranked(candidates: Sequence[Candidate], improve: float, regress: float,
           strict: bool) -> tuple[list[Candidate], list[Candidate]]:
    """The improvements, best first, and the regressions, worst first; pairs inside the band
    (1 / regress .. improve) teach too little to pay a rationale for."""
    above, below = (operator.gt, operator.lt) if strict else (operator.ge, operator.le)
    better = sorted((c for c in candidates if above(c.speedup, improve)), key=lambda c: -c.speedup)
    worse = sorted((c for c in candidates if below(c.speedup, 1.0 / regress)), key=lambda c: c.speedup)
    return better, worse


def slots(rules: Admission, better: int, worse: int, per_generation: int) -> tuple[int, int]:
    """How many of `better` improvements and `worse` regressions one generation admits."""
    most = -(-per_generation // 2) if rules.round_up else per_generation // 2
    take_better = min(better, most)
    take_worse = min(worse, per_generation - take_better)
    if rules.backfill:
        take_better = min(better, per_generation - take_worse)
    return take_better, take_worse


def kind_of(speedup: float) -> str:
    """An entry's kind by its speedup, as `add` labels it."""
    return IMPROVEMENT if speedup >= 1.0 else REGRESSION


def informativeness(entry: MemoryEntry) -> float:
    """How much a lesson says: the size of its speedup either way."""
    return abs(math.log(entry.speedup))


def _balanced_victim(entries: Sequence[MemoryEntry], capacity: int, generation: int | None) -> int | None:
    """The index of the entry the balanced policy drops next (rules 1-3 of the module
    docstring), or None when only entries of `generation` could go."""
    shares = {REGRESSION: capacity // 2, IMPROVEMENT: capacity - capacity // 2}
    for kind in (REGRESSION, IMPROVEMENT):
        of_kind = [i for i, e in enumerate(entries) if kind_of(e.speedup) == kind]
        droppable = [i for i in of_kind if entries[i].generation != generation]
        if len(of_kind) > shares[kind] and droppable:
            held = Counter(entries[i].problem for i in of_kind)
            return min(droppable, key=lambda i: (-held[entries[i].problem], informativeness(entries[i]), i))
    return None


def evict_balanced(entries: Sequence[MemoryEntry], capacity: int, generation: int | None) -> list[MemoryEntry]:
    """The entries the balanced policy keeps; `generation`'s own are never dropped."""
    kept = list(entries)
    while len(kept) > capacity:
        victim = _balanced_victim(kept, capacity, generation)
        if victim is None:
            break
        del kept[victim]
    return kept


def _draw(seed: int, generation: int | None, entry: MemoryEntry) -> int:
    """A pseudo-random number fixed by the run's seed, the generation and the entry's pair."""
    key = f"{seed}/{generation}/{entry.problem}/{entry.parent_id}/{entry.child_id}".encode()
    return int.from_bytes(hashlib.sha256(key).digest()[:8], "big")


def sample_older(entries: Sequence[MemoryEntry], capacity: int, generation: int | None,
                 seed: int) -> list[MemoryEntry]:
    """AccelOpt's eviction: `generation`'s entries stay, and a random sample of the older
    ones fills the memory up to `capacity`; the order of the entries is kept."""
    older = [i for i, e in enumerate(entries) if e.generation != generation]
    room = max(0, capacity - (len(entries) - len(older)))
    dropped = set(sorted(older, key=lambda i: (_draw(seed, generation, entries[i]), i))[room:])
    return [e for i, e in enumerate(entries) if i not in dropped]


@dataclass
class OptimizationMemory:
    """The run's memory: its entries, oldest first, and the policy that admits and evicts."""

    capacity: int = 16
    per_generation: int = 4
    improve_threshold: float = 1.04
    regress_threshold: float = 1.15
    entries: list[MemoryEntry] = field(default_factory=list)
    policy: str = BALANCED            # one of MEMORY_POLICIES (see the module docstring)
    seed: int = 0                     # the run's seed: accelopt's samples derive from it

    def __post_init__(self) -> None:
        if self.policy not in MEMORY_POLICIES:
            raise ValueError(f"unknown memory policy {self.policy!r} (one of {', '.join(MEMORY_POLICIES)})")

    def select(self, candidates: Iterable[Candidate],
               valid: Callable[[Candidate], bool] = lambda c: True) -> list[Candidate]:
        """The pairs of one problem's generation worth a rationale, in admission order. Only
        pairs whose child is `valid` qualify; `valid` is asked in rank order and only until the
        generation's slots are decided (cascade.py)."""
        if self.capacity == 0:
            return []      # a memory that keeps nothing pays for no rationale
        known = {(e.parent_id, e.child_id) for e in self.entries}
        fresh = [c for c in candidates if (c.parent_id, c.child_id) not in known]
        rules = ADMISSION[self.policy]
        better, worse = ranked(fresh, self.improve_threshold, self.regress_threshold, rules.strict)
        # slots() needs no more than per_generation of either kind
        # (valid is asked only as far as needed: islice stops pulling from filter at the count)
        better = list(itertools.islice(filter(valid, better), self.per_generation))
        worse = list(itertools.islice(filter(valid, worse), self.per_generation))
        take_better, take_worse = slots(rules, len(better), len(worse), self.per_generation)
        return better[:take_better] + worse[:take_worse]

    def add(self, candidate: Candidate, rationale: str, diff: str, generation: int) -> MemoryEntry:
        """Admit a selected pair with its rationale, then evict by the policy (never an entry
        of `generation`)."""
        entry = MemoryEntry(candidate.problem, candidate.parent_id, candidate.child_id, candidate.speedup,
                            rationale, diff, generation, kind_of(candidate.speedup), candidate.operator,
                            reversed=self.reverses(candidate))
        self.entries.append(entry)
        self._evict(generation)
        return entry

    def _evict(self, generation: int | None) -> None:
        """Apply the policy's eviction; `generation` None protects nothing (a seeding file)."""
        if self.policy == ACCELOPT:
            self.entries = sample_older(self.entries, self.capacity, generation, self.seed)
        else:
            self.entries = evict_balanced(self.entries, self.capacity, generation)

    def reverses(self, candidate: Candidate) -> bool:
        """Whether the pair is summarized slow -> fast, child -> parent: a regression under a
        policy that presents every lesson as something to do."""
        return PRESENTATION[self.policy].slow_to_fast and kind_of(candidate.speedup) == REGRESSION

    def lesson_roles(self) -> tuple[str, ...] | None:
        """The prompt roles that show the memory (None: every role)."""
        return PRESENTATION[self.policy].roles

    def lessons(self) -> list[Lesson]:
        """The entries as prompts show them; a `reversed` entry (its rationale was written child
        -> parent) as the improvement of undoing its change, whatever the current policy."""
        return [Lesson(e.problem, IMPROVEMENT, 1.0 / e.speedup, e.rationale, e.diff) if e.reversed
                else Lesson(e.problem, e.kind, e.speedup, e.rationale, e.diff) for e in self.entries]

    # Persistence (the format is records.MemoryEntry's) --------------------------------
    def to_json(self) -> list[dict[str, Any]]:
        return [e.to_json() for e in self.entries]

    def load_entries(self, entries: Iterable[MemoryEntry]) -> None:
        """Restore the entries of a checkpoint exactly: one written while a generation's
        admissions held the memory above capacity resumes the way the run went on."""
        self.entries = list(entries)

    def start_from(self, entries: Iterable[MemoryEntry]) -> None:
        """Seed the memory with an earlier run's entries, evicted down to this capacity."""
        self.entries = list(entries)
        self._evict(None)

    @staticmethod
    def read_file(path: str | Path) -> list[MemoryEntry]:
        """Entries of a memory file (a run's memory.json); raises ValueError if unusable."""
        return list(read_memory_file(path).entries)
