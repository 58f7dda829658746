"""A small builder of instruction traces, so model tests do not depend on the emulator.

It records what the emulator records for the same calls (trace.py contract): one Instr per
instruction, regions as boxes over a tensor's full shape, loop paths, DMA byte counts.
"""

from __future__ import annotations

import contextlib
import math

from fitness.simulator import trace as tr

P = 128  # partitions


class TraceBuilder:
    def __init__(self) -> None:
        self.trace = tr.Trace(kernel_file="built")
        self.path: tuple[tuple[int, int], ...] = ()
        self._loops: dict[tuple, int] = {}

    # --- tensors --------------------------------------------------------------------------

    def hbm(self, shape: tuple[int, ...], kind: str = "input", dtype: str = "float32",
            name: str = "") -> int:
        return self._tensor(tr.HBM, shape, None, kind, dtype, name, line=0)

    def tile(self, shape: tuple[int, ...], *, memory: str = tr.SBUF, line: int = 1,
             dtype: str = "float32", pa: int = 0, name: str = "") -> int:
        """An on-chip tensor (block dims first, partition at `pa`)."""
        return self._tensor(memory, shape, pa, "scratch", dtype, name, line)

    def _tensor(self, memory, shape, pa, kind, dtype, name, line) -> int:
        tid = len(self.trace.tensors) + 1
        item = 2 if dtype in ("bfloat16", "float16") else 4
        self.trace.tensors[tid] = tr.TensorInfo(tid, name, memory, tuple(shape),
                                                dtype, item, pa, kind, self.path, line)
        return tid

    def full(self, tid: int) -> tr.Region:
        return tr.Region(tid, tuple((0, s) for s in self.trace.tensors[tid].shape))

    # --- loops ----------------------------------------------------------------------------

    def loop(self, n: int, kind: str = "affine", line: int = 0):
        key = (line, self.path[-1][0] if self.path else None, n, kind)
        lid = self._loops.get(key)
        if lid is None:
            lid = self._loops[key] = len(self._loops) + 1
            parent = self.path[-1][0] if self.path else None
            self.trace.loops[lid] = tr.Loop(lid, kind, 0, n, 1, parent, line)
        outer = self.path
        for v in range(n):
            self.path = outer + ((lid, v),)
            yield v
        self.path = outer

    @contextlib.contextmanager
    def at(self, path):
        saved, self.path = self.path, path
        yield
        self.path = saved

    @contextlib.contextmanager
    def resident(self, kib: int, line: int):
        """A (P, kib KiB) fp32 tile loaded before the body and stored after it, so that it
        stays live across everything the body emits; nothing when `kib` is 0."""
        if not kib:
            yield
            return
        cols = kib * 256
        src, out = self.hbm((P, cols), name="keep"), self.hbm((P, cols), kind="output")
        keep = self.tile((P, cols), line=line)
        self.dma(tr.DMA_LOAD, self.full(src), self.full(keep), P)
        yield
        self.dma(tr.DMA_STORE, self.full(keep), self.full(out), P)

    # --- instructions ---------------------------------------------------------------------

    def emit(self, kind: str, op: str, engines, reads, writes, *, partitions: int, free: int,
             dtype: str = "float32", in_dtypes=("float32",), line: int = 0, func: str = "",
             mm: tr.MatmulInfo | None = None, dma: tr.DmaInfo | None = None,
             psum_inputs: int = 0) -> tr.Instr:
        ins = tr.Instr(len(self.trace.instrs), kind, op, tuple(engines), dtype, tuple(in_dtypes),
                       partitions, free, tuple(reads), tuple(writes), self.path, line, func, mm,
                       dma, psum_inputs)
        self.trace.instrs.append(ins)
        return ins

    def dma(self, kind: str, src: tr.Region, dst: tr.Region, partitions: int,
            run_bytes: int | None = None, itemsize: int = 4) -> tr.Instr:
        sbuf = dst if kind == tr.DMA_LOAD else src
        elems = math.prod(b - a for a, b in sbuf.box)
        nbytes = elems * itemsize
        per_partition = nbytes // partitions
        info = tr.DmaInfo(nbytes, partitions, run_bytes or per_partition,
                          nbytes // (run_bytes or per_partition))
        op = "nl.load" if kind == tr.DMA_LOAD else "nl.store"
        return self.emit(kind, op, (tr.DMA,), (src,), (dst,), partitions=partitions,
                         free=elems // partitions, dma=info)

    def compute(self, kind: str, reads, write: tr.Region, *, engines=None, func: str = "",
                psum_inputs: int = 0, dtype: str = "float32") -> tr.Instr:
        p0, p1 = _partition_range(self.trace, write)
        free = _free_elems(self.trace, write)
        default = {tr.ACT: (tr.SCALAR,), tr.TT: (tr.VECTOR,), tr.RECIP: (tr.VECTOR,),
                   tr.TS: (tr.VECTOR, tr.SCALAR), tr.COPY: (tr.VECTOR, tr.SCALAR),
                   tr.RED: (tr.VECTOR,), tr.TTS: (tr.VECTOR,), tr.MEMSET: (tr.VECTOR,),
                   tr.GPSIMD: (tr.GPSIMD_ENGINE,)}[kind]
        if kind == tr.RED:
            free = _free_elems(self.trace, reads[0])
        return self.emit(kind, kind.lower(), engines or default, reads, (write,),
                         partitions=p1 - p0, free=free, func=func, psum_inputs=psum_inputs,
                         dtype=dtype, in_dtypes=(dtype,) * len(reads))

    def matmul(self, stationary: tr.Region, moving: tr.Region, out: tr.Region, *,
               accumulate: bool = False, dtype: str = "float32", transpose: bool = False,
               op: str = "nisa.nc_matmul") -> tr.Instr:
        k0, k1 = _partition_range(self.trace, stationary)
        m = _free_elems(self.trace, stationary)
        n = _free_elems(self.trace, moving)
        info = tr.MatmulInfo(K=k1 - k0, M=m, N=n, accumulate=accumulate, is_transpose=transpose,
                             moving_onezero=transpose)
        return self.emit(tr.MM_TRANSPOSE if transpose else tr.MM, op, (tr.TENSOR,),
                         (stationary, moving), (out,), partitions=k1 - k0, free=n,
                         in_dtypes=(dtype, dtype), mm=info)


def _partition_range(trace: tr.Trace, region: tr.Region) -> tuple[int, int]:
    info = trace.tensors[region.tensor]
    return region.box[info.partition_axis or 0]


def _free_elems(trace: tr.Trace, region: tr.Region) -> int:
    info = trace.tensors[region.tensor]
    pa = info.partition_axis or 0
    return math.prod(b - a for a, b in region.box[pa + 1:])


def silu_trace(M: int = 512, N: int = 2048, load_n: int = 512, compute_n: int = 512) -> tr.Trace:
    """The project's silu baseline (nkibench/baselines/silu.py) as the emulator traces it."""
    b = TraceBuilder()
    x = b.hbm((M, N), name="x")
    out = b.hbm((M, N), kind="output", name="out")

    for m in b.loop(M // P, line=22):
        for n in b.loop(N // load_n, line=23):
            rows, cols = (m * P, m * P + P), (n * load_n, n * load_n + load_n)
            x_tile = b.tile((P, load_n), line=25)
            b.dma(tr.DMA_LOAD, tr.Region(x, (rows, cols)), b.full(x_tile), P)
            y_tile = b.tile((P, load_n), line=26)
            for c in b.loop(load_n // compute_n, line=27):
                cs = (c * compute_n, c * compute_n + compute_n)
                xs = tr.Region(x_tile, ((0, P), cs))
                e, d, r = (b.tile((P, compute_n), line=30 + k) for k in range(3))
                b.compute(tr.ACT, (xs,), b.full(e), func="exp")
                b.compute(tr.TS, (b.full(e),), b.full(d), func="add")
                b.compute(tr.RECIP, (b.full(d),), b.full(r))
                b.compute(tr.TT, (xs, b.full(r)), tr.Region(y_tile, ((0, P), cs)), func="multiply")
            b.dma(tr.DMA_STORE, b.full(y_tile), tr.Region(out, (rows, cols)), P)
    return b.trace


def matmul_trace(mt: int = 32, nt: int = 12, kt: int = 5) -> tr.Trace:
    """The official NKIBench matmul baseline's structure (kernels/matmul_*_0.py): per 1024
    output columns load the rhs block once, then per 128 rows load the lhs, transpose it on
    TensorE (identity matmuls + PSUM copies) and accumulate 40 matmuls per 512 columns.
    Defaults are the paper's shape M=4096, N=12288, K=5120 (about 62 thousand instructions)."""
    b = TraceBuilder()
    lhs = b.hbm((mt, P, kt * 8, P), name="lhs")
    rhs = b.hbm((kt * 8, P, nt * 1024), name="rhs")
    out = b.hbm((mt, P, nt * 1024), kind="output", name="out")
    ident_hbm = b.hbm((P, P), kind="constant", name="identity")
    ident = b.tile((P, P), line=20, name="identity_local")
    v6 = b.tile((nt, kt, 8, P, 1024), pa=3, line=21, name="rhs_local")
    v7 = b.tile((nt, mt, kt, P, 1024), pa=3, line=22)
    v8 = b.tile((nt, mt, kt, 8, P, P), memory=tr.PSUM, pa=4, line=23)
    v9 = b.tile((nt, mt, kt, P, 8, P), pa=3, line=24)
    v10 = b.tile((nt, mt, 2, P, 512), memory=tr.PSUM, pa=3, line=25)
    v11 = b.tile((mt, nt, P, 1024), pa=2, line=26)
    b.dma(tr.DMA_LOAD, b.full(ident_hbm), b.full(ident), P)
    for i0 in b.loop(nt, line=30):
        for i1 in b.loop(kt, line=31):
            for i2 in b.loop(8, line=32):
                b.dma(tr.DMA_LOAD, tr.Region(rhs, ((i2 + 8 * i1, i2 + 8 * i1 + 1), (0, P), (1024 * i0, 1024 * i0 + 1024))),
                      tr.Region(v6, ((i0, i0 + 1), (i1, i1 + 1), (i2, i2 + 1), (0, P), (0, 1024))), P)
        for i3 in b.loop(mt, line=33):
            for i4 in b.loop(kt, line=34):
                blk7 = ((i0, i0 + 1), (i3, i3 + 1), (i4, i4 + 1))
                b.dma(tr.DMA_LOAD, tr.Region(lhs, ((i3, i3 + 1), (0, P), (8 * i4, 8 * i4 + 8), (0, P))),
                      tr.Region(v7, blk7 + ((0, P), (0, 1024))), P, run_bytes=4096)
                for i5 in b.loop(8, line=35):
                    ps = tr.Region(v8, blk7 + ((i5, i5 + 1), (0, P), (0, P)))
                    b.matmul(tr.Region(v7, blk7 + ((0, P), (128 * i5, 128 * i5 + 128))), b.full(ident),
                             ps, transpose=True)
                    b.compute(tr.COPY, (ps,), tr.Region(v9, blk7 + ((0, P), (i5, i5 + 1), (0, P))),
                              psum_inputs=1)
            for i6 in b.loop(2, line=36):
                acc = tr.Region(v10, ((i0, i0 + 1), (i3, i3 + 1), (i6, i6 + 1), (0, P), (0, 512)))
                for i7 in b.loop(kt, line=37):
                    for i8 in b.loop(8, line=38):
                        st = tr.Region(v9, ((i0, i0 + 1), (i3, i3 + 1), (i7, i7 + 1), (0, P), (i8, i8 + 1), (0, P)))
                        mv = tr.Region(v6, ((i0, i0 + 1), (i7, i7 + 1), (i8, i8 + 1), (0, P), (512 * i6, 512 * i6 + 512)))
                        b.matmul(st, mv, acc, accumulate=True)
                b.compute(tr.COPY, (acc,), tr.Region(v11, ((i3, i3 + 1), (i0, i0 + 1), (0, P), (512 * i6, 512 * i6 + 512))),
                          psum_inputs=1)
            b.dma(tr.DMA_STORE, tr.Region(v11, ((i3, i3 + 1), (i0, i0 + 1), (0, P), (0, 1024))),
                  tr.Region(out, ((i3, i3 + 1), (0, P), (1024 * i0, 1024 * i0 + 1024))), P)
    return b.trace
