"""Finding problems by name: built-in modules (the NKIBench problems in `problems/`, the SDK
examples' problems in `examples/`), or a folder in the official NKIBench layout."""

from __future__ import annotations

import functools
import importlib
import pkgutil
from pathlib import Path

from . import examples as _examples_pkg
from . import problems as _problems_pkg
from .problem import BuiltinProblem, Problem, ProblemSpec


BASELINES = Path(__file__).resolve().parent / "baselines"   # package data: the baseline kernels
EXAMPLE_BASELINES = Path(_examples_pkg.__file__).resolve().parent / "baselines"


class ProblemError(ValueError):
    """A problem name, shape or suite folder that cannot be used; the message says why."""


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


def shape_names(name: str) -> list[str]:
    return list(_module(name).SHAPES)


def make_spec(name: str, shape: str = "paper", params: dict[str, int] | None = None,
              suite_dir: str = "") -> ProblemSpec:
    """The spec of problem `name` at the named `shape`, with single parameters overridden."""
    if suite_dir:
        from .official import official_spec  # the official layout has fixed shapes per case

        return official_spec(suite_dir, name, params or {})
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
    return ProblemSpec.make(name, values)


@functools.lru_cache(maxsize=64)
def load(spec: ProblemSpec) -> Problem:
    """Build the Problem for a spec (cached per process)."""
    if spec.suite_dir:
        from .official import load_official

        return load_official(spec)
    mod = _module(spec.name)
    baseline = (EXAMPLE_BASELINES if spec.name in example_names() else BASELINES) / mod.BASELINE
    return BuiltinProblem(
        spec=spec,
        module=mod,
        tolerance=mod.TOLERANCE,
        baseline_path=baseline,
        counts=mod.counts(**spec.param_dict),
    )
