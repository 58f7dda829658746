"""maxpool2d: 2-D max pooling with a square window, the NKI documentation's access-pattern
example (`index-case-3.py`): `kernel(x, pool)` with x (C, H, W) fp32, C <= 128 on partitions;
out[c, i, j] = max of x[c, i*pool:(i+1)*pool, j*pool:(j+1)*pool]."""

import numpy as np

from .. import families
from ..problem import Counts
from . import avgpool2d as _avgpool2d

PARAMS = _avgpool2d.PARAMS
SHAPES = _avgpool2d.SHAPES
TOLERANCE = 2e-5
BASELINE = "maxpool2d.py"
FAMILIES = (families.scaled("large", [1e6], "large magnitudes"),
            families.Family("negative", "all values negative (a maximum that starts from 0 is wrong)",
                            lambda rng, xs: [-np.abs(xs[0]) - np.float32(1.0)]))

check_shape = _avgpool2d.check_shape
make_inputs = _avgpool2d.make_inputs


def reference(x: np.ndarray, pool: int) -> np.ndarray:
    c, h, w = x.shape
    return x.reshape(c, h // pool, pool, w // pool, pool).max(axis=(2, 4))


def counts(C: int, H: int, W: int, pool: int) -> Counts:
    return Counts(0.0, float(C * H * W), (C * H * W + C * (H // pool) * (W // pool)) * 4.0)
