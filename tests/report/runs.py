"""Run folders for the report tests: short real runs of the engine on a deterministic evaluator."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Sequence

from accelopt_evo import config as cfgmod
from accelopt_evo.runfolder import RunFolder
from accelopt_evo.runner import start_run
from fitness.normalize import kernel_id
from fitness.result import COMPILE_ERROR, INCORRECT, OK, REJECTED, TIMEOUT, EvalResult
from nkibench import registry
from operators.knobs import find_knobs

PEAK_MS = 0.4   # the fake roofline peak latency of every problem


class SimulatedKnobEvaluator:
    """Deterministic stand-in for the evaluation service that labels its figures as the simulator's.

    Latency falls as the `# tune:` knobs grow; a silu compute chunk wider than its load tile is
    incorrect (as in the real kernel); a few other kernels, picked by their id, fail to compile,
    time out or are rejected, so that every outcome shows up in a short run."""

    backend_choice = ("simulator", "a test double of the evaluation service")

    def __init__(self, *_args, **_kwargs) -> None:
        self.baselines: set[str] = set()

    def __enter__(self) -> "SimulatedKnobEvaluator":
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
        common = dict(backend="simulator", target="trn1", kernel_id=kid, problem=spec.label(), seconds=0.01)
        lat = self.latency(source)
        failure = None if source == baseline else {0: COMPILE_ERROR, 1: TIMEOUT, 2: REJECTED}.get(int(kid, 16) % 9)
        if lat is None:
            return EvalResult(INCORRECT, "output 0 (seed 0): never written", **common)
        if failure:
            return EvalResult(failure, f"{failure} in the test double", **common)
        return EvalResult(OK, latency_ms=lat, speedup=self.latency(baseline) / lat, percent_of_peak=100 * PEAK_MS / lat,
                          profile={"bottleneck": "fake"}, **common)

    def evaluate_many(self, spec, sources: Sequence[str], progress: bool | str = False) -> list[EvalResult]:
        return [self._result(spec, s) for s in sources]

    def baseline(self, spec) -> EvalResult:
        return self._result(spec, registry.load(spec).baseline_source)


def make_run(out: Path, gens: int = 3, problems: Sequence[str] = ("silu",), run_id: str = "r") -> RunFolder:
    """A finished run of `gens` generations at shape tiny with the offline operators."""
    cfg = cfgmod.resolve(sets=[f"run.gens={gens}", f"run.out={json.dumps(str(out))}", "run.shape=tiny",
                               f"run.problems={json.dumps(list(problems))}", "population.size=6",
                               "population.offspring=6", "variation.crossover_prob=0.4",
                               "variation.mutation_prob=0.6"])
    start_run(cfg, run_id, progress=False, log=lambda _msg: None,
              evaluator_factory=lambda _cfg, _folder: SimulatedKnobEvaluator())
    return RunFolder(out / run_id)
