"""A user's calibration of the performance model: the file format, where it is looked for,
and the parameters it gives.

`python -m accelopt_evo calibrate` fits the model's parameters to a user's measurements
(calibrate.py) and writes them here; `evaluation.calibration` picks what the simulator uses:
"auto" (default) the per-user file of the run's target when there is one, else the shipped
parameters (params.for_target); "shipped" the shipped parameters; anything else a file path.
The per-user files live in `$XDG_CONFIG_HOME/accelopt-evo/` (default `~/.config/accelopt-evo/`),
`calibration-<target>.json`.

File (JSON, one object): schema, target, params (name -> value, every fitted parameter),
folds (family -> params fitted without that family, for leave-one-out checks; may be empty),
trained_on (case name -> fingerprint of its measured data), summary (median / max relative
latency error and Spearman of the held-out or in-sample predictions, and which), sources (the
measurement files).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from .hardware import TARGETS
from .params import DOCUMENTED, Params

SCHEMA = 1
AUTO, SHIPPED = "auto", "shipped"
_NAMES = {f.name for f in dataclasses.fields(Params)}


class CalibrationError(ValueError):
    """A calibration file that cannot be used; the message is one line naming it."""


@dataclass(frozen=True)
class Calibration:
    target: str
    params: dict[str, float]
    folds: dict[str, dict[str, float]] = field(default_factory=dict)
    trained_on: dict[str, str] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)
    sources: tuple[str, ...] = ()
    path: str = ""          # where it was read from ("" until written or read)

    @property
    def label(self) -> str:
        """How figures made with it are named: 'user-calibrated (calibration-trn2.json)'."""
        return f"user-calibrated ({Path(self.path).name or 'unsaved'})"

    @property
    def digest(self) -> str:
        """Identifies the parameters (cache keys of results made with them)."""
        return hashlib.sha256(json.dumps([self.target, self.params], sort_keys=True).encode()).hexdigest()[:16]

    def model_params(self) -> Params:
        return DOCUMENTED.replace(**self.params)

    def fold(self, family: str) -> Params | None:
        values = self.folds.get(family)
        return None if values is None else DOCUMENTED.replace(**values)

    def to_dict(self) -> dict[str, Any]:
        """The file's JSON object (`from_dict` reads it back)."""
        return {"schema": SCHEMA, "target": self.target, "params": self.params, "folds": self.folds,
                "trained_on": self.trained_on, "summary": self.summary, "sources": list(self.sources)}


def default_path(target: str, environ: Mapping[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    root = Path(env.get("XDG_CONFIG_HOME") or Path(env.get("HOME", "~")).expanduser() / ".config")
    return root / "accelopt-evo" / f"calibration-{target}.json"


def write(path: str | Path, cal: Calibration) -> Calibration:
    """Write `cal` atomically; returns it with its path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(cal.to_dict(), indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path)
    return dataclasses.replace(cal, path=str(path))


def _params(where: str, values: Any) -> dict[str, float]:
    if not isinstance(values, dict) or not values:
        raise CalibrationError(f"{where} is not an object of parameter values")
    unknown = sorted(set(values) - _NAMES)
    if unknown:
        raise CalibrationError(f"{where} names unknown model parameter '{unknown[0]}'")
    bad = [k for k, v in values.items() if isinstance(v, bool) or not isinstance(v, (int, float))]
    if bad:
        raise CalibrationError(f"{where}: parameter '{bad[0]}' is not a number")
    return dict(values)


def read(path: str | Path) -> Calibration:
    """The calibration in `path`; CalibrationError (one line) for anything unusable."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise CalibrationError(f"cannot read calibration file '{path}': {exc.strerror or exc}") from None
    except ValueError as exc:
        raise CalibrationError(f"calibration file '{path}' is not JSON: {exc}") from None
    return from_dict(data, str(path))


def from_dict(data: Any, path: str = "") -> Calibration:
    """A calibration from its JSON object (as `to_dict` gives it); `path` names it."""
    where = f"calibration file '{path}'" if path else "calibration"
    if not isinstance(data, dict):
        raise CalibrationError(f"{where} is not a JSON object")
    if data.get("schema") != SCHEMA:
        raise CalibrationError(f"{where} has schema {data.get('schema')!r}; this release reads schema {SCHEMA}")
    if data.get("target") not in TARGETS:
        raise CalibrationError(f"{where}: target {data.get('target')!r} is not one of {', '.join(TARGETS)}")
    folds = data.get("folds") or {}
    if not isinstance(folds, dict):
        raise CalibrationError(f"{where}: folds is not an object")
    return Calibration(str(data["target"]), _params(f"{where}: params", data.get("params")),
                       {str(k): _params(f"{where}: fold '{k}'", v) for k, v in folds.items()},
                       {str(k): str(v) for k, v in (data.get("trained_on") or {}).items()},
                       dict(data.get("summary") or {}), tuple(str(s) for s in data.get("sources") or ()), path)


def resolve(setting: str, target: str, environ: Mapping[str, str] | None = None) -> Calibration | None:
    """The calibration `evaluation.calibration` = `setting` selects for `target` (None: the
    shipped parameters). A file for another target is an error."""
    if setting in ("", SHIPPED):
        return None
    if setting == AUTO:
        path = default_path(target, environ)
        if not path.is_file():
            return None
    else:
        path = Path(setting).expanduser()
    cal = read(path)
    if cal.target != target:
        raise CalibrationError(f"calibration file '{path}' is for {cal.target}, not for the run's target {target}")
    return cal
