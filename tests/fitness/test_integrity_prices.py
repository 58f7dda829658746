"""Evaluation integrity, round 2: outputs must be fresh tensors the kernel wrote, coverage
counts the elements actually written, a DMA is priced at both of its ends, a performance hint
holds on the data it is used on, and no estimate beats the problem's roofline bound."""

from __future__ import annotations

import numpy as np
import pytest

from fitness.measures.roofline import lower_bound, peaks
from fitness.result import MODEL_ERROR, OK, EvalResult
from fitness.service import Evaluator, below_bound
from fitness.settings import EvalSettings
from fitness.simulator import errors, placeholders, run_kernel
from fitness.simulator.perf import estimate
from nkibench.registry import load, make_spec

import adversarial_prices as adv

SETTINGS = EvalSettings(backend="simulator", seeds=(0, 21), heldout_seeds=(90210, 31337), timeout_s=60,
                        memory_limit_mb=2048, workers=2)
SPLIT = make_spec("split_columns", "paper")        # P=128, F=1024
TRANSPOSE = make_spec("transpose2d", "small")      # P=128, X=8, Y=16
SILU = make_spec("silu", "tiny")
MATMUL = make_spec("matmul", "tiny")


@pytest.fixture(scope="module")
def evaluator(tmp_path_factory):
    with Evaluator(SETTINGS, run_dir=tmp_path_factory.mktemp("run")) as ev:
        yield ev


@pytest.mark.parametrize("spec,source,words", [
    (SPLIT, adv.INPUT_VIEWS_AP, "returned a view of an input, 'x'"),
    (SPLIT, adv.INPUT_VIEWS_SLICES, "returned a view of an input, 'x'"),
    (TRANSPOSE, adv.INPUT_VIEW_TRANSPOSED, "returned a view of an input, 'x'"),
    (SILU, adv.MUTABLE_INPUT_RETURNED, "returned an input, 'x'"),
    (SILU, adv.SCRATCH_RETURNED, "returned a scratch tensor (nl.hbm)"),
], ids=["ap_views", "slice_views", "transposed_view", "mutable_input", "scratch"])
def test_outputs_are_fresh_tensors(evaluator, spec, source, words):
    result = evaluator.evaluate(spec, source)
    assert result.status == "compile_error", (result.status, result.latency_ms, result.percent_of_peak)
    assert "emu_host_output" in result.error and words in result.error, result.error
    assert "\n" not in result.error


def test_a_stride0_destination_covers_only_the_elements_it_writes(evaluator):
    result = evaluator.evaluate(SPLIT, adv.STRIDE0_DESTINATION)
    assert result.status == "compile_error", result
    assert "of 65536 elements never written (first at index (0, 1))" in result.error, result.error


@pytest.mark.parametrize("spec,source", [(SPLIT, adv.D2D_STRIDED), (SPLIT, adv.D2D_STRIDED_LEGACY),
                                         (TRANSPOSE, adv.D2D_TRANSPOSING)],
                         ids=["strided", "strided_legacy", "transposing"])
def test_dram_to_dram_copies_are_priced_at_both_ends(evaluator, spec, source):
    """The copies read every input byte from HBM, through 4-byte descriptors: no faster than
    the baseline, which loads whole rows and splits or transposes them on chip."""
    result = evaluator.evaluate(spec, source)
    assert result.ok, result.error
    nbytes = load(spec).counts.hbm_bytes // 2
    assert result.profile["hbm_read_bytes"] == nbytes and result.profile["hbm_write_bytes"] == nbytes
    assert result.speedup < 1.0, (result.speedup, result.percent_of_peak)


def _estimate(source: str, shape: tuple[int, ...], target: str = "trn1"):
    trace = run_kernel(source, placeholders([np.zeros(shape, np.float32)]), shape_only=True).trace
    return estimate(trace, target)


@pytest.mark.parametrize("target", ["trn1", "trn2", "trn3"])
def test_a_contiguous_dram_to_dram_copy_spends_hbm_bandwidth_twice(target):
    shape = (128, 8192)
    nbytes = 128 * 8192 * 4
    direct = _estimate(adv.D2D_CONTIGUOUS, shape, target)
    staged = _estimate(adv.THROUGH_SBUF, shape, target)
    for est in (direct, staged):
        assert (est.profile["hbm_read_bytes"], est.profile["hbm_write_bytes"]) == (nbytes, nbytes)
    # one transfer that reads and writes HBM takes at least the time of both at HBM's peak,
    # as much as loading into SBUF and storing back
    assert direct.latency_ms * 1e-3 >= 2 * nbytes / peaks(target).hbm_bytes_per_s
    assert direct.latency_ms >= 0.9 * staged.latency_ms, (direct.latency_ms, staged.latency_ms)


@pytest.mark.parametrize("name", sorted(adv.matmul_hints()))
def test_a_hint_the_data_contradicts_ends_the_kernel(evaluator, name):
    source = adv.matmul_hints()[name]
    result = evaluator.evaluate(MATMUL, source)
    assert result.status == "compile_error", (result.status, result.speedup)
    flag = {"current_transpose": "is_transpose"}.get(name, "_".join(name.split("_")[1:]))
    assert "emu_false_hint" in result.error and f"is_{flag.removeprefix('is_')}=True" in result.error, result.error


def test_a_hint_the_data_satisfies_keeps_its_price():
    """A ones stationary (a partition broadcast, as the compiler emits) is a true one-zero hint."""
    source = adv.LEGACY + """
@nki.jit
def kernel(x):
    out = nl.ndarray((128, 512), dtype=x.dtype, buffer=nl.shared_hbm)
    ones = nl.ones((1, 128), dtype=x.dtype)
    row = nl.load(x[0:1, 0:512])
    hinted = nisa.nc_matmul(ones, row, is_stationary_onezero=True)
    nl.store(out, value=nl.copy(hinted))
    return out
"""
    x = np.random.default_rng(0).standard_normal((1, 512)).astype(np.float32)
    run = run_kernel(source, [x])
    np.testing.assert_allclose(run.outputs, np.broadcast_to(x, (128, 512)), rtol=1e-6)
    with pytest.raises(errors.FalseHintError, match="stationary operand holds values other than 0 and 1"):
        run_kernel(source.replace("nl.ones((1, 128)", "nl.full((1, 128), 2.0"), [x])


def test_an_estimate_below_the_roofline_bound_is_a_model_error():
    problem = load(SPLIT)
    bound = lower_bound(problem.counts, 0, "trn1")
    assert bound.latency_ms == pytest.approx(problem.counts.hbm_bytes / peaks("trn1").hbm_bytes_per_s * 1e3)
    honest = EvalResult(OK, latency_ms=bound.latency_ms * 1.01, profile={"hbm_read_bytes": 4})
    assert below_bound(problem, honest, "trn1") is honest
    cheap = EvalResult(OK, latency_ms=bound.latency_ms * 0.5, profile={"hbm_read_bytes": 4, "hbm_write_bytes": 4})
    flagged = below_bound(problem, cheap, "trn1")
    assert flagged.status == MODEL_ERROR and flagged.latency_ms == cheap.latency_ms
    assert "below" in flagged.error and "the problem's 1.05 MB of HBM traffic at trn1's peak" in flagged.error
    # the kernel's own traffic counts too
    heavy = EvalResult(OK, latency_ms=bound.latency_ms * 1.5, profile={"hbm_read_bytes": 10 * problem.counts.hbm_bytes})
    assert below_bound(problem, heavy, "trn1").status == MODEL_ERROR
