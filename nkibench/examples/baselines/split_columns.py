"""split_columns baseline (current `nki` dialect): each tile of up to 128 rows is loaded once;
its even and odd columns are strided views, copied on chip into two tiles and stored."""
import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def kernel(x):
    rows, F = x.shape
    FE = F - F // 2
    FO = F // 2
    even = nl.ndarray((rows, FE), dtype=x.dtype, buffer=nl.shared_hbm)
    odd = nl.ndarray((rows, FO), dtype=x.dtype, buffer=nl.shared_hbm)
    P = nl.tile_size.pmax
    for t in nl.affine_range((rows + P - 1) // P):
        r0 = t * P
        rs = min(P, rows - r0)
        tile = nl.ndarray((rs, F), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=x[r0:r0 + rs, 0:F])
        e = nl.ndarray((rs, FE), dtype=x.dtype, buffer=nl.sbuf)
        o = nl.ndarray((rs, FO), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=e, src=tile[0:rs, 0:F:2])
        nisa.tensor_copy(dst=o, src=tile[0:rs, 1:F:2])
        nisa.dma_copy(dst=even[r0:r0 + rs, 0:FE], src=e)
        nisa.dma_copy(dst=odd[r0:r0 + rs, 0:FO], src=o)
    return even, odd
