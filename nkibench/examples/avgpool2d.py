"""avgpool2d: 2-D average pooling with a square window, the NKI SDK's average-pool example:
`kernel(x, pool)` with x (C, H, W) fp32 (C on partitions, at most 128) and the window size
`pool` (an integer dividing H and W); out[c, i, j] = mean of x[c, i*pool:(i+1)*pool,
j*pool:(j+1)*pool]."""

import numpy as np

from .. import families
from ..problem import Counts

PARAMS = ("C", "H", "W", "pool")
SHAPES = {
    "paper": {"C": 2, "H": 6, "W": 6, "pool": 2},        # the example's own run
    "small": {"C": 128, "H": 32, "W": 48, "pool": 4},
    "tiny": {"C": 16, "H": 8, "W": 8, "pool": 2},
}
TOLERANCE = 2e-5
BASELINE = "avgpool2d.py"

FAMILIES = (
    families.scaled("large", [1e4], "large magnitudes"),
    families.Family("edges", "zeros and outliers of both signs",
                    lambda rng, xs: [families.zeros(families.outliers(xs[0], rng, 0.1, 10.0, 1e3), rng, 0.2)]),
)


def check_shape(C: int, H: int, W: int, pool: int) -> None:
    if H % pool or W % pool:
        raise ValueError(f"the window size {pool} must divide H={H} and W={W}")


def make_inputs(rng: np.random.Generator, C: int, H: int, W: int, pool: int) -> list:
    return [rng.standard_normal((C, H, W), dtype=np.float32), pool]


def reference(x: np.ndarray, pool: int) -> np.ndarray:
    c, h, w = x.shape
    return x.reshape(c, h // pool, pool, w // pool, pool).mean(axis=(2, 4), dtype=np.float32)


def counts(C: int, H: int, W: int, pool: int) -> Counts:
    # one add per input element, one scale per output element; read x, write out
    return Counts(0.0, C * H * W + C * (H // pool) * (W // pool),
                  (C * H * W + C * (H // pool) * (W // pool)) * 4.0)
