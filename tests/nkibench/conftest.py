"""Fixtures of the nkibench tests: synthetic suite folders in the official layout."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

# A reference module in the official layout, written for these tests.
SCALE_REFERENCE = """
import numpy as np

M = 4
N = 8

def get_inputs():
    return [np.random.normal(size=(M, N)).astype(np.float32)]

def forward(x):
    return 2 * x

def transform_to_nki_inputs(inputs):
    return [np.reshape(inputs[0], (M * N,))]

def transform_nki_outputs(k_res, ref):
    return (np.reshape(k_res, ref.shape),)
"""


def _make_suite(root: Path, name: str = "scale", reference: str = SCALE_REFERENCE, *, seed: bool = False,
               values: dict | None = None) -> Path:
    """A one-problem suite folder; `seed` adds the optional seed spec entry."""
    (root / "reference").mkdir(parents=True)
    (root / "kernels").mkdir()
    (root / "reference" / f"{name}_numpy.py").write_text(reference)
    (root / "kernels" / f"{name}_0.py").write_text("# a kernel file\n")
    entry: dict = {"cases": {"0": {"values": values or {"M": 4, "N": 8}, "impls": [
        {"task": f"./reference/{name}_numpy.py", "kernel": f"./kernels/{name}_0.py"}]}}}
    if seed:
        entry["seed"] = f"./seeds/{name}.yaml"
    (root / "summary.json").write_text(json.dumps({name: entry}))
    return root


@pytest.fixture
def make_suite():
    """`make_suite(root, name=..., reference=..., seed=False, values=None) -> Path`."""
    return _make_suite
