"""mamba: the selective-scan core of a Mamba block (NKIBench `mamba`).

delta, u are (C, M) (channels x sequence), a is (C, S), b and c are (S, M). For every
channel i and state s the recurrence h[t] = exp(delta[i,t] a[i,s]) h[t-1] + delta[i,t] b[s,t] u[i,t]
(h[-1] = 0) runs along the sequence; out[i,t] = sum_s c[s,t] h[i,s,t].
"""

import numpy as np

from .. import families
from ..problem import Counts

PARAMS = ("M", "C", "S")
SHAPES = {
    "paper": {"M": 7168, "C": 256, "S": 16},
    "small": {"M": 1536, "C": 192, "S": 4},  # partial channel tile and sequence chunk
    "tiny": {"M": 512, "C": 128, "S": 2},
}
TOLERANCE = 3e-5
BASELINE = "mamba.py"

FAMILIES = (
    families.Family("decaying", "positive step sizes and a negative state matrix (the model's own domain, strong decay)",
                    lambda rng, xs: [np.abs(xs[0]) * np.float32(20.0), xs[1], -np.abs(xs[2]) * np.float32(20.0), xs[3], xs[4]]),
    families.scaled("large", [1.0, 100.0, 1.0, 10.0, 10.0], "large inputs and projections"),
)
# Of the derived families only the sparse one: scaling the step sizes or the state matrix by up
# to 100 sends exp(delta * A) past float32's range, which is outside the model's domain.
DERIVED_FAMILIES = ("sparse_tiles",)


def make_inputs(rng: np.random.Generator, M: int, C: int, S: int) -> list[np.ndarray]:
    def normal(shape: tuple[int, int]) -> np.ndarray:
        return (0.05 * rng.standard_normal(shape)).astype(np.float32)

    return [normal((C, M)), normal((C, M)), normal((C, S)), normal((S, M)), normal((S, M))]


def reference(delta: np.ndarray, u: np.ndarray, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    C, M = delta.shape
    decay = np.exp(delta[:, None, :] * a[:, :, None])      # (C, S, M)
    drive = (delta * u)[:, None, :] * b[None, :, :]         # (C, S, M)
    out = np.empty((C, M), dtype=np.float32)
    h = np.zeros(decay.shape[:2], dtype=np.float32)
    for t in range(M):  # the recurrence is sequential along the sequence, in fp32 like the kernel
        h = decay[:, :, t] * h + drive[:, :, t]
        out[:, t] = h @ c[:, t]
    return out


def counts(M: int, C: int, S: int) -> Counts:
    # AccelOpt: per (channel, state, step) 4 ops to form exp(delta a) and delta b u, 2 for the
    # scan, 2 for the weighted sum over states; read delta, u, a, b, c, write out.
    return Counts(
        flops_matmul=0.0,
        flops_vector=8.0 * M * C * S,
        hbm_bytes=(C * M * 2 + C * S + S * M * 2 + C * M) * 4.0,
    )
