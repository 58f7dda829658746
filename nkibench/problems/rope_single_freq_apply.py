"""rope_single_freq_apply: rotary embedding with one frequency table (NKIBench
`rope_single_freq_apply`).

x is (D, B*H*N) with the head dim first; freqs_cos and freqs_sin are (D/2, B*H*N).
With x0 = x[:D/2] and x1 = x[D/2:]: out = [x0 cos - x1 sin ; x0 sin + x1 cos].
"""

import numpy as np

from .. import families
from ..problem import Counts

PARAMS = ("B", "H", "N", "D")
SHAPES = {
    "paper": {"B": 1, "H": 64, "N": 4096, "D": 128},
    "small": {"B": 1, "H": 4, "N": 640, "D": 128},
    "tiny": {"B": 1, "H": 2, "N": 256, "D": 64},
}
TOLERANCE = 2e-5
BASELINE = "rope_single_freq_apply.py"

FAMILIES = (
    families.scaled("large", [1e3, 1.0, 1.0], "large activations"),
    families.Family("rotations", "true rotations (cos and sin of one angle) of large vectors",
                    lambda rng, xs: _rotations(rng, xs)),
)


def _rotations(rng: np.random.Generator, xs: list[np.ndarray]) -> list[np.ndarray]:
    theta = rng.uniform(-np.pi, np.pi, xs[1].shape)
    return [xs[0] * np.float32(100.0), np.cos(theta).astype(np.float32), np.sin(theta).astype(np.float32)]


def check_shape(B: int, H: int, N: int, D: int) -> None:
    if D % 2:
        raise ValueError(f"D must be even, got {D}")


def make_inputs(rng: np.random.Generator, B: int, H: int, N: int, D: int) -> list[np.ndarray]:
    T = B * H * N
    x = rng.standard_normal((D, T), dtype=np.float32)
    freqs_cos = rng.standard_normal((D // 2, T), dtype=np.float32)
    freqs_sin = rng.standard_normal((D // 2, T), dtype=np.float32)
    return [x, freqs_cos, freqs_sin]


def reference(x: np.ndarray, freqs_cos: np.ndarray, freqs_sin: np.ndarray) -> np.ndarray:
    half = x.shape[0] // 2
    x0, x1 = x[:half], x[half:]
    return np.concatenate([x0 * freqs_cos - x1 * freqs_sin, x0 * freqs_sin + x1 * freqs_cos], axis=0)


def counts(B: int, H: int, N: int, D: int) -> Counts:
    # AccelOpt: 3 vector ops per output element; read x, cos, sin (D/2 rows each twice), write out.
    T = B * H * N
    return Counts(flops_matmul=0.0, flops_vector=3.0 * T * D, hbm_bytes=3.0 * D * T * 4)
