"""Offline variation operators that tune `# tune:` knobs; they need no LLM.

`tune_mutation` moves one knob to another of its listed values; `tune_crossover` takes each
knob both parents share from one parent or the other with equal probability (uniform
crossover). The rationale for the memory is a mechanical description of the knob change.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from .base import CROSSOVER, MUTATION, Child, Context, Operators, Parent, Request
from .knobs import find_knobs, set_knobs


def tune_mutation(source: str, rng: np.random.Generator) -> tuple[str, str] | None:
    """(child source, note), or None when the kernel has no knob with an alternative value."""
    movable = [k for k in find_knobs(source).values() if any(c != k.value for c in k.choices)]
    if not movable:
        return None
    knob = movable[rng.integers(len(movable))]
    options = [c for c in knob.choices if c != knob.value]
    value = options[rng.integers(len(options))]
    return set_knobs(source, {knob.name: value}), f"{knob.name}: {knob.value} -> {value}"


def tune_crossover(a: str, b: str, rng: np.random.Generator) -> tuple[str, str] | None:
    """(child source, note) built on parent `a`, or None when the parents share no knob."""
    ka, kb = find_knobs(a), find_knobs(b)
    shared = [name for name in ka if name in kb]
    if not shared:
        return None
    # One draw per shared knob, in declaration order, so the outcome depends only on the rng.
    take_b = {name: kb[name].value for name in shared if rng.random() < 0.5}
    changed = {n: v for n, v in take_b.items() if v != ka[n].value}
    note = ", ".join(f"{n}: {ka[n].value} -> {v}" for n, v in changed.items()) or "no knob changed"
    return set_knobs(a, changed), f"uniform crossover of {', '.join(shared)} ({note})"


def knob_changes(parent: str, child: str) -> list[str]:
    """Human-readable knob differences between two kernels, e.g. ['LOAD_N 512 -> 2048']."""
    kp, kc = find_knobs(parent), find_knobs(child)
    return [f"{n} {kp[n].value} -> {kc[n].value}" for n in kp if n in kc and kp[n].value != kc[n].value]


class TuningOperators(Operators):
    """The offline operator set: one child per request, no spending, no repair."""

    name = "tuning"

    def vary(self, requests: Sequence[Request], ctx: Context) -> list[list[Child]]:
        out: list[list[Child]] = []
        for req in requests:
            ids = tuple(p.id for p in req.parents)
            if req.kind == CROSSOVER and len(req.parents) == 2:
                made, op = tune_crossover(req.parents[0].source, req.parents[1].source, ctx.rng), "tune_crossover"
            elif req.kind in (MUTATION, CROSSOVER):
                made, op = tune_mutation(req.parents[0].source, ctx.rng), "tune_mutation"
            else:
                raise ValueError(f"unknown request kind {req.kind!r}")
            if made is None:
                out.append([Child(None, op, ids, error="the kernel has no '# tune:' knob to change")])
            else:
                out.append([Child(made[0], op, ids, note=made[1])])
        return out

    def summarize(self, pairs: Sequence[tuple[Parent, Parent, float]], ctx: Context) -> list[str]:
        notes = []
        for parent, child, ratio in pairs:
            changes = "; ".join(knob_changes(parent.source, child.source)) or "a change outside the knobs"
            verdict = "faster" if ratio >= 1 else "slower"
            notes.append(f"Knob change {changes} made the {ctx.problem} kernel {ratio:.2f}x as fast ({verdict}).")
        return notes
