"""The 14 built-in problems: roofline peaks, shapes, seeded inputs, and references that agree
with the official NumPy references."""

from __future__ import annotations

import numpy as np
import pytest

from fitness.measures.roofline import roofline
from nkibench.official import import_reference, read_summary
from nkibench.registry import ProblemError, builtin_names, load, make_spec

# The paper's trn1 roofline peak latencies in ms (from AccelOpt's calculation).
PAPER_PEAK_MS = {
    "rope_single_freq_apply": 0.915, "mamba": 0.819, "gqa_full": 5.787, "bmm_softmax": 4.681,
    "silu": 0.534, "adamw": 1.018, "matmul_add_rmsnorm": 1.447, "bmm": 2.515,
    "add_rmsnorm_matmul": 0.723, "matmul": 21.701, "rmsnorm_matmul": 0.723, "lora": 22.469,
    "swiglu": 3.255, "transpose_matmul": 7.731,
}

# AccelOpt's flop and byte formulas (matmul flops, vector flops, HBM bytes), restated
# independently of the problem modules so that a changed formula fails here.
PAPER_FORMULAS = {
    "mamba": lambda M, C, S: (0, M * C * S * 4 + M * C * S * 2 + M * C * S * 2, (C * M * 2 + C * S + S * M * 2 + C * M) * 4),
    "silu": lambda M, N: (0, M * N * 3, 2 * M * N * 4),
    "add_rmsnorm_matmul": lambda M, N, K: (M * N * K * 2, M * K * 6, (M * K * 2 + K * N + K + M * N) * 4),
    "matmul_add_rmsnorm": lambda M, N, K: (M * N * K * 2, M * N * 6, (M * K + N * K + M * N + N + M * N) * 4),
    "rmsnorm_matmul": lambda M, N, K: (M * N * K * 2, M * K * 4, (M * K + K * N + M * N) * 4),
    "swiglu": lambda M, N, K: (M * K * N * 6, M * N * 5, (M * K * 2 + K * N * 3) * 4),
    "matmul": lambda M, N, K: (M * N * K * 2, 0, (M * N + N * K + M * K) * 4),
    "gqa_full": lambda B, N, QH, KH, D: (B * QH * N * D * N * 4, B * QH * N * N * 5, (B * QH * N * D * 2 + B * KH * N * D * 2) * 4),
    "rope_single_freq_apply": lambda B, H, N, D: (0, B * H * N * D * 3, D * B * H * N * 3 * 4),
    "bmm": lambda B, M, N, K: (B * M * N * K * 2, 0, (B * M * N + B * N * K + B * M * K) * 4),
    "bmm_softmax": lambda B, M, N, K: (B * M * N * K * 2, B * M * N * 5, (B * M * N + B * N * K + B * M * K) * 4),
    "transpose_matmul": lambda M, N, K: (M * N * K * 2, 0, (M * N + N * K + M * K) * 4),
    "lora": lambda M, N, K, R: (M * N * K * 2 + M * K * R * 2 + M * N * R * 2, M * N, (M * K + K * N + K * R + R * N + M * N) * 4),
    "adamw": lambda M, N: (0, M * N * 7, M * N * 5 * 4),
}

NAMES = sorted(PAPER_PEAK_MS)


def test_the_fourteen_problems_are_registered():
    assert builtin_names() == NAMES


@pytest.mark.parametrize("name", NAMES)
def test_roofline_peak_equals_the_papers(name):
    problem = load(make_spec(name))
    c = problem.counts
    peak = roofline(c, "trn1").peak_latency_ms
    assert peak == pytest.approx(PAPER_PEAK_MS[name], rel=0.01)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("shape", ["paper", "small"])
def test_counts_follow_the_papers_formulas(name, shape):
    problem = load(make_spec(name, shape))
    expected = PAPER_FORMULAS[name](**problem.params)
    got = (problem.counts.flops_matmul, problem.counts.flops_vector, problem.counts.hbm_bytes)
    assert got == pytest.approx(expected)


@pytest.mark.parametrize("name", NAMES)
def test_paper_shape_is_the_official_case(name, nkibench_dir):
    official = read_summary(nkibench_dir)[name]
    assert load(make_spec(name)).params == official[0].values


@pytest.mark.parametrize("name", NAMES)
def test_inputs_are_seeded_without_global_rng(name):
    problem = load(make_spec(name, "tiny"))
    before = np.random.get_state()[1].copy()
    a, b, c = problem.make_inputs(0), problem.make_inputs(0), problem.make_inputs(21)
    assert np.array_equal(before, np.random.get_state()[1])
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert not all(np.array_equal(x, y) for x, y in zip(a, c))
    assert all(x.dtype == np.float32 for x in a)


@pytest.mark.parametrize("name", NAMES)
def test_reference_outputs_are_finite_float32(name):
    problem = load(make_spec(name, "small"))
    out = problem.reference(*problem.make_inputs(0))
    assert len(out) == 1 and out[0].dtype == np.float32 and np.isfinite(out[0]).all()


def _official_forward(nkibench_dir, name, params):
    """The official reference's forward at another shape: its module-level shape constants
    (read by some forward functions) are set to `params` on a fresh import."""
    task = read_summary(nkibench_dir)[name][0].task
    import_reference.cache_clear()
    module = import_reference(task)
    import_reference.cache_clear()  # the patched module must not serve later callers
    vars(module).update(params)
    return module.forward


def _rel_l2(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return np.linalg.norm(a - b) / np.linalg.norm(b)


@pytest.mark.parametrize("name", NAMES)
def test_reference_agrees_with_the_official_one(name, nkibench_dir):
    problem = load(make_spec(name, "small"))
    inputs = problem.make_inputs(7)
    forward = _official_forward(nkibench_dir, name, problem.params)
    official_args = list(inputs)
    if name in ("add_rmsnorm_matmul", "matmul_add_rmsnorm"):
        official_args.insert(2, 1e-5)  # the official references take eps as their third input
    expected = forward(*official_args)
    got = problem.reference(*inputs)[0]
    assert got.shape == np.shape(expected)
    assert _rel_l2(got, expected) < problem.tolerance / 10


def test_shape_by_name_and_by_parameter():
    assert make_spec("matmul", "small").param_dict == {"M": 512, "N": 1280, "K": 384}
    spec = make_spec("matmul", "small", {"N": 640})
    assert spec.param_dict == {"M": 512, "N": 640, "K": 384}
    assert load(spec).reference(*load(spec).make_inputs(0))[0].shape == (512, 640)


@pytest.mark.parametrize("name, shape, params, message", [
    ("matmul", "huge", None, "no shape 'huge'"),
    ("matmul", "small", {"Q": 3}, "no shape parameter 'Q'"),
    ("matmul", "small", {"N": 0}, "positive integer"),
    ("gqa_full", "small", {"QH": 3}, "multiple of KH"),
    ("rope_single_freq_apply", "small", {"D": 63}, "even"),
    ("nope", "paper", None, "unknown problem"),
])
def test_bad_shapes_are_clear_errors(name, shape, params, message):
    with pytest.raises(ProblemError, match=message):
        make_spec(name, shape, params)
