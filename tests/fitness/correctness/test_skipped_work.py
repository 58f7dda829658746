"""A problem cannot be passed by skipping its work: an RMSNorm that never computes the RMS, or
computes it on part of the data, is refused by the tolerance (the baseline's own error as the
yardstick) and, independently, by the input families every problem's held-out seeds draw from;
an estimate above 100% of peak is never ok; a verdict does not depend on the process."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from fitness.correctness import gate
from fitness.measures.roofline import lower_bound, roofline
from fitness.result import NOT_JUDGED, OK, EvalResult
from fitness.sandbox.entry import select
from fitness.service import Evaluator, below_bound
from fitness.settings import EvalSettings
from nkibench import families, user
from nkibench.problem import Counts, unit_roundoff
from nkibench.registry import load, make_spec

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "examples" / "rmsnorm_bf16"
# As `eval` and `run` take a kernel file: its entry function (`rmsnorm`) as `kernel`.
HONEST = select((EXAMPLE / "kernel.py").read_text(), "rmsnorm")
REDTEAM = REPO.parent / "shared" / "redteam"

# The example's sum of squares taken over part of the row (and scaled as if it were the row).
HALF_ROW = HONEST.replace("nisa.tensor_reduce(dst=sums, op=nl.add, data=squares, axis=1)",
                          "nisa.tensor_reduce(dst=sums, op=nl.add, data=squares[0:rows, 0:D // 2], axis=1)").replace(
    "scale=1.0 / D, bias=1e-6", "scale=2.0 / D, bias=1e-6")
FIRST_TILE = HONEST.replace("nisa.tensor_reduce(dst=sums, op=nl.add, data=squares, axis=1)",
                            "nisa.tensor_reduce(dst=sums, op=nl.add, data=squares[0:rows, 0:128], axis=1)").replace(
    "scale=1.0 / D, bias=1e-6", "scale=1.0 / 128, bias=1e-6")
# No RMS at all: out = x * w (the shared red team's kernel, written here from the example).
NO_RMS = HONEST.replace(
    """        nisa.scalar_tensor_tensor(dst=y, data=x_tile, op0=nl.multiply, operand0=inv_rms, op1=nl.multiply,
                                  operand1=w_all[0:rows, 0:D])""",
    """        nisa.tensor_tensor(dst=y, data1=x_tile, data2=w_all[0:rows, 0:D], op=nl.multiply)""")
SKIPPERS = {"half_row": HALF_ROW, "first_tile": FIRST_TILE, "no_rms": NO_RMS}


def _spec(root: Path, D: int):
    folder = user.store(root, "rmsnorm_bf16", (EXAMPLE / "reference.py").read_text(), HONEST, "current")
    return user.spec(folder, {"N": 256, "D": D})


def _evaluator(tmp_path: Path, **settings) -> Evaluator:
    base = dict(backend="simulator", target="trn2", seeds=(0,), heldout_seeds=(5, 6), timeout_s=120,
                memory_limit_mb=2048, workers=2)
    return Evaluator(EvalSettings(**{**base, **settings}))


def test_the_variants_differ_from_the_example():
    assert all(v != HONEST for v in SKIPPERS.values())


@pytest.mark.parametrize("D", [1024, 4096])
def test_skipping_the_rms_is_refused_and_the_example_is_ok_below_peak(tmp_path, D):
    spec = _spec(tmp_path, D)
    with _evaluator(tmp_path) as ev:
        honest = ev.evaluate(spec, HONEST)
        assert honest.ok and honest.percent_of_peak < 100, (honest.status, honest.error, honest.percent_of_peak)
        for name, source in SKIPPERS.items():
            result = ev.evaluate(spec, source)
            assert result.status == "incorrect", (name, result.status, result.percent_of_peak)


@pytest.mark.parametrize("D", [1024, 4096])
def test_the_yardstick_alone_refuses_a_skipped_rms(tmp_path, D):
    """Standard seeds only (no held-out family): the baseline's error is the yardstick, which the
    dtype formula in the row length (0.0267 at D=1024) is not."""
    spec = _spec(tmp_path, D)
    problem = load(spec)
    formula = problem.tolerance_for(problem.output_dtypes[0])
    assert formula > 0.02
    with _evaluator(tmp_path, heldout_seeds=()) as ev:
        assert ev.baseline(spec).errors == [[0.0]]    # the example rounds like the reference
        result = ev.evaluate(spec, NO_RMS)
        assert result.status == "incorrect" and "(seed 0)" in result.error
        assert f"tolerance {unit_roundoff(problem.output_dtypes[0]):.1e}" in result.error


@pytest.mark.parametrize("D", [1024, 4096])
def test_the_held_out_families_alone_refuse_a_skipped_rms(tmp_path, D):
    """With the formula's tolerance the standard seed passes; the first derived family does not."""
    spec = _spec(tmp_path, D)
    problem = load(spec)
    formula = problem.tolerance_for(problem.output_dtypes[0])
    with _evaluator(tmp_path, rel_tol=formula) as ev:
        result = ev.evaluate(spec, NO_RMS)
    assert result.status == "incorrect" and "held-out seed 1 (input family 'row_scales')" in result.error, result.error


@pytest.mark.skipif(not (REDTEAM / "c1_rmsnorm_skip_norm.py").is_file(), reason="../shared/redteam is absent")
def test_the_shared_red_team_rmsnorm_is_refused(tmp_path):
    spec = _spec(tmp_path, 4096)
    with _evaluator(tmp_path) as ev:
        result = ev.evaluate(spec, select((REDTEAM / "c1_rmsnorm_skip_norm.py").read_text(), "rmsnorm"))
    assert result.status == "incorrect", (result.status, result.percent_of_peak)


def test_honest_knob_variants_stay_ok(tmp_path):
    spec = _spec(tmp_path, 1024)
    with _evaluator(tmp_path) as ev:
        for rows in (32, 128):
            for on_vector in (0, 1):
                source = HONEST.replace("ROWS = 64", f"ROWS = {rows}").replace("SUMS_ON_VECTOR = 1",
                                                                              f"SUMS_ON_VECTOR = {on_vector}")
                result = ev.evaluate(spec, source)
                assert result.ok, (rows, on_vector, result.error)


# -- the yardstick rule ------------------------------------------------------------------------

def test_the_yardstick_tightens_within_the_problems_own_tolerance():
    loosest, floor = 0.0267, 2 ** -8
    assert gate.yardstick_tolerance(loosest, floor, None) == loosest
    assert gate.yardstick_tolerance(loosest, floor, 0.0) == floor
    assert gate.yardstick_tolerance(loosest, floor, 0.003) == pytest.approx(0.006)
    assert gate.yardstick_tolerance(loosest, floor, 0.1) == loosest          # never looser
    assert gate.yardstick_tolerance(loosest, floor, float("inf")) == loosest
    # fp32 problems keep their own tolerance: the floor is it
    silu = load(make_spec("silu", "tiny"))
    f32 = np.dtype(np.float32)
    assert silu.tolerance_floor(f32) == silu.tolerance_for(f32) == silu.tolerance


def test_judge_outputs_reports_every_outputs_error():
    ref = np.ones(8, np.float32)
    failure, errors = gate.judge_outputs([ref * 1.001, ref], [ref, ref], [1e-2, 1e-2], "seed 0")
    assert failure is None and errors[0] == pytest.approx(1e-3, rel=1e-3) and errors[1] == 0.0
    failure, _ = gate.judge_outputs([ref * 1.001], [ref], [1e-4], "seed 0")
    assert "exceeds the tolerance 1.0e-04" in failure


# -- families for every problem ----------------------------------------------------------------

def test_every_problem_draws_derived_families_after_its_own():
    silu = load(make_spec("silu", "tiny"))
    names = silu.family_names()
    assert names[:3] == ("standard", "large", "edges")
    assert set(families.DERIVED_NAMES) <= set(names)
    assert load(make_spec("mamba", "small")).family_names()[-1:] == ("sparse_tiles",)


def test_derived_families_change_statistics_and_keep_types_and_signs():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((256, 512)).astype(np.float32)
    v = np.abs(rng.standard_normal((256, 512))).astype(np.float32)        # non-negative: stays so
    idx = rng.integers(0, 10, (256,)).astype(np.int32)
    w = (1 + 0.1 * rng.standard_normal(512)).astype(np.float32)
    for fam in families.DERIVED:
        out = families.apply(fam, 3, [x, v, idx, w, 1e-6])
        assert [o.dtype for o in out[:4]] == [x.dtype, v.dtype, idx.dtype, w.dtype]
        assert (out[1] >= 0).all(), fam.name
        np.testing.assert_array_equal(out[2], idx)
        assert out[4] == 1e-6
        assert not np.array_equal(out[0], x), fam.name
    rms = np.sqrt((families.apply(families.DERIVED[0], 3, [x])[0] ** 2).mean(axis=1))
    assert rms.max() / rms.min() > 100      # rows no longer share one RMS
    last = families.apply(families.DERIVED[1], 3, [x])[0]
    assert np.abs(last[-1]).mean() > 10 * np.abs(x[-1]).mean()   # the last row is an outlier


def test_derived_families_respect_a_narrow_dtypes_range():
    import ml_dtypes

    x = np.random.default_rng(1).standard_normal((128, 256)).astype(np.float16)
    for fam in families.DERIVED:
        out = families.apply(fam, 5, [x])[0].astype(np.float64)
        assert np.isfinite(out ** 2).all() and np.abs(out).max() ** 2 < float(np.finfo(np.float16).max), fam.name
    y = np.random.default_rng(1).standard_normal((128, 256)).astype(ml_dtypes.float8_e4m3fn)
    for fam in families.DERIVED:
        assert np.isfinite(families.apply(fam, 5, [y])[0].astype(np.float64)).all()


REFERENCE = '''
import numpy as np

N = 128
D = 256


def get_inputs():
    return [np.random.randn(N, D).astype(np.float32)]


def forward(x):
    return x * 2
'''


def _user(tmp_path, text):
    folder = user.store(tmp_path, "twice", text, "", "current")
    return user.UserProblem.load(user.spec(folder))


def test_a_reference_declares_families_and_picks_derived_ones(tmp_path):
    text = REFERENCE + '''
DERIVED_FAMILIES = ("sparse_tiles",)


def input_families():
    return {"negated": lambda rng, xs: [-x for x in xs]}
'''
    problem = _user(tmp_path, text)
    assert problem.family_names() == ("standard", "negated", "sparse_tiles")
    np.testing.assert_array_equal(problem.inputs(4, "negated")[0], -problem.inputs(4)[0])
    assert _user(tmp_path, REFERENCE).family_names() == ("standard", *families.DERIVED_NAMES)


@pytest.mark.parametrize("extra, message", [
    ("DERIVED_FAMILIES = ('bogus',)", "DERIVED_FAMILIES must list some of"),
    ("DERIVED_FAMILIES = 'sparse_tiles'", "DERIVED_FAMILIES must list some of"),
    ("def input_families():\n    return [1]", "returned list, expected a dict"),
    ("def input_families():\n    return {'standard': abs}", "'standard' cannot name a family"),
    ("def input_families():\n    return {'x': 3}", "family 'x' is not a function"),
    ("def input_families():\n    raise KeyError('k')", "input_families() raised KeyError"),
])
def test_bad_family_declarations_say_what_and_where(tmp_path, extra, message):
    with pytest.raises(user.UserProblemError, match="reference module .*reference.py") as info:
        _user(tmp_path, REFERENCE + "\n" + extra + "\n")
    assert message in str(info.value)


def test_a_derived_family_outside_the_references_domain_is_named(tmp_path):
    from fitness.references import ReferenceError, ReferenceStore

    text = REFERENCE.replace("return x * 2", "return np.exp(x * 100)")
    folder = user.store(tmp_path, "exploding", text, "", "current")
    store = ReferenceStore(tmp_path / "refs")
    with np.errstate(over="ignore"):
        with pytest.raises(ReferenceError, match="derived input family 'row_scales' .* DERIVED_FAMILIES"):
            store.ensure(user.spec(folder), [(1, "row_scales")])


# -- the backstop ------------------------------------------------------------------------------

def test_no_result_above_100_percent_of_peak_is_selectable():
    problem = load(make_spec("silu", "tiny"))
    c = problem.counts
    vector_only = Counts(0.0, c.flops_vector * 100, 1.0)     # element-wise work sets the bound
    problem_vec = SimpleNamespace(counts=vector_only)   # below_bound reads a problem's counts alone

    bound = lower_bound(vector_only, 0, "trn1")
    assert "element-wise work" in bound.why
    assert bound.latency_ms == pytest.approx(roofline(vector_only, "trn1").peak_latency_ms)
    for status in (OK, NOT_JUDGED):
        fast = EvalResult(status, latency_ms=bound.latency_ms * 0.9, speedup=3.0, percent_of_peak=111.0)
        flagged = below_bound(problem_vec, fast, "trn1")
        assert flagged.status == "model_error" and flagged.speedup is None and "below" in flagged.error
        assert below_bound(problem_vec, fast, "trn1", backend="trainium").error.startswith("the measured latency")
    slow = EvalResult(OK, latency_ms=bound.latency_ms * 1.01)
    assert below_bound(problem_vec, slow, "trn1") is slow


def test_a_user_problems_element_wise_term_counts_fused_passes(tmp_path):
    problem = _user(tmp_path, REFERENCE)
    assert problem.counts.vector_ops_per_pass == user.FUSED_OPS


# -- determinism -------------------------------------------------------------------------------

@pytest.mark.skipif(not (REDTEAM / "a1_process_random_path.py").is_file(), reason="../shared/redteam is absent")
def test_a_kernel_branching_on_an_address_gets_one_verdict(tmp_path):
    source = (REDTEAM / "a1_process_random_path.py").read_text()
    verdicts = set()
    for _ in range(4):   # fresh evaluators: fresh kernel processes, no shared cache
        with Evaluator(EvalSettings(backend="simulator", seeds=(0,), timeout_s=60, workers=1)) as ev:
            result = ev.evaluate(make_spec("silu", "small"), source)
        verdicts.add((result.status, result.error))
    assert len(verdicts) == 1 and next(iter(verdicts))[0] == "rejected"


@pytest.mark.parametrize("call", ["id(nl.exp)", "hash('a')", "repr(nl.exp)", "ascii(nl.exp)", "format(nl.exp)"])
def test_process_dependent_builtins_are_refused(call):
    from fitness.sandbox import policy

    source = f"import neuronxcc.nki.language as nl\n\ndef kernel(x):\n    k = {call}\n    return x\n"
    assert any("is not allowed in a kernel" in v.what for v in policy.check(source)), call


def test_a_full_judgement_that_traces_otherwise_than_its_latency_stage_is_refused(tmp_path):
    """The cascade times a kernel in one process and judges it in another: the two traces must
    agree (here the latency stage's record says another latency, as another process's would)."""
    from fitness.sandbox.worker import LATENCY

    import eval_kernels

    spec = make_spec("silu", "tiny")
    with Evaluator(EvalSettings(backend="simulator", seeds=(0,), timeout_s=60, workers=1), run_dir=tmp_path) as ev:
        timed = ev.latencies(spec, [eval_kernels.SILU])[0]
        assert timed.status == NOT_JUDGED
        key = ev._key(spec, eval_kernels.SILU, LATENCY)
        ev._cache.put(key, EvalResult(NOT_JUDGED, latency_ms=timed.latency_ms * 0.5, profile=timed.profile))
        result = ev.evaluate(spec, eval_kernels.SILU)
    assert result.status == "compile_error" and "traced different instruction streams" in result.error


def test_two_layouts_of_one_kernel_have_their_own_cache_entries(tmp_path):
    from fitness.correctness.normalize import kernel_id

    import eval_kernels

    spec = make_spec("silu", "tiny")
    other = eval_kernels.SILU.replace("\n\n", "\n\n# a comment that moves every line below it\n\n", 1)
    assert kernel_id(other) == kernel_id(eval_kernels.SILU)
    with Evaluator(EvalSettings(backend="simulator", seeds=(0,), timeout_s=60, workers=1), run_dir=tmp_path) as ev:
        assert ev._key(spec, other) != ev._key(spec, eval_kernels.SILU)
        first = ev.evaluate(spec, eval_kernels.SILU)
        second = ev.evaluate(spec, other)
    assert not second.cached and first.ok and second.ok
    with Evaluator(EvalSettings(backend="simulator", seeds=(0,), timeout_s=60, workers=1)) as fresh:
        assert fresh.evaluate(spec, other).latency_ms == second.latency_ms
