"""Evaluation integrity: the adversarial corpus. A kernel is worth only what its own traced
instructions compute, on every input family the problem's math admits; hostile sources and
outputs end in a status, never in a crash of the evaluator."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fitness.sandbox.worker import save_outputs, stream_divergence
from fitness.service import Evaluator
from fitness.settings import EvalSettings
from fitness.simulator.trace import Instr, Trace
from nkibench.registry import make_spec

import adversarial_kernels as adv
import eval_kernels as kernels

SPEC = make_spec("silu", "tiny")
# two held-out seeds: silu's two families ("large", "edges")
SETTINGS = EvalSettings(backend="simulator", seeds=(0, 21), heldout_seeds=(90210, 31337), timeout_s=20,
                        memory_limit_mb=2048, workers=2)


@pytest.fixture(scope="module")
def evaluator(tmp_path_factory):
    with Evaluator(SETTINGS, run_dir=tmp_path_factory.mktemp("run")) as ev:
        yield ev


@pytest.mark.parametrize("source", [adv.SIMULATE_KERNEL, adv.BAREMETAL, adv.BENCHMARK, adv.PROFILE],
                         ids=["simulate_kernel", "baremetal", "benchmark", "profile"])
def test_launching_a_kernel_from_a_kernel_is_refused(evaluator, source):
    result = evaluator.evaluate(SPEC, source)
    assert result.status == "compile_error", (result.status, result.latency_ms)
    assert "emu_nested_launch" in result.error and "cannot launch another kernel" in result.error


def test_an_inlined_helper_kernel_costs_its_work(evaluator):
    honest = evaluator.evaluate(SPEC, kernels.SILU)
    inlined = evaluator.evaluate(SPEC, adv.INLINE_HELPER)
    assert honest.ok and inlined.ok, inlined.error
    assert inlined.latency_ms == pytest.approx(honest.latency_ms, rel=0.02)


def test_a_kernel_right_only_on_the_standard_distribution_is_incorrect(evaluator):
    result = evaluator.evaluate(SPEC, adv.ZERO_ABOVE_EIGHT)
    assert result.status == "incorrect"
    assert "held-out seed 1 (input family 'large')" in result.error


@pytest.mark.parametrize("source", [adv.LOOP_WRITES_CLEARED, adv.ARANGE_CACHE], ids=["loop_writes", "arange_cache"])
def test_emulator_internals_are_out_of_reach(evaluator, source):
    result = evaluator.evaluate(SPEC, source)
    assert result.status == "compile_error" and "has no attribute" in result.error, result


def test_a_source_nested_too_deeply_costs_only_itself(evaluator):
    results = evaluator.evaluate_many(SPEC, [adv.DEEP_EXPRESSION, kernels.SILU])
    assert results[0].status == "rejected" and "nested too deeply" in results[0].error
    assert results[1].ok


def test_evaluate_many_survives_a_source_that_cannot_be_keyed(evaluator, monkeypatch):
    original = evaluator._key

    def fragile(spec, source, *stage):
        if "BOOM" in source:
            raise RecursionError("maximum recursion depth exceeded")
        return original(spec, source, *stage)

    monkeypatch.setattr(evaluator, "_key", fragile)
    results = evaluator.evaluate_many(SPEC, [kernels.SILU + "\n# BOOM\n", kernels.SILU])
    assert results[0].status == "compile_error" and "cannot be processed" in results[0].error
    assert results[1].ok


@pytest.mark.parametrize("source,words", [(adv.SIX_OUTPUTS, "returned 6 output(s), the reference has 1"),
                                          (adv.OVERSIZED_OUTPUT, "output 0 has 524288 elements (shape [1024, 512]), the reference's has")],
                         ids=["six_outputs", "oversized"])
def test_outputs_unlike_the_reference_are_refused(evaluator, source, words):
    result = evaluator.evaluate(SPEC, source)
    assert result.status == "incorrect" and words in result.error, result


def test_outputs_are_checked_before_anything_is_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    expected = [{"shape": [128, 512], "dtype": "<f4"}]
    big = np.zeros((1024, 512), np.float32)
    for raw in [(big,), tuple(np.zeros((128, 512), np.float32) for _ in range(6)),
                np.zeros((128, 512), np.float64)]:
        with pytest.raises(ValueError):
            save_outputs(raw, 0, expected)
    with pytest.raises(TypeError, match="not a numeric array"):
        save_outputs([1.0], 0, expected)
    assert list(tmp_path.iterdir()) == []
    files, single = save_outputs(np.ones((512, 128), np.float32), 0, expected)   # a reshape is fine
    assert single and files == ["case0-out0.npy"]


def test_scalar_arguments_reach_the_kernel_as_the_reference_gives_them(tmp_path):
    """An official-layout reference passing `eps = 1e-5` as a Python float (as two NKIBench
    problems do): the kernel must receive a float, not a float64 array."""
    suite = tmp_path / "suite"
    (suite / "reference").mkdir(parents=True)
    (suite / "kernels").mkdir()
    (suite / "reference" / "scale_eps.py").write_text('''import numpy as np

def get_inputs():
    return [np.random.normal(size=(128, 64)).astype(np.float32), 1e-5, np.float32(2.0)]

def forward(x, eps, k):
    return (x * k + eps).astype(np.float32)
''')
    (suite / "kernels" / "scale_eps.py").write_text(kernels.HEADER + '''
@nki.jit
def kernel(x, eps, k):
    assert isinstance(eps, float) and isinstance(k, np.float32)
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.add(nl.multiply(nl.load(x), float(k)), eps))
    return out
''')
    (suite / "summary.json").write_text(json.dumps({"scale_eps": {"cases": {"0": {
        "values": {"M": 128}, "impls": [{"task": "reference/scale_eps.py", "kernel": "kernels/scale_eps.py"}]}}}}))
    spec = make_spec("scale_eps", suite_dir=str(suite))
    settings = EvalSettings(backend="simulator", seeds=(0,), timeout_s=20, memory_limit_mb=2048, workers=1)
    with Evaluator(settings, run_dir=tmp_path / "run") as ev:
        result = ev.evaluate(spec, (suite / "kernels" / "scale_eps.py").read_text())
    assert result.ok, result.error
    assert Path(tmp_path / "run").is_dir()


def _stream(*ops: tuple[str, int]) -> Trace:
    return Trace(instrs=[Instr(i, "TS", op, ("V",), "float32", ("float32",), 128, 512, (), (), (), line)
                         for i, (op, line) in enumerate(ops)])


def test_a_later_seed_whose_instruction_stream_differs_is_refused():
    """The latency is measured on the first seed's trace: it stands for every seed only if
    no seed's inputs change what the kernel emits."""
    first = _stream(("nl.load", 3), ("nisa.tensor_scalar", 4))
    assert stream_divergence(first, _stream(("nl.load", 3), ("nisa.tensor_scalar", 4)), "seed 21") == ""
    assert stream_divergence(None, None, "seed 21") == ""   # hardware backends have no trace
    message = stream_divergence(first, _stream(("nl.load", 3), ("nisa.activation", 5)), "held-out seed 1")
    assert message.startswith("held-out seed 1: the kernel's instruction stream differs from the first seed's "
                              "(instruction 1: nisa.tensor_scalar at line 4 against nisa.activation at line 5)")
    shorter = stream_divergence(first, _stream(("nl.load", 3)), "seed 42")
    assert "(2 instructions against 1)" in shorter
    # on the simulator every seed is held to the shape-only trace the latency is measured on
    traced = stream_divergence(first, _stream(("nl.load", 3), ("nisa.activation", 5)), "seed 0", shape_only=True)
    assert traced.startswith("seed 0: the kernel's instruction stream differs from the shape-only trace's")
