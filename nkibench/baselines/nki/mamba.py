"""Mamba selective-scan baseline (current `nki` dialect): for delta, u (C, M), a (C, S),
b, c (S, M), float32, h[i,s,t] = exp(delta[i,t] a[i,s]) h[i,s,t-1] + delta[i,t] b[s,t] u[i,t]
and out[i,t] = sum_s c[s,t] h[i,s,t].

Channels map onto the 128 partitions; the sequence runs along the free dim in chunks of
SEQ_TILE columns, in order, because the scan carries its state from chunk to chunk. Per
chunk: delta * u once; then for every state s, exp(delta * a[:, s]) on ScalarE (a column
of a as the per-partition scale), the b and c rows broadcast to all partitions, the linear
recurrence as one tensor_tensor_scan seeded with the state left by the previous chunk (its
last column is kept as the next seed), and c * h added into the chunk's output. The last
channel tile and sequence chunk are slices clipped with min().
"""
import nki
import nki.isa as nisa
import nki.language as nl

SEQ_TILE = 512  # tune: 256, 512, 1024, 2048


@nki.jit
def kernel(delta, u, a, b, c):
    C, M = delta.shape
    S = a.shape[1]
    out = nl.ndarray((C, M), dtype=delta.dtype, buffer=nl.shared_hbm)
    P = nl.tile_size.pmax
    f32 = nl.float32

    for ct in nl.affine_range((C + P - 1) // P):
        c0 = ct * P
        cs = min(P, C - c0)
        a_sb = nl.ndarray((cs, S), dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=a_sb, src=a[c0:c0 + cs, 0:S])
        state = nl.zeros((cs, S), dtype=f32, buffer=nl.sbuf)
        for sc in range((M + SEQ_TILE - 1) // SEQ_TILE):  # in order: the state carries over
            l0 = sc * SEQ_TILE
            ls = min(SEQ_TILE, M - l0)
            d_tile = nl.ndarray((cs, ls), dtype=delta.dtype, buffer=nl.sbuf)
            u_tile = nl.ndarray((cs, ls), dtype=u.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=d_tile, src=delta[c0:c0 + cs, l0:l0 + ls])
            nisa.dma_copy(dst=u_tile, src=u[c0:c0 + cs, l0:l0 + ls])
            du = nl.ndarray((cs, ls), dtype=f32, buffer=nl.sbuf)
            nisa.tensor_tensor(dst=du, data1=d_tile, data2=u_tile, op=nl.multiply)
            acc = nl.zeros((cs, ls), dtype=f32, buffer=nl.sbuf)
            for s in nl.affine_range(S):
                decay = nl.ndarray((cs, ls), dtype=f32, buffer=nl.sbuf)
                nisa.activation(dst=decay, op=nl.exp, data=d_tile, scale=a_sb[0:cs, s:s + 1])
                b_row = nl.ndarray((1, ls), dtype=b.dtype, buffer=nl.sbuf)
                c_row = nl.ndarray((1, ls), dtype=c.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=b_row, src=b[s:s + 1, l0:l0 + ls])
                nisa.dma_copy(dst=c_row, src=c[s:s + 1, l0:l0 + ls])
                drive = nl.ndarray((cs, ls), dtype=f32, buffer=nl.sbuf)
                nisa.tensor_tensor(dst=drive, data1=du, data2=nl.broadcast_to(b_row, (cs, ls)), op=nl.multiply)
                h = nl.ndarray((cs, ls), dtype=f32, buffer=nl.sbuf)
                nisa.tensor_tensor_scan(dst=h, data0=decay, data1=drive, initial=state[0:cs, s:s + 1],
                                        op0=nl.multiply, op1=nl.add)
                nisa.tensor_copy(dst=state[0:cs, s:s + 1], src=h[0:cs, ls - 1:ls])
                weighted = nl.ndarray((cs, ls), dtype=f32, buffer=nl.sbuf)
                nisa.tensor_tensor(dst=weighted, data1=h, data2=nl.broadcast_to(c_row, (cs, ls)), op=nl.multiply)
                nisa.tensor_tensor(dst=acc, data1=acc, data2=weighted, op=nl.add)
            nisa.dma_copy(dst=out[c0:c0 + cs, l0:l0 + ls], src=acc)
    return out
