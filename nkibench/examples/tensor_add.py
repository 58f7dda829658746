"""tensor_add: c = a + b over two (M, N) fp32 matrices, the NKI SDK's tensor-addition examples
(`tensor_addition/`, the simulator quick start `simulate/`, `getting_started_baremetal.py`).
The tiled example needs M a multiple of 128 and N of 512; the one-tile ones M <= 128."""

import numpy as np

from .. import families
from ..problem import Counts

PARAMS = ("M", "N")
SHAPES = {
    "paper": {"M": 256, "N": 1024},
    "tiny": {"M": 128, "N": 512},   # the simulator quick start's shape: one tile
}
TOLERANCE = 2e-5
BASELINE = "tensor_add.py"

FAMILIES = (
    families.scaled("large", [1e3, 1e3], "large magnitudes"),
    families.Family("cancelling", "b close to -a (the sum is small against its operands)",
                    lambda rng, xs: [xs[0], -xs[0] + np.float32(1e-3) * xs[1]]),
)


def make_inputs(rng: np.random.Generator, M: int, N: int) -> list[np.ndarray]:
    return [rng.standard_normal((M, N), dtype=np.float32), rng.standard_normal((M, N), dtype=np.float32)]


def reference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return a + b


def counts(M: int, N: int) -> Counts:
    return Counts(0.0, float(M * N), 3.0 * M * N * 4.0)
