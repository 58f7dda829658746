"""Kernel processes forked from the preloaded server keep every sandbox guarantee."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from fitness.sandbox import process
from fitness.sandbox.forkserver import ForkServer, ForkServerError

HERE = str(Path(__file__).resolve().parent)


@pytest.fixture()
def server(tmp_path):
    fs = ForkServer(["numpy", "json"], tmp_path)
    yield fs
    fs.close()


def run(server, workdir: Path, action: str, timeout_s: float = 20.0, memory_mb: int = 1024, **request):
    workdir.mkdir(exist_ok=True)
    messages: list[dict] = []
    limits = process.Limits(timeout_s=timeout_s, memory_mb=memory_mb, grace_s=1.0)
    outcome = process.run("sandbox_target", {"action": action, **request}, limits, workdir,
                          lambda m: messages.append(m) is None, path=[HERE], launcher=server)
    return outcome, messages


def test_forked_child_has_only_the_scrubbed_environment(server, tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-forked-secret")
    outcome, messages = run(server, tmp_path / "a", "env")
    assert outcome.returncode == 0, outcome.stderr
    assert "OPENAI_API_KEY" not in messages[0]["env"] and messages[0]["env"]["HOME"] == str(tmp_path / "a")
    outcome, messages = run(server, tmp_path / "b", "proc_environ")
    assert "sk-forked-secret" not in messages[0]["environ"] and "OPENAI_API_KEY" not in messages[0]["environ"]


def test_forked_child_runs_in_its_own_group_with_its_limits(server, tmp_path):
    outcome, messages = run(server, tmp_path / "a", "facts", memory_mb=900)
    facts = messages[0]
    assert facts["pgid"] == facts["pid"] == facts["sid"] != os.getpgid(0)
    assert facts["address_space"] == [900 << 20, 900 << 20]
    assert Path(facts["cwd"]).resolve() == (tmp_path / "a").resolve()


def test_children_do_not_inherit_each_others_state(server, tmp_path):
    run(server, tmp_path / "a", "mark")
    _, messages = run(server, tmp_path / "b", "check_mark")
    assert messages == [{"left_behind": None}]


def test_timeouts_crashes_and_output_work_as_with_spawned_children(server, tmp_path):
    t0 = time.monotonic()
    outcome, _ = run(server, tmp_path / "a", "spin", timeout_s=1.0)
    assert outcome.timed_out and outcome.signal == signal.SIGTERM and time.monotonic() - t0 < 6
    outcome, _ = run(server, tmp_path / "b", "segfault")
    assert outcome.signal == signal.SIGSEGV
    outcome, _ = run(server, tmp_path / "c", "print", n=50_000)
    assert outcome.stdout.endswith("END") and "bytes omitted" in outcome.stdout
    outcome, messages = run(server, tmp_path / "d", "allocate", memory_mb=600, bytes=200 * 2**30)
    assert messages == [{"memory_error": True}]


def test_a_dead_server_is_restarted(server, tmp_path):
    run(server, tmp_path / "a", "facts")
    first = server._proc.pid
    os.killpg(first, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while server._alive and time.monotonic() < deadline:
        time.sleep(0.05)
    outcome, messages = run(server, tmp_path / "b", "facts")
    assert outcome.returncode == 0 and server._proc.pid != first


def test_a_server_that_cannot_start_reports_an_error(tmp_path):
    broken = ForkServer(["no_such_module_anywhere"], tmp_path)
    with pytest.raises(ForkServerError, match="did not start"):
        broken._ensure_running()
    outcome, _ = run(broken, tmp_path / "a", "facts")
    assert outcome.returncode is None and "did not start" in outcome.spawn_error
