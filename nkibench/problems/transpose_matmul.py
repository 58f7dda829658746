"""transpose_matmul: out = lhs_t.T @ rhs with lhs_t (K, M) and rhs (K, N), fp32
(NKIBench `transpose_matmul`). The left operand arrives contraction-major."""

import numpy as np

from .. import families
from ..problem import Counts

PARAMS = ("M", "K", "N")
SHAPES = {
    "paper": {"M": 4096, "K": 2048, "N": 10944},
    "small": {"M": 256, "K": 256, "N": 1216},  # like the paper's N, not a multiple of 512
    "tiny": {"M": 128, "K": 128, "N": 512},
}
TOLERANCE = 2e-5
BASELINE = "transpose_matmul.py"

FAMILIES = (
    families.scaled("large", [1e3, 1e2], "large magnitudes"),
    families.Family("nonnegative", "non-negative sparse operands (sums without cancellation)",
                    lambda rng, xs: [families.zeros(np.abs(x), rng, 0.3) for x in xs]),
)


def make_inputs(rng: np.random.Generator, M: int, K: int, N: int) -> list[np.ndarray]:
    return [rng.standard_normal((K, M), dtype=np.float32), rng.standard_normal((K, N), dtype=np.float32)]


def reference(lhs_t: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    return lhs_t.T @ rhs


def counts(M: int, K: int, N: int) -> Counts:
    # AccelOpt: as matmul.
    return Counts(flops_matmul=2.0 * M * N * K, flops_vector=0.0, hbm_bytes=(M * N + N * K + M * K) * 4.0)
