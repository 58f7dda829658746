"""The evolutionary loop on DEAP: one population per problem, one shared optimization memory.

A generation, per problem (DESIGN.md "Data flow of one generation"):
select parents -> vary (operators) -> dedupe -> evaluate -> repair -> memory update ->
(mu + lambda) survivors with elitism -> hall of fame, logbook. The runner checkpoints after
each generation; everything the loop needs to continue is in `Engine.state_dict()` (a
records.Checkpoint). The asynchronous mode (steady.py) uses the same steps one child at a time.

With `selection.survivors = "beam_per_plan"` (AccelOpt's beam search) the population is a beam:
every kernel of it is mutated once (generation 0: the baseline alone), and the next beam is
chosen among the children only, one per plan (selection.Plans.beam).

`selection.strategy` "islands" (islands.py) keeps sub-populations that migrate their best, and
"map_elites" (archive.py) an archive of the fastest kernel per behaviour cell; with
`variation.novelty` a child too close to a kernel already evaluated is sent back to its
operator once (novelty.py).
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import random
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Protocol, Sequence

import numpy as np
from deap import base, tools

from accelopt_evo.memory import Candidate, OptimizationMemory, kind_of
from accelopt_evo.run.config import BEAM_PER_PLAN, ENTRANTS, FULL, ISLANDS, LATENCY_FIRST, MAP_ELITES, Config
from accelopt_evo.run.records import Checkpoint, EvaluationLine, ProblemInfo
from fitness.correctness import precision
from fitness.correctness.normalize import kernel_id
from fitness.result import MODEL_ERROR, NOT_JUDGED, EvalResult
from fitness.simulator.perf.hardware import hardware
from nkibench.problem import Problem
from operators.base import CROSSOVER, MUTATION, Child, Context, Machine, Operators, Parent, Request
from operators.diff import kernel_diff

from . import archive, cascade, islands
from .cascade import Verdicts
from .descriptors import descriptors
from .individual import KernelRecord, ProblemState, kernel_from_meta, new_kernel
from .novelty import NoveltyIndex
from .selection import HallOfFame, Plans, select_distinct, selection_operator, survivors, update_hall_of_fame

HALL_OF_FAME_SIZE = 10


class Evaluator(Protocol):
    """What the engine needs of the evaluation service (fitness.service.Evaluator)."""

    def evaluate_many(self, spec: Any, sources: Sequence[str], progress: bool | str = False) -> list[EvalResult]: ...

    def baseline(self, spec: Any) -> EvalResult: ...

    def submit(self, spec: Any, source: str) -> Any: ...   # a concurrent.futures.Future of an EvalResult

    def in_flight(self) -> list[str]: ...                  # "kernel-id on worker" of running evaluations


@dataclass
class GenerationReport:
    generation: int
    problem: str
    entry: dict[str, Any]                       # the logbook entry
    evaluations: list[EvaluationLine] = field(default_factory=list)
    new_kernels: dict[str, str] = field(default_factory=dict)   # id -> source

    def summary(self, where: str) -> str:
        """One line per generation; `where` says what the figures are (records.figure_label)."""
        e = self.entry
        pct = f"{e['best_percent_of_peak']:.1f}% of peak ({where})" if e["best_percent_of_peak"] else "% of peak unknown"
        dup = f", {e['duplicates']} already known" if e.get("duplicates") else ""
        dup += f", {e['novelty_rejected']} too close to known kernels" if e.get("novelty_rejected") else ""
        bad = (f", {e['model_errors']} estimate(s) below the roofline bound (model errors, not selected)"
               if e.get("model_errors") else "")
        unjudged = f", {e['not_judged']} timed but not judged" if e.get("not_judged") else ""
        return (f"gen {self.generation:>3} {self.problem}: best speedup {e['best_speedup']:.3f}x, {pct}, "
                f"{e['valid']} new valid of {e['offspring']} offspring{dup}{unjudged}{bad}")


def parent_view(ind: KernelRecord) -> Parent:
    r = ind.result
    return Parent(ind.id, ind.source, r.speedup if r else None, r.latency_ms if r else None,
                  r.percent_of_peak if r else None, dict(r.profile) if r else {}, ind.note, tuple(ind.parent_ids))


def describe_kernel_inputs(problem: Problem, inputs: Sequence[Any]) -> str:
    """`x: float32[4096, 7168]`, one per kernel argument of the reference's `inputs` (names
    from the baseline's signature)."""
    args = problem.to_kernel_inputs(inputs)
    names = _kernel_arguments(problem.baseline_source)
    parts = []
    for i, a in enumerate(args):
        name = names[i] if i < len(names) else f"arg{i}"
        if isinstance(a, np.ndarray):
            parts.append(f"{name}: {a.dtype}[{', '.join(map(str, a.shape))}]")
        else:
            parts.append(f"{name} = {a!r}")
    return ", ".join(parts)


def _kernel_arguments(source: str) -> list[str]:
    """The argument names of a source's `kernel` function (or of the function `kernel = f` names)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    name = "kernel"
    for node in tree.body:
        if (isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["kernel"]
                and isinstance(node.value, ast.Name)):
            name = node.value.id
    function = functions.get(name)
    return [a.arg for a in function.args.args] if function is not None else []


def kernel_precision(problem: Problem, inputs: Sequence[Any]) -> str:
    """The narrowest float type a kernel of `problem` may compute in (fitness.correctness.precision.floor:
    the reference's `inputs` and the baseline's dtypes), for the prompts' rule."""
    dtypes = [x.dtype for x in inputs if isinstance(x, np.ndarray)]
    return precision.floor(dtypes, precision.source_dtypes(problem.baseline_source)).dtype or "float32"


class Engine:
    """Evolves the populations of several problems with DEAP and shared memory."""

    def __init__(self, cfg: Config, problems: Sequence[Problem], evaluator: Evaluator, operators: Operators,
                 memory: OptimizationMemory, *, log: Callable[[str], None] = print, progress: bool = True):
        self.cfg = cfg
        self.progress = progress                            # per-batch evaluation bars
        self.problems = {p.name: p for p in problems}
        self.evaluator = evaluator
        self.operators = operators
        self.memory = memory
        self.log = log
        self.py_rng = random.Random(cfg.run.seed)          # DEAP selection
        self.np_rng = np.random.default_rng(cfg.run.seed)  # variation operators
        self.generation = -1                                # last completed generation
        self.states: dict[str, ProblemState] = {}
        # problem -> (kernel arguments, precision floor, the arguments' dimensions)
        self._inputs: dict[str, tuple[str, str, frozenset[int]]] = {}
        self._machine = machine(cfg.evaluation.target)      # the target's figures for prompts
        self._novelty: dict[str, NoveltyIndex] = {}         # problem -> evaluated kernels (novelty.py)

        self.toolbox = base.Toolbox()
        self.toolbox.register("select", selection_operator(cfg.selection, self.py_rng))
        self.toolbox.register("mate", lambda a, b: Request(CROSSOVER, (parent_view(a), parent_view(b))))
        self.toolbox.register("mutate", lambda a: Request(MUTATION, (parent_view(a),)))
        self.toolbox.register("vary", self.operators.vary)
        self.toolbox.register("evaluate", self.evaluator.evaluate_many)

        self.stats = tools.Statistics(key=lambda ind: ind.fitness.values[0])
        for name, fn in (("avg", np.mean), ("std", np.std), ("min", np.min), ("max", np.max)):
            self.stats.register(name, fn)

    # ---------------------------------------------------------------------------------
    def _context(self, problem: Problem) -> Context:
        if problem.name not in self._inputs:
            drawn = problem.make_inputs(0)
            dims = frozenset(int(d) for a in problem.to_kernel_inputs(drawn) if isinstance(a, np.ndarray) for d in a.shape)
            self._inputs[problem.name] = (describe_kernel_inputs(problem, drawn), kernel_precision(problem, drawn), dims)
        inputs, floor, dims = self._inputs[problem.name]
        state = self.states.get(problem.name)
        return Context(problem=problem.name, reference_source=problem.reference_source,
                       generation=self.generation + 1, rng=self.np_rng, lessons=self.memory.lessons(),
                       baseline_source=problem.baseline_source, inputs=inputs, precision=floor,
                       tolerance=self.cfg.evaluation.rel_tol or problem.output_tolerance(),
                       machine=self._machine, dims=dims, known=frozenset(state.known) if state else frozenset(),
                       tuning=self.cfg.operators.llm_fraction < 1.0,
                       lesson_roles=self.memory.lesson_roles())

    @property
    def beam(self) -> bool:
        """Whether survivors form AccelOpt's beam (`selection.survivors = "beam_per_plan"`)."""
        return self.cfg.selection.survivors == BEAM_PER_PLAN

    def _expand(self, population: Sequence[KernelRecord]) -> list[Request]:
        """The beam's requests: one mutation of every valid kernel, in population order."""
        return [self.toolbox.mutate(ind) for ind in population if ind.valid]

    def _requests(self, members: Sequence[KernelRecord], count: int, ctx: Context,
                  select: Callable[..., list] | None = None) -> list[Request]:
        """Variation requests for `count` children of `members`, less than one request's worth
        more: each is a crossover with probability cx / (cx + mut), else a mutation, and counts
        the children the operators expect of it; all parents are drawn in one selection call (so
        that `best` expands the top kernels in turn, as a beam search does)."""
        parents = [ind for ind in members if ind.valid]
        kinds: list[str] = []
        expected = 0
        while expected < count:
            kinds.append(self._draw_kind(parents))
            expected += max(1, self.operators.children_per_request(kinds[-1], ctx))
        return self._pick_parents(parents, kinds, select)

    def _generation_requests(self, state: ProblemState, generation: int, ctx: Context) -> tuple[list[Request], list[int]]:
        """A generation's requests by `selection.strategy`, and the island each is for (0 but
        for islands): one population's, each island's share (islands.shares), or the
        archive's (parents drawn by archive.parents)."""
        sel, count = self.cfg.selection, self.cfg.population.offspring
        if self.beam:
            requests = self._expand(state.population)
            return requests, [0] * len(requests)
        if sel.strategy == ISLANDS:
            requests, tags = [], []
            for i, n in enumerate(islands.shares(count, len(state.islands), generation)):
                made = self._requests(state.islands[i], n, ctx) if n else []
                requests += made
                tags += [i] * len(made)
            return requests, tags
        select = self._archive_parents if sel.strategy == MAP_ELITES else None
        requests = self._requests(state.population, count, ctx, select)
        return requests, [0] * len(requests)

    def _archive_parents(self, parents: list[KernelRecord], k: int) -> list[KernelRecord]:
        """MAP-Elites' parent selection (archive.parents) over the archive `parents` make."""
        archive_of = archive.archive_of(parents, self.cfg.selection.dma_bins, cascade.quickness)
        return archive.parents(archive_of, k, self.py_rng)

    def _draw_kind(self, parents: Sequence[KernelRecord]) -> str:
        """CROSSOVER with probability cx / (cx + mut) when there are two parents, else MUTATION."""
        var = self.cfg.variation
        p_cx = var.crossover_prob / (var.crossover_prob + var.mutation_prob)
        return CROSSOVER if len(parents) >= 2 and self.py_rng.random() < p_cx else MUTATION

    def _pick_parents(self, parents: list[KernelRecord], kinds: list[str],
                      select: Callable[..., list] | None = None) -> list[Request]:
        """One request per kind, its parents drawn from `parents` in one selection call (`select`,
        by default the configured selection operator)."""
        slots = sum(2 if k == CROSSOVER else 1 for k in kinds)
        picks = (select or self.toolbox.select)(parents, slots)
        picks = [picks[i % len(picks)] for i in range(slots)]  # selBest returns at most len(parents)
        requests, i = [], 0
        for kind in kinds:
            if kind == MUTATION:
                requests.append(self.toolbox.mutate(picks[i]))
                i += 1
                continue
            a, b = picks[i], picks[i + 1]
            if a is b:  # a kernel crossed with itself is itself: take the fittest other parent
                b = next(p for p in tools.selBest(parents, len(parents)) if p is not a)
            requests.append(self.toolbox.mate(a, b))
            i += 2
        return requests

    @property
    def latency_first(self) -> bool:
        """Whether children are timed first and judged where it decides (cascade.py): the
        setting, on an evaluator that can time a kernel without running it."""
        return self.cfg.evaluation.cascade == LATENCY_FIRST and getattr(self.evaluator, "traces", False)

    def _evaluate(self, state: ProblemState, candidates: list[KernelRecord], label: str,
                  generation: int) -> list[EvaluationLine]:
        """Judge candidates in full, reusing known results; their log lines."""
        fresh = self._judge(state, candidates, label)
        return [self._line(state, c, generation, c.id not in fresh) for c in candidates]

    def _judge(self, state: ProblemState, candidates: Sequence[KernelRecord], label: str,
               stage: str = FULL) -> set[str]:
        """Give every candidate its result: known results are reused (a not_judged one only by
        the latency stage), the others are evaluated now, in full or (`stage` LATENCY_FIRST) up
        to their latency (Evaluator.latencies). The ids evaluated now."""
        def needed(c: KernelRecord) -> bool:
            known = state.known.get(c.id)
            return known is None or (stage == FULL and known.status == NOT_JUDGED)

        fresh = list({c.id: c for c in candidates if needed(c)}.values())
        if fresh:
            evaluate = self.evaluator.latencies if stage == LATENCY_FIRST else self.toolbox.evaluate
            for c, r in zip(fresh, evaluate(state.spec, [c.source for c in fresh], progress=self.progress and label)):
                state.known[c.id] = r
                self._index_novelty(state, c)
        for c in candidates:
            self._give(c, state.known[c.id])
        return {c.id for c in fresh}

    def _index_novelty(self, state: ProblemState, c: KernelRecord) -> None:
        """`c` was evaluated: with `variation.novelty`, into the problem's novelty index."""
        if self.cfg.variation.novelty > 0:
            self._novelty.setdefault(state.spec.name, NoveltyIndex()).add(c.id, c.source)

    def _too_close(self, state: ProblemState, child: Child) -> bool:
        """Whether novelty sends `child` back: `variation.novelty` is on and its kernel, not
        evaluated itself, is closer than the threshold to one of the problem already evaluated."""
        threshold = self.cfg.variation.novelty
        if threshold <= 0 or child.source is None:
            return False
        index = self._novelty.setdefault(state.spec.name, NoveltyIndex())
        kid = kernel_id(child.source)
        return (kid not in state.known and kid not in index.shapes
                and index.nearest(kid, child.source, threshold) is not None)

    @staticmethod
    def _give(c: KernelRecord, result: EvalResult) -> None:
        """Give `c` its result, and its fitness when valid."""
        c.result = result
        if c.valid:
            c.fitness.values = (float(result.speedup),)

    @staticmethod
    def _line(state: ProblemState, c: KernelRecord, generation: int, reused: bool) -> EvaluationLine:
        """The log line of `c`'s evaluation as it stands."""
        return EvaluationLine(generation, state.spec.name, c.id, c.operator, c.parent_ids, reused, c.result, c.note,
                              descriptors(c.result))

    def _make(self, child: Child, generation: int) -> KernelRecord:
        return new_kernel(child.source, kernel_id(child.source), parent_ids=child.parent_ids,
                          operator=child.operator, generation=generation, note=child.note)

    def _admit(self, child: Child, generation: int, taken: set[str]) -> KernelRecord | None:
        """The kernel of `child`, or None when it has no source or its id is in `taken` (which
        it joins): duplicates within a generation or of the population are not evaluated."""
        if child.source is None:
            return None
        ind = self._make(child, generation)
        if ind.id in taken:
            return None
        taken.add(ind.id)
        return ind

    # ---------------------------------------------------------------------------------
    def initialize(self) -> list[GenerationReport]:
        """Generation 0: the baseline plus mutants of it, evaluated."""
        reports = []
        for name, problem in self.problems.items():
            started = time.perf_counter()
            base_src = problem.baseline_source
            baseline = new_kernel(base_src, kernel_id(base_src), operator="baseline", generation=0)
            state = ProblemState(spec=problem.spec, hall_of_fame=HallOfFame(HALL_OF_FAME_SIZE),
                                 logbook=tools.Logbook(), baseline_id=baseline.id)
            self.states[name] = state
            evaluations = self._evaluate(state, [baseline], f"gen 0 {name} baseline", 0)
            if not baseline.valid:
                raise BaselineError(f"the baseline of '{name}' ({problem.baseline_path}) failed "
                                    f"({baseline.result.status}): "
                                    f"{baseline.result.error.splitlines()[0] if baseline.result.error else ''}")
            state.population = [baseline]
            if self.cfg.selection.strategy == ISLANDS:
                state.islands = [[baseline] for _ in range(self.cfg.selection.islands)]
            n_mutants = self.cfg.population.size - 1
            ctx = self._context(problem)
            requests = (self._expand(state.population) if self.beam
                        else [self.toolbox.mutate(baseline) for _ in range(n_mutants)])
            tags = [i % max(1, len(state.islands)) for i in range(len(requests))]   # islands in turn
            children, tags, rejected = self._offspring(state, requests, tags, ctx)
            report = self._absorb(state, problem, children, evaluations, started, generation=0, extra=[baseline],
                                  tags=tags, rejected=rejected)
            reports.append(report)
        self.generation = 0
        return reports

    def step(self) -> list[GenerationReport]:
        """One generation for every problem."""
        gen = self.generation + 1
        reports = []
        for name, problem in self.problems.items():
            started = time.perf_counter()
            state = self.states[name]
            ctx = self._context(problem)
            requests, tags = self._generation_requests(state, gen, ctx)
            children, tags, rejected = self._offspring(state, requests, tags, ctx)
            reports.append(self._absorb(state, problem, children, [], started, generation=gen, tags=tags,
                                        rejected=rejected))
        self.generation = gen
        return reports

    def _offspring(self, state: ProblemState, requests: list[Request], tags: list[int],
                   ctx: Context) -> tuple[list[Child], list[int], int]:
        """The children of `requests` (one `vary` call) and the island of each (`tags`: per
        request). With `variation.novelty`, a child too close to a kernel of the problem already
        evaluated (novelty.py) is sent back to its operator once: its request is varied again and
        the first child of the retry with a source (else its failure) takes its place, unless it
        is too close as well. Also how many children were rejected so (first tries and retries)."""
        groups = self.toolbox.vary(requests, ctx) if requests else []
        made = [(c, tag, r) for r, (group, tag) in enumerate(zip(groups, tags)) for c in group]
        if self.cfg.variation.novelty <= 0:
            return [c for c, _, _ in made], [tag for _, tag, _ in made], 0

        def near(c: Child) -> bool:
            return self._too_close(state, c)

        rejected = [i for i, (c, _, _) in enumerate(made) if near(c)]
        retries = self.toolbox.vary([requests[made[i][2]] for i in rejected], ctx) if rejected else []
        again = {i: next((c for c in group if c.source is not None), group[0] if group else None)
                 for i, group in zip(rejected, retries)}
        children, islands_of, count = [], [], len(rejected)
        for i, (c, tag, _) in enumerate(made):
            if i in again:
                c = again[i]
                if c is None or near(c):
                    count += c is not None
                    continue
            children.append(c)
            islands_of.append(tag)
        return children, islands_of, count

    def _absorb(self, state: ProblemState, problem: Problem, children: list[Child], evaluations: list[EvaluationLine],
                started: float, generation: int, extra: Sequence[KernelRecord] = (), tags: Sequence[int] = (),
                rejected: int = 0) -> GenerationReport:
        """Dedupe, evaluate, repair, update memory, select survivors, record the generation
        (`tags`: the island of each child; `rejected`: children novelty sent back)."""
        ctx = self._context(problem)
        failed_ops = sum(1 for c in children if c.source is None)
        parents = {ind.id: ind for ind in state.population}
        taken = set(parents)
        plans = plans_of(children)
        island_of: dict[str, int] = {}
        offspring = []
        for c, tag in zip(children, list(tags) + [0] * (len(children) - len(tags))):
            ind = self._admit(c, generation, taken)
            if ind is not None:
                offspring.append(ind)
                island_of[ind.id] = tag
        produced = {ind.id: ind.source for ind in [*extra, *offspring]}
        duplicates = sum(1 for c in children if c.source is not None) - len(offspring)
        label = f"gen {generation} {problem.name}"
        stage = LATENCY_FIRST if self.latency_first else FULL
        evaluated = list(offspring)                       # the kernels of this generation before repairs
        fresh = self._judge(state, offspring, label, stage)

        repairs: list[KernelRecord] = []
        for _attempt in range(self.cfg.variation.repair_attempts):
            broken = [ind for ind in offspring if ind.repairable]
            if not broken:
                break
            fixes = self.operators.repair([(self._as_child(ind), ind.result.error) for ind in broken], ctx)
            fixed = []
            for ind, fix in zip(broken, fixes):
                new = self._admit(fix, generation, taken) if fix is not None else None
                if new is not None:
                    produced[new.id] = new.source
                    fixed.append((ind, new))
            if not fixed:
                break
            fresh |= self._judge(state, [new for _, new in fixed], f"{label} repair", stage)
            repairs += [new for _, new in fixed]
            for old, new in fixed:
                offspring[offspring.index(old)] = new
                plans.repaired(old.id, new.id)
                island_of[new.id] = island_of.get(old.id, 0)

        entrants = cascade.entrants(offspring)
        verdicts = Verdicts(lambda kernels: fresh.update(self._judge(state, kernels, f"{label} judged")),
                            entrants, self.cfg.evaluation.workers)
        verdicts.foresee(lambda valid: self._rehearse(state, problem, entrants, parents, plans, valid, island_of,
                                                      generation))
        decision = self._decide(state, problem, entrants, parents, plans, verdicts.valid, state.hall_of_fame,
                                island_of, generation)
        lessons, state.population, state.islands = decision.lessons, decision.population, decision.islands
        if lessons:
            self._remember(lessons, self.operators.summarize([view for _, view in lessons], ctx), generation)
        evaluations = evaluations + [self._line(state, c, generation, c.id not in fresh) for c in evaluated + repairs]
        repaired = sum(1 for ind in repairs if ind.valid)
        counts = {"offspring": len(children), "valid": sum(1 for ind in offspring if ind.valid),
                  "duplicates": duplicates, "failed_ops": failed_ops, "repaired": repaired}
        return self._record_generation(state, problem.name, generation, counts, evaluations, produced, started,
                                       self._strategy_entry(state, decision.moved, decision.placed, rejected))

    def _strategy_entry(self, state: ProblemState, moved: int, placed: int, rejected: int) -> dict[str, Any]:
        """The logbook fields of the strategy and of novelty (none for one population without it,
        so that such logbooks read as earlier releases wrote them): `moved` kernels migrated,
        `placed` children took an archive cell, `rejected` children novelty sent back."""
        entry: dict[str, Any] = {}
        if rejected:
            entry["novelty_rejected"] = rejected
        strategy = self.cfg.selection.strategy
        if strategy == ISLANDS:
            entry["islands_best"] = [max((float(ind.result.speedup) for ind in island if ind.valid), default=0.0)
                                     for island in state.islands]
            entry["migrated"] = moved
        elif strategy == MAP_ELITES:
            entry["archive_cells"] = len(state.population)
            entry["archive_placed"] = placed
        return entry

    def _decide(self, state: ProblemState, problem: Problem, entrants: list[KernelRecord],
                parents: dict[str, KernelRecord], plans: Plans, valid: Callable[[KernelRecord], bool],
                hall_of_fame: Any, island_of: dict[str, int] | None = None, generation: int = 0) -> "Decision":
        """A generation's decisions over its traced children, `valid` asked only where it
        decides (cascade.py): the memory's lessons, the next population (survivors, AccelOpt's
        beam, the islands' survivors after migration, or the MAP-Elites archive) and the hall of
        fame (updated in place). Draws from the engine's py_rng."""
        lessons = self._lessons(problem, entrants, parents, valid)
        sel, key = self.cfg.selection, cascade.quickness
        groups: list[list[KernelRecord]] = []
        moved = placed = 0
        if self.beam:
            kernels = {ind.id: ind for ind in state.population + entrants}   # a sample equal to its parent counts as it
            population = plans.beam(state.population, kernels, self.cfg.population.size, valid, key)
        elif sel.strategy == MAP_ELITES:
            grid, placed = archive.insert(archive.archive_of(state.population, sel.dma_bins, key), entrants,
                                          sel.dma_bins, valid, key)
            population = archive.elites(grid)
        elif sel.strategy == ISLANDS:
            where = island_of or {}
            groups = [self._survivors(state, [e for e in entrants if where.get(e.id, 0) == i], valid, members)
                      for i, members in enumerate(state.islands)]
            if generation > 0 and generation % sel.migration_interval == 0 and sel.migrants:
                groups, moved = islands.migrate(groups, sel.migrants, sel.topology, self.cfg.population.size, key)
            population = islands.union(groups)
        else:
            population = self._survivors(state, entrants, valid)
        update_hall_of_fame(hall_of_fame, state.population + entrants, valid, key)
        return Decision(lessons, population, groups, moved, placed)

    def _rehearse(self, state: ProblemState, problem: Problem, entrants: list[KernelRecord],
                  parents: dict[str, KernelRecord], plans: Plans, valid: Callable[[KernelRecord], bool],
                  island_of: dict[str, int] | None = None, generation: int = 0) -> None:
        """`_decide` without its effects (`rehearsal`)."""
        with self.rehearsal(state) as hall_of_fame:
            self._decide(state, problem, entrants, parents, plans, valid, hall_of_fame, island_of, generation)

    @contextlib.contextmanager
    def rehearsal(self, state: ProblemState) -> Iterator[Any]:
        """Decisions tried without effects: the engine's random state is restored afterwards,
        and a copy of the hall of fame is given to update."""
        saved = self.py_rng.getstate()
        hof = HallOfFame(HALL_OF_FAME_SIZE)
        hof.items, hof.keys = list(state.hall_of_fame.items), list(state.hall_of_fame.keys)
        try:
            yield hof
        finally:
            self.py_rng.setstate(saved)

    def _survivors(self, state: ProblemState, newcomers: Sequence[KernelRecord],
                   valid: Callable[[KernelRecord], bool],
                   members: Sequence[KernelRecord] | None = None) -> list[KernelRecord]:
        """Survivor selection over the population (or an island's `members`) and `newcomers`
        (`valid` says which are valid): the best `population.elitism` stay, the rest of
        `population.size` is selected."""
        size, sel = self.cfg.population.size, self.cfg.selection
        current = list(state.population if members is None else members)
        if sel.incorrect == ENTRANTS and sel.method in ("best", "tournament"):
            return survivors(current + list(newcomers), size, self.cfg.population.elitism, sel.method,
                             sel.tournament_size, self.py_rng, valid, cascade.quickness)
        pool = current + [ind for ind in newcomers if valid(ind)]   # every verdict decides
        elites = tools.selBest(pool, min(self.cfg.population.elitism, len(pool)))
        rest = [ind for ind in pool if all(ind is not e for e in elites)]
        return elites + select_distinct(self.toolbox.select, rest, size - len(elites))

    def _enter(self, state: ProblemState, newcomer: KernelRecord, valid: Callable[[KernelRecord], bool],
               island: int = 0, hall_of_fame: Any = None) -> int:
        """One child into the population, for the asynchronous loop (`valid` says which kernels
        are valid), by `selection.strategy`: mu + 1 among the population (islands: among the
        child's island, whose union is the population) or the MAP-Elites archive's insertion;
        then the hall of fame (the problem's, or `hall_of_fame`). How many took an archive cell
        (0 or 1; 0 but for map_elites)."""
        sel, key = self.cfg.selection, cascade.quickness
        pool, placed = state.population + [newcomer], 0
        if sel.strategy == MAP_ELITES:
            grid, placed = archive.insert(archive.archive_of(state.population, sel.dma_bins, key), [newcomer],
                                          sel.dma_bins, valid, key)
            state.population = archive.elites(grid)
        elif sel.strategy == ISLANDS:
            state.islands[island] = self._survivors(state, [newcomer], valid, state.islands[island])
            state.population = islands.union(state.islands)
        else:
            state.population = self._survivors(state, [newcomer], valid)
        update_hall_of_fame(state.hall_of_fame if hall_of_fame is None else hall_of_fame, pool, valid, key)
        return placed

    def _migrate(self, state: ProblemState) -> int:
        """One migration among the problem's islands (islands.migrate); how many kernels moved."""
        sel = self.cfg.selection
        if not sel.migrants:
            return 0
        state.islands, moved = islands.migrate(state.islands, sel.migrants, sel.topology, self.cfg.population.size,
                                               cascade.quickness)
        state.population = islands.union(state.islands)
        return moved

    def _record_generation(self, state: ProblemState, problem: str, generation: int, counts: dict[str, int],
                           evaluations: list[EvaluationLine], produced: dict[str, str],
                           started: float, extra: dict[str, Any] | None = None) -> GenerationReport:
        """The logbook entry of a finished generation (`counts`: offspring, valid, duplicates,
        failed_ops, repaired; `extra`: the strategy's fields, `_strategy_entry`) and its report."""
        best = state.hall_of_fame[0]
        entry = {
            "gen": generation,
            "problem": problem,
            "offspring": counts["offspring"],
            "evals": sum(1 for e in evaluations if not e.reused),
            "reused": sum(1 for e in evaluations if e.reused),
            "valid": counts["valid"],
            "duplicates": counts["duplicates"],
            "failed_ops": counts["failed_ops"],
            "repaired": counts["repaired"],
            "best_id": best.id,
            "best_speedup": float(best.result.speedup),
            "best_latency_ms": best.result.latency_ms,
            "best_percent_of_peak": best.result.percent_of_peak,
            **{k: float(v) for k, v in self.stats.compile(state.population).items()},
            "seconds": round(time.perf_counter() - started, 3),
        }
        model_errors = sum(1 for e in evaluations if not e.reused and e.result.status == MODEL_ERROR)
        if model_errors:   # only then, so that the logbooks of earlier runs read as they were written
            entry["model_errors"] = model_errors
        not_judged = sum(1 for e in evaluations if e.result.status == NOT_JUDGED)
        if not_judged:     # children timed whose correctness decided nothing (cascade.py)
            entry["not_judged"] = not_judged
        entry.update(extra or {})
        state.logbook.record(**entry)
        return GenerationReport(generation, problem, entry, evaluations, produced)

    @staticmethod
    def _as_child(ind: KernelRecord) -> Child:
        return Child(ind.source, ind.operator, ind.parent_ids, note=ind.note)

    def _lessons(self, problem: Problem, children: list[KernelRecord], by_id: dict[str, KernelRecord],
                 valid: Callable[[KernelRecord], bool] = lambda ind: ind.valid,
                 ) -> list[tuple[Candidate, tuple[Parent, Parent, float]]]:
        """The pairs the memory admits, each with what the summarizer is shown of it."""
        candidates, pairs = [], {}
        for child in children:
            parents = [by_id[p] for p in child.parent_ids if p in by_id and by_id[p].valid]
            if not parents or child.result.speedup is None:   # no speedup: never valid
                continue
            parent = max(parents, key=lambda p: p.result.speedup)
            ratio = child.result.speedup / parent.result.speedup
            cand = Candidate(problem.name, parent.id, child.id, ratio, child.operator)
            candidates.append(cand)
            pairs[(parent.id, child.id)] = (parent, child)
        chosen = self.memory.select(candidates, lambda c: valid(pairs[(c.parent_id, c.child_id)][1]))
        return [(c, self._summarized(c, *pairs[(c.parent_id, c.child_id)])) for c in chosen]

    def _summarized(self, cand: Candidate, parent: KernelRecord, child: KernelRecord) -> tuple[Parent, Parent, float]:
        """The (before, after, speedup) the summarizer is asked about: parent -> child, or child ->
        parent, slow -> fast, for a regression the memory presents reversed (policy accelopt)."""
        if self.memory.reverses(cand):
            return parent_view(child), parent_view(parent), 1.0 / cand.speedup
        return parent_view(parent), parent_view(child), cand.speedup

    def _remember(self, lessons: list[tuple[Candidate, tuple[Parent, Parent, float]]], rationales: list[str],
                  generation: int) -> None:
        """The lessons with a rationale into the memory, each with its parent -> child diff
        (whichever way the summarizer saw the pair)."""
        for (cand, (before, after, _)), text in zip(lessons, rationales):
            if text:
                source = {before.id: before.source, after.id: after.source}
                diff = kernel_diff(source[cand.parent_id], source[cand.child_id])
                self.memory.add(cand, text, diff, generation)

    # ---------------------------------------------------------------------------------
    def best(self, problem: str) -> KernelRecord:
        return self.states[problem].hall_of_fame[0]

    def state_dict(self) -> Checkpoint:
        """Everything needed to continue the run (sources live in kernels/<id>.py)."""
        version, internal, gauss = self.py_rng.getstate()
        return Checkpoint(
            generation=self.generation,
            population={n: [ind.meta() for ind in st.population] for n, st in self.states.items()},
            hall_of_fame={n: [ind.meta() for ind in st.hall_of_fame] for n, st in self.states.items()},
            logbook={n: [dict(e) for e in st.logbook] for n, st in self.states.items()},
            memory=list(self.memory.entries),
            random_state=[version, list(internal), gauss],
            numpy_state=self.np_rng.bit_generator.state,
            problems={n: ProblemInfo(_spec_record(st.spec), st.baseline_id, dict(st.known))
                      for n, st in self.states.items()},
            islands={n: [[ind.id for ind in island] for island in st.islands]
                     for n, st in self.states.items() if st.islands},
        )

    def load_state_dict(self, checkpoint: Checkpoint, read_kernel: Callable[[str], str],
                        rejudge: bool = False) -> list[str]:
        """Continue from `checkpoint` (`read_kernel`: a kernel's source by id, checked against
        the id). With `rejudge` nothing it says about a kernel is believed: the baseline, the
        population, the hall of fame and the kernels of the memory's lessons are judged again
        (their recorded results are dropped, as is every other known result), kernels no
        longer valid leave the population and the hall of fame, and each lesson's speedup is
        its kernels' again (a lesson whose kernels are not both valid, or whose direction
        changed, is dropped). What changed, one line each."""
        version, internal, gauss = checkpoint.random_state
        self.py_rng.setstate((version, tuple(internal), gauss))
        self.np_rng.bit_generator.state = checkpoint.numpy_state
        self.memory.load_entries(checkpoint.memory)
        self.generation = checkpoint.generation
        changed: list[str] = []
        for name, problem in self.problems.items():
            info = checkpoint.problems[name]
            known = dict(info.known)
            if rejudge:
                known = self._rejudged(name, problem, checkpoint, info, read_kernel, changed)

            def restore(meta: Any) -> KernelRecord:
                ind = kernel_from_meta(meta, read_kernel(meta.id))
                if rejudge:
                    self._give(ind, known[meta.id])
                return ind

            state = ProblemState(spec=problem.spec, baseline_id=info.baseline_id, known=known)
            population = [restore(m) for m in checkpoint.population[name]]
            hall = [restore(m) for m in checkpoint.hall_of_fame[name]]
            hof = HallOfFame(HALL_OF_FAME_SIZE)
            if rejudge:
                population = [ind for ind in population if ind.valid] or [self._baseline_kernel(problem, known)]
                update_hall_of_fame(hof, hall + population, lambda ind: ind.valid, cascade.quickness)
            else:
                # Restore DEAP's internal order exactly (items best first, keys ascending).
                hof.items = hall
                hof.keys = [ind.fitness for ind in reversed(hof.items)]
            state.population, state.hall_of_fame = population, hof
            state.logbook = tools.Logbook()
            for entry in checkpoint.logbook[name]:
                state.logbook.record(**entry)
            by_id = {ind.id: ind for ind in state.population}
            state.islands = [[by_id[i] for i in island if i in by_id] or [state.population[0]]
                             for island in checkpoint.islands.get(name, [])]
            if self.cfg.variation.novelty > 0:    # the index is a function of the kernels evaluated
                index = self._novelty[state.spec.name] = NoveltyIndex()
                for kid in state.known:
                    index.add(kid, read_kernel(kid))
            self.states[name] = state
        if rejudge:
            self.memory.load_entries(self._relearned(self.memory.entries, changed))
        return changed

    def _rejudged(self, name: str, problem: Problem, checkpoint: Checkpoint, info: ProblemInfo,
                  read_kernel: Callable[[str], str], changed: list[str]) -> dict[str, EvalResult]:
        """The results of the problem's kernels a checkpoint names, judged again (see
        `load_state_dict`); a line in `changed` for each that differs from its record."""
        if info.baseline_id != kernel_id(problem.baseline_source):
            raise ValueError(f"problems.{name}.baseline_id is {info.baseline_id}, not the id of the problem's baseline "
                             f"({kernel_id(problem.baseline_source)})")
        recorded = {m.id: m.result for m in checkpoint.population[name] + checkpoint.hall_of_fame[name]}
        recorded.update(info.known)
        lessons = [kid for e in checkpoint.memory if e.problem == name for kid in (e.parent_id, e.child_id)]
        ids = list(dict.fromkeys([info.baseline_id, *(m.id for m in checkpoint.population[name]),
                                  *(m.id for m in checkpoint.hall_of_fame[name]), *lessons]))
        sources = [read_kernel(kid) for kid in ids]
        label = self.progress and f"{name}: re-judging {len(ids)} kernel(s)"
        results = dict(zip(ids, self.evaluator.evaluate_many(problem.spec, sources, progress=label)))
        for kid in ids:
            before, after = recorded.get(kid), results[kid]
            if before is None or before.status != after.status or not _same_figure(before.speedup, after.speedup):
                changed.append(f"{name} kernel {kid}: recorded {_verdict(before)}, judged {_verdict(after)}")
        baseline = results[info.baseline_id]
        if not (baseline.ok and baseline.speedup is not None):
            raise BaselineError(f"the baseline of '{name}' ({problem.baseline_path}) failed when re-judged "
                                f"({baseline.status}): {baseline.error.splitlines()[0] if baseline.error else ''}")
        return results

    @staticmethod
    def _baseline_kernel(problem: Problem, known: dict[str, EvalResult]) -> KernelRecord:
        """The baseline as a kernel of the population (a re-judged population left empty)."""
        source = problem.baseline_source
        return new_kernel(source, kernel_id(source), operator="baseline", generation=0, result=known[kernel_id(source)])

    def _relearned(self, entries: Sequence[Any], changed: list[str]) -> list[Any]:
        """The memory's entries with the speedups of their re-judged kernels: an entry of a
        problem of this run whose kernels are not both valid now, or whose direction changed,
        is dropped (entries of other problems, seeded from `memory.path`, stay as they are)."""
        kept = []
        for e in entries:
            state = self.states.get(e.problem)
            if state is None:
                kept.append(e)
                continue
            parent, child = state.known.get(e.parent_id), state.known.get(e.child_id)
            if not (parent and child and parent.ok and child.ok and parent.speedup and child.speedup):
                changed.append(f"lesson {e.parent_id} -> {e.child_id} dropped: its kernels are not both valid")
                continue
            ratio = child.speedup / parent.speedup
            if kind_of(ratio) != e.kind:
                changed.append(f"lesson {e.parent_id} -> {e.child_id} dropped: it measures {ratio:.3f}x, not a "
                               f"{e.kind}")
                continue
            if not _same_figure(ratio, e.speedup):
                changed.append(f"lesson {e.parent_id} -> {e.child_id}: {e.speedup:.3f}x recorded, {ratio:.3f}x judged")
            kept.append(dataclasses.replace(e, speedup=ratio))
        return kept


def _same_figure(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is b
    return abs(a - b) <= 1e-9 * max(abs(a), abs(b))


def _verdict(result: EvalResult | None) -> str:
    if result is None:
        return "nothing"
    return f"{result.status} {result.speedup:.3f}x" if result.speedup is not None else result.status


@dataclass
class Decision:
    """What `_decide` chose for the next generation."""

    lessons: list[tuple[Candidate, tuple[Parent, Parent, float]]]
    population: list[KernelRecord]
    islands: list[list[KernelRecord]]      # islands only: the islands, after migration
    moved: int = 0                         # islands only: kernels that migrated
    placed: int = 0                        # MAP-Elites only: children that took a cell


class BaselineError(RuntimeError):
    """A problem's baseline kernel does not pass its own evaluation."""


def plans_of(children: Sequence[Child]) -> Plans:
    """The plans of a generation's children; a child without a plan (knob tuning, crossover) is
    a plan of its own."""
    plans = Plans()
    for i, child in enumerate(children):
        kid = kernel_id(child.source) if child.source is not None else None
        plans.add(child.plan or f"child {i}", child.parent_ids[0] if child.parent_ids else "", kid)
    return plans


def _spec_record(spec: Any) -> dict[str, Any]:
    """A checkpoint's record of a problem spec; `dialect` only when not the problem's own."""
    record: dict[str, Any] = {"name": spec.name, "params": spec.param_dict, "suite_dir": spec.suite_dir}
    if spec.dialect:
        record["dialect"] = spec.dialect
    return record


def machine(target: str) -> Machine:
    """The figures prompts show of `target`, from the performance model's hardware table."""
    hw = hardware(target)
    return Machine(hw.name, hw.core, hw.partitions, hw.sbuf_bytes_per_partition, hw.sbuf_usable_bytes_per_partition,
                   hw.psum_bytes_per_partition, hw.psum_banks, hw.dma_engines, hw.hbm_bytes_per_s,
                   (("T", hw.tensor_hz), ("V", hw.vector_hz), ("S", hw.scalar_hz), ("G", hw.gpsimd_hz)))
