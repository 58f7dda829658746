"""The construct table (fitness/simulator/constructs.py, docs/nki-constructs.md) agrees with the
emulator's modules, and what the device refuses is refused with the documented message."""

from __future__ import annotations

import numpy as np
import pytest

from fitness.simulator import constructs, errors, run_kernel
from fitness.simulator.emulation import APPROXIMATE, EXACT, REFUSED, STATUSES, UNSUPPORTED


def test_the_page_is_the_table_the_code_gives():
    assert constructs.PAGE.read_text() == constructs.markdown(), (
        "docs/nki-constructs.md is stale: python -m fitness.simulator.constructs --write")


def test_every_row_has_a_status_and_notes_name_documented_names():
    table = constructs.rows()
    assert {r.status for r in table} <= set(STATUSES)
    documented = {(r.dialect, r.name) for r in table}
    assert set(constructs.NOTES) <= documented
    assert all(r.note for r in table if r.status in (APPROXIMATE, REFUSED, UNSUPPORTED))
    # the figures are counts of the rows
    cov = constructs.coverage(table)
    for dialect in constructs.DOCUMENTED:
        runs, total = cov[(dialect, "all")]
        assert total == sum(len(v) for v in constructs.DOCUMENTED[dialect].values())
        assert runs == sum(1 for r in table if r.dialect == dialect and r.status in (EXACT, APPROXIMATE))


def test_a_missing_name_is_unsupported_and_a_present_one_is_not():
    assert constructs.status("current", "nki.language.ndarray").status == EXACT
    assert constructs.status("current", "nki.language.no_such_thing").status == UNSUPPORTED
    unsupported, approximate = constructs.lookup("current", ["nki.language.ndarray", "nki.language.no_such_thing"])
    assert unsupported == ["nki.language.no_such_thing"] and approximate == []


CURRENT = '''
import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def kernel(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    {BODY}
    nl.store(out, value=y)
    return out
'''


@pytest.mark.parametrize("body, message", [
    ("y = nl.divide(t, t)", "nki.language.divide is not supported: division is not available as a hardware "
                            "instruction; as a workaround, multiply by the reciprocal"),
    ("y = nl.power(t, 2.0)", "nki.language.power does not support scalar exponents"),
    ("p = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.psum)\n    nisa.nc_matmul(dst=p, stationary=t, "
     "moving=t)\n    y = nl.copy(p)", "does not support cross-buffer copies"),
])
def test_what_the_device_refuses_is_refused_with_its_message(body, message):
    x = np.ones((128, 128), np.float32)
    with pytest.raises(errors.DeviceUnsupportedError, match="err_unsupported_on_device") as info:
        run_kernel(CURRENT.replace("{BODY}", body), [x])
    assert message in str(info.value)


@pytest.mark.parametrize("body", ["y = nl.power(t, t)", "y = nl.copy(t)",
                                  "y = nl.multiply(t, nl.reciprocal(t))"])
def test_the_documented_workarounds_run(body):
    x = np.full((128, 64), 2.0, np.float32)
    run = run_kernel(CURRENT.replace("{BODY}", body), [x])
    expected = {"power": 4.0, "copy": 2.0, "reciprocal": 1.0}
    assert np.allclose(run.outputs, next(v for k, v in expected.items() if k in body))
