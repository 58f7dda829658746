"""RMSNorm + matmul baseline (current `nki` dialect): out = (x / sqrt(mean(x^2, axis=1))) @ w
for x (M, K), w (K, N), float32 (no gain, no epsilon).

Rows are processed in blocks of TILES_M tiles of 128. Each row tile is copied in whole
(128, K); one ScalarE activation squares it and sums the squares along the free dim, a
second turns the sums into the (128, 1) reciprocal RMS, rsqrt(sum / K), which scales the
row tile on VectorE. The normalised tile is transposed on TensorE in (128, 128) pieces so
that K lies on partitions (xT holds the block: K tile by row); each w tile (128 of K,
TILE_N) copied in from HBM then feeds the block's TILES_M matmuls, each accumulating over K
in its own PSUM tile. The last row tile, K tile and column tile are slices clipped with
min().
"""
import nki
import nki.isa as nisa
import nki.language as nl

TILE_N = 512  # tune: 128, 256, 512
TILES_M = 1  # tune: 1, 2, 4


@nki.jit
def kernel(x, w):
    M, K = x.shape
    N = w.shape[1]
    out = nl.ndarray((M, N), dtype=x.dtype, buffer=nl.shared_hbm)
    P = nl.tile_size.pmax
    f32 = nl.float32
    KT = (K + P - 1) // P
    BM = TILES_M * P

    for mb in nl.affine_range((M + BM - 1) // BM):
        b0 = mb * BM
        TM = (min(BM, M - b0) + P - 1) // P
        xT = nl.ndarray((P, KT, BM), dtype=x.dtype, buffer=nl.sbuf)
        for t in nl.affine_range(TM):
            r0 = b0 + t * P
            rs = min(P, M - r0)
            x_tile = nl.ndarray((rs, K), dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=x_tile, src=x[r0:r0 + rs, 0:K])
            sq = nl.ndarray((rs, K), dtype=f32, buffer=nl.sbuf)
            sum_sq = nl.ndarray((rs, 1), dtype=f32, buffer=nl.sbuf)
            nisa.activation_reduce(dst=sq, op=nl.square, data=x_tile, reduce_op=nl.add, reduce_res=sum_sq)
            inv_rms = nl.ndarray((rs, 1), dtype=f32, buffer=nl.sbuf)
            nisa.activation(dst=inv_rms, op=nl.rsqrt, data=sum_sq, scale=1.0 / K)
            x_norm = nl.ndarray((rs, K), dtype=x.dtype, buffer=nl.sbuf)
            nisa.tensor_scalar(dst=x_norm, data=x_tile, op0=nl.multiply, operand0=inv_rms)
            for k in nl.affine_range(KT):
                k0 = k * P
                ks = min(P, K - k0)
                piece = nl.ndarray((ks, rs), dtype=f32, buffer=nl.psum)
                nisa.nc_transpose(dst=piece, data=x_norm[0:rs, k0:k0 + ks])
                nisa.tensor_copy(dst=xT[0:ks, k, t * P:t * P + rs], src=piece)

        for n in nl.affine_range((N + TILE_N - 1) // TILE_N):
            n0 = n * TILE_N
            ns = min(TILE_N, N - n0)
            acc = nl.ndarray((P, TILES_M, TILE_N), dtype=f32, buffer=nl.psum)
            for k in nl.affine_range(KT):
                k0 = k * P
                ks = min(P, K - k0)
                w_tile = nl.ndarray((ks, ns), dtype=w.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=w_tile, src=w[k0:k0 + ks, n0:n0 + ns])
                for t in nl.affine_range(TM):
                    rs = min(P, M - b0 - t * P)
                    nisa.nc_matmul(dst=acc[0:rs, t, 0:ns], stationary=xT[0:ks, k, t * P:t * P + rs], moving=w_tile)
            for t in nl.affine_range(TM):
                r0 = b0 + t * P
                rs = min(P, M - r0)
                res = nl.ndarray((rs, ns), dtype=out.dtype, buffer=nl.sbuf)
                nisa.tensor_copy(dst=res, src=acc[0:rs, t, 0:ns])
                nisa.dma_copy(dst=out[r0:r0 + rs, n0:n0 + ns], src=res)
    return out
