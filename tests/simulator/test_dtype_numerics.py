"""Low-precision numerics (bfloat16, float16, float8_e4m3, float8_e5m2) in both dialects,
against values worked out by hand, each chosen so that the rounding rule decides the result.

The rules and where the docs state them (paths in github.com/aws-neuron/aws-neuron-sdk at HEAD;
"legacy" = commit 4eba310f, under general/nki/; ISA = nki/api/nki/isa/__init__.py):
- storage: low-precision tiles and HBM tensors hold ml_dtypes values, so every conversion from
  fp32 rounds to nearest, ties to even, and overflows to inf (nki/guides/nki_simulator.rst
  "Precise Floating-Point Mode"); DMA converts src -> fp32 -> dst (ISA dma_copy "Data types");
  a copy with a dtype change goes through fp32 (ISA tensor_copy). float8_e4m3 is the IEEE-style
  E4M3 of Trn2 (max 240, has inf) = ml_dtypes.float8_e4m3
  (libraries/nxd-inference/tutorials/trn2-llama3.1-405b-speculative-tutorial.rst "FP8_EXP4
  (IEEE-754)"; vllm-neuron/docs/design/vllm/kv-cache-quantization.md "TRN2 ... max finite value of
  240.0"). No doc says that casts saturate (the vLLM doc clamps before casting).
- TensorE: products exact, accumulation in fp32, the PSUM result fp32, a matmul group
  accumulated in fp32 in PSUM (ISA nc_matmul "Data types"; nki/guides/architecture/
  trainium_inferentia2_arch.rst TensorE "Data Types"); on trn3 a bf16 PSUM tile is widened, added in
  fp32 and rounded back on every matmul (trainium3_arch.rst "BF16 Matmul Results in PSUM").
- Vector/Scalar/GpSimd: inputs cast to fp32, math in fp32, one rounding to the output dtype
  (nki/api/nki.api.shared.rst "Supported Math Operators"; ISA tensor_tensor / tensor_scalar /
  tensor_reduce / activation "Data types"; trainium_inferentia2_arch.rst VectorE / ScalarE /
  GpSimdE "Data Types"; trainium2_arch.rst VectorE "all computation is still done in FP32").
- mixed dtypes: legacy api/nki.api.shared.rst "NKI Type Promotion"; an explicit dtype= wins.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

from fitness.simulator import run_kernel
from fitness.simulator.core import instr as I

F32 = np.dtype(np.float32)
F16 = np.dtype(np.float16)
BF16 = np.dtype(ml_dtypes.bfloat16)
E4M3 = np.dtype(ml_dtypes.float8_e4m3)
E5M2 = np.dtype(ml_dtypes.float8_e5m2)
DTYPES = {"bfloat16": BF16, "float16": F16, "float8_e4m3": E4M3, "float8_e5m2": E5M2}

HEADS = {
    "legacy": "import neuronxcc.nki as nki\nimport neuronxcc.nki.language as nl\n"
              "import neuronxcc.nki.isa as nisa\nimport numpy as np\n\n",
    "current": "import nki\nimport nki.language as nl\nimport nki.isa as nisa\nimport numpy as np\n\n",
}
DIALECTS = ("legacy", "current")
INF = math.inf
u = 2.0 ** -9    # a quarter of a bf16 ulp at 1 (bf16 keeps 7 fraction bits: ulp(1) = 2**-7)


def run(dialect: str, body: str, *args):
    r = run_kernel(HEADS[dialect] + body, list(args))
    assert r.trace.dialect == dialect
    return r.outputs


def arr(values, dtype=F32, rows: int = 1) -> np.ndarray:
    """A (rows, n) array of exactly these values (they must be representable in dtype)."""
    a = np.array(values, dtype=np.float64).reshape(rows, -1)
    out = a.astype(dtype)
    assert np.array_equal(out.astype(np.float64), a, equal_nan=True), "test value not representable"
    return out


def check(out, dtype: np.dtype, expected) -> None:
    """`out` has `dtype` and exactly the `expected` values (inf compares equal to inf)."""
    assert out.dtype == dtype, (out.dtype, dtype)
    np.testing.assert_array_equal(np.asarray(out).astype(np.float64),
                                  np.array(expected, np.float64).reshape(out.shape))


# --- storage rounding ---------------------------------------------------------------------------
# (fp32 input, value stored in the low-precision dtype). Ties go to the even neighbour; past the
# largest finite value (and its half-ulp) the value becomes inf: ml_dtypes does not saturate.
STORAGE = {
    "bfloat16": [
        (1 + u, 1.0),                      # below half an ulp: down
        (1 + 2 * u, 1.0),                  # tie between 1 and 1+2^-7: even (1)
        (1 + 3 * u, 1 + 2 ** -7),          # above half: up (truncation would give 1)
        (1 + 2 ** -7 + 2 * u, 1 + 2 ** -6),  # tie between 1+2^-7 (odd) and 1+2^-6: up to even
        (-(1 + 3 * u), -(1 + 2 ** -7)),
        (257.0, 256.0),                    # ulp(256) = 2: tie, even
        ((2 - 2 ** -7) * 2.0 ** 127, (2 - 2 ** -7) * 2.0 ** 127),   # bf16 max, kept
        ((2 - 2 ** -23) * 2.0 ** 127, INF),   # fp32 max: past bf16 max + half an ulp
    ],
    "float16": [
        (1 + 2 ** -11, 1.0),               # tie (ulp(1) = 2^-10): even
        (1 + 3 * 2 ** -11, 1 + 2 ** -9),   # tie between 1+2^-10 (odd) and 1+2^-9: even
        (1 + 2 ** -12, 1.0),
        (1 + 2 ** -10 + 2 ** -12, 1 + 2 ** -10),
        (65504.0, 65504.0),                # fp16 max
        (65519.0, 65504.0),
        (65520.0, INF),                    # tie between max and 2^16: even = overflow
        (1e5, INF),
    ],
    "float8_e4m3": [
        (1.0625, 1.0),                     # ulp(1) = 2^-3: 1 + 2^-4 is a tie, even
        (1.1875, 1.25),                    # tie between 1.125 (odd) and 1.25: even
        (1.09375, 1.125),                  # 0.75 ulp above 1: up
        (240.0, 240.0),                    # max finite of the IEEE-style E4M3 (trn2)
        (247.0, 240.0),
        (248.0, INF),                      # tie between 240 and 256: overflow, no saturation
        (1000.0, INF),
        (-1000.0, -INF),
    ],
    "float8_e5m2": [
        (1.125, 1.0),                      # ulp(1) = 2^-2: tie, even
        (1.375, 1.5),                      # tie between 1.25 (odd) and 1.5: even
        (1.1875, 1.25),                    # 0.75 ulp above 1: up
        (57344.0, 57344.0),                # max finite
        (60000.0, 57344.0),
        (61440.0, INF),                    # tie between max and 2^16: overflow
        (1e5, INF),
        (-1e5, -INF),
    ],
}

STORAGE_KERNELS = {
    ("legacy", "load"): """
@nki.jit
def kernel(x):
    t = nl.load(x, dtype=nl.{dt})
    out = nl.ndarray(x.shape, dtype=t.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=t)
    return out
""",
    ("legacy", "copy"): """
@nki.jit
def kernel(x):
    t = nl.copy(nl.load(x), dtype=nl.{dt})
    out = nl.ndarray(x.shape, dtype=t.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=t)
    return out
""",
    ("legacy", "tensor_copy"): """
@nki.jit
def kernel(x):
    t = nisa.tensor_copy(nl.load(x), dtype=nl.{dt})
    out = nl.ndarray(x.shape, dtype=t.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=t)
    return out
""",
    ("legacy", "store"): """
@nki.jit
def kernel(x):
    out = nl.ndarray(x.shape, dtype=nl.{dt}, buffer=nl.shared_hbm)
    nl.store(out, value=nl.load(x))
    return out
""",
    ("current", "load"): """
@nki.jit
def kernel(x):
    t = nl.ndarray(x.shape, dtype=nl.{dt}, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    out = nl.ndarray(x.shape, dtype=t.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=t)
    return out
""",
    ("current", "copy"): """
@nki.jit
def kernel(x):
    t = nl.copy(nl.load(x), dtype=nl.{dt})
    out = nl.ndarray(x.shape, dtype=t.dtype, buffer=nl.shared_hbm)
    nl.store(out, t)
    return out
""",
    ("current", "tensor_copy"): """
@nki.jit
def kernel(x):
    a = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=a, src=x)
    t = nl.ndarray(x.shape, dtype=nl.{dt}, buffer=nl.sbuf)
    nisa.tensor_copy(dst=t, src=a)
    out = nl.ndarray(x.shape, dtype=t.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=t)
    return out
""",
    ("current", "store"): """
@nki.jit
def kernel(x):
    a = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=a, src=x)
    out = nl.ndarray(x.shape, dtype=nl.{dt}, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=a)
    return out
""",
}


@pytest.mark.parametrize("dt", list(STORAGE))
@pytest.mark.parametrize("dialect, path", list(STORAGE_KERNELS))
def test_fp32_to_low_precision_rounds_to_nearest_even_and_overflows_to_inf(dialect, path, dt):
    """HBM fp32 -> SBUF tile by DMA, SBUF -> SBUF copy with a dtype, SBUF fp32 -> HBM tensor."""
    x = arr([v for v, _ in STORAGE[dt]])
    with np.errstate(over="ignore"):
        out = run(dialect, STORAGE_KERNELS[dialect, path].replace("{dt}", dt), x)
    check(out, DTYPES[dt], [e for _, e in STORAGE[dt]])


@pytest.mark.parametrize("dialect", DIALECTS)
def test_dma_between_low_precision_dtypes_goes_through_fp32(dialect):
    """bf16 -> fp16 -> e4m3 by DMA: each step widens to fp32 exactly, then rounds once to dst."""
    body = {
        "legacy": """
@nki.jit
def kernel(x):
    h = nl.load(x, dtype=nl.float16)
    out16 = nl.ndarray(x.shape, dtype=nl.float16, buffer=nl.shared_hbm)
    nl.store(out16, value=h)
    out8 = nl.ndarray(x.shape, dtype=nl.float8_e4m3, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out8, src=h)
    return out16, out8
""",
        "current": """
@nki.jit
def kernel(x):
    h = nl.ndarray(x.shape, dtype=nl.float16, buffer=nl.sbuf)
    nisa.dma_copy(dst=h, src=x)
    out16 = nl.ndarray(x.shape, dtype=nl.float16, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out16, src=h)
    out8 = nl.ndarray(x.shape, dtype=nl.float8_e4m3, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out8, src=h)
    return out16, out8
""",
    }[dialect]
    x = arr([1 + 2 ** -7, 1.0625, 2.0 ** 20, 1.1875], BF16)
    with np.errstate(over="ignore"):
        out16, out8 = run(dialect, body, x)
    check(out16, F16, [1 + 2 ** -7, 1.0625, INF, 1.1875])   # 2^20 > fp16 max
    check(out8, E4M3, [1.0, 1.0, INF, 1.25])                   # ties to even; inf stays inf


# --- TensorE -----------------------------------------------------------------------------------

def _matmul_operands(dtype: np.dtype):
    """stationary [K=128, M=2], moving [K=128, N=2] and the exact fp32 product s.T @ m:
    out[0, 0] = 1*1 + 127 * (1 * 2^-9): fp32 accumulation keeps every 2^-9 (1.248046875), bf16
    accumulation would stay at 1; out[1, 1] = (1+2^-7)^2 = 1 + 2^-6 + 2^-14, exact only as an
    fp32 product."""
    s = np.zeros((128, 2))
    m = np.zeros((128, 2))
    s[:, 0] = 1.0
    s[0, 1] = 1 + 2 ** -7
    m[0, 0] = 1.0
    m[1:, 0] = u
    m[0, 1] = 1 + 2 ** -7
    exact = [[1 + 127 * u, 1 + 2 ** -7], [1 + 2 ** -7, 1 + 2 ** -6 + 2 ** -14]]
    return s.astype(dtype), m.astype(dtype), exact


MATMUL = {
    "legacy": """
@nki.jit
def kernel(s, m):
    st = nl.load(s)
    mv = nl.load(m)
    ps = nisa.nc_matmul(st, mv)
    ps2 = nl.matmul(st, mv, transpose_x=True)
    out32 = nl.ndarray((2, 2), dtype=ps.dtype, buffer=nl.shared_hbm)
    nl.store(out32, value=nl.copy(ps))
    out16 = nl.ndarray((2, 2), dtype=nl.bfloat16, buffer=nl.shared_hbm)
    nl.store(out16, value=nl.copy(ps, dtype=nl.bfloat16))
    out2 = nl.ndarray((2, 2), dtype=ps2.dtype, buffer=nl.shared_hbm)
    nl.store(out2, value=nl.copy(ps2))
    return out32, out16, out2
""",
    "current": """
@nki.jit
def kernel(s, m):
    st = nl.ndarray(s.shape, dtype=s.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=st, src=s)
    mv = nl.ndarray(m.shape, dtype=m.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=mv, src=m)
    ps = nl.ndarray((2, 2), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=ps, stationary=st, moving=mv)
    a = nl.ndarray((2, 2), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=a, src=ps)
    b = nl.ndarray((2, 2), dtype=nl.bfloat16, buffer=nl.sbuf)
    nisa.tensor_copy(dst=b, src=ps)
    out32 = nl.ndarray((2, 2), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out32, src=a)
    out16 = nl.ndarray((2, 2), dtype=nl.bfloat16, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out16, src=b)
    return out32, out16
""",
}


@pytest.mark.parametrize("dialect", DIALECTS)
def test_bf16_matmul_multiplies_exactly_and_accumulates_in_fp32_psum(dialect):
    s, m, exact = _matmul_operands(BF16)
    out32, out16, *more = run(dialect, MATMUL[dialect], s, m)
    for o in [out32] + more:                  # (legacy: nl.matmul(transpose_x=True) too)
        check(o, F32, exact)                  # the PSUM result is fp32, exact
    # one rounding of the fp32 sums: 1+127*2^-9 is 31.75 bf16 ulps above 1 -> 1.25;
    # 1+2^-6+2^-14 -> 1+2^-6
    check(out16, BF16, [[1.25, 1 + 2 ** -7], [1 + 2 ** -7, 1 + 2 ** -6]])


FP8_MATMUL = {
    "legacy": """
@nki.jit
def kernel(s, m):
    ps = nisa.nc_matmul(nl.load(s), nl.load(m))
    out32 = nl.ndarray((1, 2), dtype=ps.dtype, buffer=nl.shared_hbm)
    nl.store(out32, value=nl.copy(ps))
    out16 = nl.ndarray((1, 2), dtype=nl.bfloat16, buffer=nl.shared_hbm)
    nl.store(out16, value=nl.copy(ps, dtype=nl.bfloat16))
    return out32, out16
""",
    "current": """
@nki.jit
def kernel(s, m):
    st = nl.ndarray(s.shape, dtype=s.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=st, src=s)
    mv = nl.ndarray(m.shape, dtype=m.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=mv, src=m)
    ps = nl.ndarray((1, 2), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=ps, stationary=st, moving=mv)
    a = nl.ndarray((1, 2), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=a, src=ps)
    b = nl.ndarray((1, 2), dtype=nl.bfloat16, buffer=nl.sbuf)
    nisa.tensor_copy(dst=b, src=ps)
    out32 = nl.ndarray((1, 2), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out32, src=a)
    out16 = nl.ndarray((1, 2), dtype=nl.bfloat16, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out16, src=b)
    return out32, out16
""",
}


@pytest.mark.parametrize("dialect", DIALECTS)
def test_fp8_matmul_e4m3_by_e5m2_is_exact_in_fp32(dialect):
    """float8_e4m3 stationary x float8_e5m2 moving (mixing the two is allowed, nc_matmul "Data
    types"): out[0, 0] = 1.125*1.25 + 15 * 1.125*2^-10 = 11655 * 2^-13, out[0, 1] = 16 * 1.125*2^-4."""
    s = arr([1.125] * 16, E4M3, rows=16)
    m = np.zeros((16, 2))
    m[0, 0] = 1.25
    m[1:, 0] = 2.0 ** -10
    m[:, 1] = 2.0 ** -4
    m = m.astype(E5M2)
    out32, out16 = run(dialect, FP8_MATMUL[dialect], s, m)
    check(out32, F32, [[11655 * 2.0 ** -13, 1.125]])
    check(out16, BF16, [[182 * 2.0 ** -7, 1.125]])   # 11655/64 = 182.1 bf16 ulps: down


ACCUMULATE = {
    "legacy": """
@nki.jit
def kernel(x, o):
    ones = nl.load(o)
    ps = nl.zeros((2, 2), dtype=nl.float32, buffer=nl.psum)
    for i in nl.affine_range(4):
        ps += nisa.nc_matmul(nl.load(x[i]), ones)
    out32 = nl.ndarray((2, 2), dtype=ps.dtype, buffer=nl.shared_hbm)
    nl.store(out32, value=nl.copy(ps))
    out16 = nl.ndarray((2, 2), dtype=nl.bfloat16, buffer=nl.shared_hbm)
    nl.store(out16, value=nl.copy(ps, dtype=nl.bfloat16))
    return out32, out16
""",
    "current": """
@nki.jit
def kernel(x, o):
    ones = nl.ndarray((1, 2), dtype=nl.bfloat16, buffer=nl.sbuf)
    nisa.dma_copy(dst=ones, src=o)
    ps = nl.ndarray((2, 2), dtype=nl.{psum}, buffer=nl.psum)
    for i in nl.affine_range(4):
        st = nl.ndarray((1, 2), dtype=nl.bfloat16, buffer=nl.sbuf)
        nisa.dma_copy(dst=st, src=x[i])
        nisa.nc_matmul(dst=ps, stationary=st, moving=ones)
    a = nl.ndarray((2, 2), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=a, src=ps)
    b = nl.ndarray((2, 2), dtype=nl.bfloat16, buffer=nl.sbuf)
    nisa.tensor_copy(dst=b, src=ps)
    out32 = nl.ndarray((2, 2), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out32, src=a)
    out16 = nl.ndarray((2, 2), dtype=nl.bfloat16, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out16, src=b)
    return out32, out16
""",
}


def _accumulate_inputs():
    """Four K=1 matmuls adding 1, 2^-9, 2^-9, 2^-9 to every PSUM element."""
    x = np.array([1.0, u, u, u])[:, None, None] * np.ones((4, 1, 2))
    return x.astype(BF16), np.ones((1, 2), BF16)


@pytest.mark.parametrize("dialect", DIALECTS)
def test_matmuls_accumulate_into_one_fp32_psum_tile_and_round_once_on_the_copy_out(dialect):
    x, ones = _accumulate_inputs()
    out32, out16 = run(dialect, ACCUMULATE[dialect].replace("{psum}", "float32"), x, ones)
    check(out32, F32, [[1 + 3 * u] * 2] * 2)          # fp32 PSUM keeps each 2^-9
    check(out16, BF16, [[1 + 2 ** -7] * 2] * 2)       # 1 + 0.75 ulp: up (per-step bf16 would give 1)


def test_bf16_psum_rounds_after_every_accumulation():
    """trn3 (trainium3_arch.rst "BF16 Matmul Results in PSUM"): the PSUM bf16 value is widened,
    added in fp32 and rounded back (RNE) on every matmul: 1 + 2^-9 rounds back to 1 each time."""
    x, ones = _accumulate_inputs()
    out32, out16 = run("current", ACCUMULATE["current"].replace("{psum}", "bfloat16"), x, ones)
    check(out32, F32, [[1.0] * 2] * 2)
    check(out16, BF16, [[1.0] * 2] * 2)


# --- Vector / Scalar / GpSimd: fp32 math, one rounding ----------------------------------------------

ADD_X = [1.0, 1.0, 1 + 2 ** -7, 1.0, 256.0]
ADD_Y = [3 * u, 2 * u, 2 * u, u, 1.0]
ADD_EXACT = [1 + 3 * u, 1 + 2 * u, 1 + 2 ** -7 + 2 * u, 1 + u, 257.0]
ADD_BF16 = [1 + 2 ** -7, 1.0, 1 + 2 ** -6, 1.0, 256.0]    # nearest; tie even; tie even (up); down; tie even

ADD = {
    "legacy": """
@nki.jit
def kernel(x, y):
    a = nl.load(x)
    b = nl.load(y)
    outs = []
    for r in (nl.add(a, b), nisa.tensor_tensor(a, b, op=nl.add), a + b,
              nl.add(a, b, dtype=nl.float32), nisa.tensor_tensor(a, b, op=nl.add, dtype=nl.float32)):
        o = nl.ndarray(x.shape, dtype=r.dtype, buffer=nl.shared_hbm)
        nl.store(o, value=r)
        outs.append(o)
    return outs[0], outs[1], outs[2], outs[3], outs[4]
""",
    "current": """
@nki.jit
def kernel(x, y):
    a = nl.load(x)
    b = nl.load(y)
    t16 = nl.ndarray(x.shape, dtype=nl.bfloat16, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=t16, data1=a, data2=b, op=nl.add)
    t32 = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=t32, data1=a, data2=b, op=nl.add)
    outs = []
    for r in (nl.add(a, b), t16, a + b, nl.add(a, b, dtype=nl.float32), t32):
        o = nl.ndarray(x.shape, dtype=r.dtype, buffer=nl.shared_hbm)
        nl.store(o, r)
        outs.append(o)
    return outs[0], outs[1], outs[2], outs[3], outs[4]
""",
}


@pytest.mark.parametrize("dialect", DIALECTS)
def test_bf16_add_computes_in_fp32_and_rounds_once_to_the_output_dtype(dialect):
    outs = run(dialect, ADD[dialect], arr(ADD_X, BF16), arr(ADD_Y, BF16))
    for o in outs[:3]:                   # nl.add, tensor_tensor, operator: bf16 in, bf16 out
        check(o, BF16, ADD_BF16)
    for o in outs[3:]:                   # an fp32 output keeps the exact fp32 sum
        check(o, F32, ADD_EXACT)


TENSOR_SCALAR = {
    "legacy": """
@nki.jit
def kernel(x):
    a = nl.load(x)
    r16 = nisa.tensor_scalar(a, op0=nl.add, operand0=2.0 ** -8, op1=nl.add, operand1=2.0 ** -9,
                             engine=nisa.{engine}_engine)
    r32 = nisa.tensor_scalar(a, op0=nl.add, operand0=2.0 ** -8, op1=nl.add, operand1=2.0 ** -9,
                             engine=nisa.{engine}_engine, dtype=nl.float32)
    o16 = nl.ndarray(x.shape, dtype=r16.dtype, buffer=nl.shared_hbm)
    nl.store(o16, value=r16)
    o32 = nl.ndarray(x.shape, dtype=r32.dtype, buffer=nl.shared_hbm)
    nl.store(o32, value=r32)
    return o16, o32
""",
    "current": """
@nki.jit
def kernel(x):
    a = nl.load(x)
    r16 = nl.ndarray(x.shape, dtype=nl.bfloat16, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=r16, data=a, op0=nl.add, operand0=2.0 ** -8, op1=nl.add, operand1=2.0 ** -9,
                       engine=nisa.engine.{engine})
    r32 = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=r32, data=a, op0=nl.add, operand0=2.0 ** -8, op1=nl.add, operand1=2.0 ** -9,
                       engine=nisa.engine.{engine})
    o16 = nl.ndarray(x.shape, dtype=nl.bfloat16, buffer=nl.shared_hbm)
    nl.store(o16, r16)
    o32 = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(o32, r32)
    return o16, o32
""",
}


@pytest.mark.parametrize("engine", ["vector", "scalar", "gpsimd"])
@pytest.mark.parametrize("dialect", DIALECTS)
def test_tensor_scalar_keeps_its_intermediate_in_fp32_on_every_engine(dialect, engine):
    """(x + 2^-8) + 2^-9: the fp32 intermediate 1 + 2^-8 is a bf16 tie; rounded to bf16 it would
    lose the 2^-8 and the result would be 1. In fp32 the result 1 + 3*2^-9 rounds up once."""
    x = arr([1.0, 2.0, -1.0], BF16)
    o16, o32 = run(dialect, TENSOR_SCALAR[dialect].replace("{engine}", engine), x)
    check(o32, F32, [1 + 3 * u, 2 + 3 * u, -1 + 3 * u])
    # 2 + 3*2^-9 is 0.375 ulp(2) above 2: down; -1 + 3*2^-9 = -(254.5 * 2^-8): tie, even (254)
    check(o16, BF16, [1 + 2 ** -7, 2.0, -254 * 2.0 ** -8])


ACTIVATION = {
    "legacy": """
@nki.jit
def kernel(x, bias):
    a = nl.load(x)
    bv = nl.load(bias)
    rs = (nisa.activation(op=nl.exp, data=a), nl.exp(a), nisa.activation(op=nl.exp, data=a, dtype=nl.float32),
          nisa.activation(op=nl.square, data=a, bias=bv),
          nisa.activation(op=nl.square, data=a, bias=bv, dtype=nl.float32))
    outs = []
    for r in rs:
        o = nl.ndarray(x.shape, dtype=r.dtype, buffer=nl.shared_hbm)
        nl.store(o, value=r)
        outs.append(o)
    return outs[0], outs[1], outs[2], outs[3], outs[4]
""",
    "current": """
@nki.jit
def kernel(x, bias):
    a = nl.load(x)
    bv = nl.load(bias)
    e16 = nl.ndarray(x.shape, dtype=nl.bfloat16, buffer=nl.sbuf)
    nisa.activation(dst=e16, op=nl.exp, data=a)
    e32 = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.activation(dst=e32, op=nl.exp, data=a)
    s16 = nl.ndarray(x.shape, dtype=nl.bfloat16, buffer=nl.sbuf)
    nisa.activation(dst=s16, op=nl.square, data=a, bias=bv)
    s32 = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.activation(dst=s32, op=nl.square, data=a, bias=bv)
    outs = []
    for r in (e16, nl.exp(a), e32, s16, s32):
        o = nl.ndarray(x.shape, dtype=r.dtype, buffer=nl.shared_hbm)
        nl.store(o, r)
        outs.append(o)
    return outs[0], outs[1], outs[2], outs[3], outs[4]
""",
}


@pytest.mark.parametrize("dialect", DIALECTS)
def test_activation_on_bf16_computes_in_fp32_and_rounds_once(dialect):
    ln2 = 0.69140625                      # ln 2 rounded to bf16
    x = arr([ln2, 0.0, 1.0], BF16)
    bias = arr([3 * u], F32)              # (P, 1) fp32 bias: 1 + 3*2^-9 is not a bf16 value
    e16, e_nl, e32, s16, s32 = run(dialect, ACTIVATION[dialect], x, bias)
    # exp(0.69140625) = 1.99662...: 2.0 is nearer than 1.9921875; exp(1) = 2.71828...: 174 * 2^-6
    for o in (e16, e_nl):
        check(o, BF16, [2.0, 1.0, 174 * 2.0 ** -6])
    assert e32.dtype == F32
    np.testing.assert_allclose(e32[0].astype(np.float64), [math.exp(ln2), 1.0, math.e], rtol=2e-7)
    # square(x + bias) in fp32: (1 + 3u)^2 = 1 + 6u + 9u^2 (exact in fp32, 18 fraction bits)
    sq = [(ln2 + 3 * u) ** 2, (3 * u) ** 2, (1 + 3 * u) ** 2]
    check(s32, F32, sq)
    # (ln2 + 3u)^2 = 357^2 * 2^-18 = 248.92 * 2^-9 (bf16 ulp in [1/4, 1/2)) -> 249 * 2^-9; 9u^2 = 1.001b * 2^-15 is a bf16;
    # 1 + 6u + 9u^2 is 1.504 bf16 ulps above 1 -> 1 + 2 * 2^-7
    check(s16, BF16, [249 * u, (3 * u) ** 2, 1 + 2 ** -6])


REDUCE = {
    "legacy": """
@nki.jit
def kernel(x):
    a = nl.load(x)
    rs = (nl.sum(a, axis=1), nisa.tensor_reduce(nl.add, a, axis=[1]), nl.sum(a, axis=1, dtype=nl.float32),
          nisa.tensor_reduce(nl.add, a, axis=[1], dtype=nl.float32))
    outs = []
    for r in rs:
        o = nl.ndarray((1, 1), dtype=r.dtype, buffer=nl.shared_hbm)
        nl.store(o, value=r)
        outs.append(o)
    return outs[0], outs[1], outs[2], outs[3]
""",
    "current": """
@nki.jit
def kernel(x):
    a = nl.load(x)
    r16 = nl.ndarray((1, 1), dtype=nl.bfloat16, buffer=nl.sbuf)
    nisa.tensor_reduce(dst=r16, op=nl.add, data=a, axis=1)
    r32 = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_reduce(dst=r32, op=nl.add, data=a, axis=1)
    outs = []
    for r in (nl.sum(a, axis=1), r16, nl.sum(a, axis=1, dtype=nl.float32), r32):
        o = nl.ndarray((1, 1), dtype=r.dtype, buffer=nl.shared_hbm)
        nl.store(o, r)
        outs.append(o)
    return outs[0], outs[1], outs[2], outs[3]
""",
}


@pytest.mark.parametrize("dialect", DIALECTS)
def test_reduction_over_bf16_accumulates_in_fp32_and_rounds_once(dialect):
    """1 + 127 * 2^-9: a bf16 accumulator would stay at 1 (each 2^-9 is a quarter ulp); fp32 keeps
    them all (1.248046875, in any summation order), and rounding once gives 1.25."""
    x = arr([1.0] + [u] * 127, BF16)
    s16, r16, s32, r32 = run(dialect, REDUCE[dialect], x)
    for o in (s16, r16):
        check(o, BF16, [[1.25]])
    for o in (s32, r32):
        check(o, F32, [[1 + 127 * u]])


# --- mixed dtypes -----------------------------------------------------------------------------------

MIXED = {
    "legacy": """
@nki.jit
def kernel(x, y, p, q, h):
    a, b, e4, e5, c = nl.load(x), nl.load(y), nl.load(p), nl.load(q), nl.load(h)
    rs = (nl.add(a, b), nisa.tensor_tensor(a, b, op=nl.add), nl.add(a, b, dtype=nl.bfloat16),
          nl.add(a, b, dtype=nl.float16), nl.add(e4, e5), nl.add(e4, c), nl.add(e4, a[:, 0:1]))
    outs = []
    for r in rs:
        o = nl.ndarray(r.shape, dtype=r.dtype, buffer=nl.shared_hbm)
        nl.store(o, value=r)
        outs.append(o)
    return outs[0], outs[1], outs[2], outs[3], outs[4], outs[5], outs[6]
""",
    "current": """
@nki.jit
def kernel(x, y, p, q, h):
    a, b, e4, e5, c = nl.load(x), nl.load(y), nl.load(p), nl.load(q), nl.load(h)
    t = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=t, data1=a, data2=b, op=nl.add)
    rs = (nl.add(a, b), t, nl.add(a, b, dtype=nl.bfloat16), nl.add(a, b, dtype=nl.float16), nl.add(e4, e5),
          nl.add(e4, c), nl.add(e4, a[:, 0:1]))
    outs = []
    for r in rs:
        o = nl.ndarray(r.shape, dtype=r.dtype, buffer=nl.shared_hbm)
        nl.store(o, r)
        outs.append(o)
    return outs[0], outs[1], outs[2], outs[3], outs[4], outs[5], outs[6]
""",
}


@pytest.mark.parametrize("dialect", DIALECTS)
def test_mixed_dtypes_promote_and_an_explicit_dtype_wins(dialect):
    x = arr([1.0, 1.0], BF16)
    y = arr([3 * u, 2.0 ** -11], F16)
    p = arr([1.125], E4M3)
    q = arr([2.0 ** -7], E5M2)
    h = arr([2.0 ** -10], F16)
    bf_fp16, tt, as_bf16, as_fp16, e4_e5, e4_fp16, e4_bf16 = run(dialect, MIXED[dialect], x, y, p, q, h)
    # bf16 + fp16 -> fp32 ("new widened type"), exact
    check(bf_fp16, F32, [[1 + 3 * u, 1 + 2 ** -11]])
    check(tt, F32, [[1 + 3 * u, 1 + 2 ** -11]])
    # dtype= wins: one rounding of the fp32 sum
    check(as_bf16, BF16, [[1 + 2 ** -7, 1.0]])
    check(as_fp16, F16, [[1 + 3 * u, 1.0]])          # 1 + 2^-11 is an fp16 tie: even
    # e4m3 + e5m2 -> bf16 (new widened type): 1.125 + 2^-7, which neither fp8 type holds
    check(e4_e5, BF16, [[1.125 + 2 ** -7]])
    check(e4_fp16, F16, [[1.125 + 2 ** -10]])         # e4m3 + fp16 -> fp16
    check(e4_bf16, BF16, [[2.125]])                   # e4m3 + bf16 -> bf16


@pytest.mark.parametrize("a, b, want", [
    (F32, BF16, F32), (F16, BF16, F32), (E4M3, F16, F16), (E4M3, BF16, BF16), (E4M3, E5M2, BF16),
    (E5M2, E4M3, BF16), (E5M2, F32, F32), (np.int32, F16, F16), (np.uint16, F32, F32),
    (np.int16, np.int32, np.int32), (np.uint8, np.uint16, np.uint16), (np.uint16, np.int32, np.int32),
    (np.int8, np.uint8, np.int16), (np.int8, np.uint16, np.int32), (np.int32, np.uint32, F32),
])
def test_promotion_table_of_the_legacy_docs(a, b, want):
    """Every example of legacy api/nki.api.shared.rst "NKI Type Promotion" (tfloat32 is fp32 here)."""
    assert I.promote(np.dtype(a), np.dtype(b)) == np.dtype(want)
    assert I.promote(np.dtype(b), np.dtype(a)) == np.dtype(want)
