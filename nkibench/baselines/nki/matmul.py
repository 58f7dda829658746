"""Matmul baseline (current `nki` dialect): out = lhs @ rhs for lhs (M, K), rhs (K, N), float32.

TensorE contracts over the partition dim, so every (128, 128) tile of lhs is transposed on
chip (nc_transpose on TensorE into PSUM, then copied to SBUF) into lhsT tiles holding K on
partitions. Rows are processed in blocks of TILES_M row tiles so that each rhs tile loaded
from HBM feeds TILES_M matmuls; every (128, TILE_N) output tile accumulates over K in its
own PSUM tile (the first matmul overwrites, the next ones add), is copied to SBUF and
stored. Any shape: the last tile of each dimension is a clipped slice (min).
"""
import nki
import nki.isa as nisa
import nki.language as nl

TILE_N = 512  # tune: 128, 256, 512
TILES_M = 1  # tune: 1, 2, 4


@nki.jit
def kernel(lhs, rhs):
    M, K = lhs.shape
    N = rhs.shape[1]
    out = nl.ndarray((M, N), dtype=lhs.dtype, buffer=nl.shared_hbm)
    P = nl.tile_size.pmax
    BM = TILES_M * P
    KT = (K + P - 1) // P

    for mb in nl.affine_range((M + BM - 1) // BM):
        # lhsT[t][k]: the transpose of the (rows of row tile t, K tile k) tile of lhs
        rows = []
        lhsT = []
        for t in nl.affine_range((min(BM, M - mb * BM) + P - 1) // P):
            m0 = mb * BM + t * P
            ms = min(P, M - m0)
            rows.append((m0, ms))
            tiles = []
            for k in nl.affine_range(KT):
                k0 = k * P
                ks = min(P, K - k0)
                x_tile = nl.ndarray((ms, ks), dtype=lhs.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=x_tile, src=lhs[m0:m0 + ms, k0:k0 + ks])
                x_t = nl.ndarray((ks, ms), dtype=nl.float32, buffer=nl.psum)
                nisa.nc_transpose(dst=x_t, data=x_tile, engine=nisa.tensor_engine)
                xT_tile = nl.ndarray((ks, ms), dtype=lhs.dtype, buffer=nl.sbuf)
                nisa.tensor_copy(dst=xT_tile, src=x_t)
                tiles.append(xT_tile)
            lhsT.append(tiles)

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
                    nisa.nc_matmul(dst=accs[t], stationary=lhsT[t][k], moving=w_tile)
            for t in nl.affine_range(len(rows)):
                m0, ms = rows[t]
                res = nl.ndarray((ms, ns), dtype=out.dtype, buffer=nl.sbuf)
                nisa.tensor_copy(dst=res, src=accs[t])
                nisa.dma_copy(dst=out[m0:m0 + ms, n0:n0 + ns], src=res)
    return out
