"""AdamW step baseline: theta' = theta (1 - 1e-5) - 0.01 m_t / (sqrt(1000 v_t) + 1e-8) with
m_t = 0.9 m + 0.1 g and v_t = 0.999 v + 0.001 g^2, for (M, N) float32 theta, g, m, v.

Rows map onto the 128 partitions; each (128, TILE_N) block of the four inputs is loaded,
combined element-wise (the square root with its 1000 scale on ScalarE, the reciprocal on
VectorE) and the result stored. Shapes are free: masks cover partial row and column tiles
(the paper's M = 10944 is 85.5 row tiles).
"""
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
import neuronxcc.nki.isa as nisa

TILE_N = 512  # tune: 256, 512, 1024, 2048


@nki.jit
def kernel(theta, g, m, v):
    M, N = theta.shape
    out = nl.ndarray((M, N), dtype=theta.dtype, buffer=nl.shared_hbm)
    P = nl.tile_size.pmax
    i_p = nl.arange(P)[:, None]
    i_n = nl.arange(TILE_N)[None, :]

    for r in nl.affine_range((M + P - 1) // P):
        for n in nl.affine_range((N + TILE_N - 1) // TILE_N):
            rows = r * P + i_p
            cols = n * TILE_N + i_n
            mask = (rows < M) & (cols < N)
            th = nl.load(theta[rows, cols], mask=mask)
            gr = nl.load(g[rows, cols], mask=mask)
            m1 = nl.load(m[rows, cols], mask=mask)
            v1 = nl.load(v[rows, cols], mask=mask)
            m_t = nl.add(nl.multiply(m1, 0.9, mask=mask), nl.multiply(gr, 0.1, mask=mask), mask=mask)
            g_sq = nl.multiply(gr, gr, mask=mask)
            v_t = nl.add(nl.multiply(v1, 0.999, mask=mask), nl.multiply(g_sq, 0.001, mask=mask), mask=mask)
            denom = nl.add(nisa.activation(op=nl.sqrt, data=v_t, scale=1000.0, mask=mask), 1e-8, mask=mask)
            step = nl.multiply(m_t, nisa.reciprocal(denom, mask=mask), mask=mask)
            decayed = nl.multiply(th, 1.0 - 1e-5, mask=mask)
            res = nl.subtract(decayed, nl.multiply(step, 0.01, mask=mask), mask=mask)
            nl.store(out[rows, cols], value=res, mask=mask)
    return out
