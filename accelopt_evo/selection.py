"""Selection operators from the config, on DEAP's own implementations.

DEAP's selection functions draw from the module-level `random` generator. To keep the run's
randomness explicit (one `random.Random` owned by the engine, saved in checkpoints) every
call runs with the global generator temporarily holding the engine's state.
"""

from __future__ import annotations

import contextlib
import functools
import random
from typing import Any, Callable, Iterator

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
