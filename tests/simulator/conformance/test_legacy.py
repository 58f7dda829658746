"""The legacy dialect's (`neuronxcc.nki`) instructions and functions beyond the basic ones,
each in a small kernel checked against a NumPy computation of its documented semantics, and
their engine constraints refused with the documented limits."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from scipy.special import erf, expit

from fitness.simulator import errors
from fitness.simulator.trace import (
    ACT,
    COPY,
    DMA_LOAD,
    GPSIMD,
    GPSIMD_ENGINE,
    RED,
    TS,
    TT,
)

from ..helpers import nisa, nki, nl, rand, run
from ..test_language import apply, close

X = rand(128, 64, seed=21)
Y = rand(128, 64, seed=22)


def _kinds(tr, api: str) -> list[str]:
    return [i.kind for i in tr.instrs if i.op == api]


# --- nki.language: element-wise math ------------------------------------------------------------------

@pytest.mark.parametrize("name, ref", [
    ("ceil", np.ceil), ("floor", np.floor), ("trunc", np.trunc), ("tan", lambda a: np.tan(a * 0.5)),
    ("erf_dx", lambda a: 2 / np.sqrt(np.pi) * np.exp(-a * a)),
    ("gelu_dx", lambda a: 0.5 * (1 + erf(a / np.sqrt(2))) + a * np.exp(-0.5 * a * a) / np.sqrt(2 * np.pi)),
    ("silu_dx", lambda a: expit(a) * (1 + a * (1 - expit(a)))),
    ("gelu_apprx_sigmoid", lambda a: a * expit(1.702 * a)),
])
def test_unary_math_is_one_scalar_activation(name, ref):
    x = X * 3.0
    scale = 0.5 if name == "tan" else 1.0
    out, tr = apply(lambda a: getattr(nl, name)(nl.multiply(a, scale) if scale != 1.0 else a), x)
    close(out, ref(x.astype(np.float64)), rtol=1e-5, atol=1e-5)
    assert _kinds(tr, f"nl.{name}") == [ACT]


def test_fmod_and_mod_signs():
    x, y = X * 5.0, np.where(np.abs(Y) < 0.3, 0.7, Y).astype(np.float32)
    out, tr = apply(lambda a, b: nl.fmod(a, b), x, y)
    close(out, np.fmod(x, y), rtol=1e-5, atol=1e-5)
    assert _kinds(tr, "nl.fmod") == [TT]
    out, tr = apply(lambda a: nl.mod(a, 3.0), x)
    close(out, np.mod(x, np.float32(3.0)), rtol=1e-5, atol=1e-5)
    assert _kinds(tr, "nl.mod") == [TS]


def test_invert_and_logical_not():
    a = np.arange(128 * 8, dtype=np.int32).reshape(128, 8) - 300
    out, _ = apply(lambda t: nl.invert(t), a)
    np.testing.assert_array_equal(out, ~a)
    b = (np.arange(128 * 8).reshape(128, 8) % 3).astype(np.float32)
    out, tr = apply(lambda t: nl.logical_not(t, dtype=np.float32), b)
    np.testing.assert_array_equal(out, (b == 0).astype(np.float32))
    assert _kinds(tr, "nl.logical_not") == [TS]
    out, _ = apply(lambda t: nl.logical_not(t), b)   # documented default: a bool result
    assert out.dtype == np.bool_ and np.array_equal(out, b == 0)
    with pytest.raises(errors.UnsupportedDtypeError, match="integer typed"):
        apply(lambda t: nl.invert(t), X)


def test_where_with_tile_and_scalar():
    cond = (X > 0).astype(np.float32)
    out, tr = apply(lambda c, a: nl.where(c, a, -1.0), cond, Y)
    close(out, np.where(cond != 0, Y, -1.0))
    assert _kinds(tr, "nl.where") == [TT]
    with pytest.raises(errors.BroadcastError, match="could not be broadcast"):
        apply(lambda c, a: nl.where(c, a, -1.0), cond, Y[:64])


def test_var_removes_the_axis_like_the_reductions():
    x = rand(128, 4, 16, seed=8)
    out, _ = apply(lambda a: nl.var(a, axis=2), x)
    assert out.shape == (128, 4)
    close(out, x.astype(np.float64).var(axis=2), rtol=1e-4, atol=1e-5)
    out, _ = apply(lambda a: nl.var(a, axis=1), X)   # a tile keeps a free axis, as nl.sum's result does
    close(out, X.astype(np.float64).var(axis=1, keepdims=True), rtol=1e-4, atol=1e-5)


def test_expand_dims_appends_an_axis():
    def kernel(x):
        t = nl.load(x)
        e = nl.expand_dims(t, 2)
        assert e.shape == (128, 64, 1)
        out = nl.ndarray((128, 64, 1), dtype=np.float32, buffer=nl.shared_hbm)
        nl.store(out, value=nl.copy(e))
        return out
    r = run(kernel, X)
    close(r.outputs, X[:, :, None])

    def bad(x):
        nl.expand_dims(nl.load(x), 1)
    with pytest.raises(errors.IndexNotSupportedError, match="after the last index"):
        run(bad, X)


def test_rms_norm():
    w = rand(1, 64, seed=5)

    def kernel(x, w):
        t, wt = nl.load(x), nl.load(w)
        res = nl.rms_norm(t, nl.broadcast_to(wt, (128, 64)), axis=1, n=64)
        out = nl.ndarray((128, 64), dtype=np.float32, buffer=nl.shared_hbm)
        nl.store(out, value=res)
        return out
    r = run(kernel, X, w)
    rms = np.sqrt((X.astype(np.float64) ** 2).sum(axis=1, keepdims=True) / 64 + 1e-6)
    close(r.outputs, X / rms * w, rtol=1e-4, atol=1e-5)


def test_gather_flattened():
    data = rand(128, 4, 8, seed=7)
    idx = np.random.default_rng(1).integers(0, 32, size=(128, 4, 4)).astype(np.uint32)
    out, tr = apply(lambda d, i: nl.gather_flattened(d, i), data, idx)
    np.testing.assert_array_equal(out, np.take_along_axis(data.reshape(128, 32), idx.reshape(128, 16),
                                                          axis=1).reshape(128, 4, 4))
    assert _kinds(tr, "nl.gather_flattened") == [GPSIMD]
    with pytest.raises(errors.OutOfBoundsError):
        apply(lambda d, i: nl.gather_flattened(d, i), data, (idx + 40).astype(np.uint32))


def test_all_reduce_of_one_program_is_a_copy():
    out, tr = apply(lambda a: nl.all_reduce(a, np.add, program_axes=0), X)
    close(out, X)
    assert _kinds(tr, "nl.all_reduce") == [COPY]


def test_fp32_min_constant():
    assert np.float32(nl.fp32.min) == np.finfo(np.float32).min
    assert nisa.fp32.min == nl.fp32.min


# --- nki.language: randomness -----------------------------------------------------------------------------

def test_rand_is_uniform_and_seeded_reproducibly():
    def kernel(seed):
        s = nl.load(seed)
        nl.random_seed(s)
        a = nl.rand((128, 256))
        out = nl.ndarray((128, 256), dtype=np.float32, buffer=nl.shared_hbm)
        nl.store(out, value=a)
        return out
    s1, s2 = np.array([[7]], dtype=np.int32), np.array([[8]], dtype=np.int32)
    a, b, c = run(kernel, s1).outputs, run(kernel, s1).outputs, run(kernel, s2).outputs
    assert a.min() >= 0.0 and a.max() <= 1.0 and abs(float(a.mean()) - 0.5) < 0.02
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


def test_dropout_zeroes_at_the_rate():
    x = np.abs(X) + 1.0
    out, _ = apply(lambda a: nl.dropout(a, 0.25), np.tile(x, (1, 8)))
    zeros = out == 0
    assert abs(float(zeros.mean()) - 0.25) < 0.03
    np.testing.assert_array_equal(out[~zeros], np.tile(x, (1, 8))[~zeros])
    out1, _ = apply(lambda a: nl.dropout(a, 1.0), x)
    out0, _ = apply(lambda a: nl.dropout(a, 0.0), x)
    assert (out1 == 0).all() and np.array_equal(out0, x)
    out1, _ = apply(lambda a, r: nl.dropout(a, r), x, np.ones((1, 1), np.float32))   # a one-element rate tile
    assert (out1 == 0).all()
    with pytest.raises(errors.ShapeMismatchError, match="shape"):
        apply(lambda a, r: nl.dropout(a, r), x, np.ones((128, 2), np.float32))


# --- nki.isa: VectorE ---------------------------------------------------------------------------------------

def test_bn_stats_and_bn_aggr_give_mean_and_variance():
    x = rand(128, 1024, seed=3)

    def kernel(x):
        stats = nl.ndarray((128, 12), dtype=np.float32, buffer=nl.sbuf)
        for i in nl.affine_range(2):
            stats[:, nl.ds(i * 6, 6)] = nisa.bn_stats(nl.load(x[:, nl.ds(i * 512, 512)]))
        mv = nisa.bn_aggr(stats)
        out = nl.ndarray((128, 2), dtype=np.float32, buffer=nl.shared_hbm)
        nl.store(out, value=mv)
        return out
    r = run(kernel, x)
    close(r.outputs[:, 0], x.mean(axis=1), rtol=1e-4, atol=1e-5)
    close(r.outputs[:, 1], x.var(axis=1), rtol=1e-4, atol=1e-5)
    assert _kinds(r.trace, "nisa.bn_stats") == [RED, RED]
    with pytest.raises(errors.DimensionLimitError, match="512"):
        apply(lambda a: nisa.bn_stats(a), x)


def test_max8_find_index8_match_replace8():
    x = rand(128, 64, seed=9)
    top = -np.sort(-x, axis=1)[:, :8]
    out, tr = apply(lambda a: nisa.max8(src=a), x)
    close(out, top)
    assert _kinds(tr, "nisa.max8") == [RED]
    out, _ = apply(lambda a: nisa.nc_find_index8(data=a, vals=nisa.max8(src=a)), x)
    np.testing.assert_array_equal(out, np.argsort(-x, axis=1, kind="stable")[:, :8])
    out, _ = apply(lambda a: nisa.nc_match_replace8(data=a, vals=nisa.max8(src=a), imm=0.0), x)
    ref = x.copy()
    np.put_along_axis(ref, np.argsort(-x, axis=1, kind="stable")[:, :8], 0.0, axis=1)
    close(out, ref)
    with pytest.raises(errors.DimensionLimitError, match="between 8 and 16384"):
        apply(lambda a: nisa.max8(src=a), x[:, :4])


def test_tensor_copy_predicated_keeps_dst_where_false():
    pred = (X > 0).astype(np.uint8)

    def kernel(x, y, p):
        d = nl.load(y)
        nisa.tensor_copy_predicated(src=nl.load(x), dst=d, predicate=nl.load(p))
        out = nl.ndarray((128, 64), dtype=np.float32, buffer=nl.shared_hbm)
        nl.store(out, value=d)
        return out
    r = run(kernel, X, Y, pred)
    close(r.outputs, np.where(pred != 0, X, Y))
    with pytest.raises(errors.UnsupportedDtypeError, match="uint8, uint16 or uint32"):
        run(kernel, X, Y, pred.astype(np.int32))


def test_select_reduce_with_max_into_reduce_res():
    pred = (Y > 0).astype(np.uint8)

    def kernel(x, p):
        d = nl.ndarray((128, 64), dtype=np.float32, buffer=nl.sbuf)
        r = nl.ndarray((128, 1), dtype=np.float32, buffer=nl.sbuf)
        nisa.select_reduce(dst=d, predicate=nl.load(p), on_true=nl.load(x), on_false=-5.0, reduce_res=r,
                           reduce_cmd=nisa.reduce_cmd.reset_reduce)
        out = nl.ndarray((128, 65), dtype=np.float32, buffer=nl.shared_hbm)
        nl.store(out[:, 0:64], value=d)
        nl.store(out[:, 64:65], value=r)
        return out
    res = run(kernel, X, pred).outputs
    sel = np.where(pred != 0, X, -5.0)
    close(res[:, :64], sel)
    close(res[:, 64], sel.max(axis=1))


def test_range_select():
    lo = np.full((128, 1), 10.0, np.float32)
    hi = np.full((128, 1), 20.0, np.float32)
    out, tr = apply(lambda a, b0, b1: nisa.range_select(on_true_tile=a, comp_op0=nl.greater_equal, comp_op1=nl.less,
                                                        bound0=b0, bound1=b1, range_start=2), X, lo, hi)
    idx = 2 + np.arange(64)
    close(out, np.where((idx >= 10) & (idx < 20), X, np.finfo(np.float32).min))
    assert _kinds(tr, "nisa.range_select") == [TS]
    with pytest.raises(errors.OperandTypeError, match="FP32_MIN"):
        apply(lambda a, b0, b1: nisa.range_select(on_true_tile=a, comp_op0=nl.greater_equal, comp_op1=nl.less,
                                                  bound0=b0, bound1=b1, on_false_value=0.0), X, lo, hi)


def test_nc_stream_shuffle_within_quadrants():
    mask = [(i + 1) % 32 for i in range(32)]
    mask[5] = 255

    def kernel(x, y):
        s, d = nl.load(x), nl.load(y)
        nisa.nc_stream_shuffle(s, d, mask)
        out = nl.ndarray((128, 64), dtype=np.float32, buffer=nl.shared_hbm)
        nl.store(out, value=d)
        return out
    r = run(kernel, X, Y)
    ref = Y.copy()
    for p in range(128):
        if mask[p % 32] != 255:
            ref[p] = X[(p // 32) * 32 + mask[p % 32]]
    close(r.outputs, ref)

    def bad(x, y):
        nisa.nc_stream_shuffle(nl.load(x), nl.load(y), mask[:16])
    with pytest.raises(errors.ShapeMismatchError, match="32 elements"):
        run(bad, X, Y)


def test_tensor_copy_dynamic_src_and_dst():
    def kernel(x):
        t = nl.load(x)
        src = nisa.tensor_copy_dynamic_src(t[:, nl.ds(16, 8)], engine=nisa.engine.vector)
        d = nl.zeros((128, 64), dtype=np.float32, buffer=nl.sbuf)
        nisa.tensor_copy_dynamic_dst(dst=d[:, nl.ds(40, 8)], src=src)
        out = nl.ndarray((128, 64), dtype=np.float32, buffer=nl.shared_hbm)
        nl.store(out, value=d)
        return out
    r = run(kernel, X)
    ref = np.zeros_like(X)
    ref[:, 40:48] = X[:, 16:24]
    close(r.outputs, ref)
    assert [i.kind for i in r.trace.instrs if i.op.startswith("nisa.tensor_copy_dynamic")] == [COPY, COPY]
    with pytest.raises(errors.OperandTypeError, match="not on TensorE"):
        apply(lambda a: nisa.tensor_copy_dynamic_src(a, engine=nisa.tensor_engine), X)


# --- nki.isa: GpSimd, random, DMA -----------------------------------------------------------------------------

def test_affine_select_causal_mask():
    x = rand(128, 128, seed=4)

    def op(a):
        i_p, i_f = nl.mgrid[0:128, 0:128]
        return nisa.affine_select(pred=(i_p - i_f >= 0), on_true_tile=a, on_false_value=-9984.0)
    out, tr = apply(op, x)
    close(out, np.where(np.arange(128)[:, None] >= np.arange(128)[None, :], x, -9984.0))
    assert _kinds(tr, "nisa.affine_select") == [GPSIMD]
    with pytest.raises(errors.UnsupportedDtypeError, match="8-bit/16-bit integer"):
        apply(lambda a: nisa.affine_select(nl.arange(8)[None, :] - 3, a, 0.0),
              np.ones((128, 8), np.int32))


def test_local_gather_per_core():
    src = rand(128, 64, seed=6)
    idx = np.random.default_rng(2).integers(0, 60, size=(128, 2)).astype(np.uint16)
    out, tr = apply(lambda s, i: nisa.local_gather(s, i, num_elem_per_idx=2), src, idx)
    ref = np.empty((128, 32, 2), np.float32)
    for c in range(8):
        rows = slice(16 * c, 16 * c + 16)
        flat = idx[rows].flatten(order="F").astype(np.int64)
        ref[rows] = src[rows][:, flat[:, None] + np.arange(2)[None, :]]
    close(out, ref.reshape(128, 64))
    assert _kinds(tr, "nisa.local_gather") == [GPSIMD]
    with pytest.raises(errors.OperandTypeError, match="num_elem_per_idx"):
        apply(lambda s, i: nisa.local_gather(s, i, num_elem_per_idx=3), src, idx)


def test_tensor_partition_reduce_and_sequence_bounds():
    out, _ = apply(lambda a: nisa.tensor_partition_reduce(np.add, a), X)
    close(out, X.sum(axis=0, keepdims=True), rtol=1e-5, atol=1e-4)
    seg = np.array([[1, 1, 2, 2, 2, 0, 3, 3]], dtype=np.float32)
    out, _ = apply(lambda s: nisa.sequence_bounds(segment_ids=s), seg)
    np.testing.assert_array_equal(out[0], [[0, 0, 2, 2, 2, 8, 6, 6], [2, 2, 5, 5, 5, -1, 8, 8]])
    with pytest.raises(errors.UnsupportedOpError, match="nl.add, nl.maximum"):
        apply(lambda a: nisa.tensor_partition_reduce(np.subtract, a), X)


def test_isa_dropout_and_dma_transpose():
    x = np.abs(X) + 1.0
    out, tr = apply(lambda a: nisa.dropout(a, 0.5), x)
    assert 0.4 < float((out == 0).mean()) < 0.6 and np.array_equal(out[out != 0], x[out != 0])
    assert _kinds(tr, "nisa.dropout") == [TS]

    def kernel(a):
        t = nisa.dma_transpose(a)
        out = nl.ndarray((64, 128), dtype=np.float32, buffer=nl.shared_hbm)
        nl.store(out, value=t)
        return out
    r = run(kernel, X)
    close(r.outputs, X.T)
    assert _kinds(r.trace, "nisa.dma_transpose") == [DMA_LOAD]
    with pytest.raises(errors.OperandTypeError, match="axes"):
        run(lambda a: nisa.dma_transpose(a, axes=(0, 1)), X)
    with pytest.raises(errors.UnsupportedDtypeError, match="2-byte"):
        run(lambda a: nisa.dma_transpose(a, dge_mode=nisa.dge_mode.hwdge), X)


def test_engine_enum_and_versions():
    out, tr = apply(lambda a: nisa.tensor_copy(a, engine=nisa.engine.gpsimd), X)
    close(out, X)
    assert [i.engines for i in tr.instrs if i.op == "nisa.tensor_copy"] == [(GPSIMD_ENGINE,)]
    with pytest.raises(errors.OperandTypeError, match="runs no compute instruction"):
        apply(lambda a: nisa.tensor_copy(a, engine=nisa.engine.sync), X)
    with pytest.raises(errors.OperandTypeError, match="not on TensorE"):
        apply(lambda a: nisa.tensor_copy(a, engine=nisa.engine.tensor), X)
    with pytest.raises(errors.UnsupportedMemoryError, match="GpSimd engine cannot access PSUM"):
        apply(lambda a: nisa.tensor_copy(nisa.nc_matmul(a[:, 0:64], a[:, 0:64]), engine=nisa.engine.gpsimd), X)

    def kernel(a):
        assert nisa.get_nc_version() in (nisa.nc_version.gen2, nisa.nc_version.gen3)
        out = nl.ndarray((128, 64), dtype=np.float32, buffer=nl.shared_hbm)
        nl.store(out, value=nl.load(a))
        return out
    run(kernel, X)


# --- nki.compiler, nki.tensor ----------------------------------------------------------------------------------

def test_compiler_flags_are_recorded():
    @nki.compiler.enable_stack_allocator
    @nki.compiler.skip_middle_end_transformations
    def kernel(a):
        assert isinstance(a, nki.tensor)
        out = nl.ndarray((128, 64), dtype=np.float32, buffer=nl.shared_hbm)
        nl.store(out, value=nl.load(a))
        return out

    @nki.compiler.force_auto_alloc
    def k2(a):
        out = nl.ndarray((128, 64), dtype=np.float32, buffer=nl.shared_hbm)
        nl.store(out, value=nl.copy(nl.load(a), dtype=ml_dtypes.bfloat16))
        return out
    r = run(kernel, X)
    assert {"enable_stack_allocator", "skip_middle_end_transformations"} <= set(r.trace.options)
    r2 = run(k2, X)
    assert "force_auto_alloc" in r2.trace.options
    close(r2.outputs, X.astype(ml_dtypes.bfloat16).astype(np.float32))
    assert not isinstance(X, nki.tensor)


# --- pricing ------------------------------------------------------------------------------------------------

def _many(x, extra: bool):
    """The work of a kernel with (extra=True) or without the new instructions."""
    t = nl.load(x)
    acc = nl.copy(t)
    if extra:
        i_p, i_f = nl.mgrid[0:128, 0:64]
        acc = nisa.affine_select(pred=(i_p - i_f >= 0), on_true_tile=acc, on_false_value=0.0)
        acc = nl.add(acc, nl.floor(nisa.dropout(acc, 0.1)))
        st = nisa.bn_aggr(nisa.bn_stats(acc))
        acc = nl.add(acc, nl.where(nl.greater(acc, 0.0), nisa.dma_transpose(nisa.dma_transpose(acc)), 1.0))
        acc = nl.add(acc, nisa.tensor_partition_reduce(np.add, acc))
        nisa.tensor_copy_predicated(src=st[:, 0:1], dst=acc[:, 0:1], predicate=nl.copy(st[:, 0:1], dtype=np.uint8))
    return acc


def _base(x):
    out = nl.ndarray((128, 64), dtype=np.float32, buffer=nl.shared_hbm)
    nl.store(out, value=_many(x, False))
    return out


def _more(x):
    out = nl.ndarray((128, 64), dtype=np.float32, buffer=nl.shared_hbm)
    nl.store(out, value=_many(x, True))
    return out


def test_new_instructions_are_priced_by_the_performance_model():
    from fitness.simulator.perf.model import estimate
    base, more = run(_base, X), run(_more, X)
    apis = {i.op for i in more.trace.instrs}
    assert {"nisa.affine_select", "nisa.dropout", "nisa.bn_stats", "nisa.bn_aggr", "nisa.dma_transpose",
            "nisa.tensor_partition_reduce", "nisa.tensor_copy_predicated", "nl.where", "nl.floor"} <= apis
    b, m = estimate(base.trace, "trn2"), estimate(more.trace, "trn2")
    assert m.latency_ms > b.latency_ms > 0



# --- engine constraints name the kernel line ---------------------------------------------------------------

def test_gpsimd_instructions_refuse_psum_at_the_kernel_line():
    import inspect

    def kernel(a):
        acc = nl.zeros((128, 64), dtype=np.float32, buffer=nl.psum)
        acc[...] = nl.copy(nl.load(a))
        i_p, i_f = nl.mgrid[0:128, 0:64]
        nisa.affine_select(pred=(i_p - i_f >= 0), on_true_tile=acc, on_false_value=0.0)   # the refused line
    line = inspect.getsourcelines(kernel)[1] + 4
    with pytest.raises(errors.UnsupportedMemoryError, match="sbuf") as e:
        run(kernel, X)
    assert f"test_legacy.py:{line}:" in str(e.value)


def test_select_reduce_refuses_reduce_onto_unknown_registers():
    pred = (Y > 0).astype(np.uint8)

    def kernel(x, p):
        d = nl.ndarray((128, 64), dtype=np.float32, buffer=nl.sbuf)
        r = nl.ndarray((128, 1), dtype=np.float32, buffer=nl.sbuf)
        nisa.select_reduce(dst=d, predicate=nl.load(p), on_true=nl.load(x), on_false=0.0, reduce_res=r,
                           reduce_cmd=nisa.reduce_cmd.reduce)
    with pytest.raises(errors.AccumulatorStateError, match="unknown state"):
        run(kernel, X, pred)


def test_masked_math_leaves_the_rest():
    def kernel(a):
        o = nl.zeros((128, 64), dtype=np.float32, buffer=nl.sbuf)
        o[...] = nl.floor(nl.load(a), mask=nl.arange(128)[:, None] < 64)
        out = nl.ndarray((128, 64), dtype=np.float32, buffer=nl.shared_hbm)
        nl.store(out, value=o)
        return out
    out = run(kernel, X * 4).outputs
    close(out[:64], np.floor(X[:64] * 4))
