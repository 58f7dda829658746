"""NumPy reference of the NKI Library's cumsum kernel (nkilib/core/cumsum/cumsum.py).

Semantics of the library's own reference (cumsum_torch.py): the cumulative sum of `x` along
its last axis, same shape and dtype. Inputs: one float32 [B, H] tensor (two partition tiles,
several free tiles, so the kernel's carry between tiles is exercised), uniform in [-1, 1).
"""
import numpy as np

B, H = 160, 1200


def get_inputs():
    x = np.random.uniform(-1.0, 1.0, (B, H)).astype(np.float32)
    return [x]


def forward(x):
    return np.cumsum(x.astype(np.float64), axis=-1).astype(np.float32)
