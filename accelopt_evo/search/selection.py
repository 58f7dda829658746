"""Selection operators from the config, on DEAP's own implementations, and AccelOpt's beam
(`selection.survivors = "beam_per_plan"`: `Plans.beam`).

DEAP's selection functions draw from the module-level `random` generator. To keep the run's
randomness explicit (one `random.Random` owned by the engine, saved in checkpoints) every
call runs with the global generator temporarily holding the engine's state.
"""

from __future__ import annotations

import bisect
import contextlib
import copy
import functools
import random
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping, Sequence

from deap import tools

from .cascade import first_valid


@contextlib.contextmanager
def using_rng(rng: random.Random) -> Iterator[None]:
    """Run DEAP code as if `random` were `rng`; the global state is restored afterwards."""
    saved = random.getstate()
    random.setstate(rng.getstate())
    try:
        yield
    finally:
        rng.setstate(random.getstate())
        random.setstate(saved)


def _with_rng(fn: Callable[..., list], rng: random.Random) -> Callable[..., list]:
    @functools.wraps(fn)
    def call(individuals: list, k: int, **kwargs: Any) -> list:
        with using_rng(rng):
            return fn(individuals, k, **kwargs)

    return call


def selection_operator(selection: Any, rng: random.Random) -> Callable[..., list]:
    """`select(individuals, k)` for a `[selection]` config section."""
    method = selection.method
    if method == "tournament":
        return functools.partial(_with_rng(tools.selTournament, rng), tournsize=selection.tournament_size)
    if method == "best":
        return tools.selBest
    if method == "roulette":
        return _with_rng(tools.selRoulette, rng)
    if method == "double_tournament":
        return functools.partial(
            _with_rng(tools.selDoubleTournament, rng),
            fitness_size=selection.tournament_size,
            parsimony_size=selection.parsimony_size,
            fitness_first=selection.fitness_first,
        )
    raise ValueError(f"unknown selection method {method!r}")


def survivors(pool: Sequence[Any], size: int, elitism: int, method: str, tournament_size: int,
              rng: random.Random, valid: Callable[[Any], bool], key: Callable[[Any], float]) -> list[Any]:
    """(mu + lambda) survivors of `pool` under `selection.incorrect = "entrants"`, asking
    `valid` only where a verdict decides: the `elitism` fastest valid kernels (by `key`), then
    `size - elitism` distinct ones chosen one at a time, by `method` "best" (the fastest valid
    left) or "tournament": `tournament_size` entrants drawn with replacement as DEAP's
    selTournament draws them, the winner the fastest valid among them; a tournament of no valid
    entrant is drawn again without them. With every kernel valid this is DEAP's selBest and
    select_distinct(selTournament), draw for draw."""
    ranked = sorted(pool, key=key, reverse=True)    # stable: DEAP's selBest order
    elites = first_valid(ranked, valid, elitism)
    if method == "best":
        return first_valid(ranked, valid, size)
    rest = [ind for ind in pool if all(ind is not e for e in elites)]
    chosen: list[Any] = []
    while rest and len(chosen) < size - len(elites):
        pick = _tournament(rest, tournament_size, rng, valid, key)
        if pick is None:
            break
        chosen.append(pick)
        rest.remove(pick)
    return elites + chosen


def _tournament(entrants: list, size: int, rng: random.Random, valid: Callable[[Any], bool],
                key: Callable[[Any], float]) -> Any | None:
    """The fastest valid of `size` entrants drawn with replacement; entrants found invalid in a
    tournament without a valid one leave `entrants` (in place) before the next draw."""
    while entrants:
        with using_rng(rng):
            aspirants = [random.choice(entrants) for _ in range(size)]
        for aspirant in sorted(aspirants, key=key, reverse=True):   # max() keeps the first of equals
            if valid(aspirant):
                return aspirant
        for loser in {id(a): a for a in aspirants}.values():
            entrants.remove(loser)
    return None


class HallOfFame(tools.HallOfFame):
    """DEAP's hall of fame of kernels (alike when their ids are), where a kernel that only ties
    a member ranks after it: the first kernel to reach a speed stays ahead of later equals, as
    elitism keeps it in the population (DEAP's own insert puts the newcomer ahead)."""

    def __init__(self, maxsize: int) -> None:
        super().__init__(maxsize, similar=lambda a, b: a.id == b.id)

    def insert(self, item: Any) -> None:
        item = copy.deepcopy(item)   # as DEAP's insert: members are copies
        i = bisect.bisect_left(self.keys, item.fitness)
        self.items.insert(len(self) - i, item)
        self.keys.insert(i, item.fitness)


def update_hall_of_fame(hall_of_fame: Any, pool: Sequence[Any], valid: Callable[[Any], bool],
                        key: Callable[[Any], float]) -> None:
    """`hall_of_fame.update` with the valid kernels of `pool`, in order, asking `valid` only of
    a kernel that could enter (the hall is not full, or it beats the last member)."""
    for ind in pool:
        full = len(hall_of_fame) >= hall_of_fame.maxsize
        if full and key(ind) <= key(hall_of_fame[-1]):
            continue
        if valid(ind):
            hall_of_fame.update([ind])


def select_distinct(select: Callable[..., list], individuals: list, k: int) -> list:
    """`k` distinct individuals chosen one at a time with `select` (survivor selection)."""
    pool = list(individuals)
    chosen: list = []
    while pool and len(chosen) < k:
        pick = select(pool, 1)[0]
        chosen.append(pick)
        pool.remove(pick)
    return chosen


@dataclass
class Plans:
    """One generation's plans: the parent each was made for and the kernel ids its samples gave
    (a repaired kernel joins the plans of the kernel it fixes)."""

    parent: dict[str, str] = field(default_factory=dict)          # plan -> parent id
    samples: dict[str, list[str]] = field(default_factory=dict)   # plan -> kernel ids of its samples

    def add(self, plan: str, parent_id: str, kernel_id: str | None) -> None:
        """A sample of `plan` (`kernel_id` None: it gave no kernel)."""
        self.parent.setdefault(plan, parent_id)
        ids = self.samples.setdefault(plan, [])
        if kernel_id is not None:
            ids.append(kernel_id)

    def repaired(self, old_id: str, new_id: str) -> None:
        """The repair `new_id` of kernel `old_id` becomes a sample of the plans `old_id` is one of."""
        for ids in self.samples.values():
            if old_id in ids:
                ids.append(new_id)

    def beam(self, parents: Sequence[Any], kernels: Mapping[str, Any], size: int,
             valid: Callable[[Any], bool] = lambda ind: True,
             key: Callable[[Any], float] = lambda ind: ind.fitness.values[0]) -> list[Any]:
        """AccelOpt's next beam from the plans made for `parents` (`kernels`: the kernels that
        may stand for a sample, by id; `valid` says which are valid): each plan's fittest valid
        sample, or its parent when it has none (as does a parent that got no plan at all), then
        `beam_per_plan`. Samples are asked about fastest first (`key`), across plans, until
        `size` distinct plan bests are known: the plans still open then cannot reach the beam."""
        by_id = {p.id: p for p in parents}
        plans = [(plan, by_id[parent]) for plan, parent in self.parent.items() if parent in by_id]
        asked = sorted(((kernels[k], plan) for plan, _ in plans for k in self.samples[plan] if k in kernels),
                       key=lambda pair: key(pair[0]), reverse=True)
        best: dict[str, Any] = {}
        for kernel, plan in asked:
            if len({k.id for k in best.values()}) >= size:
                break
            if plan not in best and valid(kernel):
                best[plan] = kernel
        groups = [(parent, [best[plan]] if plan in best else []) for plan, parent in plans]
        planned = set(self.parent.values())
        groups += [(p, []) for p in parents if p.id not in planned]
        return beam_per_plan(groups, size)


def beam_per_plan(plans: Sequence[tuple[Any, Sequence[Any]]], size: int) -> list[Any]:
    """The best `size` of one candidate per (parent, valid samples) plan: its fittest sample, or
    its parent standing in when none is valid. As in AccelOpt, candidates with a sample rank by
    fitness, best first, and stand-ins after all of them in plan order (a failed plan is not
    a parent's merit); each kernel is kept once."""
    best = sorted((max(samples, key=_fitness) for _, samples in plans if samples), key=_fitness, reverse=True)
    chosen: dict[str, Any] = {}
    for kernel in best + [parent for parent, samples in plans if not samples]:
        chosen.setdefault(kernel.id, kernel)
    return list(chosen.values())[:size]


def _fitness(ind: Any) -> Any:
    return ind.fitness
