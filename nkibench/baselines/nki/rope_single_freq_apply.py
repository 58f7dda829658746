"""Rotary-embedding baseline (current `nki` dialect): for x (D, T), freqs_cos and freqs_sin
(D/2, T), float32, out = [x0 cos - x1 sin ; x0 sin + x1 cos] with x0 = x[:D/2], x1 = x[D/2:].

The D/2 rotation pairs map onto partitions (64 of them for D = 128); the T columns are
processed in chunks of TILE_F. Per chunk the two halves of x, cos and sin are copied in as
four tiles starting at partition 0, combined with four multiplies, a subtract and an add on
VectorE, and copied out to the two halves of out. D must be even with D/2 <= 128; the last
chunk is a slice clipped with min().
"""
import nki
import nki.isa as nisa
import nki.language as nl

TILE_F = 2048  # tune: 512, 1024, 2048, 4096


@nki.jit
def kernel(x, freqs_cos, freqs_sin):
    D, T = x.shape
    H2 = D // 2
    out = nl.ndarray((D, T), dtype=x.dtype, buffer=nl.shared_hbm)
    assert D % 2 == 0 and H2 <= nl.tile_size.pmax, "rope baseline: D must be even and at most 256"
    f32 = nl.float32

    for f in nl.affine_range((T + TILE_F - 1) // TILE_F):
        f0 = f * TILE_F
        fs = min(TILE_F, T - f0)
        x0 = nl.ndarray((H2, fs), dtype=x.dtype, buffer=nl.sbuf)
        x1 = nl.ndarray((H2, fs), dtype=x.dtype, buffer=nl.sbuf)
        cos = nl.ndarray((H2, fs), dtype=freqs_cos.dtype, buffer=nl.sbuf)
        sin = nl.ndarray((H2, fs), dtype=freqs_sin.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=x0, src=x[0:H2, f0:f0 + fs])
        nisa.dma_copy(dst=x1, src=x[H2:D, f0:f0 + fs])
        nisa.dma_copy(dst=cos, src=freqs_cos[0:H2, f0:f0 + fs])
        nisa.dma_copy(dst=sin, src=freqs_sin[0:H2, f0:f0 + fs])

        a = nl.ndarray((H2, fs), dtype=f32, buffer=nl.sbuf)
        b = nl.ndarray((H2, fs), dtype=f32, buffer=nl.sbuf)
        out0 = nl.ndarray((H2, fs), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=a, data1=x0, data2=cos, op=nl.multiply)
        nisa.tensor_tensor(dst=b, data1=x1, data2=sin, op=nl.multiply)
        nisa.tensor_tensor(dst=out0, data1=a, data2=b, op=nl.subtract)
        c = nl.ndarray((H2, fs), dtype=f32, buffer=nl.sbuf)
        d = nl.ndarray((H2, fs), dtype=f32, buffer=nl.sbuf)
        out1 = nl.ndarray((H2, fs), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=c, data1=x0, data2=sin, op=nl.multiply)
        nisa.tensor_tensor(dst=d, data1=x1, data2=cos, op=nl.multiply)
        nisa.tensor_tensor(dst=out1, data1=c, data2=d, op=nl.add)
        nisa.dma_copy(dst=out[0:H2, f0:f0 + fs], src=out0)
        nisa.dma_copy(dst=out[H2:D, f0:f0 + fs], src=out1)
    return out
