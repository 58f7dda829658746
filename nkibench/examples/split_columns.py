"""split_columns: the even and the odd columns of an (P, F) fp32 matrix as two outputs, the NKI
documentation's indexing example (`index-case-1.py`, P <= 128)."""

import numpy as np

from .. import families
from ..problem import Counts

PARAMS = ("P", "F")
SHAPES = {
    "paper": {"P": 128, "F": 1024},
    "tiny": {"P": 16, "F": 9},     # an odd width: one more even column than odd ones
}
TOLERANCE = 2e-5
BASELINE = "split_columns.py"

FAMILIES = (families.scaled("large", [1e6], "large magnitudes (a copy must keep them exactly)"),)


def make_inputs(rng: np.random.Generator, P: int, F: int) -> list[np.ndarray]:
    return [rng.standard_normal((P, F), dtype=np.float32)]


def reference(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return np.ascontiguousarray(x[:, 0::2]), np.ascontiguousarray(x[:, 1::2])


def counts(P: int, F: int) -> Counts:
    return Counts(0.0, 0.0, 2.0 * P * F * 4.0)
