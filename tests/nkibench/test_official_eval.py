"""Every official NKIBench kernel passes through the path users take: `python -m accelopt_evo
eval KERNEL --suite-dir ../shared/nkibench --problem NAME` at the paper's shape, on one seed
drawn from the problem's first input family (scalar arguments such as eps included). Held-out
seeds take the same path (tests/engine/run/test_heldout.py, at small shapes); one seed keeps the 14
paper-shape evaluations, the heaviest full-data runs of the suite, within CI's time."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from nkibench.official import read_summary

REPO = Path(__file__).resolve().parents[2]
NKIBENCH_DIR = REPO.parent / "shared" / "nkibench"


def _cases() -> list[tuple[str, str]]:
    if not (NKIBENCH_DIR / "summary.json").is_file():
        return []
    return [(name, str(cases[0].kernel)) for name, cases in read_summary(NKIBENCH_DIR).items()]


@pytest.mark.slow
@pytest.mark.parametrize("name,kernel", _cases(), ids=[name for name, _ in _cases()])
def test_official_kernel_passes_eval(nkibench_dir, name, kernel):
    proc = subprocess.run(
        [sys.executable, "-m", "accelopt_evo", "eval", kernel, "--suite-dir", str(nkibench_dir), "--problem", name,
         "--backend", "simulator", "--json", "--set", "evaluation.seeds=[0]", "--set", "evaluation.heldout_seeds=0",
         "--set", "evaluation.workers=1"],
        cwd=REPO, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["status"] == "ok", result["error"]
    assert result["speedup"] == pytest.approx(1.0) and result["latency_ms"] > 0
