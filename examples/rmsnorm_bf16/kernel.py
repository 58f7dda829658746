"""RMSNorm in bfloat16 (current `nki` dialect): out = x / sqrt(mean(x^2, axis=-1) + 1e-6) * w.

A plain first version: each tile of ROWS rows of x is copied in, squared and summed along the
free axis (fp32 sums; on ScalarE in one activation, or with SUMS_ON_VECTOR on VectorE), the
reciprocal RMS computed on ScalarE, then x scaled by it and by the gain on VectorE, rounded to
bfloat16 and copied out. The gain is broadcast to all partitions once. The `# tune:` knobs
are what the offline search moves.
"""
import nki
import nki.isa as nisa
import nki.language as nl

ROWS = 64  # tune: 32, 64, 128
SUMS_ON_VECTOR = 1  # tune: 0, 1


@nki.jit
def rmsnorm(x, w):
    N, D = x.shape
    out = nl.ndarray((N, D), dtype=x.dtype, buffer=nl.shared_hbm)
    f32 = nl.float32

    w_row = nl.ndarray((1, D), dtype=w.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=w_row, src=w.reshape((1, D)))
    w_all = nl.ndarray((ROWS, D), dtype=f32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=w_all, src=nl.broadcast_to(w_row, (ROWS, D)))

    for t in nl.affine_range((N + ROWS - 1) // ROWS):
        r0 = t * ROWS
        rows = min(ROWS, N - r0)
        x_tile = nl.ndarray((rows, D), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=x_tile, src=x[r0:r0 + rows, 0:D])
        squares = nl.ndarray((rows, D), dtype=f32, buffer=nl.sbuf)
        sums = nl.ndarray((rows, 1), dtype=f32, buffer=nl.sbuf)
        if SUMS_ON_VECTOR:
            nisa.tensor_tensor(dst=squares, data1=x_tile, data2=x_tile, op=nl.multiply)
            nisa.tensor_reduce(dst=sums, op=nl.add, data=squares, axis=1)
        else:
            nisa.activation_reduce(dst=squares, op=nl.square, data=x_tile, reduce_op=nl.add, reduce_res=sums)
        inv_rms = nl.ndarray((rows, 1), dtype=f32, buffer=nl.sbuf)
        nisa.activation(dst=inv_rms, op=nl.rsqrt, data=sums, scale=1.0 / D, bias=1e-6)
        y = nl.ndarray((rows, D), dtype=x.dtype, buffer=nl.sbuf)
        nisa.scalar_tensor_tensor(dst=y, data=x_tile, op0=nl.multiply, operand0=inv_rms, op1=nl.multiply,
                                  operand1=w_all[0:rows, 0:D])
        nisa.dma_copy(dst=out[r0:r0 + rows, 0:D], src=y)
    return out
