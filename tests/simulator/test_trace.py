"""The instruction trace: record fields, regions, loop paths, shape-only equivalence, and
the block-release plan that keeps large logical buffers out of memory."""

from __future__ import annotations

import gc
import tracemalloc

import numpy as np

from fitness.simulator import ShapeDtype, run_kernel, simulate
from fitness.simulator.core import launch
from fitness.simulator.trace import COPY, DMA_LOAD, DMA_STORE, HBM, MM, PSUM, SBUF, TS

from .helpers import assert_consistent, instrs, nisa, nl, rand, run


def blocked_kernel(x, w):
    """A small generated-style kernel: block dims, masks, a matmul, an eviction, a store."""
    out = nl.ndarray((2, 128, 512), dtype=np.float32, buffer=nl.shared_hbm)
    xs = nl.ndarray((2, nl.par_dim(128), 128), dtype=np.float32, buffer=nl.sbuf)
    ws = nl.ndarray((nl.par_dim(128), 512), dtype=np.float32, buffer=nl.sbuf)
    ps = nl.zeros((2, nl.par_dim(128), 512), dtype=np.float32, buffer=nl.psum, lazy_initialization=True)
    res = nl.ndarray((2, nl.par_dim(128), 512), dtype=np.float32, buffer=nl.sbuf)
    ws[nl.arange(128)[:, None], nl.arange(512)[None, :]] = nl.load(w[nl.arange(128)[:, None], nl.arange(512)[None, :]])
    for i in nl.affine_range(2):
        xs[i, nl.arange(128)[:, None], nl.arange(128)[None, :]] = nl.load(
            x[i, nl.arange(128)[:, None], nl.arange(128)[None, :]],
            mask=(nl.arange(128)[None, :] < 100))
        ps[i, nl.arange(128)[:, None], nl.arange(512)[None, :]] += nisa.nc_matmul(
            xs[i, nl.arange(128)[:, None], nl.arange(128)[None, :]], ws[nl.arange(128)[:, None], nl.arange(512)[None, :]])
        res[i, nl.arange(128)[:, None], nl.arange(512)[None, :]] = nisa.tensor_scalar(
            ps[i, nl.arange(128)[:, None], nl.arange(512)[None, :]], op0=nl.multiply, operand0=2.0)
        nl.store(out[i], value=res[i])
    return out


X = rand(2, 128, 128, seed=1)
W = rand(128, 512, seed=2)


def test_records_and_regions():
    r = run(blocked_kernel, X, W)
    assert_consistent(r.trace)
    xm = X.copy()
    xm[:, :, 100:] = np.nan    # masked-out columns of the loads stay uninitialised ...
    np.testing.assert_array_equal(np.isnan(r.outputs), np.isnan(np.einsum("bkm,kn->bmn", xm, W)))
    tr = r.trace
    assert {t.kind for t in tr.tensors.values()} >= {"input", "output", "scratch"}
    x_info = next(t for t in tr.tensors.values() if t.kind == "input" and t.shape == (2, 128, 128))
    assert x_info.memory == HBM and x_info.partition_axis is None and x_info.name == "x"

    loads = instrs(tr, DMA_LOAD)
    xload = loads[1]
    assert xload.dma.bytes == 128 * 100 * 4 and (xload.partitions, xload.free) == (128, 100)
    assert xload.reads[0].box == ((0, 1), (0, 128), (0, 100))
    xs_id = xload.writes[0].tensor
    assert tr.tensors[xs_id].shape == (2, 128, 128) and tr.tensors[xs_id].partition_axis == 1
    assert xload.writes[0].box == ((0, 1), (0, 128), (0, 100))
    assert xload.loop_path == ((1, 0),) and tr.loops[1].kind == "affine" and tr.loops[1].stop == 2

    mm = instrs(tr, MM)[1]
    assert (mm.mm.K, mm.mm.M, mm.mm.N, mm.mm.accumulate) == (128, 128, 512, True)
    assert mm.writes[0].box == ((1, 2), (0, 128), (0, 512))
    assert tr.tensors[mm.writes[0].tensor].memory == PSUM

    ts = instrs(tr, TS)[0]
    assert ts.psum_inputs == 1 and ts.func == "multiply" and ts.engines == ("V", "S")
    assert tr.tensors[ts.writes[0].tensor].memory == SBUF

    store = instrs(tr, DMA_STORE)[1]
    assert store.writes[0].box == ((1, 2), (0, 128), (0, 512)) and store.dma.run_bytes == 512 * 4
    assert store.dma.runs == 128 and store.dma.bytes == 128 * 512 * 4
    # results written straight into declared tensors leave no anonymous tensors behind:
    # x, w, out, xs, ws, ps, res
    assert len(tr.tensors) == 7


def test_shape_only_trace_equals_full_trace():
    full = run(blocked_kernel, X, W)
    shape = run(blocked_kernel, ShapeDtype(X.shape, X.dtype), ShapeDtype(W.shape, W.dtype), shape_only=True)
    assert shape.trace.instrs == full.trace.instrs
    assert shape.trace.tensors == full.trace.tensors
    assert shape.trace.loops == full.trace.loops
    assert shape.outputs == ShapeDtype((2, 128, 512), np.float32)


def test_strided_flag_and_copy_instruction():
    def kernel(x):
        t = nl.load(x)
        u = nl.ndarray((128, 16), dtype=np.float32, buffer=nl.sbuf)
        u[...] = t[:, 0:64:4]           # existing tile assigned: a copy, reading with a 16-byte stride
        v = nl.ndarray((128, 16), dtype=np.float32, buffer=nl.sbuf)
        v[...] = t[:, 0:80:5]           # 20-byte stride: strided
        out = nl.ndarray((128, 32), dtype=np.float32, buffer=nl.shared_hbm)
        nl.store(out[:, 0:16], value=u)
        nl.store(out[:, 16:32], value=v)
        return out

    x = rand(128, 80)
    r = run(kernel, x)
    np.testing.assert_array_equal(r.outputs, np.concatenate([x[:, 0:64:4], x[:, 0:80:5]], axis=1))
    c1, c2 = instrs(r.trace, COPY)
    assert not c1.strided and c2.strided


def test_release_plan_keeps_memory_bounded(monkeypatch):
    # 64 logical blocks of 128 x 2048 fp32 (64 MiB); each block is dead right after its use
    def kernel(x):
        big = nl.ndarray((64, nl.par_dim(128), 2048), dtype=np.float32, buffer=nl.sbuf)
        out = nl.ndarray((64, 128, 1), dtype=np.float32, buffer=nl.shared_hbm)
        for i in nl.affine_range(64):
            big[i] = nl.load(x)
            nl.store(out[i], value=nl.sum(big[i], axis=[1]))
        return out

    x = rand(128, 2048)

    def peak(release, threshold=launch.AUTO_RELEASE_BYTES):
        monkeypatch.setattr(launch, "AUTO_RELEASE_BYTES", threshold)
        tracemalloc.start()
        r = simulate(kernel, [x], release=release)
        p = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        np.testing.assert_allclose(r.outputs[0], x.sum(axis=1, keepdims=True), rtol=1e-5)
        return p

    assert peak(False) > 64 * 2**20
    assert peak(True) < 16 * 2**20
    # automatic (the default): a plan as soon as kernel-level tensors exceed the threshold
    assert peak(None, threshold=1 << 20) < 16 * 2**20
    assert peak(None, threshold=1 << 30) > 64 * 2**20


def test_repeated_runs_reuse_the_release_plan(monkeypatch):
    src = ("import numpy as np\nimport neuronxcc.nki.language as nl\n"
           "def kernel(x):\n"
           "    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)\n"
           "    t = nl.ndarray((4, nl.par_dim(128), 64), dtype=np.float32, buffer=nl.sbuf)\n"
           "    for i in nl.affine_range(4):\n"
           "        t[i] = nl.load(x[i])\n"
           "        nl.store(out[i], value=nl.exp(t[i]))\n"
           "    return out\n")
    monkeypatch.setattr(launch, "AUTO_RELEASE_BYTES", 1024)   # make this small kernel take the plan path
    calls = []
    real = launch.release_plan
    monkeypatch.setattr(launch, "release_plan", lambda trace: calls.append(1) or real(trace))
    for seed in (1, 2, 3):
        x = rand(4, 128, 64, seed=seed)
        np.testing.assert_allclose(run_kernel(src, [x], filename="plan_cache.py").outputs, np.exp(x), rtol=2e-6)
    assert len(calls) == 1


KERNEL_SOURCE = """\
import numpy as np
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl

@nki.jit
def kernel(x):
    out = nl.ndarray((128, 64), dtype=np.float32, buffer=nl.shared_hbm){gap}
    t = nl.load(x)
    nl.store(out, value=nl.exp(t))
    return out
"""


def test_instruction_lines_of_kernels_that_differ_only_in_lines():
    """Lines are cached per code object and call site: two kernels with the same bytecode
    but different line numbers (a blank line more) keep their own lines."""
    x = rand(128, 64)
    lines = []
    for gap in ("", "\n"):
        tr = run_kernel(KERNEL_SOURCE.format(gap=gap), [x]).trace
        lines.append([i.line for i in tr.instrs])
    assert lines[0] == [8, 9, 9] and lines[1] == [9, 10, 10]


def test_the_trace_leaves_the_young_generation():
    """What a run leaves alive (the trace) moves to the oldest collector generation in one
    step, instead of being rescanned by the young collections that follow."""
    tr = run(blocked_kernel, X, W).trace
    assert gc.isenabled()
    young = {id(o) for gen in (0, 1) for o in gc.get_objects(generation=gen)}
    assert gc.is_tracked(tr.instrs[0]) and not any(id(i) in young for i in tr.instrs)
    assert any(o is tr.instrs[0] for o in gc.get_objects(generation=2))


def test_the_trace_does_not_depend_on_the_inputs_values_and_a_difference_is_located():
    first = run(blocked_kernel, X, W).trace
    again = run(blocked_kernel, rand(2, 128, 128, seed=7), rand(128, 512, seed=8)).trace
    assert first == again and first.difference(again) == ""

    def scaled(x, w, twice):   # `twice`: a host value that adds one instruction before the store
        out = nl.ndarray((128, 512), dtype=np.float32, buffer=nl.shared_hbm)
        t = nisa.tensor_scalar(nl.load(w), op0=nl.multiply, operand0=2.0)
        if twice:
            t = nisa.tensor_scalar(t, op0=nl.multiply, operand0=1.0)
        nl.store(out, value=t)
        return out

    once, twice = run(scaled, X, W, twice=False).trace, run(scaled, X, W, twice=True).trace
    where = once.difference(twice)
    assert where.startswith("instruction 2: nl.store at line") and "against nisa.tensor_scalar" in where, where
    assert once.difference(run(scaled, X, W, twice=False).trace) == ""
