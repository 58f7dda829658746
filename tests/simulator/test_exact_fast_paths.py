"""Fast paths of the full-data emulation against the exact computations they replace: each
must give the same bits (NaN positions and payloads, signed zeros, infinities, denormals)."""

from __future__ import annotations

import numpy as np
import pytest

from fitness.simulator.core import engines as E
from fitness.simulator.core import tensor as T

from .helpers import nisa, nl, rand
from .test_language import apply

F32 = np.float32
SPECIAL = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, -1e-45, 1e-40, 3.4e38, -3.4e38, 1.0, -1.0],
                   dtype=F32)


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=F32).view(np.uint32)


def _eye(n: int) -> np.ndarray:
    return np.identity(n, dtype=F32)


def _identity_cases():
    eye = _eye(128)
    neg_zero = eye.copy()
    neg_zero[3, 5] = -0.0                     # equal values, different bytes
    nan = eye.copy()
    nan[7, 7] = np.nan
    off = eye.copy()
    off[0, 1] = 1e-45                          # a denormal off the diagonal
    diag = eye.copy()
    diag[9, 9] = np.nextafter(F32(1), F32(2))
    big = _eye(256)
    return [
        ("identity", eye), ("identity 64", _eye(64)), ("-0.0 off the diagonal", neg_zero), ("NaN", nan),
        ("denormal", off), ("diagonal not 1", diag), ("random", rand(128, 128, seed=5)),
        ("strided identity view", big[:128, :128]), ("transposed identity", eye.T),
        ("non-square", np.zeros((128, 64), F32)), ("zeros", np.zeros((128, 128), F32)),
    ]


@pytest.mark.parametrize("label, a", _identity_cases(), ids=[c[0] for c in _identity_cases()])
def test_identity_check_is_array_equal(label, a):
    """The byte comparison of the TensorE transpose shortcut answers as np.array_equal."""
    n = a.shape[0]
    expected = a.shape == (n, n) and bool(np.array_equal(a, _eye(n)))
    assert E._is_identity(a) is expected


def test_byte_strides():
    assert T.byte_strides((512, 1), 4) == (2048, 4)
    assert T.byte_strides((512, 1), 2) == (1024, 2)
    assert T.byte_strides((0, -3, 7), 4) == (0, -12, 28)
    assert T.byte_strides((512, 1), 4) is T.byte_strides((512, 1), 4)


def _scan_exact(d0, d1, init):
    """The sequential float32 recurrence h = d0[:, i] * h + d1[:, i], one NumPy op at a time."""
    out = np.empty_like(d0)
    h = np.array(init, dtype=F32).copy()
    with np.errstate(all="ignore"):
        for i in range(d0.shape[1]):
            h = np.multiply(d0[:, i], h)
            h = np.add(h, d1[:, i])
            out[:, i] = h
    return out


def _special_tile(seed: int, shape=(128, 300)) -> np.ndarray:
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(shape).astype(F32)
    pick = rng.random(shape) < 0.05
    a[pick] = rng.choice(SPECIAL, size=int(pick.sum()))
    return a


@pytest.mark.parametrize("seed", [0, 1])
def test_scan_multiply_add_is_the_exact_recurrence(seed):
    a = _special_tile(10 + seed) * F32(0.9)
    b = _special_tile(20 + seed)
    out, _ = apply(lambda x, y: nisa.tensor_tensor_scan(x, y, initial=0, op0=np.multiply, op1=np.add), a, b)
    assert np.array_equal(_bits(out), _bits(_scan_exact(a, b, np.zeros(128, F32))))
    init = _special_tile(30 + seed, (128, 1))
    out, _ = apply(lambda x, y, i: nisa.tensor_tensor_scan(x, y, initial=i, op0=nl.multiply, op1=nl.add), a, b, init)
    assert np.array_equal(_bits(out), _bits(_scan_exact(a, b, init[:, 0])))


def _all_bf16() -> np.ndarray:
    import ml_dtypes

    return np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(ml_dtypes.bfloat16).reshape(256, 256)


def test_bf16_widening_is_the_cast_for_every_value():
    """All 65536 bfloat16 bit patterns (NaNs with their payloads, infinities, denormals, -0.0),
    contiguous and through strided views: the bit shift gives the bits of ml_dtypes' cast."""
    from fitness.simulator.core import instr as I

    a = _all_bf16()
    for view in (a, a.T, a[::3, 1::2], a[5]):
        got = I.widen_bf16(view)
        assert got.dtype == F32 and got.shape == view.shape and got.flags.owndata and got.flags.c_contiguous
        assert np.array_equal(_bits(got), _bits(view.astype(F32)))


def test_bf16_operands_widen_exactly_in_instructions():
    """A bfloat16 tile read by an instruction (all bit patterns, NaNs included) is what the cast gives."""
    import ml_dtypes

    a = _all_bf16()[:128]
    out, _ = apply(lambda x: nl.copy(x, dtype=np.float32), a)
    assert out.dtype == F32 and np.array_equal(_bits(out), _bits(a.astype(F32)))
    out, _ = apply(lambda x: nisa.tensor_scalar(x, op0=np.multiply, operand0=1.0, dtype=ml_dtypes.bfloat16), a)
    with np.errstate(invalid="ignore"):
        expected = (a.astype(F32) * F32(1.0)).astype(ml_dtypes.bfloat16).view(np.uint16)
    assert np.array_equal(np.asarray(out).view(np.uint16), expected)
