"""transpose_matmul baseline (current `nki` dialect): out = lhs_t.T @ rhs for lhs_t (K, M),
rhs (K, N), float32.

lhs_t already holds the contraction dim first, so its (128 of K, 128 of M) tiles are the
stationary operands as loaded. Rows of the output are processed in blocks of TILES_M tiles
of 128: the block's lhs_t columns are loaded once, then each rhs tile (128 of K, TILE_N)
loaded from HBM feeds TILES_M matmuls accumulating over K in PSUM (the first matmul into a
tile overwrites, the next ones add); each result is copied to SBUF and stored. Any shape:
the last tile of each dimension is a clipped slice (min).
"""
import nki
import nki.isa as nisa
import nki.language as nl

TILE_N = 512  # tune: 128, 256, 512
TILES_M = 1  # tune: 1, 2, 4


@nki.jit
def kernel(lhs_t, rhs):
    K, M = lhs_t.shape
    N = rhs.shape[1]
    out = nl.ndarray((M, N), dtype=lhs_t.dtype, buffer=nl.shared_hbm)
    P = nl.tile_size.pmax
    BM = TILES_M * P
    KT = (K + P - 1) // P

    for mb in nl.affine_range((M + BM - 1) // BM):
        # lhs_sb[t][k]: the (K tile k, columns of row tile t) tile of lhs_t
        rows = []
        lhs_sb = []
        for t in nl.affine_range((min(BM, M - mb * BM) + P - 1) // P):
            m0 = mb * BM + t * P
            ms = min(P, M - m0)
            rows.append((m0, ms))
            tiles = []
            for k in nl.affine_range(KT):
                k0 = k * P
                ks = min(P, K - k0)
                a_tile = nl.ndarray((ks, ms), dtype=lhs_t.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=a_tile, src=lhs_t[k0:k0 + ks, m0:m0 + ms])
                tiles.append(a_tile)
            lhs_sb.append(tiles)

        for n in nl.affine_range((N + TILE_N - 1) // TILE_N):
            n0 = n * TILE_N
            ns = min(TILE_N, N - n0)
            accs = []
            for t in nl.affine_range(len(rows)):
                accs.append(nl.ndarray((rows[t][1], ns), dtype=nl.float32, buffer=nl.psum))
            for k in nl.affine_range(KT):
                k0 = k * P
                ks = min(P, K - k0)
                w_tile = nl.ndarray((ks, ns), dtype=rhs.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=w_tile, src=rhs[k0:k0 + ks, n0:n0 + ns])
                for t in nl.affine_range(len(rows)):
                    nisa.nc_matmul(dst=accs[t], stationary=lhs_sb[t][k], moving=w_tile)
            for t in nl.affine_range(len(rows)):
                m0, ms = rows[t]
                res = nl.ndarray((ms, ns), dtype=out.dtype, buffer=nl.sbuf)
                nisa.tensor_copy(dst=res, src=accs[t])
                nisa.dma_copy(dst=out[m0:m0 + ms, n0:n0 + ns], src=res)
    return out
