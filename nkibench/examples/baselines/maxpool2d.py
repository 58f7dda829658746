"""maxpool2d baseline (current `nki` dialect): separable pooling. For each tile of up to 128
channels, the maximum over the pool columns of each window is taken first (strided views
along W, pool - 1 VectorE maxima into a (C, H, W/pool) tile), then over the pool rows (strided
views along H): 2 (pool - 1) instructions instead of pool * pool - 1.
"""
import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def kernel(x, pool):
    C, H, W = x.shape
    HO = H // pool
    WO = W // pool
    out = nl.ndarray((C, HO, WO), dtype=x.dtype, buffer=nl.shared_hbm)
    P = nl.tile_size.pmax
    for t in nl.affine_range((C + P - 1) // P):
        c0 = t * P
        cs = min(P, C - c0)
        tile = nl.ndarray((cs, H, W), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=x[c0:c0 + cs, 0:H, 0:W])
        cols = nl.ndarray((cs, H, WO), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=cols, src=tile[0:cs, 0:H, 0:W:pool])
        for dj in range(1, pool):
            nisa.tensor_tensor(dst=cols, data1=cols, data2=tile[0:cs, 0:H, dj:W:pool], op=nl.maximum)
        res = nl.ndarray((cs, HO, WO), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=res, src=cols[0:cs, 0:H:pool, 0:WO])
        for di in range(1, pool):
            nisa.tensor_tensor(dst=res, data1=res, data2=cols[0:cs, di:H:pool, 0:WO], op=nl.maximum)
        nisa.dma_copy(dst=out[c0:c0 + cs, 0:HO, 0:WO], src=res)
    return out
