"""`nisa.activation`'s `reduce_cmd` (ScalarE's accumulator registers) and
`nisa.tensor_scalar_reduce` (VectorE) against NumPy, and the refusals of their misuse (legacy
nki.isa documentation, Neuron 2.26)."""

from __future__ import annotations

import numpy as np
import pytest

from fitness.simulator import errors
from fitness.simulator.trace import ACT, TS, VECTOR

from .helpers import instrs, nisa, nl, rand, run

X = rand(128, 4, 256, seed=21)
V = rand(128, 1, seed=22)


def test_reduce_cmd_is_the_documented_enum():
    assert [int(c) for c in (nisa.reduce_cmd.idle, nisa.reduce_cmd.reset, nisa.reduce_cmd.reduce,
                             nisa.reduce_cmd.reset_reduce)] == [0, 1, 2, 3]


def _activations(cmds_and_readout):
    """A kernel: one exp activation per chunk of X with the given (reduce_cmd, read out?) and the
    registers read into column k of the second output after chunk k (when read out)."""
    def kernel(x):
        out = nl.ndarray((128, 4, 256), dtype=np.float32, buffer=nl.shared_hbm)
        sums = nl.ndarray((128, 4), dtype=np.float32, buffer=nl.shared_hbm)
        res = nl.ndarray((nl.par_dim(128), 4), dtype=np.float32, buffer=nl.sbuf)
        res[...] = -1.0
        t = nl.load(x)
        for k, (cmd, readout) in enumerate(cmds_and_readout):
            kw = {"reduce_res": res[:, k]} if readout else {}
            y = nisa.activation(op=nl.exp, data=t[:, k, :], reduce_op=nl.add, reduce_cmd=cmd, **kw)
            nl.store(out[:, k, :], value=y)
        nl.store(sums, value=res)
        return out, sums
    return kernel


def test_reset_reduce_sums_each_instruction_and_reduce_keeps_accumulating():
    c = nisa.reduce_cmd
    r = run(_activations([(c.reset_reduce, True), (c.reduce, True), (c.reduce, False), (c.idle, True)]), X)
    out, sums = r.outputs
    e = np.exp(X)
    np.testing.assert_allclose(out, e, rtol=2e-6)
    part = e.sum(axis=2)
    np.testing.assert_allclose(sums[:, 0], part[:, 0], rtol=1e-5)
    np.testing.assert_allclose(sums[:, 1], part[:, 0] + part[:, 1], rtol=1e-5)
    np.testing.assert_allclose(sums[:, 2], -1.0)                                  # not read out
    np.testing.assert_allclose(sums[:, 3], part[:, :3].sum(axis=1), rtol=1e-5)    # idle reads the registers
    acts = instrs(r.trace, ACT)
    # a read-out costs what activation_reduce's does; an accumulation alone is free
    assert [a.func for a in acts] == ["exp,reduce-add", "exp,reduce-add", "exp,accumulate-add", "exp,reduce-read"]
    assert [len(a.writes) for a in acts] == [2, 2, 1, 2]


def test_reset_zeroes_the_registers_and_activation_reduce_leaves_its_sum_in_them():
    def kernel(x):
        sums = nl.ndarray((128, 3), dtype=np.float32, buffer=nl.shared_hbm)
        res = nl.ndarray((nl.par_dim(128), 3), dtype=np.float32, buffer=nl.sbuf)
        t = nl.load(x)
        nisa.activation_reduce(op=nl.exp, data=t[:, 0, :], reduce_op=nl.add, reduce_res=res[:, 0])
        nisa.activation(op=nl.exp, data=t[:, 1, :], reduce_op=nl.add, reduce_res=res[:, 1],
                        reduce_cmd=nisa.reduce_cmd.reduce)
        nisa.activation(op=nl.exp, data=t[:, 2, :], reduce_res=res[:, 2], reduce_cmd=nisa.reduce_cmd.reset)
        nl.store(sums, value=res)
        return sums

    sums = run(kernel, X).outputs
    part = np.exp(X).sum(axis=2)
    np.testing.assert_allclose(sums[:, 0], part[:, 0], rtol=1e-5)
    np.testing.assert_allclose(sums[:, 1], part[:, 0] + part[:, 1], rtol=1e-5)
    np.testing.assert_array_equal(sums[:, 2], 0.0)


def test_bias_scale_and_dtype_apply_before_the_reduction():
    # the tutorial's use: exp(qk - max) in bf16, the row sums of each 512 chunk in fp32
    def kernel(x, v):
        out = nl.ndarray((128, 256), dtype=nl.bfloat16, buffer=nl.shared_hbm)
        sums = nl.ndarray((128, 1), dtype=np.float32, buffer=nl.shared_hbm)
        s = nl.ndarray((nl.par_dim(128), 1), dtype=np.float32, buffer=nl.sbuf)
        y = nisa.activation(op=nl.exp, data=nl.load(x), bias=nl.load(v), scale=0.5, reduce_op=nl.add,
                            reduce_res=s, reduce_cmd=nisa.reduce_cmd.reset_reduce, dtype=nl.bfloat16)
        nl.store(out, value=y)
        nl.store(sums, value=s)
        return out, sums

    x = X[:, 0, :]
    out, sums = run(kernel, x, V).outputs
    e = np.exp(x * 0.5 + V)
    np.testing.assert_allclose(out.astype(np.float32), e, rtol=1e-2)
    # (the emulator sums the rounded outputs: README "Dtypes", not modelled)
    np.testing.assert_allclose(sums, out.astype(np.float32).sum(axis=1, keepdims=True), rtol=1e-5)


@pytest.mark.parametrize("call, error, message", [
    ("nisa.activation(op=nl.exp, data=t, reduce_op=nl.add, reduce_res=r)", errors.AccumulatorStateError,
     "reduce_cmd=idle \\(the default\\) reads ScalarE's accumulator registers .* pass "
     "reduce_cmd=nisa.reduce_cmd.reset_reduce"),
    ("nisa.activation(op=nl.exp, data=t, reduce_op=nl.add, reduce_cmd=nisa.reduce_cmd.reduce)",
     errors.AccumulatorStateError, "no earlier activation of this kernel has reset"),
    ("nisa.activation(op=nl.exp, data=t, reduce_res=r, reduce_cmd=nisa.reduce_cmd.reset_reduce)",
     errors.OperandTypeError, "accumulates with reduce_op, which is not given"),
    ("nisa.activation(op=nl.exp, data=t, reduce_op=nl.add, reduce_cmd=7)", errors.OperandTypeError,
     "must be a member of nisa.reduce_cmd"),
    ("nisa.activation(op=nl.exp, data=t, reduce_op=nl.add, reduce_res=w, reduce_cmd=nisa.reduce_cmd.reset_reduce)",
     errors.BroadcastError, "'reduce_res' of 'nisa.activation' must be a scalar or a vector of shape \\[128, 1\\]"),
])
def test_misused_accumulators_are_refused(call, error, message):
    def kernel(x):
        out = nl.ndarray((128, 1), dtype=np.float32, buffer=nl.shared_hbm)
        t = nl.load(x)
        r = nl.ndarray((nl.par_dim(128), 1), dtype=np.float32, buffer=nl.sbuf)
        w = nl.ndarray((nl.par_dim(128), 2), dtype=np.float32, buffer=nl.sbuf)
        eval(call, {"nisa": nisa, "nl": nl}, {"t": t, "r": r, "w": w})
        nl.store(out, value=r)
        return out

    with pytest.raises(error, match=message):
        run(kernel, X[:, 0, :])


@pytest.mark.parametrize("reduce_op, operand, npred", [
    (nl.max, 1.0, np.max), (np.add, "vector", np.sum), (nl.min, -2.0, np.min), (nl.maximum, 0.5, np.max),
])
def test_tensor_scalar_reduce_matches_numpy(reduce_op, operand, npred):
    x = X[:, :2, :]

    def kernel(x, v):
        out = nl.ndarray((128, 2, 256), dtype=np.float32, buffer=nl.shared_hbm)
        red = nl.ndarray((128, 1), dtype=np.float32, buffer=nl.shared_hbm)
        r = nl.ndarray((nl.par_dim(128), 1), dtype=np.float32, buffer=nl.sbuf)
        o = nl.ndarray((nl.par_dim(128), 2, 256), dtype=np.float32, buffer=nl.sbuf)
        op0 = nl.load(v) if operand == "vector" else operand
        o[...] = nisa.tensor_scalar_reduce(data=nl.load(x), op0=np.multiply, operand0=op0, reduce_op=reduce_op,
                                           reduce_res=r)
        nl.store(out, value=o)
        nl.store(red, value=r)
        return out, red

    out, red = run(kernel, x, V).outputs
    want = x * (V[:, :, None] if operand == "vector" else np.float32(operand))
    np.testing.assert_allclose(out, want, rtol=1e-6)
    np.testing.assert_allclose(red, npred(want, axis=(1, 2)).reshape(128, 1), rtol=1e-5)


def test_tensor_scalar_reduce_reads_psum_on_vector_engine():
    # the tutorial's use: evict a PSUM tile of q.T @ k and keep its row maxima
    q, k = rand(128, 128, seed=23), rand(128, 512, seed=24)

    def kernel(q, k):
        out = nl.ndarray((128, 512), dtype=np.float32, buffer=nl.shared_hbm)
        mx = nl.ndarray((128, 1), dtype=np.float32, buffer=nl.shared_hbm)
        m = nl.ndarray((nl.par_dim(128), 1), dtype=np.float32, buffer=nl.sbuf)
        s = nl.ndarray((nl.par_dim(128), 512), dtype=np.float32, buffer=nl.sbuf)
        p = nisa.nc_matmul(nl.load(q), nl.load(k))
        s[...] = nisa.tensor_scalar_reduce(data=p, op0=nl.multiply, operand0=1.0, reduce_op=nl.max, reduce_res=m)
        nl.store(out, value=s)
        nl.store(mx, value=m)
        return out, mx

    r = run(kernel, q, k)
    out, mx = r.outputs
    np.testing.assert_allclose(out, q.T @ k, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(mx, (q.T @ k).max(axis=1, keepdims=True), rtol=1e-4, atol=1e-4)
    (ins,) = instrs(r.trace, TS)
    assert ins.op == "nisa.tensor_scalar_reduce" and ins.engines == (VECTOR,)
    assert ins.func == "multiply,reduce-maximum" and ins.psum_inputs == 1 and len(ins.writes) == 2


@pytest.mark.parametrize("kwargs, error, message", [
    ({"reverse0": True}, errors.UnsupportedOpError, "'reverse0' of 'nisa.tensor_scalar_reduce' is not supported yet"),
    ({"op0": nl.bitwise_and}, errors.UnsupportedOpError, "must be an arithmetic operator"),
    ({"op0": nl.greater}, errors.UnsupportedOpError, "must be an arithmetic operator"),
    ({"reduce_op": nl.subtract}, errors.UnsupportedApiError, "subtracting reduction are not documented"),
    ({"reduce_op": nl.bitwise_or}, errors.UnsupportedOpError, "'reduce_op' of 'nisa.tensor_scalar_reduce' must be"),
    ({"reduce_res": "wide"}, errors.BroadcastError, "'reduce_res' of 'nisa.tensor_scalar_reduce' must be"),
    ({"operand0": "row"}, errors.ShapeMismatchError, "'operand0' of 'nisa.tensor_scalar_reduce'"),
])
def test_misused_tensor_scalar_reduce_is_refused(kwargs, error, message):
    def kernel(x):
        out = nl.ndarray((128, 1), dtype=np.float32, buffer=nl.shared_hbm)
        r = nl.ndarray((nl.par_dim(128), 1), dtype=np.float32, buffer=nl.sbuf)
        wide = nl.ndarray((nl.par_dim(128), 2), dtype=np.float32, buffer=nl.sbuf)
        t = nl.load(x)
        args = {"data": t, "op0": nl.multiply, "operand0": 2.0, "reduce_op": nl.add, "reduce_res": r}
        args.update(kwargs)
        if isinstance(args["reduce_res"], str):
            args["reduce_res"] = wide
        if isinstance(args["operand0"], str):
            args["operand0"] = t[:, 0:2]
        nisa.tensor_scalar_reduce(**args)
        nl.store(out, value=r)
        return out

    with pytest.raises(error, match=message):
        run(kernel, X[:, 0, :])
