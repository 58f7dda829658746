"""RMSNorm + matmul baseline: out = (x / sqrt(mean(x^2, axis=1))) @ w for x (M, K), w (K, N),
float32 (no gain, no epsilon).

Rows are processed in blocks of TILES_M tiles of 128. Each row tile is loaded whole
(128, K), its sum of squares reduced along the free dim, scaled by 1/K and turned into a
(128, 1) reciprocal RMS that multiplies the row tile. The normalised tile is transposed on
chip in (128, 128) pieces so that K lies on partitions; each rhs tile (128 of K, TILE_N)
loaded from HBM then feeds TILES_M matmuls accumulating over K in PSUM. M must be a
multiple of 128 and K a multiple of 128 (or at most 128); N is free (masked).
"""
import numpy as np
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
import neuronxcc.nki.isa as nisa

TILE_N = 512  # tune: 128, 256, 512
TILES_M = 1  # tune: 1, 2, 4


@nki.jit
def kernel(x, w):
    M, K = x.shape
    N = w.shape[1]
    out = nl.ndarray((M, N), dtype=x.dtype, buffer=nl.shared_hbm)
    P = nl.tile_size.pmax
    TK = min(K, P)
    assert M % P == 0 and K % TK == 0, "rmsnorm_matmul baseline: M and K must be multiples of 128"
    TM = min(TILES_M, M // P)
    assert (M // P) % TM == 0, "rmsnorm_matmul baseline: M / 128 must be a multiple of TILES_M"
    KT = K // TK

    ident_hbm = nl.shared_constant(np.identity(P, dtype=np.float32))
    i_p = nl.arange(P)[:, None]
    i_f = nl.arange(P)[None, :]
    i_k = nl.arange(TK)[:, None]
    i_kf = nl.arange(TK)[None, :]
    i_row = nl.arange(K)[None, :]
    i_n = nl.arange(TILE_N)[None, :]
    ident = nl.load(ident_hbm[i_p, i_f])

    for mb in nl.affine_range(M // (TM * P)):
        xT = nl.ndarray((TM, KT, nl.par_dim(TK), P), dtype=x.dtype, buffer=nl.sbuf)
        for t in nl.affine_range(TM):
            x_tile = nl.load(x[(mb * TM + t) * P + i_p, i_row])
            sum_sq = nl.sum(nl.square(x_tile), axis=[1])
            inv_rms = nl.rsqrt(nl.multiply(sum_sq, 1.0 / K))
            x_norm = nl.multiply(x_tile, inv_rms)
            for k in nl.affine_range(KT):
                xT[t, k, i_k, i_f] = nl.copy(nisa.nc_matmul(x_norm[i_p, k * TK + i_kf], ident,
                                                            is_moving_onezero=True, is_transpose=True))

        for n in nl.affine_range((N + TILE_N - 1) // TILE_N):
            n_mask = n * TILE_N + i_n < N
            acc = nl.zeros((TM, nl.par_dim(P), TILE_N), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range(KT):
                w_tile = nl.load(w[k * TK + i_k, n * TILE_N + i_n], mask=n_mask)
                for t in nl.affine_range(TM):
                    acc[t, i_p, i_n] += nisa.nc_matmul(xT[t, k, i_k, i_f], w_tile, mask=n_mask)
            for t in nl.affine_range(TM):
                res = nl.copy(acc[t, i_p, i_n], mask=n_mask)
                nl.store(out[(mb * TM + t) * P + i_p, n * TILE_N + i_n], value=res, mask=n_mask)
    return out
