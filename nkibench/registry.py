"""Finding problems by name: built-in modules (the NKIBench problems in `problems/`, the SDK
examples' problems in `examples/`), or a folder in the official NKIBench layout."""

from __future__ import annotations

import functools
import importlib
import pkgutil
from pathlib import Path
from typing import Any, Callable, Sequence

from . import examples as _examples_pkg
from . import problems as _problems_pkg
from . import user
from .official import load_official, official_spec
from .problem import DIALECT_NAMES, BuiltinProblem, Problem, ProblemError, ProblemSpec

__all__ = ["BASELINES", "DIALECT_NAMES", "EXAMPLE_BASELINES", "NKI_BASELINES", "ProblemError", "baseline_dialects",
           "baseline_path", "builtin_names", "example_names", "kernel_inputs", "load", "make_spec", "own_dialect",
           "shape_names"]


BASELINES = Path(__file__).resolve().parent / "baselines"   # package data: the baseline kernels
NKI_BASELINES = BASELINES / "nki"      # the NKIBench problems' baselines in the current dialect
EXAMPLE_BASELINES = Path(_examples_pkg.__file__).resolve().parent / "baselines"


def _names(package) -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules(package.__path__) if not m.name.startswith("_"))


def builtin_names() -> list[str]:
    """The NKIBench problems (what `run` optimizes by default)."""
    return _names(_problems_pkg)


def example_names() -> list[str]:
    """The problems of the NKI SDK examples (current `nki` dialect), named apart from NKIBench's."""
    return _names(_examples_pkg)


def _module(name: str):
    for package in (_problems_pkg, _examples_pkg):
        if name in _names(package):
            return importlib.import_module(f"{package.__name__}.{name}")
    raise ProblemError(f"unknown problem '{name}' (built-in: {', '.join(builtin_names())}; SDK examples: "
                       f"{', '.join(example_names())})")


def own_dialect(name: str, suite_dir: str = "") -> str:
    """The dialect of a problem's own baseline: current for the SDK examples, a user's problem's
    as its baseline imports it, else legacy."""
    if suite_dir and user.is_problem_folder(suite_dir):
        return user.read_meta(suite_dir)["dialect"]
    return "current" if not suite_dir and name in example_names() else "legacy"


def baseline_dialects(name: str, suite_dir: str = "") -> tuple[str, ...]:
    """The dialects a problem has a baseline in, its own first."""
    own = own_dialect(name, suite_dir)
    if suite_dir or own == "current":
        return (own,)
    return ("legacy", "current") if (NKI_BASELINES / _module(name).BASELINE).is_file() else ("legacy",)


def baseline_path(name: str, dialect: str = "") -> Path:
    """The baseline kernel of built-in problem `name` in `dialect` ("": its own)."""
    mod = _module(name)
    if name in example_names():
        return EXAMPLE_BASELINES / mod.BASELINE
    return (NKI_BASELINES if dialect == "current" else BASELINES) / mod.BASELINE


def _check_dialect(name: str, suite_dir: str, dialect: str) -> str:
    """`dialect` as a spec holds it ("" for the problem's own); an error when it has none."""
    if not dialect or dialect == own_dialect(name, suite_dir):
        return ""
    if dialect not in baseline_dialects(name, suite_dir):
        has = ", ".join(DIALECT_NAMES[d] for d in baseline_dialects(name, suite_dir))
        raise ProblemError(f"problem '{name}' has no baseline in the {DIALECT_NAMES.get(dialect, dialect)} "
                           f"dialect (it has: {has})")
    return dialect


def shape_names(name: str) -> list[str]:
    return list(_module(name).SHAPES)


def make_spec(name: str, shape: str = "paper", params: dict[str, int] | None = None,
              suite_dir: str = "", dialect: str = "") -> ProblemSpec:
    """The spec of problem `name` at the named `shape`, with single parameters overridden,
    starting from its baseline in `dialect` ("legacy" or "current"; "": its own)."""
    if suite_dir and user.is_problem_folder(suite_dir):
        _check_dialect(name, suite_dir, dialect)
        return user.spec(suite_dir, params)
    if suite_dir:   # the official layout has fixed shapes per case
        _check_dialect(name, suite_dir, dialect)
        return official_spec(suite_dir, name, params or {})
    dialect = _check_dialect(name, "", dialect)
    mod = _module(name)
    if shape not in mod.SHAPES:
        raise ProblemError(f"problem '{name}' has no shape '{shape}' (known: {', '.join(mod.SHAPES)})")
    values = dict(mod.SHAPES[shape])
    for k, v in (params or {}).items():
        if k not in mod.PARAMS:
            raise ProblemError(f"problem '{name}' has no shape parameter '{k}' (known: {', '.join(mod.PARAMS)})")
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ProblemError(f"shape parameter {name}.{k} must be a positive integer, got {v!r}")
        values[k] = v
    check = getattr(mod, "check_shape", None)  # optional: constraints of the operator itself
    if check is not None:
        try:
            check(**values)
        except ValueError as e:
            raise ProblemError(f"problem '{name}' cannot take shape {values}: {e}") from None
    return ProblemSpec.make(name, values, dialect=dialect)


def kernel_inputs(spec: ProblemSpec) -> Callable[[Sequence[Any]], list[Any]]:
    """What builds the kernel's arguments from a seed's reference inputs (in a kernel process):
    the problem's `to_kernel_inputs`, or, for a PyTorch reference whose kernel takes its inputs
    as drawn, the inputs themselves, without executing the reference (and importing torch)."""
    if spec.suite_dir and user.is_problem_folder(spec.suite_dir) and user.kernel_inputs_as_drawn(spec.suite_dir):
        return list
    return load(spec).to_kernel_inputs


@functools.lru_cache(maxsize=64)
def load(spec: ProblemSpec) -> Problem:
    """Build the Problem for a spec (cached per process)."""
    if spec.suite_dir and user.is_problem_folder(spec.suite_dir):
        return user.load_user(spec)
    if spec.suite_dir:
        return load_official(spec)
    mod = _module(spec.name)
    return BuiltinProblem(
        spec=spec,
        module=mod,
        tolerance=mod.TOLERANCE,
        baseline_path=baseline_path(spec.name, spec.dialect),
        counts=mod.counts(**spec.param_dict),
    )
