"""The correctness gate and the structural precision rule."""

from __future__ import annotations

from types import SimpleNamespace

import ml_dtypes
import numpy as np
import pytest

from fitness.correctness import gate, precision


def test_l2_relative_error_matches_the_float64_formula():
    rng = np.random.default_rng(0)
    ref = rng.standard_normal((300, 70)).astype(np.float32)
    out = ref + 1e-3 * rng.standard_normal(ref.shape).astype(np.float32)
    err, norm, bad, _ = gate.l2_errors(out, ref)
    d = out.astype(np.float64) - ref.astype(np.float64)
    assert err == pytest.approx(np.linalg.norm(d), rel=1e-12)
    assert norm == pytest.approx(np.linalg.norm(ref.astype(np.float64)), rel=1e-12)
    assert bad == 0


def test_chunking_gives_the_same_answer(monkeypatch):
    rng = np.random.default_rng(1)
    ref = rng.standard_normal(10_001).astype(np.float32)
    out = ref * 1.0001
    whole = gate.l2_errors(out, ref)
    monkeypatch.setattr(gate, "_CHUNK", 97)
    assert gate.l2_errors(out, ref)[:3] == pytest.approx(whole[:3], rel=1e-12)


def test_passing_and_failing_outputs_name_output_seed_and_amount():
    ref = np.linspace(-3, 3, 4096, dtype=np.float32).reshape(64, 64)
    assert gate.check_outputs([ref.copy()], [ref], 2e-5, "seed 0") is None
    off = ref * 1.001
    msg = gate.check_outputs([off], [ref], 2e-5, "seed 42")
    assert msg.startswith("output 0 (seed 42): L2 relative error 1.000e-03 exceeds the tolerance 2.0e-05")


def test_constant_outputs_fail():
    ref = np.random.default_rng(2).standard_normal((128, 512)).astype(np.float32)
    msg = gate.check_outputs([np.zeros_like(ref)], [ref], 2e-5, "held-out seed 1")
    assert "output 0 (held-out seed 1): L2 relative error 1.000e+00" in msg


def test_nan_and_inf_fail_with_their_position():
    ref = np.ones((4, 5), np.float32)
    out = ref.copy()
    out[2, 3] = np.nan
    out[3, 0] = np.inf
    msg = gate.check_outputs([out], [ref], 1.0, "seed 21")
    assert msg == "output 0 (seed 21): 2 NaN/Inf value(s) where the reference is finite (first at index (2, 3))"


def test_shape_dtype_and_count_checks():
    ref = np.ones((4, 4), np.float32)
    assert "shape (2, 8) differs" in gate.check_outputs([ref.reshape(2, 8)], [ref], 1e-5, "seed 0")
    assert "dtype bfloat16 differs" in gate.check_outputs([ref.astype(ml_dtypes.bfloat16)], [ref], 1, "seed 0")
    assert "dtype float16 differs" in gate.check_outputs([ref.astype(np.float16)], [ref], 1, "seed 0")
    assert "returned 2 output(s), the reference has 1" in gate.check_outputs([ref, ref], [ref], 1e-5, "seed 0")
    # fp32 is the widest type the engines write: it satisfies a float64 reference
    assert gate.check_outputs([ref], [ref.astype(np.float64)], 1e-5, "seed 0") is None


def test_second_output_failure_is_reported_as_output_1():
    a = np.ones(8, np.float32)
    msg = gate.check_outputs([a, a * 2], [a, a], 1e-5, "seed 63")
    assert msg.startswith("output 1 (seed 63)")


def test_zero_reference_needs_exact_zero():
    z = np.zeros(16, np.float32)
    assert gate.check_outputs([z.copy()], [z], 2e-5, "seed 0") is None
    assert gate.check_outputs([z + 1e-30], [z], 2e-5, "seed 0") is not None


# -- precision ----------------------------------------------------------------------------

def test_source_dtypes_are_structural_not_textual():
    src = (
        "# this kernel never uses float16\n"
        "import neuronxcc.nki.language as nl\n"
        "float16_free = 1\n"
        "note = 'bfloat16 would be faster'\n"
        "def kernel(x):\n"
        "    lo = nl.bfloat16\n"
        "    t = nl.ndarray((128, 4), dtype=lo, buffer=nl.sbuf)\n"
        "    u = x.astype('float16')\n"
    )
    uses = precision.source_dtypes(src)
    assert sorted((u.dtype, u.line) for u in uses) == [("bfloat16", 6), ("float16", 8)]
    assert precision.source_dtypes("x = 1  # float16\ny = 'float16'\n") == []


def test_downgrade_is_relative_to_the_narrowest_type_the_problem_uses():
    def floor(inputs, baseline=()):
        return precision.floor([np.dtype(d) for d in inputs], [precision.DtypeUse(d, 1, "x") for d in baseline])

    uses = [precision.DtypeUse("bfloat16", 3, "sbuf tensor 't'"), precision.DtypeUse("float32", 4, "x")]
    assert [u.dtype for u in precision.downgrades(uses, floor([np.float32]))] == ["bfloat16"]
    # fp32 is enough for float64 inputs (engines compute in fp32)
    assert precision.downgrades([precision.DtypeUse("float32", 1, "x")], floor([np.float64])) == []
    # integer inputs and a baseline without floats impose nothing
    assert precision.downgrades(uses, floor([np.int32])) == []
    # bf16 inputs accept bf16 and fp32, but not fp8 ...
    bf16 = floor([ml_dtypes.bfloat16, np.float32])
    assert precision.downgrades(uses, bf16) == []
    fp8 = [precision.DtypeUse("float8_e4m3", 7, "output of nisa.nc_matmul")]
    assert precision.downgrades(fp8, bf16) == fp8 and bf16.why == "the reference's inputs"
    # ... unless the baseline computes in fp8 itself
    assert precision.downgrades(fp8, floor([ml_dtypes.bfloat16], ["float8_e4m3"])) == []
    # an fp32 problem whose baseline names bf16 accepts bf16
    assert floor([np.float32], ["bfloat16"]).why == "the baseline"


def test_trace_dtypes_reads_tensors_and_instructions():
    trace = SimpleNamespace(
        tensors={1: SimpleNamespace(dtype="float32", line=2, memory="hbm", name="x"),
                 2: SimpleNamespace(dtype="int32", line=3, memory="sbuf", name="idx")},
        instrs=[SimpleNamespace(dtype="bfloat16", in_dtypes=("float32",), line=9, op="nl.multiply"),
                SimpleNamespace(dtype="float32", in_dtypes=("float8_e4m3",), line=11, op="nl.add")])
    uses = {u.dtype: u for u in precision.trace_dtypes(trace)}
    assert set(uses) == {"float32", "bfloat16", "float8_e4m3"}
    assert uses["bfloat16"].line == 9 and uses["bfloat16"].what == "output of nl.multiply"
    assert uses["float8_e4m3"].what == "input of nl.add"
