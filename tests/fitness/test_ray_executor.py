"""The Ray executor on a real local Ray instance (127.0.0.1, one for the whole module: it takes
seconds to start): the same verdicts and checkpoints as the local executor, a Ray worker killed
mid-evaluation (retried, then crashed when it dies again), the NeuronCore reservation of the
trainium backend, and the one-line error without Ray. silu at its tiny shape. Whole Ray runs in
their own processes: what their instance listens on, its token file, and that no reference
folder outlives a run, even one killed."""

from __future__ import annotations

import contextlib
import dataclasses
import ipaddress
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import types
from pathlib import Path

import pytest

from accelopt_evo.cli import main as cli
from accelopt_evo.run import config as cfgmod
from accelopt_evo.run.records import EvaluationLine
from accelopt_evo.runner import start_run
from fitness import executor
from fitness.result import EvalResult
from fitness.service import HOSTNAME, Evaluator
from fitness.settings import EvalSettings
from nkibench.registry import make_spec

import eval_kernels as kernels
from checkpoint_diff import comparable, results

SPEC = make_spec("silu", "tiny")
LOCAL = EvalSettings(backend="simulator", seeds=(0, 21), heldout_seeds=(90210,), timeout_s=20.0,
                     memory_limit_mb=2048, workers=2)
RAY = dataclasses.replace(LOCAL, executor="ray")
CORPUS = [kernels.SILU, kernels.CONSTANT_OUTPUT, kernels.IMPORT_GC, kernels.SYNTAX_ERROR, kernels.NKI_RULE_BROKEN]
WHERE = ("seconds", "worker", "host", "cached")   # what may differ between executors
TASK_TITLE = b"ray::evaluate_task"
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def ray_instance():
    """A local Ray instance with two CPUs and two (custom) NeuronCores; evaluators use it as it is."""
    ray = pytest.importorskip("ray")
    executor.start_local(ray, 2, resources={"neuron_cores": 2})
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def ray_evaluator(ray_instance, tmp_path_factory):
    with executor.open_evaluator(RAY, run_dir=tmp_path_factory.mktemp("ray-run")) as ev:
        yield ev


def verdict(result) -> dict:
    return {k: v for k, v in result.to_dict().items() if k not in WHERE}


def variant(n: int) -> str:
    """A distinct correct kernel (its own cache key)."""
    return kernels.SILU + f"\nVARIANT = {n}\n"


class WorkerKiller:
    """Kills (SIGKILL) the Ray worker process running an evaluation task, up to `times` times,
    each time as soon as a task is seen running."""

    def __init__(self, times: int) -> None:
        self.times = times
        self.killed: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> "WorkerKiller":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set() and len(self.killed) < self.times:
            for pid in _task_pids():
                if pid not in self.killed:
                    os.kill(pid, signal.SIGKILL)
                    self.killed.append(pid)
                    break
            time.sleep(0.005)


def _task_pids() -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if entry.joinpath("cmdline").read_bytes().startswith(TASK_TITLE):
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


def test_where_an_evaluation_ran_goes_to_evaluations_jsonl_not_to_cache_or_checkpoints(tmp_path):
    with Evaluator(LOCAL, run_dir=tmp_path) as local:
        result = local.evaluate(SPEC, variant(0))
    assert re.fullmatch(r"slot [01]", result.worker) and result.host == HOSTNAME
    (entry,) = [json.loads(p.read_text()) for p in (tmp_path / "cache" / "evaluations").rglob("*.json")
                if json.loads(p.read_text())["result"]["kernel_id"] == result.kernel_id]
    assert "worker" not in entry["result"] and "host" not in entry["result"]
    line = EvaluationLine(1, "silu", result.kernel_id, "tuning", (), False, result)
    assert {"worker", "host"} <= set(line.to_json()) and "worker" not in line.kernel().to_json()["result"]
    assert EvaluationLine.from_json(line.to_json()).result.worker == result.worker
    # results without a place (records of earlier releases) are written as before
    assert set(EvalResult("ok").to_dict()) == set(EvalResult("ok").to_dict(placement=False))


def test_ray_gives_the_verdicts_of_the_local_executor(ray_evaluator, tmp_path):
    with Evaluator(LOCAL, run_dir=tmp_path) as local:
        expected = local.evaluate_many(SPEC, CORPUS)
        base = local.baseline(SPEC)
    got = ray_evaluator.evaluate_many(SPEC, CORPUS, progress=False)
    assert [r.status for r in got] == ["ok", "incorrect", "rejected", "compile_error", "compile_error"]
    assert [verdict(r) for r in got] == [verdict(r) for r in expected]
    assert verdict(ray_evaluator.baseline(SPEC)) == verdict(base)
    # where they ran: a Ray worker on this host; locally a pool slot
    assert all(re.fullmatch(r"ray worker [0-9a-f]{8}", r.worker) and r.host == HOSTNAME for r in got)
    assert expected[0].worker.startswith("slot ") and expected[0].host == HOSTNAME
    # a second request is a cache hit of the driver
    again = ray_evaluator.evaluate(SPEC, kernels.SILU)
    assert again.cached and verdict(again) == verdict(got[0])


def test_in_flight_names_the_ray_worker(ray_evaluator):
    # kernels that take a while to load, so that a loaded machine's polling still sees them run
    slow = [variant(100 + i) + "PAUSE = sum(range(20_000_000))\n" for i in range(4)]
    futures = [ray_evaluator.submit(SPEC, source) for source in slow]
    seen: set[str] = set()
    while not all(f.done() for f in futures):
        seen.update(ray_evaluator.in_flight())
        time.sleep(0.005)
    assert all(f.result().ok for f in futures)
    assert any(re.fullmatch(r"[0-9a-f]{8} on ray worker [0-9a-f]{8}", label) for label in seen), seen
    assert ray_evaluator.in_flight() == []


def test_a_killed_worker_is_retried_and_loses_nothing(ray_evaluator):
    with WorkerKiller(times=1) as killer:
        result = ray_evaluator.evaluate(SPEC, variant(2))
    assert len(killer.killed) == 1
    assert result.ok, result.error
    assert result.latency_ms == ray_evaluator.evaluate(SPEC, kernels.SILU).latency_ms


def test_a_worker_killed_twice_is_a_crashed_evaluation_and_the_next_one_runs(ray_evaluator):
    with WorkerKiller(times=2) as killer:
        result = ray_evaluator.evaluate(SPEC, variant(3))
    assert len(killer.killed) == 2
    assert result.status == "crashed" and "Ray worker" in result.error and "died twice" in result.error
    assert "\n" not in result.error
    assert ray_evaluator.evaluate(SPEC, variant(3)).ok    # not cached; evaluated again


def test_trainium_tasks_reserve_one_neuron_core(ray_evaluator, ray_instance):
    assert executor.task_options("trainium")["resources"] == {"neuron_cores": 1}
    assert "resources" not in executor.task_options("simulator")
    # a trainium task on the instance's custom neuron_cores: Ray grants it one core, which the
    # kernel process is pinned to (here without a Neuron SDK it cannot run, which is the point)
    job = {**ray_evaluator._job(SPEC, variant(4)), "backend": "trainium", "options": {"profiler": ""}}
    task = ray_instance.remote(executor.evaluate_task).options(**executor.task_options("trainium"))
    data = ray_instance.get(task.remote(job), timeout=120)
    assert data["status"] != "ok"
    assert re.fullmatch(r"ray worker [0-9a-f]{8} core [01]", data["worker"]), data


def test_without_ray_the_executor_is_one_line_and_exit_status_2(monkeypatch, capsys, tmp_path):
    monkeypatch.setitem(sys.modules, "ray", None)    # import ray raises ImportError
    with pytest.raises(executor.ExecutorError, match=re.escape("pip install -e '.[ray]'")):
        executor.open_evaluator(RAY)
    kernel = tmp_path / "k.py"
    kernel.write_text(kernels.SILU)
    code = cli.main(["eval", str(kernel), "--problem", "silu", "--shape", "tiny", "--backend", "simulator",
                     "--set", "evaluation.executor=ray"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.strip().splitlines() == ['error: evaluation.executor = "ray" needs Ray: pip install -e \'.[ray]\'']


# -- a Ray run of its own: listeners, token, reference folders -----------------------------------
# A driver process that evaluates silu on the local Ray instance it starts, says so on stdout,
# and closes its evaluator when a line arrives on stdin.
DRIVER = """
import json, sys
from fitness import executor
from fitness.settings import EvalSettings
from nkibench.registry import make_spec

settings = EvalSettings(backend="simulator", seeds=(0,), heldout_seeds=(90210,), timeout_s=20.0,
                        memory_limit_mb=2048, workers=1, executor="ray")
with executor.open_evaluator(settings) as ev:
    print(json.dumps({"status": ev.evaluate(make_spec("silu", "tiny"), sys.argv[1]).status}), flush=True)
    sys.stdin.readline()
print("closed", flush=True)
"""


class Driver:
    """A Ray run in its own process (DRIVER), with its own home folder (so its own token file)
    and temporary folder (so the reference folders seen are its own); Ray's session folder stays
    in /tmp (socket paths have a length limit)."""

    def __init__(self, home: Path, tmp: Path) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "PYTHONPATH"))}
        env.update(HOME=str(home), TMPDIR=str(tmp), RAY_TMPDIR="/tmp", PYTHONPATH=str(REPO))
        self.proc = subprocess.Popen([sys.executable, "-c", DRIVER, kernels.SILU], cwd=REPO, env=env, text=True,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        try:
            line = self.proc.stdout.readline()
            assert line, "the driver ended before its evaluation"
            assert json.loads(line)["status"] == "ok"
        except BaseException:
            self.proc.kill()
            raise

    def processes(self) -> list:
        import psutil  # comes with Ray

        root = psutil.Process(self.proc.pid)
        return [root, *root.children(recursive=True)]

    def close(self) -> None:
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()
        assert self.proc.stdout.readline().strip() == "closed"
        assert self.proc.wait(timeout=60) == 0

    def kill(self) -> None:
        """SIGKILL, as a run killed from outside; returns when its raylet has followed it (Ray's
        agents take a minute to notice, so they are killed here)."""
        import psutil

        processes = self.processes()
        raylets = [p for p in processes if name_of(p) == "raylet"]
        self.proc.kill()
        self.proc.wait()
        _, alive = psutil.wait_procs(raylets, timeout=60)
        assert not alive, alive
        for proc in processes:
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.kill()


@pytest.fixture
def drivers(tmp_path):
    """.start() -> a Ray run, all of this test's runs with the same .home and .tmp folders;
    those still running at the end are killed."""
    pytest.importorskip("ray")
    runs = types.SimpleNamespace(home=tmp_path / "home", tmp=tmp_path / "tmp", started=[])
    runs.home.mkdir()
    runs.tmp.mkdir()

    def start() -> Driver:
        runs.started.append(Driver(runs.home, runs.tmp))
        return runs.started[-1]

    runs.start = start
    yield runs
    for driver in runs.started:
        if driver.proc.poll() is None:
            driver.kill()


def name_of(proc) -> str:
    """The process's name; "" once it has ended."""
    import psutil

    try:
        return proc.name()
    except psutil.NoSuchProcess:
        return ""


def listening(processes: list) -> list[tuple[str, str, int]]:
    """(process name, address, port) of every listening TCP and bound UDP socket of `processes`."""
    import psutil

    found = []
    for proc in processes:
        try:
            for conn in proc.net_connections(kind="inet"):
                if conn.status == psutil.CONN_LISTEN or (conn.type == socket.SOCK_DGRAM and conn.laddr):
                    found.append((name_of(proc), conn.laddr.ip, conn.laddr.port))
        except psutil.NoSuchProcess:
            continue
    return found


def loopback(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    return (getattr(ip, "ipv4_mapped", None) or ip).is_loopback


def reference_folders(tmp: Path) -> list[Path]:
    return sorted(tmp.glob("accelopt-evo-*ray-references*"))


@pytest.mark.slow
def test_a_ray_run_listens_on_loopback_only_keeps_its_token_private_and_leaves_no_references(drivers):
    home, tmp = drivers.home, drivers.tmp
    killed = drivers.start()
    sockets = listening(killed.processes())
    assert len(sockets) >= 3, sockets          # at least the GCS, the raylet and the driver
    assert [s for s in sockets if not loopback(s[1])] == [], sockets
    token = home / ".ray" / "auth_token"
    assert token.is_file() and token.stat().st_mode & 0o077 == 0, oct(token.stat().st_mode)
    stale = reference_folders(tmp)
    assert stale                                # the reference data its Ray worker unpacked
    killed.kill()                               # a killed run leaves its folders behind...
    assert reference_folders(tmp) == stale
    run = drivers.start()                       # ...which the next run removes when it starts
    assert not set(stale) & set(reference_folders(tmp))
    assert reference_folders(tmp)               # (its own)
    run.close()
    assert reference_folders(tmp) == []         # and its own when it closes


def test_the_token_file_of_a_local_instance_is_made_private_and_kept(monkeypatch, tmp_path):
    for name in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    token = tmp_path / ".ray" / "auth_token"
    executor.private_token()                    # a new one: the user's alone, as Ray writes it
    assert token.stat().st_mode & 0o777 == 0o600 and re.fullmatch(r"[0-9a-f]{64}", token.read_text())
    token.write_text("kept")
    token.chmod(0o644)                          # one Ray wrote earlier: readable by everyone
    executor.private_token()
    assert token.stat().st_mode & 0o777 == 0o600 and token.read_text() == "kept"
    chosen = tmp_path / "elsewhere"
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(chosen))
    executor.private_token()                    # a file the user names is never written
    assert not chosen.exists()
    token.chmod(0o644)
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    executor.private_token()                    # nor anything touched without token authentication
    assert token.stat().st_mode & 0o777 == 0o644


def test_an_evaluator_removes_its_references_when_it_closes_and_the_next_one_unpacks_its_own(ray_instance):
    def folders(ev) -> list[Path]:
        return list(Path(tempfile.gettempdir()).glob(f"accelopt-evo-*-ray-references-{ev._token}"))

    with executor.open_evaluator(RAY) as first:
        assert first.evaluate(SPEC, variant(5)).ok
        assert folders(first)
    assert folders(first) == []
    # the same Ray workers, the same reference data: unpacked again for the new evaluator
    with executor.open_evaluator(RAY) as second:
        assert second.evaluate(SPEC, variant(6)).ok
        assert folders(second) and folders(second) != folders(first)
    assert folders(second) == []


# -- whole runs ---------------------------------------------------------------------------------
def run_cfg(out: Path, executor_name: str):
    return cfgmod.resolve(sets=[
        "run.gens=2", f"run.out={json.dumps(str(out))}", "run.shape=tiny", "population.size=4",
        "population.offspring=4", "run.report=false", "operators.kind=tuning", "evaluation.backend=simulator",
        "evaluation.seeds=[0, 1]", "evaluation.heldout_seeds=1", "evaluation.heldout=derived",
        "evaluation.timeout_s=30", f"evaluation.executor={json.dumps(executor_name)}"])


def checkpoints(folder: Path) -> dict[str, dict]:
    """The run's checkpoints, comparable between runs; where an evaluation ran is never in them."""
    out = {}
    for path in sorted((folder / "checkpoints").glob("gen-*.json")):
        assert all("worker" not in r and "host" not in r for r in results(json.loads(path.read_text())))
        out[path.name] = comparable(path)
    return out


@pytest.mark.slow
def test_a_run_on_ray_writes_the_checkpoints_of_a_local_run_even_when_a_worker_is_killed(ray_instance, tmp_path):
    quiet = lambda msg: None  # noqa: E731
    start_run(run_cfg(tmp_path / "local", "local"), "r", progress=False, log=quiet)
    start_run(run_cfg(tmp_path / "ray", "ray"), "r", progress=False, log=quiet)
    with WorkerKiller(times=1) as killer:
        start_run(run_cfg(tmp_path / "killed", "ray"), "r", progress=False, log=quiet)
    assert len(killer.killed) == 1
    local = checkpoints(tmp_path / "local" / "r")
    assert len(local) == 3
    assert checkpoints(tmp_path / "ray" / "r") == local
    assert checkpoints(tmp_path / "killed" / "r") == local
    lines = evaluations(tmp_path / "ray" / "r")
    fresh = [x for x in lines if not x["cached"]]
    assert fresh and all(x["worker"].startswith("ray worker ") and x["host"] == HOSTNAME for x in fresh)
    where = lambda line: {k: v for k, v in line.items() if k not in WHERE}  # noqa: E731
    assert [where(x) for x in lines] == [where(x) for x in evaluations(tmp_path / "local" / "r")]


def evaluations(folder: Path) -> list[dict]:
    return [json.loads(x) for x in (folder / "evaluations.jsonl").read_text().splitlines()]
