"""Fixtures of the evaluation tests: the fake Neuron toolchain (fake_neuron/)."""

from __future__ import annotations

import sys

import fake_neuron
import pytest


@pytest.fixture
def fake_toolchain(tmp_path, monkeypatch):
    """make(**versions) -> an active fake toolchain; NKI modules it imported are dropped after."""
    before = {n for n in sys.modules if n.split(".")[0] in fake_neuron.ROOTS}

    def make(**versions):
        chain = fake_neuron.make(tmp_path / "toolchain", **versions)
        fake_neuron.activate(chain, monkeypatch)
        return chain

    yield make
    for name in [n for n in sys.modules if n.split(".")[0] in fake_neuron.ROOTS and n not in before]:
        del sys.modules[name]
    sys.modules.pop("kernel", None)
