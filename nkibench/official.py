"""Problems from a folder in the official NKIBench layout.

The folder holds `summary.json` (problem -> optional `seed` spec + `cases`, each case with
shape `values` and `impls` naming a NumPy reference module `task` and a baseline `kernel`,
paths relative to the folder), the reference modules and the kernels. A reference module
defines `get_inputs()` (drawing from NumPy's global RNG), `forward(*inputs)` and usually
`transform_to_nki_inputs(inputs)` and `transform_nki_outputs(kernel_result, reference_result)`.

The global RNG is the reference module's own convention: it is seeded per evaluation seed
just around `get_inputs()` and restored afterwards, so no other code sees its state change.
Roofline counts come from the built-in problem of the same name and parameters; otherwise
they are unknown (None), never guessed.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from types import ModuleType
from typing import Any, Sequence

import numpy as np

from .families import DERIVED_NAMES, Family
from . import problems as _problems_pkg
from .problem import Counts, Problem, ProblemError, ProblemSpec, as_tuple, reshape_like

DEFAULT_TOLERANCE = 2e-5  # the paper's L2 relative tolerance when no built-in problem says otherwise
REQUIRED_FUNCTIONS = ("get_inputs", "forward")


class SuiteError(ProblemError):
    """A suite folder, summary entry or reference module that cannot be used."""


@dataclass(frozen=True)
class OfficialCase:
    """One case of one problem in `summary.json` (its first impl)."""

    problem: str
    case_id: str
    values: dict[str, int] = field(hash=False)
    task: Path
    kernel: Path


def _summary_path(suite_dir: str | Path) -> Path:
    return Path(suite_dir) / "summary.json"


def _resolve(suite: Path, rel: Any, what: str, where: str) -> Path:
    if not isinstance(rel, str) or not rel:
        raise SuiteError(f"{where}: '{what}' must be a path relative to {suite}, got {rel!r}")
    return (suite / rel).resolve()


def read_summary(suite_dir: str | Path) -> dict[str, list[OfficialCase]]:
    """All problems of a suite folder with their cases, in file order."""
    suite = Path(suite_dir).resolve()
    path = _summary_path(suite)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise SuiteError(f"{path}: not found (a suite folder needs summary.json)") from None
    except (OSError, json.JSONDecodeError) as e:
        raise SuiteError(f"{path}: unreadable: {e}") from None
    if not isinstance(data, dict):
        raise SuiteError(f"{path}: expected an object mapping problem names to entries")
    problems: dict[str, list[OfficialCase]] = {}
    for name, entry in data.items():
        where = f"{path}: problem '{name}'"
        cases = entry.get("cases") if isinstance(entry, dict) else None
        if not isinstance(cases, dict) or not cases:
            raise SuiteError(f"{where} has no 'cases'")
        parsed = []
        for case_id, case in cases.items():
            cwhere = f"{where} case '{case_id}'"
            values = case.get("values") if isinstance(case, dict) else None
            if not isinstance(values, dict) or not all(
                isinstance(v, int) and not isinstance(v, bool) for v in values.values()
            ):
                raise SuiteError(f"{cwhere}: 'values' must map parameter names to integers")
            impls = case.get("impls")
            if not isinstance(impls, list) or not impls or not isinstance(impls[0], dict):
                raise SuiteError(f"{cwhere}: 'impls' must be a non-empty list of {{task, kernel}}")
            impl = impls[0]
            parsed.append(OfficialCase(
                problem=name,
                case_id=str(case_id),
                values=dict(values),
                task=_resolve(suite, impl.get("task"), "task", cwhere),
                kernel=_resolve(suite, impl.get("kernel"), "kernel", cwhere),
            ))
        problems[name] = parsed
    return problems


def official_names(suite_dir: str | Path) -> list[str]:
    return list(read_summary(suite_dir))


def _find_case(suite_dir: str | Path, name: str, params: dict[str, int]) -> OfficialCase:
    problems = read_summary(suite_dir)
    if name not in problems:
        raise SuiteError(f"unknown problem '{name}' in {_summary_path(suite_dir)} "
                         f"(known: {', '.join(problems) or 'none'})")
    cases = problems[name]
    known = sorted({k for c in cases for k in c.values})
    for k in params:
        if k not in known:
            raise SuiteError(f"problem '{name}' in {suite_dir} has no shape parameter '{k}' (known: {', '.join(known)})")
    for case in cases:  # the first case whose values agree with every given parameter
        if all(case.values.get(k) == v for k, v in params.items()):
            return case
    available = "; ".join(", ".join(f"{k}={v}" for k, v in c.values.items()) for c in cases)
    raise SuiteError(f"problem '{name}' in {suite_dir} has no case with {params} (cases: {available})")


def official_spec(suite_dir: str | Path, name: str, params: dict[str, int]) -> ProblemSpec:
    """The spec of problem `name` of a suite folder: the first case matching `params`.

    The folder is stored as an absolute path, so the spec stays valid in a worker process
    running in another directory."""
    case = _find_case(suite_dir, name, params)
    return ProblemSpec.make(name, case.values, str(Path(suite_dir).resolve()))


@lru_cache(maxsize=64)
def import_reference(path: Path) -> ModuleType:
    """Import one reference module from its file without registering it in sys.modules.

    Every failure (missing file, import-time exception, missing function) is a SuiteError
    naming the file."""
    if not path.is_file():
        raise SuiteError(f"reference module {path}: file not found")
    return exec_reference(path, "_nkibench_reference_" + hashlib.sha1(str(path).encode()).hexdigest()[:12])


def exec_reference(path: Path, name: str, code: Any = None, error: type[SuiteError] = SuiteError) -> ModuleType:
    """Execute the reference module of `path` (`code`: its compiled text, default the file's) as
    module `name`, unregistered; `error` names the file for a failed import or a missing
    get_inputs() or forward()."""
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise error(f"reference module {path}: not an importable Python file")
    module = importlib.util.module_from_spec(spec)
    try:
        if code is None:
            spec.loader.exec_module(module)
        else:
            exec(code, module.__dict__)
    except (Exception, SystemExit) as e:
        raise error(f"reference module {path}: import failed: {type(e).__name__}: {e}") from None
    missing = [f for f in REQUIRED_FUNCTIONS if not callable(getattr(module, f, None))]
    if missing:
        raise error(f"reference module {path}: missing function(s) {', '.join(f + '()' for f in missing)}")
    return module


def _builtin_module(name: str, values: dict[str, int]) -> ModuleType | None:
    """The built-in problem module describing the same operator, if names and parameters match."""
    if (not name.isidentifier() or name.startswith("_")
            or importlib.util.find_spec(f"{_problems_pkg.__name__}.{name}") is None):
        return None
    mod = importlib.import_module(f"{_problems_pkg.__name__}.{name}")
    return mod if set(mod.PARAMS) == set(values) else None


@dataclass
class OfficialProblem(Problem):
    """A problem read from a suite folder; its baseline is the case's kernel file."""

    spec: ProblemSpec
    module: ModuleType = field(repr=False)
    reference_path: Path = Path()
    tolerance: float = DEFAULT_TOLERANCE
    baseline_path: Path = Path()
    counts: Counts | None = None
    builtin: ModuleType | None = field(default=None, repr=False)   # the built-in problem of the same operator

    def _call(self, func: str, *args: Any) -> Any:
        try:
            return getattr(self.module, func)(*args)
        except Exception as e:
            raise SuiteError(f"reference module {self.reference_path}: {func}() raised "
                             f"{type(e).__name__}: {e}") from None

    def make_inputs(self, seed: int) -> list[np.ndarray]:
        saved = np.random.get_state()
        try:
            np.random.seed(seed)
            inputs = self._call("get_inputs")
        finally:
            np.random.set_state(saved)
        if not isinstance(inputs, (list, tuple)):
            raise SuiteError(f"reference module {self.reference_path}: get_inputs() returned "
                             f"{type(inputs).__name__}, expected a list")
        return list(inputs)

    @property
    def declared_families(self) -> tuple[Family, ...]:
        """The families of the built-in problem of the same operator and parameters (like its
        tolerance and counts); a family sees the array inputs only, which the official
        references give in the built-in order (they add scalars such as `eps`)."""
        return tuple(getattr(self.builtin, "FAMILIES", ())) if self.builtin is not None else ()

    @property
    def derived_family_names(self) -> tuple[str, ...]:
        return tuple(getattr(self.builtin, "DERIVED_FAMILIES", DERIVED_NAMES))

    @property
    def reference_source(self) -> str:
        """The whole reference module, as AccelOpt shows it: `forward` with the input
        generation, the input and output transforms and the shape constants around it (an
        official kernel's own code, compiler-generated, names none of them)."""
        try:
            return self.reference_path.read_text()
        except OSError as e:
            raise SuiteError(f"reference module {self.reference_path}: cannot be read ({e})") from None

    def reference(self, *inputs: np.ndarray) -> tuple[np.ndarray, ...]:
        return as_tuple(self._call("forward", *inputs))

    def to_kernel_inputs(self, inputs: Sequence[np.ndarray]) -> list[Any]:
        if not callable(getattr(self.module, "transform_to_nki_inputs", None)):
            return list(inputs)
        return list(self._call("transform_to_nki_inputs", list(inputs)))

    def from_kernel_outputs(self, raw: Any, reference_out: tuple[np.ndarray, ...]) -> list[np.ndarray]:
        if callable(getattr(self.module, "transform_nki_outputs", None)):
            ref = reference_out[0] if len(reference_out) == 1 else reference_out
            raw = self._call("transform_nki_outputs", raw, ref)
        return reshape_like(raw, reference_out)


def load_official(spec: ProblemSpec) -> OfficialProblem:
    """Build the Problem of a suite-folder spec (see `official_spec`)."""
    case = _find_case(spec.suite_dir, spec.name, spec.param_dict)
    if not case.kernel.is_file():
        raise SuiteError(f"problem '{spec.name}' in {spec.suite_dir}: kernel {case.kernel} not found")
    module = import_reference(case.task)
    builtin = _builtin_module(spec.name, case.values)
    return OfficialProblem(
        spec=spec,
        module=module,
        reference_path=case.task,
        tolerance=builtin.TOLERANCE if builtin else DEFAULT_TOLERANCE,
        baseline_path=case.kernel,
        counts=builtin.counts(**case.values) if builtin else None,
        builtin=builtin,
    )
