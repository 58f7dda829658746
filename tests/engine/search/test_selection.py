import random

import numpy as np
import pytest

from accelopt_evo.run.config import SelectionSection
from accelopt_evo.search.cascade import quickness
from accelopt_evo.search.individual import new_kernel
from accelopt_evo.search.selection import HallOfFame, select_distinct, selection_operator, survivors, using_rng
from fitness.result import OK, EvalResult


def population(n=20):
    return [new_kernel(f"X = {i}\n" + "y = 1\n" * (i % 5), f"id{i}", result=EvalResult(OK, speedup=1.0 + i / 10))
            for i in range(n)]


def mean_selected_fitness(tournament_size: int, draws: int = 4000) -> float:
    rng = random.Random(7)
    select = selection_operator(SelectionSection(method="tournament", tournament_size=tournament_size), rng)
    chosen = select(population(), draws)
    return float(np.mean([ind.fitness.values[0] for ind in chosen]))


def test_larger_tournaments_select_fitter_parents():
    means = [mean_selected_fitness(k) for k in (1, 2, 3, 5, 8)]
    assert all(a < b for a, b in zip(means, means[1:])), means


@pytest.mark.parametrize("method", ["tournament", "best", "roulette", "double_tournament"])
def test_every_method_selects_from_the_population(method):
    pop = population()
    select = selection_operator(SelectionSection(method=method), random.Random(0))
    chosen = select(pop, 5)
    assert len(chosen) == 5 and all(any(c is p for p in pop) for c in chosen)


def test_selection_uses_only_the_given_generator():
    random.seed(123)
    before = random.getstate()
    a = selection_operator(SelectionSection(), random.Random(5))(population(), 10)
    assert random.getstate() == before
    b = selection_operator(SelectionSection(), random.Random(5))(population(), 10)
    assert [x.id for x in a] == [x.id for x in b]


def test_using_rng_advances_the_private_generator():
    rng = random.Random(1)
    with using_rng(rng):
        first = random.random()
    with using_rng(rng):
        second = random.random()
    assert first != second


def test_select_distinct_never_repeats():
    pop = population(6)
    select = selection_operator(SelectionSection(tournament_size=4), random.Random(2))
    chosen = select_distinct(select, pop, 6)
    assert len({c.id for c in chosen}) == 6
    assert len(select_distinct(select, pop, 10)) == 6


def test_a_kernel_that_only_ties_ranks_after_the_first_to_reach_that_speed_as_elitism_keeps_it():
    first, tie, faster = (new_kernel(f"X = {i}\n", f"id{i}", result=EvalResult(OK, speedup=s))
                          for i, s in enumerate((1.5, 1.5, 2.0)))
    hall = HallOfFame(10)
    hall.update([first])
    hall.update([tie])
    assert [k.id for k in hall] == ["id0", "id1"]
    elite = survivors([first, tie], 1, 1, "best", 2, random.Random(0), lambda k: True, quickness)
    assert elite[0].id == hall[0].id
    hall.update([faster, first])   # a member again: no second copy
    assert [k.id for k in hall] == ["id2", "id0", "id1"]
