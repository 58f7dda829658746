"""Asynchronous evolution (`run.mode = "async"`): variation requests and evaluations overlap.

A generational run waits at every generation for its slowest LLM call and its slowest
evaluation. Here up to `run.max_in_flight` *slots* are busy at once. A slot is one variation
request: `operators.vary([request])` in a worker thread, then the evaluation of each child
(`Evaluator.submit`) and, for a failed child, its repair attempts (`variation.repair_attempts`);
the slot frees when its last child is settled, and the free slot goes to the next problem in
turn (round robin), whose parents are selected from its population as it is at that moment.
Each valid child enters its population as soon as it is evaluated, by mu + 1 replacement with
the elitism and selection of a generation (Engine._enter).

`selection.strategy` (README "Diversity"): with "islands" each island is a sub-population; the
requests of a problem go to its islands in turn (from `generation % islands` at each generation,
so that a resumed run asks the same first questions), parents are drawn from the request's
island and its children enter that island (mu + 1 among its members); every
`selection.migration_interval * population.offspring` evaluations of a problem (its evaluation
lines since generation 0, counted from the logbook on resume) its islands exchange migrants as
in a generation (islands.migrate). With "map_elites" parents are drawn from the archive's cells
and a valid child is inserted into the archive (archive.insert). With `variation.novelty` a
child too close to a kernel already evaluated goes back to its operator once (its request is
varied again, the first child of the retry with a source taking its place); a retry still too
close, or one that brings no child, is dropped, and still counts among the generation's
children (settled), so that a generation closes however many children novelty rejects.

Generations are counted, not waited for: every `population.offspring` settled children of a
problem (a child is settled when evaluated, a duplicate of a kernel in the population, of
this generation or in flight, or an operator failure, as a generation counts its offspring)
close that problem's generation: memory update (its summaries in flight like the rest), logbook
entry and report, as Engine._absorb does for a generation. When every problem has closed
generation g, the runner persists the reports and writes checkpoint g (`on_generation`). A
problem that is ahead gets no new slot meanwhile, and the children of its slots that settle are
held out of its population until then. No request is made for children beyond the last
generation's. Work in flight at a checkpoint is not in it: a resumed run asks again, and the
LLM response cache and the evaluation cache answer what was already paid for; right after a
checkpoint, free slots take requests drawn from the checkpointed state, so a run resumed from
it asks the same first questions.

Randomness: parents are selected and request kinds drawn on the calling thread only (the
engine's py_rng); every request gets its own numpy generator drawn from the engine's np_rng, so
worker threads share no generator. The order in which work finishes depends on timing, so an
async run is not reproducible from its seed; the generational mode is. Generation 0 (the
baseline and its mutants) is made as in a generational run.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import time
from collections import Counter, deque
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from accelopt_evo.run.config import ISLANDS, MAP_ELITES
from accelopt_evo.run.records import EvaluationLine
from fitness.result import NOT_JUDGED
from operators.base import Child, Context, Request

from . import cascade
from .engine import Engine, GenerationReport
from .individual import KernelRecord

POLL_S = 0.5          # how often the progress display is refreshed while nothing finishes
SHOWN_LABELS = 4      # in-flight work named in the progress display; the rest are counted

# What a settled child was (Engine._absorb's counts).
FAILED, DUPLICATE, KERNEL, DROPPED = "failed", "duplicate", "kernel", "dropped"   # DROPPED: by novelty
EVAL = "eval"


@dataclass(eq=False)
class _Slot:
    problem: str
    island: int = 0                 # islands: the island its parents come from and its children enter
    unsettled: int = -1             # children not yet settled; -1 while vary runs


@dataclass(eq=False)
class _Child:
    """One child of a request on its way into the population."""

    slot: _Slot
    outcome: str = KERNEL
    record: KernelRecord | None = None                  # the kernel as it stands (after repairs)
    parents: dict[str, KernelRecord] = field(default_factory=dict)
    lines: list[EvaluationLine] = field(default_factory=list)
    fresh: list[KernelRecord] = field(default_factory=list)   # evaluated here, not reused
    produced: dict[str, str] = field(default_factory=dict)
    repairs_left: int = 0
    repaired: bool = False
    rejected: int = 0                                   # times novelty sent it back (0-2)


@dataclass
class _Window:
    """The generation a problem is filling."""

    generation: int
    started: float = field(default_factory=time.perf_counter)
    settled: int = 0
    counts: Counter = field(default_factory=Counter)
    evaluations: list[EvaluationLine] = field(default_factory=list)
    produced: dict[str, str] = field(default_factory=dict)
    valid: list[KernelRecord] = field(default_factory=list)
    parents: dict[str, KernelRecord] = field(default_factory=dict)
    report: GenerationReport | None = None              # set when the generation is closed

    def full(self, offspring: int) -> bool:
        """All its children are in: it is being closed or closed."""
        return self.settled >= offspring


OnGeneration = Callable[[list[GenerationReport]], "str | None"]


class AsyncEvolution:
    """Drives an initialized Engine asynchronously; `run` returns the stop reason or None."""

    def __init__(self, engine: Engine, max_in_flight: int, *, bar: Any = None) -> None:
        self.engine = engine
        self.max_in_flight = max_in_flight
        self.bar = bar                                   # a tqdm bar for the in-flight display
        self._names = list(engine.problems)
        self._turn = 0
        self._slots: list[_Slot] = []
        # future -> (issue order, what runs: "eval" or the LLM work's label, what to do with its result)
        self._tasks: dict[Future, tuple[int, str, Callable[[Any], None]]] = {}
        self._order = itertools.count()
        self._ready: deque[_Child] = deque()             # settled, not yet absorbed
        self._held: dict[str, list[_Child]] = {n: [] for n in self._names}
        self._busy: dict[str, set[str]] = {n: set() for n in self._names}   # kernel ids in flight
        self._windows: dict[str, _Window] = {}
        self._pool: ThreadPoolExecutor | None = None
        self._shown = ""
        self._gens = 0
        self._offspring = engine.cfg.population.offspring
        self._issued: dict[str, int] = {n: 0 for n in self._names}   # requests of the open generation
        # islands: evaluation lines since generation 0 per problem, and migrations made so far
        self._period = engine.cfg.selection.migration_interval * self._offspring
        self._evaluations = {n: sum(e["evals"] + e["reused"] for e in engine.states[n].logbook if e["gen"] > 0)
                             for n in self._names}
        self._migrations = {n: count // self._period for n, count in self._evaluations.items()}

    # ---------------------------------------------------------------------------------
    def run(self, gens: int, on_generation: OnGeneration) -> str | None:
        """Evolve until generation `gens` is closed or `on_generation` returns a stop reason.
        Work still in flight then is abandoned (variation threads are waited for)."""
        self._gens = gens
        self._open_windows()
        stop: str | None = None
        # variation and repair of the slots, and one summary per problem
        self._pool = ThreadPoolExecutor(self.max_in_flight + len(self._names), thread_name_prefix="variation")
        try:
            while stop is None and self.engine.generation < gens:
                self._fill_slots()
                if not self._tasks:  # cannot happen: a generation open needs children or has some coming
                    raise RuntimeError("asynchronous evolution has nothing in flight and nothing to ask for")
                self._show()
                done, _ = wait(list(self._tasks), timeout=POLL_S, return_when=FIRST_COMPLETED)
                for future in sorted(done, key=lambda f: self._tasks[f][0]):
                    _order, _what, then = self._tasks.pop(future)
                    then(future.result())
                stop = self._absorb_ready(gens, on_generation)
        finally:  # evaluations still running end with the evaluator
            self._pool.shutdown(wait=True, cancel_futures=True)
            if self.bar is not None:
                self.bar.set_postfix_str("")
        return stop

    # Slots ----------------------------------------------------------------------------
    def _fill_slots(self) -> None:
        while len(self._slots) < self.max_in_flight:
            name = self._next_problem()
            if name is None:
                return
            self._issue(name)

    def _next_problem(self) -> str | None:
        """The next problem in turn whose generation is still open and that needs children
        beyond those on their way to finish the run."""
        for k in range(len(self._names)):
            name = self._names[(self._turn + k) % len(self._names)]
            if not self._windows[name].full(self._offspring) and self._wanted(name) > 0:
                self._turn = (self._turn + k + 1) % len(self._names)
                return name
        return None

    def _wanted(self, name: str) -> int:
        """Children the problem still needs up to generation `gens`, less those on their way
        (a request whose variation runs counts as one child)."""
        w = self._windows[name]
        on_the_way = (sum(max(slot.unsettled, 1) for slot in self._slots if slot.problem == name)
                      + sum(1 for item in self._ready if item.slot.problem == name) + len(self._held[name]))
        return (self._gens - w.generation + 1) * self._offspring - w.settled - on_the_way

    def _context(self, name: str) -> Context:
        """The problem's context with a generator of its own (for a worker thread)."""
        ctx = self.engine._context(self.engine.problems[name])
        seed = int(self.engine.np_rng.integers(2**63))
        return dataclasses.replace(ctx, rng=np.random.default_rng(seed))

    def _issue(self, name: str) -> None:
        engine, state, strategy = self.engine, self.engine.states[name], self.engine.cfg.selection.strategy
        members, island = state.population, 0
        if strategy == ISLANDS:     # the islands in turn
            island = (self._windows[name].generation + self._issued[name]) % len(state.islands)
            members = state.islands[island]
        self._issued[name] += 1
        parents = [ind for ind in members if ind.valid]
        select = engine._archive_parents if strategy == MAP_ELITES else None
        request = engine._pick_parents(parents, [engine._draw_kind(parents)], select)[0]
        ids = {p.id for p in request.parents}
        chosen = {ind.id: ind for ind in parents if ind.id in ids}
        slot = _Slot(name, island)
        self._slots.append(slot)
        future = self._pool.submit(engine.operators.vary, [request], self._context(name))
        self._track(future, f"{name} {request.kind}", functools.partial(self._varied, slot, chosen, request))

    def _track(self, future: Future, what: str, then: Callable[[Any], None]) -> None:
        self._tasks[future] = (next(self._order), what, then)

    # One child's way --------------------------------------------------------------------
    def _varied(self, slot: _Slot, parents: dict[str, KernelRecord], request: Request,
                groups: list[list[Child]]) -> None:
        children = groups[0] if groups else []
        slot.unsettled = max(1, len(children))
        if not children:  # nothing came back: one operator failure, so that the count moves on
            self._settle(_Child(slot, FAILED))
        for child in children:
            item = _Child(slot, parents=parents, repairs_left=self.engine.cfg.variation.repair_attempts)
            self._offer(item, child, request)

    def _offer(self, item: _Child, child: Child | None, request: Request | None) -> None:
        """A child on its way to evaluation: settled at once when it has no source, is too close
        to a kernel already evaluated for the second time (novelty) or is a duplicate. Too close
        the first time, its `request` is varied again (`request` None: this is the retry)."""
        name = item.slot.problem
        if child is None or child.source is None:   # None: the retry brought no child back
            item.outcome = DROPPED if child is None else FAILED
            self._settle(item)
            return
        if self.engine._too_close(self.engine.states[name], child):
            item.rejected += 1
            if request is None:
                item.outcome = DROPPED
                self._settle(item)
                return
            future = self._pool.submit(self.engine.operators.vary, [request], self._context(name))
            self._track(future, f"{name} {request.kind} again", functools.partial(self._again, item))
            return
        record = self._admit(name, child)
        if record is None:
            item.outcome = DUPLICATE
            self._settle(item)
            return
        self._evaluate(item, record)

    def _again(self, item: _Child, groups: list[list[Child]]) -> None:
        """The retry of a child novelty sent back: its first child with a source, else its failure."""
        group = groups[0] if groups else []
        self._offer(item, next((c for c in group if c.source is not None), group[0] if group else None), None)

    def _admit(self, name: str, child: Child) -> KernelRecord | None:
        """The child's kernel unless it is in the population, this generation or in flight."""
        state = self.engine.states[name]
        taken = {ind.id for ind in state.population} | set(self._windows[name].produced) | self._busy[name]
        record = self.engine._admit(child, self.engine.generation + 1, taken)
        if record is not None:
            self._busy[name].add(record.id)
        return record

    def _evaluate(self, item: _Child, record: KernelRecord) -> None:
        item.produced[record.id] = record.source
        state = self.engine.states[item.slot.problem]
        known = state.known.get(record.id)
        if known is not None and known.status != NOT_JUDGED:
            self.engine._give(record, known)
            item.lines.append(self.engine._line(state, record, self.engine.generation + 1, True))
            self._evaluated(item, record)
            return
        evaluator = self.engine.evaluator
        future = (evaluator.submit_latency if self.engine.latency_first else evaluator.submit)(state.spec, record.source)
        self._track(future, EVAL, functools.partial(self._judged, item, record))

    def _judged(self, item: _Child, record: KernelRecord, result: Any) -> None:
        state = self.engine.states[item.slot.problem]
        self.engine._give(record, result)
        self.engine._index_novelty(state, record)
        if cascade.undecided(record) and self._decides(state, record, item.parents, item.slot.island):
            future = self.engine.evaluator.submit(state.spec, record.source)   # its verdict now
            self._track(future, EVAL, functools.partial(self._judged, item, record))
            return
        item.lines.append(self.engine._line(state, record, self.engine.generation + 1, False))
        item.fresh.append(record)
        self._evaluated(item, record)

    def _decides(self, state: Any, record: KernelRecord, parents: dict[str, KernelRecord], island: int) -> bool:
        """Whether the verdict of a child known only by its latency decides anything, against
        the population as it stands (cascade.py, asynchronous mode): its entry (mu + 1, on its
        island, or the archive's insertion) or the hall of fame asks about it (rehearsed:
        Engine.rehearsal, the population put back), or its speedup over its best parent is
        outside the memory's band (a possible lesson)."""
        asked: list[KernelRecord] = []

        def optimistic(ind: KernelRecord) -> bool:
            if ind is record:
                asked.append(ind)
                return True
            return ind.valid

        engine = self.engine
        population, groups = state.population, list(state.islands)
        with engine.rehearsal(state) as hall_of_fame:
            try:
                engine._enter(state, record, optimistic, island, hall_of_fame)
            finally:
                state.population, state.islands = population, groups
        if asked:
            return True
        best = max((p.result.speedup for p in parents.values() if p.valid), default=None)
        if best is None:
            return False
        ratio = record.result.speedup / best
        return ratio >= engine.memory.improve_threshold or ratio <= 1.0 / engine.memory.regress_threshold

    def _evaluated(self, item: _Child, record: KernelRecord) -> None:
        if item.record is not None:      # a repair: it replaces the failed kernel
            item.repaired = record.valid
        item.record = record
        if not record.repairable or item.repairs_left <= 0:
            self._settle(item)
            return
        item.repairs_left -= 1
        broken = [(self.engine._as_child(record), record.result.error)]
        future = self._pool.submit(self.engine.operators.repair, broken, self._context(item.slot.problem))
        self._track(future, f"{item.slot.problem} repair", functools.partial(self._repaired, item))

    def _repaired(self, item: _Child, fixes: list[Child | None]) -> None:
        fix = fixes[0] if fixes else None
        record = self._admit(item.slot.problem, fix) if fix is not None else None
        if record is None:
            self._settle(item)
        else:
            self._evaluate(item, record)

    def _settle(self, item: _Child) -> None:
        slot = item.slot
        slot.unsettled -= 1
        if slot.unsettled == 0:
            self._slots.remove(slot)
        self._ready.append(item)

    # Generations ------------------------------------------------------------------------
    def _open_windows(self) -> None:
        for name in self._names:
            self._windows[name] = _Window(self.engine.generation + 1)
            self._issued[name] = 0

    def _absorb_ready(self, gens: int, on_generation: OnGeneration) -> str | None:
        """Settled children into their populations (or held while their problem's generation
        is full); a generation closed by every problem to `on_generation`."""
        while True:
            if all(w.report is not None for w in self._windows.values()):
                self.engine.generation += 1
                stop = on_generation([self._windows[n].report for n in self._names])
                if stop is not None or self.engine.generation >= gens:
                    return stop
                self._open_windows()
                # Free slots first take requests drawn from the state just checkpointed, problems
                # in turn from the first: a run resumed from that checkpoint asks the same first
                # questions (answered by the caches).
                self._turn = 0
                self._fill_slots()
                held = [c for n in self._names for c in self._held[n]]
                self._held = {n: [] for n in self._names}
                self._ready.extendleft(reversed(held))
                continue
            if not self._ready:
                return None
            item = self._ready.popleft()
            name = item.slot.problem
            if self._windows[name].full(self._offspring):
                self._held[name].append(item)
            else:
                self._absorb(name, item)

    def _absorb(self, name: str, item: _Child) -> None:
        engine, w = self.engine, self._windows[name]
        state = engine.states[name]
        w.settled += 1
        w.counts["novelty_rejected"] += item.rejected
        if item.outcome == FAILED:
            w.counts["failed_ops"] += 1
        elif item.outcome == DUPLICATE:
            w.counts["duplicates"] += 1
        elif item.outcome == KERNEL:
            w.evaluations += [dataclasses.replace(line, generation=w.generation) for line in item.lines]
            for record in item.fresh:
                state.known[record.id] = record.result
            w.produced.update(item.produced)
            self._busy[name] -= set(item.produced)
            w.counts["repaired"] += item.repaired
            if item.record.valid:
                w.valid.append(item.record)
                w.parents.update(item.parents)
                w.counts["archive_placed"] += engine._enter(state, item.record, lambda ind: ind.valid, item.slot.island)
            self._evaluations[name] += len(item.lines)
            due = self._evaluations[name] // self._period    # migrations due so far
            if engine.cfg.selection.strategy == ISLANDS and due > self._migrations[name]:
                self._migrations[name] = due
                w.counts["migrated"] += engine._migrate(state)
        if not w.full(self._offspring):
            return
        # The memory update: its summaries are in flight like the rest, so that the slots keep
        # the endpoint busy meanwhile; then the logbook entry.
        lessons = engine._lessons(engine.problems[name], w.valid, w.parents)
        if not lessons:
            self._close(name, lessons, [])
            return
        future = self._pool.submit(engine.operators.summarize, [view for _, view in lessons], self._context(name))
        self._track(future, f"{name} summary", functools.partial(self._close, name, lessons))

    def _close(self, name: str, lessons: list, rationales: list[str]) -> None:
        w = self._windows[name]
        self.engine._remember(lessons, rationales, w.generation)
        counts = {"offspring": w.settled, "valid": len(w.valid), "duplicates": w.counts["duplicates"],
                  "failed_ops": w.counts["failed_ops"], "repaired": w.counts["repaired"]}
        state = self.engine.states[name]
        extra = self.engine._strategy_entry(state, w.counts["migrated"], w.counts["archive_placed"],
                                            w.counts["novelty_rejected"])
        w.report = self.engine._record_generation(state, name, w.generation, counts, w.evaluations, w.produced,
                                                  w.started, extra)

    # Progress ---------------------------------------------------------------------------
    def _show(self) -> None:
        """Variation work in flight (LLM calls with LLM operators; by problem and kind) and
        evaluations (by worker or core), after the operator set's name: "llm 3: silu mutation,
        silu summary | eval 2: 1a2b3c4d on slot 0, ..."."""
        if self.bar is None:
            return
        varying = [what for _order, what, _then in self._tasks.values() if what != EVAL]
        evals = self.engine.evaluator.in_flight()
        text = f"{self.engine.operators.name} {len(varying)}{_names(varying)} | eval {len(evals)}{_names(evals)}"
        if text != self._shown:
            self._shown = text
            self.bar.set_postfix_str(text)


def _names(items: list[str]) -> str:
    if not items:
        return ""
    more = f", +{len(items) - SHOWN_LABELS}" if len(items) > SHOWN_LABELS else ""
    return ": " + ", ".join(items[:SHOWN_LABELS]) + more
