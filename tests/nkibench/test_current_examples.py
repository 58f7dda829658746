"""Conformance of the current `nki` dialect: the NKI SDK's examples (../shared/nki-examples)
are judged by `python -m accelopt_evo eval` against the NumPy references of their problems
(`nkibench/examples/`), the problems' own baselines pass (also at shapes whose last tiles are
clipped slices), and the examples that exist in both dialects agree with their legacy
counterparts (../shared/trn1-variants for Mamba v1-v3, the project's legacy matmul baseline)
on the same inputs, to the problem's tolerance."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fitness.correctness.gate import l2_errors
from fitness.sandbox import policy
from fitness.sandbox.entry import select
from fitness.service import Evaluator
from fitness.settings import EvalSettings
from nkibench.examples import KERNELS, NOT_JUDGED, ExampleKernel
from nkibench.registry import BASELINES, example_names, load, make_spec

REPO = Path(__file__).resolve().parents[2]
VARIANTS = REPO.parent / "shared" / "trn1-variants"


def _jit_functions(path: Path) -> list[str]:
    """Functions of a file decorated with something named ...jit (nki.jit, nki_jit)."""
    try:
        tree = ast.parse(path.read_text())
    except SyntaxError:
        return ["<does not parse>"]
    return [n.name for n in tree.body if isinstance(n, ast.FunctionDef)
            and any(ast.unparse(d).endswith("jit") for d in n.decorator_list)]


def _relative_error(actual: np.ndarray, expected: np.ndarray) -> float:
    diff, norm, nonfinite, _ = l2_errors(np.asarray(actual), np.asarray(expected))
    assert nonfinite == 0
    return diff / norm


def test_every_example_kernel_has_a_problem_or_a_reason(nki_examples_dir):
    judged = {(k.path, k.function) for k in KERNELS}
    for path in sorted(nki_examples_dir.rglob("*.py")):
        rel = path.relative_to(nki_examples_dir).as_posix()
        for function in _jit_functions(path):
            assert (rel, function) in judged or rel in NOT_JUDGED, f"{rel}: {function} has no problem"
    assert len(judged) == len(KERNELS)
    assert all((nki_examples_dir / rel).is_file() for rel in NOT_JUDGED)


@pytest.mark.parametrize("example", KERNELS, ids=lambda k: f"{k.problem}-{k.function}")
def test_each_example_kernel_is_a_current_dialect_kernel_its_policy_accepts(example: ExampleKernel,
                                                                             nki_examples_dir):
    source = select((nki_examples_dir / example.path).read_text(), example.function)
    assert policy.review(source) == policy.Review("current", [])
    problem = load(make_spec(example.problem, example.shape))
    assert policy.review(problem.baseline_source) == policy.Review("current", [])


def _eval(example: ExampleKernel, folder: Path, tmp_path: Path) -> dict:
    """`python -m accelopt_evo eval` of one example kernel (one visible, one held-out seed)."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run(
        [sys.executable, "-m", "accelopt_evo", "eval", str(folder / example.path), "--problem", example.problem,
         "--shape", example.shape, "--kernel", example.function, "--backend", "simulator", "--json",
         "--set", "evaluation.seeds=[0]", "--set", "evaluation.heldout_seeds=1", "--set", "evaluation.workers=1"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.slow
@pytest.mark.parametrize("example", KERNELS, ids=lambda k: f"{k.problem}-{k.function}")
def test_example_kernels_pass_eval_on_the_simulator(example: ExampleKernel, nki_examples_dir, tmp_path):
    result = _eval(example, nki_examples_dir, tmp_path)
    assert result["status"] == "ok", result["error"]
    assert result["dialect"] == "current" and result["backend"] == "simulator"
    assert result["latency_ms"] > 0 and result["speedup"] > 0   # the problem's baseline passed too


# Shapes whose last tile in some dimension is partial: the baselines clip their slices there.
REMAINDER_SHAPES = [
    ("matmul_lhst", {"M": 200, "N": 700, "K": 200}),
    ("fused_mamba", {"batch": 1, "C": 192, "M": 512, "S": 2}),
    ("avgpool2d", {"C": 130, "H": 8, "W": 12, "pool": 2}),
    ("maxpool2d", {"C": 130, "H": 9, "W": 6, "pool": 3}),
    ("transpose2d", {"P": 130, "X": 3, "Y": 5}),
    ("tensor_add", {"M": 200, "N": 700}),
    ("exp", {"M": 200, "N": 1100}),
    ("split_columns", {"P": 130, "F": 7}),
]


@pytest.mark.slow
def test_every_example_problem_baseline_passes_at_its_default_shape_and_with_partial_tiles(tmp_path):
    assert sorted({name for name, _ in REMAINDER_SHAPES}) == example_names()
    specs = [make_spec(name) for name in example_names()]
    specs += [make_spec(name, "tiny", params) for name, params in REMAINDER_SHAPES]
    settings = EvalSettings(backend="simulator", seeds=(0,), heldout_seeds=(5,), timeout_s=300.0,
                            memory_limit_mb=4096, workers=2)
    with Evaluator(settings, run_dir=tmp_path) as ev:
        results = {spec.label(): ev.baseline(spec) for spec in specs}
    failed = {label: f"{r.status}: {r.error}" for label, r in results.items() if not r.ok}
    assert not failed
    assert all(r.dialect == "current" for r in results.values())


def _run(source: str, args: list, function: str = "kernel"):
    from fitness.simulator import run_kernel

    return run_kernel(source, args, kernel_name=function).outputs


@pytest.mark.slow
@pytest.mark.parametrize("version", [1, 2, 3])
def test_fused_mamba_agrees_with_its_legacy_version(version, nki_examples_dir):
    """The SDK's current-dialect Mamba vN and the trn1 variant vN (legacy, no batch dimension)
    on the same inputs (batch 1, two 512-long sequence chunks)."""
    if not (VARIANTS / f"mamba_v{version}.py").is_file():
        pytest.skip(f"the trn1 variants are absent ({VARIANTS})")
    spec = make_spec("fused_mamba", "tiny", {"M": 1024})
    problem = load(spec)
    delta, u, a, b, c = problem.make_inputs(3)
    expected = problem.reference(delta, u, a, b, c)[0]
    current = _run((nki_examples_dir / "fused_mamba/mamba_nki_kernels.py").read_text(), [delta, u, a, b, c],
                   f"mamba_v{version}")
    legacy = _run((VARIANTS / f"mamba_v{version}.py").read_text(), [delta[0], u[0], a, b[0], c[0]])
    assert np.shape(current) == expected.shape and np.shape(legacy) == expected.shape[1:]
    assert _relative_error(np.asarray(current)[0], legacy) <= problem.tolerance
    assert _relative_error(current, expected) <= problem.tolerance


MATMULS = [k for k in KERNELS if k.problem == "matmul_lhst"]


@pytest.mark.slow
@pytest.mark.parametrize("example", MATMULS, ids=lambda k: k.function)
def test_matmul_versions_agree_with_the_legacy_matmul(example: ExampleKernel, nki_examples_dir):
    """Each current-dialect matmul version (lhsT, rhs) and the project's legacy matmul baseline
    (lhs, rhs) on the same reference inputs. The legacy baseline takes whole 128-row tiles, so
    the basic version's 64 rows reach it padded with zero rows, whose results are dropped."""
    problem = load(make_spec(example.problem, example.shape))
    lhs, rhs = problem.make_inputs(4)
    current = _run((nki_examples_dir / example.path).read_text(), problem.to_kernel_inputs([lhs, rhs]), example.function)
    rows = lhs.shape[0]
    padded = np.zeros((-(-rows // 128) * 128, lhs.shape[1]), lhs.dtype)
    padded[:rows] = lhs
    legacy = np.asarray(_run((BASELINES / "matmul.py").read_text(), [padded, rhs]))[:rows]
    assert _relative_error(current, legacy) <= problem.tolerance
    assert _relative_error(current, lhs @ rhs) <= problem.tolerance
