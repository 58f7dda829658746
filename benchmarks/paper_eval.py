"""Evaluation cost of the official NKIBench kernels at the paper's shapes.

    python benchmarks/paper_eval.py [--suite-dir ../shared/nkibench] [--kernels silu matmul ...]
                                    [--cold] [--floor-only] [--workers N] [--json out.json]

For every kernel, in one evaluator with a run folder (as a run has): the baseline is judged
first (this computes and caches the reference data of every seed), then a distinct variant
(the baseline plus an unused constant, so not a cache hit) is timed: `in_run_s`, the
evaluation time inside a run with references cached (with `--workers 2` the variant is judged
alone with a worker idle, so its later seeds run in a second kernel process). While it runs, the kernel process's
peak resident memory (VmHWM) is sampled: `peak_mb`. `--cold` also times `python -m
accelopt_evo eval` of the kernel file from a fresh process (`cold_eval_s`: interpreter start,
reference data of 5 seeds and 2 secret held-out ones, the evaluation).

`floor_s` is what the arithmetic alone costs: the TensorE multiply-accumulates of the kernel's
trace (2 K M N per matmul instruction) on every seed, at the rate this machine's BLAS reaches
single-threaded on the emulator's tile shape (128 x 128 by 128 x 512), the shape every
full-data emulation must compute, however it schedules the seeds.
Figures depend on the machine and its load; the load average is recorded.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from fitness.service import Evaluator  # noqa: E402
from fitness.settings import EvalSettings  # noqa: E402
from fitness.simulator import ShapeDtype, run_kernel  # noqa: E402
from fitness.simulator.core import blas  # noqa: E402
from fitness.simulator.trace import MM  # noqa: E402
from nkibench.registry import load, make_spec  # noqa: E402

DEFAULT_SUITE = REPO.parent / "shared" / "nkibench"
# The time limit is raised so that a slow evaluation is measured, not cut off: on a busy 2-core
# machine a paper-shape matmul takes longer than the default 300 s.
SETTINGS = EvalSettings(backend="simulator", heldout_seeds=(1000, 1001), timeout_s=3600, workers=1)


def gemm_rate(repeats: int = 400) -> float:
    """FLOP/s of one-thread BLAS on the emulator's matmul tile (best of three rounds)."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((128, 128), dtype=np.float32)
    b = rng.standard_normal((128, 512), dtype=np.float32)
    best = float("inf")
    with blas.single_threaded():
        for _ in range(3):
            t0 = time.perf_counter()
            for _ in range(repeats):
                np.matmul(a.T, b)
            best = min(best, time.perf_counter() - t0)
    return 2 * 128 * 128 * 512 * repeats / best


def matmul_flops(spec) -> float:
    """2 K M N summed over the matmul instructions of the kernel's shape-only trace."""
    problem = load(spec)
    args = [ShapeDtype(a.shape, a.dtype) if isinstance(a, np.ndarray) else a
            for a in problem.to_kernel_inputs(problem.inputs(0))]
    trace = run_kernel(problem.baseline_source, args, shape_only=True).trace
    return float(sum(2 * i.mm.K * i.mm.M * i.mm.N for i in trace.instrs if i.mm is not None and i.kind == MM))


class PeakMemory:
    """Samples VmHWM (peak resident set) of an evaluator's live kernel processes."""

    def __init__(self, ev: Evaluator, every_s: float = 0.1) -> None:
        self.ev, self.every_s = ev, every_s
        self.peak_kb = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.is_set():
            for pid in self.ev._processes.pids():
                try:
                    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                        if line.startswith("VmHWM:"):
                            self.peak_kb = max(self.peak_kb, int(line.split()[1]))
                except OSError:
                    pass
            self._stop.wait(self.every_s)

    def __enter__(self) -> "PeakMemory":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def measure(suite: str, name: str, cold: bool, rate: float, workdir: Path, floor_only: bool = False,
            settings: EvalSettings = SETTINGS) -> dict:
    spec = make_spec(name, suite_dir=suite)
    row: dict = {"kernel": spec.label()}
    floor = matmul_flops(spec) * (len(settings.seeds) + len(settings.heldout_seeds)) / rate
    row["floor_s"] = floor
    if floor_only:
        return row
    with Evaluator(settings, run_dir=workdir / name) as ev:
        t0 = time.monotonic()
        base = ev.baseline(spec)
        row["setup_s"] = time.monotonic() - t0
        with PeakMemory(ev) as mem:
            result = ev.evaluate(spec, load(spec).baseline_source + "\nVARIANT = 1\n")
        row.update(status=result.status, error=result.error, in_run_s=result.seconds, peak_mb=mem.peak_kb / 1024,
                   memory_limit_mb=settings.memory_limit_mb, baseline_status=base.status)
    if cold:
        kernel = workdir / f"{name}.py"
        kernel.write_text(load(spec).baseline_source)
        t0 = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "accelopt_evo", "eval", str(kernel), "--problem", name,
                               "--suite-dir", suite, "--json"], capture_output=True, text=True, cwd=workdir,
                              env={**os.environ, "PYTHONPATH": str(REPO)})
        row["cold_eval_s"] = time.monotonic() - t0
        row["cold_status"] = json.loads(proc.stdout)["status"] if proc.returncode == 0 else proc.stderr[-300:]
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite-dir", default=str(DEFAULT_SUITE))
    parser.add_argument("--kernels", nargs="+", help="official kernels (default: all 14)")
    parser.add_argument("--cold", action="store_true", help="also time a cold `eval` of each kernel")
    parser.add_argument("--floor-only", action="store_true", help="only the arithmetic floor (no evaluation)")
    parser.add_argument("--workers", type=int, default=SETTINGS.workers,
                        help="evaluator workers (2: the variant, judged alone, splits its seeds over two processes)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    settings = dataclasses.replace(SETTINGS, workers=args.workers)
    names = args.kernels or list(json.loads((Path(args.suite_dir) / "summary.json").read_text()))
    rate = gemm_rate()
    report: dict = {"cpus": os.cpu_count(), "workers": args.workers, "gemm_gflops": rate / 1e9, "load_average_before": os.getloadavg(),
                    "rows": []}
    print(f"one-thread BLAS on 128x128x512 tiles: {rate / 1e9:.1f} GFLOP/s", flush=True)
    print(f"{'kernel':44s} {'status':8s} {'in run s':>8s} {'floor s':>8s} {'cold s':>7s} {'peak MB':>8s}", flush=True)
    with tempfile.TemporaryDirectory(prefix="accelopt-evo-paper-") as tmp:
        for name in names:
            row = measure(args.suite_dir, name, args.cold, rate, Path(tmp), args.floor_only, settings)
            report["rows"].append(row)
            if args.floor_only:
                print(f"{row['kernel']:44s} {'-':8s} {'-':>8s} {row['floor_s']:8.1f}", flush=True)
                continue
            cold = f"{row['cold_eval_s']:7.1f}" if "cold_eval_s" in row else f"{'-':>7s}"
            print(f"{row['kernel']:44s} {row['status']:8s} {row['in_run_s']:8.1f} {row['floor_s']:8.1f} {cold} "
                  f"{row['peak_mb']:8.0f}", flush=True)
    if args.floor_only:
        if args.json:
            args.json.write_text(json.dumps(report, indent=1) + "\n")
        return 0
    times = [r["in_run_s"] for r in report["rows"]]
    report.update(median_in_run_s=statistics.median(times), slowest_in_run_s=max(times),
                  load_average_after=os.getloadavg())
    print(f"in a run: median {report['median_in_run_s']:.1f} s, slowest {report['slowest_in_run_s']:.1f} s; "
          f"load average before/after {report['load_average_before'][0]:.1f} / {report['load_average_after'][0]:.1f} "
          f"on {report['cpus']} CPUs")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
