"""Every baseline kernel, run by the NKI emulator, against its NumPy reference: at the small
shape (fast), with each `# tune:` knob value (slow) and at the paper shape (slow). The
current-dialect (`import nki`) baselines in `nkibench/baselines/nki/` get the same checks."""

from __future__ import annotations

import pytest

from fitness.correctness.gate import check_outputs
from fitness.sandbox import policy
from fitness.simulator import placeholders, run_kernel
from nkibench.registry import NKI_BASELINES, builtin_names, load, make_spec
from operators.knobs import find_knobs, set_knobs

NAMES = builtin_names()
NKI_NAMES = [n for n in NAMES if (NKI_BASELINES / f"{n}.py").exists()]


def nki_source(name: str) -> str:
    return (NKI_BASELINES / f"{name}.py").read_text()


# Full-data runs at paper shape take 40-100 s each for these; their numerics are checked at the
# small shape (two seeds, partial tiles), and at paper shape the kernel runs shape-only: bounds,
# tile and memory limits, which are what change with the shape.
SHAPE_ONLY_AT_PAPER = {"lora", "matmul", "gqa_full"}


def check_baseline(name: str, shape: str, seeds: tuple[int, ...], source: str | None = None) -> None:
    if shape == "paper" and name in SHAPE_ONLY_AT_PAPER:
        problem = load(make_spec(name, shape))
        args = placeholders(problem.to_kernel_inputs(problem.make_inputs(seeds[0])))
        run = run_kernel(problem.baseline_source if source is None else source, args,
                         filename=f"{name}.py", shape_only=True)
        assert run.trace.instrs, name
        return
    check_baseline_at(name, make_spec(name, shape), seeds, source)


def check_baseline_at(name: str, spec, seeds: tuple[int, ...], source: str | None = None) -> None:
    problem = load(spec)
    source = problem.baseline_source if source is None else source
    for seed in seeds:
        inputs = problem.make_inputs(seed)
        expected = problem.reference(*inputs)
        run = run_kernel(source, problem.to_kernel_inputs(inputs), filename=f"{name}.py")
        outputs = problem.from_kernel_outputs(run.outputs, expected)
        failure = check_outputs(outputs, expected, problem.tolerance, f"{spec.label()} seed {seed}")
        assert failure is None, failure


@pytest.mark.parametrize("name", NAMES)
def test_baseline_at_small_shape(name):
    check_baseline(name, "small", (0, 21))


def _knob_variants():
    for name in NAMES:
        source = load(make_spec(name)).baseline_source
        for knob in find_knobs(source).values():
            for value in knob.choices:
                if value != knob.value:
                    yield pytest.param(name, knob.name, value, id=f"{name}-{knob.name}={value}")


@pytest.mark.slow
@pytest.mark.parametrize("name, knob, value", list(_knob_variants()))
def test_every_knob_value_is_correct(name, knob, value):
    source = set_knobs(load(make_spec(name)).baseline_source, {knob: value})
    check_baseline(name, "small", (0,), source)


def test_row_block_with_a_partial_column_tile():
    """matmul_add_rmsnorm writes masked PSUM evictions into a (128, N) row block; N = 768 leaves
    the last 512-column tile half outside it."""
    check_baseline_at("matmul_add_rmsnorm", make_spec("matmul_add_rmsnorm", "small", {"N": 768}), (0,))


def test_every_baseline_declares_knobs_and_passes_the_static_policy():
    for name in NAMES:
        source = load(make_spec(name)).baseline_source
        assert find_knobs(source), name
        assert policy.check(source) == [], name


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_baseline_at_paper_shape(name):
    check_baseline(name, "paper", (0,))


# ---------------------------------------------------------------- current-dialect baselines

@pytest.mark.parametrize("name", NKI_NAMES)
def test_nki_baseline_at_small_shape(name):
    check_baseline(name, "small", (0, 21), nki_source(name))


@pytest.mark.parametrize("name", NKI_NAMES)
def test_nki_baseline_declares_knobs_and_passes_the_static_policy(name):
    source = nki_source(name)
    assert find_knobs(source), name
    review = policy.review(source)
    assert review.dialect == "current" and review.violations == [], (name, review.violations)


def _nki_knob_variants():
    for name in NKI_NAMES:
        source = nki_source(name)
        for knob in find_knobs(source).values():
            for value in knob.choices:
                if value != knob.value:
                    yield pytest.param(name, knob.name, value, id=f"nki-{name}-{knob.name}={value}")


@pytest.mark.slow
@pytest.mark.parametrize("name, knob, value", list(_nki_knob_variants()))
def test_every_nki_knob_value_is_correct(name, knob, value):
    check_baseline(name, "small", (0,), set_knobs(nki_source(name), {knob: value}))


@pytest.mark.slow
@pytest.mark.parametrize("name", NKI_NAMES)
def test_nki_baseline_at_paper_shape(name):
    check_baseline(name, "paper", (0,), nki_source(name))
