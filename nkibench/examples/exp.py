"""exp: y = exp(x) over an (M, N) fp32 matrix, the NKI documentation's layout example
(`layout-pass.py`, one (128, 512) tile)."""

import numpy as np

from .. import families
from ..problem import Counts
from ..problems import silu as _silu

PARAMS = ("M", "N")
SHAPES = {
    "paper": {"M": 512, "N": 2048},
    "tiny": {"M": 128, "N": 512},   # the example's one tile
}
TOLERANCE = 2e-5
BASELINE = "exp.py"

FAMILIES = (
    families.scaled("large", [10.0], "large magnitudes (exp up to about 1e20 and down to 0)"),
    families.Family("edges", "zeros and outliers of both signs",
                    lambda rng, xs: [families.zeros(families.outliers(xs[0], rng, 0.1, 20.0, 80.0), rng, 0.2)]),
)
# None of the derived families: every one of them scales some inputs by 100, and exp of a
# standard normal draw times 100 is past float32's range (the declared families stay inside it).
DERIVED_FAMILIES = ()

make_inputs = _silu.make_inputs   # one standard normal (M, N) matrix


def reference(x: np.ndarray) -> np.ndarray:
    return np.exp(x)


def counts(M: int, N: int) -> Counts:
    return Counts(0.0, float(M * N), 2.0 * M * N * 4.0)
