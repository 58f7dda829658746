"""The run report: `RUN_DIR/report.md` and `RUN_DIR/plots/*.png` from whatever a run folder holds.

The report answers, at a glance: did the run work (best speedup and % of peak per problem, the
paper's metric, next to AccelOpt's published figures), what it found (the best kernels and
their diffs, their lineage), what it cost (evaluations, LLM tokens and dollars) and what the
optimization memory learned. It reads the folder through `records`, tolerantly, so that a run
in progress or one cut short by a crash still gets a report: every missing or damaged file is
listed, and a section without data says so. This module holds views and markdown only.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

from accelopt_evo.errors import UserError
from accelopt_evo.run.files import write_text_atomic
from accelopt_evo.run.folder import RunFolder
from accelopt_evo.run.records import (
    SEALED_SCHEMA,
    Checkpoint,
    EvaluationLine,
    KernelMeta,
    Lines,
    MemoryEntry,
    RecordError,
    figure_label,
    read_checkpoint,
    read_evaluations,
    read_llm_calls,
    read_memory_file,
)
from accelopt_evo.search import archive
from accelopt_evo.search.descriptors import ENGINES, NO_ENGINE
from fitness.correctness.normalize import kernel_id as kernel_id_of
from fitness.measures import hotlines
from fitness.result import NOT_JUDGED, STATUSES
from fitness.seal import SealError, user_seal
from nkibench import paper
from operators.llm.prompts import quoted_rationale
from operators.tuning import DECLARED_KNOBS

if TYPE_CHECKING:
    from operators.llm.ledger import CallRecord

PAPER_SOURCE = "AccelOpt (Zhang et al., MLSys 2026), trn1 figures read off the paper's chart"
PAPER_TRN1 = paper.TRN1_PERCENT_OF_PEAK
PAPER_GEOMEAN = paper.GEOMEAN_PERCENT_OF_PEAK

RATIONALE_CHARS = 4000          # of a lesson's rationale in the report (prompts show fewer)
NO_KERNEL = "operator failed"   # an operator returned no kernel (counted in the logbook only)
__all__ = ["figure_label"]      # re-exported: the one label of a figure lives in records


# --------------------------------------------------------------------------------------------
# What the run folder holds.


@dataclass(frozen=True)
class Kernel:
    """What the run knows of one kernel of one problem."""

    id: str
    problem: str
    generation: int
    operator: str
    parent_ids: tuple[str, ...]
    status: str
    latency_ms: float | None
    speedup: float | None
    percent_of_peak: float | None
    backend: str
    target: str
    note: str = ""
    # its hot lines as the profile records them (fitness/measures/hotlines.py), and their label
    hot_lines: str = ""
    figures: str = ""

    @classmethod
    def of(cls, problem: str, m: KernelMeta) -> "Kernel":
        r = m.result
        profile = r.profile if r else {}
        return cls(m.id, problem, m.generation, m.operator or "?", m.parent_ids, r.status if r else "?",
                   r.latency_ms if r else None, r.speedup if r else None, r.percent_of_peak if r else None,
                   r.backend if r else "", r.target if r else "", m.note,
                   str(profile.get(hotlines.HOT_LINES) or ""), hotlines.label_of(profile))


@dataclass
class RunData:
    """Everything read from a run folder, plus notes on what was missing or damaged."""

    folder: RunFolder
    settings: dict[str, Any]                      # config.toml as a dict ({} if unreadable)
    checkpoint: Checkpoint | None                 # the newest readable checkpoint
    checkpoint_gens: list[int]                    # generations with a readable checkpoint
    population: dict[str, dict[int, list[float]]]  # problem -> generation -> population speedups
    evaluations: list[EvaluationLine]
    llm_calls: list[CallRecord]
    memory: list[MemoryEntry]
    notes: list[str] = field(default_factory=list)

    def setting(self, section: str, key: str, default: Any = None) -> Any:
        value = self.settings.get(section, {})
        return value.get(key, default) if isinstance(value, dict) else default

    @property
    def last_generation(self) -> int:
        return self.checkpoint_gens[-1] if self.checkpoint_gens else -1

    @property
    def offline(self) -> bool:
        """The run's configuration chose the offline operators (no LLM calls expected)."""
        kind = self.setting("operators", "kind", "auto")
        return kind == "tuning" or (kind == "auto" and not self.setting("llm", "base_url", ""))


def _lines(path: Path, what: str, read: Callable[[Path], Lines[Any]], notes: list[str], incomplete: str) -> Lines[Any]:
    """The records of a JSONL file; what was skipped goes to `notes`."""
    try:
        lines = read(path)
    except OSError as exc:
        notes.append(f"{what} is unreadable ({exc.strerror or exc})")
        return Lines()
    notes += line_notes(lines, what, incomplete)
    return lines


def line_notes(lines: Lines[Any], what: str, incomplete: str) -> list[str]:
    """What a reader of a JSONL file skipped, as notes; `incomplete` describes a record that is
    JSON but not whole."""
    notes = []
    if lines.torn:
        notes.append(f"{what}: the last line is cut short (the run was interrupted while writing it); skipped")
    if lines.unreadable:
        notes.append(f"{what}: {lines.unreadable} unreadable line(s) skipped")
    if lines.incomplete:
        notes.append(f"{what}: {lines.incomplete} {incomplete} skipped")
    return notes


EVALUATION_INCOMPLETE = "record(s) without generation, problem, kernel id or status"
CALL_INCOMPLETE = "incomplete record(s)"


def read_settings(folder: RunFolder, notes: list[str]) -> dict[str, Any]:
    from accelopt_evo.run import config as config_mod

    if not folder.config.is_file():
        notes.append("config.toml is missing: run settings unknown")
        return {}
    try:
        return config_mod.load_file(folder.config)
    except UserError as exc:
        notes.append(f"config.toml is unreadable: {exc}")
        return {}


def _read_checkpoints(folder: RunFolder, notes: list[str]) -> tuple[Checkpoint | None, list[int],
                                                                     dict[str, dict[int, list[float]]]]:
    newest: Checkpoint | None = None
    newest_path = Path()
    readable: list[int] = []
    population: dict[str, dict[int, list[float]]] = defaultdict(dict)
    files = folder.checkpoint_files()
    try:
        seal = user_seal()
    except SealError as exc:
        seal = None
        notes.append(f"checkpoint seals are not checked: {exc}")
    for gen, path in files:
        try:
            newest = read_checkpoint(path, seal)
        except (OSError, RecordError) as exc:
            notes.append(f"checkpoints/{path.name} is unreadable ({type(exc).__name__}); generation {gen} "
                         f"is missing from the population plots")
            continue
        readable.append(gen)
        newest_path = path
        for name, metas in newest.population.items():
            population[name][gen] = [m.result.speedup for m in metas if m.result and m.result.speedup is not None]
    if readable and seal is not None and newest is not None and newest.schema >= SEALED_SCHEMA and not newest.verified:
        notes.append(f"checkpoints/{newest_path.name} does not carry your seal (another user's key, or edited "
                     "since): its figures are as the folder says, not as measured; `resume` re-judges them")
    if not files:
        notes.append("no checkpoint: populations, hall of fame and logbook are unknown; "
                     "figures come from evaluations.jsonl alone")
    elif readable:
        gaps = sorted(set(range(readable[-1] + 1)) - {g for g, _ in files})
        if gaps:
            notes.append(f"checkpoint(s) of generation(s) {_ranges(gaps)} are missing")
    return newest if readable else None, readable, dict(population)


def read_memory(folder: RunFolder, checkpoint: Checkpoint | None, notes: list[str]) -> list[MemoryEntry]:
    if folder.memory.is_file():
        try:
            return list(read_memory_file(folder.memory).entries)
        except ValueError as exc:
            problem = str(exc)
    else:
        problem = "memory.json is missing"
    if checkpoint is not None:
        notes.append(f"{problem}; the memory shown is the one of the newest checkpoint")
        return list(checkpoint.memory)
    notes.append(f"{problem}; the optimization memory is unknown")
    return []


def collect(folder: RunFolder) -> RunData:
    """Read a run folder; never raises for missing or damaged files (they are noted), only for
    a file of a newer schema than this release reads (a UserError)."""
    notes: list[str] = []
    settings = read_settings(folder, notes)
    checkpoint, gens, population = _read_checkpoints(folder, notes)
    if not folder.evaluations.is_file():
        notes.append("evaluations.jsonl is missing: outcome and progress figures come from checkpoints only")
    lines = _lines(folder.evaluations, "evaluations.jsonl", read_evaluations, notes, EVALUATION_INCOMPLETE)
    calls = _lines(folder.llm_calls, "llm_calls.jsonl", read_llm_calls, notes, CALL_INCOMPLETE)
    memory = read_memory(folder, checkpoint, notes)
    data = RunData(folder, settings, checkpoint, gens, population, lines.records, calls.records, memory, notes)
    data.notes += progress_notes(data)
    return data


def progress_notes(data: RunData) -> list[str]:
    """Notes on where the run stands that only the data read tells."""
    notes = []
    late = sorted({e.generation for e in data.evaluations if e.generation > data.last_generation})
    if late:
        notes.append(f"generation(s) {_ranges(late)} have evaluations but no checkpoint: the run is in progress or "
                     f"was interrupted there (a resume redoes them); their results are included")
    if not data.folder.llm_calls.is_file() and not data.offline:
        notes.append("llm_calls.jsonl is missing although the run was configured for LLM operators")
    return notes


def _ranges(values: Sequence[int]) -> str:
    parts, start = [], None
    for i, v in enumerate(values):
        if start is None:
            start = v
        if i + 1 == len(values) or values[i + 1] != v + 1:
            parts.append(str(start) if start == v else f"{start}-{v}")
            start = None
    return ", ".join(parts)


# --------------------------------------------------------------------------------------------
# Derived views (pure functions of RunData).


def problems(data: RunData) -> list[str]:
    """The run's problems, in the order the configuration lists them."""
    names: list[str] = []
    if data.checkpoint:
        ck = data.checkpoint
        names += [*ck.problems, *ck.logbook, *ck.population]
    names += [e.problem for e in data.evaluations]
    requested = data.setting("run", "problems", []) if not data.setting("run", "suite") else []
    order = {n: i for i, n in enumerate(requested if isinstance(requested, list) else [])}
    return sorted(dict.fromkeys(names), key=lambda n: order.get(n, len(order)))


def _valid(e: EvaluationLine) -> bool:
    return e.result.ok and e.result.speedup is not None


def kernel_index(data: RunData) -> dict[tuple[str, str], Kernel]:
    """(problem, kernel id) -> Kernel: the first evaluation of each kernel, with the checkpoints'
    notes. The first birth is the one whose parents existed before it, so lineages terminate."""
    index: dict[tuple[str, str], Kernel] = {}
    for e in data.evaluations:
        index.setdefault((e.problem, e.kernel_id), Kernel.of(e.problem, e.kernel()))
    ck = data.checkpoint
    for section in (ck.hall_of_fame, ck.population) if ck else ():
        for name, metas in section.items():
            for m in metas:
                k, old = Kernel.of(name, m), index.get((name, m.id))
                index[(name, m.id)] = k if old is None else dataclasses.replace(old, note=old.note or k.note)
    return index


def best_kernel(data: RunData, problem: str) -> Kernel | None:
    """The checkpoint's hall-of-fame leader, unless a later, not yet checkpointed evaluation beat it."""
    hof = data.checkpoint.hall_of_fame.get(problem) if data.checkpoint else None
    leader = Kernel.of(problem, hof[0]) if hof else None
    for e in data.evaluations:
        if e.problem != problem or not _valid(e) or e.generation <= data.last_generation and leader is not None:
            continue
        if leader is None or leader.speedup is None or e.result.speedup > leader.speedup:
            leader = Kernel.of(problem, e.kernel())
    return leader


def baseline_kernel(data: RunData, problem: str, index: dict[tuple[str, str], Kernel]) -> Kernel | None:
    info = data.checkpoint.problems.get(problem) if data.checkpoint else None
    if info is not None:
        found = index.get((problem, info.baseline_id))
        if found is not None:
            return found
        known = info.known.get(info.baseline_id)
        if known is not None:
            return Kernel.of(problem, KernelMeta(info.baseline_id, result=known))
    return next((k for (p, _), k in index.items() if p == problem and k.operator == "baseline"), None)


def best_series(data: RunData, problem: str) -> list[tuple[int, float, float | None]]:
    """(generation, best speedup so far, its % of peak) per generation with data.

    From the evaluations (the cumulative best, as the hall of fame keeps it), so that a
    generation without a checkpoint still shows; from the logbook when there are none."""
    by_gen: dict[int, list[EvaluationLine]] = defaultdict(list)
    for e in data.evaluations:
        if e.problem == problem:
            by_gen[e.generation].append(e)
    logbook = [e for e in _logbook_entries(data, problem) if isinstance(e.get("gen"), int)]
    if not by_gen:
        return [(e["gen"], float(e["best_speedup"]), e.get("best_percent_of_peak")) for e in logbook
                if e.get("best_speedup") is not None]
    out: list[tuple[int, float, float | None]] = []
    best: EvaluationLine | None = None
    # A generation whose children were all duplicates logs no evaluation but still counts.
    for gen in sorted(set(by_gen) | {e["gen"] for e in logbook}):
        for e in by_gen.get(gen, ()):
            if _valid(e) and (best is None or e.result.speedup > best.result.speedup):
                best = e
        if best is not None:
            out.append((gen, best.result.speedup, best.result.percent_of_peak))
    return out


def lineage(best: Kernel, index: dict[tuple[str, str], Kernel]) -> tuple[list[Kernel], list[Kernel]]:
    """(chain, ancestors) of a kernel. The chain runs from the oldest ancestor to the kernel,
    following at each step the fastest parent (the one a memory entry compares against);
    ancestors are every kernel reachable through parent ids, the kernel included."""
    chain, seen = [best], {best.id}
    current = best
    while True:
        parents = [index[(best.problem, p)] for p in current.parent_ids if (best.problem, p) in index]
        parents = [p for p in parents if p.id not in seen]
        if not parents:
            break
        current = max(parents, key=lambda k: k.speedup if k.speedup is not None else -1.0)
        chain.append(current)
        seen.add(current.id)
    ancestors, todo, visited = [], [best], {best.id}
    while todo:
        k = todo.pop()
        ancestors.append(k)
        for pid in k.parent_ids:
            parent = index.get((best.problem, pid))
            if parent is not None and pid not in visited:
                visited.add(pid)
                todo.append(parent)
    return chain[::-1], ancestors


def run_label(data: RunData, problem: str | None = None) -> str:
    """Where the run's figures (of one problem, or of all) come from: "simulated estimate for trn1"."""
    labels = sorted({figure_label(e.result.backend, e.result.target, e.result.calibration, e.result.instance_type)
                     for e in data.evaluations if _valid(e) and problem in (None, e.problem)})
    if not labels:
        target = data.setting("evaluation", "target", "")
        return figure_label(data.setting("evaluation", "backend", ""), target)
    return "; ".join(labels)


def geomean(values: Iterable[float]) -> float | None:
    vs = [v for v in values if v > 0]
    return math.exp(sum(map(math.log, vs)) / len(vs)) if vs else None


def paper_shape(data: RunData, problem: str) -> bool | None:
    """Whether the problem ran at the paper's shape (None: cannot tell)."""
    info = data.checkpoint.problems.get(problem) if data.checkpoint else None
    spec = info.spec if info is not None else None
    if not spec:
        return data.setting("run", "shape") == "paper" if data.settings else None
    if spec.get("suite_dir"):
        return True  # the official NKIBench layout has only the paper's cases
    from nkibench import registry

    try:
        return registry.make_spec(problem, "paper").param_dict == spec.get("params")
    except registry.ProblemError:
        return None


# --------------------------------------------------------------------------------------------
# Markdown.


def _f(value: float | None, fmt: str, unit: str = "") -> str:
    return "n/a" if value is None else f"{value:{fmt}}{unit}"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return lines


def _no_html(text: str) -> str:
    """`text` that no Markdown viewer renders as HTML: tags and entities spelled out."""
    return text.replace("&", "&amp;").replace("<", "&lt;")


def _fence(text: str, lang: str = "") -> list[str]:
    ticks = "````" if "```" in text else "```"
    return [f"{ticks}{lang}", text.rstrip("\n"), ticks]


def kernel_source(folder: RunFolder, kernel_id: str, problem: str | None = None) -> str | None:
    """A kernel's source (kernels/<id>.py; for a problem's best kernel best/<problem>.py when that is
    missing), None when the run folder lacks it or holds another kernel under its name (a file
    is that kernel's only when its content hashes to the id)."""
    try:
        return folder.read_kernel(kernel_id)
    except UserError:
        pass
    if problem:
        try:
            source = (folder.best / f"{problem}.py").read_text()
        except (OSError, UnicodeDecodeError):
            return None
        return source if kernel_id_of(source) == kernel_id else None
    return None


@dataclass
class Plots:
    """The plot files written (name -> path relative to the report) and what could not be drawn."""

    files: dict[str, str] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)

    def embed(self, name: str, alt: str) -> list[str]:
        if name in self.files:
            return [f"![{alt}]({self.files[name]})", ""]
        return [f"*No plot of {alt}: {self.missing.get(name, 'no data')}.*", ""]


def _draw(plots: Plots, name: str, folder: RunFolder, why_not: str | None, draw: Callable[[Path], Path]) -> None:
    if why_not:
        plots.missing[name] = why_not
        return
    path = folder.plots / f"{name}.png"
    try:
        draw(path)
    except Exception as exc:  # a figure must never cost the rest of the report
        plots.missing[name] = f"drawing failed ({type(exc).__name__}: {exc})"
        return
    plots.files[name] = path.relative_to(folder.root).as_posix()


def _file_name(problem: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in problem)


def draw_plots(data: RunData, index: dict[tuple[str, str], Kernel]) -> Plots:
    """Every figure the data allows, under plots/."""
    from . import plots as P

    folder, label, plots = data.folder, run_label(data), Plots()
    names = problems(data)
    if folder.plots.is_dir():  # a fresh set: no stale figure of an earlier report survives
        for old in folder.plots.glob("*.png"):
            old.unlink()
    series = {n: best_series(data, n) for n in names}

    late = [e.generation for e in data.evaluations if e.generation > data.last_generation]
    pending = min(late) if late else None
    speed = {n: [(g, s) for g, s, _ in pts] for n, pts in series.items()}
    _draw(plots, "best_speedup", folder, None if any(speed.values()) else "no correct kernel evaluated yet",
          lambda p: P.line_per_problem(speed, title=f"Best kernel so far ({label})",
                                       ylabel="speedup over the baseline (×)", path=p, reference=1.0,
                                       reference_label="baseline", pending_from=pending))
    peak = {n: [(g, v) for g, _, v in pts if v is not None] for n, pts in series.items()}
    _draw(plots, "percent_of_peak", folder, None if any(peak.values()) else "% of peak unknown",
          lambda p: P.line_per_problem(peak, title=f"% of peak of the best kernel so far ({label})",
                                       ylabel="% of peak throughput (roofline)", path=p,
                                       pending_from=pending, percent=True))
    dist = {n: data.population.get(n, {}) for n in names}
    _draw(plots, "fitness_distribution", folder,
          None if any(any(v.values()) for v in dist.values()) else "no readable checkpoint",
          lambda p: P.fitness_distribution(dist, title=f"Population speedups after each generation ({label})",
                                           ylabel="speedup (×)", path=p))

    fresh = [e for e in data.evaluations if not e.reused]
    by_gen: dict[int, Counter] = defaultdict(Counter)
    by_op: dict[str, Counter] = defaultdict(Counter)
    for e in fresh:
        by_gen[e.generation][e.result.status] += 1
        by_op[e.operator][e.result.status] += 1
    for entry in _logbook_entries(data):
        if isinstance(entry.get("gen"), int):
            by_gen[entry["gen"]][NO_KERNEL] += entry.get("failed_ops", 0)  # every logged generation gets a bar
    statuses = [*STATUSES, NO_KERNEL]
    gens = dict(sorted(by_gen.items()))
    _draw(plots, "outcomes_by_generation", folder, None if gens else "no evaluation logged",
          lambda p: P.stacked_bars(gens, categories=statuses, title="Outcomes of the offspring per generation",
                                   xlabel="generation", ylabel="kernels (count)", path=p, colors=P.STATUS_COLORS,
                                   legend_title="outcome"))
    ops = dict(sorted(by_op.items()))
    _draw(plots, "outcomes_by_operator", folder, None if ops else "no evaluation logged",
          lambda p: P.stacked_bars(ops, categories=statuses, title="Outcomes of the evaluations per operator",
                                   xlabel="operator", ylabel="kernels evaluated (count)", path=p,
                                   colors=P.STATUS_COLORS, horizontal=True, legend_title="outcome"))

    no_llm = ("no LLM call: the run used offline operators only" if data.offline else "no LLM call logged")
    calls = [c for c in data.llm_calls if c.generation >= 0]
    roles = sorted({c.role for c in calls})
    tokens: dict[int, Counter] = defaultdict(Counter)
    cost: dict[int, Counter] = defaultdict(Counter)
    for c in calls:
        tokens[c.generation][c.role] += c.tokens
        cost[c.generation][c.role] += c.cost_usd
    tokens, cost = dict(sorted(tokens.items())), dict(sorted(cost.items()))
    llm_missing = no_llm if not data.llm_calls else (None if calls else "the LLM calls carry no generation")
    _draw(plots, "llm_tokens", folder, llm_missing,
          lambda p: P.stacked_bars(tokens, categories=roles, title="LLM tokens per generation (billed calls)",
                                   xlabel="generation", ylabel="tokens (prompt + completion)", path=p,
                                   legend_title="role", value_format="{x:,.0f}"))
    most = max((sum(c.values()) for c in cost.values()), default=0.0)
    usd = "${x:,.2f}" if most >= 1 else "${x:,.4f}"
    no_cost = llm_missing or (None if any(sum(c.values()) for c in cost.values())
                              else "every call cost $0 (no prices configured, or only cached calls)")
    _draw(plots, "llm_cost", folder, no_cost,
          lambda p: P.stacked_bars(cost, categories=roles, title="LLM cost per generation", xlabel="generation",
                                   ylabel="cost (USD)", path=p, legend_title="role", value_format=usd))

    for name in names:
        best = best_kernel(data, name)
        key = f"lineage_{_file_name(name)}"
        if best is None:
            plots.missing[key] = "no correct kernel"
            continue
        chain, _ = lineage(best, index)
        steps = [P.LineageStep(k.id, k.generation, k.speedup, k.operator, _other_parents(k, chain, index))
                 for k in chain]
        _draw(plots, key, folder, None,
              lambda p, steps=steps, name=name: P.lineage(steps, title=f"Lineage of the best {name} kernel ({label})",
                                                          ylabel="speedup over the baseline (×)", path=p))
    return plots


def _other_parents(kernel: Kernel, chain: list[Kernel], index: dict[tuple[str, str], Kernel]) -> tuple[float, ...]:
    """Speedups of a kernel's parents that are not on the chain (the second parent of a crossover)."""
    on_chain = {k.id for k in chain}
    others = [index.get((kernel.problem, p)) for p in kernel.parent_ids if p not in on_chain]
    return tuple(k.speedup for k in others if k is not None and k.speedup is not None)


def _logbook_entries(data: RunData, problem: str | None = None) -> list[dict[str, Any]]:
    """The newest checkpoint's logbook entries (of one problem, or of all)."""
    logbook = data.checkpoint.logbook if data.checkpoint else {}
    return [e for name, entries in logbook.items() if problem is None or name == problem for e in entries]


def _problem_list(data: RunData, names: list[str]) -> str:
    """The run's problems and their shape: the named shape, or with problems of the user's
    own (whose shapes are their reference's constants) each problem's parameters."""
    if not names:
        return "none recorded yet"
    if not data.setting("run", "references") or data.checkpoint is None:
        return f"{', '.join(names)} (shape {data.setting('run', 'shape', '?')})"
    out = []
    for name in names:
        info = data.checkpoint.problems.get(name)
        params = info.spec.get("params") if info is not None else None
        out.append(f"{name} ({', '.join(f'{k}={v}' for k, v in params.items())})" if params else name)
    return ", ".join(out)


def operators_line(data: RunData) -> str:
    """The run's operators in a few words: "auto (LLM gpt-oss-120b)"."""
    ops = data.setting("operators", "kind", "?")
    # a folder written before operators.offline existed ran the declared-knob operators
    searched = data.setting("operators", "offline", DECLARED_KNOBS) != DECLARED_KNOBS
    offline = " (offline: knobs found in the kernels and structural rewrites)" if searched else " (offline knob tuning)"
    return ops + (offline if data.offline else f" (LLM {data.setting('llm', 'model', '') or '?'})")


def _header(data: RunData) -> list[str]:
    names = problems(data)
    gens = data.setting("run", "gens")
    reached = data.last_generation
    progress = (f"generation {reached} of {gens} checkpointed" if reached >= 0 and isinstance(gens, int)
                else f"generation {reached} checkpointed" if reached >= 0 else "no generation checkpointed yet")
    if isinstance(gens, int) and 0 <= reached < gens:
        progress += " (the run is in progress, was stopped by a budget, or was interrupted)"
    elif isinstance(gens, int) and reached > gens:
        progress = f"generation {reached} checkpointed (resumed beyond run.gens = {gens})"
    lines = [f"# Run report: {data.folder.root.name}", "",
             f"- Problems: {_problem_list(data, names)}",
             f"- Progress: {progress}",
             f"- Operators: {operators_line(data)}; seed {data.setting('run', 'seed', '?')}",
             f"- Figures: {run_label(data)}."
             + (" Simulated figures are the project's performance-model estimates for the named target, "
                "not hardware measurements." if "simulated" in run_label(data) else ""), ""]
    lines += ["## Run folder", ""]
    if data.notes:
        lines += ["Missing or damaged (the report shows what the rest allows):", ""]
        lines += [f"- {n}" for n in data.notes]
    else:
        lines += ["Every file of the run folder was read whole."]
    return lines + [""]


def _suite(data: RunData, index: dict[tuple[str, str], Kernel]) -> list[str]:
    lines = ["## Suite summary", ""]
    names = problems(data)
    if not names:
        return lines + ["No problem has data yet.", ""]
    rows, pairs, paper_pairs, off_shape = [], [], [], False
    for name in names:
        base, best = baseline_kernel(data, name, index), best_kernel(data, name)
        paper = PAPER_TRN1.get(name)
        shape_ok = paper_shape(data, name)
        mark = ""
        if paper and shape_ok is False:
            mark, off_shape = " †", True
        label = figure_label(best.backend, best.target) if best else "n/a"
        rows.append([name, _f(base.latency_ms if base else None, ".4f"), _f(best.latency_ms if best else None, ".4f"),
                     _f(best.speedup if best else None, ".3f", "×"),
                     _f(base.percent_of_peak if base else None, ".1f", "%"),
                     _f(best.percent_of_peak if best else None, ".1f", "%"),
                     f"{paper[0]:.0f}% → {paper[1]:.0f}%{mark}" if paper else "not an NKIBench kernel", label])
        if base and best and base.percent_of_peak and best.percent_of_peak:
            pairs.append((base.percent_of_peak, best.percent_of_peak))
            if paper:
                paper_pairs.append(paper)
    lines += _table(["problem", "baseline latency (ms)", "best latency (ms)", "speedup", "baseline % of peak",
                     "best % of peak", "paper trn1: baseline → AccelOpt", "figures"], rows)
    lines.append("")
    if pairs:
        g0, g1 = geomean(p[0] for p in pairs), geomean(p[1] for p in pairs)
        lines.append(f"**Geometric mean % of peak over {len(pairs)} problem(s): {g0:.1f}% → {g1:.1f}%** "
                     f"({run_label(data)}).")
        if paper_pairs:
            p0, p1 = geomean(p[0] for p in paper_pairs), geomean(p[1] for p in paper_pairs)
            lines.append(f"The paper's per-kernel trn1 figures for the {len(paper_pairs)} NKIBench kernel(s) among "
                         f"them give {p0:.1f}% → {p1:.1f}%.")
    else:
        lines.append("Geometric mean % of peak: n/a (no problem has both a baseline and a best % of peak).")
    t1, t2 = PAPER_GEOMEAN["trn1"], PAPER_GEOMEAN["trn2"]
    lines += ["", f"Paper figures: {PAPER_SOURCE}; over all 14 kernels "
              f"the paper reports a geometric mean of {t1[0]}% → {t1[1]}% on trn1 and {t2[0]}% → {t2[1]}% on trn2. "
              f"% of peak is the roofline metric: peak latency (max of HBM, vector and Tensor Engine time for "
              f"the problem's own bytes and FLOPs) over the kernel's latency."]
    if off_shape:
        lines.append(f"† Run at shape '{data.setting('run', 'shape', '?')}', not the paper's: the paper's figures "
                     f"are for scale only.")
    return lines + [""]


def _progress(data: RunData, plots: Plots) -> list[str]:
    lines = ["## Progress", ""]
    lines += plots.embed("best_speedup", "the best speedup per generation")
    lines += plots.embed("percent_of_peak", "the best % of peak per generation")
    lines += plots.embed("fitness_distribution", "the population's fitness per generation")
    return lines


def _evaluations(data: RunData, plots: Plots) -> list[str]:
    lines = ["## Evaluations", ""]
    fresh = [e for e in data.evaluations if not e.reused]
    if not data.evaluations:
        return lines + ["No evaluation logged.", ""]
    counts = Counter(e.result.status for e in fresh)
    reused = len(data.evaluations) - len(fresh)
    seconds = sum(e.result.seconds for e in fresh)
    lines.append(f"{len(fresh)} kernel(s) evaluated ({reused} more produced again and not re-evaluated), "
                 f"{seconds:.1f} s of evaluation time: "
                 + ", ".join(f"{counts[s]} {s}" for s in sorted(counts, key=lambda s: -counts[s])) + ".")
    gen_seconds = sum(e.get("seconds") or 0.0 for e in _logbook_entries(data))
    if gen_seconds:
        lines[-1] += f" Checkpointed generations took {gen_seconds:.1f} s of wall time."
    if counts[NOT_JUDGED]:
        lines[-1] += (f" {counts[NOT_JUDGED]} of them were timed from their shape-only trace and never judged for "
                      "correctness, which decided nothing (not_judged: never selected, never a memory lesson; "
                      "evaluation.cascade = \"latency_first\").")
    lines.append("")
    lines += plots.embed("outcomes_by_generation", "outcomes per generation")
    lines += plots.embed("outcomes_by_operator", "outcomes per operator")
    errors = Counter(e.result.error.splitlines()[0] for e in fresh if not e.result.ok and e.result.error)
    if errors:
        lines += ["Most frequent errors:", ""]
        lines += _table(["count", "first line of the error"], [[str(n), f"`{msg[:160]}`"]
                                                              for msg, n in errors.most_common(5)])
        lines.append("")
    return lines


def diversity(data: RunData) -> dict[str, Any] | None:
    """What `selection.strategy` and `variation.novelty` did, per problem, from the newest
    checkpoint (None for one population without novelty): the islands (each one's members and
    best speedup) and the kernels that migrated, by generation; the MAP-Elites archive (each
    occupied cell of the grid, busiest engine x DMA-share bin, with its elite) and the children
    that took a cell; the children novelty sent back, by generation. The report's "Diversity"
    section and the live page's strategy panel (serve/views.py) show it."""
    strategy = data.setting("selection", "strategy", "mu_plus_lambda")
    novelty = data.setting("variation", "novelty", 0.0)
    if strategy == "mu_plus_lambda" and not novelty:
        return None
    bins = int(data.setting("selection", "dma_bins", 4) or 1)
    ck = data.checkpoint
    out: dict[str, Any] = {"strategy": strategy, "novelty": novelty, "dma_bins": bins,
                           "engines": [*ENGINES, NO_ENGINE], "problems": []}
    for name in problems(data):
        entries = _logbook_entries(data, name)
        if not entries:
            continue
        last = entries[-1]
        population = ck.population.get(name, []) if ck else []
        speedups = {m.id: m.result.speedup if m.result else None for m in population}
        facts: dict[str, Any] = {"name": name, "generation": last.get("gen")}
        if "islands_best" in last:
            members = ck.islands.get(name, []) if ck else []
            facts["islands"] = [{"best": best, "members": [{"id": kid, "speedup": speedups.get(kid)}
                                                           for kid in (members[i] if i < len(members) else [])]}
                                for i, best in enumerate(last["islands_best"])]
            facts["migrations"] = [[e.get("gen"), e["migrated"]] for e in entries if e.get("migrated")]
            facts["migrated"] = sum(n for _, n in facts["migrations"])
        if "archive_cells" in last:
            cells = [(archive.cell(m, bins), m) for m in population]
            facts["archive"] = [{"engine": c[0], "bin": c[1], "id": m.id, "speedup": speedups[m.id]} for c, m in cells]
            facts["archive_cells"] = last["archive_cells"]
            facts["archive_placed"] = sum(e.get("archive_placed", 0) for e in entries)
        if novelty:
            facts["novelty_by_generation"] = [[e.get("gen"), e["novelty_rejected"]] for e in entries
                                              if e.get("novelty_rejected")]
            facts["novelty_rejected"] = sum(n for _, n in facts["novelty_by_generation"])
        out["problems"].append(facts)
    return out


def _diversity(data: RunData) -> list[str]:
    """The "Diversity" section (`diversity`; nothing for one population without novelty)."""
    state = diversity(data)
    if state is None:
        return []
    novelty = state["novelty"]
    lines = ["## Diversity", "", f"Strategy `{state['strategy']}`"
             + (f", novelty threshold {novelty}" if novelty else "") + " (README \"Diversity\").", ""]
    for p in state["problems"]:
        facts = []
        if "islands" in p:
            facts.append(f"{len(p['islands'])} islands, best speedups "
                         + ", ".join(f"{i['best']:.3f}x" for i in p["islands"])
                         + f"; {p['migrated']} kernel(s) migrated")
        if "archive" in p:
            facts.append(f"{p['archive_cells']} archive cell(s) occupied; "
                         f"{p['archive_placed']} child(ren) took a cell")
        if novelty:
            facts.append(f"{p['novelty_rejected']} child(ren) too close to a kernel "
                         "already evaluated, sent back to their operator")
        lines.append(f"- {p['name']}: " + "; ".join(facts) + ".")
    return lines + [""]


def _llm(data: RunData, plots: Plots) -> list[str]:
    lines = ["## LLM use and cost", ""]
    if not data.llm_calls:
        why = ("No LLM call: the run used offline operators only." if data.offline
               else "No LLM call logged (llm_calls.jsonl is missing or empty).")
        return lines + [why, ""]
    by_role: dict[str, list[CallRecord]] = defaultdict(list)
    for c in data.llm_calls:
        by_role[c.role].append(c)
    rows = []
    for role, cs in sorted(by_role.items()):
        rows.append([role, ", ".join(sorted({c.model for c in cs if c.model})) or "?", *_llm_totals(cs)])
    rows.append(["**total**", "", *_llm_totals(data.llm_calls)])
    lines += _table(["role", "model", "calls", "cached", "failed", "prompt tokens", "completion tokens",
                     "cost (USD)"], rows)
    lines += ["", "Cached replies record no tokens and no cost.", ""]
    untagged = sum(c.generation < 0 for c in data.llm_calls)
    if untagged:
        lines += [f"{untagged} call(s) carry no generation and are left out of the per-generation plots.", ""]
    lines += plots.embed("llm_tokens", "LLM tokens per generation")
    lines += plots.embed("llm_cost", "LLM cost per generation")
    return lines


def _llm_totals(calls: Sequence[CallRecord]) -> list[str]:
    """calls, cached, failed, prompt tokens, completion tokens, cost (USD) of some LLM calls."""
    return [str(len(calls)), str(sum(c.cached for c in calls)), str(sum(c.status not in ("ok", "") for c in calls)),
            f"{sum(c.prompt_tokens for c in calls):,}", f"{sum(c.completion_tokens for c in calls):,}",
            f"{sum(c.cost_usd for c in calls):.4f}"]


def _lineage_section(data: RunData, index: dict[tuple[str, str], Kernel], plots: Plots) -> list[str]:
    lines = ["## Lineage of the best kernels", ""]
    names = problems(data)
    if not names:
        return lines + ["No problem has data yet.", ""]
    for name in names:
        lines += [f"### {name}", ""]
        best = best_kernel(data, name)
        if best is None:
            lines += ["No correct kernel yet.", ""]
            continue
        chain, ancestors = lineage(best, index)
        lines += plots.embed(f"lineage_{_file_name(name)}", f"the lineage of the best {name} kernel")
        rows = [[str(k.generation), f"`{k.id}`", k.operator, _f(k.speedup, ".3f", "×"),
                 _f(k.percent_of_peak, ".1f", "%"), k.note or ""] for k in chain]
        lines += _table(["generation", "kernel", "produced by", "speedup", "% of peak", "note"], rows)
        lines += ["", f"{len(chain)} step(s) on the chain through the fastest parent; {len(ancestors)} ancestor "
                  f"kernel(s) in all.", ""]
        if chain[0].operator != "baseline":
            lines += [f"The chain stops at `{chain[0].id}`, whose parents are not recorded "
                      f"(missing evaluations or checkpoints).", ""]
    return lines


def _memory(data: RunData) -> list[str]:
    lines = ["## Optimization memory", ""]
    if not data.memory:
        return lines + ["The memory is empty." if data.folder.memory.is_file() else
                        "No memory recorded (see the run folder notes above).", ""]
    rows = []
    for i, e in enumerate(data.memory, 1):
        first = quoted_rationale(e.rationale, 200).split("\n")[0].removeprefix("> ")
        rows.append([str(i), e.problem, e.kind, _f(e.speedup, ".3f", "×"), str(e.generation), e.operator,
                     _no_html(first)])
    lines += _table(["#", "problem", "kind", "speedup (child / parent)", "generation", "operator",
                     "rationale (first line)"], rows)
    lines += ["", "### Rationales", ""]
    for i, e in enumerate(data.memory, 1):
        # the summarizer's words, quoted and escaped: data, never markup of the report's own
        lines += [f"**{i}. {e.problem}, {e.kind} {_f(e.speedup, '.3f', '×')}** "
                  f"(`{e.parent_id}` → `{e.child_id}`)", "",
                  _no_html(quoted_rationale(e.rationale, RATIONALE_CHARS)), ""]
        if e.diff:
            lines += ["<details><summary>diff</summary>", "", *_fence(e.diff, "diff"), "", "</details>", ""]
    return lines


def _hot_lines(kernel: Kernel, source: str) -> list[str]:
    """The kernel's hot lines as the prompts show them (a list, then a blank line); [] when
    its profile has none or a damaged record."""
    text = hotlines.describe(kernel.hot_lines, source, kernel.figures)
    if not text:
        return []
    head, *rows = text
    return [head[0].upper() + head[1:] + ":", "", *(f"- {_no_html(row)}" for row in rows), ""]


def _best_kernels(data: RunData, index: dict[tuple[str, str], Kernel]) -> list[str]:
    lines = ["## Best kernels", ""]
    names = problems(data)
    if not names:
        return lines + ["No problem has data yet.", ""]
    for name in names:
        lines += [f"### {name}", ""]
        best, base = best_kernel(data, name), baseline_kernel(data, name, index)
        if best is None:
            lines += ["No correct kernel yet.", ""]
            continue
        lines += [f"Kernel `{best.id}` ({best.operator}, generation {best.generation}): "
                  f"{_f(best.speedup, '.3f', '×')} over the baseline, {_f(best.latency_ms, '.4f', ' ms')}, "
                  f"{_f(best.percent_of_peak, '.1f', '% of peak')} ({figure_label(best.backend, best.target)}). "
                  f"File: `best/{name}.py`.", ""]
        new = kernel_source(data.folder, best.id, name)
        lines += _hot_lines(best, new or "")
        old = kernel_source(data.folder, base.id) if base else None
        if new is None or old is None:
            missing = [what for what, src in (("best", new), ("baseline", old)) if src is None]
            lines += [f"No diff: the source of the {' and '.join(missing)} kernel is missing from the run folder.", ""]
        elif base is not None and base.id == best.id:
            lines += ["The best kernel is still the baseline.", ""]
        else:
            diff = "\n".join(difflib.unified_diff(old.splitlines(), new.splitlines(), f"baseline/{name}.py",
                                                  f"best/{name}.py", lineterm=""))
            lines += [*_fence(diff, "diff"), ""]
    return lines


def render(data: RunData, plots: Plots, index: dict[tuple[str, str], Kernel] | None = None) -> str:
    """report.md for the data and the plots drawn."""
    index = kernel_index(data) if index is None else index
    parts = [_header(data), _suite(data, index), _progress(data, plots), _evaluations(data, plots),
             _diversity(data), _llm(data, plots), _lineage_section(data, index, plots), _memory(data), _best_kernels(data, index)]
    return "\n".join(line for part in parts for line in part).rstrip("\n") + "\n"


def write_report(folder: RunFolder) -> Path:
    """Write RUN_DIR/report.md and RUN_DIR/plots/*.png; return the report's path."""
    data = collect(folder)
    index = kernel_index(data)
    plots = draw_plots(data, index)
    write_text_atomic(folder.report, render(data, plots, index))
    return folder.report
