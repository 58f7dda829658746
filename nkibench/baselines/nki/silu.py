"""SiLU baseline (current `nki` dialect): y = x / (1 + exp(-x)) for an (M, N) float32 matrix.

Rows map onto the 128 partitions. Each (128, LOAD_N) block of x is copied into SBUF by one
DMA, processed in column chunks of COMPUTE_N elements, capped at LOAD_N (exp(-x) on ScalarE,
then 1 + e, 1 / (1 + e) and x * r on VectorE), and copied back by one DMA. The last row tile,
column block and chunk are slices clipped with min().
"""
import nki
import nki.isa as nisa
import nki.language as nl

LOAD_N = 512  # tune: 256, 512, 1024, 2048, 4096
COMPUTE_N = 512  # tune: 256, 512, 1024, 2048


@nki.jit
def kernel(x):
    M, N = x.shape
    out = nl.ndarray((M, N), dtype=x.dtype, buffer=nl.shared_hbm)
    P = nl.tile_size.pmax
    CN = min(COMPUTE_N, LOAD_N)

    for m in nl.affine_range((M + P - 1) // P):
        m0 = m * P
        ms = min(P, M - m0)
        for n in nl.affine_range((N + LOAD_N - 1) // LOAD_N):
            n0 = n * LOAD_N
            ns = min(LOAD_N, N - n0)
            x_tile = nl.ndarray((ms, ns), dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=x_tile, src=x[m0:m0 + ms, n0:n0 + ns])
            y_tile = nl.ndarray((ms, ns), dtype=x.dtype, buffer=nl.sbuf)
            for c in nl.affine_range((ns + CN - 1) // CN):
                c0 = c * CN
                cs = min(CN, ns - c0)
                e = nl.ndarray((ms, cs), dtype=nl.float32, buffer=nl.sbuf)
                nisa.activation(dst=e, op=nl.exp, data=x_tile[0:ms, c0:c0 + cs], scale=-1.0)
                nisa.tensor_scalar(dst=e, data=e, op0=nl.add, operand0=1.0)
                r = nl.ndarray((ms, cs), dtype=nl.float32, buffer=nl.sbuf)
                nisa.reciprocal(dst=r, data=e)
                nisa.tensor_tensor(dst=y_tile[0:ms, c0:c0 + cs], data1=x_tile[0:ms, c0:c0 + cs], data2=r,
                                   op=nl.multiply)
            nisa.dma_copy(dst=out[m0:m0 + ms, n0:n0 + ns], src=y_tile)
    return out
