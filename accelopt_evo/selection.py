"""Selection operators from the config, on DEAP's own implementations, and AccelOpt's beam
(`selection.survivors = "beam_per_plan"`: `Plans.beam`).

DEAP's selection functions draw from the module-level `random` generator. To keep the run's
randomness explicit (one `random.Random` owned by the engine, saved in checkpoints) every
call runs with the global generator temporarily holding the engine's state.
"""

from __future__ import annotations

import contextlib
import functools
import random
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping, Sequence

from deap import tools


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

    def beam(self, parents: Sequence[Any], valid: Mapping[str, Any], size: int) -> list[Any]:
        """AccelOpt's next beam from the plans made for `parents` (`valid`: the valid kernels by
        id): each plan's fittest valid sample, or its parent when it has none (as does a parent
        that got no plan at all), then `beam_per_plan`."""
        by_id = {p.id: p for p in parents}
        groups = [(by_id[parent], [valid[k] for k in self.samples[plan] if k in valid])
                  for plan, parent in self.parent.items() if parent in by_id]
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
