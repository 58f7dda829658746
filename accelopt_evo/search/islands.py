"""Islands (`selection.strategy = "islands"`): sub-populations of one problem that evolve apart
and exchange their best every few generations.

Each of `selection.islands` islands keeps up to `population.size` kernels and gets its share of
the generation's `population.offspring` children (`shares`: equal, the remainder going to the
islands in turn, so that the evaluations per generation are those of one population). Parents
of a child come from its island only, and its island's survivors are chosen (mu + lambda, as
for one population) among the island and the children made there. Every
`selection.migration_interval` generations (`migrate`) the `selection.migrants` fastest kernels
of each island (all valid: they survived) are copied to its neighbours, `selection.topology`
"ring" (island i sends to island i + 1) or "complete" (to every other island), where they
replace the slowest kernels that did not just arrive; a kernel already on an island is not
copied there again. The problem's population is the union of its islands, each kernel once.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from accelopt_evo.run.config import RING


def shares(total: int, islands: int, generation: int) -> list[int]:
    """Children per island in a generation: `total` split evenly, the remainder to the islands
    from `generation % islands` on (so that each gets it in turn)."""
    base, rest = divmod(total, islands)
    return [base + (1 if (i - generation) % islands < rest else 0) for i in range(islands)]


def neighbours(island: int, islands: int, topology: str) -> list[int]:
    """The islands that `island` sends its migrants to."""
    if islands < 2:
        return []
    if topology == RING:
        return [(island + 1) % islands]
    return [j for j in range(islands) if j != island]


def migrate(islands: Sequence[Sequence[Any]], migrants: int, topology: str, size: int,
            key: Callable[[Any], float]) -> tuple[list[list[Any]], int]:
    """The islands after one migration (module docstring), and how many kernels moved. The
    migrants are chosen from the islands as they were before any arrived (a synchronous
    exchange); the input is left as it was."""
    sent = [sorted(island, key=key, reverse=True)[:migrants] for island in islands]
    arrivals: list[list[Any]] = [[] for _ in islands]
    for i in range(len(islands)):
        for j in neighbours(i, len(islands), topology):
            arrivals[j].extend(sent[i])
    out, moved = [], 0
    for island, incoming in zip(islands, arrivals):
        here = {ind.id for ind in island}
        new = list({ind.id: ind for ind in incoming if ind.id not in here}.values())
        stay = sorted(island, key=key, reverse=True)[: max(0, size - len(new))]
        kept = [ind for ind in island if any(ind is s for s in stay)]    # the island's own order
        out.append(kept + new[: size])
        moved += len(new[: size])
    return out, moved


def union(islands: Sequence[Sequence[Any]]) -> list[Any]:
    """The kernels of all islands, each once, in island order."""
    return list({ind.id: ind for island in islands for ind in island}.values())
