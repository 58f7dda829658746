"""add_rmsnorm_matmul: y = x + z; out = (y / sqrt(mean(y^2, axis=-1) + eps) * g) @ w with
x, z (M, K), g (K,), w (K, N), eps = 1e-5, fp32 (NKIBench `add_rmsnorm_matmul`).

The official reference passes eps as a third input; here it is the constant EPS, so that
every input is an array.
"""

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
BASELINE = "add_rmsnorm_matmul.py"

FAMILIES = (
    families.scaled("large", [1e3, 1.0, 1e3, 1.0], "large activations"),
    families.Family("cancelling", "x + z cancels to tiny or zero rows (the epsilon decides)",
                    lambda rng, xs: [xs[0], xs[1], _cancel(rng, xs[0]), xs[3]]),
)


def _cancel(rng: np.random.Generator, x: np.ndarray) -> np.ndarray:
    """z = -x + a tiny perturbation, exactly -x on a quarter of the rows."""
    z = -x + np.float32(1e-4) * rng.standard_normal(x.shape, dtype=np.float32)
    return np.where((rng.random(x.shape[0]) < 0.25)[:, None], -x, z).astype(np.float32)
EPS = 1e-5


def make_inputs(rng: np.random.Generator, M: int, N: int, K: int) -> list[np.ndarray]:
    def normal(shape: tuple[int, ...]) -> np.ndarray:
        return rng.standard_normal(shape, dtype=np.float32)

    return [normal((M, K)), normal((K, N)), normal((M, K)), normal((K,))]


def reference(x: np.ndarray, w: np.ndarray, z: np.ndarray, g: np.ndarray) -> np.ndarray:
    y = x + z
    ms = np.sum(np.square(y) / np.float32(y.shape[-1]), axis=-1, keepdims=True) + np.float32(EPS)
    return (y / np.sqrt(ms) * g) @ w


def counts(M: int, N: int, K: int) -> Counts:
    # AccelOpt: 2MNK matmul flops; 6 vector ops per x element; read x, z, w, g, write out.
    return Counts(flops_matmul=2.0 * M * N * K, flops_vector=6.0 * M * K,
                  hbm_bytes=(M * K * 2 + K * N + K + M * N) * 4.0)
