"""The evaluation service end to end on the simulator: adversarial kernels, the gate,
speedups, the cache and the pool (silu at its tiny shape, so that each evaluation is short)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest

from fitness import references, service as service_mod
from fitness.correctness.normalize import kernel_id
from fitness.sandbox import process
from fitness.service import Evaluator
from fitness.settings import EvalSettings
from nkibench.registry import make_spec

import eval_kernels as kernels

SPEC = make_spec("silu", "tiny")
TIMEOUT_S = 4.0
SETTINGS = EvalSettings(backend="simulator", seeds=(0, 21), heldout_seeds=(90210,), timeout_s=TIMEOUT_S,
                        memory_limit_mb=2048, workers=2)


@pytest.fixture(scope="module")
def evaluator(tmp_path_factory):
    with Evaluator(SETTINGS, run_dir=tmp_path_factory.mktemp("run")) as ev:
        yield ev


def _worker_environ_while_running(ev: Evaluator, seen: list[bytes], stop: threading.Event) -> None:
    """Reads /proc/PID/environ of the live kernel processes."""
    while not stop.is_set():
        for pid in ev._processes.pids():
            try:
                seen.append(Path(f"/proc/{pid}/environ").read_bytes())
            except OSError:
                pass
        time.sleep(0.05)


def test_baseline_is_ok_with_speedup_one_and_percent_of_peak(evaluator):
    base = evaluator.baseline(SPEC)
    assert base.ok, base.error
    assert base.speedup == 1.0 and base.latency_ms > 0 and 0 < base.percent_of_peak < 100
    assert base.backend == "simulator" and base.target == "trn1" and base.problem == "silu[M=128,N=512]"
    assert base.kernel_id == kernel_id(base_source()) and base.profile["estimate"] == "simulated"


def base_source() -> str:
    from nkibench.registry import load

    return load(SPEC).baseline_source


def test_correct_kernel_is_ok_and_deterministic(evaluator, tmp_path):
    first = evaluator.evaluate(SPEC, kernels.SILU)
    assert first.ok, first.error
    assert first.speedup == pytest.approx(evaluator.baseline(SPEC).latency_ms / first.latency_ms)
    with Evaluator(SETTINGS, run_dir=tmp_path) as fresh:      # no shared cache: evaluated again
        again = fresh.evaluate(SPEC, kernels.SILU)
    assert not again.cached and again.latency_ms == first.latency_ms and again.profile == first.profile


def test_infinite_loop_times_out_and_the_worker_never_sees_the_api_key(evaluator, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-secret-0123456789")
    seen: list[bytes] = []
    stop = threading.Event()
    spy = threading.Thread(target=_worker_environ_while_running, args=(evaluator, seen, stop))
    spy.start()
    t0 = time.monotonic()
    try:
        result = evaluator.evaluate(SPEC, kernels.INFINITE_LOOP)
    finally:
        stop.set()
        spy.join()
    assert result.status == "timeout" and f"{TIMEOUT_S:g} s" in result.error
    assert time.monotonic() - t0 < TIMEOUT_S + 5
    assert seen, "the kernel process was never observed"
    assert all(b"sk-test-secret" not in env and b"OPENAI_API_KEY" not in env for env in seen)
    assert len(evaluator._processes) == 0


def test_huge_host_allocation_is_memory_exceeded_fast(evaluator):
    t0 = time.monotonic()
    result = evaluator.evaluate(SPEC, kernels.HUGE_ALLOCATION)
    assert result.status == "memory_exceeded" and "200. GiB" in result.error
    assert time.monotonic() - t0 < TIMEOUT_S


@pytest.mark.parametrize("name, words", [
    ("READ_API_KEY", "import of module 'posix'"),
    ("READ_ENVIRON_FILE", "'open' is not allowed"),
    ("DUNDER_ESCAPE", "special attribute '__class__'"),
    ("IMPORT_GC", "import of module 'gc'"),
    ("WRITE_FILE", "'open' is not allowed"),
    ("BUILTINS_IMPORT", "'__builtins__' is not allowed"),
    ("NUMPY_FILE_READ", "numpy.load"),
])
def test_policy_rejects_with_the_offending_line(evaluator, name, words):
    result = evaluator.evaluate(SPEC, getattr(kernels, name))
    assert result.status == "rejected" and words in result.error
    assert result.error.startswith("policy: line ")
    assert result.seconds < 0.5


def test_constant_output_is_incorrect_naming_output_and_seed(evaluator):
    result = evaluator.evaluate(SPEC, kernels.CONSTANT_OUTPUT)
    assert result.status == "incorrect"
    assert result.error.startswith("output 0 (seed 0): L2 relative error") and "tolerance 2.0e-05" in result.error


def test_host_numpy_on_inputs_is_an_error(evaluator):
    result = evaluator.evaluate(SPEC, kernels.HOST_NUMPY)
    assert result.status == "compile_error" and result.error.startswith("kernel.py:")


def test_compile_errors_carry_the_kernel_line(evaluator):
    syntax = evaluator.evaluate(SPEC, kernels.SYNTAX_ERROR)
    assert syntax.status == "compile_error" and syntax.error.startswith("kernel.py:7: SyntaxError")
    rule = evaluator.evaluate(SPEC, kernels.NKI_RULE_BROKEN)
    assert rule.status == "compile_error" and rule.error.startswith("kernel.py:10: err_num_partition_exceed")


def test_precision_downgrade_is_read_from_the_trace_whether_the_source_spells_it_or_hides_it(evaluator):
    visible = evaluator.evaluate(SPEC, kernels.VISIBLE_BF16)
    assert visible.status == "incorrect" and visible.error.startswith("precision downgrade: an unnamed sbuf tensor "
                                                                      "of type bfloat16 at line 16 is narrower than "
                                                                      "float32")
    hidden = evaluator.evaluate(SPEC, kernels.HIDDEN_BF16)
    assert hidden.status == "incorrect" and "precision downgrade" in hidden.error and "bfloat16" in hidden.error


def test_run_goes_on_after_failures(evaluator):
    assert evaluator.evaluate(SPEC, kernels.SILU).ok


def test_held_out_seeds_are_labelled_by_position_only(evaluator):
    labels = [c.label for c in evaluator._cases(SPEC)]
    assert labels == ["seed 0", "seed 21", "held-out seed 1 (input family 'large')"]
    assert not any("90210" in label for label in labels)


def test_cache_hit_is_fast_marked_and_survives_a_new_evaluator(evaluator, tmp_path):
    fresh = evaluator.evaluate(SPEC, kernels.CONSTANT_OUTPUT + "\n# a comment changes nothing\n")
    assert fresh.cached and fresh.seconds < 0.5 and fresh.status == "incorrect"
    with Evaluator(SETTINGS, run_dir=evaluator.run_dir) as other:
        t0 = time.monotonic()
        hit = other.evaluate(SPEC, kernels.SILU)
        assert hit.cached and time.monotonic() - t0 < 0.5 and hit.ok


def test_shared_cache_folder_serves_another_run(tmp_path):
    shared = tmp_path / "shared"
    settings = EvalSettings(**{**SETTINGS.__dict__, "cache_dir": str(shared)})
    with Evaluator(settings, run_dir=tmp_path / "run1") as ev:
        assert not ev.evaluate(SPEC, kernels.IMPORT_GC).cached
    assert list((shared / "evaluations").rglob("*.json"))
    with Evaluator(settings, run_dir=tmp_path / "run2") as ev:
        assert ev.evaluate(SPEC, kernels.IMPORT_GC).cached


def test_reference_data_is_kept_in_the_cache_folder_and_serves_the_next_evaluator(tmp_path, monkeypatch):
    with Evaluator(SETTINGS, run_dir=tmp_path / "run") as ev:
        assert ev.evaluate(SPEC, kernels.SILU).ok
    root = service_mod.reference_root(SETTINGS, tmp_path / "run")
    assert root is not None and root.parent == tmp_path / "run" / "cache" / "references"
    # a folder per key (fitness.seal), a folder per problem: two seeds and one held-out, sealed
    assert len(list(root.glob("*/*/seed-*/meta.json"))) == len(list(root.glob("*/*/seed-*/seal.json"))) == 3
    monkeypatch.setattr(references.subprocess, "run", lambda *a, **k: pytest.fail("references recomputed"))
    with Evaluator(SETTINGS, run_dir=tmp_path / "run") as ev:
        assert ev.evaluate(SPEC, kernels.SILU.replace("nl.add(e, 1.0)", "nl.add(e, 1.0 + 0.0)")).ok


def test_reference_data_goes_to_the_shared_cache_folder_when_set(tmp_path):
    settings = EvalSettings(**{**SETTINGS.__dict__, "cache_dir": str(tmp_path / "shared")})
    root = service_mod.reference_root(settings, tmp_path / "run")
    assert root is not None and root.parent == tmp_path / "shared" / "references"
    assert service_mod.reference_root(SETTINGS, None) is None


def test_evaluate_many_keeps_order_and_runs_duplicates_once(evaluator, monkeypatch):
    calls: list[str] = []
    real_run = process.run

    def counting_run(module, request, *args, **kwargs):
        if request["cases"][0]["label"] == "seed 0":   # not the later seeds' process of a split judgement
            calls.append(request["source"])
        return real_run(module, request, *args, **kwargs)

    monkeypatch.setattr(service_mod.process, "run", counting_run)
    variant = kernels.SILU.replace("nl.multiply(xt, r)", "nl.multiply(r, xt)")
    sources = [variant, kernels.IMPORT_GC, variant + "\n\n# same kernel\n", kernels.CONSTANT_OUTPUT]
    results = evaluator.evaluate_many(SPEC, sources, progress="test")
    assert [r.status for r in results] == ["ok", "rejected", "ok", "incorrect"]
    assert results[0].kernel_id == results[2].kernel_id and results[0].latency_ms == results[2].latency_ms
    assert calls == [variant]            # the rejected and the cached ones never reach a process


def test_submit_gives_the_result_evaluate_gives(evaluator):
    variant = kernels.SILU.replace("nl.multiply(xt, r)", "nl.multiply(r, xt)") + "\n\nSUBMITTED = True\n"
    futures = [evaluator.submit(SPEC, src) for src in (variant, kernels.CONSTANT_OUTPUT, "def kernel(:")]
    seen: set[str] = set()
    while not all(f.done() for f in futures):
        seen.update(evaluator.in_flight())
        time.sleep(0.01)
    assert any(label.startswith(kernel_id(variant)[:8] + " on slot ") for label in seen), seen
    assert evaluator.in_flight() == []
    submitted = [f.result(timeout=60) for f in futures]
    direct = evaluator.evaluate_many(SPEC, [variant, kernels.CONSTANT_OUTPUT, "def kernel(:"])
    assert [r.status for r in submitted] == ["ok", "incorrect", "compile_error"]
    for a, b in zip(submitted, direct):
        assert (a.status, a.error, a.latency_ms, a.speedup, a.percent_of_peak) == \
               (b.status, b.error, b.latency_ms, b.speedup, b.percent_of_peak)
    assert submitted[0].speedup and submitted[0].speedup > 0


def test_crashed_worker_gives_crashed_and_the_pool_goes_on(evaluator, monkeypatch):
    real_run = process.run

    def crashing_run(module, request, *args, **kwargs):
        if "CRASH ME" in request["source"]:
            return process.Outcome(returncode=-11, stderr="Fatal Python error: Segmentation fault\n")
        return real_run(module, request, *args, **kwargs)

    monkeypatch.setattr(service_mod.process, "run", crashing_run)
    crash = kernels.SILU + "\n# CRASH ME\nunused = 1\n"
    other = kernels.SILU.replace("d = nl.add(e, 1.0)", "den = nl.add(e, 1.0)")
    other = other.replace("reciprocal(d)", "reciprocal(den)")
    results = evaluator.evaluate_many(SPEC, [crash, other])
    assert results[0].status == "crashed" and "SIGSEGV" in results[0].error and "Segmentation" in results[0].error
    assert results[1].ok, results[1].error
    assert not evaluator._cache.get(evaluator._key(SPEC, crash))   # crashes are not cached


def test_backend_choice_says_why():
    with Evaluator(EvalSettings(backend="auto", workers=1)) as ev:
        name, reason = ev.backend_choice
    assert name == "simulator" and reason.startswith("auto: ")


def test_closing_removes_temporary_reference_data():
    ev = Evaluator(EvalSettings(backend="simulator", seeds=(0,), workers=1))
    scratch = ev._tmp
    assert scratch is not None and scratch.is_dir()
    ev.close()
    assert not scratch.exists()
    with pytest.raises(RuntimeError):
        ev.evaluate(SPEC, kernels.SILU)


def test_no_kernel_folders_are_left_behind(evaluator):
    evaluator.evaluate(SPEC, kernels.SILU.replace("nl.add(e, 1.0)", "nl.add(e, 1.0 + 0.0)"))
    root = service_mod._work_root() or tempfile.gettempdir()
    assert not list(Path(root).glob(f"{service_mod.KERNEL_PREFIX}{os.getpid()}-*"))


def test_folders_of_a_killed_run_are_swept_when_an_evaluator_starts(tmp_path):
    dead = _dead_pid()
    root = Path(service_mod._work_root() or tempfile.gettempdir())
    orphan = root / f"{service_mod.KERNEL_PREFIX}{dead}-abc"
    orphan.mkdir()
    (orphan / "out.npy").write_bytes(b"x")
    mine = root / f"{service_mod.KERNEL_PREFIX}{os.getpid()}-abc"
    mine.mkdir()
    try:
        Evaluator(EvalSettings(backend="simulator", seeds=(0,), workers=1)).close()
        assert not orphan.exists() and mine.exists()
    finally:
        shutil.rmtree(orphan, ignore_errors=True)
        shutil.rmtree(mine, ignore_errors=True)


def _dead_pid() -> int:
    """The id of a process that has exited (and been reaped)."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


@pytest.mark.slow
def test_paper_shape_with_seven_seeds():
    """silu at M=4096, N=7168 (117 MB per input), 5 seeds + 2 held-out, default limits; no run
    folder, so that the 1.6 GB of reference data goes away with the evaluator."""
    from nkibench.registry import load

    spec = make_spec("silu", "paper")
    settings = EvalSettings(backend="simulator", heldout_seeds=(7001, 7002))
    tuned = load(spec).baseline_source.replace("LOAD_N = 512", "LOAD_N = 2048")
    with Evaluator(settings) as ev:
        base = ev.baseline(spec)
        result, wrong = ev.evaluate_many(spec, [tuned, kernels.CONSTANT_OUTPUT])
        again = ev.evaluate(spec, tuned)
    assert base.ok and result.ok, (base.error, result.error)
    assert result.speedup == pytest.approx(base.latency_ms / result.latency_ms)
    assert wrong.status == "incorrect" and wrong.error.startswith("output 0 (seed 0)")
    assert again.cached and again.seconds < 0.5


def test_the_latency_stage_times_a_kernel_without_judging_it(tmp_path):
    """Evaluator.latencies: the shape-only trace's latency, which the full judgement then
    confirms; failures the trace already shows are verdicts there; a kernel that fails only on
    its data keeps its latency when judged (it was traced)."""
    with Evaluator(SETTINGS, run_dir=tmp_path) as evaluator:   # its own cache: nothing judged before
        _latency_stage(evaluator)


def _latency_stage(evaluator: Evaluator) -> None:
    sources = [kernels.SILU, kernels.CONSTANT_OUTPUT, kernels.SYNTAX_ERROR, kernels.HIDDEN_BF16, kernels.READ_API_KEY]
    timed = evaluator.latencies(SPEC, sources)
    assert [r.status for r in timed] == ["not_judged", "not_judged", "compile_error", "incorrect", "rejected"]
    assert not timed[0].ok and timed[0].speedup > 0 and timed[0].traced and not timed[2].traced
    judged = evaluator.evaluate_many(SPEC, sources)
    assert [r.status for r in judged] == ["ok", "incorrect", "compile_error", "incorrect", "rejected"]
    assert judged[0].latency_ms == timed[0].latency_ms and judged[0].speedup == timed[0].speedup
    assert judged[1].latency_ms == timed[1].latency_ms and judged[1].speedup is None
    assert [r.error for r in judged[2:]] == [r.error for r in timed[2:]]
    again = evaluator.latencies(SPEC, sources[:2])   # a full judgement in the cache answers
    assert [r.status for r in again] == ["ok", "incorrect"]
