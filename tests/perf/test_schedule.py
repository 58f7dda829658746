"""The per-engine list scheduler (schedule.py) on a hand-built graph."""

from __future__ import annotations

import pytest

from fitness.simulator import trace as tr
from fitness.simulator.perf import hardware
from fitness.simulator.perf.model import prepare
from fitness.simulator.perf.params import DOCUMENTED
from fitness.simulator.perf.schedule import schedule

from .builder import TraceBuilder

P = 128


def _two_chains(dialect: str) -> tr.Trace:
    """Two independent chains of two dependent VectorE instructions, one after the other in
    program order: a1 -> a2, then b1 -> b2 (inputs in SBUF, no DMA)."""
    b = TraceBuilder()
    b.trace.dialect = dialect
    tiles = [b.tile((P, 512), line=1 + k) for k in range(6)]
    for x, first, second in ((0, 2, 3), (1, 4, 5)):
        b.compute(tr.TT, (b.full(tiles[x]), b.full(tiles[x])), b.full(tiles[first]),
                  func="multiply")
        b.compute(tr.TT, (b.full(tiles[first]), b.full(tiles[x])), b.full(tiles[second]),
                  func="add")
    return b.trace


def _run(dialect: str, window: int):
    hw = hardware("trn1")
    params = DOCUMENTED.replace(list_window=window, reorder_window=0)
    prep = prepare(_two_chains(dialect), hw, params)
    ids = [i for i, op in enumerate(prep.prog.ops) if op.kind == tr.TT]
    return schedule(prep.prog, prep.preds, hw, params), ids, params, hw


def test_list_scheduler_issues_ready_work_while_a_dependent_instruction_drains():
    in_order, ids, params, hw = _run("legacy", 1)
    listed, ids2, _, _ = _run("legacy", 2)
    assert ids == ids2
    a1, a2, b1, b2 = ids
    drain = params.dependent_drain_cycles / hw.vector_hz * 1e9
    # Program order: a2 waits a1's drain, b1 runs after a2.
    assert in_order.start[a2] == pytest.approx(in_order.end[a1] + drain)
    assert in_order.start[b1] == pytest.approx(in_order.end[a2])
    # List scheduler: b1 fills a1's drain, a2 then b2 follow; no drain is left.
    assert listed.start[b1] == pytest.approx(listed.end[a1])
    assert listed.start[a2] == pytest.approx(listed.end[b1])
    assert listed.start[b2] == pytest.approx(listed.end[a2])
    assert listed.makespan_ns == pytest.approx(in_order.makespan_ns - 2 * drain)


def test_current_dialect_keeps_program_order():
    in_order, *_ = _run("current", 1)
    listed, *_ = _run("current", 8)
    assert listed.start == in_order.start


def test_list_scheduler_never_issues_an_instruction_before_its_inputs():
    """A single dependent chain has nothing to reorder: the list scheduler leaves it as is."""
    b = TraceBuilder()
    tiles = [b.tile((P, 512), line=1 + k) for k in range(4)]
    for k in range(3):
        b.compute(tr.TT, (b.full(tiles[k]), b.full(tiles[0])), b.full(tiles[k + 1]),
                  func="add")
    hw = hardware("trn1")
    got = []
    for window in (1, 16):
        params = DOCUMENTED.replace(list_window=window, reorder_window=0)
        prep = prepare(b.trace, hw, params)
        got.append(schedule(prep.prog, prep.preds, hw, params).start)
    assert got[0] == got[1]
