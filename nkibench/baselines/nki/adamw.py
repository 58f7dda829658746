"""AdamW step baseline (current `nki` dialect): theta' = theta (1 - 1e-5) - 0.01 m_t /
(sqrt(1000 v_t) + 1e-8) with m_t = 0.9 m + 0.1 g and v_t = 0.999 v + 0.001 g^2, for (M, N)
float32 theta, g, m, v.

Rows map onto the 128 partitions; each (128, TILE_N) block of the four inputs is copied in
by four DMAs and combined element-wise: the scaled sums as scalar_tensor_tensor
instructions ((a op0 c) op1 b), the square root with its 1000 scale on ScalarE, 1e-8 and
the reciprocal on VectorE. The last row tile (the paper's M = 10944 is 85.5 row tiles) and
column block are slices clipped with min().
"""
import nki
import nki.isa as nisa
import nki.language as nl

TILE_N = 512  # tune: 256, 512, 1024, 2048


@nki.jit
def kernel(theta, g, m, v):
    M, N = theta.shape
    out = nl.ndarray((M, N), dtype=theta.dtype, buffer=nl.shared_hbm)
    P = nl.tile_size.pmax
    f32 = nl.float32

    for r in nl.affine_range((M + P - 1) // P):
        r0 = r * P
        rs = min(P, M - r0)
        for n in nl.affine_range((N + TILE_N - 1) // TILE_N):
            n0 = n * TILE_N
            ns = min(TILE_N, N - n0)
            th = nl.ndarray((rs, ns), dtype=theta.dtype, buffer=nl.sbuf)
            gr = nl.ndarray((rs, ns), dtype=g.dtype, buffer=nl.sbuf)
            m1 = nl.ndarray((rs, ns), dtype=m.dtype, buffer=nl.sbuf)
            v1 = nl.ndarray((rs, ns), dtype=v.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=th, src=theta[r0:r0 + rs, n0:n0 + ns])
            nisa.dma_copy(dst=gr, src=g[r0:r0 + rs, n0:n0 + ns])
            nisa.dma_copy(dst=m1, src=m[r0:r0 + rs, n0:n0 + ns])
            nisa.dma_copy(dst=v1, src=v[r0:r0 + rs, n0:n0 + ns])

            # m_t = 0.9 m + 0.1 g
            g_scaled = nl.ndarray((rs, ns), dtype=f32, buffer=nl.sbuf)
            nisa.tensor_scalar(dst=g_scaled, data=gr, op0=nl.multiply, operand0=0.1)
            m_t = nl.ndarray((rs, ns), dtype=f32, buffer=nl.sbuf)
            nisa.scalar_tensor_tensor(dst=m_t, data=m1, op0=nl.multiply, operand0=0.9, op1=nl.add, operand1=g_scaled)
            # v_t = 0.999 v + 0.001 g^2
            g_sq = nl.ndarray((rs, ns), dtype=f32, buffer=nl.sbuf)
            nisa.scalar_tensor_tensor(dst=g_sq, data=gr, op0=nl.multiply, operand0=0.001, op1=nl.multiply,
                                      operand1=gr)
            v_t = nl.ndarray((rs, ns), dtype=f32, buffer=nl.sbuf)
            nisa.scalar_tensor_tensor(dst=v_t, data=v1, op0=nl.multiply, operand0=0.999, op1=nl.add, operand1=g_sq)
            # 1 / (sqrt(1000 v_t) + 1e-8)
            denom = nl.ndarray((rs, ns), dtype=f32, buffer=nl.sbuf)
            nisa.activation(dst=denom, op=nl.sqrt, data=v_t, scale=1000.0)
            nisa.tensor_scalar(dst=denom, data=denom, op0=nl.add, operand0=1e-8)
            inv = nl.ndarray((rs, ns), dtype=f32, buffer=nl.sbuf)
            nisa.reciprocal(dst=inv, data=denom)
            # theta (1 - 1e-5) - 0.01 m_t inv
            step = nl.ndarray((rs, ns), dtype=f32, buffer=nl.sbuf)
            nisa.scalar_tensor_tensor(dst=step, data=m_t, op0=nl.multiply, operand0=0.01, op1=nl.multiply,
                                      operand1=inv)
            res = nl.ndarray((rs, ns), dtype=theta.dtype, buffer=nl.sbuf)
            nisa.scalar_tensor_tensor(dst=res, data=th, op0=nl.multiply, operand0=1.0 - 1e-5, op1=nl.subtract,
                                      operand1=step)
            nisa.dma_copy(dst=out[r0:r0 + rs, n0:n0 + ns], src=res)
    return out
