"""A lone judgement on the simulator runs its later seeds in a second kernel process when a
worker is idle, from the start or once a worker frees up while it runs: the verdict is the
single process's (the first failing seed in seed order decides), both processes must time the
same trace, and no more kernel processes run at a time than the evaluator has workers. silu at
its tiny shape, two seeds and two held-out seeds."""

from __future__ import annotations

import dataclasses
import sys
import threading

import pytest

from fitness import service
from fitness.sandbox import process
from fitness.service import Evaluator
from fitness.settings import EvalSettings
from nkibench.registry import make_spec

import adversarial_kernels as adv
import eval_kernels as kernels

SPEC = make_spec("silu", "tiny")
TWO = EvalSettings(backend="simulator", seeds=(0, 21), heldout_seeds=(90210, 31337), timeout_s=20,
                   memory_limit_mb=2048, workers=2)
ONE = dataclasses.replace(TWO, workers=1)
WHERE = ("seconds", "worker", "host", "cached")


def verdict(result) -> dict:
    return {k: v for k, v in result.to_dict().items() if k not in WHERE}


class Processes:
    """Records the seeds of every kernel process started and the most running at once."""

    def __init__(self, monkeypatch) -> None:
        self.seeds: list[list[str]] = []
        self.running = self.most = 0
        self._lock = threading.Lock()
        real = process.run

        def counting(module, request, *args, **kwargs):
            with self._lock:
                self.seeds.append([c["label"] for c in request["cases"]])
                self.running += 1
                self.most = max(self.most, self.running)
            try:
                return real(module, request, *args, **kwargs)
            finally:
                with self._lock:
                    self.running -= 1

        monkeypatch.setattr(service.process, "run", counting)


@pytest.fixture(scope="module")
def single():
    """Verdicts of one kernel process per judgement (one worker)."""
    with Evaluator(ONE) as ev:
        yield ev


@pytest.fixture(scope="module")
def pair():
    """Two workers, the baseline judged: a kernel evaluated alone has an idle worker."""
    with Evaluator(TWO) as ev:
        ev.baseline(SPEC)
        yield ev


def test_a_lone_judgement_splits_its_seeds_and_gives_the_single_process_verdict(single, monkeypatch):
    source = kernels.SILU + "\nSPLIT = 1\n"
    expected = single.evaluate(SPEC, source)
    seen = Processes(monkeypatch)
    with Evaluator(TWO) as ev:
        # The kernel is held to the baseline's errors, so the baseline is judged first, alone:
        # its earlier and later seeds in two processes; then the kernel, alone too.
        got = ev.evaluate(SPEC, source)
        assert [len(s) for s in seen.seeds] == [2, 2, 2, 2]
        seen.seeds.clear()
        alone = ev.evaluate(SPEC, source + "\nALONE = 1\n")
    assert got.ok and verdict(got) == verdict(expected)
    assert alone.ok and alone.latency_ms == got.latency_ms and alone.profile == got.profile
    # alone: two processes, the earlier and the later seeds
    assert sorted(seen.seeds) == [["held-out seed 1 (input family 'large')", "held-out seed 2 (input family 'edges')"],
                                  ["seed 0", "seed 21"]]
    assert seen.most <= TWO.workers


@pytest.mark.parametrize("source", [adv.ZERO_ABOVE_EIGHT, kernels.CONSTANT_OUTPUT], ids=["later_seed", "every_seed"])
def test_the_first_failing_seed_decides_as_in_one_process(single, pair, source):
    expected = single.evaluate(SPEC, source)
    got = pair.evaluate(SPEC, source)
    assert got.status == "incorrect" and verdict(got) == verdict(expected)


def test_a_batch_keeps_one_process_per_kernel(pair, monkeypatch):
    seen = Processes(monkeypatch)
    results = pair.evaluate_many(SPEC, [kernels.SILU + f"\nBATCH = {i}\n" for i in range(4)])
    assert all(r.ok for r in results)
    assert seen.most <= TWO.workers
    # both workers busy from the start: no judgement found an idle one, except perhaps the last
    assert sum(len(s) == 4 for s in seen.seeds) >= 3, seen.seeds


def test_processes_that_time_different_traces_are_a_compile_error(pair, monkeypatch):
    real = service._Judge.on_message

    def drifting(self, message):
        if self.first > 0 and message.get("event") in ("traced", "done"):
            message = dict(message, latency_ms=float(message["latency_ms"]) * 1.5)
        return real(self, message)

    monkeypatch.setattr(service._Judge, "on_message", drifting)
    result = pair.evaluate(SPEC, kernels.SILU + "\nDRIFT = 1\n")
    assert result.status == "compile_error" and "traced different instruction streams" in result.error


def test_progress_counts_the_seeds_of_the_whole_judgement(tmp_path):
    judge = service._Judge(None, [None, None], [], [], None, tmp_path, first=2, total=4)
    outcome = process.Outcome(None, timed_out=True, limit_s=20.0)
    status, message = judge._failure(outcome, 20.0, service.FULL)
    assert status == "timeout" and message.endswith("after 2 of 4 seeds")


def _busy_at_first(monkeypatch) -> None:
    """No worker is idle when a judgement starts; one is, later (the other kernel's ended)."""
    real = service.KernelLauncher.take_spare
    calls = []

    def later_only(self):
        calls.append(1)
        return len(calls) > 1 and real(self)

    monkeypatch.setattr(service.KernelLauncher, "take_spare", later_only)


def test_a_worker_freed_mid_judgement_takes_the_later_seeds(single, pair, monkeypatch):
    source = kernels.SILU + "\nLATE = 1\n"
    expected = single.evaluate(SPEC, source)
    _busy_at_first(monkeypatch)
    seen = Processes(monkeypatch)
    got = pair.evaluate(SPEC, source)
    assert got.ok and verdict(got) == verdict(expected)
    # seed 0 judged, seed 21 running: the one seed not started goes to a second process, and
    # the first is ended once seed 21 and held-out seed 1 are judged
    assert seen.seeds == [["seed 0", "seed 21", "held-out seed 1 (input family 'large')",
                           "held-out seed 2 (input family 'edges')"],
                          ["held-out seed 2 (input family 'edges')"]]
    assert seen.most <= TWO.workers


@pytest.mark.parametrize("source", [adv.ZERO_ABOVE_EIGHT, kernels.CONSTANT_OUTPUT], ids=["later_seed", "every_seed"])
def test_after_a_late_split_the_first_failing_seed_decides(single, pair, monkeypatch, source):
    expected = single.evaluate(SPEC, source)
    _busy_at_first(monkeypatch)
    got = pair.evaluate(SPEC, source + "\nLATE = 1\n")
    assert got.status == "incorrect" and verdict(got) == verdict(
        single.evaluate(SPEC, source + "\nLATE = 1\n")) and got.error == expected.error


def test_a_late_split_whose_processes_trace_differently_is_a_compile_error(pair, monkeypatch):
    real = service._Judge.on_message

    def drifting(self, message):
        if self.first > 0 and message.get("event") == "traced":
            message = dict(message, latency_ms=float(message["latency_ms"]) * 1.5)
        return real(self, message)

    monkeypatch.setattr(service._Judge, "on_message", drifting)
    _busy_at_first(monkeypatch)
    result = pair.evaluate(SPEC, kernels.SILU + "\nLATE_DRIFT = 1\n")
    assert result.status == "compile_error" and "traced different instruction streams" in result.error


def test_a_second_process_that_cannot_start_gives_its_worker_back(monkeypatch):
    """The share taken for the later seeds returns to the pool when their process cannot be
    set up: the next lone judgement still finds the idle worker and splits."""
    real = service.tempfile.mkdtemp

    def failing(*args, **kwargs):
        if sys._getframe(1).f_code.co_name == "hand_over":
            raise OSError("no room for the later seeds' folder")
        return real(*args, **kwargs)

    with Evaluator(TWO) as ev:
        ev.baseline(SPEC)
        with monkeypatch.context() as patch:
            patch.setattr(service.tempfile, "mkdtemp", failing)
            ev.evaluate(SPEC, kernels.SILU + "\nNO_ROOM = 1\n")
        seen = Processes(monkeypatch)
        result = ev.evaluate(SPEC, kernels.SILU + "\nAFTER = 1\n")
    assert result.ok
    assert sorted(len(s) for s in seen.seeds) == [2, 2]
