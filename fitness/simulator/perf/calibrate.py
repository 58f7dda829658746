"""Calibration of the trn1 parameters on real measurements, with leave-family-out folds.

    python -m fitness.simulator.perf.calibrate --measurements ../shared/nkibench/trn1_measurements.json --write

`--measurements` may be given several times, in either format `check.load_cases` reads
(NKIBench rows, or kernel variants with a latency only: those take part in step 3 alone).
Procedure (trainium-perf-model.md §8), run once on all cases and once per family (problem)
with every case of that family held out:
1. Bytes and flops. The compiler-effects heuristic has one free number, the share of SBUF
   that hoisted (de-duplicated) copies may occupy. It is chosen from a short list by the
   median |log error| of the predicted HBM read+write bytes; flops need nothing fitted.
2. Engine costs. With the engine assignment of the current schedule, VectorE and ScalarE
   busy times are linear in the per-element cycle multipliers (tensor_tensor, reciprocal)
   and the per-instruction overheads. They are fitted to the measured VectorE and ScalarE
   active times by bounded least squares (residuals in units of each kernel's latency,
   multipliers >= 1 element per cycle), with Gaussian priors centred on the documented
   values (tensor_tensor 2N, overheads 64 cycles, reciprocal 8N with a wide prior: the data
   contradict the document).
3. Latency glue: DMA engine rate, fp32 transpose cost, semaphore latency, same-engine
   dependency drain, DMA fixed latency, launch overhead, buffers per allocation site and
   the compiler's reordering window are fitted by coordinate descent on the mean plus the
   maximum of the squared log errors of the latencies, with a pull towards the documented
   values (so that a parameter the data cannot see, or that only one kernel asks to move,
   stays near its documented value), within bounds that measurements set (GLUE_RANGES:
   the DMA engine rate from the BEST silu row, which is not one of the 14 baselines; the
   dependency drain from PERF's measured dependent issue interval).
Steps 2 and 3 are alternated twice (the engine assignment depends on the costs). Each
held-out family is then predicted with parameters fitted on the other families only: those
held-out predictions are what `model-check` reports (for the 14 baselines, one case per
problem, they are leave-one-out).

The cases' latencies are computed by one forked process per core (`--workers N`), each case
always by the same process; the figures are those of a single process.

`--write` stores the fitted values in `calibrated.py` (with a fingerprint of every case used).
`python -m accelopt_evo calibrate --target T` runs the same procedure (`run_fit`) on a user's
measurements of target T and writes a calibration file (calibration.py) instead.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import math
import multiprocessing
import os
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
from scipy.optimize import lsq_linear

from .. import trace as tr
from . import check, deps
from .calibration import Calibration
from .hardware import Hardware, hardware
from .model import Prepared, counters, prepare
from .params import DOCUMENTED, Params
from .schedule import durations, schedule

BUDGETS = (0.5, 0.75, 1.0)                 # step 1 candidates (share of usable SBUF)
ENGINE_PRIORS = {                           # step 2: (documented value, prior sigma, bounds)
    # A lane handles at most one element per cycle: no per-element multiplier below 1.
    "tt_cycles_per_elem": (2.0, 0.5, (1.0, 4.0)),
    "recip_cycles_per_elem": (8.0, 8.0, (1.0, 16.0)),
    "vector_overhead_cycles": (64.0, 48.0, (0.0, 400.0)),
    "scalar_overhead_cycles": (64.0, 48.0, (0.0, 400.0)),
}
GLUE_RANGES = {                             # step 3: (low, high) bounds
    # At least what the BEST silu row moved (235 MB in 0.798 ms over 16 engines: 18.4 B/ns
    # each; a measurement outside the 14 baselines), at most the 27 GiB/s peak (ARCH1).
    "dma_ring_bytes_per_ns": (18.4, 29.0),
    "transpose_cycles_fp32": (2.0, 4.0),    # documented onezero 2x .. plain fp32 4x
    "semaphore_ns": (0.0, 2000.0),
    # At most the whole measured dependent issue interval (PERF: 264 cycles per instruction).
    "dependent_drain_cycles": (0.0, 264.0),
    "dma_fixed_ns": (200.0, 4000.0),
    "launch_us": (0.0, 60.0),
}
GLUE_CHOICES = {                            # step 3: discrete parameters
    "max_buffers": (1, 2, 3, 4),            # spec: B_max ~ 2-4
    "reorder_window": (0, 4, 16, 64),
}
SWEEPS = ((0.6, 1.6), (0.8, 1.25), (0.9, 1.1))   # multiplicative trial moves, one pair per sweep
ROUNDS = 2                                  # steps 2 and 3 alternated this many times
# Pull of step 3 towards documented values: moving a parameter across its whole range costs
# what one kernel's 15% latency error adds to the objective (log(1.15)^2 ~ 0.02), so that a
# value only one kernel asks for is not taken (when that kernel is held out, nothing checks it).
PRIOR_WEIGHT = 0.02
FITTED = ("hoist_budget_fraction",) + tuple(ENGINE_PRIORS) + tuple(GLUE_RANGES) + tuple(GLUE_CHOICES)


@dataclass
class KernelData:
    """One measured case with its programs prepared for every budget of step 1."""

    case: check.Case
    prepared: dict[float, Prepared] = field(default_factory=dict)
    byte_error: dict[float, float] = field(default_factory=dict)
    preds: dict[tuple, list[list[int]]] = field(default_factory=dict)

    def graph(self, params: Params, hw: Hardware) -> tuple[Prepared, list[list[int]]]:
        """The prepared program and its dependencies for these parameters (cached)."""
        prep = self.prepared[params.hoist_budget_fraction]
        key = (id(prep), params.max_buffers, params.sequential_buffers, params.buffer_share)
        preds = self.preds.get(key)
        if preds is None:
            preds = self.preds[key] = deps.build(prep.prog, hw, params)
        return prep, preds

    @property
    def latency_ms(self) -> float:
        return float(self.case.measured["latency"])

    @property
    def has_activity(self) -> bool:
        """Were engine-active times measured (NKIBench rows; variants give latency only)?"""
        return "vector_engine_active_time_percent" in self.case.measured

    def measured_active_ms(self, key: str) -> float:
        return float(self.case.measured.get(key) or 0.0) * self.latency_ms


def load(measurements: list[str], suite_dir: str | None, trace_cache: str | None,
         hw: Hardware, log) -> list[KernelData]:
    """Trace every case of every file (or read cached traces) and prepare it for every
    budget. Cases without measured bytes (variants) take no part in step 1."""
    out = []
    for path in measurements:
        for case in check.load_cases(path, suite_dir):
            t0 = time.perf_counter()
            trace = check.trace_case(case, trace_cache)
            data = KernelData(case)
            m = case.measured
            measured_bytes = (m.get("hbm_read_bytes") or 0) + (m.get("hbm_write_bytes") or 0)
            for budget in BUDGETS:
                prep = prepare(trace, hw, DOCUMENTED.replace(hoist_budget_fraction=budget))
                for other in data.prepared.values():   # same compiler decisions: share
                    if other.report == prep.report:
                        prep = other
                        break
                data.prepared[budget] = prep
                if measured_bytes:
                    c = counters(prep.ops)
                    data.byte_error[budget] = abs(math.log(
                        (c["hbm_read_bytes"] + c["hbm_write_bytes"]) / measured_bytes))
            del trace
            log(f"  {case.name:<40} prepared in {time.perf_counter() - t0:5.1f} s")
            out.append(data)
    return out


def _latency_ms(data: KernelData, params: Params, hw: Hardware) -> tuple[float, Any]:
    prep, preds = data.graph(params, hw)
    sched = schedule(prep.prog, preds, hw, params)
    return sched.makespan_ns * 1e-6 + params.launch_us * 1e-3, sched


# Latencies of training cases for one parameter set, in the order of the cases.
Latencies = Callable[[list[KernelData], Params], list[float]]
# What forked latency workers read: inherited at fork, never sent (prepared programs are large).
_FORKED: tuple[list[KernelData], Hardware] | None = None


def serial_latencies(hw: Hardware) -> Latencies:
    return lambda train, params: [_latency_ms(d, params, hw)[0] for d in train]


def _forked_latencies(indices: list[int], params: Params) -> list[float]:
    assert _FORKED is not None
    data, hw = _FORKED
    return [_latency_ms(data[i], params, hw)[0] for i in indices]


@contextlib.contextmanager
def parallel_latencies(data: list[KernelData], hw: Hardware, workers: int) -> Iterator[Latencies]:
    """Latencies of cases of `data` computed by up to `workers` forked processes, each case
    always by the same one (its dependency graphs are built there once). The figures are the
    serial ones: every case is scheduled by the same code on the same inherited program.
    Coordinate descent tries one parameter set at a time, so the cases are what is split."""
    global _FORKED
    n = min(workers, len(data))
    if n <= 1 or "fork" not in multiprocessing.get_all_start_methods():
        yield serial_latencies(hw)
        return
    # Balance the workers by program size (the scheduler's cost is linear in the ops).
    size = [max(len(p.ops) for p in d.prepared.values()) for d in data]
    owner: dict[int, int] = {}
    load = [0] * n
    for i in sorted(range(len(data)), key=lambda i: -size[i]):
        w = load.index(min(load))
        owner[i] = w
        load[w] += size[i]
    index = {id(d): i for i, d in enumerate(data)}
    _FORKED = (data, hw)   # set before the workers fork (on their first task)
    context = multiprocessing.get_context("fork")
    pools = [ProcessPoolExecutor(1, mp_context=context) for _ in range(n)]

    def latencies(train: list[KernelData], params: Params) -> list[float]:
        wanted = [index[id(d)] for d in train]
        groups: list[list[int]] = [[] for _ in range(n)]
        for i in wanted:
            groups[owner[i]].append(i)
        futures = [(g, pools[w].submit(_forked_latencies, g, params)) for w, g in enumerate(groups) if g]
        found = {i: ms for g, f in futures for i, ms in zip(g, f.result())}
        return [found[i] for i in wanted]

    try:
        yield latencies
    finally:
        for pool in pools:
            pool.shutdown(cancel_futures=True)
        _FORKED = None


def default_workers() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:   # not on Linux
        return os.cpu_count() or 1


def fit_budget(train: list[KernelData]) -> float:
    counted = [d for d in train if d.byte_error]
    if not counted:   # only latencies measured: nothing pins the budget
        return DOCUMENTED.hoist_budget_fraction
    return min(BUDGETS, key=lambda b: (statistics.median(d.byte_error[b] for d in counted), -b))


def fit_engines(train: list[KernelData], params: Params, hw: Hardware) -> Params:
    """Step 2: least squares on VectorE and ScalarE busy time (see module doc)."""
    rows_v, rows_s, b_v, b_s = [], [], [], []
    for data in train:
        if not data.has_activity:
            continue
        prep, _ = data.graph(params, hw)
        _, sched = _latency_ms(data, params, hw)
        fv = np.zeros(4)   # cycles: [tt elems, recip elems, V instructions, constant]
        fs = np.zeros(2)   # cycles: [S instructions, constant]
        bare = durations(prep.ops, hw, params.replace(vector_overhead_cycles=0.0,
                                                       scalar_overhead_cycles=0.0))
        for op, eng, dur in zip(prep.ops, sched.engine, bare):
            if eng == tr.VECTOR:
                n = op.N * (2 if op.strided else 1)
                fv[2] += 1
                # With a multiplier >= 1, N >= MIN_II puts an instruction past the minimum.
                if op.kind == tr.TT and not op.psum_inputs and n >= hw.min_ii_cycles:
                    fv[0] += n
                elif op.kind == tr.RECIP and n >= hw.min_ii_cycles:
                    fv[1] += n
                else:
                    fv[3] += dur[op.engines.index(eng)] * hw.vector_hz * 1e-9
            elif eng == tr.SCALAR:
                fs[0] += 1
                fs[1] += dur[op.engines.index(eng)] * hw.scalar_hz * 1e-9
        scale = 1.0 / (data.latency_ms * 1e-3)   # residuals in units of the kernel's time
        rows_v.append(np.array([fv[0], fv[1], fv[2]]) / hw.vector_hz * scale)
        b_v.append((data.measured_active_ms("vector_engine_active_time_percent") * 1e-3
                    - fv[3] / hw.vector_hz) * scale)
        rows_s.append(np.array([fs[0]]) / hw.scalar_hz * scale)
        b_s.append((data.measured_active_ms("scalar_engine_active_time_percent") * 1e-3
                    - fs[1] / hw.scalar_hz) * scale)
    if not rows_v:   # no engine activity measured: nothing to fit here
        return params
    v_names = ("tt_cycles_per_elem", "recip_cycles_per_elem", "vector_overhead_cycles")
    s_names = ("scalar_overhead_cycles",)
    fitted = {}
    for names, rows, rhs in ((v_names, rows_v, b_v), (s_names, rows_s, b_s)):
        a = np.array(rows)
        b = np.array(rhs)
        prior_rows = np.zeros((len(names), len(names)))
        prior_rhs = np.zeros(len(names))
        lower, upper = [], []
        for j, name in enumerate(names):
            mean, sigma, (lo, hi) = ENGINE_PRIORS[name]
            prior_rows[j, j] = 1.0 / sigma
            prior_rhs[j] = mean / sigma
            lower.append(lo)
            upper.append(hi)
        # The prior rows are scaled so that one sigma weighs like a 5% residual.
        sol = lsq_linear(np.vstack([a, 0.05 * prior_rows]),
                         np.concatenate([b, 0.05 * prior_rhs]), bounds=(lower, upper)).x
        for name, value in zip(names, sol):
            fitted[name] = float(value)
    return params.replace(**fitted)


def objective(train: list[KernelData], params: Params, hw: Hardware, latencies: Latencies | None = None) -> float:
    got = (latencies or serial_latencies(hw))(train, params)
    sq = [math.log(ms / d.latency_ms) ** 2 for ms, d in zip(got, train)]
    err = statistics.fmean(sq) + max(sq)  # the worst case counts too: no kernel is sacrificed
    pull = 0.0
    for name, (lo, hi) in GLUE_RANGES.items():
        doc = getattr(DOCUMENTED, name)
        value = getattr(params, name)
        pull += ((value - doc) / (hi - lo)) ** 2
    return err + PRIOR_WEIGHT * pull


def fit_glue(train: list[KernelData], params: Params, hw: Hardware, log=lambda s: None,
             sweeps: tuple[tuple[float, float], ...] = SWEEPS, latencies: Latencies | None = None) -> Params:
    """Step 3: coordinate descent with shrinking steps over GLUE_RANGES and GLUE_CHOICES."""
    best = objective(train, params, hw, latencies)
    for sweep, (down, up) in enumerate(sweeps):
        for name, (lo, hi) in GLUE_RANGES.items():
            current = getattr(params, name)
            trials = {min(hi, max(lo, current * down)), min(hi, max(lo, current * up))}
            if current == 0.0:
                trials.add(lo + (hi - lo) * 0.1 * (down + up) / 2)
            for value in sorted(trials - {current}):
                candidate = params.replace(**{name: value})
                score = objective(train, candidate, hw, latencies)
                if score < best - 1e-6:
                    best, params = score, candidate
        for name, choices in GLUE_CHOICES.items():
            for value in choices:
                if value == getattr(params, name):
                    continue
                candidate = params.replace(**{name: value})
                score = objective(train, candidate, hw, latencies)
                if score < best - 1e-6:
                    best, params = score, candidate
        log(f"    sweep {sweep + 1}: objective {best:.4f}")
    return params


def fit(train: list[KernelData], hw: Hardware, log=lambda s: None,
        sweeps: tuple[tuple[float, float], ...] = SWEEPS, rounds: int = ROUNDS,
        latencies: Latencies | None = None, start: Params | None = None) -> Params:
    """Steps 1-3 from the documented values, or steps 2-3 from `start` (to check that a set of
    parameters is where the procedure settles, without running all of it)."""
    params = start or DOCUMENTED.replace(hoist_budget_fraction=fit_budget(train))
    # Start inside the ranges (a documented value may lie outside what was measured).
    params = params.replace(**{name: min(hi, max(lo, getattr(params, name)))
                               for name, (lo, hi) in GLUE_RANGES.items()})
    for _ in range(rounds):
        params = fit_engines(train, params, hw)
        params = fit_glue(train, params, hw, log=log, sweeps=sweeps, latencies=latencies)
    return params


def fitted_values(params: Params) -> dict[str, float | int]:
    out: dict[str, float | int] = {}
    for name in FITTED:
        value = getattr(params, name)
        out[name] = value if isinstance(value, int) else round(float(value), 4)
    return out


def write_calibrated(path: Path, full: Params, folds: dict[str, Params], trained_on: dict[str, str],
                     sources: list[str], summary: dict[str, Any]) -> None:
    lines = [
        '"""Parameter values fitted on the trn1 measurements by `calibrate.py` (do not edit by hand).',
        "",
        "Re-run: python -m fitness.simulator.perf.calibrate"
        + "".join(f" --measurements {s}" for s in sources) + " --write",
        "",
        "TRN1 is the fit on all cases; TRN1_LOO[family] the fit without any case of that family",
        "(problem); model-check predicts each case with its family's fold. TRAINED_ON names every",
        "case the fit used, with a fingerprint of its measured data.",
        f"Held out on that data (one figure per case): median |latency error| "
        f"{100 * summary['median']:.1f}%, max {100 * summary['max']:.1f}%, "
        f"Spearman {summary['spearman']:.3f}.",
        '"""',
        "",
        "TRAINED_ON: dict[str, str] = {",
    ]
    lines += [f"    {k!r}: {v!r}," for k, v in trained_on.items()]
    lines += ["}", "", "TRN1: dict[str, float] = {"]
    lines += [f"    {k!r}: {v!r}," for k, v in fitted_values(full).items()]
    lines += ["}", "", "TRN1_LOO: dict[str, dict[str, float]] = {"]
    for name, params in folds.items():
        lines.append(f"    {name!r}: {{")
        lines += [f"        {k!r}: {v!r}," for k, v in fitted_values(params).items()]
        lines.append("    },")
    lines += ["}", ""]
    path.write_text("\n".join(lines))


@dataclass
class FitResult:
    """The fit on all cases, one fit per held-out family, and the predictions they make."""

    data: list[KernelData]
    full: Params
    folds: dict[str, Params]
    preds: dict[str, float]      # case name -> predicted latency (held out when folds exist)
    summary: dict[str, Any]      # median / max |relative error|, Spearman, and which figures

    def calibration(self, target: str, sources: list[str]) -> Calibration:
        """The fit as a user calibration of `target` (calibration.py's format)."""
        return Calibration(target, dict(fitted_values(self.full)),
                           {k: dict(fitted_values(p)) for k, p in self.folds.items()},
                           {d.case.name: check.case_fingerprint(d.case) for d in self.data},
                           dict(self.summary), tuple(sources))


def run_fit(measurements: list[str], target: str = "trn1", suite_dir: str | None = None,
            trace_cache: str | None = None, loo: bool = True, log=lambda s: None,
            sweeps: tuple[tuple[float, float], ...] = SWEEPS, rounds: int = ROUNDS,
            workers: int | None = None, start: Params | None = None) -> FitResult:
    """The whole procedure of the module doc on the cases of `measurements`, for `target`;
    the cases' latencies are computed by `workers` processes (default: every core)."""
    hw = hardware(target)
    collecting = gc.isenabled()
    gc.disable()  # millions of long-lived objects, no cycles: collections only cost time
    try:
        log("tracing and preparing the measured kernels")
        data = load(measurements, suite_dir, trace_cache, hw, log)
        if not data:
            raise ValueError("the measurement files hold no case")
        folds: dict[str, Params] = {}
        preds: dict[str, float] = {}
        families = list(dict.fromkeys(d.case.problem for d in data))
        with parallel_latencies(data, hw, workers or default_workers()) as latencies:
            log("fit on all cases")
            full = fit(data, hw, log, sweeps, rounds, latencies, start)
            log(f"  {fitted_values(full)}")
            for family in (families if loo and len(families) > 1 else []):
                log(f"fold without {family}")
                folds[family] = p = fit([d for d in data if d.case.problem != family], hw, log, sweeps, rounds,
                                        latencies)
                for d in data:
                    if d.case.problem == family:
                        preds[d.case.name] = _latency_ms(d, p, hw)[0]
        if not folds:
            preds = {d.case.name: _latency_ms(d, full, hw)[0] for d in data}
    finally:
        if collecting:
            gc.enable()
    errs = [abs(preds[d.case.name] / d.latency_ms - 1) for d in data]
    summary = {"median": statistics.median(errs), "max": max(errs),
               "spearman": check.spearman([d.latency_ms for d in data], [preds[d.case.name] for d in data]),
               "figures": "leave-family-out" if folds else "in-sample"}
    for d in data:
        log(f"  {d.case.name:<40} measured {d.latency_ms:8.3f} ms  predicted "
            f"{preds[d.case.name]:8.3f} ms  {100 * (preds[d.case.name] / d.latency_ms - 1):+6.1f}%")
    log(f"{summary['figures']}: median {100 * summary['median']:.1f}%, max {100 * summary['max']:.1f}%, "
        f"Spearman {summary['spearman']:.3f}")
    return FitResult(data, full, folds, preds, summary)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--measurements", required=True, action="append",
                    help="a measurements file (NKIBench or variants format); repeat for several")
    ap.add_argument("--suite-dir", default=None)
    ap.add_argument("--trace-cache", default=None, help="folder to keep emulator traces in")
    ap.add_argument("--write", action="store_true", help="update calibrated.py")
    ap.add_argument("--no-loo", action="store_true", help="fit on all cases only")
    ap.add_argument("--workers", type=int, default=None,
                    help="processes that schedule the cases (default: every core)")
    args = ap.parse_args(argv)
    if args.workers is not None and args.workers < 1:
        ap.error("--workers must be at least 1")

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    result = run_fit(args.measurements, "trn1", args.suite_dir, args.trace_cache, not args.no_loo, log,
                     workers=args.workers)
    if args.write:
        target = Path(__file__).with_name("calibrated.py")
        trained = {d.case.name: check.case_fingerprint(d.case) for d in result.data}
        write_calibrated(target, result.full, result.folds, trained, args.measurements, result.summary)
        log(f"wrote {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
