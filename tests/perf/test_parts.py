"""Unit tests of the model's pieces: timelines, DMA efficiency, costs, model-check helpers."""

from __future__ import annotations

import random

import pytest

from fitness.simulator import trace as tr
from fitness.simulator.perf import boxes, check, hardware
from fitness.simulator.perf.costs import DmaEfficiency, duration_ns
from fitness.simulator.perf.lowering import Op
from fitness.simulator.perf.params import DOCUMENTED
from fitness.simulator.perf.schedule import Timeline, union_length

HW = hardware("trn1")


def test_timeline_fill_shares_gaps_and_earliest_finds_a_window():
    tl = Timeline()
    assert tl.fill(0.0, 10.0) == 10.0
    tl.reserve(20.0, 10.0)                     # busy [0,10) and [20,30)
    assert tl.fill(5.0, 15.0) == 35.0          # 10 ns in [10,20), 5 ns after 30
    assert tl.starts == [0.0] and tl.ends == [35.0]
    tl2 = Timeline()
    tl2.reserve(0.0, 10.0)
    tl2.reserve(15.0, 10.0)
    assert tl2.earliest(0.0, 5.0) == 10.0
    assert tl2.earliest(0.0, 6.0) == 25.0
    assert union_length([tl, tl2]) == 35.0


def test_dma_efficiency_follows_the_documented_curve():
    eff = DmaEfficiency(HW.dma_efficiency)
    assert eff(32 * 1024) == pytest.approx(1.0)
    assert eff(2048) == pytest.approx(0.81)
    assert eff(1448) == pytest.approx((0.42 + 0.81) / 2, rel=0.01)   # halfway in log2
    assert eff(4) == pytest.approx(0.01 / 8)                          # per-descriptor rate
    assert eff(512) / eff(4096) < 0.25


def _op(kind: str, n: int, engines=(tr.VECTOR,), psum: int = 0, dtype="float32",
        mm: tr.MatmulInfo | None = None) -> Op:
    return Op(kind, engines, dtype, (dtype, dtype), 128, n, [], [], (), 0, mm=mm, psum_inputs=psum)


def test_documented_instruction_costs():
    p = DOCUMENTED
    # tensor_tensor [128,512] SBUF+SBUF: 2N + 64 cycles at 1.12 GHz; one PSUM input: N + 64.
    assert duration_ns(_op(tr.TT, 512), tr.VECTOR, HW, p) == pytest.approx(1088 / 1.12)
    assert duration_ns(_op(tr.TT, 512, psum=1), tr.VECTOR, HW, p) == pytest.approx(576 / 1.12)
    # Small instructions pay the minimum initiation interval.
    assert duration_ns(_op(tr.TS, 1), tr.VECTOR, HW, p) == pytest.approx(128 / 1.12)
    # activation [128,512] on ScalarE: N + 64 cycles at 1.4 GHz.
    assert duration_ns(_op(tr.ACT, 512, (tr.SCALAR,)), tr.SCALAR, HW, p) == pytest.approx(576 / 1.4)
    # 128x128x512 matmul: 512 cycles at 2.8 GHz in bf16, 4x in fp32.
    mm = tr.MatmulInfo(K=128, M=128, N=512, accumulate=False)
    bf16 = duration_ns(_op(tr.MM, 512, (tr.TENSOR,), dtype="bfloat16", mm=mm), tr.TENSOR, HW, p)
    fp32 = duration_ns(_op(tr.MM, 512, (tr.TENSOR,), mm=mm), tr.TENSOR, HW, p)
    assert bf16 == pytest.approx(512 / 2.8) and fp32 == pytest.approx(4 * bf16)
    # N_moving below 64 costs as 64.
    small = tr.MatmulInfo(K=128, M=128, N=16, accumulate=False)
    assert duration_ns(_op(tr.MM, 16, (tr.TENSOR,), dtype="bfloat16", mm=small), tr.TENSOR, HW, p) \
        == pytest.approx(64 / 2.8)


def test_trn2_vector_engine_is_wider_for_fp32():
    trn2 = hardware("trn2")
    op = _op(tr.TT, 4096)
    t1 = duration_ns(op, tr.VECTOR, HW, DOCUMENTED)
    t2 = duration_ns(op, tr.VECTOR, trn2, DOCUMENTED)
    assert t2 < t1


def test_bottleneck_agreement_rule():
    measured = {"scalar_engine_active_time_percent": 0.3, "vector_engine_active_time_percent": 0.7,
                "gpsimd_engine_active_time_percent": 0.01}
    assert check.agrees("V", measured)
    assert not check.agrees("S", measured)
    assert not check.agrees("T", measured)     # VectorE was busy 70%: it bounds the kernel
    quiet = {"scalar_engine_active_time_percent": 0.07, "vector_engine_active_time_percent": 0.0}
    assert check.agrees("DMA", quiet) and check.agrees("T", quiet)


def test_spearman_rank_correlation():
    assert check.spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert check.spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert check.spearman([1, 2, 3], [1, 1, 2]) == pytest.approx(0.866, abs=1e-3)


def _row(name: str, measured: float, predicted: float, held: bool = True) -> dict:
    counters = {k: {"measured": 1, "predicted": 1} for k in check.COUNTERS}
    counters["scalar_engine_active_time_percent"] = {"measured": 0.1, "predicted": 0.2}
    counters["vector_engine_active_time_percent"] = {"measured": 0.5, "predicted": 0.4}
    return {"name": name, "problem": name, "measured_ms": measured, "predicted_ms": predicted,
            "rel_error": predicted / measured - 1, "bottleneck": "T", "bottleneck_agrees": True,
            "held_out": held, "counters": counters, "summary": ""}


def test_summary_and_table():
    rows = [_row("a", 1.0, 1.1), _row("b", 2.0, 1.8), _row("c", 4.0, 4.0)]
    s = check.summarize(rows, "trn1", True)
    assert s["figures"] == "leave-one-out"
    assert s["median_abs_rel_error"] == pytest.approx(0.1)
    assert s["max_abs_rel_error"] == pytest.approx(0.1)
    assert s["spearman"] == pytest.approx(1.0)
    rows[0]["held_out"] = False
    assert check.summarize(rows, "trn1", True)["figures"] == "in-sample"
    table = check.format_model_check({"cases": rows, "summary": s})
    assert "leave-one-out" in table and "Spearman 1.000" in table and table.count("\n") >= 5


def test_fold_parameters_require_the_calibrated_data(nkibench_dir):
    silu = next(c for c in check.load_cases(nkibench_dir / "trn1_measurements.json")
                if c.problem == "silu")
    assert check.fold_params(silu, DOCUMENTED) is not None
    other = check.Case(silu.name, silu.problem, silu.kernel, silu.reference,
                       {**silu.measured, "latency": 1.0})
    assert check.fold_params(other, DOCUMENTED) is None      # not the data the fit used
    new = check.Case("silu_new", "silu", silu.kernel, silu.reference, {"latency": 1.0})
    assert check.fold_params(new, DOCUMENTED) is not None    # unseen: the family fold holds it out


def test_variant_points_load_with_their_problem_reference(tmp_path, nkibench_dir):
    kernel = tmp_path / "k_v1.py"
    kernel.write_text("")
    points = {"points": [
        {"kernel": "k_v1.py", "problem": "mamba", "shape": {"C": 128, "M": 512, "S": 2},
         "latency_ms": 1.5}]}
    path = tmp_path / "measurements.json"
    path.write_text(__import__("json").dumps(points))
    (case,) = check.load_cases(path, nkibench_dir)
    assert case.name == "k_v1@C128_M512_S2" and case.kernel == kernel
    assert case.measured == {"latency": 1.5} and case.shape == {"C": 128, "M": 512, "S": 2}
    assert case.reference.name.startswith("mamba_")
    args = check.kernel_args(case)
    assert [a.shape for a in args] == [(128, 512), (128, 512), (128, 2), (2, 512), (2, 512)]
    with pytest.raises(ValueError, match="NKIBench folder"):
        check.load_cases(path, tmp_path)


def test_pairs_rank_and_speedups():
    # Hardware: b 1.5x faster than a; c within 5% of b.
    rows = [dict(_row(n, m, p), problem="p", kernel=n, shape="X1") for n, m, p in
            (("a", 3.0, 3.0), ("b", 2.0, 2.4), ("c", 1.95, 2.0))]
    pairs = {(p["first"], p["second"]): p for p in check.pair_rows(rows)}
    assert pairs["a", "b"]["measured_speedup"] == pytest.approx(1.5)
    assert pairs["a", "b"]["predicted_speedup"] == pytest.approx(1.25)
    assert pairs["a", "b"]["speedup_error"] == pytest.approx(1.25 / 1.5 - 1)
    assert pairs["a", "b"]["ranked_right"]
    assert not pairs["b", "c"]["ranked_right"]          # a measured tie predicted 1.2x apart
    assert check.ranked_right(1.03, 0.97) and not check.ranked_right(1.2, 0.9)
    s = check.summarize(rows, "trn1", True, list(pairs.values()), "leave-family-out")
    assert s["pairs"] == 3 and s["pairwise_ranking_accuracy"] == pytest.approx(2 / 3)
    table = check.format_model_check({"cases": rows, "pairs": list(pairs.values()), "summary": s})
    assert "a -> b X1" in table and "ranked right 67%" in table


def test_box_map_finds_exactly_the_overlapping_boxes():
    """The interval trie answers like a scan with `overlaps`, through inserts and deletes,
    empty intervals included (a stored empty box overlaps only itself)."""
    rng = random.Random(7)

    def rand_box():
        box = []
        for _ in range(3):
            lo = rng.randrange(0, 12)
            box.append((lo, lo + rng.randrange(0, 5)))
        return tuple(box)

    bm = boxes.BoxMap()
    for step in range(600):
        box = rand_box()
        if bm.items and rng.random() < 0.3:
            del bm[rng.choice(list(bm.items))]
        else:
            bm[box] = step
        query = rand_box() if rng.random() < 0.7 else rng.choice(list(bm.items))
        want = {b for b in bm.items if boxes.overlaps(b, query)}
        got = bm.overlapping(query)
        assert len(got) == len(set(got)) and set(got) == want


def test_calibration_takes_latency_only_variants():
    """A variant point (latency only) takes part in the latency fit alone: it has no byte
    error for the hoisting budget and no engine activity for the engine-cost fit."""
    from pathlib import Path

    from fitness.simulator.perf import calibrate

    point = calibrate.KernelData(check.Case("k@M512", "p", Path("k.py"), Path("r.py"),
                                            {"latency": 1.0}, {"M": 512}))
    assert not point.has_activity and point.latency_ms == 1.0
    assert calibrate.fit_budget([point]) == DOCUMENTED.hoist_budget_fraction
    assert calibrate.fit_engines([point], DOCUMENTED, HW) == DOCUMENTED
