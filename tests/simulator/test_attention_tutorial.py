"""The NKI samples' attention forward tutorial (../shared/trn1-variants/flash-attention, legacy
dialect), run unmodified: attn_fwd_v3 .. v11 match the NumPy reference at the kernels' smallest
length, S = 512. v6-v11 use reduce_cmd, tensor_scalar_reduce, direct allocation, the
skip-middle-end decorator, no_reorder directives and @nki.baremetal. The kernels are run on the
emulator directly (the static policy, which refuses v9's and v10's module-level class, is not
applied here)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from fitness.correctness.gate import check_outputs
from fitness.sandbox.entry import select
from fitness.simulator import run_kernel
from nkibench.problem import low_precision_tolerance

FOLDER = Path(__file__).resolve().parents[2].parent / "shared" / "trn1-variants" / "flash-attention"
KERNELS = FOLDER / "attention_kernels.py"
VERSIONS = [f"v{n}" for n in range(3, 12)]


def _reference(S: int):
    if not KERNELS.is_file():
        pytest.skip(f"{FOLDER} is absent")
    spec = importlib.util.spec_from_file_location("attention_reference", FOLDER / "reference.py")
    ref = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ref)
    ref.S = S
    return ref


@pytest.fixture(scope="module")
def case():
    ref = _reference(512)
    np.random.seed(0)
    inputs = ref.get_inputs()
    return KERNELS.read_text(), inputs, ref.forward(*inputs)


@pytest.mark.parametrize("version", VERSIONS)
def test_attention_version_matches_the_reference(case, version):
    source, inputs, expected = case
    run = run_kernel(select(source, f"attn_fwd_{version}"), inputs, filename=str(KERNELS))
    tolerance = low_precision_tolerance(np.dtype(ml_dtypes.bfloat16), 512)
    assert check_outputs([run.outputs], [expected], tolerance, "S=512") is None
    if version in ("v9", "v10"):
        assert run.trace.options == ("skip_middle_end_transformations",) and len(run.trace.placements) == 20
    if version in ("v10", "v11"):
        assert list(run.trace.loop_directives.values()) == [("no_reorder",)]

