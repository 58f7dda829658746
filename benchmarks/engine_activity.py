"""Engine time per kernel, trn1's profile against the performance model.

    python benchmarks/engine_activity.py [--measurements ../shared/nkibench/trn1_measurements.json]
                                         [--suite-dir DIR] [--trace-cache DIR] [--json out.json]

neuron-profile reports each compute engine's active time as a fraction of the kernel's
latency; times the latency, that is milliseconds of work on the engine, which the model
predicts as the engine's busy time (held-out fold parameters, as `model-check` uses). The
latency error says how long the kernel runs; this says whether the model has the right work
on each engine, which tells a wrong instruction cost from a wrong overlap. The NKIBench file
also carries the profile of AccelOpt's best demo-run kernel of each problem (no source: only
its figures), printed beside the baseline's.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from fitness.simulator.perf.check import ACTIVE, model_check  # noqa: E402
from fitness.simulator.perf.model import ENGINE_NAMES  # noqa: E402

DEFAULT = REPO.parent / "shared" / "nkibench" / "trn1_measurements.json"


def engine_ms(profile: dict, latency_ms: float) -> dict[str, float]:
    """Milliseconds each compute engine was active, from a neuron-profile record."""
    return {ENGINE_NAMES[e]: float(profile.get(key) or 0.0) * latency_ms for e, key in ACTIVE.items()}


def demo_profiles(measurements: Path) -> dict[str, dict]:
    """The best demo-run profile of each NKIBench case, by kernel file stem (absent: {})."""
    data = json.loads(measurements.read_text())
    out = {}
    for case in data.get("cases", {}).values():
        demo = (case.get("accelopt_best_demo_run") or {}).get("profile")
        if demo:
            out[Path(case["kernel"]).stem] = demo
    return out


def rows(measurements: Path, suite_dir: str | None, trace_cache: str | None) -> list[dict]:
    """Per case: latencies, trn1's and the model's engine milliseconds, and the demo run's."""
    result = model_check(measurements, suite_dir, trace_cache=trace_cache)
    demos = demo_profiles(measurements)
    out = []
    for r in result["cases"]:
        measured = {k: v["measured"] for k, v in r["counters"].items()}
        row = {"name": r["name"], "problem": r["problem"], "measured_ms": r["measured_ms"],
               "predicted_ms": r["predicted_ms"], "engine_ms": engine_ms(measured, r["measured_ms"]),
               "model_ms": {ENGINE_NAMES[e]: r["busy_ms"][ENGINE_NAMES[e]] for e in ACTIVE}}
        demo = demos.get(r["kernel"])   # model-check's kernel is the file stem
        if demo:
            row["demo_ms"] = demo["latency"]
            row["demo_engine_ms"] = engine_ms(demo, demo["latency"])
        out.append(row)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--measurements", type=Path, default=DEFAULT)
    ap.add_argument("--suite-dir", default=None)
    ap.add_argument("--trace-cache", default=None)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    table = rows(args.measurements, args.suite_dir, args.trace_cache)
    engines = [ENGINE_NAMES[e] for e in ACTIVE]
    print(f"{'case':28s} {'meas ms':>8} {'pred ms':>8}  " + "  ".join(f"{e + ' trn1/model':>20}" for e in engines)
          + "  | best demo run: ms, " + ", ".join(engines))
    for r in table:
        cells = "  ".join(f"{r['engine_ms'][e]:9.3f}/{r['model_ms'][e]:<10.3f}" for e in engines)
        demo = ""
        if "demo_ms" in r:
            demo = f"  | {r['demo_ms']:.3f}: " + ", ".join(f"{r['demo_engine_ms'][e]:.3f}" for e in engines)
        print(f"{r['problem'][:28]:28s} {r['measured_ms']:8.3f} {r['predicted_ms']:8.3f}  {cells}{demo}")
    for e in engines:
        active = [r for r in table if r["engine_ms"][e] > 0.05]
        ratios = [r["model_ms"][e] / r["engine_ms"][e] for r in active if r["model_ms"][e] > 0]
        if not active:
            continue
        line = f"{e}: {len(active)} kernels active over 0.05 ms on trn1, {len(active) - len(ratios)} idle in the model"
        if ratios:
            logs = [abs(math.log(x)) for x in ratios]
            line += (f"; model / trn1 engine time median {statistics.median(ratios):.2f}, median |log| "
                     f"{statistics.median(logs):.2f}, range {min(ratios):.2f}-{max(ratios):.2f}")
        print(line)
    if args.json:
        args.json.write_text(json.dumps(table, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
