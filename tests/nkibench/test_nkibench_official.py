"""Loading a folder in the official NKIBench layout: the shared release and synthetic folders."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from nkibench.official import OfficialProblem, SuiteError, official_names, official_spec, read_summary
from nkibench.registry import builtin_names, load, make_spec


def test_reads_the_official_release(nkibench_dir):
    assert sorted(official_names(nkibench_dir)) == builtin_names()
    for name in official_names(nkibench_dir):
        problem = load(make_spec(name, suite_dir=str(nkibench_dir)))
        assert isinstance(problem, OfficialProblem)
        assert problem.baseline_path.is_file() and problem.baseline_path.parent.name == "kernels"
        builtin = load(make_spec(name))
        assert problem.params == builtin.params
        assert problem.counts == builtin.counts  # from the built-in problem of the same name
        assert problem.tolerance == builtin.tolerance
    assert load(make_spec("mamba", suite_dir=str(nkibench_dir))).tolerance == 3e-5


def test_inputs_are_seeded_like_the_authors_and_the_global_rng_is_restored(tmp_path, make_suite):
    problem = load(make_spec("scale", suite_dir=str(make_suite(tmp_path))))
    np.random.seed(1234)
    state = np.random.get_state()[1].copy()
    x = problem.make_inputs(42)[0]
    assert np.array_equal(state, np.random.get_state()[1])
    np.random.seed(42)
    assert np.array_equal(x, np.random.normal(size=x.shape).astype(np.float32))
    assert not np.array_equal(x, problem.make_inputs(21)[0])


def test_official_reference_agrees_with_the_builtin_one(nkibench_dir):
    official = load(make_spec("silu", suite_dir=str(nkibench_dir)))
    builtin = load(make_spec("silu"))
    inputs = official.make_inputs(0)
    assert np.array_equal(official.reference(*inputs)[0], builtin.reference(*inputs)[0])
    kernel_inputs = official.to_kernel_inputs(inputs)
    assert kernel_inputs[0].shape == (128, 32, 7168)  # the official kernel's layout
    (back,) = official.from_kernel_outputs(kernel_inputs[0], official.reference(*inputs))
    assert np.array_equal(back, inputs[0])


def test_a_folder_without_seed_entries(tmp_path, make_suite):
    suite = make_suite(tmp_path)
    spec = make_spec("scale", suite_dir=str(suite))
    assert spec.param_dict == {"M": 4, "N": 8} and Path(spec.suite_dir).is_absolute()
    problem = load(spec)
    x = problem.make_inputs(0)
    (ref,) = problem.reference(*x)
    assert np.array_equal(ref, 2 * x[0])
    flat = problem.to_kernel_inputs(x)[0]
    assert flat.shape == (32,)
    (out,) = problem.from_kernel_outputs(2 * flat, (ref,))
    assert np.array_equal(out, ref)
    # an unknown operator has no roofline counts: percent of peak stays unknown
    assert problem.counts is None and problem.tolerance == 2e-5


def test_a_folder_with_a_seed_entry_and_a_builtin_name(tmp_path, make_suite):
    suite = make_suite(tmp_path, "silu", seed=True, values={"M": 4, "N": 8})
    problem = load(make_spec("silu", suite_dir=str(suite)))
    assert problem.counts == load(make_spec("silu", params={"M": 4, "N": 8})).counts


def test_transforms_are_optional(tmp_path, make_suite):
    bare = "import numpy as np\ndef get_inputs():\n    return [np.random.rand(3, 2)]\ndef forward(x):\n    return x + 1\n"
    problem = load(make_spec("bare", suite_dir=str(make_suite(tmp_path, "bare", bare))))
    x = problem.make_inputs(5)
    assert problem.to_kernel_inputs(x)[0] is x[0]
    (out,) = problem.from_kernel_outputs((x[0] + 1).reshape(-1), problem.reference(*x))
    assert out.shape == (3, 2)


@pytest.mark.parametrize("reference, when, message", [
    ("raise RuntimeError('broken on purpose')\n", "load", "import failed: RuntimeError: broken on purpose"),
    ("def get_inputs(:\n", "load", "import failed: SyntaxError"),
    ("import numpy as np\ndef get_inputs():\n    return []\n", "load", r"missing function\(s\) forward\(\)"),
    ("def forward(x):\n    return x\n", "load", r"missing function\(s\) get_inputs\(\)"),
    ("def get_inputs():\n    raise ValueError('no inputs')\ndef forward(x):\n    return x\n", "inputs",
     r"get_inputs\(\) raised ValueError: no inputs"),
    ("import numpy as np\ndef get_inputs():\n    return [np.ones(2)]\ndef forward(x):\n    return x.nope\n", "reference",
     r"forward\(\) raised AttributeError"),
])
def test_broken_reference_modules_are_named(tmp_path, reference, when, message, make_suite):
    suite = make_suite(tmp_path, "broken", reference)
    path = str((suite / "reference" / "broken_numpy.py").resolve())
    with pytest.raises(SuiteError, match=message) as info:
        problem = load(make_spec("broken", suite_dir=str(suite)))
        inputs = problem.make_inputs(0)
        if when == "reference":
            problem.reference(*inputs)
    assert path in str(info.value)


def test_missing_files_and_unknown_names(tmp_path, make_suite):
    with pytest.raises(SuiteError, match="summary.json"):
        official_names(tmp_path / "nowhere")
    suite = make_suite(tmp_path / "s")
    with pytest.raises(SuiteError, match="unknown problem 'matmul'.*known: scale"):
        make_spec("matmul", suite_dir=str(suite))
    with pytest.raises(SuiteError, match="no case with"):
        official_spec(suite, "scale", {"M": 5})
    with pytest.raises(SuiteError, match="no shape parameter 'Q'"):
        official_spec(suite, "scale", {"Q": 5})
    (suite / "reference" / "scale_numpy.py").unlink()
    with pytest.raises(SuiteError, match="scale_numpy.py: file not found"):
        load(make_spec("scale", suite_dir=str(suite)))


def test_malformed_summary(tmp_path):
    (tmp_path / "summary.json").write_text(json.dumps({"p": {"cases": {"0": {"values": {"M": "4"}, "impls": []}}}}))
    with pytest.raises(SuiteError, match="'values' must map parameter names to integers"):
        read_summary(tmp_path)
    (tmp_path / "summary.json").write_text("{not json")
    with pytest.raises(SuiteError, match="unreadable"):
        read_summary(tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["silu", "rope_single_freq_apply"])
def test_official_baseline_runs_through_the_loader(name, nkibench_dir):
    """The loader's transforms around an official kernel, run by the emulator, at the paper shape."""
    from fitness.correctness.gate import check_outputs
    from fitness.simulator import run_kernel

    problem = load(make_spec(name, suite_dir=str(nkibench_dir)))
    inputs = problem.make_inputs(84)
    expected = problem.reference(*inputs)
    run = run_kernel(problem.baseline_source, problem.to_kernel_inputs(inputs), filename=str(problem.baseline_path))
    outputs = problem.from_kernel_outputs(run.outputs, expected)
    assert check_outputs(outputs, expected, problem.tolerance, f"{name} seed 84") is None
