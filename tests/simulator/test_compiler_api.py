"""The legacy kernel decorators and loop directives: `@nki.compiler.skip_middle_end_transformations`,
`@nki.jit(additional_compile_opt=...)`, `@nki.baremetal(...)` on the kernel itself, and
`nl.sequential_range(n, directives=nki.compiler.no_reorder())`: what they record in the trace
for the performance model, and what stays refused (a kernel launching another)."""

from __future__ import annotations

import numpy as np
import pytest

from fitness.simulator import errors, run_kernel

from .helpers import rand

HEADER = '''
import numpy as np
from neuronxcc import nki
import neuronxcc.nki.language as nl
import neuronxcc.nki.isa as nisa
'''

BODY = '''
def kernel(x):
    out = nl.ndarray((2, 128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    for i in nl.sequential_range(2, directives=nki.compiler.no_reorder()):
        nl.store(out[i], value=nl.exp(nl.load(x[i])))
    for i in nl.affine_range(2, directives=[nki.compiler.no_reorder()]):
        nl.store(out[i], value=nl.exp(nl.load(x[i])))
    return out
'''

X = rand(2, 128, 64, seed=31)


@pytest.mark.parametrize("decorators", [
    "@nki.compiler.skip_middle_end_transformations\n@nki.jit",
    "@nki.jit\n@nki.compiler.skip_middle_end_transformations",
    "@nki.compiler.skip_middle_end_transformations()\n@nki.jit(additional_compile_opt='--internal-skip-backend-"
    "allocation-opt-nki --disable-internal-io-dge')",
    "@nki.compiler.skip_middle_end_transformations\n@nki.baremetal(additional_compile_opt='-O1', "
    "save_neff_name='file.neff', save_trace_name='profile.ntff')",
])
def test_skipping_the_middle_end_is_recorded_whatever_the_decorators(decorators):
    r = run_kernel(HEADER + decorators + BODY, [X])
    np.testing.assert_allclose(r.outputs, np.exp(X), rtol=1e-6)
    assert r.trace.options == ("skip_middle_end_transformations",)


def test_without_decorators_nothing_is_recorded():
    r = run_kernel(HEADER + "@nki.jit" + BODY, [X])
    assert r.trace.options == ()
    no_reorder = sorted(r.trace.loop_directives)
    assert [r.trace.loops[i].kind for i in no_reorder] == ["sequential", "affine"]
    assert set(r.trace.loop_directives.values()) == {("no_reorder",)}


def test_a_baremetal_kernel_runs_and_launching_one_inside_a_kernel_stays_refused():
    outer = HEADER + '''
@nki.baremetal(save_neff_name="file.neff")
def inner(x):
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(out, value=nl.exp(nl.load(x)))
    return out


@nki.jit
def kernel(x):
    return inner(x)
'''
    x = X[0]
    np.testing.assert_allclose(run_kernel(outer, [x], kernel_name="inner").outputs, np.exp(x), rtol=1e-6)
    with pytest.raises(errors.NestedLaunchError, match="cannot launch another kernel"):
        run_kernel(outer, [x])


@pytest.mark.parametrize("source, error, message", [
    ("@nki.jit(additional_compile_opt=3)", errors.OperandTypeError, "must be a string of compiler flags"),
    ("@nki.jit\n@nki.compiler.skip_middle_end_transformations(3)", errors.OperandTypeError,
     "decorates a kernel function"),
    ("@nki.jit", errors.OperandTypeError, "'directives' of nl.sequential_range must be loop directives"),
])
def test_misused_decorators_and_directives_are_refused(source, error, message):
    body = BODY.replace("directives=nki.compiler.no_reorder()", "directives=3") if "directives" in message else BODY
    with pytest.raises(error, match=message):
        run_kernel(HEADER + source + body, [X])


def test_undocumented_or_unimplemented_compiler_names_are_unsupported():
    source = HEADER + "@nki.jit" + BODY.replace("nki.compiler.no_reorder()", "nki.compiler.multi_buffer(2)")
    with pytest.raises(errors.UnsupportedApiError, match="'neuronxcc.nki.compiler.multi_buffer' is not supported"):
        run_kernel(source, [X])
