"""exp baseline (current `nki` dialect): rows in tiles of 128 and columns in tiles of TILE_N
(clipped slices at the edges); each tile is one ScalarE activation between two DMAs."""
import nki
import nki.isa as nisa
import nki.language as nl

TILE_N = 1024  # tune: 512, 1024, 2048


@nki.jit
def kernel(x):
    M, N = x.shape
    y = nl.ndarray((M, N), dtype=x.dtype, buffer=nl.shared_hbm)
    P = nl.tile_size.pmax
    for m in nl.affine_range((M + P - 1) // P):
        rows = min(P, M - m * P)
        for n in nl.affine_range((N + TILE_N - 1) // TILE_N):
            cols = min(TILE_N, N - n * TILE_N)
            view = (slice(m * P, m * P + rows), slice(n * TILE_N, n * TILE_N + cols))
            t = nl.ndarray((rows, cols), dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=x[view])
            nisa.activation(dst=t, op=nl.exp, data=t)
            nisa.dma_copy(dst=y[view], src=t)
    return y
