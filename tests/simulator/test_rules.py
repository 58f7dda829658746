"""One negative test per hardware/language rule: the error's NKI code name, a message that
says what was wrong, and the kernel line that broke the rule."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest

from fitness.simulator import errors, run_kernel

HEADER = """\
import numpy as np
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.typing as nt

@nki.jit
def kernel(x):
    out = nl.ndarray((128, 512), dtype=np.float32, buffer=nl.shared_hbm)
"""


def fails(body: str, error: type, *fragments: str, x=None, signature: str = "x"):
    """Run a kernel whose body has one line marked `# <-` and expect `error` there."""
    body = textwrap.indent(textwrap.dedent(body), "    ")
    src = HEADER.replace("kernel(x)", f"kernel({signature})") + body + "\n    return out\n"
    line = next(i for i, text in enumerate(src.splitlines(), 1) if "# <-" in text)
    x = np.zeros((256, 512), np.float32) if x is None else x
    with pytest.raises(error) as info:
        run_kernel(src, [x], filename="rules_kernel.py")
    e = info.value
    assert isinstance(e, errors.NkiError)
    assert e.code == error.code
    assert (e.filename, e.line) == ("rules_kernel.py", line), str(e)
    msg = str(e)
    assert msg.startswith(f"rules_kernel.py:{line}: {error.code}: ")
    for frag in fragments:
        assert frag in msg, msg
    return e


def test_partition_dim_over_128():
    fails("t = nl.ndarray((256, 512), dtype=np.float32, buffer=nl.sbuf)  # <-",
          errors.PartitionLimitError, "number of partitions 256", "128")
    fails("t = nl.load(x)  # <-", errors.PartitionLimitError, "256")


def test_psum_tile_over_one_bank():
    e = fails("acc = nl.zeros((128, 1024), dtype=np.float32, buffer=nl.psum)  # <-",
              errors.PsumBankOverflowError, "4096 bytes per partition", "2048")
    assert e.code == "err_size_of_dimension_exceed_arch_limit"


def test_sbuf_tile_over_a_partition():
    fails("t = nl.ndarray((128, 50000), dtype=np.float32, buffer=nl.sbuf)  # <-",
          errors.SbufPartitionOverflowError, "200000 bytes per partition", str(176 * 1024))


def test_block_dims_larger_than_sbuf_are_fine():
    src = HEADER + textwrap.indent(textwrap.dedent("""
        big = nl.ndarray((1000, nl.par_dim(128), 512), dtype=np.float32, buffer=nl.sbuf)  # 256 MiB logical
        big[999, :, :] = nl.load(x[0:128, :])
        nl.store(out, value=big[999])
    """), "    ") + "    return out\n"
    x = np.ones((256, 512), np.float32)
    np.testing.assert_array_equal(run_kernel(src, [x]).outputs, x[:128])


def test_matmul_limits():
    fails("""
        a = nl.load(x[0:128, 0:256])
        b = nl.load(x[0:128, 0:512])
        r = nisa.nc_matmul(a, b)  # <-
        """, errors.DimensionLimitError, "'stationary[128, 256]'", "128")
    fails("""
        a = nl.load(x[0:128, 0:128])
        b = nl.ndarray((128, 1024), dtype=np.float32)
        r = nisa.nc_matmul(a, b)  # <-
        """, errors.DimensionLimitError, "'moving[128, 1024]'", "512")
    fails("""
        a = nl.load(x[0:128, 0:128])
        b = nl.load(x[0:64, 0:128])
        r = nisa.nc_matmul(a, b)  # <-
        """, errors.MatmulShapeError, "128", "64")


def test_matmul_memories():
    fails("""
        a = nl.zeros((128, 128), dtype=np.float32, buffer=nl.psum)
        b = nl.load(x[0:128, 0:128])
        r = nisa.nc_matmul(a, b)  # <-
        """, errors.UnsupportedMemoryError, "'stationary'", "'sbuf'", "'psum'")
    fails("""
        a = nl.load(x[0:128, 0:128])
        res = nl.ndarray((128, 128), dtype=np.float32, buffer=nl.sbuf)
        res[...] = nisa.nc_matmul(a, a)  # <-
        """, errors.UnsupportedMemoryError, "psum", "nisa.nc_matmul")


def test_load_and_store_memories():
    fails("""
        t = nl.load(x[0:128, :])
        u = nl.load(t)  # <-
        """, errors.UnsupportedMemoryError, "'src' of 'load'", "'hbm'", "'sbuf'")
    fails("""
        p = nl.ndarray((128, 512), dtype=np.float32, buffer=nl.psum)
        p[...] = nl.load(x[0:128, :])  # <-
        """, errors.UnsupportedMemoryError, "nl.load", "'sbuf'")
    fails("""
        p = nl.zeros((128, 512), dtype=np.float32, buffer=nl.psum)
        nl.store(out, value=p)  # <-
        """, errors.UnsupportedMemoryError, "'value' of 'store'", "psum")
    fails("""
        t = nl.load(x[0:128, :])
        nl.store(t, value=t)  # <-
        """, errors.UnsupportedMemoryError, "'dst' of 'store'")


def test_mixing_basic_and_advanced_indexing():
    fails("""
        t = nl.load(x[0:128, :])
        u = nl.exp(t[nl.arange(128)[:, None], :])  # <-
        """, errors.MixedIndexingError, "Mixing basic tensor indexing and advanced tensor indexing")


def test_one_dimensional_arange():
    fails("""
        t = nl.load(x[0:128, :])
        u = nl.exp(t[nl.arange(64), 0])  # <-
        """, errors.OneDimArangeError, "1d arange")


def test_out_of_bounds_access_and_masks():
    fails("""
        i = nl.arange(128)[:, None]
        t = nl.load(x[i + 200, nl.arange(512)[None, :]])  # <-
        """, errors.OutOfBoundsError, "dimension 0", "[200, 327]", "256")
    # the same access is legal when a mask excludes the rows past the end
    src = HEADER + textwrap.indent(textwrap.dedent("""
        i = nl.arange(128)[:, None]
        j = nl.arange(512)[None, :]
        t = nl.load(x[i + 200, j], mask=(i + 200 < 256))
        nl.store(out[i, j], value=t, mask=(i < 56))
    """), "    ") + "    return out\n"
    with pytest.raises(errors.OutputNotWrittenError):   # rows 56.. of `out` stay unwritten
        run_kernel(src, [np.ones((256, 512), np.float32)])


def test_affine_range_write_conflict():
    e = fails("""
        t = nl.ndarray((4, nl.par_dim(128), 512), dtype=np.float32, buffer=nl.sbuf)
        for i in nl.affine_range(4):
            t[0] = nl.load(x[0:128, :])  # <-
        """, errors.OutputDependencyError, "iterations 0 and 1", "'affine_range'" if False else "affine_range")
    assert "sequential_range" in str(e)


def test_affine_range_writes_that_are_allowed():
    src = HEADER + textwrap.indent(textwrap.dedent("""
        t = nl.ndarray((4, nl.par_dim(128), 512), dtype=np.float32, buffer=nl.sbuf)
        acc = nl.zeros((128, 512), dtype=np.float32, buffer=nl.sbuf)
        last = nl.ndarray((128, 512), dtype=np.float32, buffer=nl.sbuf)
        for i in nl.affine_range(4):
            t[i] = nl.load(x[0:128, :])          # distinct blocks per iteration
            acc[...] += t[i]                     # accumulation
            tmp = nl.ndarray((128, 512), dtype=np.float32, buffer=nl.sbuf)
            tmp[...] = t[i]                      # created inside the loop
        for i in nl.sequential_range(4):
            last[...] = t[i]                     # sequential loops may overwrite
        nl.store(out, value=nl.add(acc, last))
    """), "    ") + "    return out\n"
    x = np.ones((256, 512), np.float32)
    np.testing.assert_array_equal(run_kernel(src, [x]).outputs, np.full((128, 512), 5, np.float32))


def test_tensor_used_outside_its_loop():
    fails("""
        for i in nl.affine_range(2):
            t = nl.load(x[0:128, :])
        nl.store(out, value=t)  # <-
        """, errors.ScopeError, "outside of its parent scope")


def test_python_control_flow_on_values():
    fails("""
        t = nl.load(x[0:1, 0:1])
        if t:  # <-
            pass
        """, errors.DynamicControlFlowError, "dynamic control-flow")
    fails("""
        j = nl.arange(512)[None, :]
        if j > 3:  # <-
            pass
        """, errors.ArangeControlFlowError, "nl.arange", "mask")


def test_partition_mismatch_and_shapes():
    fails("""
        a = nl.load(x[0:128, :])
        b = nl.load(x[0:64, :])
        c = nisa.tensor_tensor(a, b, op=nl.add)  # <-
        """, errors.PartitionMismatchError, "data1[128, 512]", "data2[64, 512]")
    fails("""
        a = nl.load(x[0:128, :])
        small = nl.ndarray((128, 1), dtype=np.float32, buffer=nl.sbuf)
        small[...] = a  # <-
        """, errors.AssignShapeError, "[128, 1]", "[128, 512]")
    fails("""
        a = nl.load(x[0:128, :])
        b = nl.load(x[0:128, 0:256])
        c = nisa.tensor_tensor(a, b, op=nl.add)  # <-
        """, errors.ShapeMismatchError, "mismatched shapes")


def test_tiles_must_start_with_the_partition_dim():
    fails("""
        t = nl.ndarray((4, nl.par_dim(128), 512), dtype=np.float32, buffer=nl.sbuf)
        u = nl.exp(t)  # <-
        """, errors.TileInferenceError, "block dimensions [4]")


def test_immutable_parameters_and_outputs():
    fails("nl.store(x[0:128, :], value=nl.load(x[128:256, :]))  # <-",
          errors.ImmutableParameterError, "'x'", "mutable_tensor")
    fails("""
        for i in nl.affine_range(1):
            o2 = nl.ndarray((128, 512), dtype=np.float32, buffer=nl.shared_hbm)  # <-
        """, errors.SharedHbmScopeError, "top level")
    fails("h = nl.zeros((128, 512), dtype=np.float32, buffer=nl.hbm)  # <-", errors.HbmInitValueError)


def test_mutable_parameter_may_be_written_but_not_returned():
    """Writing an `nt.mutable_tensor` parameter is legal NKI; returning it as an output is not
    taken: one write anywhere in an input would otherwise pass it off as a computed result."""
    src = """
import numpy as np
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
import neuronxcc.nki.typing as nt

@nki.jit
def kernel(x: nt.mutable_tensor):
    out = nl.ndarray((128, 512), dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(x[0:128, :], value=nl.exp(nl.load(x[128:256, :])))
    nl.store(out, value=nl.load(x[0:128, :]))
    return RETURNED
"""
    x = np.random.default_rng(0).standard_normal((256, 512)).astype(np.float32)
    out = run_kernel(src.replace("RETURNED", "out"), [x.copy()]).outputs
    np.testing.assert_allclose(out, np.exp(x[128:]), rtol=2e-6)
    with pytest.raises(errors.HostOutputError, match="returned an input, 'x'"):
        run_kernel(src.replace("RETURNED", "x"), [x.copy()])


def test_output_never_written():
    src = HEADER + "    return out\n"
    with pytest.raises(errors.OutputNotWrittenError) as info:
        run_kernel(src, [np.zeros((256, 512), np.float32)], filename="k.py")
    assert "was never written" in str(info.value) and info.value.code == "err_tensor_output_not_written_to"
    src = HEADER + "    nl.store(out[0:100, :], value=nl.load(x[0:100, :]))\n    return out\n"
    with pytest.raises(errors.OutputNotWrittenError) as info:
        run_kernel(src, [np.zeros((256, 512), np.float32)])
    assert "14336 of 65536 elements never written (first at index (100, 0))" in str(info.value)


def test_activation_argument_types():
    fails("""
        a = nl.load(x[0:128, :])
        s = nisa.memset((128, 1), 1.0, dtype=np.float16)
        b = nisa.activation(op=nl.exp, data=a, scale=s)  # <-
        """, errors.ActivationScaleTypeError, "float32", "float16")
    fails("""
        a = nl.load(x[0:128, :])
        s = nisa.memset((128, 4), 1.0, dtype=np.float32)
        b = nisa.activation(op=nl.exp, data=a, scale=s)  # <-
        """, errors.ActivationScaleShapeError, "[128, 1]", "[128, 4]")
    fails("""
        a = nl.load(x[0:128, :])
        s = nisa.memset((128, 1), 1, dtype=np.int32)
        b = nisa.activation(op=nl.exp, data=a, bias=s)  # <-
        """, errors.ActivationBiasTypeError, "int32")


def test_partition_striding_is_rejected():
    fails("""
        t = nl.load(x[0:128, :])
        u = nl.exp(t[2 * nl.arange(64)[:, None], nl.arange(512)[None, :]])  # <-
        """, errors.IndexNotSupportedError, "partition")


def test_unsupported_api_names_are_named():
    e = fails("y = nl.does_not_exist(x)  # <-", errors.UnsupportedApiError,
              "'neuronxcc.nki.language.does_not_exist'")
    assert e.code == "emu_unsupported_api"


def test_a_tensor_created_in_an_if_or_else_block_is_out_of_scope_after_it():
    """neuronx-cc's scope rule for control blocks: the body of an if/else is a scope, whatever
    its condition (a tensor shadowed inside one is a new tensor of that scope)."""
    words = ("inside an if/else block", "create it before the if statement")
    for first in ("if", "else"):
        fails(f"""
            for k in nl.affine_range(2):
                if k {'<' if first == 'if' else '>'} 5:
                    t = nl.load(x[0:128, :])
                else:
                    t = nl.load(x[128:256, :])
                nl.store(out, value=t)  # <-
            """, errors.ScopeError, *words)
    fails("""
        t = nl.load(x[0:128, :])
        if t.shape[0] == 128:
            t = nl.exp(t)
        elif t.shape[0] == 64:
            t = nl.log(t)
        nl.store(out, value=t)  # <-
        """, errors.ScopeError, *words)
    fails("""
        if x.shape[0] == 256:
            o2 = nl.ndarray((128, 512), dtype=np.float32, buffer=nl.shared_hbm)  # <-
        """, errors.SharedHbmScopeError, "top level")


def test_a_tensor_assigned_into_from_an_if_block_stays_usable():
    src = HEADER + """
    t = nl.ndarray((128, 512), dtype=np.float32, buffer=nl.sbuf)
    for k in nl.affine_range(1):
        if k == 0:
            t[...] = nl.load(x[0:128, :])
            u = nl.exp(t)
            t[...] = nl.add(u, 1.0)
        else:
            t[...] = nl.load(x[128:256, :])
    nl.store(out, value=t)
    return out
"""
    x = np.random.default_rng(0).standard_normal((256, 512)).astype(np.float32)
    np.testing.assert_allclose(run_kernel(src, [x]).outputs, np.exp(x[:128]) + 1, rtol=2e-6)
