"""Batched matmul baseline (current `nki` dialect): out[b] = lhs[b] @ rhs[b] for lhs (B, M, K),
rhs (B, K, N), float32.

Per batch, rhs[b] is loaded once into SBUF as (128 of K, TILE_N) tiles. Each 128-row tile of
lhs[b] is transposed on chip (nc_transpose on TensorE into PSUM, copied to SBUF) so that K
lies on partitions, then multiplied against rhs[b] in column tiles of TILE_N (one PSUM bank
each), accumulating over the K tiles (the first matmul overwrites, the next ones add);
results are copied to SBUF and stored. Any shape: the last tile of each dimension is a
clipped slice (min).
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

            for n in nl.affine_range(NT):
                n0 = n * TILE_N
                ns = min(TILE_N, N - n0)
                acc = nl.ndarray((ms, ns), dtype=nl.float32, buffer=nl.psum)
                for k in nl.affine_range(KT):
                    nisa.nc_matmul(dst=acc, stationary=lhsT[k], moving=rhs_sb[k][n])
                res = nl.ndarray((ms, ns), dtype=out.dtype, buffer=nl.sbuf)
                nisa.tensor_copy(dst=res, src=acc)
                nisa.dma_copy(dst=out[b, m0:m0 + ms, n0:n0 + ns], src=res)
    return out
