"""What `python -m accelopt_evo problems` shows: every problem at its default shape with its
roofline peak and, on request, the simulated latency of its baseline.

Roofline figures and simulation come from `fitness`, imported inside the functions that need
them so that listing names stays cheap.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from nkibench import paper
from nkibench.problem import DIALECT_NAMES, Problem
from nkibench.registry import ProblemError, baseline_dialects, builtin_names, load, make_spec


def _paper_baseline(name: str) -> float | None:
    figures = paper.TRN1_PERCENT_OF_PEAK.get(name)
    return figures[0] if figures else None



def _measured_baselines(suite_dir: str) -> dict[str, float]:
    """Hardware baseline latencies (ms) of a suite folder that ships trn1_measurements.json,
    keyed by kernel path relative to the folder; empty when there is none."""
    path = Path(suite_dir) / "trn1_measurements.json"
    try:
        cases = json.loads(path.read_text()).get("cases", {})
    except (OSError, ValueError, AttributeError):
        return {}
    out = {}
    for case in cases.values():
        try:
            out[str(Path(case["kernel"]))] = float(case["baseline"]["latency"])
        except (KeyError, TypeError, ValueError):
            continue
    return out


def simulate_baseline(problem: Problem, target: str = "trn1") -> float:
    """Latency (ms) the performance model estimates for the problem's baseline kernel,
    from a shape-only run of the emulator."""
    from fitness.simulator import placeholders, run_kernel
    from fitness.simulator.perf import estimate

    args = placeholders(problem.to_kernel_inputs(problem.make_inputs(0)))
    run = run_kernel(problem.baseline_source, args, filename=str(problem.baseline_path), shape_only=True)
    return float(estimate(run.trace, target).latency_ms)


def problem_rows(suite_dir: str | None = None, *, simulate: bool = False, target: str = "trn1",
                 dialects: tuple[str, ...] | None = None) -> list[dict[str, Any]]:
    """One dict per problem and baseline dialect (per case of a suite folder): name, params,
    suite_dir, dialect, baseline_path, tolerance, target, label (how the target's figures are
    named), peak_source, bound, peak_latency_ms, paper_baseline_percent, and the simulated
    baseline_latency_ms and percent_of_peak when `simulate` and the target takes the dialect
    (else None). `dialects`: only baselines of these (default: every one a problem has). For
    a suite folder, also measured_baseline_ms and measured_percent_of_peak when it ships trn1
    measurements (else None). Unknown counts give bound and peak None, never a guess."""
    from fitness.measures.roofline import peaks, percent_of_peak, roofline
    from fitness.simulator.dialect import IMPORTS
    from fitness.simulator.perf import hardware, label

    takes = hardware(target).dialects
    for d in dialects or ():
        if d not in takes:
            raise ProblemError(f"the {DIALECT_NAMES[d]} NKI dialect ({IMPORTS[d]}) never ran on {target}")
    if suite_dir:
        from nkibench.official import official_spec, read_summary

        specs = [official_spec(suite_dir, name, case.values)
                 for name, cases in read_summary(suite_dir).items() for case in cases]
    else:
        specs = [make_spec(name, dialect=d) for name in builtin_names() for d in baseline_dialects(name)
                 if dialects is None or d in dialects]
    measured = _measured_baselines(suite_dir) if suite_dir else {}
    rows = []
    for spec in specs:
        name = spec.name
        problem = load(spec)
        dialect = spec.dialect or baseline_dialects(name, suite_dir or "")[0]
        peak = bound = None
        if problem.counts is not None:
            c = problem.counts
            line = roofline(c, target)
            peak, bound = line.peak_latency_ms, line.bound
        row: dict[str, Any] = {
            "name": name,
            "params": problem.params,
            "suite_dir": suite_dir or "",
            "dialect": DIALECT_NAMES[dialect],
            "baseline_path": str(problem.baseline_path),
            "tolerance": problem.tolerance,
            "target": target,
            "label": label(target),
            "peak_source": peaks(target).note,
            "bound": bound,
            "peak_latency_ms": peak,
            "paper_baseline_percent": _paper_baseline(name) if target == "trn1" else None,
            "baseline_latency_ms": None,
            "percent_of_peak": None,
        }
        if suite_dir:
            try:
                rel = str(problem.baseline_path.relative_to(Path(suite_dir).resolve()))
            except ValueError:  # a kernel outside the folder has no measurement of the folder
                rel = ""
            row["measured_baseline_ms"] = measured.get(rel)
            row["measured_percent_of_peak"] = (
                percent_of_peak(peak, row["measured_baseline_ms"]) if target == "trn1" else None)
        if simulate and dialect in takes:
            row["baseline_latency_ms"] = simulate_baseline(problem, target)
            row["percent_of_peak"] = percent_of_peak(peak, row["baseline_latency_ms"])
        rows.append(row)
    return rows


def _fmt(value: Any, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def format_problem_table(rows: list[dict[str, Any]]) -> str:
    """A fixed-width text table of `problem_rows` output."""
    has_measured = any("measured_baseline_ms" in r for r in rows)
    header = ["problem", "dialect", "shape", "bound", "peak ms", "baseline ms", "% of peak", "paper %"]
    if has_measured:
        header += ["trn1 ms", "trn1 %"]
    lines = [header]
    for r in rows:
        cells = [
            r["name"],
            r.get("dialect", "legacy"),
            ",".join(f"{k}={v}" for k, v in r["params"].items()),
            r["bound"] or "?",
            _fmt(r["peak_latency_ms"], ".3f"),
            _fmt(r["baseline_latency_ms"], ".3f"),
            _fmt(r["percent_of_peak"], ".1f"),
            _fmt(r["paper_baseline_percent"], "d"),
        ]
        if has_measured:
            cells += [_fmt(r.get("measured_baseline_ms"), ".3f"), _fmt(r.get("measured_percent_of_peak"), ".1f")]
        lines.append(cells)
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    text = ["  ".join(c.ljust(w) if i < 4 else c.rjust(w) for i, (c, w) in enumerate(zip(line, widths)))
            for line in lines]
    target = rows[0]["target"] if rows else "trn1"
    what = rows[0]["label"] if rows else f"simulated {target}"
    note = (f"peak: {target} roofline of the paper's flop/byte counts; baseline ms, % of peak: {what} "
            f"('-' = not simulated); paper %: the paper's trn1 baseline")
    if rows and target != "trn1":
        note += f"\nroofline peaks: {rows[0]['peak_source']}"
    if has_measured:
        note += "; trn1 ms, trn1 %: the suite's hardware measurement of its baseline"
    text.append(note)
    return "\n".join(text)
