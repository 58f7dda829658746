"""Behaviour the performance model must show, on hand-built traces (no emulator needed)."""

from __future__ import annotations

import pytest

from fitness.simulator import trace as tr
from fitness.simulator.perf import TARGETS, estimate, hardware
from fitness.simulator.perf.model import prepare
from fitness.simulator.perf.params import for_target

from .builder import TraceBuilder, silu_trace

P = 128


def _matmul_kernel(dtype: str, n_mm: int = 4096, group: int = 16) -> tr.Trace:
    """Load one stationary and one moving tile, then `n_mm` back-to-back 128x128x512 matmuls
    accumulating in groups of `group` into rotating PSUM tiles, each group evicted by a copy."""
    b = TraceBuilder()
    a_hbm = b.hbm((P, P), dtype=dtype)
    m_hbm = b.hbm((P, 512), dtype=dtype)
    out = b.hbm((n_mm // group, P, 512), kind="output")
    item = 2 if dtype == "bfloat16" else 4
    a = b.tile((P, P), dtype=dtype, line=1)
    m = b.tile((P, 512), dtype=dtype, line=2)
    b.dma(tr.DMA_LOAD, b.full(a_hbm), b.full(a), P, itemsize=item)
    b.dma(tr.DMA_LOAD, b.full(m_hbm), b.full(m), P, itemsize=item)
    for g in b.loop(n_mm // group, line=3):
        ps = b.tile((P, 512), memory=tr.PSUM, line=4)
        for k in b.loop(group, line=5):
            b.matmul(b.full(a), b.full(m), b.full(ps), accumulate=k > 0, dtype=dtype)
        res = b.tile((P, 512), line=6)
        b.compute(tr.COPY, (b.full(ps),), b.full(res), psum_inputs=1)
        b.dma(tr.DMA_STORE, b.full(res), tr.Region(out, ((g, g + 1), (0, P), (0, 512))), P)
    return b.trace


def test_fp32_matmul_bound_kernel_takes_about_four_times_bf16():
    fp32 = estimate(_matmul_kernel("float32"))
    bf16 = estimate(_matmul_kernel("bfloat16"))
    assert fp32.bottleneck.startswith("TensorE-bound")
    assert 3.4 <= fp32.latency_ms / bf16.latency_ms <= 4.1


def _load_kernel(bytes_per_partition: int, total_bytes: int) -> tr.Trace:
    """Independent loads of (128, bytes_per_partition / 4) fp32 tiles, nothing else."""
    b = TraceBuilder()
    cols = bytes_per_partition // 4
    n = total_bytes // (P * bytes_per_partition)
    src = b.hbm((n, P, cols))
    for i in b.loop(n, line=1):
        t = b.tile((P, cols), line=2)
        b.dma(tr.DMA_LOAD, tr.Region(src, ((i, i + 1), (0, P), (0, cols))), b.full(t), P)
    return b.trace


@pytest.mark.parametrize("small", [256, 512])
def test_small_loads_are_several_times_slower_per_byte(small):
    total = 64 * 2**20
    slow = estimate(_load_kernel(small, total)).latency_ms
    fast = estimate(_load_kernel(4096, total)).latency_ms
    assert slow / fast >= 3.0


def _live_kernel(n_tiles: int, produce_by_compute: bool) -> tr.Trace:
    """Make `n_tiles` (128, 1024) fp32 tiles (4 KiB/partition each), then use them all in a
    second loop, so they are all live at once between the loops."""
    b = TraceBuilder()
    src = b.hbm((n_tiles, P, 1024))
    out = b.hbm((n_tiles, P, 1024), kind="output")
    keep = b.tile((n_tiles, P, 1024), pa=1, line=1)
    for i in b.loop(n_tiles, line=2):
        blk = tr.Region(keep, ((i, i + 1), (0, P), (0, 1024)))
        hbm = tr.Region(src, ((i, i + 1), (0, P), (0, 1024)))
        if produce_by_compute:
            raw = b.tile((P, 1024), line=3)
            b.dma(tr.DMA_LOAD, hbm, b.full(raw), P)
            b.compute(tr.ACT, (b.full(raw),), blk, func="exp")
        else:
            b.dma(tr.DMA_LOAD, hbm, blk, P)
    for i in b.loop(n_tiles, line=4):
        blk = tr.Region(keep, ((i, i + 1), (0, P), (0, 1024)))
        res = b.tile((P, 1024), line=5)
        b.compute(tr.TS, (blk,), b.full(res), func="multiply")
        b.dma(tr.DMA_STORE, b.full(res), tr.Region(out, ((i, i + 1), (0, P), (0, 1024))), P)
    return b.trace


def test_more_live_data_than_sbuf_costs_spill_traffic():
    small = estimate(_live_kernel(16, produce_by_compute=True)).profile      # 64 KiB live
    big = estimate(_live_kernel(96, produce_by_compute=True)).profile        # 384 KiB live
    assert small["spill_save_bytes"] == small["spill_reload_bytes"] == 0
    assert big["spill_save_bytes"] > 0 and big["spill_reload_bytes"] > 0
    assert big["hbm_read_bytes"] == 96 * P * 1024 * 4 + big["spill_reload_bytes"]
    assert big["hbm_write_bytes"] == 96 * P * 1024 * 4 + big["spill_save_bytes"]


def test_too_much_live_input_data_is_reloaded_not_spilled():
    prof = estimate(_live_kernel(96, produce_by_compute=False)).profile
    assert prof["spill_save_bytes"] == prof["spill_reload_bytes"] == 0
    # Rematerialised: the loads move next to their consumers; each tile is read once.
    assert prof["hbm_read_bytes"] == 96 * P * 1024 * 4


def _engine_work(vector: int, scalar: int, sequential: bool = False, chain: bool = False) -> tr.Trace:
    """`vector` tensor_tensor_scan and `scalar` activation instructions on (128, 2048)
    tiles (a scan, not a tensor_tensor: the compiler would hoist that loop-invariant
    product). chain=True makes each instruction consume the previous one's output
    (alternating engines) inside a sequential loop."""
    b = TraceBuilder()
    src = b.hbm((P, 2048))
    x = b.tile((P, 2048), line=1)
    b.dma(tr.DMA_LOAD, b.full(src), b.full(x), P)
    acc = b.tile((P, 2048), line=2)
    b.compute(tr.COPY, (b.full(x),), b.full(acc), engines=(tr.VECTOR,))
    kind = "sequential" if sequential else "affine"
    for i in b.loop(max(vector, scalar), kind=kind, line=3):
        if chain:
            b.compute(tr.TT, (b.full(acc), b.full(x)), b.full(acc), func="add")
            b.compute(tr.ACT, (b.full(acc),), b.full(acc), func="exp")
            continue
        if i < vector:
            v = b.tile((P, 2048), line=4)
            b.compute(tr.TTS, (b.full(x), b.full(x)), b.full(v), func="multiply,add")
        if i < scalar:
            s = b.tile((P, 2048), line=5)
            b.compute(tr.ACT, (b.full(x),), b.full(s), func="exp")
    return b.trace


def test_independent_work_on_different_engines_overlaps():
    launch = for_target("trn1").launch_us * 1e-3
    v = estimate(_engine_work(64, 0)).latency_ms - launch
    s = estimate(_engine_work(0, 64)).latency_ms - launch
    both = estimate(_engine_work(64, 64)).latency_ms - launch
    assert both < 0.75 * (v + s)
    assert both == pytest.approx(max(v, s), rel=0.15)


def test_sequential_dependency_chain_does_not_overlap():
    launch = for_target("trn1").launch_us * 1e-3
    chain = estimate(_engine_work(48, 48, sequential=True, chain=True))
    free = estimate(_engine_work(48, 48))
    for est, overlapped in ((chain, False), (free, True)):
        prof = est.profile
        run = est.latency_ms - launch
        busy = (prof["vector_engine_active_time_percent"]
                + prof["scalar_engine_active_time_percent"]) * est.latency_ms
        if overlapped:
            assert busy > 1.25 * run
        else:
            # Each instruction waits for the previous one on the other engine: no overlap.
            assert busy <= run


@pytest.mark.parametrize("target", TARGETS)
def test_silu_larger_tiles_are_faster(target):
    lat = [estimate(silu_trace(1024, 8192, n, min(n, 2048)), target).latency_ms
           for n in (256, 512, 1024, 2048)]
    # 1 -> 2 -> 4 KiB per partition: DMA efficiency 0.42 -> 0.81 -> 0.97 and fewer
    # instructions. 8 KiB gains little more (0.98) and fills the pipeline more slowly.
    assert lat[0] > lat[1] > lat[2] and lat[0] > 1.2 * lat[3]
    assert lat[3] < 1.05 * lat[2]


def test_estimate_is_deterministic_and_complete():
    t = silu_trace(512, 2048)
    a, b = estimate(t), estimate(t)
    assert a == b
    for key in ("latency_ms", "hbm_read_bytes", "hbm_write_bytes", "spill_save_bytes",
                "spill_reload_bytes", "hardware_flops", "transpose_flops",
                "mm_arithmetic_intensity", "hfu_estimated_percent",
                "scalar_engine_active_time_percent", "vector_engine_active_time_percent",
                "gpsimd_engine_active_time_percent", "tensor_engine_active_time_percent",
                "dma_active_time_percent"):
        assert key in a.profile
    assert a.profile["estimate"] == "simulated" and a.profile["target"] == "trn1"
    assert a.profile["hbm_read_bytes"] == a.profile["hbm_write_bytes"] == 512 * 2048 * 4
    assert "trn1" in a.bottleneck


def test_unknown_target_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown target"):
        estimate(silu_trace(128, 512), "trn9")


def test_trn2_and_trn3_are_marked_uncalibrated():
    assert hardware("trn1").calibrated and not hardware("trn2").calibrated and not hardware("trn3").calibrated
    est = estimate(silu_trace(256, 1024), "trn2")
    assert est.profile["target"] == "trn2" and "simulated trn2, uncalibrated" in est.bottleneck
    assert "uncalibrated" not in estimate(silu_trace(256, 1024), "trn1").bottleneck


def test_hardware_flops_follow_the_profiler_counting():
    prof = estimate(_matmul_kernel("float32", n_mm=32)).profile
    # fp32 matmuls count twice 2*K*M*N on trn1 (measured), no transposes here.
    assert prof["hardware_flops"] == 32 * 2 * 2 * P * P * 512
    assert prof["transpose_flops"] == 0
    traffic = prof["hbm_read_bytes"] + prof["hbm_write_bytes"]
    assert prof["mm_arithmetic_intensity"] == pytest.approx(prof["hardware_flops"] / traffic)


def test_prepare_keeps_program_order_dependencies_backwards():
    hw, params = hardware("trn1"), for_target("trn1")
    prep = prepare(_live_kernel(96, produce_by_compute=True), hw, params)
    assert all(p < i for i, ps in enumerate(prep.preds) for p in ps)


def _dependent_chain(kind: str, n: int = 8) -> tr.Trace:
    """`n` instructions of one kind, each reading the previous one's result."""
    b = TraceBuilder()
    tiles = [b.tile((P, 512), line=1 + k) for k in range(n + 1)]
    b.compute(tr.MEMSET, (), b.full(tiles[0]))
    for k in range(n):
        reads = (b.full(tiles[k]),) if kind == tr.ACT else (b.full(tiles[k]), b.full(tiles[k]))
        b.compute(kind, reads, b.full(tiles[k + 1]), func="exp" if kind == tr.ACT else "add")
    return b.trace


def test_dependent_instructions_wait_for_a_drain_on_scalar_engine_only():
    """A dependent ScalarE instruction issues a drain after its producer (PERF's 264-cycle
    dependent issue gap); a dependent VectorE instruction only pays its static overhead,
    already in its cost (ARCH1; measured: mamba v3's chains of dependent VectorE
    instructions, within 7% of trn1 at every sequence length)."""
    from fitness.simulator.perf.schedule import schedule

    hw, params = hardware("trn1"), for_target("trn1")
    for kind, drain_ns in ((tr.TT, 0.0), (tr.ACT, params.dependent_drain_cycles / hw.scalar_hz * 1e9)):
        prep = prepare(_dependent_chain(kind), hw, params)
        s = schedule(prep.prog, prep.preds, hw, params)
        chain = [i for i, op in enumerate(prep.ops) if op.kind == kind]
        gaps = [s.start[j] - s.end[i] for i, j in zip(chain, chain[1:])]
        assert gaps == pytest.approx([drain_ns] * len(gaps)), kind


def _loop_next_to_resident_tile(resident_kib: int, n: int = 4, cols: int = 4096) -> tr.Trace:
    """`n` iterations of load x, exp(x) on ScalarE, x * exp(x) on VectorE, store (three
    16 KiB tiles per iteration), next to a tile of `resident_kib` per partition that stays
    live across the loop."""
    b = TraceBuilder()
    with b.resident(resident_kib, line=1):
        x_hbm, out = b.hbm((n, P, cols), name="x"), b.hbm((n, P, cols), kind="output")
        for i in b.loop(n, line=2):
            x, e, y = (b.tile((P, cols), line=line) for line in (3, 4, 5))
            b.dma(tr.DMA_LOAD, tr.Region(x_hbm, ((i, i + 1), (0, P), (0, cols))), b.full(x), P)
            b.compute(tr.ACT, (b.full(x),), b.full(e), func="exp")
            b.compute(tr.TT, (b.full(x), b.full(e)), b.full(y), func="multiply")
            b.dma(tr.DMA_STORE, b.full(y), tr.Region(out, ((i, i + 1), (0, P), (0, cols))), P)
    return b.trace


def test_iterations_overlap_only_as_far_as_sbuf_has_room():
    """A tile can be allocated before earlier, dead ones are freed only within the room
    the program's live tiles leave (freed space reused oldest first). Next to 8 KiB, the
    next iteration's load runs ahead of this one's VectorE work; next to 120 KiB (168 of
    the 176 KiB live in every iteration, 8 KiB left, less than a tile) it waits until this
    iteration's tiles die. Measured: mamba v2's cliff on trn1 past 6144 (perf README)."""
    from fitness.simulator.perf.schedule import schedule

    hw, params = hardware("trn1"), for_target("trn1")
    waits = {}
    for resident in (8, 120):
        prep = prepare(_loop_next_to_resident_tile(resident), hw, params)
        s = schedule(prep.prog, prep.preds, hw, params)
        loads = [i for i, op in enumerate(prep.ops) if op.kind == tr.DMA_LOAD and op.loop_path]
        tts = [i for i, op in enumerate(prep.ops) if op.kind == tr.TT]
        waits[resident] = [s.start[nxt] >= s.end[tt] for tt, nxt in zip(tts, loads[1:])]
    assert not any(waits[8])
    assert all(waits[120])


def _loop_over_capacity(n: int = 4) -> tr.Trace:
    """360 resident tiles of 500 bytes per partition (too small to spill: 176 KiB in all),
    a 4 KiB tile used once at the start (the peak, 180 KiB), then `n` iterations of load,
    exp, store on 480-byte tiles: a program the overflow pass cannot bring under 176 KiB."""
    b = TraceBuilder()
    src, keep_out = b.hbm((360, P, 125), name="keep"), b.hbm((P, 125), kind="output")
    keep = [b.tile((P, 125), line=1) for _ in range(360)]
    for k, t in enumerate(keep):
        b.dma(tr.DMA_LOAD, tr.Region(src, ((k, k + 1), (0, P), (0, 125))), b.full(t), P)
    a, a_out = b.tile((P, 1024), line=2), b.hbm((P, 1024), kind="output")
    b.compute(tr.MEMSET, (), b.full(a))
    b.dma(tr.DMA_STORE, b.full(a), b.full(a_out), P)
    x_hbm, out = b.hbm((n, P, 120), name="x"), b.hbm((n, P, 120), kind="output")
    for i in b.loop(n, line=3):
        x, y = b.tile((P, 120), line=4), b.tile((P, 120), line=5)
        b.dma(tr.DMA_LOAD, tr.Region(x_hbm, ((i, i + 1), (0, P), (0, 120))), b.full(x), P)
        b.compute(tr.ACT, (b.full(x),), b.full(y), func="exp")
        b.dma(tr.DMA_STORE, b.full(y), tr.Region(out, ((i, i + 1), (0, P), (0, 120))), P)
    total = b.tile((P, 125), line=6)
    b.compute(tr.TT, tuple(b.full(t) for t in keep), b.full(total), func="add")
    b.dma(tr.DMA_STORE, b.full(total), b.full(keep_out), P)
    return b.trace


def test_a_program_left_over_capacity_keeps_the_room_its_own_peak_leaves():
    """Where the overflow pass cannot bring the live tiles under usable SBUF, the model does
    not know how neuronx-cc fitted them, only that it did: the room measured against the
    program's own peak stays, instead of none at all above usable SBUF (before, every
    iteration of this loop waited for the previous one's store; measured: lora, whose pass
    ends at 188 KiB, perf README "Validation")."""
    hw, params = hardware("trn1"), for_target("trn1")
    prep = prepare(_loop_over_capacity(), hw, params)
    assert prep.report.sbuf_peak > hw.sbuf_usable_bytes_per_partition
    loads = [i for i, op in enumerate(prep.ops) if op.kind == tr.DMA_LOAD and op.loop_path]
    stores = [i for i, op in enumerate(prep.ops) if op.kind == tr.DMA_STORE and op.loop_path]
    assert len(loads) == len(stores) == 4
    assert not any(st in prep.preds[ld] for st, ld in zip(stores, loads[1:]))


def _elementwise(engine: str, n: int = 64) -> tr.Trace:
    """n element-wise multiplications of a [128, 2048] tile on `engine`, the result stored."""
    b = TraceBuilder()
    src, out = b.hbm((P, 2048)), b.hbm((P, 2048), kind="output")
    x = b.tile((P, 2048), line=1)
    b.dma(tr.DMA_LOAD, b.full(src), b.full(x), P)
    for _ in b.loop(n, kind="sequential", line=2):
        b.compute(tr.TT, (b.full(x), b.full(x)), b.full(x), engines=(engine,), func="multiply")
    b.dma(tr.DMA_STORE, b.full(x), b.full(out), P)
    return b.trace


@pytest.mark.parametrize("target", TARGETS)
def test_element_wise_work_moved_to_gpsimd_is_not_priced_below_vector_engine(target):
    # No document prices arithmetic on GpSimdE (its `150 + N` is iota's and affine_select's),
    # so engine=gpsimd must not make an instruction cheaper than on VectorE
    vector = estimate(_elementwise(tr.VECTOR), target).latency_ms
    gpsimd = estimate(_elementwise(tr.GPSIMD_ENGINE), target).latency_ms
    assert gpsimd >= vector
