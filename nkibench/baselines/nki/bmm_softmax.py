"""Batched matmul + softmax baseline (current `nki` dialect): out[b] = softmax(lhs[b] @ rhs[b],
axis=-1) for lhs (B, M, K), rhs (B, K, N), float32.

Per batch, rhs[b] stays in SBUF as (128 of K, TILE_N) tiles. For each 128-row tile of lhs[b]
(transposed on chip with nc_transpose so that K lies on partitions) the whole score row
block (128, N) is built in SBUF from PSUM tiles of TILE_N columns; then the negated row max
(VectorE), exp(s - max) on ScalarE with the row sum reduced by the same instruction, its
reciprocal and the normalising multiply run on the row block before it is stored. Any
shape: the last tile of each dimension is a clipped slice (min).
"""
import nki
import nki.isa as nisa
import nki.language as nl

TILE_N = 512  # tune: 128, 256, 512


@nki.jit
def kernel(lhs, rhs):
    B, M, K = lhs.shape
    N = rhs.shape[2]
    out = nl.ndarray((B, M, N), dtype=lhs.dtype, buffer=nl.shared_hbm)
    P = nl.tile_size.pmax
    KT = (K + P - 1) // P
    NT = (N + TILE_N - 1) // TILE_N

    for b in nl.affine_range(B):
        # rhs_sb[k][n]: the (K tile k, column tile n) tile of rhs[b]
        rhs_sb = []
        for k in nl.affine_range(KT):
            k0 = k * P
            ks = min(P, K - k0)
            row = []
            for n in nl.affine_range(NT):
                n0 = n * TILE_N
                ns = min(TILE_N, N - n0)
                w_tile = nl.ndarray((ks, ns), dtype=rhs.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=w_tile, src=rhs[b, k0:k0 + ks, n0:n0 + ns])
                row.append(w_tile)
            rhs_sb.append(row)

        for m in nl.affine_range((M + P - 1) // P):
            m0 = m * P
            ms = min(P, M - m0)
            lhsT = []
            for k in nl.affine_range(KT):
                k0 = k * P
                ks = min(P, K - k0)
                x_tile = nl.ndarray((ms, ks), dtype=lhs.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=x_tile, src=lhs[b, m0:m0 + ms, k0:k0 + ks])
                x_t = nl.ndarray((ks, ms), dtype=nl.float32, buffer=nl.psum)
                nisa.nc_transpose(dst=x_t, data=x_tile, engine=nisa.tensor_engine)
                xT_tile = nl.ndarray((ks, ms), dtype=lhs.dtype, buffer=nl.sbuf)
                nisa.tensor_copy(dst=xT_tile, src=x_t)
                lhsT.append(xT_tile)

            scores = nl.ndarray((ms, N), dtype=nl.float32, buffer=nl.sbuf)
            for n in nl.affine_range(NT):
                n0 = n * TILE_N
                ns = min(TILE_N, N - n0)
                acc = nl.ndarray((ms, ns), dtype=nl.float32, buffer=nl.psum)
                for k in nl.affine_range(KT):
                    nisa.nc_matmul(dst=acc, stationary=lhsT[k], moving=rhs_sb[k][n])
                nisa.tensor_copy(dst=scores[0:ms, n0:n0 + ns], src=acc)

            neg_max = nl.ndarray((ms, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_reduce(dst=neg_max, op=nl.max, data=scores, axis=1, negate=True)
            probs = nl.ndarray((ms, N), dtype=nl.float32, buffer=nl.sbuf)
            row_sum = nl.ndarray((ms, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.activation_reduce(dst=probs, op=nl.exp, data=scores, bias=neg_max, scale=1.0,
                                   reduce_op=nl.add, reduce_res=row_sum)
            inv_sum = nl.ndarray((ms, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.reciprocal(dst=inv_sum, data=row_sum)
            res = nl.ndarray((ms, N), dtype=out.dtype, buffer=nl.sbuf)
            nisa.tensor_scalar(dst=res, data=probs, op0=nl.multiply, operand0=inv_sum)
            nisa.dma_copy(dst=out[b, m0:m0 + ms, 0:N], src=res)
    return out
