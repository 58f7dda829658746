"""SwiGLU MLP baseline: out = (silu(x @ w_gate) * (x @ w_up)) @ w_down for x (M, K), w_up and
w_gate (K, N), w_down (N, K), float32; silu(t) = t / (1 + exp(-t)).

Rows are processed in blocks of TILE_M (a multiple of 128, at most 512). The block's x is
transposed on chip into xT (K on partitions, TILE_M rows on the free dim). The hidden
activations are built already transposed, h^T = silu(w_gate^T x^T) * (w_up^T x^T), in
(128 of N, TILE_M) tiles: with the weight tiles as stationary operands and xT as the moving
one, each pair of PSUM tiles is turned into h^T by exp on ScalarE, add, reciprocal and two
multiplies. h^T tiles are then the stationary operands of the down projection: each
w_down tile (128 of N, TILE_K) loaded from HBM feeds every 128-row tile of the block,
accumulating over N in PSUM. M must be a multiple of 128, K and N multiples of 128 (or K
at most 128); the output columns are masked.
"""
import numpy as np
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
import neuronxcc.nki.isa as nisa

TILE_M = 128  # tune: 128, 256, 512
TILE_K = 512  # tune: 128, 256, 512


@nki.jit
def kernel(x, w_up, w_down, w_gate):
    M, K = x.shape
    N = w_up.shape[1]
    out = nl.ndarray((M, K), dtype=x.dtype, buffer=nl.shared_hbm)
    P = nl.tile_size.pmax
    TK = min(K, P)
    TM = min(TILE_M, M)
    assert K % TK == 0 and N % P == 0, "swiglu baseline: K and N must be multiples of 128"
    assert TM % P == 0 and M % TM == 0, "swiglu baseline: M must be a multiple of TILE_M (a multiple of 128)"
    KT = K // TK
    NT = N // P
    MT = TM // P

    ident_hbm = nl.shared_constant(np.identity(P, dtype=np.float32))
    i_p = nl.arange(P)[:, None]
    i_f = nl.arange(P)[None, :]
    i_k = nl.arange(TK)[:, None]
    i_kf = nl.arange(TK)[None, :]
    i_m = nl.arange(TM)[None, :]
    i_o = nl.arange(TILE_K)[None, :]
    ident = nl.load(ident_hbm[i_p, i_f])

    for mb in nl.affine_range(M // TM):
        xT = nl.ndarray((KT, nl.par_dim(TK), TM), dtype=x.dtype, buffer=nl.sbuf)
        for t in nl.affine_range(MT):
            for k in nl.affine_range(KT):
                x_tile = nl.load(x[mb * TM + t * P + i_p, k * TK + i_kf])
                xT[k, i_k, t * P + i_f] = nl.copy(
                    nisa.nc_matmul(x_tile, ident, is_moving_onezero=True, is_transpose=True))

        hT = nl.ndarray((NT, nl.par_dim(P), TM), dtype=nl.float32, buffer=nl.sbuf)
        for j in nl.affine_range(NT):
            gate = nl.zeros((P, TM), dtype=nl.float32, buffer=nl.psum)
            up = nl.zeros((P, TM), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range(KT):
                wg_tile = nl.load(w_gate[k * TK + i_k, j * P + i_f])
                wu_tile = nl.load(w_up[k * TK + i_k, j * P + i_f])
                gate += nisa.nc_matmul(wg_tile, xT[k, i_k, i_m])
                up += nisa.nc_matmul(wu_tile, xT[k, i_k, i_m])
            e = nisa.activation(op=nl.exp, data=gate, scale=-1.0)
            sig = nisa.reciprocal(nl.add(e, 1.0))
            hT[j, i_p, i_m] = nl.multiply(nl.multiply(gate, sig), up)

        for c in nl.affine_range((K + TILE_K - 1) // TILE_K):
            c_mask = c * TILE_K + i_o < K
            acc = nl.zeros((MT, nl.par_dim(P), TILE_K), dtype=nl.float32, buffer=nl.psum)
            for j in nl.affine_range(NT):
                wd_tile = nl.load(w_down[j * P + i_p, c * TILE_K + i_o], mask=c_mask)
                for t in nl.affine_range(MT):
                    acc[t, i_p, i_o] += nisa.nc_matmul(hT[j, i_p, t * P + i_f], wd_tile, mask=c_mask)
            for t in nl.affine_range(MT):
                res = nl.copy(acc[t, i_p, i_o], mask=c_mask)
                nl.store(out[mb * TM + t * P + i_p, c * TILE_K + i_o], value=res, mask=c_mask)
    return out
