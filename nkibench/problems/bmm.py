"""bmm: batched matmul out[b] = lhs[b] @ rhs[b], lhs (B, M, K), rhs (B, K, N), fp32
(NKIBench `bmm`)."""

import numpy as np

from .. import families
from ..problem import Counts

PARAMS = ("B", "M", "K", "N")
SHAPES = {
    "paper": {"B": 16, "M": 4096, "K": 64, "N": 4096},
    "small": {"B": 2, "M": 256, "K": 64, "N": 1024},
    "tiny": {"B": 1, "M": 128, "K": 64, "N": 512},
}
TOLERANCE = 2e-5
BASELINE = "bmm.py"

FAMILIES = (
    families.scaled("large", [1e3, 1e2], "large magnitudes"),
    families.Family("nonnegative", "non-negative sparse operands (sums without cancellation)",
                    lambda rng, xs: [families.zeros(np.abs(x), rng, 0.3) for x in xs]),
)


def make_inputs(rng: np.random.Generator, B: int, M: int, K: int, N: int) -> list[np.ndarray]:
    return [rng.standard_normal((B, M, K), dtype=np.float32), rng.standard_normal((B, K, N), dtype=np.float32)]


def reference(lhs: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    return np.matmul(lhs, rhs)


def counts(B: int, M: int, K: int, N: int) -> Counts:
    # AccelOpt: 2BMNK matmul flops; read both operands, write the product.
    return Counts(flops_matmul=2.0 * B * M * N * K, flops_vector=0.0,
                  hbm_bytes=(B * M * N + B * N * K + B * M * K) * 4.0)
