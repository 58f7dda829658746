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

import ml_dtypes
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


# --- families derived from any problem's inputs -----------------------------------------------
#
# A problem that declares no families (a user's own) would otherwise be judged on its standard
# draw alone, where a statistic often takes the same value in every row (rms(x) of randn rows
# is 1 within 1/sqrt(2D)): skipping it would pass. The derived families change what such
# statistics see, generically, from the arrays alone: each float array of the inputs is
# transformed, integer and boolean arrays (indices, masks) and scalars are left alone, an array
# with no negative element stays non-negative (variances, probabilities), and magnitudes stay
# where the array's dtype can square them without overflow.

SPREAD = 2.0          # scales drawn log-uniformly from 10^-SPREAD to 10^SPREAD
OUTLIER_SCALE = 100.0
TILE = 32             # the side of a sparse tile
ROW_CHUNK = 128       # a 1-D array's "rows": chunks of one partition row's worth of elements


def _is_float(x: np.ndarray) -> bool:
    """A float array of any width (NumPy's floats, ml_dtypes' bfloat16 and fp8)."""
    try:
        ml_dtypes.finfo(x.dtype)
    except (ValueError, TypeError):
        return False
    return True


def _headroom(x: np.ndarray) -> float:
    """The largest factor `x` may be scaled by: its largest magnitude times the factor stays
    below a quarter of the square root of its dtype's largest value (fp16: 64; fp8 e4m3: 5.3;
    float32 and bfloat16: no practical limit), so that squares and sums of squares of the
    scaled inputs stay finite in the input's own type."""
    biggest = float(np.max(np.abs(x.astype(np.float64)))) if x.size else 0.0
    limit = float(ml_dtypes.finfo(x.dtype).max) ** 0.5 / 4
    return limit / biggest if biggest > 0 else limit


def _rows(x: np.ndarray) -> np.ndarray:
    """A 2-D float64 view of `x`'s values: rows = every axis but the last (a 1-D array in
    chunks of ROW_CHUNK, padded; see `_unrows`)."""
    v = x.astype(np.float64)
    if v.ndim >= 2:
        return v.reshape(-1, v.shape[-1])
    pad = (-v.size) % ROW_CHUNK
    return np.concatenate([v.reshape(-1), np.zeros(pad)]).reshape(-1, ROW_CHUNK) if v.size else v.reshape(0, 1)


def _unrows(v: np.ndarray, like: np.ndarray) -> np.ndarray:
    return v.reshape(-1)[: like.size].reshape(like.shape).astype(like.dtype)


def _scales(rng: np.random.Generator, n: int, cap: float) -> np.ndarray:
    return np.minimum(10.0 ** rng.uniform(-SPREAD, SPREAD, n), cap)


def _signs(rng: np.random.Generator, n: int, signed: bool) -> np.ndarray:
    return rng.choice(np.array([-1.0, 1.0]), n) if signed else np.ones(n)


def _each_float(step: Callable[[np.random.Generator, np.ndarray, bool, float], np.ndarray]) -> Transform:
    """A transform applying `step(rng, rows, signed, headroom)` to the 2-D rows of every float
    array (signed: the array has a negative element)."""

    def transform(rng: np.random.Generator, xs: list[np.ndarray]) -> list[np.ndarray]:
        out = []
        for x in xs:
            if not _is_float(x) or x.size == 0:
                out.append(x)
                continue
            signed = bool(np.any(x.astype(np.float64) < 0))
            out.append(_unrows(step(rng, _rows(x), signed, _headroom(x)), x))
        return out
    return transform


def _row_scales(rng: np.random.Generator, v: np.ndarray, signed: bool, cap: float) -> np.ndarray:
    n = v.shape[0]
    return v * (_scales(rng, n, cap) * _signs(rng, n, signed))[:, None]


def _column_scales(rng: np.random.Generator, v: np.ndarray, signed: bool, cap: float) -> np.ndarray:
    n = v.shape[1]
    s = _scales(rng, n, cap / 4 if signed else cap)
    v = v * s[None, :]
    if signed:   # an offset per column, a few times its scale: the columns no longer average zero
        v = v + (s * rng.uniform(1.0, 3.0, n) * _signs(rng, n, True))[None, :]
    return v


def _outliers(rng: np.random.Generator, v: np.ndarray, signed: bool, cap: float) -> np.ndarray:
    v = v.copy()
    factor = min(OUTLIER_SCALE, cap ** (2 / 3))   # where a row and a column cross: factor ** 1.5 <= cap
    rows, cols = v.shape
    # a few rows and columns, always including the last of each (a kernel that skips a tail)
    pick_r = np.unique(np.r_[rng.choice(rows, min(3, rows), replace=False), rows - 1])
    pick_c = np.unique(np.r_[rng.choice(cols, min(3, cols), replace=False), cols - 1])
    v[pick_r, :] *= factor
    v[:, pick_c] *= factor ** 0.5
    if signed:   # and half of the rows flipped
        v *= _signs(rng, rows, True)[:, None]
    return v


def _sparse(rng: np.random.Generator, v: np.ndarray, signed: bool, cap: float) -> np.ndarray:
    v = v.copy()
    rows, cols = v.shape
    # zero tiles: about a third of the TILE x TILE blocks
    for r in range(0, rows, TILE):
        for c in range(0, cols, TILE):
            if rng.random() < 1 / 3:
                v[r:r + TILE, c:c + TILE] = 0.0
    # near-zero rows, and rows of large magnitude
    kind = rng.random(rows)
    v[kind < 0.1] *= 1e-4
    v[kind > 0.95] *= min(OUTLIER_SCALE, cap)
    return v


DERIVED: tuple[Family, ...] = (
    Family("row_scales", "every row scaled by its own factor, 10^-2 to 10^2 (signs flipped in half of them)",
           _each_float(_row_scales)),
    Family("edge_outliers", "a few rows and columns, the last of each among them, 10 to 100 times larger; half "
                       "the rows negated", _each_float(_outliers)),
    Family("column_offsets", "every column scaled by its own factor, 10^-2 to 10^2, and offset from zero",
           _each_float(_column_scales)),
    Family("sparse_tiles", "a third of the 32 x 32 tiles zero, near-zero rows and rows of large magnitude",
           _each_float(_sparse)),
)
DERIVED_NAMES = tuple(f.name for f in DERIVED)


def derived(names: Sequence[str] = DERIVED_NAMES) -> tuple[Family, ...]:
    """The derived families named (in the order of DERIVED); ValueError for an unknown name."""
    unknown = [n for n in names if n not in DERIVED_NAMES]
    if unknown:
        raise ValueError(f"unknown derived input family {unknown[0]!r} (known: {', '.join(DERIVED_NAMES)})")
    return tuple(f for f in DERIVED if f.name in names)
