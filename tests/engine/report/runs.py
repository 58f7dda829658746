"""Run folders for the report tests: short real runs of the engine on a deterministic evaluator."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Sequence

from accelopt_evo.run import config as cfgmod
from accelopt_evo.run.folder import RunFolder
from accelopt_evo.runner import start_run

from fakes import KnobEvaluator


def make_run(out: Path, gens: int = 3, problems: Sequence[str] = ("silu",), run_id: str = "r", seed: int = 0,
             report: bool = True, sets: Sequence[str] = (),
             evaluator: Callable[[], Any] = lambda: KnobEvaluator(backend="simulator", failures=True)) -> RunFolder:
    """A finished run of `gens` generations at shape tiny with the offline operators (`sets`:
    more settings, as --set takes them)."""
    cfg = cfgmod.resolve(sets=[f"run.gens={gens}", f"run.out={json.dumps(str(out))}", "run.shape=tiny",
                               f"run.problems={json.dumps(list(problems))}", "population.size=6",
                               "population.offspring=6", "variation.crossover_prob=0.4",
                               "variation.mutation_prob=0.6", f"run.seed={seed}",
                               f"run.report={json.dumps(report)}", *sets])
    start_run(cfg, run_id, progress=False, log=lambda _msg: None,
              evaluator_factory=lambda _cfg, _folder: evaluator())
    return RunFolder(out / run_id)
