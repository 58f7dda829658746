"""Throughput of the evaluation service on this machine: evaluations per minute of the pool,
cache-hit time, and the start-up cost of a kernel process (fork server vs a new interpreter).

    python benchmarks/evaluation.py --shape small --count 24
    python benchmarks/evaluation.py --shape paper --count 8

Every kernel of the batch is the problem's baseline plus a distinct unused constant, so all
do the same work and none is a cache hit. The gate runs the configured seeds plus the
held-out ones (default 5 + 2), as a run does. Results go to benchmarks/out/ as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from fitness.references import ReferenceStore
from fitness.sandbox import process
from fitness.sandbox.forkserver import ForkServer
from fitness.service import FORK_PRELOAD, Evaluator
from fitness.settings import EvalSettings
from nkibench.registry import load, make_spec


def startup_seconds(spec, launcher, repeats: int, workdir: Path) -> list[float]:
    """Seconds from asking for a kernel process until it reports `ready` (imports done, guard on)."""
    refs = ReferenceStore(workdir / "refs").ensure(spec, [0])
    request = {"source": load(spec).baseline_source, "problem": [spec.name, list(spec.params), spec.suite_dir],
               "backend": "simulator", "target": "trn1", "options": {},
               "cases": [{"label": "seed 0", "inputs": refs[0].request_inputs()}]}
    times = []
    for i in range(repeats):
        run_dir = Path(tempfile.mkdtemp(dir=workdir, prefix="start-"))
        t0 = time.monotonic()
        ready: list[float] = []

        def on(msg, t0=t0, ready=ready):
            if msg.get("event") == "ready":
                ready.append(time.monotonic() - t0)
            return True

        process.run("fitness.sandbox.worker", request, process.Limits(300, 8192), run_dir, on, launcher=launcher)
        times.extend(ready)
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problem", default="silu")
    parser.add_argument("--shape", default="small")
    parser.add_argument("--count", type=int, default=24, help="distinct kernels in the batch")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--heldout", type=int, default=2)
    parser.add_argument("--startup-repeats", type=int, default=5)
    parser.add_argument("--out", default=str(Path(__file__).parent / "out"))
    args = parser.parse_args()

    spec = make_spec(args.problem, args.shape)
    settings = EvalSettings(backend="simulator", workers=args.workers,
                            heldout_seeds=tuple(1000 + i for i in range(args.heldout)))
    base_source = load(spec).baseline_source
    batch = [f"{base_source}\nVARIANT = {i}\n" for i in range(args.count)]
    report: dict = {"problem": spec.label(), "workers": args.workers, "cpus": os.cpu_count(),
                    "seeds": len(settings.seeds) + len(settings.heldout_seeds), "count": args.count,
                    "load_average_before": os.getloadavg()}
    with tempfile.TemporaryDirectory(prefix="accelopt-evo-bench-") as tmp:
        run_dir = Path(tmp) / "run"
        with Evaluator(settings, run_dir=run_dir) as ev:
            t0 = time.monotonic()
            base = ev.baseline(spec)
            report["setup_s"] = time.monotonic() - t0   # references of every seed + baseline
            assert base.ok, base.error
            t0 = time.monotonic()
            results = ev.evaluate_many(spec, batch, progress="benchmark")
            wall = time.monotonic() - t0
            assert all(r.ok for r in results), [r.error for r in results if not r.ok][:1]
            report.update(batch_wall_s=wall, evaluations_per_minute=args.count / wall * 60,
                          mean_evaluation_s=statistics.fmean(r.seconds for r in results))
            t0 = time.monotonic()
            again = ev.evaluate_many(spec, batch)
            report["cached_batch_wall_s"] = time.monotonic() - t0
            assert all(r.cached for r in again)
        with Evaluator(settings, run_dir=run_dir) as fresh:   # hits from the run folder on disk
            t0 = time.monotonic()
            hit = fresh.evaluate(spec, batch[0])
            report["cache_hit_from_disk_s"] = time.monotonic() - t0
            assert hit.cached
        server = ForkServer(FORK_PRELOAD, Path(tmp))
        try:
            startup_seconds(spec, server, 1, Path(tmp))       # the server's own start is not per evaluation
            forked = startup_seconds(spec, server, args.startup_repeats, Path(tmp))
        finally:
            server.close()
        spawned = startup_seconds(spec, None, args.startup_repeats, Path(tmp))
        report.update(startup_forked_median_s=statistics.median(forked),
                      startup_spawned_median_s=statistics.median(spawned))
    report["load_average_after"] = os.getloadavg()

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"evaluation-{args.problem}-{args.shape}.json"
    path.write_text(json.dumps(report, indent=2) + "\n")
    print(f"{spec.label()}: {report['evaluations_per_minute']:.1f} evaluations/min with {args.workers} workers "
          f"({report['seeds']} seeds each, {args.count} kernels in {report['batch_wall_s']:.1f} s; "
          f"setup {report['setup_s']:.1f} s)")
    print(f"cache: batch of {args.count} hits in {report['cached_batch_wall_s'] * 1e3:.1f} ms; "
          f"one hit from disk in a new evaluator {report['cache_hit_from_disk_s'] * 1e3:.1f} ms")
    print(f"kernel process ready after {report['startup_forked_median_s'] * 1e3:.0f} ms forked vs "
          f"{report['startup_spawned_median_s'] * 1e3:.0f} ms spawned (median of {args.startup_repeats})")
    print(f"load average before/after: {report['load_average_before'][0]:.1f} / {report['load_average_after'][0]:.1f}"
          f" on {report['cpus']} CPUs; written to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
