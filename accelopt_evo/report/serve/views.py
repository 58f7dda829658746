"""The JSON views of a run that the page draws, as pure functions of what the report reads
(report.RunData): a summary per problem, the lineage tree of a problem, one kernel, the memory.

Every figure comes from the report's own derivations (best series, baseline, best kernel,
lineage, figure labels), so the page and report.md never disagree. Text from the run folder
(kernel sources, plans, rationales, errors) is passed through as JSON strings; the page sets
it as text.
"""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from typing import Any

from accelopt_evo.report.markdown import (
    Kernel,
    RunData,
    baseline_kernel,
    best_kernel,
    best_series,
    diversity,
    kernel_index,
    kernel_source,
    lineage,
    operators_line,
    problems,
    run_label,
)
from accelopt_evo.report.plots import STATUS_COLORS
from accelopt_evo.run.records import MemoryEntry, figure_label
from fitness.result import STATUSES, EvalResult
from operators.diff import kernel_diff
from operators.llm.budget import Totals
from operators.llm.ledger import billed_totals

KERNEL_ID = re.compile(r"^[0-9a-f]{6,64}$")   # content addresses; anything else is never a file name
MAX_DIFF_LINES = 2000
BUDGET_KEYS = ("max_usd", "max_tokens", "max_llm_calls")


def clean(value: Any) -> Any:
    """`value` with every non-finite float as None (JSON has no NaN or infinity)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    return value


def _kernel_brief(k: Kernel | None) -> dict[str, Any] | None:
    if k is None:
        return None
    return {"id": k.id, "generation": k.generation, "operator": k.operator, "status": k.status,
            "speedup": k.speedup, "percent_of_peak": k.percent_of_peak, "latency_ms": k.latency_ms}


def _totals(t: Totals, calls: int) -> dict[str, Any]:
    return {"calls": calls, "billed_calls": t.calls, "prompt_tokens": t.prompt_tokens,
            "completion_tokens": t.completion_tokens, "tokens": t.tokens, "cost_usd": t.cost_usd}


# --------------------------------------------------------------------------------------------


def summary(data: RunData) -> dict[str, Any]:
    """Where the run stands, and per problem its curve, baseline, best kernel, outcomes and LLM use;
    the state of its `selection.strategy` and novelty (report.diversity; None for one population
    without novelty)."""
    index = kernel_index(data)
    late = [e.generation for e in data.evaluations if e.generation > data.last_generation]
    budget = {k: data.setting("budget", k, 0) for k in BUDGET_KEYS}
    return clean({
        "name": data.folder.root.name,
        "label": run_label(data),
        "hosts": sorted({e.result.host for e in data.evaluations if e.result.host}),
        "generation": data.last_generation,
        "gens": data.setting("run", "gens"),
        "evaluating": max(late) if late else None,
        "operators": operators_line(data),
        "seed": data.setting("run", "seed"),
        "offline": data.offline,
        "problems": [_problem(data, name, index) for name in problems(data)],
        "llm": {**_totals(billed_totals(data.llm_calls), len(data.llm_calls)),
                "budget": budget, "cached": sum(c.cached for c in data.llm_calls)},
        "notes": data.notes,
        "diversity": diversity(data),
        "statuses": list(STATUSES),
        "status_colors": STATUS_COLORS,
    })


def _problem(data: RunData, name: str, index: dict[tuple[str, str], Kernel]) -> dict[str, Any]:
    fresh = [e for e in data.evaluations if e.problem == name and not e.reused]
    by_gen: dict[int, Counter] = defaultdict(Counter)
    for e in fresh:
        by_gen[e.generation][e.result.status] += 1
    calls = [c for c in data.llm_calls if c.problem == name]
    return {
        "name": name,
        "label": run_label(data, name),
        "series": [list(point) for point in best_series(data, name)],
        "baseline": _kernel_brief(baseline_kernel(data, name, index)),
        "best": _kernel_brief(best_kernel(data, name)),
        "evaluations": len(fresh),
        "reused": sum(e.reused for e in data.evaluations if e.problem == name),
        "statuses": dict(Counter(e.result.status for e in fresh)),
        "statuses_by_generation": [[g, dict(c)] for g, c in sorted(by_gen.items())],
        "llm": _totals(billed_totals(calls), len(calls)),
    }


def tree(data: RunData, problem: str) -> dict[str, Any] | None:
    """Every kernel of a problem with its parents (None: the run has no such problem)."""
    if problem not in problems(data):
        return None
    index = kernel_index(data)
    nodes = [k for (p, _), k in index.items() if p == problem]
    best = best_kernel(data, problem)
    base = baseline_kernel(data, problem, index)
    chain = [k.id for k in lineage(best, index)[0]] if best and (problem, best.id) in index else []
    return clean({
        "problem": problem,
        "nodes": [{"id": k.id, "generation": k.generation, "operator": k.operator, "parents": list(k.parent_ids),
                   "status": k.status, "speedup": k.speedup, "percent_of_peak": k.percent_of_peak} for k in nodes],
        "best": best.id if best else None,
        "baseline": base.id if base else None,
        "chain": chain,
    })


def _result(data: RunData, problem: str, kernel_id: str) -> EvalResult | None:
    """The kernel's verdict: its first evaluation, else what the newest checkpoint keeps."""
    for e in data.evaluations:
        if e.problem == problem and e.kernel_id == kernel_id:
            return e.result
    ck = data.checkpoint
    if ck is None:
        return None
    for section in (ck.hall_of_fame, ck.population):
        for m in section.get(problem, ()):
            if m.id == kernel_id and m.result is not None:
                return m.result
    info = ck.problems.get(problem)
    return info.known.get(kernel_id) if info else None


def kernel(data: RunData, problem: str, kernel_id: str) -> dict[str, Any] | None:
    """One kernel: source, diff to each parent, verdict, profile and bottleneck line, operator,
    plan (the operator's note) and the memory's rationales of pairs it is in. None when the run
    has no such kernel."""
    if not KERNEL_ID.match(kernel_id):
        return None
    index = kernel_index(data)
    k = index.get((problem, kernel_id))
    if k is None:
        return None
    best = best_kernel(data, problem)
    source = kernel_source(data.folder, k.id, problem if best and best.id == k.id else None)
    result = _result(data, problem, k.id)
    profile = dict(result.profile) if result else {}
    bottleneck = profile.pop("bottleneck", "")
    diffs = []
    for pid in k.parent_ids:
        before = kernel_source(data.folder, pid) if KERNEL_ID.match(pid) else None
        diff = (kernel_diff(before, source, MAX_DIFF_LINES) if before is not None and source is not None
                else "(no diff: the source of " + ("the parent" if before is None else "this kernel")
                + " is missing from the run folder)")
        diffs.append({"parent": pid, "diff": diff})
    parents = [index.get((problem, pid)) for pid in k.parent_ids]
    children = [c for (p, _), c in index.items() if p == problem and k.id in c.parent_ids]
    lessons = [(i, e) for i, e in enumerate(data.memory) if e.problem == problem and k.id in (e.child_id, e.parent_id)]
    return clean({
        "id": k.id, "problem": problem, "generation": k.generation, "operator": k.operator, "note": k.note,
        "status": k.status, "error": result.error if result else "",
        "latency_ms": k.latency_ms, "speedup": k.speedup, "percent_of_peak": k.percent_of_peak,
        "label": figure_label(result.backend, result.target, result.calibration, result.instance_type)
        if result else "", "dialect": result.dialect if result else None,
        "seconds": result.seconds if result else None,
        "bottleneck": str(bottleneck or ""), "profile": profile,
        "source": source, "diffs": diffs,
        "parents": [_kernel_brief(p) or {"id": pid} for p, pid in zip(parents, k.parent_ids)],
        "children": [_kernel_brief(c) for c in sorted(children, key=lambda c: (c.generation, c.id))],
        "lessons": [_lesson(e, i) for i, e in lessons],
        "best": bool(best and best.id == k.id),
    })


def memory(data: RunData) -> dict[str, Any]:
    """The optimization memory's lessons, newest first (by generation, then as written)."""
    order = sorted(enumerate(data.memory), key=lambda p: (p[1].generation, p[0]), reverse=True)
    return clean({"entries": [_lesson(e, i) for i, e in order]})


def _lesson(e: MemoryEntry, position: int) -> dict[str, Any]:
    return {"position": position, "problem": e.problem, "kind": e.kind, "speedup": e.speedup,
            "generation": e.generation, "operator": e.operator, "parent_id": e.parent_id,
            "child_id": e.child_id, "rationale": e.rationale, "diff": e.diff, "reversed": e.reversed}
