"""How the model prices what the attention tutorial's later versions use (perf README, "Constructs
priced by analogy"): tensor_scalar_reduce, activation's reduce_cmd, kernels that skip neuronx-cc's
middle end or allocate directly (run as written, their accesses physical), and no_reorder loops."""

from __future__ import annotations

import dataclasses
import pickle

import numpy as np
import pytest

from fitness.simulator import run_kernel
from fitness.simulator import trace as tr
from fitness.simulator.perf import estimate, hardware
from fitness.simulator.perf.compiler import CompilerReport
from fitness.simulator.perf.costs import duration_ns
from fitness.simulator.perf.lowering import lower
from fitness.simulator.perf.model import counters, prepare
from fitness.simulator.perf.params import for_target
from fitness.simulator.perf.schedule import schedule

from .builder import P, TraceBuilder
from .test_compiler import _reused_weights

HW = hardware("trn1")
PARAMS = for_target("trn1")


def _op_ns(kind: str, engines, func: str, engine: str, psum: int = 0) -> float:
    b = TraceBuilder()
    src = b.tile((P, 512), memory=tr.PSUM if psum else tr.SBUF)
    dst = b.tile((P, 512), line=2)
    b.compute(kind, (b.full(src),), b.full(dst), engines=engines, func=func, psum_inputs=psum)
    (op,) = lower(b.trace).ops
    return duration_ns(op, engine, HW, PARAMS)


def test_tensor_scalar_reduce_costs_a_tensor_scalar_plus_the_documented_min_ii():
    extra = HW.min_ii_cycles / HW.vector_hz * 1e9
    for psum in (0, 1):
        ts = _op_ns(tr.TS, (tr.VECTOR,), "multiply", tr.VECTOR, psum)
        tsr = _op_ns(tr.TS, (tr.VECTOR,), "multiply,reduce-maximum", tr.VECTOR, psum)
        assert tsr == pytest.approx(ts + extra)


def test_an_accumulating_activation_costs_the_activation_and_a_read_out_costs_min_ii():
    act = _op_ns(tr.ACT, None, "exp", tr.SCALAR)
    assert _op_ns(tr.ACT, None, "exp,accumulate-add", tr.SCALAR) == act
    read = HW.min_ii_cycles / HW.scalar_hz * 1e9
    for func in ("exp,reduce-add", "exp,reduce-read"):   # as activation_reduce's read-out
        assert _op_ns(tr.ACT, None, func, tr.SCALAR) == pytest.approx(act + read)


def test_a_kernel_that_skips_the_middle_end_runs_as_written():
    trace = _reused_weights(rows=8, tiles=16)
    assert prepare(trace, HW, PARAMS).report.removed_duplicates == 7 * 16
    kept = prepare(dataclasses.replace(trace, options=("skip_middle_end_transformations",)), HW, PARAMS)
    assert kept.report == CompilerReport()
    assert counters(kept.ops)["hbm_read_bytes"] == (8 * 16 + 8) * P * 512 * 4


REPEATED_LOAD = '''
import numpy as np
from neuronxcc import nki
import neuronxcc.nki.language as nl
import neuronxcc.nki.compiler as ncc


@nki.jit
def kernel(x):
    out = nl.ndarray((4, 128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((4, nl.par_dim(128), 512), dtype=nl.float32, buffer=BUFFER)
    for i in nl.affine_range(4):
        t[i] = nl.load(x)
        nl.store(out[i], value=t[i])
    return out
'''


def test_a_directly_allocated_kernel_runs_as_written():
    x = np.zeros((128, 512), np.float32)
    auto = prepare(run_kernel(REPEATED_LOAD.replace("BUFFER", "nl.sbuf"), [x]).trace, HW, PARAMS)
    placed = prepare(run_kernel(REPEATED_LOAD.replace("BUFFER", "ncc.sbuf.mod_alloc(base_addr=0, num_free_tiles=(2,))"),
                                [x]).trace, HW, PARAMS)
    assert auto.report.removed_duplicates == 3                     # neuronx-cc loads the invariant tile once
    assert placed.prog.placed and placed.report == CompilerReport()   # the author's four loads stay
    assert counters(placed.ops)["hbm_read_bytes"] == 4 * counters(auto.ops)["hbm_read_bytes"]


HEADER = '''
import numpy as np
from neuronxcc import nki
import neuronxcc.nki.language as nl
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.compiler as ncc


@nki.jit
def kernel(x, y):
    out = nl.ndarray((2, 128, 2048), dtype=nl.float32, buffer=nl.shared_hbm)
    a = nl.ndarray((nl.par_dim(128), 2048), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=0))
    b = nl.ndarray((nl.par_dim(128), 2048), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=B_ADDR))
    a[...] = nl.load(x)
    nl.store(out[0], value=a)
    b[...] = nl.load(y)
    nl.store(out[1], value=b)
    return out
'''


def test_tensors_on_the_same_bytes_order_each_other():
    x = np.zeros((128, 2048), np.float32)
    apart = run_kernel(HEADER.replace("B_ADDR", "8192"), [x, x]).trace
    shared = run_kernel(HEADER.replace("B_ADDR", "4096"), [x, x]).trace   # [4096, 12288) overlaps a
    preds_apart = prepare(apart, HW, PARAMS).preds
    preds_shared = prepare(shared, HW, PARAMS).preds
    # instructions: load a, store a, load b, store b: b's load overwrites what a's store reads
    assert 1 not in preds_apart[2] and 1 in preds_shared[2]
    assert estimate(shared).latency_ms > estimate(apart).latency_ms


ROTATING = '''
import numpy as np
from neuronxcc import nki
import neuronxcc.nki.language as nl
import neuronxcc.nki.compiler as ncc


@nki.jit
def kernel(x):
    out = nl.ndarray((128, 2048), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((4, nl.par_dim(128), 512), dtype=nl.float32,
                   buffer=ncc.sbuf.mod_alloc(base_addr=0, num_free_tiles=(2,)))
    for i in nl.affine_range(4):
        t[i] = nl.load(x[:, i * 512:(i + 1) * 512])
        nl.store(out[:, i * 512:(i + 1) * 512], value=t[i])
    return out
'''


def test_physical_tiles_rotate_through_the_logical_ones():
    trace = run_kernel(ROTATING, [np.zeros((128, 2048), np.float32)]).trace
    preds = prepare(trace, HW, PARAMS).preds
    # load i+2 reuses load i's physical tile: it waits for store i; load i+1 does not
    assert 1 in preds[4] and 3 in preds[6] and 1 not in preds[2]


def _waiting_scalar_work(directive: bool) -> tr.Trace:
    """Per iteration: a slow load and the exp that needs it, then an exp of a resident tile."""
    b = TraceBuilder()
    x = b.hbm((4, P, 8192), name="x")
    keep = b.tile((P, 512), line=9)
    b.compute(tr.MEMSET, (), b.full(keep))
    for i in b.loop(4, kind="sequential", line=1):
        t = b.tile((P, 8192), line=2)
        b.dma(tr.DMA_LOAD, tr.Region(x, ((i, i + 1), (0, P), (0, 8192))), b.full(t), P)
        b.compute(tr.ACT, (b.full(t),), b.full(b.tile((P, 8192), line=3)), func="exp")
        b.compute(tr.ACT, (b.full(keep),), b.full(b.tile((P, 512), line=4)), func="exp")
    if directive:
        b.trace.loop_directives = {1: ("no_reorder",)}
    return b.trace


def test_no_reorder_issues_a_loops_instructions_in_program_order():
    for directive in (False, True):
        prep = prepare(_waiting_scalar_work(directive), HW, PARAMS)
        assert all(op.in_order == directive for op in prep.ops if op.loop_path)
        sched = schedule(prep.prog, prep.preds, HW, PARAMS)
        scalar = [i for i, op in enumerate(prep.ops) if sched.engine[i] == tr.SCALAR]
        starts = [sched.start[i] for i in scalar]
        in_order = all(a <= b for a, b in zip(starts, starts[1:]))
        assert in_order == directive   # without it the resident tile's exps run while loads wait


def test_traces_pickled_before_the_new_fields_load_with_their_defaults():
    old = tr.Trace(kernel_file="k")
    for name in ("options", "loop_directives", "placements"):
        old.__dict__.pop(name)
    back = pickle.loads(pickle.dumps(old))
    assert (back.options, back.loop_directives, back.placements) == ((), None, None)
