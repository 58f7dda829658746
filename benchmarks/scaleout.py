"""Evaluations per minute of the local executor (process pool) and of the Ray executor (tasks
on a local Ray instance) on this machine, for the same batch of distinct kernels.

    python benchmarks/scaleout.py --shape tiny --count 24
    python benchmarks/scaleout.py --shape small --count 24 --workers 2

Every kernel is the problem's baseline plus a distinct unused constant, so all do the same work
and none is a cache hit. Each executor first warms up (reference data, the baseline, and one
kernel per worker, so that fork servers and Ray workers are running), then evaluates `--rounds`
batches of new kernels; the median batch counts.
The Ray instance's start-up is reported separately. Results go to benchmarks/out/ as JSON.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from fitness.executor import open_evaluator
from fitness.settings import EvalSettings
from nkibench.registry import load, make_spec


def measure(settings: EvalSettings, spec, warmup: list[str], batches: list[list[str]], run_dir: Path) -> dict:
    t0 = time.monotonic()
    ev = open_evaluator(settings, run_dir=run_dir)
    opened = time.monotonic() - t0
    try:
        t0 = time.monotonic()
        base = ev.baseline(spec)
        assert base.ok, base.error
        warm = ev.evaluate_many(spec, warmup)
        assert all(r.ok for r in warm), [r.error for r in warm if not r.ok][:1]
        warmup_s = time.monotonic() - t0
        walls, workers = [], set()
        for batch in batches:
            t0 = time.monotonic()
            results = ev.evaluate_many(spec, batch)
            walls.append(time.monotonic() - t0)
            assert all(r.ok and not r.cached for r in results), [r.error for r in results if not r.ok][:1]
            workers.update(r.worker for r in results)
    finally:
        closing = time.monotonic()
        ev.close()
    wall = statistics.median(walls)
    return {"open_s": opened, "warmup_s": warmup_s, "batch_wall_s": walls, "median_batch_wall_s": wall,
            "evaluations_per_minute": len(batches[0]) / wall * 60, "workers_seen": sorted(workers),
            "close_s": time.monotonic() - closing, "latency_ms": results[0].latency_ms}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problem", default="silu")
    parser.add_argument("--shape", default="tiny")
    parser.add_argument("--count", type=int, default=24, help="distinct kernels in the batch")
    parser.add_argument("--workers", type=int, default=2, help="evaluation.workers (the Ray instance's CPUs)")
    parser.add_argument("--heldout", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3, help="batches per executor (the median counts)")
    parser.add_argument("--out", default=str(Path(__file__).parent / "out"))
    args = parser.parse_args()

    spec = make_spec(args.problem, args.shape)
    local = EvalSettings(backend="simulator", workers=args.workers,
                         heldout_seeds=tuple(1000 + i for i in range(args.heldout)))
    base_source = load(spec).baseline_source
    warmup = [f"{base_source}\nWARMUP = {i}\n" for i in range(args.workers)]
    batches = [[f"{base_source}\nVARIANT = {r * args.count + i}\n" for i in range(args.count)]
               for r in range(args.rounds)]
    report: dict = {"problem": spec.label(), "workers": args.workers, "cpus": os.cpu_count(),
                    "seeds": len(local.seeds) + len(local.heldout_seeds), "count": args.count,
                    "load_average_before": os.getloadavg()}
    with tempfile.TemporaryDirectory(prefix="accelopt-evo-bench-") as tmp:
        for executor in ("local", "ray"):   # each in its own run folder: no shared cache
            settings = dataclasses.replace(local, executor=executor)
            report[executor] = measure(settings, spec, warmup, batches, Path(tmp) / executor)
    report["load_average_after"] = os.getloadavg()
    assert report["local"]["latency_ms"] == report["ray"]["latency_ms"], "the executors disagree"

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"scaleout-{args.problem}-{args.shape}.json"
    path.write_text(json.dumps(report, indent=2) + "\n")
    print(f"{spec.label()}: {args.count} distinct kernels, {report['seeds']} seeds each, {args.workers} workers "
          f"on {report['cpus']} CPUs")
    for executor in ("local", "ray"):
        r = report[executor]
        walls = ", ".join(f"{w:.1f}" for w in r["batch_wall_s"])
        print(f"  {executor:5s}: {r['evaluations_per_minute']:6.1f} evaluations/min (median of batches of {walls} s), "
              f"start-up {r['open_s']:.1f} s, warm-up {r['warmup_s']:.1f} s, close {r['close_s']:.1f} s; "
              f"workers {', '.join(r['workers_seen'])}")
    print(f"load average before/after: {report['load_average_before'][0]:.1f} / {report['load_average_after'][0]:.1f}"
          f"; written to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
