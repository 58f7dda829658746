"""The model of current-dialect traces: no neuronx-cc effects, rotating loop-body buffers,
every instruction kind the current front-end records has a cost, and trn3 entries."""

from __future__ import annotations

import dataclasses
import pickle

import numpy as np
import pytest

from fitness.simulator import placeholders, run_kernel
from fitness.simulator import trace as tr
from fitness.simulator.perf import TARGETS, estimate, hardware
from fitness.simulator.perf.deps import build
from fitness.simulator.perf.model import counters, prepare
from fitness.simulator.perf.params import DOCUMENTED, for_target

from nkibench.registry import example_names, load, make_spec, shape_names

from .builder import P, TraceBuilder
from .test_compiler import _reused_weights

HW = hardware("trn2")


def _as(trace: tr.Trace, dialect: str) -> tr.Trace:
    return dataclasses.replace(trace, dialect=dialect)


def test_legacy_compiler_effects_do_not_apply_to_current_traces():
    trace = _reused_weights(rows=8, tiles=16)
    legacy = prepare(_as(trace, "legacy"), HW, DOCUMENTED)
    current = prepare(_as(trace, "current"), HW, DOCUMENTED)
    assert legacy.report.removed_duplicates == 7 * 16
    assert current.report.removed_duplicates == 0 and current.report == type(current.report)()
    # the NKI compiler keeps the author's loads: every one of them moves its bytes
    assert counters(current.ops)["hbm_read_bytes"] == (8 * 16 + 8) * P * 512 * 4


def _sequential_tiles(n: int) -> tr.Trace:
    """A tile allocated in the body of a sequential loop: load, scale, store."""
    b = TraceBuilder()
    x = b.hbm((n, P, 2048), name="x")
    out = b.hbm((n, P, 2048), kind="output")
    for i in b.loop(n, kind="sequential", line=1):
        t = b.tile((P, 2048), line=2)
        b.dma(tr.DMA_LOAD, tr.Region(x, ((i, i + 1), (0, P), (0, 2048))), b.full(t), P)
        y = b.tile((P, 2048), line=3)
        b.compute(tr.ACT, (b.full(t),), b.full(y), func="exp")
        b.dma(tr.DMA_STORE, b.full(y), tr.Region(out, ((i, i + 1), (0, P), (0, 2048))), P)
    return b.trace


def test_loop_body_buffers_rotate_in_the_current_dialect():
    trace = _sequential_tiles(16)
    params = for_target("trn2")
    edges = {}
    for dialect in ("legacy", "current"):
        prep = prepare(_as(trace, dialect), HW, params)
        edges[dialect] = sum(len(p) for p in build(prep.prog, HW, params))
    # legacy: one buffer per site in a sequential loop (fitted); current: rotating buffers,
    # so fewer slot edges and loads run ahead of the compute
    assert edges["current"] < edges["legacy"]
    legacy = estimate(_as(trace, "legacy"), "trn2").latency_ms
    current = estimate(_as(trace, "current"), "trn2").latency_ms
    assert current < legacy


def test_traces_record_their_dialect_and_old_pickles_load_as_legacy():
    src = ("import nki\nimport nki.language as nl\nimport nki.isa as nisa\n\n@nki.jit\n"
           "def kernel(x):\n    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)\n"
           "    t = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.sbuf)\n"
           "    nisa.dma_copy(dst=t, src=x)\n    nisa.dma_copy(dst=out, src=t)\n    return out\n")
    run = run_kernel(src, [np.ones((128, 64), np.float32)])
    assert run.trace.dialect == "current"
    old = tr.Trace(kernel_file="old")
    del old.__dict__["dialect"]           # what a pickle written before the field holds
    assert pickle.loads(pickle.dumps(old)).dialect == "legacy"


@pytest.mark.parametrize("name", example_names())
def test_every_kind_the_current_front_end_records_has_a_cost(name):
    """The SDK examples' problems' baselines (current dialect) record only trace KINDS, and
    each of their instructions has a cost on every target."""
    problem = load(make_spec(name, "tiny" if "tiny" in shape_names(name) else "paper"))
    args = problem.to_kernel_inputs(problem.make_inputs(0))
    shapes = placeholders(args)
    trace = run_kernel(problem.baseline_source, shapes, shape_only=True).trace
    assert trace.dialect == "current" and trace.instrs
    assert {ins.kind for ins in trace.instrs} <= set(tr.KINDS)
    for target in TARGETS:
        assert estimate(trace, target).latency_ms > 0


def test_trn3_entry_follows_the_documented_figures():
    t2, t3 = hardware("trn2"), hardware("trn3")
    assert not t3.calibrated and t3.core == "NeuronCore-v4"
    assert (t3.tensor_hz, t3.vector_hz, t3.scalar_hz, t3.gpsimd_hz) == (2.4e9, 1.2e9, 1.2e9, 1.2e9)
    assert t3.sbuf_bytes_per_partition * t3.partitions == 32 * 2**20
    assert t3.psum_bytes_per_partition * t3.partitions == 2 * 2**20
    assert t3.dma_engine_bytes_per_ns == 33.0 and t3.hbm_bytes_per_s > t2.hbm_bytes_per_s
    assert for_target("trn3").dma_ring_bytes_per_ns > for_target("trn2").dma_ring_bytes_per_ns
