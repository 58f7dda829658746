"""The reference data of one seed as a judgement uses it: the seed's input files (or scalar
values) a kernel process reads, and the expected-output files the engine's gate reads.

fitness.references computes and keeps them; the kernel process (fitness.sandbox.worker) reads
its inputs through `load_input`, never the expected outputs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Union

from nkibench.families import STANDARD

from . import arrays


@dataclass(frozen=True)
class Scalar:
    """A reference input that is a scalar (`eps = 1e-5`): kept as a value, never turned into an
    array, so that the kernel receives it as the reference gives it (a Python float stays a
    Python float, a NumPy scalar keeps its dtype)."""

    value: bool | int | float
    type: str                    # "bool", "int", "float", or the dtype name of a NumPy scalar

    @classmethod
    def of(cls, x: Any) -> "Scalar | None":
        """The Scalar of `x`, or None when `x` is not a scalar (arrays, lists, ...)."""
        import numpy as np

        if isinstance(x, np.generic):
            return cls(x.item(), x.dtype.name)
        if isinstance(x, (bool, int, float)):
            return cls(x, type(x).__name__)
        return None

    def restore(self) -> Any:
        if self.type in _PYTHON_SCALARS:
            return _PYTHON_SCALARS[self.type](self.value)
        import numpy as np

        return np.dtype(self.type).type(self.value)

    def to_json(self) -> dict[str, Any]:
        return {"scalar": self.value, "type": self.type}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Scalar":
        return cls(data["scalar"], str(data["type"]))


_PYTHON_SCALARS = {"bool": bool, "int": int, "float": float}

# One input of a seed: the path of an .npy file (arrays) or a Scalar.
Input = Union[str, Scalar]


@dataclass(frozen=True)
class SeedData:
    seed: int
    inputs: tuple[Input, ...]    # .npy paths (arrays) or Scalars, in the reference's argument order
    expected: tuple[str, ...]    # .npy paths, one per reference output
    family: str = STANDARD       # the input family the seed's inputs were drawn from
    # The dtype names of the array inputs, and of the outputs a kernel must return: those of
    # the reference run on the inputs as drawn. The expected files hold the reference's figures
    # computed on the same inputs widened to float64 where they are narrower (`compute`).
    input_dtypes: tuple[str, ...] = ()
    expected_dtypes: tuple[str, ...] = ()

    def request_inputs(self) -> list[Any]:
        """The inputs as the kernel process's request carries them (JSON)."""
        return [p if isinstance(p, str) else p.to_json() for p in self.inputs]


def load_input(entry: Any) -> Any:
    """One input of a kernel-process request: a fresh writable array, or the scalar value."""
    if isinstance(entry, dict):
        return Scalar.from_json(entry).restore()
    import numpy as np

    return np.array(arrays.load(entry, mmap=True))
