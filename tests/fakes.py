"""A deterministic stand-in for the evaluation service, for fast tests of the engine, the run
folder and reports (tests of the real evaluator live in tests/fitness).

Latency is a function of a kernel's `# tune:` knobs: wider tiles are faster, and a silu compute
chunk wider than its load tile is incorrect. With `failures=True` a few other kernels, picked by
their id, fail to compile, time out or are rejected, so that every outcome shows up in a short
run.
"""

from __future__ import annotations

import math
from typing import Sequence

from fitness.normalize import kernel_id
from fitness.result import COMPILE_ERROR, INCORRECT, OK, REJECTED, TIMEOUT, EvalResult
from nkibench import registry
from operators.knobs import find_knobs

PEAK_MS = 0.4   # the fake roofline peak latency of every problem


class KnobEvaluator:
    def __init__(self, backend: str = "fake", failures: bool = False) -> None:
        self.backend = backend
        self.failures = failures
        self.backend_choice = (backend, "a test double of the evaluation service")
        self.evaluated: list[str] = []   # kernel ids, in evaluation order

    def __enter__(self) -> "KnobEvaluator":
        return self

    def __exit__(self, *exc) -> None:
        pass

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
