"""model-check: the performance model against real trn1 measurements, kernel by kernel.

Each measured case names a baseline kernel and a NumPy reference module of the official
NKIBench folder. The kernel is traced shape-only by the emulator, the model predicts it, and
the prediction is compared with the measured latency and neuron-profile counters.

The trn1 parameters were fitted on these same cases, so in-sample errors flatter the model.
`calibrated.py` therefore also stores, for every case, the parameters fitted without it:
each case is predicted with its own leave-one-out parameters, and the summary's headline
figures (`median_abs_rel_error`, `max_abs_rel_error`, `spearman`) are those held-out ones.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import math
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import trace as tr
from . import calibrated
from .hardware import Hardware, hardware
from .model import ENGINE_NAMES, bottleneck_engine, estimate_with
from .params import Params, for_target

COUNTERS = ("hbm_read_bytes", "hbm_write_bytes", "spill_save_bytes", "spill_reload_bytes",
            "hardware_flops", "transpose_flops", "mm_arithmetic_intensity",
            "hfu_estimated_percent", "scalar_engine_active_time_percent",
            "vector_engine_active_time_percent", "gpsimd_engine_active_time_percent")
ACTIVE = {tr.SCALAR: "scalar_engine_active_time_percent",
          tr.VECTOR: "vector_engine_active_time_percent",
          tr.GPSIMD_ENGINE: "gpsimd_engine_active_time_percent"}
BUSY_ENGINE_ABOVE = 0.5   # a measured engine this active would bound the kernel


@dataclass(frozen=True)
class Case:
    """One measured kernel: where its sources are and what trn1 measured."""

    name: str
    problem: str
    kernel: Path
    reference: Path
    measured: dict[str, Any]


def load_cases(measurements_path: str | Path, suite_dir: str | Path | None = None) -> list[Case]:
    path = Path(measurements_path)
    data = json.loads(path.read_text())
    suite = Path(suite_dir) if suite_dir else path.parent
    return [Case(name, c["problem"], suite / c["kernel"], suite / c["reference"], c["baseline"])
            for name, c in data["cases"].items()]


def measurements_fingerprint(cases: list[Case]) -> str:
    """Identifies the data a calibration used (latencies and counters of every case)."""
    blob = json.dumps({c.name: c.measured for c in cases}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _import_file(path: Path):
    spec = importlib.util.spec_from_file_location("_perf_check_" + path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def kernel_args(case: Case) -> list[Any]:
    """The kernel's arguments as shape placeholders (arrays) or plain values (scalars)."""
    import numpy as np

    from .. import ShapeDtype

    ref = _import_file(case.reference)
    saved = np.random.get_state()
    try:
        np.random.seed(0)
        inputs = ref.get_inputs()
    finally:
        np.random.set_state(saved)
    if hasattr(ref, "transform_to_nki_inputs"):
        inputs = ref.transform_to_nki_inputs(list(inputs))
    return [ShapeDtype(tuple(a.shape), str(a.dtype)) if hasattr(a, "shape") else a for a in inputs]


def trace_case(case: Case) -> tr.Trace:
    """Shape-only emulator trace of the case's kernel."""
    from .. import run_kernel

    source = case.kernel.read_text()
    return run_kernel(source, kernel_args(case), filename=str(case.kernel), shape_only=True).trace


def agrees(predicted: str, measured: dict[str, Any]) -> bool:
    """Does the predicted bottleneck fit the measured engine-active fractions? A predicted
    Vector/Scalar/GpSimd bound must be the most active of those engines on hardware; a
    predicted TensorE, DMA or latency bound must leave them all below half of the time
    (TensorE and DMA activity were not measured)."""
    active = {e: float(measured.get(k) or 0.0) for e, k in ACTIVE.items()}
    top = max(active, key=active.__getitem__)
    if predicted in ACTIVE:
        return predicted == top
    return active[top] < BUSY_ENGINE_ABOVE


def spearman(xs: list[float], ys: list[float]) -> float:
    def ranks(v: list[float]) -> list[float]:
        order = sorted(range(len(v)), key=v.__getitem__)
        r = [0.0] * len(v)
        i = 0
        while i < len(order):
            j = i
            while j + 1 < len(order) and v[order[j + 1]] == v[order[i]]:
                j += 1
            for k in range(i, j + 1):
                r[order[k]] = (i + j) / 2
            i = j + 1
        return r

    rx, ry = ranks(xs), ranks(ys)
    mx, my = statistics.fmean(rx), statistics.fmean(ry)
    num = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    den = math.sqrt(sum((a - mx) ** 2 for a in rx) * sum((b - my) ** 2 for b in ry))
    return num / den if den else 0.0


def fold_params(case_name: str, fingerprint: str, base: Params) -> Params | None:
    """The parameters fitted without `case_name`, when the stored fit used this data."""
    if getattr(calibrated, "FINGERPRINT", None) != fingerprint:
        return None
    fold = getattr(calibrated, "TRN1_LOO", {}).get(case_name)
    return None if fold is None else base.replace(**fold)


def predict_case(case: Case, trace: tr.Trace, hw: Hardware, params: Params) -> dict[str, Any]:
    est = estimate_with(trace, hw, params)
    m = case.measured
    pred = est.profile
    row: dict[str, Any] = {
        "name": case.name, "problem": case.problem,
        "measured_ms": m["latency"], "predicted_ms": est.latency_ms,
        "rel_error": est.latency_ms / m["latency"] - 1.0,
        "bottleneck": bottleneck_engine(pred), "summary": est.bottleneck,
        "instructions": len(trace.instrs),
    }
    row["bottleneck_agrees"] = agrees(row["bottleneck"], m)
    row["counters"] = {k: {"measured": m.get(k) or 0, "predicted": pred.get(k, 0)} for k in COUNTERS}
    return row


def model_check(measurements_path: str | Path, suite_dir: str | Path | None = None,
                target: str = "trn1") -> dict[str, Any]:
    """Predicted vs measured latency and counters per case, and a summary (see module doc)."""
    hw = hardware(target)
    base = for_target(target)
    cases = load_cases(measurements_path, suite_dir)
    fp = measurements_fingerprint(cases)
    rows = []
    for case in cases:
        t0 = time.perf_counter()
        trace = trace_case(case)
        t1 = time.perf_counter()
        fold = fold_params(case.name, fp, base) if target == "trn1" else None
        row = predict_case(case, trace, hw, fold or base)
        row["held_out"] = fold is not None
        if fold is not None:
            row["in_sample_ms"] = estimate_with(trace, hw, base).latency_ms
        row["trace_seconds"] = t1 - t0
        row["model_seconds"] = time.perf_counter() - t1
        rows.append(row)
    return {"cases": rows, "summary": summarize(rows, target, hw.calibrated)}


def summarize(rows: list[dict[str, Any]], target: str, calibrated_target: bool) -> dict[str, Any]:
    errs = [abs(r["rel_error"]) for r in rows]
    held = all(r.get("held_out") for r in rows)
    out: dict[str, Any] = {
        "target": target,
        "cases": len(rows),
        "figures": "leave-one-out" if held else ("in-sample" if calibrated_target else "uncalibrated"),
        "median_abs_rel_error": statistics.median(errs) if errs else None,
        "max_abs_rel_error": max(errs) if errs else None,
        "spearman": spearman([r["measured_ms"] for r in rows], [r["predicted_ms"] for r in rows])
        if len(rows) > 1 else None,
        "bottleneck_agreement": sum(r["bottleneck_agrees"] for r in rows),
    }
    if any("in_sample_ms" in r for r in rows):
        ins = [abs(r.get("in_sample_ms", r["predicted_ms"]) / r["measured_ms"] - 1) for r in rows]
        out["in_sample_median_abs_rel_error"] = statistics.median(ins)
        out["in_sample_max_abs_rel_error"] = max(ins)
    for key in ("hbm_read_bytes", "hbm_write_bytes"):
        rel = [abs(r["counters"][key]["predicted"] / r["counters"][key]["measured"] - 1)
               for r in rows if r["counters"][key]["measured"]]
        out[f"median_abs_rel_error_{key}"] = statistics.median(rel) if rel else None
    return out


def _pct(x: float) -> str:
    return f"{100 * x:+.1f}%"


def format_model_check(result: dict[str, Any]) -> str:
    """A terminal table: one line per case, then the summary."""
    head = (f"{'kernel':<24} {'meas ms':>8} {'pred ms':>8} {'error':>7}  {'bound':<8} ok "
            f"{'rd err':>7} {'wr err':>7}  {'S% m/p':>9} {'V% m/p':>9}")
    lines = [head, "-" * len(head)]
    for r in result["cases"]:
        c = r["counters"]

        def err(key: str) -> str:
            m, p = c[key]["measured"], c[key]["predicted"]
            return _pct(p / m - 1) if m else "-"

        def act(key: str) -> str:
            return f"{100 * c[key]['measured']:.0f}/{100 * c[key]['predicted']:.0f}"

        bound = ENGINE_NAMES.get(r["bottleneck"], r["bottleneck"])
        lines.append(
            f"{r['problem']:<24} {r['measured_ms']:>8.3f} {r['predicted_ms']:>8.3f} "
            f"{_pct(r['rel_error']):>7}  {bound:<8} {'y' if r['bottleneck_agrees'] else 'n':>2} "
            f"{err('hbm_read_bytes'):>7} {err('hbm_write_bytes'):>7}  "
            f"{act('scalar_engine_active_time_percent'):>9} {act('vector_engine_active_time_percent'):>9}")
    s = result["summary"]
    lines.append("-" * len(head))
    lines.append(
        f"{s['target']} estimate vs measurement ({s['figures']} figures, {s['cases']} cases): "
        f"median |error| {100 * s['median_abs_rel_error']:.1f}%, max {100 * s['max_abs_rel_error']:.1f}%, "
        f"Spearman {s['spearman']:.3f}, bottleneck agrees {s['bottleneck_agreement']}/{s['cases']}")
    if "in_sample_median_abs_rel_error" in s:
        lines.append(f"in-sample (all cases fitted): median |error| "
                     f"{100 * s['in_sample_median_abs_rel_error']:.1f}%, "
                     f"max {100 * s['in_sample_max_abs_rel_error']:.1f}%")
    return "\n".join(lines)
