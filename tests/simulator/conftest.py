"""`run_kernel` installs the emulator as `neuronxcc` (and `nki`) in `sys.modules`; every test here puts
`sys.modules` back as it found it, so tests elsewhere see the process they expect."""

from __future__ import annotations

import sys

import pytest


@pytest.fixture(autouse=True)
def _restore_neuronxcc_modules():
    def ours(k: str) -> bool:
        return k.split(".")[0] in ("neuronxcc", "nki")
    saved = {k: v for k, v in sys.modules.items() if ours(k)}
    yield
    for k in [k for k in sys.modules if ours(k)]:
        del sys.modules[k]
    sys.modules.update(saved)
