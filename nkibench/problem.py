"""The Problem contract (DESIGN.md): a NumPy reference, seeded inputs, the kernel's
input/output layout, a baseline kernel, roofline counts and a correctness tolerance.

A Problem is rebuilt in every process that needs it from its picklable `ProblemSpec`
(name, shape parameters, suite folder), so that no closure or array crosses a process
boundary.
"""

from __future__ import annotations

import abc
import inspect
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from .families import DERIVED_NAMES, STANDARD, Family
from .families import apply as apply_family
from .families import derived as derived_families


# How a dialect is named to people (`--dialect legacy|nki`, `run.dialect`), and back.
DIALECT_NAMES = {"legacy": "legacy", "current": "nki"}
DIALECT_OF_NAME = {v: k for k, v in DIALECT_NAMES.items()}


class ProblemError(ValueError):
    """A problem name, shape or suite folder that cannot be used; the message says why."""


@dataclass(frozen=True)
class ProblemSpec:
    """Identity of one problem instance; equal specs give equal problems."""

    name: str
    params: tuple[tuple[str, int], ...]
    suite_dir: str = ""  # "" = a built-in problem; else a folder in the official layout
    # The NKI dialect of the baseline a run starts from and speedups are measured against:
    # "" = the problem's own (legacy for NKIBench, current for the SDK examples), else the
    # other one ("current": nkibench/baselines/nki/). "" keeps specs of earlier releases equal.
    dialect: str = ""

    @classmethod
    def make(cls, name: str, params: dict[str, int], suite_dir: str = "", dialect: str = "") -> "ProblemSpec":
        return cls(name, tuple(sorted(params.items())), suite_dir, dialect)

    @property
    def param_dict(self) -> dict[str, int]:
        return dict(self.params)

    def label(self) -> str:
        """`silu[M=4096,N=7168]` (`...@nki` from a baseline in the other dialect): human-readable
        and stable, used in cache keys and reports."""
        suffix = f"@{DIALECT_NAMES[self.dialect]}" if self.dialect else ""
        return f"{self.name}[{','.join(f'{k}={v}' for k, v in self.params)}]{suffix}"


@dataclass(frozen=True)
class Counts:
    """Roofline counts of a problem (the paper's formulas, or counted for a user's problem)."""

    flops_matmul: float
    flops_vector: float
    hbm_bytes: float
    matmul_dtype: str = "float32"   # the operands' dtype, which sets the TensorE peak
    # How many of the counted element-wise operations one engine pass over an element may do:
    # 1 for the paper's formulas; a user problem's counts (every NumPy operation of its
    # reference) are divided by what one instruction can fuse (fitness.measures.roofline).
    vector_ops_per_pass: float = 1.0


def unit_roundoff(dtype: Any) -> float:
    """2^-(mantissa bits + 1) of a float type narrower than float32; 0 for other types."""
    nmant = float_mantissa(dtype)
    if nmant is None or nmant >= FP32_MANTISSA:
        return 0.0
    return 2.0 ** -(nmant + 1)


def low_precision_tolerance(dtype: np.dtype, reduction: int) -> float:
    """The L2 relative tolerance an output of a float type narrower than float32 needs, or 0.

    With u = 2^-(mantissa bits + 1) the type's unit roundoff: 4u covers rounding the output
    once and a few intermediate roundings to the same type (torch.testing's default rtol for
    bfloat16, 1.6e-2, is 4u), and u·sqrt(reduction / 128) a rounding of each 128-element
    partial sum when a reduction of that length is accumulated in the output type (rounding
    errors of independent partial sums add in quadrature). At most 0.25, so that a result of
    zeros (error 1) or a shifted one is still refused whatever the type (fp8's u is 1/16)."""
    u = unit_roundoff(dtype)
    return min(MAX_TOLERANCE, u * (4.0 + (max(reduction, 1) / 128) ** 0.5)) if u else 0.0


class Problem(abc.ABC):
    """One benchmark problem at one shape."""

    spec: ProblemSpec
    tolerance: float
    baseline_path: Path
    counts: Counts | None  # None: unknown, so percent of peak is reported as unknown

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def params(self) -> dict[str, int]:
        return self.spec.param_dict

    @property
    def baseline_source(self) -> str:
        return self.baseline_path.read_text()

    @abc.abstractmethod
    def make_inputs(self, seed: int) -> list[np.ndarray]:
        """Fresh inputs for one seed (the reference's argument list)."""

    @property
    def families(self) -> tuple[Family, ...]:
        """Input families besides the standard one, the held-out seeds' draws: those the problem
        declares (valid for its math), then the families derived from any problem's inputs
        (nkibench.families.DERIVED) that it keeps (`derived_family_names`)."""
        return self.declared_families + derived_families(self.derived_family_names)

    @property
    def declared_families(self) -> tuple[Family, ...]:
        """The families the problem declares itself."""
        return ()

    @property
    def derived_family_names(self) -> tuple[str, ...]:
        """The derived families valid for the problem (all of them unless it says otherwise)."""
        return DERIVED_NAMES

    def family_names(self) -> tuple[str, ...]:
        return (STANDARD,) + tuple(f.name for f in self.families)

    def inputs(self, seed: int, family: str = STANDARD) -> list[Any]:
        """The inputs of `seed` drawn from `family` (the standard distribution by default)."""
        inputs = self.make_inputs(seed)
        if family == STANDARD:
            return inputs
        for f in self.families:
            if f.name == family:
                return apply_family(f, seed, inputs)
        raise ValueError(f"problem '{self.name}' has no input family '{family}' "
                         f"(known: {', '.join(self.family_names())})")

    @abc.abstractmethod
    def reference(self, *inputs: np.ndarray) -> tuple[np.ndarray, ...]:
        """The expected outputs, always as a tuple."""

    @abc.abstractmethod
    def to_kernel_inputs(self, inputs: Sequence[np.ndarray]) -> list[Any]:
        """The kernel's positional arguments built from the reference inputs."""

    @abc.abstractmethod
    def from_kernel_outputs(self, raw: Any, reference_out: tuple[np.ndarray, ...]) -> list[np.ndarray]:
        """The kernel's return value rearranged to match `reference_out` one to one."""

    @property
    def reference_source(self) -> str:
        """The NumPy reference as source text (what LLM prompts show)."""
        return ""

    @property
    def reduction_length(self) -> int:
        """The longest reduction of the problem (elements summed into one output element)."""
        return 1

    @property
    def output_dtypes(self) -> tuple[np.dtype, ...]:
        """The dtypes of the outputs a kernel returns (the benchmark problems' are float32)."""
        return (np.dtype(np.float32),)

    def output_tolerance(self) -> float:
        """The loosest tolerance of the problem's outputs (what prompts quote)."""
        return max(self.tolerance_for(d) for d in self.output_dtypes)

    def tolerance_for(self, dtype: np.dtype) -> float:
        """The loosest L2 relative tolerance of an output of `dtype`: the problem's own, widened
        for a float type narrower than float32 (`low_precision_tolerance`). The baseline is
        judged with it; other kernels with the baseline's error as yardstick, within it
        (fitness.correctness.gate.yardstick_tolerance)."""
        return max(self.tolerance, low_precision_tolerance(dtype, self.reduction_length))

    def tolerance_floor(self, dtype: np.dtype) -> float:
        """The tightest tolerance an output of `dtype` is held to: the problem's own and, for a
        float type narrower than float32, its unit roundoff (one rounding of every element)."""
        return max(self.tolerance, unit_roundoff(dtype))

    # Convenience for the flop/byte properties named in DESIGN.md.
    @property
    def flops_matmul(self) -> float | None:
        return self.counts.flops_matmul if self.counts else None

    @property
    def flops_vector(self) -> float | None:
        return self.counts.flops_vector if self.counts else None

    @property
    def hbm_bytes(self) -> float | None:
        return self.counts.hbm_bytes if self.counts else None


def as_tuple(value: Any) -> tuple[np.ndarray, ...]:
    return tuple(value) if isinstance(value, (tuple, list)) else (value,)


def widen(inputs: Sequence[Any]) -> list[Any]:
    """The inputs with every float array narrower than float32 widened to float64: what the
    reference computes on, so that its figures are exact on the rounded inputs a kernel gets
    (up to the precision of the operations the reference itself chooses)."""
    out = []
    for x in inputs:
        if isinstance(x, np.ndarray) and _is_narrow_float(x.dtype):
            x = x.astype(np.float64)
        out.append(x)
    return out


FP32_MANTISSA = 23
MAX_TOLERANCE = 0.25


def float_mantissa(dtype: Any) -> int | None:
    """Explicit mantissa bits of a float dtype (NumPy's or ml_dtypes'); None for other types."""
    import ml_dtypes

    try:
        return int(ml_dtypes.finfo(dtype).nmant)
    except (ValueError, TypeError):
        return None


def _is_narrow_float(dtype: np.dtype) -> bool:
    nmant = float_mantissa(dtype)
    return nmant is not None and nmant < FP32_MANTISSA


def reshape_like(raw: Any, reference_out: tuple[np.ndarray, ...]) -> list[np.ndarray]:
    """Default output transform: the kernel returns the outputs in reference order, maybe
    with another shape of the same size (NKIBench's `transform_nki_outputs`)."""
    outs = as_tuple(raw)
    if len(outs) != len(reference_out):
        raise ValueError(f"kernel returned {len(outs)} output(s), expected {len(reference_out)}")
    result = []
    for i, (o, r) in enumerate(zip(outs, reference_out)):
        o = np.asarray(o)
        if o.size != np.size(r):
            raise ValueError(
                f"output {i} has {o.size} elements (shape {o.shape}), expected {np.size(r)} (shape {np.shape(r)})"
            )
        result.append(o.reshape(np.shape(r)))
    return result


@dataclass
class BuiltinProblem(Problem):
    """A problem defined by a module in `nkibench/problems/` (see `silu.py` for the layout)."""

    spec: ProblemSpec
    module: Any = field(repr=False)
    tolerance: float = 2e-5
    baseline_path: Path = Path()
    counts: Counts | None = None

    def make_inputs(self, seed: int) -> list[np.ndarray]:
        return list(self.module.make_inputs(np.random.default_rng(seed), **self.params))

    @property
    def declared_families(self) -> tuple[Family, ...]:
        return tuple(getattr(self.module, "FAMILIES", ()))

    @property
    def derived_family_names(self) -> tuple[str, ...]:
        return tuple(getattr(self.module, "DERIVED_FAMILIES", DERIVED_NAMES))

    @property
    def reference_source(self) -> str:
        return inspect.getsource(self.module.reference)

    def reference(self, *inputs: np.ndarray) -> tuple[np.ndarray, ...]:
        return as_tuple(self.module.reference(*inputs))

    def to_kernel_inputs(self, inputs: Sequence[np.ndarray]) -> list[Any]:
        convert = getattr(self.module, "to_kernel_inputs", None)
        return list(convert(list(inputs), **self.params)) if convert else list(inputs)

    def from_kernel_outputs(self, raw: Any, reference_out: tuple[np.ndarray, ...]) -> list[np.ndarray]:
        convert = getattr(self.module, "from_kernel_outputs", None)
        if convert:
            return list(convert(raw, reference_out, **self.params))
        return reshape_like(raw, reference_out)
