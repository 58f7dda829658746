"""model-check: the performance model against real trn1 measurements, kernel by kernel.

Three measurement formats are read (`load_cases` tells them apart):
* NKIBench (`trn1_measurements.json`): `cases`, each naming a baseline kernel, a NumPy
  reference module of the official NKIBench folder and a measured neuron-profile row;
* variants (`trn1-variants/measurements.json`): `points`, each naming a kernel file beside
  the measurements file, its problem, a shape (the reference module's shape constants) and
  a measured latency (and, when `measure` wrote it, the profile counters under `profile`;
  `variants_document` writes this format). Several kernels measured at one shape are versions
  of one computation: their pairwise ranking and speedup ratios are what an optimizer's
  fitness must get right.
* series (`trn1-variants/flash-attention/measured.json`): successive versions of one kernel,
  each a function of one kernel file beside the series file, measured at several shapes:
  `p50_us` (or `latency_us`) maps version -> {shape value: microseconds or null (not
  measured)}, `seqlens` lists the shape values (the reference module's constant `S`; another
  constant with `shape_constant`); `kernel` and `reference` name the two files (default: the
  folder's `reference.py` and its one other `.py`). What matters is each consecutive pair of
  versions at one shape (`series_pairs`): is the change ordered right, and by how much.
The kernel is traced shape-only by the emulator, the model predicts it, and the prediction is
compared with the measured latency (and counters, where measured).

The trn1 parameters were fitted on measured cases, so in-sample errors flatter the model.
`calibrated.py` therefore also stores, per family (problem), the parameters fitted without
any case of that family: each case is predicted with its family's held-out parameters, and
the summary's headline figures (`median_abs_rel_error`, `max_abs_rel_error`, `spearman`,
the pairwise figures) are those held-out ones; `in_sample_ms` uses the fit on everything.
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import importlib.util
import json
import math
import os
import pickle
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import trace as tr
from . import calibrated
from .calibration import Calibration
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
ENGINE_BUSY = {tr.TENSOR: "tensor_engine_active_time_percent", **ACTIVE,
               tr.DMA: "dma_active_time_percent"}
BUSY_ENGINE_ABOVE = 0.5   # a measured engine this active would bound the kernel
TIE_WITHIN = 0.05         # latencies this close count as a tie when ranking a pair


@dataclass(frozen=True)
class Case:
    """One measured kernel: where its sources are, at which shape, and what trn1 measured.

    `shape` (variants only) overrides the reference module's shape constants; `kernel_name`
    tells versions of one computation apart (the kernel file's stem)."""

    name: str
    problem: str
    kernel: Path
    reference: Path
    measured: dict[str, Any]
    shape: dict[str, int] | None = None
    function: str | None = None   # the kernel function (series); None: the file's `kernel`
    version: int = 0              # position in its series (series only)

    @property
    def kernel_name(self) -> str:
        return self.function or self.kernel.stem

    @property
    def shape_label(self) -> str:
        return "_".join(f"{k}{v}" for k, v in sorted((self.shape or {}).items()))


def load_cases(measurements_path: str | Path, suite_dir: str | Path | None = None) -> list[Case]:
    """The cases of a measurements file in either format (module doc). Kernels are found
    in `suite_dir` (NKIBench format; default: beside the file) or beside the file (variants).
    A variant's reference module is its problem's in the NKIBench folder `suite_dir`
    (default: the file's folder, else a sibling folder named `nkibench`)."""
    path = Path(measurements_path)
    data = json.loads(path.read_text())
    if "cases" in data:
        suite = Path(suite_dir) if suite_dir else path.parent
        return [Case(name, c["problem"], suite / c["kernel"], suite / c["reference"], c["baseline"])
                for name, c in data["cases"].items()]
    if SERIES_KEYS & set(data):
        return load_series(path, data)
    if "points" not in data:
        raise ValueError(f"{path}: neither an NKIBench ('cases'), a variants ('points') nor a series "
                         f"('p50_us') measurements file")
    suite = _variants_suite(path, suite_dir)
    out = []
    for p in data["points"]:
        shape = {k: int(v) for k, v in p["shape"].items()}
        # points written by `measure` also carry profile counters (neuron-profile names)
        counters = {k: float(v) for k, v in (p.get("profile") or {}).items() if k in COUNTERS}
        case = Case("", p["problem"], path.parent / p["kernel"], reference_module(suite, p["problem"]),
                    {"latency": float(p["latency_ms"]), **counters}, shape)
        out.append(dataclasses.replace(case, name=f"{case.kernel_name}@{case.shape_label}"))
    return out


SERIES_KEYS = {"p50_us", "latency_us"}
US_PER_MS = 1000.0


def load_series(path: Path, data: dict[str, Any]) -> list[Case]:
    """The measured cells of a series file (module doc), version by version in file order."""
    table = next(data[k] for k in ("p50_us", "latency_us") if k in data)
    if data.get("unit", "us") != "us":
        raise ValueError(f"{path}: a series is measured in microseconds ('unit': 'us'), not {data['unit']!r}")
    constant = str(data.get("shape_constant", "S"))
    reference = path.parent / data.get("reference", "reference.py")
    if "kernel" in data:
        kernel = path.parent / data["kernel"]
    else:
        others = sorted(p for p in path.parent.glob("*.py") if p != reference)
        if len(others) != 1:
            raise ValueError(f"{path}: name the series' kernel file ('kernel'): {len(others)} candidates beside it")
        kernel = others[0]
    for f in (kernel, reference):
        if not f.is_file():
            raise ValueError(f"{path}: series file names {f.name}, which is not beside it")
    problem = str(data.get("problem", kernel.stem))
    shapes = [int(v) for v in data.get("seqlens", [])]
    functions = _functions(kernel)
    out = []
    for version, (label, cells) in enumerate(table.items()):
        function = _version_function(label, functions, kernel)
        for value in shapes or sorted(int(k) for k in cells):
            us = cells.get(str(value))
            if us is None:
                continue   # not measured (failed where it was measured)
            case = Case("", problem, kernel, reference, {"latency": float(us) / US_PER_MS}, {constant: value},
                        function=function, version=version)
            out.append(dataclasses.replace(case, name=f"{function}@{case.shape_label}"))
    if not out:
        raise ValueError(f"{path}: a series without any measured cell")
    return out


def _functions(path: Path) -> list[str]:
    return [n.name for n in ast.parse(path.read_text(), str(path)).body if isinstance(n, ast.FunctionDef)]


def _version_function(label: str, functions: list[str], kernel: Path) -> str:
    """The kernel function a series' version label names: the function of that name, else the
    one function whose name ends with `_<label>` (version `v3` -> `attn_fwd_v3`)."""
    if label in functions:
        return label
    matches = [f for f in functions if f.endswith("_" + label)]
    if len(matches) != 1:
        raise ValueError(f"series version {label!r}: {kernel.name} has {len(matches)} functions named *_{label}")
    return matches[0]


def variants_document(target: str, about: str, source: str, points: list[dict[str, Any]]) -> dict[str, Any]:
    """A measurements file in the variants format; each point names `kernel` (a path relative
    to the file), `problem`, `shape` ({constant: value}), `latency_ms` and optionally
    `profile` (numeric neuron-profile counters) and `note`."""
    required = ("kernel", "problem", "shape", "latency_ms")
    for p in points:
        missing = [k for k in required if k not in p]
        if missing:
            raise ValueError(f"measurement point without {missing[0]}")
    return {"about": about, "source": source, "target": target, "points": points}


def _variants_suite(path: Path, suite_dir: str | Path | None) -> Path:
    for suite in ([Path(suite_dir)] if suite_dir else [path.parent, path.parent.parent / "nkibench"]):
        if (suite / "summary.json").is_file():
            return suite
    raise ValueError(f"{path}: variants need the NKIBench folder for their problems' reference "
                     f"modules (--suite-dir; none found beside the file)")


def reference_module(suite: Path, problem: str) -> Path:
    """The NumPy reference module of `problem` in an NKIBench folder (summary.json)."""
    summary = json.loads((suite / "summary.json").read_text())
    if problem not in summary:
        raise ValueError(f"problem {problem!r} is not in {suite / 'summary.json'}")
    for case in summary[problem]["cases"].values():
        for impl in case["impls"]:
            return suite / impl["task"]
    raise ValueError(f"problem {problem!r} has no reference module in {suite / 'summary.json'}")


def case_fingerprint(case: Case) -> str:
    """Identifies one case's measured data (and shape) for the calibration record."""
    blob = json.dumps({"measured": case.measured, "shape": case.shape}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _import_file(path: Path):
    spec = importlib.util.spec_from_file_location("_perf_check_" + path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def kernel_args(case: Case) -> list[Any]:
    """The kernel's arguments as shape placeholders (arrays) or plain values (scalars)."""
    import numpy as np

    from .. import placeholders

    ref = _import_file(case.reference)
    for name, value in (case.shape or {}).items():
        if not isinstance(getattr(ref, name, None), int):
            raise ValueError(f"{case.reference}: no shape constant {name!r} to set for {case.name}")
        setattr(ref, name, value)
    saved = np.random.get_state()
    try:
        np.random.seed(0)
        inputs = ref.get_inputs()
    finally:
        np.random.set_state(saved)
    if hasattr(ref, "transform_to_nki_inputs"):
        inputs = ref.transform_to_nki_inputs(list(inputs))
    return placeholders(inputs)


def trace_case(case: Case, cache_dir: str | Path | None = None) -> tr.Trace:
    """Shape-only emulator trace of the case's kernel; kept in `cache_dir` when given
    (keyed by the kernel's source and the shape, so an edited kernel is traced again)."""
    from .. import run_kernel

    source = case.kernel.read_text()
    cached = None
    if cache_dir is not None:
        key = hashlib.sha256(json.dumps([tr.FORMAT, source, case.reference.read_text(), case.shape, case.function],
                                        sort_keys=True).encode()).hexdigest()[:16]
        cached = Path(cache_dir, f"{case.problem}-{case.kernel_name}-{key}.pkl")
        if cached.is_file():
            return pickle.loads(cached.read_bytes())
    trace = run_kernel(source, kernel_args(case), filename=str(case.kernel), kernel_name=case.function or "kernel",
                       shape_only=True).trace
    if cached is not None:
        # Written aside and renamed: processes sharing the folder never read half a file.
        cached.parent.mkdir(parents=True, exist_ok=True)
        partial = cached.with_name(f"{cached.name}.{os.getpid()}.part")
        partial.write_bytes(pickle.dumps(trace))
        os.replace(partial, cached)
    return trace


def agrees(predicted: str, measured: dict[str, Any]) -> bool | None:
    """Does the predicted bottleneck fit the measured engine-active fractions? A predicted
    Vector/Scalar/GpSimd bound must be the most active of those engines on hardware; a
    predicted TensorE, DMA or latency bound must leave them all below half of the time
    (TensorE and DMA activity were not measured). None when no activity was measured."""
    if not any(k in measured for k in ACTIVE.values()):
        return None
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


def fold_params(case: Case, base: Params, calibration: Calibration | None = None) -> Params | None:
    """The parameters fitted without any case of `case`'s family (its problem), unless the
    calibration (the shipped trn1 one, or a user's) used a different measurement under this
    case's name."""
    trained = calibration.trained_on if calibration else getattr(calibrated, "TRAINED_ON", {})
    folds = calibration.folds if calibration else getattr(calibrated, "TRN1_LOO", {})
    if case.name in trained and trained[case.name] != case_fingerprint(case):
        return None
    fold = folds.get(case.problem)
    if fold is None and case.function is not None and not any(n.startswith(case.problem) for n in trained):
        return base   # a series of a family the fit never saw: the parameters fitted on everything hold it out
    return None if fold is None else base.replace(**fold)


def predict_case(case: Case, trace: tr.Trace, hw: Hardware, params: Params) -> dict[str, Any]:
    est = estimate_with(trace, hw, params)
    m = case.measured
    pred = est.profile
    row: dict[str, Any] = {
        "name": case.name, "problem": case.problem, "kernel": case.kernel_name,
        "shape": case.shape_label,
        "measured_ms": m["latency"], "predicted_ms": est.latency_ms,
        "rel_error": est.latency_ms / m["latency"] - 1.0,
        "bottleneck": bottleneck_engine(pred), "summary": est.bottleneck,
        "instructions": len(trace.instrs),
    }
    row["bottleneck_agrees"] = agrees(row["bottleneck"], m)
    row["busy_ms"] = {ENGINE_NAMES[e]: float(pred[k]) * est.latency_ms for e, k in ENGINE_BUSY.items()}
    row["counters"] = {k: {"measured": m.get(k) or 0, "predicted": pred.get(k, 0)} for k in COUNTERS}
    return row


def model_check(measurements_path: str | Path, suite_dir: str | Path | None = None,
                target: str = "trn1", trace_cache: str | Path | None = None,
                calibration: Calibration | None = None) -> dict[str, Any]:
    """Predicted vs measured latency and counters per case, the same-shape pairs of
    different kernels, and a summary (see module doc); with a user's `calibration` (of
    `target`) its parameters and its held-out folds are used instead of the shipped ones."""
    hw = hardware(target)
    base = calibration.model_params() if calibration else for_target(target)
    cases = load_cases(measurements_path, suite_dir)
    rows = []
    for case in cases:
        t0 = time.perf_counter()
        trace = trace_case(case, trace_cache)
        t1 = time.perf_counter()
        fold = fold_params(case, base, calibration) if (calibration or target == "trn1") else None
        row = predict_case(case, trace, hw, fold or base)
        row["held_out"] = fold is not None
        if fold is not None:
            row["in_sample_ms"] = estimate_with(trace, hw, base).latency_ms
        row["trace_seconds"] = t1 - t0
        row["model_seconds"] = time.perf_counter() - t1
        rows.append(row)
        del trace
    series = any(c.function for c in cases)
    if series:
        for case, row in zip(cases, rows):
            row["version"] = case.version
    pairs = series_pairs(rows) if series else pair_rows(rows)
    held_label = "leave-family-out" if any(c.shape for c in cases) else "leave-one-out"
    summary = summarize(rows, target, hw.calibrated or calibration is not None, pairs, held_label)
    if series:
        summary.update(series_summary(rows, pairs))
    return {"cases": rows, "pairs": pairs,
            "summary": {**summary, "calibration": calibration.label if calibration else "shipped"}}


def ranked_right(measured_ratio: float, predicted_ratio: float) -> bool:
    """Does a predicted speedup order a pair as hardware does? A pair measured within
    TIE_WITHIN of each other is right when the prediction is within it too."""
    def tie(r: float) -> bool:
        return max(r, 1 / r) <= 1 + TIE_WITHIN

    if tie(measured_ratio):
        return tie(predicted_ratio)
    return (measured_ratio > 1) == (predicted_ratio > 1)


def pair_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every pair of different kernels measured at one problem and shape: the speedup of
    the second over the first (latency ratio), measured and predicted, and whether the
    prediction ranks them as hardware does. Kernels in name order (v1 before v2)."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["problem"], r.get("shape", "")), []).append(r)
    pairs = []
    for (problem, shape), group in groups.items():
        group = sorted(group, key=lambda r: r.get("kernel", r["name"]))
        for i, a in enumerate(group):
            for b in group[i + 1:]:
                if a.get("kernel", a["name"]) == b.get("kernel", b["name"]):
                    continue
                meas = a["measured_ms"] / b["measured_ms"]
                pred = a["predicted_ms"] / b["predicted_ms"]
                pair = {"problem": problem, "shape": shape, "first": a["name"], "second": b["name"],
                        "measured_speedup": meas, "predicted_speedup": pred,
                        "speedup_error": pred / meas - 1, "ranked_right": ranked_right(meas, pred)}
                if "in_sample_ms" in a and "in_sample_ms" in b:
                    ins = a["in_sample_ms"] / b["in_sample_ms"]
                    pair.update(in_sample_speedup=ins, in_sample_speedup_error=ins / meas - 1,
                                in_sample_ranked_right=ranked_right(meas, ins))
                pairs.append(pair)
    return pairs


WITHIN = 0.15   # a predicted speedup within 15% of the measured one counts as right in size


def series_pairs(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each consecutive pair of versions measured at one shape (a version not measured there
    is skipped: v8 -> v11 when v9 and v10 failed), with the speedup of the later version."""
    by_shape: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_shape.setdefault(r["shape"], []).append(r)
    pairs = []
    for shape, group in by_shape.items():
        group = sorted(group, key=lambda r: r["version"])
        for a, b in zip(group, group[1:]):
            meas = a["measured_ms"] / b["measured_ms"]
            pred = a["predicted_ms"] / b["predicted_ms"]
            pairs.append({"problem": a["problem"], "shape": shape, "first": a["name"], "second": b["name"],
                          "measured_speedup": meas, "predicted_speedup": pred, "speedup_error": pred / meas - 1,
                          "ranked_right": ranked_right(meas, pred), "within": abs(pred / meas - 1) <= WITHIN})
    return pairs


def series_summary(rows: list[dict[str, Any]], pairs: list[dict[str, Any]]) -> dict[str, Any]:
    """The series figures: pairs within 15%, and Spearman of the versions at each shape."""
    per_shape = {}
    for shape in dict.fromkeys(r["shape"] for r in rows):
        group = [r for r in rows if r["shape"] == shape]
        if len(group) > 1:
            per_shape[shape] = spearman([r["measured_ms"] for r in group], [r["predicted_ms"] for r in group])
    return {"pairs_within": sum(p["within"] for p in pairs), "pairs_ranked_right": sum(p["ranked_right"] for p in pairs),
            "spearman_per_shape": per_shape}


def summarize(rows: list[dict[str, Any]], target: str, calibrated_target: bool,
              pairs: list[dict[str, Any]] | None = None,
              held_label: str = "leave-one-out") -> dict[str, Any]:
    errs = [abs(r["rel_error"]) for r in rows]
    held = all(r.get("held_out") for r in rows)
    agreement = [r["bottleneck_agrees"] for r in rows if r["bottleneck_agrees"] is not None]
    out: dict[str, Any] = {
        "target": target,
        "cases": len(rows),
        "figures": held_label if held else ("in-sample" if calibrated_target else "uncalibrated"),
        "median_abs_rel_error": statistics.median(errs) if errs else None,
        "max_abs_rel_error": max(errs) if errs else None,
        "spearman": spearman([r["measured_ms"] for r in rows], [r["predicted_ms"] for r in rows])
        if len(rows) > 1 else None,
        "bottleneck_agreement": sum(agreement),
        "bottleneck_measured": len(agreement),
    }
    if any("in_sample_ms" in r for r in rows):
        ins = [abs(r.get("in_sample_ms", r["predicted_ms"]) / r["measured_ms"] - 1) for r in rows]
        out["in_sample_median_abs_rel_error"] = statistics.median(ins)
        out["in_sample_max_abs_rel_error"] = max(ins)
    for key in ("hbm_read_bytes", "hbm_write_bytes"):
        rel = [abs(r["counters"][key]["predicted"] / r["counters"][key]["measured"] - 1)
               for r in rows if r["counters"][key]["measured"]]
        out[f"median_abs_rel_error_{key}"] = statistics.median(rel) if rel else None
    if pairs:
        out["pairs"] = len(pairs)
        out["pairwise_ranking_accuracy"] = sum(p["ranked_right"] for p in pairs) / len(pairs)
        out["max_abs_speedup_error"] = max(abs(p["speedup_error"]) for p in pairs)
        if all("in_sample_ranked_right" in p for p in pairs):
            out["in_sample_pairwise_ranking_accuracy"] = \
                sum(p["in_sample_ranked_right"] for p in pairs) / len(pairs)
            out["in_sample_max_abs_speedup_error"] = \
                max(abs(p["in_sample_speedup_error"]) for p in pairs)
    return out


def _pct(x: float) -> str:
    return f"{100 * x:+.1f}%"


def format_model_check(result: dict[str, Any]) -> str:
    """A terminal table: one line per case, the same-shape pairs, then the summary."""
    head = (f"{'kernel':<24} {'meas ms':>8} {'pred ms':>8} {'error':>7} {'fit ms':>8}  {'bound':<8} ok "
            f"{'rd err':>7} {'wr err':>7}  {'S% m/p':>9} {'V% m/p':>9}")
    lines = [head, "-" * len(head)]
    for r in result["cases"]:
        c = r["counters"]

        def err(key: str) -> str:
            m, p = c[key]["measured"], c[key]["predicted"]
            return _pct(p / m - 1) if m else "-"

        def act(key: str) -> str:
            m = f"{100 * c[key]['measured']:.0f}" if r["bottleneck_agrees"] is not None else "-"
            return f"{m}/{100 * c[key]['predicted']:.0f}"

        bound = ENGINE_NAMES.get(r["bottleneck"], r["bottleneck"])
        ok = {True: "y", False: "n", None: "-"}[r["bottleneck_agrees"]]
        fit = f"{r['in_sample_ms']:>8.3f}" if "in_sample_ms" in r else f"{'-':>8}"
        label = r["name"] if r.get("shape") else r["problem"]
        lines.append(
            f"{label:<24} {r['measured_ms']:>8.3f} {r['predicted_ms']:>8.3f} "
            f"{_pct(r['rel_error']):>7} {fit}  {bound:<8} {ok:>2} "
            f"{err('hbm_read_bytes'):>7} {err('hbm_write_bytes'):>7}  "
            f"{act('scalar_engine_active_time_percent'):>9} {act('vector_engine_active_time_percent'):>9}")
    s = result["summary"]
    lines.append("-" * len(head))
    pairs = result.get("pairs") or []
    if pairs:
        phead = (f"{'pair (speedup of 2nd over 1st)':<44} {'measured':>8} {'pred':>7} {'error':>7} "
                 f"{'rank':>4} {'fit':>7} {'error':>7} {'rank':>4}")
        lines += [phead, "-" * len(phead)]
        for p in pairs:
            first, second = p["first"].split("@")[0], p["second"].split("@")[0]
            fit = (f"{p['in_sample_speedup']:>7.2f} {_pct(p['in_sample_speedup_error']):>7} "
                   f"{'y' if p['in_sample_ranked_right'] else 'n':>4}") if "in_sample_speedup" in p else ""
            lines.append(
                f"{first + ' -> ' + second + ' ' + p['shape']:<44} {p['measured_speedup']:>8.2f} "
                f"{p['predicted_speedup']:>7.2f} {_pct(p['speedup_error']):>7} "
                f"{'y' if p['ranked_right'] else 'n':>4} {fit}")
        lines.append("-" * len(phead))
    agree = (f", bottleneck agrees {s['bottleneck_agreement']}/{s['bottleneck_measured']}"
             if s["bottleneck_measured"] else "")
    lines.append(
        f"{s['target']} estimate vs measurement ({s['figures']} figures, {s['cases']} cases"
        f"{'' if s.get('calibration', 'shipped') == 'shipped' else ', ' + s['calibration']}): "
        f"median |error| {100 * s['median_abs_rel_error']:.1f}%, max {100 * s['max_abs_rel_error']:.1f}%, "
        f"Spearman {s['spearman']:.3f}{agree}")
    if "pairs" in s:
        lines.append(f"same-shape pairs ({s['figures']}): {s['pairs']}, ranked right "
                     f"{100 * s['pairwise_ranking_accuracy']:.0f}%, max |speedup error| "
                     f"{100 * s['max_abs_speedup_error']:.1f}%")
    if "spearman_per_shape" in s:
        lines.append(f"consecutive versions: {s['pairs']} pairs, ordered right {s['pairs_ranked_right']}, speedup "
                     f"within {100 * WITHIN:.0f}% {s['pairs_within']}; Spearman per shape: "
                     + ", ".join(f"{k} {v:.3f}" for k, v in s["spearman_per_shape"].items()))
    if "in_sample_median_abs_rel_error" in s:
        line = (f"final calibration (fit on everything): median |error| "
                f"{100 * s['in_sample_median_abs_rel_error']:.1f}%, "
                f"max {100 * s['in_sample_max_abs_rel_error']:.1f}%")
        if "in_sample_pairwise_ranking_accuracy" in s:
            line += (f"; pairs ranked right {100 * s['in_sample_pairwise_ranking_accuracy']:.0f}%, "
                     f"max |speedup error| {100 * s['in_sample_max_abs_speedup_error']:.1f}%")
        lines.append(line)
    return "\n".join(lines)
