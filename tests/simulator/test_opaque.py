"""Kernels compute only through NKI: tensors are opaque to host code, uninitialised memory
is poisoned, and partly written outputs are reported."""

from __future__ import annotations

import numpy as np
import pytest

from fitness.simulator import errors

from .helpers import nl, rand, run

X = rand(128, 64)


def _kernel_doing(action):
    def kernel(x):
        t = nl.load(x)
        action(t)
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=t)
        return out
    return kernel


@pytest.mark.parametrize("action", [
    lambda t: np.asarray(t),
    lambda t: np.array(t),
    lambda t: np.exp(t),
    lambda t: np.ones((128, 64), np.float32) + t,
    lambda t: np.sum(t),
    lambda t: np.concatenate([t, t]),
])
def test_numpy_cannot_touch_kernel_tensors(action):
    with pytest.raises(errors.OpaqueTensorError) as info:
        run(_kernel_doing(action), X)
    assert info.value.code == "emu_opaque_tensor" and "opaque" in str(info.value)


def test_host_values_and_buffers_are_unreachable():
    with pytest.raises(errors.DynamicControlFlowError):
        run(_kernel_doing(lambda t: float(t)), X)
    with pytest.raises(errors.DynamicControlFlowError):
        run(_kernel_doing(lambda t: list(t)), X)
    with pytest.raises(AttributeError, match="opaque|only through NKI"):
        run(_kernel_doing(lambda t: t.data), X)
    with pytest.raises(errors.OperandTypeError):
        run(_kernel_doing(lambda t: t + np.ones((128, 64), np.float32)), X)


def test_numpy_scalars_combine_with_tiles():
    def kernel(x):
        t = nl.load(x)
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=np.float32(3) * t + np.float32(1))
        return out

    np.testing.assert_allclose(run(kernel, X).outputs, 3 * X + 1, rtol=1e-6)


def test_uninitialised_memory_is_nan():
    def kernel(x):
        t = nl.ndarray((128, 64), dtype=np.float32, buffer=nl.sbuf)
        t[0:64, :] = nl.load(x[0:64, :])
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=t)
        return out

    out = run(kernel, X).outputs
    np.testing.assert_array_equal(out[:64], X[:64])
    assert np.isnan(out[64:]).all()


def test_masked_out_load_leaves_sentinel():
    def kernel(x):
        i, j = nl.arange(128)[:, None], nl.arange(64)[None, :]
        t = nl.load(x[i, j], mask=(j < 10))
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=t)
        return out

    out = run(kernel, X).outputs
    np.testing.assert_array_equal(out[:, :10], X[:, :10])
    assert np.isnan(out[:, 10:]).all()


def test_integer_sentinel():
    def kernel(x):
        t = nl.ndarray((128, 4), dtype=np.int32, buffer=nl.sbuf)
        out = nl.ndarray((128, 4), dtype=np.int32, buffer=nl.shared_hbm)
        nl.store(out, value=t)
        return out

    out = run(kernel, X).outputs
    assert (out == np.iinfo(np.int32).min).all()


def test_a_result_assigned_and_reused_keeps_its_value():
    # `dst[...] = r` moves r's storage into dst; later writes to either must not leak
    def kernel(x):
        r = nl.exp(nl.load(x))
        dst = nl.ndarray((128, 64), dtype=np.float32, buffer=nl.sbuf)
        dst[...] = r
        dst[...] = nl.add(dst, 1.0)       # dst changes, r must not
        r2 = nl.multiply(r, 2.0)
        r[...] = 0.0                      # r changes, dst must not
        out = nl.ndarray((3, 128, 64), dtype=np.float32, buffer=nl.shared_hbm)
        nl.store(out[0], value=dst)
        nl.store(out[1], value=r2)
        nl.store(out[2], value=r)
        return out

    out = run(kernel, X).outputs
    np.testing.assert_allclose(out[0], np.exp(X) + 1, rtol=1e-6)
    np.testing.assert_allclose(out[1], 2 * np.exp(X), rtol=1e-6)
    np.testing.assert_array_equal(out[2], 0)
