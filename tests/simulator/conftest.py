"""`run_kernel` installs the emulator as `neuronxcc` in `sys.modules`; every test here puts
`sys.modules` back as it found it, so tests elsewhere see the process they expect."""

from __future__ import annotations

import sys

import pytest


@pytest.fixture(autouse=True)
def _restore_neuronxcc_modules():
    saved = {k: v for k, v in sys.modules.items() if k == "neuronxcc" or k.startswith("neuronxcc.")}
    yield
    for k in [k for k in sys.modules if k == "neuronxcc" or k.startswith("neuronxcc.")]:
        del sys.modules[k]
    sys.modules.update(saved)
