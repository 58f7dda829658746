"""rmsnorm_matmul: out = (x / sqrt(mean(x^2, axis=1))) @ w with x (M, K), w (K, N), fp32
(NKIBench `rmsnorm_matmul`: RMSNorm without gain and without epsilon, then a matmul)."""

import numpy as np

from .. import families
from ..problem import Counts

PARAMS = ("M", "N", "K")
SHAPES = {
    "paper": {"M": 4096, "N": 2048, "K": 1024},
    "small": {"M": 256, "N": 768, "K": 256},
    "tiny": {"M": 128, "N": 512, "K": 128},
}
TOLERANCE = 2e-5
BASELINE = "rmsnorm_matmul.py"

FAMILIES = (
    families.scaled("large", [1e3, 1.0], "large activations"),
    families.Family("outliers", "a few activations hundreds of times larger than the rest",
                    lambda rng, xs: [families.outliers(xs[0], rng, 0.01, 50.0, 500.0), xs[1]]),
)


def make_inputs(rng: np.random.Generator, M: int, N: int, K: int) -> list[np.ndarray]:
    return [rng.standard_normal((M, K), dtype=np.float32), rng.standard_normal((K, N), dtype=np.float32)]


def reference(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    rms = np.sqrt(np.sum(np.square(x) / np.float32(x.shape[1]), axis=1, keepdims=True))
    return (x / rms) @ w


def counts(M: int, N: int, K: int) -> Counts:
    # AccelOpt: 2MNK matmul flops; 4 vector ops per x element; read x and w, write out.
    return Counts(flops_matmul=2.0 * M * N * K, flops_vector=4.0 * M * K, hbm_bytes=(M * K + K * N + M * N) * 4.0)
