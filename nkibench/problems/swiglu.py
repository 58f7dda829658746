"""swiglu: out = (silu(x @ w_gate) * (x @ w_up)) @ w_down with x (M, K), w_up and w_gate
(K, N), w_down (N, K), fp32 (NKIBench `swiglu`); silu(t) = t / (1 + exp(-t))."""

import numpy as np

from .. import families
from ..problem import Counts

PARAMS = ("M", "N", "K")
SHAPES = {
    "paper": {"M": 4096, "N": 3072, "K": 1024},
    "small": {"M": 512, "N": 384, "K": 256},
    "tiny": {"M": 128, "N": 128, "K": 128},
}
TOLERANCE = 2e-5
BASELINE = "swiglu.py"

FAMILIES = (
    families.scaled("large", [8.0, 1.0, 1.0, 1.0], "large activations (gates far in both tails of the sigmoid)"),
    families.Family("sparse", "sparse activations with zero rows",
                    lambda rng, xs: [families.zero_rows(families.zeros(xs[0], rng, 0.5), rng, 0.1), *xs[1:]]),
)


def make_inputs(rng: np.random.Generator, M: int, N: int, K: int) -> list[np.ndarray]:
    def normal(shape: tuple[int, int]) -> np.ndarray:
        return rng.standard_normal(shape, dtype=np.float32)

    return [normal((M, K)), normal((K, N)), normal((N, K)), normal((K, N))]


def reference(x: np.ndarray, w_up: np.ndarray, w_down: np.ndarray, w_gate: np.ndarray) -> np.ndarray:
    gate = x @ w_gate
    with np.errstate(over="ignore"):  # exp(-gate) may overflow to inf; gate / inf = 0 is the limit
        hidden = gate / (1 + np.exp(-gate)) * (x @ w_up)
    return hidden @ w_down


def counts(M: int, N: int, K: int) -> Counts:
    # AccelOpt: three MxKxN matmuls; 5 vector ops per hidden element (silu and the product);
    # read x twice and the three weights (the output is not counted, as in the paper).
    return Counts(flops_matmul=6.0 * M * K * N, flops_vector=5.0 * M * N, hbm_bytes=(M * K * 2 + K * N * 3) * 4.0)
