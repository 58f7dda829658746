"""The formats of the run folder (DESIGN.md "Run folder"): one typed record per format, each
with `to_json` / `from_json`, and the readers and writers of the files that hold them.

  checkpoints/gen-NNNN.json   Checkpoint (kernels in it: KernelMeta; memory: MemoryEntry)
  evaluations.jsonl           EvaluationLine, one a line
  llm_calls.jsonl             operators.llm.ledger.CallRecord, one a line (the LLM operators
                              write it, and the dependency rule keeps its type there)
  memory.json                 MemoryFile
  heldout.json                HeldoutSeeds (mode 0600; nothing a kernel or a prompt sees)

Every file written carries `schema` (SCHEMA). Files of the release before schemas read as
schema 1 (a checkpoint then says `"version": 1`, a line says nothing); a file with a newer
schema than this code knows is a UserError naming the file and its version. Engine, runner
and report read and write the run folder through this module only.
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Generic, TypeVar

import numpy as np

from accelopt_evo.errors import UserError
from fitness.result import EvalResult
from fitness.seal import Seal
from fitness.simulator.perf.hardware import HARDWARE

from .files import append_line, write_json_atomic, write_text_atomic

if TYPE_CHECKING:
    from operators.llm.ledger import CallRecord

SCHEMA = 3                 # 3: checkpoints sealed (fitness.seal), every field checked on read
LEGACY_SCHEMA = 1          # files written before records carried a schema
SEALED_SCHEMA = 3          # the first schema whose checkpoints carry a seal
# Settings that did not exist when schema-1 checkpoints hashed their configuration.
SETTINGS_SINCE_SCHEMA_2 = ("evaluation.heldout",)

T = TypeVar("T")
IMPROVEMENT, REGRESSION = "improvement", "regression"
MEMORY_KINDS = (IMPROVEMENT, REGRESSION)           # a memory entry's kind
HELDOUT_MODES = ("secret", "derived")             # how held-out seeds are made (evaluation.heldout)


class RecordError(ValueError):
    """A record that is not whole (damaged or incomplete); readers skip or report it."""


def figure_label(backend: str, target: str, calibration: str = "", instance_type: str = "") -> str:
    """How a figure was obtained, as every output states it next to a number. `calibration`
    names a user calibration the simulator used ("" = shipped parameters); `instance_type`
    the instance that measured a hardware figure."""
    known = HARDWARE.get(target)
    target = target or "an unknown target"
    if backend == "simulator":
        if calibration:
            return f"simulated estimate for {target}, {calibration}"
        # every figure of an uncalibrated target says so where it is shown
        return f"simulated estimate for {target}" + (", uncalibrated" if known and not known.calibrated else "")
    if backend == "trainium":
        return f"measured on {target} hardware" + (f" ({instance_type})" if instance_type else "")
    return f"{backend or 'unknown'} backend, target {target}"


# --------------------------------------------------------------------------------------------
# Field access with the type a format promises.


def _need(data: Any, key: str, kind: type | tuple[type, ...], default: Any = ...) -> Any:
    if not isinstance(data, dict):
        raise RecordError("not a JSON object")
    if key not in data:
        if default is ...:
            raise RecordError(f"no {key}")
        return default
    value = data[key]
    if isinstance(value, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,)):
        raise RecordError(f"{key} is {value!r}")
    if not isinstance(value, kind):
        raise RecordError(f"{key} is {value!r}")
    return value


KERNEL_ID = re.compile(r"^[0-9a-f]{16}$")   # fitness.correctness.normalize.kernel_id: 16 hex digits of a sha256


def kernel_id_field(value: Any, key: str) -> str:
    """`value` when it can be a kernel id (also a file name in kernels/: nothing else is)."""
    if not isinstance(value, str) or not KERNEL_ID.match(value):
        raise RecordError(f"{key} is {_shown(value)}, not a kernel id (16 hex digits)")
    return value


def _id(data: Any, key: str) -> str:
    return kernel_id_field(_need(data, key, str), key)


def _ids(data: dict[str, Any], key: str) -> tuple[str, ...]:
    value = _need(data, key, list, [])
    return tuple(kernel_id_field(v, f"{key}[{i}]") for i, v in enumerate(value))


def _count(data: Any, key: str, default: Any = ...) -> int:
    """An integer field >= 0."""
    value = _need(data, key, int, default)
    if value < 0:
        raise RecordError(f"{key} is {value!r}, below 0")
    return value


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def result_from_json(data: Any) -> EvalResult:
    """An EvalResult from its JSON object, checked as a fresh one would be (types, ranges, the
    fields its status implies); non-finite numbers read as unknown."""
    if not isinstance(data, dict):
        raise RecordError("result is not a JSON object")
    clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in data.items()}
    try:
        result = EvalResult.from_dict(clean)
    except (TypeError, ValueError) as exc:
        raise RecordError(f"result.{exc}") from None
    if result.kernel_id:
        kernel_id_field(result.kernel_id, "result.kernel_id")
    return result


def schema_of(data: dict[str, Any], where: str, newest: int = SCHEMA, key: str = "schema") -> int:
    """The schema of a file's record; UserError when it is newer than this code reads."""
    version = data.get(key, LEGACY_SCHEMA)
    if not isinstance(version, int) or isinstance(version, bool):
        raise RecordError(f"{key} is {version!r}")
    if version > newest:
        raise UserError(f"{where} has schema {version}, newer than this release reads ({newest}); "
                        f"use a newer accelopt-evo")
    return version


# --------------------------------------------------------------------------------------------
# Records.


@dataclass(frozen=True)
class KernelMeta:
    """A kernel as checkpoints keep it: everything but the source (kernels/<id>.py)."""

    id: str
    parent_ids: tuple[str, ...] = ()
    operator: str = "baseline"
    generation: int = 0
    note: str = ""
    result: EvalResult | None = None

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "parent_ids": list(self.parent_ids), "operator": self.operator,
                "generation": self.generation, "note": self.note,
                "result": self.result.to_dict(placement=False) if self.result else None}

    @classmethod
    def from_json(cls, data: Any) -> "KernelMeta":
        result = _need(data, "result", (dict, type(None)), None)
        meta = cls(_id(data, "id"), _ids(data, "parent_ids"), _need(data, "operator", str, ""),
                   _count(data, "generation", 0), _need(data, "note", str, ""),
                   result_from_json(result) if result is not None else None)
        if meta.result is not None and meta.result.kernel_id not in ("", meta.id):
            raise RecordError(f"result.kernel_id is {meta.result.kernel_id!r}, not the kernel's id {meta.id!r}")
        return meta


@dataclass(frozen=True)
class EvaluationLine:
    """One line of evaluations.jsonl: an evaluation and the kernel's place in the run."""

    generation: int
    problem: str
    kernel_id: str
    operator: str
    parent_ids: tuple[str, ...]
    reused: bool                      # an identical kernel was evaluated earlier in the run
    result: EvalResult
    note: str = ""                    # what the operator did (absent from lines of earlier releases)
    # The kernel's behaviour descriptors (accelopt_evo/search/descriptors.py; absent from lines of
    # earlier releases and from results without a profile)
    descriptors: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        d = self.result.to_dict()
        d.update(schema=SCHEMA, generation=self.generation, problem=self.problem, kernel_id=self.kernel_id,
                 operator=self.operator, parent_ids=list(self.parent_ids), reused=self.reused)
        if self.note:
            d["note"] = self.note
        if self.descriptors:
            d["descriptors"] = dict(self.descriptors)
        return d

    @classmethod
    def from_json(cls, data: Any) -> "EvaluationLine":
        return cls(_count(data, "generation"), _need(data, "problem", str), _id(data, "kernel_id"),
                   _need(data, "operator", str, "") or "?", _ids(data, "parent_ids"),
                   bool(_need(data, "reused", bool, False)), result_from_json(data), _need(data, "note", str, ""),
                   _need(data, "descriptors", dict, {}))

    def kernel(self) -> KernelMeta:
        return KernelMeta(self.kernel_id, self.parent_ids, self.operator, self.generation, self.note, self.result)


@dataclass
class MemoryEntry:
    """One entry of the optimization memory: a parent -> child pair with its rationale."""

    problem: str
    parent_id: str
    child_id: str
    speedup: float          # child speedup / parent speedup
    rationale: str
    diff: str
    generation: int
    kind: str               # "improvement" or "regression"
    operator: str = ""
    # The rationale was written for child -> parent, slow -> fast (a regression summarized as the
    # improvement of undoing it, memory.policy "accelopt"); in the JSON only when set, so entries
    # of earlier releases read and write as they were.
    reversed: bool = False

    def to_json(self) -> dict[str, Any]:
        data = {"problem": self.problem, "parent_id": self.parent_id, "child_id": self.child_id,
                "speedup": self.speedup, "rationale": self.rationale, "diff": self.diff,
                "generation": self.generation, "kind": self.kind, "operator": self.operator}
        return {**data, "reversed": True} if self.reversed else data

    @classmethod
    def from_json(cls, data: Any) -> "MemoryEntry":
        speedup = float(_need(data, "speedup", (int, float)))
        if not math.isfinite(speedup) or speedup <= 0:
            raise RecordError(f"speedup is {speedup!r}")
        kind = _need(data, "kind", str)
        if kind not in MEMORY_KINDS:
            raise RecordError(f"kind is {_shown(kind)}, not one of {', '.join(MEMORY_KINDS)}")
        return cls(_need(data, "problem", str), _id(data, "parent_id"), _id(data, "child_id"),
                   speedup, _need(data, "rationale", str, ""), _need(data, "diff", str, ""),
                   _count(data, "generation", 0), kind, _need(data, "operator", str, ""),
                   _need(data, "reversed", bool, False))


@dataclass(frozen=True)
class MemoryFile:
    """memory.json: the optimization memory of a run (also what `memory.path` seeds from)."""

    entries: tuple[MemoryEntry, ...]

    def to_json(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "entries": [e.to_json() for e in self.entries]}

    @classmethod
    def from_json(cls, data: Any) -> "MemoryFile":
        entries = data.get("entries") if isinstance(data, dict) else data   # schema 1 allowed a bare list
        if not isinstance(entries, list):
            raise RecordError("no list of entries")
        return cls(tuple(MemoryEntry.from_json(e) for e in entries))


@dataclass(frozen=True)
class ProblemInfo:
    """What a checkpoint keeps of one problem: its spec, baseline and every evaluated kernel."""

    spec: dict[str, Any]                   # {"name", "params", "suite_dir"[, "dialect"]}
    baseline_id: str
    known: dict[str, EvalResult]

    def to_json(self) -> dict[str, Any]:
        return {"spec": self.spec, "baseline_id": self.baseline_id,
                "known": {k: r.to_dict(placement=False) for k, r in self.known.items()}}

    @classmethod
    def from_json(cls, data: Any) -> "ProblemInfo":
        known = _need(data, "known", dict, {})
        spec = _need(data, "spec", dict, {})
        _need(spec, "name", str, "")
        _need(spec, "suite_dir", str, "")
        _need(spec, "dialect", str, "")
        params = _need(spec, "params", dict, {})
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in params.values()):
            raise RecordError("spec.params holds a non-integer")
        results = {}
        for k, r in known.items():
            kernel_id_field(k, "known")
            try:
                results[k] = result_from_json(r)
            except RecordError as exc:
                raise RecordError(f"known.{k}.{str(exc).removeprefix('result.')}") from None
        return cls(spec, _id(data, "baseline_id"), results)


@dataclass(frozen=True)
class Checkpoint:
    """checkpoints/gen-NNNN.json: everything a run needs to continue after `generation`."""

    generation: int
    population: dict[str, list[KernelMeta]]
    hall_of_fame: dict[str, list[KernelMeta]]     # best first
    logbook: dict[str, list[dict[str, Any]]]
    memory: list[MemoryEntry]
    random_state: list[Any]                       # random.Random.getstate() as JSON
    numpy_state: dict[str, Any]                   # numpy bit generator state
    problems: dict[str, ProblemInfo]
    config_hash: str = ""
    written: float = 0.0                          # time.time() of writing
    llm_spent: dict[str, Any] = field(default_factory=dict)
    schema: int = SCHEMA
    # selection.strategy "islands": per problem, the kernel ids of each island (all in its
    # population); absent from the JSON of other strategies and of earlier releases.
    islands: dict[str, list[list[str]]] = field(default_factory=dict)
    # Whether the file's seal verified under the reader's key (read_checkpoint): written by
    # this user's tool and not edited since. Not part of the JSON.
    verified: bool = field(default=False, compare=False)

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA, "generation": self.generation,
            "population": {n: [m.to_json() for m in ms] for n, ms in self.population.items()},
            "hall_of_fame": {n: [m.to_json() for m in ms] for n, ms in self.hall_of_fame.items()},
            "logbook": self.logbook, "memory": [e.to_json() for e in self.memory],
            "random_state": self.random_state, "numpy_state": self.numpy_state,
            "problems": {n: p.to_json() for n, p in self.problems.items()},
            "config_hash": self.config_hash, "written": self.written, "llm_spent": self.llm_spent,
            **({"islands": self.islands} if self.islands else {}),
        }

    @classmethod
    def from_json(cls, data: Any) -> "Checkpoint":
        """The checkpoint of a JSON object, every field checked (types, ranges, random states
        a generator accepts) and its parts consistent with each other (every problem has a
        population, a hall of fame, a logbook and a record; islands name members of their
        population). RecordError names the first field that is not."""
        def kernels(key: str) -> dict[str, list[KernelMeta]]:
            section = _need(data, key, dict)
            out = {}
            for name, ms in section.items():
                if not isinstance(ms, list) or not ms:
                    raise RecordError(f"{key}.{name} is not a non-empty list of kernels")
                out[name] = [_within(f"{key}.{name}[{i}]", KernelMeta.from_json, m) for i, m in enumerate(ms)]
            return out

        logbook = _need(data, "logbook", dict)
        for name, entries in logbook.items():
            if not isinstance(entries, list):
                raise RecordError(f"logbook.{name} is not a list")
            for i, entry in enumerate(entries):
                _within(f"logbook.{name}[{i}]", check_logbook_entry, entry)
        schema = data.get("schema", data.get("version", LEGACY_SCHEMA))
        generation = _count(data, "generation")
        memory = [_within(f"memory[{i}]", MemoryEntry.from_json, e) for i, e in enumerate(_need(data, "memory", list, []))]
        problems = {n: _within(f"problems.{n}", ProblemInfo.from_json, p) for n, p in _need(data, "problems", dict).items()}
        written = float(_need(data, "written", (int, float), 0.0))
        if not math.isfinite(written):
            raise RecordError(f"written is {written!r}")
        checkpoint = cls(generation, kernels("population"), kernels("hall_of_fame"), logbook, memory,
                         _random_state(data), _numpy_state(data), problems, _need(data, "config_hash", str, ""),
                         written, _spent(data), schema, _islands(data))
        checkpoint.check()
        return checkpoint

    def check(self) -> None:
        """RecordError when its parts disagree: a problem without its population, hall of
        fame, logbook or record, an island naming a kernel outside its population."""
        names = set(self.population)
        for key, section in (("hall_of_fame", self.hall_of_fame), ("problems", self.problems),
                             ("logbook", self.logbook)):
            missing = sorted(names - set(section)) or sorted(set(section) - names)
            if missing:
                raise RecordError(f"{key} and population name different problems ({missing[0]!r})")
        for name, groups in self.islands.items():
            if name not in names:
                raise RecordError(f"islands.{name} names a problem without a population")
            members = {m.id for m in self.population[name]}
            for group in groups:
                for kid in group:
                    if kid not in members:
                        raise RecordError(f"islands.{name} names {kid!r}, which is not in its population")


def _within(where: str, parse: Callable[[Any], T], data: Any) -> T:
    """`parse(data)`, a RecordError naming `where` in front of the field it names."""
    try:
        return parse(data)
    except RecordError as exc:
        raise RecordError(f"{where}.{exc}" if not str(exc).startswith("not ") else f"{where} is {exc}") from None


def _islands(data: dict[str, Any]) -> dict[str, list[list[str]]]:
    """A checkpoint's islands: per problem, lists of kernel ids."""
    islands = _need(data, "islands", dict, {})
    for name, groups in islands.items():
        if not (isinstance(groups, list) and groups and all(isinstance(g, list) and g for g in groups)):
            raise RecordError(f"islands.{name} is not a list of non-empty lists of kernel ids")
        for group in groups:
            for i, kid in enumerate(group):
                kernel_id_field(kid, f"islands.{name}")
    return islands


def _random_state(data: dict[str, Any]) -> list[Any]:
    """random.Random.getstate() as JSON, checked by the generator itself."""
    state = _need(data, "random_state", list)
    try:
        version, internal, gauss = state
        random.Random().setstate((version, tuple(internal), gauss))
    except (TypeError, ValueError, OverflowError):
        raise RecordError("random_state is not a state of Python's random generator") from None
    return state


def _numpy_state(data: dict[str, Any]) -> dict[str, Any]:
    """A NumPy bit generator state (the engine's PCG64), checked by the generator itself."""
    state = _need(data, "numpy_state", dict)
    try:
        np.random.default_rng(0).bit_generator.state = state
    except (TypeError, ValueError, KeyError, OverflowError):
        raise RecordError("numpy_state is not a state of NumPy's PCG64 generator") from None
    return state


def _spent(data: dict[str, Any]) -> dict[str, Any]:
    """The LLM spend totals (numbers by name; shown, never used to decide)."""
    spent = _need(data, "llm_spent", dict, {})
    for name, value in spent.items():
        if not (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)):
            raise RecordError(f"llm_spent.{name} is {_shown(value)}, not a number")
    return spent


# The types of the logbook fields the engine writes (engine._record_generation, _strategy_entry):
# readers (report, live page, plots) compute with them.
LOGBOOK_FIELDS: dict[str, tuple[type, ...]] = {
    "gen": (int,), "problem": (str,), "best_id": (str,),
    **{k: (int,) for k in ("offspring", "evals", "reused", "valid", "duplicates", "failed_ops", "repaired",
                           "model_errors", "not_judged", "novelty_rejected", "migrated", "archive_cells",
                           "archive_placed")},
    **{k: (int, float) for k in ("best_speedup", "avg", "std", "min", "max", "seconds")},
    **{k: (int, float, type(None)) for k in ("best_latency_ms", "best_percent_of_peak")},
    "islands_best": (list,),
}


def check_logbook_entry(entry: Any) -> dict[str, Any]:
    """A logbook entry whose known fields have their types (other fields are kept as they are)."""
    if not isinstance(entry, dict):
        raise RecordError("not a JSON object")
    _count(entry, "gen")
    for key, kinds in LOGBOOK_FIELDS.items():
        if key in entry:
            value = entry[key]
            if isinstance(value, bool) or not isinstance(value, kinds) or (
                    isinstance(value, float) and not math.isfinite(value)):
                raise RecordError(f"{key} is {_shown(value)}")
    if "islands_best" in entry and not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                           for v in entry["islands_best"]):
        raise RecordError("islands_best holds a non-number")
    return entry


@dataclass(frozen=True)
class HeldoutSeeds:
    """heldout.json: the held-out correctness seeds of a run, kept to reproduce a verdict and
    reused on resume; `mode` says how they were made ("secret": operating-system randomness;
    "derived": from run.seed)."""

    mode: str
    seeds: tuple[int, ...]

    def to_json(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "mode": self.mode, "seeds": list(self.seeds)}

    @classmethod
    def from_json(cls, data: Any) -> "HeldoutSeeds":
        seeds = _need(data, "seeds", list)
        if not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in seeds):
            raise RecordError("seeds holds something other than an integer >= 0")
        if len(set(seeds)) != len(seeds):
            raise RecordError("seeds holds a seed twice")
        mode = _need(data, "mode", str)
        if mode not in HELDOUT_MODES:
            raise RecordError(f"mode is {_shown(mode)}, not one of {', '.join(HELDOUT_MODES)}")
        return cls(mode, tuple(seeds))


# --------------------------------------------------------------------------------------------
# Files.


def _read_json(path: Path, what: str) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise RecordError(f"{what} is not JSON ({exc.msg})") from None


SEAL_KEY = "seal"   # a checkpoint's seal (fitness.seal) of the rest of its JSON


def read_checkpoint(path: Path, seal: Seal | None = None) -> Checkpoint:
    """A checkpoint file; RecordError naming the field when damaged or inconsistent, UserError
    when of a newer schema. `verified` says whether its seal verifies under `seal`."""
    data = _read_json(path, f"checkpoint '{path}'")
    digest = data.pop(SEAL_KEY, None) if isinstance(data, dict) else None
    if isinstance(data, dict):
        schema_of(data, f"checkpoint '{path}'", key="schema" if "schema" in data else "version")
    checkpoint = Checkpoint.from_json(data)
    if seal is not None and seal.verifies(data, digest):
        checkpoint = dataclasses.replace(checkpoint, verified=True)
    return checkpoint


def write_checkpoint(path: Path, checkpoint: Checkpoint, seal: Seal | None = None) -> None:
    """Write the checkpoint atomically, sealed under `seal` when given."""
    data = checkpoint.to_json()
    if seal is not None:
        data[SEAL_KEY] = seal.digest(data)
    write_json_atomic(path, data)


def read_memory_file(path: str | Path) -> MemoryFile:
    """A memory file (a run's memory.json); ValueError saying why when unusable."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"cannot read memory file '{path}': {exc}") from None
    if isinstance(data, dict):
        schema_of(data, f"memory file '{path}'")
    try:
        return MemoryFile.from_json(data)
    except RecordError as exc:
        raise ValueError(f"memory file '{path}' has {exc}") from None


def write_memory_file(path: Path, memory: MemoryFile) -> None:
    write_json_atomic(path, memory.to_json())


def read_heldout(path: Path) -> HeldoutSeeds | None:
    """The held-out seeds recorded in a run folder, or None when it has no record."""
    if not path.is_file():
        return None
    try:
        data = _read_json(path, f"'{path}'")
        schema_of(data if isinstance(data, dict) else {}, f"'{path}'")
        return HeldoutSeeds.from_json(data)
    except RecordError as exc:
        raise UserError(f"'{path}' is damaged ({exc}); the run's held-out seeds are unknown") from None


def write_heldout(path: Path, heldout: HeldoutSeeds) -> None:
    """Write the record readable by its owner only."""
    write_text_atomic(path, json.dumps(heldout.to_json()) + "\n", mode=0o600)


@dataclass
class Lines(Generic[T]):
    """The records of a JSONL file, and what could not be read."""

    records: list[T] = field(default_factory=list)
    torn: bool = False          # the last line is cut short (a kill mid-append)
    unreadable: int = 0         # other lines that are not JSON objects
    incomplete: int = 0         # JSON objects that are not a whole record
    problems: list[str] = field(default_factory=list)   # "line N: why" of the first few of both

    def first_problem(self) -> str:
        return self.problems[0] if self.problems else ""


def read_lines(path: Path, parse: Callable[[Any], T], newest: int = SCHEMA) -> Lines[T]:
    """Every record of a JSONL file (none when it is missing); OSError when unreadable."""
    out: Lines[T] = Lines()
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return out
    _parse_lines(out, text, path, parse, newest)
    return out


def read_new_lines(path: Path, parse: Callable[[Any], T], offset: int = 0,
                   newest: int = SCHEMA) -> tuple[Lines[T], int]:
    """The records of the whole lines a JSONL file holds after byte `offset`, and the offset
    after them, for a reader that follows a file as it is appended to. A last line without its
    newline yet is left for the next read (`torn` says one is there). OSError when unreadable
    (FileNotFoundError when missing)."""
    with path.open("rb") as f:
        f.seek(offset)
        chunk = f.read()
    end = chunk.rfind(b"\n") + 1
    out: Lines[T] = Lines(torn=bool(chunk[end:].strip()))
    _parse_lines(out, chunk[:end].decode("utf-8", errors="replace"), path, parse, newest, after=offset)
    return out, offset + end


def _parse_lines(out: Lines[T], text: str, path: Path, parse: Callable[[Any], T], newest: int,
                 after: int | None = None) -> None:
    """Add the records of `text` (lines of a JSONL file) to `out`. A last line cut short (no
    newline) counts as torn, any other line that is not a JSON object as unreadable."""
    lines = [line for line in text.splitlines() if line.strip()]
    for i, line in enumerate(lines):
        try:
            data = json.loads(line)
        except json.JSONDecodeError:
            data = None
        where = f"line {i + 1}" if after is None else f"a line after byte {after}"
        if not isinstance(data, dict):
            if i == len(lines) - 1 and not text.endswith("\n"):
                out.torn = True
            else:
                out.unreadable += 1
                _note(out, f"{where}: not a JSON object")
            continue
        schema_of(data, f"'{path}' {where}", newest)
        try:
            out.records.append(parse(data))
        except RecordError as exc:
            out.incomplete += 1
            _note(out, f"{where}: {exc}")


def _note(out: Lines[Any], problem: str, most: int = 5) -> None:
    if len(out.problems) < most:
        out.problems.append(problem)


def read_evaluations(path: Path) -> Lines[EvaluationLine]:
    return read_lines(path, EvaluationLine.from_json)


def append_evaluation(path: Path, line: EvaluationLine) -> None:
    append_line(path, json.dumps(line.to_json(), sort_keys=True))


def rewrite_evaluations(path: Path, lines: list[EvaluationLine]) -> None:
    write_text_atomic(path, "".join(json.dumps(e.to_json(), sort_keys=True) + "\n" for e in lines))


def read_new_evaluations(path: Path, offset: int = 0) -> tuple[Lines[EvaluationLine], int]:
    return read_new_lines(path, EvaluationLine.from_json, offset)


def read_llm_calls(path: Path) -> "Lines[CallRecord]":
    parse, newest = _call_parser()
    return read_lines(path, parse, newest)


def read_new_llm_calls(path: Path, offset: int = 0) -> "tuple[Lines[CallRecord], int]":
    parse, newest = _call_parser()
    return read_new_lines(path, parse, offset, newest)


def _call_parser() -> "tuple[Callable[[Any], CallRecord], int]":
    """How a line of llm_calls.jsonl reads (the LLM operators own its type), and its newest schema."""
    from operators.llm.ledger import SCHEMA as LEDGER_SCHEMA, CallRecord

    def parse(data: Any) -> CallRecord:
        try:
            return CallRecord.from_json(data)
        except (TypeError, ValueError) as exc:
            raise RecordError(str(exc)) from None

    return parse, LEDGER_SCHEMA
