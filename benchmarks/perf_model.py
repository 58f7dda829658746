"""Benchmark of the Trainium performance model on the official NKIBench kernels.

For every kernel: trace it shape-only with the emulator (not timed), then time
`fitness.simulator.perf.estimate` on the trace (wall and CPU seconds, best of --repeat).
Prints one row per kernel: instructions, model seconds, predicted latency (an estimate
for the named target) and the measured trn1 latency when the measurements file has it.

    python benchmarks/perf_model.py [--suite-dir ../shared/nkibench] [--kernels lora gqa_full ...]
                                    [--target trn1] [--repeat 1] [--json results.json]

Target: the model runs in at most 2 s on the largest trace (about 90 thousand
instructions).
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_SUITE = REPO.parent / "shared" / "nkibench"
LIMIT_S = 2.0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite-dir", default=str(DEFAULT_SUITE))
    ap.add_argument("--kernels", nargs="*", default=None, help="problem names (default: all)")
    ap.add_argument("--target", default="trn1")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    sys.path.insert(0, str(REPO))
    from fitness.simulator.perf import estimate
    from fitness.simulator.perf.check import load_cases, trace_case

    suite = Path(args.suite_dir)
    cases = load_cases(suite / "trn1_measurements.json", suite)
    if args.kernels:
        cases = [c for c in cases if c.problem in args.kernels]
    rows = []
    print(f"{'kernel':<24} {'instrs':>7} {'wall s':>7} {'cpu s':>7} {'estimate ms':>12} {'trn1 ms':>8}")
    for case in cases:
        trace = trace_case(case)
        gc.collect()
        best_wall = best_cpu = float("inf")
        for _ in range(max(1, args.repeat)):
            w0, c0 = time.perf_counter(), time.process_time()
            est = estimate(trace, args.target)
            best_wall = min(best_wall, time.perf_counter() - w0)
            best_cpu = min(best_cpu, time.process_time() - c0)
        row = {"kernel": case.problem, "instructions": len(trace.instrs), "wall_s": best_wall,
               "cpu_s": best_cpu, "latency_ms": est.latency_ms, "target": args.target,
               "measured_trn1_ms": case.measured["latency"]}
        rows.append(row)
        print(f"{case.problem:<24} {row['instructions']:>7} {best_wall:>7.2f} {best_cpu:>7.2f} "
              f"{est.latency_ms:>12.3f} {case.measured['latency']:>8.3f}", flush=True)
        del trace
    largest = max(rows, key=lambda r: r["instructions"])
    ok = largest["wall_s"] <= LIMIT_S
    print(f"largest trace: {largest['kernel']} ({largest['instructions']} instructions) "
          f"{largest['wall_s']:.2f} s wall, {largest['cpu_s']:.2f} s CPU "
          f"({'within' if ok else 'over'} the {LIMIT_S:.0f} s target)")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
