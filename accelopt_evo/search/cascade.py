"""Latency first (`evaluation.cascade`): correctness is paid for only where it decides.

On the simulator a kernel's latency comes from its shape-only trace (seconds at paper shapes)
while its correctness takes full-data emulation of every seed (minutes). With "latency_first"
a generation's children are first traced and timed (`Evaluator.latencies`: status not_judged,
or the verdict of a child that fails already there), and the decisions of the generation ask
`Verdicts.valid` about a child only when its correctness can change them:
- survivors (selection.py `survivors`): the elites, and each tournament's winner, are the
  fastest *valid* of the kernels considered, so a child is judged when it is the fastest
  still in question; with `selection.incorrect = "entrants"` children of unknown or failed
  correctness are drawn into tournaments like the others (and never win), so a tournament
  never needs the verdict of a child that cannot win it;
- the hall of fame (`update_hall_of_fame`): a child faster than its last member;
- AccelOpt's beam (selection.Plans.beam): the fastest sample of each plan until the beam is full;
- the memory (`OptimizationMemory.select(..., valid=)`): improvements best first and regressions
  worst first, until its slots for the generation are decided.
A child asked about is judged in full together with the next fastest children still unjudged
(as many as the evaluator runs at once); children never asked about keep the status
not_judged (never selectable, never a memory lesson). With "full" every child is judged
first and the same decisions read the known verdicts: both cascades give the same survivors,
hall of fame and memory from the same seed, since every decision is a function of the
latencies and of the verdicts it asks for. Not covered: repairs (a child whose failure only
a full judgement shows is repaired only under "full") and roulette and double-tournament
selection (they ask about every child). The asynchronous mode (steady.py) decides each child
when its latency arrives, against the population as it stands then.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from fitness.result import NOT_JUDGED


def undecided(ind: Any) -> bool:
    """Timed but not judged: its correctness is unknown."""
    return ind.result is not None and ind.result.status == NOT_JUDGED


def quickness(ind: Any) -> float:
    """The order in which kernels are considered, fastest first: the speedup its latency gives
    (known before judgement; 0 for a kernel without one)."""
    return (ind.result.speedup or 0.0) if ind.result is not None else 0.0


def entrants(children: Sequence[Any]) -> list[Any]:
    """The children that take part in a generation's decisions: those that were traced and timed
    (a child failing before that is known invalid under any cascade)."""
    return [c for c in children if c.result is not None and c.result.traced]


class Verdicts:
    """Correctness on demand: `valid(kernel)` judges an undecided kernel in full (with the next
    fastest undecided ones, `width` at a time) through `judge`, which gives each its result."""

    def __init__(self, judge: Callable[[list[Any]], None], kernels: Sequence[Any], width: int) -> None:
        self._judge = judge
        self._queue = sorted(kernels, key=quickness, reverse=True)
        self.width = max(1, width)

    def valid(self, ind: Any) -> bool:
        if undecided(ind):
            rest = [k for k in self._queue if k is not ind and undecided(k)]
            self._judge([ind] + rest[: self.width - 1])
        return bool(ind.valid)

    def foresee(self, decide: Callable[[Callable[[Any], bool]], Any]) -> None:
        """Rehearse `decide` with every undecided kernel taken as valid, then judge at once
        (in parallel) the undecided kernels it asked about: the real decisions then find their
        verdicts ready, unless one of them proves invalid and sends them further."""
        asked: dict[int, Any] = {}

        def optimistic(ind: Any) -> bool:
            if undecided(ind):
                asked.setdefault(id(ind), ind)
                return True
            return bool(ind.valid)

        decide(optimistic)
        if asked:
            self._judge(sorted(asked.values(), key=quickness, reverse=True))


def first_valid(ranked: Sequence[Any], valid: Callable[[Any], bool], count: int) -> list[Any]:
    """The first `count` of `ranked` that are valid, asking only as far as needed."""
    found: list[Any] = []
    for item in ranked:
        if len(found) >= count:
            break
        if valid(item):
            found.append(item)
    return found
