"""Run configuration: typed defaults, TOML presets/files, strict validation, `--set` overrides.

Resolution order: dataclass defaults < preset (shipped in ``presets/``) < ``--config FILE`` <
``--set section.key=value`` (repeatable). Unknown keys and wrong types are errors that name the
key. The resolved config is written to ``RUN_DIR/config.toml`` together with its hash.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import hashlib
import json
import sys
import types
import typing
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

from accelopt_evo.errors import UserError
from fitness.settings import BACKENDS, EXECUTORS, TARGETS, EvalSettings
from nkibench.problem import DIALECT_OF_NAME
from operators.llm.settings import (
    LATER_DEFAULTS as LLM_LATER_DEFAULTS,
    ROLES as LLM_ROLES,
    BudgetSettings,
    LLMSettings,
    RoleSettings,
    problems as llm_problems,
)
from operators.rewrites import REWRITES
from operators.tuning import DECLARED_KNOBS, OFFLINE_MODES, Mutation

from .records import HELDOUT_MODES

# The choices of settings whose code lives above the configuration (accelopt_evo/search/ and
# memory.py import them from here): each named once.
LATENCY_FIRST, FULL = "latency_first", "full"      # evaluation.cascade (search/cascade.py)
CASCADES = (LATENCY_FIRST, FULL)
ENTRANTS, EXCLUDED = "entrants", "excluded"        # selection.incorrect (search/cascade.py)
INCORRECT_RULES = (ENTRANTS, EXCLUDED)
RING, COMPLETE = "ring", "complete"                # selection.topology (search/islands.py)
TOPOLOGIES = (RING, COMPLETE)
BALANCED, ACCELOPT = "balanced", "accelopt"        # memory.policy (memory.py)
MEMORY_POLICIES = (BALANCED, ACCELOPT)
MEMORY_DEFAULT_POLICY = BALANCED

SELECTION_METHODS = ("tournament", "best", "roulette", "double_tournament")
MU_PLUS_LAMBDA, BEAM_PER_PLAN = "mu_plus_lambda", "beam_per_plan"
SURVIVOR_RULES = (MU_PLUS_LAMBDA, BEAM_PER_PLAN)
ISLANDS, MAP_ELITES = "islands", "map_elites"
STRATEGIES = (MU_PLUS_LAMBDA, ISLANDS, MAP_ELITES)
OPERATOR_KINDS = ("auto", "llm", "tuning")
RUN_MODES = ("generational", "async")
# run.dialect: the NKI dialect of the baselines a run starts from; "auto" = the target's default.
DIALECT_CHOICES = ("auto",) + tuple(DIALECT_OF_NAME)
# Settings added after schema 2 that a configuration hash leaves out while at these defaults,
# so that run folders of earlier releases keep their hash (and resume).
LATER_DEFAULTS = {"run.dialect": "auto", "run.mode": "generational", "run.max_in_flight": 4,
                  "evaluation.calibration": EvalSettings.calibration, "evaluation.executor": EvalSettings.executor,
                  "evaluation.ray_address": EvalSettings.ray_address, "memory.policy": MEMORY_DEFAULT_POLICY,
                  "selection.survivors": MU_PLUS_LAMBDA, "run.references": [], "run.baselines": [],
                  "run.functions": [], "problem": {},
                  "operators.offline": DECLARED_KNOBS, "operators.knob_weight": Mutation.knob_weight,
                  "operators.rewrite_weight": Mutation.rewrite_weight, "operators.rewrites": list(Mutation.rewrites),
                  "evaluation.cascade": FULL, "selection.incorrect": EXCLUDED,
                  "selection.strategy": MU_PLUS_LAMBDA, "selection.islands": 4, "selection.migration_interval": 3,
                  "selection.migrants": 1, "selection.topology": RING, "selection.dma_bins": 4,
                  "variation.novelty": 0.0, "evaluation.cache_key_file": EvalSettings.cache_key_file,
                  "evaluation.kernel_paths": list(EvalSettings.kernel_paths),
                  **LLM_LATER_DEFAULTS}
# What a run folder written before a setting existed ran with (resumed as it ran).
# (The release before held-out records derived its held-out seeds from run.seed.)
EARLIER_RELEASES = {"operators.offline": DECLARED_KNOBS, "evaluation.cascade": FULL, "selection.incorrect": EXCLUDED,
                    "selection.strategy": MU_PLUS_LAMBDA, "variation.novelty": 0.0, "evaluation.heldout": "derived"}


@dataclass
class RunSection:
    seed: int = 0
    gens: int = 20                       # total number of generations after gen 0
    problems: list[str] = field(default_factory=lambda: ["silu"])
    suite: str = ""                      # "nkibench": every built-in problem
    suite_dir: str = ""                  # a folder in the official NKIBench layout
    # Problems of the user's own: NumPy reference modules and, pair by pair, the baseline kernel
    # each search starts from (`functions`: the baseline file's function, "" = its only kernel).
    # A run folder's config names the copies it keeps under problems/, relative to the folder.
    references: list[str] = field(default_factory=list)
    baselines: list[str] = field(default_factory=list)
    functions: list[str] = field(default_factory=list)
    shape: str = "paper"                 # named shape of every problem ("paper", "small", ...)
    dialect: str = "auto"                # baselines' NKI dialect: auto (the target's) | legacy | nki
    out: str = "runs"                    # parent folder of run folders
    report: bool = True                  # write report.md + plots at the end of a run
    # generational: (mu + lambda) generations with a barrier each; async: variation requests and
    # evaluations overlap, up to max_in_flight at a time, each child entering by mu + 1 replacement.
    mode: str = "generational"
    max_in_flight: int = 4


@dataclass
class PopulationSection:
    size: int = 8                        # mu: survivors per generation
    offspring: int = 8                   # lambda: children per generation
    elitism: int = 1                     # best individuals that always survive


@dataclass
class SelectionSection:
    method: str = "tournament"
    tournament_size: int = 3
    # double_tournament: fitness tournament size comes from tournament_size; parsimony_size in
    # [1, 2] is the size of the tournament on code length (1 = no pressure).
    parsimony_size: float = 1.4
    fitness_first: bool = True
    # mu_plus_lambda: survivors from parents and children (elitism, then `method`); beam_per_plan
    # (AccelOpt): every survivor is expanded by one mutation, the best child of each plan (its
    # parent when none is valid) competes, and the best `population.size` form the next beam.
    survivors: str = MU_PLUS_LAMBDA
    # Children that fail correctness (or whose correctness was not needed) in survivor
    # tournaments: "entrants" (drawn like any other and never winning, so a tournament is decided
    # without judging the children that cannot win it) | "excluded" (only correct children are
    # drawn, as in earlier releases: every child must be judged).
    incorrect: str = ENTRANTS
    # Where parents come from and which kernels stay (README "Diversity"): "mu_plus_lambda" (one
    # population, as above) | "islands" (islands.py: `islands` sub-populations of population.size
    # sharing population.offspring; every `migration_interval` generations each sends its
    # `migrants` fastest to its neighbours, `topology` "ring" or "complete") | "map_elites"
    # (archive.py: the fastest valid kernel per cell of busiest engine x `dma_bins` bins of the
    # DMA's share of the time; parents drawn uniformly over the occupied cells).
    strategy: str = MU_PLUS_LAMBDA
    islands: int = 4
    migration_interval: int = 3
    migrants: int = 1
    topology: str = RING
    dma_bins: int = 4


@dataclass
class VariationSection:
    # Relative weights of the two kinds of offspring: a child comes from crossover with
    # probability crossover_prob / (crossover_prob + mutation_prob), else from mutation.
    crossover_prob: float = 0.3
    mutation_prob: float = 0.7
    repair_attempts: int = 1
    # Novelty (novelty.py): a child closer than this to a kernel already evaluated (a distance
    # in [0, 1] over the normalized AST) is not evaluated but sent back to its operator once;
    # 0 = off.
    novelty: float = 0.0


@dataclass
class MemorySection:
    capacity: int = 16
    per_generation: int = 4
    improve_threshold: float = 1.04
    regress_threshold: float = 1.15
    path: str = ""                       # memory.json of an earlier run to start from
    # Which lessons the memory keeps: "balanced" (improvements keep half of it, nothing is evicted
    # in the generation it was paid for, problems share it) | "accelopt" (AccelOpt's rules: at
    # most per_generation // 2 improvements, a random sample of older entries); see memory.py.
    policy: str = MEMORY_DEFAULT_POLICY


@dataclass
class OperatorsSection:
    kind: str = "auto"                   # auto | llm | tuning
    # With LLM operators, the share of offspring produced by them; the rest use the offline
    # offline operators (mixing both in one population).
    llm_fraction: float = 1.0
    # Offline operators: "search" (knobs found in any kernel, rewrites) or "declared_knobs" (only
    # `# tune:` knobs, as earlier releases did; their run folders resume so).
    offline: str = Mutation.mode
    # Offline mutations: how often a knob move (declared `# tune:` or found in the source) and a
    # structural rewrite are drawn, relative to each other, and which rewrites may be used.
    knob_weight: float = Mutation.knob_weight
    rewrite_weight: float = Mutation.rewrite_weight
    rewrites: list[str] = field(default_factory=lambda: list(Mutation.rewrites))

    def mutation(self) -> Mutation:
        """The offline operators' settings."""
        return Mutation(self.offline, self.knob_weight, self.rewrite_weight, tuple(self.rewrites))


# --------------------------------------------------------------------------------------------
# Sections of the evaluation service and the LLM client: generated from their settings types
# (fitness.settings, operators.llm.settings), where each of those settings is declared once.


def _toml_type(tp: Any) -> Any:
    """The configuration's type of a settings field: tuples are lists, mappings are tables."""
    origin = typing.get_origin(tp)
    if origin is tuple:
        return list[typing.get_args(tp)[0]]  # tuple[int, ...] -> list[int]
    if origin is collections.abc.Mapping:
        return dict[typing.get_args(tp)]
    return tp


def _section(name: str, settings: type, doc: str, *, skip: tuple[str, ...] = (), optional: bool = False) -> type:
    """A mutable config section with the fields, types and defaults of the dataclass `settings`
    but `skip`; with `optional`, every field but a table is unset (None) by default."""
    hints = typing.get_type_hints(settings)
    spec: list[tuple[str, Any, Any]] = []
    for f in dataclasses.fields(settings):
        if f.name in skip:
            continue
        tp = _toml_type(hints[f.name])
        if typing.get_origin(tp) is dict:
            spec.append((f.name, tp, field(default_factory=dict)))
        elif optional:
            spec.append((f.name, typing.Optional[tp], None))
        elif typing.get_origin(tp) is list:
            spec.append((f.name, tp, field(default_factory=lambda d=f.default: list(d))))
        else:
            spec.append((f.name, tp, f.default))
    return dataclasses.make_dataclass(name, spec, namespace={"__module__": __name__, "__doc__": doc})


RoleSection = _section("RoleSection", RoleSettings, "Per-role overrides of the LLM settings; unset fields inherit "
                       "from [llm].", skip=("role",), optional=True)
RolesSection = dataclasses.make_dataclass(
    "RolesSection", [(role, RoleSection, field(default_factory=RoleSection)) for role in LLM_ROLES],
    namespace={"__module__": __name__, "__doc__": "[llm.roles.<role>] for each LLM role."})
BudgetSection = _section("BudgetSection", BudgetSettings, "[budget]: caps on billed LLM use (0 = no cap).")


@dataclass
class LLMSection(_section("_LLMFields", LLMSettings, "", skip=("roles",))):
    """[llm]: the fields of operators.llm.settings.LLMSettings, and per-role tables."""

    roles: RolesSection = field(default_factory=RolesSection)


@dataclass
class EvaluationSection(_section("_EvalFields", EvalSettings, "", skip=("heldout_seeds", "kernel_file"))):
    """[evaluation]: the fields of fitness.settings.EvalSettings, but held-out seeds as a count
    and a mode (the run turns them into values that no configuration file shows)."""

    heldout_seeds: int = 2               # extra correctness seeds no prompt or kernel sees
    # "secret": held-out seeds drawn from the operating system's randomness per run (recorded in
    # the run folder's heldout.json, reused on resume); "derived": from run.seed (exact reruns).
    heldout: str = "secret"
    # "latency_first": a generation's children are timed from their shape-only trace first and
    # judged in full, fastest first, only where their correctness decides the survivors, the hall
    # of fame or the memory (the rest are recorded as not_judged); "full": every child is judged.
    # Both give the same survivors. Simulator only (hardware measures by running); see cascade.py.
    cascade: str = LATENCY_FIRST


@dataclass
class Config:
    run: RunSection = field(default_factory=RunSection)
    population: PopulationSection = field(default_factory=PopulationSection)
    selection: SelectionSection = field(default_factory=SelectionSection)
    variation: VariationSection = field(default_factory=VariationSection)
    memory: MemorySection = field(default_factory=MemorySection)
    operators: OperatorsSection = field(default_factory=OperatorsSection)
    llm: LLMSection = field(default_factory=LLMSection)
    budget: BudgetSection = field(default_factory=BudgetSection)
    evaluation: EvaluationSection = field(default_factory=EvaluationSection)
    # Per-problem shape parameters, e.g. [shapes.silu] M = 256; checked against the problem.
    shapes: dict[str, dict[str, int]] = field(default_factory=dict)
    # Shape parameters of every problem of the run (a reference module's constants, e.g.
    # `--set problem.N=8192`); [shapes.NAME] wins for its problem.
    problem: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def hash(self, omit: tuple[str, ...] | list[str] = ()) -> str:
        """Stable short hash of the resolved configuration, without the dotted keys `omit`
        (settings that a run folder of an older release did not know)."""
        data = self.to_dict()
        omit = list(omit) + [k for k, v in LATER_DEFAULTS.items() if _get(data, k) == v]
        for dotted in omit:
            *path, last = dotted.split(".")
            node = data
            for part in path:
                node = node[part]
            node.pop(last, None)
        blob = json.dumps(data, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _get(data: dict[str, Any], dotted: str) -> Any:
    for part in dotted.split("."):
        data = data.get(part, {}) if isinstance(data, dict) else {}
    return data


# --------------------------------------------------------------------------------------------
# Building a Config from nested dicts, with type checks that name the offending key.


def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin in (list, dict):
        args = ", ".join(_type_name(a) for a in typing.get_args(tp))
        return f"{origin.__name__}[{args}]"
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(tp))
    if tp is Any:
        return "any value"
    if tp is type(None):
        return "unset"
    return getattr(tp, "__name__", str(tp))


def _coerce(value: Any, tp: Any, key: str) -> Any:
    """Check `value` against the annotation `tp`; return it (ints widen to float)."""
    origin = typing.get_origin(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        for option in typing.get_args(tp):
            if option is type(None):
                continue
            try:
                return _coerce(value, option, key)
            except UserError:
                pass
        raise UserError(f"config key '{key}' must be {_type_name(tp)}, got {value!r}")
    if origin is list:
        (item_tp,) = typing.get_args(tp)
        if not isinstance(value, list):
            raise UserError(f"config key '{key}' must be a list, got {value!r}")
        return [_coerce(v, item_tp, f"{key}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        key_tp, val_tp = typing.get_args(tp)
        if not isinstance(value, dict):
            raise UserError(f"config key '{key}' must be a table, got {value!r}")
        return {str(k): _coerce(v, val_tp, f"{key}.{k}") for k, v in value.items()}
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise UserError(f"config key '{key}' must be a table, got {value!r}")
        return _build(tp, value, key)
    if tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif tp is str:
        if isinstance(value, str):
            return value
    raise UserError(f"config key '{key}' must be {_type_name(tp)}, got {value!r}")


def _build(cls: type, data: dict[str, Any], prefix: str = "") -> Any:
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    for k in data:
        if k not in names:
            where = f"'{prefix}.{k}'" if prefix else f"section '{k}'"
            known = ", ".join(sorted(names))
            raise UserError(f"unknown config key {where} (known here: {known})")
    kwargs = {k: _coerce(v, hints[k], f"{prefix}.{k}" if prefix else k) for k, v in data.items()}
    return cls(**kwargs)


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        else:
            out[k] = v
    return out


def _check(cfg: Config) -> Config:
    """Semantic checks beyond types (ranges, enumerations)."""

    def need(ok: bool, key: str, what: str) -> None:
        if not ok:
            raise UserError(f"config key '{key}' {what}")

    need(cfg.run.gens >= 0, "run.gens", "must be >= 0")
    need(bool(cfg.run.problems) or bool(cfg.run.suite) or bool(cfg.run.references), "run.problems",
         "must name at least one problem")
    need(len(cfg.run.baselines) == len(cfg.run.references), "run.baselines",
         "must give one baseline kernel per reference in run.references")
    need(len(cfg.run.functions) in (0, len(cfg.run.baselines)), "run.functions",
         "must be empty or give one function name per baseline")
    need(cfg.run.suite in ("", "nkibench"), "run.suite", "must be \"\" or \"nkibench\"")
    need(cfg.run.dialect in DIALECT_CHOICES, "run.dialect", f"must be one of {', '.join(DIALECT_CHOICES)}")
    need(cfg.run.mode in RUN_MODES, "run.mode", f"must be one of {', '.join(RUN_MODES)}")
    need(cfg.run.max_in_flight >= 1, "run.max_in_flight", "must be >= 1")
    p = cfg.population
    need(p.size >= 1, "population.size", "must be >= 1")
    need(p.offspring >= 1, "population.offspring", "must be >= 1")
    need(0 <= p.elitism <= p.size, "population.elitism", f"must be between 0 and population.size ({p.size})")
    s = cfg.selection
    need(s.method in SELECTION_METHODS, "selection.method", f"must be one of {', '.join(SELECTION_METHODS)}")
    need(s.tournament_size >= 1, "selection.tournament_size", "must be >= 1")
    need(1.0 <= s.parsimony_size <= 2.0, "selection.parsimony_size", "must be in [1, 2]")
    need(s.survivors in SURVIVOR_RULES, "selection.survivors", f"must be one of {', '.join(SURVIVOR_RULES)}")
    need(s.incorrect in INCORRECT_RULES, "selection.incorrect", f"must be one of {', '.join(INCORRECT_RULES)}")
    need(s.survivors != BEAM_PER_PLAN or cfg.run.mode == "generational", "run.mode",
         "must be \"generational\" with selection.survivors = \"beam_per_plan\" (a beam is chosen among a "
         "whole generation)")
    need(s.strategy in STRATEGIES, "selection.strategy", f"must be one of {', '.join(STRATEGIES)}")
    need(s.strategy == MU_PLUS_LAMBDA or s.survivors == MU_PLUS_LAMBDA, "selection.survivors",
         f"must be \"{MU_PLUS_LAMBDA}\" with selection.strategy = \"{s.strategy}\"")
    need(s.islands >= 2, "selection.islands", "must be >= 2")
    need(s.migration_interval >= 1, "selection.migration_interval", "must be >= 1")
    need(0 <= s.migrants <= p.size, "selection.migrants", f"must be between 0 and population.size ({p.size})")
    need(s.topology in TOPOLOGIES, "selection.topology", f"must be one of {', '.join(TOPOLOGIES)}")
    need(s.dma_bins >= 1, "selection.dma_bins", "must be >= 1")
    v = cfg.variation
    need(0.0 <= v.novelty <= 1.0, "variation.novelty", "must be in [0, 1] (0 = off)")
    need(v.crossover_prob >= 0, "variation.crossover_prob", "must be >= 0")
    need(v.mutation_prob >= 0, "variation.mutation_prob", "must be >= 0")
    need(v.crossover_prob + v.mutation_prob > 0, "variation.mutation_prob",
         "and variation.crossover_prob must not both be 0")
    need(v.repair_attempts >= 0, "variation.repair_attempts", "must be >= 0")
    m = cfg.memory
    need(m.capacity >= 0, "memory.capacity", "must be >= 0")
    need(m.per_generation >= 0, "memory.per_generation", "must be >= 0")
    need(m.improve_threshold >= 1.0, "memory.improve_threshold", "must be >= 1")
    need(m.regress_threshold >= 1.0, "memory.regress_threshold", "must be >= 1")
    need(m.policy in MEMORY_POLICIES, "memory.policy", f"must be one of {', '.join(MEMORY_POLICIES)}")
    need(cfg.operators.kind in OPERATOR_KINDS, "operators.kind", f"must be one of {', '.join(OPERATOR_KINDS)}")
    need(0.0 <= cfg.operators.llm_fraction <= 1.0, "operators.llm_fraction", "must be in [0, 1]")
    o = cfg.operators
    need(o.offline in OFFLINE_MODES, "operators.offline", f"must be one of {', '.join(OFFLINE_MODES)}")
    need(o.knob_weight >= 0 and o.rewrite_weight >= 0, "operators.knob_weight",
         "and operators.rewrite_weight must be >= 0")
    need(o.knob_weight + o.rewrite_weight > 0, "operators.rewrite_weight", "and operators.knob_weight must not both be 0")
    unknown = [r for r in o.rewrites if r not in REWRITES]
    need(not unknown, "operators.rewrites", f"unknown rewrite(s) {', '.join(map(repr, unknown))}; "
         f"known: {', '.join(REWRITES)}")
    llm = cfg.llm
    need(llm.max_concurrency >= 1, "llm.max_concurrency", "must be >= 1")
    for key, what in llm_problems(llm)[:1]:   # timeouts and completion budgets, per role too
        need(False, key, what)
    need(llm.max_retries >= 0, "llm.max_retries", "must be >= 0")
    need(llm.plans_per_parent >= 1, "llm.plans_per_parent", "must be >= 1")
    need(llm.samples_per_plan >= 1, "llm.samples_per_plan", "must be >= 1")
    b = cfg.budget
    need(b.max_usd >= 0, "budget.max_usd", "must be >= 0 (0 = no cap)")
    need(b.max_tokens >= 0, "budget.max_tokens", "must be >= 0 (0 = no cap)")
    need(b.max_llm_calls >= 0, "budget.max_llm_calls", "must be >= 0 (0 = no cap)")
    e = cfg.evaluation
    need(e.backend in BACKENDS, "evaluation.backend", f"must be one of {', '.join(BACKENDS)}")
    need(e.executor in EXECUTORS, "evaluation.executor", f"must be one of {', '.join(EXECUTORS)}")
    need(e.target in TARGETS, "evaluation.target", f"must be one of {', '.join(TARGETS)}")
    need(bool(e.seeds), "evaluation.seeds", "must list at least one seed")
    need(e.heldout_seeds >= 0, "evaluation.heldout_seeds", "must be >= 0")
    need(e.heldout in HELDOUT_MODES, "evaluation.heldout", f"must be one of {', '.join(HELDOUT_MODES)}")
    need(e.cascade in CASCADES, "evaluation.cascade", f"must be one of {', '.join(CASCADES)}")
    need(e.rel_tol >= 0, "evaluation.rel_tol", "must be >= 0 (0 = the problem's tolerance)")
    need(e.timeout_s > 0, "evaluation.timeout_s", "must be > 0")
    need(e.memory_limit_mb >= 256, "evaluation.memory_limit_mb", "must be >= 256")
    need(e.workers >= 1, "evaluation.workers", "must be >= 1")
    missing = [p for p in e.kernel_paths if not Path(p).expanduser().is_dir()]
    need(not missing, "evaluation.kernel_paths", f"'{missing[0] if missing else ''}' is not a folder")
    try:  # whatever else the evaluation service refuses, in its own words
        evaluation_settings(cfg)
    except (TypeError, ValueError) as exc:
        raise UserError(f"config section 'evaluation': {exc}") from None
    return cfg


def evaluation_settings(cfg: Config, heldout: tuple[int, ...] = (), kernel_file: str = "") -> EvalSettings:
    """The evaluation service's settings of a config, given the run's held-out seed values (and
    the file an `eval`'d kernel was read from)."""
    e = cfg.evaluation
    names = [f.name for f in dataclasses.fields(EvalSettings) if f.name not in ("heldout_seeds", "kernel_file")]
    values = {n: getattr(e, n) for n in names}
    # absolute, so that every process (a kernel process, a Ray worker) finds the same folders
    values["kernel_paths"] = [str(Path(p).expanduser().resolve()) for p in e.kernel_paths]
    return EvalSettings(**values, heldout_seeds=heldout, kernel_file=kernel_file)


# --------------------------------------------------------------------------------------------
# Sources: presets, files, --set.


def preset_names() -> list[str]:
    files = resources.files("accelopt_evo.run").joinpath("presets").iterdir()
    return sorted(f.name[: -len(".toml")] for f in files if f.name.endswith(".toml"))


def _read_toml(text: str, where: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"invalid TOML in {where}: {exc}") from None


def load_preset(name: str) -> dict[str, Any]:
    if name not in preset_names():
        raise UserError(f"unknown preset '{name}' (known: {', '.join(preset_names())})")
    text = resources.files("accelopt_evo.run").joinpath("presets", f"{name}.toml").read_text()
    return _read_toml(text, f"preset '{name}'")


def load_file(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise UserError(f"cannot read config file '{path}': {exc.strerror or exc}") from None
    return _read_toml(text, f"config file '{path}'")


def _field_type(dotted: str) -> Any:
    """The declared type of a dotted key, or None if the path is not a plain field."""
    tp: Any = Config
    for part in dotted.split("."):
        if dataclasses.is_dataclass(tp):
            hints = typing.get_type_hints(tp)
            if part not in hints:
                return None
            tp = hints[part]
        elif typing.get_origin(tp) is dict:
            tp = typing.get_args(tp)[1]
        else:
            return None
    return tp


def parse_set(assignment: str) -> dict[str, Any]:
    """`section.key=value` -> nested dict. The value is parsed as TOML (so `3`, `1.5`, `true`,
    `[1, 2]`, `"x"` keep their types); a bare word is accepted as a string."""
    if "=" not in assignment:
        raise UserError(f"--set expects section.key=value, got '{assignment}'")
    dotted, raw = assignment.split("=", 1)
    dotted = dotted.strip()
    parts = dotted.split(".")
    if len(parts) < 2 or not all(parts):
        raise UserError(f"--set expects section.key=value, got '{assignment}'")
    try:
        value = tomllib.loads(f"v = {raw.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        tp = _field_type(dotted)
        accepts_str = tp is str or (tp is not None and str in typing.get_args(tp))
        if accepts_str or tp is None:
            value = raw.strip()
        else:
            raise UserError(f"--set {dotted}: cannot read '{raw}' as {_type_name(tp)}") from None
    out: dict[str, Any] = {}
    node = out
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value
    return out


def resolve(
    preset: str = "default",
    config_file: str | Path | None = None,
    sets: list[str] | tuple[str, ...] = (),
    overrides: dict[str, Any] | None = None,
) -> Config:
    """Defaults < preset < file < --set < `overrides` (CLI flags such as --seed)."""
    data = load_preset(preset)
    if config_file:
        data = _merge(data, load_file(config_file))
    for s in sets:
        data = _merge(data, parse_set(s))
    if overrides:
        data = _merge(data, overrides)
    return _check(_build(Config, data))


def from_dict(data: dict[str, Any]) -> Config:
    return _check(_build(Config, data))


def from_saved(data: dict[str, Any]) -> Config:
    """The configuration of a run folder's config.toml: a setting the folder's release did not
    write takes the value that release ran with (EARLIER_RELEASES), else its default."""
    data = json.loads(json.dumps(data))
    for dotted, value in EARLIER_RELEASES.items():
        *path, last = dotted.split(".")
        node = data
        for part in path:
            node = node.setdefault(part, {})
        node.setdefault(last, value)
    return from_dict(data)


# --------------------------------------------------------------------------------------------
# Writing: a minimal TOML emitter for the value types a Config holds.


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)  # a JSON string is a valid TOML basic string
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{json.dumps(k)} = {_toml_value(x)}" for k, x in v.items()) + " }"
    raise TypeError(f"cannot write {type(v).__name__} to TOML")


def _toml_table(name: str, table: dict[str, Any], lines: list[str]) -> None:
    scalars = {k: v for k, v in table.items() if not isinstance(v, dict) or k in ("extra",)}
    tables = {k: v for k, v in table.items() if k not in scalars}
    if name:
        lines.append(f"\n[{name}]")
    for k, v in scalars.items():
        if v is None:
            continue  # unset optional value: TOML has no null
        lines.append(f"{k} = {_toml_value(v)}")
    for k, v in tables.items():
        _toml_table(f"{name}.{k}" if name else k, v, lines)


def to_toml(cfg: Config) -> str:
    lines = [f"# accelopt-evo resolved configuration; hash {cfg.hash()}"]
    _toml_table("", cfg.to_dict(), lines)
    return "\n".join(lines) + "\n"
