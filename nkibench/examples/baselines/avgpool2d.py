"""avgpool2d baseline (current `nki` dialect): channels on partitions (tiles of 128, the last
one a clipped slice); the pool * pool window positions are strided views of the loaded
(C, H, W) tile, summed into the output tile one position at a time and scaled once.
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
        acc = nl.ndarray((cs, HO, WO), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=acc, src=tile[0:cs, 0:H:pool, 0:W:pool])
        for k in range(1, pool * pool):
            di = k // pool
            dj = k % pool
            nisa.tensor_tensor(dst=acc, data1=acc, data2=tile[0:cs, di:H:pool, dj:W:pool], op=nl.add)
        res = nl.ndarray((cs, HO, WO), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=res, data=acc, op0=nl.multiply, operand0=1.0 / (pool * pool))
        nisa.dma_copy(dst=out[c0:c0 + cs, 0:HO, 0:WO], src=res)
    return out
