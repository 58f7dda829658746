"""Rotary-embedding baseline: for x (D, T), freqs_cos and freqs_sin (D/2, T), float32,
out = [x0 cos - x1 sin ; x0 sin + x1 cos] with x0 = x[:D/2], x1 = x[D/2:].

The D/2 rotation pairs map onto partitions (64 of them for D = 128); the T columns are
processed in chunks of TILE_F. Per chunk the two halves of x, cos and sin are loaded as four
separate tiles starting at partition 0, combined with four multiplies, a subtract and an
add, and stored to the two halves of out. D must be even with D/2 <= 128; T is free (masked).
"""
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl

TILE_F = 2048  # tune: 512, 1024, 2048, 4096


@nki.jit
def kernel(x, freqs_cos, freqs_sin):
    D, T = x.shape
    H2 = D // 2
    out = nl.ndarray((D, T), dtype=x.dtype, buffer=nl.shared_hbm)
    assert D % 2 == 0 and H2 <= nl.tile_size.pmax, "rope baseline: D must be even and at most 256"
    i_h = nl.arange(H2)[:, None]
    i_f = nl.arange(TILE_F)[None, :]

    for f in nl.affine_range((T + TILE_F - 1) // TILE_F):
        cols = f * TILE_F + i_f
        mask = cols < T
        x0 = nl.load(x[i_h, cols], mask=mask)
        x1 = nl.load(x[H2 + i_h, cols], mask=mask)
        cos = nl.load(freqs_cos[i_h, cols], mask=mask)
        sin = nl.load(freqs_sin[i_h, cols], mask=mask)
        out0 = nl.subtract(nl.multiply(x0, cos, mask=mask), nl.multiply(x1, sin, mask=mask), mask=mask)
        out1 = nl.add(nl.multiply(x0, sin, mask=mask), nl.multiply(x1, cos, mask=mask), mask=mask)
        nl.store(out[i_h, cols], value=out0, mask=mask)
        nl.store(out[H2 + i_h, cols], value=out1, mask=mask)
    return out
