"""Matmul baseline: out = lhs @ rhs for lhs (M, K), rhs (K, N), float32.

TensorE contracts over the partition dim, so every (128, 128) tile of lhs is transposed on
chip (a matmul against the identity) into lhsT tiles holding K on partitions. Rows are
processed in blocks of TILES_M row tiles so that each rhs tile loaded from HBM feeds TILES_M
matmuls; every (128, TILE_N) output tile accumulates over K in its own PSUM bank, is copied
to SBUF and stored. M must be a multiple of 128 and K a multiple of 128 (or at most 128);
N is free (the last column tile is masked).
"""
import numpy as np
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
import neuronxcc.nki.isa as nisa

TILE_N = 512  # tune: 128, 256, 512
TILES_M = 1  # tune: 1, 2, 4


@nki.jit
def kernel(lhs, rhs):
    M, K = lhs.shape
    N = rhs.shape[1]
    out = nl.ndarray((M, N), dtype=lhs.dtype, buffer=nl.shared_hbm)
    P = nl.tile_size.pmax
    TK = min(K, P)
    assert M % P == 0 and K % TK == 0, "matmul baseline: M and K must be multiples of 128"
    TM = min(TILES_M, M // P)
    assert (M // P) % TM == 0, "matmul baseline: M / 128 must be a multiple of TILES_M"
    KT = K // TK

    ident_hbm = nl.shared_constant(np.identity(P, dtype=np.float32))
    i_p = nl.arange(P)[:, None]
    i_f = nl.arange(P)[None, :]
    i_k = nl.arange(TK)[:, None]
    i_kf = nl.arange(TK)[None, :]
    i_n = nl.arange(TILE_N)[None, :]
    ident = nl.load(ident_hbm[i_p, i_f])

    for mb in nl.affine_range(M // (TM * P)):
        # lhsT[t, k] = transpose of the (128 rows, TK) tile k of row tile t of this block
        lhsT = nl.ndarray((TM, KT, nl.par_dim(TK), P), dtype=lhs.dtype, buffer=nl.sbuf)
        for t in nl.affine_range(TM):
            for k in nl.affine_range(KT):
                x_tile = nl.load(lhs[(mb * TM + t) * P + i_p, k * TK + i_kf])
                x_t = nisa.nc_matmul(x_tile, ident, is_moving_onezero=True, is_transpose=True)
                lhsT[t, k, i_k, i_f] = nl.copy(x_t)

        for n in nl.affine_range((N + TILE_N - 1) // TILE_N):
            n_mask = n * TILE_N + i_n < N
            acc = nl.zeros((TM, nl.par_dim(P), TILE_N), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range(KT):
                w_tile = nl.load(rhs[k * TK + i_k, n * TILE_N + i_n], mask=n_mask)
                for t in nl.affine_range(TM):
                    acc[t, i_p, i_n] += nisa.nc_matmul(lhsT[t, k, i_k, i_f], w_tile, mask=n_mask)
            for t in nl.affine_range(TM):
                res = nl.copy(acc[t, i_p, i_n], mask=n_mask)
                nl.store(out[(mb * TM + t) * P + i_p, n * TILE_N + i_n], value=res, mask=n_mask)
    return out
