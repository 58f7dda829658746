"""Consistency checks of the uncalibrated trn2/trn3 model (no public per-kernel profiles
exist to calibrate against): the SDK tutorial's orderings, the same computation in both
dialects, and trn3 against trn2. Figures are printed by `pytest -s` and quoted in the perf
README."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from fitness.sandbox.entry import select
from fitness.simulator import placeholders, run_kernel
from fitness.simulator.perf import estimate, hardware
from fitness.simulator.perf.model import prepare
from fitness.simulator.perf.params import for_target
from nkibench.registry import BASELINES, load, make_spec

SHARED = Path(__file__).resolve().parents[2].parent / "shared"
EXAMPLES = SHARED / "nki-examples"
VARIANTS = SHARED / "trn1-variants"
MATMUL = "matrix_multiplication/matrix_multiplication_nki_kernels.py"
MAMBA = "fused_mamba/mamba_nki_kernels.py"
# the tutorial's order, slowest first (nki_matmul_basic_ takes one fixed 64x128x512 shape only)
MATMUL_VERSIONS = ("tiled", "hoist_load", "block_free_dimension", "fully_optimized")
BAND = (0.9, 1.1)   # current / legacy latency of one computation on trn2, when no legacy-only effect applies

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not EXAMPLES.is_dir() or not VARIANTS.is_dir(),
                                 reason="../shared/nki-examples or ../shared/trn1-variants absent")]


@functools.lru_cache(maxsize=None)
def _trace(path: str, function: str, problem: str):
    """Shape-only trace of `function` of a file, on the inputs of `problem` at its paper shape."""
    source = (SHARED / path).read_text()    # an absolute path stays itself
    p = load(make_spec(problem, "paper"))
    inputs = p.make_inputs(0)
    if problem == "fused_mamba" and "trn1-variants" in path:   # legacy variants: no batch dimension
        d, u, a, b, c = inputs
        args = [d[0], u[0], a, b[0], c[0]]
    elif problem == "matmul_lhst" and path == str(BASELINES / "matmul.py"):
        args = inputs                                           # the legacy baseline takes lhs, rhs
    else:
        args = p.to_kernel_inputs(inputs)
    return run_kernel(select(source, function), placeholders(args), kernel_name=function, shape_only=True).trace


def _ms(trace, target: str = "trn2") -> float:
    return estimate(trace, target).latency_ms


def _matmul(version: str):
    return _trace(f"nki-examples/{MATMUL}", f"nki_matmul_{version}_", "matmul_lhst")


def _mamba(version: int, dialect: str):
    if dialect == "current":
        return _trace(f"nki-examples/{MAMBA}", f"mamba_v{version}", "fused_mamba")
    return _trace(f"trn1-variants/mamba_v{version}.py", "kernel", "fused_mamba")


def test_matmul_tutorial_versions_get_faster_in_the_tutorials_order_on_trn2():
    ms = [_ms(_matmul(v)) for v in MATMUL_VERSIONS]
    print("matmul tutorial on trn2 (ms):", dict(zip(MATMUL_VERSIONS, ms)))
    assert all(a > b for a, b in zip(ms, ms[1:]))


@pytest.mark.xfail(strict=True, reason="blocked on a trn2 measurement of these kernels: fused Mamba "
                   "(batch 1, M=2048) is estimated v1 0.384, v2 0.384, v3 0.455 ms in the current dialect, where "
                   "v3's 512 chunks only add instructions (its broadcasts are evicted and its state copies run as "
                   "written; no source says how the NKI compiler lowers them); the legacy variants hold (0.382, "
                   "0.322, 0.317 ms)")
def test_fused_mamba_versions_get_faster_v1_v2_v3_on_trn2():
    ms = [_ms(_mamba(v, "current")) for v in (1, 2, 3)]
    print("fused mamba (current) on trn2 (ms):", ms)
    assert ms[0] > ms[1] > ms[2]


PAIRS = [(f"mamba v{v}", functools.partial(_mamba, v, "legacy"), functools.partial(_mamba, v, "current"))
         for v in (1, 2, 3)]
PAIRS.append(("matmul (legacy baseline vs block_free_dimension)",
              lambda: _trace(str(BASELINES / "matmul.py"), "kernel", "matmul_lhst"),
              lambda: _matmul("block_free_dimension")))


@pytest.mark.parametrize("name,legacy,current", PAIRS, ids=[p[0] for p in PAIRS])
def test_same_computation_in_both_dialects_on_trn2_is_within_the_band_or_explained(name, legacy, current):
    """Within BAND, unless the gap is legacy-only work removal: neuronx-cc's modelled effects
    (fusion, broadcasts read from PSUM, CSE/hoisting) fire on the legacy trace, while the NKI
    compiler runs the current kernel as written."""
    lt, ct = legacy(), current()
    ratio = _ms(ct) / _ms(lt)
    report = prepare(lt, hardware("trn2"), for_target("trn2")).report
    removed = report.fused_pairs + report.psum_broadcasts + report.removed_duplicates
    print(f"{name}: legacy {_ms(lt):.4f} ms, current {_ms(ct):.4f} ms, ratio {ratio:.3f}; legacy-only "
          f"effects: {removed}")
    assert BAND[0] <= ratio <= BAND[1] or (ratio > BAND[1] and removed > 0)


TRN3_CASES = [(f"matmul {v}", functools.partial(_matmul, v)) for v in MATMUL_VERSIONS]
TRN3_CASES += [(f"mamba v{v} {d}", functools.partial(_mamba, v, d)) for v in (1, 2, 3) for d in ("legacy", "current")]


@pytest.mark.parametrize("name,trace", TRN3_CASES, ids=[c[0] for c in TRN3_CASES])
def test_trn3_is_not_slower_than_trn2(name, trace):
    """Every documented trn3 rate is at least trn2's except plain fp8 matmuls (none here)."""
    t = trace()
    assert _ms(t, "trn3") <= _ms(t, "trn2")
