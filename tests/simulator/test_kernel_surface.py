"""What a kernel can reach: only its own traced instructions produce outputs, and the objects
it is handed expose the NKI API, not the emulator's state."""

from __future__ import annotations

import numpy as np
import pytest

from fitness.simulator import errors, install_neuronxcc, run_kernel, simulate

HEADER = """
import numpy as np
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
"""


def _run(body: str):
    x = np.arange(128 * 4, dtype=np.float32).reshape(128, 4)
    return run_kernel(HEADER + body, [x])


@pytest.mark.parametrize("body,words", [
    ("@nki.jit\ndef kernel(x):\n    return np.ones((128, 4), np.float32)\n", "returned a ndarray"),
    ("@nki.jit\ndef kernel(x):\n    return 1.0\n", "returned a float"),
    ("@nki.jit\ndef kernel(x):\n    return nl.shared_constant(np.ones((128, 4), np.float32))\n", "a constant"),
    ("@nki.jit\ndef kernel(x):\n    return x\n", "an input, 'x'"),
], ids=["numpy", "number", "constant", "unwritten_input"])
def test_outputs_no_instruction_wrote_are_refused(body, words):
    with pytest.raises(errors.HostOutputError, match=words):
        _run(body)


def test_a_written_output_is_returned():
    run = _run("@nki.jit\ndef kernel(x):\n    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)\n"
               "    nl.store(out, value=nl.add(nl.load(x), 1.0))\n    return out\n")
    np.testing.assert_array_equal(run.outputs, np.arange(512, dtype=np.float32).reshape(128, 4) + 1)


def test_no_launch_from_inside_a_running_kernel():
    install_neuronxcc()
    import neuronxcc.nki.language as nl

    def inner(x):
        return x

    def kernel(x):
        return simulate(inner, [np.zeros(4)]).outputs

    with pytest.raises(errors.NestedLaunchError):
        simulate(kernel, [np.zeros((128, 4), np.float32)])
    assert nl is not None


# --- the objects a kernel is handed -----------------------------------------------------------

MUTABLE = (dict, list, set, bytearray)


def _leaks(obj, path: str, depth: int, seen: set[int]) -> list[str]:
    """Public attributes of `obj` (and, recursively, of emulator objects behind them) that hold
    mutable state or an object of the emulator's internals."""
    if depth < 0 or id(obj) in seen:
        return []
    seen.add(id(obj))
    found = []
    for name in dir(obj):
        if name.startswith("_"):
            continue
        try:
            value = getattr(obj, name)
        except Exception:   # noqa: BLE001 (an attribute that raises is not reachable state)
            continue
        if callable(value) and not isinstance(value, type):
            continue        # methods and functions are the API
        where = f"{path}.{name}"
        if isinstance(value, MUTABLE) or (isinstance(value, np.ndarray) and value.flags.writeable):
            found.append(f"{where} is a writable {type(value).__name__}")
        elif type(value).__module__.startswith("fitness.simulator") and type(value).__name__ in INTERNAL:
            found.append(f"{where} is the emulator's {type(value).__name__}")
        elif type(value).__module__.startswith("fitness.simulator"):
            found += _leaks(value, where, depth - 1, seen)
    return found


INTERNAL = {"LoopFrame", "Machine", "Buffer", "Struct", "Trace", "Fresh", "Coverage"}


def test_kernel_visible_objects_expose_no_emulator_state():
    install_neuronxcc()
    import neuronxcc.nki as nki
    import neuronxcc.nki.isa as nisa
    import neuronxcc.nki.language as nl
    import neuronxcc.nki.typing as nt

    seen: dict[str, object] = {}

    @nki.jit
    def kernel(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        i_p = nl.arange(128)[:, None]
        i_f = nl.arange(4)[None, :]
        tile = nl.load(x[i_p, i_f])
        seen.update(arange=nl.arange(128), i_p=i_p, i_f=i_f, tile=tile, view=x[i_p, i_f],
                    mgrid=nl.mgrid[0:128, 0:4], mask=(i_p < 64), nonaffine=i_p // 2, range=nl.affine_range(2))
        for i in nl.affine_range(1):
            seen["loop_index"] = i
        nl.store(out[i_p, i_f], value=tile)
        return out

    kernel(np.zeros((128, 4), np.float32))
    seen.update(jit=kernel, annotation=nt.tensor, engine=nisa.vector_engine, nl=nl, nisa=nisa, nki=nki)
    leaks = [leak for name, obj in seen.items() for leak in _leaks(obj, name, 3, set())]
    assert leaks == []
