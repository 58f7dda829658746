"""Input families: distributions of a problem's inputs besides its own (the standard one).

A kernel that is right only where the standard inputs fall (N(0, 1) for most problems) is wrong,
and a search would keep it if every seed drew from that one distribution. So each problem names
the families that are valid for its math: large magnitudes, zeros, signs, the edges its
reference defines (an epsilon that dominates, a state that must decay). The correctness gate
draws its held-out seeds from them.

A family transforms the standard inputs of a seed; it sees only the array inputs, in order
(scalar inputs such as `eps` pass unchanged), so that one declaration serves the built-in
problem and the official NKIBench reference of the same operator, whose argument lists differ
only in such scalars.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

STANDARD = "standard"

Transform = Callable[[np.random.Generator, list[np.ndarray]], list[np.ndarray]]


@dataclass(frozen=True)
class Family:
    """One input family: a name, what it covers (shown in error messages) and its transform."""

    name: str
    description: str
    transform: Transform


def apply(family: Family, seed: int, inputs: Sequence[Any]) -> list[Any]:
    """The inputs of `seed` in `family`: its transform applied to the array inputs, with a
    random stream of its own (so families of one seed are independent draws)."""
    rng = np.random.default_rng([seed, zlib.crc32(family.name.encode())])
    positions = [i for i, x in enumerate(inputs) if isinstance(x, np.ndarray)]
    arrays = [inputs[i] for i in positions]
    changed = family.transform(rng, [a.copy() for a in arrays])
    if len(changed) != len(arrays) or any(c.shape != a.shape or c.dtype != a.dtype
                                          for c, a in zip(changed, arrays)):
        raise ValueError(f"input family '{family.name}' changed the number, shapes or dtypes of the inputs")
    out = list(inputs)
    for i, x in zip(positions, changed):
        out[i] = x
    return out


# --- building blocks of the problems' transforms ---------------------------------------------


def scaled(name: str, factors: Sequence[float], description: str) -> Family:
    """Input i multiplied by factors[i] (1 leaves it as it is)."""

    def transform(rng: np.random.Generator, xs: list[np.ndarray]) -> list[np.ndarray]:
        return [x * x.dtype.type(f) if f != 1 else x for x, f in zip(xs, factors)]
    return Family(name, description, transform)


def outliers(x: np.ndarray, rng: np.random.Generator, fraction: float, low: float, high: float) -> np.ndarray:
    """`x` with a `fraction` of its elements replaced by values of magnitude in [low, high)
    and random sign."""
    mask = rng.random(x.shape) < fraction
    values = rng.uniform(low, high, x.shape) * rng.choice(np.array([-1.0, 1.0]), x.shape)
    return np.where(mask, values, x).astype(x.dtype)


def zeros(x: np.ndarray, rng: np.random.Generator, fraction: float) -> np.ndarray:
    """`x` with a `fraction` of its elements set to zero."""
    return np.where(rng.random(x.shape) < fraction, 0, x).astype(x.dtype)


def zero_rows(x: np.ndarray, rng: np.random.Generator, fraction: float) -> np.ndarray:
    """`x` with a `fraction` of its rows (first axis after any leading ones) set to zero."""
    rows = rng.random(x.shape[:-1]) < fraction
    return np.where(rows[..., None], 0, x).astype(x.dtype)
