"""The evaluation service: `Evaluator` turns kernel sources into EvalResults.

One evaluation: cache lookup -> static policy -> precision of the source's dtype references (hardware) ->
reference data of every seed (computed once per problem and seed, in another process) -> a
fresh sandboxed kernel process that runs the kernel on each seed while this process judges
the outputs seed by seed -> latency and profile from the backend -> speedup against the
problem's baseline on the same backend and target, percent of the roofline peak.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import shutil
import signal
import socket
import tempfile
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Callable, ContextManager, Iterator, Sequence

import numpy as np

from fitness.backends.trainium import CoreLeases, core_env
from fitness.correctness import arrays, gate, precision
from fitness.correctness.normalize import kernel_id
from fitness.correctness.seeds import SeedData
from fitness.measures.roofline import lower_bound, percent_of_peak, roofline
from fitness.sandbox import policy, process
from fitness.sandbox.forkserver import ForkServer
from fitness.sandbox.modules import KernelModules
from fitness.sandbox.worker import FULL, LATENCY
from fitness.simulator.dialect import Dialect
from fitness.simulator.perf import calibration as calibration_mod
from nkibench.families import STANDARD
from nkibench.problem import Problem, ProblemSpec
from nkibench.registry import load

from . import backends, seal
from .cache import CacheFolder, EvalCache, cache_key, evaluator_version
from .pool import EvalPool
from .references import ReferenceError, ReferenceStore, reference_version
from .result import COMPILE_ERROR, CRASHED, INCORRECT, MODEL_ERROR, NOT_JUDGED, OK, REJECTED, TIMEOUT, EvalResult
from .settings import EvalSettings

# The baseline of a problem that has none (a user's problem evaluated without --baseline):
# every kernel's speedup is unknown.
NO_BASELINE = EvalResult(REJECTED, "the problem has no baseline kernel")
# What the fork server imports once for every simulator kernel process.
FORK_PRELOAD = ("numpy", "fitness.sandbox.worker", "fitness.sandbox.guard", "fitness.sandbox.policy",
                "fitness.sandbox.modules",
                "fitness.correctness.precision", "fitness.backends", "fitness.backends.simulator", "fitness.simulator",
                "fitness.simulator.perf", "fitness.references", "nkibench.registry")


@dataclasses.dataclass(frozen=True)
class Case:
    """One seed of the gate; held-out seeds are labelled by position, never by value."""

    label: str
    data: SeedData


def choose_backend(settings: EvalSettings) -> tuple[str, str, backends.NeuronHost]:
    """(backend, one-line reason, the host's Neuron probe) for `settings`; BackendError when
    the configured backend cannot run here."""
    host = backends.probe_neuron() if settings.backend != "simulator" else backends.NeuronHost()
    name, reason = backends.choose(settings.backend, host, settings.target)
    return name, reason, host


def calibration_of(settings: EvalSettings, backend: str) -> calibration_mod.Calibration | None:
    """A user calibration of the target (simulator only: hardware figures are measured);
    CalibrationError when the configured file cannot be used."""
    return calibration_mod.resolve(settings.calibration, settings.target) if backend == "simulator" else None


def check_settings(settings: EvalSettings) -> None:
    """Raise what opening an evaluator with `settings` would raise about this host (backend,
    calibration, kernel paths), without starting anything."""
    name, _, _ = choose_backend(settings)
    calibration_of(settings, name)
    kernel_modules(settings)


@functools.lru_cache(maxsize=16)
def _kernel_modules(kernel_file: str, kernel_paths: tuple[str, ...]) -> KernelModules:
    if kernel_file:
        return KernelModules.of_file(kernel_file, kernel_paths)
    return KernelModules.with_paths(kernel_paths)


def kernel_modules(settings: EvalSettings) -> KernelModules:
    """Where the kernels of `settings` sit: the package of `kernel_file`, the libraries of
    `kernel_paths` (fitness.sandbox.modules; ModulesError for a kernel path that is no folder)."""
    return _kernel_modules(settings.kernel_file, tuple(settings.kernel_paths))


class Evaluator:
    """Evaluates kernels for the engine and the `eval` command; a context manager owning the
    worker pool, the fork server, the reference data and the cache (`run_dir/cache/evaluations/`,
    and `settings.cache_dir/evaluations/` when set; reference data in `references/` beside it,
    see `reference_root`)."""

    def __init__(self, settings: EvalSettings, run_dir: Path | None = None) -> None:
        self.settings = settings
        name, reason, host = choose_backend(settings)
        self._backend_choice = (name, reason)
        workers = settings.workers
        self._host: backends.NeuronHost | None = None
        self.target = settings.target
        if name == "trainium":
            self._host = host
            self.target = host.target   # the chip that measures, detected (choose checked it is the run's)
            workers = host.cores        # one evaluation per NeuronCore
        self._calibration = calibration_of(settings, name)
        self._modules = kernel_modules(settings)
        # what kernels may import decides their results: a digest of its files is in every key
        self._modules_digest = self._modules.digest() if not self._modules.empty else ""
        self.run_dir = Path(run_dir) if run_dir else None
        # Entries of the run folder are sealed with the user's key, those of a shared cache
        # folder with the team's key file when one is set (fitness.seal).
        own = seal.user_seal() if self.run_dir else None
        shared = seal.seal_for(settings.cache_key_file) if settings.cache_dir else own
        folders = [CacheFolder(self.run_dir / "cache" / "evaluations", own)] if own else []
        if settings.cache_dir and shared:
            folders.append(CacheFolder(Path(settings.cache_dir) / "evaluations", shared))
        self._cache = EvalCache(folders)
        sweep_orphans()
        self._tmp = Path(tempfile.mkdtemp(prefix=_scratch_prefix("accelopt-evo-")))
        # Reference data outlives the evaluator in the cache folder (computing it costs more
        # than judging a kernel at paper shapes); without one it lives as long as the evaluator,
        # in its private scratch folder (nothing to verify there).
        kept = reference_root(settings, self.run_dir)
        self._refs = ReferenceStore(kept, shared) if kept else ReferenceStore(self._tmp / "references")
        self._pool = EvalPool(self._slots(workers))
        self._launcher = self._open_launcher(workers)
        self._processes = self._launcher.processes if self._launcher else process.ProcessRegistry()
        self._version = evaluator_version()
        self._lock = threading.Lock()
        self._baselines: dict[ProblemSpec, Future] = {}
        self._running: dict[int, str] = {}   # thread id -> "kernel-id on worker" (in_flight)
        self._closed = False

    # -- public API ------------------------------------------------------------------------
    @property
    def backend_choice(self) -> tuple[str, str]:
        """(backend name, one-line reason), e.g. ("simulator", "auto: no Neuron SDK importable")."""
        return self._backend_choice

    @property
    def backend(self) -> str:
        return self._backend_choice[0]

    def evaluate(self, spec: ProblemSpec, source: str) -> EvalResult:
        return self.evaluate_many(spec, [source])[0]

    def evaluate_many(self, spec: ProblemSpec, sources: Sequence[str],
                      progress: bool | str = False) -> list[EvalResult]:
        """Results in input order; distinct kernels run in parallel, identical ones once."""
        return self._many(spec, sources, progress, FULL)

    @property
    def traces(self) -> bool:
        """Whether kernels can be timed before they are judged (`latencies`): the simulator
        traces without data; hardware measures by running."""
        return self.backend == "simulator"

    def latencies(self, spec: ProblemSpec, sources: Sequence[str],
                  progress: bool | str = False) -> list[EvalResult]:
        """The first stage of a judgement, for a search's cascade: each kernel traced shape-only
        and timed, its correctness not computed (status not_judged, with latency, profile and
        speedup), or the verdict of a kernel that fails already there (policy, compile error,
        precision, timeout). A kernel judged in full before answers with that result."""
        self._require_traces()
        return self._many(spec, sources, progress, LATENCY)

    def _require_traces(self) -> None:
        if not self.traces:
            raise RuntimeError(f"the {self.backend} backend cannot time a kernel without running it")

    def _many(self, spec: ProblemSpec, sources: Sequence[str], progress: bool | str, stage: str) -> list[EvalResult]:
        self._check_open()
        if not sources:
            return []
        started = time.monotonic()
        baseline = self._baseline_future(spec)
        ready: dict[str, EvalResult] = {}
        futures: dict[str, Future] = {}
        keys = []
        for i, source in enumerate(sources):
            try:
                key = self._key(spec, source, stage)
            except Exception as exc:  # a source no one can even name must not cost the batch
                key = f"unkeyed-{i}"
                ready[key] = _unhandled_source(spec, exc, self.backend, self.settings.target)
            keys.append(key)
            if key in ready or key in futures:
                continue
            hit = self._cached(spec, source, stage, key)
            if hit is not None:
                ready[key] = dataclasses.replace(hit, seconds=time.monotonic() - started)
            else:
                futures[key] = self._submit_raw(spec, source, key, stage, baseline)
        for _ in self._pool.completed(list(futures.values()), progress):
            pass
        ready.update({key: f.result() for key, f in futures.items()})
        base = baseline.result()
        return [self._finish(spec, ready[key], base) for key in keys]

    def submit(self, spec: ProblemSpec, source: str) -> Future:
        """One evaluation in the background: a future of the same result `evaluate` returns.
        The asynchronous engine keeps a bounded number of these in flight."""
        return self._submit(spec, source, FULL)

    def submit_latency(self, spec: ProblemSpec, source: str) -> Future:
        """The latency stage of one kernel in the background (see `latencies`)."""
        self._require_traces()
        return self._submit(spec, source, LATENCY)

    def _submit(self, spec: ProblemSpec, source: str, stage: str) -> Future:
        self._check_open()
        out: Future = Future()
        try:
            key = self._key(spec, source, stage)
        except Exception as exc:  # as in evaluate_many: a source no one can name is a verdict
            out.set_result(_unhandled_source(spec, exc, self.backend, self.settings.target))
            return out
        baseline = self._baseline_future(spec)
        hit = self._cached(spec, source, stage, key)
        if hit is not None:
            raw: Future = Future()
            raw.set_result(hit)
        else:
            raw = self._submit_raw(spec, source, key, stage, baseline)

        def finish(_done: Future) -> None:
            try:
                out.set_result(self._finish(spec, raw.result(), baseline.result()))
            except BaseException as exc:  # noqa: BLE001 - handed to whoever waits on `out`
                out.set_exception(exc)

        # Both futures must be done; a callback on an already finished future runs at once.
        raw.add_done_callback(lambda _r: baseline.add_done_callback(finish))
        return out

    def in_flight(self) -> list[str]:
        """What runs now, one "kernel-id on worker" label per evaluation in a kernel process
        (for progress displays)."""
        with self._lock:
            return sorted(self._running.values())

    def baseline(self, spec: ProblemSpec) -> EvalResult:
        """The problem's baseline kernel on this backend and target (evaluated once)."""
        self._check_open()
        base = self._baseline_future(spec).result()
        return self._finish(spec, base, base)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._processes.kill_all()
        self._pool.close()
        if self._launcher is not None:
            self._launcher.close()
        shutil.rmtree(self._tmp, ignore_errors=True)

    def __enter__(self) -> "Evaluator":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- one evaluation ----------------------------------------------------------------------
    def _open_launcher(self, workers: int) -> "KernelLauncher | None":
        """What starts this evaluator's kernel processes: one NeuronCore leased per evaluation
        on the trainium backend, the pool slot's own on the simulator."""
        cores = CoreLeases(workers) if self.backend == "trainium" else None
        return KernelLauncher(self.settings, self.backend, self.target, self._worker_options(), self._tmp, cores=cores,
                              slots=workers if self.backend == "simulator" else 0, demand=self._pool.pending)

    def _slots(self, workers: int) -> int:
        """How many evaluations run at a time."""
        return workers

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("the evaluator is closed")

    def _key(self, spec: ProblemSpec, source: str, stage: str = FULL) -> str:
        s = self.settings
        gate_settings = [list(s.seeds), list(s.heldout_seeds), s.rel_tol] + ([LATENCY] if stage == LATENCY else [])
        return cache_key(source, spec, self.backend, self.target, gate_settings, self._version, self._context)

    def _cached(self, spec: ProblemSpec, source: str, stage: str, key: str) -> EvalResult | None:
        """The cached result of `stage` (its cache key `key`); for the latency stage a full
        judgement's, when there is one, answers first (it says more)."""
        hit = self._cache.get(self._key(spec, source, FULL)) if stage == LATENCY else None
        hit = hit if hit is not None else self._cache.get(key)
        if hit is not None and (hit.kernel_id != kernel_id(source) or hit.problem != spec.label()):
            self._cache.reject(key)   # a sealed entry of another kernel or problem: not this one's
            return None
        return hit

    @property
    def cache_rejected(self) -> int:
        """Stored results and reference data not believed (a seal that does not verify, a
        malformed or inconsistent entry) and recomputed instead: for the run's summary."""
        return self._cache.rejected + self._refs.rejected

    @property
    def _context(self) -> list[str] | None:
        """What besides backend and target decides a figure (fitness.cache.cache_key)."""
        if self._host is not None:
            context = [self._host.sdk_version, self._host.instance_type]
        elif self._calibration is not None:
            context = ["calibration", self._calibration.digest]
        else:
            context = []
        if self._modules_digest:
            context += ["kernel modules", self._modules_digest]
        return context or None

    def _submit_raw(self, spec: ProblemSpec, source: str, key: str, stage: str, baseline: Future) -> Future:
        """The future of `_evaluate_raw`. A full judgement is held to its baseline's errors
        (`_yardsticks`), so it enters the pool once the baseline is judged: no worker waits for
        it meanwhile, and a baseline judged alone may take every idle worker."""
        work = functools.partial(self._evaluate_raw, spec, source, key, stage)
        if baseline.done() or stage != FULL:
            return self._pool.submit(key, work)
        out: Future = Future()

        def start(_baseline: Future) -> None:
            try:
                inner = self._pool.submit(key, work)
            except BaseException as exc:  # noqa: BLE001 - e.g. the evaluator closed meanwhile
                out.set_exception(exc)
                return
            inner.add_done_callback(lambda f: out.set_exception(f.exception()) if f.exception() is not None
                                    else out.set_result(f.result()))

        baseline.add_done_callback(start)
        return out

    def _baseline_future(self, spec: ProblemSpec) -> Future:
        with self._lock:
            future = self._baselines.get(spec)
            if future is None or (future.done() and future.exception() is not None):
                source = load(spec).baseline_source
                key = self._key(spec, source)
                hit = self._cache.get(key) if source.strip() else NO_BASELINE
                if hit is not None:
                    future = Future()
                    future.set_result(hit)
                else:
                    future = self._pool.submit(key, functools.partial(self._evaluate_raw, spec, source, key))
                self._baselines[spec] = future
            return future

    def _evaluate_raw(self, spec: ProblemSpec, source: str, key: str, stage: str = FULL) -> EvalResult:
        """The result without speedup and percent of peak (those depend on the baseline)."""
        started = time.monotonic()
        hit = self._cached(spec, source, stage, key)
        if hit is not None:
            return dataclasses.replace(hit, seconds=time.monotonic() - started)
        try:
            result = self._compute(spec, source, stage)
        except ReferenceError:
            raise   # the problem's reference is broken: no kernel can be judged
        except Exception as exc:  # an evaluator bug must not end the run; say what happened
            result = internal_error(exc)
        if stage == FULL and result.traced:
            result = self._same_as_timed(spec, source, result)
        result.kernel_id = kernel_id(source)
        result.problem = spec.label()
        result.backend = self.backend
        result.target = self.target
        if self._host is not None:
            result.sdk_version, result.instance_type = self._host.sdk_version, self._host.instance_type
        if self._calibration is not None:
            result.calibration = self._calibration.label
        result.seconds = time.monotonic() - started
        self._cache.put(key, result)
        return result

    def _same_as_timed(self, spec: ProblemSpec, source: str, result: EvalResult) -> EvalResult:
        """`result`, or a compile error when the kernel was timed by a latency stage before (a
        search's cascade: another kernel process) and traced otherwise then: its instruction
        stream depends on the process, and neither figure stands for the other."""
        timed = self._cache.get(self._key(spec, source, LATENCY))
        if timed is None or not timed.traced or timed.status != NOT_JUDGED:
            return result
        if timed.latency_ms != result.latency_ms or timed.profile != result.profile:
            return _traced_apart(result)
        return result

    def _compute(self, spec: ProblemSpec, source: str, stage: str = FULL) -> EvalResult:
        """The static policy decides the source's dialect once; the result records it."""
        dialect, result = review(source, self.backend, self.target, self._host, self._modules)
        if result is None:
            assert self._launcher is not None
            kid = kernel_id(source)
            keep = (lambda workdir, names: self._keep_artifacts(workdir, names, kid)) if self.run_dir else None
            result = judge_cases(spec, source, lambda: self._cases(spec), self.settings, self._launcher,
                                 running=functools.partial(self._running_as, source), keep=keep, stage=stage,
                                 yardsticks=self._yardsticks(spec, source, stage))
        result.dialect = dialect
        result.host = HOSTNAME
        return result

    @contextlib.contextmanager
    def _running_as(self, source: str, worker: str) -> Iterator[None]:
        me = threading.get_ident()
        with self._lock:
            self._running[me] = f"{kernel_id(source)[:8]} on {worker}"
        try:
            yield
        finally:
            with self._lock:
                self._running.pop(me, None)

    def _worker_options(self) -> dict[str, Any]:
        """What the kernel process needs besides the request: the profiler of a hardware host,
        a user calibration of the simulator."""
        if self._host is not None:
            return {"profiler": self._host.profiler}
        if self._calibration is not None:
            return {"calibration": {"data": self._calibration.to_dict(), "path": self._calibration.path}}
        return {}

    def _yardsticks(self, spec: ProblemSpec, source: str, stage: str) -> list[list[float]] | None:
        """The baseline's errors on every case, which a full judgement of another kernel of
        the problem is held to (None for the baseline itself, judged by the problem's own
        tolerance, for the latency stage, and when the baseline is not ok)."""
        if stage != FULL:
            return None
        baseline_source = load(spec).baseline_source
        if not baseline_source.strip() or kernel_id(source) == kernel_id(baseline_source):
            return None
        with self._lock:
            future = self._baselines.get(spec)
        base = future.result() if future is not None else None   # done: see `_submit_raw`
        return base.errors if base is not None and base.ok and base.errors else None

    def _cases(self, spec: ProblemSpec) -> list[Case]:
        s = self.settings
        draws = [(x, STANDARD) for x in s.seeds] + heldout_draws(load(spec), s.heldout_seeds)
        data = self._refs.ensure(spec, draws)
        labels = [f"seed {x}" for x in s.seeds] + [
            f"held-out seed {i + 1}" + (f" (input family '{family}')" if family != STANDARD else "")
            for i, (_, family) in enumerate(draws[len(s.seeds):])]
        return [Case(label, d) for label, d in zip(labels, data)]

    def _keep_artifacts(self, workdir: Path, names: list[str], kid: str) -> None:
        assert self.run_dir is not None
        target = self.run_dir / "artifacts" / kid
        target.mkdir(parents=True, exist_ok=True)
        for name in names:
            if (workdir / name).is_file():
                shutil.copy2(workdir / name, target / Path(name).name)


    def _finish(self, spec: ProblemSpec, raw: EvalResult, baseline: EvalResult) -> EvalResult:
        """A copy of `raw` with speedup (vs the baseline) and percent of peak filled in, or a
        model error where its latency beats the least a correct kernel can have: every result,
        fresh or cached, the baseline's too, so that no stored figure escapes the backstop."""
        problem = load(spec)
        result = below_bound(problem, dataclasses.replace(raw, profile=dict(raw.profile)), self.target, self.backend)
        baseline = below_bound(problem, baseline, self.target, self.backend)
        if result.status in (OK, NOT_JUDGED) and result.latency_ms:
            if baseline.ok and baseline.latency_ms:
                result.speedup = baseline.latency_ms / result.latency_ms
            if problem.counts is not None:
                peak = roofline(problem.counts, self.target)
                result.percent_of_peak = percent_of_peak(peak.peak_latency_ms, result.latency_ms)
        return result


class KernelLauncher:
    """Starts the sandboxed kernel process of one evaluation with the evaluation's limits: a
    fork of a preloaded server on the simulator (spawned when the server cannot start), a
    spawned interpreter under the Neuron toolchain (the Neuron runtime must not be inherited
    through fork) pinned to one NeuronCore: a leased one (`cores`), or the one this process was
    given (`core`, e.g. by Ray). `name` labels the worker (a Ray worker); without it the
    calling pool thread's slot does."""

    def __init__(self, settings: EvalSettings, backend: str, target: str, options: dict[str, Any], scratch: Path,
                 *, cores: CoreLeases | None = None, core: int | None = None, name: str = "",
                 slots: int = 0, demand: Callable[[], int] | None = None) -> None:
        self.settings = settings
        # `slots` kernel processes at a time (the evaluator's workers; 0: no limit here), and
        # `demand()`, how many judgements are submitted and not done (a spare slot is one no
        # judgement will want while this one runs).
        self._slots = threading.BoundedSemaphore(slots) if slots else None
        self._slot_count = slots
        self._demand = demand
        self.backend = backend
        self.target = target
        self.options = options
        self.name = name
        self._cores = cores
        self._core = core
        self.limits = process.Limits(settings.timeout_s, settings.memory_limit_mb, toolchain=backend == "trainium")
        self.processes = process.ProcessRegistry()
        self._forkserver: ForkServer | None = ForkServer(FORK_PRELOAD, scratch) if backend == "simulator" else None

    @contextlib.contextmanager
    def slot(self) -> Iterator[None]:
        """One kernel process's share of the evaluator's workers (waits for one)."""
        if self._slots is None:
            yield
            return
        with self._slots:
            yield

    def take_spare(self) -> bool:
        """Take a second share for a judgement when one is idle now and no other judgement
        waits for it; give it back with `give_spare`."""
        idle = self._slots is not None and (self._demand is None or self._demand() < self._slot_count)
        return bool(idle and self._slots.acquire(blocking=False))

    def give_spare(self) -> None:
        assert self._slots is not None
        self._slots.release()

    @contextlib.contextmanager
    def _placement(self) -> Iterator[tuple[str, dict[str, str] | None]]:
        """(worker label, extra environment) of one kernel process."""
        if self._cores is not None:
            with self._cores.lease() as core:
                yield self._label(f"core {core}"), core_env(core, self.target)
        elif self._core is not None:
            yield self._label(f"core {self._core}"), core_env(self._core, self.target)
        else:
            yield self.name or threading.current_thread().name.replace("evaluation_", "slot "), None

    def _label(self, core: str) -> str:
        return f"{self.name} {core}" if self.name else core

    def run(self, request: dict[str, Any], workdir: Path, on_message: Callable[[dict[str, Any]], bool],
            running: Callable[[str], ContextManager[Any]] | None = None,
            cancel: threading.Event | None = None) -> tuple[process.Outcome, str]:
        """The kernel process's outcome and the worker label it ran under; `running(worker)`
        is entered while it runs (in-flight displays); `cancel`, once set, ends it."""
        with self._placement() as (worker, env), (running(worker) if running else contextlib.nullcontext()):
            if env is not None:
                outcome = process.run("fitness.sandbox.worker", request, self.limits, workdir, on_message,
                                      extra_env=env, registry=self.processes, cancel=cancel)
            else:
                outcome = self._run_forked(request, workdir, on_message, cancel)
        return outcome, worker

    def _run_forked(self, request: dict[str, Any], workdir: Path, on_message: Callable[[dict[str, Any]], bool],
                    cancel: threading.Event | None) -> process.Outcome:
        """Run the kernel process from the fork server; spawn it if the server cannot start."""
        launcher = self._forkserver
        outcome = process.run("fitness.sandbox.worker", request, self.limits, workdir, on_message,
                              registry=self.processes, launcher=launcher, cancel=cancel)
        if outcome.spawn_error and launcher is not None:
            self._forkserver = None   # from now on every kernel process is spawned
            launcher.close()
            outcome = process.run("fitness.sandbox.worker", request, self.limits, workdir, on_message,
                                  registry=self.processes, cancel=cancel)
        return outcome

    def close(self) -> None:
        self.processes.kill_all()
        if self._forkserver is not None:
            self._forkserver.close()


HOSTNAME = socket.gethostname()


def review(source: str, backend: str, target: str, host: backends.NeuronHost | None,
           modules: KernelModules | None = None) -> tuple[Dialect | None, EvalResult | None]:
    """The static policy's verdict on a source (a module of `modules`' package, with its kernel
    libraries): its dialect, and the result when the source may not run (rejected, or a dialect
    the backend or target cannot run); None: judge it."""
    modules = modules or KernelModules()
    try:
        verdict = policy.review(source, guarded=backend == "simulator", **modules.policy_context())
    except SyntaxError as exc:
        return None, EvalResult(COMPILE_ERROR, policy.syntax_error_message(exc))
    if verdict.violations:
        return verdict.dialect, EvalResult(REJECTED, f"policy: {verdict.violations[0]}")
    refusal = (backends.dialect_refusal(backend, verdict.dialect, host)
               or backends.target_refusal(target, verdict.dialect))
    if not refusal and verdict.kernel_imports and backend != "simulator":
        refusal = (f"the kernel imports {verdict.kernel_imports[0]} (its package's or a kernel library's "
                   f"modules): such kernels run on the simulator backend")
    return verdict.dialect, (EvalResult(COMPILE_ERROR, refusal) if refusal else None)


def judge_cases(spec: ProblemSpec, source: str, cases: Callable[[], list[Case]], settings: EvalSettings,
                launcher: KernelLauncher, *, running: Callable[[str], ContextManager[Any]] | None = None,
                keep: Callable[[Path, list[str]], None] | None = None, stage: str = FULL,
                yardsticks: Sequence[Sequence[float]] | None = None) -> EvalResult:
    """Judge a source the policy accepted: the precision of its dtypes against the reference
    data of every case (`cases()`), then a sandboxed kernel process that runs it on each case
    while this process judges the outputs case by case, then latency and profile. `keep` gets
    the artifacts of an ok result (NEFF, trace) before its working folder is removed. The
    `stage` LATENCY stops after the shape-only trace (a backend that traces: the simulator).
    `yardsticks`: the baseline's error on each output of each case, which sets the tolerances
    (`tolerances`; None: the problem's own, as for the baseline itself). The local evaluator
    and a Ray task judge through this same function."""
    problem = load(spec)
    seeds = cases()
    if stage == LATENCY:
        seeds = seeds[:1]   # its shapes are every seed's
    data = seeds[0].data
    declared = [arrays.dtype_of(d) for d in data.expected_dtypes]
    limit = precision.floor([arrays.dtype_of(d) for d in data.input_dtypes],
                            precision.source_dtypes(problem.baseline_source))
    if launcher.backend != "simulator":   # no trace to read the dtypes from: the source's references
        downgraded = precision.downgrades(precision.source_dtypes(source), limit)
        if downgraded:
            return EvalResult(INCORRECT, _precision_message(downgraded[0], limit))
    workdir = Path(tempfile.mkdtemp(prefix=_scratch_prefix(KERNEL_PREFIX), dir=_work_root()))
    try:
        tolerance = tolerances(problem, declared, len(seeds), settings.rel_tol, yardsticks)
        request = {
            "source": source, "problem": [spec.name, list(spec.params), spec.suite_dir],
            "modules": kernel_modules(settings).to_json(),
            "backend": launcher.backend, "target": launcher.target,
            "options": launcher.options, "stage": stage,
            "outputs": [{"shape": list(shape), "dtype": arrays.dtype_name(d)}
                        for shape, d in zip(_shapes(data.expected), declared)],
        }

        def part(first: int, stop: int, folder: Path) -> tuple[_Judge, dict[str, Any]]:
            """The judge and the request of seeds [first, stop)."""
            cases = seeds[first:stop]
            judge = _Judge(problem, cases, tolerance[first:stop], declared, limit, folder, first=first,
                           total=len(seeds))
            return judge, dict(request, cases=[{"label": c.label, "inputs": c.data.request_inputs()} for c in cases])

        # The later seeds of a judgement take a second kernel process when a worker is idle
        # (a lone judgement: `eval`, a baseline, the few children latency first judges): from
        # the start, or from the seed after the running one when a worker frees up meanwhile
        # (the last judgement of a batch).
        splittable = stage == FULL and launcher.backend == "simulator" and len(seeds) > 1
        with launcher.slot():
            if splittable:
                result, judge, worker = _judge_split(part, len(seeds), workdir, launcher, running, settings.timeout_s)
            else:
                judge, whole = part(0, len(seeds), workdir)
                outcome, worker = launcher.run(whole, workdir, judge.on_message, running)
                result = judge.result(outcome, settings.timeout_s, stage)
        if result.ok and keep is not None and judge.artifacts:
            keep(workdir, judge.artifacts)
        result.worker = worker
        return result
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _judge_split(part: Callable[[int, int, Path], tuple["_Judge", dict[str, Any]]], seeds: int, workdir: Path,
                 launcher: KernelLauncher, running: Callable[[str], ContextManager[Any]] | None,
                 timeout_s: float) -> tuple[EvalResult, "_Judge", str]:
    """Judge the seeds in this thread's kernel process, and hand later seeds to a second one
    beside it when a worker is idle (`launcher.take_spare`): the later half from the start, or,
    when a worker frees up while this one runs, the later half of the seeds its process has not
    started; the first process is ended once the seeds before them are judged.
    (result, the first process's judge, worker). The verdict is the one of a single process:
    the first failing seed in seed order decides (an earlier seed's failure cancels the second
    process; a later seed's failure waits for the earlier seeds to pass), and both processes
    must have traced the same instruction stream."""
    cancel = threading.Event()
    later: dict[str, Any] = {}          # judge, folder, thread, outcome or error of the second

    def run_later(judge: _Judge, req: dict[str, Any]) -> None:
        try:
            later["outcome"] = launcher.run(req, judge.workdir, judge.on_message, running, cancel)[0]
        except BaseException as exc:  # noqa: BLE001 - raised in the judging thread below
            later["error"] = exc
        finally:
            launcher.give_spare()

    def hand_over(first_later: int) -> None:
        """Seeds [first_later, seeds) to a second process. The spare taken for it goes back when
        that process ends, or here if it cannot start (a lost share would shrink the pool)."""
        folder = None
        try:
            folder = Path(tempfile.mkdtemp(prefix=_scratch_prefix(KERNEL_PREFIX), dir=_work_root()))
            judge, req = part(first_later, seeds, folder)
            thread = threading.Thread(target=run_later, args=(judge, req), daemon=True,
                                      name=f"{threading.current_thread().name} (later seeds)")
            thread.start()
        except BaseException:
            if folder is not None:
                shutil.rmtree(folder, ignore_errors=True)
            launcher.give_spare()
            raise
        later.update(judge=judge, thread=thread)

    stop = seeds                        # the first process judges seeds [0, stop)
    if launcher.take_spare():
        stop = (seeds + 1) // 2
        hand_over(stop)

    def on_message(message: dict[str, Any]) -> bool:
        nonlocal stop
        if not earlier.on_message(message):
            cancel.set()   # an earlier seed failed: it decides, the later seeds are not needed
            return False
        if message.get("event") != "outputs":
            return True
        case = int(message["case"])
        if later and case + 1 >= stop:
            return False   # its share is judged; the second process has the rest
        # The process is on seed case + 1 now; the unstarted [case + 2, seeds) split in two.
        first_later = (seeds + case + 2) // 2
        if not later and case + 2 <= first_later < seeds and launcher.take_spare():
            stop = first_later
            hand_over(first_later)
        return True

    try:
        earlier, request = part(0, stop, workdir)
        outcome, worker = launcher.run(request, workdir, on_message, running)
        shared = bool(later) and earlier.failure is None and earlier.judged == stop
        if later and not shared:
            cancel.set()   # the first process failed or ended before its share was judged
    except BaseException:
        cancel.set()
        raise
    finally:
        if later:
            later["thread"].join()
            shutil.rmtree(later["judge"].workdir, ignore_errors=True)
    if not shared:
        return earlier.result(outcome, timeout_s, FULL), earlier, worker
    if "error" in later:
        raise later["error"]
    rest = later["judge"].result(later["outcome"], timeout_s, FULL)
    if rest.ok and later["judge"].traced != earlier.traced:
        return _traced_apart(rest), earlier, worker
    if rest.ok:
        rest.errors = earlier.errors + rest.errors   # the seeds in order: the first process's first
    return rest, earlier, worker


def tolerances(problem: Problem, dtypes: Sequence[np.dtype], cases: int, rel_tol: float,
               yardsticks: Sequence[Sequence[float]] | None) -> list[list[float]]:
    """The tolerance of each output of each case: `rel_tol` when set; else the baseline's error
    on the case as yardstick (gate.yardstick_tolerance) when `yardsticks` has one per output of
    every case; else the problem's own for the output's type."""
    if rel_tol:
        return [[rel_tol] * len(dtypes) for _ in range(cases)]
    usable = yardsticks is not None and len(yardsticks) == cases and all(len(y) == len(dtypes) for y in yardsticks)
    out = []
    for i in range(cases):
        yard = list(yardsticks[i]) if usable else [None] * len(dtypes)
        out.append([gate.yardstick_tolerance(problem.tolerance_for(d), problem.tolerance_floor(d), e)
                    for d, e in zip(dtypes, yard)])
    return out


def _traced_apart(result: EvalResult) -> EvalResult:
    """The verdict on a kernel whose two processes timed different traces (`result`'s figures kept)."""
    return EvalResult(COMPILE_ERROR, "two runs of the kernel on the same shapes traced different instruction "
                                     "streams; NKI fixes a kernel's instructions when it is traced",
                      latency_ms=result.latency_ms, profile=result.profile)


def below_bound(problem: Problem, result: EvalResult, target: str, backend: str = "simulator") -> EvalResult:
    """`result`, or a model error when a selectable or timed result (ok, not_judged) has a
    latency below the least a correct kernel can have (roofline.lower_bound; above 100% of
    peak): the performance model priced work the kernel did not pay for, or, measured on
    hardware, the problem's counts are wrong. The figure must not be selected; latency,
    profile and the result's identity stay for the report."""
    counts = problem.counts
    if counts is None or result.status not in (OK, NOT_JUDGED) or result.latency_ms is None:
        return result
    try:
        own = float(result.profile.get("hbm_read_bytes") or 0) + float(result.profile.get("hbm_write_bytes") or 0)
    except (TypeError, ValueError):
        own = 0.0
    bound = lower_bound(counts, own, target)
    if result.latency_ms >= bound.latency_ms:
        return result
    if backend == "simulator":
        what = (f"the estimated latency {result.latency_ms:.4g} ms is below {bound.latency_ms:.4g} ms, the time "
                f"{bound.why} takes: the performance model mispriced this kernel (a model error; please report it "
                "with the kernel)")
    else:
        what = (f"the measured latency {result.latency_ms:.4g} ms is below {bound.latency_ms:.4g} ms, the time "
                f"{bound.why} takes: the problem's roofline counts understate its work, or the kernel skips work "
                "its correctness seeds do not show (a model error; please report it with the kernel)")
    return dataclasses.replace(result, status=MODEL_ERROR, error=what, speedup=None, percent_of_peak=None, errors=[])


def internal_error(exc: Exception) -> EvalResult:
    """The result of an evaluation the evaluator itself failed (a bug must not end the run)."""
    return EvalResult(CRASHED, f"internal error of the evaluator: {type(exc).__name__}: {exc}")


class _Judge:
    """Judges the outputs a kernel process reports, seed by seed, in the engine process."""

    def __init__(self, problem: Problem, cases: list[Case], tolerances: list[list[float]], dtypes: list[np.dtype],
                 limit: precision.Floor, workdir: Path, *, first: int = 0, total: int | None = None) -> None:
        self.problem = problem
        self.cases = cases
        self.first = first               # the index of cases[0] among the judgement's seeds
        self.total = len(cases) if total is None else total
        self.tolerances = tolerances     # per case, per output
        self.errors: list[list[float]] = []   # per judged case, per output: the L2 relative errors
        self.dtypes = dtypes             # the dtype of each output a kernel must return
        self.limit = limit
        self.workdir = workdir
        self.judged = 0
        self.failure: tuple[str, str] | None = None
        self.done: dict[str, Any] | None = None
        self.artifacts: list[str] = []
        self.traced: tuple[float, dict[str, Any]] | None = None   # the shape-only trace's latency, profile

    def on_message(self, msg: dict[str, Any]) -> bool:
        event = msg.get("event")
        if event == "traced":
            if not self._precise(msg):
                return False
            self.traced = (float(msg["latency_ms"]), dict(msg.get("profile", {})))
            return True
        if event == "outputs":
            if not self._precise(msg):
                return False
            self.failure = self._judge(int(msg["case"]), [str(f) for f in msg["files"]], bool(msg["single"]))
            self.judged += 1
            return self.failure is None
        if event == "failed":
            self.failure = (str(msg["status"]), str(msg["message"]))
            return False
        if event == "done":
            self.done = msg
            self.artifacts = [str(a) for a in msg.get("artifacts", [])]
        return True

    def _precise(self, msg: dict[str, Any]) -> bool:
        """Whether the dtypes a message reports (if any) keep the problem's precision; else the
        failure is set."""
        uses = [precision.DtypeUse(str(d), int(line), str(what)) for d, line, what in msg.get("dtypes", [])]
        downgraded = precision.downgrades(uses, self.limit)
        if downgraded:
            self.failure = (INCORRECT, _precision_message(downgraded[0], self.limit))
        return not downgraded

    def _judge(self, index: int, files: list[str], single: bool) -> tuple[str, str] | None:
        case = self.cases[index]
        paths = [self.workdir / Path(f).name for f in files]
        try:
            outs = [arrays.load(p, mmap=True) for p in paths]
            expected = tuple(arrays.load(p, mmap=True) for p in case.data.expected)
            try:
                arranged = self.problem.from_kernel_outputs(outs[0] if single and outs else tuple(outs), expected)
            except (ValueError, TypeError, IndexError) as exc:
                return INCORRECT, f"{case.label}: {exc}"
            failure, errors = gate.judge_outputs(arranged, expected, self.tolerances[index], case.label, self.dtypes)
            if failure:
                return INCORRECT, failure
            self.errors.append(errors)
            return None
        except (OSError, ValueError) as exc:
            return INCORRECT, f"{case.label}: the kernel's outputs could not be read ({exc})"
        finally:
            for p in paths:
                p.unlink(missing_ok=True)

    def result(self, outcome: process.Outcome, timeout_s: float, stage: str = FULL) -> EvalResult:
        """The evaluation's result once the kernel process has ended. A kernel that failed after
        its shape-only trace was timed keeps that latency and profile (it was traced: a search's
        survivor tournaments count it as an entrant that never wins)."""
        failure = self._failure(outcome, timeout_s, stage)
        if failure is not None:
            status, message = failure
            latency, profile = self.traced if self.traced else (None, {})
            return EvalResult(status, message, latency_ms=latency, profile=profile)
        assert self.done is not None
        status = NOT_JUDGED if stage == LATENCY else OK
        return EvalResult(status, latency_ms=float(self.done["latency_ms"]), profile=dict(self.done.get("profile", {})),
                          errors=[list(e) for e in self.errors])

    def _failure(self, outcome: process.Outcome, timeout_s: float, stage: str) -> tuple[str, str] | None:
        if self.failure is not None:
            return self.failure
        progress = ("while tracing it shape-only" if stage == LATENCY
                    else f"after {self.first + self.judged} of {self.total} seeds")
        if outcome.timed_out:
            limit = round(max(outcome.limit_s, timeout_s), 1)   # stretched for a kernel expecting more work
            return TIMEOUT, f"the evaluation exceeded the time limit of {limit:g} s (wall clock), {progress}"
        if outcome.signal == signal.SIGXCPU:
            return TIMEOUT, f"the kernel process exceeded its CPU-time limit, {progress}"
        if self.done is None or (stage == FULL and self.judged < len(self.cases)):
            detail = outcome.stderr.strip().splitlines()[-1:] if outcome.stderr.strip() else []
            tail = f"; last output: {detail[0][:300]}" if detail else ""
            return CRASHED, f"{outcome.describe_exit()} {progress}{tail}"
        return None


def reference_root(settings: EvalSettings, run_dir: Path | None) -> Path | None:
    """Where reference data is kept across evaluators: the shared cache folder when set, else
    the run's cache folder, under the version of the code that computes it (None: no folder)."""
    if settings.cache_dir:
        base = Path(settings.cache_dir)
    elif run_dir:
        base = run_dir / "cache"
    else:
        return None
    return base / "references" / reference_version()


def heldout_draws(problem: Problem, seeds: Sequence[int]) -> list[tuple[int, str]]:
    """The held-out seeds with their input families: the problem's own families first, in
    turn, then its standard distribution, so that two held-out seeds already leave it twice."""
    cycle = [f.name for f in problem.families] + [STANDARD]
    return [(seed, cycle[i % len(cycle)]) for i, seed in enumerate(seeds)]


def _unhandled_source(spec: ProblemSpec, exc: Exception, backend: str, target: str) -> EvalResult:
    """The result of a source whose handling (normalization, cache key, id) raised: a
    compile error naming why, so that the rest of its batch is still evaluated."""
    text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return EvalResult(COMPILE_ERROR, f"the kernel source cannot be processed ({text[:300]})",
                      problem=spec.label(), backend=backend, target=target)


KERNEL_PREFIX = "accelopt-evo-kernel-"


def _scratch_prefix(kind: str) -> str:
    """Scratch folder names carry the owning process id, so that folders left by a killed run
    can be told from those of a live one."""
    return f"{kind}{os.getpid()}-"


def sweep_orphans() -> list[Path]:
    """Removes scratch folders whose owning process is gone (a run killed with SIGKILL leaves
    them behind, and in /dev/shm they hold memory). Returns what it removed."""
    removed = []
    for root in {_work_root() or tempfile.gettempdir(), tempfile.gettempdir()}:
        for path in Path(root).glob("accelopt-evo-*"):
            pid = path.name.removeprefix(KERNEL_PREFIX).removeprefix("accelopt-evo-").split("-", 1)[0]
            try:
                if not pid.isdigit() or path.stat().st_uid != os.getuid() or _alive(int(pid)):
                    continue
            except OSError:
                continue
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _work_root() -> str | None:
    """Where kernel processes get their working folders: /dev/shm when it is a writable
    memory file system (kernel outputs pass through it, up to hundreds of MB per seed),
    else the default temporary folder."""
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() and os.access(shm, os.W_OK | os.X_OK) else None


def _precision_message(use: precision.DtypeUse, limit: precision.Floor) -> str:
    return (f"precision downgrade: {use.describe()} is narrower than {limit.dtype}, the narrowest type "
            f"{limit.why} use (kernels may not compute in less precision than the problem)")


def _shapes(paths: Sequence[str]) -> list[tuple[int, ...]]:
    """The shapes of .npy files, read from their headers."""
    return [arrays.load(p, mmap=True).shape for p in paths]
