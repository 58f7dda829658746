"""transpose2d: per partition row, the transpose of a flattened (X, Y) matrix, the NKI SDK's
transpose example: `kernel(x, (X, Y))` with x (P, X*Y) fp32; out[p] = x[p].reshape(X, Y).T
flattened. The reference receives X and Y as integers; the kernel gets them as one tuple."""

import numpy as np

from .. import families
from ..problem import Counts

PARAMS = ("P", "X", "Y")
SHAPES = {
    "paper": {"P": 5, "X": 3, "Y": 4},     # the example's own run
    "small": {"P": 128, "X": 8, "Y": 16},
    "tiny": {"P": 4, "X": 2, "Y": 3},
}
TOLERANCE = 2e-5
BASELINE = "transpose2d.py"

FAMILIES = (families.scaled("large", [1e6], "large magnitudes (a copy must keep them exactly)"),)


def make_inputs(rng: np.random.Generator, P: int, X: int, Y: int) -> list:
    return [rng.standard_normal((P, X * Y), dtype=np.float32), X, Y]


def reference(x: np.ndarray, X: int, Y: int) -> np.ndarray:
    return np.ascontiguousarray(x.reshape(x.shape[0], X, Y).transpose(0, 2, 1)).reshape(x.shape[0], X * Y)


def to_kernel_inputs(inputs: list, P: int, X: int, Y: int) -> list:
    return [inputs[0], (inputs[1], inputs[2])]


def counts(P: int, X: int, Y: int) -> Counts:
    return Counts(0.0, 0.0, 2.0 * P * X * Y * 4.0)
