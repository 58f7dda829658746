"""The sandboxed child process: environment, limits, deadline, capture, cleanup."""

from __future__ import annotations

import os
import resource
import signal
import time
from pathlib import Path

import pytest

from fitness.sandbox import process

HERE = str(Path(__file__).resolve().parent)


def run(tmp_path: Path, action: str, timeout_s: float = 20.0, memory_mb: int = 1024, **request):
    messages: list[dict] = []

    def collect(msg: dict) -> bool:
        messages.append(msg)
        return True

    limits = process.Limits(timeout_s=timeout_s, memory_mb=memory_mb, output_bytes=200, grace_s=1.0)
    outcome = process.run("sandbox_target", {"action": action, **request}, limits, tmp_path, collect, path=[HERE])
    return outcome, messages


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_environment_is_an_allow_list(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-value")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "aws-secret")
    monkeypatch.setenv("SOME_TOKEN", "tok")
    outcome, messages = run(tmp_path, "env")
    assert outcome.returncode == 0, outcome.stderr
    env = messages[0]["env"]
    assert "OPENAI_API_KEY" not in env and "AWS_SECRET_ACCESS_KEY" not in env and "SOME_TOKEN" not in env
    assert not any("secret" in v for v in env.values())
    assert set(env) <= set(process.ENV_ALLOWED) | set(process.ENV_FIXED) | {"HOME", "TMPDIR"}
    assert env["HOME"] == str(tmp_path)


def test_child_runs_in_its_own_group_with_lowered_limits(tmp_path):
    outcome, messages = run(tmp_path, "facts", timeout_s=7.0, memory_mb=700)
    facts = messages[0]
    assert facts["pgid"] == facts["pid"] == facts["sid"] != os.getpgid(0)
    assert facts["address_space"] == [700 << 20, 700 << 20]
    # soft: timeout + 5 s; hard: room for the worker to stretch it (STRETCH x timeout + 10 s)
    assert facts["cpu"][0] == 12 and facts["cpu"][1] <= process.STRETCH * 7 + 10
    assert facts["core"] == [0, 0]
    assert Path(facts["cwd"]).resolve() == tmp_path.resolve()
    assert resource.getrlimit(resource.RLIMIT_AS)[0] != 700 << 20   # the parent is untouched


def test_deadline_kills_a_sleeping_child(tmp_path):
    t0 = time.monotonic()
    outcome, messages = run(tmp_path, "sleep", timeout_s=1.5)
    elapsed = time.monotonic() - t0
    assert outcome.timed_out and messages == [{"started": True}]
    assert outcome.signal == signal.SIGTERM
    assert elapsed < 1.5 + 5


def test_a_child_asking_for_more_time_gets_it_up_to_the_stretch(tmp_path):
    outcome, messages = run(tmp_path, "budget", timeout_s=1.0, budget_s=3.0, sleep=2.0)
    assert not outcome.timed_out and messages[-1] == {"done": True} and outcome.limit_s == pytest.approx(3.0, abs=0.2)
    t0 = time.monotonic()   # a budget beyond STRETCH x timeout is cut there
    outcome, messages = run(tmp_path, "budget", timeout_s=0.5, budget_s=100.0, sleep=30.0)
    assert outcome.timed_out and messages == [{"budget_s": 100.0}]
    assert outcome.limit_s == pytest.approx(0.5 * process.STRETCH, abs=0.2) and time.monotonic() - t0 < 10


def test_sigkill_follows_when_sigterm_is_ignored(tmp_path):
    t0 = time.monotonic()
    outcome, _ = run(tmp_path, "ignore_term", timeout_s=1.0)
    assert outcome.timed_out and outcome.signal == signal.SIGKILL
    assert time.monotonic() - t0 < 1.0 + 1.0 + 3


def test_busy_loop_times_out(tmp_path):
    t0 = time.monotonic()
    outcome, _ = run(tmp_path, "spin", timeout_s=1.5)
    assert outcome.timed_out
    assert time.monotonic() - t0 < 1.5 + 5


def test_address_space_limit_turns_a_huge_allocation_into_memory_error(tmp_path):
    outcome, messages = run(tmp_path, "allocate", memory_mb=512, bytes=200 * 2**30)
    assert messages == [{"memory_error": True}]
    assert outcome.returncode == 0


def test_output_is_truncated_head_and_tail(tmp_path):
    outcome, _ = run(tmp_path, "print", n=100_000)
    assert len(outcome.stdout) < 400 and outcome.stdout.startswith("o") and outcome.stdout.endswith("END")
    assert "bytes omitted" in outcome.stdout and "bytes omitted" in outcome.stderr


def test_many_messages_arrive_in_order(tmp_path):
    outcome, messages = run(tmp_path, "messages", n=5000)
    assert [m["i"] for m in messages] == list(range(5000))


def test_stop_early_when_the_callback_says_so(tmp_path):
    seen: list[dict] = []

    def stop_at_first(msg: dict) -> bool:
        seen.append(msg)
        return False

    limits = process.Limits(timeout_s=30.0, memory_mb=1024, grace_s=1.0)
    t0 = time.monotonic()
    outcome = process.run("sandbox_target", {"action": "sleep"}, limits, tmp_path, stop_at_first, path=[HERE])
    assert outcome.stopped and not outcome.timed_out and seen == [{"started": True}]
    assert time.monotonic() - t0 < 5


def test_exception_in_callback_still_kills_the_child(tmp_path):
    def explode(msg: dict) -> bool:
        raise RuntimeError("judge failed")

    limits = process.Limits(timeout_s=30.0, memory_mb=1024, grace_s=1.0)
    registry = process.ProcessRegistry()
    with pytest.raises(RuntimeError):
        process.run("sandbox_target", {"action": "sleep"}, limits, tmp_path, explode, path=[HERE], registry=registry)
    assert len(registry) == 0


def test_signals_and_exit_codes_are_reported(tmp_path):
    outcome, _ = run(tmp_path, "segfault")
    assert outcome.signal == signal.SIGSEGV and "SIGSEGV" in outcome.describe_exit()
    outcome, _ = run(tmp_path, "exit", code=3)
    assert outcome.returncode == 3 and "status 3" in outcome.describe_exit()


def test_grandchildren_in_the_group_are_killed(tmp_path):
    outcome, messages = run(tmp_path, "orphan")
    pid = messages[0]["grandchild"]
    deadline = time.monotonic() + 5
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(pid)


def test_registry_kills_live_children(tmp_path):
    import threading

    registry = process.ProcessRegistry()
    limits = process.Limits(timeout_s=60.0, memory_mb=1024, grace_s=1.0)
    outcomes = []
    thread = threading.Thread(target=lambda: outcomes.append(
        process.run("sandbox_target", {"action": "sleep"}, limits, tmp_path, path=[HERE], registry=registry)))
    thread.start()
    deadline = time.monotonic() + 10
    while not len(registry) and time.monotonic() < deadline:
        time.sleep(0.05)
    registry.kill_all()
    thread.join(10)
    assert not thread.is_alive() and outcomes[0].signal == signal.SIGKILL


def test_the_time_budget_of_an_evaluation_follows_its_traced_work():
    """The kernel process asks for time from its shape-only trace (fitness.sandbox.worker.time_budget):
    what it took so far plus every seed's expected full-data run, its element streams and its
    matrix products counted pessimistically (fitness.backends.simulator)."""
    import numpy as np

    from fitness.backends import simulator as sim
    from fitness.sandbox.worker import BUDGET_MARGIN, time_budget
    from fitness.simulator import ShapeDtype, run_kernel

    source = '''
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl

@nki.jit
def kernel(a, b):
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    res = nl.matmul(nl.load(a), nl.load(b), transpose_x=True)
    nl.store(out, value=nl.copy(res))
    return out
'''
    trace = run_kernel(source, [ShapeDtype((128, 128), np.float32), ShapeDtype((128, 512), np.float32)],
                       shape_only=True).trace
    runner = sim.SimulatorRunner("trn1")
    elements = sum(i.partitions * i.free for i in trace.instrs)
    expected = elements / sim.SLOW_ELEMENTS + 2 * 128 * 128 * 512 / sim.SLOW_FLOPS
    assert runner.seed_seconds(trace, 0.0) == pytest.approx(expected)
    assert runner.seed_seconds(trace, 0.1) == pytest.approx(expected + sim.SEED_TRACES * 0.1)
    assert time_budget(1.0, 2.0, 3) == BUDGET_MARGIN * 7.0
