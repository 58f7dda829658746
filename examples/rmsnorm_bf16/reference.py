"""RMSNorm in bfloat16: out = x / sqrt(mean(x^2, axis=-1) + 1e-6) * w, for x (N, D), w (D,).

The NumPy reference of `examples/rmsnorm_bf16/kernel.py` (README: Optimize your own kernel).
It follows the NKIBench convention: `get_inputs()` draws the inputs from NumPy's global
generator, `forward(*inputs)` computes the outputs; the upper-case integers are the shape
(`--set problem.N=4096` runs another).
"""
import ml_dtypes
import numpy as np

N = 2048
D = 1024
EPS = 1e-6


def get_inputs():
    x = np.random.randn(N, D).astype(ml_dtypes.bfloat16)
    w = (1.0 + 0.1 * np.random.randn(D)).astype(ml_dtypes.bfloat16)
    return [x, w]


def forward(x, w):
    x = x.astype(np.float32)
    inv_rms = 1.0 / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + EPS)
    return (x * inv_rms * w.astype(np.float32)).astype(ml_dtypes.bfloat16)
