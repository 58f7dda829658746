"""transpose2d baseline (current `nki` dialect): rows on partitions (tiles of 128, the last
one a clipped slice); column j of each row's (X, Y) matrix is the strided view
x[:, j::Y], and it becomes the contiguous run out[:, j*X:(j+1)*X] in one copy, Y copies in
all (the example copies element by element, X * Y copies).
"""
import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def kernel(x, shape2d):
    rows, F = x.shape
    X, Y = shape2d
    out = nl.ndarray((rows, F), dtype=x.dtype, buffer=nl.shared_hbm)
    P = nl.tile_size.pmax
    for t in nl.affine_range((rows + P - 1) // P):
        r0 = t * P
        rs = min(P, rows - r0)
        src = nl.ndarray((rs, F), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=src, src=x[r0:r0 + rs, 0:F])
        dst = nl.ndarray((rs, F), dtype=x.dtype, buffer=nl.sbuf)
        for j in nl.affine_range(Y):
            nisa.tensor_copy(dst=dst[0:rs, j * X:(j + 1) * X], src=src[0:rs, j:F:Y])
        nisa.dma_copy(dst=out[r0:r0 + rs, 0:F], src=dst)
    return out
