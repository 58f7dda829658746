"""The compiler-effects pass: CSE/hoisting under an SBUF budget, spills and remat."""

from __future__ import annotations

from fitness.simulator import trace as tr
from fitness.simulator.perf import hardware
from fitness.simulator.perf.lowering import DMA_KINDS
from fitness.simulator.perf.model import counters, prepare
from fitness.simulator.perf.params import DOCUMENTED

from .builder import P, TraceBuilder

HW = hardware("trn1")


def _reused_weights(rows: int, tiles: int, cols: int = 512, resident_kib: int = 0) -> tr.Trace:
    """For each of `rows` row blocks, load the same `tiles` weight tiles (128 x cols fp32)
    again and multiply them into a row tile: the loads are invariant in the row loop. With
    `resident_kib`, a tile of that size per partition stays live across the whole program."""
    b = TraceBuilder()
    with b.resident(resident_kib, line=9):
        w = b.hbm((tiles, P, cols), name="w")
        x = b.hbm((rows, P, cols), name="x")
        out = b.hbm((rows, tiles, P, cols), kind="output")
        for r in b.loop(rows, line=1):
            xt = b.tile((P, cols), line=2)
            b.dma(tr.DMA_LOAD, tr.Region(x, ((r, r + 1), (0, P), (0, cols))), b.full(xt), P)
            for k in b.loop(tiles, line=3):
                wt = b.tile((P, cols), line=4)
                b.dma(tr.DMA_LOAD, tr.Region(w, ((k, k + 1), (0, P), (0, cols))), b.full(wt), P)
                y = b.tile((P, cols), line=5)
                b.compute(tr.TT, (b.full(xt), b.full(wt)), b.full(y), func="multiply")
                b.dma(tr.DMA_STORE, b.full(y),
                      tr.Region(out, ((r, r + 1), (k, k + 1), (0, P), (0, cols))), P)
    return b.trace


def test_loop_invariant_loads_are_hoisted_when_they_fit():
    prep = prepare(_reused_weights(rows=8, tiles=16), HW, DOCUMENTED)   # 16 x 2 KiB kept
    c = counters(prep.ops)
    assert c["hbm_read_bytes"] == (16 + 8) * P * 512 * 4
    assert prep.report.removed_duplicates == 7 * 16


def test_loop_invariant_loads_stay_when_keeping_them_overflows():
    prep = prepare(_reused_weights(rows=4, tiles=100), HW, DOCUMENTED)  # 100 x 2 KiB > budget
    c = counters(prep.ops)
    assert c["hbm_read_bytes"] == (4 * 100 + 4) * P * 512 * 4
    assert prep.report.removed_duplicates == 0


def test_hoisting_budget_is_a_parameter():
    trace = _reused_weights(rows=4, tiles=40)                           # 80 KiB kept
    small = counters(prepare(trace, HW, DOCUMENTED.replace(hoist_budget_fraction=0.25)).ops)
    large = counters(prepare(trace, HW, DOCUMENTED.replace(hoist_budget_fraction=1.0)).ops)
    assert small["hbm_read_bytes"] > large["hbm_read_bytes"]


def _matmul_transposes(compiler_inserted: bool) -> tr.Trace:
    """Two identical transposes of one loaded tile, as nl.matmul's expansion or as user
    nc_matmul(is_transpose=True) calls."""
    b = TraceBuilder()
    src = b.hbm((P, P))
    ident_hbm = b.hbm((P, P), kind="constant")
    x, ident = b.tile((P, P), line=1), b.tile((P, P), line=2)
    b.dma(tr.DMA_LOAD, b.full(src), b.full(x), P)
    b.dma(tr.DMA_LOAD, b.full(ident_hbm), b.full(ident), P)
    op = "nl.matmul" if compiler_inserted else "nisa.nc_matmul"
    for i in b.loop(2, line=3):
        ps = b.tile((P, P), memory=tr.PSUM, line=4)
        b.matmul(b.full(x), b.full(ident), b.full(ps), transpose=True, op=op)
    return b.trace


def test_only_user_transposes_are_deduplicated():
    user = counters(prepare(_matmul_transposes(False), HW, DOCUMENTED).ops)
    inserted = counters(prepare(_matmul_transposes(True), HW, DOCUMENTED).ops)
    one = 2 * 2 * P * P * P
    assert user["transpose_flops"] == one
    assert inserted["transpose_flops"] == 2 * one


def _long_lived(n_tiles: int) -> tr.Trace:
    """Compute n (128, 512) tiles in one loop and consume them all in a second one."""
    b = TraceBuilder()
    src = b.hbm((n_tiles, P, 512))
    out = b.hbm((n_tiles, P, 512), kind="output")
    keep = b.tile((n_tiles, P, 512), pa=1, line=1)
    for i in b.loop(n_tiles, line=2):
        raw = b.tile((P, 512), line=3)
        b.dma(tr.DMA_LOAD, tr.Region(src, ((i, i + 1), (0, P), (0, 512))), b.full(raw), P)
        b.compute(tr.ACT, (b.full(raw),), tr.Region(keep, ((i, i + 1), (0, P), (0, 512))), func="exp")
    for i in b.loop(n_tiles, line=4):
        res = b.tile((P, 512), line=5)
        b.compute(tr.TS, (tr.Region(keep, ((i, i + 1), (0, P), (0, 512))),), b.full(res), func="multiply")
        b.dma(tr.DMA_STORE, b.full(res), tr.Region(out, ((i, i + 1), (0, P), (0, 512))), P)
    return b.trace


def test_spill_moves_only_what_does_not_fit():
    n = 200                                   # 400 KiB/partition live, 176 KiB usable
    prep = prepare(_long_lived(n), HW, DOCUMENTED)
    c = counters(prep.ops)
    tile = P * 512 * 4
    spilled = c["spill_save_bytes"] // tile
    assert c["spill_save_bytes"] == c["spill_reload_bytes"] == spilled * tile
    assert 0.4 * n < spilled < n              # part of the tensor, not all of it
    assert prep.report.sbuf_peak <= HW.sbuf_usable_bytes_per_partition + 2048
    # Every reload waits for its save: the dependency runs through the HBM spill area.
    saves = {i for i, op in enumerate(prep.ops) if op.kind == tr.DMA_SPILL_SAVE}
    for i, op in enumerate(prep.ops):
        if op.kind == tr.DMA_SPILL_RELOAD:
            assert saves & set(prep.preds[i])


def _accumulators(outer: int) -> tr.Trace:
    """Mamba v2's shape in small: every outer iteration keeps a 64 KiB accumulator across an
    inner loop whose three 40 KiB temporaries peak while it is idle (184 KiB > 176 usable)."""
    acc_w, tmp_w = 16384, 10240
    b = TraceBuilder()
    x = b.hbm((outer, 2, P, tmp_w), name="x")
    out = b.hbm((outer, P, acc_w), kind="output")
    for i in b.loop(outer, line=1):
        acc = b.tile((P, acc_w), line=2)
        b.compute(tr.MEMSET, (), b.full(acc))
        for s in b.loop(2, line=3):
            t1, t2, t3 = (b.tile((P, tmp_w), line=line) for line in (4, 5, 6))
            b.dma(tr.DMA_LOAD, tr.Region(x, ((i, i + 1), (s, s + 1), (0, P), (0, tmp_w))), b.full(t1), P)
            b.compute(tr.ACT, (b.full(t1),), b.full(t2), func="exp")
            b.compute(tr.TT, (b.full(t1), b.full(t2)), b.full(t3), func="multiply")
            part = tr.Region(acc, ((0, P), (0, tmp_w)))
            b.compute(tr.TT, (part, b.full(t3)), part, func="add")
        b.dma(tr.DMA_STORE, b.full(acc), tr.Region(out, ((i, i + 1), (0, P), (0, acc_w))), P)
    return b.trace


def test_overflow_is_resolved_in_every_iteration_of_a_long_loop():
    """Each outer iteration peaks once, so resolving them takes one step each: with 40
    iterations the pass must not stop after 32 (before, it did, leaving the program over
    capacity and hence without any room to overlap iterations)."""
    prep = prepare(_accumulators(40), HW, DOCUMENTED)
    assert prep.report.sbuf_peak_as_written > HW.sbuf_usable_bytes_per_partition
    assert prep.report.sbuf_peak <= HW.sbuf_usable_bytes_per_partition
    saves = sum(op.kind == tr.DMA_SPILL_SAVE for op in prep.ops)
    assert saves >= 40                        # the accumulator of every outer iteration


def _scaled_pairs(op: str, *, store_scaled: bool = False, vector_scale: bool = False) -> tr.Trace:
    """Per tile, `y = x <op> (c * x)` (the c * x a tensor_scalar with a constant, or with a
    per-partition vector when `vector_scale`), optionally also storing c * x."""
    b = TraceBuilder()
    x_hbm = b.hbm((4, P, 512), name="x")
    out = b.hbm((4, P, 512), kind="output")
    scaled_out = b.hbm((4, P, 512), kind="output")
    scale = b.tile((P, 1), line=1)
    b.compute(tr.MEMSET, (), b.full(scale))
    for t in b.loop(4, line=2):
        x = b.tile((P, 512), line=3)
        b.dma(tr.DMA_LOAD, tr.Region(x_hbm, ((t, t + 1), (0, P), (0, 512))), b.full(x), P)
        cx = b.tile((P, 512), line=4)
        reads = (b.full(x), b.full(scale)) if vector_scale else (b.full(x),)
        b.compute(tr.TS, reads, b.full(cx), func="multiply(reverse)")
        y = b.tile((P, 512), line=5)
        b.compute(tr.TT, (b.full(x), b.full(cx)), b.full(y), func=op)
        b.dma(tr.DMA_STORE, b.full(y), tr.Region(out, ((t, t + 1), (0, P), (0, 512))), P)
        if store_scaled:
            b.dma(tr.DMA_STORE, b.full(cx),
                  tr.Region(scaled_out, ((t, t + 1), (0, P), (0, 512))), P)
    return b.trace


def _kinds(prep) -> list[tuple[str, str]]:
    return [(op.kind, op.func) for op in prep.ops if op.kind not in DMA_KINDS and op.kind != tr.MEMSET]


def test_tile_plus_or_minus_its_scalar_multiple_becomes_one_tensor_scalar():
    for op in ("add", "subtract"):
        prep = prepare(_scaled_pairs(op), HW, DOCUMENTED)
        assert prep.report.fused_pairs == 4
        assert _kinds(prep) == [(tr.TS, "multiply")] * 4


def test_tile_times_its_scalar_multiple_becomes_one_scalar_engine_square():
    prep = prepare(_scaled_pairs("multiply"), HW, DOCUMENTED)
    assert prep.report.fused_pairs == 4
    assert _kinds(prep) == [(tr.ACT, "square")] * 4
    assert all(op.engines == (tr.SCALAR,) for op in prep.ops if op.kind == tr.ACT)


def test_pairs_stay_when_the_multiple_is_used_elsewhere_or_not_a_constant_or_op_differs():
    cases = [_scaled_pairs("subtract", store_scaled=True),   # c * x is also stored
             _scaled_pairs("subtract", vector_scale=True),   # per-partition scale vector
             _scaled_pairs("divide"), _scaled_pairs("maximum")]
    for trace in cases:
        prep = prepare(trace, HW, DOCUMENTED)
        assert prep.report.fused_pairs == 0
        assert [k for k, _ in _kinds(prep)] == [tr.TS, tr.TT] * 4


def _broadcast_multiply(cols: int) -> tr.Trace:
    """Per row tile: load a (1, cols) vector, broadcast it over the partitions as the
    emulator records `broadcast_to` (a K=1 matmul into PSUM and a copy to SBUF per 512
    columns) and multiply a loaded tile by it."""
    b = TraceBuilder()
    v_hbm, x_hbm = b.hbm((4, 1, cols)), b.hbm((4, P, cols))
    out = b.hbm((4, P, cols), kind="output")
    for r in b.loop(4, line=1):
        v, x = b.tile((1, cols), line=2), b.tile((P, cols), line=3)
        b.dma(tr.DMA_LOAD, tr.Region(v_hbm, ((r, r + 1), (0, 1), (0, cols))), b.full(v), 1)
        b.dma(tr.DMA_LOAD, tr.Region(x_hbm, ((r, r + 1), (0, P), (0, cols))), b.full(x), P)
        bc = b.tile((P, cols), line=4)
        for c0 in range(0, cols, 512):
            ps = b.tile((P, 512), memory=tr.PSUM, line=5)
            mm = tr.MatmulInfo(K=1, M=P, N=512, accumulate=False, stationary_onezero=True)
            b.emit(tr.MM_BCAST, "broadcast_to", (tr.TENSOR,), (tr.Region(v, ((0, 1), (c0, c0 + 512))),),
                   (b.full(ps),), partitions=1, free=512, mm=mm)
            b.emit(tr.COPY, "broadcast_to", (tr.VECTOR, tr.SCALAR), (b.full(ps),),
                   (tr.Region(bc, ((0, P), (c0, c0 + 512))),), partitions=P, free=512,
                   func="copy", psum_inputs=1)
        y = b.tile((P, cols), line=6)
        b.compute(tr.TT, (b.full(x), b.full(bc)), b.full(y), func="multiply")
        b.dma(tr.DMA_STORE, b.full(y), tr.Region(out, ((r, r + 1), (0, P), (0, cols))), P)
    return b.trace


def test_one_bank_broadcast_is_read_from_psum():
    """A broadcast of at most 512 fp32 columns (one PSUM bank) is not evicted: its reader
    reads PSUM (mamba v2 at 512 and v3 vs v2 at 1024+, compiler.py step 0b)."""
    prep = prepare(_broadcast_multiply(512), HW, DOCUMENTED)
    kinds = [op.kind for op in prep.ops]
    assert prep.report.psum_broadcasts == 4 and tr.COPY not in kinds
    tts = [op for op in prep.ops if op.kind == tr.TT]
    assert [op.psum_inputs for op in tts] == [1] * 4
    assert all(prep.prog.block_memory[op.reads[1][0]] == tr.PSUM for op in tts)


def test_wider_broadcast_is_evicted_to_sbuf():
    prep = prepare(_broadcast_multiply(1024), HW, DOCUMENTED)
    assert prep.report.psum_broadcasts == 0
    assert sum(op.kind == tr.COPY for op in prep.ops) == 4 * 2
    assert all(op.psum_inputs == 0 for op in prep.ops if op.kind == tr.TT)


def _invariant_product(state_inner: bool, resident_kib: int = 0) -> tr.Trace:
    """mamba's `delta * u`: per channel tile and state, the product of two channel tiles
    that do not depend on the state. state_inner: v2's order (channel loop outside, loads
    before the state loop); otherwise v1's (state loop outside, loads inside). With
    `resident_kib`, a tile of that size per partition stays live across the program."""
    b = TraceBuilder()
    d_hbm, u_hbm = b.hbm((4, P, 512)), b.hbm((4, P, 512))
    out = b.hbm((4, 4, P, 512), kind="output")

    def body(c: int, s: int, d: int, u: int) -> None:
        y = b.tile((P, 512), line=5)
        b.compute(tr.TT, (b.full(d), b.full(u)), b.full(y), func="multiply")
        b.dma(tr.DMA_STORE, b.full(y), tr.Region(out, ((c, c + 1), (s, s + 1), (0, P), (0, 512))), P)

    def loads(c: int) -> tuple[int, int]:
        d, u = b.tile((P, 512), line=2), b.tile((P, 512), line=3)
        b.dma(tr.DMA_LOAD, tr.Region(d_hbm, ((c, c + 1), (0, P), (0, 512))), b.full(d), P)
        b.dma(tr.DMA_LOAD, tr.Region(u_hbm, ((c, c + 1), (0, P), (0, 512))), b.full(u), P)
        return d, u

    with b.resident(resident_kib, line=9):
        if state_inner:
            for c in b.loop(4, line=1):
                d, u = loads(c)
                for s in b.loop(4, line=4):
                    body(c, s, d, u)
        else:
            for s in b.loop(4, line=4):
                for c in b.loop(4, line=1):
                    body(c, s, *loads(c))
    return b.trace


def test_invariant_tensor_tensor_is_hoisted_out_of_its_innermost_loop():
    """v2's order: the product is computed once per channel tile, not once per state."""
    prep = prepare(_invariant_product(state_inner=True), HW, DOCUMENTED)
    assert sum(op.kind == tr.TT for op in prep.ops) == 4


def test_reuse_that_frees_its_inputs_is_hoisted_even_with_sbuf_full():
    """Hoisting the product keeps one product per channel tile alive across the state
    loop, but the products it removes are never allocated and `u` dies after the first:
    the peak does not grow, so no room is needed (measured: mamba v2 at 8192, whose SBUF is
    over capacity as written, spends trn1's VectorE time of four instructions per state,
    31.4 ms, not five, 38.3 ms). Before, the kept product was charged without what it
    frees, and the product was computed again in every state."""
    prep = prepare(_invariant_product(state_inner=True, resident_kib=170), HW, DOCUMENTED)
    assert prep.report.sbuf_peak_as_written == (170 + 3 * 2) * 1024
    assert sum(op.kind == tr.TT for op in prep.ops) == 4
    assert prep.report.sbuf_peak <= prep.report.sbuf_peak_as_written


def test_tensor_tensor_invariant_only_in_an_outer_loop_is_recomputed():
    """v1's order: even with its loads reused, the product varies in the inner loop and
    is computed again in every state (measured: v1's VectorE time)."""
    prep = prepare(_invariant_product(state_inner=False), HW, DOCUMENTED)
    assert sum(op.kind == tr.TT for op in prep.ops) == 16
    assert sum(op.kind == tr.DMA_LOAD for op in prep.ops) == 8      # the loads are reused


def _scan_chunks(chunks: int, dialect: str = "legacy") -> tr.Trace:
    """mamba v3's scan state: per chunk a scan reads the state, then the chunk's last
    column is copied into the state for the next chunk (after the last chunk nothing reads
    it)."""
    b = TraceBuilder()
    b.trace.dialect = dialect
    out = b.hbm((chunks, P, 512), kind="output")
    x = b.tile((P, 512), line=1)
    b.compute(tr.MEMSET, (), b.full(x))
    state = b.tile((P, 1), line=2)
    b.compute(tr.MEMSET, (), b.full(state))
    for c in b.loop(chunks, kind="static", line=3):
        res = b.tile((P, 512), line=4)
        b.compute(tr.TTS, (b.full(x), b.full(x), b.full(state)), b.full(res), func="multiply,add")
        b.compute(tr.COPY, (tr.Region(res, ((0, P), (511, 512))),), b.full(state))
        b.dma(tr.DMA_STORE, b.full(res), tr.Region(out, ((c, c + 1), (0, P), (0, 512))), P)
    return b.trace


def test_copies_nobody_reads_are_dropped():
    """Step 1b: the last chunk's state copy is dead and dropped (measured: mamba v3 at
    sequence 512 runs in v2's time); the copies the next chunk reads stay, and so does
    everything in a current-dialect kernel (the NKI compiler runs it as written)."""
    for chunks in (1, 4):
        prep = prepare(_scan_chunks(chunks), HW, DOCUMENTED)
        assert prep.report.dead_copies == 1
        assert sum(op.kind == tr.COPY for op in prep.ops) == chunks - 1
        assert sum(op.kind == tr.TTS for op in prep.ops) == chunks
    prep = prepare(_scan_chunks(1, "current"), HW, DOCUMENTED)
    assert prep.report.dead_copies == 0 and sum(op.kind == tr.COPY for op in prep.ops) == 1


def test_hoisted_copies_share_sbuf_with_the_programs_own_tiles():
    """Reused copies take only what the program's peak leaves of the budget share: next to
    a 160 KiB resident tile, 32 KiB of weights are loaded again in every row (before, the
    copies were checked against the budget alone and kept)."""
    roomy = prepare(_reused_weights(rows=4, tiles=16), HW, DOCUMENTED)
    assert roomy.report.removed_duplicates == 3 * 16
    tight = prepare(_reused_weights(rows=4, tiles=16, resident_kib=160), HW, DOCUMENTED)
    assert tight.report.removed_duplicates == 0
