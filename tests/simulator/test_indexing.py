"""Index expressions, masks and NKI's subscript rules, checked against NumPy."""

from __future__ import annotations

import numpy as np
import pytest

from fitness.simulator import errors
from fitness.simulator.core.indexing import arange, ds, mask_array, mask_box, mgrid

from .helpers import nl, rand, run


def test_arange_expressions_match_numpy():
    e = 128 * arange(8)[None, :, None] + arange(128)[None, None, :] + 5
    want = 128 * np.arange(8)[None, :, None] + np.arange(128)[None, None, :] + 5
    assert e.shape == (1, 8, 128)
    np.testing.assert_array_equal(np.asarray(e), want)
    f = 3 - 2 * arange(4, 10)[:, None]
    np.testing.assert_array_equal(np.asarray(f), 3 - 2 * np.arange(4, 10)[:, None])
    assert (f.min, f.max) == (3 - 18, 3 - 8)
    sub = arange(16)[None, 2:10:2]
    np.testing.assert_array_equal(np.asarray(sub), np.arange(16)[None, 2:10:2])


def test_non_affine_expressions_fall_back_to_arrays():
    e = arange(8)[:, None] // 2
    np.testing.assert_array_equal(np.asarray(e), np.arange(8)[:, None] // 2)


def test_mgrid_and_ds():
    g = mgrid[0:4, 0:6]
    np.testing.assert_array_equal(np.asarray(g.p), np.mgrid[0:4, 0:6][0])
    np.testing.assert_array_equal(np.asarray(g.x), np.mgrid[0:4, 0:6][1])
    p, x = mgrid[0:4, 2:8:2]
    np.testing.assert_array_equal(np.asarray(x), np.mgrid[0:4, 2:8:2][1])
    assert ds(10, 5) == slice(10, 15)


def test_masks_are_boxes_when_each_condition_has_one_axis():
    i, j = arange(128)[:, None], arange(512)[None, :]
    m = (3 * 128 + i < 400) & (j + 100 >= 150) & (i >= 2)
    box = mask_box(m, (128, 512))
    assert box == ((2, 400 - 384), (50, 512))
    np.testing.assert_array_equal(mask_array(m, (128, 512)),
                                  (384 + np.arange(128)[:, None] < 400) & (np.arange(512)[None, :] >= 50)
                                  & (np.arange(128)[:, None] >= 2))
    diag = i + j < 100     # depends on two axes: not a box
    assert mask_box(diag, (128, 512)) is None
    assert mask_box(i > 1000, (128, 512))[0] == (0, 0)    # always false: empty
    assert mask_box((i * 1) == 5, (128, 512)) == ((5, 6), (0, 512))


def test_mask_misuse():
    i = arange(8)[:, None]
    with pytest.raises(errors.MaskNotEqualError):
        _ = i != 3
    with pytest.raises(errors.MaskExpressionError):
        _ = (i < 3) | (i > 5)
    with pytest.raises(errors.ArangeControlFlowError):
        _ = (i < 3) and (i > 1)
    with pytest.raises(errors.AssignToIndexError) as e:
        i[0, 0] = 4
    assert e.value.code == "err_cannot_assign_to_index"


def _copy_kernel(index_fn, shape, out_shape):
    """A kernel storing `t[index]` of an SBUF copy of the input into an output."""
    def kernel(x):
        t = nl.ndarray(shape, dtype=np.float32, buffer=nl.sbuf)
        t[...] = nl.load(x)
        v = index_fn(t)
        out = nl.ndarray(out_shape, dtype=np.float32, buffer=nl.shared_hbm)
        nl.store(out, value=nl.copy(v))
        return out
    return kernel


@pytest.mark.parametrize("index_fn, numpy_index, out_shape", [
    (lambda t: t[nl.arange(64)[:, None] + 32, nl.arange(100)[None, :] * 2],
     (np.arange(64)[:, None] + 32, np.arange(100)[None, :] * 2), (64, 100)),
    (lambda t: t[0:64, 10:74], (slice(0, 64), slice(10, 74)), (64, 64)),
    (lambda t: t[:, 7], (slice(None), slice(7, 8)), (128, 1)),          # result stays 2-D
    (lambda t: t[5, 0:16], (slice(5, 6), slice(0, 16)), (1, 16)),       # int on partitions keeps a dim
    (lambda t: t[..., 100:], (slice(None), slice(100, None)), (128, 100)),
])
def test_subscripts_of_sbuf_tiles_match_numpy(index_fn, numpy_index, out_shape):
    x = rand(128, 200)
    out = run(_copy_kernel(index_fn, (128, 200), out_shape), x).outputs
    np.testing.assert_array_equal(out, x[numpy_index].reshape(out_shape))


def test_block_dims_and_3d_free_pattern():
    # the gqa/matmul load pattern: a (128, 8, 128) tile over a flat 1024-element free dim
    x = rand(2, 128, 8, 128)

    def kernel(x):
        t = nl.ndarray((2, nl.par_dim(128), 1024), dtype=np.float32, buffer=nl.sbuf)
        out = nl.ndarray((2, 128, 1024), dtype=np.float32, buffer=nl.shared_hbm)
        for b in nl.affine_range(2):
            t[b, nl.arange(128)[:, None, None], 128 * nl.arange(8)[None, :, None] + nl.arange(128)[None, None, :]] = \
                nl.load(x[b, nl.arange(128)[:, None, None], nl.arange(8)[None, :, None], nl.arange(128)[None, None, :]])
            nl.store(out[b], value=t[b])
        return out

    np.testing.assert_array_equal(run(kernel, x).outputs, x.reshape(2, 128, 1024))


def test_three_index_expressions_with_offsets():
    # every dimension indexed by an affine expression (a coalesced load's form); the offsets
    # of all three must be applied
    x = rand(128, 6, 80)

    def kernel(x):
        out = nl.ndarray((128, 4, 64), dtype=np.float32, buffer=nl.shared_hbm)
        i_p, i_a, i_b = nl.arange(128)[:, None, None], nl.arange(4)[None, :, None], nl.arange(64)[None, None, :]
        t = nl.load(x[i_p, i_a + 2, i_b + 16])
        nl.store(out[i_p, i_a, i_b], value=t)
        return out

    np.testing.assert_array_equal(run(kernel, x).outputs, x[:, 2:6, 16:80])


def test_hbm_views_follow_numpy_and_load_1d_as_column():
    a = rand(256, 16)

    def kernel(a):
        col = nl.load(a[0:128, 3])            # 1-D HBM view -> (128, 1) tile
        row = nl.load(a.reshape((16, 256))[2:3, 0:256])
        out1 = nl.ndarray((128, 1), dtype=np.float32, buffer=nl.shared_hbm)
        out2 = nl.ndarray((1, 256), dtype=np.float32, buffer=nl.shared_hbm)
        nl.store(out1, value=col)
        nl.store(out2, value=row)
        return out1, out2

    o1, o2 = run(kernel, a).outputs
    np.testing.assert_array_equal(o1, a[0:128, 3][:, None])
    np.testing.assert_array_equal(o2, a.reshape(16, 256)[2:3])


def test_mgrid_subscript():
    x = rand(64, 32)

    def kernel(x):
        g = nl.mgrid[0:64, 0:32]
        out = nl.ndarray((64, 32), dtype=np.float32, buffer=nl.shared_hbm)
        nl.store(out[g.p, g.x], value=nl.load(x[g.p, g.x]))
        return out

    np.testing.assert_array_equal(run(kernel, x).outputs, x)


def test_shape_attribute_rules():
    def kernel(x):
        t = nl.ndarray((3, nl.par_dim(128), 4, 8), dtype=np.float32, buffer=nl.sbuf)
        assert x.shape == (256, 16) and x.dtype == np.float32
        assert t.shape == (3, 128, 4, 8)
        assert t[1].shape == (128, 4, 8)
        assert t[1, :, 2].shape == (128, 8)
        assert t[1, :, 2, 3].shape == (128, 1)
        assert x[0:128, 3].shape == (128,)
        assert x[7].shape == (16,)
        out = nl.ndarray((1, 1), dtype=np.float32, buffer=nl.shared_hbm)
        nl.store(out, value=nl.load(x[0:1, 0:1]))
        return out

    run(kernel, rand(256, 16))


def test_store_into_a_view_with_extra_unit_axes():
    x = rand(128, 32)

    def kernel(x):
        out = nl.ndarray((2, 128, 32), dtype=np.float32, buffer=nl.shared_hbm)
        t = nl.load(x)
        nl.store(out[0:1], value=t)        # (1, 128, 32) destination for a (128, 32) tile
        nl.store(out[1], value=t)
        return out

    r = run(kernel, x)
    np.testing.assert_array_equal(r.outputs, np.stack([x, x]))
    assert all(i.partitions == 128 and i.dma.partitions == 128 for i in r.trace.instrs if i.op == "nl.store")


def test_repeated_subscripts_still_check_their_block_indices():
    """Subscripts repeat with new loop values; each new block index is checked (or wrapped,
    when negative) even after the same subscript pattern was seen in bounds."""
    x = rand(128, 512)
    i, j = nl.arange(128)[:, None], nl.arange(512)[None, :]

    def kernel(x, last):
        t = nl.ndarray((4, nl.par_dim(128), 512), dtype=np.float32, buffer=nl.sbuf)
        out = nl.ndarray((128, 512), dtype=np.float32, buffer=nl.shared_hbm)
        for b in nl.affine_range(4):
            t[b, i, j] = nl.load(x[i, j])
        nl.store(out, value=nl.multiply(t[last, i, j], 2.0))
        return out

    np.testing.assert_array_equal(run(kernel, x, -1).outputs, 2 * x)
    with pytest.raises(errors.OutOfBoundsError, match="dimension 0"):
        run(kernel, x, 4)
    r = run(kernel, x, 3)
    loads = [ins for ins in r.trace.instrs if ins.op == "nl.load"]
    assert [ld.writes[0].box[0] for ld in loads] == [(0, 1), (1, 2), (2, 3), (3, 4)]
    assert r.trace.instrs[-2].reads[0] == loads[3].writes[0]
