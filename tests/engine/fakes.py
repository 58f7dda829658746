"""A deterministic stand-in for the evaluation service, for fast tests of the engine logic.

Latency is a function of the silu baseline's knobs: wider loads are faster, and a compute
chunk wider than the load tile leaves the output unwritten (status incorrect), like the real
kernel does.
"""

from __future__ import annotations

from typing import Sequence

from fitness.normalize import kernel_id
from fitness.result import INCORRECT, OK, EvalResult
from nkibench import registry
from operators.knobs import find_knobs


class KnobEvaluator:
    backend_choice = ("fake", "a test double of the evaluation service")

    def __init__(self, *_args, **_kwargs) -> None:
        self.evaluated: list[str] = []   # kernel ids, in evaluation order

    def __enter__(self) -> "KnobEvaluator":
        return self

    def __exit__(self, *exc) -> None:
        pass

    @staticmethod
    def latency(source: str) -> float | None:
        knobs = {k.name: k.value for k in find_knobs(source).values()}
        load, comp = knobs.get("LOAD_N", 512), knobs.get("COMPUTE_N", 512)
        if comp > load:
            return None
        return 0.6 + 0.4 * 512 / load + 0.05 * comp / 512

    def _result(self, spec, source: str) -> EvalResult:
        base = self.latency(registry.load(spec).baseline_source)
        lat = self.latency(source)
        kid = kernel_id(source)
        if lat is None:
            return EvalResult(INCORRECT, "output 0 (seed 0): never written", backend="fake", target="trn1",
                              kernel_id=kid, problem=spec.label())
        peak = 0.5
        return EvalResult(OK, latency_ms=lat, speedup=base / lat, percent_of_peak=100 * peak / lat,
                          profile={"bottleneck": "fake"}, backend="fake", target="trn1", kernel_id=kid,
                          problem=spec.label())

    def evaluate_many(self, spec, sources: Sequence[str], progress: bool | str = False) -> list[EvalResult]:
        self.evaluated.extend(kernel_id(s) for s in sources)
        return [self._result(spec, s) for s in sources]

    def evaluate(self, spec, source: str) -> EvalResult:
        return self.evaluate_many(spec, [source])[0]

    def baseline(self, spec) -> EvalResult:
        return self._result(spec, registry.load(spec).baseline_source)
