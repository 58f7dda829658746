"""Kernels that score work they did not do, found on today's dialect, the DMA prices and the
performance hints: outputs that are views of an input, writes counted as coverage they do not
give, DMAs priced at one end, hints the data contradicts. Each one was accepted (or scored
better than honest work) before the defence it tests."""

from __future__ import annotations

from eval_kernels import SILU
from nkibench.registry import baseline_path

CURRENT = """\
import nki
import nki.isa as nisa
import nki.language as nl
"""

LEGACY = """\
import numpy as np
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
import neuronxcc.nki.isa as nisa
"""

# split_columns kernels (current dialect) up to their own work: shapes, and the two outputs.
_SPLIT = CURRENT + """
@nki.jit
def kernel(x):
    rows, F = x.shape
    FE = F - F // 2
    FO = F // 2
    even = nl.ndarray((rows, FE), dtype=x.dtype, buffer=nl.shared_hbm)
    odd = nl.ndarray((rows, FO), dtype=x.dtype, buffer=nl.shared_hbm)
"""

# One element of the input copied onto itself: the input now counts as written.
_TOUCH_INPUT = """
    t = nl.ndarray((1, 1), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x[0:1, 0:1])
    nisa.dma_copy(dst=x[0:1, 0:1], src=t)
"""

# -- outputs that are not fresh tensors ------------------------------------------------------------

# split_columns: the input touched, then two strided views of it returned as the even and odd
# columns (4 bytes moved for the whole result).
INPUT_VIEWS_AP = _SPLIT + _TOUCH_INPUT + """
    return x.ap([[F, rows], [2, FE]], offset=0), x.ap([[F, rows], [2, FO]], offset=1)
"""

# The same with subscript views (another view constructor).
INPUT_VIEWS_SLICES = _SPLIT + _TOUCH_INPUT + """
    return x[0:rows, 0:F:2], x[0:rows, 1:F:2]
"""

# transpose2d: the input's transposing access pattern returned as the output.
INPUT_VIEW_TRANSPOSED = CURRENT + """
@nki.jit
def kernel(x, shape2d):
    rows, F = x.shape
    X, Y = shape2d
""" + _TOUCH_INPUT + """
    return x.ap([[F, rows], [1, Y], [Y, X]], offset=0)
"""

# silu, legacy dialect: a mutable input written once and returned.
MUTABLE_INPUT_RETURNED = LEGACY + """
import neuronxcc.nki.typing as nt


@nki.jit
def kernel(x: nt.mutable_tensor):
    i_p = nl.arange(1)[:, None]
    i_f = nl.arange(1)[None, :]
    nl.store(x[i_p, i_f], value=nl.load(x[i_p, i_f]))
    return x
"""

# silu, legacy dialect: the result computed into kernel-private HBM (nl.hbm) and returned;
# hardware returns only shared_hbm tensors.
SCRATCH_RETURNED = SILU.replace("buffer=nl.shared_hbm", "buffer=nl.hbm")

# -- coverage: a stride-0 destination writes one column, not all ---------------------------------

STRIDE0_DESTINATION = _SPLIT + """
    t = nl.ndarray((rows, FE), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x[0:rows, 0:F:2])
    nisa.dma_copy(dst=even.ap([[FE, rows], [0, FE]]), src=t)
    nisa.dma_copy(dst=odd.ap([[FO, rows], [0, FO]]), src=t[0:rows, 0:FO])
    return even, odd
"""

# -- DRAM-to-DRAM copies ---------------------------------------------------------------------------

# split_columns by two HBM -> HBM copies from 4-byte-strided sources.
D2D_STRIDED = _SPLIT + """
    nisa.dma_copy(dst=even, src=x.ap([[F, rows], [2, FE]], offset=0))
    nisa.dma_copy(dst=odd, src=x.ap([[F, rows], [2, FO]], offset=1))
    return even, odd
"""

# The same in the legacy dialect, with affine indices.
D2D_STRIDED_LEGACY = LEGACY + """
@nki.jit
def kernel(x):
    P, F = x.shape
    even = nl.ndarray((P, F - F // 2), dtype=x.dtype, buffer=nl.shared_hbm)
    odd = nl.ndarray((P, F // 2), dtype=x.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(P)[:, None]
    i_e = nl.arange(F - F // 2)[None, :]
    i_o = nl.arange(F // 2)[None, :]
    nisa.dma_copy(dst=even[i_p, i_e], src=x[i_p, 2 * i_e])
    nisa.dma_copy(dst=odd[i_p, i_o], src=x[i_p, 2 * i_o + 1])
    return even, odd
"""

# transpose2d in one HBM -> HBM copy through a transposing access pattern.
D2D_TRANSPOSING = CURRENT + """
@nki.jit
def kernel(x, shape2d):
    rows, F = x.shape
    X, Y = shape2d
    out = nl.ndarray((rows, F), dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=x.ap([[F, rows], [1, Y], [Y, X]], offset=0))
    return out
"""

# A contiguous HBM -> HBM copy next to the same copy through SBUF (split_columns is not a
# copy; these are priced on their traces only).
D2D_CONTIGUOUS = CURRENT + """
@nki.jit
def kernel(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=x)
    return out
"""

THROUGH_SBUF = CURRENT + """
@nki.jit
def kernel(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    nisa.dma_copy(dst=out, src=t)
    return out
"""


# -- performance hints the data contradicts --------------------------------------------------------

def _matmul(dialect_folder: str, old: str, new: str) -> str:
    source = baseline_path("matmul", dialect_folder).read_text()
    assert old in source, old
    return source.replace(old, new)


def matmul_hints() -> dict[str, str]:
    """The repository's matmul baselines with a hint their data does not satisfy."""
    legacy_mm = "nisa.nc_matmul(lhsT[t, k, i_k, i_f], w_tile, mask=n_mask)"
    current_mm = "nisa.nc_matmul(dst=accs[t], stationary=lhsT[t][k], moving=w_tile)"
    return {
        "legacy_stationary_onezero": _matmul("legacy", legacy_mm, legacy_mm[:-1] + ", is_stationary_onezero=True)"),
        "legacy_moving_onezero": _matmul("legacy", legacy_mm, legacy_mm[:-1] + ", is_moving_onezero=True)"),
        "current_stationary_onezero": _matmul("current", current_mm, current_mm[:-1] + ", is_stationary_onezero=True)"),
        "current_transpose": _matmul("current", current_mm, current_mm[:-1] + ", is_transpose=True)"),
    }
