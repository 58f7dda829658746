"""Unmodified NKI kernel files import `neuronxcc.nki...` and run on the emulator."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import numpy as np
import pytest

import fitness.simulator as sim
from fitness.simulator import errors, install_neuronxcc, run_kernel

KERNEL = '''
import numpy as np
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
import neuronxcc.nki.typing as nt
import neuronxcc.nki.isa as nisa
from neuronxcc.nki import trace
from neuronxcc.nki.language import par_dim

@nki.jit
def kernel(v1, scale=2.0):
    import numpy as np
    import neuronxcc.nki as nki
    import neuronxcc.nki.language as nl
    import neuronxcc.nki.isa as nisa
    from neuronxcc.nki.language import par_dim
    v2 = nl.ndarray((128, 256), dtype=np.float32, buffer=nl.shared_hbm)
    v3 = nl.ndarray((2, par_dim(128), 128), dtype=np.float32, name='x_local', buffer=nl.sbuf)
    for i0 in nl.affine_range(2):
        v3[i0, nl.arange(128)[:, None], nl.arange(128)[None, :]] = nl.load(
            v1[nl.arange(128)[:, None], 128 * i0 + nl.arange(128)[None, :]], dtype=np.float32, mask=None)
        nl.store(v2[nl.arange(128)[:, None], 128 * i0 + nl.arange(128)[None, :]],
                 value=nisa.tensor_scalar(data=v3[i0, nl.arange(128)[:, None], nl.arange(128)[None, :]],
                                          op0=nl.multiply, operand0=scale, engine=nki.isa.unknown_engine),
                 mask=None)
        ' end loop i0 '
    return v2
'''


def test_kernel_file_runs_unmodified():
    x = np.random.default_rng(0).standard_normal((128, 256)).astype(np.float32)
    r = run_kernel(KERNEL, [x], kwargs={"scale": 3.0})
    np.testing.assert_allclose(r.outputs, 3 * x, rtol=1e-6)


def test_install_is_idempotent_and_process_local():
    install_neuronxcc()
    first = sys.modules["neuronxcc.nki.language"]
    install_neuronxcc()
    assert sys.modules["neuronxcc.nki.language"] is first
    import neuronxcc.nki.isa as nisa  # noqa: F401  (resolves through sys.modules)
    from neuronxcc import nki
    assert nki.language is first and callable(nki.jit) and callable(nki.simulate_kernel)
    from neuronxcc.nki import trace  # noqa: F401
    from neuronxcc.nki.language import par_dim  # noqa: F401
    assert importlib.util.find_spec("neuronxcc") is not None     # found in sys.modules only
    package_root = Path(sim.__file__).resolve().parents[2]
    assert not (package_root / "neuronxcc").exists()


def test_jit_kernel_called_directly_and_nested():
    install_neuronxcc()
    import neuronxcc.nki.language as nl
    from neuronxcc import nki

    @nki.jit
    def double(t):   # a helper kernel, called from inside another kernel
        return nl.add(t, t)

    @nki.jit(mode="simulation")
    def kernel(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=double(nl.load(x)))
        return out

    x = np.arange(128 * 4, dtype=np.float32).reshape(128, 4)
    np.testing.assert_array_equal(kernel(x), 2 * x)
    np.testing.assert_array_equal(nki.simulate_kernel(kernel, x), 2 * x)
    np.testing.assert_array_equal(nki.baremetal(kernel, additional_compile_opt="--x")(x), 2 * x)


def test_unsupported_names_raise_clearly():
    install_neuronxcc()
    import neuronxcc.nki.isa as nisa
    with pytest.raises(errors.UnsupportedApiError, match="'neuronxcc.nki.isa.builtin_custom_op' is not supported"):
        _ = nisa.builtin_custom_op
    with pytest.raises(AttributeError):
        _ = nisa.__wrapped__   # dunder lookups stay ordinary AttributeErrors


def test_nki_calls_outside_a_kernel():
    install_neuronxcc()
    import neuronxcc.nki.language as nl
    with pytest.raises(errors.ApiOutsideKernelError, match="outside of NKI kernels"):
        nl.ndarray((128, 4), dtype=np.float32)
    assert list(nl.affine_range(3)) == [0, 1, 2]     # loops are plain ranges outside kernels


def test_kernel_source_errors_carry_file_and_line():
    src = "import neuronxcc.nki.language as nl\ndef kernel(x):\n    return nl.load(x[0:300, :])\n"
    with pytest.raises(errors.PartitionLimitError) as info:
        run_kernel(src, [np.zeros((300, 4), np.float32)], filename="my_kernel.py")
    assert str(info.value).startswith("my_kernel.py:3: err_num_partition_exceed_arch_limit:")
    with pytest.raises(NameError, match="no kernel function named 'main'"):
        run_kernel(src, [np.zeros((4, 4), np.float32)], kernel_name="main")
    with pytest.raises(TypeError):       # ordinary Python errors in kernels propagate unchanged
        run_kernel("def kernel(x):\n    return len(3)\n", [np.zeros((4, 4), np.float32)])


def test_float64_inputs_are_rejected():
    with pytest.raises(errors.UnsupportedDtypeError, match="float64"):
        run_kernel("def kernel(x):\n    return x\n", [np.zeros((4, 4))])


def test_keyword_array_arguments_become_inputs():
    src = ("import neuronxcc.nki.language as nl\n"
           "def kernel(x, *, y):\n"
           "    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)\n"
           "    nl.store(out, value=nl.add(nl.load(x), nl.load(y)))\n"
           "    return out\n")
    x = np.ones((4, 8), np.float32)
    np.testing.assert_array_equal(run_kernel(src, [x], kwargs={"y": 2 * x}).outputs, 3 * x)
