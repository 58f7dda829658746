"""model-check's series format: versions of one kernel file measured at several shapes, judged
by their consecutive pairs (ordered right, speedup within 15%) and Spearman per shape."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from fitness.simulator.perf.check import WITHIN, load_cases, model_check, series_pairs

KERNELS = '''import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


def _scale(x, out, passes):
    for i in nl.affine_range(x.shape[1] // 512):
        t = nl.multiply(nl.load(x[:, i * 512:(i + 1) * 512]), 1.5)
        # v1: three more passes of the same vector work
        t = nl.multiply(nl.multiply(nl.multiply(t, 1.0), 1.0), 1.0) if passes > 1 else t
        nl.store(out[:, i * 512:(i + 1) * 512], value=t)


@nki.jit
def scale_v1(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    _scale(x, out, 4)
    return out


@nki.jit
def scale_v2(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    _scale(x, out, 1)
    return out
'''

REFERENCE = '''import numpy as np

S = 512


def get_inputs():
    return [np.random.random_sample([128, S]).astype(np.float32)]


def forward(x):
    return x * 1.5
'''


def _series(tmp_path: Path, table: dict, **extra) -> Path:
    (tmp_path / "scale_kernels.py").write_text(KERNELS)
    (tmp_path / "reference.py").write_text(REFERENCE)
    path = tmp_path / "measured.json"
    path.write_text(json.dumps({"unit": "us", "seqlens": [512, 2048], "p50_us": table, **extra}))
    return path


def test_a_series_file_lists_its_measured_cells_by_version(tmp_path):
    path = _series(tmp_path, {"v1": {"512": 20, "2048": 60}, "v2": {"512": 10, "2048": None}})
    cases = load_cases(path)
    assert [c.name for c in cases] == ["scale_v1@S512", "scale_v1@S2048", "scale_v2@S512"]
    assert [c.function for c in cases] == ["scale_v1", "scale_v1", "scale_v2"]
    assert cases[0].measured == {"latency": 0.020} and cases[1].shape == {"S": 2048}
    assert [c.version for c in cases] == [0, 0, 1]


def test_model_check_judges_consecutive_versions_at_each_shape(tmp_path):
    path = _series(tmp_path, {"v1": {"512": 40, "2048": 160}, "v2": {"512": 10, "2048": 40}})
    result = model_check(path)
    pairs = result["pairs"]
    assert [(p["first"], p["second"]) for p in pairs] == [("scale_v1@S512", "scale_v2@S512"),
                                                          ("scale_v1@S2048", "scale_v2@S2048")]
    rows = {r["name"]: r for r in result["cases"]}
    for p in pairs:
        pred = rows[p["first"]]["predicted_ms"] / rows[p["second"]]["predicted_ms"]
        assert p["predicted_speedup"] == pytest.approx(pred) and p["measured_speedup"] == pytest.approx(4.0)
        assert p["within"] == (abs(pred / 4.0 - 1) <= WITHIN)
    s = result["summary"]
    # v2 does a quarter of v1's vector work: the model orders the pair right at both shapes
    assert s["pairs_ranked_right"] == 2 and set(s["spearman_per_shape"]) == {"S512", "S2048"}
    assert s["figures"] == "leave-family-out"   # a family the shipped fit never saw


def test_consecutive_pairs_skip_versions_not_measured_at_a_shape():
    rows = [{"name": f"k_{v}@S1", "problem": "k", "shape": "S1", "version": i, "measured_ms": m, "predicted_ms": p}
            for i, (v, m, p) in enumerate([("v1", 4.0, 4.0), ("v3", 2.0, 1.0)])]
    (pair,) = series_pairs(rows)
    assert pair["measured_speedup"] == 2.0 and pair["predicted_speedup"] == 4.0 and not pair["within"]


@pytest.mark.parametrize("table, extra, needle", [
    ({"v9": {"512": 1}}, {}, "has 0 functions named *_v9"),
    ({"v1": {"512": None}}, {}, "without any measured cell"),
    ({"v1": {"512": 1}}, {"unit": "ms"}, "measured in microseconds"),
    ({"v1": {"512": 1}}, {"kernel": "missing.py"}, "missing.py, which is not beside it"),
])
def test_a_bad_series_file_is_one_clear_error(tmp_path, table, extra, needle):
    path = _series(tmp_path, table, **extra)
    proc = subprocess.run([sys.executable, "-m", "accelopt_evo", "model-check", "--measurements", str(path)],
                          capture_output=True, text=True)
    assert proc.returncode != 0
    assert needle in proc.stderr and "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
