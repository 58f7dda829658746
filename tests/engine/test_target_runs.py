"""`run --target trn2` on current-dialect baselines, end to end at small shapes, with figures
labelled uncalibrated; `--target trn1` keeps the legacy baselines and calibrated labels."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SMALL = ["--set", "run.shape=\"small\"", "--set", "population.size=2", "--set", "population.offspring=2",
         "--set", "evaluation.seeds=[0]", "--set", "evaluation.heldout_seeds=1", "--set", "evaluation.workers=1",
         "--no-progress", "--gens", "1"]


def _run(tmp_path: Path, *flags: str) -> str:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-m", "accelopt_evo", "run", "--out", str(tmp_path), *flags, *SMALL],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout + proc.stderr


@pytest.mark.slow
def test_trn2_run_starts_from_current_baselines_and_says_uncalibrated(tmp_path):
    out = _run(tmp_path, "--target", "trn2", "--problem", "silu", "--problem", "adamw")
    assert "baselines: silu nki, adamw nki" in out
    best = [line for line in out.splitlines() if line.startswith("best ")]
    assert len(best) == 2 and all("simulated estimate for trn2, uncalibrated" in line for line in best)
    (report,) = tmp_path.glob("*/report.md")
    assert "simulated estimate for trn2, uncalibrated" in report.read_text()


@pytest.mark.slow
def test_trn1_run_is_unchanged(tmp_path):
    out = _run(tmp_path, "--target", "trn1", "--problem", "silu")
    assert "baselines: silu legacy" in out and "uncalibrated" not in out
