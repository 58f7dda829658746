"""transpose_matmul baseline: out = lhs_t.T @ rhs for lhs_t (K, M), rhs (K, N), float32.

lhs_t already holds the contraction dim first, so its (128 of K, 128 of M) tiles are the
stationary operands as loaded. Rows of the output are processed in blocks of TILES_M tiles
of 128: the block's lhs_t columns are loaded once, then each rhs tile (128 of K, TILE_N)
loaded from HBM feeds TILES_M matmuls accumulating over K in PSUM. M must be a multiple of
128 and K a multiple of 128 (or at most 128); N is free (the last column tile is masked).
"""
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
import neuronxcc.nki.isa as nisa

TILE_N = 512  # tune: 128, 256, 512
TILES_M = 1  # tune: 1, 2, 4


@nki.jit
def kernel(lhs_t, rhs):
    K, M = lhs_t.shape
    N = rhs.shape[1]
    out = nl.ndarray((M, N), dtype=lhs_t.dtype, buffer=nl.shared_hbm)
    P = nl.tile_size.pmax
    TK = min(K, P)
    assert M % P == 0 and K % TK == 0, "transpose_matmul baseline: M and K must be multiples of 128"
    TM = min(TILES_M, M // P)
    assert (M // P) % TM == 0, "transpose_matmul baseline: M / 128 must be a multiple of TILES_M"
    KT = K // TK

    i_p = nl.arange(P)[:, None]
    i_f = nl.arange(P)[None, :]
    i_k = nl.arange(TK)[:, None]
    i_n = nl.arange(TILE_N)[None, :]

    for mb in nl.affine_range(M // (TM * P)):
        lhs_sb = nl.ndarray((TM, KT, nl.par_dim(TK), P), dtype=lhs_t.dtype, buffer=nl.sbuf)
        for t in nl.affine_range(TM):
            for k in nl.affine_range(KT):
                lhs_sb[t, k, i_k, i_f] = nl.load(lhs_t[k * TK + i_k, (mb * TM + t) * P + i_f])

        for n in nl.affine_range((N + TILE_N - 1) // TILE_N):
            n_mask = n * TILE_N + i_n < N
            acc = nl.zeros((TM, nl.par_dim(P), TILE_N), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range(KT):
                w_tile = nl.load(rhs[k * TK + i_k, n * TILE_N + i_n], mask=n_mask)
                for t in nl.affine_range(TM):
                    acc[t, i_p, i_n] += nisa.nc_matmul(lhs_sb[t, k, i_k, i_f], w_tile, mask=n_mask)
            for t in nl.affine_range(TM):
                res = nl.copy(acc[t, i_p, i_n], mask=n_mask)
                nl.store(out[(mb * TM + t) * P + i_p, n * TILE_N + i_n], value=res, mask=n_mask)
    return out
