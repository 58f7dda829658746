"""lora: out = x @ w + (x @ a) @ b with x (M, K), w (K, N), a (K, R), b (R, N), fp32
(NKIBench `lora`)."""

import numpy as np

from .. import families
from ..problem import Counts

PARAMS = ("M", "N", "K", "R")
SHAPES = {
    "paper": {"M": 4096, "N": 12288, "K": 5120, "R": 128},
    "small": {"M": 256, "N": 1024, "K": 384, "R": 128},
    "tiny": {"M": 128, "N": 512, "K": 128, "R": 64},
}
TOLERANCE = 2e-5
BASELINE = "lora.py"

FAMILIES = (
    families.scaled("large", [1e3, 1e2, 1e2, 1.0], "large magnitudes"),
    families.Family("nonnegative", "non-negative sparse operands (sums without cancellation)",
                    lambda rng, xs: [families.zeros(np.abs(x), rng, 0.3) for x in xs]),
)


def make_inputs(rng: np.random.Generator, M: int, N: int, K: int, R: int) -> list[np.ndarray]:
    def normal(shape: tuple[int, int]) -> np.ndarray:
        return rng.standard_normal(shape, dtype=np.float32)

    return [normal((M, K)), normal((K, N)), normal((K, R)), normal((R, N))]


def reference(x: np.ndarray, w: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return x @ w + (x @ a) @ b


def counts(M: int, N: int, K: int, R: int) -> Counts:
    # AccelOpt: the three matmuls; one vector add per output; read the four inputs, write out.
    return Counts(
        flops_matmul=2.0 * M * N * K + 2.0 * M * K * R + 2.0 * M * N * R,
        flops_vector=1.0 * M * N,
        hbm_bytes=(M * K + K * N + K * R + R * N) * 4.0 + M * N * 4.0,
    )
