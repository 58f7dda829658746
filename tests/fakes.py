"""A deterministic stand-in for the evaluation service, for fast tests of the engine, the run
folder and reports (tests of the real evaluator live in tests/fitness).

Latency is a function of a kernel's `# tune:` knobs: wider tiles are faster, and a silu compute
chunk wider than its load tile is incorrect. With `failures=True` a few other kernels, picked by
their id, fail to compile, time out or are rejected, so that every outcome shows up in a short
run.
`submit` runs an evaluation in a background thread (after `delay_s`), as the evaluation
service's does for the asynchronous engine; a `Gauge` shared with other fakes records how much
work was in flight at once.
"""

from __future__ import annotations

import math
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Sequence

from fitness.correctness.normalize import kernel_id
from fitness.result import COMPILE_ERROR, INCORRECT, NOT_JUDGED, OK, REJECTED, TIMEOUT, EvalResult
from nkibench import registry
from operators.knobs import find_knobs

PEAK_MS = 0.4   # the fake roofline peak latency of every problem


class Gauge:
    """Counts work in flight (`with gauge.held(label):`) and remembers the most at once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.running: dict[int, str] = {}
        self.peak = 0
        self.entered = 0

    def held(self, label: str):
        gauge = self

        class _Held:
            def __enter__(self):
                with gauge._lock:
                    gauge.entered += 1
                    self.key = gauge.entered
                    gauge.running[self.key] = label
                    gauge.peak = max(gauge.peak, len(gauge.running))

            def __exit__(self, *exc):
                with gauge._lock:
                    del gauge.running[self.key]

        return _Held()


class KnobEvaluator:
    def __init__(self, backend: str = "fake", failures: bool = False, delay_s: float = 0.0,
                 gauge: Gauge | None = None) -> None:
        self.backend = backend
        self.failures = failures
        self.backend_choice = (backend, "a test double of the evaluation service")
        self.evaluated: list[str] = []   # kernel ids, in evaluation order
        self.delay_s = delay_s
        self.gauge = gauge or Gauge()
        self._pool: ThreadPoolExecutor | None = None

    def __enter__(self) -> "KnobEvaluator":
        return self

    def __exit__(self, *exc) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)

    def submit(self, spec, source: str) -> Future:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(16, thread_name_prefix="fake-eval")
        return self._pool.submit(self._slowly, spec, source)

    def _slowly(self, spec, source: str) -> EvalResult:
        with self.gauge.held(f"{kernel_id(source)[:8]} on slot {threading.get_ident() % 100}"):
            time.sleep(self.delay_s)
            return self.evaluate(spec, source)

    def in_flight(self) -> list[str]:
        return sorted(self.gauge.running.values())

    @staticmethod
    def latency(source: str) -> float | None:
        knobs = {k.name: k.value for k in find_knobs(source).values()}
        if knobs.get("COMPUTE_N", 0) > knobs.get("LOAD_N", 1 << 30):
            return None
        return 0.5 + sum(1 / math.log2(2 * v) for v in knobs.values())

    def _result(self, spec, source: str) -> EvalResult:
        baseline = registry.load(spec).baseline_source
        kid = kernel_id(source)
        common = dict(backend=self.backend, target="trn1", kernel_id=kid, problem=spec.label(), seconds=0.01)
        lat = self.latency(source)
        if lat is None:
            return EvalResult(INCORRECT, "output 0 (seed 0): never written", **common)
        failure = {0: COMPILE_ERROR, 1: TIMEOUT, 2: REJECTED}.get(int(kid, 16) % 9)
        if self.failures and failure and source != baseline:
            return EvalResult(failure, f"{failure} in the test double", **common)
        return EvalResult(OK, latency_ms=lat, speedup=self.latency(baseline) / lat, percent_of_peak=100 * PEAK_MS / lat,
                          profile={"bottleneck": "fake"}, **common)

    def evaluate_many(self, spec, sources: Sequence[str], progress: bool | str = False) -> list[EvalResult]:
        self.evaluated.extend(kernel_id(s) for s in sources)
        return [self._result(spec, s) for s in sources]

    def evaluate(self, spec, source: str) -> EvalResult:
        return self.evaluate_many(spec, [source])[0]

    def baseline(self, spec) -> EvalResult:
        return self._result(spec, registry.load(spec).baseline_source)


class TracingKnobEvaluator(KnobEvaluator):
    """KnobEvaluator that, like the simulator, times a kernel before judging it
    (`latencies`): a kernel computing beyond what it loads (COMPUTE_N > LOAD_N) is timed like
    any other and found incorrect only when judged in full; `judged` lists the kernel ids
    judged in full."""

    traces = True

    def __init__(self, **kwargs) -> None:
        super().__init__(failures=True, **kwargs)
        self.judged: list[str] = []

    def _result(self, spec, source: str) -> EvalResult:
        result = super()._result(spec, source)
        if result.status == INCORRECT:   # failed after its trace was timed: it keeps the latency
            knobs = {k.name: k.value for k in find_knobs(source).values()}
            result.latency_ms = 0.5 + sum(1 / math.log2(2 * v) for v in knobs.values())
        return result

    def evaluate_many(self, spec, sources: Sequence[str], progress: bool | str = False) -> list[EvalResult]:
        self.judged.extend(kernel_id(s) for s in sources)
        return super().evaluate_many(spec, sources, progress)

    def submit_latency(self, spec, source: str) -> Future:
        out: Future = Future()
        out.set_result(self.latencies(spec, [source])[0])
        return out

    def latencies(self, spec, sources: Sequence[str], progress: bool | str = False) -> list[EvalResult]:
        base = self.latency(registry.load(spec).baseline_source)
        out = []
        for source in sources:
            result = self._result(spec, source)
            if result.latency_ms is not None:
                result.status, result.error, result.speedup = NOT_JUDGED, "", base / result.latency_ms
            out.append(result)
        return out


class ProfilingEvaluator(TracingKnobEvaluator):
    """TracingKnobEvaluator whose profile says which engine is busiest and the DMA's share,
    from the kernel's knobs (so that kernels fall in several MAP-Elites cells)."""

    def _result(self, spec, source: str) -> EvalResult:
        result = super()._result(spec, source)
        knobs = {k.name: k.value for k in find_knobs(source).values()}
        load, compute = knobs.get("LOAD_N", 512), knobs.get("COMPUTE_N", 512)
        result.profile = {**result.profile, **engine_profile(vector=compute / 2048, dma=load / 4096)}
        return result


def engine_profile(vector: float, dma: float, tensor: float = 0.0) -> dict:
    """A profile's engine times (descriptors.py): vector, DMA and tensor active, the rest idle."""
    return {"tensor_engine_active_time_percent": tensor, "vector_engine_active_time_percent": vector,
            "scalar_engine_active_time_percent": 0.0, "gpsimd_engine_active_time_percent": 0.0,
            "dma_active_time_percent": dma, "hbm_read_bytes": 100, "hbm_write_bytes": 100}
