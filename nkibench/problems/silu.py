"""silu: y = x * sigmoid(x) = x / (1 + exp(-x)) over an (M, N) fp32 matrix (NKIBench `silu`).

Module layout shared by every built-in problem:
  PARAMS      names of the shape parameters
  SHAPES      named shapes; "paper" is the registry default, "small" is for tests
  TOLERANCE   L2 relative error bound of the correctness gate
  BASELINE    file name of the baseline kernel in nkibench/baselines/
  make_inputs(rng, **shape) -> list of arrays     (rng: a np.random.Generator per seed)
  reference(*inputs) -> array or tuple of arrays
  counts(**shape) -> Counts                        (the paper's flop and byte formulas)
  FAMILIES    held-out input families valid for the operator's math (nkibench.families)
  to_kernel_inputs / from_kernel_outputs          optional; default: identity / reshape
  check_shape(**shape)                            optional; raises ValueError for shapes the
                                                  operator itself cannot take
"""

import numpy as np

from .. import families
from ..problem import Counts

PARAMS = ("M", "N")
SHAPES = {
    "paper": {"M": 4096, "N": 7168},
    "small": {"M": 256, "N": 1024},
    "tiny": {"M": 128, "N": 512},
}
TOLERANCE = 2e-5
BASELINE = "silu.py"

FAMILIES = (
    families.scaled("large", [30.0], "large magnitudes (x up to about +-130)"),
    families.Family("edges", "zeros and large values of both signs",
                    lambda rng, xs: [families.zeros(families.outliers(xs[0], rng, 0.15, 8.0, 80.0), rng, 0.15)]),
)


def make_inputs(rng: np.random.Generator, M: int, N: int) -> list[np.ndarray]:
    return [rng.standard_normal((M, N), dtype=np.float32)]


def reference(x: np.ndarray) -> np.ndarray:
    return x / (1 + np.exp(-x))


def counts(M: int, N: int) -> Counts:
    # AccelOpt: 3 vector ops per element (exp, add, divide); read x, write y.
    return Counts(flops_matmul=0.0, flops_vector=3.0 * M * N, hbm_bytes=(M * N + N * M) * 4.0)
