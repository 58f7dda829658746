"""tensor_add baseline (current `nki` dialect): c = a + b tile by tile with the `nl` wrappers
(`nl.load` into SBUF, `nl.add`, `nl.store` back), rows in tiles of 128 and columns in tiles
of TILE_N; a last tile that does not fill its size is a clipped slice, so any (M, N) works.
"""
import nki
import nki.language as nl

TILE_N = 512  # tune: 256, 512, 1024, 2048


@nki.jit
def kernel(a, b):
    M, N = a.shape
    c = nl.ndarray((M, N), dtype=a.dtype, buffer=nl.shared_hbm)
    P = nl.tile_size.pmax
    for i in nl.affine_range(((M + P - 1) // P) * ((N + TILE_N - 1) // TILE_N)):
        r0 = (i // ((N + TILE_N - 1) // TILE_N)) * P
        c0 = (i % ((N + TILE_N - 1) // TILE_N)) * TILE_N
        rows = slice(r0, min(r0 + P, M))
        cols = slice(c0, min(c0 + TILE_N, N))
        nl.store(c[rows, cols], value=nl.add(nl.load(a[rows, cols]), nl.load(b[rows, cols])))
    return c
