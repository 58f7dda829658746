"""LoRA baseline (current `nki` dialect): out = x @ w + (x @ a) @ b for x (M, K), w (K, N),
a (K, R), b (R, N), float32.

Rows are processed in blocks of TILES_M tiles of 128. Each x tile is transposed on chip
(nc_transpose on TensorE into PSUM, copied to SBUF) so that K lies on partitions. The
low-rank product is formed already transposed, (x a)^T = a^T x^T (R on partitions), so it
serves directly as the stationary operand of the second low-rank matmul. Every
(128, TILE_N) output tile accumulates x w over the K tiles and then (x a) b in the same PSUM
tile (the first matmul overwrites, the next ones add), is copied to SBUF and stored. a
stays in SBUF for the whole kernel. R <= 128; otherwise any shape: the last tile of each
dimension is a clipped slice (min).
"""
import nki
import nki.isa as nisa
import nki.language as nl

TILE_N = 512  # tune: 128, 256, 512
TILES_M = 1  # tune: 1, 2, 4


@nki.jit
def kernel(x, w, a, b):
    M, K = x.shape
    N = w.shape[1]
    R = a.shape[1]
    out = nl.ndarray((M, N), dtype=x.dtype, buffer=nl.shared_hbm)
    P = nl.tile_size.pmax
    assert R <= P, "lora baseline: R must be at most 128"
    BM = TILES_M * P
    KT = (K + P - 1) // P

    a_sb = []
    for k in nl.affine_range(KT):
        k0 = k * P
        ks = min(P, K - k0)
        a_tile = nl.ndarray((ks, R), dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=a_tile, src=a[k0:k0 + ks, 0:R])
        a_sb.append(a_tile)

    for mb in nl.affine_range((M + BM - 1) // BM):
        # xT[t][k]: the transpose of the (rows of row tile t, K tile k) tile of x;
        # xaT[t]: (x a)^T for the rows of row tile t
        rows = []
        xT = []
        xaT = []
        for t in nl.affine_range((min(BM, M - mb * BM) + P - 1) // P):
            m0 = mb * BM + t * P
            ms = min(P, M - m0)
            rows.append((m0, ms))
            tiles = []
            for k in nl.affine_range(KT):
                k0 = k * P
                ks = min(P, K - k0)
                x_tile = nl.ndarray((ms, ks), dtype=x.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=x_tile, src=x[m0:m0 + ms, k0:k0 + ks])
                x_t = nl.ndarray((ks, ms), dtype=nl.float32, buffer=nl.psum)
                nisa.nc_transpose(dst=x_t, data=x_tile, engine=nisa.tensor_engine)
                xT_tile = nl.ndarray((ks, ms), dtype=x.dtype, buffer=nl.sbuf)
                nisa.tensor_copy(dst=xT_tile, src=x_t)
                tiles.append(xT_tile)
            xT.append(tiles)
            xa_acc = nl.ndarray((R, ms), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range(KT):
                nisa.nc_matmul(dst=xa_acc, stationary=a_sb[k], moving=tiles[k])
            xa_tile = nl.ndarray((R, ms), dtype=x.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(dst=xa_tile, src=xa_acc)
            xaT.append(xa_tile)

        for n in nl.affine_range((N + TILE_N - 1) // TILE_N):
            n0 = n * TILE_N
            ns = min(TILE_N, N - n0)
            accs = []
            for t in nl.affine_range(len(rows)):
                accs.append(nl.ndarray((rows[t][1], ns), dtype=nl.float32, buffer=nl.psum))
            for k in nl.affine_range(KT):
                k0 = k * P
                ks = min(P, K - k0)
                w_tile = nl.ndarray((ks, ns), dtype=w.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=w_tile, src=w[k0:k0 + ks, n0:n0 + ns])
                for t in nl.affine_range(len(rows)):
                    nisa.nc_matmul(dst=accs[t], stationary=xT[t][k], moving=w_tile)
            b_tile = nl.ndarray((R, ns), dtype=b.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=b_tile, src=b[0:R, n0:n0 + ns])
            for t in nl.affine_range(len(rows)):
                m0, ms = rows[t]
                nisa.nc_matmul(dst=accs[t], stationary=xaT[t], moving=b_tile)
                res = nl.ndarray((ms, ns), dtype=out.dtype, buffer=nl.sbuf)
                nisa.tensor_copy(dst=res, src=accs[t])
                nisa.dma_copy(dst=out[m0:m0 + ms, n0:n0 + ns], src=res)
    return out
