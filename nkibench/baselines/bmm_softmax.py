"""Batched matmul + softmax baseline: out[b] = softmax(lhs[b] @ rhs[b], axis=-1) for
lhs (B, M, K), rhs (B, K, N), float32.

Per batch, rhs[b] stays in SBUF. For each 128-row tile of lhs[b] (transposed on chip so K
lies on partitions) the whole score row block (128, N) is built in SBUF from PSUM tiles of
TILE_N columns; then the row max (negated), exp(s - max) on ScalarE, the row sum, its
reciprocal and the normalising multiply run on the row block before it is stored. M must be
a multiple of 128 and K a multiple of 128 (or at most 128); N is free (masked).
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
    assert M % P == 0 and K % TK == 0, "bmm_softmax baseline: M and K must be multiples of 128 (or K <= 128)"
    KT = K // TK
    NT = (N + TILE_N - 1) // TILE_N

    ident_hbm = nl.shared_constant(np.identity(P, dtype=np.float32))
    i_p = nl.arange(P)[:, None]
    i_f = nl.arange(P)[None, :]
    i_k = nl.arange(TK)[:, None]
    i_kf = nl.arange(TK)[None, :]
    i_n = nl.arange(TILE_N)[None, :]
    i_row = nl.arange(N)[None, :]
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

            scores = nl.ndarray((nl.par_dim(P), N), dtype=nl.float32, buffer=nl.sbuf)
            for n in nl.affine_range(NT):
                n_mask = n * TILE_N + i_n < N
                acc = nl.zeros((P, TILE_N), dtype=nl.float32, buffer=nl.psum)
                for k in nl.affine_range(KT):
                    acc += nisa.nc_matmul(lhsT[k, i_k, i_f], rhs_sb[k, n, i_k, i_n], mask=n_mask)
                scores[i_p, n * TILE_N + i_n] = nl.copy(acc, mask=n_mask)

            neg_max = nisa.tensor_reduce(op=nl.max, data=scores[i_p, i_row], axis=[1], negate=True)
            probs = nisa.activation(op=nl.exp, data=scores[i_p, i_row], bias=neg_max, scale=1.0)
            inv_sum = nisa.reciprocal(nl.sum(probs, axis=[1]))
            res = nl.multiply(probs, inv_sum)
            nl.store(out[b, m * P + i_p, i_row], value=res)
    return out
