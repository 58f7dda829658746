"""bmm_softmax: softmax(lhs[b] @ rhs[b]) over the last axis, lhs (B, M, K), rhs (B, K, N),
fp32 (NKIBench `bmm_softmax`)."""

import numpy as np

from .. import families
from ..problem import Counts

PARAMS = ("B", "K", "M", "N")
SHAPES = {
    "paper": {"B": 16, "K": 64, "M": 4096, "N": 4096},
    "small": {"B": 2, "K": 64, "M": 256, "N": 1024},
    "tiny": {"B": 1, "K": 64, "M": 128, "N": 512},
}
TOLERANCE = 2e-5
BASELINE = "bmm_softmax.py"

FAMILIES = (
    families.scaled("large", [8.0, 1.0], "logits of large magnitude (softmax needs its max subtraction)"),
    families.Family("positive", "non-negative operands (all logits large and positive)",
                    lambda rng, xs: [np.abs(x) for x in xs]),
)


def make_inputs(rng: np.random.Generator, B: int, K: int, M: int, N: int) -> list[np.ndarray]:
    return [rng.standard_normal((B, M, K), dtype=np.float32), rng.standard_normal((B, K, N), dtype=np.float32)]


def reference(lhs: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    x = np.matmul(lhs, rhs)
    e = np.exp(x - x.max(axis=2, keepdims=True))
    return e / e.sum(axis=2, keepdims=True)


def counts(B: int, K: int, M: int, N: int) -> Counts:
    # AccelOpt: 2BMNK matmul flops; 5 vector ops per score (max, subtract, exp, sum, divide);
    # bytes as bmm.
    return Counts(flops_matmul=2.0 * B * M * N * K, flops_vector=5.0 * B * M * N,
                  hbm_bytes=(B * M * N + B * N * K + B * M * K) * 4.0)
