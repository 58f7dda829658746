"""Masked instruction results assigned into on-chip regions that lie partly outside the
tensor (nki-semantics.md §4.4): the mask excludes the out-of-bound part from the bounds
check, the write and the trace; without a covering mask the access is still an error."""

from __future__ import annotations

import numpy as np
import pytest

from fitness.simulator import errors
from fitness.simulator.trace import ACT, COPY, DMA_LOAD, MM, TS, TT

from .helpers import assert_consistent, instrs, nisa, nl, rand, run

X = rand(128, 768, seed=11)
W = rand(128, 384, seed=12)
A = rand(128, 128, seed=13)

# (kind, value of the assigned instruction from the masked load `t`, NumPy golden of x)
OPS = {
    "load": (DMA_LOAD, None, lambda x: x),
    "tensor_scalar": (TS, lambda t, m: nl.multiply(t, 2.0, mask=m), lambda x: 2 * x),
    "tensor_tensor": (TT, lambda t, m: nl.add(t, t, mask=m), lambda x: x + x),
    "activation": (ACT, lambda t, m: nisa.activation(nl.exp, t, mask=m), np.exp),
    "copy": (COPY, lambda t, m: nl.copy(t, mask=m), lambda x: x),
}


def column_tiles(x, value_of, two_axis_mask: bool = False):
    """Two 512-column tiles of a (128, 768) row block: the second is half outside it."""
    out = nl.ndarray((128, 768), dtype=x.dtype, buffer=nl.shared_hbm)
    y = nl.zeros((128, 768), dtype=x.dtype, buffer=nl.sbuf)
    i_p = nl.arange(128)[:, None]
    i_n = nl.arange(512)[None, :]
    for n in nl.affine_range(2):
        if two_axis_mask:   # not a box: row r keeps columns < 641 + r of the second tile
            mask = n * 512 + i_n - i_p < 641
        else:
            mask = n * 512 + i_n < 768
        if value_of is None:
            y[i_p, n * 512 + i_n] = nl.load(x[i_p, n * 512 + i_n], mask=mask)
        else:
            t = nl.load(x[i_p, n * 512 + i_n], mask=mask)
            y[i_p, n * 512 + i_n] = value_of(t, mask)
    nl.store(out, value=y)
    return out


@pytest.mark.parametrize("name", list(OPS))
def test_masked_result_into_a_partly_out_of_bound_region(name):
    kind, value_of, golden = OPS[name]
    r = run(column_tiles, X, value_of=value_of)
    np.testing.assert_allclose(r.outputs, golden(X), rtol=1e-6)
    assert_consistent(r.trace)
    first, second = instrs(r.trace, kind)[-2:]
    y_id = second.writes[0].tensor
    assert r.trace.tensors[y_id].shape == (128, 768)
    # the trace counts only the unmasked, in-bound part of the second tile
    assert first.writes[0].box == ((0, 128), (0, 512)) and first.free == 512
    assert second.writes[0].box == ((0, 128), (512, 768)) and second.free == 256
    assert second.partitions == 128
    if kind == DMA_LOAD:
        assert second.dma.bytes == 128 * 256 * 4


@pytest.mark.parametrize("name", ["load", "tensor_scalar"])
def test_a_mask_that_is_not_a_box(name):
    kind, value_of, golden = OPS[name]
    r = run(column_tiles, X, value_of=value_of, two_axis_mask=True)
    rows, cols = np.indices(X.shape)
    keep = (cols < 512) | (cols < 641 + rows)
    np.testing.assert_allclose(r.outputs, np.where(keep, golden(X), 0), rtol=1e-6)
    second = instrs(r.trace, kind)[-1]
    assert second.writes[0].box == ((0, 128), (512, 768))


def test_masked_rows_past_the_partitions_of_a_tensor():
    def kernel(x):
        out = nl.ndarray((100, 512), dtype=x.dtype, buffer=nl.shared_hbm)
        y = nl.ndarray((100, 512), dtype=x.dtype, buffer=nl.sbuf)
        i_p = nl.arange(128)[:, None]
        i_n = nl.arange(512)[None, :]
        t = nl.load(x[i_p, i_n], mask=(i_p < 100))
        y[i_p, i_n] = nl.exp(t, mask=(i_p < 100))
        nl.store(out, value=y)
        return out

    r = run(kernel, X[:100, :512])
    np.testing.assert_allclose(r.outputs, np.exp(X[:100, :512]), rtol=1e-6)
    act = instrs(r.trace, ACT)[0]
    assert act.partitions == 100 and act.writes[0].box == ((0, 100), (0, 512))


def matmul_columns(a, w, accumulate: bool, masked: bool = True):
    """A 512-column matmul into a (128, 384) PSUM tile, masked to its 384 columns."""
    out = nl.ndarray((128, 384), dtype=np.float32, buffer=nl.shared_hbm)
    ps = nl.zeros((128, 384), dtype=np.float32, buffer=nl.psum)
    i_p = nl.arange(128)[:, None]
    i_n = nl.arange(512)[None, :]
    mask = (i_n < 384) if masked else None
    st = nl.load(a)
    mv = nl.load(w[i_p, i_n], mask=(i_n < 384))
    if accumulate:
        for _ in nl.affine_range(2):
            ps[i_p, i_n] += nisa.nc_matmul(st, mv, mask=mask)
    else:
        ps[i_p, i_n] = nisa.nc_matmul(st, mv, mask=mask)
    nl.store(out, value=nl.copy(ps))
    return out


@pytest.mark.parametrize("accumulate", [False, True])
def test_masked_matmul_into_a_narrower_psum_tile(accumulate):
    r = run(matmul_columns, A, W, accumulate=accumulate)
    np.testing.assert_allclose(r.outputs, (2 if accumulate else 1) * (A.T @ W), rtol=1e-4, atol=1e-4)
    mm = instrs(r.trace, MM)[-1]
    assert mm.mm.N == 384 and mm.mm.accumulate == accumulate
    assert mm.writes[0].box == ((0, 128), (0, 384))


def test_masked_result_broadcast_into_a_larger_destination():
    """A (128, 1) result assigned to (128, 512): rows its mask excludes keep their value."""
    def kernel(x):
        out = nl.ndarray((128, 512), dtype=x.dtype, buffer=nl.shared_hbm)
        y = nl.zeros((128, 512), dtype=x.dtype, buffer=nl.sbuf)
        i_p = nl.arange(128)[:, None]
        v = nl.load(x[i_p, 0])
        y[i_p, nl.arange(512)[None, :]] = nl.exp(v, mask=(i_p < 64))
        nl.store(out, value=y)
        return out

    r = run(kernel, X)
    expect = np.zeros((128, 512), np.float32)
    expect[:64] = np.exp(X[:64, :1])
    np.testing.assert_allclose(r.outputs, expect, rtol=1e-6)
    act = instrs(r.trace, ACT)[0]
    assert act.writes[0].box == ((0, 64), (0, 512))


def unmasked_tail(x, mask_cols: int | None):
    """The second column tile of `column_tiles`, with a mask that keeps `mask_cols` columns
    (None: no mask on the assigned instruction)."""
    out = nl.ndarray((128, 768), dtype=x.dtype, buffer=nl.shared_hbm)
    y = nl.zeros((128, 768), dtype=x.dtype, buffer=nl.sbuf)
    i_p = nl.arange(128)[:, None]
    i_n = nl.arange(512)[None, :]
    t = nl.load(x[i_p, 512 + i_n], mask=(512 + i_n < 768))
    mask = None if mask_cols is None else (i_n < mask_cols)
    y[i_p, 512 + i_n] = nl.multiply(t, 2.0, mask=mask)
    nl.store(out, value=y)
    return out


@pytest.mark.parametrize("mask_cols, last", [(None, 1023), (300, 811)])
def test_an_uncovered_out_of_bound_write_still_raises(mask_cols, last):
    with pytest.raises(errors.OutOfBoundsError) as info:
        run(unmasked_tail, X, mask_cols=mask_cols)
    assert "dimension 1" in str(info.value) and f"[512, {last}]" in str(info.value)


def test_unmasked_matmul_accumulation_out_of_bound_raises():
    with pytest.raises(errors.OutOfBoundsError):
        run(matmul_columns, A, W, accumulate=True, masked=False)


def test_shape_only_trace_equals_the_data_trace():
    full = run(column_tiles, X, value_of=OPS["tensor_scalar"][1])
    shape = run(column_tiles, X, value_of=OPS["tensor_scalar"][1], shape_only=True)
    assert full.trace.instrs == shape.trace.instrs
