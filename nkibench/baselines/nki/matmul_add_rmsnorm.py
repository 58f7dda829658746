"""Matmul + add + RMSNorm baseline (current `nki` dialect): y = x @ w + z;
out = y * g / sqrt(mean(y^2, axis=1) + 1e-5) for x (M, K), w (K, N), z (M, N), g (N,), float32.

The gain g is loaded once as a (1, N) row and broadcast to all 128 partitions. Rows are
processed in blocks of TILES_M tiles of 128, each transposed on chip (nc_transpose on
TensorE into PSUM, copied to SBUF) so that K lies on partitions. Every w tile (128 of K,
TILE_N) loaded from HBM feeds TILES_M matmuls accumulating over K in PSUM (the first matmul
overwrites, the next ones add); z is added while evicting PSUM into a full (128, N) row
block in SBUF. Once a row block is complete, the sum of its squares (reduced by the ScalarE
square instruction) gives a (128, 1) reciprocal RMS that, with the gain, scales the row
block in one instruction before the store. Any shape: the last tile of each dimension is a
clipped slice (min).
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
    BM = TILES_M * P
    KT = (K + P - 1) // P

    g_row = nl.ndarray((1, N), dtype=g.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=g_row, src=g.reshape((1, N)))
    g_bcast = nl.broadcast_to(g_row, (P, N))

    for mb in nl.affine_range((M + BM - 1) // BM):
        # xT[t][k]: the transpose of the (rows of row tile t, K tile k) tile of x;
        # y[t]: the (rows of row tile t, N) block of x @ w + z
        rows = []
        xT = []
        y = []
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
            y.append(nl.ndarray((ms, N), dtype=nl.float32, buffer=nl.sbuf))

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
            for t in nl.affine_range(len(rows)):
                m0, ms = rows[t]
                z_tile = nl.ndarray((ms, ns), dtype=z.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=z_tile, src=z[m0:m0 + ms, n0:n0 + ns])
                nisa.tensor_tensor(dst=y[t][0:ms, n0:n0 + ns], data1=accs[t], data2=z_tile, op=nl.add)

        for t in nl.affine_range(len(rows)):
            m0, ms = rows[t]
            squares = nl.ndarray((ms, N), dtype=nl.float32, buffer=nl.sbuf)
            sum_sq = nl.ndarray((ms, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.activation_reduce(dst=squares, op=nl.square, data=y[t], reduce_op=nl.add, reduce_res=sum_sq)
            mean_sq = nl.ndarray((ms, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_scalar(dst=mean_sq, data=sum_sq, op0=nl.multiply, operand0=1.0 / N,
                               op1=nl.add, operand1=1e-5)
            inv_rms = nl.ndarray((ms, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.activation(dst=inv_rms, op=nl.rsqrt, data=mean_sq)
            res = nl.ndarray((ms, N), dtype=out.dtype, buffer=nl.sbuf)
            nisa.scalar_tensor_tensor(dst=res, data=y[t], op0=nl.multiply, operand0=inv_rms,
                                      op1=nl.multiply, operand1=g_bcast[0:ms, 0:N])
            nisa.dma_copy(dst=out[m0:m0 + ms, 0:N], src=res)
    return out
