"""`measure`: kernels measured on this Trainium host, written as a measurements file in the
variants format (`fitness.simulator.perf.check.variants_document`) that `calibrate` and
`model-check` read: per kernel its latency (mean of the timed runs) and profile counters.

Only a Trainium host measures; elsewhere the command ends with one line saying why.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any, Callable, Sequence

from accelopt_evo.errors import UserError
from accelopt_evo.run.config import Config
from accelopt_evo.run.files import write_text_atomic
from accelopt_evo.runner import load_problems, open_evaluator, problem_specs
from fitness import backends
from fitness.simulator.perf.check import variants_document
from nkibench import registry

ABOUT = ("Latencies of kernels measured on Trainium by `python -m accelopt_evo measure` (trainium backend: "
         "warm-ups, 10 timed runs, series retried while their spread is over 1%); profile counters of the "
         "last timed run under neuron-profile names.")


def _numbers(profile: dict[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in profile.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def measure(kernels: Sequence[str], problem: str, shape: str | None, out: Path,
            resolve: Callable[[dict[str, Any]], Config], evaluator_factory: Callable | None = None) -> Path:
    """Measure each kernel file on `problem` (at `shape`) and write `out`; returns its path.
    `resolve(overrides)` gives the configuration; `evaluator_factory(cfg, None)` the
    evaluation service (default: the run's, runner.open_evaluator)."""
    host = backends.probe_neuron()
    try:
        backends.choose("trainium", host, host.target or "trn1")
    except backends.BackendError as exc:
        raise UserError(f"measure runs on a Trainium host only: {exc}") from None
    if problem not in registry.builtin_names():
        raise UserError(f"measure takes an NKIBench problem (its reference module judges the points), not '{problem}'")
    sources = []
    for name in kernels:
        try:
            sources.append(Path(name).read_text())
        except OSError as exc:
            raise UserError(f"cannot read kernel file '{name}': {exc.strerror or exc}") from None
    overrides: dict[str, Any] = {"run": {"problems": [problem]},
                                 "evaluation": {"backend": "trainium", "target": host.target}}
    if shape:
        overrides["run"]["shape"] = shape
    cfg = resolve(overrides)
    (prob,) = load_problems(problem_specs(cfg))
    with (evaluator_factory or open_evaluator)(cfg, None) as evaluator:
        results = [evaluator.evaluate(prob.spec, source) for source in sources]
    points = []
    for name, result in zip(kernels, results):
        if not result.ok:
            print(f"{name}: {result.status}: {result.error} (left out)", file=sys.stderr)
            continue
        profile = _numbers(result.profile)
        points.append({
            "kernel": os.path.relpath(Path(name).resolve(), out.resolve().parent), "problem": problem,
            "shape": dict(prob.spec.params), "latency_ms": float(result.latency_ms or 0.0), "profile": profile,
            "note": f"spread {100 * profile.get('rel_diffs', 0.0):.2f}% over the timed runs; "
                    f"{result.instance_type}, {result.sdk_version}"})
    if not points:
        raise UserError("no kernel ran correctly on the device; no measurements written")
    source = f"{host.instance_type} ({host.target}), {host.sdk_version}, {host.profiler}"
    write_text_atomic(out, json.dumps(variants_document(host.target, ABOUT, source, points), indent=1) + "\n")
    return out
