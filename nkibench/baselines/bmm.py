"""Batched matmul baseline: out[b] = lhs[b] @ rhs[b] for lhs (B, M, K), rhs (B, K, N), float32.

Per batch, rhs[b] is loaded once into SBUF as (K tiles of 128, N). Each 128-row tile of
lhs[b] is transposed on chip (matmul against the identity) so that K lies on partitions,
then multiplied against rhs[b] in column tiles of TILE_N (one PSUM bank each), accumulating
over the K tiles; results are copied to SBUF and stored. M must be a multiple of 128 and K
a multiple of 128 (or at most 128); N is free (masked).
"""
import numpy as np
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
import neuronxcc.nki.isa as nisa

TILE_N = 512  # tune: 128, 256, 512


@nki.jit
def kernel(lhs, rhs):
    B, M, K = lhs.shape
    N = rhs.shape[2]
    out = nl.ndarray((B, M, N), dtype=lhs.dtype, buffer=nl.shared_hbm)
    P = nl.tile_size.pmax
    TK = min(K, P)
    assert M % P == 0 and K % TK == 0, "bmm baseline: M and K must be multiples of 128 (or K <= 128)"
    KT = K // TK
    NT = (N + TILE_N - 1) // TILE_N

    ident_hbm = nl.shared_constant(np.identity(P, dtype=np.float32))
    i_p = nl.arange(P)[:, None]
    i_f = nl.arange(P)[None, :]
    i_k = nl.arange(TK)[:, None]
    i_kf = nl.arange(TK)[None, :]
    i_n = nl.arange(TILE_N)[None, :]
    ident = nl.load(ident_hbm[i_p, i_f])

    for b in nl.affine_range(B):
        rhs_sb = nl.ndarray((KT, NT, nl.par_dim(TK), TILE_N), dtype=rhs.dtype, buffer=nl.sbuf)
        for k in nl.affine_range(KT):
            for n in nl.affine_range(NT):
                rhs_sb[k, n, i_k, i_n] = nl.load(rhs[b, k * TK + i_k, n * TILE_N + i_n],
                                                 mask=n * TILE_N + i_n < N)

        for m in nl.affine_range(M // P):
            lhsT = nl.ndarray((KT, nl.par_dim(TK), P), dtype=lhs.dtype, buffer=nl.sbuf)
            for k in nl.affine_range(KT):
                x_tile = nl.load(lhs[b, m * P + i_p, k * TK + i_kf])
                lhsT[k, i_k, i_f] = nl.copy(
                    nisa.nc_matmul(x_tile, ident, is_moving_onezero=True, is_transpose=True))
            for n in nl.affine_range(NT):
                n_mask = n * TILE_N + i_n < N
                acc = nl.zeros((P, TILE_N), dtype=nl.float32, buffer=nl.psum)
                for k in nl.affine_range(KT):
                    acc += nisa.nc_matmul(lhsT[k, i_k, i_f], rhs_sb[k, n, i_k, i_n], mask=n_mask)
                res = nl.copy(acc, mask=n_mask)
                nl.store(out[b, m * P + i_p, n * TILE_N + i_n], value=res, mask=n_mask)
    return out
