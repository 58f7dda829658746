"""`nl` calls against NumPy golden values, and the instructions they lower to."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from scipy.special import erf, expit

from fitness.simulator import run_kernel
from fitness.simulator.trace import ACT, COPY, MEMSET, MM, MM_BCAST, MM_TRANSPOSE, PSUM, RED, TS, TT

from .helpers import instrs, nl, rand, run


def apply(op, *arrays, shape_only=False):
    """Load each array into SBUF, apply `op` to the tiles, store the result; (output, trace)."""
    def kernel(*xs):
        tiles = [nl.load(x) for x in xs]
        res = op(*tiles)
        if res.buffer == PSUM:
            res = nl.copy(res)
        out = nl.ndarray(res.shape, dtype=res.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=res)
        return out
    r = run(kernel, *arrays, shape_only=shape_only)
    return r.outputs, r.trace


def close(a, b, rtol=1e-6, atol=1e-6):
    np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64), rtol=rtol, atol=atol)


X = rand(128, 64, seed=1)
Y = rand(128, 64, seed=2)
V = rand(128, 1, seed=3)
POS = np.abs(X) + 0.5


@pytest.mark.parametrize("name, fn", [
    ("add", np.add), ("subtract", np.subtract), ("multiply", np.multiply), ("divide", np.divide),
    ("maximum", np.maximum), ("minimum", np.minimum),
])
def test_binary_tile_tile_is_tensor_tensor(name, fn):
    out, tr = apply(lambda a, b: getattr(nl, name)(a, b), X, Y)
    close(out, fn(X, Y))
    tt = instrs(tr, TT)
    assert len(tt) == 1 and tt[0].func == name and tt[0].engines == ("V",)


def test_binary_with_scalar_and_vector_is_tensor_scalar():
    out, tr = apply(lambda a: nl.multiply(a, 3.0), X)
    close(out, X * 3)
    out, tr2 = apply(lambda a, v: nl.subtract(a, v), X, V)
    close(out, X - V)
    out, _ = apply(lambda v, a: nl.subtract(v, a), V, X)       # vector first: reversed operand order
    close(out, V - X)
    for t in (tr, tr2):
        ts = instrs(t, TS)
        assert len(ts) == 1 and ts[0].engines == ("V", "S")


def test_power_and_comparisons():
    close(apply(lambda a, b: nl.power(a, b), POS, Y)[0], np.power(POS, Y), rtol=1e-5)
    close(apply(lambda a, b: nl.greater(a, b), X, Y)[0], (X > Y).astype(np.float32))
    close(apply(lambda a: nl.less_equal(a, 0.0), X)[0], (X <= 0).astype(np.float32))


def test_python_operators_on_tiles():
    out, tr = apply(lambda a, b: (a + b) * 2.0 - b / 4.0, X, Y)
    close(out, (X + Y) * 2 - Y / 4)
    close(apply(lambda a: 1.0 - a, X)[0], 1 - X)
    close(apply(lambda a: np.float32(2) * a, X)[0], 2 * X)
    close(apply(lambda a: -a, X)[0], -X)


def test_partition_broadcast_in_nl_calls():
    row = rand(1, 64, seed=4)
    out, tr = apply(lambda a, r: nl.multiply(a, r), X, row)
    close(out, X * row)
    assert len(instrs(tr, MM_BCAST)) == 1


@pytest.mark.parametrize("name, fn, data", [
    ("exp", np.exp, X), ("log", np.log, POS), ("sqrt", np.sqrt, POS), ("rsqrt", lambda x: 1 / np.sqrt(x), POS),
    ("square", np.square, X), ("tanh", np.tanh, X), ("sigmoid", expit, X), ("silu", lambda x: x * expit(x), X),
    ("gelu", lambda x: 0.5 * x * (1 + erf(x / np.sqrt(2))), X), ("relu", lambda x: np.maximum(x, 0), X),
    ("abs", np.abs, X), ("sin", np.sin, X), ("cos", np.cos, X), ("reciprocal", lambda x: 1 / x, POS),
    ("erf", erf, X), ("softplus", lambda x: np.log1p(np.exp(x)), X),
])
def test_activations(name, fn, data):
    out, tr = apply(lambda a: getattr(nl, name)(a), data)
    close(out, fn(data.astype(np.float64)), rtol=2e-6, atol=2e-6)
    act = instrs(tr, ACT)
    assert len(act) == 1 and act[0].func == name and act[0].engines == ("S",)


def test_negative_is_tensor_scalar():
    out, tr = apply(lambda a: nl.negative(a), X)
    close(out, -X)
    assert len(instrs(tr, TS)) == 1


@pytest.mark.parametrize("name, fn", [("sum", np.sum), ("max", np.max), ("min", np.min), ("prod", np.prod),
                                      ("mean", np.mean)])
def test_reductions(name, fn):
    small = X[:, :8]
    out, tr = apply(lambda a: getattr(nl, name)(a, axis=[1]), small)
    assert out.shape == (128, 1)
    close(out, fn(small, axis=1, keepdims=True), rtol=1e-5)
    red = instrs(tr, RED)
    assert len(red) == 1 and red[0].free == 8


def test_reduction_over_several_axes_and_keepdims():
    x3 = rand(16, 4, 8)
    out, _ = apply(lambda a: nl.sum(a, axis=(1, 2)), x3)
    close(out, x3.sum(axis=(1, 2))[:, None], rtol=1e-5)
    out, _ = apply(lambda a: nl.max(a, axis=2, keepdims=True), x3)
    close(out, x3.max(axis=2, keepdims=True))


def test_softmax():
    out, _ = apply(lambda a: nl.softmax(a, axis=1), X)
    e = np.exp(X - X.max(axis=1, keepdims=True))
    close(out, e / e.sum(axis=1, keepdims=True), rtol=1e-5)


def test_copy_and_static_cast_to_bf16():
    out, tr = apply(lambda a: nl.copy(a), X)
    close(out, X)
    assert instrs(tr, COPY)[0].engines == ("V", "S")
    out, tr = apply(lambda a: nl.static_cast(a, nl.bfloat16), X)
    assert out.dtype == ml_dtypes.bfloat16
    close(out, X.astype(ml_dtypes.bfloat16))
    assert tr.instrs[-1].dtype == "bfloat16"


def test_matmul_transposes_x_first():
    a, b = rand(128, 128, seed=5), rand(128, 256, seed=6)
    out, tr = apply(lambda x, y: nl.matmul(x, y), a, b)
    close(out, a @ b, rtol=1e-4, atol=1e-4)
    kinds = [i.kind for i in tr.instrs]
    # identity load, operand loads, transpose + copy + matmul, eviction, store
    assert kinds.count(MM_TRANSPOSE) == 1 and kinds.count(MM) == 1
    t = instrs(tr, MM_TRANSPOSE)[0]
    assert t.mm.is_transpose and t.mm.moving_onezero
    assert any(tr.tensors[r.tensor].name == "identity_local" for r in t.reads)
    out, tr = apply(lambda x, y: nl.matmul(x, y, transpose_x=True), a, b)
    close(out, a.T @ b, rtol=1e-4, atol=1e-4)
    assert not instrs(tr, MM_TRANSPOSE)


def test_matmul_accumulates_in_psum():
    a, w = rand(128, 512, seed=7), rand(512, 256, seed=8)

    def kernel(a, w):
        out = nl.ndarray((128, 256), dtype=np.float32, buffer=nl.shared_hbm)
        acc = nl.zeros((128, 256), nl.float32, buffer=nl.psum)
        x = nl.load(a)
        for k in nl.affine_range(4):
            wt = nl.load(w[k * 128:(k + 1) * 128, :])
            acc += nl.matmul(x[:, k * 128:(k + 1) * 128], wt)
        nl.store(out, value=nl.copy(acc))
        return out

    r = run(kernel, a, w)
    close(r.outputs, a @ w, rtol=1e-4, atol=1e-4)
    mms = instrs(r.trace, MM)
    assert len(mms) == 4 and all(i.mm.accumulate for i in mms)
    assert len({i.writes[0] for i in mms}) == 1


def test_transpose():
    a = rand(64, 32)
    out, tr = apply(lambda x: nl.transpose(x), a)
    close(out, a.T)
    assert instrs(tr, MM_TRANSPOSE)


def test_broadcast_to():
    row = rand(1, 1100, seed=9)
    out, tr = apply(lambda r: r.broadcast_to((128, 1100)), row)
    close(out, np.broadcast_to(row, (128, 1100)))
    bc = instrs(tr, MM_BCAST)
    assert [i.mm.N for i in bc] == [512, 512, 76] and all(i.mm.K == 1 for i in bc)
    assert len([i for i in tr.instrs if i.kind == COPY and i.op == "broadcast_to"]) == 3
    out, tr = apply(lambda v: nl.broadcast_to(v, shape=(128, 64)), V)
    close(out, np.broadcast_to(V, (128, 64)))
    assert not instrs(tr, MM_BCAST)


def test_creation_apis():
    def kernel(x):
        z = nl.zeros((128, 64), dtype=np.float32)
        o = nl.ones((128, 64), dtype=np.float32)
        f = nl.full((128, 64), 2.5, dtype=np.float32)
        zl = nl.zeros_like(z)
        c = nl.load(nl.shared_constant(np.arange(64, dtype=np.float32).reshape(1, 64)))
        s = nl.add(nl.add(z, o), nl.add(f, zl))
        out = nl.ndarray((128, 64), dtype=np.float32, buffer=nl.shared_hbm)
        nl.store(out, value=nl.add(s, c.broadcast_to((128, 64))))
        return out

    r = run(kernel, X)
    close(r.outputs, 3.5 + np.arange(64, dtype=np.float32)[None, :].repeat(128, 0))
    assert len(instrs(r.trace, MEMSET)) == 4


def test_loop_reduce_max_and_add_over_uninitialised_destination():
    x = rand(4, 128, 32)

    def kernel(x):
        mx = nl.ndarray((nl.par_dim(128), 1), dtype=np.float32, buffer=nl.sbuf)
        sm = nl.ndarray((nl.par_dim(128), 1), dtype=np.float32, buffer=nl.sbuf)
        for i in nl.affine_range(4):
            t = nl.load(x[i])
            mx[...] = nl.loop_reduce(nl.max(t, axis=[1]), op=np.max, loop_indices=[i])
            sm[...] = nl.loop_reduce(nl.sum(t, axis=[1]), op=np.add, loop_indices=[i])
        out = nl.ndarray((128, 2), dtype=np.float32, buffer=nl.shared_hbm)
        nl.store(out[:, 0:1], value=mx)
        nl.store(out[:, 1:2], value=sm)
        return out

    r = run(kernel, x)
    close(r.outputs[:, 0], x.max(axis=(0, 2)))
    close(r.outputs[:, 1], x.sum(axis=(0, 2)), rtol=1e-5, atol=1e-5)
    lr = instrs(r.trace, TT, "nl.loop_reduce")
    assert len(lr) == 8 and {i.func for i in lr} == {"maximum", "add"}


def test_loops_record_paths_and_python_range_is_sequential():
    src = '''
import numpy as np
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl

@nki.jit
def kernel(x):
    out = nl.ndarray((4, 128, 64), dtype=np.float32, buffer=nl.shared_hbm)
    for i in range(2):
        for j in nl.affine_range(2):
            for k in nl.static_range(1):
                nl.store(out[2 * i + j], value=nl.exp(nl.load(x[2 * i + j])))
    return out
'''
    x = rand(4, 128, 64)
    r = run_kernel(src, [x])
    close(r.outputs, np.exp(x), rtol=2e-6)
    kinds = {loop.kind for loop in r.trace.loops.values()}
    assert kinds == {"range", "affine", "static"}
    stores = [i for i in r.trace.instrs if i.op == "nl.store"]
    assert [tuple(v for _, v in i.loop_path) for i in stores] == [(0, 0, 0), (0, 1, 0), (1, 0, 0), (1, 1, 0)]
    assert all(i.line == 12 for i in stores)


def test_program_id_and_tile_size():
    def kernel(x):
        assert nl.program_id(0) == 0 and nl.num_programs() == 1
        assert nl.tile_size.pmax == 128 and nl.tile_size.gemm_moving_fmax == 512
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.load(x))
        return out

    close(run(kernel, X).outputs, X)


def test_low_precision_storage():
    small = (X * 4).astype(np.float32)

    def kernel(x):
        t = nl.load(x, dtype=nl.bfloat16)                       # bf16 SBUF tile
        f8 = nl.ndarray((128, 64), dtype=nl.float8_e4m3, buffer=nl.sbuf)
        f8[...] = nl.copy(t, dtype=nl.float8_e4m3)
        out = nl.ndarray((2, 128, 64), dtype=np.float32, buffer=nl.shared_hbm)
        nl.store(out[0], value=nl.copy(t, dtype=np.float32))
        nl.store(out[1], value=nl.multiply(f8, 1.0, dtype=np.float32))
        return out

    r = run(kernel, small)
    close(r.outputs[0], small.astype(ml_dtypes.bfloat16).astype(np.float32))
    close(r.outputs[1], small.astype(ml_dtypes.bfloat16).astype(ml_dtypes.float8_e4m3).astype(np.float32))
    assert {i.dtype for i in r.trace.instrs} >= {"bfloat16", "float8_e4m3"}
