"""Add + RMSNorm + matmul baseline (current `nki` dialect): y = x + z;
out = (y / sqrt(mean(y^2, axis=1) + 1e-5) * g) @ w for x, z (M, K), g (K,), w (K, N), float32.

The gain g is copied in once as a (1, K) row and broadcast to all 128 partitions. Rows are
processed in blocks of TILES_M tiles of 128: each row tile of x and z is copied in whole and
added; one ScalarE activation squares y and sums the squares along the free dim, a second
turns the sums into the (128, 1) reciprocal RMS, rsqrt(sum / K + 1e-5), and one VectorE
instruction multiplies y by it and by the gain. The result is transposed on TensorE in
(128, 128) pieces so that K lies on partitions (yT holds the block: K tile by row); each w
tile (128 of K, TILE_N) copied in from HBM then feeds the block's TILES_M matmuls, each
accumulating over K in its own PSUM tile. The last row tile, K tile and column tile are
slices clipped with min().
"""
import nki
import nki.isa as nisa
import nki.language as nl

TILE_N = 512  # tune: 128, 256, 512
TILES_M = 1  # tune: 1, 2, 4


@nki.jit
def kernel(x, w, z, g):
    M, K = x.shape
    N = w.shape[1]
    out = nl.ndarray((M, N), dtype=x.dtype, buffer=nl.shared_hbm)
    P = nl.tile_size.pmax
    f32 = nl.float32
    KT = (K + P - 1) // P
    BM = TILES_M * P

    g_row = nl.ndarray((1, K), dtype=g.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=g_row, src=g.reshape((1, K)))
    g_bcast = nl.ndarray((P, K), dtype=f32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=g_bcast, src=nl.broadcast_to(g_row, (P, K)))

    for mb in nl.affine_range((M + BM - 1) // BM):
        b0 = mb * BM
        TM = (min(BM, M - b0) + P - 1) // P
        yT = nl.ndarray((P, KT, BM), dtype=x.dtype, buffer=nl.sbuf)
        for t in nl.affine_range(TM):
            r0 = b0 + t * P
            rs = min(P, M - r0)
            x_tile = nl.ndarray((rs, K), dtype=x.dtype, buffer=nl.sbuf)
            z_tile = nl.ndarray((rs, K), dtype=z.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=x_tile, src=x[r0:r0 + rs, 0:K])
            nisa.dma_copy(dst=z_tile, src=z[r0:r0 + rs, 0:K])
            y = nl.ndarray((rs, K), dtype=f32, buffer=nl.sbuf)
            nisa.tensor_tensor(dst=y, data1=x_tile, data2=z_tile, op=nl.add)
            sq = nl.ndarray((rs, K), dtype=f32, buffer=nl.sbuf)
            sum_sq = nl.ndarray((rs, 1), dtype=f32, buffer=nl.sbuf)
            nisa.activation_reduce(dst=sq, op=nl.square, data=y, reduce_op=nl.add, reduce_res=sum_sq)
            inv_rms = nl.ndarray((rs, 1), dtype=f32, buffer=nl.sbuf)
            nisa.activation(dst=inv_rms, op=nl.rsqrt, data=sum_sq, scale=1.0 / K, bias=1e-5)
            y_norm = nl.ndarray((rs, K), dtype=x.dtype, buffer=nl.sbuf)
            nisa.scalar_tensor_tensor(dst=y_norm, data=y, op0=nl.multiply, operand0=inv_rms, op1=nl.multiply,
                                      operand1=g_bcast[0:rs, 0:K])
            for k in nl.affine_range(KT):
                k0 = k * P
                ks = min(P, K - k0)
                piece = nl.ndarray((ks, rs), dtype=f32, buffer=nl.psum)
                nisa.nc_transpose(dst=piece, data=y_norm[0:rs, k0:k0 + ks])
                nisa.tensor_copy(dst=yT[0:ks, k, t * P:t * P + rs], src=piece)

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
                    nisa.nc_matmul(dst=acc[0:rs, t, 0:ns], stationary=yT[0:ks, k, t * P:t * P + rs], moving=w_tile)
            for t in nl.affine_range(TM):
                r0 = b0 + t * P
                rs = min(P, M - r0)
                res = nl.ndarray((rs, ns), dtype=out.dtype, buffer=nl.sbuf)
                nisa.tensor_copy(dst=res, src=acc[0:rs, t, 0:ns])
                nisa.dma_copy(dst=out[r0:r0 + rs, n0:n0 + ns], src=res)
    return out
