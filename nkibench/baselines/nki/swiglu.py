"""SwiGLU MLP baseline (current `nki` dialect): out = (silu(x @ w_gate) * (x @ w_up)) @ w_down
for x (M, K), w_up and w_gate (K, N), w_down (N, K), float32; silu(t) = t / (1 + exp(-t)).

Rows are processed in blocks of TILE_M (a multiple of 128, at most 512). The block's x is
transposed on TensorE into xT (K on partitions, the block's rows on the free dim). The
hidden activations are built already transposed, h^T = silu(w_gate^T x^T) * (w_up^T x^T),
in (128 of N, TILE_M) tiles: with the weight tiles as stationary operands and xT as the
moving one, each pair of PSUM tiles is turned into h^T by exp on ScalarE, add, reciprocal
and two multiplies on VectorE. h^T tiles are then the stationary operands of the down
projection: each w_down tile (128 of N, TILE_K) copied in from HBM feeds every 128-row tile
of the block, each accumulating over N in its own PSUM tile. The last tile of every
dimension is a slice clipped with min().
"""
import nki
import nki.isa as nisa
import nki.language as nl

TILE_M = 128  # tune: 128, 256, 512
TILE_K = 512  # tune: 128, 256, 512


@nki.jit
def kernel(x, w_up, w_down, w_gate):
    M, K = x.shape
    N = w_up.shape[1]
    out = nl.ndarray((M, K), dtype=x.dtype, buffer=nl.shared_hbm)
    P = nl.tile_size.pmax
    f32 = nl.float32
    KT = (K + P - 1) // P
    NT = (N + P - 1) // P

    for mb in nl.affine_range((M + TILE_M - 1) // TILE_M):
        b0 = mb * TILE_M
        bs = min(TILE_M, M - b0)
        MT = (bs + P - 1) // P

        xT = nl.ndarray((P, KT, TILE_M), dtype=x.dtype, buffer=nl.sbuf)
        for t in nl.affine_range(MT):
            r0 = b0 + t * P
            rs = min(P, M - r0)
            x_tile = nl.ndarray((rs, K), dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=x_tile, src=x[r0:r0 + rs, 0:K])
            for k in nl.affine_range(KT):
                k0 = k * P
                ks = min(P, K - k0)
                piece = nl.ndarray((ks, rs), dtype=f32, buffer=nl.psum)
                nisa.nc_transpose(dst=piece, data=x_tile[0:rs, k0:k0 + ks])
                nisa.tensor_copy(dst=xT[0:ks, k, t * P:t * P + rs], src=piece)

        hT = nl.ndarray((P, NT, TILE_M), dtype=f32, buffer=nl.sbuf)
        for j in nl.affine_range(NT):
            j0 = j * P
            js = min(P, N - j0)
            gate = nl.ndarray((js, bs), dtype=f32, buffer=nl.psum)
            up = nl.ndarray((js, bs), dtype=f32, buffer=nl.psum)
            for k in nl.affine_range(KT):
                k0 = k * P
                ks = min(P, K - k0)
                wg_tile = nl.ndarray((ks, js), dtype=w_gate.dtype, buffer=nl.sbuf)
                wu_tile = nl.ndarray((ks, js), dtype=w_up.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=wg_tile, src=w_gate[k0:k0 + ks, j0:j0 + js])
                nisa.dma_copy(dst=wu_tile, src=w_up[k0:k0 + ks, j0:j0 + js])
                nisa.nc_matmul(dst=gate, stationary=wg_tile, moving=xT[0:ks, k, 0:bs])
                nisa.nc_matmul(dst=up, stationary=wu_tile, moving=xT[0:ks, k, 0:bs])
            e = nl.ndarray((js, bs), dtype=f32, buffer=nl.sbuf)
            nisa.activation(dst=e, op=nl.exp, data=gate, scale=-1.0)
            nisa.tensor_scalar(dst=e, data=e, op0=nl.add, operand0=1.0)
            sig = nl.ndarray((js, bs), dtype=f32, buffer=nl.sbuf)
            nisa.reciprocal(dst=sig, data=e)
            act = nl.ndarray((js, bs), dtype=f32, buffer=nl.sbuf)
            nisa.tensor_tensor(dst=act, data1=gate, data2=sig, op=nl.multiply)
            nisa.tensor_tensor(dst=hT[0:js, j, 0:bs], data1=act, data2=up, op=nl.multiply)

        for c in nl.affine_range((K + TILE_K - 1) // TILE_K):
            c0 = c * TILE_K
            cs = min(TILE_K, K - c0)
            acc = nl.ndarray((P, TILE_M // P, TILE_K), dtype=f32, buffer=nl.psum)
            for j in nl.affine_range(NT):
                j0 = j * P
                js = min(P, N - j0)
                wd_tile = nl.ndarray((js, cs), dtype=w_down.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=wd_tile, src=w_down[j0:j0 + js, c0:c0 + cs])
                for t in nl.affine_range(MT):
                    rs = min(P, bs - t * P)
                    nisa.nc_matmul(dst=acc[0:rs, t, 0:cs], stationary=hT[0:js, j, t * P:t * P + rs], moving=wd_tile)
            for t in nl.affine_range(MT):
                r0 = b0 + t * P
                rs = min(P, M - r0)
                res = nl.ndarray((rs, cs), dtype=out.dtype, buffer=nl.sbuf)
                nisa.tensor_copy(dst=res, src=acc[0:rs, t, 0:cs])
                nisa.dma_copy(dst=out[r0:r0 + rs, c0:c0 + cs], src=res)
    return out
