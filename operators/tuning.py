"""Offline variation operators: they need no LLM and work on any kernel.

A mutation draws, with the weights of `operators.knob_weight` and `operators.rewrite_weight`,
between a knob move (a declared `# tune:` knob or a knob found in the source, operators.found_knobs)
and a structural rewrite (operators.rewrites); a kind that has nothing to offer for the parent
is not drawn. A crossover takes each differing region of the two parents' sources (a knob
value, a rewritten statement) from one parent or the other with equal probability. The
memory's rationale is the mechanical description of what was applied.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from fitness.correctness.normalize import kernel_id

from . import found_knobs, rewrites
from .base import CROSSOVER, MUTATION, Child, Context, Operators, Parent, Request
from .knobs import find_knobs, set_knobs

DEFAULT_PARTITIONS = 128   # when the context names no target
DRAWS = 4                  # crossover tries per request for a mix not tried yet


def tune_mutation(source: str, rng: np.random.Generator) -> tuple[str, str] | None:
    """(child source, note) moving one declared knob to another of its listed values, or None
    when the kernel has no knob with an alternative value."""
    movable = [k for k in find_knobs(source).values() if any(c != k.value for c in k.choices)]
    if not movable:
        return None
    knob = movable[rng.integers(len(movable))]
    options = [c for c in knob.choices if c != knob.value]
    value = options[rng.integers(len(options))]
    return set_knobs(source, {knob.name: value}), f"{knob.name}: {knob.value} -> {value}"


def declared_moves(source: str) -> list[tuple[str, int, int]]:
    """(knob, value, new value) for every listed alternative of every declared knob."""
    return [(k.name, k.value, c) for k in find_knobs(source).values() for c in k.choices if c != k.value]


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


def region_crossover(a: str, b: str, rng: np.random.Generator) -> tuple[str, str] | None:
    """(child source, note): parent `a` with each region where `b` differs taken from `b` with
    probability 1/2, at least one region from each; None when they differ in fewer than two."""
    la, lb = a.splitlines(keepends=True), b.splitlines(keepends=True)
    ops = [op for op in difflib.SequenceMatcher(None, la, lb, autojunk=False).get_opcodes()]
    regions = [i for i, op in enumerate(ops) if op[0] != "equal"]
    if len(regions) < 2:
        return None
    take = {i for i in regions if rng.random() < 0.5}
    if not take or len(take) == len(regions):   # the child would be a parent: flip one region
        flip = regions[rng.integers(len(regions))]
        take ^= {flip}
    out: list[str] = []
    for i, (tag, i1, i2, j1, j2) in enumerate(ops):
        out += lb[j1:j2] if i in take else la[i1:i2]
    lines = ", ".join(str(ops[i][1] + 1) for i in sorted(take))
    return "".join(out), f"crossover: {len(take)} of {len(regions)} differing regions from the second parent (lines {lines})"


def knob_changes(parent: str, child: str) -> list[str]:
    """Human-readable knob differences between two kernels, e.g. ['LOAD_N 512 -> 2048']."""
    kp, kc = find_knobs(parent), find_knobs(child)
    return [f"{n} {kp[n].value} -> {kc[n].value}" for n in kp if n in kc and kp[n].value != kc[n].value]


SEARCH = "search"                  # knobs found in the source, rewrites, region crossover
DECLARED_KNOBS = "declared_knobs"  # earlier releases: `# tune:` knobs only (old run folders resume so)
OFFLINE_MODES = (SEARCH, DECLARED_KNOBS)


@dataclass(frozen=True)
class Mutation:
    """What the offline operators may do: their mode, the weights of knob moves and rewrites,
    the rewrites."""

    mode: str = SEARCH
    knob_weight: float = 1.0
    rewrite_weight: float = 1.0
    rewrites: tuple[str, ...] = tuple(rewrites.REWRITES)


def mutate(source: str, ctx: Context, rng: np.random.Generator, settings: Mutation = Mutation(),
           exclude: frozenset[str] | set[str] = frozenset(),
           known: frozenset[str] = frozenset()) -> tuple[str, str, str] | None:
    """(child source, operator, note) of one mutation other than the sources in `exclude` and
    the kernels whose id is in `known`, or None when nothing (else) applies."""
    partitions = ctx.machine.partitions if ctx.machine else DEFAULT_PARTITIONS
    knob_moves: list[tuple[str, str]] = [
        (set_knobs(source, {n: v}), f"{n}: {old} -> {v}") for n, old, v in declared_moves(source)]
    knob_moves += [(found_knobs.apply(source, m), m.note) for m in found_knobs.moves(source, ctx.dims, partitions)]
    knob_moves = [(s, note) for s, note in knob_moves if s != source and s not in exclude]
    applied = rewrites.applications(source, settings.rewrites) if settings.rewrite_weight > 0 else {}
    applied = {name: kept for name, apps in applied.items() if (kept := [a for a in apps if a.source not in exclude])}
    # Draw, and draw again without a candidate that was tried already or does not parse: the
    # checks cost more than the rewrites, so only drawn candidates pay them.
    while True:
        kinds = [(w, kind) for w, kind, has in ((settings.knob_weight, "knob", knob_moves),
                                                 (settings.rewrite_weight, "rewrite", applied)) if has and w > 0]
        if not kinds:
            return None
        weights = np.array([w for w, _ in kinds], dtype=float)
        kind = kinds[int(rng.choice(len(kinds), p=weights / weights.sum()))][1]
        if kind == "knob":
            child, note = knob_moves.pop(rng.integers(len(knob_moves)))
            made = (child, "tune_mutation", note)
        else:
            name = sorted(applied)[rng.integers(len(applied))]
            app = applied[name].pop(rng.integers(len(applied[name])))
            if not applied[name]:
                del applied[name]
            if not rewrites.parses(app):   # a rewrite's bug: never a child
                continue
            made = (app.source, "rewrite_mutation", app.note)
        if not (known and kernel_id(made[0]) in known):
            return made


class TuningOperators(Operators):
    """The offline operator set: one child per request, no spending, no repair."""

    name = "tuning"

    def __init__(self, settings: Mutation = Mutation()) -> None:
        self.settings = settings

    def vary(self, requests: Sequence[Request], ctx: Context) -> list[list[Child]]:
        if self.settings.mode == DECLARED_KNOBS:
            return self._vary_declared(requests, ctx)
        out: list[list[Child]] = []
        made_here: set[str] = set()
        for req in requests:
            ids = tuple(p.id for p in req.parents)
            if req.kind not in (MUTATION, CROSSOVER):
                raise ValueError(f"unknown request kind {req.kind!r}")
            made = self._one(req, ctx, made_here)
            if made is not None:
                made_here.add(made[0])
            if made is None:
                out.append([Child(None, "tune_mutation", ids, error="no knob move or rewrite applies to the kernel")])
            else:
                out.append([Child(made[0], made[1], ids, note=made[2])])
        return out

    def _one(self, req: Request, ctx: Context, made: set[str]) -> tuple[str, str, str] | None:
        """(source, operator, note) of one child for the request that is none of `made` (the
        children of this call so far) where it can be, or None."""
        def fresh(child: str) -> bool:
            return child not in made and kernel_id(child) not in ctx.known

        if req.kind == CROSSOVER and len(req.parents) == 2:
            for _ in range(DRAWS):
                crossed = region_crossover(req.parents[0].source, req.parents[1].source, ctx.rng)
                if crossed is None or fresh(crossed[0]):
                    break
            if crossed is not None and fresh(crossed[0]):
                return crossed[0], "tune_crossover", crossed[1]
        # a mutation, or a crossover of parents too alike to mix (or whose mixes were all tried):
        # a kernel not tried yet where there is one, else one this call has not made, else any
        parent = req.parents[0].source
        return (mutate(parent, ctx, ctx.rng, self.settings, made, ctx.known)
                or mutate(parent, ctx, ctx.rng, self.settings, made)
                or mutate(parent, ctx, ctx.rng, self.settings))

    @staticmethod
    def _vary_declared(requests: Sequence[Request], ctx: Context) -> list[list[Child]]:
        """The operators of earlier releases: a declared knob moved, or declared knobs crossed."""
        out: list[list[Child]] = []
        for req in requests:
            ids = tuple(p.id for p in req.parents)
            if req.kind == CROSSOVER and len(req.parents) == 2:
                made, op = tune_crossover(req.parents[0].source, req.parents[1].source, ctx.rng), "tune_crossover"
            else:
                made, op = tune_mutation(req.parents[0].source, ctx.rng), "tune_mutation"
            if made is None:
                out.append([Child(None, op, ids, error="the kernel has no '# tune:' knob to change")])
            else:
                out.append([Child(made[0], op, ids, note=made[1])])
        return out

    def summarize(self, pairs: Sequence[tuple[Parent, Parent, float]], ctx: Context) -> list[str]:
        if self.settings.mode == DECLARED_KNOBS:
            return [f"Knob change {'; '.join(knob_changes(p.source, c.source)) or 'a change outside the knobs'} "
                    f"made the {ctx.problem} kernel {r:.2f}x as fast ({'faster' if r >= 1 else 'slower'})."
                    for p, c, r in pairs]
        notes = []
        for before, after, ratio in pairs:
            if before.id in after.parent_ids and after.note:
                what = after.note
            elif after.id in before.parent_ids and before.note:
                what = f"undoing ({before.note})"
            else:
                what = "; ".join(knob_changes(before.source, after.source)) or "a change of the source"
            verdict = "faster" if ratio >= 1 else "slower"
            notes.append(f"{what[0].upper()}{what[1:]} made the {ctx.problem} kernel {ratio:.2f}x as fast ({verdict}).")
        return notes
