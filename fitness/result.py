"""EvalResult: what one evaluation of one kernel on one problem produced."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fitness.simulator.dialect import Dialect

OK = "ok"
REJECTED = "rejected"              # the static policy refused the source
COMPILE_ERROR = "compile_error"    # it does not import/trace: syntax, NKI rule violations
INCORRECT = "incorrect"            # it ran, but an output failed the correctness gate
TIMEOUT = "timeout"                # the wall-clock limit of the sandbox was hit
MEMORY_EXCEEDED = "memory_exceeded"
CRASHED = "crashed"                # the worker died (signal, internal error)
# Correct, but the simulator's estimate is below the problem's roofline bound: the model
# priced the kernel at less than the work no correct kernel avoids (never selectable).
MODEL_ERROR = "model_error"
# Traced and timed (latency, profile and speedup are known), correctness never computed: a
# search's cascade did not need it (never selectable, never a memory lesson).
NOT_JUDGED = "not_judged"

STATUSES = (OK, REJECTED, COMPILE_ERROR, INCORRECT, TIMEOUT, MEMORY_EXCEEDED, CRASHED, MODEL_ERROR, NOT_JUDGED)
# Where an evaluation ran: evaluations.jsonl records it; cache entries and checkpoints leave it
# out, so that they do not depend on the executor (local or Ray) or on the machine.
PLACEMENT = ("worker", "host")
_OPTIONAL = ("dialect", "sdk_version", "instance_type", "calibration", "errors", *PLACEMENT)   # left out of to_dict when unset


@dataclass
class EvalResult:
    status: str
    error: str = ""                       # the message a user would want ("" when ok)
    latency_ms: float | None = None
    profile: dict[str, Any] = field(default_factory=dict)   # neuron-profile metric names
    speedup: float | None = None          # baseline latency / latency, same backend and target
    percent_of_peak: float | None = None  # roofline peak latency / latency * 100 (None: unknown)
    backend: str = ""
    target: str = ""
    seconds: float = 0.0                  # wall time of the evaluation
    cached: bool = False
    kernel_id: str = ""
    problem: str = ""
    dialect: "Dialect | None" = None      # the NKI dialect the source imports (None: not decided, e.g. both)
    # Hardware results: the Neuron SDK and the instance type that measured them (host-detected).
    sdk_version: str = ""
    instance_type: str = ""
    # Simulator results from a user calibration: the calibration file's label ("" = shipped).
    calibration: str = ""
    # Where it ran: the worker ("slot 2", "core 3", "ray worker 1a2b3c4d core 3") and its host name
    # ("" for cached results and verdicts of the engine process alone).
    worker: str = ""
    host: str = ""
    # The L2 relative error of each output on each seed of the judgement, in seed order (ok
    # results): a baseline's are the yardstick the other kernels of its problem are judged by.
    errors: list[list[float]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"unknown evaluation status {self.status!r}")

    @property
    def ok(self) -> bool:
        return self.status == OK

    @property
    def traced(self) -> bool:
        """Whether the kernel passed the shape-only stage (its latency is known), whatever its
        correctness: the children that enter a search's survivor tournaments."""
        return self.latency_ms is not None

    def to_dict(self, placement: bool = True) -> dict[str, Any]:
        """The fields as a dict; an undecided dialect and empty hardware / calibration /
        placement fields are left out, as in records written before results had them (so that a
        resumed old run writes the records it wrote). placement=False leaves out where it ran
        (cache entries, checkpoints)."""
        data = dataclasses.asdict(self)
        for name in _OPTIONAL:
            if data[name] in (None, "", []) or (not placement and name in PLACEMENT):
                del data[name]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "EvalResult":
        """The result of `to_dict`'s form (other keys are ignored); ValueError naming the field
        when a field has the wrong type or range, or the fields disagree with the status
        (`check`): a result read back is believed no more than a fresh one."""
        if not isinstance(data, dict):
            raise ValueError(f"a result is a JSON object, not {type(data).__name__}")
        names = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in names}
        if "status" not in values:
            raise ValueError("status: missing")
        for name, value in values.items():
            why = _field_problem(name, value)
            if why:
                raise ValueError(f"{name}: {why} (got {_shown(value)})")
        result = cls(**values)
        result.check()
        return result

    def check(self) -> None:
        """ValueError when the fields disagree with the status: a timed status without a
        latency, a speedup or percent of peak without one, errors on a result that is not ok."""
        if self.status in (OK, NOT_JUDGED, MODEL_ERROR) and self.latency_ms is None:
            raise ValueError(f"latency_ms: missing, and a {self.status} result has one")
        if self.latency_ms is None and (self.speedup is not None or self.percent_of_peak is not None):
            raise ValueError("speedup: set on a result without a latency")
        if self.errors and self.status != OK:
            raise ValueError(f"errors: set on a {self.status} result (only ok results have judged errors)")


_STRINGS = ("error", "backend", "target", "kernel_id", "problem", "sdk_version", "instance_type", "calibration",
            "worker", "host")
_DIALECTS = (None, "legacy", "current")


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _field_problem(name: str, value: Any) -> str:
    """Why `value` cannot be the field `name` of a result ("" when it can)."""
    if name == "status":
        return "" if value in STATUSES else f"one of {', '.join(STATUSES)}"
    if name in _STRINGS:
        return "" if isinstance(value, str) else "a string"
    if name == "latency_ms":
        return "" if value is None or (_number(value) and value > 0) else "a positive number or null"
    if name == "speedup":
        return "" if value is None or (_number(value) and value > 0) else "a positive number or null"
    if name == "percent_of_peak":
        return "" if value is None or (_number(value) and value >= 0) else "a number >= 0 or null"
    if name == "seconds":
        return "" if _number(value) and value >= 0 else "a number >= 0"
    if name == "cached":
        return "" if isinstance(value, bool) else "true or false"
    if name == "dialect":
        return "" if value in _DIALECTS else "legacy, current or null"
    if name == "profile":
        if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
            return "an object of counters"
        bad = [k for k, v in value.items() if not (v is None or isinstance(v, (str, bool)) or _number(v))]
        return f"counter {bad[0]!r} is not a number or a string" if bad else ""
    if name == "errors":
        ok = isinstance(value, list) and all(isinstance(row, list) and all(_number(e) and e >= 0 for e in row)
                                             for row in value)
        return "" if ok else "a list of lists of numbers >= 0 (per seed, per output)"
    return ""


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."