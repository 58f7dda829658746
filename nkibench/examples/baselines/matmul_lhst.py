"""matmul_lhst baseline (current `nki` dialect): result = lhsT.T @ rhs for lhsT (K, M) and
rhs (K, N). Each (128, TILE_N) output tile accumulates its K chunks in one PSUM tile (the
first matmul into it overwrites, the next ones add), is copied to SBUF and stored. Any
shape: the last tile of each dimension is a clipped slice (min), NKI's way of handling
remainders without masks.
"""
import nki
import nki.isa as nisa
import nki.language as nl

TILE_N = 512  # tune: 128, 256, 512


@nki.jit
def kernel(lhsT, rhs):
    K, M = lhsT.shape
    N = rhs.shape[1]
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    P = nl.tile_size.pmax
    for m in nl.affine_range((M + P - 1) // P):
        m0 = m * P
        ms = min(P, M - m0)
        for n in nl.affine_range((N + TILE_N - 1) // TILE_N):
            n0 = n * TILE_N
            ns = min(TILE_N, N - n0)
            acc = nl.ndarray((ms, ns), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range((K + P - 1) // P):
                k0 = k * P
                ks = min(P, K - k0)
                a = nl.ndarray((ks, ms), dtype=lhsT.dtype, buffer=nl.sbuf)
                b = nl.ndarray((ks, ns), dtype=rhs.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=a, src=lhsT[k0:k0 + ks, m0:m0 + ms])
                nisa.dma_copy(dst=b, src=rhs[k0:k0 + ks, n0:n0 + ns])
                nisa.nc_matmul(dst=acc, stationary=a, moving=b)
            out = nl.ndarray((ms, ns), dtype=result.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(dst=out, src=acc)
            nisa.dma_copy(dst=result[m0:m0 + ms, n0:n0 + ns], src=out)
    return result
