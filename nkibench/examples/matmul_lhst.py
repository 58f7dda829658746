"""matmul_lhst: out = lhs @ rhs with the left operand handed to the kernel transposed, the
signature of the NKI SDK's matrix-multiplication examples: `kernel(lhsT, rhs)` with lhsT
(K, M) and rhs (K, N), fp32. The reference inputs, reference, families and counts are
NKIBench matmul's, so that a kernel of either dialect is judged on the same data."""

import numpy as np

from ..problems import matmul as _matmul

PARAMS = ("M", "N", "K")
SHAPES = {
    "paper": {"M": 2048, "N": 1024, "K": 1024},  # one block of the fully optimized version (16 x 2 x 8 tiles)
    "basic": {"M": 64, "N": 512, "K": 128},      # the one shape nki_matmul_basic_ takes
    "small": {"M": 256, "N": 1024, "K": 256},    # the tiled and blocked versions' smallest multi-tile shape
    "tiny": {"M": 128, "N": 512, "K": 128},
}
TOLERANCE = _matmul.TOLERANCE
BASELINE = "matmul_lhst.py"
FAMILIES = _matmul.FAMILIES

make_inputs = _matmul.make_inputs
reference = _matmul.reference
counts = _matmul.counts


def to_kernel_inputs(inputs: list[np.ndarray], M: int, N: int, K: int) -> list[np.ndarray]:
    lhs, rhs = inputs
    return [np.ascontiguousarray(lhs.T), rhs]
