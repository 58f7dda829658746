"""The current-dialect front-end (`import nki`): each construct on small kernels of our own
against NumPy, the trace records it leaves, and the SDK's example kernels (loaded by path
from the shared reference folder beside the checkout)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fitness.simulator import run_kernel
from fitness.simulator.trace import COPY, DMA_LOAD, DMA_STORE, MEMSET, MM, TT

HEAD = "import nki\nimport nki.language as nl\nimport nki.isa as nisa\nimport numpy as np\n\n"
EXAMPLES = Path(__file__).resolve().parents[2].parent / "shared" / "nki-examples"
RNG = np.random.default_rng(7)


def run(body: str, *args, **kw):
    return run_kernel(HEAD + body, list(args), **kw)


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def test_dma_copy_and_tensor_tensor_over_tiles_with_a_clipped_remainder():
    a, b = rand(300, 64), rand(300, 64)
    r = run("""
@nki.jit
def kernel(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    n = a.shape[0]
    for i in nl.affine_range((n + 127) // 128):
        lo, hi = i * 128, min((i + 1) * 128, n)
        x = nl.ndarray((hi - lo, 64), dtype=nl.float32, buffer=nl.sbuf)
        y = nl.ndarray((hi - lo, 64), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=x, src=a[lo:hi, :])
        nisa.dma_copy(dst=y, src=b[lo:hi, :])
        z = nl.ndarray((hi - lo, 64), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=z, data1=x, data2=y, op=nl.subtract)
        nisa.dma_copy(dst=out[lo:hi, :], src=z)
    return out
""", a, b)
    np.testing.assert_allclose(r.outputs, a - b, rtol=1e-6)
    kinds = [i.kind for i in r.trace.instrs]
    assert kinds.count(DMA_LOAD) == 6 and kinds.count(DMA_STORE) == 3 and kinds.count(TT) == 3
    assert r.trace.instrs[-1].partitions == 300 - 256


def test_activation_tensor_scalar_and_cast_to_the_destination_dtype():
    x, s = rand(128, 32), rand(128, 1)
    r = run("""
@nki.jit
def kernel(x, s):
    out = nl.ndarray(x.shape, dtype=nl.bfloat16, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
    sc = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    nisa.dma_copy(dst=sc, src=s)
    e = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.activation(dst=e, op=nl.exp, data=t, scale=sc, bias=None)
    o = nl.ndarray(x.shape, dtype=nl.bfloat16, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=o, data=e, op0=nl.multiply, operand0=2.0, op1=nl.add, operand1=sc)
    nisa.dma_copy(dst=out, src=o)
    return out
""", x, s)
    assert r.outputs.dtype.name == "bfloat16"
    np.testing.assert_allclose(r.outputs.astype(np.float32), np.exp(x * s) * 2 + s, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("accumulate,expect", [("None", "sum"), ("(k > 0)", "sum"), ("False", "last")])
def test_nc_matmul_accumulation(accumulate, expect):
    a, b = rand(256, 64), rand(256, 128)
    r = run(f"""
@nki.jit
def kernel(a, b):
    out = nl.ndarray((64, 128), dtype=nl.float32, buffer=nl.shared_hbm)
    ps = nl.ndarray((64, 128), dtype=nl.float32, buffer=nl.psum)
    for k in range(2):
        x = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
        y = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=x, src=a[k * 128:(k + 1) * 128, :])
        nisa.dma_copy(dst=y, src=b[k * 128:(k + 1) * 128, :])
        nisa.nc_matmul(dst=ps, stationary=x, moving=y, accumulate={accumulate})
    sb = nl.ndarray((64, 128), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=sb, src=ps)
    nisa.dma_copy(dst=out, src=sb)
    return out
""", a, b)
    want = a.T @ b if expect == "sum" else a[128:].T @ b[128:]
    np.testing.assert_allclose(r.outputs, want, rtol=1e-4, atol=1e-3)
    mms = [i for i in r.trace.instrs if i.kind == MM]
    assert [m.mm.accumulate for m in mms] == [False, expect == "sum"]


def test_nc_matmul_none_tracks_each_psum_location():
    # two matmuls write the two halves of one PSUM tile: both overwrite (first writes there)
    a, b = rand(128, 64), rand(128, 256)
    r = run("""
@nki.jit
def kernel(a, b):
    out = nl.ndarray((64, 256), dtype=nl.float32, buffer=nl.shared_hbm)
    x = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    y = nl.ndarray((128, 256), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=x, src=a)
    nisa.dma_copy(dst=y, src=b)
    ps = nl.ndarray((64, 256), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=ps[:, 0:128], stationary=x, moving=y[:, 0:128])
    nisa.nc_matmul(dst=ps[:, 128:256], stationary=x, moving=y[:, 128:256])
    nisa.nc_matmul(dst=ps[:, 64:192], stationary=x, moving=y[:, 0:128])
    sb = nl.ndarray((64, 256), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=sb, src=ps)
    nisa.dma_copy(dst=out, src=sb)
    return out
""", a, b)
    want = a.T @ b
    want[:, 64:192] += a.T @ b[:, 0:128]
    np.testing.assert_allclose(r.outputs, want, rtol=1e-4, atol=1e-3)
    assert [i.mm.accumulate for i in r.trace.instrs if i.kind == MM] == [False, False, True]


def test_reduce_scan_transpose_and_memset():
    x, y = rand(32, 16), rand(32, 16)
    r = run("""
@nki.jit
def kernel(x, y):
    out = nl.ndarray((32, 16), dtype=nl.float32, buffer=nl.shared_hbm)
    out_t = nl.ndarray((16, 32), dtype=nl.float32, buffer=nl.shared_hbm)
    out_r = nl.ndarray((32, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    a = nl.ndarray((32, 16), dtype=nl.float32, buffer=nl.sbuf)
    b = nl.ndarray((32, 16), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=a, src=x)
    nisa.dma_copy(dst=b, src=y)
    init = nl.ndarray((32, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=init, value=1.0)
    s = nl.ndarray((32, 16), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_tensor_scan(dst=s, data0=a, data1=b, initial=init, op0=nl.multiply, op1=nl.add)
    nisa.dma_copy(dst=out, src=s)
    t = nl.ndarray((16, 32), dtype=nl.float32, buffer=nl.sbuf)
    nisa.nc_transpose(dst=t, data=a, engine=nisa.engine.vector)
    nisa.dma_copy(dst=out_t, src=t)
    m = nl.ndarray((32, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_reduce(dst=m, op=nl.maximum, data=a, axis=1, keepdims=True)
    nisa.dma_copy(dst=out_r, src=m)
    return out, out_t, out_r
""", x, y)
    h, want = np.ones(32, np.float32), np.empty_like(x)
    for i in range(16):
        h = x[:, i] * h + y[:, i]
        want[:, i] = h
    np.testing.assert_allclose(r.outputs[0], want, rtol=1e-5)
    np.testing.assert_array_equal(r.outputs[1], x.T)
    np.testing.assert_array_equal(r.outputs[2], x.max(axis=1, keepdims=True))
    assert MEMSET in {i.kind for i in r.trace.instrs}


def test_tensorengine_transpose_into_psum():
    x = rand(128, 96)
    r = run("""
@nki.jit
def kernel(x):
    out = nl.ndarray((96, 128), dtype=nl.float32, buffer=nl.shared_hbm)
    a = nl.ndarray((128, 96), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=a, src=x)
    p = nl.ndarray((96, 128), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_transpose(dst=p, data=a)
    s = nl.ndarray((96, 128), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=s, src=p)
    nisa.dma_copy(dst=out, src=s)
    return out
""", x)
    np.testing.assert_array_equal(r.outputs, x.T)


def test_views_slice_select_permute_broadcast_reshape_rearrange():
    x = rand(4, 6, 8)
    r = run("""
@nki.jit
def kernel(x):
    o1 = nl.ndarray((4, 8, 6), dtype=nl.float32, buffer=nl.shared_hbm)
    o2 = nl.ndarray((4, 3, 8), dtype=nl.float32, buffer=nl.shared_hbm)
    o3 = nl.ndarray((4, 5, 8), dtype=nl.float32, buffer=nl.shared_hbm)
    o4 = nl.ndarray((4, 48), dtype=nl.float32, buffer=nl.shared_hbm)
    o5 = nl.ndarray((4, 8, 6), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((4, 6, 8), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    p = nl.ndarray((4, 8, 6), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=p, src=t.permute((0, 2, 1)))
    nisa.dma_copy(dst=o1, src=p)
    s = nl.ndarray((4, 3, 8), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=s, src=t.slice(1, 0, 6, 2))
    nisa.dma_copy(dst=o2, src=s)
    b = nl.ndarray((4, 5, 8), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=b, src=t.select(1, 3).expand_dim(1).broadcast(1, 5))
    nisa.dma_copy(dst=o3, src=b)
    nisa.dma_copy(dst=o4, src=t.reshape((4, 48)))
    r = nl.ndarray((4, 8, 6), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=r, src=t.reshape((4, 48)).rearrange(("p", ("a", "b")), ("p", "b", "a"), {"a": 6}))
    nisa.dma_copy(dst=o5, src=r)
    return o1, o2, o3, o4, o5
""", x)
    o1, o2, o3, o4, o5 = r.outputs
    np.testing.assert_array_equal(o1, x.transpose(0, 2, 1))
    np.testing.assert_array_equal(o2, x[:, 0:6:2])
    np.testing.assert_array_equal(o3, np.broadcast_to(x[:, 3:4], (4, 5, 8)))
    np.testing.assert_array_equal(o4, x.reshape(4, 48))
    np.testing.assert_array_equal(o5, x.transpose(0, 2, 1))


def test_ap_view_sums_pooling_windows():
    x = rand(3, 4, 6)
    r = run("""
@nki.jit
def kernel(x):
    out = nl.ndarray((3, 2, 3), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((3, 4, 6), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    v = t.ap([[24, 3], [12, 2], [2, 3], [6, 2], [1, 2]])
    s = nl.sum(v, axis=[3, 4])
    o = nl.ndarray((3, 2, 3), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=o, src=s)
    nisa.dma_copy(dst=out, src=o)
    return out
""", x)
    np.testing.assert_allclose(r.outputs, x.reshape(3, 2, 2, 3, 2).sum(axis=(2, 4)), rtol=1e-5)


def test_fori_loop_runs_its_body_per_iteration_as_a_device_loop():
    x = rand(8, 10)
    r = run("""
@nki.jit
def kernel(x):
    out = nl.ndarray((8, 10), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((8, 10), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    def body(i):
        nisa.tensor_scalar(dst=t[:, i:i + 1], data=t[:, i:i + 1], op0=nl.multiply, operand0=3.0)
    nl.fori_loop(2, 10, body, step=2)
    nisa.dma_copy(dst=out, src=t)
    return out
""", x)
    want = x.copy()
    want[:, 2:10:2] *= 3
    np.testing.assert_allclose(r.outputs, want, rtol=1e-6)
    assert [lp.kind for lp in r.trace.loops.values()] == ["sequential"]


def test_high_level_api_load_store_and_nested_jit_calls_inline():
    a, b = rand(128, 64), rand(128, 64)
    r = run("""
@nki.jit
def helper(x, y):
    return nl.exp(nl.add(x, y))

@nki.jit
def kernel(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    s = nl.sum(helper(nl.load(a), nl.load(b)), axis=1, keepdims=True)
    nl.store(out[:, 0:1], value=s)
    z = nl.zeros((128, 63), dtype=nl.float32)
    nl.store(out[:, 1:64], value=z)
    return out
""", a, b)
    want = np.zeros_like(a)
    want[:, 0] = np.exp(a + b).sum(axis=1)
    np.testing.assert_allclose(r.outputs, want, rtol=1e-4)


def test_jit_call_and_simulate_with_arrays():
    from fitness.simulator import install_nki
    install_nki()
    import nki
    import nki.isa as nisa
    import nki.language as nl

    @nki.jit
    def copy_kernel(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        u = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=u, src=t)
        nisa.dma_copy(dst=out, src=u)
        return out

    x = rand(16, 8)
    np.testing.assert_array_equal(copy_kernel(x), x)
    np.testing.assert_array_equal(nki.simulate(copy_kernel)(x), x)
    np.testing.assert_array_equal(copy_kernel[1](x), x)
    assert nl.program_id is not None and COPY


def test_dialect_dispatch_runs_legacy_sources_with_the_legacy_front_end():
    src = ("import neuronxcc.nki as nki\nimport neuronxcc.nki.language as nl\n\n@nki.jit\ndef kernel(a):\n"
           "    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)\n"
           "    nl.store(out, value=nl.load(a))\n    return out\n")
    x = rand(8, 8)
    np.testing.assert_array_equal(run_kernel(src, [x]).outputs, x)


# --- the SDK's example kernels --------------------------------------------------------------------

def example(rel: str) -> str:
    path = EXAMPLES / rel
    assert path.is_file(), f"reference example {path} is missing"
    return path.read_text()


@pytest.mark.parametrize("name,kwargs", [
    ("nki_matmul_basic_", {}), ("nki_matmul_tiled_", {}), ("nki_matmul_hoist_load_", {}),
    ("nki_matmul_block_free_dimension_", {}),
    ("nki_matmul_fully_optimized_", {"TILES_IN_BLOCK_M": 2, "TILES_IN_BLOCK_N": 1, "TILES_IN_BLOCK_K": 2}),
])
def test_example_matmuls(name, kwargs):
    K, M, N = (128, 64, 512) if name == "nki_matmul_basic_" else (256, 256, 1024)
    a, b = rand(K, M), rand(K, N)
    r = run_kernel(example("matrix_multiplication/matrix_multiplication_nki_kernels.py"), [a, b],
                   kernel_name=name, kwargs=kwargs)
    np.testing.assert_allclose(r.outputs, a.T @ b, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("version", ["mamba_v1", "mamba_v2", "mamba_v3"])
def test_example_mamba(version):
    B, C, S, N = 1, 128, 512, 2
    delta, u = np.abs(rand(B, C, S)) * 0.1, rand(B, C, S)
    A, Bm, Cm = -np.abs(rand(C, N)), rand(B, N, S), rand(B, N, S)
    dA = np.exp(delta[:, :, None, :] * A[None, :, :, None])
    dBu = (delta * u)[:, :, None, :] * Bm[:, None, :, :]
    h, want = np.zeros((B, C, N), np.float32), np.zeros((B, C, S), np.float32)
    for t in range(S):
        h = dA[..., t] * h + dBu[..., t]
        want[..., t] = (h * Cm[:, None, :, t]).sum(-1)
    r = run_kernel(example("fused_mamba/mamba_nki_kernels.py"), [delta, u, A, Bm, Cm], kernel_name=version)
    np.testing.assert_allclose(r.outputs, want, rtol=1e-3, atol=1e-4)


def test_example_average_pool_transpose2d_and_tensor_addition():
    x = np.arange(2 * 6 * 6, dtype=np.float32).reshape(2, 6, 6)
    r = run_kernel(example("average_pool2d/average_pool2d_nki_kernels.py"), [x, 2], kernel_name="tensor_avgpool_kernel")
    np.testing.assert_allclose(r.outputs, x.reshape(2, 3, 2, 3, 2).mean(axis=(2, 4)))
    a = np.arange(5 * 12, dtype=np.int8).reshape(5, 12)
    r = run_kernel(example("transpose2d/transpose2d_nki_kernels.py"), [a, (3, 4)],
                   kernel_name="tensor_transpose2D_kernel_")
    np.testing.assert_array_equal(r.outputs, a.reshape(5, 3, 4).transpose(0, 2, 1).reshape(5, 12))
    p, q = rand(256, 1024), rand(256, 1024)
    r = run_kernel(example("tensor_addition/tensor_addition_nki_kernels.py"), [p, q], kernel_name="nki_tensor_add")
    np.testing.assert_array_equal(r.outputs, p + q)
