"""matmul: out = lhs @ rhs with lhs (M, K) and rhs (K, N), fp32 (NKIBench `matmul`)."""

import numpy as np

from .. import families
from ..problem import Counts

PARAMS = ("M", "N", "K")
SHAPES = {
    "paper": {"M": 4096, "N": 12288, "K": 5120},
    "small": {"M": 512, "N": 1280, "K": 384},  # N not a multiple of 512: exercises the masks
    "tiny": {"M": 128, "N": 512, "K": 128},
}
TOLERANCE = 2e-5
BASELINE = "matmul.py"

FAMILIES = (
    families.scaled("large", [1e3, 1e2], "large magnitudes"),
    families.Family("nonnegative", "non-negative sparse operands (sums without cancellation)",
                    lambda rng, xs: [families.zeros(np.abs(x), rng, 0.3) for x in xs]),
)


def make_inputs(rng: np.random.Generator, M: int, N: int, K: int) -> list[np.ndarray]:
    return [rng.standard_normal((M, K), dtype=np.float32), rng.standard_normal((K, N), dtype=np.float32)]


def reference(lhs: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    return lhs @ rhs


def counts(M: int, N: int, K: int) -> Counts:
    # AccelOpt: 2MNK matmul flops; read both operands, write the product.
    return Counts(flops_matmul=2.0 * M * N * K, flops_vector=0.0, hbm_bytes=(M * N + N * K + M * K) * 4.0)
