"""The current dialect's `nki.isa` instructions beyond the basic ones (NKI 0.6 documentation):
each on a small `@nki.jit` kernel against a NumPy computation of its documented semantics, the
engine constraints it refuses (sizes, memories, dtypes) with an error at the kernel line, and
that the performance model prices every record they leave."""

from __future__ import annotations

import numpy as np
import pytest

from fitness.simulator import errors, run_kernel
from fitness.simulator import trace as tr
from fitness.simulator.perf import estimate, hardware
from fitness.simulator.perf.costs import duration_ns
from fitness.simulator.perf.lowering import lower
from fitness.simulator.perf.params import for_target

from ..helpers import nisa as legacy_isa
from ..helpers import nl as legacy_nl
from ..helpers import run as run_legacy

HEAD = "import nki\nimport nki.language as nl\nimport nki.isa as nisa\nimport numpy as np\n\n"
RNG = np.random.default_rng(54)


def run(body: str, *args):
    return run_kernel(HEAD + body, list(args))


def refused(body: str, args, err, *needles: str) -> str:
    """Run a kernel that must fail with `err` at a kernel line, its message holding `needles`."""
    with pytest.raises(err) as info:
        run(body, *args)
    msg = str(info.value)
    assert msg.startswith("kernel.py:"), msg
    for needle in needles:
        assert needle in msg, msg
    return msg


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def one_op(call: str, ins: dict, out_shape, out_dtype="nl.float32", setup: str = "", prefill: str = "") -> str:
    """A kernel: load each input (SBUF tiles of their shape and dtype), run `call` into
    `r` (an SBUF tile of out_shape), store r."""
    loads = "".join(f"    {n} = nl.ndarray({n}_hbm.shape, dtype={n}_hbm.dtype, buffer=nl.sbuf)\n"
                    f"    nisa.dma_copy(dst={n}, src={n}_hbm)\n" for n in ins)
    return (f"@nki.jit\ndef kernel({', '.join(n + '_hbm' for n in ins)}):\n"
            f"    out = nl.ndarray({tuple(out_shape)}, dtype={out_dtype}, buffer=nl.shared_hbm)\n{loads}"
            f"    r = nl.ndarray({tuple(out_shape)}, dtype={out_dtype}, buffer=nl.sbuf)\n{prefill}{setup}"
            f"    {call}\n    nisa.dma_copy(dst=out, src=r)\n    return out\n")


# --- batch-norm statistics --------------------------------------------------------------------------

def test_bn_stats_and_bn_aggr_give_the_mean_and_variance():
    x = rand(64, 256)
    r = run("""
@nki.jit
def kernel(x):
    s_out = nl.ndarray((64, 6), dtype=nl.float32, buffer=nl.shared_hbm)
    a_out = nl.ndarray((64, 2), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    s = nl.ndarray((64, 6), dtype=nl.float32, buffer=nl.sbuf)
    nisa.bn_stats(dst=s, data=t)
    a = nl.ndarray((64, 2), dtype=nl.float32, buffer=nl.sbuf)
    nisa.bn_aggr(dst=a, data=s)
    nisa.dma_copy(dst=s_out, src=s)
    nisa.dma_copy(dst=a_out, src=a)
    return s_out, a_out
""", x)
    stats, agg = r.outputs
    ev, od = x[:, 0::2], x[:, 1::2]
    want = np.stack([np.full(64, 128.0), ev.mean(1), ev.var(1) * 128, np.full(64, 128.0), od.mean(1),
                     od.var(1) * 128], axis=1)
    np.testing.assert_allclose(stats, want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(agg, np.stack([x.mean(1), x.var(1)], axis=1), rtol=1e-4, atol=1e-5)


def test_bn_stats_refuses_more_than_512_elements_per_partition():
    refused(one_op("nisa.bn_stats(dst=r, data=x)", {"x": 0}, (8, 6)), [rand(8, 600)], errors.DimensionLimitError,
            "512", "bn_stats")


# --- the top-8 family ---------------------------------------------------------------------------------

def _distinct(p, f):
    return RNG.permutation(p * f).reshape(p, f).astype(np.float32) / 7.0


def test_max8_find_index8_and_match_replace8():
    x = _distinct(16, 64)
    r = run("""
@nki.jit
def kernel(x):
    o_max = nl.ndarray((16, 8), dtype=nl.float32, buffer=nl.shared_hbm)
    o_idx = nl.ndarray((16, 8), dtype=nl.uint32, buffer=nl.shared_hbm)
    o_rep = nl.ndarray((16, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    o_ridx = nl.ndarray((16, 8), dtype=nl.uint32, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    m = nl.ndarray((16, 8), dtype=nl.float32, buffer=nl.sbuf)
    nisa.max8(dst=m, src=t)
    i = nl.ndarray((16, 8), dtype=nl.uint32, buffer=nl.sbuf)
    nisa.nc_find_index8(dst=i, data=t, vals=m)
    rep = nl.ndarray((16, 64), dtype=nl.float32, buffer=nl.sbuf)
    ridx = nl.ndarray((16, 8), dtype=nl.uint32, buffer=nl.sbuf)
    nisa.nc_match_replace8(dst=rep, data=t, vals=m, imm=-1.0, dst_idx=ridx)
    nisa.dma_copy(dst=o_max, src=m)
    nisa.dma_copy(dst=o_idx, src=i)
    nisa.dma_copy(dst=o_rep, src=rep)
    nisa.dma_copy(dst=o_ridx, src=ridx)
    return o_max, o_idx, o_rep, o_ridx
""", x)
    top, idx, rep, ridx = r.outputs
    order = np.argsort(-x, axis=1)[:, :8]
    np.testing.assert_array_equal(top, np.take_along_axis(x, order, 1))
    np.testing.assert_array_equal(idx, order)
    np.testing.assert_array_equal(ridx, order)
    want = x.copy()
    np.put_along_axis(want, order, -1.0, 1)
    np.testing.assert_array_equal(rep, want)


def test_max8_refuses_fewer_than_8_elements_and_find_index8_a_float_index():
    refused(one_op("nisa.max8(dst=r, src=x)", {"x": 0}, (8, 8)), [rand(8, 4)], errors.DimensionLimitError,
            "between 8 and 16384")
    refused(one_op("nisa.nc_find_index8(dst=r, data=x, vals=x[:, 0:8])", {"x": 0}, (8, 8)), [rand(8, 16)],
            errors.UnsupportedDtypeError, "uint16 or uint32")


# --- selections -----------------------------------------------------------------------------------------

def test_tensor_copy_predicated_keeps_dst_where_the_predicate_is_zero():
    x, pred = rand(32, 16), (RNG.random((32, 16)) < 0.5).astype(np.uint8)
    body = one_op("nisa.tensor_copy_predicated(dst=r, src=x, predicate=p, reverse_pred=REV)", {"x": 0, "p": 0},
                  (32, 16), prefill="    nisa.memset(dst=r, value=7.0)\n")
    for rev in (False, True):
        r = run(body.replace("REV", str(rev)), x, pred)
        keep = (pred != 0) != rev
        np.testing.assert_array_equal(r.outputs, np.where(keep, x, 7.0))
    refused(body.replace("REV", "False"), [x, pred.astype(np.float32)], errors.UnsupportedDtypeError,
            "integer data type")


def test_select_reduce_selects_and_reduces_the_max_into_reduce_res():
    x, pred, off = rand(32, 24), (RNG.random((32, 24)) < 0.5).astype(np.uint8), rand(32, 1)
    r = run("""
@nki.jit
def kernel(x, p, f):
    out = nl.ndarray((32, 24), dtype=nl.float32, buffer=nl.shared_hbm)
    mx = nl.ndarray((32, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    pt = nl.ndarray(p.shape, dtype=p.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=pt, src=p)
    ft = nl.ndarray(f.shape, dtype=f.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=ft, src=f)
    d = nl.ndarray((32, 24), dtype=nl.float32, buffer=nl.sbuf)
    m = nl.ndarray((32, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.select_reduce(dst=d, predicate=pt, on_true=t, on_false=ft, reduce_res=m,
                       reduce_cmd=nisa.reduce_cmd.reset_reduce, reduce_op=nl.maximum)
    nisa.dma_copy(dst=out, src=d)
    nisa.dma_copy(dst=mx, src=m)
    return out, mx
""", x, pred, off)
    want = np.where(pred != 0, x, off)
    np.testing.assert_array_equal(r.outputs[0], want)
    np.testing.assert_array_equal(r.outputs[1], want.max(1, keepdims=True))


def test_range_select_keeps_the_columns_inside_the_bounds():
    x = rand(16, 40)
    lo = RNG.integers(0, 20, (16, 1)).astype(np.float32)
    hi = lo + RNG.integers(1, 20, (16, 1)).astype(np.float32)
    r = run("""
@nki.jit
def kernel(x, lo, hi):
    out = nl.ndarray((16, 40), dtype=nl.float32, buffer=nl.shared_hbm)
    mx = nl.ndarray((16, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    a = nl.ndarray(lo.shape, dtype=lo.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=a, src=lo)
    b = nl.ndarray(hi.shape, dtype=hi.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=b, src=hi)
    d = nl.ndarray((16, 40), dtype=nl.float32, buffer=nl.sbuf)
    m = nl.ndarray((16, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.range_select(dst=d, on_true_tile=t, comp_op0=nl.greater_equal, comp_op1=nl.less, bound0=a, bound1=b,
                      reduce_res=m, range_start=3)
    nisa.dma_copy(dst=out, src=d)
    nisa.dma_copy(dst=mx, src=m)
    return out, mx
""", x, lo, hi)
    i = 3 + np.arange(40, dtype=np.float32)[None, :]
    want = np.where((i >= lo) & (i < hi), x, np.finfo(np.float32).min)
    np.testing.assert_array_equal(r.outputs[0], want)
    np.testing.assert_array_equal(r.outputs[1], want.max(1, keepdims=True))


# --- exponential and VectorE's shared accumulator registers --------------------------------------------

EXP_THEN_REDUCE = """
@nki.jit
def kernel(x, m):
    out = nl.ndarray((32, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    s_out = nl.ndarray((32, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    mt = nl.ndarray(m.shape, dtype=m.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=mt, src=m)
    e = nl.ndarray((32, 64), dtype=nl.float32, buffer=nl.sbuf)
    nisa.exponential(dst=e, src=t, max_value=mt, reduce_cmd=FIRST)
    d = nl.ndarray((32, 64), dtype=nl.float32, buffer=nl.sbuf)
    s = nl.ndarray((32, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar_reduce(dst=d, data=t, op0=nl.multiply, operand0=2.0, reduce_op=nl.add, reduce_res=s,
                              reduce_cmd=nisa.reduce_cmd.reduce, reduce_res_negate=True)
    nisa.dma_copy(dst=out, src=e)
    nisa.dma_copy(dst=s_out, src=s)
    return out, s_out
"""


def test_exponential_and_tensor_scalar_reduce_share_the_accumulator_registers():
    x, m = rand(32, 64), rand(32, 1)
    r = run(EXP_THEN_REDUCE.replace("FIRST", "nisa.reduce_cmd.reset_reduce"), x, m)
    e = np.exp(x - m)
    np.testing.assert_allclose(r.outputs[0], e, rtol=1e-6)
    np.testing.assert_allclose(r.outputs[1], -(e.sum(1, keepdims=True) + (2 * x).sum(1, keepdims=True)),
                               rtol=1e-4)
    # after an idle instruction the registers are unknown: reduce onto them is refused
    refused(EXP_THEN_REDUCE.replace("FIRST", "nisa.reduce_cmd.idle"), [x, m], errors.AccumulatorStateError,
            "reset_reduce")


def test_tensor_scalar_reduce_load_reduce_starts_from_reduce_init():
    x, init = rand(16, 32), rand(16, 1)
    body = one_op("nisa.tensor_scalar_reduce(dst=r, data=x, op0=nl.add, operand0=1.0, reduce_op=nl.maximum, "
                  "reduce_res=s, reduce_cmd=nisa.reduce_cmd.load_reduce, reduce_init=i)", {"x": 0, "i": 0}, (16, 32),
                  setup="    s = nl.ndarray((16, 1), dtype=nl.float32, buffer=nl.sbuf)\n")
    body = body.replace("    nisa.dma_copy(dst=out, src=r)\n    return out",
                        "    o2 = nl.ndarray((16, 1), dtype=nl.float32, buffer=nl.shared_hbm)\n"
                        "    nisa.dma_copy(dst=out, src=r)\n    nisa.dma_copy(dst=o2, src=s)\n    return out, o2")
    r = run(body, x, init)
    np.testing.assert_allclose(r.outputs[0], x + 1, rtol=1e-6)
    np.testing.assert_allclose(r.outputs[1], np.maximum(init, (x + 1).max(1, keepdims=True)), rtol=1e-6)
    refused(body.replace("reduce_op=nl.maximum", "reduce_op=nl.subtract"), [x, init], errors.UnsupportedOpError,
            "reduce_op")


def test_tensor_scalar_cumulative_scans_along_the_free_axis():
    x, init = rand(16, 20), rand(16, 1)
    body = one_op("nisa.tensor_scalar_cumulative(dst=r, src=x, op0=nl.multiply, op1=OP1, imm0=2.0, imm1=IMM1, "
                  "reduce_cmd=CMD)", {"x": 0, "i": 0}, (16, 20))
    r = run(body.replace("OP1", "nl.add").replace("IMM1", "None").replace("CMD", "nisa.reduce_cmd.reset_reduce"),
            x, init)
    np.testing.assert_allclose(r.outputs, np.cumsum(2 * x, axis=1), rtol=1e-5, atol=1e-5)
    r = run(body.replace("OP1", "nl.maximum").replace("IMM1", "i").replace("CMD", "nisa.reduce_cmd.load_reduce"),
            x, init)
    np.testing.assert_allclose(r.outputs, np.maximum.accumulate(np.concatenate([init, 2 * x], 1), axis=1)[:, 1:])
    refused(body.replace("OP1", "nl.divide").replace("IMM1", "None").replace("CMD", "nisa.reduce_cmd.reset_reduce"),
            [x, init], errors.UnsupportedOpError, "op1")


# --- the cross-partition shuffle ---------------------------------------------------------------------

def test_nc_stream_shuffle_permutes_partitions_within_each_quadrant():
    x = rand(64, 8)
    mask = [(31 - i) if i % 3 else 255 for i in range(32)]
    body = one_op(f"nisa.nc_stream_shuffle(dst=r, src=x, shuffle_mask={mask})", {"x": 0}, (64, 8),
                  prefill="    nisa.memset(dst=r, value=5.0)\n")
    r = run(body, x)
    want = np.full((64, 8), 5.0, np.float32)
    for p in range(64):
        if mask[p % 32] != 255:
            want[p] = x[(p // 32) * 32 + mask[p % 32]]
    np.testing.assert_array_equal(r.outputs, want)
    refused(body.replace(f"shuffle_mask={mask}", "shuffle_mask=[0] * 16"), [x], errors.ShapeMismatchError,
            "32 elements")


# --- GpSimd -------------------------------------------------------------------------------------------

def test_iota_generates_the_pattern():
    body = """
@nki.jit
def kernel():
    out = nl.ndarray((8, 12), dtype=nl.int32, buffer=nl.shared_hbm)
    t = nl.ndarray((8, 12), dtype=nl.int32, buffer=nl.sbuf)
    nisa.iota(dst=t, pattern=[[10, 3], [-1, 4]], offset=5, channel_multiplier=100)
    nisa.dma_copy(dst=out, src=t)
    return out
"""
    r = run(body)
    c, w, x = np.ogrid[:8, :3, :4]
    np.testing.assert_array_equal(r.outputs, (5 + 100 * c + 10 * w - x).reshape(8, 12))
    refused(body.replace("[-1, 4]", "[-1, 5]"), [], errors.ShapeMismatchError, "spans 15 elements")


def test_affine_select_applies_a_causal_mask():
    x = rand(16, 16)
    body = one_op("nisa.affine_select(dst=r, pattern=[[-1, 16]], channel_multiplier=1, on_true_tile=x, "
                  "on_false_value=-9.0, cmp_op=nl.greater_equal)", {"x": 0}, (16, 16))
    r = run(body, x)
    np.testing.assert_array_equal(r.outputs, np.where(np.tril(np.ones((16, 16), bool)), x, -9.0))


def test_gpsimd_instructions_refuse_psum():
    x = rand(16, 16)
    body = """
@nki.jit
def kernel(x):
    out = nl.ndarray((16, 16), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((16, 16), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    p = nl.ndarray((16, 16), dtype=nl.float32, buffer=nl.psum)
    nisa.affine_select(dst=p, pattern=[[-1, 16]], channel_multiplier=1, on_true_tile=t, on_false_value=0.0)
    return out
"""
    refused(body, [x], errors.UnsupportedMemoryError, "'dst' of 'nisa.affine_select'", "sbuf")


def test_local_gather_gathers_within_each_16_partition_core():
    src = rand(32, 24)
    idx = RNG.integers(0, 22, (32, 2)).astype(np.uint16)
    nv, e = 20, 2
    r = run(one_op(f"nisa.local_gather(dst=r, src_buffer=s, index=i, num_elem_per_idx={e}, "
                   f"num_valid_indices={nv})", {"s": 0, "i": 0}, (32, nv * e)), src, idx)
    want = np.empty((32, nv, e), np.float32)
    for c in range(2):
        rows = slice(16 * c, 16 * c + 16)
        flat = idx[rows].flatten(order="F")[:nv].astype(np.int64)
        want[rows] = src[rows][:, flat[:, None] + np.arange(e)]
    np.testing.assert_array_equal(r.outputs, want.reshape(32, nv * e))
    refused(one_op("nisa.local_gather(dst=r, src_buffer=s, index=i, num_elem_per_idx=3)", {"s": 0, "i": 0},
                   (32, 96)), [src, idx], errors.OperandTypeError, "num_elem_per_idx")


def test_nc_n_gather_gathers_per_partition():
    data = rand(8, 16)
    idx = RNG.integers(0, 16, (8, 5)).astype(np.uint32)
    r = run(one_op("nisa.nc_n_gather(dst=r, data=d, indices=i)", {"d": 0, "i": 0}, (8, 5)), data, idx)
    np.testing.assert_array_equal(r.outputs, np.take_along_axis(data, idx.astype(np.int64), 1))
    refused(one_op("nisa.nc_n_gather(dst=r, data=d, indices=i)", {"d": 0, "i": 0}, (8, 5)),
            [data, idx.astype(np.int32)], errors.UnsupportedDtypeError, "uint32")


@pytest.mark.parametrize("op, ref", [("nl.add", np.sum), ("nl.maximum", np.max)])
def test_tensor_partition_reduce_reduces_across_partitions(op, ref):
    x = rand(64, 32)
    r = run(one_op(f"nisa.tensor_partition_reduce(dst=r, op={op}, data=x)", {"x": 0}, (1, 32)), x)
    np.testing.assert_allclose(r.outputs, ref(x, axis=0, keepdims=True), rtol=1e-5, atol=1e-5)


def test_sequence_bounds_gives_each_segments_start_and_end():
    seg = np.array([[1, 1, 2, 2, 2, 0, 3, 3, 0, 0]], np.float32)
    r = run(one_op("nisa.sequence_bounds(dst=r, segment_ids=s)", {"s": 0}, (1, 2, 10)), seg)
    want = [[10 if s == 0 else min(j for j in range(10) if seg[0, j] == s) for s in seg[0]],
            [-1 if s == 0 else max(j for j in range(10) if seg[0, j] == s) + 1 for s in seg[0]]]
    np.testing.assert_array_equal(r.outputs, np.array([want], np.float32))
    refused(one_op("nisa.sequence_bounds(dst=r, segment_ids=s)", {"s": 0}, (1, 2, 10)), [np.vstack([seg, seg])],
            errors.ShapeMismatchError, "[1, n]")


def test_nonzero_with_count_writes_the_first_partition_of_each_core():
    x = (RNG.random((32, 12)) < 0.4).astype(np.float32) * rand(32, 12)
    r = run(one_op("nisa.nonzero_with_count(dst=r, src=x, index_offset=100, padding_val=-1)", {"x": 0}, (32, 13),
                   out_dtype="nl.int32", prefill="    nisa.memset(dst=r, value=7)\n"), x)
    want = np.full((32, 13), 7, np.int32)
    for p in (0, 16):
        nz = np.flatnonzero(x[p])
        want[p] = -1
        want[p, :nz.size] = nz + 100
        want[p, 12] = nz.size
    np.testing.assert_array_equal(r.outputs, want)


# --- random numbers ----------------------------------------------------------------------------------

RNG_KERNEL = """
@nki.jit
def kernel(seed):
    out = nl.ndarray((16, 64), dtype=nl.uint32, buffer=nl.shared_hbm)
    u = nl.ndarray((16, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    s = nl.ndarray((1, 1), dtype=nl.uint32, buffer=nl.sbuf)
    nisa.dma_copy(dst=s, src=seed)
    nisa.set_rng_seed(src_seeds=s)
    t = nl.ndarray((16, 64), dtype=nl.uint32, buffer=nl.sbuf)
    nisa.rng(dst=t)
    f = nl.ndarray((16, 64), dtype=nl.float32, buffer=nl.sbuf)
    nisa.rand2(dst=f, min=-2.0, max=3.0)
    nisa.dma_copy(dst=out, src=t)
    nisa.dma_copy(dst=u, src=f)
    return out, u
"""


def test_rng_and_rand2_are_reproducible_per_seed_and_in_range():
    a = run(RNG_KERNEL, np.array([[1]], np.uint32)).outputs
    b = run(RNG_KERNEL, np.array([[1]], np.uint32)).outputs
    c = run(RNG_KERNEL, np.array([[2]], np.uint32)).outputs
    np.testing.assert_array_equal(a[0], b[0])
    assert not np.array_equal(a[0], c[0])
    assert len(np.unique(a[0])) > 1000
    assert a[1].min() >= -2.0 and a[1].max() <= 3.0 and a[1].std() > 1.0
    refused(RNG_KERNEL.replace("t = nl.ndarray((16, 64), dtype=nl.uint32", "t = nl.ndarray((16, 64), dtype=nl.float32"),
            [np.array([[1]], np.uint32)], errors.UnsupportedDtypeError, "int8, int16, int32")


def test_dropout_zeroes_elements_with_the_given_probability():
    x = rand(64, 128) + 10.0
    body = one_op("nisa.dropout(dst=r, data=x, prob=PROB)", {"x": 0}, (64, 128))
    np.testing.assert_array_equal(run(body.replace("PROB", "0.0"), x).outputs, x)
    np.testing.assert_array_equal(run(body.replace("PROB", "1.0"), x).outputs, np.zeros_like(x))
    half = run(body.replace("PROB", "0.25"), x).outputs
    kept = half != 0
    np.testing.assert_array_equal(half[kept], x[kept])
    assert 0.2 < 1 - kept.mean() < 0.3


def test_rand_get_state_returns_the_state_rand_set_state_set():
    st = RNG.integers(0, 2 ** 32, (8, 6), dtype=np.uint32)
    body = one_op("nisa.rand_set_state(src_seeds=s)\n    nisa.rand_get_state(dst=r)", {"s": 0}, (8, 6),
                  out_dtype="nl.uint32")
    np.testing.assert_array_equal(run(body, st).outputs, st)
    refused(body, [st[:, :4].copy()], errors.ShapeMismatchError, "6 state elements")


# --- registers and DMA ---------------------------------------------------------------------------------

def test_registers_drive_a_scalar_offset_dma_and_store_back():
    data, row = rand(10, 8), np.array([[6]], np.int32)
    r = run("""
@nki.jit
def kernel(data, row):
    out = nl.ndarray((1, 8), dtype=nl.float32, buffer=nl.shared_hbm)
    back = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.shared_hbm)
    t = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=row)
    reg = nisa.register_alloc()
    nisa.register_load(reg, t)
    two = nisa.register_alloc(2)
    nisa.register_move(two, reg)
    g = nl.ndarray((1, 8), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=g, src=data.ap(pattern=[[8, 1], [1, 8]], scalar_offset=two, indirect_dim=0))
    nisa.register_store(back, two)
    nisa.dma_copy(dst=out, src=g)
    return out, back
""", data, row)
    np.testing.assert_array_equal(r.outputs[0], data[6:7])
    np.testing.assert_array_equal(r.outputs[1], row)


GATHER = """
@nki.jit
def kernel(data, indices):
    out = nl.ndarray((16, 8), dtype=data.dtype, buffer=nl.shared_hbm)
    idx = nl.ndarray((16, 1), dtype=nl.uint32, buffer=nl.sbuf)
    nisa.dma_copy(dst=idx, src=indices)
    dst = nl.ndarray((16, 8), dtype=data.dtype, buffer=nl.sbuf)
    nisa.memset(dst=dst, value=-1.0)
    nisa.dma_copy(dst=dst, src=data.ap(pattern=[[8, 16], [1, 8]], vector_offset=idx, indirect_dim=0), OOB)
    nisa.dma_copy(dst=out, src=dst)
    return out
"""


def test_indirect_dma_copy_gathers_rows_and_skips_out_of_bound_ones():
    data = rand(40, 8)
    idx = RNG.integers(0, 40, (16, 1)).astype(np.uint32)
    r = run(GATHER.replace(", OOB", ""), data, idx)
    np.testing.assert_array_equal(r.outputs, data[idx[:, 0]])
    idx[3] = 99
    r = run(GATHER.replace("OOB", "oob_mode=nisa.oob_mode.skip"), data, idx)
    want = data[np.minimum(idx[:, 0], 39)]
    want[3] = -1.0
    np.testing.assert_array_equal(r.outputs, want)
    refused(GATHER.replace(", OOB", ""), [data, idx], errors.OutOfBoundsError, "oob_mode")
    refused(GATHER.replace("OOB", "dge_mode=nisa.dge_mode.hwdge"), [data, idx], errors.UnsupportedApiError, "swdge")


def test_indirect_dma_copy_scatters_rows():
    src, idx = rand(8, 4), RNG.permutation(20)[:8].astype(np.uint32).reshape(8, 1)
    r = run("""
@nki.jit
def kernel(src, indices):
    out = nl.ndarray((20, 4), dtype=nl.float32, buffer=nl.shared_hbm)
    z = nl.ndarray((20, 4), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=z, value=0.0)
    nisa.dma_copy(dst=out, src=z)
    s = nl.ndarray((8, 4), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=s, src=src)
    idx = nl.ndarray((8, 1), dtype=nl.uint32, buffer=nl.sbuf)
    nisa.dma_copy(dst=idx, src=indices)
    nisa.dma_copy(dst=out.ap(pattern=[[4, 8], [1, 4]], vector_offset=idx, indirect_dim=0), src=s)
    return out
""", src, idx)
    want = np.zeros((20, 4), np.float32)
    want[idx[:, 0]] = src
    np.testing.assert_array_equal(r.outputs, want)


def test_dma_compute_adds_its_sources():
    a, b, c = rand(16, 8), rand(16, 8), rand(16, 8)
    body = """
@nki.jit
def kernel(a, b, c):
    out = nl.ndarray((16, 8), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((16, 8), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_compute(dst=t, srcs=[a, b, c], reduce_op=OP)
    nisa.dma_copy(dst=out, src=t)
    return out
"""
    np.testing.assert_allclose(run(body.replace("OP", "nl.add"), a, b, c).outputs, a + b + c, rtol=1e-6)
    refused(body.replace("OP", "nl.multiply"), [a, b, c], errors.UnsupportedOpError, "nl.add")


def test_dma_transpose_and_its_hardware_dge_constraints():
    import ml_dtypes
    x = rand(16, 64).astype(ml_dtypes.bfloat16)
    body = """
@nki.jit
def kernel(x):
    out = nl.ndarray((64, 16), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((64, 16), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_transpose(dst=t, src=x, dge_mode=nisa.dge_mode.hwdge)
    nisa.dma_copy(dst=out, src=t)
    return out
"""
    np.testing.assert_array_equal(run(body, x).outputs, x.T)
    refused(body, [x.astype(np.float32)], errors.UnsupportedDtypeError, "2-byte")


def test_sendrecv_with_itself_copies_and_core_barrier_runs():
    x = rand(8, 16)
    body = """
@nki.jit
def kernel(x):
    out = nl.ndarray((8, 16), dtype=nl.float32, buffer=nl.shared_hbm)
    a = nl.ndarray((8, 16), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=a, src=x)
    b = nl.ndarray((8, 16), dtype=nl.float32, buffer=nl.sbuf)
    nisa.sendrecv(src=a, dst=b, send_to_rank=0, recv_from_rank=RANK, pipe_id=0)
    nisa.dma_copy(dst=out, src=b)
    nisa.core_barrier(data=out, cores=(0, 1))
    return out
"""
    r = run(body.replace("RANK", "0"), x)
    np.testing.assert_array_equal(r.outputs, x)
    assert [i.op for i in r.trace.instrs].count("nisa.core_barrier") == 1
    refused(body.replace("RANK", "1"), [x], errors.UnsupportedApiError, "another NeuronCore")


# --- activation's accumulator, nc_transpose, the handle types --------------------------------------------

ACT = """
@nki.jit
def kernel(x):
    s_out = nl.ndarray((32, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    e = nl.ndarray((32, 16), dtype=nl.float32, buffer=nl.sbuf)
    s = nl.ndarray((32, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.activation(dst=e, op=nl.exp, data=t[:, 0:16], reduce_op=nl.add, reduce_cmd=FIRST)
    nisa.activation(dst=e, op=nl.exp, data=t[:, 16:32], reduce_op=nl.add, reduce_res=s,
                    reduce_cmd=nisa.reduce_cmd.reduce)
    nisa.dma_copy(dst=s_out, src=s)
    return s_out
"""


def test_activation_reduce_cmd_accumulates_over_instructions():
    x = rand(32, 32)
    r = run(ACT.replace("FIRST", "nisa.reduce_cmd.reset_reduce"), x)
    np.testing.assert_allclose(r.outputs, np.exp(x).sum(1, keepdims=True), rtol=1e-5)
    refused(ACT.replace("FIRST", "nisa.reduce_cmd.idle"), [x], errors.AccumulatorStateError, "reset")
    refused(ACT.replace("FIRST", "nisa.reduce_cmd.load_reduce"), [x], errors.OperandTypeError, "load_reduce")


def test_activation_reduce_sums_the_activation():
    x = rand(32, 24)
    r = run(one_op("nisa.activation_reduce(dst=r, op=nl.exp, data=x, reduce_op=nl.add, reduce_res=s)\n"
                   "    nisa.dma_copy(dst=o2, src=s)", {"x": 0}, (32, 24),
                   setup="    s = nl.ndarray((32, 1), dtype=nl.float32, buffer=nl.sbuf)\n"
                         "    o2 = nl.ndarray((32, 1), dtype=nl.float32, buffer=nl.shared_hbm)\n")
            .replace("return out", "return out, o2"), x)
    np.testing.assert_allclose(r.outputs[0], np.exp(x), rtol=1e-6)
    np.testing.assert_allclose(r.outputs[1], np.exp(x).sum(1, keepdims=True), rtol=1e-5)


def test_masked_legacy_activation_reduce_sums_the_active_elements_only():
    x = rand(128, 64)

    def kernel(x):
        out = legacy_nl.ndarray((128, 1), dtype=np.float32, buffer=legacy_nl.shared_hbm)
        red = legacy_nl.ndarray((128, 1), dtype=np.float32, buffer=legacy_nl.sbuf)
        red[...] = 5.0
        i_p = legacy_nl.arange(128)[:, None]
        i_f = legacy_nl.arange(64)[None, :]
        t = legacy_nl.load(x)
        legacy_isa.activation_reduce(op=legacy_nl.exp, data=t[i_p, i_f], reduce_op=legacy_nl.add,
                                     reduce_res=red[i_p, 0], mask=(i_f < 40) & (i_p < 100))
        legacy_nl.store(out, value=red)
        return out

    got = run_legacy(kernel, x).outputs
    want = np.exp(x[:, :40]).sum(1, keepdims=True)
    want[100:] = 5.0
    np.testing.assert_allclose(got, want, rtol=1e-5)


NC_T = """
@nki.jit
def kernel(x):
    out = nl.ndarray((F, P), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    d = nl.ndarray((F, P), dtype=nl.float32, buffer=MEM)
    nisa.nc_transpose(dst=d, data=t, ENGINE)
    s = nl.ndarray((F, P), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=s, src=d)
    nisa.dma_copy(dst=out, src=s)
    return out
"""


def _nc_t(p: int, f: int, mem: str, engine: str) -> str:
    return NC_T.replace("F, P", f"{f}, {p}").replace("MEM", mem).replace("ENGINE", engine)


@pytest.mark.parametrize("p, f, mem, engine", [(32, 32, "nl.sbuf", "engine=nisa.engine.vector"),
                                              (16, 8, "nl.psum", "engine=nisa.engine.vector"),
                                              (128, 64, "nl.psum", "engine=nisa.engine.tensor"),
                                              (128, 64, "nl.psum", "engine=nisa.engine.unknown"),
                                              (8, 12, "nl.sbuf", "engine=nisa.engine.unknown")])
def test_nc_transpose_on_vector_and_tensor_engine(p, f, mem, engine):
    x = rand(p, f)
    np.testing.assert_array_equal(run(_nc_t(p, f, mem, engine), x).outputs, x.T)


def test_nc_transpose_refuses_what_the_engines_cannot_do():
    x = rand(128, 64)
    refused(_nc_t(128, 64, "nl.sbuf", "engine=nisa.engine.vector"), [x], errors.DimensionLimitError, "[32, 32]")
    refused(_nc_t(128, 64, "nl.sbuf", "engine=nisa.engine.unknown"), [x], errors.UnsupportedMemoryError, "PSUM",
            "[32, 32]")
    # a transpose of more than 128 free elements needs more than 128 partitions for its result
    refused(_nc_t(64, 256, "nl.psum", "engine=nisa.engine.tensor"), [rand(64, 256)], errors.PartitionLimitError,
            "exceeds the architecture limit of 128")
    refused(_nc_t(8, 8, "nl.sbuf", "engine=nisa.engine.scalar"), [rand(8, 8)], errors.EngineError, "nisa.engine.vector")


def test_handles_enums_and_version():
    r = run("""
@nki.jit
def kernel(x):
    out = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.shared_hbm)
    t = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    v = nisa.get_nc_version()
    assert v == nisa.nc_version.gen3 and nisa.nc_version.gen2 < v
    assert isinstance(nisa.register_alloc(), nisa.VirtualRegister)
    assert {m.name for m in nisa.reduce_cmd} >= {"idle", "reset", "reduce", "reset_reduce", "load_reduce"}
    assert {m.name for m in nisa.oob_mode} == {"error", "skip"} and nisa.dge_mode.swdge != nisa.dge_mode.hwdge
    assert nisa.matmul_perf_mode.double_row != nisa.matmul_perf_mode.none and nisa.dma_engine.gpsimd_dma
    h = nisa.NkiInstruction(None)
    assert h.depends_on(nisa.NkiInstruction(None)) is h
    nisa.memset(dst=t, value=int(v))
    nisa.dma_copy(dst=out, src=t)
    return out
""", np.zeros(1, np.float32))
    assert int(r.outputs[0, 0]) == 3


# --- the performance model prices every new record ------------------------------------------------------

def test_every_new_instruction_record_is_priced():
    x, m = rand(32, 64), rand(32, 1)
    traces = [run(EXP_THEN_REDUCE.replace("FIRST", "nisa.reduce_cmd.reset_reduce"), x, m).trace,
              run(RNG_KERNEL, np.array([[1]], np.uint32)).trace,
              run(GATHER.replace(", OOB", ""), rand(40, 8), RNG.integers(0, 40, (16, 1)).astype(np.uint32)).trace,
              run(one_op("nisa.tensor_partition_reduce(dst=r, op=nl.add, data=x)", {"x": 0}, (1, 64)), x).trace,
              run(one_op("nisa.bn_stats(dst=r, data=x)", {"x": 0}, (32, 6)), x).trace,
              run(one_op("nisa.affine_select(dst=r, pattern=[[-1, 16]], channel_multiplier=1, on_true_tile=x, "
                         "on_false_value=-9.0)\n    nisa.core_barrier(data=out, cores=(0, 1))", {"x": 0}, (16, 16)),
                  rand(16, 16)).trace,
              run(one_op("nisa.rand_set_state(src_seeds=s)\n    nisa.rand_get_state(dst=r)", {"s": 0}, (8, 6),
                         out_dtype="nl.uint32"), RNG.integers(0, 9, (8, 6), dtype=np.uint32)).trace]
    hw, params = hardware("trn1"), for_target("trn1")
    seen = set()
    for trace in traces:
        assert estimate(trace).latency_ms > 0
        for op in lower(trace).ops:
            for engine in op.engines:
                if engine != tr.DMA:
                    assert duration_ns(op, engine, hw, params) > 0, op
            seen.add(op.source)
    assert {"nisa.exponential", "nisa.tensor_scalar_reduce", "nisa.rng", "nisa.rand2", "nisa.set_rng_seed",
            "nisa.tensor_partition_reduce", "nisa.bn_stats", "nisa.affine_select", "nisa.core_barrier",
            "nisa.rand_set_state", "nisa.rand_get_state"} <= seen


ACT2 = one_op("nisa.activate2(dst=r, op=nl.exp, data=x, imm0=s, imm1=0.5, op0=nl.multiply, op1=OP1, reverse1=REV, "
              "reduce_op=nl.add, reduce_res=m, reduce_cmd=nisa.reduce_cmd.reset_reduce)\n"
              "    nisa.dma_copy(dst=o2, src=m)", {"x": 0, "s": 0}, (16, 24),
              setup="    m = nl.ndarray((16, 1), dtype=nl.float32, buffer=nl.sbuf)\n"
                    "    o2 = nl.ndarray((16, 1), dtype=nl.float32, buffer=nl.shared_hbm)\n"
              ).replace("return out", "return out, o2")


@pytest.mark.parametrize("op1, rev, ref", [("nl.add", False, lambda y: y + 0.5),
                                           ("nl.subtract", True, lambda y: 0.5 - y)])
def test_activate2_scales_biases_activates_and_reduces(op1, rev, ref):
    x, s = rand(16, 24), rand(16, 1)
    r = run(ACT2.replace("OP1", op1).replace("REV", str(rev)), x, s)
    want = np.exp(ref(x * s))
    np.testing.assert_allclose(r.outputs[0], want, rtol=1e-5)
    np.testing.assert_allclose(r.outputs[1], want.sum(1, keepdims=True), rtol=1e-5)
    assert [i.kind for i in r.trace.instrs if i.op == "nisa.activate2"] == [tr.ACT]


def test_activate2_refuses_unsupported_stage_combinations():
    refused(ACT2.replace("OP1", "nl.maximum").replace("REV", "False"), [rand(16, 24), rand(16, 1)],
            errors.UnsupportedOpError, "(multiply, maximum)")


def test_shape_only_runs_leave_the_full_runs_records():
    """The optimizer traces kernels without data: the new instructions run shape-only too,
    load_reduce from a tile included."""
    x, init = rand(16, 32), rand(16, 1)
    body = one_op("nisa.exponential(dst=r, src=x, reduce_res=s, reduce_cmd=nisa.reduce_cmd.load_reduce, reduce_init=i)"
                  "\n    nisa.tensor_scalar_reduce(dst=r, data=x, op0=nl.add, operand0=1.0, reduce_op=nl.add, "
                  "reduce_res=s, reduce_cmd=nisa.reduce_cmd.load_reduce, reduce_init=i)", {"x": 0, "i": 0}, (16, 32),
                  setup="    s = nl.ndarray((16, 1), dtype=nl.float32, buffer=nl.sbuf)\n")
    full = run_kernel(HEAD + body, [x, init])
    shape = run_kernel(HEAD + body, [x, init], shape_only=True)
    assert [(i.kind, i.op, i.func) for i in shape.trace.instrs] == [(i.kind, i.op, i.func) for i in full.trace.instrs]
    np.testing.assert_allclose(full.outputs, x + 1, rtol=1e-6)


def test_nc_transpose_keeps_the_dtype():
    refused(_nc_t(16, 16, "nl.sbuf", "engine=nisa.engine.vector").replace(
        "d = nl.ndarray((16, 16), dtype=nl.float32", "d = nl.ndarray((16, 16), dtype=nl.bfloat16"),
        [rand(16, 16)], errors.UnsupportedDtypeError, "data type of 'data' (float32)")
