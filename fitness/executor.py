"""Where evaluations run: the local process pool, or tasks on a Ray cluster.

`open_evaluator(settings)` gives the evaluator of `settings.executor`: the local `Evaluator`
(fitness.service) or a `RayEvaluator`, which has the same API and shares everything but where
a kernel is judged. Its driver (this process) looks up and writes the cache, evaluates the
baseline once per problem, fills in speedup and percent of peak, and computes the reference
data of each problem once (fitness.references); that data goes into Ray's object store once
per problem and set of seeds and is unpacked once per node into a node-local folder. Each
evaluation that is not cached is one Ray task: the static policy, then the same judging code
as locally (`fitness.service.judge_cases`): the same sandboxed kernel process, limits and
correctness gate. On the simulator a task takes one CPU; on the trainium backend it also
reserves one NeuronCore (`resources={"neuron_cores": 1}`), and Ray sets
NEURON_RT_VISIBLE_CORES to the core it granted, which the kernel process is pinned to.

Tasks rather than one long-lived actor per core: every kernel already runs in a fresh
sandboxed process started by the task, and only that process opens the NeuronCore, so the
core is never bound to a Ray worker; an actor per core would add a process per core and
nothing else.

A task whose worker or node dies is retried once by Ray (a system failure, `max_retries=1`);
a second death is recorded as `crashed`, and the run goes on. Ray is optional: it is imported
only here, only when the Ray executor is chosen.

The reference data holds the expected outputs of every seed, held-out ones included, so it
stays with its user: a local instance listens on the loopback address only, its token is
readable by the user alone, and each evaluator's folders on the nodes are removed when it
closes (those of a killed run when the next run starts on that node, see `reference_root`).
"""

from __future__ import annotations

import atexit
import dataclasses
import hashlib
import json
import logging
import os
import secrets
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Any

from fitness.correctness.seeds import SeedData
from nkibench.problem import ProblemSpec

from . import service
from .cache import evaluator_version
from .references import reference_version, spec_key
from .result import CRASHED, EvalResult
from .settings import EvalSettings

INSTALL_HINT = "pip install -e '.[ray]'"


class ExecutorError(RuntimeError):
    """The executor cannot be used (Ray missing, a cluster that cannot be joined): one line
    that says what to do."""


def open_evaluator(settings: EvalSettings, run_dir: Path | None = None) -> service.Evaluator:
    """The evaluator of `settings.executor` (a context manager)."""
    if settings.executor == "ray":
        return RayEvaluator(settings, run_dir)
    return service.Evaluator(settings, run_dir)


def preflight(settings: EvalSettings) -> None:
    """Raise what `open_evaluator(settings)` would raise about this host (backend, calibration,
    Ray missing) without starting anything, so that a run can fail before it writes a folder."""
    service.check_settings(settings)
    if settings.executor == "ray":
        import_ray()


def import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ExecutorError(f'evaluation.executor = "ray" needs Ray: {INSTALL_HINT}') from None
    return ray


def task_options(backend: str) -> dict[str, Any]:
    """The Ray options of one evaluation task: a CPU, on the trainium backend also one
    NeuronCore; retried once when its worker or node dies."""
    options: dict[str, Any] = {"num_cpus": 1, "max_retries": 1, "retry_exceptions": False}
    if backend == "trainium":
        options["resources"] = {"neuron_cores": 1}
    return options


class RayEvaluator(service.Evaluator):
    """The `Evaluator` whose kernels are judged by Ray tasks (see the module's text)."""

    def __init__(self, settings: EvalSettings, run_dir: Path | None = None) -> None:
        self._ray = ray = import_ray()
        self._owns_ray = connect(ray, settings)
        self._token = secrets.token_hex(8)      # names this evaluator's reference folders on the nodes
        self._packed: dict[ProblemSpec, tuple[str, list[tuple[str, SeedData]], Any]] = {}
        self._packing = threading.Lock()
        self._board: Any = None
        self._pending: dict[str, Any] = {}     # task id -> object ref, of every task not yet returned
        try:
            super().__init__(settings, run_dir)
            self._task = ray.remote(evaluate_task).options(**task_options(self.backend))
        except BaseException:
            if self._owns_ray:
                ray.shutdown()
            raise

    # -- what differs from the local evaluator ---------------------------------------------
    def _open_launcher(self, workers: int) -> None:
        return None    # kernel processes are started by the tasks, on the cluster's nodes

    def _slots(self, workers: int) -> int:
        """As many evaluations at a time as the cluster has CPUs (simulator) or NeuronCores."""
        resource = "neuron_cores" if self.backend == "trainium" else "CPU"
        return max(1, int(self._ray.cluster_resources().get(resource, 0)) or workers)

    def _job(self, spec: ProblemSpec, source: str, stage: str = service.FULL) -> dict[str, Any]:
        """What a task needs to evaluate `source` (the reference files as an object ref in a
        list, so that Ray hands it over unresolved: a node that has them unpacked never fetches them)."""
        digest, cases, files = self._references(spec)
        return {"spec": spec, "source": source, "settings": self.settings, "backend": self.backend,
                "target": self.target, "host": self._host, "options": self._worker_options(),
                "references": [self._token, digest, cases, [files]], "version": self._version,
                "artifacts": self.run_dir is not None, "board": self._progress_board(),
                "label": service.kernel_id(source)[:8], "stage": stage,
                "yardsticks": self._yardsticks(spec, source, stage)}

    def _compute(self, spec: ProblemSpec, source: str, stage: str = service.FULL) -> EvalResult:
        ray = self._ray
        ref = self._task.remote(self._job(spec, source, stage))
        key = ref.task_id().hex()    # the task's id, also that of its retry (the progress board's key)
        with self._lock:
            self._pending[key] = ref
        try:
            data = ray.get(ref)
        except ray.exceptions.TaskCancelledError:
            return EvalResult(CRASHED, "the evaluation was cancelled (the evaluator closed)")
        except ray.exceptions.RayTaskError as exc:
            return service.internal_error(exc.cause if isinstance(exc.cause, Exception) else exc)
        except ray.exceptions.RayError as exc:
            return EvalResult(CRASHED, f"the Ray worker evaluating this kernel died twice (it was retried once): "
                                       f"{type(exc).__name__}")
        finally:
            with self._lock:
                self._pending.pop(key, None)
        artifacts = data.pop("artifacts", {})
        if artifacts and self.run_dir is not None:
            folder = self.run_dir / "artifacts" / service.kernel_id(source)
            folder.mkdir(parents=True, exist_ok=True)
            for name, blob in artifacts.items():
                (folder / name).write_bytes(blob)
        return EvalResult.from_dict(data)

    def _references(self, spec: ProblemSpec) -> tuple[str, list[tuple[str, SeedData]], Any]:
        """(digest, cases, object ref of the files) of the problem's reference data, the files
        put once into the object store."""
        with self._packing:
            if spec not in self._packed:
                digest, cases, files = pack_references(spec, self._cases(spec))
                self._packed[spec] = (digest, cases, self._ray.put(files))
            return self._packed[spec]

    def _progress_board(self) -> Any:
        with self._lock:
            if self._board is None:
                self._board = self._ray.remote(num_cpus=0)(ProgressBoard).remote()
            return self._board

    def in_flight(self) -> list[str]:
        """"kernel-id on ray worker ..." of every task whose kernel process runs now."""
        with self._lock:
            board, pending = self._board, set(self._pending)
        if board is None or not pending:
            return []
        try:
            labels = self._ray.get(board.snapshot.remote(), timeout=5)
        except Exception:  # noqa: BLE001 - a display must never end a run
            return []
        return sorted(label for key, label in labels.items() if key in pending)

    def close(self) -> None:
        if self._closed:
            return
        ray = self._ray
        with self._lock:
            pending = list(self._pending.values())
        for ref in pending:
            try:
                ray.cancel(ref, force=True)
            except Exception:  # noqa: BLE001 - it may have finished meanwhile
                pass
        super().close()
        if self._board is not None:
            try:
                ray.kill(self._board)
            except Exception:  # noqa: BLE001
                pass
        if self._packed:
            self._remove_references()
        if self._owns_ray:
            ray.shutdown()

    def _remove_references(self) -> None:
        """Removes this evaluator's reference folder on every node (one task per live node,
        waited for up to a minute; a folder left behind goes with its raylet, see
        `reference_root`)."""
        ray = self._ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        remove = ray.remote(num_cpus=0, max_retries=0)(remove_references)
        try:
            refs = [remove.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=False))
                    .remote(self._token) for node in ray.nodes() if node["Alive"]]
            ray.wait(refs, num_returns=len(refs), timeout=60)
        except Exception:  # noqa: BLE001 - closing must not fail on a node that went away
            pass


def connect(ray: Any, settings: EvalSettings) -> bool:
    """Start a local Ray instance (ray_address "") or join a cluster ("auto", "ray://host:port");
    True when this process started the instance (and so shuts it down). A Ray instance this
    process already runs (e.g. a test's) is used as it is."""
    if ray.is_initialized():
        return False
    address = settings.ray_address
    try:
        if address:
            ray.init(address=address, log_to_driver=False)
        else:
            start_local(ray, settings.workers)
    except Exception as exc:  # noqa: BLE001 - ray raises several types; one line says why
        where = f"join the Ray cluster at {address!r}" if address else "start a local Ray instance"
        text = str(exc).strip().splitlines()
        raise ExecutorError(f"evaluation.executor = \"ray\": cannot {where}"
                            f" ({type(exc).__name__}{': ' + text[0][:200] if text else ''})") from None
    return True


def local_instance(cpus: int, **extra: Any) -> dict[str, Any]:
    """`ray.init` arguments of a single-machine instance: on the loopback address, without the
    dashboard or Ray's info messages, `cpus` CPUs; its workers import this checkout."""
    root = str(Path(__file__).resolve().parents[1])
    path = os.pathsep.join([root, *([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])])
    return {"address": "local", "num_cpus": cpus, "include_dashboard": False, "_node_ip_address": "127.0.0.1",
            "log_to_driver": False, "logging_level": logging.WARNING,
            "runtime_env": {"env_vars": {"PYTHONPATH": path}}, **extra}


def start_local(ray: Any, cpus: int, **extra: Any) -> None:
    """Start the single-machine instance of `local_instance(cpus, **extra)` so that only this
    user can reach it: every process listens on 127.0.0.1 alone, and its token file is the
    user's alone (`private_token`)."""
    from ray._private import ray_constants

    private_token()
    # ray.init replaces a loopback _node_ip_address with the host's own address unless "Ray
    # clusters" are off (services.resolve_ip_for_localhost -> get_node_ip_address reads
    # ray_constants.ENABLE_RAY_CLUSTER, from RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER at import); the
    # GCS, the raylet and every worker listen on all interfaces unless that address is
    # 127.0.0.1. So the flag is off while this process starts its own instance, and only then.
    enabled = ray_constants.ENABLE_RAY_CLUSTER
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        ray.init(**local_instance(cpus, **extra))
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = enabled
    if ray.util.get_node_ip_address() != "127.0.0.1":   # a Ray release that resolves it otherwise
        ray.shutdown()
        raise RuntimeError("Ray did not keep the instance on the loopback address")


def private_token() -> None:
    """Make the token file a local instance will use readable by the user alone. Ray 2.60 turns
    token authentication on for an instance `ray.init` starts (unless RAY_AUTH_MODE says
    otherwise) and, without RAY_AUTH_TOKEN, reads the token from RAY_AUTH_TOKEN_PATH or else
    ~/.ray/auth_token, which it writes when missing with the umask's mode: readable by every
    local user (authentication_token_setup.generate_and_save_token). So a missing
    ~/.ray/auth_token is written here first, as Ray would (256 random bits) but with mode
    0600, and the file in use loses any group and other bits."""
    if os.environ.get("RAY_AUTH_MODE", "token").lower() != "token" or os.environ.get("RAY_AUTH_TOKEN"):
        return
    chosen = os.environ.get("RAY_AUTH_TOKEN_PATH")
    path = Path(chosen) if chosen else Path.home() / ".ray" / "auth_token"
    if not chosen and not path.exists():
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:   # written meanwhile by another process
            pass
        else:
            with os.fdopen(fd, "w") as out:
                out.write(secrets.token_hex(32))
    if path.exists():
        path.chmod(path.stat().st_mode & 0o700)


# -- reference data through the object store -------------------------------------------------
def pack_references(spec: ProblemSpec,
                    cases: list[service.Case]) -> tuple[str, list[tuple[str, SeedData]], dict[str, bytes]]:
    """(digest, cases, files) of the reference data of `cases`: the cases with file names
    relative to a folder ("seed-folder/name"), and the files' contents by those names."""
    files: dict[str, bytes] = {}
    packed_cases = []
    for case in cases:
        def rel(path: Any) -> Any:
            if not isinstance(path, str):
                return path   # a scalar input travels as its value
            name = f"{Path(path).parent.name}/{Path(path).name}"
            files.setdefault(name, Path(path).read_bytes())
            return name
        d = case.data
        packed_cases.append((case.label, dataclasses.replace(d, inputs=tuple(rel(p) for p in d.inputs),
                                                             expected=tuple(rel(p) for p in d.expected))))
    blob = json.dumps([reference_version(), spec_key(spec), sorted(files)])
    return hashlib.sha256(blob.encode()).hexdigest()[:24], packed_cases, files


_unpacked: dict[Path, list[service.Case]] = {}
_unpack_lock = threading.Lock()


def reference_root(token: str) -> Path:
    """This node's reference folder of the evaluator `token`. Named for this node's raylet,
    the process on the node that lives as long as the Ray instance (and, on an instance the
    driver started, as long as the driver): `service.sweep_orphans` removes the folders of
    dead ones, so a killed run's go when the next run starts on the node (its driver there,
    or its first evaluation)."""
    raylet = os.environ.get("RAY_RAYLET_PID") or os.getppid()   # Ray sets it for the processes it starts
    return Path(tempfile.gettempdir()) / f"accelopt-evo-{raylet}-ray-references-{token}"


def remove_references(token: str) -> None:
    """Removes this node's reference folder of the evaluator `token` (a task, when it closes)."""
    shutil.rmtree(reference_root(token), ignore_errors=True)


def node_cases(token: str, digest: str, cases: list[tuple[str, SeedData]], holder: list[Any]) -> list[service.Case]:
    """The cases of packed reference data with the paths of its files, unpacked once per node
    and evaluator into a node-local folder only the user can read (read-only files; a folder
    appears complete or not at all); only then are the files fetched from the object store."""
    root = reference_root(token)
    folder = root / digest
    with _unpack_lock:
        if folder in _unpacked and (folder / ".complete").is_file():
            return _unpacked[folder]
        if not (folder / ".complete").is_file():
            import ray

            files = ray.get(holder[0])
            root.mkdir(mode=0o700, exist_ok=True)
            work = Path(tempfile.mkdtemp(dir=root, prefix=".unpack-"))
            for name, blob in files.items():
                path = work / name
                path.parent.mkdir(exist_ok=True)
                path.write_bytes(blob)
                path.chmod(0o444)
            (work / ".complete").write_text("")
            try:
                work.rename(folder)
            except OSError:   # another worker of this node was faster
                shutil.rmtree(work, ignore_errors=True)

        def local(path: Any) -> Any:
            return str(folder / path) if isinstance(path, str) else path
        for gone in [f for f in _unpacked if not f.is_dir()]:   # of evaluators closed since
            del _unpacked[gone]
        _unpacked[folder] = [service.Case(label, dataclasses.replace(d, inputs=tuple(local(p) for p in d.inputs),
                                                                     expected=tuple(local(p) for p in d.expected)))
                             for label, d in cases]
        return _unpacked[folder]


# -- the task ----------------------------------------------------------------------------------
_launchers: dict[str, service.KernelLauncher] = {}
_launchers_lock = threading.Lock()


def evaluate_task(job: dict[str, Any]) -> dict[str, Any]:
    """One evaluation on a Ray worker: the policy, then the same judging as the local
    evaluator; the raw result (without speedup) as a dict, with the worker and host it ran on,
    and the artifacts of an ok result."""
    import ray

    context = ray.get_runtime_context()
    name = f"ray worker {context.get_worker_id()[:8]}"
    artifacts: dict[str, bytes] = {}
    try:
        if job["version"] != evaluator_version():
            result = EvalResult(CRASHED, f"the Ray worker on {service.HOSTNAME} runs other evaluation code "
                                         f"({evaluator_version()}, the driver {job['version']}): "
                                         "install the same version on every node")
        else:
            result = _judge(job, name, artifacts)
    except Exception as exc:  # as locally: an evaluator bug is a crashed evaluation, not a lost run
        result = service.internal_error(exc)
    result.host = service.HOSTNAME
    result.worker = result.worker or name
    data = result.to_dict()
    if artifacts:
        data["artifacts"] = artifacts
    return data


def _judge(job: dict[str, Any], name: str, artifacts: dict[str, bytes]) -> EvalResult:
    spec, source = job["spec"], job["source"]
    dialect, result = service.review(source, job["backend"], job["target"], job["host"],
                                     service.kernel_modules(job["settings"]))
    if result is None:
        launcher = _launcher(job, name)
        board, label = job["board"], job["label"]

        def running(worker: str) -> Any:
            board.started.remote(_task_key(), f"{label} on {worker}")
            return _Forget(board)

        def keep(workdir: Path, names: list[str]) -> None:
            if job["artifacts"]:
                artifacts.update({Path(n).name: (workdir / n).read_bytes() for n in names if (workdir / n).is_file()})

        token, digest, cases, holder = job["references"]
        result = service.judge_cases(spec, source, lambda: node_cases(token, digest, cases, holder), job["settings"],
                                     launcher, running=running, keep=keep, stage=job.get("stage", service.FULL),
                                     yardsticks=job.get("yardsticks"))
    result.dialect = dialect
    return result


def _launcher(job: dict[str, Any], name: str) -> service.KernelLauncher:
    """This worker process's launcher for the job's backend (its fork server is kept between
    tasks); on the trainium backend pinned to the NeuronCore Ray granted the task."""
    core = None
    if job["backend"] == "trainium":
        core = int(os.environ.get("NEURON_RT_VISIBLE_CORES", "0").split(",")[0].split("-")[0])
    settings: EvalSettings = job["settings"]
    key = json.dumps([job["backend"], job["target"], job["options"], settings.timeout_s,
                      settings.memory_limit_mb, core, name], sort_keys=True)
    with _launchers_lock:
        if key not in _launchers:
            if not _launchers:
                service.sweep_orphans()   # scratch folders of killed workers of this node
            scratch = Path(tempfile.mkdtemp(prefix=service._scratch_prefix("accelopt-evo-")))
            launcher = service.KernelLauncher(settings, job["backend"], job["target"], job["options"], scratch,
                                              core=core, name=name)
            atexit.register(launcher.close)
            _launchers[key] = launcher
        return _launchers[key]


def _task_key() -> str:
    import ray

    return ray.get_runtime_context().get_task_id() or ""


class _Forget:
    """Leaves the progress board's entry of this task when its kernel process has ended."""

    def __init__(self, board: Any) -> None:
        self.board = board

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        self.board.ended.remote(_task_key())


class ProgressBoard:
    """A Ray actor: which task's kernel process runs on which worker now (for in_flight)."""

    def __init__(self) -> None:
        self.labels: dict[str, str] = {}

    def started(self, task: str, label: str) -> None:
        self.labels[task] = label

    def ended(self, task: str) -> None:
        self.labels.pop(task, None)

    def snapshot(self) -> dict[str, str]:
        return dict(self.labels)
