"""gqa_full: grouped-query attention without masking (NKIBench `gqa_full`).

q is (B, N, QH, D), k and v are (B, N, KH, D); query head h uses key/value head
h // (QH / KH). out[b, h] = softmax(q_h k_h^T / sqrt(D)) v_h, shape (B, QH, N, D).
"""

import numpy as np

from .. import families
from ..problem import Counts

PARAMS = ("B", "N", "QH", "KH", "D")
SHAPES = {
    "paper": {"B": 1, "N": 4096, "QH": 16, "KH": 8, "D": 128},
    "small": {"B": 1, "N": 512, "QH": 4, "KH": 2, "D": 128},
    "tiny": {"B": 1, "N": 256, "QH": 2, "KH": 1, "D": 64},
}
TOLERANCE = 2e-5
BASELINE = "gqa_full.py"

FAMILIES = (
    families.scaled("large", [8.0, 1.0, 1.0], "scores of large magnitude (softmax needs its max subtraction)"),
    families.Family("positive", "non-negative queries and keys, sparse values",
                    lambda rng, xs: [np.abs(xs[0]), np.abs(xs[1]), families.zeros(xs[2], rng, 0.5)]),
)


def check_shape(B: int, N: int, QH: int, KH: int, D: int) -> None:
    if QH % KH:
        raise ValueError(f"QH ({QH}) must be a multiple of KH ({KH})")


def make_inputs(rng: np.random.Generator, B: int, N: int, QH: int, KH: int, D: int) -> list[np.ndarray]:
    q = rng.standard_normal((B, N, QH, D), dtype=np.float32)
    k = rng.standard_normal((B, N, KH, D), dtype=np.float32)
    v = rng.standard_normal((B, N, KH, D), dtype=np.float32)
    return [q, k, v]


def reference(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    B, N, QH, D = q.shape
    group = QH // k.shape[2]
    out = np.empty((B, QH, N, D), dtype=np.float32)
    scale = np.float32(np.sqrt(D))
    for b in range(B):  # one head at a time keeps the (N, N) scores the only large temporary
        for h in range(QH):
            s = (q[b, :, h, :] @ k[b, :, h // group, :].T) / scale
            e = np.exp(s - s.max(axis=-1, keepdims=True))
            out[b, h] = (e / e.sum(axis=-1, keepdims=True)) @ v[b, :, h // group, :]
    return out


def counts(B: int, N: int, QH: int, KH: int, D: int) -> Counts:
    # AccelOpt: two N x N x D matmuls per query head; 5 vector ops per score; read q and
    # write out (B QH N D each), read k and v (B KH N D each).
    return Counts(
        flops_matmul=4.0 * B * QH * N * N * D,
        flops_vector=5.0 * B * QH * N * N,
        hbm_bytes=(2.0 * B * QH * N * D + 2.0 * B * KH * N * D) * 4,
    )
