"""LoRA baseline: out = x @ w + (x @ a) @ b for x (M, K), w (K, N), a (K, R), b (R, N), float32.

Rows are processed in blocks of TILES_M tiles of 128. Each x tile is transposed on chip so
that K lies on partitions. The low-rank product is formed already transposed,
(x a)^T = a^T x^T (R on partitions), so it serves directly as the stationary operand of the
second low-rank matmul. Every (128, TILE_N) output tile accumulates x w over the K tiles and
then (x a) b in the same PSUM bank, is copied to SBUF and stored. a stays in SBUF for the
whole kernel. M must be a multiple of 128, K a multiple of 128 (or at most 128), R <= 128;
N is free (masked).
"""
import numpy as np
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
import neuronxcc.nki.isa as nisa

TILE_N = 512  # tune: 128, 256, 512
TILES_M = 1  # tune: 1, 2, 4


@nki.jit
def kernel(x, w, a, b):
    M, K = x.shape
    N = w.shape[1]
    R = a.shape[1]
    out = nl.ndarray((M, N), dtype=x.dtype, buffer=nl.shared_hbm)
    P = nl.tile_size.pmax
    TK = min(K, P)
    assert M % P == 0 and K % TK == 0 and R <= P, "lora baseline: M, K multiples of 128 and R <= 128"
    TM = min(TILES_M, M // P)
    assert (M // P) % TM == 0, "lora baseline: M / 128 must be a multiple of TILES_M"
    KT = K // TK

    ident_hbm = nl.shared_constant(np.identity(P, dtype=np.float32))
    i_p = nl.arange(P)[:, None]
    i_f = nl.arange(P)[None, :]
    i_k = nl.arange(TK)[:, None]
    i_kf = nl.arange(TK)[None, :]
    i_r = nl.arange(R)[:, None]
    i_rf = nl.arange(R)[None, :]
    i_n = nl.arange(TILE_N)[None, :]
    ident = nl.load(ident_hbm[i_p, i_f])

    a_sb = nl.ndarray((KT, nl.par_dim(TK), R), dtype=a.dtype, buffer=nl.sbuf)
    for k in nl.affine_range(KT):
        a_sb[k, i_k, i_rf] = nl.load(a[k * TK + i_k, i_rf])

    for mb in nl.affine_range(M // (TM * P)):
        xT = nl.ndarray((TM, KT, nl.par_dim(TK), P), dtype=x.dtype, buffer=nl.sbuf)
        xaT = nl.ndarray((TM, nl.par_dim(R), P), dtype=x.dtype, buffer=nl.sbuf)
        for t in nl.affine_range(TM):
            for k in nl.affine_range(KT):
                x_tile = nl.load(x[(mb * TM + t) * P + i_p, k * TK + i_kf])
                xT[t, k, i_k, i_f] = nl.copy(
                    nisa.nc_matmul(x_tile, ident, is_moving_onezero=True, is_transpose=True))
            xa_acc = nl.zeros((R, P), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range(KT):
                xa_acc += nisa.nc_matmul(a_sb[k, i_k, i_rf], xT[t, k, i_k, i_f])
            xaT[t, i_r, i_f] = nl.copy(xa_acc)

        for n in nl.affine_range((N + TILE_N - 1) // TILE_N):
            n_mask = n * TILE_N + i_n < N
            acc = nl.zeros((TM, nl.par_dim(P), TILE_N), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range(KT):
                w_tile = nl.load(w[k * TK + i_k, n * TILE_N + i_n], mask=n_mask)
                for t in nl.affine_range(TM):
                    acc[t, i_p, i_n] += nisa.nc_matmul(xT[t, k, i_k, i_f], w_tile, mask=n_mask)
            b_tile = nl.load(b[i_r, n * TILE_N + i_n], mask=n_mask)
            for t in nl.affine_range(TM):
                acc[t, i_p, i_n] += nisa.nc_matmul(xaT[t, i_r, i_f], b_tile, mask=n_mask)
                res = nl.copy(acc[t, i_p, i_n], mask=n_mask)
                nl.store(out[(mb * TM + t) * P + i_p, n * TILE_N + i_n], value=res, mask=n_mask)
    return out
