"""fused_mamba: the Mamba selective scan with a batch dimension, the signature of the NKI SDK's
fused Mamba examples: `kernel(delta, u, A, B, C)` with delta, u (batch, C, M), A (C, S) and
B, C (batch, S, M), returning (batch, C, M). Each batch item is NKIBench mamba's problem
(`nkibench/problems/mamba.py`: same recurrence, inputs, families), so at batch 1 a legacy
mamba kernel and a current fused_mamba kernel see the same numbers."""

import numpy as np

from ..problem import Counts
from ..problems import mamba as _mamba

PARAMS = ("batch", "C", "M", "S")
SHAPES = {
    "paper": {"batch": 1, "C": 256, "M": 2048, "S": 16},   # the example's default configuration
    "small": {"batch": 2, "C": 128, "M": 1024, "S": 2},    # two batch items, two 512-long sequence chunks
    "tiny": {"batch": 1, "C": 128, "M": 512, "S": 2},
}
TOLERANCE = _mamba.TOLERANCE
BASELINE = "fused_mamba.py"
FAMILIES = _mamba.FAMILIES
DERIVED_FAMILIES = _mamba.DERIVED_FAMILIES


def make_inputs(rng: np.random.Generator, batch: int, C: int, M: int, S: int) -> list[np.ndarray]:
    """NKIBench mamba's inputs per batch item (A from the first: it has no batch dimension)."""
    items = [_mamba.make_inputs(rng, M, C, S) for _ in range(batch)]
    delta, u, _, b, c = (np.stack([item[k] for item in items]) for k in range(5))
    return [delta, u, items[0][2], b, c]


def reference(delta: np.ndarray, u: np.ndarray, A: np.ndarray, B: np.ndarray, C: np.ndarray) -> np.ndarray:
    return np.stack([_mamba.reference(delta[i], u[i], A, B[i], C[i]) for i in range(delta.shape[0])])


def counts(batch: int, C: int, M: int, S: int) -> Counts:
    one = _mamba.counts(M, C, S)
    shared = C * S * 4.0   # A is read once for every batch item
    return Counts(0.0, batch * one.flops_vector, batch * (one.hbm_bytes - shared) + shared)
