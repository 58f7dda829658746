"""adamw: one AdamW step at t=1 on an (M, N) fp32 parameter matrix (NKIBench `adamw`).

theta' = theta (1 - 1e-5) - 0.01 m_t / (sqrt(1000 v_t) + 1e-8) with m_t = 0.9 m + 0.1 g and
v_t = 0.999 v + 0.001 g^2 (lr 1e-3, betas 0.9/0.999, weight decay 1e-2, bias corrections of
step 1 folded into the constants).
"""

import numpy as np

from .. import families
from ..problem import Counts

PARAMS = ("M", "N")
SHAPES = {
    "paper": {"M": 10944, "N": 2048},
    "small": {"M": 320, "N": 1024},  # 2.5 row tiles: exercises the partition masks
    "tiny": {"M": 128, "N": 512},
}
TOLERANCE = 2e-5
BASELINE = "adamw.py"

FAMILIES = (
    families.scaled("large", [100.0, 100.0, 100.0, 1e4], "large parameters, gradients and moments"),
    families.Family("fresh", "zero gradient and moments on a third of the entries (the epsilon decides)",
                    lambda rng, xs: _fresh(rng, xs)),
)


def _fresh(rng: np.random.Generator, xs: list[np.ndarray]) -> list[np.ndarray]:
    theta, g, m, v = xs
    zero = rng.random(theta.shape) < 0.3
    return [theta, *(np.where(zero, 0, x).astype(np.float32) for x in (g, m, v))]


def make_inputs(rng: np.random.Generator, M: int, N: int) -> list[np.ndarray]:
    theta = rng.standard_normal((M, N), dtype=np.float32)
    g = rng.standard_normal((M, N), dtype=np.float32)
    m = rng.standard_normal((M, N), dtype=np.float32)
    v = np.abs(rng.standard_normal((M, N), dtype=np.float32))
    return [theta, g, m, v]


def reference(theta: np.ndarray, g: np.ndarray, m: np.ndarray, v: np.ndarray) -> np.ndarray:
    f32 = np.float32
    m_t = f32(0.9) * m + f32(0.1) * g
    v_t = f32(0.999) * v + f32(0.001) * g * g
    return theta - f32(1e-5) * theta - f32(0.01) * m_t / (np.sqrt(v_t * f32(1000)) + f32(1e-8))


def counts(M: int, N: int) -> Counts:
    # AccelOpt: 1 + 1 + 2 + 3 vector ops per element; read theta, g, m, v, write theta'.
    return Counts(flops_matmul=0.0, flops_vector=7.0 * M * N, hbm_bytes=5.0 * M * N * 4)
