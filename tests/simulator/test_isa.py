"""`nisa` instructions against NumPy golden values (the examples of the NKI ISA docs)."""

from __future__ import annotations

import numpy as np
import pytest

from fitness.simulator.trace import ACT, COPY, GPSIMD, MEMSET, MM, MM_TRANSPOSE, RECIP, RED, TS, TT, TTS

from .helpers import instrs, nisa, nki, nl, rand, run
from .test_language import apply, close

A = rand(128, 64, seed=11)
B = rand(128, 64, seed=12)
VEC = rand(128, 1, seed=13)


def test_nc_matmul_is_stationary_transposed_times_moving():
    s, m = rand(128, 96, seed=1), rand(128, 512, seed=2)
    out, tr = apply(lambda a, b: nisa.nc_matmul(a, b), s, m)
    close(out, s.T @ m, rtol=1e-4, atol=1e-4)
    mm = instrs(tr, MM)[0]
    assert (mm.mm.K, mm.mm.M, mm.mm.N, mm.mm.accumulate) == (128, 96, 512, False)
    assert mm.engines == ("T",) and tr.tensors[mm.writes[0].tensor].memory == "psum"


def test_nc_matmul_accumulation_and_overwrite():
    a, b = rand(4, 128, 64, seed=3), rand(4, 128, 256, seed=4)

    def kernel(a, b):
        acc = nl.ndarray((nl.par_dim(64), 256), dtype=np.float32, buffer=nl.psum)   # uninitialised PSUM
        last = nl.ndarray((nl.par_dim(64), 256), dtype=np.float32, buffer=nl.psum)
        for k in nl.affine_range(4):
            acc[...] += nisa.nc_matmul(nl.load(a[k]), nl.load(b[k]))
        for k in nl.sequential_range(4):
            last[...] = nisa.nc_matmul(nl.load(a[k]), nl.load(b[k]))
        out = nl.ndarray((2, 64, 256), dtype=np.float32, buffer=nl.shared_hbm)
        nl.store(out[0], value=nl.copy(acc))
        nl.store(out[1], value=nl.copy(last))
        return out

    r = run(kernel, a, b)
    close(r.outputs[0], np.einsum("kpm,kpn->mn", a, b), rtol=1e-4, atol=1e-4)
    close(r.outputs[1], a[3].T @ b[3], rtol=1e-4, atol=1e-4)
    mms = instrs(r.trace, MM)
    assert [i.mm.accumulate for i in mms] == [True] * 4 + [False] * 4


def test_nc_matmul_transpose_with_identity_and_column_mask():
    x = rand(128, 64, seed=5)

    def kernel(x):
        ident = nl.load(nl.shared_constant(np.identity(128, dtype=np.float32)))
        t = nisa.nc_matmul(nl.load(x), ident, is_moving_onezero=True, is_transpose=True)
        out = nl.ndarray((64, 128), dtype=np.float32, buffer=nl.shared_hbm)
        o = nl.ndarray((64, 128), dtype=np.float32, buffer=nl.sbuf)
        o[...] = 0.0
        m = nisa.nc_matmul(nl.load(x), ident, mask=nl.arange(128)[None, :] < 100)
        o[:, 0:100] = nl.copy(m[:, 0:100])
        nl.store(out, value=nl.add(nl.copy(t), o))
        return out

    r = run(kernel, x)
    want = x.T + np.where(np.arange(128)[None, :] < 100, x.T, 0)
    close(r.outputs, want)
    t = instrs(r.trace, MM_TRANSPOSE)[0]
    assert t.mm.is_transpose and t.mm.moving_onezero
    masked = instrs(r.trace, MM)[0]
    assert masked.mm.N == 100


def test_nc_transpose():
    small = rand(32, 16)
    out, tr = apply(lambda x: nisa.nc_transpose(x), small)
    close(out, small.T)
    assert instrs(tr, COPY)[0].func == "transpose" and not instrs(tr, MM_TRANSPOSE)
    big = rand(128, 64)
    out, tr = apply(lambda x: nisa.nc_transpose(x), big)
    close(out, big.T)
    assert instrs(tr, MM_TRANSPOSE)


def test_activation_with_scale_and_bias():
    out, tr = apply(lambda x, v: nisa.activation(op=nl.exp, data=x, bias=v, scale=-1.0), A, VEC)
    close(out, np.exp(-A + VEC), rtol=2e-6)
    assert instrs(tr, ACT)[0].func == "exp"
    out, _ = apply(lambda x, v: nisa.activation(op=np.tanh, data=x, scale=v), A, VEC)   # (P, 1) scale
    close(out, np.tanh(A * VEC), rtol=2e-6)
    out, _ = apply(lambda x: nisa.activation(op=nl.sqrt, data=x, scale=1000.0), np.abs(A))
    close(out, np.sqrt(np.abs(A) * 1000), rtol=2e-6)


def test_activation_reduce():
    def kernel(x):
        red = nl.ndarray((128, 1), dtype=np.float32, buffer=nl.sbuf)
        y = nisa.activation_reduce(op=nl.exp, data=nl.load(x), reduce_op=nl.add, reduce_res=red)
        out = nl.ndarray((128, 65), dtype=np.float32, buffer=nl.shared_hbm)
        nl.store(out[:, 0:64], value=y)
        nl.store(out[:, 64:65], value=red)
        return out

    r = run(kernel, A)
    close(r.outputs[:, :64], np.exp(A), rtol=2e-6)
    close(r.outputs[:, 64:], np.exp(A).sum(axis=1, keepdims=True), rtol=1e-5)
    act = instrs(r.trace, ACT)[0]
    assert len(act.writes) == 2


def test_tensor_scalar_forms():
    out, tr = apply(lambda x: nisa.tensor_scalar(x, np.subtract, 1.0, reverse0=True), A)
    close(out, 1.0 - A)
    assert instrs(tr, TS)[0].engines == ("V", "S")
    out, tr = apply(lambda x: nisa.tensor_scalar(x, op0=nl.maximum, operand0=np.float32(-3.4028235e38),
                                                 op1=nl.multiply, operand1=np.float32(-1.0)), A)
    close(out, -np.maximum(A, -3.4028235e38))
    assert instrs(tr, TS)[0].func == "maximum,multiply"
    out, tr = apply(lambda x, v: nisa.tensor_scalar(data=x, op0=nl.multiply, operand0=v,
                                                    engine=nisa.vector_engine), A, VEC)
    close(out, A * VEC)
    assert instrs(tr, TS)[0].engines == ("V",)


def test_tensor_tensor_and_scalar_tensor_tensor():
    out, tr = apply(lambda x, y: nisa.tensor_tensor(x, y, op=nl.multiply), A, B)
    close(out, A * B)
    assert instrs(tr, TT)[0].engines == ("V",)
    out, _ = apply(lambda x, y: nisa.tensor_tensor(x, y, nl.subtract), A, B)
    close(out, A - B)
    out, _ = apply(lambda x, y: nisa.scalar_tensor_tensor(data=x, op0=nl.multiply, operand0=2.0, op1=nl.add,
                                                          operand1=y), A, B)
    close(out, A * 2 + B)


def test_tensor_reduce():
    out, tr = apply(lambda x: nisa.tensor_reduce(nl.max, data=x, axis=[1], negate=True), A)
    close(out, -A.max(axis=1, keepdims=True))
    assert instrs(tr, RED)[0].func == "maximum,negate"
    out, _ = apply(lambda x: nisa.tensor_reduce(np.add, data=x, axis=1, keepdims=True), A)
    close(out, A.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-5)


def _scan_ref(d0, d1, init, op0, op1):
    res = np.empty_like(d0)
    prev = init
    for i in range(d0.shape[1]):
        prev = op1(op0(d0[:, i], prev), d1[:, i])
        res[:, i] = prev
    return res


def test_tensor_tensor_scan():
    a, b = rand(128, 300, seed=21) * 0.5, rand(128, 300, seed=22)
    out, tr = apply(lambda x, y: nisa.tensor_tensor_scan(x, y, initial=0, op0=np.multiply, op1=np.add), a, b)
    close(out, _scan_ref(a, b, 0.0, np.multiply, np.add), rtol=1e-5, atol=1e-5)
    scan = instrs(tr, TTS)[0]
    assert (scan.func, scan.free) == ("multiply,add", 300)
    init = rand(128, 1, seed=23)
    out, _ = apply(lambda x, y, i: nisa.tensor_tensor_scan(x, y, initial=i, op0=nl.maximum, op1=nl.subtract),
                   a, b, init)
    close(out, _scan_ref(a, b, init[:, 0], np.maximum, np.subtract), rtol=1e-5, atol=1e-5)


def test_reciprocal_memset_iota_copy():
    out, tr = apply(lambda x: nisa.reciprocal(x), np.abs(A) + 1)
    close(out, 1 / (np.abs(A) + 1))
    assert instrs(tr, RECIP)[0].engines == ("V",)

    def kernel(x):
        m = nisa.memset(shape=(128, 4), value=np.dtype(np.uint16).type(3), dtype=np.float32)
        io = nisa.iota(nl.arange(4)[None, :] + 10 * nl.arange(128)[:, None], dtype=np.float32)
        c = nisa.tensor_copy(nl.load(x), engine=nisa.scalar_engine)
        out = nl.ndarray((128, 12), dtype=np.float32, buffer=nl.shared_hbm)
        nl.store(out[:, 0:4], value=m)
        nl.store(out[:, 4:8], value=io)
        nl.store(out[:, 8:12], value=c)
        return out

    r = run(kernel, A[:, :4])
    close(r.outputs[:, 0:4], 3.0)
    close(r.outputs[:, 4:8], np.arange(4)[None, :] + 10 * np.arange(128)[:, None])
    close(r.outputs[:, 8:12], A[:, :4])
    assert instrs(r.trace, MEMSET)[0].engines == ("V", "G")
    assert instrs(r.trace, GPSIMD)[0].func == "iota"
    assert instrs(r.trace, COPY)[0].engines == ("S",)


def test_dma_copy_and_jit_entry_points():
    @nki.jit
    def kernel(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=x)
        return out

    close(kernel(A), A)
    close(nki.simulate_kernel(kernel, A), A)
    close(nki.baremetal(kernel, save_neff_name="x.neff")(A), A)


@pytest.mark.parametrize("engine, letters", [(None, ("V", "S")), ("gpsimd_engine", ("G",))])
def test_explicit_engines(engine, letters):
    eng = getattr(nisa, engine) if engine else nisa.unknown_engine
    _, tr = apply(lambda x: nisa.tensor_scalar(x, nl.add, 1.0, engine=eng), A)
    assert instrs(tr, TS)[0].engines == letters
