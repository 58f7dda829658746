"""A run killed with SIGKILL mid-generation resumes cleanly from its last checkpoint and ends
where an uninterrupted run ends (the real CLI, evaluator and simulator; silu at its tiny shape)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

GENS = 5
FLAGS = ["--no-progress", "--set", "run.shape=tiny", "--set", "population.size=4", "--set", "population.offspring=4",
         "--set", "evaluation.seeds=[0, 1]", "--set", "evaluation.heldout_seeds=1", "--set", "run.report=false"]


def cli(*args: str, cwd: Path, **kwargs) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "accelopt_evo", *args], cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True, **kwargs)


def cache_entries(folder: Path) -> int:
    cache = folder / "cache" / "evaluations"
    return sum(1 for p in cache.rglob("*") if p.is_file()) if cache.exists() else 0


def outcome(folder: Path) -> dict:
    ck = json.loads((folder / "checkpoints" / f"gen-{GENS:04d}.json").read_text())
    return {"population": [m["id"] for m in ck["population"]["silu"]],
            "hall_of_fame": [m["id"] for m in ck["hall_of_fame"]["silu"]],
            "logbook": [{k: v for k, v in e.items() if k != "seconds"} for e in ck["logbook"]["silu"]]}


def test_sigkill_mid_generation_then_resume(tmp_path):
    straight = cli("run", "--gens", str(GENS), "--run-id", "straight", *FLAGS, cwd=tmp_path)
    assert straight.wait(timeout=600) == 0, straight.stdout.read()

    victim = cli("run", "--gens", str(GENS), "--run-id", "killed", *FLAGS, cwd=tmp_path)
    folder = tmp_path / "runs" / "killed"
    deadline = time.monotonic() + 300
    cached_at_gen1 = None
    # wait until generation 1 is checkpointed and a kernel of generation 2 has been evaluated
    # (its result reached the evaluation cache) while generation 2 is not checkpointed yet
    while time.monotonic() < deadline:
        if cached_at_gen1 is None and (folder / "checkpoints" / "gen-0001.json").exists():
            cached_at_gen1 = cache_entries(folder)
        if cached_at_gen1 is not None and cache_entries(folder) > cached_at_gen1:
            break
        assert victim.poll() is None, "the run ended before it could be killed"
        time.sleep(0.01)
    os.killpg(victim.pid, signal.SIGKILL)
    victim.wait(timeout=30)
    if (folder / "checkpoints" / "gen-0002.json").exists():
        pytest.fail("the kill came too late to interrupt generation 2")
    assert not (folder / "checkpoints" / f"gen-{GENS:04d}.json").exists()
    # nothing half-written: every checkpoint and the memory parse; only a log's last line may be torn
    for path in (folder / "checkpoints").iterdir():
        assert not path.name.endswith(".tmp"), path
        json.loads(path.read_text())

    resumed = cli("resume", str(folder), cwd=tmp_path)
    out, _ = resumed.communicate(timeout=600)
    assert resumed.returncode == 0, out
    assert "resuming" in out
    assert outcome(folder) == outcome(tmp_path / "runs" / "straight")
    # every evaluation of the interrupted generation is logged once
    gens = [json.loads(line)["generation"] for line in (folder / "evaluations.jsonl").read_text().splitlines()]
    straight_gens = [json.loads(line)["generation"]
                     for line in (tmp_path / "runs" / "straight" / "evaluations.jsonl").read_text().splitlines()]
    assert sorted(gens) == sorted(straight_gens)
