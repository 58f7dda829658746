"""matmul_add_rmsnorm: y = x @ w + z; out = y * g / sqrt(mean(y^2, axis=-1) + eps) with
x (M, K), w (K, N), z (M, N), g (N,), eps = 1e-5, fp32 (NKIBench `matmul_add_rmsnorm`).

The official reference passes eps as a third input; here it is the constant EPS, so that
every input is an array.
"""

import numpy as np

from .. import families
from ..problem import Counts

PARAMS = ("M", "N", "K")
SHAPES = {
    "paper": {"M": 4096, "N": 2048, "K": 2048},
    "small": {"M": 256, "N": 1024, "K": 256},
    "tiny": {"M": 128, "N": 512, "K": 128},
}
TOLERANCE = 2e-5
BASELINE = "matmul_add_rmsnorm.py"

FAMILIES = (
    families.scaled("large", [1e3, 1.0, 1e4, 1.0], "large activations"),
    families.scaled("small", [1e-5, 1.0, 1e-5, 1.0], "tiny activations (the epsilon dominates the mean square)"),
)
EPS = 1e-5


def make_inputs(rng: np.random.Generator, M: int, N: int, K: int) -> list[np.ndarray]:
    def normal(shape: tuple[int, ...]) -> np.ndarray:
        return rng.standard_normal(shape, dtype=np.float32)

    return [normal((M, K)), normal((K, N)), normal((M, N)), normal((N,))]


def reference(x: np.ndarray, w: np.ndarray, z: np.ndarray, g: np.ndarray) -> np.ndarray:
    y = x @ w + z
    rms = np.sqrt(np.mean(np.square(y), axis=-1, keepdims=True) + np.float32(EPS))
    return y * g / rms


def counts(M: int, N: int, K: int) -> Counts:
    # AccelOpt: 2MNK matmul flops; 6 vector ops per y element; read x, w, z, g, write out.
    return Counts(flops_matmul=2.0 * M * N * K, flops_vector=6.0 * M * N,
                  hbm_bytes=(M * K + N * K + M * N + N + M * N) * 4.0)
