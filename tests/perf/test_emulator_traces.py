"""The model on real emulator traces: the project's silu baseline, and (slow) the 14
official NKIBench kernels against the trn1 measurements."""

from __future__ import annotations

import re
from importlib import resources

import numpy as np
import pytest

from fitness.simulator import ShapeDtype, run_kernel
from fitness.simulator.perf import estimate

SILU = resources.files("nkibench").joinpath("baselines", "silu.py").read_text()


def _silu_trace(M: int, N: int, load_n: int, compute_n: int):
    source = re.sub(r"^LOAD_N = \d+", f"LOAD_N = {load_n}", SILU, flags=re.M)
    source = re.sub(r"^COMPUTE_N = \d+", f"COMPUTE_N = {compute_n}", source, flags=re.M)
    return run_kernel(source, [ShapeDtype((M, N), np.float32)], filename="silu.py",
                      shape_only=True).trace


def test_silu_baseline_counters_and_tile_sizes():
    M, N = 512, 8192
    lat = {}
    for n in (256, 512, 1024, 2048):
        est = estimate(_silu_trace(M, N, n, min(n, 512)))
        assert est.profile["hbm_read_bytes"] == est.profile["hbm_write_bytes"] == M * N * 4
        assert est.profile["hardware_flops"] == 0
        lat[n] = est.latency_ms
    # 1 KiB loads per partition (DMA efficiency 0.42) make it DMA-bound. From 2 KiB on the
    # same compute instructions bound it (VectorE, as on trn1), so the load size changes
    # only how well the buffers per site hide each DMA's fixed latency and how long the
    # pipeline takes to fill and drain: which wide setting wins depends on the fitted fixed
    # latency and buffer count (estimated 0.170, 0.172, 0.175 ms with 1.8 us and 4 buffers;
    # 0.221, 0.200, 0.203 with 2.3 us and 3).
    wide = [lat[n] for n in (512, 1024, 2048)]
    assert lat[256] > 1.3 * max(wide)
    assert max(wide) < 1.15 * min(wide)


@pytest.fixture(scope="module")
def model_check_result(nkibench_dir, trace_cache):
    from fitness.simulator.perf.check import model_check

    return model_check(nkibench_dir / "trn1_measurements.json", nkibench_dir, trace_cache=trace_cache)


@pytest.mark.slow
def test_official_kernels_median_error_and_ranking(model_check_result):
    s = model_check_result["summary"]
    assert s["cases"] == 14
    assert s["figures"] == "leave-one-out"
    assert s["median_abs_rel_error"] <= 0.15
    assert s["spearman"] >= 0.9
    largest = max(model_check_result["cases"], key=lambda r: r["instructions"])
    assert largest["instructions"] > 80_000


@pytest.mark.slow
def test_official_kernels_max_error_and_bottlenecks(model_check_result):
    s = model_check_result["summary"]
    assert s["max_abs_rel_error"] <= 0.35
    assert s["bottleneck_agreement"] == 14


@pytest.fixture(scope="module")
def variants_result(nkibench_dir, trace_cache):
    """model-check on the measured kernel variants (../shared/trn1-variants)."""
    from fitness.simulator.perf.check import model_check

    path = nkibench_dir.parent / "trn1-variants" / "measurements.json"
    if not path.is_file():
        pytest.skip(f"the kernel variants' measurements are absent ({path})")
    return model_check(path, nkibench_dir, trace_cache=trace_cache)


def _variant_pairs(result, first: str, second: str) -> list[dict]:
    return [p for p in result["pairs"]
            if (p["first"].split("@")[0], p["second"].split("@")[0]) == (first, second)]


@pytest.mark.slow
def test_variants_rank_like_hardware(variants_result):
    """On the model calibrated without any mamba kernel (leave-family-out): the
    same-shape pairs are ranked as trn1 ranks them, v1 -> v2 at 4096 x 512 is within 15%
    of its measured speedup, and the median latency error is at most 15%."""
    s = variants_result["summary"]
    assert s["figures"] == "leave-family-out" and s["cases"] == 21 and s["pairs"] == 11
    assert s["pairwise_ranking_accuracy"] >= 0.9
    assert s["median_abs_rel_error"] <= 0.15
    (v1_v2,) = _variant_pairs(variants_result, "mamba_v1", "mamba_v2")
    assert abs(v1_v2["speedup_error"]) <= 0.15


@pytest.mark.slow
@pytest.mark.xfail(strict=True, reason="blocked on trn1 profiles of mamba v2 at 1024-7168: "
                   "v2 -> v3 at 5120, 6144 and 7168 is predicted 1.16x, 1.17x, 1.36x against 1.37x, "
                   "1.40x, 1.71x measured; v2's VectorE work matches trn1's profiles at 512 and 8192, "
                   "and no profile between says what its VectorE waits for")
def test_variants_speedups_and_max_error(variants_result):
    """Held out as above: v2 -> v3 within 15% of its measured speedup at every
    sequence length (512-8192), and no variant's latency off by more than 35%."""
    assert variants_result["summary"]["max_abs_rel_error"] <= 0.35
    for p in _variant_pairs(variants_result, "mamba_v2", "mamba_v3"):
        assert abs(p["speedup_error"]) <= 0.15, p
