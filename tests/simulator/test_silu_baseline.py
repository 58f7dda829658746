"""The project's silu baseline (nkibench/baselines/silu.py) end to end on the emulator."""

from __future__ import annotations

import numpy as np
import pytest

from fitness.simulator import ShapeDtype, run_kernel
from fitness.simulator.trace import ACT, DMA_LOAD, DMA_STORE, RECIP, SBUF, TS, TT
from nkibench import registry

from .helpers import assert_consistent


def _run(shape: str, **kw):
    problem = registry.load(registry.make_spec("silu", shape))
    inputs = problem.make_inputs(0)
    run = run_kernel(problem.baseline_source, problem.to_kernel_inputs(inputs),
                     filename=str(problem.baseline_path), **kw)
    return problem, inputs, run


def _rel_err(out, ref) -> float:
    out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    return float(np.linalg.norm(out - ref) / np.linalg.norm(ref))


def test_small_shape_is_correct():
    problem, inputs, run = _run("small")
    ref = problem.reference(*inputs)
    out = problem.from_kernel_outputs(run.outputs, ref)
    assert _rel_err(out[0], ref[0]) < problem.tolerance


def test_small_shape_trace():
    _, _, run = _run("small")   # M=256, N=1024: 2 x 2 tiles of 128 x 512
    tr = run.trace
    assert_consistent(tr)
    kinds = [i.kind for i in tr.instrs]
    assert kinds.count(DMA_LOAD) == 4 and kinds.count(DMA_STORE) == 4
    assert kinds.count(ACT) == kinds.count(TS) == kinds.count(RECIP) == kinds.count(TT) == 4
    act = next(i for i in tr.instrs if i.kind == ACT)
    assert (act.func, act.engines, act.partitions, act.free) == ("exp", ("S",), 128, 512)
    ts = next(i for i in tr.instrs if i.kind == TS)
    assert ts.engines == ("V", "S") and ts.func == "add"
    load = next(i for i in tr.instrs if i.kind == DMA_LOAD)
    assert load.dma.bytes == 128 * 512 * 4 and load.dma.run_bytes == 512 * 4 and load.dma.partitions == 128
    # the multiply is written straight into y_tile (a declared SBUF tile), no copy instruction
    mul = next(i for i in tr.instrs if i.kind == TT)
    y = tr.tensors[mul.writes[0].tensor]
    assert y.memory == SBUF and y.shape == (128, 512)
    assert all(i.line > 0 for i in tr.instrs)
    assert len(mul.loop_path) == 3


def test_masked_edges_move_only_valid_bytes():
    # 200 x 700 is not a multiple of the 128 x 512 tiles: masks trim loads, compute and stores
    from nkibench.problems import silu as silu_problem
    src = registry.load(registry.make_spec("silu", "small")).baseline_source
    x = np.random.default_rng(1).standard_normal((200, 700), dtype=np.float32)
    run = run_kernel(src, [x])
    np.testing.assert_allclose(run.outputs, silu_problem.reference(x), rtol=1e-6, atol=1e-6)
    loads = [i for i in run.trace.instrs if i.kind == DMA_LOAD]
    assert sum(i.dma.bytes for i in loads) == 200 * 700 * 4
    last = loads[-1]
    assert (last.partitions, last.free) == (200 - 128, 700 - 512)


def test_shape_only_gives_the_same_trace():
    problem, inputs, run = _run("small")
    shapes = [ShapeDtype(a.shape, a.dtype) for a in problem.to_kernel_inputs(inputs)]
    shape_run = run_kernel(problem.baseline_source, shapes, filename=str(problem.baseline_path), shape_only=True)
    assert shape_run.trace.instrs == run.trace.instrs
    assert shape_run.trace.tensors == run.trace.tensors
    assert shape_run.outputs == ShapeDtype((256, 1024), np.float32)


@pytest.mark.slow
def test_paper_shape_is_correct():
    problem, inputs, run = _run("paper")
    ref = problem.reference(*inputs)
    out = problem.from_kernel_outputs(run.outputs, ref)
    assert _rel_err(out[0], ref[0]) < problem.tolerance
    assert len(run.trace.instrs) == 32 * 14 * 6
