"""Composition root of a run: builds the parts from the config, drives the engine, persists
every generation and checkpoint, and resumes from the newest checkpoint."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

import numpy as np
from tqdm import tqdm

from accelopt_evo.run import config as config_mod, user_problems
from accelopt_evo.run.compat import serialize_ast_parse
from accelopt_evo.run.config import Config
from accelopt_evo.run.files import write_text_atomic
from accelopt_evo.run.folder import RunFolder
from accelopt_evo.run.records import (
    LEGACY_SCHEMA,
    SETTINGS_SINCE_SCHEMA_2,
    Checkpoint,
    HeldoutSeeds,
    MemoryFile,
    RecordError,
    append_evaluation,
    figure_label,
    read_checkpoint,
    read_evaluations,
    read_heldout,
    rewrite_evaluations,
    write_checkpoint,
    write_heldout,
    write_memory_file,
)
from accelopt_evo.search.engine import BaselineError, Engine, GenerationReport
from accelopt_evo.search.steady import AsyncEvolution
from fitness.references import ReferenceError as ReferenceFailure
from fitness.seal import SealError, user_seal
from fitness.simulator.dialect import IMPORTS as DIALECT_IMPORTS
from fitness.simulator.perf.hardware import hardware
from nkibench import registry, user
from nkibench.problem import DIALECT_NAMES, DIALECT_OF_NAME, Problem
from operators.base import Operators
from operators.tuning import TuningOperators

from .errors import UserError
from .memory import OptimizationMemory

if TYPE_CHECKING:
    from operators.llm.ledger import CallRecord, Ledger
    from operators.llm.settings import LLMSettings


# --------------------------------------------------------------------------------------------
# Building the parts.


def problem_specs(cfg: Config, base: Path | None = None) -> list[Any]:
    """The ProblemSpecs a config asks for (names, suite, shapes, the user's staged problems
    with paths relative to `base`), validated."""
    run = cfg.run
    names = list(run.problems)
    if run.suite == "nkibench":
        names = registry.builtin_names() if not run.suite_dir else _official_names(run.suite_dir)
    names = list(dict.fromkeys(names))   # keep order, drop repeats
    suite_dirs = {name: run.suite_dir for name in names}
    for folder in user_problems.folders(cfg, base):
        name = _user_name(folder)
        if name in suite_dirs:
            raise UserError(f"two problems are named '{name}' (reference module {folder / 'reference.py'}); "
                            f"rename one reference file")
        suite_dirs[name] = str(folder)
    unknown_shapes = [n for n in cfg.shapes if n not in suite_dirs]
    if unknown_shapes:
        raise UserError(f"config table 'shapes.{unknown_shapes[0]}' names a problem this run does not include")
    specs = []
    for name, suite_dir in suite_dirs.items():
        try:
            dialect = baseline_dialect(name, run.dialect, cfg.evaluation.target, suite_dir)
            params = {**cfg.problem, **cfg.shapes.get(name, {})} or None
            specs.append(registry.make_spec(name, run.shape, params, suite_dir=suite_dir, dialect=dialect))
        except registry.ProblemError as exc:
            raise UserError(str(exc)) from None
    return specs


def _user_name(folder: Path) -> str:
    try:
        return user.read_meta(folder)["name"]
    except user.UserProblemError as exc:
        raise UserError(str(exc)) from None


def _dialect_of(problem: Problem) -> str:
    return problem.spec.dialect or registry.own_dialect(problem.name, problem.spec.suite_dir)


def baseline_dialect(name: str, requested: str, target: str, suite_dir: str = "") -> str:
    """The dialect of problem `name`'s baseline for a run on `target`: `requested` ("legacy"
    or "nki"), or with "auto" the target's default dialect when the problem has a baseline
    in it, else another one the target takes. One clear line when there is none."""
    takes = hardware(target).dialects
    if requested != "auto":
        dialect = DIALECT_OF_NAME[requested]
        if dialect not in takes:
            raise UserError(f"the {requested} NKI dialect ({DIALECT_IMPORTS[dialect]}) never ran on {target}; "
                            f"use --dialect {' or '.join(DIALECT_NAMES[d] for d in takes)}")
        return dialect
    has = registry.baseline_dialects(name, suite_dir)
    for dialect in takes:
        if dialect in has:
            return dialect
    raise UserError(f"problem '{name}' has no baseline in a dialect {target} runs "
                    f"(it has: {', '.join(DIALECT_NAMES[d] for d in has)}; {target} takes "
                    f"{', '.join(DIALECT_NAMES[d] for d in takes)})")


def _official_names(suite_dir: str) -> list[str]:
    from nkibench.official import official_names

    try:
        return official_names(suite_dir)
    except registry.ProblemError as exc:
        raise UserError(str(exc)) from None


def load_problems(specs: list[Any]) -> list[Problem]:
    problems = []
    for spec in specs:
        try:
            problems.append(registry.load(spec))
        except registry.ProblemError as exc:
            raise UserError(str(exc)) from None
    return problems


def check_problems(cfg: Config, base: Path | None = None) -> list[Problem]:
    """The config's problems, loaded and their work counted: a reference module that does not
    import, lacks get_inputs or forward, or raises stops here in one line."""
    problems = load_problems(problem_specs(cfg, base))
    for problem in problems:
        try:
            problem.counts   # noqa: B018 -- a user's reference runs forward() once to count its work
        except registry.ProblemError as exc:
            raise UserError(str(exc)) from None
    return problems


def heldout_seeds(run_seed: int, count: int, visible: list[int]) -> tuple[int, ...]:
    """Held-out correctness seeds derived from the run seed (`evaluation.heldout = "derived"`:
    exact reruns and tests; anyone who knows the run seed knows them)."""
    return _draw_seeds(np.random.default_rng([run_seed, 0x5EED]), count, visible)


def secret_heldout_seeds(count: int, visible: list[int]) -> tuple[int, ...]:
    """Held-out correctness seeds from the operating system's randomness (the default)."""
    return _draw_seeds(np.random.default_rng(secrets.randbits(128)), count, visible)


def _draw_seeds(rng: np.random.Generator, count: int, visible: list[int]) -> tuple[int, ...]:
    seeds: list[int] = []
    while len(seeds) < count:
        s = int(rng.integers(1_000, 2**31 - 1))
        if s not in visible and s not in seeds:
            seeds.append(s)
    return tuple(seeds)


def new_heldout(cfg: Config) -> HeldoutSeeds:
    """Held-out seeds for a new run or a one-off evaluation, as `evaluation.heldout` says."""
    e = cfg.evaluation
    if e.heldout == "derived":
        return HeldoutSeeds("derived", heldout_seeds(cfg.run.seed, e.heldout_seeds, e.seeds))
    return HeldoutSeeds("secret", secret_heldout_seeds(e.heldout_seeds, e.seeds))


def choose_operators(cfg: Config, run_dir: Path | None, check: bool = True,
                     preflight: Sequence[CallRecord] = ()) -> tuple[Operators | None, str]:
    """The operator set for `operators.kind`, and a sentence saying why. With LLM operators and
    `check`, the endpoint and the request parameters are checked first (`check_operators`), so
    that an unreachable endpoint or a refused parameter stops the run in one line before anything
    else is spent; `preflight`: the records of a check made before `run_dir` existed, for its
    ledger."""
    from operators.llm.mixing import resolve_kind

    kind, why = resolve_kind(cfg.operators.kind, cfg.llm.base_url)
    if kind == "tuning":
        return TuningOperators(cfg.operators.mutation()), why
    from operators import llm  # imported only when LLM operators are wanted

    settings = llm.Settings.from_config(cfg)
    if check:
        preflight = _check_llm(cfg, settings.llm, run_dir)
    if run_dir is None:
        return None, why
    _ledger_preflights(settings.llm, run_dir, preflight)
    ops = llm.LLMOperators(settings.llm, settings.budget, run_dir)
    if cfg.operators.llm_fraction < 1.0:
        share = f"{cfg.operators.llm_fraction:.0%} of requests to the LLM, the rest to the offline operators"
        tuning = TuningOperators(cfg.operators.mutation())
        return llm.MixedOperators(ops, tuning, cfg.operators.llm_fraction), f"{why}; {share}"
    return ops, why


def check_operators(cfg: Config) -> list[CallRecord]:
    """The check `choose_operators` makes, before a run folder exists: the records of the
    preflight calls it sent, for that folder's ledger ([] with offline operators)."""
    from operators.llm.mixing import resolve_kind

    if resolve_kind(cfg.operators.kind, cfg.llm.base_url)[0] == "tuning":
        return []
    from operators import llm

    return _check_llm(cfg, llm.Settings.from_config(cfg).llm, None)


def llm_roles_in_use(cfg: Config) -> tuple[str, ...]:
    """The LLM roles a run of `cfg` calls (a role whose operator is switched off is not)."""
    v, m = cfg.variation, cfg.memory
    used = {"planner": v.mutation_prob > 0, "implementer": v.mutation_prob > 0, "crossover": v.crossover_prob > 0,
            "repair": v.repair_attempts > 0, "summarizer": m.capacity > 0 and m.per_generation > 0}
    return tuple(role for role in config_mod.LLM_ROLES if used[role])


def _check_llm(cfg: Config, settings: LLMSettings, run_dir: Path | None) -> list[CallRecord]:
    """The endpoint answers, then one minimal real completion per distinct (endpoint, model,
    parameters) of the roles in use (those the ledger of `run_dir` shows answered are not sent
    again); a refused parameter is a UserError naming it and the config key that set it. The
    records of the calls sent, billed like any call (a refusal's go to the ledger at once)."""
    from operators import llm

    try:
        llm.check_endpoint(settings)
    except llm.EndpointError as exc:
        raise UserError(str(exc)) from None
    done = _ledger(settings, run_dir).records() if run_dir is not None else []
    try:
        return llm.preflight(settings, llm_roles_in_use(cfg), done=done)
    except llm.PreflightError as exc:
        _ledger_preflights(settings, run_dir, exc.records)
        raise UserError(str(exc)) from None


def _ledger(settings: LLMSettings, run_dir: Path) -> Ledger:
    from operators.llm.ledger import LEDGER_FILE, Ledger

    return Ledger(run_dir / LEDGER_FILE, secrets=[settings.api_key()])


def _ledger_preflights(settings: LLMSettings, run_dir: Path | None, records: list[CallRecord]) -> None:
    """Append preflight `records` to the ledger of `run_dir` (none yet: nothing)."""
    if run_dir is not None:
        ledger = _ledger(settings, run_dir)
        for record in records:
            ledger.append(record)


def new_memory(cfg: Config, seed: bool = True) -> OptimizationMemory:
    """An empty memory under the configured policy, seeded from `memory.path` when `seed` and
    a path is set (a resume restores its checkpoint's entries instead)."""
    m = cfg.memory
    memory = OptimizationMemory(m.capacity, m.per_generation, m.improve_threshold, m.regress_threshold,
                                policy=m.policy, seed=cfg.run.seed)
    if seed and m.path:
        try:
            memory.start_from(OptimizationMemory.read_file(m.path))
        except (ValueError, TypeError) as exc:
            raise UserError(f"memory.path: {exc}") from None
    return memory


# --------------------------------------------------------------------------------------------
# Running.


@dataclass
class Outcome:
    folder: RunFolder
    best: dict[str, dict[str, Any]]      # problem -> {path, speedup, percent_of_peak, latency_ms}
    stop_reason: str | None
    target: str
    report_path: Path | None = None
    rejected: int = 0                    # stored results not believed, computed again


class Run:
    """A run in its folder: persists each generation and checkpoints atomically."""

    def __init__(self, cfg: Config, folder: RunFolder, engine: Engine, operators: Operators, *,
                 progress: bool = True, log: Callable[[str], None] = tqdm.write):
        self.cfg = cfg
        self.folder = folder
        self.engine = engine
        self.operators = operators
        self.progress = progress
        self.log = log

    def persist(self, reports: list[GenerationReport]) -> None:
        for rep in reports:
            for kid, src in rep.new_kernels.items():
                self.folder.write_kernel(kid, src)
            for ev in rep.evaluations:
                append_evaluation(self.folder.evaluations, ev)
            best = self.engine.best(rep.problem)
            write_text_atomic(self.folder.best / f"{rep.problem}.py", best.source)
            self.log(rep.summary(figure_label(best.result.backend, best.result.target or self.cfg.evaluation.target,
                                              best.result.calibration, best.result.instance_type)))
        self._checkpoint()

    def persist_restored(self) -> None:
        """After a re-judged restore: the best kernels as it has them, and its state, sealed."""
        for name in self.engine.states:
            write_text_atomic(self.folder.best / f"{name}.py", self.engine.best(name).source)
        self._checkpoint()

    def _checkpoint(self) -> None:
        write_memory_file(self.folder.memory, MemoryFile(tuple(self.engine.memory.entries)))
        state = dataclasses.replace(self.engine.state_dict(), config_hash=self.cfg.hash(), written=time.time(),
                                    llm_spent=self.operators.spent())
        write_checkpoint(self.folder.checkpoint_path(self.engine.generation), state, user_seal())

    def until(self, gens: int) -> Outcome:
        if self.engine.generation < 0:
            self.persist(self.engine.initialize())
        stop = self.operators.stop_reason()
        with tqdm(total=gens, initial=min(self.engine.generation, gens), desc="generations", unit="gen",
                  disable=not self.progress, dynamic_ncols=True) as bar:

            def generation_done(reports: list[GenerationReport]) -> str | None:
                self.persist(reports)
                bar.update(1)
                return self.operators.stop_reason()

            if self.cfg.run.mode == "async" and self.engine.generation < gens and stop is None:
                evolution = AsyncEvolution(self.engine, self.cfg.run.max_in_flight, bar=bar if self.progress else None)
                stop = evolution.run(gens, generation_done)
            while self.engine.generation < gens and stop is None:
                stop = generation_done(self.engine.step())
        if stop:
            self.log(f"run stopped after generation {self.engine.generation}: {stop}")
        return self.outcome(stop)

    def outcome(self, stop: str | None) -> Outcome:
        best = {}
        for name in self.engine.states:
            ind = self.engine.best(name)
            best[name] = {"path": str(self.folder.best / f"{name}.py"), "kernel_id": ind.id,
                          "speedup": ind.result.speedup, "percent_of_peak": ind.result.percent_of_peak,
                          "latency_ms": ind.result.latency_ms, "backend": ind.result.backend}
        return Outcome(self.folder, best, stop, self.cfg.evaluation.target)


def open_evaluator(cfg: Config, folder: RunFolder | None, kernel_file: str = "") -> Any:
    """The evaluation service of a run (a context manager) with the held-out seeds its folder
    records, or new ones for a one-off evaluation (of the kernel read from `kernel_file`: a
    module of the package it lies in); tests may pass another factory."""
    from fitness.executor import open_evaluator as open_executor

    recorded = read_heldout(folder.heldout) if folder else None
    settings = config_mod.evaluation_settings(cfg, (recorded or new_heldout(cfg)).seeds, kernel_file)
    with _evaluation_errors():   # the local pool or Ray (evaluation.executor)
        return open_executor(settings, run_dir=folder.root.resolve() if folder else None)


def check_evaluation(cfg: Config) -> None:
    """A UserError now, before a run folder is written, when the run's evaluation cannot
    start on this host (backend, calibration file, Ray missing)."""
    from fitness.executor import preflight

    with _evaluation_errors():
        preflight(config_mod.evaluation_settings(cfg))


@contextlib.contextmanager
def _evaluation_errors() -> Iterator[None]:
    """What the evaluation service raises about the host, as one-line user errors."""
    from fitness.backends import BackendError
    from fitness.executor import ExecutorError
    from fitness.sandbox.modules import ModulesError
    from fitness.simulator.perf.calibration import CalibrationError

    try:
        yield
    except (BackendError, CalibrationError, ExecutorError, ModulesError, SealError) as exc:
        raise UserError(str(exc)) from None


EvaluatorFactory = Callable[[Config, RunFolder], Any]


def start_run(cfg: Config, run_id: str, *, progress: bool = True, log: Callable[[str], None] = tqdm.write,
              evaluator_factory: EvaluatorFactory = open_evaluator) -> Outcome:
    """`run`: a new run folder, generation 0, then generations up to `cfg.run.gens`."""
    with user_problems.scratch(cfg) as (staged, base):
        check_problems(staged, base)
    memory = new_memory(cfg)
    preflight = check_operators(cfg)  # fails fast (exit 2) on an unreachable endpoint or a refused parameter
    check_evaluation(cfg)        # and on a backend, calibration or executor this host lacks
    folder = RunFolder.create(cfg.run.out, run_id)
    # The folder keeps the user's reference and baseline files; its config names those copies.
    given, cfg = cfg, user_problems.stage_config(cfg, folder.root / user_problems.PROBLEMS_DIR, folder.root)
    problems = load_problems(problem_specs(cfg, folder.root))
    write_text_atomic(folder.config, config_mod.to_toml(cfg))
    write_heldout(folder.heldout, new_heldout(cfg))
    log(f"run folder: {folder.root}")
    operators, why = choose_operators(cfg, folder.root, check=False, preflight=preflight)
    log(f"operators: {why}")
    with user_problems.naming_originals(given, cfg, folder.root):
        return _drive(cfg, folder, problems, operators, memory, None, cfg.run.gens, progress, log, evaluator_factory)


def resume_run(path: str | Path, gens: int | None = None, *, progress: bool = True,
               log: Callable[[str], None] = tqdm.write, evaluator_factory: EvaluatorFactory = open_evaluator,
               trust: bool = False) -> Outcome:
    """`resume`: continue a run from its newest checkpoint up to `gens` in total. Everything it
    reads back is checked first (a malformed or inconsistent file is a UserError naming it and
    the field, and nothing is written); a checkpoint whose seal does not verify under the
    user's key (written elsewhere, edited, or by a release before seals) has its population,
    hall of fame and memory re-judged before the run continues, unless `trust` (the user's
    own folder only)."""
    folder = RunFolder.open(path)
    cfg = _saved_config(folder)
    checkpoint = newest_checkpoint(folder, cfg)
    problems = load_problems(problem_specs(cfg, folder.root))
    check_resumable(folder, cfg, checkpoint, [p.name for p in problems])
    rejudge = not checkpoint.verified and not _trusted(folder, trust)
    operators, why = choose_operators(cfg, folder.root)
    log(f"resuming {folder.root} from generation {checkpoint.generation}; operators: {why}")
    if rejudge:
        log(f"checkpoint gen-{checkpoint.generation:04d}.json does not carry your seal (it was written by another "
            "key or an earlier release, or edited since): its population, hall of fame and memory are re-judged "
            "before the run goes on (resume --trust skips that for a folder of your own)")
    _keep_heldout(folder, cfg, checkpoint)
    _truncate_evaluations(folder, checkpoint.generation)
    # The checkpoint restores the memory (including entries first read from memory.path).
    return _drive(cfg, folder, problems, operators, new_memory(cfg, seed=False), checkpoint,
                  cfg.run.gens if gens is None else gens, progress, log, evaluator_factory, rejudge)


def _trusted(folder: RunFolder, trust: bool) -> bool:
    """`--trust`: the user vouches for a folder of their own (owned by them); refused for another's."""
    if not trust:
        return False
    owner = folder.root.stat().st_uid
    if owner != os.getuid():
        raise UserError(f"resume --trust: run folder '{folder.root}' belongs to another user (uid {owner}); "
                        "resume it without --trust, which re-judges what it holds")
    return True


def check_resumable(folder: RunFolder, cfg: Config, checkpoint: Checkpoint, problems: Sequence[str]) -> None:
    """A UserError naming the file and field when what a resume reads back disagrees with the
    run's configuration: the checkpoint lacks a problem of the run, heldout.json holds another
    number of seeds or another mode than the configuration says, evaluations.jsonl holds a
    malformed line (a torn last line, a kill mid-append, is not one)."""
    where = f"checkpoint '{folder.checkpoint_path(checkpoint.generation)}'"
    for name in problems:
        if name not in checkpoint.population:
            raise UserError(f"{where}: population has no problem '{name}', which the run's configuration names")
    recorded = read_heldout(folder.heldout)
    if recorded is not None:
        e = cfg.evaluation
        if len(recorded.seeds) != e.heldout_seeds:
            raise UserError(f"'{folder.heldout}': seeds holds {len(recorded.seeds)} seed(s) where the run's "
                            f"configuration says evaluation.heldout_seeds = {e.heldout_seeds}")
        derived = heldout_seeds(cfg.run.seed, e.heldout_seeds, e.seeds)
        if recorded.mode == "derived" and recorded.seeds != derived:
            raise UserError(f"'{folder.heldout}': seeds are not those derived from run.seed, which its mode "
                            f"'derived' says they are")
        if recorded.mode != e.heldout:
            raise UserError(f"'{folder.heldout}': mode is {recorded.mode!r} where the run's configuration says "
                            f"evaluation.heldout = {e.heldout!r}")
        overlap = sorted(set(recorded.seeds) & set(e.seeds))
        if overlap:
            raise UserError(f"'{folder.heldout}': seeds holds {overlap[0]}, a visible seed (evaluation.seeds)")
    lines = read_evaluations(folder.evaluations)
    if lines.unreadable or lines.incomplete:
        raise UserError(f"'{folder.evaluations}' {lines.first_problem()} ({lines.unreadable + lines.incomplete} "
                        "malformed line(s)); nothing was written")


def _drive(cfg: Config, folder: RunFolder, problems: list[Problem], operators: Operators, memory: OptimizationMemory,
           checkpoint: Checkpoint | None, gens: int, progress: bool, log: Callable[[str], None],
           evaluator_factory: EvaluatorFactory, rejudge: bool = False) -> Outcome:
    serialize_ast_parse()   # kernels are parsed on several threads (compat.py)
    with evaluator_factory(cfg, folder) as evaluator:
        name, why = evaluator.backend_choice
        target = cfg.evaluation.target
        figures = f" ({figure_label(name, target)})" if name == "simulator" else ""
        dialects = ", ".join(f"{p.name} {DIALECT_NAMES[_dialect_of(p)]}" for p in problems)
        log(f"evaluation: backend {name} ({why}), target {target}{figures}; baselines: {dialects}")
        engine = Engine(cfg, problems, evaluator, operators, memory, log=log, progress=progress)
        run = Run(cfg, folder, engine, operators, progress=progress, log=log)
        try:
            if checkpoint is not None:
                _load(engine, checkpoint, folder, rejudge, log)
                if rejudge:
                    run.persist_restored()
            outcome = run.until(gens)
        except (BaselineError, ReferenceFailure) as exc:
            raise UserError(str(exc)) from None
        finally:
            operators.close()
        rejected = getattr(evaluator, "cache_rejected", 0)
        if rejected:
            outcome.rejected = rejected
            log(f"{rejected} stored result(s) or reference folder(s) did not verify (written elsewhere or edited) "
                "and were computed again")
    if cfg.run.report:
        from accelopt_evo.report.markdown import write_report

        outcome.report_path = write_report(folder)
    return outcome


def _load(engine: Engine, checkpoint: Checkpoint, folder: RunFolder, rejudge: bool, log: Callable[[str], None]) -> None:
    """Restore the engine from the checkpoint (re-judging it when `rejudge`). The checkpoint
    was checked on read; what the engine still refuses ends in one line naming the file."""
    where = f"checkpoint '{folder.checkpoint_path(checkpoint.generation)}'"
    try:
        changed = engine.load_state_dict(checkpoint, folder.read_kernel, rejudge=rejudge)
    except (KeyError, ValueError, TypeError, IndexError) as exc:
        raise UserError(f"{where}: cannot be restored ({type(exc).__name__}: {exc})") from None
    for line in changed:
        log(f"re-judged: {line}")


def _saved_config(folder: RunFolder) -> Config:
    try:
        return config_mod.from_saved(config_mod.load_file(folder.config))
    except UserError as exc:
        raise UserError(f"run folder '{folder.root}': {exc}") from None


def newest_checkpoint(folder: RunFolder, cfg: Config) -> Checkpoint:
    """The newest checkpoint, read whole and checked (`verified`: its seal verifies under the
    user's key), matching the run's config; a UserError naming the file and the field when it
    is damaged or inconsistent (checkpoints are written atomically: a damaged one was edited
    or copied damaged, and an older one would be overwritten by the generations after it)."""
    files = folder.checkpoint_files()
    if not files:
        raise UserError(f"run folder '{folder.root}' has no checkpoint to resume from")
    _gen, path = files[-1]
    try:
        checkpoint = read_checkpoint(path, user_seal())
    except OSError as exc:
        raise UserError(f"checkpoint '{path}' cannot be read ({exc.strerror or exc})") from None
    except RecordError as exc:
        raise UserError(f"checkpoint '{path}' is malformed: {exc}; nothing was written") from None
    except SealError as exc:
        raise UserError(str(exc)) from None
    if checkpoint.generation != _gen:
        raise UserError(f"checkpoint '{path}': generation is {checkpoint.generation}, not the {_gen} of its name")
    # A schema-1 checkpoint hashed a configuration without the settings added since.
    omit = SETTINGS_SINCE_SCHEMA_2 if checkpoint.schema == LEGACY_SCHEMA else ()
    if checkpoint.config_hash != cfg.hash(omit):
        raise UserError(f"checkpoint '{path}' was written with another configuration (config.toml changed)")
    return checkpoint


def _keep_heldout(folder: RunFolder, cfg: Config, checkpoint: Checkpoint) -> None:
    """Make sure a resumed run evaluates with the held-out seeds it started with. A folder of
    the release before held-out records used seeds derived from run.seed."""
    if read_heldout(folder.heldout) is not None:
        return
    if checkpoint.schema != LEGACY_SCHEMA and cfg.evaluation.heldout != "derived":
        raise UserError(f"run folder '{folder.root}' lacks {folder.heldout.name}: its secret held-out seeds "
                        f"are lost, so its verdicts cannot be continued")
    e = cfg.evaluation
    write_heldout(folder.heldout, HeldoutSeeds("derived", heldout_seeds(cfg.run.seed, e.heldout_seeds, e.seeds)))


def _truncate_evaluations(folder: RunFolder, generation: int) -> None:
    """Drop log lines of a generation that did not reach its checkpoint; it is re-run."""
    if not folder.evaluations.exists():
        return
    kept = [e for e in read_evaluations(folder.evaluations).records if e.generation <= generation]
    rewrite_evaluations(folder.evaluations, kept)
